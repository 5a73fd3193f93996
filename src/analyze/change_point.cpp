#include "analyze/change_point.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <boost/math/distributions/students_t.hpp>

#include "core/error.h"

namespace tokenscope::analyze {
namespace {

constexpr const char* kWhat = "change points";

void check_settings(const ChangePointSettings& s) {
  if (s.window_len < 2)
    throw UsageError(fmt::format("{}: window_len must be at least 2, got {}", kWhat, s.window_len));
  if (!(s.max_pvalue > 0.0 && s.max_pvalue <= 1.0))
    throw UsageError(fmt::format("{}: max_pvalue must be in (0, 1], got {}", kWhat, s.max_pvalue));
  if (!(s.min_magnitude >= 0.0) || !std::isfinite(s.min_magnitude))
    throw UsageError(
        fmt::format("{}: min_magnitude must be finite and >= 0, got {}", kWhat, s.min_magnitude));
}

void check_series(std::span<const double> x) {
  if (x.empty()) throw InputError(kWhat, 0, "series", "at least one value, got an empty series");
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]))
      throw InputError(kWhat, 0, fmt::format("series[{}]", i), fmt::format("a finite number, got {}", x[i]));
  }
}

// Sums of x - pivot and (x - pivot)^2 over every prefix, in long double, so
// that the mean and the sum of squared deviations of any segment are O(1)
// and accurate (the pivot, the first value, keeps the squares small).
class SegmentSums {
 public:
  explicit SegmentSums(std::span<const double> x) : pivot_(x.empty() ? 0.0 : x[0]) {
    s1_.assign(x.size() + 1, 0.0L);
    s2_.assign(x.size() + 1, 0.0L);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const long double d = static_cast<long double>(x[i]) - pivot_;
      s1_[i + 1] = s1_[i] + d;
      s2_[i + 1] = s2_[i] + d * d;
    }
  }
  double mean(std::size_t b, std::size_t e) const {
    return static_cast<double>(pivot_ + (s1_[e] - s1_[b]) / static_cast<long double>(e - b));
  }
  // Sum of squared deviations from the segment's mean, >= 0.
  double squared_deviations(std::size_t b, std::size_t e) const {
    const long double s1 = s1_[e] - s1_[b];
    const long double ss = (s2_[e] - s2_[b]) - s1 * s1 / static_cast<long double>(e - b);
    return ss > 0.0L ? static_cast<double>(ss) : 0.0;
  }

 private:
  long double pivot_;
  std::vector<long double> s1_, s2_;
};

double forward_change(double before, double after) {
  return before == 0.0 ? 0.0 : after / before - 1.0;
}

// The segments [b, i) and [i, e) compared: means, deviations and the t-test
// with population (Otava) or sample standard deviations in the pooled variance.
ChangePoint compare_segments(const SegmentSums& sums, std::size_t b, std::size_t i, std::size_t e,
                             bool otava_compatible) {
  ChangePoint cp;
  cp.index = i;
  cp.count_before = i - b;
  cp.count_after = e - i;
  cp.mean_before = sums.mean(b, i);
  cp.mean_after = sums.mean(i, e);
  const double ss_before = sums.squared_deviations(b, i), ss_after = sums.squared_deviations(i, e);
  const auto sample_sd = [](double ss, std::size_t n) {
    return n < 2 ? 0.0 : std::sqrt(ss / static_cast<double>(n - 1));
  };
  const auto population_sd = [](double ss, std::size_t n) {
    return n < 2 ? 0.0 : std::sqrt(ss / static_cast<double>(n));
  };
  cp.stddev_before = sample_sd(ss_before, cp.count_before);
  cp.stddev_after = sample_sd(ss_after, cp.count_after);
  const double sd1 = otava_compatible ? population_sd(ss_before, cp.count_before) : cp.stddev_before;
  const double sd2 = otava_compatible ? population_sd(ss_after, cp.count_after) : cp.stddev_after;
  const TTest t = pooled_t_test(cp.mean_before, sd1, cp.count_before, cp.mean_after, sd2, cp.count_after);
  cp.t_statistic = t.t;
  cp.p_value = t.p_value;
  cp.relative_change = forward_change(cp.mean_before, cp.mean_after);
  cp.magnitude =
      std::max(std::abs(cp.relative_change), std::abs(forward_change(cp.mean_after, cp.mean_before)));
  return cp;
}

