// `tokenscope sim` writes the canonical server series into samples.jsonl
// as a scrape of its /metrics would give them, on virtual time: every
// interval of simulated time, the state after the last step before that
// moment (gauges) and the totals so far (counters, histograms). A report then
// reads a simulated and a real run alike. The sampler sits between the
// engine and the recording observer and forwards every event to it.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/prometheus.h"
#include "engine/engine.h"
#include "engine/fleet.h"
#include "observe/derived.h"
#include "observe/observation.h"
#include "serve/metrics.h"

namespace tokenscope::observe {

// Stolen time (a steal perturbation: docs/engine.md) on the run's clock, as
// a Linux host and the server's cgroup v2 would report it:
//  * the CPU pressure-stall "some" average over 10 s, as the kernel
//    computes avg10 (kernel/sched/psi.c, calc_avgs): at the end of every
//    2 s window, avg = avg * e^(-2/10) + share * (1 - e^(-2/10)), share =
//    stalled time in the window / 2 s; windows counted from 0 of the run's
//    clock;
//  * the stalled time in all (PSI some total, cpu.stat throttled_usec);
//  * the CFS periods (100 ms, cpu.max's default) that hold any of it
//    (cpu.stat nr_throttled).
class StolenTimeSeries {
 public:
  static constexpr Nanos kWindowNs = 2 * kNanosPerSecond;
  static constexpr Nanos kPeriodNs = 100 * 1'000'000;

  // Stolen time [begin_ns, end_ns): in time order, not overlapping, never
  // before the last advance().
  void add(Nanos begin_ns, Nanos end_ns);
  // Folds in the stolen time before t_ns (non-decreasing); the values below are as of t_ns.
  void advance(Nanos t_ns);
  double some_avg10() const { return avg10_; }  // ratio, 0..1
  double stalled_seconds() const { return nanos_to_s(stalled_ns_); }
  std::uint64_t throttled_periods() const { return periods_; }

 private:
  void close_windows_until(Nanos t_ns);
  void fold(Nanos from_ns, Nanos to_ns);

  std::deque<std::pair<Nanos, Nanos>> pending_;  // added, not yet folded in whole
  Nanos folded_until_ = 0;
  std::int64_t window_ = 0;  // the open window: [window_ * 2 s, (window_ + 1) * 2 s)
  Nanos window_stalled_ns_ = 0;
  double avg10_ = 0.0;
  Nanos stalled_ns_ = 0;
  std::uint64_t periods_ = 0;
  std::int64_t last_period_ = -1;
};

// A histogram's series as a scrape of /metrics gives them: its cumulative
// buckets (le), _sum and _count, appended to out.
void append_histogram(std::vector<Sample>& out, const prometheus::Histogram& h, const std::string& name);

class SimSampler final : public engine::EngineObserver {
 public:
  // inner: the observer the engine's events go on to. sink: where each
  // observation goes (the run session: a line of samples.jsonl and the run
  // cache); empty: nowhere, the totals are still kept.
  SimSampler(engine::EngineObserver& inner, std::function<void(const Observation&)> sink, Nanos interval_ns);

  void on_first_scheduled(std::uint64_t id, Nanos t, std::uint32_t cached_tokens) override;
  void on_token(std::uint64_t id, Nanos t, tokenizers::TokenId token) override;
  void on_finish(const engine::FinishedRequest& r) override;
  void on_reject(std::uint64_t id, Nanos t, std::string_view reason) override;
  void on_step(const engine::StepStats& s) override;

  // With a steal perturbation: every sample also writes what a host and the
  // server's cgroup would show of the stolen time (StolenTimeSeries), as
  // sources "host" (host_cpu_pressure_some) and "cgroup"
  // (cgroup_cpu_throttled_periods, cgroup_cpu_throttled_seconds,
  // cgroup_cpu_pressure_some). Call before attach().
  void enable_contention_series() { contention_ = true; }
  // The engine whose counters the samples carry (the engine is made with
  // this sampler as its observer, so it is attached after). Until attached,
  // counters are summed from the steps.
  void attach(const engine::Engine* e);
  // Writes the sample at end_ns (the end of the simulation), if later than the last one.
  void finish(Nanos end_ns);
  std::uint64_t observations() const { return observations_; }  // of source "sim"
  // Of each of "host" and "cgroup" (0 without contention series).
  std::uint64_t contention_observations() const { return contention_observations_; }
  const SeriesTracker& tracker() const { return tracker_; }

 private:
  // A histogram's series as a scrape of /metrics gives them: its
  // cumulative buckets, _sum and _count.
  static void append(std::vector<Sample>& out, const prometheus::Histogram& h, const std::string& name);
  void emit(Nanos t);
  void emit_contention(Nanos t);
  void write(Observation& o, SeriesTracker& tracker);
  void snapshot();  // the engine's counters after the last step

