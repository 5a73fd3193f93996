// The load driver against the in-process simulator over loopback HTTP:
// open loop, the concurrency cap, closed loop, multi-turn sessions, faults
// (the client's outcomes equal the server's injected-fault counters) and
// stopping. Bounded: each run is a few hundred short requests.
#include "bench/runner.h"

#include "core/error.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "bench/bench_workload.h"
#include "engine/catalog.h"
#include "serve/metrics.h"
#include "serve/server_app.h"

namespace tokenscope::bench {
namespace {

struct Target {
  explicit Target(double step_ms, std::vector<serve::FaultRule> faults = {}) {
    engine::EngineSettings s;
    s.model = "llama-3-8b";
    s.gpu = "h100-sxm";
    s.fixed_step_ms = step_ms;
    const auto eff = engine::resolve_engine(s, engine::Catalog::builtin());
    serve::ServerAppSettings ss;
    ss.faults = std::move(faults);
    ss.fault_seed = 5;
    app = std::make_unique<serve::ServerApp>(eff, s, std::make_unique<engine::FixedCostModel>(step_ms * 1e-3),
                                             ss);
    app->start();
    endpoint = net::Endpoint::parse_url("http://127.0.0.1:" + std::to_string(app->port()));
  }
  std::unique_ptr<serve::ServerApp> app;
  net::Endpoint endpoint;
};

workload::Workload small_workload(std::size_t n, std::uint32_t input, std::uint32_t output) {
  workload::Workload w;
  for (std::size_t i = 0; i < n; ++i) {
    workload::Request r;
    r.id = i;
    r.input_tokens = input;
    r.output_tokens = output;
    w.requests.push_back(r);
  }
  w.description = "test";
  return w;
}

RequestSettings completions() {
  RequestSettings rs;
  rs.model = "llama-3-8b";
  return rs;
}

// counters: when given, the client's counters after the run; bodies: the
// bodies written apart and those not ready (LoadPlan::bodies_apart).
std::vector<RequestRecord> run(const workload::Workload& w, LoadPlan plan, const Target& t,
                               RequestSettings rs = completions(), net::ClientCounters* counters = nullptr,
                               std::pair<std::uint64_t, std::uint64_t>* bodies = nullptr) {
  RecordQueue q;
  Runner runner(w, std::move(plan), t.endpoint, {}, std::move(rs), q);
  runner.start();
  while (!runner.wait_for(1000)) {
  }
  runner.join();
  if (counters) *counters = runner.client_counters();
  if (bodies) *bodies = {runner.bodies_written_apart(), runner.bodies_written_by_client_threads()};
  std::vector<RequestRecord> out;
  q.drain(out);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

// The most requests in flight at once, from [t_send, t_close] intervals.
int max_overlap(const std::vector<RequestRecord>& rs) {
  std::vector<std::pair<Nanos, int>> ev;
  for (const auto& r : rs) {
    ev.emplace_back(r.t_send, 1);
    ev.emplace_back(r.t_close, -1);
  }
  std::sort(ev.begin(), ev.end());  // an end before a start at the same time
  int cur = 0, best = 0;
  for (const auto& [t, d] : ev) best = std::max(best, cur += d);
  return best;
}

// --cancel: the spec, the share chosen by the seed (the same ids every
// time, about the share of them), the delays drawn per request.
TEST(CancelPlan, ParsesAndChoosesTheShare) {
  const CancelPlan tokens = parse_cancel_plan("0.25:after-tokens=7", 42);
  EXPECT_EQ(tokens.when, CancelPlan::When::kAfterTokens);
  EXPECT_EQ(tokens.tokens, 7u);
  int chosen = 0;
  for (std::uint64_t id = 0; id < 10000; ++id) chosen += tokens.chosen(id) ? 1 : 0;
  EXPECT_NEAR(chosen, 2500, 150);  // binomial sd 43
  EXPECT_EQ(tokens.chosen(17), parse_cancel_plan("0.25:after-tokens=7", 42).chosen(17));
  EXPECT_FALSE(parse_cancel_plan("0:before-first-token", 1).chosen(3));
  EXPECT_TRUE(parse_cancel_plan("1:before-first-token", 1).chosen(3));
  const CancelPlan ms = parse_cancel_plan("0.5:after-ms=uniform:100:200", 7);
  for (std::uint64_t id = 0; id < 100; ++id) {
    EXPECT_GE(ms.delay_ns(id), 100 * kNanosPerMilli);
    EXPECT_LE(ms.delay_ns(id), 200 * kNanosPerMilli);
  }
  EXPECT_EQ(ms.delay_ns(5), parse_cancel_plan("0.5:after-ms=uniform:100:200", 7).delay_ns(5));
  for (const char* bad : {"0.5", "x:after-tokens=3", "-0.1:after-tokens=3", "1.01:before-first-token",
                          "0.5:after-tokens=0", "0.5:after-tokens=many", "0.5:soon", "0.5:after-ms=weird:1"})
    EXPECT_THROW(parse_cancel_plan(bad, 0), UsageError) << bad;
}

// The writer's empty batch trades places with the queue; a batch that holds
// records already gets the new ones after them. Either way each record comes
// out once, in the order pushed, and the queue is left empty.
TEST(RecordQueue, DrainsEveryRecordOnceInOrderIntoAnEmptyOrAFilledBatch) {
  RecordQueue q;
  const auto push = [&](std::uint64_t from, std::uint64_t to) {
    for (std::uint64_t id = from; id < to; ++id) {
      RequestRecord r;
      r.id = id;
      q.push(std::move(r));
    }
  };
  const auto ids = [](const std::vector<RequestRecord>& v) {
    std::vector<std::uint64_t> out;
    for (const auto& r : v) out.push_back(r.id);
    return out;
  };
  std::vector<RequestRecord> batch;
  push(0, 3);
  q.drain(batch);
  EXPECT_EQ(ids(batch), (std::vector<std::uint64_t>{0, 1, 2}));
  push(3, 5);
  q.drain(batch);  // appended after what the batch holds
  EXPECT_EQ(ids(batch), (std::vector<std::uint64_t>{0, 1, 2, 3, 4}));
  q.drain(batch);  // nothing new
  EXPECT_EQ(batch.size(), 5u);
  batch.clear();
  push(5, 6);
  q.drain(batch);  // the swap again: only what was pushed since
  EXPECT_EQ(ids(batch), (std::vector<std::uint64_t>{5}));
  batch.clear();
  q.drain(batch);
  EXPECT_TRUE(batch.empty());
}

// A bounded queue: a push that finds the limit pending waits (counted) until
// a drain takes them, and lands after the drain; the push that half fills it
// wakes the drainer's pause; close() frees a waiting push and stops later
// ones from waiting.
TEST(RecordQueue, APushBeyondTheLimitWaitsForADrainOrAClose) {
  RecordQueue q;
  q.set_limit(3);
  const auto record = [](std::uint64_t id) {
    RequestRecord r;
    r.id = id;
    return r;
  };
  // What another thread does, polled until it happens (the bound only ends
  // a test that fails: the queue is closed and the thread joined).
  const auto eventually = [](const std::function<bool()>& done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    return done();
  };
  // The drainer's pause returns before its timeout for a full or closed
  // queue (it would return false at the timeout).
  const auto patience = std::chrono::seconds(20);
  for (std::uint64_t id = 0; id < 3; ++id) q.push(record(id));
  EXPECT_EQ(q.waits(), 0u);
  EXPECT_TRUE(q.wait_half_full(patience));  // full already: returns at once
  std::atomic<bool> pushed{false};
  std::thread pusher([&] {
    q.push(record(3));
    pushed = true;
  });
  if (!eventually([&] { return q.waits() == 1; })) {  // it waits (counted before it sleeps)
    q.close();
    pusher.join();
    FAIL() << "the push beyond the limit did not wait";
  }
  EXPECT_FALSE(pushed.load());
  EXPECT_TRUE(q.wait_half_full(patience));
  std::vector<RequestRecord> batch;
  q.drain(batch);  // only the three: the waiting push cannot land while they are pending
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch.back().id, 2u);
  const bool freed = eventually([&] { return pushed.load(); });
  if (!freed) q.close();
  pusher.join();
  ASSERT_TRUE(freed) << "the drain did not free the waiting push";
  EXPECT_EQ(q.waits(), 1u);
  batch.clear();
  q.drain(batch);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].id, 3u);

