// The running benchmark's own Prometheus metrics (bench --metrics-port):
// GET /metrics on a small HTTP server (net::HttpServer) with its own thread
// and io_context, so that a scrape never runs on a client thread. The send
// path never touches this class: requests sent, in flight, queued and not
// sent are read from the Runner's atomics at scrape time; everything about
// finished requests (outcomes, tokens, latency histograms) is fed from the
// records as the writer thread drains them, under a mutex that a scrape
// holds only to copy the numbers.
//
// Counters count from the start of the process: in a sweep they go on
// across its runs (tokenscope_bench_run_info names the current run), and
// they include warm-up requests, which run.json's summary leaves out
// (tokenscope_bench_requests_warmup_total counts those). docs/observe.md,
// "Live metrics endpoint", lists the series.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "bench/bench_settings.h"
#include "bench/runner.h"
#include "core/clock.h"
#include "core/record.h"

namespace tokenscope::bench {

struct LiveMetricsOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: a free port, chosen when the server starts (port())
};

// The labels of tokenscope_bench_run_info.
struct LiveRunInfo {
  std::string run_id;  // the run directory
  std::string model;
  std::string target;  // the target's URL
};

class LiveMetrics {
 public:
  // clock: for the achieved rate, the clock of the Runner's epoch (null:
  // the steady clock, the Runner's); it must outlive this object.
  explicit LiveMetrics(LiveMetricsOptions options, const Clock* clock = nullptr);
  ~LiveMetrics();  // stop()
  LiveMetrics(const LiveMetrics&) = delete;
  LiveMetrics& operator=(const LiveMetrics&) = delete;

  // Binds and starts serving; throws UsageError naming --metrics-host or
  // --metrics-port when the address is not an IP address or cannot be bound.
  void start();
  // The port bound (the chosen one when the options asked for 0).
  std::uint16_t port() const;
  std::string url() const;  // http://HOST:PORT/metrics
  // Lets a scrape in progress finish (at most a few seconds), then closes
  // the server. Idempotent.
  void stop();

  // A run starts: its labels, its counters (read at every scrape until
  // end_run(); they must stay alive until then), a function that counts its
  // requests not sent (called at scrape time, from the server's thread), and
  // its epoch (the planned first send, on the clock given above).
  void begin_run(LiveRunInfo info, const RunCounters& counters, std::function<std::uint64_t()> not_sent,
                 Nanos epoch);
  // Finished records (the writer thread). Thread-safe.
  void add(const std::vector<RequestRecord>& records);
  void add(const RequestRecord& record);
  // The run has ended: its counters are read a last time and then never
  // again; its sent and not-sent counts are kept in the totals.
  void end_run();

  // The exposition text (Prometheus text format 0.0.4), as GET /metrics answers.
  std::string render() const;

  struct State;
  struct Server;

 private:
  SteadyClock steady_;
  const Clock& clock_;
  LiveMetricsOptions options_;
  std::unique_ptr<State> state_;
  std::unique_ptr<Server> server_;
};

// Attaches a Runner's run to LiveMetrics for as long as it exists (null
// metrics: does nothing). Declare it after the Runner, so that it detaches
// before the Runner goes.
class LiveRun {
 public:
  LiveRun(LiveMetrics* metrics, LiveRunInfo info, const Runner& runner);
  ~LiveRun();
  LiveRun(const LiveRun&) = delete;
  LiveRun& operator=(const LiveRun&) = delete;

 private:
  LiveMetrics* metrics_;
};

// bench --metrics-port: checks --metrics-linger-s, starts the endpoint and
// names its address on log (unless quiet); null without --metrics-port.
// Throws UsageError (bad host, port in use, bad linger).
std::unique_ptr<LiveMetrics> start_live_metrics(const BenchSettings& settings, std::ostream& log);
// After the last run: keeps serving for --metrics-linger-s, so that a
// scraper takes its last scrape of the final counts. An interrupt ends the
// wait: the first one, or when the run itself was interrupted, the second.
void linger_live_metrics(LiveMetrics* metrics, const BenchSettings& settings,
                         const std::atomic<bool>& interrupted, const std::atomic<bool>* hurry,
                         std::ostream& log);

// Bucket upper bounds, in seconds.
std::vector<double> send_lag_buckets();
std::vector<double> ttft_buckets();
std::vector<double> itl_buckets();
std::vector<double> e2e_buckets();

}  // namespace tokenscope::bench
