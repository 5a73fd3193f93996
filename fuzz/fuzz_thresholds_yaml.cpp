// libFuzzer target: tokenscope check's thresholds file (analyze/thresholds.h).
// Any input either parses into thresholds within their documented ranges or
// is refused with an InputError.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "analyze/thresholds.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  try {
    const analyze::Thresholds t =
        analyze::parse_thresholds(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    for (const auto& k : analyze::threshold_keys())
      if (!std::isfinite(*analyze::threshold_value(t, k.key))) __builtin_trap();
    if (!(t.confidence > 0 && t.confidence < 1)) __builtin_trap();
    for (const auto& [name, slo] : t.slos)
      if (slo.empty() || !(slo.percentile > 0 && slo.percentile <= 100)) __builtin_trap();
  } catch (const UsageError&) {
  }
  return 0;
}
