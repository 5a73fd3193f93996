#include "analyze/checklist.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <unistd.h>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "analyze/attribution.h"
#include "analyze/checklist_items.h"
#include "analyze/checklist_util.h"
#include "analyze/run_data.h"

namespace tokenscope::analyze {
namespace {

namespace fs = std::filesystem;

// A run of requests built in memory: one every `gap` ms, with the TTFT and
// E2E given.
struct Builder {
  RunData run;
  Builder(const std::string& name) {
    run.name = name;
    run.requests.class_names = {"default"};
    run.requests.tenant_names = {"default"};
  }
  void add(Nanos t_send, double ttft_ms, double e2e_ms, int output_tokens = 50, std::uint16_t cls = 0,
           int prompt = 1000, int cached = -1, Outcome outcome = Outcome::kOk) {
    RequestArrays& a = run.requests;
    a.t_sched.push_back(t_send);
    a.t_dispatch.push_back(-1);
    a.t_send.push_back(t_send);
    a.t_first_token.push_back(t_send + static_cast<Nanos>(ttft_ms * kNanosPerMilli));
    a.t_last_token.push_back(t_send + static_cast<Nanos>(e2e_ms * kNanosPerMilli));
    a.t_close.push_back(t_send + static_cast<Nanos>(e2e_ms * kNanosPerMilli));
    a.output_tokens.push_back(output_tokens);
    a.prompt_tokens.push_back(prompt);
    a.cached_tokens.push_back(cached);
    a.itl_mean_ms.push_back(static_cast<float>((e2e_ms - ttft_ms) / (output_tokens - 1)));
    a.itl_max_ms.push_back(a.itl_mean_ms.back());
    a.outcome.push_back(outcome);
    a.warmup.push_back(0);
    a.tenant.push_back(0);
    a.task_class.push_back(cls);
  }
};

// n requests with lognormal TTFT and TPOT; `tail_fraction` of them get
// `tail_ms` more of each.
RunData lognormal_run(const std::string& name, std::uint64_t seed, int n, double tail_fraction = 0,
                      double tail_ms = 0) {
  Builder b(name);
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> ttft(std::log(200.0), 0.5), tpot(std::log(20.0), 0.3);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < n; ++i) {
    double f = ttft(rng), t = tpot(rng);
    if (u(rng) < tail_fraction) f += tail_ms, t += tail_ms / 10;
    b.add(i * 50 * kNanosPerMilli, f, f + 49 * t);
  }
  return b.run;
}

const ItemResult& item(const CheckResult& r, const std::string& id) {
  for (const auto& it : r.items)
    if (it.id == id) return it;
  throw std::runtime_error("no item " + id);
}

const Finding* finding(const ItemResult& it, const std::string& metric) {
  for (const auto& f : it.findings)
    if (f.metric == metric) return &f;
  return nullptr;
}

TEST(Checklist, TwoRunsFromOneDistributionDoNotRegress) {
  const RunData base = lognormal_run("base", 1, 3000), cand = lognormal_run("cand", 2, 3000);
  const CheckResult r = run_checklist(&base, cand, Thresholds{});
  EXPECT_FALSE(r.single);
  EXPECT_EQ(r.items.size(), 13u);
  const ItemResult& tail = item(r, "tail");
  EXPECT_NE(tail.verdict, Verdict::kRegressed);
  EXPECT_NE(tail.verdict, Verdict::kNoData);
  EXPECT_NE(r.overall, Verdict::kRegressed) << to_json(r).dump(1);
}

TEST(Checklist, AnInjectedTailIsATailShift) {
  const RunData base = lognormal_run("base", 1, 3000), cand = lognormal_run("cand", 2, 3000, 0.03, 2000);
  const CheckResult r = run_checklist(&base, cand, Thresholds{});
  const ItemResult& tail = item(r, "tail");
  EXPECT_EQ(tail.verdict, Verdict::kRegressed);
  ASSERT_TRUE(tail.decisive);
  const Finding& f = tail.findings[*tail.decisive];
  EXPECT_THAT(f.metric, ::testing::StartsWith("p99 "));
  EXPECT_GT(*f.ci_low, 0.10);  // significant beyond the tolerance
  // The median holds.
  EXPECT_TRUE(tail.evidence["TTFT"]["median_holds"].get<bool>());
  EXPECT_EQ(r.overall, Verdict::kRegressed);
  EXPECT_EQ(to_json(r)["exit_code"], 1);
}

// Reasoning models: a longer think time moves the first answer token (TTFO)
// and not the first token; item 4 reads TTFO when both runs have reasoning,
// and only then.
// Stalls of the server's steps (a few requests each wait once, 400 ms
// between two tokens) barely move TPOT's tail but are the tail of the
// largest gap per request: item 4 reads ITL that way.
TEST(Checklist, StallsAreAnItlTailShift) {
  RunData base = lognormal_run("base", 1, 4000), same = lognormal_run("same", 2, 4000);
  RunData cand = lognormal_run("cand", 3, 4000);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0, 1);
  for (auto& v : cand.requests.itl_max_ms)
    if (u(rng) < 0.03) v += 400.0F;
  Thresholds t;
  const auto itl = [](const CheckResult& r) {
    return finding(item(r, "tail"), "p99 ITL (largest gap per request)");
  };
  const CheckResult null_pair = run_checklist(&base, same, t);
  ASSERT_NE(itl(null_pair), nullptr);
  EXPECT_NE(itl(null_pair)->verdict, Verdict::kRegressed);
  const CheckResult stalled = run_checklist(&base, cand, t);
  EXPECT_EQ(itl(stalled)->verdict, Verdict::kRegressed);
  EXPECT_EQ(item(stalled, "tail").verdict, Verdict::kRegressed);
}

TEST(Checklist, ALongerThinkTimeIsATtfoShift) {
  RunData base = lognormal_run("base", 1, 3000), cand = lognormal_run("cand", 2, 3000);
  const auto think = [](RunData& run, std::uint64_t seed, double tail_fraction) {
    auto& a = run.requests;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0, 1);
    for (std::size_t i = 0; i < a.size(); ++i) {
      // The answer begins 20 tokens after the first token, plus 2 s for a few.
      const double ms =
          (a.t_last_token[i] - a.t_first_token[i]) / 1e6 * 20 / 49 + (u(rng) < tail_fraction ? 2000 : 0);
      a.t_first_answer.push_back(a.t_first_token[i] + static_cast<Nanos>(ms * kNanosPerMilli));
      a.t_last_token[i] = std::max(a.t_last_token[i], a.t_first_answer[i]);
      a.reasoning_tokens.push_back(20);
    }
  };
  const CheckResult without = run_checklist(&base, cand, Thresholds{});
  for (const Finding& f : item(without, "tail").findings) EXPECT_EQ(f.metric.find("TTFO"), std::string::npos);
  think(base, 3, 0);
  think(cand, 4, 0.03);
  const CheckResult r = run_checklist(&base, cand, Thresholds{});
  const ItemResult& tail = item(r, "tail");
  bool ttfo = false, ttft = false;
  for (const Finding& f : tail.findings) {
    if (f.metric == "p99 TTFO") ttfo = f.verdict == Verdict::kRegressed;
    if (f.metric == "p99 TTFT") ttft = f.verdict == Verdict::kRegressed;
  }
  EXPECT_TRUE(ttfo) << to_json(r).dump(1);
  EXPECT_FALSE(ttft);
}

