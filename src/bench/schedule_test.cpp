// Stage plans: parsing, and the arrivals of each stage at its own rate.
#include "bench/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tokenscope::bench {
namespace {

TEST(Stages, Parse) {
  const auto s = parse_stages("5@30,10@2.5s,0@1", "--stages");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].value, 5);
  EXPECT_EQ(s[0].duration_s, 30);
  EXPECT_EQ(s[1].duration_s, 2.5);
  EXPECT_EQ(s[2].value, 0);
  EXPECT_EQ(total_duration_s(s), 33.5);
  for (const char* bad : {"", "5", "5@", "@3", "x@3", "5@0", "-1@3", "5@3,"}) {
    try {
      parse_stages(bad, "--stages");
      ADD_FAILURE() << bad;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--stages"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse_number_list("1,2.5", "--sweep-rates"), (std::vector<double>{1, 2.5}));
  EXPECT_THROW(parse_number_list("1,0", "--sweep-rates"), UsageError);
}

TEST(Stages, EachStageRunsAtItsOwnRate) {
  workload::ArrivalSettings a;
  a.kind = workload::ArrivalKind::kConstant;
  Rng rng(1);
  const auto t = stage_arrivals(parse_stages("10@2,0@1,100@1", "--stages"), a, rng);
  // Constant: 20 in [0, 2 s), none in the pause, 100 in [3 s, 4 s).
  ASSERT_EQ(t.size(), 120u);
  EXPECT_EQ(t[0], 0);
  EXPECT_EQ(t[19], 1'900'000'000);
  EXPECT_EQ(t[20], 3'000'000'000);
  EXPECT_EQ(t[119], 3'990'000'000);
  EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
}

TEST(Stages, PoissonStageCountsMatchTheirRates) {
  workload::ArrivalSettings a;  // poisson
  Rng rng(7);
  const auto t = stage_arrivals(parse_stages("50@100,200@100", "--stages"), a, rng);
  std::size_t first = 0;
  for (Nanos x : t) first += x < 100 * kNanosPerSecond ? 1 : 0;
  const std::size_t second = t.size() - first;
  // Expected 5,000 and 20,000; four standard deviations either side.
  EXPECT_NEAR(static_cast<double>(first), 5000, 4 * std::sqrt(5000.0));
  EXPECT_NEAR(static_cast<double>(second), 20000, 4 * std::sqrt(20000.0));
}

}  // namespace
}  // namespace tokenscope::bench
