#include "session/sim_grid.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace tokenscope::session {
namespace {

const char* const kGrid = R"(
base:
  rate: 40
  num-requests: 200
  slo: ["ttft_ms=500,p=95", "chat:tpot_ms=50"]
  no-samples: true
  no-steps: false
seeds: 2
axes:
  replicas: [1, 2, 4]
  hardware:
    - {gpu: h100-80gb}
    - {gpu: a100-80gb, tensor-parallel: 2}
)";

TEST(SimGrid, TheProductOfTheAxesFirstVaryingSlowestWithTheBaseFirst) {
  const Grid g = parse_grid(kGrid, "grid.yaml");
  EXPECT_EQ(g.axes, (std::vector<std::string>{"replicas", "hardware"}));
  EXPECT_EQ(g.seeds, (std::vector<std::uint64_t>{1, 2}));
  ASSERT_EQ(g.points.size(), 6u);
  EXPECT_EQ(g.runs(), 12u);
  EXPECT_EQ(g.points[0].labels, (std::vector<std::string>{"1", "gpu=h100-80gb"}));
  EXPECT_EQ(g.points[1].labels, (std::vector<std::string>{"1", "gpu=a100-80gb tensor-parallel=2"}));
  EXPECT_EQ(g.points[5].labels, (std::vector<std::string>{"4", "gpu=a100-80gb tensor-parallel=2"}));
  // A list repeats the option; true is a flag, false leaves it out.
  EXPECT_EQ(g.points[1].args(),
            (std::vector<std::string>{"--rate", "40", "--num-requests", "200", "--slo", "ttft_ms=500,p=95",
                                      "--slo", "chat:tpot_ms=50", "--no-samples", "--replicas", "1", "--gpu",
                                      "a100-80gb", "--tensor-parallel", "2"}));
  const auto& o = g.points[5].options.back();
  EXPECT_EQ(o.name, "tensor-parallel");
  EXPECT_EQ(o.field, "axes.hardware[1].tensor-parallel");
  EXPECT_EQ(o.line, 13u);  // the text starts with a newline
}

TEST(SimGrid, SeedsAndNoAxes) {
  const Grid one = parse_grid("base: {rate: 5}\n", "g.yaml");
  ASSERT_EQ(one.points.size(), 1u);
  EXPECT_EQ(one.seeds, std::vector<std::uint64_t>{0});
  EXPECT_TRUE(one.points[0].labels.empty());
  const Grid listed = parse_grid("seeds: [7, 3]\naxes: {router: [round-robin]}\n", "g.yaml");
  EXPECT_EQ(listed.seeds, (std::vector<std::uint64_t>{7, 3}));
  // A quoted "true" is a value, not a flag.
  const Grid quoted = parse_grid("base: {tag-like: \"true\"}\n", "g.yaml");
  EXPECT_EQ(quoted.points[0].args(), (std::vector<std::string>{"--tag-like", "true"}));
}

