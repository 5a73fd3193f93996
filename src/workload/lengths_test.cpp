#include "workload/lengths.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/stats.h"

namespace tokenscope::workload {
namespace {

TEST(Lengths, ParsesEveryKind) {
  Rng rng(1);
  auto fixed = parse_length_spec("fixed:128", "--input-len", LengthRole::kInput);
  EXPECT_EQ(fixed.sample(rng), 128u);
  auto uni = parse_length_spec("uniform:10:20", "--input-len", LengthRole::kInput);
  for (int i = 0; i < 1000; ++i) {
    const auto v = uni.sample(rng);
    ASSERT_GE(v, 10u);
    ASSERT_LE(v, 20u);
  }
  auto logn = parse_length_spec("lognormal:1000:0.8", "--input-len", LengthRole::kInput);
  RunningStats st;
  for (int i = 0; i < 100000; ++i) st.add(logn.sample(rng));
  EXPECT_NEAR(st.mean(), 1000.0, 15.0);
  auto capped = parse_length_spec("lognormal:1000:0.8:max=1200", "--input-len", LengthRole::kInput);
  for (int i = 0; i < 1000; ++i) ASSERT_LE(capped.sample(rng), 1200u);
}

TEST(Lengths, EmpiricalReadsTheRightColumn) {
  const std::string path = ::testing::TempDir() + "/lengths_empirical.jsonl";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("{\"input_tokens\": 7, \"output_tokens\": 70}\n{\"input_tokens\": 9, \"output_tokens\": 90}\n",
               f);
    std::fclose(f);
  }
  Rng rng(1);
  auto in = parse_length_spec("empirical:" + path, "--input-len", LengthRole::kInput);
  auto out = parse_length_spec("empirical:" + path, "--output-len", LengthRole::kOutput);
  for (int i = 0; i < 50; ++i) {
    const auto a = in.sample(rng);
    EXPECT_TRUE(a == 7u || a == 9u);
    const auto b = out.sample(rng);
    EXPECT_TRUE(b == 70u || b == 90u);
  }
}

TEST(Lengths, BadSpecsNameTheOption) {
  for (const char* bad : {"fixed", "fixed:0", "fixed:1.5", "uniform:5:2", "lognormal:100:-1", "gauss:1",
                          "fixed:abc", "lognormal:100:0.5:max=0", "uniform:1"}) {
    try {
      parse_length_spec(bad, "--output-len", LengthRole::kOutput);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--output-len"), std::string::npos) << e.what();
    }
  }
}

TEST(Lengths, BadSpecsAreQuotedEscaped) {
  try {
    parse_length_spec("fixed:\x1b[2J", "--input-len", LengthRole::kInput);
    FAIL() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--input-len: expected a number for N in 'fixed:\\x1b[2J', got '\\x1b[2J'");
  }
}

}  // namespace
}  // namespace tokenscope::workload