// E-divisive within one window [begin, end): the change points found before
// the first candidate that is not significant at `pvalue` (absolute indexes,
// ascending).
std::vector<std::size_t> divide_window(std::span<const double> x, const SegmentSums& sums, std::size_t begin,
                                       std::size_t end, double pvalue, bool otava_compatible) {
  struct Segment {
    std::size_t begin, end;
    std::optional<EnergySplit> candidate;  // absolute index; none for a single point
  };
  const auto make_segment = [&](std::size_t b, std::size_t e) {
    Segment s{b, e, std::nullopt};
    if (e - b >= 2) {
      EnergySplit c = best_energy_split(x.subspan(b, e - b));
      c.index += b;
      c.end += b;
      s.candidate = c;
    }
    return s;
  };
  std::vector<Segment> segments{make_segment(begin, end)};
  std::vector<std::size_t> found;
  for (;;) {
    std::optional<std::size_t> best;
    for (std::size_t k = 0; k < segments.size(); ++k) {
      if (segments[k].candidate && (!best || segments[k].candidate->q > segments[*best].candidate->q))
        best = k;
    }
    if (!best) break;
    const Segment s = segments[*best];
    const std::size_t i = s.candidate->index;
    if (!(compare_segments(sums, s.begin, i, s.end, otava_compatible).p_value <= pvalue)) break;
    found.insert(std::upper_bound(found.begin(), found.end(), i), i);
    segments[*best] = make_segment(s.begin, i);
    segments.insert(segments.begin() + static_cast<std::ptrdiff_t>(*best) + 1, make_segment(i, s.end));
  }
  return found;
}

// The statistics of the k-th of the sorted change points `at`, against its
// neighbours' segments.
ChangePoint compare_at(const SegmentSums& sums, const std::vector<std::size_t>& at, std::size_t k,
                       std::size_t n, bool otava_compatible) {
  const std::size_t b = k == 0 ? 0 : at[k - 1];
  const std::size_t e = k + 1 == at.size() ? n : at[k + 1];
  return compare_segments(sums, b, at[k], e, otava_compatible);
}

std::vector<std::size_t> split_step(std::span<const double> x, const SegmentSums& sums,
                                    const ChangePointSettings& s) {
  const double pvalue = first_pass_pvalue(s.max_pvalue);
  const std::size_t step = s.window_len / 2;
  std::vector<std::size_t> weak;
  for (std::size_t start = 0; start < x.size();) {
    const std::size_t end = std::min(start + s.window_len, x.size());
    const std::vector<std::size_t> found = divide_window(x, sums, start, end, pvalue, s.otava_compatible);
    weak.insert(weak.end(), found.begin(), found.end());
    start = std::max(found.empty() ? 0 : found.back(), start + step);
  }
  std::sort(weak.begin(), weak.end());
  weak.erase(std::unique(weak.begin(), weak.end()), weak.end());
  return weak;
}

}  // namespace

double first_pass_pvalue(double max_pvalue) {
  if (max_pvalue < 0.05) return max_pvalue * 10.0;
  if (max_pvalue < 0.5) return max_pvalue * 2.0;
  return max_pvalue;
}

TTest pooled_t_test(double mean1, double sd1, std::size_t n1, double mean2, double sd2, std::size_t n2) {
  TTest out;
  if (n1 + n2 <= 2 || n1 == 0 || n2 == 0) return out;
  const double a = static_cast<double>(n1), b = static_cast<double>(n2);
  out.df = a + b - 2.0;
  const double pooled = ((a - 1.0) * sd1 * sd1 + (b - 1.0) * sd2 * sd2) / out.df;
  const double se = std::sqrt(pooled * (1.0 / a + 1.0 / b));
  const double diff = mean1 - mean2;
  if (!(se > 0.0)) {
    if (diff == 0.0) return out;
    out.t = diff > 0.0 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
    out.p_value = 0.0;
    return out;
  }
  out.t = diff / se;
  const boost::math::students_t dist(out.df);
  out.p_value = std::min(1.0, 2.0 * boost::math::cdf(boost::math::complement(dist, std::abs(out.t))));
  return out;
}

double energy_divergence(std::span<const double> x, std::size_t tau, std::size_t kappa) {
  if (!(tau > 0 && tau < kappa && kappa <= x.size()))
    throw UsageError(fmt::format("energy_divergence: need 0 < tau < kappa <= {}, got tau {} kappa {}",
                                 x.size(), tau, kappa));
  double between = 0.0, within_x = 0.0, within_y = 0.0;
  for (std::size_t i = 0; i < tau; ++i)
    for (std::size_t j = tau; j < kappa; ++j) between += std::abs(x[i] - x[j]);
  for (std::size_t i = 0; i < tau; ++i)
    for (std::size_t k = i + 1; k < tau; ++k) within_x += std::abs(x[i] - x[k]);
  for (std::size_t j = tau; j < kappa; ++j)
    for (std::size_t k = j + 1; k < kappa; ++k) within_y += std::abs(x[j] - x[k]);
  const double n = static_cast<double>(tau), m = static_cast<double>(kappa - tau);
  double q = 2.0 * between;
  if (tau >= 2) q -= 2.0 * m / (n - 1.0) * within_x;
  if (kappa - tau >= 2) q -= 2.0 * n / (m - 1.0) * within_y;
  return q / (n + m);
}