TEST(Checklist, ASmallSignificantChangeWithinTheToleranceIsNotARegression) {
  // Every TTFT and E2E 3% longer: far beyond noise at this size, within the 10% tolerance.
  RunData base = lognormal_run("base", 1, 20000), cand = lognormal_run("cand", 1, 20000);
  auto& a = cand.requests;
  for (std::size_t i = 0; i < a.size(); ++i) {
    a.t_first_token[i] = a.t_send[i] + static_cast<Nanos>((a.t_first_token[i] - a.t_send[i]) * 1.03);
    a.t_last_token[i] = a.t_send[i] + static_cast<Nanos>((a.t_last_token[i] - a.t_send[i]) * 1.03);
  }
  const CheckResult r = run_checklist(&base, cand, Thresholds{});
  const ItemResult& tail = item(r, "tail");
  EXPECT_NE(tail.verdict, Verdict::kRegressed);
  // At p99 the interval is narrow enough to decide: within the band.
  for (const Finding& f : tail.findings)
    if (f.metric.starts_with("p99 ")) {
      EXPECT_EQ(f.verdict, Verdict::kPass) << f.metric;
    }
  Thresholds strict;
  strict.tail_tolerance = 0.01;
  strict.family_alpha = 0;  // the tolerance band alone: p99 E2E's one-sided p is about 0.02 here
  {
    const auto rs = run_checklist(&base, cand, strict);
    EXPECT_EQ(item(rs, "tail").verdict, Verdict::kRegressed) << to_json(rs)["items"][4].dump(1);
  }
}

TEST(Checklist, TooFewRequestsIsNoData) {
  const RunData base = lognormal_run("base", 1, 10), cand = lognormal_run("cand", 2, 10);
  const CheckResult r = run_checklist(&base, cand, Thresholds{});
  for (const auto& it : r.items) EXPECT_EQ(it.verdict, Verdict::kNoData) << it.id;
  EXPECT_EQ(r.overall, Verdict::kNoData);
  EXPECT_EQ(to_json(r)["exit_code"], 0);
}

TEST(Checklist, OneRunRunsTheHealthItemsOnly) {
  const RunData run = lognormal_run("run", 1, 2000);
  const CheckResult r = run_checklist(nullptr, run, Thresholds{});
  EXPECT_TRUE(r.single);
  std::vector<std::string> ids;
  for (const auto& it : r.items) ids.push_back(it.id);
  EXPECT_THAT(ids, ::testing::ElementsAre("slo", "tail", "lifecycle", "locality", "batching", "contention"));
  // A stationary run: its second half's tail is its first half's.
  EXPECT_NE(item(r, "tail").verdict, Verdict::kRegressed);
  EXPECT_EQ(item(r, "slo").verdict, Verdict::kNoData);  // no SLO anywhere
}

TEST(Checklist, SloOfOneRunByEarlyStopping) {
  const RunData run = lognormal_run("run", 1, 2000);  // TTFT lognormal, median 200 ms, p99 about 640 ms
  Thresholds t;
  t.slos[""] = Slo{1500.0, std::nullopt, std::nullopt, 99.0, std::nullopt};
  EXPECT_EQ(item(run_checklist(nullptr, run, t), "slo").verdict, Verdict::kPass);
  t.slos[""] = Slo{300.0, std::nullopt, std::nullopt, 99.0, std::nullopt};
  EXPECT_EQ(item(run_checklist(nullptr, run, t), "slo").verdict, Verdict::kRegressed);
  // Right at the p99: the data cannot decide, and the finding says how many more requests would.
  RunData small = lognormal_run("small", 1, 100);
  t.slos[""] = Slo{650.0, std::nullopt, std::nullopt, 99.0, std::nullopt};
  const CheckResult small_result = run_checklist(nullptr, small, t);
  const ItemResult& slo = item(small_result, "slo");
  EXPECT_EQ(slo.verdict, Verdict::kInconclusive);
  ASSERT_TRUE(slo.findings[0].more_requests);
  EXPECT_GT(*slo.findings[0].more_requests, 0u);
}

TEST(Checklist, SloAttainmentFallingIsARegression) {
  const RunData base = lognormal_run("base", 1, 3000), cand = lognormal_run("cand", 2, 3000, 0.10, 2000);
  Thresholds t;
  t.slos[""] = Slo{1500.0, std::nullopt, std::nullopt, 90.0, std::nullopt};
  const CheckResult result = run_checklist(&base, cand, t);
  const ItemResult& slo = item(result, "slo");
  EXPECT_EQ(slo.verdict, Verdict::kRegressed);
  const auto it = std::find_if(slo.findings.begin(), slo.findings.end(),
                               [](const Finding& f) { return f.metric == "default attainment"; });
  ASSERT_NE(it, slo.findings.end());
  EXPECT_EQ(it->verdict, Verdict::kRegressed);
  EXPECT_LT(*it->change, -0.05);
}

// A run of agentic tasks in memory: n tasks of class `cls`, one every 100
// ms, lognormal completion times (median 2 s); `fail` of them failed,
// `tail` of them `tail_ms` longer; the first `warmup` warm-up.
RunData task_run(const std::string& name, std::uint64_t seed, int n, double fail = 0, double tail = 0,
                 double tail_ms = 0, int warmup = 0) {
  RunData run = lognormal_run(name, seed, 200);  // requests beside (the items need none of them)
  std::mt19937_64 rng(seed * 7 + 1);
  std::lognormal_distribution<double> ms(std::log(2000.0), 0.3);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < n; ++i) {
    rundir::TaskRecord t;
    t.id = static_cast<std::uint64_t>(i);
    t.task_class = "research";
    t.t_start = i * 100 * kNanosPerMilli;
    double d = ms(rng);
    if (u(rng) < tail) d += tail_ms;
    t.t_end = t.t_start + static_cast<Nanos>(d * kNanosPerMilli);
    t.outcome = u(rng) < fail ? "failed" : "ok";
    t.warmup = i < warmup;
    run.tasks.push_back(std::move(t));
  }
  return run;
}

// Task SLOs recorded by bench (run.json tasks.by_class.CLASS.slo): the
// completion time at its percentile, failed tasks counting as over, and the
// pass rate with its exact interval.
TEST(Checklist, TaskSlosOfOneRun) {
  RunData run = task_run("run", 1, 400, 0.02);
  run.run_json = {
      {"tasks",
       {{"by_class",
         {{"research", {{"slo", {{"percentile", 90}, {"task_ms", 6000}, {"pass_rate", 0.9}}}}}}}}}};
  Thresholds t;
  const ItemResult slo = item(run_checklist(nullptr, run, t), "slo");
  const Finding* c = finding(slo, "research p90 task completion");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->verdict, Verdict::kPass);  // p90 of lognormal(2 s, 0.3) is about 2.9 s
  EXPECT_NEAR(*c->value, 2000 * std::exp(1.2816 * 0.3), 300);
  const Finding* pr = finding(slo, "research task pass rate");
  ASSERT_NE(pr, nullptr);
  EXPECT_EQ(pr->verdict, Verdict::kPass);
  EXPECT_LT(*pr->ci_low, *pr->value);
  EXPECT_GT(*pr->ci_high, *pr->value);
  // A pass rate over what the run holds is a regression; one within its interval is inconclusive.
  RunData failing = task_run("failing", 2, 400, 0.3);
  failing.run_json = {{"tasks", {{"by_class", {{"research", {{"slo", {{"pass_rate", 0.9}}}}}}}}}};
  EXPECT_EQ(finding(item(run_checklist(nullptr, failing, t), "slo"), "research task pass rate")->verdict,
            Verdict::kRegressed);
  RunData few = task_run("few", 3, 20, 0.1);
  few.run_json = {{"tasks", {{"by_class", {{"research", {{"slo", {{"pass_rate", 0.9}}}}}}}}}};
  EXPECT_EQ(finding(item(run_checklist(nullptr, few, t), "slo"), "research task pass rate")->verdict,
            Verdict::kInconclusive);
  // A completion target under most tasks' times: regressed.
  run.run_json["tasks"]["by_class"]["research"]["slo"] = {{"percentile", 90}, {"task_ms", 1000}};
  EXPECT_EQ(finding(item(run_checklist(nullptr, run, t), "slo"), "research p90 task completion")->verdict,
            Verdict::kRegressed);
}