  engine::EngineObserver& inner_;
  const engine::Engine* engine_ = nullptr;
  std::function<void(const Observation&)> sink_;
  Nanos interval_ns_;
  Nanos next_ns_;
  Nanos last_emit_ns_ = -1;
  // The state after the last step, and totals.
  double running_ = 0, waiting_ = 0, kv_usage_ = 0;
  std::uint64_t prefix_queries_ = 0, prefix_hits_ = 0, preemptions_ = 0, prompt_tokens_ = 0,
                generation_tokens_ = 0, finished_ = 0;
  // The buckets of the simulator's own /metrics (vLLM's).
  prometheus::Histogram iteration_tokens_{serve::iteration_tokens_buckets()}, ttft_{serve::ttft_buckets()},
      e2e_{serve::request_latency_buckets()}, queue_{serve::request_latency_buckets()};
  SeriesTracker tracker_;
  std::uint64_t observations_ = 0;
  bool contention_ = false;
  StolenTimeSeries stolen_;
  SeriesTracker host_tracker_, cgroup_tracker_;
  std::uint64_t contention_observations_ = 0;
  std::string line_;
};

// A fleet's samples (sim --replicas, --pools, --prefill-replicas): one
// source "sim" as a scrape of a fleet's /metrics gives it (serve --replicas,
// one engine="N" per replica): the canonical series summed over the
// replicas (the KV usage: their mean; histograms merged), and each
// replica's own gauges and counters in the raw part under vLLM's names,
// labelled engine="N". The fleet runs its replicas in stretches, not in
// one time order (engine/fleet.h): a replica's state is captured when its
// steps cross a sample's time, its steps' tokens and the requests' ends
// count from their times on, and a sample is built once every replica is
// past it (advance()). Which samples are written depends on their values
// alone, not on how the fleet ran: every sample time's, except those inside
// a run of identical values (the first and the last of a run are kept).
class FleetSampler final : public engine::EngineObserver {
 public:
  FleetSampler(engine::EngineObserver& inner, std::function<void(const Observation&)> sink,
               Nanos interval_ns);
  // The fleet whose replicas' counters the samples carry; the baseline at 0.
  void attach(const engine::Fleet* fleet);

  void on_first_scheduled(std::uint64_t id, Nanos t, std::uint32_t cached_tokens) override;
  void on_token(std::uint64_t id, Nanos t, tokenizers::TokenId token) override;
  void on_finish(const engine::FinishedRequest& r) override;
  void on_reject(std::uint64_t id, Nanos t, std::string_view reason) override;
  void on_step(const engine::StepStats& s) override;

  // Every replica has run every step that starts before t: the samples up
  // to t are built.
  void advance(Nanos t);
  // The samples up to end_ns, one at end_ns, and the last one held.
  void finish(Nanos end_ns);
  std::uint64_t observations() const { return observations_; }  // written
  const SeriesTracker& tracker() const { return tracker_; }

 private:
  struct State {
    double running = 0, waiting = 0, kv_usage = 0;
    std::uint64_t prefix_queries = 0, prefix_hits = 0, preemptions = 0, prompt_tokens = 0,
                  generation_tokens = 0;
  };
  // A replica's state over the sample times [from, to] (a step crossed them).
  struct Captured {
    Nanos from = 0, to = 0;
    State state;
  };
  struct Replica {
    State state;  // after its last step
    Nanos next_ns = 0;
    std::deque<Captured> captured;
    std::deque<std::pair<Nanos, std::uint32_t>> steps;  // (start, tokens) not yet in a sample
    std::uint64_t finished = 0;                         // its requests counted so far in the samples
  };
  struct Ended {
    Nanos finished = 0;
    double ttft_s = -1, e2e_s = 0, queue_s = -1;
    int replica = -1;
    bool operator>(const Ended& o) const { return finished > o.finished; }
  };
  // The fleet at t (sample times in order).
  Observation build(Nanos t);
  // Writes a sample unless it sits inside a run of identical ones.
  void offer(Observation o);
  void write(const Observation& o);
  // Nothing happens before t that a sample has not taken in yet.
  bool quiet_until(Nanos t) const;

  const engine::Fleet* fleet_ = nullptr;
  engine::EngineObserver& inner_;
  std::function<void(const Observation&)> sink_;
  Nanos interval_ns_;
  Nanos next_ns_ = 0;
  Nanos last_built_ns_ = -1;
  std::vector<Replica> replicas_;
  std::vector<Ended> ended_;  // a min-heap on the finish time
  std::uint64_t finished_ = 0;
  prometheus::Histogram iteration_tokens_{serve::iteration_tokens_buckets()}, ttft_{serve::ttft_buckets()},
      e2e_{serve::request_latency_buckets()}, queue_{serve::request_latency_buckets()};
  std::optional<Observation> held_;  // the last built, written or not
  bool held_written_ = false;
  SeriesTracker tracker_;
  std::uint64_t observations_ = 0;
};

}  // namespace tokenscope::observe
