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
    {"requests_total", "requests",
     "requests in the workload (completed + failed + requests_cancelled_planned)"},
    {"requests_completed", "requests", "requests that finished with outcome ok"},
    {"requests_failed", "requests", "requests with any other outcome (rejected, errors)"},
    {"requests_cancelled_planned", "requests",
     "requests the client cancelled on purpose (bench --cancel): outcome cancelled with cancel_planned; "
     "neither completed nor failed, left out of SLO attainment and goodput"},
    {"requests_warmup_excluded", "requests",
     "requests scheduled in the warm-up window: on disk (\"warmup\": true) but in no other key"},
    {"duration_s", "s", "first dispatch (earliest t_sched) to last completion (latest t_close)"},
    {"duration_send_s", "s", "first send (earliest t_send) to last response (latest t_close)"},
    {"duration_steady_s", "s",
     "the steady-state window: from when the requests in flight first reach their time-weighted median "
     "level to when they last fall below it (ramp-up and drain left out)"},
    {"request_throughput_steady_rps", "req/s",
     "completed requests whose t_close falls in the steady-state window (start, end] / duration_steady_s"},
    {"request_throughput_rps", "req/s", "requests_completed / duration_s"},
    {"output_token_throughput_tps", "tok/s", "output_tokens_total / duration_s"},
    {"input_token_throughput_tps", "tok/s", "prompt_tokens_total / duration_s"},
    {"prompt_tokens_total", "tokens", "prompt tokens of completed requests"},
    {"inputs_total", "inputs",
     "pooling runs (bench --api embeddings | rerank): inputs (embeddings) or documents (rerank) of the "
     "completed requests; 0 for generation"},
    {"inputs_per_request_mean", "inputs",
     "inputs_total / completed pooling requests: the batch size each request carried; null for generation"},
    {"audio_seconds_total", "s",
     "seconds of audio the completed requests carried (bench --api transcriptions: the uploaded files; "
     "chat's "
     "input_audio parts); 0 without audio"},
    {"audio_seconds_per_second", "s/s",
     "audio_seconds_total / duration_s: seconds of audio handled per second of the run (a real-time factor: "
     "above 1, faster than real time)"},
    {"output_tokens_total", "tokens", "output tokens of completed requests (server usage count)"},
    {"output_token_mismatches", "requests",
     "completed requests whose server usage count differs from the client's own count of output events "
     "(a cross-check; the usage count is what is reported)"},
    {"prompt_tokens_planned_total", "tokens",
     "planned prompt tokens of the completed requests that have a planned length and a server count "
     "(bench; later turns of a session have no planned length)"},
    {"prompt_tokens_planned_reported", "tokens",
     "the server's count (usage prompt_tokens) of the same requests: equal to prompt_tokens_planned_total "
     "when every prompt reached the server at its planned length"},
    {"prompt_token_mismatches", "requests",
     "of those requests, the ones whose server count differs from the planned length"},
    {"requests_without_usage", "requests",
     "completed requests for which the server sent no usage count (their output tokens count as 0 unless "
     "counted on the client with --tokenizer)"},
    {"output_tokens_client_counted", "requests",
     "completed requests whose output tokens were counted on the client (--tokenizer, no server usage)"},
    {"requests_with_reasoning", "requests",
     "completed requests whose response carried reasoning (delta.reasoning or reasoning_content) or whose "
     "usage reported completion_tokens_details.reasoning_tokens"},
    {"reasoning_tokens_total", "tokens",
     "output tokens of completed requests that were reasoning: the server's "
     "completion_tokens_details.reasoning_tokens, else the reasoning events' share of the output tokens "
     "(included in output_tokens_total)"},
    {"goodput_rps", "req/s",
     "completed requests meeting every SLO of their task class / duration_s; null when no SLO is set. "
     "Open loop: TTFT and E2E against the SLO are taken from when the request was due (t_sched, or "
     "t_dispatch behind a concurrency cap), so client lag counts against it"},
    {"slo_latency_from", "text",
     "what SLO verdicts measure TTFT and E2E from: \"schedule\" (open loop) or \"send\" (closed loop)"},
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
    {"ttft_ms", "ms", "time to first token of any kind, reasoning or answer: t_first_token - t_send"},
    {"ttfo_ms", "ms",
     "time to first output (answer) token: t_first_answer - t_send for a response with reasoning, TTFT "
     "for the rest; requests with an answer token"},
    {"tpot_ms", "ms", "time per output token: (E2E - TTFT) / (N - 1), requests with N > 1"},
    {"tpot_answer_ms", "ms",
     "TPOT of the answer alone: (E2E - TTFO) / (A - 1), A the output tokens less the reasoning tokens, "
     "requests with A > 1 (equals TPOT for a response without reasoning)"},
    {"itl_ms", "ms",
     "inter-token latency: per-token gaps; an event gap carrying k tokens counts as k gaps of "
     "gap/k (from a log-linear histogram: percentiles within 0.4%)"},
    {"e2e_ms", "ms", "end-to-end latency: t_last_token - t_send"},
    {"ttft_sched_ms", "ms",
     "TTFT from the schedule: t_first_token - t_sched (charges client lag to the request)"},
    {"e2e_sched_ms", "ms", "E2E from the schedule: t_last_token - t_sched"},
    {"send_lag_ms", "ms", "t_send - t_sched: how late the client sent (its own accuracy; includes queue_ms)"},
    {"queue_ms", "ms", "with a concurrency cap: t_dispatch - t_sched, the wait for a free slot (else empty)"},
    {"icl_ms", "ms", "raw gaps between output events (what vLLM and SGLang call ITL)"},
    {"ntpot_ms", "ms", "normalised time per output token: E2E / N, requests with N > 0"},
};

