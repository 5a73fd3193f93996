// bench::run() as a library call: BenchSettings in, BenchResult and the run
// directory out, against the in-process simulator (no target_url) with a
// fixed step time; the error-rate verdict with injected faults.
#include "bench/bench_run.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include "core/error.h"

namespace tokenscope::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class BenchRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tokenscope_bench_run_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // 20 requests of 16 prompt and 4 output tokens, 200 per second, on a
  // simulator whose every step takes 1 ms.
  BenchSettings settings(const std::string& name) const {
    BenchSettings o;
    o.workload.num_requests = 20;
    o.workload.arrival = "constant";
    o.workload.rate_rps = 200;
    o.workload.input_len = workload::parse_input_len("fixed:16");
    o.workload.output_len = workload::parse_output_len("fixed:4");
    o.engine.fixed_step_ms = 1.0;
    o.out_dir = (dir_ / name).string();
    o.progress = Progress::kNone;
    o.quiet = true;
    return o;
  }
  BenchResult run(const BenchSettings& o) {
    std::ostringstream log;
    BenchResult r = bench::run(o, interrupted_, log);
    log_ = log.str();
    return r;
  }
  static json read_json(const fs::path& p) {
    std::ifstream in(p);
    EXPECT_TRUE(in) << p;
    return json::parse(in);
  }
  static std::vector<json> lines(const fs::path& p) {
    std::vector<json> out;
    std::ifstream in(p);
    for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
    return out;
  }

  fs::path dir_;
  std::atomic<bool> interrupted_{false};
  std::string log_;
};

TEST_F(BenchRun, InProcessRunWritesTheRunDirectory) {
  BenchSettings o = settings("ok");
  o.tags = {"nightly", "version=v1"};
  const BenchResult r = run(o);
  EXPECT_EQ(r.exit_code, 0) << log_;
  EXPECT_EQ(r.out_dir, o.out_dir);
  EXPECT_TRUE(r.verdicts.empty());
  EXPECT_TRUE(r.sweep.is_null());
  ASSERT_EQ(r.runs.size(), 1u);
  const RunReport& rep = r.runs[0];
  EXPECT_TRUE(rep.in_process);
  EXPECT_FALSE(rep.interrupted);
  EXPECT_EQ(rep.model, "llama-3-8b");
  EXPECT_EQ(rep.url.rfind("http://127.0.0.1:", 0), 0u) << rep.url;
  EXPECT_EQ(rep.sent, 20u);
  EXPECT_EQ(rep.not_sent, 0u);
  EXPECT_GE(rep.connections, 1u);
  EXPECT_TRUE(rep.failure.empty()) << rep.failure;
  const json& s = rep.summary;
  EXPECT_EQ(s["requests_total"], 20);
  EXPECT_EQ(s["requests_completed"], 20);
  EXPECT_EQ(s["requests_failed"], 0);
  EXPECT_EQ(s["prompt_tokens_total"], 20 * 16);  // the server re-tokenizes the prompt text exactly
  EXPECT_EQ(s["output_tokens_total"], 20 * 4);
  EXPECT_EQ(s["requests_without_usage"], 0);
  EXPECT_EQ(s["slo_latency_from"], "schedule");
  EXPECT_TRUE(s["goodput_rps"].is_null());

  const json run_json = read_json(dir_ / "ok" / "run.json");
  EXPECT_EQ(run_json["partial"], false);
  EXPECT_EQ(run_json["summary"], s);
  EXPECT_EQ(run_json["client"], rep.client);
  EXPECT_EQ(run_json["verdict"], json({{"failed", false}, {"reason", nullptr}}));
  const json& load = run_json["settings"]["effective"]["load"];
  EXPECT_EQ(load["mode"], "open");
  EXPECT_EQ(load["planned_requests"], 20);
  EXPECT_EQ(load["rate_rps"], 200.0);
  EXPECT_DOUBLE_EQ(load["last_offset_s"].get<double>(), 19 / 200.0);
  EXPECT_EQ(run_json["settings"]["effective"]["target"]["in_process"], true);
  EXPECT_EQ(run_json["settings"]["requested"]["load"]["max_error_rate"], 0.1);
  for (const auto& [kind, n] : run_json["server"]["faults_injected"].items()) EXPECT_EQ(n, 0) << kind;
  // The target's GET /v1/models, asked once at the start, and --tag.
  EXPECT_EQ(run_json["settings"]["effective"]["target"]["models"], json({{"available", true},
                                                                         {"models",
                                                                          {{{"id", "llama-3-8b"},
                                                                            {"owned_by", "tokenscope"},
                                                                            {"root", "llama-3-8b"},
                                                                            {"max_model_len", 8192}}}}}));
  EXPECT_EQ(run_json["tags"], json({"nightly", "version=v1"}));

  const auto recs = lines(dir_ / "ok" / "requests.jsonl");
  ASSERT_EQ(recs.size(), 20u);
  for (const auto& rec : recs) {
    EXPECT_EQ(rec["outcome"], "ok");
    EXPECT_EQ(rec["prompt_tokens_planned"], 16);
    EXPECT_EQ(rec["output_tokens_planned"], 4);
    EXPECT_EQ(rec["prompt_tokens"], 16);
    EXPECT_EQ(rec["output_tokens"], 4);
  }
  EXPECT_FALSE(fs::exists(dir_ / "ok" / "vllm_result.json"));
  EXPECT_FALSE(fs::exists(dir_ / "ok" / "requests.csv"));
}

