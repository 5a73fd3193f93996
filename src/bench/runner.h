// The load driver. Open loop: every request has an intended send time from
// the plan, computed before the run; a timer per client thread fires at
// that time and the request is written at once (t_send − t_sched is the send
// lag, the client's own accuracy), on a kept-alive connection when one is
// idle. An optional concurrency cap queues requests instead (queue time is
// reported apart). Closed loop: N users, each sending its next request when
// the previous one ended plus a think time; stages change N over time.
// Multi-turn sessions: a follow-up turn is sent when the previous turn ended
// plus its think time, with the conversation so far as its history.
//
// Client threads (--client-threads) each own an io_context, a connection
// pool (a share of max_connections) and a share of the plan (request i goes
// to thread i mod T); the concurrency cap is one for all threads. Finished
// records go to a RecordQueue that the caller drains (and writes) from its
// own thread, so disk I/O never delays a send.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/exchange.h"
#include "bench/prompt_text.h"
#include "bench/schedule.h"
#include "core/record.h"
#include "net/http_client.h"
#include "workload/lengths.h"
#include "workload/workload.h"

namespace tokenscope::bench {

// A later turn of a multi-turn session, per workload request.
struct TurnLink {
  std::int32_t next = -1;  // index of the next turn's request, -1 when none
  Nanos think_ns = 0;      // between this turn's end and the next turn's send
  std::int64_t session = -1;
  std::uint32_t turn = 0;
};

// Requests cancelled on purpose (bench --cancel): a share of them, chosen by
// a hash of the seed and the request id, closed by the client at a point —
// once sent, before any token; after N output events; after a delay drawn
// per request — as users close a tab. Recorded as `cancelled` with
// `cancel_planned` and what arrived.
struct CancelPlan {
  enum class When { kBeforeFirstToken, kAfterTokens, kAfterMs };
  double share = 0.0;  // in [0, 1]
  When when = When::kAfterTokens;
  std::uint32_t tokens = 1;                        // kAfterTokens: output events received first
  std::optional<workload::LengthDistribution> ms;  // kAfterMs: the delay from the send, ms
  std::uint64_t seed = 0;
  std::string spec;  // as given
  // Whether the request of this id is cancelled, and its delay (kAfterMs).
  bool chosen(std::uint64_t id) const;
  Nanos delay_ns(std::uint64_t id) const;
};
// Parses SHARE:before-first-token, SHARE:after-tokens=N or SHARE:after-ms=SPEC
// (SPEC a length spec in ms, e.g. fixed:200, uniform:50:500). Throws UsageError.
CancelPlan parse_cancel_plan(std::string_view spec, std::uint64_t seed);

// Open loop: how many idle connections a client thread keeps (the others
// are closed, so that a thread-per-connection server does not keep a
// worker on each) when `next` of its `jobs` requests have been sent and
// the first `horizon` of them are due within a second; `followups`
// follow-up turns wait for their think time, and `queued`: requests wait
// for a concurrency slot. nullopt: the target stays as it is (the schedule
// ends within the second and something remains to be sent).
std::optional<std::size_t> open_loop_idle_target(std::size_t jobs, std::size_t next, std::size_t horizon,
                                                 std::size_t followups, bool queued);

inline constexpr std::uint32_t kDefaultMaxConnections = 4096;
inline constexpr std::uint32_t kDefaultMaxConnecting = 8;

struct LoadPlan {
  bool closed_loop = false;
  // Open loop: (request index, offset ns from the start) in send order.
  // Follow-up turns are not listed: they follow their previous turn.
  std::vector<std::pair<std::uint32_t, Nanos>> schedule;
  std::uint32_t max_concurrency = 0;  // requests in flight at most, all client threads together (0: no cap)
  // Closed loop: users per stage; requests are taken in workload order
  // (wrapping around with fresh ids when the workload runs out).
  std::vector<Stage> user_stages;
  std::uint64_t max_requests = 0;  // closed loop: stop after this many (0: stages decide)
  // A shard of a run (bench/shard.h): its users start the sessions (first
  // turns, or requests without sessions) of rank shard_index, shard_index +
  // shard_count, ... in workload order (max_requests counts every shard's).
  std::uint32_t shard_index = 0;
  std::uint32_t shard_count = 1;
  double think_ms = 0.0;
  bool think_exponential = false;
  std::uint64_t think_seed = 0;
  // Both.
  std::vector<TurnLink> turns;       // empty, or one per workload request
  double warmup_s = 0.0;             // requests scheduled earlier are marked warm-up
  double timeout_s = 600.0;          // per request, from t_send
  std::size_t max_events = 65536;    // output events kept per record (ResponseCollector::set_max_events)
  std::optional<CancelPlan> cancel;  // bench --cancel
  // Connections opened before the first send (0: as many as the busiest
  // 10 ms of the schedule plans, or the users of a closed loop), so that a
  // fast start does not become a storm of connects.
  std::uint32_t preconnect = 0;
  // Connections open at most, all client threads together (0: the default,
  // kDefaultMaxConnections, or fewer when the descriptor limit is lower).
  // Requests beyond it wait for a connection: their wait is send lag.
  std::uint32_t max_connections = 0;
  // TCP handshakes in progress at most, per client thread (0: no limit).
  std::uint32_t max_connecting = kDefaultMaxConnecting;
  unsigned threads = 1;
  // Client thread i runs on cpus[i % size] alone (empty: wherever the
  // process may; bench --client-cpus).
  std::vector<int> cpus;
  // Open loop: each client thread's request bodies are written ahead on a
  // thread of their own (BodiesAhead), started by start() and so on the
  // CPUs of the thread that calls it. bench sets it where --client-cpus
  // leaves the rest of the process CPUs of its own: the client threads
  // then only send and read. Off, a client thread writes them itself
  // between sends.
  bool bodies_apart = false;
  // start() waits up to this long for the preconnected pool, then the first
  // send is lead_in_ns later (epoch()).
  Nanos preconnect_timeout_ns = 10 * kNanosPerSecond;
  Nanos lead_in_ns = 50 * kNanosPerMilli;
  // The epoch itself (a monotonic time: the start the shards of a run agreed
  // on) instead of lead_in_ns after the pool is ready; one already past
  // leaves the requests due before now late (their send lag).
  std::optional<Nanos> epoch_at;
};

// Finished records, pushed by client threads, drained by the caller.
//
// With a limit, the queue is bounded: the push that makes half of `limit`
// records pending wakes the drainer (wait_half_full), so that it has the
// time of the other half to come, and a push that finds `limit` pending
// waits until a drain takes them or close(). A client core that the writer
// shares (nice 10, yielding) then gives the writer the time it needs
// instead of holding every record of a saturated closed loop in memory;
// each such wait is counted (waits()).
class RecordQueue {
 public:
  void set_limit(std::size_t limit);  // 0: unbounded (the default)
  void push(RequestRecord&& r);
  void drain(std::vector<RequestRecord>& out);  // appends and empties
  // The drainer's pause: returns when half of `limit` records (rounded up)
  // are pending, after close(), or after `timeout`; true for the first two
  // (false: it timed out, whatever the queue held by then).
  bool wait_half_full(std::chrono::milliseconds timeout);
  // No push waits any more (the drainer is gone or stopping).
  void close();
  std::uint64_t waits() const;  // pushes that waited for a drain
  unsigned pausing() const;     // drainers inside wait_half_full's wait now

