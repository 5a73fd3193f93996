// The Chrome JSON Trace Event Format, as documented in "Trace Event Format"
// (Google, docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
// every event has "ph" (phase), "pid", "ts" (µs) and "name"; "X" (complete)
// events add "dur" and "tid"; "i" (instant) events add "s" (scope: "t" for
// the thread); "C" (counter) events carry their values in "args", one series
// per key (Perfetto names the track "NAME KEY"); "M" (metadata) events named
// process_name / thread_name / *_sort_index label and order the tracks.
#include "exporters/perfetto.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/json_out.h"
#include "observe/canonical.h"

namespace tokenscope::exporters {

using namespace rundir;   // the run directory's readers
using namespace observe;  // observations and the canonical series

namespace {

constexpr int kRequestsPid = 1;

// Where the lines go: a string (tests) or an OutputFile.
class LineSink {
 public:
  virtual ~LineSink() = default;
  virtual std::string& begin_line() = 0;
  virtual void end_line() = 0;
};

class StringSink final : public LineSink {
 public:
  explicit StringSink(std::string& out) : out_(out) {}
  std::string& begin_line() override { return out_; }
  void end_line() override { out_ += '\n'; }

 private:
  std::string& out_;
};

class FileSink final : public LineSink {
 public:
  explicit FileSink(OutputFile& f) : file_(f) {}
  std::string& begin_line() override { return file_.begin_line(); }
  void end_line() override { file_.end_line(); }

 private:
  OutputFile& file_;
};

struct TrackState {
  Nanos prev_t = -1;
  double prev_value = 0;  // a counter's value, a histogram's _count
  double prev_sum = 0;    // a histogram's _sum
  bool emitted = false;   // counted in PerfettoStats::counter_tracks
};

class TraceWriter {
 public:
  TraceWriter(LineSink& sink, PerfettoStats& stats) : sink_(sink), stats_(stats) {}

  // Opens an event line: `,{"ph":"X"` (no comma before the first event).
  std::string& open(char ph) {
    std::string& b = sink_.begin_line();
    if (events_++ > 0) b += ',';
    b += "{\"ph\":\"";
    b += ph;
    b += '"';
    return b;
  }
  void close_event(std::string& b) {
    b += '}';
    sink_.end_line();
    ++stats_.events;
  }

  void header(Nanos origin) {
    std::string& b = sink_.begin_line();
    b += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"tool\":\"tokenscope\",\"clock\":\"monotonic\","
         "\"origin_ns\":";
    jsonout::append_int(b, origin);
    b += "},\"traceEvents\":[";
    sink_.end_line();
  }
  void footer() {
    sink_.begin_line() += "]}";
    sink_.end_line();
  }

  void metadata(const char* name, int pid, std::int64_t tid, std::string_view text,
                std::int64_t sort_index = -1) {
    std::string& b = open('M');
    b += ",\"name\":\"";
    b += name;
    b += "\",\"pid\":";
    jsonout::append_int(b, pid);
    b += ",\"tid\":";
    jsonout::append_int(b, tid);
    b += ",\"ts\":0,\"args\":{";
    if (sort_index >= 0) {
      b += "\"sort_index\":";
      jsonout::append_int(b, sort_index);
    } else {
      b += "\"name\":";
      jsonout::append_string(b, text);
    }
    b += '}';
    close_event(b);
    ++stats_.metadata_events;
  }

  void ts(std::string& b, Nanos t) { append_micros(b, t - origin_); }
  void set_origin(Nanos o) { origin_ = o; }

 private:
  LineSink& sink_;
  PerfettoStats& stats_;
  std::uint64_t events_ = 0;
  Nanos origin_ = 0;
};

struct Extent {
  Nanos start = -1;
  Nanos end = -1;
};

// Assigns each request a lane: in order of start, the lowest-numbered lane
// whose previous request ended at or before this one's start, else a new
// one. Lanes then number the most requests in flight at once (the greedy
// interval partition is optimal), and low lanes fill first, so the busiest
// tracks sit at the top.
std::vector<std::uint32_t> assign_lanes(const std::vector<Extent>& extents, std::uint32_t& lanes) {
  std::vector<std::uint32_t> order;
  order.reserve(extents.size());
  for (std::uint32_t i = 0; i < extents.size(); ++i)
    if (extents[i].start >= 0) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return extents[a].start < extents[b].start; });
  std::vector<std::uint32_t> lane(extents.size(), 0);
  using Busy = std::pair<Nanos, std::uint32_t>;  // (end, lane)
  std::priority_queue<Busy, std::vector<Busy>, std::greater<>> busy;
  std::priority_queue<std::uint32_t, std::vector<std::uint32_t>, std::greater<>> free;
  lanes = 0;
  for (const std::uint32_t i : order) {
    while (!busy.empty() && busy.top().first <= extents[i].start) {
      free.push(busy.top().second);
      busy.pop();
    }
    std::uint32_t l;
    if (free.empty()) {
      l = lanes++;
    } else {
      l = free.top();
      free.pop();
    }
    lane[i] = l;
    busy.emplace(extents[i].end, l);
  }
  return lane;
}

