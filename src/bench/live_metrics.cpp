#include "bench/live_metrics.h"

#include "core/prometheus.h"

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/histogram.h"
#include "net/http.h"
#include "net/http_server.h"
#include "tokenizers/unicode_text.h"

namespace tokenscope::bench {

namespace asio = boost::asio;

namespace {

// Every outcome of core/record.h, in the enum's order: the failed ones are
// all declared at 0 from the start, so that rate() over them works before
// the first failure.
constexpr std::array kOutcomes = {Outcome::kOk,           Outcome::kHttpError,     Outcome::kTimeout,
                                  Outcome::kConnectError, Outcome::kProtocolError, Outcome::kValidationError,
                                  Outcome::kCancelled,    Outcome::kRejected};
static_assert(static_cast<std::size_t>(Outcome::kRejected) + 1 == kOutcomes.size(),
              "a new Outcome must be listed in kOutcomes");

// The exposition format's label value escaping (Prometheus, "Exposition
// formats", text-based format: backslash, double quote and line feed are
// escaped); the value must be UTF-8, so invalid bytes (a model name from the
// target's /v1/models, a path) are replaced first.
std::string label_value(std::string_view v) {
  return prometheus::escape_label_value(tokenizers::unicode::repair_utf8(v));
}

}  // namespace

std::vector<double> send_lag_buckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0,  10.0};
}
std::vector<double> ttft_buckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.5,  0.75,
          1.0,   1.5,  2.0,   3.0,  5.0,   7.5, 10.0, 20.0, 30.0, 60.0, 120.0};
}
std::vector<double> itl_buckets() {
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04,
          0.05,  0.075,  0.1,   0.15,   0.2,  0.3,   0.5,  1.0,   2.5,  5.0};
}
std::vector<double> e2e_buckets() {
  return {0.1,  0.25, 0.5,  1.0,  1.5,  2.0,  3.0,   5.0,   7.5,   10.0,
          15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0};
}

namespace {

// What the finished records add up to; copied whole by a scrape.
struct Totals {
  std::uint64_t finished_this_run = 0;
  std::uint64_t completed = 0;
  std::array<std::uint64_t, kOutcomes.size()> by_outcome{};
  std::uint64_t warmup = 0;
  std::uint64_t output_tokens = 0;
  std::uint64_t prompt_tokens = 0;
  prometheus::Histogram send_lag{send_lag_buckets()};
  prometheus::Histogram ttft{ttft_buckets()};
  prometheus::Histogram itl{itl_buckets()};
  prometheus::Histogram e2e{e2e_buckets()};

  void add(const RequestRecord& r);
};

// The same selection as the summary (core/summary.cpp), so that a final
// scrape equals run.json (warm-up aside): tokens and latencies of completed
// requests; TTFT and E2E from the send; ITL per token, with the gaps of
// events past --max-events from their histogram. Send lag: every request
// sent, failed ones too.
void Totals::add(const RequestRecord& r) {
  ++finished_this_run;
  if (r.warmup) ++warmup;
  const auto outcome = static_cast<std::size_t>(r.outcome);
  if (outcome < by_outcome.size()) ++by_outcome[outcome];
  if (r.t_send >= 0 && r.t_sched >= 0) send_lag.observe(nanos_to_s(r.t_send - r.t_sched));
  if (r.outcome != Outcome::kOk) return;
  ++completed;
  if (r.prompt_tokens > 0) prompt_tokens += static_cast<std::uint64_t>(r.prompt_tokens);
  if (r.output_tokens > 0) output_tokens += static_cast<std::uint64_t>(r.output_tokens);
  if (r.t_first_token < 0 || r.t_send < 0) return;
  ttft.observe(nanos_to_s(r.t_first_token - r.t_send));
  e2e.observe(nanos_to_s(r.t_last_token - r.t_send));
  for (std::size_t i = 1; i < r.event_times.size(); ++i) {
    const Nanos gap = std::max<Nanos>(0, r.event_times[i] - r.event_times[i - 1]);
    const std::uint32_t k = i < r.event_tokens.size() ? std::max<std::uint32_t>(1, r.event_tokens[i]) : 1;
    itl.observe(nanos_to_s(gap) / k, k);
  }
  if (r.dropped_gaps_ns && r.events_dropped > 0) {
    const double k = r.dropped_event_tokens > r.events_dropped
                         ? static_cast<double>(r.dropped_event_tokens) / static_cast<double>(r.events_dropped)
                         : 1.0;
    r.dropped_gaps_ns->for_each_bucket([&](std::size_t i, std::uint64_t n) {
      const double mid = (static_cast<double>(LogLinearHistogram::bucket_lower(i)) +
                          static_cast<double>(LogLinearHistogram::bucket_upper(i))) /
                         2;
      itl.observe(mid / k * 1e-9, static_cast<std::uint64_t>(std::llround(static_cast<double>(n) * k)));
    });
  }
}

}  // namespace

