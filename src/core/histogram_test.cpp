#include "core/histogram.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/random.h"
#include "core/stats.h"

namespace tokenscope {
namespace {

TEST(Histogram, BucketsTileTheLineWithoutGaps) {
  std::uint64_t expected_lower = 0;
  for (std::size_t i = 0; i < 4000; ++i) {
    ASSERT_EQ(LogLinearHistogram::bucket_lower(i), expected_lower) << i;
    const auto upper = LogLinearHistogram::bucket_upper(i);
    ASSERT_GE(upper, expected_lower);
    ASSERT_EQ(LogLinearHistogram::bucket_index(expected_lower), i);
    ASSERT_EQ(LogLinearHistogram::bucket_index(upper), i);
    // Relative width bound: (upper - lower + 1) / lower <= 1/128 above the linear range.
    if (expected_lower >= 256) {
      ASSERT_LE((upper - expected_lower + 1) * 128, expected_lower);
    }
    expected_lower = upper + 1;
  }
  EXPECT_EQ(LogLinearHistogram::bucket_index(~0ULL), LogLinearHistogram::bucket_index(~0ULL - 1));
}

TEST(Histogram, SmallValuesAreExact) {
  LogLinearHistogram h;
  for (std::uint64_t v = 1; v <= 100; ++v) h.record(v);
  EXPECT_EQ(h.count(), 100u);
  EXPECT_DOUBLE_EQ(h.quantile(0.5), 50.0);
  EXPECT_DOUBLE_EQ(h.quantile(0.99), 99.0);
  EXPECT_DOUBLE_EQ(h.mean(), 50.5);
  EXPECT_EQ(h.min(), 1u);
  EXPECT_EQ(h.max(), 100u);
}

TEST(Histogram, QuantilesWithinRelativeErrorOfExact) {
  Rng rng(7);
  LogLinearHistogram h;
  std::vector<double> exact;
  for (int i = 0; i < 50000; ++i) {
    const auto v = static_cast<std::uint64_t>(rng.lognormal(15.0, 1.2));  // ~ms in ns
    h.record(v);
    exact.push_back(static_cast<double>(v));
  }
  std::sort(exact.begin(), exact.end());
  for (double p : {0.5, 0.9, 0.99, 0.999}) {
    const double e = nearest_rank(exact, p);
    EXPECT_NEAR(h.quantile(p), e, e * 0.004) << "p=" << p;
  }
}

TEST(Histogram, MergeEqualsRecordingEverything) {
  LogLinearHistogram a, b, all;
  Rng rng(3);
  for (int i = 0; i < 10000; ++i) {
    const std::uint64_t v = rng.uniform_int(0, 1'000'000'000);
    (i % 3 ? a : b).record(v);
    all.record(v);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.min(), all.min());
  EXPECT_EQ(a.max(), all.max());
  for (double p : {0.1, 0.5, 0.99}) EXPECT_DOUBLE_EQ(a.quantile(p), all.quantile(p));
  EXPECT_NEAR(a.mean(), all.mean(), 1e-6 * all.mean());
}

TEST(Histogram, JsonRoundTrip) {
  LogLinearHistogram h;
  for (std::uint64_t v : {3ULL, 300ULL, 30000ULL, 3000000ULL}) h.record(v, 2);
  const auto back = LogLinearHistogram::from_json(h.to_json());
  EXPECT_EQ(back.count(), 8u);
  EXPECT_DOUBLE_EQ(back.quantile(0.75), h.quantile(0.75));
  EXPECT_DOUBLE_EQ(back.mean(), h.mean());
  auto bad = h.to_json();
  bad["count"] = 9;
  EXPECT_THROW(LogLinearHistogram::from_json(bad), std::invalid_argument);
}

}  // namespace
}  // namespace tokenscope
