#include "report/run_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <unordered_map>

#include <simdjson.h>

#include "core/error.h"
#include "core/summary.h"
#include "core/text_reader.h"
#include "observe/export_run.h"
#include "report/downsample.h"

namespace tokenscope::report {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// run.json is written by tokenscope and small; a larger one is not a run.json.
constexpr std::uintmax_t kMaxRunJsonBytes = 64u << 20;

nlohmann::json read_json_file(const fs::path& file) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) throw UsageError(fmt::format("{}: cannot read: {}", file.string(), ec.message()));
  if (size > kMaxRunJsonBytes)
    throw InputError(file.string(), 0, "",
                     fmt::format("{} bytes: too large for a file tokenscope wrote", size));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw UsageError(fmt::format("{}: cannot open", file.string()));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw InputError(file.string(), 0, "", "not a JSON object (is this a tokenscope run directory?)");
  return j;
}

std::uint16_t name_index(std::vector<std::string>& names,
                         std::unordered_map<std::string, std::uint16_t>& index, const std::string& name) {
  const auto it = index.find(name);
  if (it != index.end()) return it->second;
  const auto i = static_cast<std::uint16_t>(std::min<std::size_t>(names.size(), UINT16_MAX));
  if (names.size() < UINT16_MAX) {
    names.push_back(name);
    index.emplace(name, i);
  }
  return i;
}

// The record SummaryBuilder needs, from what requests.jsonl holds.
RequestRecord to_record(const observe::ExportRequest& e) {
  RequestRecord r;
  r.id = e.id;
  r.tenant = e.tenant;
  r.task_class = e.task_class;
  r.warmup = e.warmup;
  r.t_sched = e.t_sched;
  r.t_dispatch = e.t_dispatch;
  r.t_send = e.t_send;
  r.t_headers = e.t_headers;
  r.t_first_token = e.first_token();
  r.t_last_token = e.last_token();
  r.t_close = e.t_close;
  r.event_times = e.event_times;
  r.event_tokens = e.event_tokens;
  r.prompt_tokens = e.prompt_tokens;
  r.output_tokens = e.output_tokens;
  r.output_tokens_planned = e.output_tokens_planned;
  r.cached_tokens = e.cached_tokens;
  r.http_status = static_cast<int>(e.http_status);
  r.outcome = e.outcome;
  return r;
}

// A reader's message about a file of the run, with the run directory left
// out of the file's path ("requests.jsonl:4: ..."): the report names the run.
std::string within_run(const fs::path& dir, const std::string& message) {
  const std::string prefix = (dir / "").string();
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

std::string labels_text(const observe::Labels& labels) {
  std::string s;
  for (const auto& l : labels) {
    if (!s.empty()) s += ',';
    s += l.name;
    s += '=';
    s += l.value;
  }
  return s;
}

class SeriesSink {
 public:
  explicit SeriesSink(std::vector<SampledSeries>& out) : out_(out) {}
  void add(const observe::Observation& o, const char* kind, const std::vector<observe::Sample>& samples,
           bool skip_histogram_members) {
    for (const auto& s : samples) {
      if (!std::isfinite(s.value)) continue;
      if (skip_histogram_members &&
          observe::resolve_canonical(s.name).member != observe::CanonicalName::Member::kSeries)
        continue;
      key_.assign(o.source);
      key_ += '\0';
      key_ += kind;
      key_ += '\0';
      key_ += s.name;
      key_ += '\0';
      const std::string labels = labels_text(s.labels);
      key_ += labels;
      auto it = index_.find(key_);
      if (it == index_.end()) {
        it = index_.emplace(key_, out_.size()).first;
        out_.push_back(SampledSeries{o.source, kind, s.name, labels, {}, {}});
      }
      auto& series = out_[it->second];
      series.t.push_back(o.t_ns);
      series.v.push_back(s.value);
    }
  }

 private:
  std::vector<SampledSeries>& out_;
  std::unordered_map<std::string, std::size_t> index_;
  std::string key_;
};

// The t_ns of the last whole line of steps.jsonl that parses (steps are
// written in time order): read from the file's tail, so that the reducer's
// range is known before the one pass over the file. nullopt when no line in
// the last 1 MiB parses.
std::optional<Nanos> last_step_time(const fs::path& file) {
  std::ifstream in(file, std::ios::binary | std::ios::ate);
  if (!in) return std::nullopt;
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - (1 << 20));
  in.seekg(from);
  std::string tail(static_cast<std::size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  tail.resize(static_cast<std::size_t>(in.gcount()));
  simdjson::dom::parser parser;
  std::size_t end = tail.size();
  while (end > 0) {
    const std::size_t nl = tail.rfind('\n', end - 1);
    const std::size_t begin = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && from > 0) break;  // the line may start before the tail
    const std::string_view line(tail.data() + begin, end - begin);
    simdjson::dom::element doc;
    std::int64_t t = 0;
    if (!line.empty() && parser.parse(line.data(), line.size()).get(doc) == simdjson::SUCCESS &&
        doc["t_ns"].get_int64().get(t) == simdjson::SUCCESS)
      return t;
    if (nl == std::string::npos) break;
    end = nl;
  }
  return std::nullopt;
}