 private:
  mutable std::mutex mutex_;
  std::condition_variable drained_, full_;
  std::vector<RequestRecord> pending_;
  std::size_t limit_ = 0;
  std::size_t wake_at_ = 0;  // (limit_ + 1) / 2
  bool closed_ = false;
  std::uint64_t waits_ = 0;
  unsigned pausing_ = 0;
};

// Request bodies written ahead of an open loop's schedule on a thread of
// their own (LoadPlan::bodies_apart), for one client thread that takes
// them in schedule order. build(k) writes job k's body (null: a body the
// client thread writes itself when it sends, one with images or audio).
// Ahead of what was taken: at most max_items bodies or max_bytes bytes
// (and a batch of 16) on the thread's side, and as much again handed to
// the taker. The thread skips what the client thread has passed: a body
// it was too late for is written by the client thread instead, as without
// this class. The bytes are build(k)'s whichever thread writes them.
class BodiesAhead {
 public:
  using Body = std::shared_ptr<const std::string>;
  BodiesAhead(std::size_t jobs, std::function<Body(std::size_t)> build, std::size_t max_items = 256,
              std::size_t max_bytes = std::size_t{16} << 20);
  ~BodiesAhead();  // finish()
  BodiesAhead(const BodiesAhead&) = delete;
  BodiesAhead& operator=(const BodiesAhead&) = delete;

  // Starts the thread; it runs on the CPUs the calling thread may use.
  void start();
  // Waits up to timeout for the thread's first bodies; whether any are
  // ready (false: the thread was stopped or is late).
  bool wait_ready(std::chrono::nanoseconds timeout);
  // Job k's body, where the thread wrote it in time; else null. k grows
  // from call to call; what was written for earlier jobs is dropped. One
  // thread calls it (the client thread).
  Body take(std::size_t k);
  // The thread writes nothing more (it finishes the batch it is on).
  void stop();
  // stop(), and waits for the thread.
  void finish();
  // Bodies take() handed over, and jobs it found no body written for
  // (read on the thread that calls take(), or after it is joined).
  std::uint64_t taken() const { return taken_; }
  std::uint64_t missed() const { return missed_; }

 private:
  using Item = std::pair<std::size_t, Body>;
  void run();
  void refill();
  void pop_local();

