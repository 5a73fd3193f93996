#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/random.h"
#include "workload/text.h"

namespace tokenscope::engine {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr std::uint64_t kRootSalt = 0x746f6b656e73636fULL;

std::uint64_t nonzero(std::uint64_t h) {
  return h == 0 ? 1 : h;
}
}  // namespace

SchedulingPolicy parse_scheduling_policy(std::string_view s) {
  if (s == "fcfs") return SchedulingPolicy::kFcfs;
  if (s == "priority") return SchedulingPolicy::kPriority;
  throw UsageError(fmt::format("--policy: expected fcfs or priority, got '{}'", s));
}
PreemptionMode parse_preemption_mode(std::string_view s) {
  if (s == "recompute") return PreemptionMode::kRecompute;
  if (s == "swap") return PreemptionMode::kSwap;
  throw UsageError(fmt::format("--preemption: expected recompute or swap, got '{}'", s));
}
TenantKvPolicy parse_tenant_kv_policy(std::string_view s) {
  if (s == "none") return TenantKvPolicy::kNoReuse;
  if (s == "static") return TenantKvPolicy::kStaticReuse;
  if (s == "dynamic") return TenantKvPolicy::kDynamicReuse;
  throw UsageError(fmt::format("--tenant-kv-policy: expected none, static or dynamic, got '{}'", s));
}
AttentionSpan parse_attention_span(std::string_view s) {
  if (s == "own") return AttentionSpan::kOwnContext;
  if (s == "occupancy") return AttentionSpan::kOccupancy;
  throw UsageError(fmt::format("--attention: expected own (vLLM) or occupancy (llama.cpp), got '{}'", s));
}
std::string_view name_of(AttentionSpan a) {
  return a == AttentionSpan::kOwnContext ? "own" : "occupancy";
}
std::string_view name_of(SchedulingPolicy p) {
  return p == SchedulingPolicy::kFcfs ? "fcfs" : "priority";
}
std::string_view name_of(PreemptionMode p) {
  return p == PreemptionMode::kRecompute ? "recompute" : "swap";
}
std::string_view name_of(TenantKvPolicy p) {
  switch (p) {
    case TenantKvPolicy::kNoReuse:
      return "none";
    case TenantKvPolicy::kStaticReuse:
      return "static";
    case TenantKvPolicy::kDynamicReuse:
      return "dynamic";
  }
  return "none";
}

// ---- resolution ----------------------------------------------------------------

nlohmann::json EffectiveEngine::to_json() const {
  nlohmann::json j;
  j["model"] = {{"name", model.name},
                {"layers", model.layers},
                {"hidden", model.hidden},
                {"heads", model.heads},
                {"kv_heads", model.kv_heads},
                {"head_dim", model.head_dim},
                {"intermediate", model.intermediate},
                {"vocab", model.vocab},
                {"experts", model.experts},
                {"experts_per_token", model.experts_per_token},
                {"max_context", model.max_context},
                {"params", model.total_params()}};
  j["gpu"] = {{"name", gpu.name},
              {"peak_tflops", gpu.peak_tflops},
              {"mem_bw_tbps", gpu.mem_bw_tbps},
              {"memory_gib", gpu.memory_gib},
              {"nvlink_gbps", gpu.nvlink_gbps},
              {"host_link_gbps", gpu.host_link_gbps}};
  j["tensor_parallel"] = tensor_parallel;
  j["block_size_tokens"] = block_size_tokens;
  j["num_gpu_blocks"] = num_gpu_blocks ? nlohmann::json(*num_gpu_blocks) : nlohmann::json("unlimited");
  j["kv_cache_tokens"] = num_gpu_blocks
                             ? nlohmann::json(static_cast<std::uint64_t>(*num_gpu_blocks) * block_size_tokens)
                             : nlohmann::json("unlimited");
  j["max_model_len"] = max_model_len;
  j["weights_gib_per_gpu"] = weights_gib_per_gpu;
  j["kv_cache_gib_per_gpu"] = kv_cache_gib_per_gpu;
  j["kv_bytes_per_token"] = kv_bytes_per_token;
  j["num_host_kv_blocks"] = num_host_kv_blocks;
  if (unperturbed_num_gpu_blocks) j["unperturbed_num_gpu_blocks"] = *unperturbed_num_gpu_blocks;
  if (lora_adapter_bytes > 0) {
    j["lora_adapter_bytes"] = lora_adapter_bytes;
    j["lora_load_ms"] = lora_load_ms;
  }
  j["max_num_seqs"] = max_num_seqs;
  j["max_num_batched_tokens"] = max_num_batched_tokens;
  j["attention"] = name_of(attention);
  j["notes"] = notes;
  return j;
}

