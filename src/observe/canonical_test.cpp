#include "observe/canonical.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "observe/canonical_maps.h"
#include "observe/exposition.h"

// Golden tests: each fixture in testdata/expositions (one per engine, written
// from the engine's documentation or captured from the real server; the
// source is named at the top of each file) → its canonical series. Every
// expected value below was worked out by hand from the fixture's numbers.
namespace tokenscope::observe {
namespace {

constexpr double kMiB = 1048576.0;

std::string read_fixture(const std::string& name) {
  const std::string path = std::string(TOKENSCOPE_SOURCE_DIR) + "/src/observe/testdata/expositions/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Exposition load(const std::string& name) {
  Exposition e = parse_exposition(read_fixture(name));
  EXPECT_EQ(e.rejected_lines, 0u) << name << ": " << (e.rejected.empty() ? "" : e.rejected[0].reason);
  EXPECT_GT(e.samples, 0u) << name;
  return e;
}

// The values of every sample named name with exactly these labels.
std::vector<double> values(const std::vector<Sample>& v, std::string_view name, const Labels& labels = {}) {
  std::vector<double> out;
  for (const auto& s : v)
    if (s.name == name && s.labels == labels) out.push_back(s.value);
  return out;
}

// The one value of name{labels}; fails the test when there is not exactly one.
double one(const std::vector<Sample>& v, std::string_view name, const Labels& labels = {}) {
  const auto found = values(v, name, labels);
  EXPECT_EQ(found.size(), 1u) << name;
  return found.empty() ? std::nan("") : found.front();
}

bool absent(const std::vector<Sample>& v, std::string_view name) {
  for (const auto& s : v)
    if (s.name == name || s.name.starts_with(std::string(name) + "_")) return false;
  return true;
}

// A histogram's buckets as (le, cumulative count), in output order.
using Buckets = std::vector<std::pair<std::string, double>>;
Buckets buckets(const std::vector<Sample>& v, std::string_view name, const Labels& labels = {}) {
  Buckets out;
  const std::string bucket = std::string(name) + "_bucket";
  for (const auto& s : v) {
    if (s.name != bucket || s.labels.empty() || s.labels.back().name != "le") continue;
    const Labels rest(s.labels.begin(), s.labels.end() - 1);
    if (rest == labels) out.emplace_back(s.labels.back().value, s.value);
  }
  return out;
}

double bucket_at(const Buckets& b, std::string_view le) {
  for (const auto& [l, n] : b)
    if (l == le) return n;
  ADD_FAILURE() << "no bucket le=" << le;
  return std::nan("");
}

// Hand-built expositions for the unit tests that need no fixture.
ExpositionSample sample(std::string name, Labels labels, double value) {
  ExpositionSample s;
  s.name = std::move(name);
  s.labels = std::move(labels);
  s.value = value;
  return s;
}

MetricFamily family(std::string name, MetricType type, std::vector<ExpositionSample> samples) {
  MetricFamily f;
  f.name = std::move(name);
  f.type = type;
  f.samples = std::move(samples);
  return f;
}

// A bucket bound as the canonical series write it (shortest round trip).
std::string fmt_le(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

Exposition exposition(std::vector<MetricFamily> families) {
  Exposition e;
  for (const auto& f : families) e.samples += f.samples.size();
  e.families = std::move(families);
  return e;
}

TEST(CanonicalDetect, EachFixtureIsItsEngine) {
  const std::pair<const char*, Engine> cases[] = {
      {"vllm_v1.prom", Engine::kVllmV1}, {"vllm_v0.prom", Engine::kVllmV0},
      {"sglang.prom", Engine::kSglang},  {"llamacpp.prom", Engine::kLlamaCpp},
      {"tgi.prom", Engine::kTgi},        {"triton_trtllm.prom", Engine::kTriton},
      {"dcgm.prom", Engine::kDcgm},      {"tokenscope_serve.prom", Engine::kVllmV1},
  };
  for (const auto& [file, engine] : cases)
    EXPECT_EQ(engine_name(detect_engine(load(file))), engine_name(engine)) << file;
}

TEST(CanonicalDetect, AnUnknownServerGivesNoCanonicalSeriesAndNoError) {
  // A plain Python process's /metrics (prometheus_client defaults): raw only.
  const Exposition e = parse_exposition(
      "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
      "# TYPE process_cpu_seconds_total counter\n"
      "process_cpu_seconds_total 12.5\n"
      "# TYPE python_gc_objects_collected_total counter\n"
      "python_gc_objects_collected_total{generation=\"0\"} 512.0\n"
      "# TYPE http_requests_total counter\n"
      "http_requests_total{handler=\"/v1/completions\",method=\"POST\",status=\"2xx\"} 201.0\n");
  EXPECT_EQ(e.rejected_lines, 0u);
  EXPECT_EQ(detect_engine(e), Engine::kUnknown);
  EXPECT_EQ(engine_name(Engine::kUnknown), "unknown");
  EXPECT_TRUE(canonicalize(e, Engine::kUnknown).empty());
  EXPECT_TRUE(canonicalize(Exposition{}, Engine::kVllmV1).empty());
  // Another engine's table finds none of its names: nothing, not an error.
  EXPECT_TRUE(canonicalize(load("vllm_v1.prom"), Engine::kDcgm).empty());
}

TEST(CanonicalDetect, V0OnlyNamesDecideV0AndTheSimulatorIsAlwaysV1) {
  auto with = [](std::vector<std::string> names) {
    std::vector<MetricFamily> f;
    for (auto& n : names) f.push_back(family(n, MetricType::kGauge, {sample(n, {}, 1)}));
    return detect_engine(exposition(std::move(f)));
  };
  EXPECT_EQ(with({"vllm:num_requests_running", "vllm:num_requests_swapped"}), Engine::kVllmV0);
  EXPECT_EQ(with({"vllm:num_requests_running", "vllm:kv_cache_usage_perc"}), Engine::kVllmV1);
  EXPECT_EQ(with({"tokenscope:steps_total", "vllm:num_requests_swapped"}), Engine::kVllmV1);
  EXPECT_EQ(with({"DCGM_FI_DEV_GPU_UTIL"}), Engine::kDcgm);
  EXPECT_EQ(with({"nv_inference_request_success"}), Engine::kTriton);
  EXPECT_EQ(with({"node_cpu_seconds_total"}), Engine::kUnknown);
}

TEST(CanonicalGolden, VllmV1TwoDataParallelEngines) {
  const auto c = canonicalize(load("vllm_v1.prom"), Engine::kVllmV1);
  EXPECT_EQ(one(c, "requests_running"), 8);  // 5 + 3
  EXPECT_EQ(one(c, "requests_waiting"), 2);
  EXPECT_EQ(one(c, "kv_cache_usage"), 0.5);  // (0.25 + 0.75) / 2, once (not with gpu_cache_usage_perc)
  EXPECT_EQ(one(c, "prefix_cache_queries_tokens"),
            1600);  // 1000 + 600, not doubled by gpu_prefix_cache_queries
  EXPECT_EQ(one(c, "prefix_cache_hits_tokens"), 600);
  EXPECT_EQ(one(c, "preemptions"), 3);
  EXPECT_EQ(one(c, "prompt_tokens"), 20000);
  EXPECT_EQ(one(c, "generation_tokens"), 5500);
  EXPECT_EQ(one(c, "requests_finished"), 44);  // stop 20 + 15, length 5 + 3, abort 1 + 0
  EXPECT_TRUE(absent(c, "requests_swapped"));
  EXPECT_TRUE(absent(c, "server_tpot_seconds"));  // 0.10 has no per-request TPOT histogram

  EXPECT_EQ(buckets(c, "iteration_tokens"), (Buckets{{"1", 0},
                                                     {"8", 60},
                                                     {"16", 75},
                                                     {"32", 85},
                                                     {"64", 85},
                                                     {"128", 88},
                                                     {"256", 89},
                                                     {"512", 92},
                                                     {"1024", 92},
                                                     {"2048", 92},
                                                     {"4096", 92},
                                                     {"8192", 92},
                                                     {"16384", 92},
                                                     {"+Inf", 92}}));
  EXPECT_EQ(one(c, "iteration_tokens_sum"), 2500);
  EXPECT_EQ(one(c, "iteration_tokens_count"), 92);

  EXPECT_EQ(buckets(c, "server_ttft_seconds"),
            (Buckets{{"0.001", 0}, {"0.005", 0}, {"0.01", 0},  {"0.02", 0},  {"0.04", 2},  {"0.06", 10},
                     {"0.08", 20}, {"0.1", 30},  {"0.25", 40}, {"0.5", 42},  {"0.75", 43}, {"1", 44},
                     {"2.5", 44},  {"5", 44},    {"7.5", 44},  {"10", 44},   {"20", 44},   {"40", 44},
                     {"80", 44},   {"160", 44},  {"640", 44},  {"2560", 44}, {"+Inf", 44}}));
  EXPECT_DOUBLE_EQ(one(c, "server_ttft_seconds_sum"), 6.9);  // 4.2 + 2.7
  EXPECT_EQ(one(c, "server_ttft_seconds_count"), 44);

  // The per-token gap, from time_per_output_token_seconds (0.10's name).
  const auto itl = buckets(c, "server_itl_seconds");
  ASSERT_EQ(itl.size(), 20u);                // 19 bounds and +Inf
  EXPECT_EQ(bucket_at(itl, "0.01"), 800);    // 500 + 300
  EXPECT_EQ(bucket_at(itl, "0.025"), 4600);  // + 2000 + 1800
  EXPECT_EQ(bucket_at(itl, "0.05"), 5350);   // + 400 + 350
  EXPECT_EQ(bucket_at(itl, "0.075"), 5442);  // + 60 + 32
  EXPECT_EQ(bucket_at(itl, "0.1"), 5456);    // + 14
  EXPECT_EQ(bucket_at(itl, "+Inf"), 5456);
  EXPECT_EQ(one(c, "server_itl_seconds_count"), 5456);  // 5500 tokens − 44 first tokens
  EXPECT_DOUBLE_EQ(one(c, "server_itl_seconds_sum"), 105.5);

  EXPECT_EQ(one(c, "server_e2e_seconds_count"), 44);
  EXPECT_DOUBLE_EQ(one(c, "server_e2e_seconds_sum"), 95);
  const auto queue = buckets(c, "server_queue_seconds");
  EXPECT_EQ(bucket_at(queue, "0.3"), 43);  // 26 + 17
  EXPECT_EQ(bucket_at(queue, "0.5"), 44);
  EXPECT_DOUBLE_EQ(one(c, "server_queue_seconds_sum"), 2.55);
  EXPECT_DOUBLE_EQ(one(c, "server_prefill_seconds_sum"), 4.4);
  EXPECT_DOUBLE_EQ(one(c, "server_decode_seconds_sum"), 84);
  EXPECT_DOUBLE_EQ(one(c, "server_inference_seconds_sum"), 88.4);
  EXPECT_EQ(one(c, "server_inference_seconds_count"), 44);
}

TEST(CanonicalGolden, VllmV0) {
  const auto c = canonicalize(load("vllm_v0.prom"), Engine::kVllmV0);
  EXPECT_EQ(one(c, "requests_running"), 4);
  EXPECT_EQ(one(c, "requests_waiting"), 3);
  EXPECT_EQ(one(c, "requests_swapped"), 1);
  EXPECT_EQ(one(c, "kv_cache_usage"), 0.875);
  EXPECT_EQ(one(c, "preemptions"), 7);
  EXPECT_EQ(one(c, "prompt_tokens"), 51200);
  EXPECT_EQ(one(c, "generation_tokens"), 12800);
  EXPECT_EQ(one(c, "requests_finished"), 40);  // stop 30 + length 10
  // V0 reports a block hit rate, not token counts: no prefix cache series.
  EXPECT_TRUE(absent(c, "prefix_cache_queries_tokens"));
  EXPECT_TRUE(absent(c, "prefix_cache_hits_tokens"));
  EXPECT_EQ(buckets(c, "iteration_tokens"), (Buckets{{"1", 0},
                                                     {"8", 800},
                                                     {"16", 900},
                                                     {"32", 900},
                                                     {"64", 900},
                                                     {"128", 900},
                                                     {"256", 940},
                                                     {"512", 960},
                                                     {"1024", 970},
                                                     {"2048", 1000},
                                                     {"4096", 1000},
                                                     {"8096", 1000},  // V0's bucket (sic)
                                                     {"+Inf", 1000}}));
  EXPECT_EQ(one(c, "iteration_tokens_sum"), 64000);
  const auto ttft = buckets(c, "server_ttft_seconds");
  ASSERT_EQ(ttft.size(), 17u);  // V0's 16 bounds, to 10 s
  EXPECT_EQ(bucket_at(ttft, "0.1"), 10);
  EXPECT_EQ(bucket_at(ttft, "0.25"), 30);
  EXPECT_EQ(bucket_at(ttft, "0.5"), 38);
  EXPECT_EQ(bucket_at(ttft, "1"), 40);
  EXPECT_DOUBLE_EQ(one(c, "server_ttft_seconds_sum"), 9.5);
  EXPECT_EQ(one(c, "server_itl_seconds_count"), 12760);
  EXPECT_DOUBLE_EQ(one(c, "server_itl_seconds_sum"), 280);
  EXPECT_EQ(one(c, "server_e2e_seconds_count"), 40);
  EXPECT_DOUBLE_EQ(one(c, "server_queue_seconds_sum"), 6);
  EXPECT_DOUBLE_EQ(one(c, "server_prefill_seconds_sum"), 5.5);
  EXPECT_DOUBLE_EQ(one(c, "server_decode_seconds_sum"), 300);
  EXPECT_DOUBLE_EQ(one(c, "server_inference_seconds_sum"), 305.5);
}

TEST(CanonicalGolden, SglangTwoDataParallelRanks) {
  const auto c = canonicalize(load("sglang.prom"), Engine::kSglang);
  EXPECT_EQ(one(c, "requests_running"), 78);              // 40 + 38
  EXPECT_EQ(one(c, "requests_waiting"), 10);              // 6 + 4
  EXPECT_DOUBLE_EQ(one(c, "kv_cache_usage"), 0.3);        // (0.28 + 0.32) / 2
  EXPECT_EQ(one(c, "prefix_cache_hits_tokens"), 135000);  // device 120000 + host 15000
  EXPECT_TRUE(absent(c, "prefix_cache_queries_tokens"));
  EXPECT_EQ(one(c, "preemptions"), 3);  // retracted 2 + 1
  EXPECT_EQ(one(c, "prompt_tokens"), 335000);
  EXPECT_EQ(one(c, "generation_tokens"), 67000);
  EXPECT_EQ(one(c, "requests_finished"), 335);
  const auto ttft = buckets(c, "server_ttft_seconds");
  ASSERT_EQ(ttft.size(), 19u);
  EXPECT_EQ(bucket_at(ttft, "0.1"), 100);
  EXPECT_EQ(bucket_at(ttft, "0.2"), 250);
  EXPECT_EQ(bucket_at(ttft, "0.4"), 310);
  EXPECT_EQ(bucket_at(ttft, "0.6"), 330);
  EXPECT_EQ(bucket_at(ttft, "0.8"), 330);
  EXPECT_EQ(bucket_at(ttft, "1"), 335);
  EXPECT_DOUBLE_EQ(one(c, "server_ttft_seconds_sum"), 60.5);
  EXPECT_EQ(one(c, "server_itl_seconds_count"), 66665);  // 67000 − 335
  EXPECT_DOUBLE_EQ(one(c, "server_itl_seconds_sum"), 700.25);
  EXPECT_EQ(one(c, "server_e2e_seconds_count"), 335);
  EXPECT_DOUBLE_EQ(one(c, "server_e2e_seconds_sum"), 900);
  // The queue histogram of the two ranks, merged (SGLang's first bound is 0).
  const auto queue = buckets(c, "server_queue_seconds");
  EXPECT_EQ(bucket_at(queue, "0"), 190);    // 100 + 90
  EXPECT_EQ(bucket_at(queue, "0.1"), 300);  // + 50 + 60
  EXPECT_EQ(bucket_at(queue, "0.2"), 320);  // + 20
  EXPECT_EQ(bucket_at(queue, "0.5"), 335);  // + 5 + 10
  EXPECT_EQ(bucket_at(queue, "+Inf"), 335);
  EXPECT_DOUBLE_EQ(one(c, "server_queue_seconds_sum"), 17.5);
}

TEST(CanonicalGolden, LlamaCppCapturedFromTheRealServer) {
  const auto c = canonicalize(load("llamacpp.prom"), Engine::kLlamaCpp);
  EXPECT_EQ(one(c, "requests_running"), 1);
  EXPECT_EQ(one(c, "requests_waiting"), 1);
  EXPECT_EQ(one(c, "kv_cache_usage"), 0.00976562);
  EXPECT_EQ(one(c, "prompt_tokens"), 13);
  EXPECT_EQ(one(c, "generation_tokens"), 310);
  EXPECT_EQ(c.size(), 5u);  // llama.cpp has no histograms and no finished-request count
}

TEST(CanonicalGolden, Tgi) {
  const auto c = canonicalize(load("tgi.prom"), Engine::kTgi);
  EXPECT_EQ(one(c, "requests_running"), 12);
  EXPECT_EQ(one(c, "requests_waiting"), 3);
  EXPECT_EQ(one(c, "prompt_tokens"), 60416);      // tgi_request_input_length_sum
  EXPECT_EQ(one(c, "generation_tokens"), 22000);  // tgi_request_generated_tokens_sum
  EXPECT_EQ(one(c, "requests_finished"), 110);
  const auto e2e = buckets(c, "server_e2e_seconds");
  ASSERT_EQ(e2e.size(), 36u);  // 0.0001 × 1.5^k for k = 1..35, and +Inf
  EXPECT_EQ(e2e.front(), (std::pair<std::string, double>{"0.00015000000000000001", 0}));
  EXPECT_EQ(e2e.back(), (std::pair<std::string, double>{"+Inf", 110}));
  EXPECT_EQ(one(c, "server_e2e_seconds_count"), 110);
  EXPECT_DOUBLE_EQ(one(c, "server_e2e_seconds_sum"), 330);
  EXPECT_EQ(one(c, "server_queue_seconds_count"), 110);
  EXPECT_DOUBLE_EQ(one(c, "server_queue_seconds_sum"), 5.5);
  EXPECT_DOUBLE_EQ(one(c, "server_tpot_seconds_sum"), 1.76);
  EXPECT_DOUBLE_EQ(one(c, "server_inference_seconds_sum"), 320);
  EXPECT_TRUE(absent(c, "server_ttft_seconds"));  // TGI has none
  EXPECT_TRUE(absent(c, "kv_cache_usage"));
}

TEST(CanonicalGolden, TritonTensorRtLlm) {
  const auto c = canonicalize(load("triton_trtllm.prom"), Engine::kTriton);
  EXPECT_EQ(one(c, "requests_running"), 8);  // request_type="scheduled"
  EXPECT_EQ(one(c, "requests_waiting"), 4);  // request_type="waiting", before the pending count (1)
  EXPECT_EQ(one(c, "kv_cache_usage"), 0.19858951754);
  EXPECT_EQ(one(c, "prompt_tokens"), 18500);
  EXPECT_EQ(one(c, "generation_tokens"), 2600);
  EXPECT_EQ(one(c, "requests_finished"), 50);  // tensorrt_llm's, not postprocessing's 2600 nor a sum
  // The ensemble's first-response histogram (the first of two equally busy
  // models), milliseconds → seconds.
  EXPECT_EQ(buckets(c, "server_ttft_seconds"),
            (Buckets{{"0.1", 30}, {"0.5", 48}, {"2", 50}, {"5", 50}, {"+Inf", 50}}));
  EXPECT_DOUBLE_EQ(one(c, "server_ttft_seconds_sum"), 9.5);
  EXPECT_EQ(one(c, "server_ttft_seconds_count"), 50);
}

TEST(CanonicalGolden, DcgmPerGpuAndPerMigInstance) {
  const auto c = canonicalize(load("dcgm.prom"), Engine::kDcgm);
  const Labels g0{{"gpu", "0"}};
  const Labels m1{{"gpu", "1"}, {"mig", "1"}};
  const Labels m2{{"gpu", "1"}, {"mig", "2"}};
  EXPECT_EQ(one(c, "gpu_utilization", g0), 0.87);
  EXPECT_EQ(values(c, "gpu_utilization", m1).size(), 0u);  // not reported for MIG instances
  // GPU 0's series come once per pod: counted once, not twice.
  EXPECT_EQ(one(c, "gpu_memory_used_bytes", g0), 79013 * kMiB);
  EXPECT_EQ(one(c, "gpu_memory_used_bytes", m1), 10240 * kMiB);
  EXPECT_EQ(one(c, "gpu_memory_used_bytes", m2), 20480 * kMiB);
  EXPECT_EQ(one(c, "gpu_memory_total_bytes", g0), 81559 * kMiB);  // 79013 + 2048 + 498 reserved
  EXPECT_EQ(one(c, "gpu_memory_total_bytes", m1), 40192 * kMiB);  // 10240 + 29952
  EXPECT_EQ(one(c, "gpu_memory_total_bytes", m2), 40192 * kMiB);  // 20480 + 19712
  EXPECT_EQ(one(c, "gpu_power_watts", g0), 412.5);
  EXPECT_EQ(one(c, "gpu_power_watts", m1), 301.25);
  EXPECT_EQ(one(c, "gpu_sm_clock_hz", g0), 1980e6);
  EXPECT_EQ(one(c, "gpu_sm_clock_hz", m2), 1755e6);
  EXPECT_EQ(one(c, "gpu_memory_clock_hz", m1), 2619e6);
  EXPECT_EQ(one(c, "gpu_pcie_rx_bytes_per_s", g0), 3.2e9);
  EXPECT_EQ(one(c, "gpu_pcie_tx_bytes_per_s", g0), 1.5e9);
  EXPECT_EQ(one(c, "gpu_temperature_c", g0), 52);
  EXPECT_EQ(one(c, "gpu_temperature_c", m2), 48);
  EXPECT_EQ(one(c, "gpu_throttle_reasons", g0), 4);
  EXPECT_EQ(one(c, "gpu_throttle_reasons", m1), 0);
  EXPECT_EQ(one(c, "gpu_dram_active", g0), 0.625);
  EXPECT_EQ(one(c, "gpu_dram_active", m2), 0.375);
  EXPECT_EQ(one(c, "gpu_sm_active", m1), 0.5);
  EXPECT_EQ(one(c, "gpu_sm_active", m2), 0.6875);
  EXPECT_EQ(one(c, "gpu_tensor_active", g0), 0.453125);
  EXPECT_EQ(one(c, "gpu_tensor_active", m2), 0.25);
  // Every series is a GPU's: nothing without a gpu label.
  for (const auto& s : c) EXPECT_FALSE(s.labels.empty() || s.labels[0].name != "gpu") << s.name;
}

TEST(CanonicalGolden, TokenscopeServeCapturedMapsAsVllmV1) {
  const Exposition e = load("tokenscope_serve.prom");
  const auto c = canonicalize(e, detect_engine(e));
  EXPECT_EQ(one(c, "requests_running"), 2);
  EXPECT_EQ(one(c, "requests_waiting"), 1);
  EXPECT_EQ(one(c, "kv_cache_usage"), 0.140625);
  EXPECT_EQ(one(c, "prefix_cache_queries_tokens"), 102);  // 45 + 45 + 3 × 4
  EXPECT_EQ(one(c, "prefix_cache_hits_tokens"), 32);      // two blocks of the repeated prompt
  EXPECT_EQ(one(c, "preemptions"), 0);
  EXPECT_EQ(one(c, "prompt_tokens"), 102);
  EXPECT_EQ(one(c, "generation_tokens"), 117);
  EXPECT_EQ(one(c, "requests_finished"), 2);  // abort 0 + length 2 + stop 0
  EXPECT_EQ(one(c, "iteration_tokens_count"), 72);
  EXPECT_EQ(one(c, "iteration_tokens_sum"), 183);
  EXPECT_EQ(bucket_at(buckets(c, "iteration_tokens"), "8"), 70);
  EXPECT_EQ(one(c, "server_ttft_seconds_count"), 2);
  EXPECT_EQ(bucket_at(buckets(c, "server_ttft_seconds"), "0.01"), 2);
  EXPECT_EQ(one(c, "server_itl_seconds_count"), 113);  // inter_token_latency_seconds
  EXPECT_EQ(bucket_at(buckets(c, "server_itl_seconds"), "0.025"), 111);
  EXPECT_EQ(one(c, "server_tpot_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(one(c, "server_tpot_seconds_sum"), 0.015336374333333333);
  EXPECT_EQ(one(c, "server_e2e_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(one(c, "server_queue_seconds_sum"), 3.185e-05);
  EXPECT_EQ(one(c, "server_prefill_seconds_count"), 2);
  EXPECT_EQ(one(c, "server_decode_seconds_count"), 2);
  EXPECT_EQ(one(c, "server_inference_seconds_count"), 2);
}

TEST(CanonicalGolden, EveryOutputNameIsCanonical) {
  for (const char* file : {"vllm_v1.prom", "vllm_v0.prom", "sglang.prom", "llamacpp.prom", "tgi.prom",
                           "triton_trtllm.prom", "dcgm.prom", "tokenscope_serve.prom"}) {
    const Exposition e = load(file);
    const auto c = canonicalize(e, detect_engine(e));
    EXPECT_FALSE(c.empty()) << file;
    for (const auto& s : c) EXPECT_NE(find_canonical(s.name), nullptr) << file << ": " << s.name;
  }
}

TEST(CanonicalScale, MillisecondHistogramBecomesSecondsExactly) {
  // Triton's first-response histogram: le and sum divided by 1000, counts kept.
  const Labels m{{"model", "tensorrt_llm"}, {"version", "1"}};
  auto le = [&](const char* b) {
    Labels l = m;
    l.push_back({"le", b});
    return l;
  };
  const auto c = canonicalize(
      exposition({family("nv_inference_first_response_histogram_ms", MetricType::kHistogram,
                         {sample("nv_inference_first_response_histogram_ms_bucket", le("1"), 2),
                          sample("nv_inference_first_response_histogram_ms_bucket", le("5"), 7),
                          sample("nv_inference_first_response_histogram_ms_bucket", le("2.5e3"), 9),
                          sample("nv_inference_first_response_histogram_ms_bucket", le("+Inf"), 10),
                          sample("nv_inference_first_response_histogram_ms_sum", m, 3210),
                          sample("nv_inference_first_response_histogram_ms_count", m, 10)})}),
      Engine::kTriton);
  EXPECT_EQ(buckets(c, "server_ttft_seconds"),
            (Buckets{{"0.001", 2}, {"0.005", 7}, {"2.5", 9}, {"+Inf", 10}}));
  EXPECT_EQ(one(c, "server_ttft_seconds_sum"), 3.21);
  EXPECT_EQ(one(c, "server_ttft_seconds_count"), 10);
}

TEST(CanonicalScale, PercentMebibytesAndMegahertz) {
  const Labels g{{"gpu", "3"}, {"UUID", "GPU-x"}};
  const auto c = canonicalize(
      exposition(
          {family("DCGM_FI_DEV_GPU_UTIL", MetricType::kGauge, {sample("DCGM_FI_DEV_GPU_UTIL", g, 37)}),
           family("DCGM_FI_DEV_FB_USED", MetricType::kGauge, {sample("DCGM_FI_DEV_FB_USED", g, 3)}),
           family("DCGM_FI_DEV_FB_TOTAL", MetricType::kGauge, {sample("DCGM_FI_DEV_FB_TOTAL", g, 81559)}),
           family("DCGM_FI_DEV_FB_FREE", MetricType::kGauge, {sample("DCGM_FI_DEV_FB_FREE", g, 100)}),
           family("DCGM_FI_DEV_SM_CLOCK", MetricType::kGauge, {sample("DCGM_FI_DEV_SM_CLOCK", g, 1410)})}),
      Engine::kDcgm);
  const Labels out{{"gpu", "3"}};
  EXPECT_EQ(one(c, "gpu_utilization", out), 0.37);  // 37 / 100, the double nearest 0.37
  EXPECT_EQ(one(c, "gpu_memory_used_bytes", out), 3145728);
  // FB_TOTAL, when the exporter has it, wins over used + free.
  EXPECT_EQ(one(c, "gpu_memory_total_bytes", out), 81559 * kMiB);
  EXPECT_EQ(one(c, "gpu_sm_clock_hz", out), 1.41e9);
}

TEST(CanonicalMerge, HistogramsWithDifferentBucketsMergeOnTheUnionOfBounds) {
  // Two engines whose TTFT histograms disagree on bounds: each is read as a
  // cumulative step function (a bound a series lacks takes its count at the
  // bound below), so the merge never counts more than was observed below.
  auto b = [](const char* engine, const char* le) {
    return Labels{{"model_name", "m"}, {"engine", engine}, {"le", le}};
  };
  const Labels e0{{"model_name", "m"}, {"engine", "0"}};
  const Labels e1{{"model_name", "m"}, {"engine", "1"}};
  const std::string n = "vllm:time_to_first_token_seconds";
  const auto c = canonicalize(
      exposition({family(
          n, MetricType::kHistogram,
          {sample(n + "_bucket", b("0", "1.0"), 1), sample(n + "_bucket", b("0", "2.0"), 3),
           sample(n + "_bucket", b("0", "+Inf"), 4), sample(n + "_sum", e0, 6.5), sample(n + "_count", e0, 4),
           sample(n + "_bucket", b("1", "1.5"), 2), sample(n + "_bucket", b("1", "+Inf"), 5),
           sample(n + "_sum", e1, 8.25), sample(n + "_count", e1, 5)})}),
      Engine::kVllmV1);
  EXPECT_EQ(buckets(c, "server_ttft_seconds"),
            (Buckets{{"1", 1},        // 1 + 0 (engine 1 has nothing at or below 1)
                     {"1.5", 3},      // 1 (engine 0 at 1.0) + 2
                     {"2", 5},        // 3 + 2 (engine 1 at 1.5)
                     {"+Inf", 9}}));  // 4 + 5
  EXPECT_EQ(one(c, "server_ttft_seconds_sum"), 14.75);
  EXPECT_EQ(one(c, "server_ttft_seconds_count"), 9);
}

// The one-sweep merge against the definition (every bound of the union, every
// series' count at or below it), on label sets with bounds of their own.
TEST(CanonicalMerge, TheSweepEqualsTheStepFunctionsSummedAtEveryBound) {
  const std::string n = "vllm:e2e_request_latency_seconds";
  std::vector<ExpositionSample> samples;
  std::vector<std::vector<std::pair<double, double>>> series;
  std::uint64_t state = 12345;
  const auto next = [&state](std::uint64_t m) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % m;
  };
  double observed = 0;
  for (int s = 0; s < 40; ++s) {
    std::vector<std::pair<double, double>> b;
    double le = 0, count = 0;
    for (int k = 0, nb = 1 + static_cast<int>(next(12)); k < nb; ++k) {
      le += 0.25 * static_cast<double>(1 + next(8));
      count += static_cast<double>(next(5));
      b.push_back({le, count});
      samples.push_back(sample(n + "_bucket", {{"engine", std::to_string(s)}, {"le", fmt_le(le)}}, count));
    }
    count += static_cast<double>(next(3));
    samples.push_back(sample(n + "_bucket", {{"engine", std::to_string(s)}, {"le", "+Inf"}}, count));
    observed += count;
    series.push_back(b);
  }
  const auto c = canonicalize(exposition({family(n, MetricType::kHistogram, samples)}), Engine::kVllmV1);
  const Buckets got = buckets(c, "server_e2e_seconds");
  std::set<double> bounds;
  for (const auto& b : series)
    for (const auto& [le, x] : b) bounds.insert(le);
  ASSERT_EQ(got.size(), bounds.size() + 1);
  std::size_t i = 0;
  for (const double le : bounds) {
    double want = 0;
    for (const auto& b : series) {
      double at = 0;
      for (const auto& [bound, x] : b)
        if (bound <= le) at = x;
      want += at;
    }
    EXPECT_EQ(got[i].first, fmt_le(le));
    EXPECT_DOUBLE_EQ(got[i].second, want) << le;
    ++i;
  }
  EXPECT_EQ(got.back().first, "+Inf");
  EXPECT_DOUBLE_EQ(got.back().second, observed);
}

TEST(CanonicalMerge, ANanOrInfiniteCountIsLeftOutNotSummedIntoEveryBucket) {
  const std::string n = "vllm:time_to_first_token_seconds";
  const auto b = [](const char* engine, const char* le) { return Labels{{"engine", engine}, {"le", le}}; };
  const auto c = canonicalize(
      exposition(
          {family(n, MetricType::kHistogram,
                  {sample(n + "_bucket", b("0", "1"), NAN), sample(n + "_bucket", b("0", "2"), 3),
                   sample(n + "_bucket", b("0", "+Inf"), 4), sample(n + "_bucket", b("1", "1.5"), INFINITY),
                   sample(n + "_bucket", b("1", "3"), 2), sample(n + "_bucket", b("1", "+Inf"), 5)})}),
      Engine::kVllmV1);
  EXPECT_EQ(buckets(c, "server_ttft_seconds"), (Buckets{{"2", 3}, {"3", 5}, {"+Inf", 9}}));
}

TEST(CanonicalLimits, LabelSetsAndBucketBoundsPastTheBoundsAreLeftOutAndCounted) {
  // 8 GPUs of DCGM utilization, 3 label sets kept.
  std::vector<ExpositionSample> util;
  for (int g = 0; g < 8; ++g)
    util.push_back(sample("DCGM_FI_DEV_GPU_UTIL", {{"gpu", std::to_string(g)}, {"UUID", "u"}}, 10.0 * g));
  CanonicalLimits limits;
  limits.max_label_sets = 3;
  CanonicalDrops drops;
  auto c = canonicalize(exposition({family("DCGM_FI_DEV_GPU_UTIL", MetricType::kGauge, util)}), Engine::kDcgm,
                        limits, drops);
  std::size_t kept = 0;
  for (const auto& s : c) kept += s.name == "gpu_utilization";
  EXPECT_EQ(kept, 3u);
  EXPECT_EQ(drops.label_sets, 5u);
  // A histogram of 30 label sets with 20 bounds of their own: 600 distinct
  // bounds merged, over a bound of 512: left out whole, counted.
  const std::string n = "vllm:time_to_first_token_seconds";
  std::vector<ExpositionSample> h;
  for (int s = 0; s < 30; ++s) {
    for (int k = 0; k < 20; ++k)
      h.push_back(
          sample(n + "_bucket", {{"engine", std::to_string(s)}, {"le", fmt_le(s * 100 + k + 0.5)}}, k));
    h.push_back(sample(n + "_bucket", {{"engine", std::to_string(s)}, {"le", "+Inf"}}, 20));
  }
  drops = {};
  c = canonicalize(exposition({family(n, MetricType::kHistogram, h)}), Engine::kVllmV1, CanonicalLimits{},
                   drops);
  EXPECT_TRUE(buckets(c, "server_ttft_seconds").empty());
  EXPECT_EQ(drops.histograms, 1u);
  limits = {};
  limits.max_bucket_bounds = 600;
  drops = {};
  c = canonicalize(exposition({family(n, MetricType::kHistogram, h)}), Engine::kVllmV1, limits, drops);
  EXPECT_EQ(buckets(c, "server_ttft_seconds").size(), 601u);
  EXPECT_EQ(drops.histograms, 0u);
}

TEST(CanonicalMerge, RatiosAreAveragedAcrossDataParallelEnginesAndCountsSummed) {
  std::vector<ExpositionSample> usage, running;
  const double u[] = {0.2, 0.4, 0.9};
  for (int i = 0; i < 3; ++i) {
    const Labels l{{"model_name", "m"}, {"engine", std::to_string(i)}};
    usage.push_back(sample("vllm:kv_cache_usage_perc", l, u[i]));
    running.push_back(sample("vllm:num_requests_running", l, i + 1));
  }
  const auto c = canonicalize(exposition({family("vllm:kv_cache_usage_perc", MetricType::kGauge, usage),
                                          family("vllm:num_requests_running", MetricType::kGauge, running)}),
                              Engine::kVllmV1);
  EXPECT_DOUBLE_EQ(one(c, "kv_cache_usage"), 0.5);  // (0.2 + 0.4 + 0.9) / 3
  EXPECT_EQ(one(c, "requests_running"), 6);         // 1 + 2 + 3
}

TEST(CanonicalMerge, CountersMatchWithOrWithoutTotalWhateverTheFamilyName) {
  // OpenMetrics: family x, samples x_total and x_created (ignored).
  const Labels l{{"engine", "0"}};
  const auto om = canonicalize(exposition({family("vllm:prompt_tokens", MetricType::kCounter,
                                                  {sample("vllm:prompt_tokens_total", l, 100),
                                                   sample("vllm:prompt_tokens_created", l, 1.7e9)})}),
                               Engine::kVllmV1);
  EXPECT_EQ(one(om, "prompt_tokens"), 100);
  // A server that writes the counter without _total; V0's table names it with _total.
  const auto bare = canonicalize(exposition({family("vllm:num_preemptions", MetricType::kCounter,
                                                    {sample("vllm:num_preemptions", {}, 5)})}),
                                 Engine::kVllmV0);
  EXPECT_EQ(one(bare, "preemptions"), 5);
}

TEST(CanonicalMerge, AnOlderNameIsUsedWhenTheNewerIsAbsent) {
  const Labels l{{"model_name", "m"}, {"engine", "0"}};
  const auto c = canonicalize(exposition({family("vllm:gpu_cache_usage_perc", MetricType::kGauge,
                                                 {sample("vllm:gpu_cache_usage_perc", l, 0.3)}),
                                          family("vllm:gpu_prefix_cache_hits", MetricType::kCounter,
                                                 {sample("vllm:gpu_prefix_cache_hits_total", l, 12)})}),
                              Engine::kVllmV1);
  EXPECT_EQ(one(c, "kv_cache_usage"), 0.3);
  EXPECT_EQ(one(c, "prefix_cache_hits_tokens"), 12);
}

TEST(CanonicalMalformed, BadBucketsAreLeftOutAndNothingThrows) {
  const std::string n = "vllm:e2e_request_latency_seconds";
  const auto c = canonicalize(
      exposition(
          {family(n, MetricType::kHistogram,
                  {sample(n + "_bucket", {{"le", "abc"}}, 1), sample(n + "_bucket", {}, 2),  // no le at all
                   sample(n + "_bucket", {{"le", "NaN"}}, 3), sample(n + "_bucket", {{"le", "0.5"}}, 4),
                   sample(n + "_count", {}, 6), sample(n + "_sum", {}, std::nan(""))})}),
      Engine::kVllmV1);
  // Only the 0.5 bucket survives; +Inf comes from _count (the series had none).
  EXPECT_EQ(buckets(c, "server_e2e_seconds"), (Buckets{{"0.5", 4}, {"+Inf", 6}}));
  EXPECT_TRUE(std::isnan(one(c, "server_e2e_seconds_sum")));  // a NaN from the server stays NaN
  EXPECT_EQ(one(c, "server_e2e_seconds_count"), 6);
}

TEST(CanonicalTables, EveryMappingIsWellFormed) {
  for (Engine engine : {Engine::kVllmV1, Engine::kVllmV0, Engine::kSglang, Engine::kLlamaCpp, Engine::kTgi,
                        Engine::kTriton, Engine::kDcgm}) {
    const auto table = maps::table_for(engine);
    EXPECT_FALSE(table.mappings.empty()) << engine_name(engine);
    for (const auto& m : table.mappings) {
      const CanonicalDefinition* def = find_canonical(m.canonical);
      ASSERT_NE(def, nullptr) << m.engine_name << " → " << m.canonical;
      EXPECT_EQ(def->name, m.canonical) << "a mapping names a family, not a _bucket/_sum/_count";
      EXPECT_FALSE(m.source.empty()) << m.engine_name;
      EXPECT_GT(m.scale.multiply, 0) << m.engine_name;
      EXPECT_GT(m.scale.divide, 0) << m.engine_name;
      EXPECT_EQ(m.match_label.empty(), m.match_value.empty()) << m.engine_name;
      // GPU tables map to gpu_* names, server tables to the rest.
      EXPECT_EQ(table.per_gpu, m.canonical.starts_with("gpu_")) << m.engine_name;
    }
  }
  EXPECT_TRUE(maps::table_for(Engine::kUnknown).mappings.empty());
}

TEST(CanonicalTables, DocsObserveMdShowsEveryMapping) {
  std::ifstream in(TOKENSCOPE_SOURCE_DIR "/docs/observe.md");
  ASSERT_TRUE(in) << "docs/observe.md missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (Engine engine : {Engine::kVllmV1, Engine::kVllmV0, Engine::kSglang, Engine::kLlamaCpp, Engine::kTgi,
                        Engine::kTriton, Engine::kDcgm}) {
    for (const auto& m : maps::table_for(engine).mappings) {
      EXPECT_NE(doc.find("`" + std::string(m.engine_name)), std::string::npos) << m.engine_name;
      EXPECT_NE(doc.find("| `" + std::string(m.canonical) + "`"), std::string::npos) << m.canonical;
      if (!m.match_label.empty()) {
        EXPECT_NE(doc.find(std::string(m.match_label) + "=\"" + std::string(m.match_value) + "\""),
                  std::string::npos)
            << m.engine_name;
      }
    }
  }
}

TEST(CanonicalTables, CanonicalNamesAreUnique) {
  std::set<std::string_view> seen;
  for (const auto& d : kCanonicalSeries) EXPECT_TRUE(seen.insert(d.name).second) << d.name;
}

}  // namespace
}  // namespace tokenscope::observe
