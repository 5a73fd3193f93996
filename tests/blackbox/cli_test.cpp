// Black-box tests of the tokenscope binary: exit codes, messages, files.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "process.h"
#include "server.h"

namespace tokenscope::testing {
namespace {

namespace fs = std::filesystem;
const std::string kShared = TOKENSCOPE_SHARED_DIR "/traces/";

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tokenscope_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const std::string& name, const std::string& content) {
    const auto p = dir_ / name;
    std::ofstream(p) << content;
    return p.string();
  }
  static std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  ProcessResult sim(std::vector<std::string> args) {
    args.insert(args.begin(), {kBin, "sim"});
    return run_process(args);
  }
  fs::path dir_;
};

TEST_F(Cli, HelpExplainsEveryOptionWithDefaults) {
  const auto top = run_process({kBin, "--help"});
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_NE(top.out.find("tokenscope sim"), std::string::npos);
  EXPECT_NE(top.out.find("tokenscope serve"), std::string::npos);
  const auto serve_help = run_process({kBin, "serve", "--help"});
  ASSERT_EQ(serve_help.exit_code, 0);
  for (const char* needle : {"--host", "=127.0.0.1", "--api-key", "--max-body-bytes", "--faults",
                             "--trace-emissions", "--shutdown-grace-s", "--model"})
    EXPECT_NE(serve_help.out.find(needle), std::string::npos) << needle;
  const auto help = run_process({kBin, "sim", "--help"});
  ASSERT_EQ(help.exit_code, 0);
  for (const char* needle : {"--trace", "--rate", "requests/s", "--block-size", "KV block size, tokens",
                             "=16", "--max-num-batched-tokens", "=8192", "--tenant-kv-policy", "--seed",
                             "--out", "prefix_cache_hit_rate", "ttft_ms", "Exit codes"})
    EXPECT_NE(help.out.find(needle), std::string::npos) << needle;
  EXPECT_EQ(run_process({kBin}).exit_code, 2);
  EXPECT_EQ(run_process({kBin, "sim", "--no-such-flag"}).exit_code, 2);
}

TEST_F(Cli, BadInputGetsAClearMessageAndExitCode2) {
  const std::string csv = file("bad.csv",
                               "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                               "2023-11-16 18:15:46.1,30,4\n"
                               "2023-11-16 18:15:47.1,thirty,4\n");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--trace", csv}, csv + ":3: field 'ContextTokens': expected a positive integer, got 'thirty'"},
      {{"--model", "gpt-9"}, "unknown model 'gpt-9'"},
      {{"--gpu", "tpu"}, "unknown GPU 'tpu'"},
      {{"--model", "llama-3-70b", "--gpu", "h100-sxm"}, "does not fit on h100-sxm"},
      {{"--rate", "-3"}, "--rate: expected requests per second > 0, got -3"},
      {{"--trace", (dir_ / "missing.csv").string()}, "cannot open trace file"},
      {{"--input-len", "gaussian:5"}, "--input-len: expected fixed:N"},
      {{"--policy", "lifo"}, "--policy: expected fcfs or priority"},
      {{"--rate", "abc"}, "--rate"},
      {{"--catalog", file("cat.yaml", "models:\n  - name: x\n    layers: zero\n")},
       "cat.yaml:2: field 'models[x].layers'"},
  };
  for (const auto& c : cases) {
    const auto r = sim(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.message << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << "expected: " << c.message << "\ngot: " << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  }
}