// Long: every setting checked and resolved in one pass, each with its message.
EffectiveEngine resolve_engine(const EngineSettings& s, const Catalog& catalog) {
  EffectiveEngine e;
  e.max_num_seqs = s.max_num_seqs;
  e.max_num_batched_tokens = s.max_num_batched_tokens;
  e.attention = s.attention;
  e.model = catalog.model(s.model);
  e.gpu = catalog.gpu(s.gpu);
  if (s.tensor_parallel < 1 || s.tensor_parallel > 64)
    throw UsageError(fmt::format("--tensor-parallel: expected 1..64, got {}", s.tensor_parallel));
  if (e.model.heads % s.tensor_parallel != 0)
    throw UsageError(fmt::format("--tensor-parallel {}: must divide the model's {} attention heads",
                                 s.tensor_parallel, e.model.heads));
  if (!(s.gpu_memory_utilization > 0.0 && s.gpu_memory_utilization <= 1.0))
    throw UsageError(
        fmt::format("--gpu-memory-utilization: expected (0, 1], got {}", s.gpu_memory_utilization));
  if (!(s.activation_reserve_gib >= 0.0) || !std::isfinite(s.activation_reserve_gib))
    throw UsageError("--activation-reserve-gib: expected GiB >= 0");
  if (s.block_size_tokens < 1 || s.block_size_tokens > 1024)
    throw UsageError(fmt::format("--block-size: expected 1..1024 tokens, got {}", s.block_size_tokens));
  if (s.max_num_batched_tokens < 1) throw UsageError("--max-num-batched-tokens: expected >= 1");
  if (s.max_num_seqs < 1) throw UsageError("--max-num-seqs: expected >= 1");
  if (!(s.context_switch_ms >= 0.0) || !std::isfinite(s.context_switch_ms))
    throw UsageError("--context-switch-ms: expected milliseconds >= 0");
  if (s.num_tenants < 1) throw UsageError("tenants: expected at least 1");
  if (!(s.host_kv_gib >= 0.0) || !std::isfinite(s.host_kv_gib))
    throw UsageError("--host-kv-gib: expected GiB >= 0");
  if (s.fixed_step_ms && !(*s.fixed_step_ms >= 0.0 && std::isfinite(*s.fixed_step_ms)))
    throw UsageError("--fixed-step-ms: expected milliseconds >= 0");
  const auto& c = s.cost;
  for (auto [v, name] : {std::pair{c.mfu_linear, "--mfu-linear"},
                         {c.mfu_attention, "--mfu-attention"},
                         {c.bw_efficiency, "--bw-efficiency"},
                         {c.allreduce_efficiency, "--allreduce-efficiency"}})
    if (!(v > 0.0 && v <= 1.0))
      throw UsageError(fmt::format("{}: expected a fraction in (0, 1], got {}", name, v));
  for (auto [v, name] : {std::pair{c.step_overhead_ms, "--step-overhead-ms"},
                         {c.layer_overhead_us, "--layer-overhead-us"},
                         {c.allreduce_latency_us, "--allreduce-latency-us"}})
    if (!(v >= 0.0) || !std::isfinite(v)) throw UsageError(fmt::format("{}: expected >= 0, got {}", name, v));

  e.tensor_parallel = s.tensor_parallel;
  e.block_size_tokens = s.block_size_tokens;
  e.max_model_len = s.max_model_len == 0 ? e.model.max_context : s.max_model_len;
  if (e.max_model_len > e.model.max_context)
    e.notes.push_back(fmt::format("max_model_len {} exceeds the model's max_context {} (what-if)",
                                  e.max_model_len, e.model.max_context));
  if (!s.enable_chunked_prefill && s.max_num_batched_tokens < e.max_model_len)
    throw UsageError(
        fmt::format("--max-num-batched-tokens {} is smaller than max_model_len {}: with chunked prefill off "
                    "a long prompt "
                    "could never be scheduled (raise it, lower --max-model-len, or enable chunked prefill)",
                    s.max_num_batched_tokens, e.max_model_len));

  const double tp = s.tensor_parallel;
  e.weights_gib_per_gpu = e.model.total_params() * e.model.weight_bytes_per_param / tp / kGiB;
  e.kv_bytes_per_token = e.model.kv_bytes_per_token();
  // KV heads split over TP ranks; with fewer KV heads than ranks they are replicated.
  const double kv_per_gpu_per_token =
      e.kv_bytes_per_token * std::max<double>(e.model.kv_heads, tp) / e.model.kv_heads / tp;
  e.kv_bytes_per_block = e.kv_bytes_per_token * s.block_size_tokens;
  e.num_host_kv_blocks = static_cast<std::uint64_t>(std::floor(s.host_kv_gib * kGiB / e.kv_bytes_per_block));
  const double budget_gib = e.gpu.memory_gib * s.gpu_memory_utilization;
  const double kv_gib = budget_gib - e.weights_gib_per_gpu - s.activation_reserve_gib;
  if (s.unlimited_kv) {
    e.num_gpu_blocks = std::nullopt;
    e.kv_cache_gib_per_gpu = std::max(0.0, kv_gib);
    e.notes.push_back("unlimited KV cache (what-if): capacity never runs out");
  } else if (s.num_gpu_blocks_override) {
    if (*s.num_gpu_blocks_override == 0) throw UsageError("--num-gpu-blocks: expected at least 1");
    e.num_gpu_blocks = *s.num_gpu_blocks_override;
    e.kv_cache_gib_per_gpu = *e.num_gpu_blocks * s.block_size_tokens * kv_per_gpu_per_token / kGiB;
  } else {
    if (kv_gib <= 0.0)
      throw UsageError(fmt::format(
          "model {} does not fit on {} at tensor parallel {}: {:.1f} GiB of weights per GPU + {:.1f} GiB "
          "activation reserve > {:.1f} GiB usable ({:.0f} GiB x gpu_memory_utilization {}); raise "
          "--tensor-parallel or pick a larger GPU",
          e.model.name, e.gpu.name, s.tensor_parallel, e.weights_gib_per_gpu, s.activation_reserve_gib,
          budget_gib, e.gpu.memory_gib, s.gpu_memory_utilization));
    const double blocks = std::floor(kv_gib * kGiB / (s.block_size_tokens * kv_per_gpu_per_token));
    if (blocks < 1.0)
      throw UsageError(
          fmt::format("model {} on {}: no room for a single KV block", e.model.name, e.gpu.name));
    e.num_gpu_blocks = static_cast<std::uint32_t>(std::min(blocks, 2e9));
    e.kv_cache_gib_per_gpu = kv_gib;
  }
  for (const auto& p : s.perturbations) {
    if (const auto* kv = std::get_if<KvParams>(&p.params)) {
      if (!e.num_gpu_blocks)
        throw UsageError("--perturb kv: needs a KV cache of finite size (drop --unlimited-kv)");
      const std::uint32_t before = *e.num_gpu_blocks;
      const auto after =
          static_cast<std::uint32_t>(std::max(1.0, std::floor(kv->fraction * static_cast<double>(before))));
      e.unperturbed_num_gpu_blocks = before;
      e.num_gpu_blocks = after;
      e.kv_cache_gib_per_gpu *= static_cast<double>(after) / static_cast<double>(before);
      e.notes.push_back(
          fmt::format("perturbation kv: {} of {} KV blocks (fraction {})", after, before, kv->fraction));
    }
    if (const auto* cap = std::get_if<BatchCapParams>(&p.params)) {
      e.notes.push_back(
          fmt::format("perturbation batch_cap: max_num_seqs {} (was {})", cap->max_num_seqs, s.max_num_seqs));
      e.max_num_seqs = cap->max_num_seqs;
    }
  }
  if (s.max_loras > 0) {
    if (s.max_loras > 1024)
      throw UsageError(fmt::format("--max-loras: expected 1..1024, got {}", s.max_loras));
    if (s.max_lora_rank < 1 || s.max_lora_rank > 512)
      throw UsageError(fmt::format("--max-lora-rank: expected 1..512, got {}", s.max_lora_rank));
    // A rank-r adapter on every projection: r x (inputs + outputs) parameters each.
    const ModelSpec& m = e.model;
    const double q = static_cast<double>(m.heads) * m.head_dim,
                 kv = static_cast<double>(m.kv_heads) * m.head_dim;
    const double per_layer = (m.hidden + q) + 2 * (m.hidden + kv) + (q + m.hidden) +
                             m.experts * 3.0 * (m.hidden + static_cast<double>(m.intermediate));
    e.lora_adapter_bytes = s.max_lora_rank * per_layer * m.layers * m.weight_bytes_per_param;
    if (s.lora_load_ms) {
      if (!(*s.lora_load_ms >= 0 && *s.lora_load_ms <= 600000))
        throw UsageError(fmt::format("--lora-load-ms: expected 0..600000, got {}", *s.lora_load_ms));
      e.lora_load_ms = *s.lora_load_ms;
    } else {
      e.lora_load_ms =
          e.gpu.host_link_gbps > 0 ? e.lora_adapter_bytes / (e.gpu.host_link_gbps * 1e9) * 1e3 : 0.0;
    }
  }
  return e;
}

