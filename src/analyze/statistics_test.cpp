// Expected values come from src/analyze/statistics_reference.py (python3 with
// scipy 1.10); the call behind each is named beside it. Data sets are built
// from integer arithmetic, the same in both.
#include "analyze/statistics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/stats.h"

namespace tokenscope::analyze {
namespace {

const std::vector<double> kSmallBase = {1.1, 2.3, 3.7, 4.2, 5.9};
const std::vector<double> kSmallCand = {2.8, 4.9, 6.1, 7.3, 8.0, 9.4};
const std::vector<double> kTiedBase = {1, 2, 2, 3, 3, 3, 4, 5};
const std::vector<double> kTiedCand = {2, 3, 4, 4, 5, 5, 6, 7, 7};

// (i * multiplier) mod modulus + offset, i in [0, n).
std::vector<double> modular_sample(std::size_t n, std::uint64_t multiplier, double offset,
                                   std::uint64_t modulus = 10007) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<double>((i * multiplier) % modulus) + offset;
  return v;
}

SortedSample large_base() {
  return SortedSample(modular_sample(2000, 7919, 0), "base");
}
SortedSample large_cand() {
  return SortedSample(modular_sample(2500, 104729, 300), "cand");
}

std::vector<double> range_values(int from, int to, int step = 1) {
  std::vector<double> v;
  for (int x = from; x < to; x += step) v.push_back(x);
  return v;
}

// Every pairwise difference cand_j - base_i, sorted: the brute force.
std::vector<double> all_differences(std::span<const double> base, std::span<const double> cand) {
  std::vector<double> d;
  d.reserve(base.size() * cand.size());
  for (double x : base)
    for (double y : cand) d.push_back(y - x);
  std::sort(d.begin(), d.end());
  return d;
}

// ---------------------------------------------------------------------------

TEST(SortedSample, SortsAndRejectsBadData) {
  const SortedSample s({3.0, 1.0, 2.0}, "base ttft_ms");
  EXPECT_EQ(std::vector<double>(s.values().begin(), s.values().end()), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(s.name(), "base ttft_ms");
  EXPECT_THROW(SortedSample({}, "base"), InputError);
  EXPECT_THROW(SortedSample({1.0, std::nan("")}, "base"), InputError);
  EXPECT_THROW(SortedSample({1.0, INFINITY}, "base"), InputError);
  try {
    SortedSample({}, "cand itl_ms");
    FAIL() << "no exception";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cand itl_ms"), std::string::npos) << e.what();
  }
  EXPECT_EQ(SortedSample::from_sorted({1, 2, 2, 5}).size(), 4u);
  EXPECT_THROW(SortedSample::from_sorted({2, 1}), UsageError);
  EXPECT_THROW(SortedSample::from_sorted({}), InputError);
  EXPECT_THROW(SortedSample::from_sorted({1, NAN}), InputError);
  EXPECT_THROW(log_sample(SortedSample({0.0, 1.0})), InputError);
  EXPECT_DOUBLE_EQ(log_sample(SortedSample({std::exp(2.0), 1.0})).values()[1], 2.0);
}

// ---------------------------------------------------------------------------
// Mann-Whitney U

TEST(MannWhitney, NullDistributionMatchesEnumeration) {
  // Counts of U over the C(7, 3) = 35 orderings of 3 and 4 values, by
  // enumeration (statistics_reference.py, itertools.combinations).
  const std::vector<double> counts = {1, 1, 2, 3, 4, 4, 5, 4, 4, 3, 2, 1, 1};
  for (const auto& pmf : {mann_whitney_null_pmf(3, 4), mann_whitney_null_pmf(4, 3)}) {
    ASSERT_EQ(pmf.size(), counts.size());
    for (std::size_t u = 0; u < counts.size(); ++u) EXPECT_NEAR(pmf[u] * 35.0, counts[u], 1e-12) << u;
  }
  const std::vector<double> wide = mann_whitney_null_pmf(8, 200);
  ASSERT_EQ(wide.size(), 1601u);
  EXPECT_NEAR(std::accumulate(wide.begin(), wide.end(), 0.0), 1.0, 1e-12);
  // One ordering gives U = 1, two give U = 2, and as many U = N - 1, N - 2.
  const double orderings = std::exp(std::lgamma(209.0) - std::lgamma(9.0) - std::lgamma(201.0));
  EXPECT_NEAR(wide[1] * orderings, 1.0, 1e-9);
  EXPECT_NEAR(wide[2] * orderings, 2.0, 1e-9);
  EXPECT_NEAR(wide[1599] * orderings, 1.0, 1e-9);
  EXPECT_NEAR(wide[1598] * orderings, 2.0, 1e-9);
  EXPECT_THROW(mann_whitney_null_pmf(3000, 3000), UsageError);
}

struct MwuCase {
  Alternative alternative;
  double p;
};

TEST(MannWhitney, SmallSamplesWithoutTiesUseTheExactDistribution) {
  const SortedSample base(kSmallBase, "base"), cand(kSmallCand, "cand");
  // scipy.stats.mannwhitneyu(cand, base, alternative=..., method='exact')
  for (const MwuCase& c : {MwuCase{Alternative::kTwoSided, 0.05194805194805195},
                           MwuCase{Alternative::kGreater, 0.025974025974025976},
                           MwuCase{Alternative::kLess, 0.984848484848485}}) {
    const MannWhitneyResult r = mann_whitney_u(base, cand, c.alternative);
    EXPECT_EQ(r.method, MannWhitneyMethod::kExact);
    EXPECT_EQ(r.u, 26.0);
    EXPECT_NEAR(r.p_value, c.p, 1e-14);
    EXPECT_NEAR(r.z, 2.008316044185609, 1e-12);
  }
}

TEST(MannWhitney, TiesTakeTheNormalApproximationWithTieCorrection) {
  const SortedSample base(kTiedBase, "base"), cand(kTiedCand, "cand");
  // scipy.stats.mannwhitneyu(cand, base, alternative=...) (auto: asymptotic)
  for (const MwuCase& c : {MwuCase{Alternative::kTwoSided, 0.03175895714806371},
                           MwuCase{Alternative::kGreater, 0.015879478574031856},
                           MwuCase{Alternative::kLess, 0.9876172774448116}}) {
    const MannWhitneyResult r = mann_whitney_u(base, cand, c.alternative);
    EXPECT_EQ(r.method, MannWhitneyMethod::kAsymptotic);
    EXPECT_EQ(r.u, 58.5);
    EXPECT_NEAR(r.p_value, c.p, 1e-14);
    EXPECT_NEAR(r.z, 2.196236606855304, 1e-12);  // (U - mu) / sigma, no continuity
  }
  EXPECT_THROW(mann_whitney_u(base, cand, Alternative::kTwoSided, MannWhitneyMethod::kExact), UsageError);
}

TEST(MannWhitney, LargeSamplesMatchScipy) {
  const SortedSample base = large_base(), cand = large_cand();
  // scipy.stats.mannwhitneyu(cand, base, alternative=...) (asymptotic)
  for (const MwuCase& c : {MwuCase{Alternative::kTwoSided, 0.0014271560091335142},
                           MwuCase{Alternative::kGreater, 0.0007135780045667571},
                           MwuCase{Alternative::kLess, 0.9992864789957571}}) {
    const MannWhitneyResult r = mann_whitney_u(base, cand, c.alternative);
    EXPECT_EQ(r.method, MannWhitneyMethod::kAsymptotic);
    EXPECT_EQ(r.u, 2638108.0);
    EXPECT_NEAR(r.p_value, c.p, 1e-12 * c.p);
    EXPECT_NEAR(r.z, 3.189113363665515, 1e-12);
  }
}

TEST(MannWhitney, OneSmallSampleIsExactWhateverTheOthersSize) {
  const SortedSample few({24.5, 33.5, 38.5}, "base");
  const SortedSample odd(range_values(1, 41, 2), "cand");  // 1, 3, ..., 39
  // scipy.stats.mannwhitneyu(cand, base, alternative=..., method='exact')
  for (const MwuCase& c : {MwuCase{Alternative::kTwoSided, 0.11518915866741952},
                           MwuCase{Alternative::kGreater, 0.9531338226990401},
                           MwuCase{Alternative::kLess, 0.05759457933370976}}) {
    const MannWhitneyResult r = mann_whitney_u(few, odd, c.alternative);
    EXPECT_EQ(r.method, MannWhitneyMethod::kExact);
    EXPECT_EQ(r.u, 12.0);
    EXPECT_NEAR(r.p_value, c.p, 1e-13);
  }
  const SortedSample eight({12.5, 40.5, 77.5, 101.5, 130.5, 150.5, 170.5, 199.5}, "base");
  const SortedSample wide(range_values(0, 200), "cand");
  for (const MwuCase& c : {MwuCase{Alternative::kTwoSided, 0.6106303203640947},
                           MwuCase{Alternative::kGreater, 0.6967513289309767},
                           MwuCase{Alternative::kLess, 0.30531516018204735}}) {
    const MannWhitneyResult r = mann_whitney_u(eight, wide, c.alternative);
    EXPECT_EQ(r.method, MannWhitneyMethod::kExact);
    EXPECT_EQ(r.u, 713.0);
    EXPECT_NEAR(r.p_value, c.p, 1e-12);
    EXPECT_NEAR(r.z, -0.5211667991496437, 1e-12);
  }
}

TEST(MannWhitney, ExactOnRequestForLargerSamples) {
  const SortedSample base(modular_sample(30, 7919, 0), "base");
  const SortedSample cand(modular_sample(30, 104729, 2000.5), "cand");
  // scipy.stats.mannwhitneyu(cand, base, alternative=..., method='exact')
  for (const MwuCase& c : {MwuCase{Alternative::kTwoSided, 0.03712505992895078},
                           MwuCase{Alternative::kGreater, 0.01856252996447539},
                           MwuCase{Alternative::kLess, 0.9821164373496545}}) {
    const MannWhitneyResult r = mann_whitney_u(base, cand, c.alternative, MannWhitneyMethod::kExact);
    EXPECT_EQ(r.method, MannWhitneyMethod::kExact);
    EXPECT_EQ(r.u, 591.0);
    EXPECT_NEAR(r.p_value, c.p, 1e-13);
  }
}

TEST(MannWhitney, IdenticalSamplesAndDegenerateCases) {
  const SortedSample same({5, 5, 5, 5}, "base"), also({5, 5, 5}, "cand");
  const MannWhitneyResult r = mann_whitney_u(same, also);
  EXPECT_EQ(r.u, 6.0);
  EXPECT_EQ(r.z, 0.0);
  EXPECT_EQ(r.p_value, 1.0);
  // Asymptotic on request, for a sample scipy would test exactly.
  const SortedSample base(kSmallBase, "base"), cand(kSmallCand, "cand");
  EXPECT_EQ(mann_whitney_u(base, cand, Alternative::kTwoSided, MannWhitneyMethod::kAsymptotic).method,
            MannWhitneyMethod::kAsymptotic);
  EXPECT_TRUE(mann_whitney_exact_feasible(8, 200));
  EXPECT_FALSE(mann_whitney_exact_feasible(8, 1'000'000));
  EXPECT_FALSE(mann_whitney_exact_feasible(1000, 1000));
}

// ---------------------------------------------------------------------------
// k-th pairwise difference and Hodges-Lehmann

TEST(KthPairwiseDifference, EqualsBruteForceForEveryRankOfSmallSamples) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 100.0);
  for (std::size_t n1 : {1u, 2u, 7u, 30u}) {
    for (std::size_t n2 : {1u, 5u, 41u}) {
      std::vector<double> x(n1), y(n2);
      for (double& v : x) v = u(rng);
      for (double& v : y) v = std::round(u(rng));  // some ties among cand
      std::sort(x.begin(), x.end());
      std::sort(y.begin(), y.end());
      const std::vector<double> all = all_differences(x, y);
      for (std::uint64_t k = 1; k <= all.size(); ++k)
        ASSERT_EQ(kth_pairwise_difference(x, y, k), all[k - 1]) << n1 << "x" << n2 << " k=" << k;
    }
  }
  const std::vector<double> one = {1.0};
  EXPECT_THROW(kth_pairwise_difference(one, one, 0), UsageError);
  EXPECT_THROW(kth_pairwise_difference(one, one, 2), UsageError);
  EXPECT_THROW(kth_pairwise_difference({}, one, 1), UsageError);
}