// Object keys: requests_by_outcome {outcome: count}; slo_attainment {class:
// {percentile, requests, met, met_fraction, goodput_rps, ttft_ms|tpot_ms|e2e_ms|ttfo_ms:
// {target, value, pass}, pass}}; by_class and by_tenant {name: {requests,
// completed, failed, throughputs, goodput_rps, ttft/tpot/e2e p50 p90 p99}},
// present when there is more than one class or tenant.
inline constexpr KeyDefinition kObjectKeys[] = {
    {"requests_by_outcome", "requests", "count of requests per outcome (ok, http_error, timeout, ...)"},
    {"slo_attainment", "object",
     "per task class with an SLO: each metric's value at the class's percentile against its target "
     "(failed requests count as missing; TTFT and E2E from when the request was due, in the open loop), "
     "the fraction of requests meeting every target, pass/fail"},
    {"by_class", "object", "per task class: counts, throughput, goodput, TTFT/TPOT/E2E p50 p90 p99"},
    {"by_tenant", "object", "per tenant: the same as by_class"},
    {"by_model", "object", "per model or LoRA adapter of a model mix ({} without one): the same as by_class"},
};

// Keys of run.json "tasks" (bench with agentic tasks, docs/tasks.md): what
// TaskSummary (bench/task_driver.h) writes, and bench_run beside it.
inline constexpr KeyDefinition kTaskKeys[] = {
    {"tasks", "tasks", "tasks that ended, warm-up tasks left out (ok + failed + cancelled)"},
    {"ok", "tasks", "tasks whose every step ended ok (and, with a judge, was not rejected)"},
    {"failed", "tasks", "tasks failed by a step's final failure (failure, failed_step in tasks.jsonl)"},
    {"cancelled", "tasks",
     "tasks ended by the run's stop (Ctrl-C, the run's end) before their steps were done"},
    {"pass_rate", "ratio", "ok / (ok + failed): the semantic pass rate; null with neither"},
    {"pass_rate_ci95", "ratio",
     "the pass rate's exact 95% (Clopper-Pearson) interval [low, high]; null with no task ok or failed"},
    {"completion_ms", "ms",
     "p50, p90, p99 of ok tasks' wall time (start to their last step's end, the judge's time left out), each "
     "{value, ci95} with a 95% percentile-bootstrap interval (200 resamples)"},
    {"goodput", "object",
     "tasks: ok tasks within their class's task_ms (any ok task where none is set); per_s: tasks / span_s; "
     "span_s: first task's arrival to last task's end"},
    {"failures_by_class", "steps",
     "failed steps by their final failure's class (a task may count more than once)"},
    {"tasks_failed_by_class", "tasks", "failed tasks by the class of the failure that failed them"},
    {"failures_by_step", "tasks", "failed tasks by the id of the step that failed them"},
    {"retried_by_class", "attempts", "failed attempts that were retried, by class"},
    {"per_task", "mean per task", "steps, model_calls, tool_calls (attempts), prompt_tokens, output_tokens"},
    {"critical_path_ms", "ms", "mean per task of the critical path's model, tool, client and queue parts"},
    {"tool_latency", "ms",
     "per tool: calls, p50_ms, p99_ms of steps that ended ok, start to end (retries included)"},
    {"by_class", "object",
     "per task class: tasks, ok, failed, cancelled, pass_rate, pass_rate_ci95, completion_ms, and slo "
     "{percentile, task_ms, task_ms_at_percentile, pass_rate, met} where the class has a task SLO"},
    {"warmup", "object",
     "warm-up tasks (first warmup_tasks, or arriving within --warmup-s): tasks, completion_p50_ms"},
    {"judge", "object",
     "judged, passed, rejected, errors (the judge's own failures, which fail no task), latency_p50_ms, "
     "latency_p99_ms (of its verdicts); configured, steps (judged steps of the file's task classes; a replay "
     "has none), target and model when configured"},
    {"tools_injected", "object",
     "per mock tool: calls and the errors it injected (http_5xx, timeout, malformed, invalid_arguments)"},
};

// The fields of every distribution object, in output order.
inline constexpr std::string_view kDistributionFields[] = {"count", "mean", "std", "min", "max",
                                                           "p50",   "p90",  "p95", "p99", "p99_9"};

}  // namespace tokenscope::metrics