// ---- the engine ------------------------------------------------------------------

struct Engine::Seq {
  std::uint64_t id = 0;
  std::uint64_t order = 0;  // admission order, for stable priority ties
  std::uint32_t tenant = 0;
  std::int32_t priority = 0;
  Nanos arrival = 0;
  std::uint32_t prompt_len = 0;
  std::uint32_t target_output = 0;
  std::uint32_t num_output = 0;
  std::uint32_t num_computed = 0;
  std::vector<std::uint64_t> hashes;  // chained hashes of the full blocks of known tokens
  std::uint64_t run_hash = 0;         // hash state including the tail tokens
  std::uint32_t tail_count = 0;
  std::vector<BlockId> blocks;
  std::uint32_t num_cached_blocks = 0;
  std::uint32_t swapped_blocks = 0;
  Nanos first_scheduled = -1;
  Nanos first_token = -1;
  std::uint32_t preemptions = 0;
  std::uint32_t cached_tokens = 0;
  bool admitted_once = false;
  bool holds_slot = false;  // AttentionSpan::kOccupancy: it holds one of the slots
  std::uint64_t output_seed = 0;
  bool pooling = false;                     // its one token is the prefill's end, not a generated token
  double image_flops = 0, audio_flops = 0;  // encoders still to run (once, with the first prefill chunk)
  std::uint32_t adapter = 0;                // LoRA adapter, 0: none
  std::uint16_t group = 0;                  // EngineRequest::group
  std::uint32_t preloaded = 0;              // EngineRequest::preloaded_tokens, until a recompute
  bool transferred = false;                 // it came with preloaded KV: its prompt was counted elsewhere
  enum class State { kWaiting, kRunning, kSwapped } state = State::kWaiting;

  std::uint32_t num_tokens() const { return prompt_len + num_output; }
};

bool Engine::PriorityOrder::operator()(const Seq* a, const Seq* b) const {
  if (a->priority != b->priority) return a->priority < b->priority;
  if (a->arrival != b->arrival) return a->arrival < b->arrival;
  return a->order < b->order;
}

Engine::Engine(EffectiveEngine effective, EngineSettings settings, std::unique_ptr<CostModel> cost,
               EngineObserver* observer)
    : eff_(std::move(effective)),
      settings_(std::move(settings)),
      cost_(std::move(cost)),
      observer_(observer),
      host_pool_(eff_.num_host_kv_blocks) {
  static EngineObserver null_observer;
  if (observer_ == nullptr) observer_ = &null_observer;
  if (!settings_.perturbations.empty()) {
    CapacityBaseline baseline;
    baseline.max_num_seqs = settings_.max_num_seqs;
    baseline.num_gpu_blocks = eff_.unperturbed_num_gpu_blocks;
    if (eff_.unperturbed_num_gpu_blocks) baseline.perturbed_blocks = eff_.num_gpu_blocks;
    for (const auto& p : settings_.perturbations)
      if (const auto* cap = std::get_if<BatchCapParams>(&p.params))
        settings_.max_num_seqs = cap->max_num_seqs;
    perturber_ = std::make_unique<Perturber>(settings_.perturbations, settings_.perturbation_seed, baseline);
  }
  const bool partitioned =
      settings_.tenant_kv_policy == TenantKvPolicy::kStaticReuse && settings_.num_tenants > 1;
  const std::uint32_t num_pools = partitioned ? settings_.num_tenants : 1;
  std::optional<std::uint32_t> per_pool = eff_.num_gpu_blocks;
  if (per_pool && partitioned) per_pool = *per_pool / num_pools;
  for (std::uint32_t p = 0; p < num_pools; ++p)
    pools_.emplace_back(per_pool, settings_.enable_prefix_caching);
  resident_.assign(settings_.num_tenants, false);
  tenant_last_used_.assign(settings_.num_tenants, 0);
  tenant_live_seqs_.assign(settings_.num_tenants, 0);
  if (!eff_.num_gpu_blocks)
    counters_.kv_usage_peak = std::nullopt;
  else
    counters_.kv_usage_peak = 0.0;
  // llama.cpp's slots, all idle and empty at the start.
  if (settings_.attention == AttentionSpan::kOccupancy) empty_slots_ = settings_.max_num_seqs;
}

void Engine::take_slot(Seq* s) {
  if (settings_.attention != AttentionSpan::kOccupancy || s->holds_slot) return;
  s->holds_slot = true;
  // The least recently used idle slot: an empty one first; its kept tokens go.
  if (empty_slots_ > 0) {
    --empty_slots_;
  } else if (!idle_slots_.empty()) {
    idle_slot_tokens_ -= idle_slots_.begin()->second;
    idle_slots_.erase(idle_slots_.begin());
  }
}

void Engine::release_slot(Seq* s, Nanos t, std::uint32_t kept) {
  if (!s->holds_slot) return;
  s->holds_slot = false;
  if (kept == 0) {
    ++empty_slots_;
  } else {
    idle_slots_.emplace(t, kept);
    idle_slot_tokens_ += kept;
  }
}

Engine::~Engine() {
  for (Seq* s : running_) delete s;
  for (Seq* s : waiting_fcfs_) delete s;
  for (Seq* s : waiting_priority_) delete s;
  for (Seq* s : swapped_) delete s;
}

bool Engine::waiting_empty() const {
  return settings_.policy == SchedulingPolicy::kFcfs ? waiting_fcfs_.empty() : waiting_priority_.empty();
}
Engine::Seq* Engine::waiting_front() const {
  return settings_.policy == SchedulingPolicy::kFcfs ? waiting_fcfs_.front() : *waiting_priority_.begin();
}
void Engine::waiting_pop_front() {
  if (settings_.policy == SchedulingPolicy::kFcfs)
    waiting_fcfs_.pop_front();
  else
    waiting_priority_.erase(waiting_priority_.begin());
}
void Engine::waiting_push_back(Seq* s) {
  if (settings_.policy == SchedulingPolicy::kFcfs)
    waiting_fcfs_.push_back(s);
  else
    waiting_priority_.insert(s);
}
void Engine::waiting_push_front(Seq* s) {
  if (settings_.policy == SchedulingPolicy::kFcfs)
    waiting_fcfs_.push_front(s);
  else
    waiting_priority_.insert(s);  // ordered by (priority, arrival): back where it was
}