// A fleet behind the in-process server (bench --replicas): the requests are
// spread over the replicas by the router, run.json "fleet" has each
// replica's series from the server's own /metrics, and they add up to what
// the client counted; the scraped /metrics (one series per engine="N")
// sum to the same totals in the canonical series.
TEST_F(BenchRun, AFleetBehindTheInProcessServerReportsEachReplica) {
  BenchSettings o = settings("fleet");
  o.fleet.replicas = 3;
  const BenchResult r = run(o);
  ASSERT_EQ(r.exit_code, 0) << log_;
  const json run_json = read_json(dir_ / "fleet" / "run.json");
  EXPECT_EQ(run_json["settings"]["requested"]["server"]["fleet"]["replicas"], 3);
  const json& f = run_json["fleet"];
  ASSERT_TRUE(f.is_object()) << run_json.dump(1);
  EXPECT_EQ(f["router"], "round-robin");
  EXPECT_EQ(f["replicas"], 3);
  ASSERT_EQ(f["per_replica"].size(), 3u);
  double finished = 0, prompt = 0, output = 0;
  for (const auto& rep : f["per_replica"]) {
    finished += rep["requests_finished"].get<double>();
    prompt += rep["prompt_tokens"].get<double>();
    output += rep["generation_tokens"].get<double>();
    EXPECT_EQ(rep["requests_finished"], rep["replica"] == 2 ? 6.0 : 7.0);  // request k on replica k mod 3
  }
  EXPECT_EQ(finished, 20);
  EXPECT_EQ(prompt, 20 * 16);
  EXPECT_EQ(output, 20 * 4);
  EXPECT_EQ(run_json["summary"]["requests_completed"], 20);
  // The scrapes of /metrics, summed over engine="0".."2" (docs/observe.md "Canonical series").
  const json& server = run_json["server"];
  ASSERT_TRUE(server.is_object());
  EXPECT_EQ(server["requests_finished"], 20.0);
  EXPECT_EQ(server["generation_tokens"], 20 * 4.0);
  EXPECT_EQ(server["prompt_tokens"], 20 * 16.0);
  // The fleet options are the in-process server's: refused with a target.
  BenchSettings t = settings("target");
  t.target_url = "http://127.0.0.1:9";
  t.fleet.replicas = 2;
  EXPECT_THROW(run(t), UsageError);
}