  // Full again, and nobody drains: close() lets the waiting push through.
  for (std::uint64_t id = 4; id < 7; ++id) q.push(record(id));
  pushed = false;
  std::thread blocked([&] {
    q.push(record(7));
    pushed = true;
  });
  const bool waited = eventually([&] { return q.waits() == 2; });
  EXPECT_TRUE(waited);
  EXPECT_FALSE(pushed.load());
  q.close();
  const bool released = eventually([&] { return pushed.load(); });
  std::vector<RequestRecord> taken;
  if (!released) q.drain(taken);  // frees it another way, to end the test
  blocked.join();
  ASSERT_TRUE(released) << "close() did not free the waiting push";
  q.push(record(8));  // five pending, over the limit: a closed queue never waits
  EXPECT_EQ(q.waits(), 2u);
  batch.clear();
  q.drain(batch);
  ASSERT_EQ(batch.size(), 5u);
  EXPECT_EQ(batch.back().id, 8u);

  // A drainer pausing on a queue that is not half full is woken by the push
  // that half fills it (long before the limit, so that no push need wait
  // for its wake-up), and by a close.
  RecordQueue woken;
  woken.set_limit(4);
  bool woke = false;
  std::thread drainer([&] { woke = woken.wait_half_full(patience); });
  EXPECT_TRUE(eventually([&] { return woken.pausing() == 1; }));
  woken.push(record(0));
  woken.push(record(1));  // half full: wakes the drainer (the join would wait out its patience)
  drainer.join();
  EXPECT_TRUE(woke);
  EXPECT_EQ(woken.waits(), 0u);
  RecordQueue closing;
  closing.set_limit(2);
  std::thread closed_drainer([&] { woke = closing.wait_half_full(patience); });
  EXPECT_TRUE(eventually([&] { return closing.pausing() == 1; }));
  closing.close();  // nothing pending: the close alone ends the pause
  closed_drainer.join();
  EXPECT_TRUE(woke);
  EXPECT_TRUE(closing.wait_half_full(patience));