// steps.jsonl, read once and reduced per pixel column as it is read.
void load_steps(const fs::path& file, Nanos origin_hint, std::size_t columns, StepsData& out,
                std::vector<std::string>& notes) {
  // Each step's quantities: the engine's own, and the running totals of
  // what happens per step (preemptions, tenant switches, swapped bytes).
  struct Field {
    const char* key;
    const char* name;
    bool cumulative;
  };
  static constexpr Field kFields[] = {
      {"seqs", "batch_seqs", false},
      {"running", "running", false},
      {"waiting", "waiting", false},
      {"kv_usage", "kv_usage", false},
      {"prefill_tokens", "prefill_tokens", false},
      {"decode_tokens", "decode_tokens", false},
      {"preemptions", "preemptions_total", true},
      {"tenant_switches", "tenant_switches_total", true},
      {"swap_out_bytes", "swap_out_bytes_total", true},
      {"swap_in_bytes", "swap_in_bytes_total", true},
      {"host_kv_blocks", "host_kv_blocks", false},
  };
  constexpr std::size_t kN = std::size(kFields);
  const auto last = last_step_time(file);
  TextReader reader = TextReader::open(file.string(), "steps file");
  simdjson::dom::parser parser;
  std::optional<std::vector<ColumnReducer>> reducers;
  double totals[kN] = {};
  std::uint64_t first_bad_line = 0;
  std::string first_bad;
  std::string_view line;
  while (reader.next_line(line)) {
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    simdjson::dom::element doc;
    std::int64_t t = 0;
    bool ok = reader.flaw() == TextReader::Flaw::kNone &&
              parser.parse(line.data(), line.size()).get(doc) == simdjson::SUCCESS &&
              doc["t_ns"].get_int64().get(t) == simdjson::SUCCESS;
    double values[kN];
    for (std::size_t i = 0; ok && i < kN; ++i) {
      const auto v = doc[kFields[i].key];
      double d = 0;
      if (v.error() == simdjson::NO_SUCH_FIELD) {
        values[i] = kNaN;  // an older or other writer: this quantity is not there
        continue;
      }
      if (v.get_double().get(d) != simdjson::SUCCESS) {
        std::int64_t n = 0;
        if (v.get_int64().get(n) != simdjson::SUCCESS) {
          ok = false;
          break;
        }
        d = static_cast<double>(n);
      }
      values[i] = kFields[i].cumulative ? (totals[i] += d) : d;
    }
    if (!ok) {
      if (out.lines_skipped++ == 0) {
        first_bad_line = reader.line_number();
        first_bad = reader.flaw() != TextReader::Flaw::kNone ? "too long or binary" : "not a step record";
      }
      continue;
    }
    const double t_s = nanos_to_s(t - origin_hint);
    if (!reducers) {
      out.first_t_s = t_s;
      const double end_s = last ? nanos_to_s(*last - origin_hint) : t_s;
      reducers.emplace();
      for (std::size_t i = 0; i < kN; ++i) reducers->emplace_back(t_s, std::max(t_s, end_s), columns);
    }
    out.last_t_s = t_s;
    for (std::size_t i = 0; i < kN; ++i) (*reducers)[i].add(t_s, values[i]);
    ++out.steps;
  }
  out.present = true;
  if (reducers)
    for (std::size_t i = 0; i < kN; ++i) {
      XY xy = (*reducers)[i].result();
      if (std::all_of(xy.y.begin(), xy.y.end(), [](double v) { return std::isnan(v); })) continue;
      out.series.push_back(StepSeries{kFields[i].name, std::move(xy.x), std::move(xy.y)});
    }
  if (out.lines_skipped > 0)
    notes.push_back(fmt::format("steps.jsonl: {} bad line{} skipped; the first: line {}: {}",
                                out.lines_skipped, out.lines_skipped == 1 ? "" : "s", first_bad_line,
                                first_bad));
}

