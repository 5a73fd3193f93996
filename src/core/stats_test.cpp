#include "core/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

namespace tokenscope {
namespace {

TEST(NearestRank, IndexIsCeilPnMinusOne) {
  EXPECT_EQ(nearest_rank_index(100, 0.5), 49u);
  EXPECT_EQ(nearest_rank_index(100, 0.99), 98u);
  EXPECT_EQ(nearest_rank_index(100, 0.999), 99u);
  EXPECT_EQ(nearest_rank_index(10, 0.95), 9u);
  EXPECT_EQ(nearest_rank_index(10, 0.9), 8u);  // 0.9*10 must not round up to 10
  EXPECT_EQ(nearest_rank_index(7, 0.0), 0u);
  EXPECT_EQ(nearest_rank_index(7, 1.0), 6u);
  EXPECT_EQ(nearest_rank_index(1, 0.5), 0u);
  EXPECT_THROW(nearest_rank_index(0, 0.5), std::invalid_argument);
}

TEST(NearestRank, ValuesFromSortedSample) {
  std::vector<double> v(1000);
  std::iota(v.begin(), v.end(), 1.0);  // 1..1000
  EXPECT_DOUBLE_EQ(nearest_rank(v, 0.5), 500.0);
  EXPECT_DOUBLE_EQ(nearest_rank(v, 0.99), 990.0);
  EXPECT_DOUBLE_EQ(nearest_rank(v, 0.999), 999.0);
  EXPECT_DOUBLE_EQ(nearest_rank(v, 0.001), 1.0);
}

struct CiCase {
  std::size_t n;
  double p;
  std::optional<std::size_t> lower, upper;
  double coverage;
};

TEST(QuantileInterval, MatchesExactBinomialComputation) {
  // Reference values computed independently from the binomial CDF with exact
  // integer binomial coefficients.
  const CiCase cases[] = {
      {100, 0.5, 40, 61, 0.9647997997822952},          {20, 0.5, 6, 15, 0.9586105346679688},
      {1000, 0.99, 983, 997, 0.9760947634979772},      {50, 0.9, 41, 50, 0.9703082890880885},
      {10, 0.99, 9, std::nullopt, 0.9957337997571686},
  };
  for (const auto& c : cases) {
    const auto ci = quantile_confidence_interval(c.n, c.p, 0.95);
    EXPECT_EQ(ci.lower_rank, c.lower) << "n=" << c.n << " p=" << c.p;
    EXPECT_EQ(ci.upper_rank, c.upper) << "n=" << c.n << " p=" << c.p;
    EXPECT_NEAR(ci.coverage, c.coverage, 1e-9) << "n=" << c.n << " p=" << c.p;
  }
}

TEST(QuantileInterval, LargeSampleIsNarrowAndCovers) {
  const auto ci = quantile_confidence_interval(10'000'000, 0.999, 0.95);
  ASSERT_TRUE(ci.lower_rank && ci.upper_rank);
  EXPECT_LT(*ci.lower_rank, 9'990'000u);
  EXPECT_GT(*ci.upper_rank, 9'990'000u);
  EXPECT_LT(*ci.upper_rank - *ci.lower_rank, 400u);
  EXPECT_GE(ci.coverage, 0.95);
}

TEST(QuantileInterval, TinySampleIsUnbounded) {
  const auto ci = quantile_confidence_interval(3, 0.5, 0.95);
  EXPECT_FALSE(ci.lower_rank);
  EXPECT_FALSE(ci.upper_rank);
  EXPECT_DOUBLE_EQ(ci.coverage, 1.0);
}

TEST(Describe, ComputesMomentsAndPercentiles) {
  std::vector<double> v = {5, 1, 4, 2, 3};
  const Distribution d = describe(v);
  EXPECT_EQ(d.count, 5u);
  EXPECT_DOUBLE_EQ(d.mean, 3.0);
  EXPECT_DOUBLE_EQ(d.std, std::sqrt(2.5));
  EXPECT_DOUBLE_EQ(d.min, 1.0);
  EXPECT_DOUBLE_EQ(d.max, 5.0);
  ASSERT_EQ(d.quantiles.size(), 5u);
  EXPECT_DOUBLE_EQ(d.quantiles[0].value, 3.0);  // p50: index ceil(2.5)-1 = 2
  EXPECT_DOUBLE_EQ(d.quantiles[4].value, 5.0);  // p99.9
  EXPECT_FALSE(d.quantiles[0].ci_low);          // n=5 cannot bound the median at 95%
}

TEST(RunningStats, MergeEqualsSequential) {
  RunningStats a, b, all;
  for (int i = 0; i < 100; ++i) {
    const double x = std::sin(i) * 10 + i;
    (i < 37 ? a : b).add(x);
    all.add(x);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_NEAR(a.mean(), all.mean(), 1e-12);
  EXPECT_NEAR(a.variance(), all.variance(), 1e-9);
  EXPECT_DOUBLE_EQ(a.min(), all.min());
  EXPECT_DOUBLE_EQ(a.max(), all.max());
}

// Values numpy prints for np.percentile(x, q) with the default method.
TEST(Stats, LinearQuantileMatchesNumpysDefault) {
  const std::vector<double> four = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(linear_quantile(four, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(linear_quantile(four, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(linear_quantile(four, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(linear_quantile(four, 0.9), 3.7);
  std::vector<double> fifty;
  for (int i = 1; i <= 50; ++i) fifty.push_back(i);
  EXPECT_DOUBLE_EQ(linear_quantile(fifty, 0.99), 49.51);  // nearest rank would give 50
  EXPECT_DOUBLE_EQ(nearest_rank(fifty, 0.99), 50.0);
  const std::vector<double> one = {7};
  EXPECT_DOUBLE_EQ(linear_quantile(one, 0.99), 7.0);
}

}  // namespace
}  // namespace tokenscope
