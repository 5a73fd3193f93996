// Two-sample statistics for the regression checklist (../shared/design/
// CHECKLIST.md): how a candidate run's sample of a metric differs from the
// base run's, with an uncertainty that a verdict can rest on. Every function
// is pure. The samples are SortedSample values, sorted once and shared by all
// the statistics of a metric, so that each statistic costs O(n) or
// O(n log n) after the one sort (two runs of 1,000,000 requests each are the
// design size).
//
// Conventions:
//  * "base" is the reference run, "cand" the candidate; a shift is cand minus
//    base, and "greater" means cand is stochastically larger (for a latency:
//    slower);
//  * percentiles are nearest rank and their intervals are the exact binomial
//    order-statistic intervals of core/stats.h;
//  * probabilities come from Boost.Math's distributions (normal, binomial,
//    Kolmogorov-Smirnov where the installed Boost has it);
//  * bad data (an empty sample, NaN, an infinity, a non-positive value where a
//    logarithm is taken, histograms over different bins) throws InputError;
//    bad parameters (a confidence outside (0, 1), p outside (0, 1)) throw
//    UsageError.
//
// src/analyze/statistics_reference.py prints every reference value the tests
// hard-code (python3 with scipy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tokenscope::analyze {

// A sample of finite values, sorted ascending, with a name for messages (the
// run and the metric, e.g. "base ttft_ms").
class SortedSample {
 public:
  // Sorts the values. Throws InputError (naming `name`) when the sample is
  // empty or holds NaN or an infinity.
  explicit SortedSample(std::vector<double> values, std::string name = "sample");
  // For values already in ascending order (checked, O(n)): no sort.
  // Throws as the constructor does, and UsageError when out of order.
  static SortedSample from_sorted(std::vector<double> values, std::string name = "sample");

  std::span<const double> values() const { return values_; }
  std::size_t size() const { return values_.size(); }
  const std::string& name() const { return name_; }

 private:
  SortedSample() = default;
  void check() const;  // not empty, every value finite

  std::vector<double> values_;
  std::string name_;
};

// The natural logarithm of every value (order is kept, so the result stays
// sorted); the sample for relative shifts. Throws InputError when a value is
// not positive.
SortedSample log_sample(const SortedSample& sample);

// ---------------------------------------------------------------------------
// Mann-Whitney U

// The alternative hypothesis of a test: kGreater is "cand is stochastically
// larger than base", kLess the reverse.
enum class Alternative { kTwoSided, kGreater, kLess };

// How the p-value of the Mann-Whitney test is computed. kAuto follows scipy:
// the exact null distribution when one sample has at most 8 values and there
// are no ties, otherwise the normal approximation; tokenscope also takes the
// normal approximation where the exact distribution is too costly
// (mann_whitney_exact_feasible is false).
enum class MannWhitneyMethod { kAuto, kExact, kAsymptotic };

// The exact null distribution of U has n1 n2 + 1 points and costs
// min(n1, n2) n1 n2 operations: it is computed when n1 n2 <=
// kMannWhitneyExactMaxPairs (32 MiB) and min(n1, n2) n1 n2 <=
// kMannWhitneyExactMaxWork (about 0.1 s).
inline constexpr std::uint64_t kMannWhitneyExactMaxPairs = std::uint64_t{1} << 22;
inline constexpr std::uint64_t kMannWhitneyExactMaxWork = std::uint64_t{1} << 26;
bool mann_whitney_exact_feasible(std::size_t n1, std::size_t n2);

struct MannWhitneyResult {
  // U of cand: #{(i, j) : cand_j > base_i} + #{(i, j) : cand_j == base_i} / 2,
  // in [0, n1 n2]; n1 n2 / 2 when the samples do not differ. This is scipy's
  // statistic of mannwhitneyu(cand, base).
  double u = 0.0;
  // (u - n1 n2 / 2) / sigma with the tie-corrected sigma and no continuity
  // correction: positive when cand is larger; 0 when every value is equal.
  double z = 0.0;
  double p_value = 1.0;
  MannWhitneyMethod method = MannWhitneyMethod::kAsymptotic;  // the one used
};

