// The canonical mapping (observe/canonical.h) on a vLLM-sized page (about
// 2,100 series, written by benchmarks/vllm_exposition.py, which this program
// runs once with python3), beside parsing the same page in the same run: what
// canonical series add to a scrape's CPU. Not a test: timing is never
// asserted; numbers go to docs/performance.md ("Canonical series").
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "observe/canonical.h"
#include "observe/exposition.h"

namespace {
using namespace tokenscope::observe;

struct Page {
  std::string text;
  std::string error;
};

const Page& page() {
  static const Page p = [] {
    Page out;
    const std::string command = std::string("python3 '") + TOKENSCOPE_SOURCE_DIR +
                                "/benchmarks/vllm_exposition.py' --engines 6 2>/dev/null";
    FILE* f = popen(command.c_str(), "r");
    if (!f) {
      out.error = "cannot run " + command;
      return out;
    }
    char buf[1 << 16];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.text.append(buf, n);
    if (pclose(f) != 0 || out.text.empty()) out.error = "no page from: " + command;
    return out;
  }();
  return p;
}

// The peer in the same run: parsing the page (what every scrape does anyway).
void BM_Parse(benchmark::State& state) {
  const Page& p = page();
  if (!p.error.empty()) return state.SkipWithError(p.error.c_str());
  for (auto _ : state) {
    const Exposition e = parse_exposition(p.text);
    benchmark::DoNotOptimize(e.families.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * p.text.size()));
}

// Detection and the canonical series of the parsed page.
void BM_DetectAndCanonicalize(benchmark::State& state) {
  const Page& p = page();
  if (!p.error.empty()) return state.SkipWithError(p.error.c_str());
  const Exposition e = parse_exposition(p.text);
  std::size_t canonical = 0;
  for (auto _ : state) {
    const Engine engine = detect_engine(e);
    const auto c = canonicalize(e, engine);
    canonical = c.size();
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["series_in"] = static_cast<double>(e.samples);
  state.counters["series_out"] = static_cast<double>(canonical);
  if (detect_engine(e) != Engine::kVllmV1) state.SkipWithError("the page is not read as vLLM V1");
}

BENCHMARK(BM_Parse);
BENCHMARK(BM_DetectAndCanonicalize);

}  // namespace

BENCHMARK_MAIN();
