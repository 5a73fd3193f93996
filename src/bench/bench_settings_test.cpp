// The load's small languages, parsed once where they arrive.
#include "bench/bench_settings.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace tokenscope::bench {
namespace {

std::string message_of(auto&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(BenchSettings, StagesKeepTheirTextAndTheirValues) {
  const StageList l = parse_stage_list("5@30,10@2.5", "--stages");
  EXPECT_EQ(l.text, "5@30,10@2.5");
  ASSERT_EQ(l.stages.size(), 2u);
  EXPECT_EQ(l.stages[0].value, 5);
  EXPECT_EQ(l.stages[0].duration_s, 30);
  EXPECT_EQ(l.stages[1].value, 10);
  EXPECT_EQ(l.stages[1].duration_s, 2.5);
  EXPECT_TRUE(parse_stage_list("", "--stages").empty());
  EXPECT_NE(message_of([] { parse_stage_list("5@", "--user-stages"); }).find("--user-stages"),
            std::string::npos);
}

TEST(BenchSettings, SloSpecsNameTheirClassAndMetrics) {
  const SloSpec a = parse_slo_spec("chat:ttft_ms=500,tpot=50,p=90");
  EXPECT_EQ(a.text, "chat:ttft_ms=500,tpot=50,p=90");
  EXPECT_EQ(a.task_class, "chat");
  EXPECT_EQ(a.slo.ttft_ms, 500);
  EXPECT_EQ(a.slo.tpot_ms, 50);
  EXPECT_FALSE(a.slo.e2e_ms);
  EXPECT_EQ(a.slo.percentile, 90);
  const SloSpec b = parse_slo_spec("e2e_ms=2000");
  EXPECT_EQ(b.task_class, "");
  EXPECT_EQ(b.slo.e2e_ms, 2000);
  EXPECT_EQ(b.slo.percentile, 99);
  EXPECT_NE(message_of([] { parse_slo_spec("ttft_ms=fast"); }).find("is not a number"), std::string::npos);
  EXPECT_NE(message_of([] { parse_slo_spec("ttft_ms=-1"); }).find("must be > 0"), std::string::npos);
  EXPECT_NE(message_of([] { parse_slo_spec("p=101,ttft_ms=1"); }).find("(0, 100]"), std::string::npos);
  EXPECT_NE(message_of([] { parse_slo_spec("itl_ms=5"); }).find("unknown metric 'itl_ms'"),
            std::string::npos);
  EXPECT_NE(message_of([] { parse_slo_spec("ttft_ms"); }).find("NAME=VALUE"), std::string::npos);
}

TEST(BenchSettings, SweepsAreRatesOrARangeWithLowBelowHigh) {
  EXPECT_EQ(parse_sweep_rates("2,4,8"), (std::vector<double>{2, 4, 8}));
  EXPECT_EQ(parse_sweep_search("1:16"), (std::pair<double, double>{1, 16}));
  EXPECT_NE(message_of([] { parse_sweep_search("16:1"); }).find("LOW < HIGH"), std::string::npos);
  EXPECT_NE(message_of([] { parse_sweep_search("4"); }).find("LOW:HIGH"), std::string::npos);
  EXPECT_NE(message_of([] { parse_sweep_rates("2,x"); }).find("--sweep-rates"), std::string::npos);
  Sweep s;
  EXPECT_TRUE(s.empty());
  s.search = parse_sweep_search("1:2");
  EXPECT_FALSE(s.empty());
}

TEST(BenchSettings, NamedChoicesRoundTripAndRefuseOthers) {
  for (const auto d : {ThinkDist::kFixed, ThinkDist::kExponential})
    EXPECT_EQ(parse_think_dist(think_dist_name(d)), d);
  EXPECT_NE(message_of([] { parse_think_dist("pareto"); }).find("--think-dist"), std::string::npos);
  EXPECT_EQ(parse_progress("auto"), Progress::kAuto);
  EXPECT_EQ(parse_progress("tty"), Progress::kTty);
  EXPECT_EQ(parse_progress("plain"), Progress::kPlain);
  EXPECT_EQ(parse_progress("none"), Progress::kNone);
  EXPECT_NE(message_of([] { parse_progress("quiet"); }).find("--progress"), std::string::npos);
  EXPECT_EQ(parse_compat(""), Compat::kNone);
  EXPECT_EQ(parse_compat("vllm"), Compat::kVllm);
  EXPECT_NE(message_of([] { parse_compat("sglang"); }).find("--compat"), std::string::npos);
}

}  // namespace
}  // namespace tokenscope::bench
