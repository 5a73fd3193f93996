#include "serve/metrics.h"

#include <chrono>

#include "core/prometheus.h"
#include "serve/faults.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tokenscope::serve {

std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> inter_token_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> request_latency_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}
std::vector<double> iteration_tokens_buckets() {
  return {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
}
std::vector<double> buckets_1_2_5(std::uint64_t max_value) {
  std::vector<double> out;
  for (double mantissa = 1;; mantissa *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * mantissa;
      if (v > static_cast<double>(max_value)) return out;
      out.push_back(v);
    }
  }
}

namespace {
std::vector<double> lag_buckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0};
}
}  // namespace

ServeMetrics::ServeMetrics(std::string model_name, std::uint32_t max_model_len)
    : labels_(fmt::format("model_name=\"{}\",engine=\"0\"", model_name)),
      ttft_(ttft_buckets()),
      itl_(inter_token_buckets()),
      tpot_(inter_token_buckets()),
      e2e_(request_latency_buckets()),
      queue_(request_latency_buckets()),
      prefill_(request_latency_buckets()),
      decode_(request_latency_buckets()),
      inference_(request_latency_buckets()),
      iteration_tokens_(iteration_tokens_buckets()),
      prompt_hist_(buckets_1_2_5(max_model_len)),
      generation_hist_(buckets_1_2_5(max_model_len)),
      batch_size_({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}),
      emission_lag_(lag_buckets()) {
  for (const char* r : {"stop", "length", "abort"}) success_[r] = 0;
}

void ServeMetrics::on_step(std::uint32_t running, std::uint32_t waiting, double kv_usage,
                           std::uint64_t step_tokens, std::uint32_t batch_size,
                           std::uint64_t prompt_tokens_delta, std::uint64_t generation_tokens_delta,
                           std::uint64_t queries_delta, std::uint64_t hits_delta,
                           std::uint64_t preemptions_delta, std::uint64_t tenant_switches_delta,
                           std::uint64_t swap_out_delta, std::uint64_t swap_in_delta) {
  std::lock_guard lock(mutex_);
  running_ = running;
  waiting_ = waiting;
  kv_usage_ = kv_usage;
  kv_usage_peak_ = std::max(kv_usage_peak_, kv_usage);
  ++steps_;
  if (step_tokens > 0) iteration_tokens_.observe(static_cast<double>(step_tokens));
  if (batch_size > 0) batch_size_.observe(batch_size);
  prompt_tokens_ += prompt_tokens_delta;
  generation_tokens_ += generation_tokens_delta;
  prefix_queries_ += queries_delta;
  prefix_hits_ += hits_delta;
  preemptions_ += preemptions_delta;
  tenant_switches_ += tenant_switches_delta;
  swap_out_bytes_ += swap_out_delta;
  swap_in_bytes_ += swap_in_delta;
}

void ServeMetrics::set_host_kv(std::uint64_t blocks, std::uint64_t capacity_blocks,
                               std::uint64_t evictions_total, std::uint64_t recomputed_total) {
  std::lock_guard lock(mutex_);
  host_kv_blocks_ = blocks;
  host_kv_capacity_ = capacity_blocks;
  host_kv_evictions_ = evictions_total;
  host_kv_recomputed_ = recomputed_total;
}

