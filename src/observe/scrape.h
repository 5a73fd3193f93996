// A Prometheus /metrics endpoint as a Collector: GET on a kept-alive
// connection, parse (Prometheus text or OpenMetrics), detect the engine from
// its names, map to canonical series. Used for the target's own /metrics
// (source "server"), extra --scrape URLs and a DCGM exporter (--gpu-sampler,
// source "gpu").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "net/http_client.h"
#include "observe/canonical.h"
#include "observe/observation.h"

namespace tokenscope::observe {

// Bounds on what one scrape may bring, as Prometheus's sample_limit and
// label_limit bound a scrape (docs/reliability.md "Scrape bounds"): a
// target's /metrics is another team's server. Each has a default far above
// what a real server writes (vLLM: about 1,500 series; a DCGM exporter on 8
// GPUs: about 1,000), an option of bench, a count in run.json and a note in
// the report when it was hit.
struct ScrapeLimits {
  // Series (sample lines) kept of one scrape, in the order written; the rest
  // are counted, not parsed.
  std::size_t max_series = 20'000;
  CanonicalLimits canonical;  // label sets per canonical series, bucket bounds per histogram
};

struct ScrapeStats {
  std::uint64_t scrapes = 0;
  std::uint64_t failures = 0;
  std::uint64_t rejected_lines = 0;          // over every scrape
  std::vector<RejectedLine> first_rejected;  // of the first scrape that had any (bounded)
  Engine engine = Engine::kUnknown;          // as detected (last scrape with samples)
  std::uint64_t bytes = 0;                   // body bytes over every scrape
  std::size_t series = 0;                    // raw series in the last good scrape
  // What the bounds (ScrapeLimits) left out, over every scrape.
  std::uint64_t scrapes_over_series_limit = 0;  // scrapes with more series than max_series
  std::uint64_t series_dropped = 0;             // series of those scrapes not kept
  std::size_t most_series = 0;                  // the most series one scrape offered
  std::uint64_t canonical_label_sets_dropped = 0;
  std::uint64_t canonical_histograms_dropped = 0;
};

class ScrapeCollector final : public Collector {
 public:
  // url: http(s)://host:port/path (the whole path, e.g. ".../metrics").
  // Throws UsageError when the URL does not parse.
  ScrapeCollector(std::string source, const std::string& url, net::ClientOptions client, double timeout_s,
                  ScrapeLimits limits = {});
  ~ScrapeCollector() override;

  std::string source() const override { return source_; }
  Observation collect(const Clock& clock) override;
  const std::string& url() const { return url_; }
  ScrapeStats stats() const;

 private:
  struct State;
  std::string source_;
  std::string url_;
  std::unique_ptr<State> state_;
};

// The metrics URL of a target URL: scheme://host:port/metrics (the target's
// base path dropped: /v1 and proxies' prefixes do not carry /metrics).
std::string default_metrics_url(const net::Endpoint& target);

}  // namespace tokenscope::observe