void slice(TraceWriter& w, PerfettoStats& stats, std::int64_t tid, std::string_view name, Nanos from,
           Nanos to) {
  if (from < 0 || to < from) return;
  std::string& b = w.open('X');
  b += ",\"cat\":\"request\",\"name\":\"";
  b += name;
  b += "\",\"pid\":1,\"tid\":";
  jsonout::append_int(b, tid);
  b += ",\"ts\":";
  w.ts(b, from);
  b += ",\"dur\":";
  append_micros(b, to - from);
  w.close_event(b);
  ++stats.slices;
}

void instant(TraceWriter& w, PerfettoStats& stats, std::int64_t tid, std::string_view name, Nanos t,
             std::uint32_t tokens) {
  std::string& b = w.open('i');
  b += ",\"s\":\"t\",\"cat\":\"request\",\"name\":\"";
  b += name;
  b += "\",\"pid\":1,\"tid\":";
  jsonout::append_int(b, tid);
  b += ",\"ts\":";
  w.ts(b, t);
  if (tokens != 1) {
    b += ",\"args\":{\"tokens\":";
    jsonout::append_uint(b, tokens);
    b += '}';
  }
  w.close_event(b);
  ++stats.instants;
}

void write_request(TraceWriter& w, PerfettoStats& stats, const RequestRecord& r, std::int64_t tid,
                   const PerfettoOptions& o) {
  const Nanos start = r.start(), end = r.end();
  // The whole request, its record's numbers as args.
  {
    std::string& b = w.open('X');
    b += ",\"cat\":\"request\",\"name\":\"request ";
    jsonout::append_uint(b, r.id);
    b += "\",\"pid\":1,\"tid\":";
    jsonout::append_int(b, tid);
    b += ",\"ts\":";
    w.ts(b, start);
    b += ",\"dur\":";
    append_micros(b, end - start);
    // chrome://tracing's reserved colour for failures (Perfetto ignores it).
    if (r.outcome != Outcome::kOk) b += ",\"cname\":\"terrible\"";
    b += ",\"args\":{\"id\":";
    jsonout::append_uint(b, r.id);
    b += ",\"outcome\":\"";
    b += outcome_name(r.outcome);
    b += '"';
    if (!r.tenant.empty()) {
      b += ",\"tenant\":";
      jsonout::append_string(b, r.tenant);
    }
    if (!r.task_class.empty()) {
      b += ",\"class\":";
      jsonout::append_string(b, r.task_class);
    }
    if (r.session >= 0) {
      b += ",\"session\":";
      jsonout::append_int(b, r.session);
      b += ",\"turn\":";
      jsonout::append_uint(b, r.turn);
    }
    if (r.warmup) b += ",\"warmup\":true";
    const std::pair<const char*, std::int64_t> numbers[] = {{"prompt_tokens", r.prompt_tokens},
                                                            {"output_tokens", r.output_tokens},
                                                            {"cached_tokens", r.cached_tokens},
                                                            {"http_status", r.http_status}};
    for (const auto& [k, v] : numbers) {
      if (v < 0) continue;
      b += ",\"";
      b += k;
      b += "\":";
      jsonout::append_int(b, v);
    }
    b += ",\"events\":";
    jsonout::append_uint(b, r.event_times.size());
    if (r.events_dropped > 0) {
      b += ",\"events_dropped\":";
      jsonout::append_uint(b, r.events_dropped);
    }
    if (!r.detail.empty()) {
      b += ",\"detail\":";
      jsonout::append_string(b, utf8_prefix(r.detail, 200));
    }
    b += '}';
    w.close_event(b);
    ++stats.slices;
  }
  const Nanos first = r.first_token(), last = r.last_token();
  if (r.t_sched >= 0 && r.t_send >= 0) slice(w, stats, tid, "queued", r.t_sched, r.t_send);
  if (r.t_send >= 0)
    slice(w, stats, tid, "waiting", r.t_send, first >= 0 ? first : (r.t_close >= 0 ? r.t_close : end));
  if (first >= 0 && last > first) slice(w, stats, tid, "decoding", first, last);
  if (r.t_headers >= 0) instant(w, stats, tid, "headers", r.t_headers, 1);
  if (o.token_marks) {
    for (std::size_t i = 0; i < r.event_times.size(); ++i) {
      instant(w, stats, tid, "token", r.event_times[i], r.event_tokens[i]);
      ++stats.token_marks;
    }
  }
}

