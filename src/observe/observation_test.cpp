#include "observe/observation.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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

// The message of what parse throws, or "" when it reads the line.
template <typename Parse>
std::string refusal(Parse parse, std::string_view line) {
  try {
    parse(line);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

std::string fast_refusal(std::string_view line) {
  return refusal([](std::string_view l) { return parse_observation_json(l); }, line);
}

void expect_same_samples(const std::vector<Sample>& a, const std::vector<Sample>& b, std::string_view line) {
  ASSERT_EQ(a.size(), b.size()) << line;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name) << line;
    EXPECT_EQ(a[i].labels, b[i].labels) << line;
    if (std::isnan(b[i].value))
      EXPECT_TRUE(std::isnan(a[i].value)) << line;
    else
      EXPECT_EQ(a[i].value, b[i].value) << line;
  }
}

// simdjson reads what the reference reader (nlohmann) reads, refuses what it
// refuses with the same message, and reads the same values.
TEST(Observation, ReadsExactlyAsTheReferenceReader) {
  const std::vector<std::string> lines = {
      R"({"t_ns":1,"source":"s","canonical":[["a",{},"NaN"],["b",{},"+Inf"],["c",{},"-Inf"],["d",{},-0.0]]})",
      R"({"t_ns":1,"source":"s","raw":[["a",{},"nan"]]})",
      R"({"t_ns":1,"source":"s","raw":[["a",{},"Inf"]]})",
      R"({"t_ns":1,"source":"s","raw":[["a",{},null]]})",
      R"({"t_ns":1,"source":"s","raw":[["a",{},true]]})",
      R"({"t_ns":1,"source":"s","raw":[["a",{"k":1},1]]})",
      R"({"t_ns":1,"source":"s","raw":[["a",{"k":null},1]]})",
      R"({"t_ns":1,"source":"s","raw":[["a",{"k":["v"]},1]]})",
      R"({"t_ns":1,"source":"s","raw":[["a",{"k":1,"k":"v"},1]]})",  // the last of a name counts
      R"({"t_ns":1,"source":"s","raw":[["a",{"k":"v","k":1},1]]})",
      R"({"t_ns":1,"source":"s","raw":[["a",{"z":"1","a":"2","m":"3","a":"4"},1]]})",  // sorted by name
      R"({"t_ns":1,"source":"s","raw":[["a",{"\u00e9":"x","e":"y","E":"z"},1]]})",
      R"({"source":"s"})",
      R"({"t_ns":null,"source":"s"})",
      R"({"t_ns":1.0,"source":"s"})",
      R"({"t_ns":"1","source":"s"})",
      R"({"t_ns":1})",
      R"({"t_ns":1,"source":2})",
      R"({"t_ns":-5,"source":"s"})",
      R"({"t_ns":18446744073709551615,"source":"s"})",   // wraps around, as get<int64_t>() does
      R"({"t_ns":100000000000000000000,"source":"s"})",  // beyond 64 bits: a double to nlohmann
      R"({"t_ns":1,"source":"s","raw":[["a",{},100000000000000000000]]})",
      R"({"t_ns":1,"source":"s","raw":[["a",{},-9223372036854775809]]})",
      R"({"t_ns":1,"t_ns":"x","source":"s"})",
      R"({"t_ns":"x","t_ns":2,"source":"s","source":"t"})",
      R"({"t_ns":1,"source":"s","rtt_ns":"x","server_t_ns":1.5,"error":3,"unavailable":null})",
      R"({"t_ns":1,"source":"s","rtt_ns":7,"server_t_ns":-3,"error":"e","unavailable":"u"})",
      R"({"t_ns":1,"source":"s","canonical":null})",
      R"({"t_ns":1,"source":"s","canonical":{}})",
      R"({"t_ns":1,"source":"s","derived":[["a",{}]]})",
      R"({"t_ns":1,"source":"s","derived":[["a",{},1,2]]})",
      R"({"t_ns":1,"source":"s","derived":[[1,{},1]]})",
      R"({"t_ns":1,"source":"s","derived":[["a",[],1]]})",
      R"({"t_ns":1,"source":"s","derived":["a"]})",
      R"({"t_ns":1,"source":"s","canonical":[["a",{},1]],"canonical":[]})",
      R"({"t_ns":1,"source":"s","raw":[["a",{},"x"]],"canonical":[["b",{"k":2},1]]})",  // canonical first
      R"({"t_ns":1,"source":"s","raw":[["a",{"k":2},"x"]]})",  // labels before the value
      R"({"t_ns":1,"source":"s","other":[1,{"x":[]}],"raw":[["a\nb",{"k\"":"v\u0000"},1e-400]]})",
      "\xef\xbb\xbf{\"t_ns\":1,\"source\":\"s\"}",  // a byte-order mark: nlohmann skips it
      std::string("{\"t_ns\":1,\"source\":\"s\"}\0", 24),
      " {\"t_ns\":1,\"source\":\"s\"} \r",
      "{\"t_ns\":1,\"source\":\"s\"} x",
      "{\"t_ns\":1,\"source\":\"s\xff\"}",
      R"({"t_ns":1,"source":"\ud800"})",
      "[1,2]",
      "",
      "null",
      std::string(2000, '[') + std::string(2000, ']'),
      "{\"t_ns\":1,\"source\":\"s\",\"x\":" + std::string(2000, '[') + std::string(2000, ']') + "}",
  };
  for (const auto& line : lines) {
    const std::string want = refusal(detail::parse_observation_json_nlohmann, line);
    EXPECT_EQ(fast_refusal(line), want) << line;
    if (!want.empty()) continue;
    const Observation a = parse_observation_json(line);
    const Observation b = detail::parse_observation_json_nlohmann(line);
    EXPECT_EQ(a.t_ns, b.t_ns) << line;
    EXPECT_EQ(a.rtt_ns, b.rtt_ns) << line;
    EXPECT_EQ(a.source, b.source) << line;
    EXPECT_EQ(a.server_t_ns, b.server_t_ns) << line;
    EXPECT_EQ(a.error, b.error) << line;
    EXPECT_EQ(a.unavailable, b.unavailable) << line;
    expect_same_samples(a.canonical, b.canonical, line);
    expect_same_samples(a.raw, b.raw, line);
    expect_same_samples(a.derived, b.derived, line);
  }
}