  // Unbounded (the default): no push ever waits.
  RecordQueue open;
  for (std::uint64_t id = 0; id < 10'000; ++id) open.push(record(id));
  EXPECT_EQ(open.waits(), 0u);
}

TEST(Runner, OpenLoopSendsOnScheduleAndCountsEveryToken) {
  Target target(0.5);
  const auto w = small_workload(60, 20, 6);
  LoadPlan plan;
  for (std::uint32_t i = 0; i < 60; ++i) plan.schedule.emplace_back(i, i * 5 * kNanosPerMilli);
  plan.threads = 2;
  const auto rs = run(w, plan, target);
  ASSERT_EQ(rs.size(), 60u);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const auto& r = rs[i];
    EXPECT_EQ(r.id, i);
    ASSERT_EQ(r.outcome, Outcome::kOk) << r.detail;
    EXPECT_EQ(r.http_status, 200);
    EXPECT_EQ(r.output_tokens, 6);  // ignore_eos: exactly max_tokens, from usage
    EXPECT_EQ(r.output_tokens_client, 6);
    EXPECT_EQ(r.event_times.size(), 6u);
    EXPECT_EQ(r.prompt_tokens, 20);
    EXPECT_GE(r.t_send, r.t_sched);
    EXPECT_LT(r.t_send, r.t_first_token);
    EXPECT_LE(r.t_last_token, r.t_close);
    EXPECT_EQ(r.response_id.rfind("cmpl-", 0), 0u);
    if (i > 0) {
      EXPECT_EQ(r.t_sched - rs[i - 1].t_sched, 5 * kNanosPerMilli);
    }
  }
}

