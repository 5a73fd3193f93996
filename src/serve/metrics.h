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

// A fleet's /metrics (serve --replicas): every engine-side series once per
// engine, labelled engine="N" as vLLM's data-parallel engines are (the
// request histograms by the engine that ran the request); the server-wide
// series (HTTP, connections, faults, emission lag) once, labelled by
// model_name alone. One engine keeps engine="0" on every series.
class ServeMetrics {
 public:
  ServeMetrics(std::string model_name, std::uint32_t max_model_len, std::size_t engines = 1);
  std::size_t engines() const { return engines_.size(); }

  // Engine state after a step of engine e.
  void on_step(std::uint32_t running, std::uint32_t waiting, double kv_usage, std::uint64_t step_tokens,
               std::uint32_t batch_size, std::uint64_t prompt_tokens_delta,
               std::uint64_t generation_tokens_delta, std::uint64_t queries_delta, std::uint64_t hits_delta,
               std::uint64_t preemptions_delta, std::uint64_t tenant_switches_delta,
               std::uint64_t swap_out_delta, std::uint64_t swap_in_delta, std::size_t e = 0);
  // The host KV pool (dynamic tenant reuse) after a step: blocks held, its
  // capacity, and the engine's totals of evictions and of evicted blocks
  // recomputed.
  void set_host_kv(std::uint64_t blocks, std::uint64_t capacity_blocks, std::uint64_t evictions_total,
                   std::uint64_t recomputed_total, std::size_t e = 0);
  // LoRA adapters (engine max_loras > 0): the names of the adapters of
  // running and of waiting requests (comma-separated), the cap, the loads so
  // far: vllm:lora_requests_info (its value the wall-clock time of the
  // update, as vLLM's) and tokenscope:lora_loads_total. Not rendered before
  // the first call.
  void set_lora(std::string running, std::string waiting, std::uint32_t max_lora, std::uint64_t loads_total,
                std::size_t e = 0);
  // Queue gauges between steps (after admissions and aborts).
  void set_queue(std::uint32_t running, std::uint32_t waiting, std::size_t e = 0);
  void on_inter_token(double seconds, std::size_t e = 0);
  void on_finished(const FinishedTimes& t, std::size_t e = 0);
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

  // Counters and gauges by their exported name (tests and the fault check):
  // summed over the engines (the KV usage and its peak: the largest), or
  // engine e's alone when e is given.
  double value(const std::string& name, const std::string& label = "") const;
  double value(const std::string& name, const std::string& label, std::size_t e) const;
  std::string render() const;

 private:
  // One engine's series.
  struct EngineSeries {
    explicit EngineSeries(std::string labels, std::uint32_t max_model_len);
    std::string labels;  // model_name="...",engine="N"
    double running = 0, waiting = 0, kv_usage = 0, kv_usage_peak = 0;
    std::uint64_t prefix_queries = 0, prefix_hits = 0, prompt_tokens = 0, generation_tokens = 0,
                  preemptions = 0;
    std::uint64_t steps = 0, tenant_switches = 0, swap_out_bytes = 0, swap_in_bytes = 0;
    std::uint64_t host_kv_blocks = 0, host_kv_capacity = 0, host_kv_evictions = 0, host_kv_recomputed = 0;
    bool lora = false;
    std::string lora_running, lora_waiting;
    std::uint32_t max_lora = 0;
    std::uint64_t lora_loads = 0;
    double lora_updated_unix = 0;
    std::map<std::string, std::uint64_t> success;  // by finished_reason
    prometheus::Histogram ttft, itl, tpot, e2e, queue, prefill, decode, inference, iteration_tokens,
        prompt_hist, generation_hist, batch_size;
  };
  double value_locked(const std::string& name, const std::string& label, const EngineSeries& s) const;
  EngineSeries& at(std::size_t e) { return engines_[e < engines_.size() ? e : 0]; }

  mutable std::mutex mutex_;
  std::vector<EngineSeries> engines_;
  std::string labels_;  // the server-wide series': engine 0's alone, model_name alone for a fleet
  std::function<net::ConnectionStats()> connection_source_;
  std::function<engine::PerturbationCounts()> perturbation_source_;
  std::map<std::string, std::uint64_t> faults_;  // by kind
  double audio_seconds_ = 0;
  std::map<int, std::uint64_t> http_responses_;  // by status
  prometheus::Histogram emission_lag_;
};

}  // namespace tokenscope::serve