// bench --logprobs against the in-process server over loopback: every
// request asks for logprobs, the server answers one per output token (its
// simulated model, serve/logprobs.h), and each record keeps their histogram;
// --logprob-shift moves the whole distribution down. Completions and chat.
TEST_F(BenchRun, LogprobsOfEveryOutputTokenAreKeptPerRequest) {
  const auto mean_logprob = [&](const fs::path& run) {
    double sum = 0, n = 0;
    for (const auto& rec : lines(run / "requests.jsonl")) {
      EXPECT_EQ(rec["outcome"], "ok");
      const json& lp = rec["logprobs"];
      EXPECT_EQ(lp["n"], rec["output_tokens"]) << rec.dump();  // one logprob per output token
      std::uint64_t in_bins = 0;
      for (const auto& c : lp["bins"]) in_bins += c.get<std::uint64_t>();
      EXPECT_EQ(in_bins, lp["n"].get<std::uint64_t>());
      EXPECT_LE(lp["sum"].get<double>(), 0.0);
      sum += lp["sum"].get<double>();
      n += lp["n"].get<double>();
    }
    return sum / n;
  };
  BenchSettings o = settings("base");
  o.workload.num_requests = 100;
  o.workload.rate_rps = 2000;
  o.workload.output_len = workload::parse_output_len("fixed:16");
  o.sampling.logprobs = 1;
  ASSERT_EQ(run(o).exit_code, 0) << log_;
  const double base = mean_logprob(dir_ / "base");
  // 1,600 draws of -(0.5 E): the mean is 0.5 within 4 standard errors (0.05).
  EXPECT_NEAR(base, -0.5, 0.05);
  EXPECT_EQ(read_json(dir_ / "base" / "run.json")["settings"]["requested"]["target"]["sampling"]["logprobs"],
            1);

  o.out_dir = (dir_ / "shifted").string();
  o.server.logprob_shift = 0.5;
  o.api = Api::kChat;
  ASSERT_EQ(run(o).exit_code, 0) << log_;
  EXPECT_NEAR(mean_logprob(dir_ / "shifted"), -1.0, 0.1);  // -(0.5 + 0.5) E
  EXPECT_EQ(read_json(dir_ / "shifted" / "run.json")["settings"]["requested"]["server"]["logprob_shift"],
            0.5);

  // Without --logprobs, no record has the field.
  o = settings("none");
  ASSERT_EQ(run(o).exit_code, 0) << log_;
  for (const auto& rec : lines(dir_ / "none" / "requests.jsonl")) EXPECT_FALSE(rec.contains("logprobs"));
  // A shift that leaves no mean: a usage error.
  o = settings("bad");
  o.server.logprob_shift = -0.5;
  EXPECT_THROW(run(o), UsageError);
}

// More than max_error_rate of the requests failed: exit 1, and the failure
// names the count, the target, the outcomes and the first error; run.json's
// verdict says the same. max_error_rate = 1 accepts any failure.
TEST_F(BenchRun, FailedRequestsOverTheErrorRateFailTheRun) {
  BenchSettings o = settings("fail");
  o.server.faults = serve::parse_faults("http_5xx=1");
  BenchResult r = run(o);
  EXPECT_EQ(r.exit_code, 1) << log_;
  ASSERT_EQ(r.runs.size(), 1u);
  const RunReport& rep = r.runs[0];
  EXPECT_EQ(rep.summary["requests_by_outcome"]["http_error"], 20);
  const std::regex expected(
      "20 of 20 requests to http://127\\.0\\.0\\.1:[0-9]+ failed \\(100\\.0%, over "
      "--max-error-rate 10%\\): 20 http_error; the first: http_error: .*HTTP 500.*");
  EXPECT_TRUE(std::regex_match(rep.failure, expected)) << rep.failure;
  EXPECT_NE(rep.failure.find(rep.url), std::string::npos);
  ASSERT_EQ(r.verdicts.size(), 1u);
  EXPECT_EQ(r.verdicts[0], rep.failure);
  const json run_json = read_json(dir_ / "fail" / "run.json");
  EXPECT_EQ(run_json["verdict"]["failed"], true);
  EXPECT_EQ(run_json["verdict"]["reason"], rep.failure);
  EXPECT_EQ(run_json["server"]["faults_injected"]["http_5xx"], 20);
  EXPECT_EQ(lines(dir_ / "fail" / "requests.jsonl").size(), 20u);

  o.max_error_rate = 1;
  o.out_dir = (dir_ / "accepted").string();
  r = run(o);
  EXPECT_EQ(r.exit_code, 0) << log_;
  EXPECT_TRUE(r.runs[0].failure.empty()) << r.runs[0].failure;
  EXPECT_TRUE(r.verdicts.empty());
  EXPECT_EQ(read_json(dir_ / "accepted" / "run.json")["verdict"]["failed"], false);
}