std::string display_name(std::string_view name, const Labels& labels) {
  std::string s(name);
  bool first = true;
  for (const auto& l : labels) {
    if (l.name == "le") continue;
    s += first ? '{' : ',';
    first = false;
    s += l.name;
    s += "=\"";
    s += l.value;
    s += '"';
  }
  if (!first) s += '}';
  return s;
}

class CounterWriter {
 public:
  CounterWriter(TraceWriter& w, PerfettoStats& stats) : w_(w), stats_(stats) {}

  void observation(const Observation& o) {
    const int pid = pid_of(o.source);
    for (const auto& s : o.canonical) {
      const CanonicalName c = resolve_canonical(s.name);
      const std::string_view unit = c.definition ? c.definition->unit : std::string_view("value");
      const SeriesKind kind = c.definition ? c.definition->kind : SeriesKind::kGauge;
      if (kind == SeriesKind::kGauge) {
        emit(pid, display_name(s.name, s.labels), unit, o.t_ns, s.value);
      } else if (kind == SeriesKind::kCounter) {
        rate(pid, display_name(s.name, s.labels), std::string(unit) + "/s", o.t_ns, s.value);
      } else if (c.member == CanonicalName::Member::kCount) {
        rate(pid, display_name(s.name, s.labels), "/s", o.t_ns, s.value);
        // The family's mean over the interval, when its _sum came too.
        for (const auto& t : o.canonical)
          if (t.labels == s.labels && t.name.size() == c.family.size() + 4 && t.name.starts_with(c.family) &&
              t.name.ends_with("_sum"))
            mean(pid, display_name(c.family, s.labels), "mean " + std::string(unit), o.t_ns, t.value,
                 s.value);
      }
    }
  }

 private:
  int pid_of(const std::string& source) {
    const auto it = pids_.find(source);
    if (it != pids_.end()) return it->second;
    const int pid = kRequestsPid + 1 + static_cast<int>(pids_.size());
    pids_.emplace(source, pid);
    w_.metadata("process_name", pid, 0, source);
    w_.metadata("process_sort_index", pid, 0, "", pid);
    return pid;
  }

  TrackState& track(int pid, const std::string& name, std::string_view key) {
    return tracks_[fmt::format("{}\x1f{}\x1f{}", pid, name, key)];
  }

  void emit(int pid, const std::string& name, std::string_view key, Nanos t, double v) {
    if (!std::isfinite(v)) {
      ++stats_.non_finite_values;
      return;
    }
    TrackState& st = track(pid, name, key);
    if (!st.emitted) {
      st.emitted = true;
      ++stats_.counter_tracks;
    }
    std::string& b = w_.open('C');
    b += ",\"name\":";
    jsonout::append_string(b, name);
    b += ",\"pid\":";
    jsonout::append_int(b, pid);
    b += ",\"ts\":";
    w_.ts(b, t);
    b += ",\"args\":{";
    jsonout::append_string(b, key);
    b += ':';
    append_double(b, v);
    b += "}";
    w_.close_event(b);
    ++stats_.counter_events;
  }

  // A cumulative series as its rate over [previous observation, t], drawn
  // from the previous observation (a counter track holds each value until
  // the next). A decrease is a reset (the server restarted): the new value
  // is what was counted since.
  void rate(int pid, const std::string& name, const std::string& key, Nanos t, double v) {
    TrackState& st = track(pid, name, key);
    if (!std::isfinite(v)) {
      ++stats_.non_finite_values;
      return;
    }
    if (st.prev_t >= 0 && t > st.prev_t) {
      const double delta = v >= st.prev_value ? v - st.prev_value : v;
      emit(pid, name, key, st.prev_t, delta / nanos_to_s(t - st.prev_t));
    }
    if (st.prev_t < 0 || t > st.prev_t) {
      st.prev_t = t;
      st.prev_value = v;
    }
  }

