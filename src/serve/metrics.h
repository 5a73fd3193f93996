// The server's Prometheus metrics: vLLM V1's names, types, labels
// (model_name, engine) and histogram buckets, plus tokenscope's own series
// under "tokenscope:". Updated from the engine's context, rendered on
// GET /metrics in the Prometheus text format 0.0.4. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/prometheus.h"
#include "engine/perturbation.h"
#include "net/http.h"

namespace tokenscope::serve {

// vLLM's buckets.
std::vector<double> ttft_buckets();
std::vector<double> inter_token_buckets();      // also request_time_per_output_token
std::vector<double> request_latency_buckets();  // e2e, queue, prefill, decode, inference
std::vector<double> iteration_tokens_buckets();
std::vector<double> buckets_1_2_5(std::uint64_t max_value);  // 1, 2, 5, 10, ... <= max_value

// Per finished request, in seconds from arrival.
struct FinishedTimes {
  double ttft_s = 0.0;
  double e2e_s = 0.0;
  double queue_s = 0.0;      // arrival -> first scheduled
  double prefill_s = 0.0;    // first scheduled -> first token
  double decode_s = 0.0;     // first token -> last token
  double inference_s = 0.0;  // first scheduled -> last token
  double tpot_s = -1.0;      // (last - first token) / (n - 1); < 0 when n <= 1
  std::uint64_t prompt_tokens = 0;
  std::uint64_t generation_tokens = 0;
  std::string finish_reason;  // "stop", "length", "abort"
};

class ServeMetrics {
 public:
  ServeMetrics(std::string model_name, std::uint32_t max_model_len);

  // Engine state after a step.
  void on_step(std::uint32_t running, std::uint32_t waiting, double kv_usage, std::uint64_t step_tokens,
               std::uint32_t batch_size, std::uint64_t prompt_tokens_delta,
               std::uint64_t generation_tokens_delta, std::uint64_t queries_delta, std::uint64_t hits_delta,
               std::uint64_t preemptions_delta, std::uint64_t tenant_switches_delta,
               std::uint64_t swap_out_delta, std::uint64_t swap_in_delta);
  // The host KV pool (dynamic tenant reuse) after a step: blocks held, its
  // capacity, and the engine's totals of evictions and of evicted blocks
  // recomputed.
  void set_host_kv(std::uint64_t blocks, std::uint64_t capacity_blocks, std::uint64_t evictions_total,
                   std::uint64_t recomputed_total);
  // LoRA adapters (engine max_loras > 0): the names of the adapters of
  // running and of waiting requests (comma-separated), the cap, the loads so
  // far: vllm:lora_requests_info (its value the wall-clock time of the
  // update, as vLLM's) and tokenscope:lora_loads_total. Not rendered before
  // the first call.
  void set_lora(std::string running, std::string waiting, std::uint32_t max_lora, std::uint64_t loads_total);
  // Queue gauges between steps (after admissions and aborts).
  void set_queue(std::uint32_t running, std::uint32_t waiting);
  void on_inter_token(double seconds);
  void on_finished(const FinishedTimes& t);
  void on_emission_lag(double seconds);
  void on_fault(const std::string& kind);
  // Seconds of audio a request brought (transcriptions, input_audio parts):
  // tokenscope:audio_input_seconds_total.
  void on_audio(double seconds);
  void on_http_response(int status);
  // Where the connection series (tokenscope:connections,
  // tokenscope:connections_dropped_total, tokenscope:accept_errors_total)
  // come from: called on every render, so the gauge is the count of the
  // moment. Thread-safe; set it once the server exists.
  void set_connection_source(std::function<net::ConnectionStats()> source);
  // Where tokenscope:perturbations_injected_total{kind} comes from: the
  // engine's injections per kind (Perturber::counts_by_kind), read on every
  // render. Thread-safe; without a source every kind is 0.
  void set_perturbation_source(std::function<engine::PerturbationCounts()> source);

  // Counters and gauges by their exported name (tests and the fault check).
  double value(const std::string& name, const std::string& label = "") const;
  std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::string labels_;  // model_name="...",engine="0"
  double running_ = 0, waiting_ = 0, kv_usage_ = 0, kv_usage_peak_ = 0;
  std::uint64_t prefix_queries_ = 0, prefix_hits_ = 0, prompt_tokens_ = 0, generation_tokens_ = 0,
                preemptions_ = 0;
  std::uint64_t steps_ = 0, tenant_switches_ = 0, swap_out_bytes_ = 0, swap_in_bytes_ = 0;
  std::uint64_t host_kv_blocks_ = 0, host_kv_capacity_ = 0, host_kv_evictions_ = 0, host_kv_recomputed_ = 0;
  bool lora_ = false;
  std::string lora_running_, lora_waiting_;
  std::uint32_t max_lora_ = 0;
  std::uint64_t lora_loads_ = 0;
  double lora_updated_unix_ = 0;
  std::function<net::ConnectionStats()> connection_source_;
  std::function<engine::PerturbationCounts()> perturbation_source_;
  std::map<std::string, std::uint64_t> success_;  // by finished_reason
  std::map<std::string, std::uint64_t> faults_;   // by kind
  double audio_seconds_ = 0;
  std::map<int, std::uint64_t> http_responses_;  // by status
  prometheus::Histogram ttft_, itl_, tpot_, e2e_, queue_, prefill_, decode_, inference_, iteration_tokens_,
      prompt_hist_, generation_hist_, batch_size_, emission_lag_;
};

}  // namespace tokenscope::serve
