// Builds run.json's "summary" (keys in core/metrics.h) from request records.
// Per-request metrics (TTFT, TPOT, E2E) keep one double each per completed
// request so their percentiles are exact; per-token gaps (ITL) go into a
// log-linear histogram, so memory does not grow with the token count.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/histogram.h"
#include "core/record.h"
#include "core/stats.h"

namespace tokenscope {

// Engine-side counters that the summary reports beside the records (null in
// the summary when never set, e.g. a remote server whose metrics were not read).
// Each is nullopt when the server does not report it (a scraped server
// without prefix caching metrics, say): its summary key is then null.
struct ServerCounters {
  std::optional<std::uint64_t> prefix_cache_queries_tokens;
  std::optional<std::uint64_t> prefix_cache_hits_tokens;
  std::optional<std::uint64_t> preemptions_total;
  std::optional<double> kv_cache_usage_peak;  // nullopt: unlimited capacity / unknown
};

// Service-level objectives of a task class: each metric must stay at or
// under its target at the given percentile (SLO attainment), and a request
// "meets the SLO" (goodput) when every one of its own values does.
// TTFT and E2E are measured from when the request was due when the builder
// is told so (set_slo_from_schedule: the open loop, where client lag and
// waiting for a connection must count against the server's SLO), else from
// t_send; TPOT does not depend on the start.
struct Slo {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  std::optional<double> e2e_ms;
  double percentile = 99.0;  // in (0, 100]
  // Time to the first answer token (reasoning models; TTFT for the rest),
  // from the same start as TTFT. A request with no answer token misses it.
  std::optional<double> ttfo_ms;
  bool empty() const { return !ttft_ms && !tpot_ms && !e2e_ms && !ttfo_ms; }
};

class SummaryBuilder {
 public:
  void add(const RequestRecord& r);
  void set_server_counters(const ServerCounters& c) { counters_ = c; }
  // SLOs per task class ("" is the class of requests that name none); a
  // class missing here has no SLO.
  void set_slos(std::map<std::string, Slo> slos) { slos_ = std::move(slos); }
  // SLO verdicts (goodput, attainment) measure TTFT and E2E from when each
  // request was due: t_dispatch when it waited behind a concurrency cap, else
  // t_sched. Off: from t_send (the closed loop, where t_sched is the send).
  void set_slo_from_schedule(bool on) { slo_from_schedule_ = on; }

  std::uint64_t requests_total() const { return completed_ + failed_ + cancelled_planned_; }
  std::uint64_t requests_completed() const { return completed_; }
  std::uint64_t requests_failed() const { return failed_; }
  // Seconds from the earliest t_sched to the latest t_close seen; 0 when none.
  double duration_s() const;
  // Seconds from the earliest t_send to the latest t_close seen; 0 when none.
  double duration_send_s() const;
  // The steady-state window (lifecycle segmentation): from when the number
  // of requests in flight first reaches its time-weighted median to when it
  // last is at it; [0, 0] when there are no requests.
  std::pair<Nanos, Nanos> steady_window() const;

  // The summary object; distributions are computed on a copy, so build() may be
  // called repeatedly (e.g. for progress) without disturbing the builder.
  nlohmann::json build() const;

 private:
  // One completed request: what the distributions and SLO checks need.
  struct Sample {
    double ttft_ms;
    double ttfo_ms;  // NaN: no answer token
    double e2e_ms;
    double send_lag_ms;
    double due_lag_ms;  // t_send - when the request was due (t_dispatch, else t_sched)
    std::uint32_t output_tokens;
    std::uint32_t answer_tokens;
    std::uint16_t task_class;
    std::uint16_t tenant;
    std::uint16_t model;
  };
  struct GroupCounts {
    std::uint64_t completed = 0;
    std::uint64_t failed = 0;
    std::uint64_t output_tokens = 0;
  };
  std::uint16_t group_index(std::vector<std::string>& names, std::vector<GroupCounts>& counts,
                            const std::string& name);
  enum class Group { kClass, kTenant, kModel };
  nlohmann::json group_json(Group g, std::uint16_t index, double duration) const;
  bool meets_slo(const Sample& s) const;
  double slo_ttft(const Sample& s) const { return s.ttft_ms + (slo_from_schedule_ ? s.due_lag_ms : 0.0); }
  double slo_ttfo(const Sample& s) const { return s.ttfo_ms + (slo_from_schedule_ ? s.due_lag_ms : 0.0); }
  double slo_e2e(const Sample& s) const { return s.e2e_ms + (slo_from_schedule_ ? s.due_lag_ms : 0.0); }

  std::uint64_t completed_ = 0;
  std::uint64_t failed_ = 0;
  std::uint64_t warmup_ = 0;
  std::uint64_t cancelled_planned_ = 0;
  std::uint64_t prompt_tokens_ = 0;
  std::uint64_t output_tokens_ = 0;
  std::uint64_t token_mismatches_ = 0;
  std::uint64_t reasoning_requests_ = 0;
  std::uint64_t planned_prompt_tokens_ = 0, planned_prompt_reported_ = 0, prompt_mismatches_ = 0;
  std::uint64_t reasoning_tokens_ = 0;
  std::uint64_t pooling_requests_ = 0;  // completed requests with inputs (embeddings, rerank)
  std::uint64_t inputs_ = 0;
  std::uint64_t audio_ms_ = 0;  // of completed requests with audio
  std::map<Outcome, std::uint64_t> outcomes_;
  Nanos first_sched_ = -1;
  Nanos first_send_ = -1;
  Nanos last_close_ = -1;
  std::vector<Sample> samples_;
  // t_send and t_close of every request, for the steady window (sorted in
  // place when the window is computed).
  mutable std::vector<Nanos> starts_, ends_;
  mutable std::vector<Nanos> ok_ends_;  // t_close of completed requests (steady throughput)
  bool slo_from_schedule_ = false;
  std::uint64_t without_usage_ = 0;
  std::uint64_t client_counted_ = 0;
  std::vector<double> queue_ms_;
  LogLinearHistogram itl_ns_;
  LogLinearHistogram icl_ns_;
  std::optional<ServerCounters> counters_;
  std::map<std::string, Slo> slos_;
  std::vector<std::string> class_names_, tenant_names_, model_names_;
  std::vector<GroupCounts> class_counts_, tenant_counts_, model_counts_;
};

// The JSON object of one distribution (count, mean, std, min, max, p50 ...
// p99_9, ci95). Empty samples give count 0 and nulls.
nlohmann::json distribution_json(const Distribution& d);
nlohmann::json histogram_distribution_json(const LogLinearHistogram& h, double scale);

// Why the server's usage and the client's count of output events differ
// (the summary's output_tokens_total against output_tokens_client_counted),
// in words: the usage counts tokens, the client the events they came in.
std::string token_check_reason(std::uint64_t usage_tokens, std::uint64_t client_events);

}  // namespace tokenscope
