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
// The "tasks" process, when the run has tasks (tasks.jsonl); the samples'
// processes follow it (or the requests' one when there are none, as before).
constexpr int kTasksPid = 2;

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
    if (r.task >= 0) {  // a model call of a task: the task's slice and its step's name it
      b += ",\"task\":";
      jsonout::append_int(b, r.task);
      b += ",\"step\":";
      jsonout::append_string(b, r.step);
    }
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
  CounterWriter(TraceWriter& w, PerfettoStats& stats, int first_pid)
      : w_(w), stats_(stats), first_pid_(first_pid) {}

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
    const int pid = first_pid_ + static_cast<int>(pids_.size());
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
  int first_pid_;
  std::unordered_map<std::string, int> pids_;
  std::unordered_map<std::string, TrackState> tracks_;
};

// ---------------------------------------------------------------- tasks
//
// A task is a slice on a thread of the "tasks" process, its steps slices
// nested in it. The JSON importer keeps one stack of open slices per thread:
// a slice that starts inside another and ends after it does not nest, and is
// drawn wrong. A task's steps overlap (fan-out runs in parallel), so they
// cannot all be children of the task's slice on one thread. Each task gets
// as many threads as it has steps running at once, one after the other
// (tids in a row, so they sort together): the first holds the task's slice
// and, nested in it, its critical path (a chain: each step starts once the
// one before it ended) with whatever else fits between; each other step
// goes on the lowest of the task's threads free over its whole time.
// Async events ("b"/"e") were the other way: Perfetto puts async slices of
// one id on a track of their own, so parallel steps would still need an id
// each, and their tracks would sit apart from the task's thread, where the
// steps are seen in their task.

// Where a task's steps are drawn: the thread (0 = the task's own) of each
// step that ran (t_start >= 0; the others get UINT32_MAX), which are on its
// critical path, and how many threads the task needs.
struct StepLayout {
  std::vector<std::uint32_t> thread;
  std::vector<char> critical;
  std::uint32_t depth = 1;
};

StepLayout lay_out_steps(const TaskRecord& t) {
  StepLayout out;
  out.thread.assign(t.steps.size(), UINT32_MAX);
  out.critical.assign(t.steps.size(), 0);
  std::vector<std::uint32_t> order;
  if (t.critical_path) {
    std::unordered_map<std::string_view, std::uint32_t> index;  // step ids are unique (the reader checks)
    for (std::uint32_t i = 0; i < t.steps.size(); ++i) index.emplace(t.steps[i].id, i);
    for (const auto& id : t.critical_path->steps) {
      const auto it = index.find(id);
      if (it == index.end() || out.critical[it->second]) continue;
      out.critical[it->second] = 1;
      if (t.steps[it->second].t_start >= 0) order.push_back(it->second);
    }
  }
  const std::size_t first_other = order.size();
  for (std::uint32_t i = 0; i < t.steps.size(); ++i)
    if (t.steps[i].t_start >= 0 && !out.critical[i]) order.push_back(i);
  std::stable_sort(order.begin() + static_cast<std::ptrdiff_t>(first_other), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return t.steps[a].t_start < t.steps[b].t_start; });
  // Each thread's steps sorted by (start, end); as none of them overlap,
  // their ends are sorted too.
  std::vector<std::vector<Extent>> threads;
  const auto fits = [](const std::vector<Extent>& on, const Extent& e) {
    const auto after = std::lower_bound(on.begin(), on.end(), e.end,
                                        [](const Extent& x, Nanos t_end) { return x.start < t_end; });
    return after == on.begin() || std::prev(after)->end <= e.start;
  };
  for (const std::uint32_t i : order) {
    const Extent e{t.steps[i].t_start, t.steps[i].t_end};
    std::uint32_t l = 0;
    while (l < threads.size() && !fits(threads[l], e)) ++l;
    if (l == threads.size()) threads.emplace_back();
    auto& on = threads[l];
    on.insert(std::upper_bound(on.begin(), on.end(), e,
                               [](const Extent& a, const Extent& b) {
                                 return a.start != b.start ? a.start < b.start : a.end < b.end;
                               }),
              e);
    out.thread[i] = l;
  }
  out.depth = std::max<std::uint32_t>(1, static_cast<std::uint32_t>(threads.size()));
  return out;
}

void append_string_array(std::string& b, const std::vector<std::string>& v) {
  b += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) b += ',';
    jsonout::append_string(b, v[i]);
  }
  b += ']';
}

