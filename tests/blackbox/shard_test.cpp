// A sharded bench (bench --shard, tokenscope merge; docs/fleet.md "Load from
// many hosts") against a `tokenscope serve` process: shards started as a
// scheduler would start them send the one schedule between them, and their
// merge is the run one process would have planned.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "process.h"
#include "server.h"

namespace tokenscope::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class Shards : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tokenscope_shards_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<json> lines(const fs::path& p) {
    std::vector<json> out;
    std::ifstream in(p);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) out.push_back(json::parse(line));
    return out;
  }
  // A start every shard can still make: three seconds from now.
  static std::string soon() { return std::to_string(std::time(nullptr) + 3); }

  // The shards of one run, started together as a scheduler starts its
  // tasks (each its own process), waited for.
  std::vector<ProcessResult> run_shards(const std::vector<std::string>& args, std::uint32_t count) {
    const std::string start = soon();
    std::vector<std::unique_ptr<Child>> children;
    for (std::uint32_t k = 0; k < count; ++k) {
      std::vector<std::string> argv = {kBin,          "bench",
                                       "--progress",  "none",
                                       "--shard",     std::to_string(k) + "/" + std::to_string(count),
                                       "--start-at",  start,
                                       "--out",       (dir_ / "shard-{shard}").string(),
                                       "--no-history"};
      argv.insert(argv.end(), args.begin(), args.end());
      children.push_back(std::make_unique<Child>(argv, (dir_ / ("out" + std::to_string(k))).string(),
                                                 (dir_ / ("err" + std::to_string(k))).string()));
    }
    std::vector<ProcessResult> results;
    for (std::uint32_t k = 0; k < count; ++k) {
      results.push_back(children[k]->wait(120));
      results.back().err = slurp(dir_ / ("err" + std::to_string(k)));
    }
    return results;
  }
  ProcessResult merge(std::vector<std::string> dirs, const fs::path& out,
                      std::vector<std::string> more = {}) {
    std::vector<std::string> argv = {kBin, "merge"};
    argv.insert(argv.end(), dirs.begin(), dirs.end());
    argv.insert(argv.end(), {"--out", out.string()});
    if (more.empty()) more = {"--no-history"};
    argv.insert(argv.end(), more.begin(), more.end());
    return run_process(argv, 60);
  }
  fs::path dir_;
};

