#include "analyze/verdict.h"

#include <gtest/gtest.h>

namespace tokenscope::analyze {
namespace {

TEST(Verdict, NamesRoundTrip) {
  for (Verdict v :
       {Verdict::kPass, Verdict::kRegressed, Verdict::kImproved, Verdict::kInconclusive, Verdict::kNoData}) {
    EXPECT_EQ(verdict_from_string(to_string(v)), v);
  }
  EXPECT_EQ(to_string(Verdict::kNoData), "no-data");
  EXPECT_FALSE(verdict_from_string("fail").has_value());
}

TEST(Verdict, ToleranceBandForAHigherIsWorseMetric) {
  // Significant and beyond the tolerance: regressed.
  EXPECT_EQ(classify_change({10, 4, 16}, 5, Worse::kHigher), Verdict::kRegressed);
  // Significant but within the tolerance: not a regression.
  EXPECT_EQ(classify_change({3, 1, 5}, 5, Worse::kHigher), Verdict::kPass);
  // Significant in the better direction and beyond the tolerance.
  EXPECT_EQ(classify_change({-10, -16, -4}, 5, Worse::kHigher), Verdict::kImproved);
  EXPECT_EQ(classify_change({-3, -5, -1}, 5, Worse::kHigher), Verdict::kPass);
  // Not significant, interval inside the band: equivalent.
  EXPECT_EQ(classify_change({0.5, -2, 3}, 5, Worse::kHigher), Verdict::kPass);
  // Not significant, interval reaching beyond the band: cannot tell.
  EXPECT_EQ(classify_change({0.5, -2, 9}, 5, Worse::kHigher), Verdict::kInconclusive);
  // Zero tolerance: any significant change counts.
  EXPECT_EQ(classify_change({0.1, 0.05, 0.2}, 0, Worse::kHigher), Verdict::kRegressed);
}

TEST(Verdict, ToleranceBandForALowerIsWorseMetric) {
  // Throughput fell significantly by more than the tolerance.
  EXPECT_EQ(classify_change({-10, -16, -4}, 5, Worse::kLower), Verdict::kRegressed);
  EXPECT_EQ(classify_change({10, 4, 16}, 5, Worse::kLower), Verdict::kImproved);
  EXPECT_EQ(classify_change({-3, -5, -1}, 5, Worse::kLower), Verdict::kPass);
  EXPECT_EQ(classify_change({-1, -9, 2}, 5, Worse::kLower), Verdict::kInconclusive);
}

TEST(Verdict, CombineKeepsTheMostSevere) {
  EXPECT_EQ(combine(Verdict::kPass, Verdict::kRegressed), Verdict::kRegressed);
  EXPECT_EQ(combine(Verdict::kInconclusive, Verdict::kImproved), Verdict::kInconclusive);
  EXPECT_EQ(combine(Verdict::kNoData, Verdict::kPass), Verdict::kPass);
  EXPECT_EQ(combine(Verdict::kNoData, Verdict::kNoData), Verdict::kNoData);
  EXPECT_EQ(exit_code_for(Verdict::kRegressed), 1);
  EXPECT_EQ(exit_code_for(Verdict::kInconclusive), 0);
}

}  // namespace
}  // namespace tokenscope::analyze