// Two runs: a falling task pass rate regresses item 2; a task completion
// tail regresses item 4 while the requests' latencies hold; warm-up tasks
// are left out.
TEST(Checklist, TaskPassRateAndCompletionTailBetweenTwoRuns) {
  const RunData base = task_run("base", 1, 3000, 0.01, 0, 0, 50),
                same = task_run("same", 2, 3000, 0.01, 0, 0, 50);
  const RunData worse = task_run("worse", 3, 3000, 0.10, 0.05, 8000, 50);
  Thresholds t;
  const CheckResult r0 = run_checklist(&base, same, t);
  const Finding* p0 = finding(item(r0, "slo"), "research task pass rate");
  ASSERT_NE(p0, nullptr);
  EXPECT_NE(p0->verdict, Verdict::kRegressed);
  const Finding* tail0 = finding(item(r0, "tail"), "p99 task completion");
  ASSERT_NE(tail0, nullptr);
  EXPECT_NE(tail0->verdict, Verdict::kRegressed);
  const CheckResult r1 = run_checklist(&base, worse, t);
  EXPECT_EQ(finding(item(r1, "slo"), "research task pass rate")->verdict, Verdict::kRegressed);
  EXPECT_EQ(finding(item(r1, "tail"), "p99 task completion")->verdict, Verdict::kRegressed);
  EXPECT_NE(finding(item(r1, "tail"), "p99 TTFT")->verdict, Verdict::kRegressed);  // the requests are alike
  // Warm-up tasks are not counted: the base's 50 of 3000.
  EXPECT_NE(finding(item(r1, "slo"), "research task pass rate")->note.find("of 2950"), std::string::npos)
      << finding(item(r1, "slo"), "research task pass rate")->note;
}

TEST(Checklist, PrefixHitRateFallingIsALocalityRegression) {
  Builder b("base"), c("cand");
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> cached(600, 1000);
  for (int i = 0; i < 1000; ++i) {
    b.add(i * 10 * kNanosPerMilli, 100, 1000, 50, 0, 1000, cached(rng));
    c.add(i * 10 * kNanosPerMilli, 100, 1000, 50, 0, 1000, cached(rng) / 2);
  }
  const CheckResult r = run_checklist(&b.run, c.run, Thresholds{});
  const ItemResult& loc = item(r, "locality");
  EXPECT_EQ(loc.verdict, Verdict::kRegressed);
  EXPECT_NEAR(*loc.findings[0].base, 0.8, 0.02);
  EXPECT_NEAR(*loc.findings[0].value, 0.4, 0.02);
  // Without cached_tokens: no data, never a pass.
  const RunData plain = lognormal_run("plain", 1, 1000);
  EXPECT_EQ(item(run_checklist(&plain, plain, Thresholds{}), "locality").verdict, Verdict::kNoData);
}

TEST(Checklist, AShorterReuseScaleFromBenchsLocalityFit) {
  // bench's kv_locality fit in run.json: the candidate's cache forgets twice
  // as fast (its scale halved, intervals from the bootstrap).
  Builder b("base"), c("cand");
  for (int i = 0; i < 1000; ++i) {
    b.add(i * 10 * kNanosPerMilli, 100, 1000, 50, 0, 1000, 500);
    c.add(i * 10 * kNanosPerMilli, 100, 1000, 50, 0, 1000, 500);
  }
  b.run.run_json["kv_locality"]["fit"] = {
      {"a", 0.9}, {"scale_blocks", 4000.0}, {"scale_blocks_ci95", {3600.0, 4400.0}}};
  c.run.run_json["kv_locality"]["fit"] = {
      {"a", 0.9}, {"scale_blocks", 2000.0}, {"scale_blocks_ci95", {1800.0, 2200.0}}};
  const CheckResult r = run_checklist(&b.run, c.run, Thresholds{});
  const ItemResult& loc = item(r, "locality");
  EXPECT_EQ(loc.verdict, Verdict::kRegressed) << to_json(r)["items"][7].dump();
  ASSERT_EQ(loc.findings.size(), 2u);
  EXPECT_NEAR(*loc.findings[1].change, -0.5, 1e-12);
  EXPECT_EQ(loc.findings[0].verdict, Verdict::kPass);  // the hit rate itself held
  EXPECT_TRUE(loc.evidence.contains("candidate_reuse_fit"));
}

TEST(Checklist, AClassSlowedByAnotherIsCoupling) {
  // Two classes alternating in bursts: "chat" requests sent while a "long"
  // one is in flight are slower in the candidate only.
  const auto make = [](const std::string& name, double coupled_extra_ms) {
    Builder b(name);
    b.run.requests.class_names = {"chat", "long"};
    std::mt19937_64 rng(name == "base" ? 1 : 2);
    std::lognormal_distribution<double> ttft(std::log(100.0), 0.3);
    Nanos t = 0;
    for (int round = 0; round < 200; ++round) {
      b.add(t, 500, 5000, 50, 1);  // a long request, in flight for 5 s
      for (int k = 0; k < 3; ++k)
        b.add(t + (k + 1) * 100 * kNanosPerMilli, ttft(rng) + coupled_extra_ms, 2000, 50, 0);
      for (int k = 0; k < 3; ++k)
        b.add(t + 6000 * kNanosPerMilli + k * 100 * kNanosPerMilli, ttft(rng), 2000, 50, 0);
      t += 10000 * kNanosPerMilli;
    }
    return b.run;
  };
  const RunData base = make("base", 0), cand = make("cand", 150);
  const CheckResult all = run_checklist(&base, cand, Thresholds{});
  const ItemResult& c = item(all, "coupling");
  ASSERT_EQ(c.verdict, Verdict::kRegressed) << to_json(all)["items"][3].dump();
  EXPECT_THAT(c.findings[*c.decisive].metric, ::testing::HasSubstr("chat TTFT"));
  const CheckResult same_result = run_checklist(&base, make("base", 0), Thresholds{});
  const ItemResult& same = item(same_result, "coupling");
  EXPECT_EQ(same.verdict, Verdict::kPass);
}

// With run.json "coupling" (bench/sim --coupling: each class run alone),
// item 3 reads kappa from it: one run's kappa against 1, two runs' kappas
// against each other (the log-ratio's interval from both intervals).
TEST(Checklist, CouplingMeasuredAloneIsReadFromRunJson) {
  const auto coupled = [](double kappa, double lo, double hi) {
    Builder b("run");
    for (int i = 0; i < 60; ++i) b.add(i * kNanosPerMilli * 100, 100, 1000, 10, 0);
    nlohmann::json k = {{"kappa", kappa}, {"ci", {lo, hi}}, {"mix", 100 * kappa}, {"alone", 100.0}};
    b.run.run_json["coupling"] = {{"method", "alone"},
                                  {"classes",
                                   {{"chat",
                                     {{"ttft_ms", {{"p50", k}, {"p99", k}}},
                                      {"tpot_ms", {{"p50", k}, {"p99", k}}},
                                      {"e2e_ms", {{"p50", nullptr}, {"p99", nullptr}}}}}}}};
    return b.run;
  };
  const RunData slowed = coupled(1.5, 1.4, 1.6), free = coupled(1.01, 0.97, 1.05);
  const CheckResult one = run_checklist(nullptr, slowed, Thresholds{});
  const ItemResult& c = item(one, "coupling");
  ASSERT_EQ(c.findings.size(), 2u) << to_json(one)["items"][2].dump();
  EXPECT_EQ(c.findings[0].metric, "kappa chat TTFT p50 (alone)");
  EXPECT_DOUBLE_EQ(*c.findings[0].base, 1.0);
  EXPECT_NEAR(*c.findings[0].change, 0.5, 1e-12);
  EXPECT_EQ(c.verdict, Verdict::kRegressed);
  EXPECT_EQ(item(run_checklist(nullptr, free, Thresholds{}), "coupling").verdict, Verdict::kPass);
  // Two runs: the candidate's 1.5 against the base's 1.01.
  const CheckResult two = run_checklist(&free, slowed, Thresholds{});
  const ItemResult& d = item(two, "coupling");
  EXPECT_EQ(d.verdict, Verdict::kRegressed);
  EXPECT_NEAR(*d.findings[0].change, 1.5 / 1.01 - 1, 1e-12);
  EXPECT_EQ(item(run_checklist(&free, free, Thresholds{}), "coupling").verdict, Verdict::kPass);
}