TEST_F(Shards, TwoShardsMergeIntoTheScheduleOneProcessPlans) {
  Server server(dir_, {});
  const std::vector<std::string> load = {
      "--target", server.url(""), "--num-requests", "40",           "--rate",      "40", "--seed",
      "11",       "--input-len",  "uniform:50:400", "--output-len", "uniform:8:32"};
  auto single_args = load;
  single_args.insert(single_args.begin(), {kBin, "bench", "--progress", "none", "--no-history", "--out",
                                           (dir_ / "single").string()});
  const auto single = run_process(single_args, 120);
  ASSERT_EQ(single.exit_code, 0) << single.err;

  const auto shards = run_shards(load, 2);
  for (const auto& r : shards) ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE(k);
    const auto run = json::parse(slurp(dir_ / ("shard-" + std::to_string(k)) / "run.json"));
    EXPECT_EQ(run["shard"]["index"], k);
    EXPECT_EQ(run["shard"]["count"], 2);
    EXPECT_EQ(run["shard"]["planned_requests"], 20);
    EXPECT_EQ(run["shard"]["ready_late_ns"], 0) << "the shards had two seconds to get ready";
    EXPECT_EQ(run["summary"]["requests_total"], 20);
  }
  // Shard 0 alone observes the server and the host.
  EXPECT_TRUE(fs::exists(dir_ / "shard-0" / "samples.jsonl"));
  EXPECT_FALSE(slurp(dir_ / "shard-0" / "samples.jsonl").empty());
  EXPECT_TRUE(slurp(dir_ / "shard-1" / "samples.jsonl").empty());

  const auto m = merge({(dir_ / "shard-1").string(), (dir_ / "shard-0").string()}, dir_ / "merged",
                       {"--report", "--history", (dir_ / "history.db").string(), "--tag", "sharded"});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  EXPECT_NE(m.err.find("merge: 40 records from 2 of 2 shards"), std::string::npos) << m.err;
  // As a run of bench: its page, and one entry in the history (the merged run).
  EXPECT_TRUE(fs::exists(dir_ / "merged" / "report.html"));
  const auto h = run_process({kBin, "history", "--history", (dir_ / "history.db").string(), "--json"}, 30);
  ASSERT_EQ(h.exit_code, 0) << h.err;
  const auto runs = json::parse(h.out)["runs"];
  ASSERT_EQ(runs.size(), 1u) << h.out;
  EXPECT_NE(runs[0].dump().find("sharded"), std::string::npos) << runs[0].dump();
  const auto run = json::parse(slurp(dir_ / "merged" / "run.json"));
  EXPECT_EQ(run["partial"], false);
  EXPECT_EQ(run["summary"]["requests_total"], 40);
  EXPECT_EQ(run["summary"]["requests_completed"], 40);
  EXPECT_EQ(run["shards"]["missing"].size(), 0u);
  EXPECT_EQ(run["settings"]["effective"]["load"]["planned_requests"], 40);
  EXPECT_TRUE(fs::exists(dir_ / "merged" / "samples.jsonl"));

  // The same requests as the one process planned: ids, prompts, outputs,
  // and when each was due from the start (the shards' clocks agree on this
  // host to the anchor's read, well under 0.1 ms).
  const auto merged = lines(dir_ / "merged" / "requests.jsonl");
  const auto one = lines(dir_ / "single" / "requests.jsonl");
  ASSERT_EQ(merged.size(), 40u);
  ASSERT_EQ(one.size(), 40u);
  std::map<std::uint64_t, json> by_id;
  std::int64_t one_start = INT64_MAX, merged_start = INT64_MAX;
  for (const auto& r : one) {
    by_id[r["id"]] = r;
    one_start = std::min<std::int64_t>(one_start, r["t_sched_ns"]);
  }
  for (const auto& r : merged) merged_start = std::min<std::int64_t>(merged_start, r["t_sched_ns"]);
  std::uint64_t previous = 0;
  for (std::size_t i = 0; i < merged.size(); ++i) {
    const auto& r = merged[i];
    const std::uint64_t id = r["id"];
    if (i > 0) {
      EXPECT_GT(id, previous) << "merged records are in id order";
    }
    previous = id;
    ASSERT_TRUE(by_id.contains(id)) << id;
    const auto& o = by_id[id];
    EXPECT_EQ(r["prompt_tokens_planned"], o["prompt_tokens_planned"]) << id;
    EXPECT_EQ(r["output_tokens_planned"], o["output_tokens_planned"]) << id;
    const double due = (r["t_sched_ns"].get<std::int64_t>() - merged_start) / 1e6;
    const double due_one = (o["t_sched_ns"].get<std::int64_t>() - one_start) / 1e6;
    EXPECT_NEAR(due, due_one, 0.1) << id;
  }
}

