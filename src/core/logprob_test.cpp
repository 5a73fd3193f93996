#include "core/logprob.h"

#include "core/boxed.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

namespace tokenscope {
namespace {

TEST(LogprobHistogram, BinsAreQuarterNatsDownToMinusTwentyThenUnderflow) {
  EXPECT_EQ(LogprobHistogram::bin_of(0.0), 0u);
  EXPECT_EQ(LogprobHistogram::bin_of(-0.0), 0u);
  EXPECT_EQ(LogprobHistogram::bin_of(0.3), 0u);  // a positive rounding counts as 0
  EXPECT_EQ(LogprobHistogram::bin_of(-0.1), 0u);
  EXPECT_EQ(LogprobHistogram::bin_of(-0.25), 1u);  // -logprob in [0.25, 0.5)
  EXPECT_EQ(LogprobHistogram::bin_of(-0.4999), 1u);
  EXPECT_EQ(LogprobHistogram::bin_of(-0.5), 2u);
  EXPECT_EQ(LogprobHistogram::bin_of(-19.99), 79u);
  EXPECT_EQ(LogprobHistogram::bin_of(-20.0), 80u);
  EXPECT_EQ(LogprobHistogram::bin_of(-9999.0), 80u);
  EXPECT_EQ(LogprobHistogram::bin_of(-std::numeric_limits<double>::infinity()), 80u);
  EXPECT_EQ(LogprobHistogram::bin_of(std::nan("")), LogprobHistogram::kBins);
  EXPECT_EQ(LogprobHistogram::bin_upper(0), 0.0);
  EXPECT_FALSE(std::signbit(LogprobHistogram::bin_upper(0)));
  EXPECT_EQ(LogprobHistogram::bin_lower(0), -0.25);
  EXPECT_EQ(LogprobHistogram::bin_upper(1), -0.25);
  EXPECT_EQ(LogprobHistogram::bin_lower(79), -20.0);
  EXPECT_EQ(LogprobHistogram::bin_upper(80), -20.0);
  EXPECT_EQ(LogprobHistogram::bin_lower(80), -std::numeric_limits<double>::infinity());
  // Each bin's edges round-trip through bin_of: the upper edge is in the bin,
  // the lower edge in the next.
  for (std::size_t i = 1; i < LogprobHistogram::kRangeBins; ++i) {
    EXPECT_EQ(LogprobHistogram::bin_of(LogprobHistogram::bin_upper(i)), i);
    EXPECT_EQ(LogprobHistogram::bin_of(LogprobHistogram::bin_lower(i)), i + 1);
  }
}

TEST(LogprobHistogram, CountsSumsWithTheFloorAndWritesTrimmedBins) {
  LogprobHistogram h;
  EXPECT_TRUE(std::isnan(h.mean()));
  for (double lp : {-0.1, -0.2, -0.3, -1.0, -9999.0}) EXPECT_TRUE(h.add(lp));
  EXPECT_FALSE(h.add(std::nan("")));
  EXPECT_EQ(h.count, 5u);
  // -0.1 - 0.2 - 0.3 - 1.0 - 100 (the floor) = -101.6
  EXPECT_NEAR(h.sum, -101.6, 1e-12);
  EXPECT_NEAR(h.mean(), -20.32, 1e-12);
  EXPECT_EQ(h.bins[0], 2u);
  EXPECT_EQ(h.bins[1], 1u);
  EXPECT_EQ(h.bins[4], 1u);
  EXPECT_EQ(h.bins[80], 1u);
  EXPECT_EQ(h.used_bins(), 81u);

  LogprobHistogram small;
  small.add(-0.1);
  small.add(-0.6);
  std::string out;
  small.append_json(out);
  EXPECT_EQ(out, R"({"n":2,"sum":-0.7000,"bins":[1,0,1]})");
  out.clear();
  LogprobHistogram().append_json(out);
  EXPECT_EQ(out, R"({"n":0,"sum":0.0000,"bins":[]})");

  small.merge(h);
  EXPECT_EQ(small.count, 7u);
  EXPECT_NEAR(small.sum, -102.3, 1e-12);
  EXPECT_EQ(small.bins[0], 3u);
  EXPECT_EQ(small.bins[2], 1u);
  EXPECT_EQ(small.bins[80], 1u);
}

// A record's histogram is boxed: a pointer's size in the record, a copy that
// copies the value (the two then apart), a move that leaves the source empty.
TEST(BoxedLogprobs, CopiesTheValueMovesThePointerAndEmptiesOnReset) {
  static_assert(sizeof(Boxed<LogprobHistogram>) == sizeof(void*));
  Boxed<LogprobHistogram> a;
  EXPECT_FALSE(a.has_value());
  EXPECT_FALSE(static_cast<bool>(a));
  a.emplace().add(-0.1);
  ASSERT_TRUE(a.has_value());
  Boxed<LogprobHistogram> copy = a;
  copy->add(-30.0);
  EXPECT_EQ(a->count, 1u);  // the copy is its own
  EXPECT_EQ(copy->count, 2u);
  EXPECT_EQ((*copy).bins[LogprobHistogram::kRangeBins], 1u);
  const LogprobHistogram* held = &*a;
  Boxed<LogprobHistogram> moved = std::move(a);
  EXPECT_EQ(&*moved, held);     // the same value, not a copy of it
  EXPECT_FALSE(a.has_value());  // NOLINT(bugprone-use-after-move): a move empties
  copy = moved;
  EXPECT_EQ(copy->count, 1u);
  EXPECT_NE(&*copy, &*moved);
  Boxed<LogprobHistogram> empty;
  copy = empty;
  EXPECT_FALSE(copy.has_value());
  moved.reset();
  EXPECT_FALSE(moved.has_value());
}

}  // namespace
}  // namespace tokenscope