// The threshold is "more than": with K of 20 requests failed (the same fault
// draws each run: one per request, in arrival order, from the fault seed), a
// rate of K/20 passes and anything below it fails.
TEST_F(BenchRun, ErrorRateThresholdIsMoreThan) {
  BenchSettings o = settings("probe");
  o.server.faults = serve::parse_faults("http_5xx=0.3");
  o.server.fault_seed = 7;
  o.max_error_rate = 1;
  BenchResult r = run(o);
  ASSERT_EQ(r.exit_code, 0) << log_;
  const auto failed = r.runs[0].summary["requests_failed"].get<std::uint64_t>();
  EXPECT_EQ(read_json(dir_ / "probe" / "run.json")["server"]["faults_injected"]["http_5xx"], failed);
  ASSERT_GT(failed, 0u);
  ASSERT_LT(failed, 20u);

  o.max_error_rate = static_cast<double>(failed) / 20;
  o.out_dir = (dir_ / "at").string();
  r = run(o);
  EXPECT_EQ(r.runs[0].summary["requests_failed"], failed);
  EXPECT_EQ(r.exit_code, 0) << r.runs[0].failure;

  o.max_error_rate = (static_cast<double>(failed) - 0.5) / 20;
  o.out_dir = (dir_ / "below").string();
  r = run(o);
  EXPECT_EQ(r.runs[0].summary["requests_failed"], failed);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.runs[0].failure.rfind(std::to_string(failed) + " of 20 requests", 0), 0u) << r.runs[0].failure;
}

// --perturb on the in-process server: its ground truth in run.json (the
// workload's seed by default); against a --target bench cannot know it.
TEST_F(BenchRun, InProcessPerturbationsAreRecordedAsGroundTruth) {
  BenchSettings o = settings("perturbed");
  o.engine.perturb =
      engine::parse_perturbations("recompile:ms=2;tail:target=requests,fraction=1,scale_ms=3,shape=2");
  o.workload.seed = 9;
  BenchResult r = run(o);
  ASSERT_EQ(r.exit_code, 0) << log_;
  const json run_json = read_json(dir_ / "perturbed" / "run.json");
  EXPECT_EQ(run_json["perturbation_seed"], 9);
  const json& p = run_json["perturbations"];
  ASSERT_EQ(p.size(), 2u) << run_json;
  EXPECT_EQ(p[0]["kind"], "recompile");
  EXPECT_GE(p[0]["injected"]["steps"].get<int>(), 1);
  EXPECT_EQ(p[1]["injected"]["requests"], 20);  // fraction 1: every request held
  EXPECT_GE(p[1]["injected"]["extra_ms_total"].get<double>(), 20 * 3.0);
  EXPECT_EQ(run_json["settings"]["requested"]["server"]["engine"]["perturb"], o.engine.perturb.text);
  // Without perturbations: an empty list.
  r = run(settings("plain"));
  ASSERT_EQ(r.exit_code, 0) << log_;
  EXPECT_EQ(read_json(dir_ / "plain" / "run.json")["perturbations"], json::array());
  o = settings("remote");
  o.engine.perturb = engine::parse_perturbations("leak");
  o.target_url = "http://127.0.0.1:1";
  EXPECT_THROW(run(o), UsageError);
}