// Agentic tasks in a sharded run: each task whole on one shard (task k on
// shard k mod 2), its model calls under ids of that shard's own, and the
// merge's tasks.jsonl and task summary are the union's: the same tasks as
// one process runs, due at the same offsets from the start.
TEST_F(Shards, TasksStayWholeOnOneShardAndTheirSummaryIsRebuilt) {
  Server server(dir_, {});
  const auto file = dir_ / "tasks.yaml";
  std::ofstream(file) << R"(duration_s: 1
seed: 5
arrival: {process: constant, rate_rps: 12}
tools:
  - {name: lookup, parameters: {type: object}, latency_ms: fixed:5}
classes:
  - name: chat
    share: 0.5
    input_len: fixed:40
    output_len: fixed:6
  - name: agent
    share: 0.5
    slo: {task_ms: 60000, pass_rate: 0.5, percentile: 90}
    task:
      steps:
        - {id: think, model: {prompt: "{{input}}", output_len: fixed:5}}
        - {id: act, tool: lookup, after: [think]}
        - {id: answer, model: {prompt: "{{act}}", output_len: fixed:5}, after: [act]}
)";
  const std::vector<std::string> load = {"--target", server.url(""), "--workload", file.string()};
  auto single_args = load;
  single_args.insert(single_args.begin(), {kBin, "bench", "--progress", "none", "--no-history", "--out",
                                           (dir_ / "single").string()});
  const auto single = run_process(single_args, 120);
  ASSERT_EQ(single.exit_code, 0) << single.err;
  const auto shards = run_shards(load, 2);
  for (const auto& r : shards) ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto m = merge({(dir_ / "shard-0").string(), (dir_ / "shard-1").string()}, dir_ / "merged");
  ASSERT_EQ(m.exit_code, 0) << m.err;

  const auto one = lines(dir_ / "single" / "tasks.jsonl");
  const auto merged = lines(dir_ / "merged" / "tasks.jsonl");
  ASSERT_GE(one.size(), 4u);
  ASSERT_EQ(merged.size(), one.size());
  std::map<std::uint64_t, json> by_id;
  std::int64_t one_start = INT64_MAX, merged_start = INT64_MAX;
  for (const auto& t : one) {
    by_id[t["id"]] = t;
    one_start = std::min<std::int64_t>(one_start, t["t_sched_ns"]);
  }
  for (const auto& t : merged) merged_start = std::min<std::int64_t>(merged_start, t["t_sched_ns"]);
  // Each shard ran its share of the tasks, whole.
  std::set<std::uint64_t> shard_tasks[2];
  for (int k = 0; k < 2; ++k)
    for (const auto& t : lines(dir_ / ("shard-" + std::to_string(k)) / "tasks.jsonl"))
      shard_tasks[k].insert(t["id"].get<std::uint64_t>());
  EXPECT_EQ(shard_tasks[0].size() + shard_tasks[1].size(), one.size());
  EXPECT_FALSE(shard_tasks[0].empty());
  EXPECT_FALSE(shard_tasks[1].empty());
  std::uint64_t previous = 0;
  for (std::size_t i = 0; i < merged.size(); ++i) {
    const auto& t = merged[i];
    const std::uint64_t id = t["id"];
    if (i > 0) {
      EXPECT_GT(id, previous) << "merged tasks are in id order";
    }
    previous = id;
    ASSERT_TRUE(by_id.contains(id)) << id;
    EXPECT_EQ(t["outcome"], "ok") << t.dump();
    EXPECT_EQ(t["steps"].size(), 3u) << t.dump();
    const double due = (t["t_sched_ns"].get<std::int64_t>() - merged_start) / 1e6;
    const double due_one = (by_id[id]["t_sched_ns"].get<std::int64_t>() - one_start) / 1e6;
    EXPECT_NEAR(due, due_one, 0.1) << id;
  }
  // Their model calls: under their task, with ids of their shard's range.
  std::size_t calls = 0;
  for (const auto& r : lines(dir_ / "merged" / "requests.jsonl")) {
    if (!r.contains("task") || r["task"].is_null()) continue;
    ++calls;
    const std::uint64_t task = r["task"], id = r["id"];
    const int shard = shard_tasks[0].contains(task) ? 0 : 1;
    EXPECT_TRUE(shard_tasks[shard].contains(task)) << task;
    EXPECT_EQ((id - (std::uint64_t{1} << 40)) >> 32, static_cast<std::uint64_t>(shard)) << id;
  }
  EXPECT_EQ(calls, 2 * one.size());
  // The summary of the union: every task, the class's SLO held.
  const auto run = json::parse(slurp(dir_ / "merged" / "run.json"));
  const auto run_one = json::parse(slurp(dir_ / "single" / "run.json"));
  ASSERT_TRUE(run["tasks"].is_object()) << run.dump(1);
  EXPECT_EQ(run["tasks"]["tasks"], one.size());
  EXPECT_EQ(run["tasks"]["ok"], run_one["tasks"]["ok"]);
  EXPECT_EQ(run["tasks"]["by_class"]["agent"]["tasks"], one.size());
  EXPECT_EQ(run["tasks"]["by_class"]["agent"]["slo"]["task_ms"], 60000.0);
  EXPECT_EQ(run["tasks"]["by_class"]["agent"]["slo"]["met"],
            run_one["tasks"]["by_class"]["agent"]["slo"]["met"]);
  EXPECT_EQ(run["tasks"]["judge"]["configured"], false);
  EXPECT_EQ(run["tasks"]["tools_injected"]["lookup"]["calls"],
            run_one["tasks"]["tools_injected"]["lookup"]["calls"]);
}

