// The sim run as a library call and the finishers every run goes through.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "analyze/history.h"
#include "core/error.h"
#include "core/temp_dir.h"
#include "session/finishers.h"
#include "session/sim_plan.h"
#include "session/sim_run.h"

namespace tokenscope::session {
namespace {

namespace fs = std::filesystem;

SimRunSettings small_run(const fs::path& out) {
  SimRunSettings s;
  s.workload.num_requests = 40;
  s.workload.rate_rps = 20.0;
  s.workload.input_len = workload::parse_input_len("uniform:64:256");
  s.workload.output_len = workload::parse_output_len("uniform:8:32");
  s.workload.seed = 7;
  s.out = out.string();
  return s;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

std::size_t lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// Coupling recovered from a known interference: a constant 10 ms step, and
// a vision class whose every image (1,344 px square: 9 tiles) runs a 20.81 ms
// encoder (compute-bound on an H100). Text requests decode through the whole
// run, so every encoder run lengthens one of their steps: their TPOT in the
// mix is S / (1 - N_images x E / T), T the 60 s of arrivals; alone it is S.
// Vision is unaffected (its own encoders run alone too): kappa 1. With no
// interference at all (two text classes), TPOT's kappa is 1 and the others
// within a step's alignment of it.
TEST(SimRun, CouplingRecoversAKnownInterference) {
  const TempDir tmp("session");
  std::atomic<bool> stop{false};
  std::ostringstream log;
  const fs::path yaml = tmp / "mix.yaml";
  std::ofstream(yaml) << "duration_s: 60\nseed: 11\narrival: {process: poisson, rate_rps: 20}\nclasses:\n"
                         "  - {name: text, input_len: fixed:100, output_len: fixed:200}\n"
                         "  - {name: vision, input_len: fixed:50, output_len: fixed:20,\n"
                         "     images: {count: 1, width: fixed:1344, height: fixed:1344}}\n";
  SimRunSettings s;
  s.workload_file = yaml.string();
  s.engine.engine.model = "qwen2.5-vl-7b";
  s.engine.fixed_step_ms = 10.0;
  s.coupling = true;
  s.out = (tmp / "run").string();
  s.finish.history.disabled = true;
  const SimRunResult r = run_sim(s, stop, log);
  const auto run = read_json(tmp / "run" / "run.json");
  ASSERT_TRUE(run.contains("coupling"));
  EXPECT_EQ(run["coupling"], r.coupling);
  EXPECT_EQ(run["coupling"]["alone_runs"]["text"], "coupling/text");
  EXPECT_TRUE(fs::exists(tmp / "run" / "coupling" / "vision" / "requests.jsonl"));
  std::size_t images = 0;
  {
    std::ifstream in(tmp / "run" / "requests.jsonl");
    for (std::string line; std::getline(in, line);)
      images += nlohmann::json::parse(line)["class"] == "vision";
  }
  const double encoder_s = 9 * 2.0 * 0.67e9 * 1024 / (989e12 * 0.6);
  const double known = 1 / (1 - static_cast<double>(images) * encoder_s / 60.0);
  const auto& text = r.coupling["classes"]["text"]["tpot_ms"]["p50"];
  EXPECT_GT(known, 1.2);
  EXPECT_LE(text["ci"][0].get<double>(), known) << text.dump() << " known " << known;
  EXPECT_GE(text["ci"][1].get<double>(), known) << text.dump() << " known " << known;
  const auto& vision = r.coupling["classes"]["vision"]["tpot_ms"]["p50"];
  EXPECT_LE(vision["ci"][0].get<double>(), 1.0) << vision.dump();
  EXPECT_GE(vision["ci"][1].get<double>(), 1.0) << vision.dump();
  // The design's kappa terms: text's steps are 10 ms without encoders, the
  // largest skew is whole images' encoder time (one, or more images whose
  // prefills start in the same step), and the other class's traffic (the
  // vision KV reads and the encoder's weights) is a share of its steps'
  // bytes; vision waits for no other modality.
  const auto& design = r.coupling["design"];
  ASSERT_TRUE(design.contains("text")) << r.coupling.dump();
  EXPECT_NEAR(design["text"]["tau_base_ms"].get<double>(), 10.0, 1e-4);
  const double skew = design["text"]["dt_align_ms"].get<double>() / (encoder_s * 1e3);
  EXPECT_GE(skew, 1 - 1e-4) << design.dump();
  EXPECT_NEAR(skew, std::round(skew), 1e-3) << design.dump();
  const double rho = design["text"]["rho_shared"].get<double>();
  EXPECT_GT(rho, 0.0);
  EXPECT_LT(rho, 0.2);  // the model's 15 GB of weights are everyone's; the encoder's 1.3 GB are vision's
  EXPECT_NEAR(design["text"]["kappa"].get<double>(),
              rho * design["text"]["dt_align_ms"].get<double>() / design["text"]["tau_base_ms"].get<double>(),
              1e-9);
  EXPECT_EQ(design["vision"]["dt_align_ms"], 0.0);
  EXPECT_EQ(design["vision"]["kappa"], 0.0);

  // No interference: kappa 1 for every class, metric and quantile.
  std::ofstream(yaml) << "duration_s: 30\nseed: 11\narrival: {process: poisson, rate_rps: 20}\nclasses:\n"
                         "  - {name: a, input_len: fixed:100, output_len: fixed:50}\n"
                         "  - {name: b, input_len: fixed:300, output_len: fixed:20}\n";
  s.out = (tmp / "none").string();
  const SimRunResult none = run_sim(s, stop, log);
  for (const auto& [cls, metrics] : none.coupling["classes"].items())
    for (const auto& [metric, qs] : metrics.items())
      for (const auto& [q, k] : qs.items()) {
        ASSERT_TRUE(k.is_object()) << cls << " " << metric << " " << q;
        // TPOT exactly 1 (a constant step). TTFT and E2E within a few
        // percent: in the mix the engine is busy more often, and an arrival
        // waits for the step in progress (half a step, 5 ms, on average;
        // alone it more often finds the engine idle and starts at once).
        EXPECT_NEAR(k["kappa"].get<double>(), 1.0, 0.1) << cls << " " << metric << " " << q << k.dump();
        if (metric == "tpot_ms") {
          EXPECT_NEAR(k["kappa"].get<double>(), 1.0, 1e-9) << cls << " " << q;
        }
      }
  // Text classes only: no modality to wait for, the design's kappa is 0.
  for (const auto& [cls, d] : none.coupling["design"].items()) {
    EXPECT_EQ(d["dt_align_ms"], 0.0) << cls;
    EXPECT_EQ(d["kappa"], 0.0) << cls;
    EXPECT_NEAR(d["tau_base_ms"].get<double>(), 10.0, 1e-4) << cls;
  }
  // A workload of one class has nothing to couple; --coupling needs --out.
  s.workload_file.clear();
  EXPECT_THROW(run_sim(s, stop, log), UsageError);
  s.workload_file = yaml.string();
  s.out.clear();
  EXPECT_THROW(run_sim(s, stop, log), UsageError);
}

TEST(SimRun, WritesTheRunDirectoryAndItsCacheAndReturnsTheSummary) {
  const TempDir tmp("session");
  std::atomic<bool> stop{false};
  std::ostringstream log;
  SimRunSettings s = small_run(tmp / "run");
  s.finish.history.disabled = true;
  const SimRunResult r = run_sim(s, stop, log);
  EXPECT_FALSE(r.report.interrupted);
  EXPECT_EQ(r.summary["requests_completed"], 40);
  EXPECT_EQ(r.report.counters.requests_finished, 40u);
  const auto run = read_json(tmp / "run" / "run.json");
  EXPECT_EQ(run["tool"]["command"], "sim");
  EXPECT_EQ(run["summary"], r.summary);
  EXPECT_EQ(run["settings"]["requested"], requested_settings(s));
  EXPECT_FALSE(run["partial"].get<bool>());
  EXPECT_EQ(lines_of(tmp / "run" / "requests.jsonl"), 40u);
  EXPECT_EQ(lines_of(tmp / "run" / "steps.jsonl"), r.report.counters.steps);
  EXPECT_TRUE(fs::exists(tmp / "run" / "samples.jsonl"));
  EXPECT_TRUE(fs::exists(tmp / "run" / ".tokenscope-cache"));
  EXPECT_FALSE(fs::exists(tmp / "run" / "report.html"));
  EXPECT_FALSE(r.report_written);
  EXPECT_EQ(log.str(), "");
}

// A fleet's samples.jsonl: the replicas run window by window, not in one
// time order, yet every sample is the fleet at its time: the requests
// finished by then are exactly the records that ended by then, the sums of
// the replicas' raw series (engine="N") are the canonical series, and the
// last sample has the engine counters of the run.
// Both of the fleet's loops: least-loaded reads the replicas' loads (every
// replica stops at every arrival), round-robin does not (each replica runs
// a stretch of arrivals in one go).
TEST(SimRun, AFleetsSamplesAreTheFleetAtEachSampleTime) {
  for (const char* router : {"least-loaded", "round-robin"}) {
    SCOPED_TRACE(router);
    const TempDir tmp("session");
    std::atomic<bool> stop{false};
    std::ostringstream log;
    SimRunSettings s = small_run(tmp / "fleet");
    s.workload.num_requests = 120;
    s.workload.rate_rps = 40.0;
    s.sample_interval_s = 0.25;
    s.fleet.replicas = 3;
    s.fleet.router = router;
    const SimRunResult r = run_sim(s, stop, log);
    const nlohmann::json run = read_json(tmp / "fleet" / "run.json");
    EXPECT_EQ(run["observe"]["samples_file"], "samples.jsonl");
    std::vector<Nanos> ends;
    {
      std::ifstream in(tmp / "fleet" / "requests.jsonl");
      for (std::string line; std::getline(in, line);)
        ends.push_back(nlohmann::json::parse(line)["t_close_ns"]);
    }
    ASSERT_EQ(ends.size(), 120u);
    std::ifstream in(tmp / "fleet" / "samples.jsonl");
    std::size_t samples = 0;
    Nanos last_t = -1;
    nlohmann::json last;
    for (std::string line; std::getline(in, line);) {
      const auto o = nlohmann::json::parse(line);
      if (o["source"] != "sim") continue;
      ++samples;
      const Nanos t = o["t_ns"];
      EXPECT_GT(t, last_t);
      last_t = t;
      std::map<std::string, double> canonical, summed;
      for (const auto& c : o["canonical"]) canonical[c[0]] = c[2];
      std::set<std::string> engines;
      for (const auto& raw : o["raw"]) {
        summed[raw[0]] += raw[2].get<double>();
        engines.insert(raw[1]["engine"]);
      }
      EXPECT_EQ(engines.size(), 3u);
      const auto ended = std::count_if(ends.begin(), ends.end(), [t](Nanos e) { return e <= t; });
      EXPECT_EQ(canonical["requests_finished"], static_cast<double>(ended)) << t;
      EXPECT_EQ(summed["vllm:request_success_total"], canonical["requests_finished"]) << t;
      EXPECT_EQ(summed["vllm:num_requests_running"], canonical["requests_running"]) << t;
      EXPECT_EQ(summed["vllm:generation_tokens_total"], canonical["generation_tokens"]) << t;
      EXPECT_EQ(summed["vllm:prompt_tokens_total"], canonical["prompt_tokens"]) << t;
      EXPECT_NEAR(summed["vllm:kv_cache_usage_perc"] / 3, canonical["kv_cache_usage"], 1e-12) << t;
      last = canonical;
    }
    EXPECT_GE(samples, 10u);
    EXPECT_EQ(last["requests_finished"], 120.0);
    EXPECT_EQ(last["generation_tokens"], run["engine_counters"]["generation_tokens"].get<double>());
    EXPECT_EQ(last["prompt_tokens"], run["engine_counters"]["prompt_tokens"].get<double>());
    EXPECT_EQ(last["requests_running"], 0.0);
    EXPECT_EQ(last["iteration_tokens_count"], run["engine_counters"]["steps"].get<double>());
    (void)r;
  }
}

TEST(SimRun, WithoutADirectoryOnlyTheSummaryAndWithoutStepsSamplesOrCacheNoneOfThem) {
  const TempDir tmp("session");
  std::atomic<bool> stop{false};
  std::ostringstream log;
  SimRunSettings s = small_run("");
  const SimRunResult bare = run_sim(s, stop, log);
  EXPECT_EQ(bare.summary["requests_completed"], 40);
  EXPECT_TRUE(fs::is_empty(tmp.path()));

  s = small_run(tmp / "run");
  s.steps = s.samples = s.cache = false;
  s.finish.history.disabled = true;
  const SimRunResult r = run_sim(s, stop, log);
  // The same seeded run: the same summary with or without its files.
  EXPECT_EQ(r.summary, bare.summary);
  EXPECT_FALSE(fs::exists(tmp / "run" / "steps.jsonl"));
  EXPECT_FALSE(fs::exists(tmp / "run" / "samples.jsonl"));
  EXPECT_FALSE(fs::exists(tmp / "run" / ".tokenscope-cache"));
  EXPECT_TRUE(read_json(tmp / "run" / "run.json")["observe"]["samples_file"].is_null());
}

TEST(SimRun, AnInterruptedRunIsPartialAndLeavesNoCache) {
  const TempDir tmp("session");
  std::atomic<bool> stop{true};  // set from the start: seen at the engine's first check (256 iterations)
  std::ostringstream log;
  SimRunSettings s = small_run(tmp / "run");
  s.workload.num_requests = 3000;
  s.finish.history.disabled = true;
  const SimRunResult r = run_sim(s, stop, log);
  EXPECT_TRUE(r.report.interrupted);
  EXPECT_LT(r.report.counters.requests_finished, 3000u);
  EXPECT_TRUE(read_json(tmp / "run" / "run.json")["partial"].get<bool>());
  EXPECT_FALSE(fs::exists(tmp / "run" / ".tokenscope-cache"));
}

TEST(SimRun, BadSettingsAreUsageErrorsBeforeAnythingIsWritten) {
  const TempDir tmp("session");
  std::atomic<bool> stop{false};
  std::ostringstream log;
  SimRunSettings s = small_run(tmp / "run");
  s.workload.rate_rps = 0;
  EXPECT_THROW(run_sim(s, stop, log), UsageError);
  s = small_run(tmp / "run");
  s.engine.engine.model = "no-such-model";
  EXPECT_THROW(run_sim(s, stop, log), UsageError);
  EXPECT_FALSE(fs::exists(tmp / "run"));
}

TEST(Finishers, RegisterEveryRunAndWriteThePageOnce) {
  const TempDir tmp("session");
  std::atomic<bool> stop{false};
  std::ostringstream log;
  SimRunSettings s = small_run(tmp / "a");
  s.finish.history.path = (tmp / "history.db").string();
  s.finish.report = true;
  const SimRunResult a = run_sim(s, stop, log);
  EXPECT_TRUE(a.report_written);
  EXPECT_TRUE(fs::exists(tmp / "a" / "report.html"));
  // A second run, finished by hand: registered without a page.
  s = small_run(tmp / "b");
  s.finish.history.disabled = true;
  run_sim(s, stop, log);
  Finishers f;
  f.history.path = (tmp / "history.db").string();
  EXPECT_FALSE(finish_run(f, (tmp / "b").string(), {(tmp / "b").string()}, 1.0e9, log));
  EXPECT_FALSE(fs::exists(tmp / "b" / "report.html"));
  EXPECT_EQ(log.str(), "");
  const analyze::History h(tmp / "history.db", /*create=*/false);
  const auto runs = h.list({});
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].command, "sim");
  EXPECT_EQ(runs[1].command, "sim");
}

TEST(Finishers, AFailureIsToldAndDoesNotThrow) {
  const TempDir tmp("session");
  std::ostringstream log;
  Finishers f;
  f.report = true;
  // A history that cannot be a database, a run directory that is no run.
  std::ofstream(tmp / "not-a-db") << "plain text, not SQLite";
  f.history.path = (tmp / "not-a-db").string();
  fs::create_directories(tmp / "empty");
  EXPECT_FALSE(finish_run(f, (tmp / "empty").string(), {(tmp / "empty").string()}, std::nullopt, log));
  EXPECT_NE(log.str().find("was not registered in the history"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("report.html not written"), std::string::npos) << log.str();
}

// sim --plan: a load one replica cannot carry within a TTFT SLO. The plan's
// smallest fleet meets every SLO and the fleet one replica smaller does not,
// each checked here by a run of its own; every fleet tried at or above the
// smallest met them (passing was monotone), and the fleets tried are the
// doubling and the bisection.
SimRunSettings overloaded() {
  SimRunSettings s;
  s.workload.num_requests = 600;
  s.workload.rate_rps = 60.0;
  s.workload.input_len = workload::parse_input_len("fixed:2000");
  s.workload.output_len = workload::parse_output_len("fixed:64");
  s.workload.seed = 3;
  s.slo = {bench::parse_slo_spec("ttft_ms=300,p=95")};
  return s;
}

bool meets(const nlohmann::json& summary) {
  for (const auto& [cls, a] : summary["slo_attainment"].items())
    if (!a["pass"].get<bool>()) return false;
  return !summary["slo_attainment"].empty();
}

TEST(SimPlan, TheSmallestFleetMeetsTheSloAndOneReplicaLessDoesNot) {
  std::atomic<bool> stop{false};
  std::ostringstream log;
  const SimRunSettings base = overloaded();
  PlanSettings ps;
  ps.max_replicas = 32;
  ps.gpu_cost_per_hour = 2.5;
  const PlanResult plan = plan_fleet(base, ps, stop, log);
  ASSERT_TRUE(plan.smallest) << log.str();
  const std::uint32_t n = *plan.smallest;
  ASSERT_GT(n, 1u) << "one replica must not carry this load, or the search is not exercised";
  EXPECT_TRUE(plan.monotone);
  for (const auto& p : plan.points) EXPECT_EQ(p.pass, p.replicas >= n) << p.replicas;
  // Doubling until the first pass, then bisection: the fleet one smaller was tried.
  std::set<std::uint32_t> tried;
  for (const auto& p : plan.points) tried.insert(p.replicas);
  EXPECT_TRUE(tried.contains(n - 1));
  for (std::uint32_t k = 1; k < n; k *= 2) EXPECT_TRUE(tried.contains(k)) << k;
  // Independent runs of the two fleets on each side.
  SimRunSettings a = base, b = base;
  a.fleet.replicas = n;
  b.fleet.replicas = n - 1;
  std::ostringstream quiet;
  EXPECT_TRUE(meets(run_sim(a, stop, quiet).summary));
  EXPECT_FALSE(meets(run_sim(b, stop, quiet).summary));
  // run.json's plan: the choice, GPUs and cost.
  const auto j = plan.to_json(ps, base);
  EXPECT_EQ(j["smallest_replicas"], n);
  EXPECT_EQ(j["smallest_gpus"], n * plan.gpus_per_replica);
  EXPECT_EQ(j["points"].size(), plan.points.size());
  EXPECT_DOUBLE_EQ(j["points"][0]["cost_per_hour"].get<double>(), 2.5 * plan.gpus_per_replica);
  EXPECT_EQ(j["slo"], nlohmann::json::array({"ttft_ms=300,p=95"}));
  // Too few replicas allowed: no fleet meets it, said as none.
  ps.max_replicas = n - 1;
  const PlanResult none = plan_fleet(base, ps, stop, log);
  EXPECT_FALSE(none.smallest);
  EXPECT_FALSE(none.points.empty());
  for (const auto& p : none.points) EXPECT_FALSE(p.pass);
}

// sim --plan over pools: the choice is the cheapest mix of every mix up
// to the pools' counts that meets the SLO, checked against all of them run
// one by one (34 runs), and one fewer of its last pool misses.
TEST(SimPlan, OverPoolsTheCheapestMixIsTheCheapestOfEveryMixThatMeetsTheSlo) {
  const TempDir tmp("session");
  std::ofstream(tmp / "pools.yaml") << "pools:\n"
                                       "  - {name: new, gpu: h100, count: 4, gpu-cost-per-hour: 4}\n"
                                       "  - {name: old, gpu: a100, count: 6, gpu-cost-per-hour: 1.6}\n";
  std::atomic<bool> stop{false};
  std::ostringstream log;
  SimRunSettings base = overloaded();
  base.workload.rate_rps = 40.0;
  base.slo = {bench::parse_slo_spec("ttft_ms=500,p=95")};
  base.fleet.pools_file = (tmp / "pools.yaml").string();
  base.fleet.router = "least-loaded";
  const PlanResult plan = plan_fleet(base, {}, stop, log);
  ASSERT_TRUE(plan.cheapest) << log.str();
  EXPECT_TRUE(plan.priced);
  EXPECT_EQ(plan.pool_names, (std::vector<std::string>{"new", "old"}));
  const auto cost = [](std::uint32_t n, std::uint32_t o) { return 4.0 * n + 1.6 * o; };
  // Every mix, run by itself.
  std::optional<double> best;
  std::ostringstream quiet;
  std::map<std::pair<std::uint32_t, std::uint32_t>, bool> meets_of;
  for (std::uint32_t n = 0; n <= 4; ++n)
    for (std::uint32_t o = 0; o <= 6; ++o) {
      if (n + o == 0) continue;
      SimRunSettings one = base;
      one.fleet.pool_counts = {n, o};
      const bool m = meets(run_sim(one, stop, quiet).summary);
      meets_of[{n, o}] = m;
      if (m && (!best || cost(n, o) < *best)) best = cost(n, o);
    }
  ASSERT_TRUE(best);
  const auto& c = *plan.cheapest;
  EXPECT_TRUE(meets_of.at({c[0], c[1]}));
  EXPECT_DOUBLE_EQ(cost(c[0], c[1]), *best) << "the plan chose new=" << c[0] << " old=" << c[1];
  // Its points are those runs' verdicts, and fewer runs than every mix.
  for (const auto& p : plan.points) EXPECT_EQ(p.pass, meets_of.at({p.counts[0], p.counts[1]}));
  EXPECT_LT(plan.points.size(), meets_of.size());
  if (c[1] > 0) {
    EXPECT_FALSE(meets_of.at({c[0], c[1] - 1}));
  }
  const auto j = plan.to_json({}, base);
  EXPECT_EQ(j["objective"], "cost_per_hour");
  EXPECT_EQ(j["cheapest_counts"]["new"], c[0]);
  EXPECT_EQ(j["cheapest_counts"]["old"], c[1]);
  EXPECT_DOUBLE_EQ(j["cheapest_cost_per_hour"].get<double>(), *best);
  // Refused: a plan price beside the pools' own, and too many mixes.
  PlanSettings priced;
  priced.gpu_cost_per_hour = 2;
  EXPECT_THROW(plan_fleet(base, priced, stop, log), UsageError);
  std::ofstream(tmp / "many.yaml") << "pools:\n  - {gpu: h100, count: 100}\n  - {gpu: a100, count: 100}\n"
                                      "  - {gpu: l40s, count: 3}\n";
  base.fleet.pools_file = (tmp / "many.yaml").string();
  EXPECT_THROW(plan_fleet(base, {}, stop, log), UsageError);
}

TEST(SimPlan, APlanWithoutAnSloIsRefused) {
  std::atomic<bool> stop{false};
  std::ostringstream log;
  SimRunSettings s = overloaded();
  s.slo.clear();
  EXPECT_THROW(plan_fleet(s, {}, stop, log), UsageError);
  // An SLO without a target, or for a class the workload does not have.
  s.slo = {bench::parse_slo_spec("p=95")};
  EXPECT_THROW(plan_fleet(s, {}, stop, log), UsageError);
  s.slo = {bench::parse_slo_spec("chat:ttft_ms=300")};
  try {
    plan_fleet(s, {}, stop, log);
    ADD_FAILURE() << "an SLO of a class the workload does not have";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no class 'chat' (its classes: default)"), std::string::npos)
        << e.what();
  }
  // "default" names the class of requests that name none.
  s.slo = {bench::parse_slo_spec("default:ttft_ms=300,p=95")};
  PlanSettings ps;
  ps.max_replicas = 32;
  const PlanResult p = plan_fleet(s, ps, stop, log);
  ASSERT_TRUE(p.smallest);
  EXPECT_EQ(*p.smallest, *plan_fleet(overloaded(), ps, stop, log).smallest);
}

TEST(SimPlan, AnInterruptedSearchChoosesNothing) {
  std::atomic<bool> stop{true};
  std::ostringstream log;
  const PlanResult p = plan_fleet(overloaded(), {}, stop, log);
  EXPECT_TRUE(p.interrupted);
  EXPECT_FALSE(p.smallest);
  EXPECT_EQ(p.to_json({}, overloaded())["smallest_replicas"], nullptr);
}

}  // namespace
}  // namespace tokenscope::session
