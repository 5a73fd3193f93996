#include "engine/simulator.h"

#include <gtest/gtest.h>

#include "core/temp_dir.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/run_dir.h"
#include "workload/arrivals.h"
#include "workload/synthetic.h"
#include "workload/trace_readers.h"

namespace tokenscope::engine {
namespace {

const std::string kShared = TOKENSCOPE_SHARED_DIR "/traces/";

struct SimRun {
  nlohmann::json summary;
  SimReport report;
};

// What the run session does with the records (rundir/run_session.h), short
// of the run cache: each a line in the run directory (when there is one),
// each request in the summary.
struct FileSink final : RecordSink {
  RunDirectory* out = nullptr;
  SummaryBuilder summary;
  void add_request(const RequestRecord& r) override {
    summary.add(r);
    if (out == nullptr) return;
    r.append_json(out->requests().begin_line());
    out->requests().end_line();
  }
  void add_step(const StepRecord& r) override {
    if (out == nullptr) return;
    r.append_json(out->steps().begin_line());
    out->steps().end_line();
  }
};

SimRun simulate(const workload::Workload& w, EngineSettings s, RunDirectory* out = nullptr) {
  const auto catalog = Catalog::builtin();
  s.num_tenants = static_cast<std::uint32_t>(w.tenants.size());
  auto eff = resolve_engine(s, catalog);
  FileSink sink;
  sink.out = out;
  RecordingObserver obs(w, sink, true);
  Engine engine(eff, s, std::make_unique<RooflineCostModel>(eff.model, eff.gpu, eff.tensor_parallel, s.cost),
                &obs);
  SimRun r;
  r.report = run_simulation(w, engine);
  sink.summary.set_server_counters(server_counters(r.report.counters));
  r.summary = sink.summary.build();
  if (out) out->close();
  return r;
}

workload::Workload synthetic(std::uint64_t seed, std::uint64_t n, double rate) {
  workload::SyntheticSettings s;
  s.arrival.rate_rps = rate;
  s.num_requests = n;
  s.input =
      workload::parse_length_spec("lognormal:800:0.8:max=6000", "--input-len", workload::LengthRole::kInput);
  s.output = workload::parse_length_spec("lognormal:150:0.7:max=1000", "--output-len",
                                         workload::LengthRole::kOutput);
  s.prefix_groups = 4;
  s.prefix_tokens = 300;
  return workload::make_synthetic(s, workload::WorkloadSeeds::from_master(seed));
}

// The acceptance figure: the Mooncake conversation trace replayed in file
// order (each request alone) through an unlimited cache with 16-token blocks.
// The hash ids imply a hit rate of 0.3736 under vLLM's accounting.
TEST(Simulator, MooncakeConversationPrefixHitRate) {
  if (!std::filesystem::exists(kShared + "conversation_trace.jsonl"))
    GTEST_SKIP() << "shared traces not present";
  auto w = workload::read_trace(kShared + "conversation_trace.jsonl", {});
  workload::ArrivalSettings order;
  order.kind = workload::ArrivalKind::kConstant;
  order.rate_rps = 0.001;  // one request every 1,000 s: each runs alone, in file order
  Rng rng(1);
  workload::apply_arrivals(w, order, rng);
  EngineSettings s;
  s.model = "llama-3.1-8b";
  s.gpu = "h200";
  s.unlimited_kv = true;
  s.block_size_tokens = 16;
  const auto r = simulate(w, s);
  EXPECT_EQ(r.summary["requests_completed"], 12031);
  EXPECT_EQ(r.summary["prefix_cache_queries_tokens"], 144793823);
  EXPECT_NEAR(r.summary["prefix_cache_hit_rate"].get<double>(), 0.3736, 0.0005);
  EXPECT_TRUE(r.summary["kv_cache_usage_peak"].is_null());
}

TEST(Simulator, SameSeedGivesByteIdenticalOutput) {
  const auto base =
      std::filesystem::temp_directory_path() / ("tokenscope_sim_det_" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);
  EngineSettings s;
  s.num_gpu_blocks_override = 3000;  // tight enough to preempt
  for (const char* name : {"a", "b"}) {
    RunDirectory out(base / name);
    simulate(synthetic(99, 400, 20.0), s, &out);
  }
  for (const char* file : {"requests.jsonl", "steps.jsonl"}) {
    const auto a = read_file(base / "a" / file);
    EXPECT_GT(a.size(), 1000u);
    EXPECT_EQ(a, read_file(base / "b" / file)) << file;
  }
  std::filesystem::remove_all(base);
}

TEST(Simulator, RecordsCarryEveryTokenTimeAndTheSummaryAddsUp) {
  EngineSettings s;
  const auto w = synthetic(5, 300, 10.0);
  const auto base =
      std::filesystem::temp_directory_path() / ("tokenscope_sim_rec_" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);
  RunDirectory out(base);
  const auto r = simulate(w, s, &out);
  std::ifstream in(base / "requests.jsonl");
  std::string line;
  std::uint64_t lines = 0, tokens = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    ++lines;
    ASSERT_EQ(j["outcome"], "ok");
    ASSERT_EQ(j["event_offsets_ns"].size(), j["output_tokens"].get<std::size_t>());
    ASSERT_LE(j["t_send_ns"].get<long long>(), j["t_first_scheduled_ns"].get<long long>());
    ASSERT_LT(j["t_first_scheduled_ns"].get<long long>(), j["t_first_token_ns"].get<long long>());
    tokens += j["output_tokens"].get<std::uint64_t>();
  }
  EXPECT_EQ(lines, 300u);
  std::uint64_t expected_tokens = 0;
  for (const auto& q : w.requests) expected_tokens += q.output_tokens;
  EXPECT_EQ(tokens, expected_tokens);
  EXPECT_EQ(r.summary["output_tokens_total"], expected_tokens);
  EXPECT_GT(r.summary["prefix_cache_hit_rate"].get<double>(), 0.1);  // 4 shared 300-token prefixes
  EXPECT_GT(r.summary["ttft_ms"]["p50"].get<double>(), 0.0);
  EXPECT_GT(r.summary["tpot_ms"]["p50"].get<double>(), 5.0);  // at least one weight read per token
  std::filesystem::remove_all(base);
}

TEST(Simulator, OverloadBuildsQueuesAndPreemptions) {
  EngineSettings s;
  s.num_gpu_blocks_override = 1500;  // 24,000 tokens of KV
  const auto light = simulate(synthetic(3, 300, 2.0), s);
  const auto heavy = simulate(synthetic(3, 300, 200.0), s);
  EXPECT_GT(heavy.summary["ttft_ms"]["p90"].get<double>(), 5 * light.summary["ttft_ms"]["p90"].get<double>());
  EXPECT_GT(heavy.summary["preemptions_total"].get<std::uint64_t>(), 0u);
  EXPECT_GT(heavy.summary["kv_cache_usage_peak"].get<double>(), 0.9);
  EXPECT_EQ(heavy.summary["requests_completed"], 300);
}

TEST(Simulator, ZeroCostEngineServesEveryRequestAtItsArrival) {
  EngineSettings s;
  s.max_num_seqs = 4;  // forces queueing behind full batches at the same instant
  const auto w = synthetic(2, 500, 1000.0);
  auto eff = resolve_engine(s, Catalog::builtin());
  SummarySink sink;
  RecordingObserver obs(w, sink, false);
  Engine engine(eff, s, std::make_unique<FixedCostModel>(0.0), &obs);
  const auto report = run_simulation(w, engine);
  sink.summary.set_server_counters(server_counters(report.counters));
  const auto summary = sink.summary.build();
  EXPECT_EQ(summary["requests_completed"], 500);
  EXPECT_DOUBLE_EQ(summary["ttft_ms"]["max"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(summary["e2e_ms"]["max"].get<double>(), 0.0);
  EXPECT_EQ(report.virtual_end_ns, w.requests.back().arrival_ns);
}

TEST(Simulator, StopFlagEndsTheRunEarly) {
  EngineSettings s;
  const auto w = synthetic(1, 2000, 50.0);
  const auto catalog = Catalog::builtin();
  auto eff = resolve_engine(s, catalog);
  SummarySink sink;
  RecordingObserver obs(w, sink, false);
  Engine engine(eff, s, std::make_unique<FixedCostModel>(0.01), &obs);
  std::atomic<bool> stop{true};
  const auto report = run_simulation(w, engine, &stop);
  EXPECT_TRUE(report.interrupted);
  EXPECT_LT(sink.summary.requests_total(), 2000u);
}

// Rows too long for the context are rejected before their tokens are made
// (a row may claim 2^30 tokens: 4 GiB of them), and the rejection names the
// row: file, line and field.
TEST(Simulator, TooLongRowsAreRejectedByTheirTraceRow) {
  struct Rejections : EngineObserver {
    std::map<std::uint64_t, std::string> why;
    void on_reject(std::uint64_t id, Nanos, std::string_view reason) override {
      why[id] = std::string(reason);
    }
  };
  const auto w = workload::parse_trace_text(
      "{\"t_ms\": 0, \"input_tokens\": 100, \"output_tokens\": 5}\n"
      "{\"t_ms\": 1, \"input_tokens\": 1073741824, \"output_tokens\": 1073741824}\n"
      "{\"t_ms\": 2, \"prompt\": \"the cat\", \"output_tokens\": 8192}\n",
      "t.jsonl", workload::TraceFormat::kNative, {});
  EngineSettings s;
  const auto catalog = Catalog::builtin();
  const auto eff = resolve_engine(s, catalog);
  Rejections obs;
  Engine engine(eff, s, std::make_unique<RooflineCostModel>(eff.model, eff.gpu, eff.tensor_parallel, s.cost),
                &obs);
  const auto r = run_simulation(w, engine);
  EXPECT_EQ(r.requests_submitted, 3u);
  EXPECT_EQ(r.counters.requests_finished, 1u);
  ASSERT_EQ(obs.why.size(), 2u);
  EXPECT_EQ(obs.why[1],
            "t.jsonl:2: field 'input_tokens': prompt (1073741824 tokens) + max_tokens (1073741824) exceeds "
            "max_model_len (8192)");
  EXPECT_EQ(obs.why[2],
            "t.jsonl:3: field 'prompt': prompt (2 tokens) + max_tokens (8192) exceeds max_model_len (8192)");
}

}  // namespace
}  // namespace tokenscope::engine