  const std::size_t jobs_;
  const std::function<Body(std::size_t)> build_;
  const std::size_t max_items_, max_bytes_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable room_;   // the thread waits here while max_items/max_bytes are ready
  std::condition_variable first_;  // wait_ready() waits here for the first bodies
  std::deque<Item> ready_;         // written, not yet moved to the taker
  std::size_t ready_bytes_ = 0;
  bool stop_ = false;
  bool waiting_ = false;                     // the thread waits for room
  bool published_ = false;                   // the first bodies are ready (or the thread ended)
  std::atomic<std::size_t> ready_count_{0};  // ready_.size(), read without the lock
  std::atomic<std::size_t> asked_{0};        // the job after the taker's: the thread starts no earlier
  std::deque<Item> local_;                   // the taker's own
  std::size_t local_bytes_ = 0;
  std::uint64_t taken_ = 0, missed_ = 0;
};

struct RunCounters {
  std::atomic<std::uint64_t> sent{0};
  std::atomic<std::uint64_t> completed{0};
  std::atomic<std::uint64_t> failed{0};
  std::atomic<std::int64_t> in_flight{0};
  std::atomic<std::uint64_t> queued{0};  // waiting for a concurrency slot
};

class Runner {
 public:
  // prompts: how prompt text is built (null: tokenscope's own words, no
  // tokenizer); it must outlive the runner. With a tokenizer, output tokens
  // of responses without a usage count are counted on the client.
  Runner(const workload::Workload& w, LoadPlan plan, net::Endpoint endpoint, net::ClientOptions client,
         RequestSettings request, RecordQueue& out, const PromptBuilder* prompts = nullptr);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Starts the client threads and opens the warm connections (waiting up
  // to preconnect_timeout_ns for them); the run begins lead_in_ns later (epoch()).
  void start();
  // Blocks up to timeout_ms; true when every thread has finished.
  bool wait_for(int timeout_ms);
  // Ctrl-C: no new request is sent (unsent ones are counted, not recorded).
  void stop_sending();
  // After the grace period: requests in flight end with outcome cancelled.
  void cancel_in_flight();
  void join();

  const RunCounters& counters() const { return counters_; }
  Nanos epoch() const { return epoch_; }
  // Sets LoadPlan::epoch_at before start() (the agreed start read again
  // from the wall clock when the wait for it ends).
  void set_epoch_at(Nanos t) { plan_.epoch_at = t; }
  // With LoadPlan::epoch_at: how long after it the pool was ready (0: in time).
  Nanos ready_late() const { return ready_late_; }
  // Requests of the plan that were never sent (after stop_sending).
  std::uint64_t not_sent() const;
  // The connection limit in effect (all threads together).
  std::uint32_t max_connections() const { return max_connections_; }
  // Planned open-loop requests (0 for closed loop).
  std::uint64_t planned() const;
  net::ClientCounters client_counters() const;
  // After join(): the CPUs each client thread ran on, as the kernel had
  // them once the thread had pinned itself (LoadPlan::cpus), in the Linux
  // list syntax ("1", "0-3").
  std::vector<std::string> thread_cpus() const;
  // LoadPlan::bodies_apart: the request bodies sent as written apart, and
  // those the client threads wrote themselves (none was ready in time;
  // images or audio; a request that waited for a concurrency slot; a later
  // turn of a session); after join().
  std::uint64_t bodies_written_apart() const;
  std::uint64_t bodies_written_by_client_threads() const;

  struct Shard;

 private:
  const workload::Workload& w_;
  LoadPlan plan_;
  net::Endpoint endpoint_;
  net::ClientOptions client_options_;
  RequestEncoder encoder_;
  std::unique_ptr<PromptBuilder> own_prompts_;
  const PromptBuilder* prompts_;
  RecordQueue& out_;
  RunCounters counters_;
  Nanos epoch_ = 0;
  Nanos ready_late_ = 0;
  std::atomic<std::uint64_t> next_closed_{0};  // closed loop: the next workload position
  // Closed loop, sharded: each workload position's rank among the first
  // turns (sessions start there), and how many there are.
  std::vector<std::uint64_t> first_turn_rank_;
  std::uint64_t first_turns_ = 0;
  // The concurrency cap, shared by the client threads: a request that finds
  // it full waits here (FIFO) and is sent by whichever thread frees a slot.
  struct Gate {
    std::mutex mutex;
    std::uint32_t cap = 0;
    std::uint32_t in_flight = 0;
    bool closed = false;                                  // stop_sending: nothing more leaves the queue
    std::deque<std::pair<std::uint32_t, Nanos>> waiting;  // (request, t_sched)
  } gate_;
  std::atomic<std::uint64_t> gate_not_sent_{0};
  std::uint32_t max_connections_ = 0;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::mutex done_mutex_;
  std::condition_variable done_cv_;
  unsigned running_ = 0;
  friend struct Shard;
};

}  // namespace tokenscope::bench
