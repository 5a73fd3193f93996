// Builds run.json's "summary" (keys in core/metrics.h) from request records.
// Per-request metrics (TTFT, TPOT, E2E) keep one double each per completed
// request so their percentiles are exact; per-token gaps (ITL) go into a
// log-linear histogram, so memory does not grow with the token count.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/histogram.h"
#include "core/record.h"
#include "core/stats.h"

namespace tokenscope {

// Engine-side counters that the summary reports beside the records.
struct ServerCounters {
  std::uint64_t prefix_cache_queries_tokens = 0;
  std::uint64_t prefix_cache_hits_tokens = 0;
  std::uint64_t preemptions_total = 0;
  std::optional<double> kv_cache_usage_peak;  // nullopt: unlimited capacity / unknown
};

class SummaryBuilder {
 public:
  void add(const RequestRecord& r);
  void set_server_counters(const ServerCounters& c) { counters_ = c; }

  std::uint64_t requests_total() const { return completed_ + failed_; }
  std::uint64_t requests_completed() const { return completed_; }
  std::uint64_t requests_failed() const { return failed_; }
  // Seconds from the earliest t_sched to the latest t_close seen; 0 when none.
  double duration_s() const;

  // The summary object; distributions are computed on a copy, so build() may be
  // called repeatedly (e.g. for progress) without disturbing the builder.
  nlohmann::json build() const;

 private:
  std::uint64_t completed_ = 0;
  std::uint64_t failed_ = 0;
  std::uint64_t prompt_tokens_ = 0;
  std::uint64_t output_tokens_ = 0;
  Nanos first_sched_ = -1;
  Nanos last_close_ = -1;
  std::vector<double> ttft_ms_, tpot_ms_, e2e_ms_;
  LogLinearHistogram itl_ns_;
  ServerCounters counters_;
};

// The JSON object of one distribution (count, mean, std, min, max, p50 ...
// p99_9, ci95). Empty samples give count 0 and nulls.
nlohmann::json distribution_json(const Distribution& d);
nlohmann::json histogram_distribution_json(const LogLinearHistogram& h, double scale);

}  // namespace tokenscope