struct LiveMetrics::State {
  mutable std::mutex mutex;
  // The current (or last) run.
  bool has_run = false;
  LiveRunInfo info;
  const RunCounters* counters = nullptr;  // null between runs
  std::function<std::uint64_t()> not_sent;
  Nanos epoch = 0;
  Nanos ended = -1;  // when end_run() was called; -1 while the run goes on
  // Sent and not sent by the runs that have ended.
  std::uint64_t sent_before = 0;
  std::uint64_t not_sent_before = 0;
  Totals totals;
};

// The HTTP side: one io_context on one thread of its own, answering
// GET /metrics; anything else is 404 (405 for another method on /metrics).
struct LiveMetrics::Server final : net::HttpHandler {
  Server(LiveMetrics& m, const LiveMetricsOptions& o)
      : metrics(m), ioc(1), server(ioc, server_options(o), limits(), *this, clock) {}

  static net::ServerOptions server_options(const LiveMetricsOptions& o) {
    net::ServerOptions so;
    so.host = o.host;
    so.port = o.port;
    so.backlog = 64;
    so.single_thread = true;
    so.warn = [](std::string_view message) {
      std::fprintf(stderr, "tokenscope bench: metrics endpoint: %.*s\n", static_cast<int>(message.size()),
                   message.data());
    };
    return so;
  }
  // A scrape is one small request: short timeouts, so that a stuck scraper
  // neither holds a connection long nor delays the end of the process.
  static net::ServerLimits limits() {
    net::ServerLimits l;
    l.max_body_bytes = 4096;
    l.header_timeout_s = 5.0;
    l.idle_timeout_s = 60.0;
    l.write_timeout_s = 2.0;
    l.max_connections = 64;
    return l;
  }

  void handle(net::HttpRequest request, std::shared_ptr<net::Responder> responder) override {
    net::HttpResponse r;
    r.content_type = "text/plain; charset=utf-8";
    if (request.path() != "/metrics") {
      r.status = 404;
      r.body = "not found: this endpoint serves GET /metrics only\n";
    } else if (request.method != "GET") {
      r.status = 405;
      r.headers.push_back({"Allow", "GET"});
      r.body = fmt::format("method {} not allowed on /metrics (use GET)\n", request.method);
    } else {
      // Prometheus, "Exposition formats": the text format's content type.
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = metrics.render();
    }
    responder->respond(std::move(r));
  }
  net::HttpResponse connection_error(int status, std::string_view message) override {
    net::HttpResponse r;
    r.status = status;
    r.content_type = "text/plain; charset=utf-8";
    r.body = std::string(message) + "\n";
    return r;
  }

  // Stops accepting, lets responses in progress finish (their connections
  // close after them; write timeout 2 s), at most 3 s, then stops the loop.
  void shut_down() {
    server.drain();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    auto timer = std::make_shared<asio::steady_timer>(ioc);
    auto wait = std::make_shared<std::function<void()>>();
    *wait = [this, timer, deadline, weak = std::weak_ptr<std::function<void()>>(wait)] {
      if (server.connections() == 0 || std::chrono::steady_clock::now() > deadline) return ioc.stop();
      timer->expires_after(std::chrono::milliseconds(5));
      timer->async_wait([weak](const boost::system::error_code&) {
        if (auto w = weak.lock()) (*w)();
      });
    };
    (*wait)();
    pending_wait = wait;  // kept alive until the loop has stopped
  }

  LiveMetrics& metrics;
  SteadyClock clock;  // the server's own deadlines: always real time
  asio::io_context ioc;
  net::HttpServer server;
  std::thread thread;
  std::shared_ptr<std::function<void()>> pending_wait;
};

LiveMetrics::LiveMetrics(LiveMetricsOptions options, const Clock* clock)
    : clock_(clock ? *clock : steady_), options_(std::move(options)), state_(std::make_unique<State>()) {}

LiveMetrics::~LiveMetrics() {
  stop();
}

void LiveMetrics::start() {
  if (server_) return;
  boost::system::error_code ec;
  asio::ip::make_address(options_.host, ec);
  if (ec)
    throw UsageError(fmt::format("--metrics-host {}: expected an IP address (e.g. 127.0.0.1 or ::1)",
                                 quote_input(options_.host)));
  auto s = std::make_unique<Server>(*this, options_);
  try {
    s->server.start();
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("--metrics-port {}: {}", options_.port, e.what()));
  }
  s->thread = std::thread([srv = s.get()] { srv->ioc.run(); });
  server_ = std::move(s);
}