EnergySplit best_energy_split(std::span<const double> x) {
  const std::size_t len = x.size();
  if (len < 2) throw UsageError(fmt::format("best_energy_split: need at least 2 points, got {}", len));
  // to_x[t] = sum_{i<t} |x_i - x_t|: what x_t adds to the sums of X = x[0, t)
  // when it moves from Y into X.
  std::vector<double> to_x(len, 0.0);
  for (std::size_t t = 1; t < len; ++t)
    for (std::size_t i = 0; i < t; ++i) to_x[t] += std::abs(x[i] - x[t]);
  // For the current kappa: to_y[t] = sum_{t<j<kappa} |x_t - x_j|, and
  // y_from_1 = the within sum of x[1, kappa).
  std::vector<double> to_y(len, 0.0);
  double y_from_1 = 0.0;
  EnergySplit best{0, 0, -std::numeric_limits<double>::infinity()};
  for (std::size_t kappa = 2; kappa <= len; ++kappa) {
    const std::size_t j = kappa - 1;  // the point that joins Y
    for (std::size_t t = 0; t < j; ++t) {
      const double d = std::abs(x[t] - x[j]);
      to_y[t] += d;
      if (t >= 1) y_from_1 += d;
    }
    // tau = 1: X = {x_0}, Y = x[1, kappa). Then x_tau moves from Y to X.
    double between = to_y[0], within_x = 0.0, within_y = y_from_1;
    const double total = static_cast<double>(kappa);
    for (std::size_t tau = 1; tau < kappa; ++tau) {
      const double n = static_cast<double>(tau), m = static_cast<double>(kappa - tau);
      double q = 2.0 * between;
      if (tau >= 2) q -= 2.0 * m / (n - 1.0) * within_x;
      if (kappa - tau >= 2) q -= 2.0 * n / (m - 1.0) * within_y;
      q /= total;
      // Lexicographic (tau, kappa) order among equal values; kappa grows in
      // the outer loop, tau in the inner one.
      if (q > best.q || (q == best.q && tau < best.index)) best = {tau, kappa, q};
      between += to_y[tau] - to_x[tau];
      within_x += to_x[tau];
      within_y -= to_y[tau];
    }
  }
  return best;
}

std::vector<std::size_t> weak_change_points(std::span<const double> series,
                                            const ChangePointSettings& settings) {
  check_settings(settings);
  check_series(series);
  const SegmentSums sums(series);
  return split_step(series, sums, settings);
}

std::vector<ChangePoint> find_change_points(std::span<const double> series,
                                            const ChangePointSettings& settings) {
  check_settings(settings);
  check_series(series);
  const std::size_t n = series.size();
  const SegmentSums sums(series);
  std::vector<std::size_t> at = split_step(series, sums, settings);
  const bool compat = settings.otava_compatible;
  std::vector<ChangePoint> stats;
  stats.reserve(at.size());
  for (std::size_t k = 0; k < at.size(); ++k) stats.push_back(compare_at(sums, at, k, n, compat));

  // Merge: remove the weakest until every change point passes both criteria.
  while (!at.empty()) {
    const auto by_p = [](const ChangePoint& a, const ChangePoint& b) { return a.p_value < b.p_value; };
    // The first of the largest p (std::max_element keeps the first).
    auto weakest = std::max_element(stats.begin(), stats.end(), by_p);
    if (weakest->p_value < settings.max_pvalue) {
      weakest = std::min_element(stats.begin(), stats.end(), [](const ChangePoint& a, const ChangePoint& b) {
        return a.magnitude < b.magnitude;
      });
      if (weakest->magnitude > settings.min_magnitude) break;
    }
    const auto k = static_cast<std::size_t>(weakest - stats.begin());
    at.erase(at.begin() + static_cast<std::ptrdiff_t>(k));
    stats.erase(weakest);
    // The neighbours whose segments changed: k-1 and k (now the one after
    // the removed point); Otava tests k and k+1 again instead.
    const std::size_t first = compat ? k : (k == 0 ? 0 : k - 1);
    for (std::size_t r = first; r < std::min(first + 2, at.size()); ++r)
      stats[r] = compare_at(sums, at, r, n, compat);
  }
  for (std::size_t k = 0; k < at.size(); ++k) stats[k] = compare_at(sums, at, k, n, compat);
  return stats;
}

}  // namespace tokenscope::analyze