// The Mann-Whitney U test of base against cand; equals
// scipy.stats.mannwhitneyu(cand, base, alternative=..., method=...). Exact:
// P(U >= u) from the null distribution of U (no ties), doubled for two sides.
// Asymptotic: the normal approximation with
//   sigma^2 = n1 n2 / 12 ((N + 1) - sum(t^3 - t) / (N (N - 1))),  N = n1 + n2,
// t the sizes of the groups of tied values, and a continuity correction of
// 1/2 towards the mean; p = P(Z >= (U - mu - 1/2) / sigma) for the one-sided
// statistic (U of cand for kGreater, n1 n2 - U for kLess, the larger of the
// two for kTwoSided, then doubled), capped at 1. When all N values are equal
// sigma is 0 and p is 1. Throws UsageError for kExact with ties or where
// mann_whitney_exact_feasible is false.
MannWhitneyResult mann_whitney_u(const SortedSample& base, const SortedSample& cand,
                                 Alternative alternative = Alternative::kTwoSided,
                                 MannWhitneyMethod method = MannWhitneyMethod::kAuto);

// The null distribution of U for samples of n1 and n2 values without ties:
// element u is P(U = u), u = 0 .. n1 n2; each of the C(n1 + n2, n1) orderings
// equally likely. Counting: the generating function of U is the Gaussian
// binomial coefficient [n1 + n2 choose n1]_q, built as the product over
// i = 1 .. m of (1 - q^(n+i)) / (1 - q^i) (m = min(n1, n2), n = max), each
// factor scaled by i / (n + i) so the coefficients stay probabilities.
// O(m n1 n2) time. The upper half is the mirror image of the lower (the
// distribution is symmetric): the recurrence keeps the lower tail accurate.
// Throws UsageError where mann_whitney_exact_feasible is false.
std::vector<double> mann_whitney_null_pmf(std::size_t n1, std::size_t n2);

// ---------------------------------------------------------------------------
// Hodges-Lehmann shift

// A shift of cand against base with its confidence interval. A side of the
// interval is nullopt (unbounded) when the samples are too small to bound it
// at the confidence asked for.
struct ShiftWithInterval {
  double estimate = 0.0;
  std::optional<double> ci_low;
  std::optional<double> ci_high;
  // The interval's coverage: exact (from the null distribution of U or the
  // binomial) or, where the normal approximation set the ranks, approximate.
  double coverage = 0.0;
};

// The k-th smallest (1-based, 1 <= k <= n1 n2) of the n1 n2 pairwise
// differences cand_j - base_i of two ascending samples, without
// materialising them: a selection by counting. For a pivot value t the pairs
// with a difference below (at most) t are counted in O(n1 + n2) by a merge
// over the sorted samples (the difference falls as base_i grows and rises
// with cand_j). Each round draws a uniform sample of the pairs still in play
// and takes as pivots two of its values about four binomial standard
// deviations either side of the wanted rank (Floyd and Rivest's selection),
// so a round keeps about 1% of the pairs; once few are left they are
// materialised and selected. Pivots are pairwise differences, and the answer
// is the same double as cand_j - base_i computed directly. About 3 to 5
// rounds of two counts each for 10^6 x 10^6 pairs. The result does not
// depend on the sampling, only the running time does. Throws UsageError for
// an empty sample, k out of range, or a cand sample of 2^32 values or more.
double kth_pairwise_difference(std::span<const double> base_sorted, std::span<const double> cand_sorted,
                               std::uint64_t k);