void write_task(TraceWriter& w, PerfettoStats& stats, const TaskRecord& t, std::int64_t tid,
                const StepLayout& layout) {
  {
    std::string& b = w.open('X');
    b += ",\"cat\":\"task\",\"name\":";
    jsonout::append_string(b,
                           t.task_class.empty() ? std::string_view("task") : std::string_view(t.task_class));
    b += ",\"pid\":";
    jsonout::append_int(b, kTasksPid);
    b += ",\"tid\":";
    jsonout::append_int(b, tid);
    b += ",\"ts\":";
    w.ts(b, t.t_start);
    b += ",\"dur\":";
    append_micros(b, t.t_end - t.t_start);
    if (t.outcome != "ok") b += ",\"cname\":\"terrible\"";
    b += ",\"args\":{\"id\":";
    jsonout::append_uint(b, t.id);
    b += ",\"outcome\":";
    jsonout::append_string(b, t.outcome);
    const std::pair<const char*, const std::string*> strings[] = {{"class", &t.task_class},
                                                                  {"tenant", &t.tenant},
                                                                  {"mode", &t.mode},
                                                                  {"failure", &t.failure},
                                                                  {"failed_step", &t.failed_step}};
    for (const auto& [k, v] : strings) {
      if (v->empty()) continue;
      b += ",\"";
      b += k;
      b += "\":";
      jsonout::append_string(b, *v);
    }
    if (t.warmup) b += ",\"warmup\":true";
    b += ",\"steps\":";
    jsonout::append_uint(b, t.steps.size());
    std::vector<std::string> skipped;
    for (const auto& s : t.steps)
      if (s.t_start < 0) skipped.push_back(s.id);
    if (!skipped.empty()) {
      b += ",\"not_run\":";
      append_string_array(b, skipped);
    }
    if (t.critical_path) {
      const TaskCriticalPath& c = *t.critical_path;
      b += ",\"critical_path\":{\"steps\":";
      append_string_array(b, c.steps);
      const std::pair<const char*, double> parts[] = {{"total_ms", c.total_ms},
                                                      {"model_ms", c.model_ms},
                                                      {"tool_ms", c.tool_ms},
                                                      {"client_ms", c.client_ms},
                                                      {"queue_ms", c.queue_ms}};
      for (const auto& [k, v] : parts) {
        if (v < 0 || !std::isfinite(v)) continue;
        b += ",\"";
        b += k;
        b += "\":";
        append_double(b, v);
      }
      b += '}';
    }
    b += '}';
    w.close_event(b);
    ++stats.slices;
    ++stats.tasks;
  }
  for (std::size_t i = 0; i < t.steps.size(); ++i) {
    const TaskStepRecord& s = t.steps[i];
    if (layout.thread[i] == UINT32_MAX) continue;  // never ran
    std::string& b = w.open('X');
    b += ",\"cat\":";
    jsonout::append_string(b, s.kind);
    b += ",\"name\":";
    jsonout::append_string(b, s.id);
    b += ",\"pid\":";
    jsonout::append_int(b, kTasksPid);
    b += ",\"tid\":";
    jsonout::append_int(b, tid + layout.thread[i]);
    b += ",\"ts\":";
    w.ts(b, s.t_start);
    b += ",\"dur\":";
    append_micros(b, s.t_end - s.t_start);
    if (s.outcome == "failed") b += ",\"cname\":\"terrible\"";
    b += ",\"args\":{\"task\":";
    jsonout::append_uint(b, t.id);
    b += ",\"id\":";
    jsonout::append_string(b, s.id);
    b += ",\"kind\":";
    jsonout::append_string(b, s.kind);
    if (!s.name.empty()) {
      b += ",\"name\":";
      jsonout::append_string(b, s.name);
    }
    if (!s.outcome.empty()) {
      b += ",\"outcome\":";
      jsonout::append_string(b, s.outcome);
    }
    b += ",\"attempts\":";
    jsonout::append_uint(b, s.attempts);
    if (!s.failure.empty()) {
      b += ",\"failure\":";
      jsonout::append_string(b, s.failure);
    }
    if (!s.retried.empty()) {
      b += ",\"retried\":";
      append_string_array(b, s.retried);
    }
    if (!s.requests.empty()) {  // the request slices of process "requests" (args.id)
      b += ",\"requests\":[";
      for (std::size_t k = 0; k < s.requests.size(); ++k) {
        if (k) b += ',';
        jsonout::append_uint(b, s.requests[k]);
      }
      b += ']';
    }
    const std::pair<const char*, std::int64_t> numbers[] = {{"prompt_tokens", s.prompt_tokens},
                                                            {"cached_tokens", s.cached_tokens},
                                                            {"output_tokens", s.output_tokens}};
    for (const auto& [k, v] : numbers) {
      if (v < 0) continue;
      b += ",\"";
      b += k;
      b += "\":";
      jsonout::append_int(b, v);
    }
    if (!s.documents.empty()) {
      b += ",\"documents\":";
      append_string_array(b, s.documents);
    }
    if (s.t_ready >= 0 && s.t_ready <= s.t_start) {
      b += ",\"ready_to_start_us\":";  // waiting for a slot after the steps before it ended
      append_micros(b, s.t_start - s.t_ready);
    }
    if (layout.critical[i]) b += ",\"critical\":true";
    if (!s.detail.empty()) {
      b += ",\"detail\":";
      jsonout::append_string(b, utf8_prefix(s.detail, 200));
    }
    b += '}';
    w.close_event(b);
    ++stats.slices;
    ++stats.task_steps;
  }
}

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
  // Each task's extent and threads (its steps running at once), for the
  // origin and the task lanes: 20 bytes a task.
  std::vector<Extent> task_extents;
  std::vector<std::uint32_t> task_depths;
  if (auto tasks = source.open_tasks(o.bad_lines)) {
    stats.tasks_found = true;
    TaskRecord t;
    while (tasks->next(t)) {
      Extent e{t.t_start, t.t_end};
      if ((t.warmup && !o.include_warmup) || t.t_end < 0) e = {};
      task_extents.push_back(e);
      task_depths.push_back(e.start >= 0 ? lay_out_steps(t).depth : 0);
      if (e.start >= 0 && (origin < 0 || e.start < origin)) origin = e.start;
    }
    stats.tasks_read = tasks->stats();
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

  // The tasks: lanes as for requests (a lane reused once its task ended, or
  // a lane per task), each lane as many threads as the most steps running at
  // once in a task on it, their tids in a row.
  const bool any_task =
      std::any_of(task_extents.begin(), task_extents.end(), [](const Extent& e) { return e.start >= 0; });
  if (any_task) {
    w.metadata("process_name", kTasksPid, 0, "tasks");
    w.metadata("process_sort_index", kTasksPid, 0, "", 1);
    std::vector<std::uint32_t> task_lane;
    std::uint32_t lanes = 0;
    if (o.lanes) {
      task_lane = assign_lanes(task_extents, lanes);
    } else {
      task_lane.assign(task_extents.size(), 0);
      for (std::size_t k = 0; k < task_extents.size(); ++k)
        if (task_extents[k].start >= 0) task_lane[k] = lanes++;
    }
    std::vector<std::uint32_t> depth(lanes, 1);
    for (std::size_t k = 0; k < task_extents.size(); ++k) {
      if (task_extents[k].start < 0) continue;
      depth[task_lane[k]] = std::max(depth[task_lane[k]], task_depths[k]);
    }
    std::vector<std::int64_t> first_tid(lanes, 1);
    for (std::uint32_t l = 1; l < lanes; ++l) first_tid[l] = first_tid[l - 1] + depth[l - 1];

    auto reader = source.open_tasks(o.bad_lines);
    TaskRecord t;
    std::vector<char> named(lanes, 0);
    for (std::size_t k = 0; reader && reader->next(t); ++k) {
      if (k >= task_extents.size()) break;  // the file grew since pass 1
      if (t.warmup && !o.include_warmup) {
        ++stats.warmup_tasks_left_out;
        continue;
      }
      if (task_extents[k].start < 0) {
        ++stats.tasks_without_times;
        continue;
      }
      const std::uint32_t l = task_lane[k];
      const StepLayout layout = lay_out_steps(t);
      if (!named[l]) {  // thread names: "lane 3", "lane 3 #2", ... (or "task ID", ...)
        named[l] = 1;
        const std::string base = o.lanes ? fmt::format("lane {}", l + 1) : fmt::format("task {}", t.id);
        for (std::uint32_t j = 0; j < depth[l]; ++j) {
          const std::int64_t tid = first_tid[l] + j;
          w.metadata("thread_name", kTasksPid, tid, j == 0 ? base : fmt::format("{} #{}", base, j + 1));
          w.metadata("thread_sort_index", kTasksPid, tid, "", tid);
        }
        stats.task_threads += depth[l];
      }
      write_task(w, stats, t, first_tid[l], layout);
    }
  }

  // The counter tracks.
  if (auto samples = source.open_samples(o.bad_lines)) {
    stats.samples_found = true;
    CounterWriter counters(w, stats, any_task ? kTasksPid + 1 : kRequestsPid + 1);
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
