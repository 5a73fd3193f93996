#include "cli/engine_options.h"

namespace tokenscope::cli {

void add_engine_options(CLI::App* app, EngineOptions& o) {
  auto& e = o.engine;
  const char* E = "Engine";
  app->add_option("--model", e.model,
                  "llama-3-8b|llama-3.1-8b|llama-3-70b|qwen2.5-7b|mixtral-8x7b or a --catalog entry")
      ->capture_default_str()
      ->group(E);
  app->add_option("--gpu", e.gpu, "a100-80g-sxm|h100-sxm|h200 or a --catalog entry")
      ->capture_default_str()
      ->group(E);
  app->add_option("--tensor-parallel,--tp", e.tensor_parallel, "GPUs per model replica")
      ->capture_default_str()
      ->group(E);
  app->add_option("--catalog", o.catalog_file,
                  "YAML file adding or overriding GPUs and models (docs/engine.md)")
      ->group(E);
  app->add_option("--gpu-memory-utilization", e.gpu_memory_utilization,
                  "Share of GPU memory for weights, activations and KV")
      ->capture_default_str()
      ->group(E);
  app->add_option("--activation-reserve-gib", e.activation_reserve_gib,
                  "Per-GPU memory kept for activations and graphs, GiB")
      ->capture_default_str()
      ->group(E);
  app->add_option("--block-size", e.block_size_tokens, "KV block size, tokens")
      ->capture_default_str()
      ->group(E);
  app->add_option("--num-gpu-blocks", o.num_gpu_blocks, "Override the KV capacity, blocks (0: from memory)")
      ->capture_default_str()
      ->group(E);
  app->add_flag("--unlimited-kv", e.unlimited_kv, "What-if: a KV cache that never runs out")->group(E);
  app->add_flag("!--no-prefix-caching", e.enable_prefix_caching, "Disable prefix caching")->group(E);
  app->add_option("--max-num-batched-tokens", e.max_num_batched_tokens, "Token budget per step")
      ->capture_default_str()
      ->group(E);
  app->add_option("--max-num-seqs", e.max_num_seqs, "Running sequences at most")
      ->capture_default_str()
      ->group(E);
  app->add_option("--max-model-len", e.max_model_len, "Context length, tokens (0: the model's)")
      ->capture_default_str()
      ->group(E);
  app->add_flag("!--no-chunked-prefill", e.enable_chunked_prefill, "Schedule whole prompts only")->group(E);
  app->add_option("--long-prefill-token-threshold", e.long_prefill_token_threshold,
                  "Cap a prefill chunk, tokens (0: off)")
      ->capture_default_str()
      ->group(E);
  app->add_option("--policy", o.policy, "fcfs|priority (lower priority values first)")
      ->capture_default_str()
      ->group(E);
  app->add_option("--preemption", o.preemption, "recompute|swap")->capture_default_str()->group(E);
  app->add_option("--max-active-tenants", e.max_active_tenants,
                  "Resident tenant contexts at most (0: all, no switching)")
      ->capture_default_str()
      ->group(E);
  app->add_option("--context-switch-ms", e.context_switch_ms, "Cost of bringing a tenant context in, ms")
      ->capture_default_str()
      ->group(E);
  app->add_option(
         "--tenant-kv-policy", o.tenant_kv_policy,
         "none (drop an evicted tenant's KV) | static (per-tenant partitions) | dynamic (offload to host)")
      ->capture_default_str()
      ->group(E);
  app->add_option("--host-kv-gib", e.host_kv_gib,
                  "Host memory for KV offloaded by dynamic tenant reuse, GiB per replica; least recently "
                  "used blocks are evicted when full (0: none)")
      ->capture_default_str()
      ->group(E);
  const char* C = "Cost model";
  app->add_option("--mfu-linear", e.cost.mfu_linear, "Achieved share of peak FLOP/s in GEMMs")
      ->capture_default_str()
      ->group(C);
  app->add_option("--mfu-attention", e.cost.mfu_attention, "Achieved share of peak FLOP/s in attention")
      ->capture_default_str()
      ->group(C);
  app->add_option("--bw-efficiency", e.cost.bw_efficiency, "Achieved share of HBM bandwidth")
      ->capture_default_str()
      ->group(C);
  app->add_option("--step-overhead-ms", e.cost.step_overhead_ms, "Fixed cost per step, ms")
      ->capture_default_str()
      ->group(C);
  app->add_option("--layer-overhead-us", e.cost.layer_overhead_us, "Fixed cost per layer per step, us")
      ->capture_default_str()
      ->group(C);
  app->add_option("--allreduce-latency-us", e.cost.allreduce_latency_us,
                  "Latency of one all-reduce under TP, us")
      ->capture_default_str()
      ->group(C);
  app->add_option("--allreduce-efficiency", e.cost.allreduce_efficiency, "Achieved share of NVLink bandwidth")
      ->capture_default_str()
      ->group(C);
  app->add_option("--fixed-step-ms", o.fixed_step_ms,
                  "Replace the cost model: every step takes this long, ms")
      ->group(C);
}

nlohmann::json engine_options_json(const EngineOptions& o) {
  const auto& e = o.engine;
  return {{"model", e.model},
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
}

engine::EngineSettings engine_settings(const EngineOptions& o) {
  engine::EngineSettings s = o.engine;
  s.policy = engine::parse_scheduling_policy(o.policy);
  s.preemption = engine::parse_preemption_mode(o.preemption);
  s.tenant_kv_policy = engine::parse_tenant_kv_policy(o.tenant_kv_policy);
  if (o.num_gpu_blocks > 0) s.num_gpu_blocks_override = o.num_gpu_blocks;
  if (o.fixed_step_ms >= 0) s.fixed_step_ms = o.fixed_step_ms;
  return s;
}

engine::Catalog load_catalog(const EngineOptions& o) {
  auto catalog = engine::Catalog::builtin();
  if (!o.catalog_file.empty()) catalog.load_yaml_file(o.catalog_file);
  return catalog;
}

std::unique_ptr<engine::CostModel> make_cost_model(const engine::EngineSettings& s,
                                                   const engine::EffectiveEngine& e) {
  if (s.fixed_step_ms) return std::make_unique<engine::FixedCostModel>(*s.fixed_step_ms * 1e-3);
  return std::make_unique<engine::RooflineCostModel>(e.model, e.gpu, e.tensor_parallel, s.cost);
}

}  // namespace tokenscope::cli
