// The checklist's thresholds and tolerances (docs/check.md "Thresholds"):
// one YAML file, every key optional, every default documented here and
// printed by `tokenscope check --print-thresholds`. Tolerances are the
// band of the tolerance rule (verdict.h): a significant change smaller than
// its tolerance is not a regression.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/summary.h"

namespace tokenscope::analyze {

struct Thresholds {
  double confidence = 0.95;  // of every interval and test
  double min_requests = 30;  // fewer counted requests in a run: no-data
  // The family-wise error rate of the verdicts `regressed` that rest on an
  // interval: Holm's step-down procedure over every such finding of the
  // check (checklist.h); 0: each finding alone at the confidence.
  double family_alpha = 0.05;
  // 0 headline comparison (p99 and p99.9 take tail_tolerance; goodput
  // goodput_tolerance; task pass rates attainment_tolerance).
  double headline_tolerance = 0.05;    // relative change of a latency's p50 and p90
  double throughput_tolerance = 0.05;  // relative change of request and output-token throughput
  // 1 latency model: TTFT ~ a + b prompt_tokens + c queue_depth, ITL ~ d + e batch.
  double queue_coef_tolerance_ms = 5;     // change of c, ms per request queued ahead
  double batch_coef_tolerance_ms = 0.05;  // change of e, ms of ITL per request in the batch
  // 2 SLO attainment.
  double attainment_tolerance = 0.01;  // change of the share of requests meeting the SLO
  double goodput_tolerance = 0.05;     // relative change of goodput
  std::map<std::string, Slo> slos;     // per task class; empty: the SLOs the runs were measured with
  // 3 mixed-load coupling.
  double coupling_tolerance = 0.10;  // relative change of kappa
  double coupling_min_group = 20;    // requests per group (mixed, quiet) at least
  // 4 tail shift.
  double tail_tolerance = 0.10;    // relative change of p99 / p99.9
  double median_tolerance = 0.05;  // relative change of p50 that still "holds"
  // 5 lifecycle.
  double window_s = 0;  // 0: the run's duration / 60, at least 1 s
  double change_point_pvalue =
      1e-4;  // significance of a change point (1e-3 gave 9% false change points on noise)
  double phase_min_change =
      0.10;  // relative step of a series' mean for a change point to start or end a phase
  double warmup_tolerance_s = 5;         // change of warm-up length
  double steady_share_tolerance = 0.05;  // change of the steady phase's share of the run
  double drift_tolerance = 0.10;         // TPOT growth over the steady phase, relative
  // 6 GPU efficiency.
  double gpu_efficiency_tolerance = 0.10;  // relative change of output tokens/s per unit of GPU busy
  double idle_utilization = 0.10;          // a GPU below this utilisation counts as idle
  double idle_backlog_max = 0.05;          // share of time idle while requests wait, at most
  // 7 KV-cache locality.
  double hit_rate_tolerance = 0.02;  // absolute change of the prefix-cache hit rate
  double reuse_scale_tolerance =
      0.25;  // relative change of the hit probability's decay scale over reuse distance
  // 8 collectives.
  double busbw_tolerance = 0.10;     // relative change of bus bandwidth at large messages
  double pair_deviation_max = 0.20;  // a pair this much slower than the median pair
  // 9 recompilation.
  double recompile_tolerance = 0.25;  // relative excess of a shape's first step over its second
  // Share of the candidate's kernel time (CUPTI) in kernels the base did not launch, at most.
  double new_kernel_share_max = 0.10;
  // 10 batching.
  double batch_tolerance = 0.10;    // relative change of the mean batch
  double cap_share_max = 0.50;      // share of steps at the batch cap (single run)
  double entropy_tolerance = 0.50;  // change of the batch-size entropy, bits
  // 11 quantisation drift.
  double kl_threshold = 0.05;  // bits; the adaptive threshold is max(this, 3 x the base's own split-half KL)
  // 12 contention.
  double psi_max = 0.10;             // mean CPU pressure (some) share, at most (single run)
  double psi_tolerance = 0.05;       // absolute change of the mean pressure share
  double throttle_tolerance = 0.05;  // absolute change of the share of time throttled
};

// One documented key of the YAML file.
struct ThresholdKey {
  std::string key;      // as written in the file, e.g. "tail.tolerance"
  std::string meaning;  // one line
  std::string unit;
};
// Every numeric key with its meaning (the order of docs/check.md).
const std::vector<ThresholdKey>& threshold_keys();

// The value of a key in t (nullopt: no such key).
std::optional<double> threshold_value(const Thresholds& t, std::string_view key);

// Parses a thresholds file's text (file names it in errors). Unknown keys,
// values that are not numbers or out of range are InputErrors naming the file,
// the line and the key.
Thresholds parse_thresholds(std::string_view yaml_text, const std::string& file);
// A thresholds file is a regular file of at most this many bytes (the
// defaults take 3 KB; docs/reliability.md "Files read").
inline constexpr std::uint64_t kMaxThresholdsBytes = std::uint64_t{1} << 20;
Thresholds load_thresholds(const std::string& path);

// The defaults as a YAML file, commented (check --print-thresholds).
std::string thresholds_yaml(const Thresholds& t = {});

}  // namespace tokenscope::analyze
