#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "core/random.h"

namespace tokenscope::engine {
namespace {

using tokenizers::TokenId;

// Records everything the engine reports and checks per-step invariants.
struct Recorder : EngineObserver {
  std::map<std::uint64_t, std::vector<Nanos>> tokens;
  std::map<std::uint64_t, FinishedRequest> finished;
  std::map<std::uint64_t, std::string> rejected;
  std::vector<StepStats> steps;
  std::map<std::uint64_t, std::vector<TokenId>> token_ids;
  void on_token(std::uint64_t id, Nanos t, TokenId token) override {
    tokens[id].push_back(t);
    token_ids[id].push_back(token);
  }
  void on_finish(const FinishedRequest& r) override { finished[r.id] = r; }
  void on_reject(std::uint64_t id, Nanos, std::string_view why) override { rejected[id] = std::string(why); }
  void on_step(const StepStats& s) override { steps.push_back(s); }
};

std::vector<TokenId> prompt(std::uint64_t seed, std::size_t n) {
  std::vector<TokenId> t;
  for (std::size_t i = 0; i < n; ++i) t.push_back(static_cast<TokenId>(mix64(seed * 1'000'003 + i) % 100000));
  return t;
}

struct Harness {
  EngineSettings settings;
  Recorder rec;
  std::unique_ptr<Engine> engine;
  Nanos now = 0;