TEST(Observation, ValuesAndLabelsAsWritten) {
  const auto o = parse_observation_json(
      R"({"t_ns":7,"source":"s","raw":[["a",{},"NaN"],["b",{},"+Inf"],["c",{},"-Inf"],["d",{"z":"1","a":"2","z":"3"},2.5]]})");
  ASSERT_EQ(o.raw.size(), 4u);
  EXPECT_TRUE(std::isnan(o.raw[0].value));
  EXPECT_EQ(o.raw[1].value, INFINITY);
  EXPECT_EQ(o.raw[2].value, -INFINITY);
  EXPECT_EQ(o.raw[3].labels, (Labels{{"a", "2"}, {"z", "3"}}));
  EXPECT_EQ(o.raw[3].value, 2.5);
  EXPECT_EQ(fast_refusal(R"({"t_ns":1,"source":"s","raw":[["a",{"gpu":0},1]]})"),
            "label values should be strings");
  EXPECT_EQ(fast_refusal(R"({"source":"s","raw":[]})"), "\"t_ns\" should be an integer");
  EXPECT_EQ(fast_refusal(R"({"t_ns":1,"source":"s","raw":[["a",{},"inf"]]})"),
            "a sample value should be a number, \"NaN\", \"+Inf\" or \"-Inf\"");
}

// Reading into the same Observation line after line leaves nothing of the
// line before.
TEST(Observation, ReadingIntoTheSameObservationStartsAfresh) {
  Observation o;
  parse_observation_json(
      R"({"t_ns":1,"source":"server","rtt_ns":5,"server_t_ns":9,"canonical":[["a",{"k":"v","l":"w"},1],["b",{},2]],"raw":[["r",{},3]],"derived":[["d",{},4]]})",
      o);
  ASSERT_EQ(o.canonical.size(), 2u);
  parse_observation_json(R"({"t_ns":2,"source":"gpu","error":"failed"})", o);
  EXPECT_EQ(o.t_ns, 2);
  EXPECT_EQ(o.rtt_ns, 0);
  EXPECT_EQ(o.source, "gpu");
  EXPECT_FALSE(o.server_t_ns);
  EXPECT_EQ(o.error, "failed");
  EXPECT_TRUE(o.canonical.empty());
  EXPECT_TRUE(o.raw.empty());
  EXPECT_TRUE(o.derived.empty());
  parse_observation_json(R"({"t_ns":3,"source":"host","canonical":[["x",{},"NaN"],["y",{"k":"v"},1]]})", o);
  EXPECT_TRUE(o.error.empty());
  ASSERT_EQ(o.canonical.size(), 2u);
  EXPECT_EQ(o.canonical[0].name, "x");
  EXPECT_TRUE(o.canonical[0].labels.empty());
  EXPECT_TRUE(std::isnan(o.canonical[0].value));
  EXPECT_EQ(o.canonical[1].labels, (Labels{{"k", "v"}}));
  // A line read through the reference reader (a 21-digit integer) also starts afresh.
  parse_observation_json(R"({"t_ns":4,"source":"s","raw":[["a",{},100000000000000000000]]})", o);
  EXPECT_TRUE(o.canonical.empty());
  ASSERT_EQ(o.raw.size(), 1u);
  EXPECT_EQ(o.raw[0].value, 1e20);
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
