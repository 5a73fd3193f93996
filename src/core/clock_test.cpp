#include "core/clock.h"

#include <gtest/gtest.h>

namespace tokenscope {
namespace {

TEST(ManualClock, MovesOnlyWhenTold) {
  ManualClock c(100);
  EXPECT_EQ(c.now_ns(), 100);
  c.advance(50);
  EXPECT_EQ(c.now_ns(), 150);
  c.set(120);  // never backwards
  EXPECT_EQ(c.now_ns(), 150);
  c.set(1000);
  EXPECT_EQ(c.now_ns(), 1000);
  c.advance(-5);
  EXPECT_EQ(c.now_ns(), 1000);
}

TEST(SteadyClock, IsMonotonic) {
  SteadyClock c;
  Nanos prev = c.now_ns();
  for (int i = 0; i < 1000; ++i) {
    const Nanos now = c.now_ns();
    ASSERT_GE(now, prev);
    prev = now;
  }
}

TEST(Units, SecondsToNanosRounds) {
  EXPECT_EQ(seconds_to_nanos(1.5), 1'500'000'000);
  EXPECT_EQ(seconds_to_nanos(1e-9 * 0.6), 1);
  EXPECT_DOUBLE_EQ(nanos_to_ms(2'500'000), 2.5);
}

}  // namespace
}  // namespace tokenscope