// phases.json of the run directory (written by `check`): {"phases": [{"phase",
// "start_ns", "end_ns"}]}. A file that is not that is said in a note.
nlohmann::json load_phases(const fs::path& file, std::vector<std::string>& notes) {
  nlohmann::json out = nlohmann::json::array();
  std::ifstream in(file, std::ios::binary);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  const auto bad = [&](const std::string& why) {
    notes.push_back(fmt::format("phases.json: {}; no lifecycle phases shown", why));
    return nlohmann::json::array();
  };
  if (j.is_discarded() || !j.is_object() || !j.contains("phases") || !j["phases"].is_array())
    return bad("expected an object with a \"phases\" array");
  for (std::size_t i = 0; i < j["phases"].size(); ++i) {
    const auto& p = j["phases"][i];
    if (!p.is_object() || !p.contains("phase") || !p["phase"].is_string() || !p.contains("start_ns") ||
        !p["start_ns"].is_number_integer() || !p.contains("end_ns") || !p["end_ns"].is_number_integer() ||
        p["end_ns"].get<Nanos>() < p["start_ns"].get<Nanos>())
      return bad(
          fmt::format("phases[{}]: expected {{\"phase\": name, \"start_ns\": integer, \"end_ns\": "
                      "integer not before start_ns}}",
                      i));
    out.push_back({{"phase", p["phase"]}, {"start_ns", p["start_ns"]}, {"end_ns", p["end_ns"]}});
  }
  return out;
}

}  // namespace

bool SlowestRequests::wants(Nanos e2e, std::uint64_t id) const {
  if (n_ == 0) return false;
  if (heap_.size() < n_) return true;
  const SlowRequest& top = heap_.front();
  return e2e > top.e2e() || (e2e == top.e2e() && id < top.id);
}

namespace {
// The heap's order: the request that leaves first (fastest; among equals the
// higher id) on top.
bool leaves_later(const SlowRequest& a, const SlowRequest& b) {
  return a.e2e() > b.e2e() || (a.e2e() == b.e2e() && a.id < b.id);
}
}  // namespace

void SlowestRequests::add(SlowRequest r) {
  if (!wants(r.e2e(), r.id)) return;
  if (heap_.size() == n_) {
    std::pop_heap(heap_.begin(), heap_.end(), leaves_later);
    heap_.pop_back();
  }
  heap_.push_back(std::move(r));
  std::push_heap(heap_.begin(), heap_.end(), leaves_later);
}

void SlowestRequests::merge(SlowestRequests&& other) {
  for (auto& r : other.heap_) add(std::move(r));
  other.heap_.clear();
}

std::vector<SlowRequest> SlowestRequests::take() {
  std::vector<SlowRequest> out = std::move(heap_);
  heap_.clear();
  std::sort(out.begin(), out.end(), leaves_later);
  return out;
}

double RequestArrays::ttft_ms(std::size_t i) const {
  if (!counted(i) || t_first_token[i] < 0 || t_send[i] < 0) return kNaN;
  return nanos_to_ms(t_first_token[i] - t_send[i]);
}
double RequestArrays::ttft_sched_ms(std::size_t i) const {
  if (!counted(i) || t_first_token[i] < 0 || t_sched[i] < 0) return kNaN;
  return nanos_to_ms(t_first_token[i] - t_sched[i]);
}
double RequestArrays::e2e_ms(std::size_t i) const {
  if (!counted(i) || t_last_token[i] < 0 || t_send[i] < 0) return kNaN;
  return nanos_to_ms(t_last_token[i] - t_send[i]);
}
double RequestArrays::tpot_ms(std::size_t i) const {
  if (!counted(i) || output_tokens[i] < 2 || t_first_token[i] < 0 || t_last_token[i] < 0) return kNaN;
  return nanos_to_ms(t_last_token[i] - t_first_token[i]) / static_cast<double>(output_tokens[i] - 1);
}
double RequestArrays::send_lag_ms(std::size_t i) const {
  if (warmup[i] || t_send[i] < 0 || t_sched[i] < 0) return kNaN;
  return nanos_to_ms(t_send[i] - t_sched[i]);
}

