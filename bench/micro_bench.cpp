// Micro-benchmarks of the simulator's hot paths. Not tests: timing is never
// asserted; numbers go to docs/performance.md.
#include <benchmark/benchmark.h>

#include "core/histogram.h"
#include "core/random.h"
#include "engine/engine.h"
#include "workload/synthetic.h"
#include "workload/tokenizer.h"

namespace {
using namespace tokenscope;

void BM_Tokenize(benchmark::State& state) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "The quick brown fox jumps over the lazy dog, 42 times! ";
  std::vector<workload::TokenId> out;
  for (auto _ : state) {
    out.clear();
    workload::tokenize(text, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_Tokenize);

void BM_HistogramRecord(benchmark::State& state) {
  LogLinearHistogram h;
  Rng rng(1);
  std::vector<std::uint64_t> values(4096);
  for (auto& v : values) v = static_cast<std::uint64_t>(rng.lognormal(16, 1));
  std::size_t i = 0;
  for (auto _ : state) h.record(values[i++ & 4095]);
  benchmark::DoNotOptimize(h.count());
}
BENCHMARK(BM_HistogramRecord);

// Steps of a loaded engine: `range(0)` requests in flight, decoding.
void BM_EngineDecodeStep(benchmark::State& state) {
  engine::EngineSettings s;
  s.max_num_seqs = 1024;
  const auto eff = engine::resolve_engine(s, engine::Catalog::builtin());
  engine::Engine eng(eff, s, std::make_unique<engine::FixedCostModel>(0.001), nullptr);
  Nanos now = 0;
  std::uint64_t id = 0;
  auto add = [&] {
    engine::EngineRequest r;
    r.id = id++;
    for (int k = 0; k < 256; ++k) r.prompt.push_back(workload::spaced_token_from_key(id * 1000 + k));
    r.max_output_tokens = 7000;
    eng.add_request(std::move(r), now);
  };
  for (int64_t k = 0; k < state.range(0); ++k) add();
  for (auto _ : state) {
    now += eng.step(now);
    while (static_cast<int64_t>(eng.num_running() + eng.num_waiting()) < state.range(0)) add();
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_EngineDecodeStep)->Arg(16)->Arg(256);

}  // namespace

BENCHMARK_MAIN();
