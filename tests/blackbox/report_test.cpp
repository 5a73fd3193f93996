// Black-box tests of `tokenscope report`: a real bench run (in-process
// simulator, samples.jsonl scraped from it) and a sweep, reported in every
// format; run directories cut the ways users meet them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "process.h"
#include "server.h"

namespace tokenscope::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class Report : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tokenscope_report_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  ProcessResult report(std::vector<std::string> args) {
    args.insert(args.begin(), {kBin, "report"});
    return run_process(args, 60);
  }
  fs::path bench_run(const std::string& name, const std::vector<std::string>& extra = {}) {
    const auto out = dir_ / name;
    std::vector<std::string> args = {kBin,       "bench",        "--progress", "none",
                                     "--quiet",  "--duration-s", "2",          "--input-len",
                                     "fixed:64", "--output-len", "fixed:16",   "--scrape-interval",
                                     "0.2",      "--out",        out.string()};
    if (std::find(extra.begin(), extra.end(), "--rate") == extra.end())
      args.insert(args.end(), {"--rate", "10"});
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_process(args, 120);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
  }
  // Runs tests/blackbox/node/report_browser.mjs on a page: exit 0 means
  // every check passed; its JSON says what it found.
  json browser_check(const fs::path& html, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {
        "/usr/bin/env", "node",
        std::string(TOKENSCOPE_SOURCE_DIR) + "/tests/blackbox/node/report_browser.mjs", html.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_process(args, 120);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    const json j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
    return j.is_discarded() ? json::object() : j;
  }
  fs::path dir_;
};

