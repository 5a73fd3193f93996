#include "serve/metrics.h"

#include <chrono>

#include "core/prometheus.h"
#include "serve/faults.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

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

ServeMetrics::EngineSeries::EngineSeries(std::string l, std::uint32_t max_model_len)
    : labels(std::move(l)),
      ttft(ttft_buckets()),
      itl(inter_token_buckets()),
      tpot(inter_token_buckets()),
      e2e(request_latency_buckets()),
      queue(request_latency_buckets()),
      prefill(request_latency_buckets()),
      decode(request_latency_buckets()),
      inference(request_latency_buckets()),
      iteration_tokens(iteration_tokens_buckets()),
      prompt_hist(buckets_1_2_5(max_model_len)),
      generation_hist(buckets_1_2_5(max_model_len)),
      batch_size({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}) {
  for (const char* r : {"stop", "length", "abort"}) success[r] = 0;
}

ServeMetrics::ServeMetrics(std::string model_name, std::uint32_t max_model_len, std::size_t engines)
    : emission_lag_(lag_buckets()) {
  const std::size_t n = std::max<std::size_t>(1, engines);
  engines_.reserve(n);
  for (std::size_t e = 0; e < n; ++e)
    engines_.emplace_back(fmt::format("model_name=\"{}\",engine=\"{}\"", model_name, e), max_model_len);
  labels_ = n == 1 ? engines_[0].labels : fmt::format("model_name=\"{}\"", model_name);
}

void ServeMetrics::on_step(std::uint32_t running, std::uint32_t waiting, double kv_usage,
                           std::uint64_t step_tokens, std::uint32_t batch_size,
                           std::uint64_t prompt_tokens_delta, std::uint64_t generation_tokens_delta,
                           std::uint64_t queries_delta, std::uint64_t hits_delta,
                           std::uint64_t preemptions_delta, std::uint64_t tenant_switches_delta,
                           std::uint64_t swap_out_delta, std::uint64_t swap_in_delta, std::size_t e) {
  std::lock_guard lock(mutex_);
  EngineSeries& s = at(e);
  s.running = running;
  s.waiting = waiting;
  s.kv_usage = kv_usage;
  s.kv_usage_peak = std::max(s.kv_usage_peak, kv_usage);
  ++s.steps;
  if (step_tokens > 0) s.iteration_tokens.observe(static_cast<double>(step_tokens));
  if (batch_size > 0) s.batch_size.observe(batch_size);
  s.prompt_tokens += prompt_tokens_delta;
  s.generation_tokens += generation_tokens_delta;
  s.prefix_queries += queries_delta;
  s.prefix_hits += hits_delta;
  s.preemptions += preemptions_delta;
  s.tenant_switches += tenant_switches_delta;
  s.swap_out_bytes += swap_out_delta;
  s.swap_in_bytes += swap_in_delta;
}

void ServeMetrics::set_host_kv(std::uint64_t blocks, std::uint64_t capacity_blocks,
                               std::uint64_t evictions_total, std::uint64_t recomputed_total, std::size_t e) {
  std::lock_guard lock(mutex_);
  EngineSeries& s = at(e);
  s.host_kv_blocks = blocks;
  s.host_kv_capacity = capacity_blocks;
  s.host_kv_evictions = evictions_total;
  s.host_kv_recomputed = recomputed_total;
}