// Bad settings are usage errors, before anything runs.
TEST_F(BenchRun, BadSettingsThrowUsageErrors) {
  BenchSettings o = settings("bad");
  o.max_error_rate = 1.5;
  EXPECT_THROW(run(o), UsageError);
  EXPECT_THROW(parse_compat("sglang"), UsageError);  // bench_settings_test.cpp has the rest
  o = settings("bad");
  o.workload.rate_rps = std::numeric_limits<double>::infinity();
  o.workload.num_requests = 0;
  o.workload.duration_s = 2;
  try {
    run(o);
    ADD_FAILURE() << "--rate inf with --duration-s ran";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--num-requests"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "bad" / "run.json"));
}

// --rate inf: every request is due at t = 0; run.json and vllm_result.json
// record the rate as "inf" (JSON has no infinity).
TEST_F(BenchRun, RateInfSendsEveryRequestAtTheStart) {
  BenchSettings o = settings("inf");
  o.workload.rate_rps = std::numeric_limits<double>::infinity();
  o.workload.arrival = "poisson";
  o.compat = Compat::kVllm;
  const BenchResult r = run(o);
  ASSERT_EQ(r.exit_code, 0) << log_;
  const auto recs = lines(dir_ / "inf" / "requests.jsonl");
  ASSERT_EQ(recs.size(), 20u);
  for (const auto& rec : recs) EXPECT_EQ(rec["t_sched_ns"], recs[0]["t_sched_ns"]);
  const json run_json = read_json(dir_ / "inf" / "run.json");
  EXPECT_EQ(run_json["settings"]["effective"]["load"]["rate_rps"], "inf");
  EXPECT_EQ(run_json["settings"]["effective"]["load"]["last_offset_s"], 0.0);
  const json v = read_json(dir_ / "inf" / "vllm_result.json");
  EXPECT_EQ(v["request_rate"], "inf");
  EXPECT_EQ(v["num_prompts"], 20);
  EXPECT_EQ(v["completed"], 20);
}

// Sessions with --compat vllm: a later turn has no planned prompt length;
// vllm_result.json counts the server's prompt tokens for it (never -1).
TEST_F(BenchRun, VllmResultOfSessionsCountsEveryTurnsPrompt) {
  const fs::path yaml = dir_ / "w.yaml";
  std::ofstream(yaml) << "num_requests: 4\narrival: {process: constant, rate_rps: 50}\nclasses:\n"
                         "  - name: agent\n    input_len: fixed:32\n    output_len: fixed:4\n"
                         "    turns: {count: 2, think_ms: 5, input_len: fixed:8}\n";
  BenchSettings o = settings("sessions");
  o.workload_file = yaml.string();
  o.compat = Compat::kVllm;
  const BenchResult r = run(o);
  ASSERT_EQ(r.exit_code, 0) << log_;
  const auto recs = lines(dir_ / "sessions" / "requests.jsonl");
  ASSERT_EQ(recs.size(), 8u);
  std::int64_t prompts = 0;
  for (const auto& rec : recs) {
    ASSERT_EQ(rec["outcome"], "ok");
    prompts += rec["prompt_tokens"].get<std::int64_t>();
    EXPECT_EQ(rec.contains("prompt_tokens_planned"), rec["turn"] == 0) << rec.dump();
  }
  const json v = read_json(dir_ / "sessions" / "vllm_result.json");
  ASSERT_EQ(v["input_lens"].size(), 8u);
  for (const auto& n : v["input_lens"]) EXPECT_GT(n.get<std::int64_t>(), 0);
  EXPECT_EQ(v["total_input_tokens"],
            prompts);  // first turns as planned (= the server's count), later turns the server's
}

// A request counts as reused only on a connection that served an earlier
// request: one user sending three requests opens one connection and reuses
// it twice; three requests due at once take the three warm connections,
// which served nothing before.
TEST_F(BenchRun, ReusedCountsOnlyConnectionsThatServedBefore) {
  BenchSettings o = settings("closed");
  o.workload.num_requests = 3;
  o.concurrency = 1;
  BenchResult r = run(o);
  ASSERT_EQ(r.exit_code, 0) << log_;
  json c = r.runs[0].client;
  EXPECT_EQ(c["connections_opened"], 1) << c.dump();
  EXPECT_EQ(c["requests_on_reused_connections"], 2) << c.dump();
  EXPECT_EQ(c["connect_retries"], 0) << c.dump();
  EXPECT_EQ(read_json(dir_ / "closed" / "run.json")["client"], c);

  o = settings("burst");
  o.workload.num_requests = 3;
  o.workload.rate_rps = std::numeric_limits<double>::infinity();
  r = run(o);
  ASSERT_EQ(r.exit_code, 0) << log_;
  c = r.runs[0].client;
  EXPECT_EQ(c["connections_opened"], 3) << c.dump();
  EXPECT_EQ(c["requests_on_reused_connections"], 0) << c.dump();
  EXPECT_EQ(c["peak_open_connections"], 3) << c.dump();
}

// With a workload file the arrival rate is the file's (arrival.rate_rps), in
// run.json's effective load and in vllm_result.json (they reported --rate's
// value and "inf" once).
TEST_F(BenchRun, WorkloadFileRateIsReportedAsTheFilesRate) {
  const fs::path yaml = dir_ / "w.yaml";
  std::ofstream(yaml) << "num_requests: 4\narrival: {process: constant, rate_rps: 20}\nclasses:\n"
                         "  - name: a\n    input_len: fixed:8\n    output_len: fixed:2\n";
  BenchSettings o = settings("file");
  o.workload_file = yaml.string();
  o.compat = Compat::kVllm;
  const BenchResult r = run(o);
  ASSERT_EQ(r.exit_code, 0) << log_;
  const json load = read_json(dir_ / "file" / "run.json")["settings"]["effective"]["load"];
  EXPECT_DOUBLE_EQ(load["last_offset_s"].get<double>(), 3 / 20.0);  // the file's rate decided the schedule
  EXPECT_EQ(load["rate_rps"], 20.0);
  EXPECT_EQ(read_json(dir_ / "file" / "vllm_result.json")["request_rate"], 20.0);
}

}  // namespace
}  // namespace tokenscope::bench