  // A histogram's mean over [previous observation, t]: Δsum / Δcount; an
  // interval without observations has none.
  void mean(int pid, const std::string& name, const std::string& key, Nanos t, double sum, double count) {
    TrackState& st = track(pid, name, key);
    if (!std::isfinite(sum) || !std::isfinite(count)) {
      ++stats_.non_finite_values;
      return;
    }
    if (st.prev_t >= 0 && t > st.prev_t) {
      const bool reset = count < st.prev_value;
      const double dcount = reset ? count : count - st.prev_value;
      const double dsum = reset ? sum : sum - st.prev_sum;
      if (dcount > 0) emit(pid, name, key, st.prev_t, dsum / dcount);
    }
    if (st.prev_t < 0 || t > st.prev_t) {
      st.prev_t = t;
      st.prev_value = count;
      st.prev_sum = sum;
    }
  }

  TraceWriter& w_;
  PerfettoStats& stats_;
  std::unordered_map<std::string, int> pids_;
  std::unordered_map<std::string, TrackState> tracks_;
};

PerfettoStats write_trace(const RunSource& source, LineSink& sink, const PerfettoOptions& o) {
  PerfettoStats stats;
  // Pass 1: each request's extent (for the origin and the lanes), and the
  // earliest sample.
  std::vector<Extent> extents;
  Nanos origin = -1;
  {
    auto reader = source.open_requests(o.bad_lines);
    RequestRecord r;
    while (reader.next(r)) {
      Extent e{r.start(), r.end()};
      if (r.warmup && !o.include_warmup) e = {};
      extents.push_back(e);
      if (e.start >= 0 && (origin < 0 || e.start < origin)) origin = e.start;
    }
  }
  if (auto samples = source.open_samples(o.bad_lines)) {
    Observation obs;
    while (samples->next(obs))
      if (origin < 0 || obs.t_ns < origin) origin = obs.t_ns;
  }
  stats.origin_ns = std::max<Nanos>(origin, 0);

  TraceWriter w(sink, stats);
  w.set_origin(stats.origin_ns);
  w.header(stats.origin_ns);
  w.metadata("process_name", kRequestsPid, 0, "requests");
  w.metadata("process_sort_index", kRequestsPid, 0, "", 0);

  std::vector<std::uint32_t> lanes;
  if (o.lanes) {
    lanes = assign_lanes(extents, stats.lanes);
    for (std::uint32_t l = 0; l < stats.lanes; ++l) {
      w.metadata("thread_name", kRequestsPid, l + 1, fmt::format("lane {}", l + 1));
      w.metadata("thread_sort_index", kRequestsPid, l + 1, "", l + 1);
    }
  }

  // Pass 2: the requests, in the file's order (viewers sort by time).
  {
    auto reader = source.open_requests(o.bad_lines);
    RequestRecord r;
    std::size_t k = 0;
    for (; reader.next(r); ++k) {
      if (k >= extents.size()) break;  // the file grew since pass 1: those are not in the lanes
      if (r.warmup && !o.include_warmup) {
        ++stats.warmup_left_out;
        continue;
      }
      if (extents[k].start < 0) {
        ++stats.requests_without_times;
        continue;
      }
      std::int64_t tid;
      if (o.lanes) {
        tid = static_cast<std::int64_t>(lanes[k]) + 1;
      } else {
        tid = static_cast<std::int64_t>(k) + 1;
        ++stats.lanes;
        w.metadata("thread_name", kRequestsPid, tid, fmt::format("request {}", r.id));
      }
      write_request(w, stats, r, tid, o);
      ++stats.requests;
    }
    stats.requests_read = reader.stats();
  }

  // The counter tracks.
  if (auto samples = source.open_samples(o.bad_lines)) {
    stats.samples_found = true;
    CounterWriter counters(w, stats);
    Observation obs;
    while (samples->next(obs)) {
      ++stats.observations;
      counters.observation(obs);
    }
    stats.samples_read = samples->stats();
    stats.observations_without_series = samples->without_series();
  }
  w.footer();
  return stats;
}

}  // namespace

PerfettoStats write_perfetto(const RunSource& source, std::string& out, const PerfettoOptions& options) {
  StringSink sink(out);
  const std::size_t before = out.size();
  PerfettoStats stats = write_trace(source, sink, options);
  stats.bytes = out.size() - before;
  return stats;
}

PerfettoStats export_perfetto(const std::filesystem::path& run_dir, const std::filesystem::path& out_path,
                              const PerfettoOptions& options) {
  RunSource source;
  source.dir = run_dir;
  OutputFile file(out_path);
  FileSink sink(file);
  PerfettoStats stats = write_trace(source, sink, options);
  file.commit();
  stats.bytes = file.bytes();
  return stats;
}

}  // namespace tokenscope::exporters
