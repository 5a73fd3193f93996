#include "observe/scrape.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <boost/asio/io_context.hpp>

#include "core/error.h"

namespace tokenscope::observe {

struct ScrapeCollector::State {
  boost::asio::io_context ioc;
  SteadyClock steady;
  std::unique_ptr<net::HttpClient> client;  // made on first use: resolving may fail, and is retried
  net::Endpoint endpoint;
  net::ClientOptions options;
  std::string path;
  double timeout_s = 10.0;
  ScrapeLimits limits;
  std::shared_ptr<const std::string> request;
  // The body buffer, kept between scrapes: a page of a few hundred KB
  // allocated afresh each time costs more in page faults than its parse.
  std::string body;
  mutable std::mutex mutex;  // stats
  ScrapeStats stats;
};

namespace {

struct Collect final : net::ExchangeHandler {
  explicit Collect(std::string& b) : body(b) { body.clear(); }
  int status = 0;
  std::string content_type;
  std::string& body;
  std::string error;
  bool done = false;
  // vLLM-sized pages are a few hundred KB; a body past this is not an exposition worth holding.
  static constexpr std::size_t kMaxBody = 16u << 20;
  bool truncated = false;
  void on_sent(Nanos) override {}
  void on_content_type(std::string_view ct) override { content_type = ct; }
  void on_headers(int s, Nanos) override { status = s; }
  void on_body(std::string_view d, Nanos) override {
    if (body.size() + d.size() > kMaxBody) {
      truncated = true;
      d = d.substr(0, kMaxBody - std::min(kMaxBody, body.size()));
    }
    body.append(d);
  }
  void on_complete(net::ExchangeError e, std::string_view m, Nanos) override {
    if (e != net::ExchangeError::kNone)
      error = m.empty() ? std::string(net::exchange_error_name(e)) : std::string(m);
    done = true;
  }
};

}  // namespace

std::string default_metrics_url(const net::Endpoint& target) {
  net::Endpoint e = target;
  e.base_path.clear();
  return e.url() + "/metrics";
}

ScrapeCollector::ScrapeCollector(std::string source, const std::string& url, net::ClientOptions client,
                                 double timeout_s, ScrapeLimits limits)
    : source_(std::move(source)), url_(url), state_(std::make_unique<State>()) {
  // The whole URL path is the scrape path: Endpoint keeps it as base_path.
  state_->endpoint = net::Endpoint::parse_url(url);
  state_->path = state_->endpoint.base_path.empty() ? "/" : state_->endpoint.base_path;
  state_->endpoint.base_path.clear();
  state_->options = client;
  state_->options.max_connections = 1;
  state_->timeout_s = timeout_s;
  state_->limits = limits;
  // Prometheus's own Accept header: OpenMetrics preferred, text 0.0.4 accepted.
  state_->request = std::make_shared<const std::string>(
      fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\nAccept: application/openmetrics-text;version=1.0.0;q=0.5,"
                  "text/plain;version=0.0.4;q=0.4,*/*;q=0.1\r\nUser-Agent: tokenscope\r\n\r\n",
                  state_->path, state_->endpoint.host_header()));
}

ScrapeCollector::~ScrapeCollector() = default;

ScrapeStats ScrapeCollector::stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

Observation ScrapeCollector::collect(const Clock& clock) {
  State& s = *state_;
  Observation o;
  o.source = source_;
  const Nanos t0 = clock.now_ns();
  Collect h(s.body);
  try {
    if (!s.client) s.client = std::make_unique<net::HttpClient>(s.ioc, s.endpoint, s.options, s.steady);
    s.ioc.restart();
    s.client->start(s.request, &h, s.steady.now_ns() + seconds_to_nanos(s.timeout_s));
    while (!h.done && s.ioc.run_one() > 0) {
    }
    if (!h.done) h.error = "the scrape ended without an answer";
  } catch (const std::exception& e) {
    h.error = e.what();
  }
  const Nanos t1 = clock.now_ns();
  o.t_ns = t1;
  o.rtt_ns = t1 - t0;
  std::lock_guard lock(s.mutex);
  ++s.stats.scrapes;
  s.stats.bytes += h.body.size();
  if (h.error.empty() && (h.status < 200 || h.status >= 300)) {
    std::string excerpt = h.body.substr(0, 200);
    h.error = fmt::format("HTTP {}{}", h.status, excerpt.empty() ? "" : ": " + quote_input(excerpt));
  }
  if (h.error.empty() && h.truncated)
    h.error = fmt::format("the body is over {} MiB", Collect::kMaxBody >> 20);
  if (!h.error.empty()) {
    ++s.stats.failures;
    o.error = std::move(h.error);
    return o;
  }
  Exposition e = parse_exposition(h.body, format_from_content_type(h.content_type), s.limits.max_series);
  s.stats.most_series = std::max(s.stats.most_series, e.samples + e.series_over_limit);
  if (e.series_over_limit > 0) {
    ++s.stats.scrapes_over_series_limit;
    s.stats.series_dropped += e.series_over_limit;
    // The family being read when the bound was hit may be cut in the middle:
    // a histogram or summary without its last buckets, +Inf or _count would
    // give wrong quantiles, so it is left out whole.
    if (!e.families.empty()) {
      MetricFamily& last = e.families.back();
      if (last.type == MetricType::kHistogram || last.type == MetricType::kGaugeHistogram ||
          last.type == MetricType::kSummary) {
        s.stats.series_dropped += last.samples.size();
        e.samples -= last.samples.size();
        last.samples.clear();
      }
    }
  }
  s.stats.rejected_lines += e.rejected_lines;
  if (e.rejected_lines > 0 && s.stats.first_rejected.empty()) s.stats.first_rejected = e.rejected;
  if (e.samples == 0 && e.rejected_lines > 0) {
    ++s.stats.failures;
    o.error =
        fmt::format("not a Prometheus exposition (Content-Type {}): no sample parsed, {} lines rejected{}",
                    h.content_type.empty() ? "none" : quote_input(h.content_type), e.rejected_lines,
                    e.rejected.empty()
                        ? ""
                        : fmt::format(", the first (line {}): {}", e.rejected[0].line, e.rejected[0].reason));
    return o;
  }
  const Engine engine = detect_engine(e);
  if (engine != Engine::kUnknown || s.stats.engine == Engine::kUnknown) s.stats.engine = engine;
  CanonicalDrops drops;
  o.canonical = canonicalize(e, s.stats.engine, s.limits.canonical, drops);
  s.stats.canonical_label_sets_dropped += drops.label_sets;
  s.stats.canonical_histograms_dropped += drops.histograms;
  o.raw = flatten(e);
  s.stats.series = o.raw.size();
  // The server's own clock, when the exposition carries timestamps: the
  // latest one stands for the moment the exposition was written.
  for (const auto& f : e.families)
    for (const auto& x : f.samples)
      if (x.timestamp_ns && (!o.server_t_ns || *x.timestamp_ns > *o.server_t_ns))
        o.server_t_ns = x.timestamp_ns;
  return o;
}

}  // namespace tokenscope::observe
