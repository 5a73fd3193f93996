// The code's record of METRICS.md: every key of run.json's "summary", its unit
// and its definition. --help and docs/metrics.md print from this table, and
// the summary builder writes exactly these keys (tests check both ways).
// Later issues add keys; none is renamed.
#pragma once

#include <span>
#include <string_view>

namespace tokenscope::metrics {

struct KeyDefinition {
  std::string_view key;
  std::string_view unit;
  std::string_view definition;
};

// Scalar keys of run.json "summary".
inline constexpr KeyDefinition kScalarKeys[] = {
    {"requests_total", "requests", "requests in the workload (completed + failed)"},
    {"requests_completed", "requests", "requests that finished with outcome ok"},
    {"requests_failed", "requests", "requests with any other outcome (rejected, errors)"},
    {"duration_s", "s", "first dispatch (earliest t_sched) to last completion (latest t_close)"},
    {"request_throughput_rps", "req/s", "requests_completed / duration_s"},
    {"output_token_throughput_tps", "tok/s", "output_tokens_total / duration_s"},
    {"prompt_tokens_total", "tokens", "prompt tokens of completed requests"},
    {"output_tokens_total", "tokens", "output tokens of completed requests (server usage count)"},
    {"prefix_cache_queries_tokens", "tokens",
     "prompt tokens looked up in the prefix cache (vllm:prefix_cache_queries)"},
    {"prefix_cache_hits_tokens", "tokens",
     "prompt tokens found in the prefix cache (vllm:prefix_cache_hits)"},
    {"prefix_cache_hit_rate", "ratio", "prefix_cache_hits_tokens / prefix_cache_queries_tokens"},
    {"preemptions_total", "count", "preemptions of running requests (recompute or swap)"},
    {"kv_cache_usage_peak", "ratio",
     "peak of vllm:kv_cache_usage_perc over steps (free cached blocks count as free); null when "
     "the KV capacity is unlimited"},
};

// Distribution keys: objects with mean, std, min, max, p50, p90, p95, p99,
// p99_9, count and ci95 (exact binomial interval of each percentile).
inline constexpr KeyDefinition kDistributionKeys[] = {
    {"ttft_ms", "ms", "time to first token: t_first_token - t_send"},
    {"tpot_ms", "ms", "time per output token: (E2E - TTFT) / (N - 1), requests with N > 1"},
    {"itl_ms", "ms",
     "inter-token latency: per-token gaps; an event gap carrying k tokens counts as k gaps of "
     "gap/k (from a log-linear histogram: percentiles within 0.4%)"},
    {"e2e_ms", "ms", "end-to-end latency: t_last_token - t_send"},
};

// The fields of every distribution object, in output order.
inline constexpr std::string_view kDistributionFields[] = {"count", "mean", "std", "min", "max",
                                                           "p50",   "p90",  "p95", "p99", "p99_9"};

}  // namespace tokenscope::metrics
