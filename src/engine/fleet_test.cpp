#include "engine/fleet.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "core/error.h"
#include "engine/engine_options.h"
#include "workload/arrivals.h"
#include "workload/synthetic.h"
#include "workload/trace_readers.h"

namespace tokenscope::engine {
namespace {

const std::string kFleetShared = TOKENSCOPE_SHARED_DIR "/traces/";

// Every request's token times and end, by id.
struct Times final : EngineObserver {
  std::map<std::uint64_t, std::vector<Nanos>> tokens;
  std::map<std::uint64_t, Nanos> finished;
  void on_token(std::uint64_t id, Nanos t, tokenizers::TokenId) override { tokens[id].push_back(t); }
  void on_finish(const FinishedRequest& r) override { finished[r.id] = r.finished; }
};

workload::Workload mixed(std::uint64_t seed, std::uint64_t n, double rate) {
  workload::SyntheticSettings s;
  s.arrival.rate_rps = rate;
  s.num_requests = n;
  s.input =
      workload::parse_length_spec("lognormal:800:0.8:max=6000", "--input-len", workload::LengthRole::kInput);
  s.output = workload::parse_length_spec("lognormal:150:0.7:max=1000", "--output-len",
                                         workload::LengthRole::kOutput);
  s.prefix_groups = 4;
  s.prefix_tokens = 300;
  return workload::make_synthetic(s, workload::WorkloadSeeds::from_master(seed));
}

EngineSettings tight() {
  EngineSettings s;
  s.num_gpu_blocks_override = 600;  // tight enough to preempt now and then
  s.max_num_seqs = 32;
  return s;
}

TEST(Fleet, RoundRobinOnATraceScaledNTimesIsNSingleRunsOnTheSplitTrace) {
  constexpr std::size_t kReplicas = 4;
  const EngineSettings s = tight();
  const EffectiveEngine eff = resolve_engine(s, Catalog::builtin());
  // The trace at 4x one replica's rate; request k goes to replica k mod 4.
  const workload::Workload w = mixed(11, 600, 4 * 6.0);
  Times fleet_times;
  Fleet fleet(
      kReplicas, eff, s, [&] { return make_cost_model(s, eff); }, &fleet_times, RouterSettings{});
  const FleetReport fr = run_fleet_simulation(w, fleet);
  ASSERT_EQ(fleet_times.finished.size(), w.requests.size());
  std::uint64_t preemptions = 0;
  for (std::size_t j = 0; j < kReplicas; ++j) {
    SCOPED_TRACE(j);
    workload::Workload part = w;
    part.requests.clear();
    for (std::size_t k = j; k < w.requests.size(); k += kReplicas) part.requests.push_back(w.requests[k]);
    Times alone;
    Engine e(eff, s, make_cost_model(s, eff), &alone);
    const SimReport r = run_simulation(part, e);
    EXPECT_EQ(fr.routed[j], part.requests.size());
    EXPECT_EQ(fr.replicas[j].counters.steps, r.counters.steps);
    EXPECT_EQ(fr.replicas[j].counters.prefix_hits_tokens, r.counters.prefix_hits_tokens);
    EXPECT_EQ(fr.replicas[j].virtual_end_ns, r.virtual_end_ns);
    preemptions += r.counters.preemptions;
    for (const auto& q : part.requests) {
      ASSERT_EQ(fleet.replica_of(q.id), static_cast<int>(j));
      ASSERT_EQ(fleet_times.tokens[q.id], alone.tokens[q.id]) << "request " << q.id;
      ASSERT_EQ(fleet_times.finished[q.id], alone.finished[q.id]) << "request " << q.id;
    }
  }
  EXPECT_GT(preemptions, 0u);  // the replicas were under pressure, not idle
  EXPECT_EQ(fr.total.counters.preemptions, preemptions);
  EXPECT_EQ(fr.total.requests_submitted, w.requests.size());
}

// Rejections, by id.
struct Rejects final : EngineObserver {
  std::map<std::uint64_t, std::string> why;
  std::map<std::uint64_t, Nanos> finished;
  void on_reject(std::uint64_t id, Nanos, std::string_view reason) override { why[id] = std::string(reason); }
  void on_finish(const FinishedRequest& r) override { finished[r.id] = r.finished; }
};

workload::Request request(std::uint64_t id, Nanos at, std::uint32_t in, std::uint32_t out) {
  workload::Request r;
  r.id = id;
  r.arrival_ns = at;
  r.input_tokens = in;
  r.output_tokens = out;
  return r;
}

TEST(Fleet, TheRouterSeesARequestsEndOnlyWhenTheFleetsTimeReachesIt) {
  // A (one output token) goes to replica 0; its step ends after B arrives.
  // Least-loaded must still count A then, and send B to replica 1.
  EngineSettings s;
  const EffectiveEngine eff = resolve_engine(s, Catalog::builtin());
  workload::Workload w;
  w.requests = {request(0, 0, 2000, 1), request(1, 1'000'000, 100, 4)};  // B at 1 ms
  Rejects seen;
  RouterSettings rs;
  rs.policy = RouterPolicy::kLeastLoaded;
  Fleet fleet(
      2, eff, s, [&] { return make_cost_model(s, eff); }, &seen, rs);
  const FleetReport r = run_fleet_simulation(w, fleet);
  ASSERT_EQ(seen.finished.size(), 2u);
  ASSERT_GT(seen.finished[0], 1'000'000) << "A must still run when B arrives";
  EXPECT_EQ(fleet.replica_of(0), 0);
  EXPECT_EQ(fleet.replica_of(1), 1);
  // Every load is back to 0 at the end.
  for (const double l : fleet.loads()) EXPECT_EQ(l, 0.0);
  EXPECT_EQ(r.routed, (std::vector<std::uint64_t>{1, 1}));
}

TEST(Fleet, ARowTooLongForAnyReplicaIsRefusedBeforeItsTokensAreMade) {
  EngineSettings s;
  const EffectiveEngine eff = resolve_engine(s, Catalog::builtin());
  workload::Workload w;
  w.requests = {request(0, 0, 1u << 30, 4), request(1, 10, 100, 4)};
  Rejects seen;
  Fleet fleet(
      2, eff, s, [&] { return make_cost_model(s, eff); }, &seen, RouterSettings{});
  const FleetReport r = run_fleet_simulation(w, fleet);
  ASSERT_EQ(seen.why.count(0), 1u);
  EXPECT_EQ(fleet.replica_of(0), -1);
  // Counted in the fleet's total, against no replica; the next request is
  // the first routed (replica 0).
  EXPECT_EQ(r.total.counters.requests_rejected, 1u);
  EXPECT_EQ(r.replicas[0].counters.requests_rejected + r.replicas[1].counters.requests_rejected, 0u);
  EXPECT_EQ(fleet.replica_of(1), 0);
  EXPECT_EQ(seen.finished.size(), 1u);
}

// Every event of every request, as the fleet's observer hears them.
struct Heard final : EngineObserver {
  std::map<std::uint64_t, std::vector<Nanos>> tokens;
  std::map<std::uint64_t, FinishedRequest> finished;
  std::map<std::uint64_t, int> first_scheduled_calls;
  void on_first_scheduled(std::uint64_t id, Nanos, std::uint32_t) override { ++first_scheduled_calls[id]; }
  void on_token(std::uint64_t id, Nanos t, tokenizers::TokenId) override { tokens[id].push_back(t); }
  void on_finish(const FinishedRequest& r) override {
    EXPECT_EQ(finished.count(r.id), 0u) << "request " << r.id << " ended twice";
    finished[r.id] = r;
  }
};

constexpr Nanos kMsec = 1'000'000;  // a millisecond

// Every step costs 5 ms: the times below follow from the schedule alone.
EngineSettings five_ms_steps() {
  EngineSettings s;
  s.fixed_step_ms = 5.0;
  return s;
}

TEST(Disaggregated, TheFirstTokenWaitsForThePrefillTheTransferAndADecodeStep) {
  const EngineSettings s = five_ms_steps();
  const EffectiveEngine eff = resolve_engine(s, Catalog::builtin());
  workload::Workload w;
  w.requests = {request(0, 2 * kMsec, 1000, 4)};
  Heard heard;
  Fleet fleet(
      2, eff, s, [&] { return make_cost_model(s, eff); }, &heard, RouterSettings{});
  Disaggregation d;
  d.prefill_replicas = 1;
  d.link_bytes_per_s = 1e9;  // 1 GB/s
  d.link_latency_ns = 100'000;
  fleet.disaggregate(d);
  const FleetReport r = run_fleet_simulation(w, fleet);
  // The prefill: one 5 ms step from its arrival. Its KV (1000 tokens) then
  // leaves at once, and arrives bytes/bandwidth and the latency later.
  const double bytes = 1000 * eff.kv_bytes_per_token;
  ASSERT_EQ(fleet.transfers().size(), 1u);
  const KvTransfer& x = fleet.transfers()[0];
  EXPECT_EQ(x.prefill_replica, 0u);
  EXPECT_EQ(x.decode_replica, 1);
  EXPECT_DOUBLE_EQ(x.bytes, bytes);
  EXPECT_EQ(x.ready, 7 * kMsec);
  EXPECT_EQ(x.start, 7 * kMsec);
  const Nanos arrive = 7 * kMsec + seconds_to_nanos(bytes / 1e9) + 100'000;
  EXPECT_EQ(x.arrive, arrive);
  // The decode replica: the last prompt token and then one token a step;
  // the prefill's own token is never delivered.
  EXPECT_EQ(heard.tokens[0], (std::vector<Nanos>{arrive + 5 * kMsec, arrive + 10 * kMsec, arrive + 15 * kMsec,
                                                 arrive + 20 * kMsec}));
  const FinishedRequest& f = heard.finished.at(0);
  EXPECT_EQ(f.arrival, 2 * kMsec);          // the client's arrival, not the decode side's
  EXPECT_EQ(f.first_scheduled, 2 * kMsec);  // the prefill's first schedule
  EXPECT_EQ(f.first_token, arrive + 5 * kMsec);
  EXPECT_EQ(f.finished, arrive + 20 * kMsec);
  EXPECT_EQ(f.prompt_tokens, 1000u);
  EXPECT_EQ(f.output_tokens, 4u);
  EXPECT_EQ(heard.first_scheduled_calls[0], 1);
  EXPECT_EQ(fleet.replica_of(0), 1);
  EXPECT_EQ(fleet.prefill_replica_of(0), 0);
  // The prompt is counted where it was computed, the output where it was generated.
  EXPECT_EQ(r.replicas[0].counters.prompt_tokens, 1000u);
  EXPECT_EQ(r.replicas[0].counters.prefix_queries_tokens, 1000u);
  EXPECT_EQ(r.replicas[1].counters.prompt_tokens, 0u);
  EXPECT_EQ(r.replicas[1].counters.prefix_queries_tokens, 0u);
  EXPECT_EQ(r.total.counters.prompt_tokens, 1000u);
  EXPECT_EQ(r.total.counters.generation_tokens, 4u);
  EXPECT_EQ(r.total.counters.requests_finished, 1u);
  EXPECT_EQ(r.routed, (std::vector<std::uint64_t>{1, 1}));
  // The decode replica holds the prompt's KV: 1000 tokens and the 4 generated, in 16-token blocks.
  EXPECT_EQ(r.replicas[1].counters.max_blocks_in_use, (1000u + 4u + 15u) / 16u);
  for (const double l : fleet.loads()) EXPECT_EQ(l, 0.0);
}

TEST(Disaggregated, TransfersLeaveOneAtATimeOnTheirPrefillReplicasLink) {
  const EngineSettings s = five_ms_steps();
  const EffectiveEngine eff = resolve_engine(s, Catalog::builtin());
  const auto run = [&](std::size_t prefill, Heard& heard) {
    workload::Workload w;
    w.requests = {request(0, 0, 2000, 2), request(1, 0, 2000, 2)};  // prefilled in one step
    Fleet fleet(
        prefill + 2, eff, s, [&] { return make_cost_model(s, eff); }, &heard, RouterSettings{});
    Disaggregation d;
    d.prefill_replicas = prefill;
    d.link_bytes_per_s = 2e9;
    d.link_latency_ns = 0;
    fleet.disaggregate(d);
    run_fleet_simulation(w, fleet);
    return std::pair{fleet.transfers(),
                     std::vector<double>(fleet.link_bytes().begin(), fleet.link_bytes().end())};
  };
  const Nanos wire = seconds_to_nanos(2000 * eff.kv_bytes_per_token / 2e9);
  Heard one_link;
  const auto [shared, shared_bytes] = run(1, one_link);
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_EQ(shared[0].start, 5 * kMsec);
  EXPECT_EQ(shared[1].ready, 5 * kMsec);
  EXPECT_EQ(shared[1].start, 5 * kMsec + wire);  // it waited for the first
  EXPECT_EQ(shared[1].arrive, 5 * kMsec + 2 * wire);
  EXPECT_DOUBLE_EQ(shared_bytes[0], 2 * 2000 * eff.kv_bytes_per_token);
  // Two prefill replicas (round-robin): a link each, no wait; the same
  // request's first token comes a transfer sooner.
  Heard two_links;
  const auto [apart, apart_bytes] = run(2, two_links);
  ASSERT_EQ(apart.size(), 2u);
  for (const auto& x : apart) EXPECT_EQ(x.start, x.ready);
  EXPECT_EQ(apart_bytes.size(), 2u);
  const std::uint64_t late = shared[1].id;
  EXPECT_EQ(one_link.finished.at(late).first_token - two_links.finished.at(late).first_token, wire);
}

TEST(Disaggregated, EveryRequestEndsOnceWithItsTokensAndTheCountersAddUp) {
  // Decode replicas short of blocks: they preempt, and recompute what they
  // were sent.
  EngineSettings s = tight();
  const EffectiveEngine eff = resolve_engine(s, Catalog::builtin());
  const workload::Workload w = mixed(5, 400, 40.0);
  Heard heard;
  RouterSettings rs;
  rs.policy = RouterPolicy::kPrefixAffinity;
  Fleet fleet(
      5, eff, s, [&] { return make_cost_model(s, eff); }, &heard, rs);
  Disaggregation d;
  d.prefill_replicas = 2;
  fleet.disaggregate(d);
  const FleetReport r = run_fleet_simulation(w, fleet);
  ASSERT_EQ(heard.finished.size(), w.requests.size());
  std::uint64_t prompt = 0, output = 0;
  std::map<std::uint64_t, const KvTransfer*> transfer;
  for (const auto& x : fleet.transfers()) transfer[x.id] = &x;
  for (const auto& q : w.requests) {
    SCOPED_TRACE(q.id);
    const FinishedRequest& f = heard.finished.at(q.id);
    ASSERT_EQ(heard.tokens[q.id].size(), q.output_tokens);
    EXPECT_EQ(f.output_tokens, q.output_tokens);
    EXPECT_EQ(f.arrival, q.arrival_ns);
    ASSERT_EQ(transfer.count(q.id), 1u);
    EXPECT_GT(f.first_token, transfer[q.id]->arrive);  // a decode step after the KV arrived
    EXPECT_LT(f.first_scheduled, transfer[q.id]->ready);
    EXPECT_LT(fleet.prefill_replica_of(q.id), 2);
    EXPECT_GE(fleet.replica_of(q.id), 2);
    prompt += q.input_tokens;
    output += q.output_tokens;
  }
  std::uint64_t decode_preemptions = 0;
  for (std::size_t i = 2; i < 5; ++i) {
    decode_preemptions += r.replicas[i].counters.preemptions;
    EXPECT_TRUE(fleet.engine(i).check_invariants());
  }
  EXPECT_GT(decode_preemptions, 0u);  // the decode side was under pressure
  EXPECT_EQ(r.total.counters.prompt_tokens, prompt);
  EXPECT_EQ(r.total.counters.generation_tokens, output);
  EXPECT_EQ(r.total.counters.requests_finished, w.requests.size());
  EXPECT_EQ(r.routed[0] + r.routed[1], w.requests.size());
  EXPECT_EQ(r.routed[2] + r.routed[3] + r.routed[4], w.requests.size());
  for (const double l : fleet.loads()) EXPECT_EQ(l, 0.0);
}

// A one-token prompt: nothing to preload (its last token is all the decode
// replica computes), and still counted once, on its prefill replica.
TEST(Disaggregated, AOneTokenPromptIsCountedOnce) {
  const EngineSettings s = five_ms_steps();
  const EffectiveEngine eff = resolve_engine(s, Catalog::builtin());
  workload::Workload w;
  w.requests = {request(0, 0, 1, 3)};
  Heard heard;
  Fleet fleet(
      2, eff, s, [&] { return make_cost_model(s, eff); }, &heard, RouterSettings{});
  Disaggregation d;
  d.prefill_replicas = 1;
  fleet.disaggregate(d);
  const FleetReport r = run_fleet_simulation(w, fleet);
  ASSERT_EQ(heard.tokens[0].size(), 3u);
  EXPECT_EQ(r.total.counters.prompt_tokens, 1u);
  EXPECT_EQ(r.total.counters.prefix_queries_tokens, 1u);
  EXPECT_EQ(r.total.counters.generation_tokens, 3u);
  EXPECT_EQ(r.total.counters.requests_finished, 1u);
}

TEST(Disaggregated, AFleetWithoutBothSidesIsRefused) {
  EngineSettings s;
  const EffectiveEngine eff = resolve_engine(s, Catalog::builtin());
  Fleet fleet(
      2, eff, s, [&] { return make_cost_model(s, eff); }, nullptr, RouterSettings{});
  Disaggregation d;
  d.prefill_replicas = 2;
  EXPECT_THROW(fleet.disaggregate(d), UsageError);
  d.prefill_replicas = 0;
  EXPECT_THROW(fleet.disaggregate(d), UsageError);
  d.prefill_replicas = 1;
  d.link_bytes_per_s = 0;
  EXPECT_THROW(fleet.disaggregate(d), UsageError);
  d.link_bytes_per_s = 1e5;  // under 1 MB/s: a transfer's time could leave the clock's range
  EXPECT_THROW(fleet.disaggregate(d), UsageError);
}

double hit_rate(const FleetReport& r) {
  return static_cast<double>(r.total.counters.prefix_hits_tokens) /
         static_cast<double>(r.total.counters.prefix_queries_tokens);
}

TEST(Fleet, PrefixAffinityHitsTheMostOnTheMooncakeConversationTrace) {
  if (!std::filesystem::exists(kFleetShared + "conversation_trace.jsonl"))
    GTEST_SKIP() << "shared traces not present";
  workload::TraceReadOptions ro;
  ro.max_rows = 1500;
  const workload::Workload w = workload::read_trace(kFleetShared + "conversation_trace.jsonl", ro);
  EngineSettings s;
  s.model = "llama-3.1-8b";
  s.gpu = "h100";
  const EffectiveEngine eff = resolve_engine(s, Catalog::builtin());
  std::map<std::string, double> rates;
  std::map<std::string, std::vector<std::uint64_t>> routed;
  for (const auto p : {RouterPolicy::kRoundRobin, RouterPolicy::kLeastLoaded, RouterPolicy::kPowerOfTwo,
                       RouterPolicy::kPrefixAffinity, RouterPolicy::kSessionAffinity}) {
    RouterSettings rs;
    rs.policy = p;
    rs.seed = 3;
    Fleet fleet(
        4, eff, s, [&] { return make_cost_model(s, eff); }, nullptr, rs);
    const FleetReport r = run_fleet_simulation(w, fleet);
    EXPECT_EQ(r.total.counters.requests_finished, w.requests.size()) << name_of(p);
    rates[std::string(name_of(p))] = hit_rate(r);
    routed[std::string(name_of(p))] = r.routed;
  }
  // (At 1,500 rows: prefix-affinity 6.4%, round-robin 5.5%, power-of-two
  // 5.1%, least-loaded 4.35%, session-affinity 4.0%: one replica for all,
  // its cache evicting.)
  for (const auto& [name, rate] : rates) {
    SCOPED_TRACE(name);
    if (name != "prefix-affinity") {
      EXPECT_GT(rates["prefix-affinity"], rate);
    }
  }
  // Its load bound spreads the work: no replica is left idle.
  for (const auto n : routed["prefix-affinity"]) EXPECT_GT(n, w.requests.size() / 16);
  // One session (the trace has one tenant): session affinity is one replica.
  std::size_t used = 0;
  for (const auto n : routed["session-affinity"]) used += n > 0;
  EXPECT_EQ(used, 1u);
}

RouteKey key(std::uint64_t id, std::span<const tokenizers::TokenId> prompt = {}, std::uint64_t session = 0,
             double tokens = 0) {
  RouteKey k;
  k.id = id;
  k.prompt = prompt;
  k.session = session;
  k.tokens = tokens;
  return k;
}

RouterSettings policy(RouterPolicy p, std::uint64_t seed = 0) {
  RouterSettings s;
  s.policy = p;
  s.seed = seed;
  return s;
}

TEST(Router, SpeedsWeighTheLoadAwarePoliciesAndEqualSpeedsChangeNothing) {
  // Replica 1 twice as fast: 15 outstanding tokens there drain sooner than 10 on replica 0.
  const std::vector<double> loads = {10, 15};
  const std::vector<double> speeds = {1, 2};
  {
    Router r(policy(RouterPolicy::kLeastLoaded), 2);
    r.set_speeds(speeds);
    ASSERT_EQ(r.weights().size(), 2u);
    EXPECT_DOUBLE_EQ(r.weights()[0] + r.weights()[1], 2.0);  // the mean weight is 1
    EXPECT_EQ(r.route(key(0), loads), 1u);
  }
  {
    RouterSettings equal = policy(RouterPolicy::kLeastLoaded);
    equal.speed_weighted = false;  // --router-weights equal
    Router r(equal, 2);
    r.set_speeds(speeds);
    EXPECT_TRUE(r.weights().empty());
    EXPECT_EQ(r.route(key(0), loads), 0u);
  }
  {
    Router r(policy(RouterPolicy::kLeastLoaded), 2);
    r.set_speeds(std::vector<double>{3, 3});  // alike: no weights at all
    EXPECT_TRUE(r.weights().empty());
    EXPECT_EQ(r.route(key(0), loads), 0u);
  }
  {
    // Power of two with two replicas draws both: the faster drains first.
    Router r(policy(RouterPolicy::kPowerOfTwo, 5), 2);
    r.set_speeds(speeds);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(r.route(key(0), loads), 1u);
  }
  {
    // Prefix affinity: the bound is on load over weight. Loads {30, 10}
    // with the mean 20 and bound 1.25 x 20 = 25: replica 0 is over it
    // unweighted, but at weight 4/3 (30 / (4/3) = 22.5) it is under.
    std::vector<tokenizers::TokenId> prompt(32);
    for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<tokenizers::TokenId>(7 * i + 1);
    for (const bool weighted : {false, true}) {
      SCOPED_TRACE(weighted);
      Router r(policy(RouterPolicy::kPrefixAffinity), 2);
      const std::size_t home = r.route(key(0, prompt, 0, 0), std::vector<double>{0, 0});
      std::vector<double> fast_home = {1, 1};
      fast_home[home] = 2;  // the replica the prompt went to is the faster
      if (weighted) r.set_speeds(fast_home);
      std::vector<double> busy = {10, 10};
      busy[home] = 30;
      EXPECT_EQ(r.route(key(1, prompt, 0, 0), busy) == home, weighted);
    }
  }
  // A speed of 0 or not finite: every replica alike.
  Router r(policy(RouterPolicy::kLeastLoaded), 2);
  r.set_speeds(std::vector<double>{0, 2});
  EXPECT_TRUE(r.weights().empty());
}

TEST(Router, EachPolicyChoosesAsItSays) {
  std::vector<tokenizers::TokenId> a(64), b(64), c(8);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<tokenizers::TokenId>(i);
    b[i] = static_cast<tokenizers::TokenId>(i < 32 ? i : 1000 + i);  // a's first two blocks
  }
  const std::vector<double> even = {0, 0, 0};
  {
    Router r(policy(RouterPolicy::kRoundRobin), 3);
    EXPECT_EQ(r.route(key(0), even), 0u);
    EXPECT_EQ(r.route(key(1), even), 1u);
    EXPECT_EQ(r.route(key(2), even), 2u);
    EXPECT_EQ(r.route(key(3), even), 0u);
  }
  {
    Router r(policy(RouterPolicy::kLeastLoaded), 3);
    EXPECT_EQ(r.route(key(0), std::vector<double>{5, 2, 9}), 1u);
  }
  {
    // Power of two: of the two it draws, the less loaded; never the most
    // loaded of three (it loses to whichever other is drawn).
    Router r(policy(RouterPolicy::kPowerOfTwo, 9), 3);
    for (int i = 0; i < 100; ++i) EXPECT_NE(r.route(key(0), std::vector<double>{1, 100, 2}), 1u);
  }
  {
    Router r(policy(RouterPolicy::kSessionAffinity), 3);
    const auto first = r.route(key(0, {}, 42), even);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(r.route(key(1, {}, 42), std::vector<double>{7, 8, 9}), first);
  }
  {
    Router r(policy(RouterPolicy::kPrefixAffinity), 3);  // 16-token blocks
    const std::vector<double> loads = {10, 10, 10};
    const auto home = r.route(key(0, a, 0, 64), loads);
    EXPECT_EQ(r.last_match_blocks(), 0u);
    // b shares a's first two blocks: it goes where a went.
    EXPECT_EQ(r.route(key(1, b, 0, 64), loads), home);
    EXPECT_EQ(r.last_match_blocks(), 2u);
    // Over the bound (1.25 x the mean), the match is passed over.
    std::vector<double> heavy = {10, 10, 10};
    heavy[home] = 100;
    EXPECT_NE(r.route(key(2, a, 0, 64), heavy), home);
    // A prompt under a block still has a key.
    const auto small = r.route(key(3, c, 0, 8), loads);
    EXPECT_EQ(r.route(key(3, c, 0, 8), loads), small);
  }
  EXPECT_EQ(parse_router_policy("power-of-two"), RouterPolicy::kPowerOfTwo);
  EXPECT_THROW(parse_router_policy("random"), UsageError);
  EXPECT_THROW(Router(RouterSettings{}, 0), UsageError);
}

}  // namespace
}  // namespace tokenscope::engine
