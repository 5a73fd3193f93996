// One table per engine: the engine's metric name → canonical name, scale,
// aggregation over label sets, and where the name comes from. Names were
// read from each engine's documentation or source (cited per entry); where a
// name changed between versions both are listed, the newer first (rank 0),
// so a version that exports both (during a deprecation) is counted once.
// docs/observe.md "Canonical series" prints these tables.
#include "observe/canonical_maps.h"

namespace tokenscope::observe::maps {
namespace {

using A = Aggregation;

// Sources, named once.
constexpr std::string_view kVllmV1Loggers = "vllm vllm/v1/metrics/loggers.py (0.9-0.11)";
constexpr std::string_view kVllmDocs =
    "docs.vllm.ai usage/metrics (Production Metrics), docs/design/metrics.md";
constexpr std::string_view kVllmV0Metrics = "vllm vllm/engine/metrics.py (V0, 0.6-0.10)";
constexpr std::string_view kSglangCollector = "sglang python/sglang/srt/metrics/collector.py";
constexpr std::string_view kSglangDocs = "docs.sglang.ai references/production_metrics";
constexpr std::string_view kLlamaServer = "llama.cpp examples/server/server.cpp /metrics (c392e50, 2025-02)";
constexpr std::string_view kTgiDocs = "text-generation-inference docs/source/reference/metrics.md";
constexpr std::string_view kTritonDocs = "triton-inference-server/server docs/user_guide/metrics.md";
constexpr std::string_view kTrtllmReporter =
    "tensorrtllm_backend inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc";
constexpr std::string_view kDcgmCounters =
    "dcgm-exporter etc/default-counters.csv, etc/dcp-metrics-included.csv";
constexpr std::string_view kDcgmFields = "DCGM dcgm_fields.h (DCGM_FI_* field ids, units)";

// vLLM V1 engine (0.8 and later). Every series carries model_name and, since
// 0.9, engine="N" per data-parallel engine core: counts are summed over
// engines, the KV usage ratio averaged. `tokenscope serve` writes these names
// too (src/serve/metrics.cpp), so it maps here.
// clang-format off
constexpr Mapping kVllmV1[] = {
    {"vllm:num_requests_running", "requests_running", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
    {"vllm:num_requests_waiting", "requests_waiting", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
    // Renamed in 0.9; 0.9 and 0.10 export both with the same value.
    {"vllm:kv_cache_usage_perc", "kv_cache_usage", kUnit, A::kMean, {}, {}, 0, kVllmV1Loggers},
    {"vllm:gpu_cache_usage_perc", "kv_cache_usage", kUnit, A::kMean, {}, {}, 1, kVllmV1Loggers},
    {"vllm:prefix_cache_queries", "prefix_cache_queries_tokens", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
    {"vllm:gpu_prefix_cache_queries", "prefix_cache_queries_tokens", kUnit, A::kSum, {}, {}, 1, kVllmV1Loggers},
    {"vllm:prefix_cache_hits", "prefix_cache_hits_tokens", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
    {"vllm:gpu_prefix_cache_hits", "prefix_cache_hits_tokens", kUnit, A::kSum, {}, {}, 1, kVllmV1Loggers},
    {"vllm:num_preemptions", "preemptions", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
    {"vllm:prompt_tokens", "prompt_tokens", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
    {"vllm:generation_tokens", "generation_tokens", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
    // Every finished_reason (stop, length, abort): all requests the server finished.
    {"vllm:request_success", "requests_finished", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
    {"vllm:iteration_tokens_total", "iteration_tokens", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
    {"vllm:time_to_first_token_seconds", "server_ttft_seconds", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
    // The per-token gap was vllm:time_per_output_token_seconds until 0.10 and is
    // vllm:inter_token_latency_seconds from 0.11 (which exports both for a while).
    {"vllm:inter_token_latency_seconds", "server_itl_seconds", kUnit, A::kSum, {}, {}, 0, kVllmDocs},
    {"vllm:time_per_output_token_seconds", "server_itl_seconds", kUnit, A::kSum, {}, {}, 1, kVllmV1Loggers},
    {"vllm:request_time_per_output_token_seconds", "server_tpot_seconds", kUnit, A::kSum, {}, {}, 0, kVllmDocs},
    {"vllm:e2e_request_latency_seconds", "server_e2e_seconds", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
    {"vllm:request_queue_time_seconds", "server_queue_seconds", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
    {"vllm:request_prefill_time_seconds", "server_prefill_seconds", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
    {"vllm:request_decode_time_seconds", "server_decode_seconds", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
    {"vllm:request_inference_time_seconds", "server_inference_seconds", kUnit, A::kSum, {}, {}, 0, kVllmV1Loggers},
};

// vLLM V0 engine (to 0.10 with VLLM_USE_V1=0). Its prefix cache reports a
// block hit rate gauge (vllm:gpu_prefix_cache_hit_rate), not token counts, so
// the prefix_cache_* series stay empty; swapping exists only here.
constexpr Mapping kVllmV0[] = {
    {"vllm:num_requests_running", "requests_running", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
    {"vllm:num_requests_waiting", "requests_waiting", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
    {"vllm:num_requests_swapped", "requests_swapped", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
    {"vllm:gpu_cache_usage_perc", "kv_cache_usage", kUnit, A::kMean, {}, {}, 0, kVllmV0Metrics},
    {"vllm:num_preemptions_total", "preemptions", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
    {"vllm:prompt_tokens_total", "prompt_tokens", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
    {"vllm:generation_tokens_total", "generation_tokens", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
    {"vllm:request_success_total", "requests_finished", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
    {"vllm:iteration_tokens_total", "iteration_tokens", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
    {"vllm:time_to_first_token_seconds", "server_ttft_seconds", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
    // V0 observes every token gap of every running request: the ITL.
    {"vllm:time_per_output_token_seconds", "server_itl_seconds", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
    {"vllm:e2e_request_latency_seconds", "server_e2e_seconds", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
    {"vllm:request_queue_time_seconds", "server_queue_seconds", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
    {"vllm:request_prefill_time_seconds", "server_prefill_seconds", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
    {"vllm:request_decode_time_seconds", "server_decode_seconds", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
    {"vllm:request_inference_time_seconds", "server_inference_seconds", kUnit, A::kSum, {}, {}, 0, kVllmV0Metrics},
};

// SGLang (--enable-metrics). Scheduler series are written by each
// data-parallel rank's first attention-TP rank (labels tp_rank, dp_rank...):
// summed; token_usage is a ratio: averaged. cached_tokens_total counts prompt
// tokens served from the radix cache (label cache_source in newer versions:
// device, host, storage, summed). SGLang has no count of looked-up tokens, so
// prefix_cache_queries_tokens stays empty (every prompt token is looked up:
// the hit ratio is prefix_cache_hits_tokens / prompt_tokens there).
constexpr Mapping kSglang[] = {
    {"sglang:num_running_reqs", "requests_running", kUnit, A::kSum, {}, {}, 0, kSglangCollector},
    {"sglang:num_queue_reqs", "requests_waiting", kUnit, A::kSum, {}, {}, 0, kSglangCollector},
    {"sglang:token_usage", "kv_cache_usage", kUnit, A::kMean, {}, {}, 0, kSglangCollector},
    {"sglang:cached_tokens_total", "prefix_cache_hits_tokens", kUnit, A::kSum, {}, {}, 0, kSglangCollector},
    // A retracted request gives back its KV cache and is rescheduled: a preemption.
    {"sglang:num_retracted_requests_total", "preemptions", kUnit, A::kSum, {}, {}, 0, kSglangCollector},
    {"sglang:prompt_tokens_total", "prompt_tokens", kUnit, A::kSum, {}, {}, 0, kSglangDocs},
    {"sglang:generation_tokens_total", "generation_tokens", kUnit, A::kSum, {}, {}, 0, kSglangDocs},
    {"sglang:num_requests_total", "requests_finished", kUnit, A::kSum, {}, {}, 0, kSglangCollector},
    {"sglang:time_to_first_token_seconds", "server_ttft_seconds", kUnit, A::kSum, {}, {}, 0, kSglangDocs},
    // Older versions observed each decode step's gap as time_per_output_token_seconds.
    {"sglang:inter_token_latency_seconds", "server_itl_seconds", kUnit, A::kSum, {}, {}, 0, kSglangCollector},
    {"sglang:time_per_output_token_seconds", "server_itl_seconds", kUnit, A::kSum, {}, {}, 1, kSglangDocs},
    {"sglang:e2e_request_latency_seconds", "server_e2e_seconds", kUnit, A::kSum, {}, {}, 0, kSglangDocs},
    {"sglang:queue_time_seconds", "server_queue_seconds", kUnit, A::kSum, {}, {}, 0, kSglangCollector},
};

// llama.cpp's llama-server (--metrics): unlabelled gauges and counters, no
// histograms. kv_cache_usage_ratio is used cells / n_ctx.
constexpr Mapping kLlamaCpp[] = {
    {"llamacpp:requests_processing", "requests_running", kUnit, A::kSum, {}, {}, 0, kLlamaServer},
    {"llamacpp:requests_deferred", "requests_waiting", kUnit, A::kSum, {}, {}, 0, kLlamaServer},
    {"llamacpp:kv_cache_usage_ratio", "kv_cache_usage", kUnit, A::kMean, {}, {}, 0, kLlamaServer},
    {"llamacpp:prompt_tokens_total", "prompt_tokens", kUnit, A::kSum, {}, {}, 0, kLlamaServer},
    {"llamacpp:tokens_predicted_total", "generation_tokens", kUnit, A::kSum, {}, {}, 0, kLlamaServer},
};

// Hugging Face TGI (the Rust router's metrics crate: counters without
// "_total", durations as histograms with buckets 0.0001 × 1.5^n s). Token
// counts exist only as per-request histograms: their _sum is the count
// (input_length is observed when a request is validated, generated_tokens
// when it succeeds). mean_time_per_token is one value per request.
constexpr Mapping kTgi[] = {
    {"tgi_batch_current_size", "requests_running", kUnit, A::kSum, {}, {}, 0, kTgiDocs},
    {"tgi_queue_size", "requests_waiting", kUnit, A::kSum, {}, {}, 0, kTgiDocs},
    {"tgi_request_input_length_sum", "prompt_tokens", kUnit, A::kSum, {}, {}, 0, kTgiDocs},
    {"tgi_request_generated_tokens_sum", "generation_tokens", kUnit, A::kSum, {}, {}, 0, kTgiDocs},
    {"tgi_request_success", "requests_finished", kUnit, A::kSum, {}, {}, 0, kTgiDocs},
    {"tgi_request_duration", "server_e2e_seconds", kUnit, A::kSum, {}, {}, 0, kTgiDocs},
    {"tgi_request_queue_duration", "server_queue_seconds", kUnit, A::kSum, {}, {}, 0, kTgiDocs},
    {"tgi_request_mean_time_per_token_duration", "server_tpot_seconds", kUnit, A::kSum, {}, {}, 0, kTgiDocs},
    {"tgi_request_inference_duration", "server_inference_seconds", kUnit, A::kSum, {}, {}, 0, kTgiDocs},
};

// Triton Inference Server with the TensorRT-LLM backend. The nv_trt_llm_*
// gauges carry several quantities in one family, told apart by a label. The
// core nv_inference_* series are per model, and an ensemble and its steps see
// the same request (postprocessing once per streamed response), so they are
// never added: finished requests are those of the model named tensorrt_llm
// (the name in tensorrtllm_backend's all_models/inflight_batcher_llm; another
// name leaves requests_finished empty), and the first-response histogram
// (--metrics-config histogram_latencies=true, in milliseconds, decoupled
// models only) is the busiest model's.
constexpr Mapping kTriton[] = {
    {"nv_trt_llm_request_metrics", "requests_running", kUnit, A::kSum, "request_type", "scheduled", 0, kTrtllmReporter},
    {"nv_trt_llm_request_metrics", "requests_waiting", kUnit, A::kSum, "request_type", "waiting", 0, kTrtllmReporter},
    {"nv_inference_pending_request_count", "requests_waiting", kUnit, A::kSum, {}, {}, 1, kTritonDocs},
    {"nv_trt_llm_kv_cache_block_metrics", "kv_cache_usage", kUnit, A::kMean, "kv_cache_block_type", "fraction", 0, kTrtllmReporter},
    {"nv_llm_input_token_len_sum", "prompt_tokens", kUnit, A::kSum, {}, {}, 0, kTrtllmReporter},
    {"nv_llm_output_token_len_sum", "generation_tokens", kUnit, A::kSum, {}, {}, 0, kTrtllmReporter},
    {"nv_inference_request_success", "requests_finished", kUnit, A::kSum, "model", "tensorrt_llm", 0, kTritonDocs},
    {"nv_inference_first_response_histogram_ms", "server_ttft_seconds", kMillisecondsToSeconds, A::kMax, {}, {}, 0, kTritonDocs},
};

// NVIDIA DCGM exporter. One series per GPU (label gpu, the device index) and
// per MIG GPU instance (GPU_I_ID); the exporter may add pod/container labels
// and repeat a GPU's value once per pod, so values are never added within a
// GPU: ratios are averaged, the rest take the maximum. DCGM_FI_PROF_* are
// ratios 0..1 and the PCIe *_BYTES fields rates in B/s (dcgm_fields.h), though
// the exporter types the latter as counters.
constexpr Mapping kDcgm[] = {
    {"DCGM_FI_DEV_GPU_UTIL", "gpu_utilization", kPercentToRatio, A::kMean, {}, {}, 0, kDcgmCounters},
    {"DCGM_FI_DEV_FB_USED", "gpu_memory_used_bytes", kMebibytesToBytes, A::kMax, {}, {}, 0, kDcgmCounters},
    // Total = used + free (+ reserved, which DCGM 3 reports apart from used).
    {"DCGM_FI_DEV_FB_TOTAL", "gpu_memory_total_bytes", kMebibytesToBytes, A::kMax, {}, {}, 0, kDcgmFields},
    {"DCGM_FI_DEV_FB_USED", "gpu_memory_total_bytes", kMebibytesToBytes, A::kMax, {}, {}, 1, kDcgmCounters},
    {"DCGM_FI_DEV_FB_FREE", "gpu_memory_total_bytes", kMebibytesToBytes, A::kMax, {}, {}, 1, kDcgmCounters},
    {"DCGM_FI_DEV_FB_RESERVED", "gpu_memory_total_bytes", kMebibytesToBytes, A::kMax, {}, {}, 1, kDcgmFields},
    {"DCGM_FI_DEV_POWER_USAGE", "gpu_power_watts", kUnit, A::kMax, {}, {}, 0, kDcgmCounters},
    {"DCGM_FI_DEV_SM_CLOCK", "gpu_sm_clock_hz", kMegahertzToHertz, A::kMax, {}, {}, 0, kDcgmCounters},
    {"DCGM_FI_DEV_MEM_CLOCK", "gpu_memory_clock_hz", kMegahertzToHertz, A::kMax, {}, {}, 0, kDcgmCounters},
    {"DCGM_FI_PROF_PCIE_RX_BYTES", "gpu_pcie_rx_bytes_per_s", kUnit, A::kMax, {}, {}, 0, kDcgmFields},
    {"DCGM_FI_PROF_PCIE_TX_BYTES", "gpu_pcie_tx_bytes_per_s", kUnit, A::kMax, {}, {}, 0, kDcgmFields},
    {"DCGM_FI_DEV_GPU_TEMP", "gpu_temperature_c", kUnit, A::kMax, {}, {}, 0, kDcgmCounters},
    // Renamed (clocks event reasons) in DCGM 3.2; the bitmask is the same.
    {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gpu_throttle_reasons", kUnit, A::kMax, {}, {}, 0, kDcgmFields},
    {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gpu_throttle_reasons", kUnit, A::kMax, {}, {}, 1, kDcgmCounters},
    {"DCGM_FI_PROF_DRAM_ACTIVE", "gpu_dram_active", kUnit, A::kMean, {}, {}, 0, kDcgmCounters},
    {"DCGM_FI_PROF_SM_ACTIVE", "gpu_sm_active", kUnit, A::kMean, {}, {}, 0, kDcgmCounters},
    {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gpu_tensor_active", kUnit, A::kMean, {}, {}, 0, kDcgmCounters},
};

// The simulator's own tokenscope:* names come first, so `tokenscope serve`
// is always read as vLLM V1 whatever else it writes. V0-only names decide V0
// before the vllm: prefix decides V1.
constexpr Marker kMarkers[] = {
    {"tokenscope:", true, Engine::kVllmV1},
    {"vllm:num_requests_swapped", false, Engine::kVllmV0},
    {"vllm:cpu_cache_usage_perc", false, Engine::kVllmV0},
    {"vllm:gpu_prefix_cache_hit_rate", false, Engine::kVllmV0},
    {"vllm:cpu_prefix_cache_hit_rate", false, Engine::kVllmV0},
    {"vllm:", true, Engine::kVllmV1},
    {"sglang:", true, Engine::kSglang},
    {"llamacpp:", true, Engine::kLlamaCpp},
    {"tgi_", true, Engine::kTgi},
    {"nv_trt_llm_", true, Engine::kTriton},
    {"nv_inference_", true, Engine::kTriton},
    {"DCGM_FI_", true, Engine::kDcgm},
};
// clang-format on

}  // namespace

EngineTable table_for(Engine engine) {
  switch (engine) {
    case Engine::kVllmV1:
      return {engine, false, kVllmV1};
    case Engine::kVllmV0:
      return {engine, false, kVllmV0};
    case Engine::kSglang:
      return {engine, false, kSglang};
    case Engine::kLlamaCpp:
      return {engine, false, kLlamaCpp};
    case Engine::kTgi:
      return {engine, false, kTgi};
    case Engine::kTriton:
      return {engine, false, kTriton};
    case Engine::kDcgm:
      return {engine, true, kDcgm};
    case Engine::kUnknown:
      break;
  }
  return {Engine::kUnknown, false, {}};
}

std::span<const Marker> detection_markers() {
  return kMarkers;
}

}  // namespace tokenscope::observe::maps