// Open loop: the idle connections kept are those due within a second
// (and the follow-up turns waiting), except once the schedule ends within
// that second: then none is closed while anything remains to be sent
// (closing them one after another on the sending core as the end neared
// delayed the last sends), and all may go once everything is sent.
TEST(Runner, IdleTargetKeepsThePoolToTheLastSend) {
  // 100 requests, 40 sent, the first 70 due within the second: 30 kept, and the turns waiting.
  EXPECT_EQ(open_loop_idle_target(100, 40, 70, 0, false), 30u);
  EXPECT_EQ(open_loop_idle_target(100, 40, 70, 5, false), 35u);
  EXPECT_EQ(open_loop_idle_target(100, 70, 70, 0, false), 0u);  // a quiet stretch ahead: none
  // The end within the second: kept as it is while sends remain.
  EXPECT_EQ(open_loop_idle_target(100, 40, 100, 0, false), std::nullopt);
  EXPECT_EQ(open_loop_idle_target(100, 99, 100, 0, false), std::nullopt);
  EXPECT_EQ(open_loop_idle_target(100, 100, 100, 2, false), std::nullopt);  // follow-up turns to come
  EXPECT_EQ(open_loop_idle_target(100, 100, 100, 0, true), std::nullopt);   // requests waiting for a slot
  EXPECT_EQ(open_loop_idle_target(100, 100, 100, 0, false), 0u);            // everything sent
}

// Idle connections beyond the requests due within a second go in a quiet
// stretch of the schedule: the next request after it opens a connection.
TEST(Runner, IdleConnectionsCloseForAQuietStretch) {
  Target target(1.0);
  const auto w = small_workload(9, 10, 5);
  LoadPlan plan;
  for (std::uint32_t i = 0; i < 8; ++i) plan.schedule.emplace_back(i, 0);  // 8 in flight at once
  plan.schedule.emplace_back(8, 2 * kNanosPerSecond);  // then none for 2 s (beyond the horizon for 1 s)
  net::ClientCounters c;
  const auto out = run(w, std::move(plan), target, completions(), &c);
  EXPECT_EQ(out.size(), 9u);
  for (const auto& r : out) EXPECT_EQ(r.outcome, Outcome::kOk) << r.detail;
  EXPECT_GE(c.idle_closed, 8u);
  EXPECT_EQ(c.connects, 9u);  // the 8 warm ones, then one for the last request
  EXPECT_EQ(c.reused, 0u);
}

// Bodies written ahead on their own thread: each job gets its own body or
// none (never another's), the thread stays within its bound, and a jump of
// the taker moves the thread past the jobs skipped. Every wait is for the
// thread's own progress, bounded.
TEST(BodiesAhead, EachJobGetsItsOwnBodyAndTheThreadFollowsTheTaker) {
  std::mutex m;
  std::vector<std::size_t> built;
  std::condition_variable more;
  auto body = [](std::size_t k) { return "body-" + std::to_string(k); };
  BodiesAhead ahead(
      2000,
      [&](std::size_t k) -> BodiesAhead::Body {
        {
          std::lock_guard lock(m);
          built.push_back(k);
        }
        more.notify_all();
        if (k % 7 == 3) return nullptr;  // left to the taker
        return std::make_shared<const std::string>(body(k));
      },
      8);
  // Waits until job k was written (the thread's own pace; 30 s bound).
  auto wait_built = [&](std::size_t k) {
    std::unique_lock lock(m);
    return more.wait_for(lock, std::chrono::seconds(30),
                         [&] { return std::find(built.begin(), built.end(), k) != built.end(); });
  };
  ahead.start();
  // Jobs 16-31 written means 0-15 were handed over (batches of 16): each
  // of them comes out as its own body, but those left to the taker.
  ASSERT_TRUE(wait_built(31));
  for (std::size_t k = 0; k < 16; ++k) {
    const auto b = ahead.take(k);
    if (k % 7 == 3) {
      EXPECT_EQ(b, nullptr) << k;
    } else {
      ASSERT_NE(b, nullptr) << k;
      EXPECT_EQ(*b, body(k));
    }
  }
  EXPECT_EQ(ahead.taken(), 14u);
  EXPECT_EQ(ahead.missed(), 2u);
  // Bounded by 8 ready (and a batch in hand): far from job 100 until asked.
  {
    std::lock_guard lock(m);
    EXPECT_LT(*std::max_element(built.begin(), built.end()), 100u);
  }
  // The taker jumps to 1000: whatever comes out is its own or nothing, and
  // the thread goes on from there, not from where it was. Each take hands
  // over what is ready (the stale bodies too), which makes room.
  for (const std::size_t k : {1000, 1001}) {
    if (k == 1001) {
      ASSERT_TRUE(wait_built(1015));  // its batch made after the stale one was handed over
    }
    const auto b = ahead.take(k);
    if (b) {
      EXPECT_EQ(*b, body(k));
    }
  }
  ASSERT_TRUE(wait_built(1031));  // so 1000-1015 were handed over
  const auto b = ahead.take(1002);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(*b, body(1002));
  {
    std::lock_guard lock(m);
    for (const auto k : built) EXPECT_TRUE(k < 100 || k >= 1000) << k;
  }
  ahead.finish();  // wakes the thread from its wait for room
}

