#include "cli/engine_options.h"

namespace tokenscope::cli {

// Long by nature: every engine option, in --help order.
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
      ->each([&o](const std::string&) { o.max_num_batched_tokens_given = true; })
      ->group(E);
  app->add_option("--max-num-seqs", e.max_num_seqs, "Running sequences at most")
      ->capture_default_str()
      ->each([&o](const std::string&) { o.max_num_seqs_given = true; })
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
  app->add_option("--attention", o.attention,
                  "own: each sequence attends to its own context (vLLM's paged KV) | occupancy: every token "
                  "attends over every occupied cell of one KV cache whose slots keep their last sequence "
                  "(llama.cpp) [default: own, or the profile's]")
      ->check(CLI::IsMember({"own", "occupancy"}))
      ->group(E);
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
  app->add_option("--max-loras", e.max_loras,
                  "LoRA adapters: distinct adapters in a batch and on the GPU at most (0: adapters off; "
                  "serve --lora-modules turns them on with 1, as vLLM)")
      ->group(E);
  app->add_option("--max-lora-rank", e.max_lora_rank, "LoRA adapters' rank (sizes an adapter's load)")
      ->capture_default_str()
      ->group(E);
  app->add_option("--lora-load-ms", e.lora_load_ms,
                  "Cost of bringing an adapter onto the GPU, ms [default: its weights over the host link]")
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
  app->add_option("--profile", o.profile_file,
                  "A server's profile from `tokenscope profile` (docs/profile.md): its fitted step costs "
                  "replace this model, and its batch cap, token budget and KV capacity are the defaults")
      ->group(C);
  app->add_option("--fixed-step-ms", o.fixed_step_ms,
                  "Replace the cost model: every step takes this long, ms")
      ->group(C);
  const char* P = "Perturbations (ground truth for tokenscope check)";
  app->add_option_function<std::string>(
         "--perturb", [&o](const std::string& text) { o.perturb = engine::parse_perturbations(text); },
         "Inject known perturbations, ';'-separated KIND[:KEY=VALUE,...] with KIND in tail, warmup, "
         "leak, steal, batch_cap, kv, recompile, e.g. "
         "'tail:target=steps,fraction=0.02,dist=pareto,scale_ms=5,shape=1.5;leak:per_min=2%' "
         "(docs/engine.md \"Perturbations\")")
      ->group(P);
  app->add_option("--perturb-seed", o.perturb_seed, "Seed of the perturbations' draws [default: --seed]")
      ->group(P);
}

nlohmann::json engine_options_json(const EngineOptions& o) {
  return engine::to_json(o);
}

}  // namespace tokenscope::cli
