#include "probe/probe_stats.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tokenscope::probe {
namespace {

TEST(ProbeStats, MedianAndExactIntervalOfTen) {
  const std::vector<double> v{10, 1, 9, 2, 8, 3, 7, 4, 6, 5};
  const auto m = median_ci(v);
  EXPECT_EQ(m.n, 10u);
  EXPECT_DOUBLE_EQ(m.median, 5.0);  // nearest rank: index ceil(0.5*10)-1 = 4
  // Bin(10, 0.5): the 95% order-statistic interval is [x(2), x(9)].
  ASSERT_TRUE(m.ci_low && m.ci_high);
  EXPECT_DOUBLE_EQ(*m.ci_low, 2.0);
  EXPECT_DOUBLE_EQ(*m.ci_high, 9.0);
  EXPECT_DOUBLE_EQ(m.min, 1.0);
  EXPECT_DOUBLE_EQ(m.max, 10.0);
  EXPECT_DOUBLE_EQ(m.mean, 5.5);
  EXPECT_EQ(m.values, v);  // every repetition kept, in order
  EXPECT_EQ(to_json(m)["values"].size(), 10u);
}

TEST(ProbeStats, TooFewRepetitionsLeaveTheIntervalOpen) {
  const std::vector<double> v{3, 1, 2};
  const auto m = median_ci(v);
  EXPECT_DOUBLE_EQ(m.median, 2.0);
  EXPECT_FALSE(m.ci_low && m.ci_high);
  EXPECT_EQ(format_ci(m), "2.00 [n/a]");
  EXPECT_EQ(median_ci(std::vector<double>{}).n, 0u);
}

TEST(ProbeStats, RatioIsPerRepetition) {
  const std::vector<double> a{2, 4, 6, 8, 10, 12}, b{1, 2, 3, 4, 5, 0};
  const auto r = ratio_ci(a, b);  // the zero denominator is skipped
  EXPECT_EQ(r.n, 5u);
  EXPECT_DOUBLE_EQ(r.median, 2.0);
  EXPECT_THROW(ratio_ci(a, std::vector<double>{1}), std::invalid_argument);
}

TEST(ProbeStats, LatencySummaryNearestRank) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  const auto s = summarize_latencies(v);
  EXPECT_DOUBLE_EQ(s.p50, 50);
  EXPECT_DOUBLE_EQ(s.p90, 90);
  EXPECT_DOUBLE_EQ(s.p99, 99);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_DOUBLE_EQ(s.max, 100);
}

}  // namespace
}  // namespace tokenscope::probe