// An open loop whose bodies are written apart sends every request with its
// own prompt: the server counts each one's own planned length (lengths all
// different, so a body sent for another request would show), as it does
// when the client thread writes them; every body sent was either written
// apart or by the client thread, and the first ones were ready before the
// first send.
TEST(Runner, BodiesWrittenApartAreEachRequestsOwn) {
  Target target(0.2);
  auto w = small_workload(80, 10, 2);
  for (std::size_t i = 0; i < w.requests.size(); ++i)
    w.requests[i].input_tokens = 8 + static_cast<std::uint32_t>(i);
  LoadPlan plan;
  // The first at the epoch: start() waits for the first bodies written apart.
  for (std::uint32_t i = 0; i < 80; ++i) plan.schedule.emplace_back(i, i * kNanosPerMilli);
  plan.threads = 2;
  auto apart_plan = plan;
  apart_plan.bodies_apart = true;
  std::pair<std::uint64_t, std::uint64_t> bodies{0, 0}, none{9, 9};
  const auto apart = run(w, apart_plan, target, completions(), nullptr, &bodies);
  const auto own = run(w, plan, target, completions(), nullptr, &none);
  ASSERT_EQ(apart.size(), 80u);
  ASSERT_EQ(own.size(), 80u);
  for (std::size_t i = 0; i < 80; ++i) {
    ASSERT_EQ(apart[i].outcome, Outcome::kOk) << apart[i].detail;
    ASSERT_EQ(own[i].outcome, Outcome::kOk) << own[i].detail;
    EXPECT_EQ(apart[i].prompt_tokens, static_cast<std::int64_t>(8 + i));
    EXPECT_EQ(apart[i].prompt_tokens, own[i].prompt_tokens);
    EXPECT_EQ(apart[i].prompt_tokens_planned, own[i].prompt_tokens_planned);
  }
  EXPECT_EQ(bodies.first + bodies.second, 80u);
  EXPECT_GT(bodies.first, 0u);
  EXPECT_EQ(none, (std::pair<std::uint64_t, std::uint64_t>{0, 0}));  // off: no thread, nothing counted
}

TEST(Runner, ConcurrencyCapQueuesTheRest) {
  Target target(1.0);
  const auto w = small_workload(24, 10, 5);
  LoadPlan plan;
  for (std::uint32_t i = 0; i < 24; ++i) plan.schedule.emplace_back(i, 0);
  plan.max_concurrency = 3;
  const auto rs = run(w, plan, target);
  ASSERT_EQ(rs.size(), 24u);
  EXPECT_LE(max_overlap(rs), 3);
  std::size_t queued = 0;
  for (const auto& r : rs) {
    EXPECT_EQ(r.outcome, Outcome::kOk) << r.detail;
    if (r.t_dispatch >= 0) {
      ++queued;
      EXPECT_GE(r.t_dispatch, r.t_sched);
      EXPECT_GE(r.t_send, r.t_dispatch);
    }
  }
  EXPECT_EQ(queued, 21u);  // all but the first three waited for a slot
}

