// Change points of a time series: E-divisive means with the Student t-test as
// the significance test, the method of Apache Otava (formerly DataStax
// Hunter) for performance histories.
//
// References:
//  * Matteson & James, "A Nonparametric Approach for Multiple Change Point
//    Analysis of Multivariate Data", JASA 109 (2014), arXiv:1306.4933: the
//    energy statistic Q and divisive (top-down) segmentation;
//  * Fleming et al., "Hunter: Using Change Point Detection to Hunt for
//    Performance Regressions", ICPE 2023, arXiv:2301.03034: the t-test in
//    place of the permutation test, sliding windows, weak change points;
//  * Apache Otava's docs/MATH.md and otava/analysis.py (compute_change_points),
//    whose published example results the tests reproduce.
//
// The algorithm (find_change_points):
//  1. Split. Windows of window_len points, each starting window_len/2 after
//     the last (or at the window's last change point when that is further).
//     In each window, E-divisive: the candidate of a segment is the tau that
//     maximises Q(tau, kappa) over all tau < kappa in it (best_energy_split);
//     the best candidate over the window's segments is kept when the t-test
//     of the whole segment left of it against the whole segment right of it
//     has p <= first_pass_pvalue(max_pvalue), which splits that segment, and
//     the window is done at the first candidate that is not significant. The
//     union of the windows' change points is the set of "weak" change points.
//  2. Merge. While some change point has p >= max_pvalue (each point tested
//     against its neighbours' segments), the one with the largest p is
//     removed; once all pass, the one with the smallest magnitude is removed
//     while that magnitude is <= min_magnitude. After each removal the
//     affected neighbours are tested again.
//
// The p-value is the t-test's at a split E-divisive chose as the most
// different, so false alarms are more frequent than it says: on 200 points
// of Gaussian noise, 46 of 500 series have a change point at max_pvalue 1e-3
// and 3 of 500 at 1e-4, while a 2-sd step is found within 3 points in 468 of
// 500 series at 1e-4 (change_point_test.cpp).
//
// Cost: Q for all (tau, kappa) of a segment of L points is O(L^2) time and
// O(L) memory: moving tau by one updates the between- and within-segment
// distance sums in O(1) from running row sums (MATH.md's recurrences for A,
// B, C). A window costs O(window_len^2) for its first candidate and again
// for each change point found in it, so the split step is O(n window_len)
// for n points with few changes. The merge step's t-tests read segment sums
// from prefix sums, O(1) each; it is O(k^2) in the number k of weak change
// points. A million points (window 50) took 2.4 s in a release build here.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace tokenscope::analyze {

struct ChangePointSettings {
  // Points per window in the split step (>= 2). Otava's default: 50.
  std::size_t window_len = 50;
  // A change point is kept when its two-sided t-test has p < max_pvalue, in
  // (0, 1]. Otava's default: 0.001.
  double max_pvalue = 0.001;
  // ... and its magnitude (see ChangePoint) is > min_magnitude (>= 0).
  double min_magnitude = 0.0;
  // false: the textbook pooled-variance t-test (sample standard deviations),
  // and after a removal in the merge step both neighbours of the removed
  // change point are tested again, so every change point returned meets both
  // criteria on the final segmentation.
  // true: Otava's conventions, on which its published results depend:
  //  * the t-test's pooled variance is built from population standard
  //    deviations (Otava passes numpy.std, ddof=0, to
  //    scipy.stats.ttest_ind_from_stats, which expects ddof=1), which makes
  //    p a little smaller than the textbook test's;
  //  * after a removal, the change point after the removed one and the one
  //    after that are tested again, not the one before it, whose statistics
  //    stay those of its old right-hand segment. Some change points Otava
  //    keeps then fail the criteria on the final segmentation (on its
  //    TigerBeetle example at max_pvalue 0.1, index 265 has p = 0.66).
  bool otava_compatible = false;
};