TEST(Checklist, ALeakIsALifecycleRegressionWithItsPhases) {
  // The candidate's TPOT grows by half over the run (a leak); the base's does not.
  const auto make = [](const std::string& name, std::uint64_t seed, double growth) {
    Builder b(name);
    std::mt19937_64 rng(seed);
    std::lognormal_distribution<double> tpot(std::log(20.0), 0.2);
    const int n = 6000;
    for (int i = 0; i < n; ++i) {
      const double t = tpot(rng) * (1 + growth * i / n);
      b.add(static_cast<Nanos>(i) * 50 * kNanosPerMilli, 100, 100 + 49 * t);
    }
    return b.run;
  };
  const RunData base = make("base", 1, 0), cand = make("cand", 2, 0.5);
  const CheckResult r = run_checklist(&base, cand, Thresholds{});
  const ItemResult& lc = item(r, "lifecycle");
  EXPECT_EQ(lc.verdict, Verdict::kRegressed) << to_json(r)["items"][5].dump();
  EXPECT_EQ(lc.findings[*lc.decisive].metric, "TPOT growth over the steady phase");
  EXPECT_NEAR(*lc.findings[*lc.decisive].change, 0.4, 0.15);  // relative to the phase's mean
  ASSERT_FALSE(r.cand_phases.empty());
  EXPECT_EQ(r.cand_phases.back()["phase"], "drain");
  // One run judged alone: the leak is its own regression, the stationary base is not.
  const CheckResult one = run_checklist(nullptr, cand, Thresholds{});
  EXPECT_EQ(item(one, "lifecycle").verdict, Verdict::kRegressed);
  const CheckResult flat = run_checklist(nullptr, base, Thresholds{});
  EXPECT_EQ(item(flat, "lifecycle").verdict, Verdict::kPass);
}

// A warm-up: the candidate's first fifth decodes three times slower. Item 5
// names the series that moved, its step and when, not only a length.
TEST(Checklist, AWarmUpIsNamedByTheSeriesThatMovedAndWhen) {
  const auto make = [](const std::string& name, std::uint64_t seed, bool warm) {
    Builder b(name);
    std::mt19937_64 rng(seed);
    std::lognormal_distribution<double> tpot(std::log(20.0), 0.1);
    const int n = 6000;
    for (int i = 0; i < n; ++i) {
      const double t = tpot(rng) * (warm && i < n / 5 ? 3.0 : 1.0);
      b.add(static_cast<Nanos>(i) * 50 * kNanosPerMilli, 100, 100 + 49 * t);
    }
    return b.run;
  };
  const RunData base = make("base", 1, false), cand = make("cand", 2, true);
  const CheckResult r = run_checklist(&base, cand, Thresholds{});
  const ItemResult& lc = item(r, "lifecycle");
  const Finding* w = finding(lc, "warm-up length");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->verdict, Verdict::kRegressed) << w->note;
  EXPECT_NEAR(*w->change, 60.0, 6.0);  // the first fifth of 300 s
  EXPECT_THAT(w->note, ::testing::HasSubstr("candidate's warm-up: median TPOT fell "));
  EXPECT_THAT(w->note, ::testing::HasSubstr(" ms at "));
  // The base's own ramp: its first window, before the first requests complete.
  EXPECT_THAT(w->note, ::testing::HasSubstr("base's: output tokens/s rose "));
}

// A cause that is only 0 or 1 per window (a preemption in some seconds,
// none in others) gets a note: its effect is a difference, not a slope.
TEST(Attribution, ACauseOfOnlyZeroAndOneIsSaidToBeADifference) {
  RunData run;
  run.name = "steps";
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  for (std::int64_t sec = 0; sec < 200; ++sec) {
    StepWindow w;
    w.steps = 100;
    w.seqs = 100 * (8 + 8 * u(rng));
    w.busy_ns = 100 * (20e6 + 1e6 * w.seqs / 100);
    w.decode_tokens = w.seqs;
    w.preemptions = u(rng) < 0.3 ? 1 : 0;
    w.query_tokens = 1000 + 500 * u(rng);
    w.hit_tokens = 500;
    run.steps.stats.windows[sec] = w;
  }
  run.steps.stats.steps_with_duration = 20000;
  run.steps.present = true;
  const auto a = attribute(run);
  ASSERT_TRUE(a);
  std::string notes;
  for (const auto& n : a->notes) notes += n + "\n";
  EXPECT_THAT(notes, ::testing::HasSubstr("preemptions: only 0 or 1 in this run's windows"));
  EXPECT_THAT(notes, ::testing::Not(::testing::HasSubstr("batch size: only 0 or 1")));
}

// The hidden queue: ten requests in flight at every moment of the steady
// part, the server's gauges showing 2 running and 3 waiting: 5 it holds
// where no gauge sees them (llama-server's HTTP queue).
TEST(Checklist, TheHiddenQueueIsInFlightLessRunningAndWaiting) {
  Builder b("run");
  for (int i = 0; i < 100; ++i) b.add(static_cast<Nanos>(i) * 1000 * kNanosPerMilli, 100, 10000);
  SampledSeries running{"server", "canonical", "requests_running", "", {}, {}};
  SampledSeries waiting{"server", "canonical", "requests_waiting", "", {}, {}};
  for (int k = 20; k < 80; ++k) {
    const Nanos t = k * 1000 * kNanosPerMilli + 500 * kNanosPerMilli;
    running.t.push_back(t), running.v.push_back(2);
    waiting.t.push_back(t), waiting.v.push_back(3);
  }
  b.run.series = {running, waiting};
  const auto h = detail::hidden_queue(b.run);
  EXPECT_EQ(h.samples, 60u);
  EXPECT_DOUBLE_EQ(h.mean, 5.0);
  EXPECT_DOUBLE_EQ(h.max, 5.0);
  EXPECT_DOUBLE_EQ(h.in_flight_max, 10.0);
  const CheckResult r = run_checklist(nullptr, b.run, Thresholds{});
  EXPECT_EQ(item(r, "batching").evidence.at("hidden_queue").at("candidate").at("mean"), 5.0);
}