// The cap is one for all client threads. Checked on the server's side, by
// its own clock: each request is in flight there from its arrival to its
// last token's write, which comes before the client sees the end and frees
// the slot, so a global cap of 3 allows at most 3 such intervals at once; a
// cap per thread would allow 3 per thread, and the requests (all due at
// t = 0, each at least 41 steps of 2 ms) would overlap up to 3 x T.
TEST(Runner, ConcurrencyCapHoldsAcrossClientThreads) {
  for (const unsigned threads : {2u, 4u}) {
    SCOPED_TRACE(std::to_string(threads) + " client threads");
    engine::EngineSettings s;
    s.fixed_step_ms = 2.0;
    const auto eff = engine::resolve_engine(s, engine::Catalog::builtin());
    serve::ServerAppSettings ss;
    const auto trace =
        std::filesystem::temp_directory_path() /
        ("tokenscope_runner_cap_" + std::to_string(::getpid()) + "_" + std::to_string(threads) + ".jsonl");
    ss.trace_emissions = trace.string();
    serve::ServerApp app(eff, s, std::make_unique<engine::FixedCostModel>(2e-3), ss);
    app.start();
    const auto w = small_workload(24, 10, 40);
    LoadPlan plan;
    for (std::uint32_t i = 0; i < 24; ++i) plan.schedule.emplace_back(i, 0);
    plan.max_concurrency = 3;
    plan.threads = threads;
    RecordQueue q;
    Runner runner(w, std::move(plan),
                  net::Endpoint::parse_url("http://127.0.0.1:" + std::to_string(app.port())), {},
                  completions(), q);
    runner.start();
    while (!runner.wait_for(1000)) {
    }
    runner.join();
    std::vector<RequestRecord> rs;
    q.drain(rs);
    app.stop(0.0, 0.5);  // flushes the trace

    ASSERT_EQ(rs.size(), 24u);
    std::size_t waited = 0;
    for (const auto& r : rs) {
      EXPECT_EQ(r.outcome, Outcome::kOk) << r.detail;
      EXPECT_EQ(r.output_tokens, 40);
      if (r.t_dispatch >= 0) {
        EXPECT_GE(r.t_dispatch, r.t_sched);
        EXPECT_GE(r.t_send, r.t_dispatch);
        waited += r.t_dispatch > r.t_sched;
      }
    }
    EXPECT_GE(waited, 1u);  // queue_ms > 0
    EXPECT_LE(max_overlap(rs), 3);

    // The server's intervals: arrival to the last token's write.
    std::map<std::uint64_t, std::pair<Nanos, Nanos>> on_server;  // engine id -> (arrival, last write)
    {
      std::ifstream in(trace);
      for (std::string line; std::getline(in, line);) {
        const auto e = nlohmann::json::parse(line);
        auto& [arrival, last] = on_server.try_emplace(e["req"].get<std::uint64_t>(), -1, -1).first->second;
        if (e.contains("arrival_ns"))
          arrival = e["arrival_ns"].get<Nanos>();
        else
          last = std::max(last, e["write_ns"].get<Nanos>());
      }
    }
    std::filesystem::remove(trace);
    ASSERT_EQ(on_server.size(), 24u);
    std::vector<std::pair<Nanos, int>> ev;  // an end sorts before a start at the same time
    for (const auto& [id, t] : on_server) {
      ASSERT_GE(t.first, 0) << id;
      ASSERT_GE(t.second, t.first) << id;
      ev.emplace_back(t.first, 1);
      ev.emplace_back(t.second, -1);
    }
    std::sort(ev.begin(), ev.end());
    int now = 0, most = 0;
    for (const auto& [t, d] : ev) most = std::max(most, now += d);
    EXPECT_LE(most, 3);
    // The cap was reached (else this test could not see it broken).
    EXPECT_EQ(most, 3);
  }
}

TEST(Runner, ClosedLoopKeepsNUsersBusy) {
  Target target(0.5);
  const auto w = small_workload(10, 10, 4);  // wraps around with fresh ids
  LoadPlan plan;
  plan.closed_loop = true;
  plan.user_stages = {{4, 1e9}};
  plan.max_requests = 30;
  plan.threads = 2;
  const auto rs = run(w, plan, target);
  ASSERT_EQ(rs.size(), 30u);
  EXPECT_LE(max_overlap(rs), 4);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(rs[i].id, i);
    EXPECT_EQ(rs[i].outcome, Outcome::kOk);
  }
}