std::uint16_t LiveMetrics::port() const {
  return server_ ? server_->server.port() : options_.port;
}

std::string LiveMetrics::url() const {
  const bool v6 = options_.host.find(':') != std::string::npos;
  return fmt::format("http://{}{}{}:{}/metrics", v6 ? "[" : "", options_.host, v6 ? "]" : "", port());
}

void LiveMetrics::stop() {
  if (!server_) return;
  if (server_->thread.joinable()) {
    asio::post(server_->ioc, [srv = server_.get()] { srv->shut_down(); });
    server_->thread.join();
    // Handlers still queued (a connection's last completions) run now,
    // while the server they count in still exists.
    server_->ioc.restart();
    server_->ioc.poll();
  }
  server_.reset();
}

void LiveMetrics::begin_run(LiveRunInfo info, const RunCounters& counters,
                            std::function<std::uint64_t()> not_sent, Nanos epoch) {
  std::lock_guard lock(state_->mutex);
  auto& s = *state_;
  s.has_run = true;
  s.info = std::move(info);
  s.counters = &counters;
  s.not_sent = std::move(not_sent);
  s.epoch = epoch;
  s.ended = -1;
  s.totals.finished_this_run = 0;
}

void LiveMetrics::add(const std::vector<RequestRecord>& records) {
  if (records.empty()) return;
  std::lock_guard lock(state_->mutex);
  for (const auto& r : records) state_->totals.add(r);
}

void LiveMetrics::add(const RequestRecord& record) {
  std::lock_guard lock(state_->mutex);
  state_->totals.add(record);
}

void LiveMetrics::end_run() {
  std::lock_guard lock(state_->mutex);
  auto& s = *state_;
  if (!s.counters) return;
  s.sent_before += s.counters->sent.load();
  if (s.not_sent) s.not_sent_before += s.not_sent();
  s.counters = nullptr;
  s.not_sent = nullptr;
  s.ended = clock_.now_ns();
}

std::string LiveMetrics::render() const {
  // Copied under the lock, formatted after it: a scrape holds the writer
  // thread back only for the copy.
  std::uint64_t sent = 0, not_sent = 0;
  std::int64_t in_flight = 0;
  std::uint64_t queued = 0;
  Nanos now = 0, epoch = 0;
  bool has_run = false, ended = false;
  LiveRunInfo info;
  std::optional<Totals> copy;
  {
    std::lock_guard lock(state_->mutex);
    const auto& s = *state_;
    sent = s.sent_before;
    not_sent = s.not_sent_before;
    if (s.counters) {
      sent += s.counters->sent.load(std::memory_order_relaxed);
      in_flight = s.counters->in_flight.load(std::memory_order_relaxed);
      queued = s.counters->queued.load(std::memory_order_relaxed);
      if (s.not_sent) not_sent += s.not_sent();
    }
    now = s.ended >= 0 ? s.ended : clock_.now_ns();
    epoch = s.epoch;
    has_run = s.has_run;
    ended = s.ended >= 0;
    if (has_run) info = s.info;
    copy.emplace(s.totals);
  }
  const Totals& t = *copy;
  const double elapsed = has_run ? nanos_to_s(now - epoch) : 0.0;
  const double rate = elapsed > 0 ? static_cast<double>(t.finished_this_run) / elapsed : 0.0;

  std::string out;
  out.reserve(8192);
  prometheus::TextWriter w(out, prometheus::Layout::kGoClient);
  const auto scalar = [&w](std::string_view name, std::string_view type, std::string_view help, auto value) {
    w.family(name, type, help);
    w.sample(name, "", value);
  };
  if (has_run) {
    w.family("tokenscope_bench_run_info", "gauge",
             "The current (or last) run: run directory, model, target URL.");
    w.sample("tokenscope_bench_run_info",
             fmt::format("run_id=\"{}\",model=\"{}\",target=\"{}\"", label_value(info.run_id),
                         label_value(info.model), label_value(info.target)),
             std::uint64_t{1});
    scalar("tokenscope_bench_run_finished", "gauge",
           "1 once the current run has ended (every request written): the counters are final.",
           std::uint64_t{ended ? 1u : 0u});
  }
  scalar("tokenscope_bench_requests_sent_total", "counter", "Requests sent.", std::uint64_t{sent});
  scalar("tokenscope_bench_requests_completed_total", "counter",
         "Requests finished with outcome ok (as the writer thread drains them).", t.completed);
  w.family("tokenscope_bench_requests_failed_total", "counter",
           "Requests finished with any other outcome, by outcome.");
  for (std::size_t i = 0; i < kOutcomes.size(); ++i)
    if (kOutcomes[i] != Outcome::kOk)
      w.sample("tokenscope_bench_requests_failed_total",
               fmt::format("outcome=\"{}\"", outcome_name(kOutcomes[i])), t.by_outcome[i]);
  scalar("tokenscope_bench_requests_warmup_total", "counter",
         "Finished requests scheduled in the warm-up window (counted above, left out of run.json's summary).",
         t.warmup);
  scalar("tokenscope_bench_requests_in_flight", "gauge", "Requests sent and not yet finished.",
         static_cast<std::uint64_t>(std::max<std::int64_t>(0, in_flight)));
  scalar("tokenscope_bench_requests_queued", "gauge",
         "Requests due but waiting for a --max-concurrency slot.", std::uint64_t{queued});
  scalar("tokenscope_bench_requests_not_sent_total", "counter",
         "Planned requests never sent (the run was interrupted).", std::uint64_t{not_sent});
  scalar("tokenscope_bench_achieved_requests_per_second", "gauge",
         "Requests finished in the current run per second since its first planned send (frozen at its end).",
         rate);
  scalar("tokenscope_bench_output_tokens_total", "counter", "Output tokens of completed requests.",
         t.output_tokens);
  scalar("tokenscope_bench_prompt_tokens_total", "counter",
         "Prompt tokens of completed requests, as the server counted them.", t.prompt_tokens);
  w.histogram("tokenscope_bench_send_lag_seconds",
              "Actual send minus intended send of every request sent: the client's own lag.", "", t.send_lag);
  w.histogram("tokenscope_bench_time_to_first_token_seconds",
              "Time to first token of completed requests, from the send.", "", t.ttft);
  w.histogram("tokenscope_bench_inter_token_latency_seconds",
              "Gaps between output tokens of completed requests (an event of k tokens: k gaps of 1/k).", "",
              t.itl);
  w.histogram("tokenscope_bench_e2e_request_latency_seconds", "Send to last token of completed requests.", "",
              t.e2e);
  return out;
}