TEST(Checklist, QueueingLeakingIntoTtftIsALatencyModelRegression) {
  // Bursts of 8 requests: in the candidate each request waits 40 ms more per
  // request ahead of it (a server that serves its queue more slowly).
  const auto make = [](const std::string& name, double per_queued_ms) {
    Builder b(name);
    std::mt19937_64 rng(name == "base" ? 1 : 2);
    std::normal_distribution<double> noise(0, 5);
    std::uniform_int_distribution<int> prompt(100, 2000);
    for (int burst = 0; burst < 200; ++burst)
      for (int k = 0; k < 8; ++k) {
        const int p = prompt(rng);
        const double ttft = 20 + 0.05 * p + (10 + per_queued_ms) * k + noise(rng);
        b.add(static_cast<Nanos>(burst) * 5000 * kNanosPerMilli + k * kNanosPerMilli, ttft, ttft + 500, 50, 0,
              p);
      }
    return b.run;
  };
  const RunData base = make("base", 0), cand = make("cand", 40), again = make("again", 0);
  const CheckResult r = run_checklist(&base, cand, Thresholds{});
  const ItemResult& lm = item(r, "latency-model");
  EXPECT_EQ(lm.verdict, Verdict::kRegressed) << to_json(r)["items"][1].dump();
  EXPECT_EQ(lm.findings[0].metric, "TTFT per request queued ahead");
  EXPECT_NEAR(*lm.findings[0].change, 40, 3);
  EXPECT_NEAR(*lm.findings[0].base, 10, 2);
  EXPECT_EQ(lm.evidence["ttft_model"]["terms"].size(), 3u);
  const CheckResult same = run_checklist(&base, again, Thresholds{});
  EXPECT_EQ(item(same, "latency-model").findings[0].verdict, Verdict::kPass);
}

// nccl-tests all_reduce_perf output with the given bus bandwidth (GB/s) and
// a 1% wobble.
std::string nccl_tests_text(double busbw_gbps, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> wobble(0.99, 1.01);
  std::string s =
      "# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg "
      "iters: 1 "
      "validation: 1 graph: 0\n#\n# Using devices\n";
  for (int r = 0; r < 8; ++r)
    s += "#  Rank  " + std::to_string(r) + " Group  0 Pid   4242 on node01 device  0 [0x18] GPU\n";
  s += "#\n#                                                              out-of-place                       "
       "in-place\n"
       "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
       "algbw   busbw "
       "#wrong\n#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            "
       "(us)  (GB/s)  "
       "(GB/s)\n";
  for (double bytes = 8; bytes <= 134217728; bytes *= 2) {
    const double algbw = busbw_gbps / 1.75;
    const double t = (10 + bytes / (algbw * 1e3)) * wobble(rng);
    const double a = bytes / t / 1e3;
    char line[256];
    std::snprintf(
        line, sizeof line,
        "%12.0f %12.0f     float     sum      -1 %8.2f %7.2f %7.2f      0 %8.2f %7.2f %7.2f      0\n", bytes,
        bytes / 4, t, a, a * 1.75, t, a, a * 1.75);
    s += line;
  }
  return s + "# Out of bounds values : 0 OK\n";
}

TEST(Checklist, SlowerCollectivesAreFoundInTheRunDirectories) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("tokenscope-collectives-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  for (const char* run : {"base", "cand", "same"}) std::filesystem::create_directories(dir / run);
  std::ofstream(dir / "base" / "all_reduce_perf.txt") << nccl_tests_text(150, 1);
  std::ofstream(dir / "cand" / "all_reduce_perf.txt") << nccl_tests_text(100, 2);
  std::ofstream(dir / "same" / "all_reduce_perf.txt") << nccl_tests_text(150, 3);
  RunData base = lognormal_run("base", 1, 100), cand = lognormal_run("cand", 2, 100),
          same = lognormal_run("same", 3, 100);
  base.dir = dir / "base";
  cand.dir = dir / "cand";
  same.dir = dir / "same";
  const CheckResult r = run_checklist(&base, cand, Thresholds{});
  const ItemResult& c = item(r, "collectives");
  ASSERT_EQ(c.verdict, Verdict::kRegressed) << to_json(r)["items"][8].dump();
  EXPECT_EQ(c.findings[0].metric, "all_reduce bandwidth at large messages");
  EXPECT_NEAR(*c.findings[0].change, -1.0 / 3, 0.03);  // 150 -> 100 GB/s
  EXPECT_NEAR(c.evidence["all_reduce"]["base"]["asymptotic_gbps"].get<double>(), 150 / 1.75, 3);
  const CheckResult s = run_checklist(&base, same, Thresholds{});
  EXPECT_EQ(item(s, "collectives").verdict, Verdict::kPass);
  // Given on the command line instead, the same files decide the same way.
  ExtraInputs extra;
  extra.collectives_base = (dir / "base" / "all_reduce_perf.txt").string();
  extra.collectives_cand = (dir / "cand" / "all_reduce_perf.txt").string();
  RunData nowhere_base = base, nowhere_cand = cand;
  nowhere_base.dir.clear();
  nowhere_cand.dir.clear();
  const CheckResult e = run_checklist(&nowhere_base, nowhere_cand, Thresholds{}, extra);
  EXPECT_EQ(item(e, "collectives").verdict, Verdict::kRegressed);
  std::filesystem::remove_all(dir);
}

TEST(Checklist, RecompilationFromFirstShapeTimesOfRequests) {
  // A server without steps: the candidate's first request of each
  // prompt-length bucket takes 400 ms more (a compile on first sight).
  const auto make = [](const std::string& name, double first_extra_ms) {
    Builder b(name);
    std::mt19937_64 rng(name == "base" ? 1 : 2);
    std::lognormal_distribution<double> ttft(std::log(100.0), 0.2);
    std::set<int> seen;
    for (int i = 0; i < 600; ++i) {
      const int prompt = 16 << (i % 10);  // ten buckets, visited in turn
      const bool first = seen.insert(prompt).second;
      const double t = ttft(rng) + (first ? first_extra_ms : 0);
      b.add(static_cast<Nanos>(i) * 100 * kNanosPerMilli, t, t + 500, 50, 0, prompt);
    }
    return b.run;
  };
  const RunData base = make("base", 0), cand = make("cand", 400), same = make("same", 0);
  const CheckResult r = run_checklist(&base, cand, Thresholds{});
  const ItemResult& rc = item(r, "recompile");
  EXPECT_EQ(rc.verdict, Verdict::kRegressed) << to_json(r)["items"][9].dump();
  EXPECT_EQ(rc.evidence["source"], "requests");
  EXPECT_EQ(rc.evidence["candidate_excess"].size(), 10u);
  EXPECT_GT(*rc.findings[0].change, 2.0);  // about 400 / 100 ms
  const CheckResult s = run_checklist(&base, same, Thresholds{});
  EXPECT_NE(item(s, "recompile").verdict, Verdict::kRegressed);
}

TEST(Checklist, RecompilationReadsTheServersPromptTimeWhereItSendsOne) {
  // llama-server's timings: the candidate's first request of each bucket
  // waited 400 ms in a queue (its TTFT) but its prefill took no longer (the
  // server's prompt time): no recompilation. Where the prompt time itself
  // grows, it is one.
  const auto make = [](const std::string& name, double queued_ms, double prefill_extra_ms) {
    Builder b(name);
    std::mt19937_64 rng(name == "base" ? 1 : 2);
    std::lognormal_distribution<double> prefill(std::log(40.0), 0.2);
    std::set<int> seen;
    for (int i = 0; i < 600; ++i) {
      const int prompt = 16 << (i % 10);
      const bool first = seen.insert(prompt).second;
      const double p = prefill(rng) + (first ? prefill_extra_ms : 0);
      const double t = p + 60 + (first ? queued_ms : 0);
      b.add(static_cast<Nanos>(i) * 100 * kNanosPerMilli, t, t + 500, 50, 0, prompt);
      b.run.requests.server_prompt_ms.push_back(static_cast<float>(p));
    }
    return b.run;
  };
  const RunData base = make("base", 0, 0), queued = make("queued", 400, 0),
                compiled = make("compiled", 0, 400);
  const CheckResult q = run_checklist(&base, queued, Thresholds{});
  const ItemResult& rq = item(q, "recompile");
  EXPECT_EQ(rq.evidence["source"], "requests (server prompt time)") << rq.evidence.dump();
  EXPECT_NE(rq.verdict, Verdict::kRegressed) << to_json(q)["items"][9].dump();
  const CheckResult c = run_checklist(&base, compiled, Thresholds{});
  EXPECT_EQ(item(c, "recompile").verdict, Verdict::kRegressed) << to_json(c)["items"][9].dump();
  EXPECT_NE(item(c, "recompile").findings[0].metric.find("server prompt time"), std::string::npos);
}

