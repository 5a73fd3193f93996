#include "serve/faults.h"

#include <gtest/gtest.h>

#include <map>

#include "core/error.h"

namespace tokenscope::serve {
namespace {

TEST(Faults, ParsesEveryKind) {
  const auto rules = parse_fault_spec(
      "http_5xx=0.1,http_429=0.05,reset=0.01,stall=0.02@1500ms,malformed=0.03,slow_first_byte=0.04@250");
  ASSERT_EQ(rules.size(), 6u);
  EXPECT_EQ(rules[3].kind, FaultKind::kStall);
  EXPECT_DOUBLE_EQ(rules[3].duration_ms, 1500.0);
  EXPECT_DOUBLE_EQ(rules[5].duration_ms, 250.0);
  EXPECT_TRUE(parse_fault_spec("").empty());
}

TEST(Faults, BadSpecsAreUsageErrors) {
  for (const char* bad : {"boom=0.1", "http_5xx", "http_5xx=2", "stall=0.1", "http_5xx=0.6,http_429=0.6",
                          "reset=abc", "stall=0.1@-5"})
    EXPECT_THROW(parse_fault_spec(bad), UsageError) << bad;
}

TEST(Faults, DrawsMatchRatesAndSeedsRepeat) {
  FaultPlan a(parse_fault_spec("http_5xx=0.2,reset=0.1"), 9),
      b(parse_fault_spec("http_5xx=0.2,reset=0.1"), 9);
  std::map<FaultKind, int> counts;
  for (int i = 0; i < 20000; ++i) {
    const Fault f = a.next();
    EXPECT_EQ(f.kind, b.next().kind);
    ++counts[f.kind];
  }
  EXPECT_NEAR(counts[FaultKind::kHttp5xx], 4000, 300);
  EXPECT_NEAR(counts[FaultKind::kReset], 2000, 250);
  EXPECT_NEAR(counts[FaultKind::kNone], 14000, 400);
}

}  // namespace
}  // namespace tokenscope::serve
