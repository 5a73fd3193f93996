// libFuzzer target: check item 11's activation histograms file
// (analyze/quantization.h). Any input either parses into histograms that
// keep the documented contract (edges finite and increasing, one count per
// bin, integer counts, unique names), whose split-half divergence is a
// finite number of bits, or is refused with an InputError.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "analyze/quantization.h"
#include "analyze/statistics.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  try {
    const auto hs =
        analyze::parse_activations(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.jsonl");
    std::set<std::string> names;
    for (const auto& h : hs) {
      if (h.name.empty() || !names.insert(h.name).second) __builtin_trap();
      if (h.edges.size() < 2 || h.counts.size() + 1 != h.edges.size()) __builtin_trap();
      for (std::size_t i = 0; i < h.edges.size(); ++i)
        if (!std::isfinite(h.edges[i]) || (i > 0 && !(h.edges[i] > h.edges[i - 1]))) __builtin_trap();
      for (const double c : h.counts)
        if (!(c >= 0) || c != std::floor(c)) __builtin_trap();
      const auto halves = analyze::split_counts(h.counts, 1);
      for (std::size_t i = 0; i < h.counts.size(); ++i)
        if (halves[0][i] + halves[1][i] != h.counts[i] || halves[0][i] < 0 || halves[1][i] < 0)
          __builtin_trap();
      const double kl = analyze::kl_divergence_bits(halves[0], halves[1], analyze::kKlPseudoCount);
      if (!std::isfinite(kl) || kl < -1e-9) __builtin_trap();
    }
  } catch (const InputError&) {
  }
  return 0;
}