void Engine::track_coupling(const StepCost& cost, double duration_s) {
  // This step's HBM traffic by group: KV reads (what attention reads: the
  // context and the new tokens), and the encoders' weights shared by the
  // groups whose inputs they encode (split by FLOPs); the model's weights
  // are everyone's.
  std::map<std::uint16_t, double> kv, enc_flops;
  double total = eff_.model.total_params() * eff_.model.weight_bytes_per_param;
  for (const auto& [s, n] : scheduled_) {
    const double bytes = (static_cast<double>(s->num_computed) + n) * eff_.kv_bytes_per_token;
    kv[s->group] += bytes;
    total += bytes;
  }
  double all_enc = 0;
  for (const auto& [g, f] : step_encoder_flops_) {
    enc_flops[g] += f;
    all_enc += f;
  }
  const double enc_weights =
      all_enc > 0 ? (eff_.model.vision_params + eff_.model.audio_params) * eff_.model.weight_bytes_per_param
                  : 0.0;
  total += enc_weights;
  for (const auto& [g, bytes] : kv) {
    GroupTraffic& t = coupling_[g];
    ++t.steps;
    const double own_enc = all_enc > 0 ? enc_flops[g] / all_enc : 0.0;
    t.other_bytes +=
        total - eff_.model.total_params() * eff_.model.weight_bytes_per_param - bytes - own_enc * enc_weights;
    t.total_bytes += total;
    t.max_other_encoder_s = std::max(t.max_other_encoder_s, cost.encoder_s * (1.0 - own_enc));
    if (cost.encoder_s == 0) t.plain_step_s.push_back(static_cast<float>(duration_s));
  }
}

std::map<std::uint16_t, CouplingTerms> Engine::coupling_terms() const {
  std::map<std::uint16_t, CouplingTerms> out;
  for (const auto& [g, t] : coupling_) {
    CouplingTerms c;
    c.steps = t.steps;
    c.rho_shared = t.total_bytes > 0 ? t.other_bytes / t.total_bytes : 0.0;
    c.dt_align_s = t.max_other_encoder_s;
    if (!t.plain_step_s.empty()) {
      std::vector<float> v = t.plain_step_s;
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
      c.tau_base_s = v[v.size() / 2];
    }
    out[g] = c;
  }
  return out;
}

std::vector<std::uint32_t> Engine::running_adapters() const {
  std::set<std::uint32_t> a;
  for (const Seq* s : running_)
    if (s->adapter > 0) a.insert(s->adapter);
  return {a.begin(), a.end()};
}

std::vector<std::uint32_t> Engine::waiting_adapters() const {
  std::set<std::uint32_t> a;
  for (const Seq* s : waiting_fcfs_)
    if (s->adapter > 0) a.insert(s->adapter);
  for (const Seq* s : waiting_priority_)
    if (s->adapter > 0) a.insert(s->adapter);
  for (const Seq* s : swapped_)
    if (s->adapter > 0) a.insert(s->adapter);
  return {a.begin(), a.end()};
}

bool Engine::lora_fits(std::uint32_t adapter) const {
  if (adapter == 0) return true;
  std::set<std::uint32_t> batch;
  for (const Seq* s : running_) {
    if (s->adapter == adapter) return true;
    if (s->adapter > 0) batch.insert(s->adapter);
  }
  return batch.size() < settings_.max_loras;
}

void Engine::use_adapter(std::uint32_t adapter, StepStats& st, double& extra_seconds) {
  if (adapter == 0) return;
  const auto it = std::find(lora_gpu_.begin(), lora_gpu_.end(), adapter);
  if (it != lora_gpu_.end()) {
    lora_gpu_.erase(it);
    lora_gpu_.push_back(adapter);
    return;
  }
  if (lora_gpu_.size() >= settings_.max_loras) {
    // The least recently used adapter no running sequence holds (lora_fits
    // leaves one: fewer than max_loras adapters run besides this one).
    for (auto v = lora_gpu_.begin(); v != lora_gpu_.end(); ++v) {
      const bool in_use =
          std::any_of(running_.begin(), running_.end(), [&](const Seq* s) { return s->adapter == *v; });
      if (!in_use) {
        lora_gpu_.erase(v);
        break;
      }
    }
  }
  lora_gpu_.push_back(adapter);
  extra_seconds += eff_.lora_load_ms / 1e3;
  ++st.lora_loads;
  ++counters_.lora_loads;
}

std::size_t Engine::num_waiting() const {
  return waiting_fcfs_.size() + waiting_priority_.size() + swapped_.size();
}

std::uint32_t Engine::pool_of(const Seq& s) const {
  return pools_.size() == 1 ? 0 : s.tenant % static_cast<std::uint32_t>(pools_.size());
}

std::uint64_t Engine::root_hash(std::uint32_t tenant) const {
  // Prefix-cache entries are per tenant, as with vLLM's cache_salt.
  return hash_combine64(kRootSalt, tenant + 1ULL);
}

void Engine::append_known_token(Seq& s, tokenizers::TokenId t) {
  // The running state covers every token so far (so a block's hash chains
  // over its whole prefix); each step is a bijection of the state, and the
  // finaliser mixes it at block ends.
  s.run_hash = ((s.run_hash << 5 | s.run_hash >> 59) ^ t) * 0x9e3779b97f4a7c15ULL;
  if (++s.tail_count == eff_.block_size_tokens) {
    s.hashes.push_back(nonzero(mix64(s.run_hash)));
    s.tail_count = 0;
  }
}

std::uint32_t Engine::kv_blocks_in_use() const {
  std::uint32_t n = 0;
  for (const auto& p : pools_) n += p.num_in_use();
  return n;
}