TEST(Checklist, CheckJsonCarriesEveryItemFindingAndThreshold) {
  const RunData base = lognormal_run("base", 1, 500), cand = lognormal_run("cand", 2, 500, 0.05, 3000);
  const nlohmann::json j = to_json(run_checklist(&base, cand, Thresholds{}));
  EXPECT_EQ(j["mode"], "compare");
  EXPECT_EQ(j["base"], "base");
  EXPECT_EQ(j["items"].size(), 13u);
  EXPECT_EQ(j["items"][0]["id"], "headline");
  EXPECT_EQ(j["items"][4]["id"], "tail");
  EXPECT_FALSE(j["items"][4]["findings"].empty());
  EXPECT_TRUE(j["items"][4]["findings"][0].contains("ci_low"));
  EXPECT_TRUE(j["items"][4]["findings"][0].contains("p_value"));
  EXPECT_GT(j["family"]["size"].get<int>(), 10);
  EXPECT_EQ(j["thresholds"]["tail.tolerance"], 0.10);
  EXPECT_EQ(j["items"][8]["verdict"], "no-data");  // no collectives measured
  EXPECT_THAT(j["items"][8]["summary"].get<std::string>(), ::testing::HasSubstr("no collectives"));
}

// llama-server sends no prompt_tokens_details.cached_tokens, but its
// timings say how many prompt tokens it evaluated (server_prompt_evaluated):
// the rest came from its slot's cache. load_run takes them as the cached
// tokens (a reported cached_tokens wins; an evaluated count above the prompt
// tells nothing), the same read whole or in ranges, and item 7 has its hit
// rate from them, exactly.
TEST(Checklist, LlamaServersTimingsGiveItem7ItsCachedTokens) {
  const fs::path root = fs::temp_directory_path() / ("tokenscope_llama_cached_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const auto write_run =
      [&](const std::string& name, int reuse) {
        const fs::path dir = root / name;
        fs::create_directories(dir);
        std::string text;
        for (std::uint64_t id = 0; id < 600; ++id) {
          RequestRecord r;
          r.id = id;
          r.tenant = "default";
          r.t_sched = r.t_send = static_cast<Nanos>(id) * 20 * kNanosPerMilli;
          r.event_times = {r.t_send + 30 * kNanosPerMilli, r.t_send + 35 * kNanosPerMilli};
          r.event_tokens = {1, 1};
          r.output_tokens = 2;
          r.prompt_tokens = 100 + static_cast<std::int64_t>(id % 7);
          r.server_prompt_ms = 1.5;
          r.server_decode_ms = 5;
          r.server_prompt_evaluated = r.prompt_tokens - (id % 3 == 0 ? 0 : reuse);
          if (id == 5) r.cached_tokens = 90;                             // reported: it wins
          if (id == 6) r.server_prompt_evaluated = r.prompt_tokens + 1;  // more than the prompt: unknown
          r.append_json(text);
          text += '\n';
        }
        std::ofstream(dir / "requests.jsonl") << text;
        std::ofstream(dir / "run.json")
            << R"({"tool": {"command": "bench"}, "summary": {"requests_total": 600}})";
        return dir;
      };
  const fs::path base_dir = write_run("base", 64), cand_dir = write_run("cand", 32);
  // The expected cached tokens of request id, and the token-weighted rate.
  const auto expected = [](std::uint64_t id, int reuse) -> std::int32_t {
    if (id == 5) return 90;
    if (id == 6) return -1;
    return id % 3 == 0 ? 0 : reuse;
  };
  const auto rate = [&](int reuse) {
    double cached = 0, prompt = 0;
    for (std::uint64_t id = 0; id < 600; ++id)
      if (expected(id, reuse) >= 0)
        cached += expected(id, reuse), prompt += 100 + static_cast<double>(id % 7);
    return cached / prompt;
  };
  for (const unsigned ranges : {1u, 4u}) {
    LoadOptions o;
    o.request_ranges = ranges;
    o.cache = RunCache::kOff;
    const RunData base = load_run(base_dir, o), cand = load_run(cand_dir, o);
    ASSERT_EQ(base.requests.cached_tokens.size(), 600u);
    for (std::uint64_t id = 0; id < 600; ++id)
      ASSERT_EQ(base.requests.cached_tokens[id], expected(id, 64)) << "request " << id << ", " << ranges;
    const CheckResult r = run_checklist(&base, cand, Thresholds{});
    const ItemResult& loc = item(r, "locality");
    ASSERT_EQ(loc.verdict, Verdict::kRegressed) << loc.summary;  // 0.41 -> 0.20 of the prompt tokens
    EXPECT_DOUBLE_EQ(*loc.findings[0].base, rate(64));
    EXPECT_DOUBLE_EQ(*loc.findings[0].value, rate(32));
  }
  fs::remove_all(root);
}

// A run's item whose series bench could not sample says which series, from
// which run, why (run.json observe.sources[]), and what gives it.
TEST(Checklist, NoDataSaysWhatIsMissingWhyAndWhatGivesIt) {
  RunData base = lognormal_run("base", 1, 600), cand = lognormal_run("cand", 2, 600);
  const nlohmann::json sources = nlohmann::json::parse(R"({"observe": {"sources": [
      {"source": "server", "engine": "llama.cpp", "collected": true, "unavailable": null},
      {"source": "gpu", "collected": false, "unavailable": "NVML not available: libnvidia-ml.so.1"},
      {"source": "host", "collected": true, "unavailable": null},
      {"source": "cgroup", "collected": false, "unavailable": "not a cgroup v2 directory"}]}})");
  base.run_json = cand.run_json = sources;
  // The server's output-token counter and its running and waiting gauges,
  // sampled every second.
  for (RunData* run : {&base, &cand}) {
    SampledSeries tokens{"server", "canonical", "generation_tokens", "", {}, {}};
    SampledSeries running{"server", "canonical", "requests_running", "", {}, {}};
    SampledSeries waiting{"server", "canonical", "requests_waiting", "", {}, {}};
    for (int i = 0; i < 40; ++i) {
      const Nanos t = i * 1000 * kNanosPerMilli;
      tokens.t.push_back(t), tokens.v.push_back(100.0 * i);
      running.t.push_back(t), running.v.push_back(1 + i % 4);
      waiting.t.push_back(t), waiting.v.push_back(i % 2);
    }
    run->series = {tokens, running, waiting};
  }
  CheckResult r = run_checklist(&base, cand, Thresholds{});
  const ItemResult& gpu = item(r, "gpu");
  EXPECT_EQ(gpu.verdict, Verdict::kNoData);
  EXPECT_EQ(gpu.summary,
            "no GPU utilisation among the runs' samples (gpu of both runs: NVML not available: "
            "libnvidia-ml.so.1): bench samples the GPUs of the machine it runs on through NVML, a remote "
            "server's with --gpu-sampler URL (a DCGM exporter); sim writes none");
  const ItemResult& contention = item(r, "contention");
  EXPECT_EQ(contention.verdict, Verdict::kNoData);
  EXPECT_EQ(contention.summary,
            "no pressure-stall or cgroup series among the samples (cgroup of both runs: not a cgroup v2 "
            "directory): bench reads the host's CPU pressure from /proc/pressure/cpu (a Linux kernel with "
            "PSI) and, with --server-pid PID, the server's cgroup v2");
  // llama-server's waiting gauge: the finding says what it does not see.
  const ItemResult& batching = item(r, "batching");
  ASSERT_FALSE(batching.findings.empty());
  EXPECT_EQ(batching.findings[0].metric, "requests waiting");
  EXPECT_THAT(batching.findings[0].note, ::testing::HasSubstr("llama-server counts as waiting only"));
  // One run: its time at the cap, whose cap a remote server's run does not know.
  r = run_checklist(nullptr, cand, Thresholds{});
  EXPECT_EQ(item(r, "batching").verdict, Verdict::kNoData);
  EXPECT_THAT(item(r, "batching").summary, ::testing::HasSubstr("its cap is not known"));
  EXPECT_THAT(item(r, "batching").summary, ::testing::HasSubstr("llama-server's total_slots"));

  // The candidate's server without --metrics (bench's note: HTTP 501), a
  // base whose server was scraped but has no GPU sampler at all.
  cand.series.clear();
  cand.run_json["observe"]["sources"][0] = {
      {"source", "server"}, {"collected", false}, {"errors_by_reason", {{"HTTP 501", 1}}}};
  base.run_json["observe"]["sources"].erase(1);
  r = run_checklist(&base, cand, Thresholds{});
  EXPECT_EQ(item(r, "gpu").summary,
            "no GPU utilisation among the runs' samples (base's gpu: not sampled; candidate's gpu: NVML not "
            "available: libnvidia-ml.so.1): bench samples the GPUs of the machine it runs on through NVML, a "
            "remote server's with --gpu-sampler URL (a DCGM exporter); sim writes none; no output-token "
            "counter among the candidate's samples (candidate's server: not collected: HTTP 501): it comes "
            "from the server's /metrics (llama-server serves them with --metrics)");
  EXPECT_EQ(
      item(r, "batching").summary,
      "no running-requests series among the candidate's samples (candidate's server: not collected: "
      "HTTP 501): it comes from the server's /metrics (llama-server serves them with --metrics) or sim");
}