TEST(KthPairwiseDifference, EqualsBruteForcePastTheMaterialiseThreshold) {
  // 1500 x 2000 = 3,000,000 differences: the selection runs its sampling
  // rounds before it materialises what is left.
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> ln(3.0, 0.7);
  std::vector<double> x(1500), y(2000);
  for (double& v : x) v = ln(rng);
  for (double& v : y) v = ln(rng) * 1.1;
  std::sort(x.begin(), x.end());
  std::sort(y.begin(), y.end());
  const std::vector<double> all = all_differences(x, y);
  for (std::uint64_t k : {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{77'777}, std::uint64_t{1'500'000},
                          std::uint64_t{1'500'001}, std::uint64_t{2'999'999}, std::uint64_t{3'000'000}})
    EXPECT_EQ(kth_pairwise_difference(x, y, k), all[k - 1]) << "k=" << k;
}

TEST(KthPairwiseDifference, EqualsBruteForceWithHeavyTies) {
  // Values 0..9 only: about 10% of the 1,000,000 differences share each
  // value, so the k-th lies inside a large group of equal pairs.
  std::vector<double> x = modular_sample(1000, 7, 0, 10), y = modular_sample(1000, 3, 0, 10);
  std::sort(x.begin(), x.end());
  std::sort(y.begin(), y.end());
  const std::vector<double> all = all_differences(x, y);
  for (std::uint64_t k :
       {std::uint64_t{1}, std::uint64_t{10'000}, std::uint64_t{10'001}, std::uint64_t{500'000},
        std::uint64_t{500'001}, std::uint64_t{999'000}, std::uint64_t{1'000'000}})
    EXPECT_EQ(kth_pairwise_difference(x, y, k), all[k - 1]) << "k=" << k;
}

TEST(KthPairwiseDifference, CountsConfirmTheRankOnLargeSamples) {
  // 100,000 x 100,000 = 10^10 differences (integers, so every difference is
  // exact): the k-th value v must have fewer than k differences below it and
  // at least k at or below it, counted independently by binary search.
  const SortedSample base(modular_sample(100'000, 7919, 0, 100'003), "base");
  const SortedSample cand(modular_sample(100'000, 104'729, 50, 100'003), "cand");
  const auto x = base.values(), y = cand.values();
  for (std::uint64_t k : {std::uint64_t{1}, std::uint64_t{123'456'789}, std::uint64_t{5'000'000'000},
                          std::uint64_t{9'999'999'999}}) {
    const double v = kth_pairwise_difference(x, y, k);
    std::uint64_t below = 0, at_or_below = 0;
    for (double xi : x) {
      below += static_cast<std::uint64_t>(std::lower_bound(y.begin(), y.end(), xi + v) - y.begin());
      at_or_below += static_cast<std::uint64_t>(std::upper_bound(y.begin(), y.end(), xi + v) - y.begin());
    }
    EXPECT_LT(below, k) << "k=" << k;
    EXPECT_GE(at_or_below, k) << "k=" << k;
  }
}

TEST(HodgesLehmann, SmallSamplesMatchTheExactInterval) {
  const SortedSample base(kSmallBase, "base"), cand(kSmallCand, "cand");
  // statistics_reference.py: numpy.median of the 30 differences; k from the
  // enumerated null distribution of U (k = 4 at 95%, 6 at 90%).
  const ShiftWithInterval r = hodges_lehmann_shift(base, cand, 0.95);
  EXPECT_DOUBLE_EQ(r.estimate, 3.3);
  EXPECT_EQ(r.ci_low, -0.9000000000000004);  // the 4th smallest difference
  EXPECT_EQ(r.ci_high, 6.199999999999999);   // the 27th
  EXPECT_NEAR(r.coverage, 0.9696969696969697, 1e-12);
  const ShiftWithInterval r90 = hodges_lehmann_shift(base, cand, 0.90);
  EXPECT_DOUBLE_EQ(r90.estimate, 3.3);
  EXPECT_EQ(r90.ci_low, 0.5);
  EXPECT_EQ(r90.ci_high, 5.7);
  EXPECT_NEAR(r90.coverage, 0.9177489177489178, 1e-12);
}

TEST(HodgesLehmann, TooSmallSamplesLeaveTheIntervalUnbounded) {
  // 2 and 2 values: P(U = 0) = 1/6 > 0.025, so no rank bounds the interval.
  const ShiftWithInterval r = hodges_lehmann_shift(SortedSample({1, 2}), SortedSample({4, 7}), 0.95);
  EXPECT_EQ(r.estimate, 4.0);  // median of 2, 3, 5, 6
  EXPECT_FALSE(r.ci_low.has_value());
  EXPECT_FALSE(r.ci_high.has_value());
  EXPECT_EQ(r.coverage, 1.0);
  EXPECT_THROW(hodges_lehmann_shift(SortedSample({1, 2}), SortedSample({4, 7}), 1.0), UsageError);
}

TEST(HodgesLehmann, LargeSamplesUseTheNormalApproximationRanks) {
  // k = floor(N/2 + 1/2 - norm.ppf(0.975) sqrt(n1 n2 (N+1) / 12)) = 2415122;
  // values by numpy on the materialised differences.
  const ShiftWithInterval r = hodges_lehmann_shift(large_base(), large_cand(), 0.95);
  EXPECT_EQ(r.estimate, 280.0);
  EXPECT_EQ(r.ci_low, 109.0);
  EXPECT_EQ(r.ci_high, 452.0);
  EXPECT_NEAR(r.coverage, 0.9500003794658999, 1e-12);
}

TEST(HodgesLehmann, AKnownShiftAtAMillionValues) {
  // cand = base + 3 exactly (integers): the differences are symmetric about
  // 3, so the estimate is exactly 3 and the interval contains it.
  std::vector<double> base_values = modular_sample(1'000'000, 7919, 0, 1'000'003);
  std::vector<double> cand_values(base_values.rbegin(), base_values.rend());
  for (double& v : cand_values) v += 3.0;
  const SortedSample base(std::move(base_values), "base");
  const SortedSample cand(std::move(cand_values), "cand");
  ASSERT_EQ(cand.values()[0], base.values()[0] + 3.0);
  const ShiftWithInterval r = hodges_lehmann_shift(base, cand, 0.95);
  EXPECT_EQ(r.estimate, 3.0);
  ASSERT_TRUE(r.ci_low && r.ci_high);
  EXPECT_LT(*r.ci_low, 3.0);
  EXPECT_GT(*r.ci_high, 3.0);
  // The interval is narrow: the spread of the data is 10^6, the interval
  // about 2 z sigma_HL ~ 2 * 1.96 * 10^6 / sqrt(12 * 10^6 / 2) ~ 1600.
  EXPECT_LT(*r.ci_high - *r.ci_low, 2000.0);
  EXPECT_NEAR(r.coverage, 0.95, 1e-5);
}

TEST(HodgesLehmann, RelativeShiftIsTheShiftOfLogarithms) {
  const SortedSample base(kSmallBase, "base"), cand(kSmallCand, "cand");
  // numpy.expm1 of the median and of the 4th and 27th log differences.
  const ShiftWithInterval r = hodges_lehmann_relative_shift(base, cand, 0.95);
  EXPECT_NEAR(r.estimate, 0.9385674499598299, 1e-13);
  EXPECT_NEAR(*r.ci_low, -0.16949152542372878, 1e-13);
  EXPECT_NEAR(*r.ci_high, 4.545454545454544, 1e-12);
  EXPECT_NEAR(r.coverage, 0.9696969696969697, 1e-12);
  // cand = base * 2 for powers of two: every ratio's log is exact; +100%.
  const ShiftWithInterval doubled = hodges_lehmann_relative_shift(SortedSample({1, 2, 4, 8, 16, 32, 64}),
                                                                  SortedSample({2, 4, 8, 16, 32, 64, 128}));
  EXPECT_NEAR(doubled.estimate, 1.0, 1e-15);
  EXPECT_THROW(hodges_lehmann_relative_shift(SortedSample({-1, 2}), cand), InputError);
}

// ---------------------------------------------------------------------------
// Kolmogorov-Smirnov, DKW

struct KsCase {
  std::vector<double> base, cand;
  double d, d_plus, d_plus_swapped, p, p_plus;
};

TEST(KolmogorovSmirnov, StatisticsMatchScipyAndPValuesTheAsymptoticLimit) {
  // d, d_plus: scipy.stats.ks_2samp(base, cand[, alternative='greater']);
  // d_plus_swapped: ks_2samp(cand, base, alternative='greater');
  // p: scipy.stats.kstwobign.sf(sqrt(n1 n2 / (n1 + n2)) d);
  // p_plus: exp(-2 n1 n2 / (n1 + n2) d_plus^2).
  const std::vector<KsCase> cases = {
      {kSmallBase, kSmallCand, 0.6666666666666666, 0.6666666666666666, 0.0, 0.17696740833316593,
       0.08854517331628882},
      {kTiedBase, kTiedCand, 0.5277777777777778, 0.5277777777777778, 0.0, 0.18877991988066675,
       0.09446960615709969},
      {modular_sample(2000, 7919, 0), modular_sample(2500, 104729, 300), 0.0303, 0.0303, 0.0,
       0.25943416909359746, 0.1300027077366511},
      {range_values(1, 11),
       {0.5, 0.6, 4.5, 5.5, 6.5, 7.5, 20, 21, 22, 23},
       0.4,
       0.4,
       0.2,
       0.40047103620845764,
       0.20189651799465536},
  };
  for (const KsCase& c : cases) {
    const SortedSample base(c.base, "base"), cand(c.cand, "cand");
    const KolmogorovSmirnovResult r = kolmogorov_smirnov(base, cand);
    EXPECT_DOUBLE_EQ(r.d, c.d);
    EXPECT_DOUBLE_EQ(r.d_plus, c.d_plus);
    EXPECT_NEAR(r.p_value, c.p, 1e-12);
    EXPECT_NEAR(r.p_value_plus, c.p_plus, 1e-12);
    EXPECT_DOUBLE_EQ(kolmogorov_smirnov(cand, base).d_plus, c.d_plus_swapped);
  }
  const KolmogorovSmirnovResult same = kolmogorov_smirnov(SortedSample({1, 2, 3}), SortedSample({3, 2, 1}));
  EXPECT_EQ(same.d, 0.0);
  EXPECT_EQ(same.p_value, 1.0);
  EXPECT_EQ(same.p_value_plus, 1.0);
}

TEST(KolmogorovSmirnov, SurvivalFunctionMatchesScipy) {
  // scipy.special.kolmogorov(x)
  const std::vector<std::pair<double, double>> cases = {
      {0.3, 0.9999906941986655},  {0.5, 0.9639452436648751},     {0.8, 0.5441424115741981},
      {1.0, 0.26999967167735456}, {1.3627, 0.04876366103032284}, {2.0, 0.0006709252557796953}};
  for (const auto& [x, q] : cases) EXPECT_NEAR(kolmogorov_survival(x), q, 1e-14) << x;
  EXPECT_EQ(kolmogorov_survival(0.0), 1.0);
  EXPECT_EQ(kolmogorov_survival(-1.0), 1.0);
  EXPECT_LT(kolmogorov_survival(6.0), 1e-30);
}

TEST(Dkw, EpsilonIsMassartsBound) {
  EXPECT_NEAR(dkw_epsilon(100, 0.05), 0.13581015157406195, 1e-15);  // sqrt(log(40) / 200)
  EXPECT_NEAR(dkw_epsilon(1000, 0.025), 0.04680826120821986, 1e-15);
  EXPECT_THROW(dkw_epsilon(0, 0.05), UsageError);
  EXPECT_THROW(dkw_epsilon(10, 0.0), UsageError);
  EXPECT_THROW(dkw_epsilon(10, std::nan("")), UsageError);
}

TEST(Dkw, UpperTailComparison) {
  // Base 1..1000; cand the same up to 900, then 100 values from `start` by
  // tens (statistics_reference.py, numpy.searchsorted on the tail points).
  const SortedSample base(range_values(1, 1001), "base");
  const auto cand_with_tail_from = [](int start) {
    std::vector<double> v = range_values(1, 901);
    for (int k = 0; k < 100; ++k) v.push_back(start + 10 * k);
    return SortedSample(std::move(v), "cand");
  };
  // From 905: at 1000, 91% of cand against all of base: a gap of 0.09, within
  // the two bands (2 x 0.0468).
  const TailComparison within = compare_upper_tails(base, cand_with_tail_from(905), 0.9, 0.05);
  EXPECT_EQ(within.threshold, 900.0);
  EXPECT_NEAR(within.max_gap, 0.09, 1e-15);
  EXPECT_NEAR(within.signed_gap, 0.09, 1e-15);
  EXPECT_EQ(within.at, 1000.0);
  EXPECT_NEAR(within.epsilon_base, 0.04680826120821986, 1e-15);
  EXPECT_NEAR(within.epsilon_cand, 0.04680826120821986, 1e-15);
  EXPECT_FALSE(within.shifted);
  // From 1001: no cand value in (900, 1000]: a gap of 0.1, beyond the bands.
  const TailComparison beyond = compare_upper_tails(base, cand_with_tail_from(1001), 0.9, 0.05);
  EXPECT_NEAR(beyond.max_gap, 0.1, 1e-15);
  EXPECT_EQ(beyond.at, 1000.0);
  EXPECT_TRUE(beyond.shifted);
  // Reversed, the gap is the same size with the other sign (cand lighter).
  const TailComparison reversed = compare_upper_tails(cand_with_tail_from(1001), base, 0.9, 0.05);
  EXPECT_LT(reversed.signed_gap, 0.0);
  EXPECT_THROW(compare_upper_tails(base, base, 1.0, 0.05), UsageError);
}

// ---------------------------------------------------------------------------
// Quantile shift

TEST(QuantileShift, DifferenceOfNearestRanksWithBonferroniInterval) {
  const SortedSample base(range_values(1, 1001), "base");
  std::vector<double> tail = range_values(1, 901);
  for (int k = 0; k < 100; ++k) tail.push_back(905 + 10 * k);
  const SortedSample cand(std::move(tail), "cand");
  // Ranks from scipy.stats.binom.cdf as core's interval defines them, each at
  // 97.5%: p90 (878, 922), p99 (982, 997) for n = 1000.
  const ShiftWithInterval p90 = quantile_shift(base, cand, 0.9, 0.95);
  EXPECT_EQ(p90.estimate, 0.0);
  EXPECT_EQ(p90.ci_low, -44.0);
  EXPECT_EQ(p90.ci_high, 237.0);
  EXPECT_NEAR(p90.coverage, 0.9599500227526412, 1e-9);
  const ShiftWithInterval p99 = quantile_shift(base, cand, 0.99, 0.95);
  EXPECT_EQ(p99.estimate, 805.0);
  EXPECT_EQ(p99.ci_low, 718.0);
  EXPECT_EQ(p99.ci_high, 883.0);
  EXPECT_NEAR(p99.coverage, 0.9663329415046991, 1e-9);
  const ShiftWithInterval rel = quantile_relative_shift(base, cand, 0.99, 0.95);
  EXPECT_NEAR(rel.estimate, 0.8131313131313131, 1e-15);
  EXPECT_NEAR(*rel.ci_low, 0.720160481444333, 1e-15);
  EXPECT_NEAR(*rel.ci_high, 0.8991853360488797, 1e-15);
  const ShiftWithInterval rel90 = quantile_relative_shift(base, cand, 0.9, 0.95);
  EXPECT_NEAR(*rel90.ci_low, -0.04772234273318876, 1e-15);
  EXPECT_NEAR(*rel90.ci_high, 0.26993166287015935, 1e-15);
}

TEST(QuantileShift, SmallSamplesLeaveSidesUnbounded) {
  // n = 20 at p99, 97.5% each: the lower rank is 18, no upper rank.
  const SortedSample base(range_values(1, 21), "base"), cand(range_values(11, 31), "cand");
  const ShiftWithInterval r = quantile_shift(base, cand, 0.99, 0.95);
  EXPECT_EQ(r.estimate, 10.0);
  EXPECT_FALSE(r.ci_low.has_value());   // needs base's upper end
  EXPECT_FALSE(r.ci_high.has_value());  // needs cand's upper end
  EXPECT_THROW(quantile_shift(base, cand, 0.0, 0.95), UsageError);
  EXPECT_THROW(quantile_relative_shift(SortedSample({0, 1}), cand, 0.5, 0.95), InputError);
}

// ---------------------------------------------------------------------------
// Entropy and divergences

TEST(Entropy, ShannonAndNormalised) {
  const std::vector<double> h = {10, 20, 30, 40};
  EXPECT_NEAR(shannon_entropy_bits(h), 1.8464393446710157, 1e-15);  // scipy.stats.entropy(h, base=2)
  EXPECT_NEAR(normalized_entropy(h), 0.9232196723355078, 1e-15);    // / log2(4)
  // Two of eight bins used, evenly: 1 bit of log2(8) = 3.
  EXPECT_NEAR(normalized_entropy(std::vector<double>{0, 5, 0, 5, 0, 0, 0, 0}), 1.0 / 3.0, 1e-15);
  EXPECT_EQ(shannon_entropy_bits(std::vector<double>{0, 7, 0}), 0.0);
  EXPECT_EQ(normalized_entropy(std::vector<double>{3}), 0.0);
  EXPECT_NEAR(normalized_entropy(std::vector<double>(16, 2.0)), 1.0, 1e-15);
  EXPECT_THROW(shannon_entropy_bits(std::vector<double>{}), InputError);
  EXPECT_THROW(shannon_entropy_bits(std::vector<double>{0, 0}), InputError);
  EXPECT_THROW(shannon_entropy_bits(std::vector<double>{1, -1}), InputError);
  EXPECT_THROW(shannon_entropy_bits(std::vector<double>{1, std::nan("")}), InputError);
}

TEST(Entropy, KullbackLeiblerAndJensenShannonWithSmoothing) {
  const std::vector<double> p = {10, 0, 5, 5}, q = {5, 5, 5, 5};
  // scipy.stats.entropy(ps, qs, base=2) and
  // scipy.spatial.distance.jensenshannon(ps, qs, base=2) ** 2 on
  // ps = (p + a) / (sum p + 4 a), qs likewise.
  EXPECT_NEAR(kl_divergence_bits(p, q, 0.0), 0.5, 1e-15);
  EXPECT_NEAR(kl_divergence_bits(p, q, 0.5), 0.36661750609848703, 1e-15);
  EXPECT_NEAR(kl_divergence_bits(p, q, 1.0), 0.29309157484818316, 1e-15);
  EXPECT_NEAR(jensen_shannon_bits(p, q, 0.0), 0.15563906222956644, 1e-15);
  EXPECT_NEAR(jensen_shannon_bits(p, q, 0.5), 0.10598422136046175, 1e-15);
  EXPECT_NEAR(jensen_shannon_bits(p, q, 1.0), 0.08197802204177389, 1e-15);
  // Q has mass where P has none: infinite without smoothing.
  EXPECT_EQ(kl_divergence_bits(q, p, 0.0), INFINITY);
  EXPECT_EQ(kl_divergence_bits(p, p, 0.5), 0.0);
  EXPECT_NEAR(jensen_shannon_bits(std::vector<double>{1, 0}, std::vector<double>{0, 1}, 0.0), 1.0, 1e-15);
  EXPECT_THROW(kl_divergence_bits(p, std::vector<double>{1, 2, 3}, 0.5), InputError);
  EXPECT_THROW(kl_divergence_bits(p, q, -0.5), UsageError);
  EXPECT_THROW(jensen_shannon_bits(p, std::vector<double>{0, 0, 0, 0}, 0.5), InputError);
}

// ---------------------------------------------------------------------------
// Early stopping

TEST(EarlyStopping, QueriesNeededMatchLoadGen) {
  // LoadGen: for p90 at 99% with no query over the bound, 44 queries; with
  // one, 64 (its "Processed at least 64 queries" line). Others from the
  // smallest n with scipy.stats.binom.cdf(t, n, 1 - p) <= 1 - c.
  EXPECT_EQ(queries_needed(0, 0.9, 0.99), 44u);
  EXPECT_EQ(queries_needed(1, 0.9, 0.99), 64u);
  EXPECT_EQ(queries_needed(10, 0.9, 0.99), 197u);
  EXPECT_EQ(queries_needed(0, 0.99, 0.99), 459u);
  EXPECT_EQ(queries_needed(5, 0.99, 0.95), 1049u);
  EXPECT_EQ(queries_needed(172, 0.9, 0.99), 2034u);
  EXPECT_EQ(queries_needed(173, 0.9, 0.99), 2045u);
  EXPECT_EQ(queries_needed(174, 0.9, 0.99), 2056u);
  // binom.cdf(1, 64, 0.1) = 0.00956 <= 0.01 < binom.cdf(1, 63, 0.1) = 0.01048
  EXPECT_TRUE(early_stopping_pass(64, 1, 0.9, 0.99));
  EXPECT_FALSE(early_stopping_pass(63, 1, 0.9, 0.99));
  EXPECT_FALSE(early_stopping_pass(5, 5, 0.9, 0.99));
  EXPECT_EQ(more_queries_needed(50, 1, 0.9, 0.99), 14u);
  EXPECT_EQ(more_queries_needed(100, 1, 0.9, 0.99), 0u);
  EXPECT_THROW(early_stopping_pass(5, 6, 0.9, 0.99), UsageError);
  EXPECT_THROW(queries_needed(1, 1.0, 0.99), UsageError);
  EXPECT_THROW(queries_needed(1, 0.9, 0.0), UsageError);
}

TEST(EarlyStopping, EstimateRanksMatchLoadGensPublishedRuns) {
  // LoadGen summaries for p90 at 99%: n = 2048 "would discard 172 highest
  // latency queries", 2116 -> 178, 2145 -> 181, 7469 -> 685; it discards
  // over_bound - 1. Ranks: min{s : scipy.stats.binom.cdf(s - 1, n, p) >= c}.
  struct Case {
    std::size_t n;
    double p;
    std::size_t rank;
  };
  for (const Case& c : {Case{2048, 0.9, 1875}, Case{2116, 0.9, 1937}, Case{2145, 0.9, 1963},
                        Case{7469, 0.9, 6783}, Case{2048, 0.99, 2038}, Case{100, 0.5, 63}}) {
    const EarlyStoppingEstimate e = early_stopping_rank(c.n, c.p, 0.99);
    ASSERT_TRUE(e.rank.has_value());
    EXPECT_EQ(*e.rank, c.rank) << c.n;
    EXPECT_EQ(e.over_bound, c.n - c.rank);
    // Consistent with the pass rule and with core's two-sided intervals.
    EXPECT_TRUE(early_stopping_pass(c.n, e.over_bound, c.p, 0.99));
    EXPECT_FALSE(early_stopping_pass(c.n, e.over_bound + 1, c.p, 0.99));
    EXPECT_EQ(quantile_confidence_interval(c.n, c.p, 2 * 0.99 - 1).upper_rank, e.rank);
  }
  EXPECT_EQ(early_stopping_rank(2048, 0.9, 0.99).over_bound, 173u);  // LoadGen discards 172
  EXPECT_EQ(early_stopping_rank(7469, 0.9, 0.99).over_bound, 686u);  // 685
  // 43 queries cannot bound p90 at 99% (44 are needed with none over).
  EXPECT_FALSE(early_stopping_rank(43, 0.9, 0.99).rank.has_value());
  EXPECT_EQ(early_stopping_rank(44, 0.9, 0.99).rank, 44u);
  const EarlyStoppingEstimate e = early_stopping_estimate(SortedSample(range_values(1, 2049)), 0.9, 0.99);
  EXPECT_EQ(e.value, 1875.0);
}

TEST(EarlyStopping, MoreSamplesNeededFromTheSquareRootScaling) {
  // n (half / distance)^2 - n
  EXPECT_EQ(more_samples_needed(1000, 2.0, 1.0), 3000u);
  EXPECT_EQ(more_samples_needed(1000, 1.5, 1.0), 1250u);
  // 1000 * 1.1^2 is 1210 up to rounding: no extra sample for the noise.
  EXPECT_EQ(more_samples_needed(1000, 1.1, 1.0), 210u);
  EXPECT_EQ(more_samples_needed(1000, 1.0, 2.0), 0u);
  EXPECT_EQ(more_samples_needed(1000, 1.0, 0.0), std::nullopt);
  EXPECT_THROW(more_samples_needed(1000, -1.0, 1.0), UsageError);
  EXPECT_THROW(more_samples_needed(1000, 1.0, std::nan("")), UsageError);
}

}  // namespace
}  // namespace tokenscope::analyze
