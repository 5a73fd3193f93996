#include "engine/engine_options.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "engine/profile.h"

namespace tokenscope::engine {

nlohmann::json to_json(const EngineOptions& o) {
  const auto& e = o.engine;
  nlohmann::json j = {
      {"model", e.model},
      {"gpu", e.gpu},
      {"catalog", o.catalog_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.catalog_file)},
      {"tensor_parallel", e.tensor_parallel},
      {"gpu_memory_utilization", e.gpu_memory_utilization},
      {"activation_reserve_gib", e.activation_reserve_gib},
      {"block_size_tokens", e.block_size_tokens},
      {"num_gpu_blocks", o.num_gpu_blocks},
      {"unlimited_kv", e.unlimited_kv},
      {"enable_prefix_caching", e.enable_prefix_caching},
      {"max_num_batched_tokens", e.max_num_batched_tokens},
      {"max_num_seqs", e.max_num_seqs},
      {"max_model_len", e.max_model_len},
      {"enable_chunked_prefill", e.enable_chunked_prefill},
      {"long_prefill_token_threshold", e.long_prefill_token_threshold},
      {"policy", o.policy},
      {"preemption", o.preemption},
      {"max_active_tenants", e.max_active_tenants},
      {"context_switch_ms", e.context_switch_ms},
      {"tenant_kv_policy", o.tenant_kv_policy},
      {"host_kv_gib", e.host_kv_gib},
      {"fixed_step_ms", o.fixed_step_ms < 0 ? nlohmann::json(nullptr) : nlohmann::json(o.fixed_step_ms)},
      {"cost",
       {{"mfu_linear", e.cost.mfu_linear},
        {"mfu_attention", e.cost.mfu_attention},
        {"bw_efficiency", e.cost.bw_efficiency},
        {"step_overhead_ms", e.cost.step_overhead_ms},
        {"layer_overhead_us", e.cost.layer_overhead_us},
        {"allreduce_latency_us", e.cost.allreduce_latency_us},
        {"allreduce_efficiency", e.cost.allreduce_efficiency}}}};
  // Only with LoRA adapters on (as perturbations, below).
  if (e.max_loras > 0) {
    j["max_loras"] = e.max_loras;
    j["max_lora_rank"] = e.max_lora_rank;
    j["lora_load_ms"] = e.lora_load_ms ? nlohmann::json(*e.lora_load_ms) : nlohmann::json(nullptr);
  }
  // Only when given, and with a profile, likewise.
  if (!o.attention.empty()) j["attention"] = o.attention;
  if (!o.profile_file.empty()) j["profile"] = o.profile_file;
  // Only with perturbations: the settings of a run without any stay as they were.
  if (!o.perturb.text.empty()) {
    j["perturb"] = o.perturb.text;
    j["perturb_seed"] = o.perturb_seed ? nlohmann::json(*o.perturb_seed) : nlohmann::json(nullptr);
  }
  return j;
}

EngineSettings engine_settings(const EngineOptions& o, std::uint64_t run_seed) {
  EngineSettings s = o.engine;
  s.perturbations = o.perturb.items;
  s.perturbation_seed = o.perturb_seed.value_or(run_seed);
  s.policy = parse_scheduling_policy(o.policy);
  s.preemption = parse_preemption_mode(o.preemption);
  s.tenant_kv_policy = parse_tenant_kv_policy(o.tenant_kv_policy);
  if (!o.attention.empty()) s.attention = parse_attention_span(o.attention);
  if (o.num_gpu_blocks > 0) s.num_gpu_blocks_override = o.num_gpu_blocks;
  if (o.fixed_step_ms >= 0) s.fixed_step_ms = o.fixed_step_ms;
  if (!o.profile_file.empty()) {
    if (s.fixed_step_ms)
      throw UsageError("--profile and --fixed-step-ms both replace the cost model: give one");
    auto p = std::make_shared<Profile>(read_profile(o.profile_file));
    // The limits the profile found are the defaults; options given win.
    if (p->max_num_seqs && !o.max_num_seqs_given) s.max_num_seqs = *p->max_num_seqs;
    if (o.attention.empty()) s.attention = p->attention;
    if (p->max_num_batched_tokens && !o.max_num_batched_tokens_given)
      s.max_num_batched_tokens = *p->max_num_batched_tokens;
    if (p->kv_capacity_tokens && o.num_gpu_blocks == 0 && !s.unlimited_kv && s.block_size_tokens > 0)
      s.num_gpu_blocks_override = static_cast<std::uint32_t>(
          std::min<std::uint64_t>((*p->kv_capacity_tokens + s.block_size_tokens - 1) / s.block_size_tokens,
                                  std::numeric_limits<std::uint32_t>::max()));
    s.profile = std::move(p);
  }
  return s;
}

Catalog load_catalog(const EngineOptions& o) {
  auto catalog = Catalog::builtin();
  if (!o.catalog_file.empty()) catalog.load_yaml_file(o.catalog_file);
  return catalog;
}

std::unique_ptr<CostModel> make_cost_model(const EngineSettings& s, const EffectiveEngine& e) {
  if (s.profile) return std::make_unique<ProfileCostModel>(*s.profile, e.gpu.host_link_gbps);
  if (s.fixed_step_ms)
    return std::make_unique<FixedCostModel>(
        *s.fixed_step_ms * 1e-3,
        std::make_unique<RooflineCostModel>(e.model, e.gpu, e.tensor_parallel, s.cost));
  return std::make_unique<RooflineCostModel>(e.model, e.gpu, e.tensor_parallel, s.cost);
}

}  // namespace tokenscope::engine