// A run of 20 s sampled every second has two blocks of ten samples, too few
// to compare: items 10 and 12 say so, and what gives more.
TEST(Checklist, TooFewSamplesSayWhatGivesMore) {
  RunData base = lognormal_run("base", 1, 600), cand = lognormal_run("cand", 2, 600);
  for (RunData* run : {&base, &cand}) {
    SampledSeries running{"server", "canonical", "requests_running", "", {}, {}};
    SampledSeries waiting{"server", "canonical", "requests_waiting", "", {}, {}};
    SampledSeries psi{"host", "canonical", "host_cpu_pressure_some", "", {}, {}};
    for (int i = 0; i < 20; ++i) {
      const Nanos t = i * 1000 * kNanosPerMilli;
      for (SampledSeries* s : {&running, &waiting, &psi}) s->t.push_back(t);
      running.v.push_back(1 + i % 4), waiting.v.push_back(i % 2), psi.v.push_back(0.01 * (i % 3));
    }
    run->series = {running, waiting, psi};
  }
  const CheckResult r = run_checklist(&base, cand, Thresholds{});
  const std::string hint =
      "too few values to compare (2 against 2; 3 each at least); each value is the mean of 10 samples: a "
      "longer run, or a shorter bench --scrape-interval (1 s by default)";
  EXPECT_EQ(item(r, "batching").verdict, Verdict::kNoData);
  EXPECT_EQ(item(r, "batching").summary, "requests waiting: " + hint);
  EXPECT_EQ(item(r, "batching").findings[0].threshold, "tolerance 10.0% (1 request at least)");
  EXPECT_EQ(item(r, "contention").verdict, Verdict::kNoData);
  EXPECT_EQ(
      item(r, "contention").summary,
      "mean host_cpu_pressure_some: " + hint +
          "; read from the whole host (no --server-pid or --cgroup): any process's CPU pressure counts, "
          "the client's included");
  EXPECT_EQ(item(r, "contention").evidence["pressure_source"], "host");
}

// The environment, judged first: two bench runs on one machine and server
// agree; another server setting, clock source, and a whole host under CPU
// pressure (a hog beside the server) are listed, and the host's pressure
// is not item 12's regression but the environment's.
TEST(Checklist, EnvironmentDifferencesAreListedNotCalledRegressions) {
  const auto bench_json = [](int slots, const std::string& clocksource) {
    return nlohmann::json{
        {"tool", {{"version", "0.1.0"}}},
        {"clock", {{"virtual", false}}},
        {"settings",
         {{"effective",
           {{"host", {{"hostname", "h1"}, {"cpus", 2}, {"kernel", "6.1"}, {"clocksource", clocksource}}},
            {"target",
             {{"model", "tiny"},
              {"server_info", {{"engine", "llama.cpp"}, {"version", "b1"}, {"max_batch", slots}}}}}}}}}};
  };
  const auto with_pressure = [](RunData run, double level) {
    SampledSeries psi{"host", "canonical", "host_cpu_pressure_some", "", {}, {}};
    std::mt19937_64 rng(static_cast<std::uint64_t>(level * 1000) + 7);
    std::uniform_real_distribution<double> u(-0.02, 0.02);
    for (int i = 0; i < 120; ++i) {
      psi.t.push_back(i * 1000 * kNanosPerMilli);
      psi.v.push_back(std::max(0.0, level + u(rng)));
    }
    run.series = {psi};
    return run;
  };
  RunData base = with_pressure(lognormal_run("base", 1, 600), 0.02);
  RunData same = with_pressure(lognormal_run("same", 2, 600), 0.02);
  RunData loaded = with_pressure(lognormal_run("loaded", 2, 600), 0.40);
  RunData other = with_pressure(lognormal_run("other", 2, 600), 0.02);
  base.run_json = same.run_json = loaded.run_json = bench_json(1, "tsc");
  other.run_json = bench_json(4, "hpet");
  EXPECT_TRUE(run_checklist(&base, same, Thresholds{}).environment.empty());
  const CheckResult l = run_checklist(&base, loaded, Thresholds{});
  ASSERT_EQ(l.environment.size(), 1u);
  EXPECT_EQ(l.environment[0].what, "host CPU pressure");
  EXPECT_EQ(l.environment[0].candidate.substr(0, 2), "39");  // the mean of 0.40 +- 0.02
  EXPECT_EQ(item(l, "contention").evidence.at("pressure_source"), "host");
  EXPECT_EQ(item(l, "contention").verdict, Verdict::kInconclusive);
  EXPECT_NE(item(l, "contention").findings[0].note.find("an environment difference"), std::string::npos);
  EXPECT_EQ(to_json(l)["environment"]["differs"], true);
  const CheckResult o = run_checklist(&base, other, Thresholds{});
  std::set<std::string> whats;
  for (const auto& d : o.environment) whats.insert(d.what);
  EXPECT_EQ(whats, (std::set<std::string>{"clock source", "server batch cap"}));
  // One run, or sim against sim without host records: nothing to compare.
  EXPECT_TRUE(run_checklist(nullptr, loaded, Thresholds{}).environment.empty());
  EXPECT_TRUE(to_json(run_checklist(nullptr, loaded, Thresholds{}))["environment"].is_null());
}

