#include "core/summary.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/metrics.h"

namespace tokenscope {
namespace {

RequestRecord make_ok(std::uint64_t id, Nanos send, std::vector<Nanos> events) {
  RequestRecord r;
  r.id = id;
  r.t_sched = r.t_send = send;
  r.event_times = events;
  r.event_tokens.assign(events.size(), 1);
  r.t_first_token = events.front();
  r.t_last_token = r.t_close = events.back();
  r.prompt_tokens = 10;
  r.output_tokens = static_cast<std::int64_t>(events.size());
  return r;
}

TEST(Summary, HasExactlyTheDocumentedKeys) {
  SummaryBuilder b;
  b.add(make_ok(1, 0, {10'000'000, 20'000'000}));
  const auto s = b.build();
  std::size_t expected = 0;
  for (const auto& k : metrics::kScalarKeys) {
    EXPECT_TRUE(s.contains(std::string(k.key))) << k.key;
    ++expected;
  }
  for (const auto& k : metrics::kDistributionKeys) {
    ASSERT_TRUE(s.contains(std::string(k.key))) << k.key;
    for (auto f : metrics::kDistributionFields)
      EXPECT_TRUE(s[std::string(k.key)].contains(std::string(f))) << k.key << "." << f;
    ++expected;
  }
  for (const auto& k : metrics::kObjectKeys) {
    EXPECT_TRUE(s.contains(std::string(k.key))) << k.key;
    ++expected;
  }
  EXPECT_EQ(s.size(), expected) << s.dump();
}

TEST(Summary, DocsListEveryKey) {
  std::ifstream in(TOKENSCOPE_SOURCE_DIR "/docs/metrics.md");
  ASSERT_TRUE(in) << "docs/metrics.md missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (const auto& k : metrics::kScalarKeys)
    EXPECT_NE(doc.find("| `" + std::string(k.key) + "` |"), std::string::npos) << k.key;
  for (const auto& k : metrics::kDistributionKeys)
    EXPECT_NE(doc.find("| `" + std::string(k.key) + "` |"), std::string::npos) << k.key;
  for (const auto& k : metrics::kObjectKeys)
    EXPECT_NE(doc.find("| `" + std::string(k.key) + "` |"), std::string::npos) << k.key;
}

// run.json "tasks" has its own table, in its own section.
TEST(Summary, DocsListEveryTaskKey) {
  std::ifstream in(TOKENSCOPE_SOURCE_DIR "/docs/metrics.md");
  ASSERT_TRUE(in) << "docs/metrics.md missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const auto begin = doc.find("## Agentic tasks (`run.json` → `tasks`");
  ASSERT_NE(begin, std::string::npos);
  const std::string section = doc.substr(begin, doc.find("\n## ", begin + 1) - begin);
  for (const auto& k : metrics::kTaskKeys)
    EXPECT_NE(section.find("| `" + std::string(k.key) + "` |"), std::string::npos) << k.key;
}

TEST(Summary, ComputesLatenciesFromEventTimes) {
  SummaryBuilder b;
  // TTFT 10 ms, then tokens at 20, 30, 40 ms: TPOT 10 ms, E2E 40 ms.
  b.add(make_ok(1, 0, {10'000'000, 20'000'000, 30'000'000, 40'000'000}));
  // A second request sent at 100 ms with one event of 3 tokens after the first.
  auto r = make_ok(2, 100'000'000, {130'000'000, 160'000'000});
  r.event_tokens = {1, 3};
  r.output_tokens = 4;
  b.add(r);
  RequestRecord bad;
  bad.t_sched = bad.t_send = 50'000'000;
  bad.t_close = 300'000'000;
  bad.outcome = Outcome::kRejected;
  b.add(bad);
  const auto s = b.build();
  EXPECT_EQ(s["requests_total"], 3);
  EXPECT_EQ(s["requests_completed"], 2);
  EXPECT_EQ(s["requests_failed"], 1);
  EXPECT_DOUBLE_EQ(s["duration_s"].get<double>(), 0.3);
  EXPECT_EQ(s["output_tokens_total"], 8);
  EXPECT_DOUBLE_EQ(s["ttft_ms"]["min"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(s["ttft_ms"]["max"].get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(s["tpot_ms"]["max"].get<double>(), 10.0);  // (60-30)/3
  EXPECT_DOUBLE_EQ(s["e2e_ms"]["max"].get<double>(), 60.0);
  // ITL: three gaps of 10 ms, and one 30 ms gap carrying 3 tokens = 3 gaps of 10 ms.
  EXPECT_EQ(s["itl_ms"]["count"], 6);
  EXPECT_NEAR(s["itl_ms"]["p99"].get<double>(), 10.0, 0.04);
  EXPECT_NEAR(s["itl_ms"]["mean"].get<double>(), 10.0, 1e-9);
}

// A reasoning model's requests: TTFT at the first reasoning token, TTFO at
// the first answer token, the answer's TPOT over its own tokens; a request
// whose output was all reasoning has no TTFO and misses a TTFO target; a
// request without reasoning has TTFO = TTFT.
TEST(Summary, ReasoningModelsTtfoAndTheAnswersTpot) {
  SummaryBuilder b;
  Slo slo;
  slo.ttfo_ms = 100;
  slo.percentile = 50;
  b.set_slos({{"", slo}});
  // Reasoning at 10, 20, 30 ms; answer at 50, 60 ms.
  auto thinker = make_ok(1, 0, {10'000'000, 20'000'000, 30'000'000, 50'000'000, 60'000'000});
  thinker.reasoning_tokens = 3;
  thinker.t_first_answer = 50'000'000;
  b.add(thinker);
  // All reasoning: no answer token.
  auto unanswered = make_ok(2, 0, {10'000'000, 20'000'000});
  unanswered.reasoning_tokens = 2;
  b.add(unanswered);
  b.add(make_ok(3, 0, {40'000'000, 50'000'000}));  // no reasoning: TTFO is TTFT
  const auto s = b.build();
  EXPECT_EQ(s["requests_with_reasoning"], 2);
  EXPECT_EQ(s["reasoning_tokens_total"], 5);
  EXPECT_EQ(s["ttft_ms"]["count"], 3);
  EXPECT_EQ(s["ttfo_ms"]["count"], 2);
  EXPECT_DOUBLE_EQ(s["ttfo_ms"]["min"].get<double>(), 40.0);
  EXPECT_DOUBLE_EQ(s["ttfo_ms"]["max"].get<double>(), 50.0);
  // The answer's TPOT: (60 - 50) / (2 - 1) for the first, (50 - 40) / 1 for the third.
  EXPECT_EQ(s["tpot_answer_ms"]["count"], 2);
  EXPECT_DOUBLE_EQ(s["tpot_answer_ms"]["max"].get<double>(), 10.0);
  // TPOT counts every token: (60 - 10) / 4.
  EXPECT_DOUBLE_EQ(s["tpot_ms"]["max"].get<double>(), 12.5);
  // The unanswered request misses the target: 2 of 3 met.
  const auto& a = s["slo_attainment"]["default"];
  EXPECT_EQ(a["met"], 2) << a.dump();
  EXPECT_EQ(a["ttfo_ms"]["pass"], true) << a.dump();  // the median is 50 ms
  EXPECT_DOUBLE_EQ(a["ttfo_ms"]["value"].get<double>(), 50.0);
}

TEST(Summary, GapsOfEventsPastTheClientsCapCountInTheItl) {
  SummaryBuilder b;
  auto r = make_ok(1, 0, {10'000'000, 20'000'000});  // kept: one gap of 10 ms
  auto gaps = std::make_shared<LogLinearHistogram>();
  gaps->record(30'000'000, 3);  // dropped: three gaps of 30 ms, one token each
  r.events_dropped = 3;
  r.dropped_event_tokens = 3;
  r.dropped_gaps_ns = gaps;
  r.output_tokens = 5;
  r.t_last_token = r.t_close = 110'000'000;
  b.add(r);
  auto s = b.build();
  EXPECT_EQ(s["itl_ms"]["count"], 4);
  EXPECT_NEAR(s["itl_ms"]["max"].get<double>(), 30.0, 1e-9);  // exact: merged, not re-bucketed
  EXPECT_NEAR(s["itl_ms"]["mean"].get<double>(), 25.0, 1e-9);
  EXPECT_EQ(s["icl_ms"]["count"], 4);

  // Six tokens on the three dropped events: each 30 ms gap is two 15 ms gaps.
  SummaryBuilder b2;
  r.dropped_event_tokens = 6;
  r.output_tokens = 8;
  b2.add(r);
  s = b2.build();
  EXPECT_EQ(s["itl_ms"]["count"], 7);
  EXPECT_NEAR(s["itl_ms"]["max"].get<double>(), 15.0, 15.0 * 0.004);
}

TEST(Summary, HitRateFromServerCounters) {
  SummaryBuilder b;
  ServerCounters c;
  c.prefix_cache_queries_tokens = 400;
  c.prefix_cache_hits_tokens = 100;
  c.preemptions_total = 3;
  c.kv_cache_usage_peak = 0.5;
  b.set_server_counters(c);
  const auto s = b.build();
  EXPECT_DOUBLE_EQ(s["prefix_cache_hit_rate"].get<double>(), 0.25);
  EXPECT_EQ(s["preemptions_total"], 3);
  EXPECT_DOUBLE_EQ(s["kv_cache_usage_peak"].get<double>(), 0.5);
  EXPECT_EQ(s["ttft_ms"]["count"], 0);
  EXPECT_TRUE(s["ttft_ms"]["p50"].is_null());
}

TEST(Summary, ScheduleBasedLatenciesSendLagAndQueue) {
  SummaryBuilder b;
  auto r = make_ok(1, 5'000'000, {15'000'000, 25'000'000});  // sent 5 ms after...
  r.t_sched = 0;                                             // ...its intended time
  r.t_dispatch = 2'000'000;                                  // 2 ms waiting for a slot
  r.event_tokens = {1, 2};
  r.output_tokens = 3;
  r.output_tokens_client = 2;
  b.add(r);
  const auto s = b.build();
  EXPECT_DOUBLE_EQ(s["send_lag_ms"]["max"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(s["queue_ms"]["max"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(s["ttft_ms"]["max"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(s["ttft_sched_ms"]["max"].get<double>(), 15.0);
  EXPECT_DOUBLE_EQ(s["e2e_sched_ms"]["max"].get<double>(), 25.0);
  EXPECT_DOUBLE_EQ(s["ntpot_ms"]["max"].get<double>(), 20.0 / 3);
  EXPECT_EQ(s["icl_ms"]["count"], 1);  // one raw gap of 10 ms...
  EXPECT_NEAR(s["icl_ms"]["max"].get<double>(), 10.0, 0.05);
  EXPECT_EQ(s["itl_ms"]["count"], 2);  // ...carrying two tokens: two ITL gaps of 5 ms
  EXPECT_NEAR(s["itl_ms"]["max"].get<double>(), 5.0, 0.03);
  EXPECT_EQ(s["output_token_mismatches"], 1);
  EXPECT_DOUBLE_EQ(s["duration_send_s"].get<double>(), 0.020);
  EXPECT_TRUE(s["goodput_rps"].is_null());            // no SLO
  EXPECT_TRUE(s["prefix_cache_hit_rate"].is_null());  // no server counters
}

TEST(Summary, WarmupRequestsAreLeftOut) {
  SummaryBuilder b;
  auto w = make_ok(1, 0, {1'000'000'000});
  w.warmup = true;
  b.add(w);
  b.add(make_ok(2, 2'000'000'000, {2'010'000'000}));
  const auto s = b.build();
  EXPECT_EQ(s["requests_total"], 1);
  EXPECT_EQ(s["requests_warmup_excluded"], 1);
  EXPECT_DOUBLE_EQ(s["duration_s"].get<double>(), 0.010);
  EXPECT_DOUBLE_EQ(s["ttft_ms"]["max"].get<double>(), 10.0);
}

TEST(Summary, GoodputAndSloAttainmentPerClass) {
  SummaryBuilder b;
  Slo chat;
  chat.ttft_ms = 50;
  chat.percentile = 90;
  Slo batch;
  batch.e2e_ms = 1000;
  batch.percentile = 50;
  b.set_slos({{"chat", chat}, {"batch", batch}});
  // Chat: TTFT 10, 20, ..., 100 ms: five meet 50 ms; the p90 is 90 ms.
  for (int i = 1; i <= 10; ++i) {
    auto r = make_ok(i, 0, {i * 10'000'000, i * 10'000'000 + 1'000'000});
    r.task_class = "chat";
    r.tenant = i % 2 ? "a" : "b";
    b.add(r);
  }
  // Batch: two fast requests and one failure: the median is the slower success.
  for (int i = 0; i < 2; ++i) {
    auto r = make_ok(20 + i, 0, {100'000'000, 500'000'000 + i * 100'000'000});
    r.task_class = "batch";
    r.tenant = "a";
    b.add(r);
  }
  RequestRecord failed;
  failed.task_class = "batch";
  failed.tenant = "a";
  failed.t_sched = failed.t_send = 0;
  failed.t_close = 1'000'000'000;
  failed.outcome = Outcome::kTimeout;
  b.add(failed);
  const auto s = b.build();
  EXPECT_EQ(s["requests_by_outcome"]["ok"], 12);
  EXPECT_EQ(s["requests_by_outcome"]["timeout"], 1);
  const auto& c = s["slo_attainment"]["chat"];
  EXPECT_EQ(c["met"], 5);
  EXPECT_DOUBLE_EQ(c["met_fraction"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(c["ttft_ms"]["value"].get<double>(), 90.0);
  EXPECT_EQ(c["ttft_ms"]["pass"], false);
  EXPECT_EQ(c["pass"], false);
  const auto& bt = s["slo_attainment"]["batch"];
  EXPECT_EQ(bt["requests"], 3);
  EXPECT_EQ(bt["met"], 2);
  EXPECT_DOUBLE_EQ(bt["e2e_ms"]["value"].get<double>(),
                   600.0);  // rank 2 of 3 (the failure counts as slowest)
  EXPECT_EQ(bt["pass"], true);
  // Goodput: 7 requests met their class's SLO in 1 s.
  EXPECT_DOUBLE_EQ(s["duration_s"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(s["goodput_rps"].get<double>(), 7.0);
  EXPECT_EQ(s["by_class"]["chat"]["completed"], 10);
  EXPECT_EQ(s["by_class"]["batch"]["failed"], 1);
  EXPECT_EQ(s["by_tenant"]["b"]["completed"], 5);
  EXPECT_EQ(s["by_tenant"]["a"]["requests"], 8);
}

TEST(Summary, SteadyWindowLeavesOutRampUpAndDrain) {
  SummaryBuilder b;
  // Ramp-up: one request at 0-100 ms; then four at a time from 100 ms to
  // 1,100 ms (each 100 ms long, back to back); then a lone straggler.
  b.add(make_ok(0, 0, {50'000'000, 100'000'000}));
  std::uint64_t id = 1;
  for (int slot = 0; slot < 10; ++slot)
    for (int k = 0; k < 4; ++k) {
      const Nanos start = 100'000'000 + slot * 100'000'000;
      b.add(make_ok(id++, start, {start + 50'000'000, start + 100'000'000}));
    }
  b.add(make_ok(id++, 1'100'000'000, {1'200'000'000, 1'300'000'000}));
  RequestRecord failed;  // a failure within the plateau: not a completed request
  failed.id = id++;
  failed.t_sched = failed.t_send = 500'000'000;
  failed.t_close = 600'000'000;
  failed.outcome = Outcome::kTimeout;
  b.add(failed);
  const auto [from, to] = b.steady_window();
  EXPECT_EQ(from, 100'000'000);
  EXPECT_EQ(to, 1'100'000'000);
  const auto s = b.build();
  EXPECT_DOUBLE_EQ(s["duration_steady_s"].get<double>(), 1.0);
  // Completed requests ending in (100 ms, 1,100 ms]: the plateau's 40, not
  // the ramp's one ending at 100 ms, nor a failure.
  EXPECT_DOUBLE_EQ(s["request_throughput_steady_rps"].get<double>(), 40.0);
  EXPECT_DOUBLE_EQ(s["duration_s"].get<double>(), 1.3);
}

// The window on hand-computed levels. In flight (ms):
//   0-50: 1, 50-100: 2, 100-150: 3, 150-250: 2, 250-280: 1, 280-300: 2, 300-400: 1
// Time at each level: 1 -> 180 ms, 2 -> 170 ms, 3 -> 50 ms (of 400 ms), so
// the time-weighted median level is 2 (180 < 200 <= 350). The level first
// reaches 2 at 50 ms (B starts) and last drops below it at 300 ms (A ends),
// not at 250 ms (B ends), nor at 400 ms (D, alone, ends).
TEST(Summary, SteadyWindowRunsFromFirstReachingTheMedianLevelToLastLeavingIt) {
  constexpr Nanos ms = 1'000'000;
  SummaryBuilder b;
  b.add(make_ok(0, 0, {20 * ms, 300 * ms}));          // A
  b.add(make_ok(1, 50 * ms, {60 * ms, 250 * ms}));    // B
  b.add(make_ok(2, 100 * ms, {110 * ms, 150 * ms}));  // C
  b.add(make_ok(3, 280 * ms, {290 * ms, 400 * ms}));  // D
  const auto [from, to] = b.steady_window();
  EXPECT_EQ(from, 50 * ms);
  EXPECT_EQ(to, 300 * ms);
  const auto s = b.build();
  EXPECT_DOUBLE_EQ(s["duration_steady_s"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(s["request_throughput_steady_rps"].get<double>(), 12.0);  // C, B, A end inside
  EXPECT_DOUBLE_EQ(s["duration_s"].get<double>(), 0.4);
}

// Requests answered the instant they were sent: nothing is ever in flight
// for any time, so the median level is 0, raised to 1; the window runs from
// the first request to the last.
TEST(Summary, SteadyWindowOfZeroLengthRequests) {
  SummaryBuilder b;
  for (int i = 0; i < 10; ++i) {
    RequestRecord r = make_ok(i, i * 1'000'000, {i * 1'000'000});  // answered the instant it was sent
    b.add(r);
  }
  const auto [from, to] = b.steady_window();
  EXPECT_EQ(from, 0);
  EXPECT_EQ(to, 9'000'000);
  const auto s = b.build();
  EXPECT_DOUBLE_EQ(s["duration_steady_s"].get<double>(), 0.009);
  // Completions in (0, 9 ms]: the one ending as the window opens is left out.
  EXPECT_DOUBLE_EQ(s["request_throughput_steady_rps"].get<double>(), 9 / 0.009);
  EXPECT_DOUBLE_EQ(s["duration_s"].get<double>(), 0.009);
}

// Open loop: SLO verdicts measure TTFT and E2E from when the request was due.
// A request sent 300 ms late whose TTFT is 100 ms fails a 200 ms TTFT target
// (400 ms from its t_sched); judged from the send (closed loop), it passes.
// TPOT does not depend on the start. The reported ttft_ms stays from the send.
TEST(Summary, OpenLoopSloVerdictsCountTheSendLag) {
  auto late = make_ok(1, 300'000'000, {400'000'000, 500'000'000});
  late.t_sched = 0;
  Slo slo;
  slo.ttft_ms = 200;
  slo.tpot_ms = 150;
  slo.e2e_ms = 300;
  for (const bool from_schedule : {true, false}) {
    SummaryBuilder b;
    b.set_slos({{"", slo}});
    b.set_slo_from_schedule(from_schedule);
    b.add(late);
    const auto s = b.build();
    SCOPED_TRACE(from_schedule ? "from the schedule" : "from the send");
    EXPECT_EQ(s["slo_latency_from"], from_schedule ? "schedule" : "send");
    EXPECT_DOUBLE_EQ(s["ttft_ms"]["max"].get<double>(), 100.0);
    EXPECT_DOUBLE_EQ(s["ttft_sched_ms"]["max"].get<double>(), 400.0);
    EXPECT_DOUBLE_EQ(s["duration_s"].get<double>(), 0.5);
    const auto& a = s["slo_attainment"]["default"];
    EXPECT_DOUBLE_EQ(a["ttft_ms"]["value"].get<double>(), from_schedule ? 400.0 : 100.0);
    EXPECT_EQ(a["ttft_ms"]["pass"], !from_schedule);
    EXPECT_DOUBLE_EQ(a["e2e_ms"]["value"].get<double>(), from_schedule ? 500.0 : 200.0);
    EXPECT_EQ(a["e2e_ms"]["pass"], !from_schedule);
    EXPECT_DOUBLE_EQ(a["tpot_ms"]["value"].get<double>(), 100.0);
    EXPECT_EQ(a["tpot_ms"]["pass"], true);
    EXPECT_EQ(a["met"], from_schedule ? 0 : 1);
    EXPECT_DOUBLE_EQ(a["met_fraction"].get<double>(), from_schedule ? 0.0 : 1.0);
    EXPECT_DOUBLE_EQ(a["goodput_rps"].get<double>(), from_schedule ? 0.0 : 2.0);
    EXPECT_EQ(a["pass"], !from_schedule);
    EXPECT_DOUBLE_EQ(s["goodput_rps"].get<double>(), from_schedule ? 0.0 : 2.0);
  }
}

// Behind a concurrency cap the request is due when it got its slot
// (t_dispatch): the wait in the queue is the client's choice, not the
// server's latency. Per class: the verdicts, goodput and by_class agree.
TEST(Summary, SloVerdictsStartAtTheDispatchBehindACap) {
  SummaryBuilder b;
  Slo slo;
  slo.ttft_ms = 200;
  slo.e2e_ms = 300;
  b.set_slos({{"lagged", slo}, {"queued", slo}});
  b.set_slo_from_schedule(true);
  auto lagged = make_ok(1, 300'000'000, {400'000'000, 500'000'000});  // 300 ms late, no cap
  lagged.t_sched = 0;
  lagged.task_class = "lagged";
  auto queued = make_ok(2, 260'000'000, {360'000'000, 460'000'000});  // 250 ms in the queue, then 10 ms
  queued.t_sched = 0;
  queued.t_dispatch = 250'000'000;
  queued.task_class = "queued";
  b.add(lagged);
  b.add(queued);
  const auto s = b.build();
  EXPECT_DOUBLE_EQ(s["duration_s"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(s["queue_ms"]["max"].get<double>(), 250.0);
  EXPECT_EQ(s["queue_ms"]["count"], 1);
  EXPECT_DOUBLE_EQ(s["send_lag_ms"]["min"].get<double>(), 260.0);  // send lag includes the queue
  EXPECT_DOUBLE_EQ(s["ttft_sched_ms"]["min"].get<double>(), 360.0);
  const auto& q = s["slo_attainment"]["queued"];
  EXPECT_DOUBLE_EQ(q["ttft_ms"]["value"].get<double>(), 110.0);  // 360 - 250
  EXPECT_DOUBLE_EQ(q["e2e_ms"]["value"].get<double>(), 210.0);   // 460 - 250
  EXPECT_EQ(q["met"], 1);
  EXPECT_EQ(q["pass"], true);
  EXPECT_DOUBLE_EQ(q["goodput_rps"].get<double>(), 2.0);
  const auto& l = s["slo_attainment"]["lagged"];
  EXPECT_DOUBLE_EQ(l["ttft_ms"]["value"].get<double>(), 400.0);
  EXPECT_EQ(l["met"], 0);
  EXPECT_EQ(l["pass"], false);
  EXPECT_DOUBLE_EQ(s["goodput_rps"].get<double>(), 2.0);  // the queued request only, in 0.5 s
  EXPECT_DOUBLE_EQ(s["by_class"]["queued"]["goodput_rps"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(s["by_class"]["lagged"]["goodput_rps"].get<double>(), 0.0);
  EXPECT_EQ(s["slo_latency_from"], "schedule");
}

// Completed requests without a usage count from the server: counted apart,
// with those whose output the client counted (--tokenizer); failures and
// requests with usage are not.
TEST(Summary, RequestsWithoutUsageAreCounted) {
  SummaryBuilder b;
  b.add(make_ok(1, 0, {1'000'000, 2'000'000}));  // usage: 2 tokens
  auto no_usage = make_ok(2, 0, {1'000'000, 2'000'000, 3'000'000});
  no_usage.output_tokens = -1;
  no_usage.output_tokens_client = 3;
  b.add(no_usage);
  auto counted = make_ok(3, 0, {1'000'000, 2'000'000});
  counted.output_tokens = 5;  // the tokenizer's count of the text
  counted.output_tokens_counted_by_client = true;
  counted.output_tokens_client = 2;
  b.add(counted);
  RequestRecord failed;
  failed.t_sched = failed.t_send = 0;
  failed.t_close = 4'000'000;
  failed.outcome = Outcome::kConnectError;
  b.add(failed);  // output_tokens -1, but failed
  const auto s = b.build();
  EXPECT_EQ(s["requests_without_usage"], 2);
  EXPECT_EQ(s["output_tokens_client_counted"], 1);
  EXPECT_EQ(s["output_tokens_total"], 2 + 0 + 5);
  EXPECT_EQ(s["output_token_mismatches"], 1);  // the client-counted one: 5 tokens in 2 events
  EXPECT_EQ(s["requests_completed"], 3);
}

}  // namespace
}  // namespace tokenscope
