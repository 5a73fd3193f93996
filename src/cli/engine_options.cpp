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

// Long by nature: every fleet option, in --help order.
CLI::Option* add_fleet_options(CLI::App* app, engine::FleetOptions& o) {
  const char* F = "Fleet";
  app->add_option("--replicas", o.replicas,
                  "Identical engine replicas behind a router (docs/engine.md \"Fleets\"): sim's records "
                  "name each request's replica; serve's /metrics label each engine=\"N\"")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u))
      ->group(F);
  app->add_option("--router", o.router,
                  "round-robin|least-loaded (outstanding tokens)|power-of-two|prefix-affinity (the replica "
                  "sent the longest prefix, under the load bound)|session-affinity (sim: by tenant; serve: "
                  "by the body's "
                  "\"user\")")
      ->capture_default_str()
      ->check(CLI::IsMember(
          {"round-robin", "least-loaded", "power-of-two", "prefix-affinity", "session-affinity"}))
      ->group(F);
  CLI::Option* pools_opt =
      app->add_option(
             "--pools", o.pools_file,
             "A fleet of pools from YAML (each a GPU, a tensor-parallel degree and a count of replicas, "
             "optionally a name and a price per GPU-hour) behind --router, in place of --replicas "
             "(docs/engine.md \"Heterogeneous pools\")")
          ->group(F);
  app->add_option("--router-weights", o.router_weights,
                  "--pools: speed (least-loaded, power-of-two and prefix-affinity's bound weigh a replica's "
                  "load by its speed) or equal (outstanding tokens alone)")
      ->capture_default_str()
      ->check(CLI::IsMember({"speed", "equal"}))
      ->needs(pools_opt)
      ->group(F);
  CLI::Option* prefill_opt =
      app->add_option(
             "--prefill-replicas", o.prefill_replicas,
             "Disaggregated prefill (docs/engine.md \"Disaggregated prefill\"): this many replicas only "
             "prefill (behind --router), then send the prompt's KV over their link to a decode replica; "
             "with --decode-replicas, in place of --replicas")
          ->check(CLI::Range(1u, 4096u))
          ->group(F);
  app->add_option("--decode-replicas", o.decode_replicas,
                  "Disaggregated prefill: this many replicas only decode (behind --decode-router)")
      ->check(CLI::Range(1u, 4096u))
      ->group(F);
  app->add_option("--decode-router", o.decode_router,
                  "Disaggregated prefill: the router to the decode replicas (--router's names)")
      ->capture_default_str()
      ->check(CLI::IsMember(
          {"round-robin", "least-loaded", "power-of-two", "prefix-affinity", "session-affinity"}))
      ->needs(prefill_opt)
      ->group(F);
  app->add_option("--kv-link-gb-s", o.kv_link_gb_s,
                  "Disaggregated prefill: each prefill replica's link for KV, GB/s (10^9 bytes a second; "
                  "transfers leave one at a time)")
      ->capture_default_str()
      ->needs(prefill_opt)
      ->group(F);
  app->add_option("--kv-link-latency-us", o.kv_link_latency_us,
                  "Disaggregated prefill: a KV transfer's one-way latency, microseconds")
      ->capture_default_str()
      ->needs(prefill_opt)
      ->group(F);
  app->add_option("--router-load-bound", o.router_load_bound,
                  "prefix-affinity: a replica over this times the mean load is passed over")
      ->capture_default_str()
      ->group(F);
  return pools_opt;
}

}  // namespace tokenscope::cli