TEST_F(Shards, ClosedLoopShardsShareTheUsersAndTheRequests) {
  Server server(dir_, {});
  const auto shards = run_shards({"--target", server.url(""), "--concurrency", "3", "--num-requests", "21",
                                  "--input-len", "fixed:64", "--output-len", "fixed:8"},
                                 2);
  for (const auto& r : shards) ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(slurp(dir_ / "shard-0" / "run.json"))["shard"]["users"], 2);
  EXPECT_EQ(json::parse(slurp(dir_ / "shard-1" / "run.json"))["shard"]["users"], 1);
  const auto m = merge({(dir_ / "shard-0").string(), (dir_ / "shard-1").string()}, dir_ / "merged");
  ASSERT_EQ(m.exit_code, 0) << m.err;
  std::set<std::uint64_t> ids;
  for (const auto& r : lines(dir_ / "merged" / "requests.jsonl"))
    EXPECT_TRUE(ids.insert(r["id"].get<std::uint64_t>()).second);
  std::set<std::uint64_t> want;
  for (std::uint64_t i = 0; i < 21; ++i) want.insert(i);
  EXPECT_EQ(ids, want) << "the shards took the workload's first 21 requests between them, once each";
}

TEST_F(Shards, TheIndexFromASchedulersEnvironment) {
  Server server(dir_, {});
  const std::string start = soon();
  const auto run = [&](std::vector<std::string> env, const std::string& out) {
    std::vector<std::string> argv = {"/usr/bin/env"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.insert(argv.end(), {kBin, "bench", "--progress", "none", "--no-history", "--shard", "env",
                             "--start-at", start, "--target", server.url(""), "--num-requests", "10",
                             "--rate", "50", "--output-len", "fixed:4", "--out", (dir_ / out).string()});
    return run_process(argv, 60);
  };
  // A Kubernetes Indexed Job's pod, and a Slurm task.
  const auto k8s = run({"JOB_COMPLETION_INDEX=1", "TOKENSCOPE_SHARD_COUNT=2"}, "k8s-{shard}");
  ASSERT_EQ(k8s.exit_code, 0) << k8s.err;
  const auto a = json::parse(slurp(dir_ / "k8s-1" / "run.json"));
  EXPECT_EQ(a["shard"]["source"], "JOB_COMPLETION_INDEX");
  EXPECT_EQ(a["shard"]["index"], 1);
  EXPECT_EQ(a["shard"]["planned_requests"], 5);
  // Started after the first ended: past the agreed start, late, and said so.
  const auto slurm = run({"SLURM_PROCID=0", "SLURM_NTASKS=2"}, "slurm-{shard}");
  ASSERT_EQ(slurm.exit_code, 0) << slurm.err;
  EXPECT_NE(slurm.err.find("after the agreed start"), std::string::npos) << slurm.err;
  const auto b = json::parse(slurp(dir_ / "slurm-0" / "run.json"));
  EXPECT_EQ(b["shard"]["source"], "SLURM_PROCID");
  EXPECT_GT(b["shard"]["ready_late_ns"].get<std::int64_t>(), 0);
  // The two halves of one run (the same settings), from two schedulers: one
  // run, the late shard marked.
  const auto m = merge({(dir_ / "k8s-1").string(), (dir_ / "slurm-0").string()}, dir_ / "merged");
  EXPECT_EQ(m.exit_code, 0) << m.err;
  EXPECT_NE(m.err.find("shard 0 was ready"), std::string::npos) << m.err;
  EXPECT_EQ(lines(dir_ / "merged" / "requests.jsonl").size(), 10u);
  EXPECT_EQ(json::parse(slurp(dir_ / "merged" / "run.json"))["shards"]["late"], json::array({0}));
  // Without a count beside the index: said, exit 2.
  const auto half = run({"JOB_COMPLETION_INDEX=1"}, "half");
  EXPECT_EQ(half.exit_code, 2);
  EXPECT_NE(half.err.find("TOKENSCOPE_SHARD_COUNT is not"), std::string::npos) << half.err;
}

TEST_F(Shards, BadOptionsAndMissingShardsAreSaid) {
  Server server(dir_, {});
  const auto bench = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {kBin, "bench", "--progress", "none", "--no-history", "--num-requests", "4"});
    return run_process(args, 60);
  };
  const std::string url = server.url("");
  const auto expect_usage = [&](std::vector<std::string> args, const std::string& what) {
    const auto r = bench(args);
    EXPECT_EQ(r.exit_code, 2) << what;
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
  };
  expect_usage({"--target", url, "--shard", "2/2", "--start-at", soon()}, "expected 0 to 1");
  expect_usage({"--target", url, "--shard", "0/2"}, "give --start-at");
  expect_usage({"--shard", "0/2", "--start-at", soon()}, "give --target");
  expect_usage({"--target", url, "--start-at", soon()}, "--start-at goes with --shard");
  expect_usage({"--target", url, "--shard", "0/2", "--start-at", "tomorrow"}, "expected Unix seconds");
  expect_usage({"--target", url, "--shard", "0/2", "--start-at", std::to_string(std::time(nullptr) - 60)},
               "may start at most 10 s late");
  expect_usage({"--target", url, "--shard", "1/2", "--start-at", soon(), "--concurrency", "1"},
               "would have none");
  expect_usage({"--target", url, "--shard", "0/2", "--start-at", soon(), "--repeat", "2"}, "not sharded");

  // One shard of two: the merge is written, partial, and says which is missing (exit 1).
  const auto r =
      bench({"--target", url, "--shard", "1/2", "--start-at", soon(), "--out", (dir_ / "s1").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto m = merge({(dir_ / "s1").string()}, dir_ / "merged");
  EXPECT_EQ(m.exit_code, 1);
  EXPECT_NE(m.err.find("shards missing: 0"), std::string::npos) << m.err;
  EXPECT_EQ(json::parse(slurp(dir_ / "merged" / "run.json"))["partial"], true);
  // A run that is not a shard: exit 2, naming it.
  const auto plain = bench({"--target", url, "--out", (dir_ / "plain").string()});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto p = merge({(dir_ / "plain").string()}, dir_ / "merged2");
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_NE(p.err.find("not a shard of a sharded bench run"), std::string::npos) << p.err;
}

// The shipped Kubernetes manifests (deploy/k8s), read as the API server
// would and their pods run here as the Indexed Job controller runs them:
// JOB_COMPLETION_INDEX per pod, $(VAR) expanded from the container's env;
// only the target, the load's size and the volume's path are changed.
TEST_F(Shards, TheKubernetesIndexedJobRunsAndItsMergeJoinsIt) {
  Server server(dir_, {});
  const fs::path deploy = fs::path(TOKENSCOPE_SOURCE_DIR) / "deploy" / "k8s";
  const YAML::Node job = YAML::LoadFile((deploy / "bench-indexed-job.yaml").string());
  ASSERT_EQ(job["kind"].as<std::string>(), "Job");
  const auto spec = job["spec"];
  EXPECT_EQ(spec["completionMode"].as<std::string>(), "Indexed");
  const int completions = spec["completions"].as<int>();
  EXPECT_EQ(spec["parallelism"].as<int>(), completions) << "every shard runs at once";
  EXPECT_EQ(spec["backoffLimitPerIndex"].as<int>(), 0) << "a rerun shard would send its share twice";
  EXPECT_EQ(spec["maxFailedIndexes"].as<int>(), completions) << "one shard's failure does not end the others";
  EXPECT_FALSE(spec["backoffLimit"]) << "backoffLimit ends every pod at the first failure";
  EXPECT_EQ(spec["template"]["spec"]["restartPolicy"].as<std::string>(), "Never");
  const auto container = spec["template"]["spec"]["containers"][0];
  std::map<std::string, std::string> env;
  for (const auto& e : container["env"]) env[e["name"].as<std::string>()] = e["value"].as<std::string>();
  EXPECT_EQ(env.at("TOKENSCOPE_SHARD_COUNT"), std::to_string(completions)) << "the shards: one per pod";
  env["TOKENSCOPE_START_AT"] = soon();
  std::vector<std::string> command;
  for (const auto& c : container["command"]) command.push_back(c.as<std::string>());
  ASSERT_EQ(command.at(0), "tokenscope");
  const std::string results = container["volumeMounts"][0]["mountPath"].as<std::string>();
  const auto set_value = [&](const std::string& option, const std::string& value) {
    const auto it = std::find(command.begin(), command.end(), option);
    ASSERT_NE(it, command.end()) << option;
    *(it + 1) = value;
  };
  set_value("--target", server.url(""));
  set_value("--num-requests", "12");
  set_value("--rate", "40");
  for (auto& arg : command) {
    for (const auto& [name, value] : env)
      for (std::size_t at; (at = arg.find("$(" + name + ")")) != std::string::npos;)
        arg.replace(at, name.size() + 3, value);
    if (arg.rfind(results, 0) == 0) arg = (dir_ / "results").string() + arg.substr(results.size());
  }
  command[0] = kBin;
  std::vector<std::unique_ptr<Child>> pods;
  for (int k = 0; k < completions; ++k) {
    std::vector<std::string> argv = {"/usr/bin/env", "JOB_COMPLETION_INDEX=" + std::to_string(k)};
    for (const auto& [name, value] : env) argv.push_back(name + "=" + value);
    argv.insert(argv.end(), command.begin(), command.end());
    pods.push_back(std::make_unique<Child>(argv, (dir_ / ("pod" + std::to_string(k))).string(),
                                           (dir_ / ("pod" + std::to_string(k) + ".err")).string()));
  }
  for (int k = 0; k < completions; ++k)
    ASSERT_EQ(pods[static_cast<std::size_t>(k)]->wait(120).exit_code, 0)
        << slurp(dir_ / ("pod" + std::to_string(k) + ".err"));
  // The merge Job: its shell line, with the volume here and tokenscope this build.
  const YAML::Node merge_job = YAML::LoadFile((deploy / "merge-job.yaml").string());
  const auto merge_command = merge_job["spec"]["template"]["spec"]["containers"][0]["command"];
  ASSERT_EQ(merge_command[0].as<std::string>(), "sh");
  std::string line = merge_command[2].as<std::string>();
  const std::string here = (dir_ / "results").string();
  for (std::size_t at = 0; (at = line.find(results + "/", at)) != std::string::npos; at += here.size())
    line.replace(at, results.size(), here);
  ASSERT_EQ(line.rfind("tokenscope ", 0), 0u) << line;
  line.replace(0, std::string("tokenscope").size(), kBin);
  const auto m = run_process({"/usr/bin/env", "XDG_DATA_HOME=" + dir_.string(), "/bin/sh", "-c", line}, 60);
  ASSERT_EQ(m.exit_code, 0) << m.err;
  const auto run = json::parse(slurp(dir_ / "results" / "merged" / "run.json"));
  EXPECT_EQ(run["shards"]["count"], completions);
  EXPECT_EQ(run["summary"]["requests_total"], 12);
  EXPECT_EQ(run["shards"]["merged"][0]["source"], "JOB_COMPLETION_INDEX");
}

// The shipped Slurm batch script (deploy/slurm/bench.sbatch), run with an
// srun that starts its tasks here as Slurm would (SLURM_PROCID each,
// SLURM_NTASKS): the shards and the merge, one merged run.
TEST_F(Shards, TheSlurmBatchScriptRunsItsTasksAndMerges) {
  Server server(dir_, {});
  const fs::path bin = dir_ / "bin";
  fs::create_directories(bin);
  fs::create_symlink(kBin, bin / "tokenscope");
  {
    std::ofstream srun(bin / "srun");
    srun << "#!/bin/sh\n"
            "# srun's part here: SLURM_NTASKS tasks of the command, each with its SLURM_PROCID.\n"
            "while [ \"${1#-}\" != \"$1\" ]; do shift; done  # srun's own options\n"
            "pids=''\n"
            "k=0\n"
            "while [ \"$k\" -lt \"$SLURM_NTASKS\" ]; do SLURM_PROCID=$k \"$@\" & pids=\"$pids $!\"; "
            "k=$((k+1)); done\n"
            "status=0\n"
            "for p in $pids; do wait $p || status=1; done\n"
            "exit $status\n";
  }
  fs::permissions(bin / "srun", fs::perms::owner_all);
  const fs::path script = fs::path(TOKENSCOPE_SOURCE_DIR) / "deploy" / "slurm" / "bench.sbatch";
  const std::string text = slurp(script);
  EXPECT_NE(text.find("--shard env"), std::string::npos);
  EXPECT_EQ(run_process({"/bin/bash", "-n", script.string()}, 10).exit_code, 0) << "bash syntax";
  const auto r = run_process(
      {"/usr/bin/env", "PATH=" + bin.string() + ":/usr/bin:/bin", "SLURM_NTASKS=2", "SLURM_JOB_ID=7",
       "XDG_DATA_HOME=" + dir_.string(), "TARGET=" + server.url(""), "OUT=" + (dir_ / "runs").string(),
       "NUM_REQUESTS=10", "RATE=40", "START_LEAD_S=2", "/bin/bash", script.string()},
      120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run = json::parse(slurp(dir_ / "runs" / "merged" / "run.json"));
  EXPECT_EQ(run["partial"], false);
  EXPECT_EQ(run["shards"]["count"], 2);
  EXPECT_EQ(run["summary"]["requests_total"], 10);
  EXPECT_EQ(run["shards"]["merged"][1]["source"], "SLURM_PROCID");
}

}  // namespace
}  // namespace tokenscope::testing