TEST_F(Cli, SkipBadRowsCountsThemAndRuns) {
  const std::string csv = file("mixed.csv",
                               "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                               "2023-11-16 18:15:46.1,30,4\n"
                               "garbage\n"
                               "2023-11-16 18:15:47.1,40,5\n");
  const auto r = sim({"--trace", csv, "--skip-bad-rows", "--out", (dir_ / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("skipped 1 bad rows"), std::string::npos) << r.out;
  const auto run = nlohmann::json::parse(slurp(dir_ / "run" / "run.json"));
  EXPECT_EQ(run["settings"]["effective"]["workload"]["rows_skipped"], 1);
  EXPECT_EQ(run["summary"]["requests_completed"], 2);
}

TEST_F(Cli, SameSeedGivesByteIdenticalRunDirectories) {
  const std::vector<std::string> args = {"--num-requests",  "300", "--rate",    "20", "--prefix-groups", "3",
                                         "--prefix-tokens", "200", "--tenants", "2",  "--seed",          "7"};
  for (const char* name : {"a", "b"}) {
    auto a = args;
    a.insert(a.end(), {"--out", (dir_ / name).string(), "--quiet"});
    ASSERT_EQ(sim(a).exit_code, 0);
  }
  for (const char* f : {"run.json", "requests.jsonl", "steps.jsonl"}) {
    const std::string a = slurp(dir_ / "a" / f);
    std::string b = slurp(dir_ / "b" / f);
    if (std::string(f) == "run.json") {  // only the output path differs
      const auto pos = b.find((dir_ / "b").string());
      ASSERT_NE(pos, std::string::npos);
      b.replace(pos, (dir_ / "b").string().size(), (dir_ / "a").string());
    }
    EXPECT_EQ(a, b) << f;
    EXPECT_GT(a.size(), 100u) << f;
  }
  auto other = args;
  other.back() = "8";
  other.insert(other.end(), {"--out", (dir_ / "c").string(), "--quiet"});
  ASSERT_EQ(sim(other).exit_code, 0);
  EXPECT_NE(slurp(dir_ / "a" / "requests.jsonl"), slurp(dir_ / "c" / "requests.jsonl"));
}

// Failures are broken down by outcome, as bench does, not only counted.
TEST_F(Cli, SimNamesTheOutcomesOfFailedRequests) {
  const auto r = sim({"--num-requests", "4", "--input-len", "fixed:200000", "--output-len", "fixed:4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("4 total, 0 completed, 4 failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("outcomes          rejected 4"), std::string::npos) << r.out;
}

TEST_F(Cli, SimRefusesAnOutHoldingARunUnlessOverwrite) {
  const auto out = (dir_ / "run").string();
  ASSERT_EQ(sim({"--num-requests", "5", "--quiet", "--out", out}).exit_code, 0);
  const auto refused = sim({"--num-requests", "3", "--quiet", "--out", out});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("holds an earlier run"), std::string::npos) << refused.err;
  ASSERT_EQ(sim({"--num-requests", "3", "--quiet", "--overwrite", "--out", out}).exit_code, 0);
  std::ifstream in(dir_ / "run" / "requests.jsonl");
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  EXPECT_EQ(n, 3u);
}

TEST_F(Cli, RunJsonRecordsRequestedAndEffectiveSettings) {
  const auto r = sim({"--num-requests", "50", "--gpu", "a100", "--out", (dir_ / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run = nlohmann::json::parse(slurp(dir_ / "run" / "run.json"));
  EXPECT_EQ(run["settings"]["requested"]["engine"]["gpu"], "a100");
  EXPECT_EQ(run["settings"]["effective"]["engine"]["gpu"]["name"], "a100-80g-sxm");
  EXPECT_GT(run["settings"]["effective"]["engine"]["num_gpu_blocks"].get<long>(), 1000);
  EXPECT_EQ(run["summary"]["requests_total"], 50);
  EXPECT_EQ(run["partial"], false);
  std::ifstream req(dir_ / "run" / "requests.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(req, line)) {
    EXPECT_TRUE(nlohmann::json::accept(line)) << line;
    ++n;
  }
  EXPECT_EQ(n, 50);
  EXPECT_NE(r.out.find("TTFT"), std::string::npos);
}

// sim --perturb: the ground truth in run.json and per step, the contention
// series of a steal, the same run for the same seed, and a bad spec named.
TEST_F(Cli, SimRecordsInjectedPerturbationsAsGroundTruth) {
  const std::string spec = "tail:fraction=0.05,scale_ms=5,shape=1.5;steal:share=0.5,period_s=4,on_s=2";
  const auto a = (dir_ / "a").string(), b = (dir_ / "b").string(), none = (dir_ / "none").string();
  for (const auto& out : {a, b}) {
    const auto r =
        sim({"--num-requests", "300", "--rate", "20", "--seed", "4", "--perturb", spec, "--out", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("perturbation tail (steps): "), std::string::npos) << r.out;
  }
  EXPECT_EQ(slurp(dir_ / "a" / "steps.jsonl"), slurp(dir_ / "b" / "steps.jsonl"));
  const auto run = nlohmann::json::parse(slurp(dir_ / "a" / "run.json"));
  ASSERT_EQ(run["perturbations"].size(), 2u) << run["perturbations"];
  EXPECT_EQ(run["perturbation_seed"], 4);  // --seed
  EXPECT_EQ(run["settings"]["requested"]["engine"]["perturb"], spec);
  const auto& tail = run["perturbations"][0];
  EXPECT_EQ(tail["kind"], "tail");
  EXPECT_EQ(tail["scale_ms"], 5.0);
  // The steps' own record adds up to the ground truth.
  std::ifstream steps(dir_ / "a" / "steps.jsonl");
  double injected_ns = 0, stolen_ns = 0;
  for (std::string line; std::getline(steps, line);) {
    const auto j = nlohmann::json::parse(line);
    injected_ns += j["perturbation_ns"].get<double>();
    stolen_ns += j["stolen_ns"].get<double>();
  }
  const double tail_ms = tail["injected"]["extra_ms_total"].get<double>();
  const double steal_ms = run["perturbations"][1]["injected"]["extra_ms_total"].get<double>();
  EXPECT_GT(tail_ms, 0.0);
  EXPECT_NEAR(stolen_ns / 1e6, steal_ms, 0.01);
  EXPECT_NEAR(injected_ns / 1e6, tail_ms + steal_ms, 0.01);
  EXPECT_NE(slurp(dir_ / "a" / "samples.jsonl").find("\"cgroup_cpu_throttled_seconds\""), std::string::npos);
  // Without --perturb: an empty list, and the steps as they always were.
  ASSERT_EQ(sim({"--num-requests", "30", "--quiet", "--out", none}).exit_code, 0);
  const auto plain = nlohmann::json::parse(slurp(dir_ / "none" / "run.json"));
  EXPECT_EQ(plain["perturbations"], nlohmann::json::array());
  EXPECT_EQ(slurp(dir_ / "none" / "steps.jsonl").find("perturbation_ns"), std::string::npos);
  const auto bad = sim({"--num-requests", "3", "--perturb", "leak:per_min=2%;tail:fraction=abc"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--perturb: item 2 'tail:fraction=abc': fraction: expected a probability in [0, 1] "
                         "(0.02 or 2%), got 'abc'"),
            std::string::npos)
      << bad.err;
}

// The candidate of issue 26: the project's workload at bursty arrivals
// (gamma, CV 2), its steps stalling now and then (2% of steps, Pareto with
// a 20 ms scale). check exits 1 and its headline names the rows that moved
// (TPOT's p50 and p90, ITL's p99), first in the output and in check.json;
// the null pair (another seed, nothing injected) exits 0.
TEST_F(Cli, CheckNamesTheHeadlineRowsThatStalledStepsMoved) {
  const std::vector<std::string> workload = {
      "--num-requests", "1500",  "--rate",       "8",    "--prefix-groups", "8", "--prefix-tokens", "512",
      "--arrival",      "gamma", "--burstiness", "0.25", "--quiet"};
  const auto make = [&](const std::string& name, const std::string& seed, const std::string& perturb) {
    std::vector<std::string> args = workload;
    args.insert(args.end(), {"--seed", seed, "--out", (dir_ / name).string()});
    if (!perturb.empty()) args.insert(args.end(), {"--perturb", perturb});
    ASSERT_EQ(sim(args).exit_code, 0);
  };
  make("base", "1", "");
  make("null", "2", "");
  make("stall", "2", "tail:target=steps,fraction=0.02,dist=pareto,scale_ms=20,shape=1.5");
  const auto stall = run_process({kBin, "check", (dir_ / "base").string(), (dir_ / "stall").string()}, 120);
  EXPECT_EQ(stall.exit_code, 1) << stall.out << stall.err;
  // The environment first (two sim runs: nothing differs), then the headline.
  const auto second_line = stall.out.find('\n') + 1;
  EXPECT_EQ(stall.out.find("environment: same"), second_line) << stall.out;
  EXPECT_EQ(stall.out.find("headline: regressed"), stall.out.find('\n', second_line) + 1) << stall.out;
  const auto j = nlohmann::json::parse(slurp(dir_ / "stall" / "check.json"));
  ASSERT_EQ(j["items"][0]["id"], "headline");
  EXPECT_EQ(j["items"][0]["verdict"], "regressed");
  std::set<std::string> moved;
  for (const auto& f : j["items"][0]["findings"])
    if (f["verdict"] == "regressed") moved.insert(f["metric"].get<std::string>());
  for (const char* m : {"p50 TPOT", "p90 TPOT", "p99 ITL"})
    EXPECT_TRUE(moved.count(m)) << m << "\n" << stall.out;
  EXPECT_GE(j["family"]["size"].get<int>(),
            20);  // the headline's and the items' findings, each statistic once
  const auto null = run_process({kBin, "check", (dir_ / "base").string(), (dir_ / "null").string()}, 120);
  EXPECT_EQ(null.exit_code, 0) << null.out << null.err;
  EXPECT_NE(null.out.find("headline: "), std::string::npos);
  EXPECT_EQ(null.out.find("headline: regressed"), std::string::npos) << null.out;
}

// --repeat N: the same settings N times with fresh seeds into OUT/repeat-K/,
// OUT/sweep.json with each headline metric's values and between-run
// interval; check compares two such directories run by run; bad values are
// refused before anything is written.
TEST_F(Cli, RepeatsRunWithFreshSeedsAndCheckComparesThemRunByRun) {
  const auto a = dir_ / "a", b = dir_ / "b";
  ASSERT_EQ(sim({"--num-requests", "400", "--rate", "8", "--repeat", "3", "--seed", "5", "--quiet", "--out",
                 a.string()})
                .exit_code,
            0);
  const auto set = nlohmann::json::parse(slurp(a / "sweep.json"));
  EXPECT_EQ(set["kind"], "repeats");
  ASSERT_EQ(set["runs"].size(), 3u);
  std::vector<double> p50;
  for (int k = 1; k <= 3; ++k) {
    EXPECT_EQ(set["runs"][k - 1]["dir"], "repeat-" + std::to_string(k));
    EXPECT_EQ(set["runs"][k - 1]["seed"], 4 + k);
    const auto run = nlohmann::json::parse(slurp(a / ("repeat-" + std::to_string(k)) / "run.json"));
    p50.push_back(run["summary"]["ttft_ms"]["p50"].get<double>());
  }
  EXPECT_NE(p50[0], p50[1]);  // fresh seeds: other requests, other times
  const auto& st = set["statistics"]["ttft_ms.p50"];
  EXPECT_EQ(st["values"].get<std::vector<double>>(), p50);
  EXPECT_DOUBLE_EQ(st["mean"].get<double>(), (p50[0] + p50[1] + p50[2]) / 3);
  EXPECT_LT(st["ci"][0].get<double>(), st["mean"].get<double>());
  EXPECT_GT(st["ci"][1].get<double>(), st["mean"].get<double>());
  // The candidate: the same load on a server that batches at most 4 sequences.
  ASSERT_EQ(sim({"--num-requests", "400", "--rate", "8", "--repeat", "3", "--seed", "15", "--max-num-seqs",
                 "4", "--quiet", "--out", b.string()})
                .exit_code,
            0);
  const auto r = run_process({kBin, "check", a.string(), b.string()}, 120);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("tokenscope check: base a (3 repeats) -> candidate b (3 repeats)"), std::string::npos)
      << r.out;
  const auto j = nlohmann::json::parse(slurp(b / "check.json"));
  bool ttft = false;
  for (const auto& f : j["items"][0]["findings"]) {
    EXPECT_NE(f.value("note", "").find("the run as the unit: 3 and 3 repeats"), std::string::npos)
        << f.dump();
    ttft = ttft || (f["metric"] == "p50 TTFT" && f["verdict"] == "regressed");
  }
  EXPECT_TRUE(ttft) << j["items"][0].dump().substr(0, 3000);
  // Bad values: refused before anything starts.
  auto bad = sim({"--num-requests", "10", "--repeat", "0", "--out", (dir_ / "zero").string()});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_FALSE(fs::exists(dir_ / "zero"));
  bad = sim({"--num-requests", "10", "--repeat", "2"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--repeat: needs --out"), std::string::npos) << bad.err;
  // bench: the same layout (against the built-in server).
  const auto br = run_process({kBin, "bench", "--num-requests", "20", "--rate", "40", "--repeat", "2",
                               "--progress", "none", "--no-history", "--out", (dir_ / "bench").string()},
                              120);
  EXPECT_EQ(br.exit_code, 0) << br.out << br.err;
  const auto bset = nlohmann::json::parse(slurp(dir_ / "bench" / "sweep.json"));
  EXPECT_EQ(bset["kind"], "repeats");
  EXPECT_EQ(bset["runs"].size(), 2u);
  EXPECT_TRUE(fs::exists(dir_ / "bench" / "repeat-2" / "requests.jsonl"));
  EXPECT_EQ(bset["statistics"]["request_throughput_rps"]["values"].size(), 2u);
  // A rate search with repeats at each rate: rate-R/ is a directory of
  // repeats, the curve has their means, a rate passes when every repeat does.
  const auto sr = run_process(
      {kBin, "bench", "--num-requests", "20", "--sweep-search", "5:40", "--sweep-steps", "1", "--repeat", "2",
       "--slo", "ttft_ms=60000", "--progress", "none", "--no-history", "--out", (dir_ / "search").string()},
      240);
  EXPECT_EQ(sr.exit_code, 0) << sr.out << sr.err;
  const auto sset = nlohmann::json::parse(slurp(dir_ / "search" / "sweep.json"));
  EXPECT_EQ(sset["kind"], "search");
  EXPECT_EQ(sset["repeats"], 2);
  ASSERT_EQ(sset["curve"].size(), 2u);  // 5 and 40 pass: no bisection
  EXPECT_EQ(sset["max_rate_meeting_slo"], 40.0);
  for (const auto& c : sset["curve"]) {
    EXPECT_EQ(c["repeats"], 2);
    EXPECT_EQ(c["slo_pass"], true);
    const std::string rel = "rate-" + std::string(c["rate_rps"] == 5.0 ? "5" : "40");
    const auto inner = nlohmann::json::parse(slurp(dir_ / "search" / rel / "sweep.json"));
    EXPECT_EQ(inner["kind"], "repeats");
    EXPECT_DOUBLE_EQ(c["achieved_rps"].get<double>(),
                     inner["statistics"]["request_throughput_rps"]["mean"].get<double>());
  }
}

// Without --perturb, sim writes what it always wrote: the stored sim run of
// the report's tests (src/report/testdata/sim) comes out byte for byte.
TEST_F(Cli, SimWithoutPerturbationsReproducesTheStoredRun) {
  const fs::path golden = fs::path(TOKENSCOPE_SOURCE_DIR) / "src" / "report" / "testdata" / "sim";
  const auto r = sim({"--num-requests",
                      "16",
                      "--rate",
                      "4",
                      "--input-len",
                      "fixed:300",
                      "--output-len",
                      "fixed:24",
                      "--prefix-groups",
                      "2",
                      "--prefix-tokens",
                      "256",
                      "--tenants",
                      "2",
                      "--seed",
                      "3",
                      "--sample-interval",
                      "0.5",
                      "--quiet",
                      "--out",
                      (dir_ / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* f : {"requests.jsonl", "steps.jsonl", "samples.jsonl"}) {
    const std::string want = slurp(golden / f);
    ASSERT_GT(want.size(), 1000u) << f;
    EXPECT_EQ(slurp(dir_ / "run" / f), want) << f;
  }
}

// Check item 11 end to end: bench --logprobs against the built-in server,
// once as it is and once as a "quantised" model (--logprob-shift); check
// calls the shift a regression and another seed of the same model a pass;
// activation files from --activations; a malformed one is bad input (exit 2).
TEST_F(Cli, CheckFindsAShiftedLogprobDistribution) {
  const auto bench = [&](const std::string& name, const std::string& seed, const std::string& shift) {
    return run_process({kBin,
                        "bench",
                        "--num-requests",
                        "60",
                        "--rate",
                        "200",
                        "--input-len",
                        "fixed:16",
                        "--output-len",
                        "fixed:32",
                        "--fixed-step-ms",
                        "1",
                        "--logprobs",
                        "--logprob-shift",
                        shift,
                        "--seed",
                        seed,
                        "--progress",
                        "none",
                        "--quiet",
                        "--out",
                        (dir_ / name).string()},
                       120);
  };
  for (const auto& [name, seed, shift] :
       {std::tuple{"base", "1", "0"}, std::tuple{"same", "2", "0"}, std::tuple{"int4", "3", "0.5"}}) {
    const auto r = bench(name, seed, shift);
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
  }
  const auto item11 = [&](const fs::path& check_json) {
    const auto j = nlohmann::json::parse(slurp(check_json));
    for (const auto& it : j["items"])
      if (it["number"] == 11) return it;
    return nlohmann::json();
  };
  auto r = run_process({kBin, "check", (dir_ / "base").string(), (dir_ / "int4").string()}, 120);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  auto it = item11(dir_ / "int4" / "check.json");
  EXPECT_EQ(it["verdict"], "regressed") << it.dump(1);
  EXPECT_EQ(it["evidence"]["pareto"]["base"]["mean_logprob"].is_number(), true);
  EXPECT_LT(it["evidence"]["mean_logprob"]["change"].get<double>(), -0.3);  // -0.5 nats drawn
  r = run_process({kBin, "check", (dir_ / "base").string(), (dir_ / "same").string()}, 120);
  EXPECT_NE(r.exit_code, 2) << r.err;
  it = item11(dir_ / "same" / "check.json");
  EXPECT_EQ(it["verdict"], "pass") << it.dump(1);

  const std::string a = file("a.jsonl", R"({"name": "l0", "bins": [0, 1, 2], "counts": [500, 500]})"
                                        "\n");
  const std::string bad = file("bad.jsonl", R"({"name": "l0", "bins": [0, 2, 1], "counts": [5, 5]})"
                                            "\n");
  r = run_process(
      {kBin, "check", (dir_ / "base").string(), (dir_ / "same").string(), "--activations", a + "," + a}, 120);
  EXPECT_EQ(item11(dir_ / "same" / "check.json")["findings"].size(), 2u);
  r = run_process(
      {kBin, "check", (dir_ / "base").string(), (dir_ / "same").string(), "--activations", a + "," + bad},
      120);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.jsonl:1: field 'bins[2]'"), std::string::npos) << r.err;
}

// Check item 9 from CUPTI kernel records: --kernels with the JSON lines of
// `probe gpu-context` or an Nsight Systems SQLite export; without it, the
// probe's lines in both runs' samples.jsonl. The candidate launches a kernel
// the base never did, with 40% of its kernel time: regressed. A bad file is
// bad input (exit 2).
TEST_F(Cli, CheckDiffsTheKernelInventories) {
  // Two identical sim runs: every other item passes or has no data.
  for (const char* name : {"base", "cand"})
    ASSERT_EQ(sim({"--num-requests", "60", "--rate", "50", "--seed", "1", "--quiet", "--out",
                   (dir_ / name).string()})
                  .exit_code,
              0);
  // Four kernels, five launches each, 1000 (k + 1) ns a launch: 50,000 ns.
  const auto line = [](const std::string& kernel, long start_ns, long ns) {
    std::ostringstream s;
    s << R"({"t":0.)" << std::setw(9) << std::setfill('0') << start_ns
      << R"(,"source":"cupti","name":"kernel_duration_ns","labels":{"gpu":"0","stream":"7","what":")"
      << kernel << R"(","bytes":"0"},"value":)" << ns << "}\n";
    return s.str();
  };
  std::string common = R"({"t":0.5,"source":"nvml","name":"power_w","labels":{"gpu":"0"},"value":312.5})"
                       "\n";
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 5; ++j)
      common += line("_Z6kernelILi" + std::to_string(k) + "EEvv", 10000 * j + k, 1000 * (k + 1));
  const std::string added = line("fused_moe_kernel", 100, 20000) + line("fused_moe_kernel", 90000, 13334);
  const std::string base = file("base.jsonl", common), cand = file("cand.jsonl", common + added);
  const auto item9 = [&]() {
    const auto j = nlohmann::json::parse(slurp(dir_ / "cand" / "check.json"));
    for (const auto& it : j["items"])
      if (it["number"] == 9) return it;
    return nlohmann::json();
  };
  const auto new_share = [](const nlohmann::json& item) {
    for (const auto& f : item["findings"])
      if (f["metric"] == "candidate GPU time in kernels the base did not launch")
        return f["change"].get<double>();
    return -1.0;
  };
  const auto check = [&](std::vector<std::string> more) {
    std::vector<std::string> args{kBin, "check", (dir_ / "base").string(), (dir_ / "cand").string()};
    args.insert(args.end(), more.begin(), more.end());
    return run_process(args, 120);
  };
  auto r = check({"--kernels", base + "," + cand});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  auto it = item9();
  EXPECT_EQ(it["verdict"], "regressed") << it.dump(1);
  EXPECT_NEAR(new_share(it), 33334.0 / 83334, 1e-9) << it.dump(1);
  EXPECT_EQ(it["evidence"]["kernels"]["new"], 1);
  EXPECT_EQ(it["evidence"]["kernels"]["top_new"][0]["name"], "fused_moe_kernel");
  EXPECT_EQ(it["evidence"]["kernels"]["candidate"]["launches"], 22);
  EXPECT_NE(r.out.find("candidate GPU time in kernels the base did not launch"), std::string::npos) << r.out;
  r = check({"--kernels", base + "," + base});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(item9()["verdict"], "pass") << item9().dump(1);

  // The candidate as an Nsight Systems export: the kernels matched by mangledName.
  const std::string export_file = (dir_ / "cand.sqlite").string();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(export_file.c_str(), &db), SQLITE_OK);
    std::string sql =
        "PRAGMA synchronous = OFF; BEGIN;"
        "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId "
        "INTEGER "
        "NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid "
        "INTEGER, "
        "demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER);"
        "INSERT INTO StringIds VALUES (1, 'fused_moe_kernel');";
    for (int k = 0; k < 4; ++k) {
      const std::string id = std::to_string(10 + k), k_s = std::to_string(k);
      sql += "INSERT INTO StringIds VALUES (" + id + ", 'void kernel<" + k_s + ">()'), (" + id +
             "0, 'kernel'), (" + id + "1, '_Z6kernelILi" + k_s + "EEvv');";
      for (int j = 0; j < 5; ++j)
        sql += "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (" + std::to_string(10000 * j + k) + ", " +
               std::to_string(10000 * j + k + 1000 * (k + 1)) + ", 0, 1, 7, 0, 0, " + id + ", " + id + "0, " +
               id + "1);";
    }
    sql +=
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 20100, 0, 1, 7, 0, 0, 1, 1, 1), "
        "(90000, 103334, 0, 1, 7, 0, 0, 1, 1, 1); COMMIT;";
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  r = check({"--kernels", base + "," + export_file});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  it = item9();
  EXPECT_EQ(it["verdict"], "regressed") << it.dump(1);
  EXPECT_EQ(it["evidence"]["kernels"]["candidate"]["format"], "nsys-sqlite");
  EXPECT_EQ(it["evidence"]["kernels"]["common"], 4);
  EXPECT_NEAR(new_share(it), 33334.0 / 83334, 1e-9);

  // Without --kernels: the probe's lines appended to each run's samples.jsonl.
  std::ofstream(dir_ / "base" / "samples.jsonl", std::ios::app) << common;
  std::ofstream(dir_ / "cand" / "samples.jsonl", std::ios::app) << common + added;
  r = check({});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  it = item9();
  EXPECT_EQ(it["verdict"], "regressed") << it.dump(1);
  EXPECT_EQ(it["evidence"]["kernels"]["candidate"]["source"], (dir_ / "cand" / "samples.jsonl").string());

  const std::string bad =
      file("bad.jsonl", line("k", 1, 5) + R"({"t":1,"source":"cupti","name":"kernel_duration_ns","value":5})"
                                          "\n");
  r = check({"--kernels", base + "," + bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.jsonl:2: field 'labels': expected an object"), std::string::npos) << r.err;
  const std::string none = file("none.sqlite", std::string("SQLite format 3\0", 16));
  r = check({"--kernels", base + "," + none});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("none.sqlite"), std::string::npos) << r.err;
}

TEST_F(Cli, JsonSummaryOnStdout) {
  const auto r = sim({"--num-requests", "20", "--json"});
  ASSERT_EQ(r.exit_code, 0);
  const auto s = nlohmann::json::parse(r.out);
  EXPECT_EQ(s["requests_completed"], 20);
}

TEST_F(Cli, InterruptKeepsEveryFinishedRequest) {
  const auto out = dir_ / "run";
  const auto history = (dir_ / "history.db").string();
  Child child(
      {kBin, "sim", "--num-requests", "3000000", "--rate", "2000", "--input-len", "fixed:16", "--output-len",
       "fixed:64", "--fixed-step-ms", "1", "--no-steps", "--out", out.string(), "--history", history},
      (dir_ / "stdout").string(), (dir_ / "stderr").string());
  // Wait (bounded) until requests have started to finish, then interrupt.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         (!fs::exists(out / "requests.jsonl") || fs::file_size(out / "requests.jsonl") < 10000))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  child.signal(SIGINT);
  const auto r = child.wait(60);
  ASSERT_EQ(r.exit_code, 130) << r.err;
  EXPECT_NE(r.err.find("interrupted"), std::string::npos);
  const auto run = nlohmann::json::parse(slurp(out / "run.json"));
  EXPECT_EQ(run["partial"], true);
  std::ifstream req(out / "requests.jsonl");
  std::string line;
  std::uint64_t n = 0;
  while (std::getline(req, line)) {
    ASSERT_TRUE(nlohmann::json::accept(line)) << "line " << n;
    ++n;
  }
  EXPECT_GT(n, 0u);
  EXPECT_LT(n, 3000000u);
  EXPECT_EQ(run["summary"]["requests_total"].get<std::uint64_t>(), n);
  // Registered in the history, marked partial.
  const auto listed = run_process({kBin, "history", "--history", history, "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const auto runs = nlohmann::json::parse(listed.out)["runs"];
  ASSERT_EQ(runs.size(), 1u) << listed.out;
  EXPECT_EQ(runs[0]["partial"], true);
  EXPECT_EQ(runs[0]["path"], fs::weakly_canonical(out).string());
}

// bench and sim register their runs; `history --json` lists them newest
// first; `check --baseline auto` compares a run with the latest one of the
// same workload, target and settings (another seed), and finds none for
// another rate; `check --trend` reads the same runs.
TEST_F(Cli, HistoryListsRunsAndCheckFindsTheBaseline) {
  const std::string db = (dir_ / "h" / "history.db").string();
  const auto run_sim = [&](const std::string& name, const std::string& seed, const std::string& rate,
                           std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--num-requests",
                                     "300",
                                     "--rate",
                                     rate,
                                     "--seed",
                                     seed,
                                     "--input-len",
                                     "fixed:64",
                                     "--output-len",
                                     "fixed:16",
                                     "--fixed-step-ms",
                                     "1",
                                     "--quiet",
                                     "--out",
                                     (dir_ / name).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = sim(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");  // registered without a warning
  };
  run_sim("a", "1", "20", {"--history", db, "--tag", "base", "--tag", "version=v1"});
  run_sim("b", "2", "20", {"--history", db});
  run_sim("c", "3", "30", {"--history", db});
  run_sim("d", "4", "20", {"--no-history"});
  // Without --history: $XDG_DATA_HOME/tokenscope/history.db (the test's own, process.cpp).
  run_sim("e", "5", "20");
  const char* xdg = std::getenv("XDG_DATA_HOME");
  ASSERT_NE(xdg, nullptr);
  EXPECT_TRUE(fs::exists(fs::path(xdg) / "tokenscope" / "history.db"));

  const auto listed = run_process({kBin, "history", "--history", db, "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const auto j = nlohmann::json::parse(listed.out);
  EXPECT_EQ(j["history"], db);
  const auto& runs = j["runs"];
  ASSERT_EQ(runs.size(), 3u) << listed.out;
  const auto path = [&](const char* name) { return fs::weakly_canonical(dir_ / name).string(); };
  EXPECT_EQ(runs[0]["path"], path("c"));
  EXPECT_EQ(runs[1]["path"], path("b"));
  EXPECT_EQ(runs[2]["path"], path("a"));
  EXPECT_EQ(runs[2]["tags"], nlohmann::json({"base", "version=v1"}));
  EXPECT_EQ(runs[2]["target"], "sim");
  EXPECT_EQ(runs[2]["target_version"], "v1");
  EXPECT_EQ(runs[2]["command"], "sim");
  EXPECT_EQ(runs[2]["partial"], false);
  EXPECT_EQ(runs[1]["workload_hash"], runs[2]["workload_hash"]);  // another seed: the same workload
  EXPECT_EQ(runs[1]["settings_hash"], runs[2]["settings_hash"]);
  EXPECT_NE(runs[0]["workload_hash"], runs[2]["workload_hash"]);  // another rate
  EXPECT_GT(runs[2]["metrics"]["ttft_ms.p99"].get<double>(), 0);
  EXPECT_EQ(runs[2]["metrics"]["error_rate"], 0.0);
  // Filters and the table.
  const auto tagged = run_process({kBin, "history", "--history", db, "--tag", "base", "--json"});
  EXPECT_EQ(nlohmann::json::parse(tagged.out)["runs"].size(), 1u);
  const auto table = run_process({kBin, "history", "--history", db, "--limit", "2"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("TTFT p99"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(path("c")), std::string::npos) << table.out;
  EXPECT_EQ(table.out.find(path("a")), std::string::npos) << table.out;

  // b's baseline is a; c (another rate) has none; d was never registered
  // but is like a and b, so b (the latest before d was written) is its base.
  const auto check_b =
      run_process({kBin, "check", "--baseline", "auto", (dir_ / "b").string(), "--history", db});
  EXPECT_TRUE(check_b.exit_code == 0 || check_b.exit_code == 1) << check_b.out << check_b.err;
  EXPECT_NE(check_b.out.find("baseline (auto): " + path("a") + " (history run #1"), std::string::npos)
      << check_b.out;
  EXPECT_NE(check_b.out.find("base a -> candidate b"), std::string::npos) << check_b.out;
  const auto check_c =
      run_process({kBin, "check", "--baseline", "auto", (dir_ / "c").string(), "--history", db});
  EXPECT_EQ(check_c.exit_code, 2);
  EXPECT_NE(check_c.err.find("no comparable run before"), std::string::npos) << check_c.err;
  const auto check_d = run_process(
      {kBin, "check", "--baseline", "auto", (dir_ / "d").string(), "--history", db, "--format", "json"});
  EXPECT_TRUE(check_d.exit_code == 0 || check_d.exit_code == 1) << check_d.err;
  EXPECT_NE(check_d.err.find("baseline (auto): " + path("b")), std::string::npos) << check_d.err;
  EXPECT_EQ(nlohmann::json::parse(check_d.out)["mode"], "compare");

  // The trend of a's and b's settings (the latest complete run is c's: filter by tag-less workload).
  const auto trend = run_process({kBin, "check", "--trend", "ttft_ms.p99", "--history", db, "--workload",
                                  runs[2]["workload_hash"].get<std::string>(), "--format", "json"});
  EXPECT_EQ(trend.exit_code, 0) << trend.err;
  const auto t = nlohmann::json::parse(trend.out);
  EXPECT_EQ(t["points"].size(), 2u);
  EXPECT_EQ(t["changes"].size(), 0u);
  EXPECT_EQ(run_process({kBin, "check", "--trend", "ttft_p99", "--history", db}).exit_code, 2);

  // Not a history: exit 2 with a message naming the file.
  const std::string bad = file("bad.db", std::string(5000, 'x'));
  const auto not_db = run_process({kBin, "history", "--history", bad});
  EXPECT_EQ(not_db.exit_code, 2);
  EXPECT_NE(not_db.err.find(bad + ": not a readable tokenscope history database"), std::string::npos)
      << not_db.err;
  // A run still completes when its history cannot be written: one warning.
  const auto warned = sim(
      {"--num-requests", "50", "--rate", "20", "--quiet", "--out", (dir_ / "f").string(), "--history", bad});
  EXPECT_EQ(warned.exit_code, 0);
  EXPECT_NE(warned.err.find("warning: " + (dir_ / "f").string() + " was not registered in the history"),
            std::string::npos)
      << warned.err;
}

TEST_F(Cli, ReplaysThePublicTraces) {
  if (!fs::exists(kShared)) GTEST_SKIP() << "shared traces not present";
  const auto share = sim({"--trace", kShared + "ShareGPT_V3_filtered_500.json", "--rate", "5", "--output-len",
                          "fixed:100", "--json"});
  ASSERT_EQ(share.exit_code, 0) << share.err;
  const auto s = nlohmann::json::parse(share.out);
  EXPECT_EQ(s["requests_completed"], 500);
  EXPECT_EQ(s["output_tokens_total"], 50000);
  const auto moon = sim({"--trace", kShared + "conversation_trace.jsonl", "--max-requests", "300", "--model",
                         "llama-3.1-8b", "--jitter-bucket-ms", "3000", "--json"});
  ASSERT_EQ(moon.exit_code, 0) << moon.err;
  EXPECT_GT(nlohmann::json::parse(moon.out)["prefix_cache_hit_rate"].get<double>(), 0.01);
}

// sim --plan: the fleets tried printed, the smallest that meets the SLO run
// into --out with run.json "plan"; refusals for a plan without an SLO and
// with --replicas.
TEST_F(Cli, SimPlanFindsTheSmallestFleetAndRunsIt) {
  const auto out = dir_ / "plan";
  const std::vector<std::string> load = {"--num-requests", "600",        "--rate",       "60",
                                         "--input-len",    "fixed:2000", "--output-len", "fixed:64",
                                         "--seed",         "3"};
  auto args = load;
  args.insert(args.end(),
              {"--plan", "--slo", "ttft_ms=300,p=95", "--gpu-cost-per-hour", "2", "--out", out.string()});
  const auto r = sim(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("plan: the fewest replicas"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("smallest: "), std::string::npos) << r.out;
  const auto run = nlohmann::json::parse(slurp(out / "run.json"));
  const auto n = run["plan"]["smallest_replicas"].get<int>();
  EXPECT_GT(n, 1);
  EXPECT_EQ(run["fleet"]["replicas"], n) << "the run in --out is the smallest fleet";
  for (const auto& [cls, a] : run["summary"]["slo_attainment"].items())
    EXPECT_TRUE(a["pass"].get<bool>()) << cls;
  EXPECT_EQ(run["settings"]["requested"]["slo"], nlohmann::json::array({"ttft_ms=300,p=95"}));
  for (const auto& p : run["plan"]["points"])
    EXPECT_DOUBLE_EQ(p["cost_per_hour"].get<double>(), 2.0 * p["gpus"].get<double>());
  // Up to too few replicas: none meets it (exit 1), and nothing is written.
  auto few = load;
  few.insert(few.end(), {"--plan", "--slo", "ttft_ms=300,p=95", "--plan-max-replicas", std::to_string(n - 1),
                         "--out", (dir_ / "none").string()});
  const auto f = sim(few);
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_NE(f.out.find("no fleet of up to"), std::string::npos) << f.out;
  EXPECT_FALSE(fs::exists(dir_ / "none" / "run.json"));
  auto no_slo = load;
  no_slo.push_back("--plan");
  const auto e = sim(no_slo);
  EXPECT_EQ(e.exit_code, 2);
  EXPECT_NE(e.err.find("give --slo"), std::string::npos) << e.err;
  auto with_replicas = load;
  with_replicas.insert(with_replicas.end(), {"--plan", "--slo", "ttft_ms=300", "--replicas", "4"});
  const auto w = sim(with_replicas);
  EXPECT_EQ(w.exit_code, 2);
  EXPECT_NE(w.err.find("drop --replicas"), std::string::npos) << w.err;
  // --json: the plan and the summary of the fleet it chose.
  auto as_json = load;
  as_json.insert(as_json.end(), {"--plan", "--slo", "ttft_ms=300,p=95", "--json", "--quiet", "--out",
                                 (dir_ / "json").string()});
  const auto j = sim(as_json);
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto printed = nlohmann::json::parse(j.out);
  EXPECT_EQ(printed["plan"]["smallest_replicas"], n);
  EXPECT_EQ(printed["summary"]["requests_total"], 600);
  EXPECT_EQ(j.err.find("plan: "), std::string::npos) << "--quiet: no progress lines";
  // Refused before any fleet runs: a directory holding a run, --repeat, the plan's options without --plan.
  auto again = load;
  again.insert(again.end(), {"--plan", "--slo", "ttft_ms=300,p=95", "--out", out.string()});
  const auto a = sim(again);
  EXPECT_EQ(a.exit_code, 2);
  EXPECT_EQ(a.out.find("plan: the fewest"), std::string::npos) << a.out;
  auto repeat = load;
  repeat.insert(repeat.end(),
                {"--plan", "--slo", "ttft_ms=300", "--repeat", "2", "--out", (dir_ / "r").string()});
  EXPECT_EQ(sim(repeat).exit_code, 2);
  auto cost_alone = load;
  cost_alone.insert(cost_alone.end(), {"--gpu-cost-per-hour", "2"});
  EXPECT_EQ(sim(cost_alone).exit_code, 2);
}

TEST_F(Cli, SimRunsAFleetBehindARouterAndSaysEachRequestsReplica) {
  const auto out = dir_ / "fleet";
  const auto r = sim({"--replicas", "3", "--router", "round-robin", "--num-requests", "60", "--rate", "20",
                      "--input-len", "fixed:200", "--output-len", "fixed:20", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("fleet: 3 replicas, router round-robin"), std::string::npos) << r.out;
  // Round-robin: the k-th request to arrive went to replica k mod 3, and its record says so.
  std::vector<std::tuple<long long, long long, int>> order;  // arrival, id, replica
  std::ifstream in(out / "requests.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    order.emplace_back(j["t_sched_ns"].get<long long>(), j["id"].get<long long>(), j["replica"].get<int>());
  }
  ASSERT_EQ(order.size(), 60u);
  std::sort(order.begin(), order.end());
  for (std::size_t k = 0; k < order.size(); ++k)
    EXPECT_EQ(std::get<2>(order[k]), static_cast<int>(k % 3)) << k;
  const auto run = nlohmann::json::parse(slurp(out / "run.json"));
  ASSERT_EQ(run["fleet"]["per_replica"].size(), 3u);
  std::uint64_t completed = 0;
  for (const auto& rep : run["fleet"]["per_replica"]) {
    EXPECT_EQ(rep["routed"], 20);
    completed += rep["summary"]["requests_completed"].get<std::uint64_t>();
  }
  EXPECT_EQ(completed, 60u);
  EXPECT_EQ(run["summary"]["requests_completed"], 60);
  EXPECT_EQ(run["settings"]["requested"]["fleet"]["router"], "round-robin");
  // A fleet writes no steps or samples yet, and says so.
  EXPECT_FALSE(fs::exists(out / "steps.jsonl"));
  EXPECT_TRUE(run["observe"]["note"].is_string());
  // Refused: an unknown router, perturbations (they act on one engine).
  EXPECT_EQ(sim({"--replicas", "2", "--router", "random", "--num-requests", "5"}).exit_code, 2);
  const auto perturbed = sim({"--replicas", "2", "--perturb", "leak:per_min=2%", "--num-requests", "5"});
  EXPECT_EQ(perturbed.exit_code, 2);
  EXPECT_NE(perturbed.err.find("--perturb and --replicas"), std::string::npos) << perturbed.err;
}

// sim --prefill-replicas/--decode-replicas: every prompt's KV over the
// prefill replica's link, records by decode replica, a lower TPOT than
// colocated replicas on the same load, and the refusals.
TEST_F(Cli, SimDisaggregatedPrefillSendsTheKvAndDecodesWithoutPrefillChunks) {
  const std::vector<std::string> load = {"--num-requests", "120",        "--rate",       "9",
                                         "--input-len",    "fixed:3000", "--output-len", "fixed:96",
                                         "--seed",         "4"};
  auto split = load;
  split.insert(split.end(), {"--prefill-replicas", "1", "--decode-replicas", "2", "--kv-link-gb-s", "25",
                             "--kv-link-latency-us", "20", "--out", (dir_ / "pd").string()});
  const auto p = sim(split);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(
      p.out.find("disaggregated: 1 prefill, 2 decode (decode router least-loaded); KV link 25 GB/s, 20 us: "
                 "120 transfers"),
      std::string::npos)
      << p.out;
  const auto run = nlohmann::json::parse(slurp(dir_ / "pd" / "run.json"));
  const auto& d = run["fleet"]["disaggregation"];
  EXPECT_EQ(run["fleet"]["replicas"], 3);
  EXPECT_EQ(run["fleet"]["gpus"], 3);
  EXPECT_EQ(d["transfers"], 120);
  EXPECT_EQ(d["transfers_delivered"], 120);
  // Every prompt's KV went over the one prefill replica's link.
  const double per_token = run["settings"]["effective"]["engine"]["kv_bytes_per_token"].get<double>();
  EXPECT_DOUBLE_EQ(d["transfer_bytes"].get<double>(), 120 * 3000 * per_token);
  EXPECT_DOUBLE_EQ(d["link_bytes"][0].get<double>(), 120 * 3000 * per_token);
  // A transfer takes at least its bytes over the link and the latency.
  EXPECT_GE(d["transfer_ms"]["p50"].get<double>(), 3000 * per_token / 25e9 * 1e3 + 0.02 - 1e-9);
  const auto& reps = run["fleet"]["per_replica"];
  EXPECT_EQ(reps[0]["role"], "prefill");
  EXPECT_EQ(reps[1]["role"], "decode");
  EXPECT_EQ(reps[0]["routed"], 120);
  EXPECT_EQ(reps[1]["routed"].get<int>() + reps[2]["routed"].get<int>(), 120);
  EXPECT_EQ(run["engine_counters"]["prompt_tokens"], 120 * 3000);
  EXPECT_EQ(run["engine_counters"]["generation_tokens"], 120 * 96);
  // Each record names its decode replica.
  std::istringstream lines(slurp(dir_ / "pd" / "requests.jsonl"));
  std::string line;
  int records = 0;
  while (std::getline(lines, line)) {
    const auto r = nlohmann::json::parse(line);
    EXPECT_GE(r["replica"].get<int>(), 1) << line;
    ++records;
  }
  EXPECT_EQ(records, 120);
  // The same load on three colocated replicas: their decode steps carry
  // 3000-token prefill chunks, the decode replicas' never do (DistServe's
  // case for splitting).
  auto colocated = load;
  colocated.insert(colocated.end(), {"--replicas", "3", "--out", (dir_ / "co").string()});
  ASSERT_EQ(sim(colocated).exit_code, 0);
  const auto co = nlohmann::json::parse(slurp(dir_ / "co" / "run.json"));
  EXPECT_LT(run["summary"]["tpot_ms"]["p99"].get<double>(), co["summary"]["tpot_ms"]["p99"].get<double>());

  // Refused: one side alone, with --replicas, --pools or --plan.
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--prefill-replicas", "1"},
        {"--prefill-replicas", "1", "--decode-replicas", "1", "--replicas", "2"},
        {"--prefill-replicas", "1", "--decode-replicas", "1", "--pools",
         file("pd-pools.yaml", "pools:\n  - {gpu: h100, count: 1}\n")},
        {"--prefill-replicas", "1", "--decode-replicas", "1", "--plan", "--slo", "ttft_ms=500"},
        {"--prefill-replicas", "1", "--decode-replicas", "1", "--kv-link-gb-s", "0"},
        {"--kv-link-gb-s", "10"},
        {"--decode-router", "round-robin"},
        {"--router-weights", "equal"}}) {
    auto bad = load;
    bad.insert(bad.end(), extra.begin(), extra.end());
    const auto b = sim(bad);
    EXPECT_EQ(b.exit_code, 2) << extra.back() << ": " << b.err;
  }
}

// sim --pools: one pool of N alike is the fleet of --replicas N, record for
// record; pools of different GPUs behind round-robin share the requests
// alike, and the faster GPU's replica decodes faster.
TEST_F(Cli, SimPoolsOfOneKindAreTheFleetOfReplicasAndAFasterGpuDecodesFaster) {
  const std::vector<std::string> load = {"--num-requests", "90",          "--rate",       "12",
                                         "--input-len",    "fixed:600",   "--output-len", "fixed:64",
                                         "--router",       "round-robin", "--seed",       "2"};
  auto replicas = load;
  replicas.insert(replicas.end(), {"--replicas", "3", "--out", (dir_ / "replicas").string()});
  ASSERT_EQ(sim(replicas).exit_code, 0);
  auto one_pool = load;
  one_pool.insert(one_pool.end(), {"--pools", file("one.yaml", "pools:\n  - {gpu: h100, count: 3}\n"),
                                   "--out", (dir_ / "pool").string()});
  const auto p = sim(one_pool);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(slurp(dir_ / "replicas" / "requests.jsonl"), slurp(dir_ / "pool" / "requests.jsonl"));
  const auto a = nlohmann::json::parse(slurp(dir_ / "replicas" / "run.json"));
  const auto b = nlohmann::json::parse(slurp(dir_ / "pool" / "run.json"));
  EXPECT_EQ(a["summary"], b["summary"]);
  EXPECT_EQ(b["fleet"]["gpus"], 3);
  EXPECT_EQ(b["fleet"]["pools"][0]["name"], "h100x1");

  auto mixed = load;
  mixed.insert(mixed.end(), {"--pools",
                             file("mixed.yaml",
                                  "pools:\n"
                                  "  - {name: new, gpu: h100, count: 1, gpu-cost-per-hour: 4}\n"
                                  "  - {name: old, gpu: a100, count: 1, gpu-cost-per-hour: 1.5}\n"),
                             "--out", (dir_ / "mixed").string()});
  const auto m = sim(mixed);
  ASSERT_EQ(m.exit_code, 0) << m.err;
  EXPECT_NE(m.out.find("pool new: 1 x h100-sxm (TP 1), 1 GPUs, $4.00/GPU-hour"), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("2 GPUs in all, $5.50 an hour"), std::string::npos) << m.out;
  const auto run = nlohmann::json::parse(slurp(dir_ / "mixed" / "run.json"));
  EXPECT_EQ(run["fleet"]["gpus"], 2);
  EXPECT_DOUBLE_EQ(run["fleet"]["cost_per_hour"].get<double>(), 5.5);
  const auto& reps = run["fleet"]["per_replica"];
  ASSERT_EQ(reps.size(), 2u);
  EXPECT_EQ(reps[0]["pool"], "new");
  EXPECT_EQ(reps[1]["pool"], "old");
  EXPECT_EQ(reps[0]["routed"], 45);
  EXPECT_EQ(reps[1]["routed"], 45);
  // Decoding is bound by memory bandwidth: an H100 (3.35 TB/s) against an
  // A100 (2.04 TB/s) reading the same weights each step.
  const double tpot_new = reps[0]["summary"]["tpot_ms"]["p50"].get<double>();
  const double tpot_old = reps[1]["summary"]["tpot_ms"]["p50"].get<double>();
  EXPECT_LT(tpot_new, tpot_old);
  EXPECT_EQ(run["fleet"]["pools"][1]["gpu"], "a100-80g-sxm");
  // Each replica's speed (tokens a second of a reference step); round-robin ignores them.
  EXPECT_GT(reps[0]["speed_tokens_per_s"].get<double>(), reps[1]["speed_tokens_per_s"].get<double>());
  EXPECT_DOUBLE_EQ(reps[0]["router_weight"].get<double>() + reps[1]["router_weight"].get<double>(), 2.0);
  // Least-loaded weighs the loads by the speeds: the H100 takes more than
  // with outstanding tokens alone.
  std::map<std::string, int> to_new;
  for (const std::string w : {"speed", "equal"}) {
    auto ll = load;
    *(std::find(ll.begin(), ll.end(), "--router") + 1) = "least-loaded";
    ll.insert(ll.end(), {"--pools", dir_.string() + "/mixed.yaml", "--router-weights", w, "--out",
                         (dir_ / ("ll-" + w)).string()});
    const auto r = sim(ll);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(slurp(dir_ / ("ll-" + w) / "run.json"));
    to_new[w] = j["fleet"]["per_replica"][0]["routed"].get<int>();
    EXPECT_EQ(j["fleet"]["per_replica"][0]["router_weight"].is_null(), w == "equal");
  }
  EXPECT_GT(to_new["speed"], to_new["equal"]);

  // Refused: --pools with --replicas, --plan-max-replicas with a plan over
  // pools; an unknown GPU named by its line.
  auto both = load;
  both.insert(both.end(), {"--pools", dir_.string() + "/one.yaml", "--replicas", "2"});
  EXPECT_EQ(sim(both).exit_code, 2);
  auto plan_max = load;
  plan_max.insert(plan_max.end(), {"--pools", dir_.string() + "/one.yaml", "--plan", "--slo", "ttft_ms=500",
                                   "--plan-max-replicas", "8"});
  EXPECT_EQ(sim(plan_max).exit_code, 2);
  auto unknown = load;
  unknown.insert(
      unknown.end(),
      {"--pools", file("bad.yaml", "pools:\n  - {gpu: h100, count: 1}\n  - {gpu: tpu9, count: 1}\n")});
  const auto u = sim(unknown);
  EXPECT_EQ(u.exit_code, 2);
  EXPECT_NE(u.err.find("bad.yaml:3: field 'pools[1]'"), std::string::npos) << u.err;
}

TEST_F(Cli, ProfileReadsTheKvCapacityAndTheCapFromTheServersCounters) {
  // `serve` says neither its batch cap nor its KV capacity, but its
  // /metrics has vLLM's running, waiting and KV usage gauges: 256 blocks of
  // 16 tokens, 4 sequences at most.
  Server server(dir_, {"--num-gpu-blocks", "256", "--max-num-seqs", "4"});
  const auto out = (dir_ / "serve.yaml").string();
  const auto p = run_process({kBin, "profile", "--target", server.url(""), "--out", out, "--prompt-lens",
                              "256", "--batch-sizes", "2,4,8", "--waves", "2", "--output-len", "96"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const std::string yaml = slurp(out);
  EXPECT_NE(yaml.find("max_num_seqs: 4\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("max_num_seqs: \"the server's counters"), std::string::npos) << yaml;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(yaml, m, std::regex("kv_capacity_tokens: ([0-9]+)\n"))) << yaml;
  // Low by at most a block per running request (paged rounding): within 10%.
  EXPECT_NEAR(std::stod(m[1].str()), 4096.0, 410.0) << yaml;
  EXPECT_NE(yaml.find("kv_capacity_tokens: \"the server's counters"), std::string::npos) << yaml;
}

TEST_F(Cli, ProfileFitsTheBuiltInServerAndSimRunsWithTheProfile) {
  // A short designed sweep against the in-process simulator (real time).
  const auto out = (dir_ / "sim.yaml").string();
  const auto p = run_process({kBin, "profile", "--out", out, "--prompt-lens", "64,512", "--batch-sizes",
                              "1,4", "--waves", "2", "--output-lens", "8,24"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("decode_seq_us"), std::string::npos) << p.out;
  const std::string yaml = slurp(out);
  EXPECT_NE(yaml.find("tokenscope_profile: 1"), std::string::npos);
  EXPECT_NE(yaml.find("max_num_seqs: 256"), std::string::npos) << yaml;
  EXPECT_TRUE(fs::exists(dir_ / "sim.yaml.runs" / "b4-p512" / "requests.jsonl"));
  // A second output length: its own cells, longer decodes.
  EXPECT_TRUE(fs::exists(dir_ / "sim.yaml.runs" / "b4-p512-o24" / "requests.jsonl"));
  // The profile drives sim.
  const auto s = sim({"--profile", out, "--num-requests", "40", "--rate", "4", "--input-len", "fixed:256",
                      "--output-len", "fixed:16", "--json"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_GT(nlohmann::json::parse(s.out)["ttft_ms"]["p50"].get<double>(), 0.0) << s.out;
  // Past the prompts it measured, sim says it extrapolates.
  const auto longer = sim({"--profile", out, "--num-requests", "10", "--rate", "4", "--input-len",
                           "fixed:1000", "--output-len", "fixed:4"});
  ASSERT_EQ(longer.exit_code, 0) << longer.err;
  EXPECT_NE(longer.out.find("prompts of up to 1000 tokens, the profile measured up to 512"),
            std::string::npos)
      << longer.out;
  // --from fits the same runs again.
  const auto again =
      run_process({kBin, "profile", "--from", (dir_ / "sim.yaml.runs" / "b4-p512").string(), "--from",
                   (dir_ / "sim.yaml.runs" / "b1-p64").string(), "--out", (dir_ / "b.yaml").string()});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  // A bad profile: the file, the line and the field, exit 2.
  const auto bad = file("bad.yaml", "tokenscope_profile: 1\ncost:\n  step_overhead_ms: fast\n");
  const auto r = sim({"--profile", bad, "--num-requests", "5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.yaml:3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cost.step_overhead_ms"), std::string::npos) << r.err;
  // A run directory with nothing to fit: exit 1 with why.
  const auto none =
      run_process({kBin, "profile", "--from", dir_.string(), "--out", (dir_ / "c.yaml").string()});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("not a run directory"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace tokenscope::testing
