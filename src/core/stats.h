// Statistics as pure functions (see shared METRICS.md):
//  * percentiles are nearest rank: the value at index ceil(p*n)-1 of the
//    sorted sample (p in [0, 1]; p = 0 gives the minimum);
//  * the confidence interval of a percentile is the exact binomial
//    order-statistic interval: [x_(r), x_(s)] with
//      r = max{r >= 1 : F(r-1) <= alpha/2},  s = min{s <= n : F(s-1) >= 1-alpha/2}
//    where F is the Bin(n, p) CDF; its coverage F(s-1) - F(r-1) >= 1 - alpha.
//    When the sample is too small for a side, that side is unbounded.
#pragma once

#include <cstddef>
#include <limits>
#include <optional>
#include <span>
#include <vector>

namespace tokenscope {

// +infinity: an open bound, a threshold that never trips.
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Index (0-based) of the nearest-rank p-quantile in a sorted sample of n > 0.
std::size_t nearest_rank_index(std::size_t n, double p);
// The nearest-rank p-quantile of an ascending sample (must not be empty).
double nearest_rank(std::span<const double> sorted, double p);

// The nearest-rank p-quantile of a sample in any order, found by partial
// ordering (std::nth_element: v is reordered, not sorted); NaN when v is
// empty.
double nearest_rank_select(std::vector<double>& v, double p);

// The p-quantile (p in [0, 1]) of an ascending sample by linear interpolation
// between order statistics: x[floor(h)] + (h - floor(h)) (x[floor(h)+1] -
// x[floor(h)]) with h = (n-1) p. numpy's default (Hyndman-Fan type 7), for
// compatibility exports only; tokenscope's own percentiles are nearest rank.
double linear_quantile(std::span<const double> sorted, double p);

struct OrderStatisticInterval {
  // 1-based ranks into the sorted sample; nullopt when unbounded on that side.
  std::optional<std::size_t> lower_rank;
  std::optional<std::size_t> upper_rank;
  double coverage = 0.0;  // exact probability that the interval covers the quantile
};

// Exact distribution-free confidence interval for the p-quantile (0 < p < 1)
// from a sample of n, at the given confidence (e.g. 0.95).
OrderStatisticInterval quantile_confidence_interval(std::size_t n, double p, double confidence = 0.95);

struct QuantileWithInterval {
  double p = 0.0;
  double value = 0.0;
  std::optional<double> ci_low;  // nullopt: the sample is too small to bound it
  std::optional<double> ci_high;
};

// Descriptive statistics of one metric, as reported in every summary.
struct Distribution {
  std::size_t count = 0;
  double mean = 0.0;
  double std = 0.0;  // sample standard deviation (n-1); 0 for n < 2
  double min = 0.0;
  double max = 0.0;
  std::vector<QuantileWithInterval> quantiles;  // kSummaryQuantiles, in order
};

// The default reported percentiles: p50, p90, p95, p99, p99.9.
inline constexpr double kSummaryQuantiles[] = {0.50, 0.90, 0.95, 0.99, 0.999};

// Describes a sample; sorts it in place. An empty sample gives count 0.
Distribution describe(std::vector<double>& values, double confidence = 0.95);

// Welford's running mean and variance, with min and max.
class RunningStats {
 public:
  void add(double x);
  void merge(const RunningStats& other);
  std::size_t count() const { return n_; }
  double mean() const { return mean_; }
  double variance() const;  // sample variance (n-1)
  double stddev() const;
  double min() const { return min_; }
  double max() const { return max_; }
  double sum() const { return mean_ * static_cast<double>(n_); }

 private:
  std::size_t n_ = 0;
  double mean_ = 0.0;
  double m2_ = 0.0;
  double min_ = 0.0;
  double max_ = 0.0;
};

}  // namespace tokenscope