// A latency model one run cannot fit says so in a finding of its own: here
// the candidate served one request at a time (each decodes alone: its batch
// never varies), as llama-server with --parallel 1 does.
TEST(Checklist, ALatencyModelOneRunCannotFitIsAFindingThatSaysWhy) {
  Builder b("base"), c("cand");
  for (int i = 0; i < 300; ++i) {
    const Nanos t = i * 1000 * kNanosPerMilli;
    // Pairs sent 1 ms apart: the second waits for the first (its queue is 1).
    const double overlap = 10.0 * (i % 5);  // decodes overlap by 10 to 50 ms
    b.add(t, 100, 200), b.add(t + kNanosPerMilli, 199 - overlap, 299 - overlap);
    c.add(t, 100, 200), c.add(t + kNanosPerMilli, 199, 299);  // one decode after the other
  }
  const CheckResult r = run_checklist(&b.run, c.run, Thresholds{});
  const ItemResult& lm = item(r, "latency-model");
  ASSERT_EQ(lm.findings.size(), 2u) << lm.summary;
  EXPECT_EQ(lm.findings[0].metric, "TTFT per request queued ahead");
  EXPECT_NE(lm.findings[0].verdict, Verdict::kNoData);
  EXPECT_EQ(lm.findings[1].metric, "ITL per request in the batch");
  EXPECT_EQ(lm.findings[1].verdict, Verdict::kNoData);
  EXPECT_FALSE(lm.findings[1].change.has_value());
  EXPECT_EQ(lm.findings[1].note,
            "not fitted in the candidate: every request decoded beside the same number of others (one at a "
            "time: one slot, or requests that never overlapped)");
  EXPECT_EQ(lm.findings[1].threshold, "tolerance 0.05 ms");
  EXPECT_EQ(lm.decisive, 0u);
}

// ---- the headline comparison (item 0) and the family-wise error control

// A run whose TTFT wanders slowly in time (an AR(1) on the log scale, as a
// queue that fills and drains): neighbours share their latency.
RunData wandering_run(const std::string& name, std::uint64_t seed, int n, double scale = 1.0) {
  Builder b(name);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0, 1);
  double level = 0;
  for (int i = 0; i < n; ++i) {
    level = 0.998 * level + 0.06 * z(rng);
    const double ttft = scale * 200 * std::exp(level + 0.2 * z(rng));
    b.add(i * 50 * kNanosPerMilli, ttft, ttft + 49 * 20);
  }
  return b.run;
}

TEST(Checklist, TheHeadlineNamesAShiftedMedianAndPassesTheSameDistribution) {
  const RunData base = lognormal_run("base", 1, 3000), same = lognormal_run("same", 2, 3000);
  RunData slower = lognormal_run("slower", 2, 3000);
  auto& a = slower.requests;  // every TTFT 30% longer, the decode as it was
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Nanos extra = (a.t_first_token[i] - a.t_send[i]) * 3 / 10;
    a.t_first_token[i] += extra;
    a.t_last_token[i] += extra;
  }
  const CheckResult r = run_checklist(&base, slower, Thresholds{});
  ASSERT_EQ(r.items.front().id, "headline");
  const ItemResult& h = item(r, "headline");
  EXPECT_EQ(h.verdict, Verdict::kRegressed);
  const Finding* p50 = finding(h, "p50 TTFT");
  ASSERT_NE(p50, nullptr);
  EXPECT_EQ(p50->verdict, Verdict::kRegressed);
  EXPECT_NEAR(*p50->change, 0.30, 0.08);
  EXPECT_LT(*p50->ci_low, *p50->change);
  EXPECT_GT(*p50->ci_high, *p50->change);
  EXPECT_NE(p50->note.find("sectioning: the p50 in 10 and 10 time blocks"), std::string::npos) << p50->note;
  ASSERT_NE(finding(h, "request throughput"), nullptr);
  EXPECT_NE(finding(h, "request throughput")->verdict, Verdict::kRegressed);
  // The same distribution: no headline row regresses.
  const CheckResult n = run_checklist(&base, same, Thresholds{});
  for (const Finding& f : item(n, "headline").findings) EXPECT_NE(f.verdict, Verdict::kRegressed) << f.metric;
  // One run has no headline (it compares two).
  for (const auto& it : run_checklist(nullptr, base, Thresholds{}).items) EXPECT_NE(it.id, "headline");
}

TEST(Checklist, TheHeadlineIntervalWidensWhenNeighboursShareTheirLatency) {
  const RunData base = wandering_run("base", 1, 6000), cand = wandering_run("cand", 2, 6000);
  const CheckResult r = run_checklist(&base, cand, Thresholds{});
  const Finding* p50 = finding(item(r, "headline"), "p50 TTFT");
  ASSERT_NE(p50, nullptr);
  ASSERT_TRUE(p50->ci_low && p50->ci_high);
  // The interval that takes the requests as independent (item 4's kind).
  const SortedSample sb(detail::metric_sample(base, detail::Metric::kTtft), "b"),
      sc(detail::metric_sample(cand, detail::Metric::kTtft), "c");
  const Finding naive = detail::relative_shift_finding("p50", sb, sc, 0.5, 0.05, Worse::kHigher, 0.95);
  const double sectioned = *p50->ci_high - *p50->ci_low, independent = *naive.ci_high - *naive.ci_low;
  EXPECT_GT(sectioned, 2 * independent) << sectioned << " against " << independent;
}

TEST(Checklist, HolmKeepsTheStrongestRegressionAndDowngradesTheRest) {
  const auto make = [](double change, double lo, double hi) {
    Finding f;
    f.metric = fmt::format("m{}", change);
    f.change = change;
    f.ci_low = lo;
    f.ci_high = hi;
    f.threshold = "tolerance 10.0%";
    f.verdict = classify_change({change, lo, hi}, 0.10, Worse::kHigher);
    return f;
  };
  std::vector<ItemResult> items(2);
  items[0].findings = {make(0.5, 0.4, 0.6), make(0.2, 0.01, 0.39)};  // both regressed alone
  for (int i = 0; i < 8; ++i) {                                      // passes, each its own statistic
    items[1].findings.push_back(make(0.0, -0.05, 0.05));
    items[1].findings.back().metric = fmt::format("pass {}", i);
  }
  // The same statistic in a second item (the headline's p99 TTFT is item 4's): one test of the family.
  items[1].findings.push_back(items[0].findings[0]);
  Finding rule;  // a rule without an interval: outside the family
  rule.metric = "warm-up length";
  rule.change = 20;
  rule.threshold = "tolerance 5 s";
  rule.verdict = Verdict::kRegressed;
  items[1].findings.push_back(rule);
  ASSERT_EQ(items[0].findings[1].verdict, Verdict::kRegressed);
  auto kept = items;
  EXPECT_EQ(family_control(kept, 0, 0.95), 10u);  // alpha 0: p-values, no change
  EXPECT_EQ(kept[0].findings[1].verdict, Verdict::kRegressed);
  EXPECT_EQ(family_control(items, 0.05, 0.95), 10u);
  EXPECT_EQ(items[0].findings[0].verdict, Verdict::kRegressed);  // p about 1e-22: below 0.05 / 10
  // p = 1 - Phi(0.2 x 1.96 / 0.19) = 0.0196: above 0.05 / 9.
  ASSERT_TRUE(items[0].findings[1].p_value);
  EXPECT_NEAR(*items[0].findings[1].p_value, 0.0196, 0.0005);
  EXPECT_EQ(items[0].findings[1].verdict, Verdict::kInconclusive);
  EXPECT_NE(items[0].findings[1].note.find("Holm's bound 0.0056"), std::string::npos)
      << items[0].findings[1].note;
  EXPECT_EQ(items[1].findings[8].verdict, Verdict::kRegressed);      // the duplicate kept as its original
  EXPECT_EQ(items[1].findings.back().verdict, Verdict::kRegressed);  // the rule is its own
  EXPECT_FALSE(items[1].findings.back().p_value);
}
}  // namespace
}  // namespace tokenscope::analyze
