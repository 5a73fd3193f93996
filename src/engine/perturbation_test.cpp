#include "engine/perturbation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/simulator.h"
#include "workload/synthetic.h"

namespace tokenscope::engine {
namespace {

// ---- the spec ----------------------------------------------------------------------------

std::string error_of(std::string_view spec) {
  try {
    parse_perturbation_spec(spec);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PerturbationSpec, EveryKindWithItsParameters) {
  const auto list = parse_perturbation_spec(
      "tail:target=steps,fraction=0.02,dist=pareto,scale_ms=5,shape=1.5;leak:per_min=2%; "
      "tail:target=requests,fraction=1%,dist=lognormal,median_ms=20,sigma=0.8,max_ms=500;"
      "warmup:factor=3,duration_s=30,curve=exp;steal:share=30%,period_s=10,on_s=4,offset_s=2;"
      "batch_cap:max_num_seqs=8;kv:fraction=0.25;recompile:ms=40");
  ASSERT_EQ(list.size(), 8u);
  const auto& steps = std::get<TailParams>(list[0].params);
  EXPECT_EQ(steps.target, TailTarget::kSteps);
  EXPECT_EQ(steps.fraction, 0.02);
  EXPECT_EQ(steps.dist, TailDistribution::kPareto);
  EXPECT_EQ(steps.scale_ms, 5.0);
  EXPECT_EQ(steps.shape, 1.5);
  EXPECT_EQ(steps.max_ms, 10000.0);  // the default cap
  EXPECT_EQ(std::get<LeakParams>(list[1].params).per_min, 0.02);
  const auto& requests = std::get<TailParams>(list[2].params);
  EXPECT_EQ(requests.target, TailTarget::kRequests);
  EXPECT_EQ(requests.fraction, 0.01);
  EXPECT_EQ(requests.dist, TailDistribution::kLognormal);
  EXPECT_EQ(requests.median_ms, 20.0);
  EXPECT_EQ(requests.sigma, 0.8);
  EXPECT_EQ(requests.max_ms, 500.0);
  const auto& warmup = std::get<WarmupParams>(list[3].params);
  EXPECT_EQ(warmup.factor, 3.0);
  EXPECT_EQ(warmup.duration_s, 30.0);
  EXPECT_EQ(warmup.curve, WarmupCurve::kExponential);
  const auto& steal = std::get<StealParams>(list[4].params);
  EXPECT_EQ(steal.share, 0.3);
  EXPECT_EQ(steal.period_s, 10.0);
  EXPECT_EQ(steal.on_s, 4.0);
  EXPECT_EQ(steal.offset_s, 2.0);
  EXPECT_EQ(std::get<BatchCapParams>(list[5].params).max_num_seqs, 8u);
  EXPECT_EQ(std::get<KvParams>(list[6].params).fraction, 0.25);
  EXPECT_EQ(std::get<RecompileParams>(list[7].params).ms, 40.0);
  EXPECT_EQ(list[7].kind(), PerturbationKind::kRecompile);
  EXPECT_EQ(name_of(list[5].kind()), "batch_cap");
}

TEST(PerturbationSpec, DefaultsNoneAndTheEmptySpec) {
  EXPECT_TRUE(parse_perturbation_spec("").empty());
  EXPECT_TRUE(parse_perturbation_spec("none").empty());
  EXPECT_TRUE(parse_perturbation_spec(" ; ;").empty());
  const auto list = parse_perturbation_spec("tail;warmup;leak;steal:period_s=6;recompile");
  ASSERT_EQ(list.size(), 5u);
  const auto& t = std::get<TailParams>(list[0].params);
  EXPECT_EQ(t.target, TailTarget::kSteps);
  EXPECT_EQ(t.fraction, 0.01);
  EXPECT_EQ(t.scale_ms, 5.0);
  EXPECT_EQ(std::get<WarmupParams>(list[1].params).factor, 2.0);
  EXPECT_EQ(std::get<WarmupParams>(list[1].params).curve, WarmupCurve::kLinear);
  EXPECT_EQ(std::get<LeakParams>(list[2].params).per_min, 0.01);
  EXPECT_EQ(std::get<StealParams>(list[3].params).on_s, 3.0);  // half the period given
  EXPECT_EQ(std::get<RecompileParams>(list[4].params).ms, 100.0);
}

TEST(PerturbationSpec, ErrorsNameTheItemTheKeyAndWhatWasExpected) {
  EXPECT_EQ(error_of("leak:per_min=2%;tail:fraction=abc"),
            "--perturb: item 2 'tail:fraction=abc': fraction: expected a probability in [0, 1] (0.02 or 2%), "
            "got 'abc'");
  EXPECT_EQ(error_of("jitter:ms=3"),
            "--perturb: item 1 'jitter:ms=3': unknown kind 'jitter' (expected tail, warmup, leak, steal, "
            "batch_cap, kv or recompile)");
  EXPECT_EQ(error_of("leak:rate=2"),
            "--perturb: item 1 'leak:rate=2': unknown parameter 'rate' (expected per_min)");
  EXPECT_EQ(error_of("leak:per_min"), "--perturb: item 1 'leak:per_min': expected KEY=VALUE, got 'per_min'");
  EXPECT_EQ(error_of("leak:per_min="), "--perturb: item 1 'leak:per_min=': parameter 'per_min' has no value");
  EXPECT_EQ(error_of("leak:per_min=1,per_min=2"),
            "--perturb: item 1 'leak:per_min=1,per_min=2': parameter 'per_min' given twice");
  EXPECT_EQ(error_of("leak;leak:per_min=0.1"),
            "--perturb: item 2 'leak:per_min=0.1': 'leak' is given twice (each kind at most once)");
  EXPECT_EQ(error_of("tail:target=requests;tail:target=requests,fraction=0.5"),
            "--perturb: item 2 'tail:target=requests,fraction=0.5': a tail with target=requests is given "
            "twice (at most one per target)");
  EXPECT_EQ(error_of("tail:target=tokens"),
            "--perturb: item 1 'tail:target=tokens': target: expected steps or requests, got 'tokens'");
  EXPECT_EQ(error_of("tail:dist=lognormal,scale_ms=5"),
            "--perturb: item 1 'tail:dist=lognormal,scale_ms=5': parameter 'scale_ms' does not apply to "
            "dist=lognormal (it takes median_ms and sigma)");
  EXPECT_EQ(error_of("tail:sigma=1"),
            "--perturb: item 1 'tail:sigma=1': parameter 'sigma' does not apply to dist=pareto (it takes "
            "scale_ms and shape)");
  EXPECT_EQ(error_of("tail:fraction=1.5"),
            "--perturb: item 1 'tail:fraction=1.5': fraction: expected a probability in [0, 1] (0.02 or 2%), "
            "got '1.5'");
  EXPECT_EQ(error_of("tail:shape=0"),
            "--perturb: item 1 'tail:shape=0': shape: expected a tail index alpha in (0, 100], got '0'");
  EXPECT_EQ(error_of("tail:scale_ms=50,max_ms=20"),
            "--perturb: item 1 'tail:scale_ms=50,max_ms=20': max_ms (20) is below scale_ms (50): every draw "
            "would be max_ms");
  EXPECT_EQ(error_of("warmup:factor=0.5"),
            "--perturb: item 1 'warmup:factor=0.5': factor: expected a multiplier in [1, 1000], got '0.5'");
  EXPECT_EQ(error_of("warmup:curve=cosine"),
            "--perturb: item 1 'warmup:curve=cosine': curve: expected linear or exp, got 'cosine'");
  EXPECT_EQ(error_of("steal:period_s=5,on_s=6"),
            "--perturb: item 1 'steal:period_s=5,on_s=6': on_s (6) is longer than period_s (5)");
  EXPECT_EQ(error_of("batch_cap"),
            "--perturb: item 1 'batch_cap': needs max_num_seqs=N (running sequences at most, an integer in "
            "[1, 1000000])");
  EXPECT_EQ(error_of("batch_cap:max_num_seqs=2.5"),
            "--perturb: item 1 'batch_cap:max_num_seqs=2.5': max_num_seqs: expected running sequences at "
            "most, an integer in [1, 1000000], got '2.5'");
  EXPECT_EQ(error_of("kv"), "--perturb: item 1 'kv': needs fraction (e.g. kv:fraction=0.5)");
  EXPECT_EQ(
      error_of("kv:fraction=0"),
      "--perturb: item 1 'kv:fraction=0': fraction: expected a share of the KV blocks in (0, 1] (0.5 or "
      "50%), got '0'");
  EXPECT_EQ(error_of("recompile:ms=-1"),
            "--perturb: item 1 'recompile:ms=-1': ms: expected milliseconds in [0, 3600000], got '-1'");
  EXPECT_EQ(error_of("recompile:ms=5ms"),
            "--perturb: item 1 'recompile:ms=5ms': ms: expected milliseconds in [0, 3600000], got '5ms'");
  EXPECT_EQ(error_of("leak:per_min=nan"),
            "--perturb: item 1 'leak:per_min=nan': per_min: expected a fraction of the step time per minute "
            "in [0, 100] (0.02 or 2%), got 'nan'");
}

TEST(PerturbationSpec, JsonCarriesEveryParameter) {
  const auto list = parse_perturbation_spec("tail:fraction=0.02,scale_ms=5,shape=1.5;steal:share=0.25");
  EXPECT_EQ(list[0].to_json(), nlohmann::json::parse(R"({"kind": "tail", "target": "steps", "fraction": 0.02,
      "dist": "pareto", "scale_ms": 5.0, "shape": 1.5, "max_ms": 10000.0})"));
  EXPECT_EQ(list[1].to_json(), nlohmann::json::parse(R"({"kind": "steal", "share": 0.25, "period_s": 20.0,
      "on_s": 10.0, "offset_s": 0.0})"));
}

// ---- the pure functions ------------------------------------------------------------------

TEST(PerturbationFunctions, WarmupDecaysToOneAtItsDuration) {
  const WarmupParams linear{3.0, 40.0, WarmupCurve::kLinear};
  EXPECT_DOUBLE_EQ(warmup_multiplier(linear, 0.0), 3.0);
  EXPECT_DOUBLE_EQ(warmup_multiplier(linear, 10.0), 2.5);  // 1 + 2 * (1 - 0.25)
  EXPECT_DOUBLE_EQ(warmup_multiplier(linear, 40.0), 1.0);
  EXPECT_DOUBLE_EQ(warmup_multiplier(linear, 1000.0), 1.0);
  const WarmupParams exp{3.0, 40.0, WarmupCurve::kExponential};
  EXPECT_DOUBLE_EQ(warmup_multiplier(exp, 0.0), 3.0);
  // numpy: 1 + 2 * (np.exp(-5 * 0.25) - np.exp(-5)) / (1 - np.exp(-5))
  EXPECT_DOUBLE_EQ(warmup_multiplier(exp, 10.0), 1.5633293832495725);
  EXPECT_NEAR(warmup_multiplier(exp, 40.0 - 1e-9), 1.0, 1e-9);
  EXPECT_DOUBLE_EQ(warmup_multiplier(exp, 40.0), 1.0);
}

TEST(PerturbationFunctions, LeakAndStealIntervals) {
  EXPECT_DOUBLE_EQ(leak_multiplier(LeakParams{0.02}, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(leak_multiplier(LeakParams{0.02}, 90.0), 1.03);
  const StealParams s{0.5, 10.0, 4.0, 2.0};
  EXPECT_FALSE(steal_active(s, 0.0));  // before the offset
  EXPECT_FALSE(steal_active(s, 1.999));
  EXPECT_TRUE(steal_active(s, 2.0));
  EXPECT_TRUE(steal_active(s, 5.999));
  EXPECT_FALSE(steal_active(s, 6.0));
  EXPECT_FALSE(steal_active(s, 11.9));
  EXPECT_TRUE(steal_active(s, 12.0));
}

TEST(PerturbationFunctions, ShapesArePowerOfTwoBuckets) {
  EXPECT_EQ(pow2_bucket(0), 0u);
  EXPECT_EQ(pow2_bucket(1), 0u);
  EXPECT_EQ(pow2_bucket(2), 1u);
  EXPECT_EQ(pow2_bucket(3), 2u);
  EXPECT_EQ(pow2_bucket(4), 2u);
  EXPECT_EQ(pow2_bucket(5), 3u);
  EXPECT_EQ(pow2_bucket(8192), 13u);
  EXPECT_EQ(pow2_bucket(8193), 14u);
  EXPECT_EQ(shape_of(3, 100), 2u * 64 + 7);
  EXPECT_EQ(shape_of(4, 128), shape_of(3, 65));
  EXPECT_NE(shape_of(4, 128), shape_of(5, 128));
}

TEST(PerturbationFunctions, TailDrawsAreTheDistributionsQuantiles) {
  TailParams pareto;
  pareto.scale_ms = 5.0;
  pareto.shape = 1.5;
  EXPECT_DOUBLE_EQ(tail_draw_ms(pareto, 1.0), 5.0);  // scipy.stats.pareto(1.5, scale=5).isf(1.0)
  EXPECT_DOUBLE_EQ(tail_draw_ms(pareto, 0.5), 7.937005259840997);    // .isf(0.5)
  EXPECT_DOUBLE_EQ(tail_draw_ms(pareto, 0.01), 107.72173450159411);  // .isf(0.01)
  pareto.max_ms = 100.0;
  EXPECT_DOUBLE_EQ(tail_draw_ms(pareto, 0.01), 100.0);  // capped
  TailParams lognormal;
  lognormal.dist = TailDistribution::kLognormal;
  lognormal.median_ms = 20.0;
  lognormal.sigma = 0.8;
  EXPECT_DOUBLE_EQ(tail_draw_ms(lognormal, 0.5), 20.0);  // scipy.stats.lognorm(0.8, scale=20).isf(0.5)
  EXPECT_NEAR(tail_draw_ms(lognormal, 0.05), 74.56082051776762, 1e-12);   // .isf(0.05)
  EXPECT_NEAR(tail_draw_ms(lognormal, 0.975), 4.169353909021016, 1e-12);  // .isf(0.975)
  EXPECT_EQ(unit_from_hash(0), 0x1.0p-53);
  EXPECT_EQ(unit_from_hash(~0ULL), 1.0);
}

// ---- the Perturber -----------------------------------------------------------------------

Perturber perturber(std::string_view spec, std::uint64_t seed = 1) {
  return Perturber(parse_perturbation_spec(spec), seed, CapacityBaseline{});
}

constexpr Nanos kMs = 1'000'000;

TEST(Perturber, LeakAddsItsShareOfTheStepPerMinuteOfRunTime) {
  auto p = perturber("leak:per_min=2%");
  // Run time counts from the first step (at 5 s here).
  EXPECT_EQ(p.on_step(0, 5'000 * kMs, 10 * kMs, 1, 1).extra_ns, 0);
  EXPECT_EQ(p.on_step(1, 65'000 * kMs, 10 * kMs, 1, 1).extra_ns, 200'000);   // 10 ms * 2%
  EXPECT_EQ(p.on_step(2, 125'000 * kMs, 10 * kMs, 1, 1).extra_ns, 400'000);  // two minutes
  const auto t = p.tallies();
  EXPECT_EQ(t[0].count, 2u);
  EXPECT_EQ(t[0].seen, 3u);
  EXPECT_NEAR(t[0].extra_ms, 0.6, 1e-12);
}

TEST(Perturber, KindsComposeInTheirDocumentedOrder) {
  // d = 10 ms at t = 0: warmup x2 -> 20, leak x1 -> 20, steal +50% -> 30 (10 stolen), recompile +7 -> 37.
  auto p = perturber(
      "recompile:ms=7;steal:share=0.5,period_s=60,on_s=40;leak:per_min=0.5;warmup:factor=2,duration_s=60");
  const auto first = p.on_step(0, 0, 10 * kMs, 2, 100);
  EXPECT_EQ(first.extra_ns, 27 * kMs);
  EXPECT_EQ(first.stolen_ns, 10 * kMs);
  // At t = 30 s: warmup 1.5 -> 15, leak 1.25 -> 18.75, steal -> 28.125, same shape: no recompile.
  const auto later = p.on_step(1, 30'000 * kMs, 10 * kMs, 2, 100);
  EXPECT_EQ(later.extra_ns, 18'125'000);
  EXPECT_EQ(later.stolen_ns, 9'375'000);
  const auto j = p.to_json();
  ASSERT_EQ(j.size(), 4u);
  EXPECT_EQ(j[0]["kind"], "recompile");
  EXPECT_EQ(j[0]["injected"]["steps"], 1);
  EXPECT_DOUBLE_EQ(j[0]["injected"]["extra_ms_total"].get<double>(), 7.0);
  EXPECT_EQ(j[1]["injected"]["steps"], 2);
  EXPECT_DOUBLE_EQ(j[1]["injected"]["extra_ms_total"].get<double>(), 10.0 + 9.375);
  EXPECT_DOUBLE_EQ(j[2]["injected"]["extra_ms_total"].get<double>(), 3.75);
  EXPECT_DOUBLE_EQ(j[3]["injected"]["extra_ms_total"].get<double>(), 10.0 + 5.0);
}

TEST(Perturber, RecompileChargesOnlyTheFirstSightOfAShape) {
  auto p = perturber("recompile:ms=50");
  EXPECT_EQ(p.on_step(0, 0, kMs, 1, 512).extra_ns, 50 * kMs);
  EXPECT_EQ(p.on_step(1, kMs, kMs, 1, 300).extra_ns, 0);             // 300 pads to 512: seen
  EXPECT_EQ(p.on_step(2, 2 * kMs, kMs, 2, 512).extra_ns, 50 * kMs);  // a new batch bucket
  EXPECT_EQ(p.on_step(3, 3 * kMs, kMs, 1, 513).extra_ns, 50 * kMs);  // a new token bucket
  EXPECT_EQ(p.on_step(4, 4 * kMs, kMs, 2, 400).extra_ns, 0);
  EXPECT_EQ(p.tallies()[0].count, 3u);
}

TEST(Perturber, StepTailHitsAboutItsFractionAndIsReproducible) {
  auto a = perturber("tail:fraction=0.02,scale_ms=5,shape=1.5", 42);
  auto b = perturber("tail:fraction=0.02,scale_ms=5,shape=1.5", 42);
  auto c = perturber("tail:fraction=0.02,scale_ms=5,shape=1.5", 43);
  constexpr int kSteps = 100'000;
  int hits = 0, differ = 0;
  for (int i = 0; i < kSteps; ++i) {
    const Nanos x = a.on_step(i, i * kMs, kMs, 1, 1).extra_ns;
    ASSERT_EQ(x, b.on_step(i, i * kMs, kMs, 1, 1).extra_ns);
    differ += x != c.on_step(i, i * kMs, kMs, 1, 1).extra_ns;
    if (x > 0) {
      ++hits;
      ASSERT_GE(x, 5 * kMs);  // a Pareto draw is at least scale_ms
    }
  }
  // Binomial(100000, 0.02): mean 2000, sd 44.3; 5 sd either side.
  EXPECT_GT(hits, 2000 - 222);
  EXPECT_LT(hits, 2000 + 222);
  EXPECT_GT(differ, 1000);  // another seed picks other steps
  EXPECT_EQ(a.tallies()[0].count, static_cast<std::uint64_t>(hits));
  // The mean of Pareto(1.5, 5) is 15 ms (scipy.stats.pareto(1.5, scale=5).mean()); its
  // variance is infinite, so only a loose check: between the minimum and 3x the mean.
  const double mean = a.tallies()[0].extra_ms / hits;
  EXPECT_GT(mean, 5.0);
  EXPECT_LT(mean, 45.0);
}

TEST(Perturber, RequestHoldsAreKeyedByTheRequest) {
  auto a = perturber("tail:target=requests,fraction=0.1,dist=lognormal,median_ms=20,sigma=0.5", 7);
  auto b = perturber("tail:target=requests,fraction=0.1,dist=lognormal,median_ms=20,sigma=0.5", 7);
  EXPECT_TRUE(a.holds_requests());
  std::map<std::uint64_t, Nanos> forward;
  for (std::uint64_t k = 0; k < 20'000; ++k) forward[k] = a.request_hold(k);
  int held = 0;
  for (std::uint64_t k = 20'000; k-- > 0;) {  // the other order: the same holds
    ASSERT_EQ(b.request_hold(k), forward[k]);
    held += forward[k] > 0;
  }
  // Binomial(20000, 0.1): mean 2000, sd 42.4.
  EXPECT_GT(held, 2000 - 212);
  EXPECT_LT(held, 2000 + 212);
  EXPECT_EQ(a.to_json()[0]["injected"]["requests"], held);
  EXPECT_EQ(a.to_json()[0]["injected"]["requests_seen"], 20'000);
  // Steps are untouched by a request tail.
  EXPECT_EQ(a.on_step(0, 0, kMs, 1, 1).extra_ns, 0);
  EXPECT_FALSE(perturber("tail:fraction=0.5").holds_requests());
}

// ---- in the engine and the simulator -----------------------------------------------------

workload::Workload steady_workload(std::uint64_t seed, std::uint64_t n, double rate) {
  workload::SyntheticSettings s;
  s.arrival.rate_rps = rate;
  s.num_requests = n;
  s.input = workload::parse_length_spec("uniform:50:400", "--input-len", workload::LengthRole::kInput);
  s.output = workload::parse_length_spec("uniform:20:120", "--output-len", workload::LengthRole::kOutput);
  return workload::make_synthetic(s, workload::WorkloadSeeds::from_master(seed));
}

struct StepLog : EngineObserver {
  std::vector<StepStats> steps;
  std::map<std::uint64_t, FinishedRequest> finished;
  void on_step(const StepStats& s) override { steps.push_back(s); }
  void on_finish(const FinishedRequest& r) override { finished[r.id] = r; }
};

struct Sim {
  EffectiveEngine eff;
  StepLog log;
  std::unique_ptr<Engine> engine;
  SimReport report;
};

// The workload through an engine whose every step costs step_ms (before perturbations).
std::unique_ptr<Sim> simulate(const workload::Workload& w, std::string_view spec, double step_ms = 10.0,
                              std::uint64_t seed = 1, EngineSettings s = {}) {
  auto sim = std::make_unique<Sim>();
  s.perturbations = parse_perturbation_spec(spec);
  s.perturbation_seed = seed;
  sim->eff = resolve_engine(s, Catalog::builtin());
  sim->engine =
      std::make_unique<Engine>(sim->eff, s, std::make_unique<FixedCostModel>(step_ms * 1e-3), &sim->log);
  sim->report = run_simulation(w, *sim->engine);
  return sim;
}

TEST(PerturbedSimulation, NoEffectPerturbationsLeaveEveryStepAsItWas) {
  const auto w = steady_workload(3, 400, 20.0);
  EngineSettings s;
  s.num_gpu_blocks_override = 2000;
  const auto base = simulate(w, "", 10.0, 1, s);
  const auto null = simulate(w,
                             "tail:fraction=0;leak:per_min=0;warmup:factor=1;steal:share=0;recompile:ms=0;"
                             "tail:target=requests,fraction=0",
                             10.0, 1, s);
  ASSERT_EQ(base->log.steps.size(), null->log.steps.size());
  for (std::size_t i = 0; i < base->log.steps.size(); ++i) {
    ASSERT_EQ(base->log.steps[i].start, null->log.steps[i].start) << i;
    ASSERT_EQ(base->log.steps[i].duration, null->log.steps[i].duration) << i;
    ASSERT_EQ(base->log.steps[i].num_seqs, null->log.steps[i].num_seqs) << i;
    ASSERT_EQ(null->log.steps[i].perturbation_ns, 0);
  }
  EXPECT_EQ(base->report.virtual_end_ns, null->report.virtual_end_ns);
  EXPECT_EQ(base->engine->perturber(), nullptr);
}

TEST(PerturbedSimulation, ALeakMakesLateStepsSlowerByTheConfiguredAmount) {
  const auto w = steady_workload(4, 3000, 20.0);  // about 150 s of arrivals
  const auto sim = simulate(w, "leak:per_min=10%");
  const Nanos origin = sim->log.steps.front().start;
  std::size_t checked = 0;
  for (const auto& st : sim->log.steps) {
    // Every step costs 10 ms; the leak adds 10 ms * 10% per minute since the first step.
    const double t_min = nanos_to_s(st.start - origin) / 60.0;
    ASSERT_NEAR(static_cast<double>(st.duration), 10e6 * (1.0 + 0.1 * t_min), 1.0) << st.index;
    ASSERT_EQ(st.perturbation_ns, st.duration - 10 * kMs);
    checked += t_min > 2.0;
  }
  EXPECT_GT(checked, 100u);  // steps more than two minutes in: at least 20% slower
  EXPECT_GT(sim->log.steps.back().duration, 12 * kMs);
  const auto j = sim->engine->perturber()->to_json();
  EXPECT_EQ(j[0]["injected"]["steps"], sim->log.steps.size() - 1);  // all but the first (t = 0)
  EXPECT_EQ(j[0]["injected"]["steps_seen"], sim->log.steps.size());
}

TEST(PerturbedSimulation, WarmupAndStealLengthenTheirSteps) {
  const auto w = steady_workload(5, 1500, 20.0);
  const auto sim = simulate(w, "warmup:factor=3,duration_s=20;steal:share=1,period_s=30,on_s=10,offset_s=40");
  const Nanos origin = sim->log.steps.front().start;
  EXPECT_EQ(sim->log.steps.front().duration, 30 * kMs);
  std::size_t stolen = 0;
  for (const auto& st : sim->log.steps) {
    const double t = nanos_to_s(st.start - origin);
    const double warm = t < 20.0 ? 1.0 + 2.0 * (1.0 - t / 20.0) : 1.0;
    const bool on = t >= 40.0 && std::fmod(t - 40.0, 30.0) < 10.0;
    ASSERT_NEAR(static_cast<double>(st.duration), 10e6 * warm * (on ? 2.0 : 1.0), 1.0) << st.index;
    ASSERT_EQ(st.stolen_ns, on ? 10 * kMs : 0) << st.index;
    stolen += on;
  }
  EXPECT_GT(stolen, 100u);
}

TEST(PerturbedSimulation, RecompileSpikesOnlyOnTheFirstStepOfEachShape) {
  const auto w = steady_workload(6, 500, 30.0);
  const auto sim = simulate(w, "recompile:ms=80");
  std::set<std::uint32_t> seen;
  std::size_t spikes = 0;
  for (const auto& st : sim->log.steps) {
    const bool first = seen.insert(shape_of(st.num_seqs, st.prefill_tokens + st.decode_tokens)).second;
    ASSERT_EQ(st.perturbation_ns, first ? 80 * kMs : 0) << st.index;
    spikes += first;
  }
  EXPECT_GT(spikes, 5u);
  EXPECT_LT(spikes, sim->log.steps.size() / 10);
  EXPECT_EQ(sim->engine->perturber()->to_json()[0]["injected"]["steps"], spikes);
}

TEST(PerturbedSimulation, BatchCapCapsTheBatchAndKvShrinksTheCache) {
  const auto w = steady_workload(7, 600, 200.0);  // overload: batches fill up
  EngineSettings s;
  s.num_gpu_blocks_override = 4000;
  const auto sim = simulate(w, "batch_cap:max_num_seqs=6;kv:fraction=0.25", 10.0, 1, s);
  std::uint32_t largest = 0;
  for (const auto& st : sim->log.steps) largest = std::max(largest, st.num_seqs);
  EXPECT_EQ(largest, 6u);
  EXPECT_EQ(sim->eff.num_gpu_blocks, 1000u);
  EXPECT_EQ(sim->eff.unperturbed_num_gpu_blocks, 4000u);
  ASSERT_EQ(sim->eff.notes.size(), 2u);
  EXPECT_EQ(sim->eff.notes[0], "perturbation batch_cap: max_num_seqs 6 (was 256)");
  EXPECT_EQ(sim->eff.notes[1], "perturbation kv: 1000 of 4000 KV blocks (fraction 0.25)");
  const auto j = sim->engine->perturber()->to_json();
  EXPECT_EQ(j[0]["injected"]["baseline_max_num_seqs"], 256);
  EXPECT_GT(j[0]["injected"]["steps_at_cap"].get<std::uint64_t>(), sim->log.steps.size() / 2);
  EXPECT_EQ(j[1]["injected"]["num_gpu_blocks"], 1000);
  EXPECT_EQ(j[1]["injected"]["baseline_num_gpu_blocks"], 4000);
  EXPECT_EQ(simulate(w, "", 10.0, 1, s)->eff.num_gpu_blocks, 4000u);
  s.unlimited_kv = true;
  s.perturbations = parse_perturbation_spec("kv:fraction=0.5");
  EXPECT_THROW(resolve_engine(s, Catalog::builtin()), UsageError);
}

TEST(PerturbedSimulation, RequestTailHoldsRequestsBeforeTheQueueAndKeepsTheirArrival) {
  const auto w = steady_workload(8, 2000, 5.0);  // light load: TTFT is about one step without a hold
  const auto base = simulate(w, "");
  const auto held = simulate(w, "tail:target=requests,fraction=0.1,dist=pareto,scale_ms=200,shape=2");
  ASSERT_EQ(base->log.finished.size(), 2000u);
  ASSERT_EQ(held->log.finished.size(), 2000u);
  int slower = 0;
  for (const auto& req : w.requests) {
    const auto& a = base->log.finished.at(req.id);
    const auto& b = held->log.finished.at(req.id);
    EXPECT_EQ(b.arrival, req.arrival_ns);  // the arrival is kept: the hold shows in TTFT and queue time
    // A hold is at least scale_ms (200 ms); the step boundaries either side may take back a step or two.
    slower += (b.first_token - b.arrival) - (a.first_token - a.arrival) >= 150 * kMs;
  }
  const auto j = held->engine->perturber()->to_json();
  const int injected = j[0]["injected"]["requests"].get<int>();
  // Binomial(2000, 0.1): mean 200, sd 13.4.
  EXPECT_GT(injected, 200 - 67);
  EXPECT_LT(injected, 200 + 67);
  EXPECT_EQ(slower, injected);  // the held requests, and only they, waited longer
  EXPECT_EQ(j[0]["injected"]["requests_seen"], 2000);
}

TEST(PerturbedSimulation, TheSeedReproducesTheStepsAndNeverMovesTheWorkload) {
  const auto w = steady_workload(9, 800, 20.0);
  const char* spec = "tail:fraction=0.05,scale_ms=5,shape=1.2;tail:target=requests,fraction=0.05";
  const auto a = simulate(w, spec, 10.0, 11);
  const auto b = simulate(w, spec, 10.0, 11);
  const auto c = simulate(w, spec, 10.0, 12);
  ASSERT_EQ(a->log.steps.size(), b->log.steps.size());
  for (std::size_t i = 0; i < a->log.steps.size(); ++i) {
    ASSERT_EQ(a->log.steps[i].start, b->log.steps[i].start);
    ASSERT_EQ(a->log.steps[i].duration, b->log.steps[i].duration);
  }
  EXPECT_NE(a->report.virtual_end_ns, c->report.virtual_end_ns);
  // The same requests (arrivals, lengths) whatever the perturbation: the
  // workload is made before and apart from it.
  for (const auto& [id, f] : a->log.finished) {
    EXPECT_EQ(f.arrival, c->log.finished.at(id).arrival);
    EXPECT_EQ(f.prompt_tokens, c->log.finished.at(id).prompt_tokens);
    EXPECT_EQ(f.output_tokens, c->log.finished.at(id).output_tokens);
  }
}

}  // namespace
}  // namespace tokenscope::engine
