// Statistics of repeated timings, shared by the probes. Each probe repeats a
// measurement R times, alternating the variants it compares in every
// repetition (so slow drift of a noisy VM hits both alike), and reports:
//  * per variant, the median with its exact 95% order-statistic interval;
//  * per pair, the median of the per-repetition ratios with the same kind of
//    interval (distribution-free: no normality assumed).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tokenscope::probe {

struct MedianCi {
  std::size_t n = 0;
  double median = 0.0;
  std::optional<double> ci_low;  // nullopt: too few repetitions for a 95% bound
  std::optional<double> ci_high;
  double min = 0.0;
  double max = 0.0;
  double mean = 0.0;
  std::vector<double> values;  // every repetition, in the order measured
};

// Median and exact interval of a sample (copied, not modified). Empty: n = 0.
MedianCi median_ci(std::span<const double> values, double confidence = 0.95);

// Ratio numerator[i] / denominator[i] per repetition, then median_ci of those.
// Both spans must be the same length; zero denominators are skipped.
MedianCi ratio_ci(std::span<const double> numerator, std::span<const double> denominator,
                  double confidence = 0.95);

// Percentile summary (nearest rank) of a latency sample, for distributions.
struct LatencySummary {
  std::size_t n = 0;
  double mean = 0.0;
  double p50 = 0.0;
  double p90 = 0.0;
  double p99 = 0.0;
  double min = 0.0;
  double max = 0.0;
  std::vector<double> values;  // every sample, in the order measured
};
LatencySummary summarize_latencies(std::vector<double> values);

nlohmann::json to_json(const MedianCi& m);
nlohmann::json to_json(const LatencySummary& s);
// "1.93 [1.85, 2.01]" (or "1.93 [n/a]" when the interval is unbounded).
std::string format_ci(const MedianCi& m, int decimals = 2);

}  // namespace tokenscope::probe
