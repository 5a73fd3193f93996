// libFuzzer target: length-distribution specs and the other option parsers
// that read user text (--input-len, --arrival, --trace-format, --perturb).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/random.h"
#include "engine/perturbation.h"
#include "workload/arrivals.h"
#include "workload/lengths.h"
#include "workload/trace_readers.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  const std::string spec(reinterpret_cast<const char*>(data), size);
  if (spec.rfind("empirical", 0) == 0) return 0;  // reads files: covered by the trace targets
  try {
    const auto d = workload::parse_length_spec(spec, "--input-len", workload::LengthRole::kInput);
    Rng rng(1);
    for (int i = 0; i < 16; ++i) {
      const auto v = d.sample(rng);
      if (v < 1 || (d.max != 0 && v > d.max)) __builtin_trap();
    }
  } catch (const UsageError&) {
  }
  try {
    workload::parse_arrival_kind(spec);
  } catch (const UsageError&) {
  }
  try {
    workload::parse_trace_format(spec);
  } catch (const UsageError&) {
  }
  try {
    // A spec that parses gives steps that never get shorter, and stolen time within what was added.
    engine::Perturber p(engine::parse_perturbation_spec(spec), 1, {});
    for (std::uint64_t i = 0; i < 16; ++i) {
      const auto s = p.on_step(i, static_cast<Nanos>(i) * 7'000'000'000, 1'000'000, i + 1, 100 * i);
      if (s.extra_ns < 0 || s.stolen_ns < 0 || s.stolen_ns > s.extra_ns) __builtin_trap();
      if (p.request_hold(i) < 0) __builtin_trap();
    }
    p.to_json();
  } catch (const UsageError&) {
  }
  return 0;
}