namespace tokenscope::bench {
namespace {

// --cgroup: the quotas in force go into run.json (observe.sources' cgroup
// entry), as read from the directory's files (here a cgroup's files laid
// out in a plain directory: this build machine has no writable cgroup v2,
// system_collectors_test says so).
TEST_F(BenchRun, TheCgroupsQuotasInForceAreInRunJson) {
  const fs::path cg = dir_ / "cgroup";
  fs::create_directories(cg);
  std::ofstream(cg / "cgroup.controllers") << "cpu memory\n";
  std::ofstream(cg / "cpu.max") << "150000 100000\n";
  std::ofstream(cg / "memory.max") << "2147483648\n";
  std::ofstream(cg / "memory.high") << "max\n";
  std::ofstream(cg / "cpu.stat") << "usage_usec 10\nnr_throttled 0\nthrottled_usec 0\n";
  BenchSettings o = settings("cg");
  o.cgroup = cg.string();
  ASSERT_EQ(run(o).exit_code, 0) << log_;
  const json run_json = read_json(dir_ / "cg" / "run.json");
  const json* source = nullptr;
  for (const auto& s : run_json["observe"]["sources"])
    if (s["source"] == "cgroup") source = &s;
  ASSERT_NE(source, nullptr) << run_json["observe"].dump();
  EXPECT_EQ((*source)["directory"], cg.string());
  const json& l = (*source)["limits"];
  EXPECT_DOUBLE_EQ(l["cpu.max"]["cpus"].get<double>(), 1.5);
  EXPECT_EQ(l["memory.max"], 2147483648LL);
  EXPECT_TRUE(l["memory.high"].is_null());
  EXPECT_FALSE(source->contains("limits_at_end"));  // unchanged during the run
}

}  // namespace
}  // namespace tokenscope::bench