// The Hodges-Lehmann estimate of the shift from base to cand: the median of
// the n1 n2 differences cand_j - base_i (the mean of the two middle ones when
// n1 n2 is even), with the distribution-free confidence interval of Bauer
// (1972) (also in Hollander and Wolfe, Nonparametric Statistical Methods): the
// order statistics d_(k) and d_(n1 n2 + 1 - k) of the differences, where
//   k = max{k >= 1 : P(U <= k - 1) <= alpha / 2},  alpha = 1 - confidence,
// U the Mann-Whitney statistic under the null. P from the exact distribution
// when min(n1, n2) <= 8 and mann_whitney_exact_feasible (as mann_whitney_u's
// kAuto, ties aside), otherwise from the normal approximation with
// continuity correction and without tie correction:
//   k = floor(n1 n2 / 2 + 1/2 - z_(1 - alpha/2) sqrt(n1 n2 (N + 1) / 12)).
// No k (the samples are too small): both sides unbounded (R's
// wilcox.test(cand, base, conf.int = TRUE) takes the same order statistics in
// the exact case, but the extreme differences where no k exists). Three or
// four selections by kth_pairwise_difference: about 0.35 s of CPU for 10^6
// values each on the development machine (sorting the two samples: 0.25 s).
ShiftWithInterval hodges_lehmann_shift(const SortedSample& base, const SortedSample& cand,
                                       double confidence = 0.95);

// The Hodges-Lehmann shift of the logarithms, as a relative change: the
// estimate and interval ends are exp(shift of logs) - 1, so 0.08 reads "cand
// is 8% larger" (the median ratio cand_j / base_i, minus 1). Every value must
// be positive (InputError).
ShiftWithInterval hodges_lehmann_relative_shift(const SortedSample& base, const SortedSample& cand,
                                                double confidence = 0.95);

// ---------------------------------------------------------------------------
// Kolmogorov-Smirnov and DKW bands

struct KolmogorovSmirnovResult {
  // sup_t |F_base(t) - F_cand(t)| over the empirical CDFs.
  double d = 0.0;
  // sup_t (F_base(t) - F_cand(t)), >= 0: how far cand's CDF lies below base's,
  // that is how much cand is stochastically larger.
  double d_plus = 0.0;
  // Asymptotic two-sided p-value: the Kolmogorov limiting distribution at
  // sqrt(n_eff) d, n_eff = n1 n2 / (n1 + n2) (Boost.Math's
  // kolmogorov_smirnov_distribution(n_eff) where the installed Boost has it,
  // else the same limit by its series). Conservative-to-accurate for n_eff
  // above about 50; not exact for small samples.
  double p_value = 1.0;
  // Asymptotic one-sided p-value of d_plus (Smirnov's limit):
  // exp(-2 n_eff d_plus^2).
  double p_value_plus = 1.0;
};

// The two-sample Kolmogorov-Smirnov test; d and d_plus equal the statistics
// of scipy.stats.ks_2samp(base, cand) and ks_2samp(base, cand,
// alternative='greater'). O(n1 + n2).
KolmogorovSmirnovResult kolmogorov_smirnov(const SortedSample& base, const SortedSample& cand);

// The Kolmogorov limiting survival function Q(x) = P(K > x) =
// 2 sum_(k >= 1) (-1)^(k-1) exp(-2 k^2 x^2) (scipy.special.kolmogorov(x));
// 1 for x <= 0.
double kolmogorov_survival(double x);

// The Dvoretzky-Kiefer-Wolfowitz band half-width: with probability at least
// 1 - alpha the empirical CDF of n values lies within epsilon of the true CDF
// everywhere (Massart's constant):
//   epsilon(n, alpha) = sqrt(ln(2 / alpha) / (2 n)).
double dkw_epsilon(std::size_t n, double alpha);