RunData load_run(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UsageError(fmt::format("{}: not a run directory (no such directory)", dir.string()));
  const bool has_run_json = fs::exists(dir / "run.json", ec);
  const bool has_requests = fs::exists(dir / "requests.jsonl", ec);
  if (!has_run_json && !has_requests)
    throw UsageError(
        fmt::format("{}: not a run directory: it holds neither run.json nor requests.jsonl (bench and sim "
                    "--out write them)",
                    dir.string()));

  RunData run;
  run.dir = dir;
  run.name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  if (has_run_json) {
    run.run_json = read_json_file(dir / "run.json");
    const auto& j = run.run_json;
    if (j.contains("tool") && j["tool"].is_object() && j["tool"].contains("command") &&
        j["tool"]["command"].is_string())
      run.command = j["tool"]["command"].get<std::string>();
    run.partial = j.contains("partial") && j["partial"].is_boolean() && j["partial"].get<bool>();
    if (j.contains("summary") && j["summary"].is_object()) run.summary = j["summary"];
    if (run.partial)
      run.notes.push_back(
          "partial run: it was interrupted (Ctrl-C) or stopped early; what finished before is shown");
  } else {
    run.notes.push_back("no run.json: settings, environment and server counters are unknown");
  }

  // requests.jsonl, streamed. A bad line (a last line cut by a crash) is
  // skipped and counted, never fatal.
  std::optional<SummaryBuilder> builder;
  if (run.summary.is_null()) builder.emplace();
  if (has_requests) {
    observe::RequestsReader reader(dir / "requests.jsonl", observe::BadLines::kSkip);
    observe::ExportRequest e;
    auto& a = run.requests;
    std::unordered_map<std::string, std::uint16_t> tenants, classes;
    SlowestRequests slowest;
    while (reader.next(e)) {
      a.t_sched.push_back(e.t_sched);
      a.t_send.push_back(e.t_send);
      a.t_first_token.push_back(e.first_token());
      a.t_last_token.push_back(e.last_token());
      a.t_close.push_back(e.t_close);
      a.output_tokens.push_back(
          static_cast<std::int32_t>(std::clamp<std::int64_t>(e.output_tokens, -1, INT32_MAX)));
      a.outcome.push_back(e.outcome);
      a.warmup.push_back(e.warmup ? 1 : 0);
      a.tenant.push_back(name_index(a.tenant_names, tenants, e.tenant));
      a.task_class.push_back(name_index(a.class_names, classes, e.task_class));
      // Inter-token gaps per token, as core/summary.cpp counts them.
      double sum_ms = 0, max_ms = 0;
      std::uint64_t tokens = 0;
      const bool keep = !e.warmup && e.outcome == Outcome::kOk;
      for (std::size_t i = 1; i < e.event_times.size(); ++i) {
        const Nanos gap = std::max<Nanos>(0, e.event_times[i] - e.event_times[i - 1]);
        const std::uint32_t k = i < e.event_tokens.size() ? std::max<std::uint32_t>(1, e.event_tokens[i]) : 1;
        const double per_token_ms = nanos_to_ms(gap) / k;
        sum_ms += nanos_to_ms(gap);
        tokens += k;
        max_ms = std::max(max_ms, per_token_ms);
        if (keep) a.itl_ns.record(static_cast<std::uint64_t>(gap) / k, k);
      }
      a.itl_mean_ms.push_back(tokens ? static_cast<float>(sum_ms / static_cast<double>(tokens))
                                     : std::numeric_limits<float>::quiet_NaN());
      a.itl_max_ms.push_back(tokens ? static_cast<float>(max_ms) : std::numeric_limits<float>::quiet_NaN());
      if (keep && e.first_token() >= 0 && e.last_token() >= 0 && e.t_send >= 0 &&
          slowest.wants(e.last_token() - e.t_send, e.id)) {
        SlowRequest r;
        r.id = e.id;
        r.tenant = e.tenant;
        r.task_class = e.task_class;
        r.t_sched = e.t_sched;
        r.t_dispatch = e.t_dispatch;
        r.t_send = e.t_send;
        r.t_first_scheduled = e.t_first_scheduled;
        r.t_first_token = e.first_token();
        r.t_last_token = e.last_token();
        r.t_close = e.t_close;
        r.prompt_tokens = e.prompt_tokens;
        r.cached_tokens = e.cached_tokens;
        r.output_tokens = e.output_tokens;
        r.preemptions = e.preemptions;
        r.server_prompt_ms = e.server_prompt_ms;
        r.event_times = e.event_times;
        slowest.add(std::move(r));
      }
      if (builder) builder->add(to_record(e));
    }
    run.slowest = slowest.take();
    run.request_lines_skipped = reader.stats().skipped;
    if (reader.stats().skipped > 0)
      run.notes.push_back(
          fmt::format("requests.jsonl: {} bad line{} skipped (a run cut by a crash leaves its last "
                      "line incomplete); the first: {}",
                      reader.stats().skipped, reader.stats().skipped == 1 ? "" : "s",
                      within_run(dir, reader.stats().first_skipped)));
  } else {
    run.notes.push_back(
        "no requests.jsonl: no per-request data (latency distributions and timelines are empty)");
  }
  if (builder) {
    if (run.requests.size() > 0) {
      run.summary = builder->build();
      run.summary_recomputed = true;
      run.notes.push_back(
          "run.json has no summary (the run did not reach its end): the summary was recomputed from "
          "requests.jsonl, without server counters or SLOs");
    } else {
      run.notes.push_back("no summary: run.json has none and requests.jsonl holds no request");
    }
  }

  // samples.jsonl, streamed into per-series arrays (canonical and derived
  // series; raw series stay in the file).
  observe::RunSource source;
  source.dir = dir;
  if (auto samples = source.open_samples(observe::BadLines::kSkip)) {
    run.has_samples = true;
    SeriesSink sink(run.series);
    observe::Observation o;
    while (samples->next(o)) {
      sink.add(o, "canonical", o.canonical, true);
      sink.add(o, "derived", o.derived, false);
    }
    run.sample_lines = samples->stats().records;
    run.sample_lines_skipped = samples->stats().skipped;
    run.sample_lines_without_series = samples->without_series();
    if (samples->stats().skipped > 0)
      run.notes.push_back(fmt::format("samples.jsonl: {} bad line{} skipped; the first: {}",
                                      samples->stats().skipped, samples->stats().skipped == 1 ? "" : "s",
                                      within_run(dir, samples->stats().first_skipped)));
  } else {
    run.notes.push_back(
        "no samples.jsonl: no server, GPU or host series (bench samples them unless --no-scrape, "
        "--no-gpu and --no-host; sim unless --no-samples)");
  }

  // The time origin: the earliest time of the run.
  Nanos origin = -1;
  auto earlier = [&origin](Nanos t) {
    if (t >= 0 && (origin < 0 || t < origin)) origin = t;
  };
  const auto& a = run.requests;
  for (std::size_t i = 0; i < a.size(); ++i) {
    earlier(a.t_sched[i]);
    earlier(a.t_send[i]);
  }
  for (const auto& s : run.series)
    if (!s.t.empty()) earlier(s.t.front());
  run.origin = origin < 0 ? 0 : origin;

  // sim's steps.jsonl (sim --no-steps leaves it out; bench has none).
  if (fs::exists(dir / "steps.jsonl", ec))
    load_steps(dir / "steps.jsonl", run.origin, 1000, run.steps, run.notes);
  if (fs::exists(dir / "phases.json", ec)) run.phases = load_phases(dir / "phases.json", run.notes);
  return run;
}

