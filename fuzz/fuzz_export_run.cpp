// The exporters' readers of a run directory (requests.jsonl, samples.jsonl,
// run.json) and the documents they write from whatever those hold. Input:
// requests.jsonl, a NUL byte, samples.jsonl, a NUL byte, run.json. Every
// document written must be valid JSON (trace.json whole, each OTLP request).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "observe/export_otlp.h"
#include "observe/export_perfetto.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  using namespace tokenscope::observe;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t a = input.find('\0');
  const std::string_view requests = input.substr(0, a);
  const std::string_view rest = a == std::string_view::npos ? std::string_view() : input.substr(a + 1);
  const std::size_t b = rest.find('\0');
  const std::string_view samples = rest.substr(0, b);
  const std::string_view run_json = b == std::string_view::npos ? std::string_view() : rest.substr(b + 1);

  RunSource source;
  source.requests_text = requests;
  source.samples_text = samples;
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