TEST(Runner, SessionTurnsFollowTheirPreviousTurnWithGrowingHistory) {
  Target target(0.5);
  const auto b = parse_workload_yaml(R"(
num_requests: 5
arrival: {process: constant, rate_rps: 100}
classes:
  - name: agent
    input_len: fixed:40
    output_len: fixed:8
    turns: {count: 3, think_ms: 20, input_len: fixed:10}
)",
                                     "sessions.yaml", 0);
  LoadPlan plan;
  plan.turns = b.turns;
  for (std::uint32_t i = 0; i < b.workload.requests.size(); ++i)
    if (b.turns[i].turn == 0) plan.schedule.emplace_back(i, b.workload.requests[i].arrival_ns);
  for (const auto api : {Api::kCompletions, Api::kChat}) {
    RequestSettings rs = completions();
    rs.api = api;
    const auto recs = run(b.workload, plan, target, rs);
    ASSERT_EQ(recs.size(), 15u);
    for (std::size_t i = 0; i < recs.size(); ++i) {
      const auto& r = recs[i];
      ASSERT_EQ(r.outcome, Outcome::kOk) << r.detail;
      EXPECT_EQ(r.session, static_cast<std::int64_t>(i / 3));
      EXPECT_EQ(r.turn, i % 3);
      if (r.turn > 0) {
        const auto& prev = recs[i - 1];
        EXPECT_EQ(r.t_sched, prev.t_close + 20 * kNanosPerMilli);
        // The history comes back: the last prompt, its answer and the new message.
        EXPECT_GE(r.prompt_tokens, prev.prompt_tokens + prev.output_tokens + 10) << i;
      }
    }
  }
}