std::unique_ptr<LiveMetrics> start_live_metrics(const BenchSettings& o, std::ostream& log) {
  if (!(o.metrics_linger_s >= 0 && std::isfinite(o.metrics_linger_s)))
    throw UsageError("--metrics-linger-s: expected seconds >= 0");
  if (o.metrics_port < 0) {
    if (o.metrics_linger_s > 0) throw UsageError("--metrics-linger-s needs --metrics-port");
    return nullptr;
  }
  if (o.metrics_port > 65535)
    throw UsageError(fmt::format("--metrics-port {}: expected a port in [0, 65535]", o.metrics_port));
  auto m = std::make_unique<LiveMetrics>(
      LiveMetricsOptions{o.metrics_host, static_cast<std::uint16_t>(o.metrics_port)});
  m->start();
  if (!o.quiet) log << "tokenscope bench: metrics at " << m->url() << std::endl;
  return m;
}

void linger_live_metrics(LiveMetrics* m, const BenchSettings& o, const std::atomic<bool>& interrupted,
                         const std::atomic<bool>* hurry, std::ostream& log) {
  if (!m || !(o.metrics_linger_s > 0)) return;
  // The run's own interrupt already set `interrupted`: then the next one
  // (hurry) ends the wait.
  const bool was_interrupted = interrupted.load();
  auto stop_now = [&] { return was_interrupted ? hurry && hurry->load() : interrupted.load(); };
  if (stop_now()) return;
  if (!o.quiet)
    log << fmt::format(
               "tokenscope bench: serving the final metrics at {} for {:g} s (--metrics-linger-s; "
               "interrupt to stop)",
               m->url(), o.metrics_linger_s)
        << std::endl;
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                             std::chrono::duration<double>(o.metrics_linger_s));
  while (!stop_now() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a signal handler only sets the flags
}

LiveRun::LiveRun(LiveMetrics* metrics, LiveRunInfo info, const Runner& runner) : metrics_(metrics) {
  if (metrics_)
    metrics_->begin_run(
        std::move(info), runner.counters(), [&runner] { return runner.not_sent(); }, runner.epoch());
}

LiveRun::~LiveRun() {
  if (metrics_) metrics_->end_run();
}

}  // namespace tokenscope::bench