std::optional<std::string> Engine::admission_problem(std::uint64_t prompt_len,
                                                     std::uint32_t max_output_tokens,
                                                     std::uint32_t tenant) const {
  const std::uint64_t output = std::max<std::uint32_t>(1, max_output_tokens);
  if (prompt_len == 0) return "empty prompt";
  if (prompt_len + output > eff_.max_model_len)
    return fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds max_model_len ({})", prompt_len, output,
                       eff_.max_model_len);
  const std::uint32_t B = eff_.block_size_tokens;
  const auto& pool = pools_[pools_.size() == 1 ? 0 : (tenant % settings_.num_tenants) % pools_.size()];
  const std::uint64_t blocks_needed = (prompt_len + output - 1 + B - 1) / B;
  if (pool.capacity() && blocks_needed > *pool.capacity())
    return fmt::format("needs {} KV blocks ({} tokens) but the cache holds {}", blocks_needed,
                       prompt_len + output - 1, *pool.capacity());
  return std::nullopt;
}

void Engine::reject(std::uint64_t id, Nanos now, std::string_view reason) {
  ++counters_.requests_rejected;
  observer_->on_reject(id, now, reason);
}

void append_image(const ModelSpec& m, std::uint32_t width, std::uint32_t height, std::uint64_t key,
                  EngineRequest& r) {
  if (!m.has_vision())
    throw UsageError(
        fmt::format("model {} takes no images (it has no vision encoder; qwen2.5-vl-7b and "
                    "qwen2.5-omni-7b do, or give a catalog entry vision_params)",
                    m.name));
  const std::uint32_t n = m.image_tokens(width, height);
  for (std::uint32_t i = 0; i < n; ++i) r.prompt.push_back(tokenizers::spaced_token_from_key(mix64(key) + i));
  r.image_encoder_flops += m.image_encoder_flops(width, height);
}

void append_audio(const ModelSpec& m, double seconds, std::uint64_t key, EngineRequest& r) {
  if (!m.has_audio())
    throw UsageError(
        fmt::format("model {} takes no audio (it has no audio encoder; qwen2-audio-7b and "
                    "qwen2.5-omni-7b do, or give a catalog entry audio_params)",
                    m.name));
  const std::uint32_t n = m.audio_tokens(seconds);
  for (std::uint32_t i = 0; i < n; ++i)
    r.prompt.push_back(tokenizers::spaced_token_from_key(mix64(key ^ 0x617564696fULL) + i));
  r.audio_encoder_flops += m.audio_encoder_flops(seconds);
}

void append_media(const ModelSpec& m, const workload::Request& req, std::uint64_t token_seed,
                  EngineRequest& r) {
  for (std::uint32_t k = 0; k < req.images; ++k)
    append_image(m, req.image_width, req.image_height, hash_combine64(hash_combine64(token_seed, req.id), k),
                 r);
  if (req.audio_ms > 0) append_audio(m, req.audio_ms / 1000.0, hash_combine64(token_seed ^ 1, req.id), r);
}

std::uint32_t media_tokens(const ModelSpec& m, const workload::Request& req) {
  std::uint32_t n = req.images * m.image_tokens(req.image_width, req.image_height);
  if (req.audio_ms > 0) n += m.audio_tokens(req.audio_ms / 1000.0);
  return n;
}

bool Engine::add_request(EngineRequest r, Nanos now) {
  const auto prompt_len = static_cast<std::uint64_t>(r.prompt.size());
  const std::uint64_t output = std::max<std::uint32_t>(1, r.max_output_tokens);
  if (r.adapter > 0 && settings_.max_loras == 0) {
    reject(r.id, now, "LoRA adapters are not enabled (max_loras 0)");
    return false;
  }
  if (auto problem = admission_problem(prompt_len, r.max_output_tokens, r.tenant)) {
    reject(r.id, now, *problem);
    return false;
  }
  const std::uint32_t tenant = r.tenant % settings_.num_tenants;
  const std::uint32_t B = eff_.block_size_tokens;
  auto* s = new Seq;
  s->id = r.id;
  s->order = admit_sequence_++;
  s->tenant = tenant;
  s->priority = r.priority;
  s->arrival = r.arrival >= 0 && r.arrival < now ? r.arrival : now;
  s->prompt_len = static_cast<std::uint32_t>(prompt_len);
  s->target_output = static_cast<std::uint32_t>(output);
  s->run_hash = root_hash(tenant);
  s->adapter = r.adapter;
  s->group = r.group;
  if (r.adapter > 0) s->run_hash = hash_combine64(s->run_hash, 0x4c6f5241ULL + r.adapter);  // "LoRA"
  s->output_seed = r.output_seed.value_or(r.id);
  s->pooling = r.pooling;
  s->image_flops = r.image_encoder_flops;
  s->audio_flops = r.audio_encoder_flops;
  s->preloaded = std::min<std::uint32_t>(r.preloaded_tokens, s->prompt_len > 0 ? s->prompt_len - 1 : 0);
  s->transferred = r.preloaded_tokens > 0;  // even a one-token prompt, whose last token is all it computes
  s->hashes.reserve(prompt_len / B + 1);
  for (auto t : r.prompt) append_known_token(*s, t);
  waiting_push_back(s);
  by_id_[s->id] = s;
  return true;
}

void Engine::cache_full_blocks(Seq& s, std::uint32_t tokens) {
  auto& pool = pools_[pool_of(s)];
  const std::size_t full = std::min<std::size_t>(tokens / eff_.block_size_tokens, s.hashes.size());
  for (std::size_t j = s.num_cached_blocks; j < full && j < s.blocks.size(); ++j)
    pool.cache(s.blocks[j], s.hashes[j], s.tenant);
  s.num_cached_blocks =
      static_cast<std::uint32_t>(std::max<std::size_t>(s.num_cached_blocks, std::min(full, s.blocks.size())));
}

bool Engine::allocate_slots(Seq& s, std::uint32_t n, std::size_t hit_blocks, std::size_t host_blocks) {
  auto& pool = pools_[pool_of(s)];
  const std::uint32_t B = eff_.block_size_tokens;
  const std::uint64_t base =
      s.blocks.empty() && s.swapped_blocks == 0
          ? std::max<std::uint64_t>((hit_blocks + host_blocks) * static_cast<std::uint64_t>(B), s.preloaded)
          : s.num_computed;
  const std::uint64_t required = (base + n + B - 1) / B;
  const std::uint64_t have = s.blocks.size() + hit_blocks;
  const std::uint64_t fresh = required > have ? required - have : 0;
  const std::span<const std::uint64_t> hits(s.hashes.data(), hit_blocks);
  const std::uint64_t available = pool.num_free() - pool.free_among_cached(hits);
  if (fresh > available) return false;
  pool.touch(hits, s.blocks);
  pool.allocate(fresh, s.blocks);
  cache_full_blocks(s, static_cast<std::uint32_t>(base + n));
  return true;
}

