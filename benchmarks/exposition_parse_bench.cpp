// The /metrics exposition parser on a vLLM-sized page (about 2,100 series,
// 240 KB, written by benchmarks/vllm_exposition.py, which this program runs
// once with python3). Not a test: timing is never asserted; numbers go to
// docs/performance.md ("Exposition parsing"). bytes_per_second is the parse
// rate of the page, items_per_second the series (samples) per second.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "observe/exposition.h"

namespace {
using namespace tokenscope::observe;

struct Page {
  std::string text;
  std::string error;
};

const Page& page(bool openmetrics) {
  static std::map<bool, Page> pages;
  auto [it, fresh] = pages.try_emplace(openmetrics);
  Page& p = it->second;
  if (!fresh) return p;
  const std::string command = std::string("python3 '") + TOKENSCOPE_SOURCE_DIR +
                              "/benchmarks/vllm_exposition.py' --engines 6" +
                              (openmetrics ? " --openmetrics" : "") + " 2>/dev/null";
  FILE* f = popen(command.c_str(), "r");
  if (!f) {
    p.error = "cannot run " + command;
    return p;
  }
  char buf[1 << 16];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) p.text.append(buf, n);
  if (pclose(f) != 0 || p.text.empty()) p.error = "no page from: " + command;
  return p;
}

enum class Flatten { kNo, kCopy, kMove };

void run(benchmark::State& state, bool openmetrics, Flatten flatten_mode) {
  const Page& p = page(openmetrics);
  if (!p.error.empty()) {
    state.SkipWithError(p.error.c_str());
    return;
  }
  std::size_t samples = 0;
  for (auto _ : state) {
    Exposition e = parse_exposition(p.text);
    samples = e.samples;
    if (e.rejected_lines != 0) {
      state.SkipWithError("the page has rejected lines");
      return;
    }
    benchmark::DoNotOptimize(e.families.data());
    if (flatten_mode == Flatten::kCopy) {
      const auto flat = flatten(e);
      benchmark::DoNotOptimize(flat.data());
    } else if (flatten_mode == Flatten::kMove) {
      const auto flat = flatten(std::move(e));
      benchmark::DoNotOptimize(flat.data());
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * p.text.size()));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * samples));
  state.counters["series"] = static_cast<double>(samples);
  state.counters["page_bytes"] = static_cast<double>(p.text.size());
}

void BM_ParseVllmPrometheusText(benchmark::State& state) {
  run(state, false, Flatten::kNo);
}
void BM_ParseVllmOpenMetrics(benchmark::State& state) {
  run(state, true, Flatten::kNo);
}
// What a scrape does with the page: parse, then the raw series of its
// Observation, copied out of the Exposition or moved.
void BM_ParseAndFlattenCopyVllmPrometheusText(benchmark::State& state) {
  run(state, false, Flatten::kCopy);
}
void BM_ParseAndFlattenMoveVllmPrometheusText(benchmark::State& state) {
  run(state, false, Flatten::kMove);
}
BENCHMARK(BM_ParseVllmPrometheusText);
BENCHMARK(BM_ParseVllmOpenMetrics);
BENCHMARK(BM_ParseAndFlattenCopyVllmPrometheusText);
BENCHMARK(BM_ParseAndFlattenMoveVllmPrometheusText);

}  // namespace

BENCHMARK_MAIN();
