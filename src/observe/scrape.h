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

struct ScrapeStats {
  std::uint64_t scrapes = 0;
  std::uint64_t failures = 0;
  std::uint64_t rejected_lines = 0;          // over every scrape
  std::vector<RejectedLine> first_rejected;  // of the first scrape that had any (bounded)
  Engine engine = Engine::kUnknown;          // as detected (last scrape with samples)
  std::uint64_t bytes = 0;                   // body bytes over every scrape
  std::size_t series = 0;                    // raw series in the last good scrape
};

class ScrapeCollector final : public Collector {
 public:
  // url: http(s)://host:port/path (the whole path, e.g. ".../metrics").
  // Throws UsageError when the URL does not parse.
  ScrapeCollector(std::string source, const std::string& url, net::ClientOptions client, double timeout_s);
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