std::string refusal(const std::string& text) {
  try {
    parse_grid(text, "g.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(SimGrid, BadFilesAreNamedByLineAndField) {
  EXPECT_NE(refusal("[1, 2]").find("expected a mapping"), std::string::npos);
  EXPECT_NE(refusal("base: {rate: 5}\nextra: 1\n").find("extra"), std::string::npos);
  EXPECT_NE(refusal("base:\n  out: x\n").find("g.yaml:2: field 'base.out': --out is the grid's own"),
            std::string::npos)
      << refusal("base:\n  out: x\n");
  EXPECT_NE(refusal("axes:\n  seed: [1, 2]\n").find("--seed is the grid's own"), std::string::npos);
  EXPECT_NE(refusal("axes:\n  router: []\n").find("expected a list of at least one value"),
            std::string::npos);
  EXPECT_NE(refusal("axes:\n  router: round-robin\n").find("expected a list"), std::string::npos);
  EXPECT_NE(refusal("axes:\n  router: [[a, b]]\n").find("axes.router[0]"), std::string::npos);
  EXPECT_NE(refusal("base:\n  Rate: 5\n").find("long name"), std::string::npos);
  EXPECT_NE(refusal("base:\n  --rate: 5\n").find("long name"), std::string::npos);
  EXPECT_NE(refusal("seeds: 0\n").find("seeds"), std::string::npos);
  EXPECT_NE(refusal("seeds: [1, 1]\n").find("a seed given twice"), std::string::npos);
  EXPECT_NE(refusal("seeds: [-1]\n").find("seeds[0]"), std::string::npos);
  EXPECT_NE(refusal("base: {rate: {a: 1}}\n").find("expected a value"), std::string::npos);
  // Too many runs is refused before any product is built.
  std::string big = "axes:\n";
  for (int a = 0; a < 6; ++a) big += "  x" + std::to_string(a) + ": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n";
  EXPECT_NE(refusal(big).find("more than 100000"), std::string::npos) << refusal(big);
  EXPECT_NE(refusal("seeds: 10000\naxes: {x: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}\n").find("runs"),
            std::string::npos);
  EXPECT_NE(refusal("base: [").find("g.yaml"), std::string::npos);
  EXPECT_NE(refusal("base: {rate: ''}\n").find("this one is empty"), std::string::npos);
  // A key that is not a scalar (found by fuzz_grid_yaml): named, not thrown through.
  EXPECT_NE(refusal("? [a, b]\n: 1\n").find("g.yaml"), std::string::npos);
  // Options over all points are bounded: 500 repeated SLOs times 10,000 points.
  std::string wide = "base:\n  slo: [";
  for (int k = 0; k < 500; ++k) wide += std::string(k ? ", " : "") + "p=9" + std::to_string(k % 10);
  wide +=
      "]\naxes:\n  a: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n  b: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
      "  c: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n  d: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n";
  EXPECT_NE(refusal(wide).find("options in all"), std::string::npos) << refusal(wide);
}

TEST(SimGrid, TheTableAveragesTheSeedsAndTheFrontierKeepsWhatNothingBeats) {
  const Grid g = parse_grid("seeds: 2\naxes:\n  replicas: [1, 2, 4, 8]\n", "g.yaml");
  const auto fig = [](std::uint32_t gpus, double goodput, bool met) {
    nlohmann::json s = {{"goodput_rps", goodput},
                        {"request_throughput_rps", goodput + 1},
                        {"ttft_ms", {{"p99", 100.0 / gpus}}},
                        {"tpot_ms", {{"p99", 10.0}}},
                        {"e2e_ms", {{"p99", 1000.0}}},
                        {"requests_failed", 0},
                        {"slo_attainment", {{"", {{"pass", met}}}}}};
    return grid_figures(s, gpus);
  };
  // 1 GPU: 10 and 12 req/s; 2: 30 and 32; 4: 30 and 30 (beaten by 2);
  // 8: 40 and failed once (not whole: off the frontier).
  std::vector<nlohmann::json> figures = {
      fig(1, 10, false), fig(1, 12, false), fig(2, 30, true), fig(2, 32, true),
      fig(4, 30, true),  fig(4, 30, true),  fig(8, 40, true), nlohmann::json{{"error", "it broke"}}};
  const auto t = grid_table(g, figures);
  EXPECT_EQ(t["frontier_metric"], "goodput_rps");
  const auto& p = t["points"];
  ASSERT_EQ(p.size(), 4u);
  EXPECT_DOUBLE_EQ(p[0]["goodput_rps"].get<double>(), 11.0);
  EXPECT_DOUBLE_EQ(p[1]["goodput_rps"].get<double>(), 31.0);
  EXPECT_DOUBLE_EQ(p[1]["ttft_p99_ms"].get<double>(), 50.0);
  EXPECT_EQ(p[0]["slo_met"], false);
  EXPECT_EQ(p[1]["slo_met"], true);
  EXPECT_EQ(p[3]["runs"], 1);
  EXPECT_EQ(p[3]["failed"], 1);
  EXPECT_EQ(p[3]["slo_met"], false) << "a seed that failed is not a seed that met the SLOs";
  EXPECT_EQ(p[3]["errors"][0]["error"], "it broke");
  EXPECT_EQ(t["frontier"], nlohmann::json::array({0, 1}));
  EXPECT_EQ(p[2]["frontier"], false);
  // Without SLOs the frontier is of throughput.
  nlohmann::json plain = {{"request_throughput_rps", 5.0}};
  const auto t2 = grid_table(parse_grid("base: {rate: 1}\n", "g.yaml"), {grid_figures(plain, 1)});
  EXPECT_EQ(t2["frontier_metric"], "throughput_rps");
  EXPECT_EQ(t2["frontier"], nlohmann::json::array({0}));
  EXPECT_TRUE(t2["points"][0]["slo_met"].is_null());
}

}  // namespace
}  // namespace tokenscope::session