Engine::Seq* Engine::pick_victim() const {
  if (settings_.policy == SchedulingPolicy::kFcfs) return running_.back();
  // Lowest priority (largest value), then the latest arrival.
  return *std::max_element(running_.begin(), running_.end(), [](const Seq* a, const Seq* b) {
    if (a->priority != b->priority) return a->priority < b->priority;
    if (a->arrival != b->arrival) return a->arrival < b->arrival;
    return a->order < b->order;
  });
}

void Engine::preempt(Seq* v, StepStats& st) {
  running_.erase(std::find(running_.begin(), running_.end(), v));
  release_slot(v, -1, 0);  // its cells are freed (or swapped out): the slot is empty
  auto& pool = pools_[pool_of(*v)];
  pool.release(v->blocks);
  ++v->preemptions;
  ++st.preemptions;
  ++counters_.preemptions;
  if (settings_.preemption == PreemptionMode::kSwap) {
    v->swapped_blocks = static_cast<std::uint32_t>(v->blocks.size());
    const auto bytes = static_cast<std::uint64_t>(v->swapped_blocks * eff_.kv_bytes_per_block);
    st.swap_out_bytes += bytes;
    counters_.swap_out_bytes += bytes;
    v->blocks.clear();
    v->num_cached_blocks = 0;
    swapped_.push_back(v);
  } else {
    v->blocks.clear();
    v->num_cached_blocks = 0;
    v->num_computed = 0;
    v->preloaded = 0;  // its transferred KV is gone: recomputed here
    --tenant_live_seqs_[v->tenant];
    waiting_push_front(v);
  }
}

bool Engine::ensure_tenant_resident(std::uint32_t tenant, StepStats& st, double& extra_seconds) {
  if (settings_.max_active_tenants == 0) return true;
  if (resident_[tenant]) return true;
  if (resident_count_ >= settings_.max_active_tenants) {
    // Evict the least recently used resident tenant with nothing on the GPU.
    std::optional<std::uint32_t> victim;
    for (std::uint32_t t = 0; t < resident_.size(); ++t) {
      if (!resident_[t] || tenant_live_seqs_[t] != 0) continue;
      if (!victim || tenant_last_used_[t] < tenant_last_used_[*victim]) victim = t;
    }
    if (!victim) return false;
    const std::uint32_t v = *victim;
    auto& pool = pools_[pools_.size() == 1 ? 0 : v % pools_.size()];
    switch (settings_.tenant_kv_policy) {
      case TenantKvPolicy::kNoReuse:
        pool.drop_cached_with_tag(v);
        break;
      case TenantKvPolicy::kStaticReuse:
        break;  // its partition keeps its prefix cache
      case TenantKvPolicy::kDynamicReuse: {
        // Least recently used first, as the GPU's free queue holds them (a
        // prefix's tail before its head), so the host pool keeps that order.
        // Only the most recent blocks that fit are copied; a block already
        // on the host is not copied again.
        const auto hashes = pool.cached_hashes_with_tag(v);
        const std::size_t skip = hashes.size() > host_pool_.capacity()
                                     ? hashes.size() - static_cast<std::size_t>(host_pool_.capacity())
                                     : 0;
        const std::uint64_t evictions_before = host_pool_.evictions();
        std::uint64_t copied = 0;
        for (std::size_t k = skip; k < hashes.size(); ++k) copied += host_pool_.store(hashes[k]);
        const auto evicted = host_pool_.evictions() - evictions_before;
        st.host_kv_evictions += static_cast<std::uint32_t>(evicted);
        counters_.host_kv_evictions += evicted;
        counters_.max_host_kv_blocks = std::max(counters_.max_host_kv_blocks, host_pool_.size());
        const auto bytes = static_cast<std::uint64_t>(static_cast<double>(copied) * eff_.kv_bytes_per_block);
        st.swap_out_bytes += bytes;
        counters_.swap_out_bytes += bytes;
        pool.drop_cached_with_tag(v);
        break;
      }
    }
    resident_[v] = false;
    --resident_count_;
  }
  resident_[tenant] = true;
  ++resident_count_;
  ++st.tenant_switches;
  ++counters_.tenant_switches;
  extra_seconds += settings_.context_switch_ms * 1e-3;
  return true;
}

void Engine::finish(Seq* s, Nanos t, bool aborted) {
  running_.erase(std::find(running_.begin(), running_.end(), s));
  // Its slot keeps its tokens until a new request takes it (llama.cpp's cache_prompt).
  release_slot(s, t, s->num_computed);
  pools_[pool_of(*s)].release(s->blocks);
  --tenant_live_seqs_[s->tenant];
  ++counters_.requests_finished;
  by_id_.erase(s->id);
  FinishedRequest f;
  f.aborted = aborted;
  f.id = s->id;
  f.tenant = s->tenant;
  f.arrival = s->arrival;
  f.first_scheduled = s->first_scheduled;
  f.first_token = s->first_token;
  f.finished = t;
  f.prompt_tokens = s->prompt_len;
  f.output_tokens = s->num_output;
  f.cached_tokens = s->cached_tokens;
  f.preemptions = s->preemptions;
  delete s;
  observer_->on_finish(f);
}

void Engine::reject_all_waiting(Nanos now, std::string_view reason) {
  auto reject = [&](Seq* s) {
    by_id_.erase(s->id);
    ++counters_.requests_rejected;
    observer_->on_reject(s->id, now, reason);
    delete s;
  };
  for (Seq* s : waiting_fcfs_) reject(s);
  for (Seq* s : waiting_priority_) reject(s);
  for (Seq* s : swapped_) {
    --tenant_live_seqs_[s->tenant];
    reject(s);
  }
  waiting_fcfs_.clear();
  waiting_priority_.clear();
  swapped_.clear();
}

