// The exporters' readers of a run directory (requests.jsonl, samples.jsonl,
// run.json, tasks.jsonl) and the documents they write from whatever those
// hold. Input: requests.jsonl, a NUL byte, samples.jsonl, a NUL byte,
// run.json, a NUL byte, tasks.jsonl (without the last part, no tasks.jsonl).
// Every document written must be valid JSON (trace.json whole, each OTLP
// request). Each samples.jsonl line reads the same through simdjson as
// through the reference reader (nlohmann): the same values, or the same
// refusal. A tasks.jsonl line the reader takes holds no contradiction the
// exporters would draw wrong (a step that started and did not end, an end
// before a start, a step outside its task).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "exporters/otlp.h"
#include "exporters/perfetto.h"

namespace {

using tokenscope::observe::Observation;
using tokenscope::observe::Sample;

bool same(const std::vector<Sample>& a, const std::vector<Sample>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].labels != b[i].labels) return false;
    if (std::isnan(a[i].value) ? !std::isnan(b[i].value) : a[i].value != b[i].value) return false;
  }
  return true;
}

void check_samples_line(std::string_view line, Observation& reused) {
  std::string fast_error, reference_error;
  Observation reference;
  try {
    tokenscope::observe::parse_observation_json(line, reused);
  } catch (const std::runtime_error& e) {
    fast_error = e.what();
  }
  try {
    reference = tokenscope::observe::detail::parse_observation_json_nlohmann(line);
  } catch (const std::runtime_error& e) {
    reference_error = e.what();
  }
  if (fast_error != reference_error) __builtin_trap();
  if (!fast_error.empty()) return;
  const Observation& o = reused;
  if (o.t_ns != reference.t_ns || o.rtt_ns != reference.rtt_ns || o.source != reference.source ||
      o.server_t_ns != reference.server_t_ns || o.error != reference.error ||
      o.unavailable != reference.unavailable || !same(o.canonical, reference.canonical) ||
      !same(o.raw, reference.raw) || !same(o.derived, reference.derived))
    __builtin_trap();
}

void check_tasks_line(std::string_view line, tokenscope::rundir::TaskLineParser& parser,
                      tokenscope::rundir::TaskRecord& reused) {
  try {
    parser.parse(line, reused);
  } catch (const tokenscope::rundir::LineError&) {
    return;  // refused: fine
  }
  const auto& t = reused;
  if (t.t_start >= 0 && t.t_end >= 0 && t.t_end < t.t_start) __builtin_trap();
  for (const auto& s : t.steps) {
    if (s.t_start >= 0 && s.t_end < s.t_start) __builtin_trap();
    if (s.t_start >= 0 && t.t_start >= 0 && t.t_end >= 0 && (s.t_start < t.t_start || s.t_end > t.t_end))
      __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  using namespace tokenscope::observe;
  using namespace tokenscope::rundir;
  using namespace tokenscope::exporters;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t a = input.find('\0');
  const std::string_view requests = input.substr(0, a);
  const std::string_view rest = a == std::string_view::npos ? std::string_view() : input.substr(a + 1);
  const std::size_t b = rest.find('\0');
  const std::string_view samples = rest.substr(0, b);
  const std::string_view after = b == std::string_view::npos ? std::string_view() : rest.substr(b + 1);
  const std::size_t c = after.find('\0');
  const std::string_view run_json = after.substr(0, c);
  const std::optional<std::string_view> tasks =
      c == std::string_view::npos ? std::nullopt : std::optional<std::string_view>(after.substr(c + 1));

  Observation reused;  // read into line after line, as SamplesReader does
  for (std::size_t at = 0; at <= samples.size();) {
    const std::size_t end = std::min(samples.find('\n', at), samples.size());
    check_samples_line(samples.substr(at, end - at), reused);
    at = end + 1;
  }

  if (tasks) {
    TaskLineParser parser;
    TaskRecord reused;  // read into line after line, as TasksReader does
    for (std::size_t at = 0; at <= tasks->size();) {
      const std::size_t end = std::min(tasks->find('\n', at), tasks->size());
      check_tasks_line(tasks->substr(at, end - at), parser, reused);
      at = end + 1;
    }
  }

  RunSource source;
  source.requests_text = requests;
  source.samples_text = samples;
  source.tasks_text = tasks;
  for (const BadLines policy : {BadLines::kSkip, BadLines::kFail}) {
    for (const bool lanes : {true, false}) {
      PerfettoOptions o;
      o.bad_lines = policy;
      o.lanes = lanes;
      std::string out;
      try {
        const auto stats = write_perfetto(source, out, o);
        if (!nlohmann::json::accept(out)) __builtin_trap();
        if (stats.bytes != out.size()) __builtin_trap();
      } catch (const InputError&) {
        if (policy == BadLines::kSkip) __builtin_trap();  // skipping never stops
      }
    }
  }

  RunInfo run;
  try {
    run = parse_run_info(run_json, "run.json");
  } catch (const InputError&) {
  }
  for (const BadLines policy : {BadLines::kSkip, BadLines::kFail}) {
    OtlpOptions o;
    o.bad_lines = policy;
    o.spans_per_request = 3;
    o.points_per_request = 5;
    if (!run.clock) o.clock = ClockAnchor{0, 1'700'000'000'000'000'000};
    const auto check = [](std::string_view body, std::uint64_t items) {
      if (items == 0 || !nlohmann::json::accept(body)) __builtin_trap();
    };
    try {
      write_otlp(source, run, o, check, check);
    } catch (const InputError&) {
      if (policy == BadLines::kSkip) __builtin_trap();
    }
  }
  return 0;
}
