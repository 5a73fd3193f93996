#include "analyze/profile_fit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "core/error.h"
#include "core/random.h"
#include "engine/engine.h"

namespace tokenscope::analyze {
namespace {

// The engine with a known profile, driven in virtual time by Poisson
// arrivals of varied lengths; its token times become the client's records.
struct ProfiledRun : engine::EngineObserver {
  std::map<std::uint64_t, RequestRecord> records;
  std::vector<engine::StepStats> steps;
  void on_first_scheduled(std::uint64_t id, Nanos, std::uint32_t cached) override {
    records[id].cached_tokens = cached;
  }
  void on_token(std::uint64_t id, Nanos t, tokenizers::TokenId) override {
    auto& r = records[id];
    r.event_times.push_back(t);
    r.event_tokens.push_back(1);
  }
  void on_finish(const engine::FinishedRequest& f) override {
    auto& r = records[f.id];
    r.outcome = f.aborted ? Outcome::kCancelled : Outcome::kOk;
    r.prompt_tokens = f.prompt_tokens;
    r.output_tokens = f.output_tokens;
  }
  void on_step(const engine::StepStats& s) override { steps.push_back(s); }
};

engine::Profile truth() {
  engine::Profile p;
  // Costs of the size llama-server shows on a CPU: attention is a visible share.
  p.coef = {0.8e-3, 150e-6, 1.2e-3, 900e-6, 50e-9, 200e-9};
  return p;
}

ProfiledRun simulate(const engine::Profile& p, std::uint32_t max_num_seqs, double rate_rps, int n,
                     std::uint64_t seed,
                     engine::AttentionSpan attention = engine::AttentionSpan::kOwnContext) {
  engine::EngineSettings s;
  s.attention = attention;
  s.max_num_seqs = max_num_seqs;
  s.max_num_batched_tokens = 4096;
  s.enable_prefix_caching = false;
  const auto eff = engine::resolve_engine(s, engine::Catalog::builtin());
  ProfiledRun run;
  engine::Engine eng(eff, s, std::make_unique<engine::ProfileCostModel>(p, 0.0), &run);
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate_rps);
  std::uniform_int_distribution<std::uint32_t> plen(16, 1500), olen(2, 96);
  Nanos t = 0, now = 0;
  std::vector<std::pair<Nanos, engine::EngineRequest>> arrivals;
  for (int i = 0; i < n; ++i) {
    t += static_cast<Nanos>(gap(rng) * 1e9);
    engine::EngineRequest r;
    r.id = static_cast<std::uint64_t>(i);
    const std::uint32_t len = plen(rng);
    for (std::uint32_t k = 0; k < len; ++k)
      r.prompt.push_back(static_cast<tokenizers::TokenId>(mix64(seed * 7919 + i * 100'003 + k) % 30000));
    r.max_output_tokens = olen(rng);
    arrivals.emplace_back(t, std::move(r));
  }
  std::size_t next = 0;
  while (next < arrivals.size() || eng.has_work()) {
    while (next < arrivals.size() && arrivals[next].first <= now) {
      run.records[arrivals[next].second.id].t_send = arrivals[next].first;
      run.records[arrivals[next].second.id].id = arrivals[next].second.id;
      eng.add_request(std::move(arrivals[next].second), arrivals[next].first);
      ++next;
    }
    const Nanos d = eng.has_work() ? eng.step(now) : 0;
    if (d > 0)
      now += d;
    else if (next < arrivals.size())
      now = std::max(now, arrivals[next].first);
    else
      break;
  }
  return run;
}

std::vector<RequestRecord> records_of(const ProfiledRun& run) {
  std::vector<RequestRecord> out;
  for (const auto& [id, r] : run.records) out.push_back(r);
  return out;
}

TEST(ProfileFit, RebuildsTheEnginesStepsFromTheRecordsAlone) {
  // A load that leaves the server idle now and then: prefills are seen too.
  const auto run = simulate(truth(), 8, 2.0, 150, 1);
  ReconstructOptions o;
  o.batch_cap = 8;
  const auto rec = reconstruct_steps(records_of(run), o);
  ASSERT_GT(rec.steps.size(), 100u);
  // Every kept step is one of the engine's, with its duration and shape.
  std::map<Nanos, const engine::StepStats*> by_end;
  for (const auto& s : run.steps) by_end[s.start + s.duration] = &s;
  std::size_t matched = 0;
  for (const auto& st : rec.steps) {
    const auto it = by_end.find(st.end);
    ASSERT_NE(it, by_end.end());
    const auto& s = *it->second;
    EXPECT_EQ(st.shape.decode_tokens, s.decode_tokens);
    EXPECT_EQ(st.shape.prefill_tokens, s.prefill_tokens);
    EXPECT_EQ(st.shape.num_seqs, s.num_seqs);
    // The contexts the decodes attended to: the step's decode-attention cost over its coefficient.
    EXPECT_NEAR(st.shape.decode_attention_pairs, s.cost.decode_attention_s / truth().coef[5], 1e-3);
    EXPECT_NEAR(st.shape.prefill_attention_pairs, s.cost.prefill_attention_s / truth().coef[4], 1e-2);
    EXPECT_NEAR(st.seconds, static_cast<double>(s.duration) * 1e-9, 1e-9);
    ++matched;
  }
  // Many steps are seen (each decode period once per sequence in it).
  EXPECT_GT(matched, run.steps.size() / 2) << matched << " of " << run.steps.size();
  std::size_t prefills = 0;
  for (const auto& st : rec.steps) prefills += st.shape.prefill_tokens > 0;
  EXPECT_GT(prefills, 5u);
  EXPECT_EQ(rec.left_out_multi_token, 0u);
}

TEST(ProfileFit, RecoversTheCoefficientsOfAKnownProfileWithinItsIntervals) {
  const engine::Profile p = truth();
  const auto run = simulate(p, 8, 6.0, 300, 2);
  ReconstructOptions o;
  o.batch_cap = 8;
  const auto rec = reconstruct_steps(records_of(run), o);
  const auto fit = fit_step_costs(rec.steps, "sim");
  for (std::size_t k = 0; k < engine::kProfileTerms; ++k) {
    SCOPED_TRACE(engine::profile_terms()[k].key);
    EXPECT_TRUE(fit.identified[k]);
    // Exact data: the fit is exact to rounding, and the interval holds it.
    EXPECT_NEAR(fit.coef[k], p.coef[k], 1e-6 * p.coef[k]);
    EXPECT_LE(std::abs(fit.coef[k] - p.coef[k]), 3 * fit.se[k] + 1e-9 * p.coef[k]);
  }
  EXPECT_LT(fit.quality.mape, 1e-6);
  EXPECT_GT(fit.quality.r2, 0.999999);
  EXPECT_EQ(fit.ranges.max_batch, 8u);
}

TEST(ProfileFit, RecoversAKnownDecodeCurveAtEveryDecodeCountMeasured) {
  // llama.cpp on a CPU: a second decoding sequence costs far more than the
  // first, the rest little. The curve's points are the decode counts the
  // steps held; each is the truth's curve there.
  engine::Profile p = truth();
  p.coef[0] = p.coef[3] = 0;
  p.decode_curve = {{1, 1.3e-3, 0}, {2, 4.0e-3, 0}, {4, 5.0e-3, 0}, {8, 7.0e-3, 0}};
  const auto run = simulate(p, 8, 6.0, 300, 2);
  ReconstructOptions o;
  o.batch_cap = 8;
  const auto rec = reconstruct_steps(records_of(run), o);
  FitOptions fo;
  fo.decode_curve = true;
  const auto fit = fit_step_costs(rec.steps, "sim", fo);
  // Prefills were seen one at a time here: no point at 0 decodes.
  ASSERT_GE(fit.curve.size(), 5u);
  EXPECT_EQ(fit.curve.front().seqs, 1u);
  EXPECT_EQ(fit.curve.back().seqs, 8u);
  for (const auto& q : fit.curve) {
    SCOPED_TRACE(q.seqs);
    const double want = engine::curve_seconds(p.decode_curve, q.seqs);
    EXPECT_NEAR(q.seconds, want, 1e-6 * want);
    EXPECT_LE(std::abs(q.seconds - want), 3 * q.stderr_ + 1e-9 * want);
  }
  EXPECT_EQ(fit.coef[0], 0.0);
  EXPECT_EQ(fit.coef[3], 0.0);
  for (const std::size_t k : {1, 2, 4, 5}) EXPECT_NEAR(fit.coef[k], p.coef[k], 1e-6 * p.coef[k]) << k;
  EXPECT_LT(fit.quality.mape, 1e-6);
  // The linear model cannot follow the step at two sequences.
  const auto linear = fit_step_costs(rec.steps, "sim");
  EXPECT_TRUE(linear.curve.empty());
  EXPECT_GT(linear.quality.mape, 0.05);
}

TEST(ProfileFit, ADecodeCurveOfALinearServerIsItsLine) {
  const engine::Profile p = truth();
  const auto run = simulate(p, 8, 6.0, 300, 2);
  ReconstructOptions o;
  o.batch_cap = 8;
  FitOptions fo;
  fo.decode_curve = true;
  const auto fit = fit_step_costs(reconstruct_steps(records_of(run), o).steps, "sim", fo);
  ASSERT_GE(fit.curve.size(), 3u);
  for (const auto& q : fit.curve) {
    const double want = p.coef[0] + p.coef[3] * q.seqs;
    EXPECT_NEAR(q.seconds, want, 1e-6 * want) << q.seqs;
  }
  EXPECT_LT(fit.quality.mape, 1e-6);
  if (fit.curve.front().seqs > 0) {  // a prefill step's overhead, less the first point's decode
    EXPECT_NEAR(fit.coef[2], p.coef[2] - p.coef[3] * fit.curve.front().seqs, 1e-6 * p.coef[2]);
  }
  // One decode count only: too few for a curve, and said so.
  std::vector<ObservedStep> steps;
  for (int c : {100, 1000, 3000}) {
    ObservedStep s;
    s.shape.num_seqs = s.shape.decode_tokens = 2;
    s.shape.decode_attention_pairs = 2.0 * c;
    s.seconds = 2e-3 + 2.0 * c * 1e-9;
    steps.push_back(s);
  }
  const auto one = fit_step_costs(steps, "decodes", fo);
  EXPECT_TRUE(one.curve.empty());
  bool said = false;
  for (const auto& n : one.notes) said |= n.find("decode cost: linear") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(ProfileFit, LlamaCppOccupancyIsReplayedFromTheRecordsAndItsCoefficientsRecovered) {
  // llama.cpp: every token attends over every occupied cell, and idle slots
  // keep their last sequence's. The engine prices that; the records alone
  // must give the same attention sums, and the fit the same coefficients.
  engine::Profile p = truth();
  p.attention = engine::AttentionSpan::kOccupancy;
  const auto run = simulate(p, 4, 2.0, 200, 4, engine::AttentionSpan::kOccupancy);
  ReconstructOptions o;
  o.batch_cap = 4;
  o.attention = engine::AttentionSpan::kOccupancy;
  const auto rec = reconstruct_steps(records_of(run), o);
  std::map<Nanos, const engine::StepStats*> by_end;
  for (const auto& s : run.steps) by_end[s.start + s.duration] = &s;
  std::size_t prefills = 0, decodes = 0;
  for (const auto& st : rec.steps) {
    const auto& s = *by_end.at(st.end);
    EXPECT_NEAR(st.shape.decode_attention_pairs, s.cost.decode_attention_s / p.coef[5],
                1e-3 * (1 + st.shape.decode_attention_pairs));
    EXPECT_NEAR(st.shape.prefill_attention_pairs, s.cost.prefill_attention_s / p.coef[4],
                1e-3 * (1 + st.shape.prefill_attention_pairs));
    prefills += st.shape.prefill_tokens > 0;
    decodes += st.shape.decode_tokens > 0;
  }
  EXPECT_GT(prefills, 5u);
  EXPECT_GT(decodes, 100u);
  const auto fit = fit_step_costs(rec.steps, "llama.cpp-like");
  for (std::size_t k = 0; k < engine::kProfileTerms; ++k) {
    SCOPED_TRACE(engine::profile_terms()[k].key);
    EXPECT_NEAR(fit.coef[k], p.coef[k], 1e-6 * p.coef[k]);
  }
}

TEST(ProfileFit, AnIdleSlotKeepsItsCellsUntilTheLeastRecentlyUsedIsTaken) {
  // Two slots. A (100-token prompt, 3 outputs) ends: its slot keeps 102
  // cells. B then takes the never-used slot (the least recently used), so
  // its prefill attends over A's 102 cells and its own 50.
  engine::Profile p;
  p.coef = {1e-3, 0, 0, 0, 1e-9, 1e-9};
  engine::EngineSettings s;
  s.attention = engine::AttentionSpan::kOccupancy;
  s.max_num_seqs = 2;
  s.enable_prefix_caching = false;
  ProfiledRun run;
  engine::Engine eng(engine::resolve_engine(s, engine::Catalog::builtin()), s,
                     std::make_unique<engine::ProfileCostModel>(p, 0.0), &run);
  const auto request = [](std::uint64_t id, std::uint32_t len) {
    engine::EngineRequest r;
    r.id = id;
    for (std::uint32_t k = 0; k < len; ++k)
      r.prompt.push_back(static_cast<tokenizers::TokenId>(1000 * id + k));
    r.max_output_tokens = 3;
    return r;
  };
  Nanos now = 0;
  eng.add_request(request(1, 100), now);
  while (eng.has_work()) now += eng.step(now);
  eng.add_request(request(2, 50), now);
  now += eng.step(now);
  const auto& last = run.steps.back();
  EXPECT_EQ(last.prefill_tokens, 50u);
  EXPECT_NEAR(last.cost.prefill_attention_s / 1e-9, 50.0 * (102 + 50), 1e-6);
  // Its first decode: 102 kept, 51 of its own after the step (50 computed, one more).
  now += eng.step(now);
  EXPECT_NEAR(run.steps.back().cost.decode_attention_s / 1e-9, 1.0 * (102 + 51), 1e-6);
}

TEST(ProfileFit, NoisyStepsGiveIntervalsThatHoldTheTruth) {
  const engine::Profile p = truth();
  const auto run = simulate(p, 8, 6.0, 300, 3);
  auto recs = records_of(run);
  ReconstructOptions o;
  o.batch_cap = 8;
  auto rec = reconstruct_steps(recs, o);
  // Multiplicative noise on each step, as a real server's jitter.
  std::mt19937_64 rng(5);
  std::lognormal_distribution<double> noise(0.0, 0.03);
  for (auto& s : rec.steps) s.seconds *= noise(rng);
  const auto fit = fit_step_costs(rec.steps, "noisy");
  for (std::size_t k = 0; k < engine::kProfileTerms; ++k) {
    SCOPED_TRACE(engine::profile_terms()[k].key);
    EXPECT_GT(fit.se[k], 0.0);
    // Within 4 standard errors (a 1-in-15,000 miss for each), and the terms
    // that carry most of the cost within 10%.
    EXPECT_LE(std::abs(fit.coef[k] - p.coef[k]), 4 * fit.se[k]);
  }
  EXPECT_NEAR(fit.coef[3], p.coef[3], 0.1 * p.coef[3]);  // decode per sequence
  EXPECT_NEAR(fit.coef[1], p.coef[1], 0.1 * p.coef[1]);  // prefill per token
  EXPECT_GT(fit.quality.mape, 0.0);
}

TEST(ProfileFit, ATermTheDataNeverVaryIsLeftAtZeroAndSaidSo) {
  // Decodes only, one sequence at a time, one context: only the step and
  // decode terms move... and they move together: the per-step term alone
  // cannot be told from decode_seq. Steps of three contexts.
  std::vector<ObservedStep> steps;
  for (int c : {100, 1000, 3000})
    for (int i = 0; i < 5; ++i) {
      ObservedStep s;
      s.shape.num_seqs = s.shape.decode_tokens = s.shape.logit_tokens = 2;
      s.shape.decode_attention_pairs = 2.0 * c;
      s.seconds = 1e-3 + 2 * 0.5e-3 + 2.0 * c * 1e-9;
      steps.push_back(s);
    }
  const auto fit = fit_step_costs(steps, "decodes");
  EXPECT_FALSE(fit.identified[1]);
  EXPECT_FALSE(fit.identified[4]);
  // Two decodes in every step: the decode term is the per-step term again.
  EXPECT_FALSE(fit.identified[3]);
  EXPECT_TRUE(fit.identified[0]);
  EXPECT_EQ(fit.coef[1], 0.0);
  EXPECT_EQ(fit.coef[3], 0.0);
  EXPECT_NEAR(fit.coef[0], 2e-3, 1e-9);
  EXPECT_NEAR(fit.coef[5], 1e-9, 1e-12);
  bool said = false;
  for (const auto& n : fit.notes) said |= n.find("prefill_token_us") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(ProfileFit, TheServersCountersGiveItsKvCapacityAndCap) {
  // Two requests: A (100-token prompt) sent at 0 ms, tokens at 10, 20, 30,
  // closed at 40; B (50 tokens) sent at 5, tokens at 15, 25, closed at 35.
  const auto ms = [](double v) { return static_cast<Nanos>(v * 1e6); };
  std::vector<RequestRecord> recs(2);
  recs[0].t_send = 0;
  recs[0].prompt_tokens = 100;
  recs[0].event_times = {ms(10), ms(20), ms(30)};
  recs[0].event_tokens = {1, 1, 1};
  recs[0].t_close = ms(40);
  recs[1].t_send = ms(5);
  recs[1].prompt_tokens = 50;
  recs[1].event_times = {ms(15), ms(25)};
  recs[1].event_tokens = {1, 1};
  recs[1].t_close = ms(35);
  const auto scrape = [&](double at, double running, double waiting, double usage) {
    observe::Observation o;
    o.source = "server";
    o.t_ns = ms(at);
    o.canonical = {
        {"requests_running", {}, running}, {"requests_waiting", {}, waiting}, {"kv_cache_usage", {}, usage}};
    return o;
  };
  // At 22 ms: A holds 102 tokens, B 51; at 10% usage, 1,530 tokens in all.
  auto c = read_counters(recs, {scrape(22, 2, 0, 0.1)});
  ASSERT_EQ(c.kv_estimates.size(), 1u);
  EXPECT_NEAR(c.kv_estimates[0], 1530.0, 1e-9);
  EXPECT_EQ(c.running_while_waiting, 0u);
  // Scrapes that do not count: one waiting (the cap, though), the server
  // running another count than the client had in flight, a usage under 2%,
  // another source.
  auto other = scrape(22, 2, 0, 0.1);
  other.source = "gpu";
  c = read_counters(recs, {scrape(22, 2, 1, 0.1), scrape(22, 3, 0, 0.1), scrape(22, 2, 0, 0.01), other});
  EXPECT_TRUE(c.kv_estimates.empty());
  EXPECT_EQ(c.running_while_waiting, 2u);
  EXPECT_EQ(c.max_running, 3u);
  EXPECT_EQ(c.scrapes, 3u);
  // Series of several label sets: running and waiting summed, usage averaged.
  auto labelled = scrape(22, 1, 0, 0.05);
  labelled.canonical.push_back({"requests_running", {{"engine", "1"}}, 1});
  labelled.canonical.push_back({"kv_cache_usage", {{"engine", "1"}}, 0.15});
  c = read_counters(recs, {labelled});
  ASSERT_EQ(c.kv_estimates.size(), 1u);
  EXPECT_NEAR(c.kv_estimates[0], 1530.0, 1e-9);
}

TEST(ProfileFit, TooFewStepsAreAClearError) {
  std::vector<ObservedStep> steps(2);
  steps[0].seconds = steps[1].seconds = 1e-3;
  steps[1].shape.decode_tokens = steps[1].shape.num_seqs = 1;
  try {
    fit_step_costs(steps, "run-x");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("too few to fit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("run-x"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tokenscope::analyze
