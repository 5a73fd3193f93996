#include "observe/observation.h"

#include <cmath>
#include <stdexcept>

#include <gtest/gtest.h>

namespace tokenscope::observe {
namespace {

TEST(Observation, RoundTripsThroughItsJsonLine) {
  Observation o;
  o.t_ns = 1'234'567'890;
  o.rtt_ns = 4'200;
  o.source = "server";
  o.server_t_ns = 1'700'000'000'000'000'000;
  o.canonical = {{"requests_running", {}, 3}, {"server_ttft_seconds_bucket", {{"le", "+Inf"}}, 17}};
  o.raw = {{"vllm:num_requests_running", {{"model_name", "a \"quoted\"\nname"}}, 3},
           {"x", {}, std::nan("")},
           {"y", {}, -INFINITY},
           {"z", {}, 0.1}};
  std::string line;
  append_observation_json(line, o);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const Observation back = parse_observation_json(line);
  EXPECT_EQ(back.t_ns, o.t_ns);
  EXPECT_EQ(back.rtt_ns, o.rtt_ns);
  EXPECT_EQ(back.source, "server");
  EXPECT_EQ(back.server_t_ns, o.server_t_ns);
  ASSERT_EQ(back.canonical.size(), 2u);
  EXPECT_EQ(back.canonical[1].labels, (Labels{{"le", "+Inf"}}));
  ASSERT_EQ(back.raw.size(), 4u);
  EXPECT_EQ(back.raw[0].labels[0].value, "a \"quoted\"\nname");
  EXPECT_TRUE(std::isnan(back.raw[1].value));
  EXPECT_EQ(back.raw[2].value, -INFINITY);
  EXPECT_EQ(back.raw[3].value, 0.1);  // shortest round-trip form
}

TEST(Observation, ErrorAndUnavailableLinesCarryNoSeries) {
  Observation o;
  o.t_ns = 5;
  o.source = "gpu";
  o.unavailable = "NVML not available: libnvidia-ml.so.1: cannot open shared object file";
  std::string line;
  append_observation_json(line, o);
  EXPECT_EQ(line.find("canonical"), std::string::npos);
  const auto back = parse_observation_json(line);
  EXPECT_EQ(back.unavailable, o.unavailable);
  EXPECT_TRUE(back.raw.empty());
}

TEST(Observation, BadLinesAreRefusedWithTheirReason) {
  EXPECT_THROW(parse_observation_json("[1,2]"), std::runtime_error);
  EXPECT_THROW(parse_observation_json("{\"source\":\"x\"}"), std::runtime_error);
  try {
    parse_observation_json(R"({"t_ns":1,"source":"s","raw":[["a",{},"many"]]})");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("NaN"), std::string::npos) << e.what();
  }
}

TEST(Observation, FindsAndSumsValuesByName) {
  const std::vector<Sample> v = {{"a", {{"gpu", "0"}}, 1}, {"b", {}, 2}, {"a", {{"gpu", "1"}}, 3}};
  EXPECT_EQ(find_value(v, "a"), 1.0);
  EXPECT_EQ(sum_values(v, "a"), 4.0);
  EXPECT_FALSE(find_value(v, "c"));
  EXPECT_FALSE(sum_values(v, "c"));
}

}  // namespace
}  // namespace tokenscope::observe