void ServeMetrics::set_lora(std::string running, std::string waiting, std::uint32_t max_lora,
                            std::uint64_t loads_total, std::size_t e) {
  std::lock_guard lock(mutex_);
  EngineSeries& s = at(e);
  s.lora = true;
  s.lora_running = std::move(running);
  s.lora_waiting = std::move(waiting);
  s.max_lora = max_lora;
  s.lora_loads = loads_total;
  s.lora_updated_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void ServeMetrics::set_queue(std::uint32_t running, std::uint32_t waiting, std::size_t e) {
  std::lock_guard lock(mutex_);
  EngineSeries& s = at(e);
  s.running = running;
  s.waiting = waiting;
}

void ServeMetrics::on_inter_token(double seconds, std::size_t e) {
  std::lock_guard lock(mutex_);
  at(e).itl.observe(seconds);
}

void ServeMetrics::on_finished(const FinishedTimes& t, std::size_t e) {
  std::lock_guard lock(mutex_);
  EngineSeries& s = at(e);
  ++s.success[t.finish_reason];
  if (t.finish_reason == "abort") return;  // vLLM records latencies of completed requests only
  s.ttft.observe(t.ttft_s);
  s.e2e.observe(t.e2e_s);
  s.queue.observe(t.queue_s);
  s.prefill.observe(t.prefill_s);
  s.decode.observe(t.decode_s);
  s.inference.observe(t.inference_s);
  if (t.tpot_s >= 0) s.tpot.observe(t.tpot_s);
  s.prompt_hist.observe(static_cast<double>(t.prompt_tokens));
  s.generation_hist.observe(static_cast<double>(t.generation_tokens));
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

namespace {
double host_kv_usage(std::uint64_t blocks, std::uint64_t capacity) {
  return capacity ? static_cast<double>(blocks) / static_cast<double>(capacity) : 0.0;
}
}  // namespace

// An engine-side series of one engine; NaN: not an engine-side series.
double ServeMetrics::value_locked(const std::string& name, const std::string& label,
                                  const EngineSeries& s) const {
  if (name == "vllm:num_requests_running") return s.running;
  if (name == "vllm:num_requests_waiting") return s.waiting;
  if (name == "vllm:kv_cache_usage_perc") return s.kv_usage;
  if (name == "tokenscope:kv_cache_usage_peak") return s.kv_usage_peak;  // not exported; for bench's summary
  if (name == "vllm:prefix_cache_queries_total") return static_cast<double>(s.prefix_queries);
  if (name == "vllm:prefix_cache_hits_total") return static_cast<double>(s.prefix_hits);
  if (name == "vllm:prompt_tokens_total") return static_cast<double>(s.prompt_tokens);
  if (name == "vllm:generation_tokens_total") return static_cast<double>(s.generation_tokens);
  if (name == "vllm:num_preemptions_total") return static_cast<double>(s.preemptions);
  if (name == "tokenscope:steps_total") return static_cast<double>(s.steps);
  if (name == "tokenscope:host_kv_usage_perc") return host_kv_usage(s.host_kv_blocks, s.host_kv_capacity);
  if (name == "tokenscope:host_kv_blocks") return static_cast<double>(s.host_kv_blocks);
  if (name == "tokenscope:host_kv_evictions_total") return static_cast<double>(s.host_kv_evictions);
  if (name == "tokenscope:host_kv_recomputed_blocks_total") return static_cast<double>(s.host_kv_recomputed);
  if (name == "vllm:request_success_total") {
    const auto it = s.success.find(label);
    return it == s.success.end() ? 0.0 : static_cast<double>(it->second);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

double ServeMetrics::value(const std::string& name, const std::string& label, std::size_t e) const {
  std::lock_guard lock(mutex_);
  if (e >= engines_.size()) return 0.0;
  const double v = value_locked(name, label, engines_[e]);
  return std::isnan(v) ? 0.0 : v;
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
  if (!std::isnan(value_locked(name, label, engines_[0]))) {
    const bool largest = name == "vllm:kv_cache_usage_perc" || name == "tokenscope:kv_cache_usage_peak" ||
                         name == "tokenscope:host_kv_usage_perc";
    double out = 0.0;
    for (const auto& s : engines_) {
      const double v = value_locked(name, label, s);
      out = largest ? std::max(out, v) : out + v;
    }
    return out;
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

namespace {
// Label values escaped as the exposition format wants.
std::string escape_label(const std::string& v) {
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
}
}  // namespace

// Long by nature: one block per metric family of /metrics, each engine's
// sample of an engine-side family after its # lines.
std::string ServeMetrics::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  out.reserve(32768 * engines_.size());
  prometheus::TextWriter w(out, prometheus::Layout::kPythonClient);
  const auto gauge = [&](const char* name, const char* type, const char* help, auto get) {
    w.family(name, type, help);
    for (const auto& s : engines_) w.sample(name, s.labels, static_cast<double>(get(s)));
  };
  using S = EngineSeries;
  gauge("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
        [](const S& s) { return s.running; });
  gauge("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
        [](const S& s) { return s.waiting; });
  gauge("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
        [](const S& s) { return s.kv_usage; });
  gauge("vllm:prefix_cache_queries_total", "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
        [](const S& s) { return s.prefix_queries; });
  gauge("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
        [](const S& s) { return s.prefix_hits; });
  gauge("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
        [](const S& s) { return s.preemptions; });
  gauge("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
        [](const S& s) { return s.prompt_tokens; });
  gauge("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
        [](const S& s) { return s.generation_tokens; });
  w.family("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const auto& s : engines_)
    for (const auto& [reason, n] : s.success)
      w.sample("vllm:request_success_total", fmt::format("{},finished_reason=\"{}\"", s.labels, reason),
               static_cast<double>(n));
  const auto histogram = [&](const char* name, const char* help, prometheus::Histogram S::*h) {
    w.family(name, "histogram", help);
    for (const auto& s : engines_) w.histogram_samples(name, s.labels, s.*h);
  };
  histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", &S::prompt_hist);
  histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", &S::generation_hist);
  histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
            &S::iteration_tokens);
  histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", &S::ttft);
  histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", &S::itl);
  histogram("vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.", &S::tpot);
  histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", &S::e2e);
  histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
            &S::queue);
  histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
            &S::inference);
  histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
            &S::prefill);
  histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
            &S::decode);
  // tokenscope's own series.
  gauge("tokenscope:steps_total", "counter", "Engine steps run.", [](const S& s) { return s.steps; });
  histogram("tokenscope:batch_size", "Sequences scheduled per engine step.", &S::batch_size);
  gauge("tokenscope:tenant_switches_total", "counter", "Tenant contexts brought in.",
        [](const S& s) { return s.tenant_switches; });
  gauge("tokenscope:kv_swap_out_bytes_total", "counter", "KV bytes moved from GPU to host memory.",
        [](const S& s) { return s.swap_out_bytes; });
  gauge("tokenscope:kv_swap_in_bytes_total", "counter", "KV bytes moved from host to GPU memory.",
        [](const S& s) { return s.swap_in_bytes; });
  gauge("tokenscope:host_kv_usage_perc", "gauge",
        "Host KV pool usage (dynamic tenant reuse). 1 means 100 percent usage.",
        [](const S& s) { return host_kv_usage(s.host_kv_blocks, s.host_kv_capacity); });
  if (std::any_of(engines_.begin(), engines_.end(), [](const S& s) { return s.lora; })) {
    // Label values escaped (names are checked at --lora-modules already: this is the second line of defence).
    const bool fleet = engines_.size() > 1;
    w.family("vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
    for (std::size_t e = 0; e < engines_.size(); ++e) {
      const auto& s = engines_[e];
      if (!s.lora) continue;  // a replica that has not stepped yet
      w.sample("vllm:lora_requests_info",
               fmt::format("{}max_lora=\"{}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"",
                           fleet ? fmt::format("engine=\"{}\",", e) : std::string(), s.max_lora,
                           escape_label(s.lora_running), escape_label(s.lora_waiting)),
               s.lora_updated_unix);
    }
    gauge("tokenscope:lora_loads_total", "counter", "LoRA adapters brought onto the GPU.",
          [](const S& s) { return s.lora_loads; });
  }
  gauge("tokenscope:host_kv_blocks", "gauge", "KV blocks held in the host pool.",
        [](const S& s) { return s.host_kv_blocks; });
  gauge("tokenscope:host_kv_evictions_total", "counter",
        "KV blocks evicted from the full host pool, least recently used first.",
        [](const S& s) { return s.host_kv_evictions; });
  gauge("tokenscope:host_kv_recomputed_blocks_total", "counter",
        "Evicted host KV blocks that a request needed again and recomputed.",
        [](const S& s) { return s.host_kv_recomputed; });
  // The server-wide series.
  const std::string& l = labels_;
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