TEST_F(Report, BenchThenReportInEveryFormat) {
  const auto run = bench_run("run");
  ASSERT_TRUE(fs::exists(run / "samples.jsonl"));
  const auto bench_summary = json::parse(slurp(run / "run.json"))["summary"];

  // html (the default): RUN/report.html, one self-contained file.
  auto r = report({run.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("wrote " + (run / "report.html").string()), std::string::npos) << r.err;
  const std::string html = slurp(run / "report.html");
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("id=\"report-data\""), std::string::npos);
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_EQ(html.find("http://cdn"), std::string::npos);
  EXPECT_LT(html.size(), 2u << 20);
  // In a real browser (Debian's chromium driven by puppeteer-core,
  // report_browser.mjs): no console error or failed request, every chart
  // titled, captioned, with labelled axes and drawn data, and dragging across
  // one time chart zooms all of them.
  const json page = browser_check(run / "report.html");
  EXPECT_GE(page["charts"].get<int>(), 15) << page;  // 5 CDFs, 6 timelines, the server's series
  EXPECT_GE(page["time_charts"].get<int>(), 10) << page;
  EXPECT_EQ(page["zoom"]["charts_following"], page["zoom"]["of"]) << page;

  // json: the data behind the page, with the run's own summary and its sampled series.
  r = report({run.string(), "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto data = json::parse(r.out);
  ASSERT_EQ(data["runs"].size(), 1u);
  const auto& d = data["runs"][0];
  EXPECT_EQ(d["summary"], bench_summary);
  EXPECT_EQ(d["command"], "bench");
  EXPECT_FALSE(d["summary_recomputed"].get<bool>());
  EXPECT_EQ(d["requests"]["records"], bench_summary["requests_total"]);
  EXPECT_GT(d["cdf"]["ttft_ms"]["x"].size(), 5u);
  EXPECT_EQ(d["cdf"]["ttft_ms"]["y"].back(), 1.0);
  bool running = false;
  for (const auto& s : d["series"]) running |= s["name"] == "requests_running" && s["x"].size() > 3;
  EXPECT_TRUE(running) << "no requests_running series from the in-process server's /metrics";
  double planned = 0;
  for (const auto& v : d["timeline"]["planned_rps"])
    planned += v.get<double>() * d["timeline"]["window_s"].get<double>();
  EXPECT_NEAR(planned, bench_summary["requests_total"].get<double>(), 0.5);

  // text: bench's summary table.
  r = report({run.string(), "--format", "text"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tokenscope report: run (bench)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TTFT sched"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(bench_summary["requests_total"].dump() + " total"), std::string::npos) << r.out;

  // md to a file named by --out.
  r = report({run.string(), "--out", (dir_ / "summary.md").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(slurp(dir_ / "summary.md").find("| run | requests |"), std::string::npos);
}

TEST_F(Report, ACutRunAndOneWithoutSamplesGiveNotesNotCrashes) {
  const auto run = bench_run("run", {"--no-scrape", "--no-host", "--no-gpu"});
  // Ctrl-C as a crash leaves it: no summary, a half-written last line.
  auto run_json = json::parse(slurp(run / "run.json"));
  run_json["partial"] = true;
  run_json["summary"] = nullptr;
  std::ofstream(run / "run.json") << run_json.dump();
  std::ofstream(run / "requests.jsonl", std::ios::app) << "{\"id\":99999,\"t_sched_ns\":12";
  fs::remove(run / "samples.jsonl");
  const auto r = report({run.string(), "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto d = json::parse(r.out)["runs"][0];
  EXPECT_TRUE(d["partial"].get<bool>());
  EXPECT_TRUE(d["summary_recomputed"].get<bool>());
  EXPECT_GT(d["summary"]["requests_total"].get<int>(), 5);
  std::string notes;
  for (const auto& n : d["notes"]) notes += n.get<std::string>() + "\n";
  EXPECT_NE(notes.find("partial run"), std::string::npos) << notes;
  EXPECT_NE(notes.find("1 bad line skipped"), std::string::npos) << notes;
  EXPECT_NE(notes.find("no samples.jsonl"), std::string::npos) << notes;
  EXPECT_EQ(report({run.string(), "--out", (dir_ / "r.html").string()}).exit_code, 0);
}

TEST_F(Report, ASweepAndTwoRunsOverlaid) {
  const auto sweep = dir_ / "sweep";
  const auto b = run_process(
      {kBin, "bench", "--progress", "none", "--quiet", "--duration-s", "1", "--input-len", "fixed:32",
       "--output-len", "fixed:8", "--sweep-rates", "4,8", "--no-scrape", "--out", sweep.string()},
      120);
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto other = bench_run("other", {"--rate", "5"});
  const auto r = report({sweep.string(), other.string(), "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto data = json::parse(r.out);
  ASSERT_EQ(data["runs"].size(), 3u);
  EXPECT_EQ(data["runs"][0]["name"], "sweep/rate-4");
  EXPECT_EQ(data["runs"][1]["name"], "sweep/rate-8");
  ASSERT_EQ(data["sweeps"].size(), 1u);
  EXPECT_EQ(data["sweeps"][0]["curve"].size(), 2u);
  EXPECT_EQ(data["notes"].size(), 1u) << data["notes"];  // the runs' settings differ
  const auto t = report({sweep.string(), "--format", "text"});
  EXPECT_NE(t.out.find("sweep sweep"), std::string::npos) << t.out;
}

TEST_F(Report, SimAndBenchWriteTheirPageWithReport) {
  const auto sim = dir_ / "sim";
  auto r = run_process(
      {kBin, "sim", "--quiet", "--num-requests", "50", "--rate", "20", "--report", "--out", sim.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string html = slurp(sim / "report.html");
  EXPECT_NE(html.find("id=\"report-data\""), std::string::npos);
  EXPECT_NE(html.find("\"command\":\"sim\""), std::string::npos);
  EXPECT_EQ(run_process({kBin, "sim", "--num-requests", "5", "--report"}).exit_code, 2);  // needs --out

  const auto bench = bench_run("bench", {"--report"});
  EXPECT_NE(slurp(bench / "report.html").find("\"command\":\"bench\""), std::string::npos);
}

TEST_F(Report, ASimRunWithPhasesAndProbesInTheBrowser) {
  // sim with two tenants and shared prefixes: step charts, the heat map,
  // the waterfall and the per-tenant rates; phases as check will write them;
  // a probe's results beside it.
  const auto sim = dir_ / "sim";
  auto r = run_process({kBin, "sim", "--quiet", "--num-requests", "300", "--rate", "12", "--tenants", "2",
                        "--prefix-groups", "4", "--prefix-tokens", "512", "--out", sim.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ofstream(sim / "phases.json") << R"({"phases":[{"phase":"warm-up","start_ns":0,"end_ns":2000000000},)"
                                     << R"({"phase":"steady","start_ns":2000000000,"end_ns":20000000000}]})";
  const auto probes = dir_ / "probes";
  r = run_process({kBin, "probe", "line-sim", "--generate", "packed-counters", "--out", probes.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = report({sim.string(), probes.string(), "--out", (dir_ / "page.html").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json page = browser_check(dir_ / "page.html", {"--screenshot", (dir_ / "page.png").string()});
  std::string titles;
  for (const auto& t : page["titles"]) titles += t.get<std::string>() + "\n";
  for (const char* want : {"Hit rate × p99 TTFT → output tokens/s", "Waterfall of the 20 slowest requests",
                           "Batch per step", "KV-cache usage per step", "Completed requests per tenant"})
    EXPECT_NE(titles.find(want), std::string::npos) << want << " not in\n" << titles;
  EXPECT_GT(fs::file_size(dir_ / "page.png"), 10000u);
  const std::string html = slurp(dir_ / "page.html");
  EXPECT_NE(html.find("\"probe\":\"line-sim\""), std::string::npos);
  EXPECT_NE(html.find("\"phase\":\"warm-up\""), std::string::npos);
}

// sim --plan's run in the page: the fleets tried as a table and two charts
// (goodput and p99s by GPUs), in a real browser without console errors.
TEST_F(Report, AFleetPlanInThePage) {
  const auto sim = dir_ / "plan";
  auto r = run_process({kBin, "sim", "--quiet", "--num-requests", "600", "--rate", "60", "--input-len",
                        "fixed:2000", "--output-len", "fixed:64", "--seed", "3", "--plan", "--slo",
                        "ttft_ms=300,p=95", "--out", sim.string(), "--no-history"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // And a plan over two pools (the cheapest mix), run into its directory.
  const auto pools = dir_ / "pools.yaml";
  std::ofstream(pools) << "pools:\n  - {name: new, gpu: h100, count: 4, gpu-cost-per-hour: 4}\n"
                          "  - {name: old, gpu: a100, count: 3, gpu-cost-per-hour: 1.6}\n";
  const auto mix = dir_ / "mix";
  r = run_process(
      {kBin,           "sim",        "--num-requests",   "600",         "--rate",       "40",
       "--input-len",  "fixed:2000", "--output-len",     "fixed:64",    "--seed",       "3",
       "--plan",       "--slo",      "ttft_ms=500,p=95", "--pools",     pools.string(), "--router",
       "least-loaded", "--out",      mix.string(),       "--no-history"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("plan: the cheapest mix of pools (new up to 4, old up to 3; router least-loaded)"),
            std::string::npos)
      << r.out;
  const auto mixed = json::parse(slurp(mix / "run.json"));
  const auto& chosen = mixed["plan"]["cheapest_counts"];
  ASSERT_TRUE(chosen.is_object()) << mixed["plan"].dump();
  EXPECT_NE(r.out.find("cheapest: new=" + chosen["new"].dump() + " old=" + chosen["old"].dump()),
            std::string::npos)
      << r.out;
  // The fleet run into --out is the chosen mix (a pool of 0 left out).
  std::map<std::string, int> ran;
  for (const auto& p : mixed["fleet"]["pools"]) ran[p["name"].get<std::string>()] = p["count"].get<int>();
  for (const char* name : {"new", "old"})
    EXPECT_EQ(ran.contains(name) ? ran[name] : 0, chosen[name].get<int>()) << name;
  r = report({sim.string(), mix.string(), "--out", (dir_ / "page.html").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json page = browser_check(dir_ / "page.html");
  std::string titles;
  for (const auto& t : page["titles"]) titles += t.get<std::string>() + "\n";
  for (const char* want :
       {"Goodput by GPUs", "p99 latency by GPUs", "Goodput by $/hour", "p99 latency by $/hour"})
    EXPECT_NE(titles.find(want), std::string::npos) << want << " not in\n" << titles;
  int plans = 0;  // a section per run's plan, the pools' too
  for (const auto& h : page["sections"]) plans += h.get<std::string>().rfind("Fleet plan", 0) == 0;
  EXPECT_EQ(plans, 2) << page["sections"].dump();
  const auto run = json::parse(slurp(sim / "run.json"));
  const std::string html = slurp(dir_ / "page.html");
  EXPECT_NE(html.find("\"smallest_replicas\":" + run["plan"]["smallest_replicas"].dump()), std::string::npos);
  EXPECT_NE(html.find("\"cheapest_counts\":" + chosen.dump()), std::string::npos);
}

// Agentic tasks: two benches of a workload whose tool fails 40% of the
// time (no retries, so tasks fail at it), reported together: the data has
// each run's tasks, the text their summary lines, and the page, in a real
// browser, the tasks' section with its tables, a waterfall per run and a
// step's tooltip on hover.
TEST_F(Report, AgenticTasksInThePage) {
  const auto yaml = dir_ / "flaky.yaml";
  std::ofstream(yaml) << R"(duration_s: 3
arrival: {process: constant, rate_rps: 6}
tools:
  - {name: flaky, parameters: {type: object}, latency_ms: fixed:20, errors: {http_5xx: 0.4}}
classes:
  - name: agent
    slo: {task_ms: 20000, pass_rate: 0.9}
    task:
      steps:
        - {id: think, model: {prompt: "{{input}}", output_len: fixed:8}}
        - {id: act, tool: flaky, after: [think]}
        - {id: answer, model: {prompt: "{{act}}", output_len: fixed:8}, after: [act]}
)";
  const auto bench = [&](const std::string& name, const std::string& seed) {
    const auto out = dir_ / name;
    const auto r = run_process({kBin, "bench", "--workload", yaml.string(), "--seed", seed, "--progress",
                                "none", "--quiet", "--no-history", "--out", out.string()},
                               120);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
  };
  const auto a = bench("a", "1"), b = bench("b", "2");
  auto r = report({a.string(), b.string(), "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto data = json::parse(r.out);
  ASSERT_EQ(data["runs"].size(), 2u);
  for (const auto& run : data["runs"]) {
    const auto& t = run["tasks"];
    ASSERT_TRUE(t.is_object()) << run["name"];
    EXPECT_GT(t["summary"]["tasks"].get<int>(), 10) << t["summary"];
    EXPECT_GT(t["summary"]["failed"].get<int>(), 0) << t["summary"];
    EXPECT_EQ(t["summary"]["failures_by_step"]["act"], t["summary"]["failed"]);
    EXPECT_EQ(t["records"]["failed"], t["summary"]["failed"]);
    EXPECT_EQ(t["waterfall"]["shown"], t["waterfall"]["tasks"]);  // under the bound: every task
  }
  r = report({a.string(), "--format", "text"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  failed at step  act "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  class agent"), std::string::npos) << r.out;

  r = report({a.string(), b.string(), "--out", (dir_ / "page.html").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json page = browser_check(dir_ / "page.html");
  ASSERT_TRUE(page.contains("tasks")) << page;
  EXPECT_EQ(page["tasks"]["charts"], 2) << page;  // a waterfall per run
  EXPECT_GE(page["tasks"]["rows"].get<int>(), 20) << page;
  EXPECT_NE(page["tasks"]["tooltip"].get<std::string>().find("step think"), std::string::npos) << page;
  std::vector<std::string> titles = page["titles"];
  EXPECT_NE(std::find(titles.begin(), titles.end(), "a: Task waterfall"), titles.end()) << page["titles"];
  // A run without tasks has no such section.
  const auto plain = bench_run("plain");
  EXPECT_EQ(report({plain.string()}).exit_code, 0);
  EXPECT_FALSE(browser_check(plain / "report.html").contains("tasks"));
}

TEST_F(Report, BadInputIsAUsageError) {
  auto r = report({(dir_ / "missing").string()});
  EXPECT_EQ(r.exit_code, 2);
  fs::create_directories(dir_ / "empty");
  r = report({(dir_ / "empty").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("neither run.json nor requests.jsonl"), std::string::npos) << r.err;
  fs::create_directories(dir_ / "bad");
  std::ofstream(dir_ / "bad/run.json") << "{not json";
  r = report({(dir_ / "bad").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not a JSON object"), std::string::npos) << r.err;
  r = report({(dir_ / "empty").string(), "--format", "pdf"});
  EXPECT_EQ(r.exit_code, 2);
}

// sim builds its run's cache from the records as it writes them (not from
// the files read back): the cache it leaves is, byte for byte, the one a
// read of its files writes (docs/architecture.md "A run's data path"), for
// runs with and without samples and steps, with contention series, tenants
// and tenant switches.
TEST_F(Report, SimWritesTheCacheAReadOfItsFilesWrites) {
  const std::vector<std::vector<std::string>> runs = {
      {"--num-requests", "400", "--rate", "20"},
      {"--num-requests", "300", "--rate", "30", "--perturb", "steal:share=0.5,period_s=4", "--no-steps"},
      {"--num-requests", "200", "--rate", "15", "--no-samples"},
      {"--num-requests", "500", "--rate", "20", "--tenants", "4", "--max-active-tenants", "2",
       "--context-switch-ms", "5", "--prefix-groups", "4", "--prefix-tokens", "256"},
  };
  for (std::size_t k = 0; k < runs.size(); ++k) {
    const auto out = dir_ / ("run" + std::to_string(k));
    std::vector<std::string> args = {kBin, "sim", "--quiet", "--no-history", "--out", out.string()};
    args.insert(args.end(), runs[k].begin(), runs[k].end());
    auto r = run_process(args, 120);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string built = slurp(out / ".tokenscope-cache");
    ASSERT_FALSE(built.empty()) << "run " << k;
    fs::remove(out / ".tokenscope-cache");
    r = run_process({kBin, "check", out.string(), "--out", (dir_ / "check.json").string()}, 120);
    EXPECT_LE(r.exit_code, 1) << r.err;
    const std::string read = slurp(out / ".tokenscope-cache");
    EXPECT_EQ(built.size(), read.size()) << "run " << k;
    EXPECT_TRUE(built == read) << "run " << k << ": the cache sim built differs from the one its files give";
  }
}

// bench, too, builds its run's cache from the lines as it writes them: the
// cache it leaves is the one a read of its files writes, with the samples of
// its scrapes and the records' logprobs (written with fewer digits than the
// client holds them), and for each run of a sweep.
TEST_F(Report, BenchWritesTheCacheAReadOfItsFilesWrites) {
  const auto same_as_read = [&](const fs::path& run) {
    const std::string built = slurp(run / ".tokenscope-cache");
    ASSERT_FALSE(built.empty()) << run;
    fs::remove(run / ".tokenscope-cache");
    const auto r = run_process({kBin, "check", run.string(), "--out", (dir_ / "check.json").string()}, 120);
    EXPECT_LE(r.exit_code, 1) << r.err;
    const std::string read = slurp(run / ".tokenscope-cache");
    EXPECT_EQ(built.size(), read.size()) << run;
    EXPECT_TRUE(built == read) << run << ": the cache bench built differs from the one its files give";
  };
  same_as_read(bench_run("plain"));
  same_as_read(bench_run("logprobs", {"--logprobs", "1", "--rate", "20"}));
  const auto sweep = dir_ / "sweep";
  const auto r = run_process({kBin, "bench", "--progress", "none", "--quiet", "--no-history", "--duration-s",
                              "1", "--input-len", "fixed:32", "--output-len", "fixed:8", "--scrape-interval",
                              "0.2", "--sweep-rates", "5,10", "--out", sweep.string()},
                             120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  same_as_read(sweep / "rate-5");
  same_as_read(sweep / "rate-10");
}

// tokenscope check on two sim runs, the candidate with a leak injected:
// exit 1, check.json and phases.json written, and with --report the page
// carries the checklist's section (its table and an evidence chart per item)
// and draws in a real browser without an error.
TEST_F(Report, CheckFindsAnInjectedLeakAndAddsItsSectionToThePage) {
  const auto sim = [&](const std::string& name, const std::string& seed, const std::string& perturb) {
    const auto out = dir_ / name;
    const auto r = run_process({kBin, "sim", "--num-requests", "1500", "--rate", "8", "--seed", seed,
                                "--perturb", perturb, "--quiet", "--out", out.string()},
                               120);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
  };
  const auto base = sim("base", "1", "none"), cand = sim("cand", "2", "leak:per_min=10%");
  // sim wrote each run's cache at its end; without it, the check writes it.
  EXPECT_TRUE(fs::exists(base / ".tokenscope-cache"));
  EXPECT_TRUE(fs::exists(cand / ".tokenscope-cache"));
  fs::remove(base / ".tokenscope-cache");
  const auto none = dir_ / "no-cache";
  EXPECT_EQ(
      run_process({kBin, "sim", "--num-requests", "50", "--quiet", "--no-cache", "--out", none.string()}, 60)
          .exit_code,
      0);
  EXPECT_TRUE(fs::exists(none / "run.json"));
  EXPECT_FALSE(fs::exists(none / ".tokenscope-cache"));
  auto r = run_process({kBin, "check", base.string(), cand.string(), "--report"}, 120);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("lifecycle            regressed"), std::string::npos) << r.out;
  const json check = json::parse(slurp(cand / "check.json"));
  EXPECT_EQ(check["overall"], "regressed");
  EXPECT_EQ(check["items"][5]["verdict"], "regressed");
  EXPECT_TRUE(fs::exists(cand / "phases.json"));
  EXPECT_TRUE(fs::exists(base / "phases.json"));
  // The check wrote the base's cache again; a check from the caches finds
  // what a check of the JSONL files finds (docs/check.md "The run cache").
  EXPECT_TRUE(fs::exists(base / ".tokenscope-cache"));
  EXPECT_TRUE(fs::exists(cand / ".tokenscope-cache"));
  const auto without_times = [](json j) {
    for (auto& item : j["items"]) item.erase("elapsed_ms");
    return j;
  };
  r = run_process({kBin, "check", base.string(), cand.string(), "--out", (dir_ / "cached.json").string()},
                  120);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  r = run_process(
      {kBin, "check", base.string(), cand.string(), "--no-cache", "--out", (dir_ / "files.json").string()},
      120);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const json cached = without_times(json::parse(slurp(dir_ / "cached.json")));
  EXPECT_EQ(cached, without_times(json::parse(slurp(dir_ / "files.json"))));
  EXPECT_EQ(cached, without_times(check));
  const json page = browser_check(cand / "report.html");
  std::vector<std::string> titles = page["titles"];
  for (const char* t : {"4 tail shift", "5 lifecycle", "5 lifecycle: median TPOT per window"})
    EXPECT_NE(std::find(titles.begin(), titles.end(), t), titles.end()) << t << " in " << page["titles"];
  // The same runs the other way round: nothing regressed (exit 0 or an
  // improvement), and a thresholds file that is not one is bad input (exit 2).
  r = run_process({kBin, "check", cand.string(), base.string(), "--out", (dir_ / "reverse.json").string()},
                  120);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ofstream(dir_ / "bad.yaml") << "tail:\n  tolerence: 0.1\n";
  r = run_process({kBin, "check", base.string(), cand.string(), "--thresholds", (dir_ / "bad.yaml").string()},
                  60);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.yaml:2: field 'tail.tolerence': unknown key"), std::string::npos) << r.err;
  r = run_process({kBin, "check", base.string(), dir_.string()}, 60);
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

// Item 11 in the page: two benches with logprobs (the candidate's model less
// sure of its tokens) and ten activation tensors in each run directory plus
// one of 1,100 bins; check --report draws, under item 11's forest plot, the
// logprobs' histograms and the eight most divergent tensors', base and
// candidate overlaid, and says how many tensors it left out and why.
TEST_F(Report, CheckDrawsItem11sHistograms) {
  // With an SLO too: item 2's findings are in ms (the percentiles against
  // their targets) and a ratio (the attainment), drawn in a chart each.
  const auto base =
      bench_run("base", {"--rate", "40", "--logprobs", "--seed", "1", "--slo", "ttft_ms=60000"});
  const auto cand = bench_run("cand", {"--rate", "40", "--logprobs", "--logprob-shift", "0.25", "--seed", "2",
                                       "--slo", "ttft_ms=60000"});
  // Tensor t: a triangle over 20 bins of width 0.5 from -5, its peak moved
  // right by t / 4 of a bin in the candidate (more divergent with t).
  const auto tensors = [](bool candidate) {
    std::string text;
    for (int t = 0; t < 10; ++t) {
      text += "{\"name\": \"layers." + std::to_string(t) + "\", \"bins\": [";
      for (int k = 0; k <= 20; ++k) text += (k ? "," : "") + std::to_string(-5.0 + 0.5 * k);
      text += "], \"counts\": [";
      const double peak = 10 + (candidate ? t / 4.0 : 0);
      for (int k = 0; k < 20; ++k)
        text += (k ? "," : "") + std::to_string(static_cast<int>(1200 - 90 * std::abs(k - peak)));
      text += "]}\n";
    }
    text += "{\"name\": \"embed\", \"bins\": [";
    for (int k = 0; k <= 1100; ++k) text += (k ? "," : "") + std::to_string(k);
    text += "], \"counts\": [";
    for (int k = 0; k < 1100; ++k) text += (k ? "," : "") + std::to_string(1 + k % 5);
    return text + "]}\n";
  };
  std::ofstream(base / "activations.jsonl") << tensors(false);
  std::ofstream(cand / "activations.jsonl") << tensors(true);
  auto r = run_process({kBin, "check", base.string(), cand.string(), "--report"}, 120);
  ASSERT_NE(r.exit_code, 2) << r.out << r.err;
  const json check = json::parse(slurp(cand / "check.json"));
  const json& item = check["items"][11];
  ASSERT_EQ(item["id"], "quantization") << item;
  EXPECT_EQ(item["evidence"]["histograms"].size(), 9u);
  EXPECT_EQ(item["evidence"]["activation_charts"]["compared"], 11);
  EXPECT_EQ(item["evidence"]["activation_charts"]["charted"], 8);

  // The charts whose title names a histogram: the logprobs' first, then the
  // tensors most divergent first, two series each (base and candidate).
  const auto histograms = [](const json& page) {
    std::vector<std::pair<std::string, int>> out;
    for (std::size_t i = 0; i < page["titles"].size(); ++i) {
      const std::string t = page["titles"][i];
      if (t.rfind("11 ", 0) == 0 && t.find(": base and candidate") != std::string::npos)
        out.emplace_back(t, page["series"][i].get<int>());
    }
    return out;
  };
  json page = browser_check(cand / "report.html");
  auto drawn = histograms(page);
  ASSERT_EQ(drawn.size(), 9u) << page["titles"];
  EXPECT_EQ(drawn[0].first, "11 output-token logprobs: base and candidate");
  EXPECT_EQ(drawn[1].first, "11 activations layers.9: base and candidate");
  EXPECT_EQ(drawn[8].first, "11 activations layers.2: base and candidate");
  for (const auto& [title, series] : drawn) EXPECT_EQ(series, 2) << title;
  std::vector<std::string> titles = page["titles"];
  const auto forest = std::find(titles.begin(), titles.end(), "11 quantisation drift");
  ASSERT_NE(forest, titles.end()) << page["titles"];
  EXPECT_EQ(*(forest + 1), drawn[0].first);  // right under item 11's forest plot
  // One unit per axis: item 2's ms and ratio findings in two charts.
  for (const char* t : {"2 SLO attainment (ms)", "2 SLO attainment (ratio)"})
    EXPECT_NE(std::find(titles.begin(), titles.end(), t), titles.end()) << t << " in " << page["titles"];
  EXPECT_EQ(std::find(titles.begin(), titles.end(), "2 SLO attainment"), titles.end()) << page["titles"];
  std::string headings;
  for (const auto& h : page["headings"]) headings += h.get<std::string>() + "\n";
  EXPECT_NE(headings.find("3 of the 11 tensors compared are not drawn (2 less divergent than the 8 drawn, 1 "
                          "with more than 1,024 bins)"),
            std::string::npos)
      << headings;

  // Without activations: the logprobs' histograms alone, nothing left out.
  fs::remove(base / "activations.jsonl");
  fs::remove(cand / "activations.jsonl");
  r = run_process({kBin, "check", base.string(), cand.string(), "--report"}, 120);
  ASSERT_NE(r.exit_code, 2) << r.out << r.err;
  page = browser_check(cand / "report.html");
  drawn = histograms(page);
  ASSERT_EQ(drawn.size(), 1u) << page["titles"];
  EXPECT_EQ(drawn[0].second, 2);
  headings.clear();
  for (const auto& h : page["headings"]) headings += h.get<std::string>() + "\n";
  EXPECT_EQ(headings.find("not drawn"), std::string::npos) << headings;
}

}  // namespace
}  // namespace tokenscope::testing