struct TailComparison {
  double threshold = 0.0;  // base's nearest-rank p-quantile: the tail starts here
  // The largest |F_base(t) - F_cand(t)| over t >= threshold, and the
  // signed gap F_base(t) - F_cand(t) at that t (positive: cand's tail is
  // heavier, more of cand lies above t).
  double max_gap = 0.0;
  double signed_gap = 0.0;
  double at = 0.0;            // the t where it is largest
  double epsilon_base = 0.0;  // dkw_epsilon(n1, alpha / 2)
  double epsilon_cand = 0.0;  // dkw_epsilon(n2, alpha / 2)
  // max_gap > epsilon_base + epsilon_cand: the two tails differ beyond what
  // sampling noise explains at level alpha (both bands hold at once with
  // probability >= 1 - alpha; if the runs share a distribution, the gap
  // exceeds the sum of the bands with probability <= alpha).
  bool shifted = false;
};

// Compares the upper tails of two samples above base's p-quantile (p in
// (0, 1), e.g. 0.9) with DKW bands, each at alpha / 2 so that the two hold
// jointly at 1 - alpha. O(n1 + n2).
TailComparison compare_upper_tails(const SortedSample& base, const SortedSample& cand, double p,
                                   double alpha = 0.05);

// ---------------------------------------------------------------------------
// Quantile shift

// The shift of the nearest-rank p-quantile, cand's minus base's, with a
// distribution-free interval: each quantile's exact order-statistic interval
// (core quantile_confidence_interval) at 1 - alpha / 2, alpha = 1 -
// confidence, so both hold jointly with probability >= confidence
// (Bonferroni); the interval is [cand_low - base_high, cand_high - base_low],
// a side unbounded when a needed end is. coverage is the product of the two
// exact coverages (the samples are independent).
ShiftWithInterval quantile_shift(const SortedSample& base, const SortedSample& cand, double p,
                                 double confidence = 0.95);

// quantile_relative_shift (below) with each sample taken as worth
// n_eff <= n independent values (n / its design effect, below): each
// order-statistic interval is that of a sample of n_eff, its ranks scaled
// back to the sample's n outwards (lower: floor(L n / n_eff), upper:
// ceil(U n / n_eff)). deff <= 1 is the function below.
ShiftWithInterval quantile_relative_shift(const SortedSample& base, const SortedSample& cand, double p,
                                          double confidence, double base_deff, double cand_deff);

// The design effect of a quantile for values in time order: how much the
// dependence between neighbours widens the variance of the share of values
// above the sample's q-quantile (which a quantile's interval rests on) over
// what independent values give: with K = 20 contiguous blocks of b values,
// b var(block shares) / (s (1 - s)), s the overall share, taken at its
// one-sided 90% lower bound (divided by chi2(0.90, 19) / 19 = 1.4318, so
// that independent values are seldom widened by the estimate's noise); at
// least 1; 1 when there are fewer than 200 values or no value above.
// Kish's design effect of a cluster sample, the blocks the clusters.
double tail_design_effect(std::span<const double> values_in_time_order, double q);

// The same as a relative change: cand_q / base_q - 1, the interval
// [cand_low / base_high - 1, cand_high / base_low - 1]. Every value must be
// positive (InputError).
ShiftWithInterval quantile_relative_shift(const SortedSample& base, const SortedSample& cand, double p,
                                          double confidence = 0.95);

// ---------------------------------------------------------------------------
// Entropy and divergences of count histograms (in bits)

// Shannon entropy H = -sum p_i log2 p_i of the histogram normalised to
// probabilities (empty bins contribute 0). Counts must be finite, >= 0 and not
// all 0 (InputError). scipy.stats.entropy(counts, base=2).
double shannon_entropy_bits(std::span<const double> counts);

// H / log2(K) with K the number of all bins, empty ones included, so that a
// histogram concentrated on few of its bins scores low (1: uniform over every
// bin; 0: one bin). 0 when there is a single bin.
double normalized_entropy(std::span<const double> counts);