// Every fault the server injected is matched, by the response id its
// emission trace names, to the outcome of that very request; a request the
// server did not fault may still time out on a slow machine.
TEST(Runner, FaultOutcomesEqualTheServersInjectedFaults) {
  engine::EngineSettings s;
  s.fixed_step_ms = 0.5;
  const auto eff = engine::resolve_engine(s, engine::Catalog::builtin());
  serve::ServerAppSettings ss;
  ss.faults = {{serve::FaultKind::kHttp5xx, 0.08, 0},
               {serve::FaultKind::kHttp429, 0.08, 0},
               {serve::FaultKind::kReset, 0.08, 0},
               {serve::FaultKind::kMalformed, 0.08, 0},
               {serve::FaultKind::kStall, 0.08, 20000}};
  ss.fault_seed = 5;
  const auto trace = std::filesystem::temp_directory_path() /
                     ("tokenscope_runner_faults_" + std::to_string(::getpid()) + ".jsonl");
  ss.trace_emissions = trace.string();
  serve::ServerApp app(eff, s, std::make_unique<engine::FixedCostModel>(0.5e-3), ss);
  app.start();
  const auto w = small_workload(200, 10, 6);
  LoadPlan plan;
  for (std::uint32_t i = 0; i < 200; ++i) plan.schedule.emplace_back(i, i * kNanosPerMilli);
  // Stalls (20 s) time out; every other request has 8 s, which even a loaded
  // machine under AddressSanitizer met (2 s once let a malformed-stream
  // fault time out before the server reached it).
  plan.timeout_s = 8.0;
  RecordQueue q;
  Runner runner(w, std::move(plan),
                net::Endpoint::parse_url("http://127.0.0.1:" + std::to_string(app.port())), {}, completions(),
                q);
  runner.start();
  while (!runner.wait_for(1000)) {
  }
  runner.join();
  std::vector<RequestRecord> rs;
  q.drain(rs);
  ASSERT_EQ(rs.size(), 200u);
  app.stop(0.0, 0.5);

  // Each fault line names the request it hit by the X-Request-Id the client
  // sent (the record's id) and by its response id.
  std::map<std::uint64_t, std::pair<std::string, std::string>> fault_of;  // record id -> (kind, response id)
  std::map<std::string, int> injected;
  {
    std::ifstream in(trace);
    for (std::string line; std::getline(in, line);) {
      const auto e = nlohmann::json::parse(line);
      if (!e.contains("fault")) continue;
      ASSERT_TRUE(e.contains("xrid")) << "a fault line without the client's request id: " << line;
      const std::uint64_t id = std::stoull(e["xrid"].get<std::string>());
      EXPECT_TRUE(
          fault_of.emplace(id, std::pair{e["fault"].get<std::string>(), e["resp"].get<std::string>()}).second)
          << line;
      ++injected[e["fault"]];
    }
  }
  std::filesystem::remove(trace);
  for (const char* kind : {"http_5xx", "http_429", "reset", "malformed", "stall"}) {
    EXPECT_GT(injected[kind], 0) << kind;
    EXPECT_EQ(injected[kind], app.metrics().value("tokenscope:faults_injected_total", kind)) << kind;
  }
  std::map<std::uint64_t, const RequestRecord*> by_id;
  for (const auto& r : rs) EXPECT_TRUE(by_id.emplace(r.id, &r).second) << r.id;
  // The response id, where the record has one (the completion's, or the one
  // an injected HTTP error names), agrees with the fault's.
  const std::regex id_re("(chat)?cmpl-[0-9a-f]{16}");
  const std::map<std::string, std::pair<Outcome, int>> expected = {
      {"http_5xx", {Outcome::kHttpError, 500}},
      {"http_429", {Outcome::kHttpError, 429}},
      {"reset", {Outcome::kConnectError, 200}},
      {"malformed", {Outcome::kProtocolError, 200}},
      {"stall", {Outcome::kTimeout, 200}}};
  std::set<std::uint64_t> faulted;
  for (const auto& [id, fault] : fault_of) {
    const auto& [kind, response] = fault;
    const auto it = by_id.find(id);
    ASSERT_NE(it, by_id.end()) << kind << " injected into request " << id << ", which has no record";
    const RequestRecord& r = *it->second;
    faulted.insert(r.id);
    EXPECT_EQ(r.outcome, expected.at(kind).first) << kind << " " << id << ": " << r.detail;
    EXPECT_EQ(r.http_status, expected.at(kind).second) << kind << " " << id;
    std::string named = r.response_id;
    std::smatch m;
    if (named.empty() && std::regex_search(r.detail, m, id_re)) named = m.str();
    if (!named.empty()) {
      EXPECT_EQ(named, response) << kind << " " << id;
    }
  }
  int slow = 0;
  for (const auto& r : rs) {
    if (faulted.count(r.id)) continue;
    EXPECT_TRUE(r.outcome == Outcome::kOk || r.outcome == Outcome::kTimeout) << r.id << ": " << r.detail;
    slow += r.outcome == Outcome::kTimeout;
  }
  if (slow > 0) std::cout << slow << " request(s) without a fault timed out (a slow machine)\n";
}

TEST(Runner, StoppingKeepsFinishedRequestsAndCancelsTheRest) {
  Target target(2.0);
  const auto w = small_workload(40, 10, 400);  // long streams: about 0.8 s each
  LoadPlan plan;
  // Sends spread over 20 s, so the first stream ends long before the last
  // send is due however slow the build (sanitizers at -O0) runs.
  for (std::uint32_t i = 0; i < 40; ++i) plan.schedule.emplace_back(i, i * 500 * kNanosPerMilli);
  RecordQueue q;
  Runner runner(w, plan, target.endpoint, {}, completions(), q);
  runner.start();
  while (runner.counters().completed.load() == 0) ASSERT_FALSE(runner.wait_for(10)) << "finished too early";
  runner.stop_sending();
  runner.cancel_in_flight();
  runner.join();
  std::vector<RequestRecord> rs;
  q.drain(rs);
  const std::uint64_t sent = runner.counters().sent.load();
  EXPECT_EQ(rs.size(), sent);
  EXPECT_EQ(runner.not_sent(), 40 - sent);
  EXPECT_LT(sent, 40u);
  std::size_t ok = 0, cancelled = 0;
  for (const auto& r : rs) {
    ok += r.outcome == Outcome::kOk;
    cancelled += r.outcome == Outcome::kCancelled;
  }
  EXPECT_GE(ok, 1u);
  EXPECT_EQ(ok + cancelled, rs.size());
}

}  // namespace
}  // namespace tokenscope::bench