// Long: one scheduler step in vLLM's order (running first, then waiting,
// preemption, prefix cache, KV allocation, cost, finish); the order is the
// specification (docs/engine.md), kept readable top to bottom.
Nanos Engine::step(Nanos now) {
  StepStats st;
  st.index = counters_.steps;
  st.replica = replica_;
  st.start = now;
  scheduled_.clear();
  double extra_seconds = 0.0;
  std::uint32_t budget = settings_.max_num_batched_tokens;
  const std::uint32_t threshold = settings_.long_prefill_token_threshold;
  const std::uint32_t B = eff_.block_size_tokens;
  bool preempted = false;
  auto cap = [&](std::uint32_t n) {
    n = std::min(n, budget);
    if (threshold > 0 && n > threshold) n = threshold;
    return n;
  };
  auto unschedule = [&](Seq* v) {
    for (auto it = scheduled_.begin(); it != scheduled_.end(); ++it)
      if (it->first == v) {
        budget += it->second;
        scheduled_.erase(it);
        return;
      }
  };

  // 1. Running sequences first, in order.
  std::size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Seq* s = running_[i];
    const std::uint32_t n = cap(s->num_tokens() - s->num_computed);
    bool ok = false;
    while (true) {
      if (allocate_slots(*s, n, 0, 0)) {
        ok = true;
        break;
      }
      Seq* victim = pick_victim();
      const auto victim_index =
          static_cast<std::size_t>(std::find(running_.begin(), running_.end(), victim) - running_.begin());
      unschedule(victim);
      preempt(victim, st);
      preempted = true;
      if (victim == s) break;
      if (victim_index < i) --i;
    }
    if (ok) {
      scheduled_.emplace_back(s, n);
      budget -= n;
      tenant_last_used_[s->tenant] = counters_.steps + 1;
      ++i;
    }
  }

  for (const auto& [v, n] : scheduled_) use_adapter(v->adapter, st, extra_seconds);  // most recently used

  // 2. Swapped, then waiting sequences, in steps without a preemption.
  if (!preempted) {
    // A swapped sequence whose adapter would be one too many is passed over
    // (the ones behind it go first) and, while one is, no waiting request is
    // admitted: the batch drains until its adapter fits (no starvation by
    // newer requests for the adapters already running).
    std::vector<Seq*> swapped_skipped;
    while (!swapped_.empty() && budget > 0 && running_.size() < settings_.max_num_seqs) {
      Seq* s = swapped_.front();
      if (!lora_fits(s->adapter)) {
        swapped_skipped.push_back(s);
        swapped_.pop_front();
        continue;
      }
      const std::uint32_t n = cap(s->num_tokens() - s->num_computed);
      if (!allocate_slots(*s, n, 0, 0)) break;
      use_adapter(s->adapter, st, extra_seconds);
      const auto bytes = static_cast<std::uint64_t>(s->swapped_blocks * eff_.kv_bytes_per_block);
      st.swap_in_bytes += bytes;
      counters_.swap_in_bytes += bytes;
      s->swapped_blocks = 0;
      swapped_.pop_front();
      running_.push_back(s);
      take_slot(s);
      scheduled_.emplace_back(s, n);
      budget -= n;
    }
    const bool lora_blocked = !swapped_skipped.empty();
    for (auto it = swapped_skipped.rbegin(); it != swapped_skipped.rend(); ++it) swapped_.push_front(*it);
    // Waiting sequences whose adapter would be one too many in the batch
    // wait; the ones behind them go first (vLLM's skipped waiting requests).
    std::vector<Seq*> lora_skipped;
    while (!lora_blocked && !waiting_empty() && budget > 0 && running_.size() < settings_.max_num_seqs) {
      Seq* s = waiting_front();
      if (!lora_fits(s->adapter)) {
        lora_skipped.push_back(s);
        waiting_pop_front();
        continue;
      }
      if (!ensure_tenant_resident(s->tenant, st, extra_seconds)) break;
      auto& pool = pools_[pool_of(*s)];
      const std::size_t max_hit_blocks = std::min<std::size_t>((s->num_tokens() - 1) / B, s->hashes.size());
      const std::span<const std::uint64_t> candidates(s->hashes.data(), max_hit_blocks);
      const std::size_t gpu_hits = pool.cached_prefix_length(candidates);
      std::size_t host_hits = 0;
      if (host_pool_.size() > 0 && settings_.enable_prefix_caching)
        while (gpu_hits + host_hits < max_hit_blocks && host_pool_.contains(candidates[gpu_hits + host_hits]))
          ++host_hits;
      const auto computed = std::max(static_cast<std::uint32_t>((gpu_hits + host_hits) * B), s->preloaded);
      const std::uint32_t remaining = s->num_tokens() - computed;
      if (!settings_.enable_chunked_prefill && remaining > budget) break;
      const std::uint32_t n = cap(remaining);
      if (!allocate_slots(*s, n, gpu_hits, host_hits)) break;
      if (!s->admitted_once && s->transferred) {
        s->admitted_once = true;  // its prompt was a query where it was computed
      } else if (!s->admitted_once) {
        s->admitted_once = true;
        s->cached_tokens = computed;
        counters_.prefix_queries_tokens += s->prompt_len;
        counters_.prefix_hits_tokens += computed;
        st.prefix_queries_tokens += s->prompt_len;
        st.prefix_hits_tokens += computed;
      } else {
        counters_.preempted_queries_tokens += s->num_tokens();
        counters_.preempted_hits_tokens += computed;
      }
      if (host_hits > 0) {
        const auto bytes = static_cast<std::uint64_t>(host_hits * eff_.kv_bytes_per_block);
        st.swap_in_bytes += bytes;
        counters_.swap_in_bytes += bytes;
        // Used now, the prefix's head most recently (evicted last).
        for (std::size_t k = host_hits; k-- > 0;) host_pool_.touch(candidates[gpu_hits + k]);
      }
      // The blocks right after the hits that the host pool evicted are
      // recomputed because of the eviction; each eviction counts once.
      for (std::size_t k = gpu_hits + host_hits; k < max_hit_blocks && host_pool_.evicted(candidates[k]);
           ++k) {
        host_pool_.forget_evicted(candidates[k]);
        ++st.host_kv_recomputed_blocks;
        ++counters_.host_kv_recomputed_blocks;
      }
      s->num_computed = computed;
      waiting_pop_front();
      running_.push_back(s);
      use_adapter(s->adapter, st, extra_seconds);
      ++tenant_live_seqs_[s->tenant];
      tenant_last_used_[s->tenant] = counters_.steps + 1;
      if (s->first_scheduled < 0) {
        s->first_scheduled = now;
        observer_->on_first_scheduled(s->id, now, s->cached_tokens);
      }
      take_slot(s);
      scheduled_.emplace_back(s, n);
      budget -= n;
    }
    for (auto it = lora_skipped.rbegin(); it != lora_skipped.rend(); ++it) waiting_push_front(*it);
  }

  if (scheduled_.empty() && extra_seconds == 0.0 && st.swap_out_bytes == 0) return 0;

  // 3. Cost of the step.
  StepShape shape;
  shape.num_seqs = scheduled_.size();
  bool vision = false, audio = false;
  step_encoder_flops_.clear();
  for (const auto& [s, n] : scheduled_) {
    const std::uint32_t c = s->num_computed;
    const bool samples = c + n == s->num_tokens();
    if (s->num_output > 0 && n == 1 && samples) {
      ++shape.decode_tokens;
      shape.decode_attention_pairs += static_cast<double>(c) + 1.0;
    } else {
      shape.prefill_tokens += n;
      shape.prefill_attention_pairs += static_cast<double>(n) * c + static_cast<double>(n) * (n + 1) / 2.0;
      shape.prefill_kv_read_tokens += static_cast<double>(c) + n;
    }
    shape.logit_tokens += samples;
    if (s->image_flops > 0 || s->audio_flops > 0) {
      shape.encoder_flops += s->image_flops + s->audio_flops;
      if (settings_.track_coupling)
        step_encoder_flops_.emplace_back(s->group, s->image_flops + s->audio_flops);
      vision |= s->image_flops > 0;
      audio |= s->audio_flops > 0;
      s->image_flops = s->audio_flops = 0;  // encoder outputs are cached: a recompute does not rerun them
    }
  }
  shape.encoder_weight_bytes =
      ((vision ? eff_.model.vision_params : 0.0) + (audio ? eff_.model.audio_params : 0.0)) *
      eff_.model.weight_bytes_per_param;
  if (settings_.attention == AttentionSpan::kOccupancy) {
    // Every token of the batch attends over every occupied cell: the
    // running sequences' tokens after this step, and what idle slots keep.
    double occupied = static_cast<double>(idle_slot_tokens_);
    for (const Seq* s : running_) occupied += s->num_computed;
    for (const auto& [s, n] : scheduled_) occupied += n;
    shape.prefill_attention_pairs = static_cast<double>(shape.prefill_tokens) * occupied;
    shape.decode_attention_pairs = static_cast<double>(shape.decode_tokens) * occupied;
  }
  shape.host_transfer_bytes = st.swap_in_bytes + st.swap_out_bytes;
  shape.extra_seconds = extra_seconds;
  st.cost = cost_->step_cost(shape);
  Nanos duration = seconds_to_nanos(st.cost.total_s());
  if (perturber_) {
    const StepPerturbation p = perturber_->on_step(st.index, now, duration, scheduled_.size(),
                                                   shape.prefill_tokens + shape.decode_tokens);
    st.perturbation_ns = p.extra_ns;
    st.stolen_ns = p.stolen_ns;
    duration += p.extra_ns;
  }
  const Nanos end = now + duration;
  if (settings_.track_coupling) track_coupling(st.cost, nanos_to_s(duration));

  st.duration = duration;
  st.num_seqs = static_cast<std::uint32_t>(scheduled_.size());
  st.prefill_tokens = static_cast<std::uint32_t>(shape.prefill_tokens);
  st.decode_tokens = static_cast<std::uint32_t>(shape.decode_tokens);
  counters_.max_batched_tokens_seen =
      std::max<std::uint64_t>(counters_.max_batched_tokens_seen, shape.prefill_tokens + shape.decode_tokens);
  std::uint64_t free = 0, capacity = 0;
  for (const auto& p : pools_) {
    if (p.capacity()) {
      free += p.num_free();
      capacity += *p.capacity();
    }
  }
  st.kv_blocks_in_use = kv_blocks_in_use();
  st.host_kv_blocks = host_pool_.size();
  counters_.max_blocks_in_use = std::max(counters_.max_blocks_in_use, st.kv_blocks_in_use);
  if (eff_.num_gpu_blocks) {
    st.kv_usage = capacity ? 1.0 - static_cast<double>(free) / static_cast<double>(capacity) : 0.0;
    counters_.kv_usage_peak = std::max(*counters_.kv_usage_peak, st.kv_usage);
  } else {
    st.kv_usage = pools_.front().usage();
  }

  // 4. Advance the sequences; sample a token for each that caught up.
  ++counters_.steps;
  for (const auto& [s, n] : scheduled_) {
    s->num_computed += n;
    if (s->num_computed != s->num_tokens()) continue;
    const tokenizers::TokenId token = workload::generated_token(s->output_seed, s->num_output);
    if (s->num_output == 0 && !s->transferred) counters_.prompt_tokens += s->prompt_len;
    ++s->num_output;
    if (!s->pooling) ++counters_.generation_tokens;
    append_known_token(*s, token);
    if (s->first_token < 0) s->first_token = end;
    observer_->on_token(s->id, end, token);
    if (s->num_output >= s->target_output) finish(s, end, false);
  }
  st.num_running = static_cast<std::uint32_t>(running_.size());
  st.num_waiting = static_cast<std::uint32_t>(num_waiting());
  observer_->on_step(st);
  return duration;
}