  explicit Harness(EngineSettings s) : settings(std::move(s)) {
    const auto catalog = Catalog::builtin();
    auto eff = resolve_engine(settings, catalog);
    auto cost = std::make_unique<RooflineCostModel>(eff.model, eff.gpu, eff.tensor_parallel, settings.cost);
    engine = std::make_unique<Engine>(eff, settings, std::move(cost), &rec);
  }
  bool add(std::uint64_t id, std::vector<TokenId> p, std::uint32_t out, std::uint32_t tenant = 0,
           std::int32_t priority = 0) {
    EngineRequest r;
    r.id = id;
    r.prompt = std::move(p);
    r.max_output_tokens = out;
    r.tenant = tenant;
    r.priority = priority;
    return engine->add_request(std::move(r), now);
  }
  // Steps until idle; checks the invariants after every step.
  void drain(std::size_t max_steps = 1'000'000) {
    for (std::size_t i = 0; i < max_steps && engine->has_work(); ++i) {
      const Nanos d = engine->step(now);
      ASSERT_TRUE(engine->check_invariants()) << "step " << i;
      if (!rec.steps.empty()) {
        const auto& s = rec.steps.back();
        ASSERT_LE(s.prefill_tokens + s.decode_tokens, settings.max_num_batched_tokens);
        ASSERT_LE(s.num_seqs, settings.max_num_seqs);
        if (settings.num_gpu_blocks_override) {
          ASSERT_LE(s.kv_blocks_in_use, *settings.num_gpu_blocks_override);
        }
      }
      now += d;
    }
    ASSERT_FALSE(engine->has_work());
  }
};

EngineSettings small(std::uint32_t blocks) {
  EngineSettings s;
  s.num_gpu_blocks_override = blocks;
  s.max_num_batched_tokens = 512;
  s.max_num_seqs = 16;
  return s;
}

TEST(Engine, EveryRequestFinishesOrIsRejectedWithAReason) {
  Harness h(small(64));  // 1024 tokens of KV
  Rng rng(4);
  std::size_t expected_rejections = 0;
  for (std::uint64_t id = 0; id < 200; ++id) {
    const auto len = rng.uniform_int(1, 1200);
    const auto out = static_cast<std::uint32_t>(rng.uniform_int(1, 64));
    if ((len + out - 1 + 15) / 16 > 64) ++expected_rejections;
    h.add(id, prompt(id, len), out);
    if (id % 10 == 0) {
      for (int k = 0; k < 5 && h.engine->has_work(); ++k) h.now += h.engine->step(h.now);
    }
  }
  h.drain();
  EXPECT_EQ(h.rec.finished.size() + h.rec.rejected.size(), 200u);
  EXPECT_EQ(h.rec.rejected.size(), expected_rejections);
  for (const auto& [id, why] : h.rec.rejected) EXPECT_NE(why.find("KV blocks"), std::string::npos) << why;
  for (const auto& [id, f] : h.rec.finished) {
    EXPECT_EQ(h.rec.tokens[id].size(), f.output_tokens);
    EXPECT_GE(f.first_token, f.first_scheduled);
    EXPECT_GE(f.first_scheduled, f.arrival);
  }
  EXPECT_EQ(h.engine->kv_blocks_in_use(), 0u);
}

// LoRA adapters (EngineSettings::max_loras): with one adapter slot, a
// request for a second adapter waits while the first runs, and requests
// behind it (base model, the first adapter) go past it; each adapter brought
// onto the GPU costs lora_load_ms in its step; adapters do not share
// prefix-cache blocks; without adapters on, a request naming one is refused.
TEST(Engine, LoraAdaptersAtMostMaxLorasInABatch) {
  auto s = small(256);
  s.max_loras = 1;
  s.lora_load_ms = 5.0;
  Harness h(s);
  auto add = [&](std::uint64_t id, std::uint32_t adapter, std::uint64_t prompt_seed) {
    EngineRequest r;
    r.id = id;
    r.prompt = prompt(prompt_seed, 64);
    r.max_output_tokens = 8;
    r.adapter = adapter;
    ASSERT_TRUE(h.engine->add_request(std::move(r), h.now));
  };
  add(1, 1, 1);  // adapter 1
  add(2, 2, 2);  // adapter 2: one too many while 1 runs
  add(3, 0, 3);  // the base model: goes past request 2
  add(4, 1, 1);  // adapter 1 again, the same prompt as request 1
  h.now += h.engine->step(h.now);
  EXPECT_EQ(h.engine->running_adapters(), (std::vector<std::uint32_t>{1}));
  EXPECT_EQ(h.engine->waiting_adapters(), (std::vector<std::uint32_t>{2}));
  ASSERT_EQ(h.rec.steps.size(), 1u);
  EXPECT_EQ(h.rec.steps[0].num_seqs, 3u);  // 1, 3 and 4
  EXPECT_EQ(h.rec.steps[0].lora_loads, 1u);
  EXPECT_DOUBLE_EQ(h.rec.steps[0].cost.extra_s, 0.005);
  h.drain();
  ASSERT_EQ(h.rec.finished.size(), 4u);
  // Request 2 starts after every adapter-1 request ended, and costs a load.
  EXPECT_GE(h.rec.finished[2].first_scheduled, h.rec.finished[1].finished);
  EXPECT_GE(h.rec.finished[2].first_scheduled, h.rec.finished[4].finished);
  EXPECT_LT(h.rec.finished[3].first_scheduled, h.rec.finished[2].first_scheduled);
  EXPECT_EQ(h.engine->counters().lora_loads, 2u);
  // Request 1's prompt again: under adapter 2 it misses the prefix cache,
  // under adapter 1 it hits.
  add(5, 2, 1);
  add(6, 1, 1);
  h.drain();
  EXPECT_EQ(h.rec.finished[5].cached_tokens, 0u);
  EXPECT_EQ(h.rec.finished[6].cached_tokens, 48u);  // 3 whole blocks of 64 tokens, the last recomputed
  EXPECT_EQ(h.engine->counters().lora_loads, 3u);   // adapter 1 again after adapter 2 took the slot

  Harness off(small(64));
  EngineRequest r;
  r.id = 7;
  r.prompt = prompt(7, 16);
  r.adapter = 3;
  EXPECT_FALSE(off.engine->add_request(std::move(r), 0));
  EXPECT_NE(off.rec.rejected[7].find("LoRA adapters are not enabled"), std::string::npos);
}

// Under memory pressure with swap preemption, three adapters over two slots
// and a stream of arrivals for the adapters already running: every request
// finishes (a swapped request whose adapter does not fit is not starved by
// newer ones), and the invariants hold at every step (at most max_loras
// adapters in the batch and on the GPU, each running one on the GPU).
TEST(Engine, LoraWithSwapPreemptionEveryRequestFinishes) {
  auto s = small(40);
  s.max_loras = 2;
  s.preemption = PreemptionMode::kSwap;
  Harness h(s);
  Rng rng(7);
  for (std::uint64_t id = 0; id < 300; ++id) {
    EngineRequest r;
    r.id = id;
    r.prompt = prompt(id, static_cast<std::size_t>(rng.uniform_int(16, 200)));
    r.max_output_tokens = static_cast<std::uint32_t>(rng.uniform_int(8, 120));
    r.adapter = static_cast<std::uint32_t>(id % 4);  // base, 1, 2, 3
    ASSERT_TRUE(h.engine->add_request(std::move(r), h.now));
    for (int k = 0; k < 3 && h.engine->has_work(); ++k) {
      h.now += h.engine->step(h.now);
      ASSERT_TRUE(h.engine->check_invariants());
    }
  }
  h.drain(200000);
  EXPECT_EQ(h.rec.finished.size() + h.rec.rejected.size(), 300u);
  EXPECT_GT(h.engine->counters().preemptions, 0u);
  EXPECT_GT(h.engine->counters().lora_loads, 2u);
}

// The default load cost: the adapter's weights over the host link, rank 16
// on Llama-3-8B: 32 layers x 16 x (q 8192 + k 5120 + v 5120 + o 8192 +
// 3 x (4096 + 14336)) parameters in bf16 = 83,886,080 bytes.
TEST(Engine, LoraLoadCostIsTheAdaptersWeightsOverTheHostLink) {
  EngineSettings s;
  s.max_loras = 4;
  const auto eff = resolve_engine(s, Catalog::builtin());
  EXPECT_DOUBLE_EQ(eff.lora_adapter_bytes, 83886080.0);
  EXPECT_NEAR(eff.lora_load_ms, 83886080.0 / (eff.gpu.host_link_gbps * 1e9) * 1e3, 1e-9);
  EXPECT_GT(eff.lora_load_ms, 0.5);
  s.max_lora_rank = 0;
  EXPECT_THROW(resolve_engine(s, Catalog::builtin()), UsageError);
}

TEST(Engine, MemoryPressureCausesCountedPreemptions) {
  Harness h(small(40));  // 640 tokens; ten 100-token prompts growing by 200 tokens each
  for (std::uint64_t id = 0; id < 10; ++id) h.add(id, prompt(id, 100), 200);
  h.drain();
  EXPECT_EQ(h.rec.finished.size(), 10u);
  std::uint64_t per_request = 0;
  for (const auto& [id, f] : h.rec.finished) per_request += f.preemptions;
  EXPECT_GT(h.engine->counters().preemptions, 0u);
  EXPECT_EQ(per_request, h.engine->counters().preemptions);
  std::uint64_t in_steps = 0;
  for (const auto& s : h.rec.steps) in_steps += s.preemptions;
  EXPECT_EQ(in_steps, h.engine->counters().preemptions);
  for (const auto& [id, f] : h.rec.finished) EXPECT_EQ(f.output_tokens, 200u);
}

TEST(Engine, SwapPreemptionMovesBytesOverTheHostLink) {
  auto s = small(40);
  s.preemption = PreemptionMode::kSwap;
  Harness h(s);
  for (std::uint64_t id = 0; id < 10; ++id) h.add(id, prompt(id, 100), 200);
  h.drain();
  EXPECT_EQ(h.rec.finished.size(), 10u);
  const auto& c = h.engine->counters();
  EXPECT_GT(c.preemptions, 0u);
  EXPECT_GT(c.swap_out_bytes, 0u);
  EXPECT_EQ(c.swap_out_bytes, c.swap_in_bytes);
  EXPECT_EQ(c.swap_out_bytes % 2097152, 0u);  // whole blocks of 16 x 131,072 bytes
}

TEST(Engine, PrefixHitsAreWholeBlocksAndTheLastTokenIsRecomputed) {
  Harness h(small(1000));
  h.add(1, prompt(7, 100), 1);
  h.drain();
  h.add(2, prompt(7, 100), 1);  // same 100 tokens: 6 full blocks cached, (100-1)/16 = 6
  h.add(3, prompt(7, 32), 1);   // exactly 2 blocks: only 1 may hit, the last token is recomputed
  h.drain();
  EXPECT_EQ(h.rec.finished[2].cached_tokens, 96u);
  EXPECT_EQ(h.rec.finished[3].cached_tokens, 16u);
  EXPECT_EQ(h.engine->counters().prefix_queries_tokens, 232u);
  EXPECT_EQ(h.engine->counters().prefix_hits_tokens, 112u);
}

TEST(Engine, SharedPrefixDivergingLaterHitsOnlyTheSharedBlocks) {
  Harness h(small(1000));
  auto a = prompt(1, 80);
  auto b = a;
  b[40] ^= 1;  // diverges in block 2
  h.add(1, a, 1);
  h.drain();
  h.add(2, b, 1);
  h.drain();
  EXPECT_EQ(h.rec.finished[2].cached_tokens, 32u);
}

TEST(Engine, ChunkedPrefillSplitsLongPromptsAtTheBudget) {
  auto s = small(4000);
  Harness h(s);
  h.add(1, prompt(1, 1300), 2);
  h.drain();
  ASSERT_GE(h.rec.steps.size(), 4u);
  EXPECT_EQ(h.rec.steps[0].prefill_tokens, 512u);
  EXPECT_EQ(h.rec.steps[1].prefill_tokens, 512u);
  EXPECT_EQ(h.rec.steps[2].prefill_tokens, 276u);
  EXPECT_EQ(h.rec.tokens[1].front(), h.rec.steps[2].start + h.rec.steps[2].duration);
  EXPECT_EQ(h.rec.steps[3].decode_tokens, 1u);
}

TEST(Engine, WithoutChunkingLongPromptsWaitForARoomyStep) {
  auto s = small(4000);
  s.enable_chunked_prefill = false;
  s.max_num_batched_tokens = 8192;
  s.max_model_len = 8192;
  Harness h(s);
  h.add(1, prompt(1, 3000), 1);
  h.drain();
  EXPECT_EQ(h.rec.steps[0].prefill_tokens, 3000u);
}

TEST(Engine, TooLongForTheContextIsRejected) {
  Harness h(small(100000));
  EXPECT_FALSE(h.add(1, prompt(1, 8000), 500));
  EXPECT_NE(h.rec.rejected[1].find("max_model_len (8192)"), std::string::npos);
  EXPECT_FALSE(h.add(2, {}, 5));
  EXPECT_FALSE(h.engine->has_work());
}

TEST(Engine, PriorityPolicyServesLowerValuesFirst) {
  auto s = small(1000);
  s.policy = SchedulingPolicy::kPriority;
  s.max_num_seqs = 1;
  Harness h(s);
  h.add(1, prompt(1, 10), 3, 0, 5);
  h.add(2, prompt(2, 10), 3, 0, -1);
  h.add(3, prompt(3, 10), 3, 0, 0);
  h.drain();
  EXPECT_LT(h.rec.finished[2].finished, h.rec.finished[3].finished);
  EXPECT_LT(h.rec.finished[3].finished, h.rec.finished[1].finished);
}

TEST(Engine, FcfsPreemptsTheNewestRunningRequest) {
  Harness h(small(12));  // 192 tokens
  h.add(1, prompt(1, 64), 100);
  h.now += h.engine->step(h.now);
  h.add(2, prompt(2, 64), 100);
  h.drain();
  EXPECT_EQ(h.rec.finished[1].preemptions, 0u);
  EXPECT_GT(h.rec.finished[2].preemptions, 0u);
}

Harness tenants(TenantKvPolicy policy) {
  auto s = small(1000);
  s.num_tenants = 2;
  s.max_active_tenants = 1;
  s.context_switch_ms = 5.0;
  s.tenant_kv_policy = policy;
  return Harness(s);
}

// Tenant 0 runs a prompt, tenant 1 runs one, then tenant 0 repeats its prompt.
void alternate(Harness& h) {
  h.add(1, prompt(1, 160), 1, 0);
  h.drain();
  h.add(2, prompt(2, 160), 1, 1);
  h.drain();
  h.add(3, prompt(1, 160), 1, 0);
  h.drain();
}

TEST(Engine, TenantSwitchesCostTimeAndPoliciesDecideReuse) {
  auto none = tenants(TenantKvPolicy::kNoReuse);
  alternate(none);
  EXPECT_EQ(none.engine->counters().tenant_switches, 3u);
  EXPECT_EQ(none.rec.finished[3].cached_tokens, 0u);  // dropped on switch-out

  auto stat = tenants(TenantKvPolicy::kStaticReuse);
  alternate(stat);
  EXPECT_EQ(stat.rec.finished[3].cached_tokens, 144u);
  EXPECT_EQ(stat.engine->counters().swap_in_bytes, 0u);

  auto dyn = tenants(TenantKvPolicy::kDynamicReuse);
  alternate(dyn);
  EXPECT_EQ(dyn.rec.finished[3].cached_tokens, 144u);  // restored from host memory
  EXPECT_EQ(dyn.engine->counters().swap_in_bytes, 9u * 2097152u);
  EXPECT_GT(dyn.engine->counters().swap_out_bytes, 0u);
  // The switch cost is in the step that brought the tenant in.
  bool saw_switch_cost = false;
  for (const auto& st : dyn.rec.steps)
    saw_switch_cost |= st.tenant_switches == 1 && std::abs(st.cost.extra_s - 0.005) < 1e-12;
  EXPECT_TRUE(saw_switch_cost);
}

TEST(Engine, HostKvCapacityIsWholeBlocksOfItsGib) {
  const auto catalog = Catalog::builtin();
  EngineSettings s;                                                  // Llama-3-8B: 2 MiB per 16-token block
  EXPECT_EQ(resolve_engine(s, catalog).num_host_kv_blocks, 32768u);  // the default 64 GiB
  s.host_kv_gib = 0.02;                                              // 20.48 MiB
  EXPECT_EQ(resolve_engine(s, catalog).num_host_kv_blocks, 10u);
  s.host_kv_gib = 0;
  EXPECT_EQ(resolve_engine(s, catalog).num_host_kv_blocks, 0u);
  s.model = "llama-3-70b";  // 5 MiB per block, over all TP ranks
  s.tensor_parallel = 4;
  s.host_kv_gib = 64;
  EXPECT_EQ(resolve_engine(s, catalog).num_host_kv_blocks, 13107u);
  s.host_kv_gib = -1;
  EXPECT_THROW(resolve_engine(s, catalog), UsageError);
}

Harness dynamic_tenants(double host_kv_gib) {
  auto s = small(1000);
  s.num_tenants = 2;
  s.max_active_tenants = 1;
  s.tenant_kv_policy = TenantKvPolicy::kDynamicReuse;
  s.host_kv_gib = host_kv_gib;
  return Harness(s);
}

// Tenant 0's ten cached blocks go to a host pool of 15 blocks, least
// recently used first as the GPU's free queue holds them (the prefix's tail
// first); tenant 1's ten follow and evict the five least recently used:
// blocks 9-5 of tenant 0. Back, tenant 0 hits blocks 0-4 on the host and
// recomputes blocks 5-8 (block 9 holds the last prompt token, recomputed
// anyway).
TEST(Engine, HostPoolEvictsItsLeastRecentlyUsedBlocksWhichAreThenRecomputed) {
  auto h = dynamic_tenants(30.0 / 1024);  // 30 MiB: 15 blocks
  EXPECT_EQ(h.engine->effective().num_host_kv_blocks, 15u);
  alternate(h);
  const auto& c = h.engine->counters();
  constexpr std::uint64_t kBlock = 2097152;
  EXPECT_EQ(c.swap_out_bytes, 20 * kBlock);
  EXPECT_EQ(c.host_kv_evictions, 5u);
  EXPECT_EQ(h.rec.finished[3].cached_tokens, 80u);
  EXPECT_EQ(c.swap_in_bytes, 5 * kBlock);
  EXPECT_EQ(c.host_kv_recomputed_blocks, 4u);
  EXPECT_EQ(h.engine->host_kv_blocks(), 15u);
  EXPECT_EQ(c.max_host_kv_blocks, 15u);
  std::uint64_t evictions = 0, recomputed = 0;
  for (const auto& st : h.rec.steps) {
    evictions += st.host_kv_evictions;
    recomputed += st.host_kv_recomputed_blocks;
  }
  EXPECT_EQ(evictions, 5u);
  EXPECT_EQ(recomputed, 4u);
  EXPECT_EQ(h.rec.steps.back().host_kv_blocks, 15u);
}

// A tenant with more cached blocks than the pool holds copies only the most
// recently used ones (the prefix's head): tenant 0 copies blocks 0-3 of ten;
// tenant 1's four evict them; back, tenant 0 finds nothing and recomputes
// the four evicted blocks (the six never copied are not counted).
TEST(Engine, HostPoolSmallerThanATenantsCacheKeepsItsMostRecentBlocks) {
  auto h = dynamic_tenants(8.0 / 1024);  // 8 MiB: 4 blocks
  alternate(h);
  const auto& c = h.engine->counters();
  constexpr std::uint64_t kBlock = 2097152;
  EXPECT_EQ(c.swap_out_bytes, 8 * kBlock);
  EXPECT_EQ(c.host_kv_evictions, 4u);
  EXPECT_EQ(h.rec.finished[3].cached_tokens, 0u);
  EXPECT_EQ(c.swap_in_bytes, 0u);
  EXPECT_EQ(c.host_kv_recomputed_blocks, 4u);
  EXPECT_EQ(h.engine->host_kv_blocks(), 4u);
}

TEST(Engine, TenantsDoNotShareCacheEntries) {
  auto s = small(1000);
  s.num_tenants = 2;
  Harness h(s);
  h.add(1, prompt(1, 160), 1, 0);
  h.drain();
  h.add(2, prompt(1, 160), 1, 1);
  h.drain();
  EXPECT_EQ(h.rec.finished[2].cached_tokens, 0u);
}

TEST(Engine, AbortEndsARequestWhereverItIs) {
  auto s = small(1000);
  s.max_num_seqs = 1;
  Harness h(s);
  h.add(1, prompt(1, 40), 50);
  h.add(2, prompt(2, 40), 50);  // waits behind request 1
  for (int k = 0; k < 5; ++k) h.now += h.engine->step(h.now);
  EXPECT_TRUE(h.engine->abort(1, h.now));
  EXPECT_TRUE(h.engine->abort(2, h.now));
  EXPECT_FALSE(h.engine->abort(2, h.now));
  EXPECT_FALSE(h.engine->has_work());
  EXPECT_TRUE(h.rec.finished[1].aborted);
  EXPECT_EQ(h.rec.finished[1].output_tokens, 5u);
  EXPECT_TRUE(h.rec.finished[2].aborted);
  EXPECT_EQ(h.rec.finished[2].output_tokens, 0u);
  EXPECT_EQ(h.engine->kv_blocks_in_use(), 0u);
  EXPECT_TRUE(h.engine->check_invariants());
}

TEST(Engine, GeneratedTokensAreWordsKeyedByTheOutputSeed) {
  Harness h(small(1000));
  EngineRequest a;
  a.id = 1;
  a.prompt = prompt(1, 10);
  a.max_output_tokens = 20;
  a.output_seed = 77;
  EngineRequest b = a;
  b.id = 2;
  h.engine->add_request(std::move(a), 0);
  h.engine->add_request(std::move(b), 0);
  h.drain();
  EXPECT_EQ(h.rec.token_ids[1], h.rec.token_ids[2]);  // same seed, same text
  std::string text;
  for (auto t : h.rec.token_ids[1]) text += *tokenizers::piece_text(t);
  EXPECT_EQ(tokenizers::tokenize(text), h.rec.token_ids[1]);
}

TEST(Engine, ResolutionRejectsModelsThatDoNotFit) {
  EngineSettings s;
  s.model = "llama-3-70b";
  s.gpu = "h100-sxm";
  EXPECT_THROW(resolve_engine(s, Catalog::builtin()), UsageError);
  s.tensor_parallel = 4;
  const auto e = resolve_engine(s, Catalog::builtin());
  ASSERT_TRUE(e.num_gpu_blocks);
  EXPECT_GT(*e.num_gpu_blocks, 10000u);
  s.tensor_parallel = 3;  // does not divide 64 heads
  EXPECT_THROW(resolve_engine(s, Catalog::builtin()), UsageError);
}

TEST(Engine, KvCapacityFollowsMemoryArithmetic) {
  EngineSettings s;  // llama-3-8b, h100, 0.9, 2 GiB reserve, 16-token blocks
  const auto e = resolve_engine(s, Catalog::builtin());
  // (80 x 0.9 - 8,030,261,248 x 2 / 2^30 - 2) GiB / (16 x 131,072 B)
  const double kv_gib = 72.0 - 8030261248.0 * 2 / 1073741824.0 - 2.0;
  EXPECT_EQ(*e.num_gpu_blocks, static_cast<std::uint32_t>(kv_gib * 1073741824.0 / 2097152.0));
}

}  // namespace
}  // namespace tokenscope::engine