void ServeMetrics::set_lora(std::string running, std::string waiting, std::uint32_t max_lora,
                            std::uint64_t loads_total) {
  std::lock_guard lock(mutex_);
  lora_ = true;
  lora_running_ = std::move(running);
  lora_waiting_ = std::move(waiting);
  max_lora_ = max_lora;
  lora_loads_ = loads_total;
  lora_updated_unix_ =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void ServeMetrics::set_queue(std::uint32_t running, std::uint32_t waiting) {
  std::lock_guard lock(mutex_);
  running_ = running;
  waiting_ = waiting;
}

void ServeMetrics::on_inter_token(double s) {
  std::lock_guard lock(mutex_);
  itl_.observe(s);
}

void ServeMetrics::on_finished(const FinishedTimes& t) {
  std::lock_guard lock(mutex_);
  ++success_[t.finish_reason];
  if (t.finish_reason == "abort") return;  // vLLM records latencies of completed requests only
  ttft_.observe(t.ttft_s);
  e2e_.observe(t.e2e_s);
  queue_.observe(t.queue_s);
  prefill_.observe(t.prefill_s);
  decode_.observe(t.decode_s);
  inference_.observe(t.inference_s);
  if (t.tpot_s >= 0) tpot_.observe(t.tpot_s);
  prompt_hist_.observe(static_cast<double>(t.prompt_tokens));
  generation_hist_.observe(static_cast<double>(t.generation_tokens));
}

void ServeMetrics::on_emission_lag(double s) {
  std::lock_guard lock(mutex_);
  emission_lag_.observe(s);
}

void ServeMetrics::on_fault(const std::string& kind) {
  std::lock_guard lock(mutex_);
  ++faults_[kind];
}

void ServeMetrics::on_audio(double seconds) {
  std::lock_guard lock(mutex_);
  audio_seconds_ += seconds;
}

void ServeMetrics::on_http_response(int status) {
  std::lock_guard lock(mutex_);
  ++http_responses_[status];
}

void ServeMetrics::set_connection_source(std::function<net::ConnectionStats()> source) {
  std::lock_guard lock(mutex_);
  connection_source_ = std::move(source);
}

void ServeMetrics::set_perturbation_source(std::function<engine::PerturbationCounts()> source) {
  std::lock_guard lock(mutex_);
  perturbation_source_ = std::move(source);
}

double ServeMetrics::value(const std::string& name, const std::string& label) const {
  std::lock_guard lock(mutex_);
  if (name == "tokenscope:perturbations_injected_total") {
    const engine::PerturbationCounts counts =
        perturbation_source_ ? perturbation_source_() : engine::PerturbationCounts{};
    for (const auto kind : engine::kPerturbationKinds)
      if (label == engine::name_of(kind)) return static_cast<double>(counts[static_cast<std::size_t>(kind)]);
    return 0.0;
  }
  if (name == "vllm:num_requests_running") return running_;
  if (name == "vllm:num_requests_waiting") return waiting_;
  if (name == "vllm:kv_cache_usage_perc") return kv_usage_;
  if (name == "tokenscope:kv_cache_usage_peak") return kv_usage_peak_;  // not exported; for bench's summary
  if (name == "vllm:prefix_cache_queries_total") return static_cast<double>(prefix_queries_);
  if (name == "vllm:prefix_cache_hits_total") return static_cast<double>(prefix_hits_);
  if (name == "vllm:prompt_tokens_total") return static_cast<double>(prompt_tokens_);
  if (name == "vllm:generation_tokens_total") return static_cast<double>(generation_tokens_);
  if (name == "vllm:num_preemptions_total") return static_cast<double>(preemptions_);
  if (name == "tokenscope:host_kv_usage_perc")
    return host_kv_capacity_ ? static_cast<double>(host_kv_blocks_) / static_cast<double>(host_kv_capacity_)
                             : 0.0;
  if (name == "tokenscope:host_kv_blocks") return static_cast<double>(host_kv_blocks_);
  if (name == "tokenscope:host_kv_evictions_total") return static_cast<double>(host_kv_evictions_);
  if (name == "tokenscope:host_kv_recomputed_blocks_total") return static_cast<double>(host_kv_recomputed_);
  if (name == "vllm:request_success_total") {
    const auto it = success_.find(label);
    return it == success_.end() ? 0.0 : static_cast<double>(it->second);
  }
  if (name == "tokenscope:audio_input_seconds_total") return audio_seconds_;
  if (name == "tokenscope:faults_injected_total") {
    const auto it = faults_.find(label);
    return it == faults_.end() ? 0.0 : static_cast<double>(it->second);
  }
  if (connection_source_) {
    const net::ConnectionStats c = connection_source_();
    if (name == "tokenscope:connections") return static_cast<double>(c.open);
    for (std::size_t i = 0; i < net::kDropReasons; ++i)
      if (name == "tokenscope:connections_dropped_total" &&
          label == net::drop_reason_name(static_cast<net::DropReason>(i)))
        return static_cast<double>(c.dropped[i]);
    for (std::size_t i = 0; i < net::kAcceptErrors; ++i)
      if (name == "tokenscope:accept_errors_total" &&
          label == net::accept_error_name(static_cast<net::AcceptError>(i)))
        return static_cast<double>(c.accept_errors[i]);
  }
  return 0.0;
}

// Long by nature: one block per metric family of /metrics.
std::string ServeMetrics::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  out.reserve(32768);
  const std::string& l = labels_;
  prometheus::TextWriter w(out, prometheus::Layout::kPythonClient);
  w.family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.");
  w.sample("vllm:num_requests_running", l, running_);
  w.family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
  w.sample("vllm:num_requests_waiting", l, waiting_);
  w.family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
  w.sample("vllm:kv_cache_usage_perc", l, kv_usage_);
  w.family("vllm:prefix_cache_queries_total", "counter",
           "Prefix cache queries, in terms of number of queried tokens.");
  w.sample("vllm:prefix_cache_queries_total", l, static_cast<double>(prefix_queries_));
  w.family("vllm:prefix_cache_hits_total", "counter",
           "Prefix cache hits, in terms of number of cached tokens.");
  w.sample("vllm:prefix_cache_hits_total", l, static_cast<double>(prefix_hits_));
  w.family("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.");
  w.sample("vllm:num_preemptions_total", l, static_cast<double>(preemptions_));
  w.family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.");
  w.sample("vllm:prompt_tokens_total", l, static_cast<double>(prompt_tokens_));
  w.family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.");
  w.sample("vllm:generation_tokens_total", l, static_cast<double>(generation_tokens_));
  w.family("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const auto& [reason, n] : success_)
    w.sample("vllm:request_success_total", fmt::format("{},finished_reason=\"{}\"", l, reason),
             static_cast<double>(n));
  w.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", l, prompt_hist_);
  w.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", l,
              generation_hist_);
  w.histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", l,
              iteration_tokens_);
  w.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", l, ttft_);
  w.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", l, itl_);
  w.histogram("vllm:request_time_per_output_token_seconds",
              "Histogram of time_per_output_token_seconds per request.", l, tpot_);
  w.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", l, e2e_);
  w.histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", l,
              queue_);
  w.histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
              l, inference_);
  w.histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", l,
              prefill_);
  w.histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", l,
              decode_);
  // tokenscope's own series.
  w.family("tokenscope:steps_total", "counter", "Engine steps run.");
  w.sample("tokenscope:steps_total", l, static_cast<double>(steps_));
  w.histogram("tokenscope:batch_size", "Sequences scheduled per engine step.", l, batch_size_);
  w.family("tokenscope:tenant_switches_total", "counter", "Tenant contexts brought in.");
  w.sample("tokenscope:tenant_switches_total", l, static_cast<double>(tenant_switches_));
  w.family("tokenscope:kv_swap_out_bytes_total", "counter", "KV bytes moved from GPU to host memory.");
  w.sample("tokenscope:kv_swap_out_bytes_total", l, static_cast<double>(swap_out_bytes_));
  w.family("tokenscope:kv_swap_in_bytes_total", "counter", "KV bytes moved from host to GPU memory.");
  w.sample("tokenscope:kv_swap_in_bytes_total", l, static_cast<double>(swap_in_bytes_));
  w.family("tokenscope:host_kv_usage_perc", "gauge",
           "Host KV pool usage (dynamic tenant reuse). 1 means 100 percent usage.");
  w.sample("tokenscope:host_kv_usage_perc", l,
           host_kv_capacity_ ? static_cast<double>(host_kv_blocks_) / static_cast<double>(host_kv_capacity_)
                             : 0.0);
  if (lora_) {
    // Label values escaped as the exposition format wants (names are checked
    // at --lora-modules already: this is the second line of defence).
    const auto esc = [](const std::string& v) {
      std::string o;
      for (const char c : v) {
        if (c == '\\' || c == '"') o += '\\';
        if (c == '\n') {
          o += "\\n";
          continue;
        }
        o += c;
      }
      return o;
    };
    w.family("vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
    w.sample("vllm:lora_requests_info",
             fmt::format("max_lora=\"{}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"",
                         max_lora_, esc(lora_running_), esc(lora_waiting_)),
             lora_updated_unix_);
    w.family("tokenscope:lora_loads_total", "counter", "LoRA adapters brought onto the GPU.");
    w.sample("tokenscope:lora_loads_total", l, static_cast<double>(lora_loads_));
  }
  w.family("tokenscope:host_kv_blocks", "gauge", "KV blocks held in the host pool.");
  w.sample("tokenscope:host_kv_blocks", l, static_cast<double>(host_kv_blocks_));
  w.family("tokenscope:host_kv_evictions_total", "counter",
           "KV blocks evicted from the full host pool, least recently used first.");
  w.sample("tokenscope:host_kv_evictions_total", l, static_cast<double>(host_kv_evictions_));
  w.family("tokenscope:host_kv_recomputed_blocks_total", "counter",
           "Evicted host KV blocks that a request needed again and recomputed.");
  w.sample("tokenscope:host_kv_recomputed_blocks_total", l, static_cast<double>(host_kv_recomputed_));
  w.family("tokenscope:audio_input_seconds_total", "counter",
           "Seconds of audio the requests brought (transcription uploads, input_audio parts).");
  w.sample("tokenscope:audio_input_seconds_total", l, audio_seconds_);
  w.family("tokenscope:faults_injected_total", "counter", "Faults injected into responses, by kind.");
  for (const char* kind : kFaultNames) {
    const auto it = faults_.find(kind);
    w.sample("tokenscope:faults_injected_total", fmt::format("{},kind=\"{}\"", l, kind),
             it == faults_.end() ? 0.0 : static_cast<double>(it->second));
  }
  w.family("tokenscope:perturbations_injected_total", "counter",
           "Steps or requests the engine's injected perturbations changed, by kind (GET /perturbations has "
           "the ground truth).");
  const engine::PerturbationCounts counts =
      perturbation_source_ ? perturbation_source_() : engine::PerturbationCounts{};
  for (const auto kind : engine::kPerturbationKinds)
    w.sample("tokenscope:perturbations_injected_total",
             fmt::format("{},kind=\"{}\"", l, engine::name_of(kind)),
             static_cast<double>(counts[static_cast<std::size_t>(kind)]));
  w.histogram("tokenscope:emission_lag_seconds",
              "Time from a token's engine emission to its write to the socket.", l, emission_lag_);
  w.family("tokenscope:http_responses_total", "counter", "HTTP responses by status code.");
  for (const auto& [code, n] : http_responses_)
    w.sample("tokenscope:http_responses_total", fmt::format("{},code=\"{}\"", l, code),
             static_cast<double>(n));
  const net::ConnectionStats c = connection_source_ ? connection_source_() : net::ConnectionStats{};
  w.family("tokenscope:connections", "gauge", "Open client connections.");
  w.sample("tokenscope:connections", l, static_cast<double>(c.open));
  w.family("tokenscope:connections_dropped_total", "counter",
           "Connections the server closed itself, by reason (timeouts, a client that stopped reading, "
           "the connection limit).");
  for (std::size_t i = 0; i < net::kDropReasons; ++i)
    w.sample("tokenscope:connections_dropped_total",
             fmt::format("{},reason=\"{}\"", l, net::drop_reason_name(static_cast<net::DropReason>(i))),
             static_cast<double>(c.dropped[i]));
  w.family(
      "tokenscope:accept_errors_total", "counter",
      "Failed accept() calls, by error (EMFILE: out of descriptors); each is followed by a 100 ms pause.");
  for (std::size_t i = 0; i < net::kAcceptErrors; ++i)
    w.sample("tokenscope:accept_errors_total",
             fmt::format("{},error=\"{}\"", l, net::accept_error_name(static_cast<net::AcceptError>(i))),
             static_cast<double>(c.accept_errors[i]));
  return out;
}

}  // namespace tokenscope::serve