// Two adjacent segments [begin, index) and [index, end) compared.
struct ChangePoint {
  std::size_t index = 0;  // the first point after the change (>= 1)
  std::size_t count_before = 0;
  std::size_t count_after = 0;
  double mean_before = 0.0;
  double mean_after = 0.0;
  double stddev_before = 0.0;  // sample standard deviation (n-1); 0 for one point
  double stddev_after = 0.0;
  double relative_change = 0.0;  // mean_after / mean_before - 1; 0 when mean_before is 0
  // max(|mean_after/mean_before - 1|, |mean_before/mean_after - 1|), each
  // term 0 when its denominator is 0 (Otava's change_magnitude).
  double magnitude = 0.0;
  double t_statistic = 0.0;  // (mean_before - mean_after) / its pooled standard error
  double p_value = 1.0;      // two-sided
};

// Change points of a series of finite values, in index order. Each point's
// statistics compare the segment from the previous change point (or the
// start) with the segment up to the next one (or the end), recomputed on the
// final segmentation (with otava_compatible, some may then fail the
// criteria; see there). A series of fewer than 3 points has none.
// Throws InputError for an empty series or a value that is not finite, and
// UsageError for settings out of range.
std::vector<ChangePoint> find_change_points(std::span<const double> series,
                                            const ChangePointSettings& settings = {});

// The split step alone: the weak change points' indexes, ascending, found at
// the significance level first_pass_pvalue(settings.max_pvalue).
std::vector<std::size_t> weak_change_points(std::span<const double> series,
                                            const ChangePointSettings& settings = {});

// The significance level of the split step: 10 * p for p < 0.05, 2 * p for
// p < 0.5, else p (Otava's "weak" threshold).
double first_pass_pvalue(double max_pvalue);

// Matteson and James' divergence of X = x[0, tau) and Y = x[tau, kappa)
// (alpha = 1), with n = tau and m = kappa - tau:
//   Q = 2/(n+m) sum_{i<tau<=j<kappa} |x_i - x_j|
//       - 2m/((n+m)(n-1)) sum_{i<k<tau} |x_i - x_k|
//       - 2n/((n+m)(m-1)) sum_{tau<=j<k<kappa} |x_j - x_k|,
// a within-term being 0 when its segment has one point. That is
// n m / (n + m) times the energy distance between X and Y. Direct O(kappa^2)
// evaluation; requires 0 < tau < kappa <= x.size().
double energy_divergence(std::span<const double> x, std::size_t tau, std::size_t kappa);

struct EnergySplit {
  std::size_t index = 0;  // tau, in [1, x.size() - 1]
  std::size_t end = 0;    // kappa, in [index + 1, x.size()]
  double q = 0.0;         // energy_divergence(x, index, end)
};

// The E-divisive candidate of a segment: the (tau, kappa) that maximises
// energy_divergence(x, tau, kappa) over 0 < tau < kappa <= x.size(), the
// first in (tau, kappa) lexicographic order among equal values (Otava's
// argmax over its Q matrix). O(n^2) time, O(n) memory. Requires size >= 2.
EnergySplit best_energy_split(std::span<const double> x);

struct TTest {
  double t = 0.0;
  double df = 0.0;
  double p_value = 1.0;  // two-sided
};

// The two-sample t-test with pooled variance from summary statistics (what
// scipy.stats.ttest_ind_from_stats(equal_var=True) computes):
//   s^2 = ((n1-1) sd1^2 + (n2-1) sd2^2) / (n1+n2-2),
//   t = (mean1 - mean2) / sqrt(s^2 (1/n1 + 1/n2)),  p = 2 P(T_{n1+n2-2} > |t|).
// df = n1+n2-2 <= 0 gives t = 0, p = 1. With s = 0, equal means give t = 0,
// p = 1 (where scipy answers nan) and different ones t = +-inf, p = 0.
TTest pooled_t_test(double mean1, double sd1, std::size_t n1, double mean2, double sd2, std::size_t n2);

}  // namespace tokenscope::analyze