bool Engine::abort(std::uint64_t id, Nanos now) {
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  Seq* s = it->second;
  if (std::find(running_.begin(), running_.end(), s) != running_.end()) {
    finish(s, now, true);
    return true;
  }
  // Waiting or swapped: it holds no blocks.
  if (auto w = std::find(waiting_fcfs_.begin(), waiting_fcfs_.end(), s); w != waiting_fcfs_.end()) {
    waiting_fcfs_.erase(w);
  } else if (waiting_priority_.erase(s) == 0) {
    swapped_.erase(std::find(swapped_.begin(), swapped_.end(), s));
    --tenant_live_seqs_[s->tenant];
  }
  // Reuse finish() bookkeeping for the observer without touching running_.
  running_.push_back(s);
  ++tenant_live_seqs_[s->tenant];
  finish(s, now, true);
  return true;
}

bool Engine::check_invariants() const {
  std::uint32_t blocks = 0;
  for (const Seq* s : running_) {
    blocks += static_cast<std::uint32_t>(s->blocks.size());
    const std::uint64_t needed =
        (static_cast<std::uint64_t>(s->num_computed) + eff_.block_size_tokens - 1) / eff_.block_size_tokens;
    if (s->blocks.size() < needed) return false;
  }
  for (const auto& p : pools_) {
    if (!p.check_invariants()) return false;
    if (p.capacity() && p.num_in_use() > *p.capacity()) return false;
  }
  // At most max_loras adapters in the batch and on the GPU, and every
  // running sequence's adapter on the GPU.
  if (settings_.max_loras > 0) {
    if (running_adapters().size() > settings_.max_loras || lora_gpu_.size() > settings_.max_loras)
      return false;
    for (const Seq* s : running_)
      if (s->adapter > 0 && std::find(lora_gpu_.begin(), lora_gpu_.end(), s->adapter) == lora_gpu_.end())
        return false;
  }
  // Blocks shared through the prefix cache count once in the pools and once
  // per sequence here, so the pools can never hold more than the sequences.
  return kv_blocks_in_use() <= blocks;
}

}  // namespace tokenscope::engine
