// The observe layer of one bench run: which collectors run (the target's
// /metrics or --scrape URLs, DCGM exporters, NVML, /proc, the server's
// process and cgroup), started before the first request and stopped after
// the last response, and what run.json says of them: "observe" (sources,
// intervals, errors, costs) and "server" (the server's own view of the run,
// from the increase of its counters between the first and the last scrape).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_settings.h"
#include "core/summary.h"
#include "net/http_client.h"
#include "observe/measured_collector.h"
#include "observe/observer.h"
#include "observe/scrape.h"
#include "observe/system_collectors.h"

namespace tokenscope::bench {

class RunObserver {
 public:
  // Builds the collectors from the settings (throws UsageError for a bad
  // --scrape or --gpu-sampler URL) and starts them: the baseline read of
  // each happens before this returns. on_sample: every observation as it is
  // written to samples.jsonl (null: none).
  RunObserver(const BenchSettings& settings, const net::Endpoint& target, const net::ClientOptions& client,
              bool in_process, const std::filesystem::path& out_dir, const Clock& clock, std::ostream& log,
              std::function<void(const observe::Observation&)> on_sample = {});
  ~RunObserver();

  // The final read of every source (unless final_read is false); idempotent.
  void stop(bool final_read = true);
  // run.json "observe".
  nlohmann::json report() const;
  // run.json "server" from the server sources' counter increases (null when
  // no server source was collected).
  nlohmann::json server() const;
  // The summary's server keys from the scrapes (for a remote target).
  std::optional<ServerCounters> server_counters() const;
  // The prefix-cache hit rate per window of the (first) server source:
  // {"phase": "prefill", "points": [[t_s from the run's epoch, rate], ...],
  // "decode": why there is none}; null without a server source.
  nlohmann::json hit_rate_over_time(Nanos epoch) const;
  // The first server source's running and waiting gauges over the run (the
  // hidden queue's input); null when none had two observations, or several
  // sources (replicas: their gauges are not aligned in time).
  const observe::SeriesTracker* queue_tracker() const;

 private:
  std::unique_ptr<observe::Observer> observer_;
  std::vector<std::pair<std::string, observe::ScrapeCollector*>> scrapes_;  // source → collector
  observe::ScrapeLimits limits_;                                            // every scrape's
  std::vector<std::string> server_sources_;
  std::vector<std::pair<std::string, observe::MeasuredCollector*>> measured_;  // source → collector (notes)
  observe::CgroupCollector* cgroup_ = nullptr;  // --cgroup / --server-pid: its quotas go into run.json
};

}  // namespace tokenscope::bench