// The Kullback-Leibler divergence D(P || Q) = sum p_i log2(p_i / q_i) of two
// histograms over the same bins (InputError when their sizes differ), after
// additive smoothing: p_i = (c_i + pseudo_count) / (sum c + K pseudo_count),
// and q likewise. pseudo_count >= 0 (UsageError); with 0, a bin empty in Q and
// not in P makes the divergence infinite. scipy.stats.entropy(p, q, base=2)
// on the smoothed histograms.
double kl_divergence_bits(std::span<const double> p_counts, std::span<const double> q_counts,
                          double pseudo_count = 0.5);

// The Jensen-Shannon divergence (D(P || M) + D(Q || M)) / 2, M = (P + Q) / 2,
// of the smoothed histograms (as kl_divergence_bits), in bits: in [0, 1] and
// always finite. scipy.spatial.distance.jensenshannon(p, q, base=2) ** 2.
double jensen_shannon_bits(std::span<const double> p_counts, std::span<const double> q_counts,
                           double pseudo_count = 0.0);

// ---------------------------------------------------------------------------
// Sequential early stopping (MLPerf LoadGen's rule for a percentile claim)

// The claim "the p-quantile of the latency is within the bound" holds at
// `confidence` after n queries of which over_bound exceeded the bound when
//   P(Bin(n, 1 - p) <= over_bound) <= 1 - confidence,
// that is when so few over-bound queries would be unlikely were the claim
// false. (LoadGen's early stopping, with its tolerance 0; p and confidence in
// (0, 1).)
bool early_stopping_pass(std::uint64_t n, std::uint64_t over_bound, double p, double confidence);

// The smallest n for which over_bound over-bound queries still pass
// early_stopping_pass: e.g. 44 for p = 0.9 at 99% with none over, 64 with one.
std::uint64_t queries_needed(std::uint64_t over_bound, double p, double confidence);

// How many more queries the run needs, all under the bound, to pass:
// max(0, queries_needed(over_bound, p, confidence) - n).
std::uint64_t more_queries_needed(std::uint64_t n, std::uint64_t over_bound, double p, double confidence);

// The early-stopping p-quantile estimate: the smallest order statistic that
// bounds the p-quantile from above at `confidence`, the one-sided version of
// core's intervals: rank s = min{s : F(s - 1) >= confidence}, F the Bin(n, p)
// CDF (core quantile_confidence_interval(n, p, 2 confidence - 1).upper_rank).
// Equivalently, over_bound = n - s is the most over-bound queries with which
// the claim "p-quantile <= x_(s)" still passes early_stopping_pass. LoadGen
// prints the next order statistic up, x_(s + 1) ("would discard over_bound - 1
// highest latency queries"), counting the estimate itself as over the bound.
struct EarlyStoppingEstimate {
  std::optional<std::size_t> rank;  // 1-based; nullopt when n is too small
  std::uint64_t over_bound = 0;     // n - rank
  std::optional<double> value;      // x_(rank) of the sample
};
EarlyStoppingEstimate early_stopping_estimate(const SortedSample& sample, double p, double confidence);
// The same ranks without a sample.
EarlyStoppingEstimate early_stopping_rank(std::size_t n, double p, double confidence);

// For a two-sample change whose interval straddles a decision boundary (an
// end of the tolerance band, or zero): roughly how many more samples per run
// would shrink the interval enough to decide, from the 1/sqrt(n) scaling of an
// interval's half-width: the half-width becomes `distance_to_decide` (the
// distance from the estimate to the boundary) at
//   n' = n (ci_half_width / distance_to_decide)^2,
// so the estimate is n' rounded up (floating-point noise aside) minus n, 0
// when the interval already decides. An
// estimate for planning, assuming the effect stays as measured; nullopt when
// distance_to_decide is 0 (no sample size decides an estimate on the
// boundary). Throws UsageError on a negative or non-finite argument.
std::optional<std::uint64_t> more_samples_needed(std::uint64_t n, double ci_half_width,
                                                 double distance_to_decide);

}  // namespace tokenscope::analyze