namespace tokenscope::bench {
namespace {

net::FetchResult answered(std::string body, int status = 200) {
  net::FetchResult r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

net::FetchResult refused() {
  net::FetchResult r;
  r.error = "connection refused";
  return r;
}

// What each engine says about itself, as run.json records it: llama.cpp's
// /props, SGLang's /get_server_info, vLLM's /version, and why not.
TEST(ServerInfo, EachEnginesSelfDescriptionIsRecorded) {
  const auto llama = server_info_record(
      answered(
          R"({"total_slots": 4, "build_info": "b5002-c392e509", "default_generation_settings": {"n_ctx": 4096}})"),
      refused(), refused());
  EXPECT_EQ(llama["engine"], "llama.cpp");
  EXPECT_EQ(llama["max_batch"], 4);
  EXPECT_EQ(llama["version"], "b5002-c392e509");
  EXPECT_EQ(llama["n_ctx"], 4096);
  const auto sglang = server_info_record(answered("not found", 404), answered(R"({"version": "0.4.1"})"),
                                         answered(R"({"version": "0.4.1", "max_running_requests": 128,
                                                      "max_total_num_tokens": 412000, "chunked_prefill_size": 8192})"));
  EXPECT_EQ(sglang["engine"], "sglang");
  EXPECT_EQ(sglang["max_batch"], 128);
  EXPECT_EQ(sglang["kv_capacity_tokens"], 412000);
  EXPECT_EQ(sglang["chunked_prefill_size"], 8192);
  const auto vllm =
      server_info_record(answered("{}", 404), answered(R"({"version": "0.6.3.post1"})"), answered("", 404));
  EXPECT_EQ(vllm["engine"], "vllm");
  EXPECT_EQ(vllm["version"], "0.6.3.post1");
  EXPECT_FALSE(vllm.contains("max_batch"));
  const auto none = server_info_record(refused(), answered("<html>", 200), answered("", 404));
  EXPECT_EQ(none["available"], false);
  EXPECT_NE(none["reason"].get<std::string>().find("/props: connection refused"), std::string::npos) << none;
  // A /props that is not llama.cpp's (no total_slots) is not taken for it.
  EXPECT_EQ(server_info_record(answered(R"({"total_slots": "many"})"), refused(), refused())["available"],
            false);
}

// The info series of /metrics: vLLM's cache config, a build_info with its
// version; other series and a page that is no exposition give nothing.
TEST(ServerInfo, InfoSeriesOfMetricsAreRecorded) {
  const auto m = metrics_info_record(answered(
      "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
      "# TYPE vllm:cache_config_info gauge\n"
      "vllm:cache_config_info{block_size=\"16\",gpu_memory_utilization=\"0.9\",num_gpu_blocks=\"2048\"} 1.0\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{model_name=\"m\"} 3\n"
      "# TYPE sglang_build_info gauge\n"
      "sglang_build_info{version=\"0.4.1\"} 1\n"));
  ASSERT_TRUE(m.is_object()) << m;
  EXPECT_EQ(m.size(), 2u) << m;
  EXPECT_EQ(m["vllm:cache_config_info"]["num_gpu_blocks"], "2048");
  EXPECT_EQ(m["sglang_build_info"]["version"], "0.4.1");
  EXPECT_TRUE(metrics_info_record(answered("# TYPE x gauge\nx 1\n")).is_null());
  // A long value is cut at 200 bytes, never inside a UTF-8 character.
  const auto cut = metrics_info_record(
      answered("# TYPE a_info gauge\na_info{v=\"" + std::string(199, 'x') + "\xc3\xa9tail\"} 1\n"));
  EXPECT_EQ(cut["a_info"]["v"], std::string(199, 'x'));
  EXPECT_TRUE(metrics_info_record(answered("<html>not found</html>", 404)).is_null());
  EXPECT_TRUE(metrics_info_record(refused()).is_null());
}

}  // namespace
}  // namespace tokenscope::bench