namespace {

// A probe's result file: an object with "probe" and "format_version"
// (docs/probes.md). nullopt when the file is some other JSON.
std::optional<ProbeData> read_probe(const fs::path& file) {
  nlohmann::json j = read_json_file(file);
  if (!j.contains("probe") || !j["probe"].is_string() || !j.contains("format_version")) return std::nullopt;
  ProbeData p;
  p.file = file;
  p.probe = j["probe"].get<std::string>();
  p.result = std::move(j);
  return p;
}

// A directory of probe results (probe ... --out DIR): its <probe>.json files in
// name order; empty when it holds none.
std::vector<ProbeData> read_probe_dir(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".json") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::vector<ProbeData> out;
  for (const auto& f : files) {
    std::optional<ProbeData> p;
    try {
      p = read_probe(f);
    } catch (const InputError&) {
      continue;  // another JSON file in the folder
    }
    if (p) out.push_back(std::move(*p));
  }
  return out;
}

}  // namespace

ReportInput load_report_input(const std::vector<fs::path>& paths) {
  ReportInput in;
  if (paths.empty()) throw UsageError("report: name at least one run directory");
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec) && p.extension() == ".json") {
      auto probe = read_probe(p);
      if (!probe)
        throw UsageError(
            fmt::format("{}: not a probe result (no \"probe\" and \"format_version\"): report "
                        "reads run directories, sweep directories and probe --out files",
                        p.string()));
      in.probes.push_back(std::move(*probe));
      continue;
    }
    if (fs::is_directory(p, ec) && !fs::exists(p / "run.json", ec) && !fs::exists(p / "requests.jsonl", ec) &&
        !fs::exists(p / "sweep.json", ec)) {
      auto probes = read_probe_dir(p);
      if (!probes.empty()) {
        for (auto& probe : probes) in.probes.push_back(std::move(probe));
        continue;
      }
    }
    if (fs::exists(p / "sweep.json", ec) && !fs::exists(p / "run.json", ec)) {
      SweepData sweep;
      sweep.dir = p;
      sweep.name = p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
      sweep.sweep_json = read_json_file(p / "sweep.json");
      std::vector<std::pair<double, fs::path>> rates;
      for (const auto& entry : fs::directory_iterator(p, ec)) {
        const std::string n = entry.path().filename().string();
        if (!entry.is_directory() || n.rfind("rate-", 0) != 0) continue;
        char* end = nullptr;
        const double rate = std::strtod(n.c_str() + 5, &end);
        if (end == n.c_str() + 5) continue;
        rates.emplace_back(rate, entry.path());
      }
      std::sort(rates.begin(), rates.end());
      if (rates.empty())
        in.notes.push_back(fmt::format("{}: sweep.json but no rate-* run directory", p.string()));
      for (const auto& [rate, dir] : rates) {
        sweep.runs.push_back(in.runs.size());
        in.runs.push_back(load_run(dir));
        in.runs.back().name = sweep.name + "/" + in.runs.back().name;
      }
      in.sweeps.push_back(std::move(sweep));
      continue;
    }
    in.runs.push_back(load_run(p));
  }
  // Runs overlaid with different settings: say which settings differ.
  if (in.runs.size() > 1) {
    const auto effective = [](const RunData& r) -> nlohmann::json {
      const nlohmann::json* s = &r.run_json;
      for (const char* k : {"settings", "effective"}) {
        if (!s->is_object() || !s->contains(k)) return nullptr;
        s = &(*s)[k];
      }
      return *s;
    };
    // Every key of any run's effective settings, compared across all runs
    // (a key a run lacks counts as null there).
    std::set<std::string> keys;
    for (const auto& r : in.runs)
      if (const auto e = effective(r); e.is_object())
        for (const auto& [k, v] : e.items()) keys.insert(k);
    std::vector<std::string> differing;
    for (const auto& k : keys) {
      nlohmann::json first;
      bool differs = false;
      for (std::size_t i = 0; i < in.runs.size(); ++i) {
        const auto e = effective(in.runs[i]);
        const nlohmann::json v = e.is_object() && e.contains(k) ? e[k] : nlohmann::json();
        if (i == 0)
          first = v;
        else if (v != first)
          differs = true;
      }
      if (differs) differing.push_back(k);
    }
    if (!differing.empty()) {
      std::string list;
      for (const auto& d : differing) list += (list.empty() ? "" : ", ") + d;
      in.notes.push_back(
          fmt::format("the runs overlaid differ in their effective settings ({}): compare with care", list));
    }
  }
  return in;
}

}  // namespace tokenscope::report
