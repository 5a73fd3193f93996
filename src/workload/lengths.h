// Length distributions for prompts and outputs (tokens, always >= 1):
//   fixed:N                 every request N tokens
//   uniform:MIN:MAX         uniform integers in [MIN, MAX]
//   lognormal:MEAN:SIGMA    exp(N(mu, SIGMA^2)) with mu = ln(MEAN) - SIGMA^2/2,
//                           so the mean is MEAN; SIGMA is the log-space spread
//   empirical:FILE          resampled from a trace file's input (for input
//                           lengths) or output (for output lengths) column
// An optional ":max=N" suffix caps the value (e.g. lognormal:1155:0.9:max=8000).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/random.h"

namespace tokenscope::workload {

enum class LengthKind { kFixed, kUniform, kLognormal, kEmpirical };

struct LengthDistribution {
  LengthKind kind = LengthKind::kFixed;
  double a = 0.0;                     // fixed: N; uniform: MIN; lognormal: MEAN
  double b = 0.0;                     // uniform: MAX; lognormal: SIGMA
  std::uint32_t max = 0;              // 0: no cap
  std::vector<std::uint32_t> values;  // empirical
  std::string spec;                   // as given, for the run record

  std::uint32_t sample(Rng& rng) const;
  double mean() const;  // analytic mean before the cap (empirical: sample mean)
};

enum class LengthRole { kInput, kOutput };

// Parses a spec (see above); `option` names the flag in messages. Throws UsageError.
LengthDistribution parse_length_spec(std::string_view spec, std::string_view option, LengthRole role);

}  // namespace tokenscope::workload
