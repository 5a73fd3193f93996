// The serving engine: a discrete-event model of a continuous-batching LLM
// server with vLLM V1 scheduling semantics (docs/engine.md):
//  * each step has a token budget (max_num_batched_tokens) and at most
//    max_num_seqs running sequences;
//  * running sequences are scheduled first (decode: 1 token; unfinished
//    prefill: the rest of the prompt, chunked to the budget), then waiting
//    ones in FCFS or priority order, and waiting ones only in steps without a
//    preemption;
//  * when KV blocks run out, the newest running sequence (FCFS) or the lowest
//    priority one is preempted: by recompute (its blocks are freed, it goes
//    back to the front of the queue and later recomputes prompt and output,
//    hitting its own cached blocks where they survive), or by swap (its KV
//    goes to host memory and comes back at host-link bandwidth);
//  * prefix caching counts queries and hits in tokens on first admission:
//    hits are whole cached blocks, and the last prompt token is always
//    recomputed;
//  * multi-tenant contexts: at most max_active_tenants tenants are resident;
//    bringing in another costs context_switch_ms and evicts an idle tenant,
//    whose KV is dropped (no reuse), kept in its own static partition (static
//    reuse) or moved to a bounded LRU pool in host memory and brought back on
//    demand (dynamic reuse; blocks evicted from the pool are recomputed).
// Time is whatever the caller says it is: `sim` drives it virtually, `serve`
// with the wall clock. Single-threaded.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/clock.h"
#include "engine/catalog.h"
#include "engine/cost_model.h"
#include "engine/kv_cache.h"
#include "engine/perturbation.h"
#include "tokenizers/builtin.h"
#include "workload/workload.h"

namespace tokenscope::engine {

enum class SchedulingPolicy { kFcfs, kPriority };
enum class PreemptionMode { kRecompute, kSwap };
enum class TenantKvPolicy { kNoReuse, kStaticReuse, kDynamicReuse };
// Whose attention the engine prices (docs/engine.md "Attention span"):
// vLLM's paged attention reads each sequence's own context; llama.cpp's
// unified KV cache is attended over every occupied cell, and each of its
// slots keeps its last sequence's cells after it finished (cache_prompt)
// until the least recently used idle slot takes a new request.
enum class AttentionSpan { kOwnContext, kOccupancy };

SchedulingPolicy parse_scheduling_policy(std::string_view s);
PreemptionMode parse_preemption_mode(std::string_view s);
TenantKvPolicy parse_tenant_kv_policy(std::string_view s);
AttentionSpan parse_attention_span(std::string_view s);  // own | occupancy
std::string_view name_of(AttentionSpan a);
std::string_view name_of(SchedulingPolicy p);
std::string_view name_of(PreemptionMode p);
std::string_view name_of(TenantKvPolicy p);

struct Profile;

// Settings as the user gives them; units in the names.
struct EngineSettings {
  std::string model = "llama-3-8b";
  std::string gpu = "h100-sxm";
  std::uint32_t tensor_parallel = 1;
  double gpu_memory_utilization = 0.9;
  double activation_reserve_gib = 2.0;  // per GPU: activations, CUDA graphs, workspace
  std::uint32_t block_size_tokens = 16;
  std::optional<std::uint32_t> num_gpu_blocks_override;
  bool unlimited_kv = false;
  bool enable_prefix_caching = true;
  std::uint32_t max_num_batched_tokens = 8192;
  std::uint32_t max_num_seqs = 256;
  std::uint32_t max_model_len = 0;  // 0: the model's max_context
  bool enable_chunked_prefill = true;
  std::uint32_t long_prefill_token_threshold = 0;  // 0: off
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  PreemptionMode preemption = PreemptionMode::kRecompute;
  AttentionSpan attention = AttentionSpan::kOwnContext;
  std::uint32_t num_tenants = 1;
  std::uint32_t max_active_tenants = 0;  // 0: every tenant resident, no switches
  double context_switch_ms = 0.0;
  TenantKvPolicy tenant_kv_policy = TenantKvPolicy::kNoReuse;
  // Host memory for KV blocks offloaded by dynamic tenant reuse, GiB for the
  // whole replica (all TP ranks); least recently used blocks are evicted
  // when it is full. Default: a quarter of the 256 GiB of host memory per
  // GPU of an 8-GPU H100/H200 node (2 TiB), the rest left to the OS, the
  // weights' loading and pinned staging buffers.
  double host_kv_gib = 64.0;
  RooflineParams cost;
  std::optional<double> fixed_step_ms;  // replaces the roofline model (e.g. 0 for zero cost)
  // A fitted profile (--profile, engine/profile.h): replaces the roofline model.
  std::shared_ptr<const Profile> profile;
  // Injected perturbations (perturbation.h, docs/engine.md "Perturbations"):
  // kv is applied by resolve_engine(), batch_cap by the Engine (it replaces
  // max_num_seqs), the others step by step. Empty: none.
  std::vector<Perturbation> perturbations;
  std::uint64_t perturbation_seed = 0;
  // LoRA adapters (docs/engine.md "LoRA adapters"): a request names one by
  // EngineRequest::adapter (0: the base model). At most max_loras distinct
  // adapters run in a batch (vLLM's --max-loras): a waiting request whose
  // adapter would be one too many waits and the ones behind it go first, as
  // vLLM's scheduler skips it. The GPU holds max_loras adapters, the least
  // recently used evicted; bringing one in costs lora_load_ms in that step
  // (default: its weights, rank max_lora_rank on every projection of every
  // layer, over the host link). max_loras 0: adapters off.
  std::uint32_t max_loras = 0;
  std::uint32_t max_lora_rank = 16;
  std::optional<double> lora_load_ms;
  // Accumulate the coupling terms per request group (sim --coupling).
  bool track_coupling = false;
};

// Settings after resolution against the catalog and the GPU's memory.
struct EffectiveEngine {
  ModelSpec model;
  GpuSpec gpu;
  std::uint32_t tensor_parallel = 1;
  std::uint32_t block_size_tokens = 16;
  std::optional<std::uint32_t> num_gpu_blocks;  // nullopt: unlimited
  std::uint32_t max_model_len = 0;
  double weights_gib_per_gpu = 0.0;
  double kv_cache_gib_per_gpu = 0.0;
  double kv_bytes_per_token = 0.0;                          // all GPUs
  double kv_bytes_per_block = 0.0;                          // all GPUs
  std::uint64_t num_host_kv_blocks = 0;                     // floor(host_kv_gib · 2^30 / kv_bytes_per_block)
  std::optional<std::uint32_t> unperturbed_num_gpu_blocks;  // before a kv perturbation; nullopt without one
  std::vector<std::string> notes;                           // adjustments the user should know about
  // LoRA (max_loras > 0): one adapter's weights (bytes, all GPUs) and the time to load it.
  double lora_adapter_bytes = 0.0;
  double lora_load_ms = 0.0;
  // The scheduler as it runs: the batch cap (after a batch_cap
  // perturbation), the token budget and what attention is priced over.
  std::uint32_t max_num_seqs = 0;
  std::uint32_t max_num_batched_tokens = 0;
  AttentionSpan attention = AttentionSpan::kOwnContext;

  nlohmann::json to_json() const;
};

// Throws UsageError when the model does not fit, settings are out of range, ...
EffectiveEngine resolve_engine(const EngineSettings& s, const Catalog& catalog);

struct EngineRequest {
  std::uint64_t id = 0;
  std::vector<tokenizers::TokenId> prompt;  // the prompt's tokens (moved in)
  std::uint32_t max_output_tokens = 1;      // the request generates exactly this many (unless aborted)
  std::uint32_t tenant = 0;
  std::int32_t priority = 0;
  std::optional<std::uint64_t> output_seed;  // keys the generated words; default: the id
  // When the request arrived, if before the `now` of add_request (it was
  // held, as a request tail holds it); < 0: it arrives at `now`.
  Nanos arrival = -1;
  // A pooling request (embeddings, rerank: serve's /v1/embeddings): one
  // "token" marks the end of its prefill and is not counted as generated.
  bool pooling = false;
  // Multimodal inputs (their placeholder tokens are in `prompt`): the
  // encoders run once, in the step where the prefill starts, at the cost of
  // the model's encoder FLOPs (ModelSpec); 0: none.
  double image_encoder_flops = 0;
  double audio_encoder_flops = 0;
  // The LoRA adapter it runs with (1, 2, ...; EngineSettings::max_loras), 0:
  // the base model. Adapters do not share prefix-cache blocks.
  std::uint32_t adapter = 0;
  // Its group (sim: the task class) for Engine::coupling_terms.
  std::uint16_t group = 0;
  // Prompt tokens whose KV arrives computed (a decode replica of a
  // disaggregated fleet: the prefill replica's KV, engine/fleet.h); at most
  // the prompt's length less one (the last is computed here and samples the
  // first token). They take KV blocks on admission but no compute, and are
  // not prefix-cache queries; a preemption by recompute forgets them.
  std::uint32_t preloaded_tokens = 0;
};

// The terms of the design's coupling coefficient kappa = rho_shared x
// dt_align / tau_base for one group of requests (a task class; docs/metrics.md
// "Coupling"), over the steps that carry any of its requests:
//  * rho_shared: the share of those steps' HBM traffic the other groups
//    cause (their KV reads and their encoders' weights), of all of it (the
//    model's weights, every KV read, the encoders' weights);
//  * dt_align: the largest time one such step spent in the other groups'
//    encoders (its tokens wait for another modality: the sync skew);
//  * tau_base: the median duration of its steps without encoder work (its
//    single-modality period).
struct CouplingTerms {
  std::uint64_t steps = 0;
  double rho_shared = 0, dt_align_s = 0, tau_base_s = 0;
  double kappa() const { return tau_base_s > 0 ? rho_shared * dt_align_s / tau_base_s : 0.0; }
};

// Multimodal inputs as the model sees them: an image's or an audio clip's
// placeholder tokens appended to the prompt (drawn from `key`, so equal
// inputs give equal tokens and share the prefix cache, as vLLM hashes them)
// and its encoder FLOPs added to the request (ModelSpec). Throws UsageError
// when the model has no such encoder.
void append_image(const ModelSpec& m, std::uint32_t width, std::uint32_t height, std::uint64_t key,
                  EngineRequest& r);
void append_audio(const ModelSpec& m, double seconds, std::uint64_t key, EngineRequest& r);
// The images and audio of a workload request (keys drawn from its id).
void append_media(const ModelSpec& m, const workload::Request& req, std::uint64_t token_seed,
                  EngineRequest& r);
// The prompt tokens they add.
std::uint32_t media_tokens(const ModelSpec& m, const workload::Request& req);

struct FinishedRequest {
  std::uint64_t id = 0;
  std::uint32_t tenant = 0;
  Nanos arrival = 0;
  Nanos first_scheduled = -1;
  Nanos first_token = -1;
  Nanos finished = 0;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t output_tokens = 0;
  std::uint32_t cached_tokens = 0;
  std::uint32_t preemptions = 0;
  bool aborted = false;  // ended by abort() before its last token
};

struct StepStats {
  std::uint64_t index = 0;
  std::uint32_t replica = 0;  // a fleet's replica that ran it (Engine::set_replica; 0: one engine)
  Nanos start = 0;
  Nanos duration = 0;
  std::uint32_t num_seqs = 0;
  std::uint32_t prefill_tokens = 0;
  std::uint32_t decode_tokens = 0;
  std::uint32_t num_running = 0;  // after the step
  std::uint32_t num_waiting = 0;  // after the step (incl. swapped)
  double kv_usage = 0.0;          // after scheduling
  std::uint32_t kv_blocks_in_use = 0;
  std::uint64_t prefix_queries_tokens = 0;
  std::uint64_t prefix_hits_tokens = 0;
  std::uint32_t preemptions = 0;
  std::uint32_t tenant_switches = 0;
  std::uint64_t swap_out_bytes = 0;
  std::uint64_t swap_in_bytes = 0;
  std::uint64_t host_kv_blocks = 0;             // held in the host pool after the step
  std::uint32_t host_kv_evictions = 0;          // blocks the host pool evicted in this step
  std::uint32_t host_kv_recomputed_blocks = 0;  // evicted blocks that requests admitted now recompute
  std::uint32_t lora_loads = 0;                 // adapters brought onto the GPU for this step
  StepCost cost;
  Nanos perturbation_ns = 0;  // of the duration, the time perturbations added
  Nanos stolen_ns = 0;        // of that, stolen time (steal), at the end of the step
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  // The first step that schedules the request, with the prompt tokens it
  // found in the prefix cache (whole blocks; FinishedRequest::cached_tokens).
  virtual void on_first_scheduled(std::uint64_t /*id*/, Nanos /*t*/, std::uint32_t /*cached_tokens*/) {}
  // A generated token (text: tokenizers::piece_text(token)), emitted at t.
  virtual void on_token(std::uint64_t /*id*/, Nanos /*t*/, tokenizers::TokenId /*token*/) {}
  virtual void on_finish(const FinishedRequest& /*r*/) {}
  virtual void on_reject(std::uint64_t /*id*/, Nanos /*t*/, std::string_view /*reason*/) {}
  virtual void on_step(const StepStats& /*s*/) {}
};

struct EngineCounters {
  std::uint64_t steps = 0;
  std::uint64_t prefix_queries_tokens = 0;
  std::uint64_t prefix_hits_tokens = 0;
  std::uint64_t preempted_queries_tokens = 0;  // re-admissions after preemption
  std::uint64_t preempted_hits_tokens = 0;
  std::uint64_t preemptions = 0;
  std::uint64_t tenant_switches = 0;
  std::uint64_t swap_out_bytes = 0;
  std::uint64_t swap_in_bytes = 0;
  std::uint64_t host_kv_evictions = 0;          // blocks evicted from the host pool
  std::uint64_t host_kv_recomputed_blocks = 0;  // of those, blocks a request needed again and recomputed
  std::uint64_t max_host_kv_blocks = 0;         // peak blocks held in the host pool
  std::uint64_t lora_loads = 0;                 // adapters brought onto the GPU
  std::uint64_t requests_finished = 0;
  std::uint64_t requests_rejected = 0;
  std::uint64_t prompt_tokens = 0;
  std::uint64_t generation_tokens = 0;
  std::uint64_t max_batched_tokens_seen = 0;
  std::uint32_t max_blocks_in_use = 0;
  std::optional<double> kv_usage_peak;  // nullopt for an unlimited cache
};

class Engine {
 public:
  Engine(EffectiveEngine effective, EngineSettings settings, std::unique_ptr<CostModel> cost,
         EngineObserver* observer);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request arriving at `now`. Returns false when it is rejected at
  // once (too long for the context or for the whole KV cache); the observer
  // hears why.
  bool add_request(EngineRequest r, Nanos now);
  // Why add_request would reject a request of this many prompt and output
  // tokens at once (too long for the context or for the whole KV cache), or
  // nullopt. Callers ask before making the prompt's tokens: a trace row may
  // claim 2^30 of them (docs/workloads.md).
  std::optional<std::string> admission_problem(std::uint64_t prompt_tokens, std::uint32_t max_output_tokens,
                                               std::uint32_t tenant) const;
  // Rejects a request without queueing it (after admission_problem said why).
  void reject(std::uint64_t id, Nanos now, std::string_view reason);
  bool has_work() const { return !running_.empty() || !waiting_empty() || !swapped_.empty(); }
  // Runs one step starting at `now` and returns its duration (0 when nothing
  // could be scheduled). Tokens are emitted at now + duration.
  Nanos step(Nanos now);
  // Rejects everything still queued (e.g. at the end of a run that cannot progress).
  void reject_all_waiting(Nanos now, std::string_view reason);
  // Ends a request wherever it is (client gone, stop string matched): its
  // blocks are freed and the observer hears on_finish with aborted = true.
  // Returns false when the id is unknown (already finished).
  bool abort(std::uint64_t id, Nanos now);

  const EngineCounters& counters() const { return counters_; }
  const EffectiveEngine& effective() const { return eff_; }
  std::size_t num_running() const { return running_.size(); }
  std::uint32_t settings_max_loras() const { return settings_.max_loras; }
  // The adapters (> 0) of running and of waiting requests, each once, in
  // increasing order (vLLM's vllm:lora_requests_info labels).
  std::vector<std::uint32_t> running_adapters() const;
  std::vector<std::uint32_t> waiting_adapters() const;
  // Per group (EngineRequest::group), with track_coupling on; empty otherwise.
  std::map<std::uint16_t, CouplingTerms> coupling_terms() const;
  std::size_t num_waiting() const;
  // Sum over pools; for tests.
  std::uint32_t kv_blocks_in_use() const;
  // Blocks held in the host pool (dynamic tenant reuse).
  std::uint64_t host_kv_blocks() const { return host_pool_.size(); }
  bool check_invariants() const;
  // The perturbations this engine applies; nullptr without any.
  Perturber* perturber() { return perturber_.get(); }
  // Its index in a fleet, carried by its steps (StepStats::replica).
  void set_replica(std::uint32_t i) { replica_ = i; }
  const Perturber* perturber() const { return perturber_.get(); }

 private:
  struct Seq;
  struct PriorityOrder {
    bool operator()(const Seq* a, const Seq* b) const;
  };

  bool waiting_empty() const;
  Seq* waiting_front() const;
  void waiting_pop_front();
  void waiting_push_back(Seq* s);
  void waiting_push_front(Seq* s);

  std::uint32_t pool_of(const Seq& s) const;
  std::uint64_t root_hash(std::uint32_t tenant) const;
  void append_known_token(Seq& s, tokenizers::TokenId t);
  // Reserves KV blocks so that num_new_tokens more tokens fit, taking
  // hit_blocks cached blocks and host_blocks restored from host memory for a
  // sequence being admitted. Returns false (changing nothing) when blocks
  // run out.
  bool allocate_slots(Seq& s, std::uint32_t num_new_tokens, std::size_t hit_blocks, std::size_t host_blocks);
  void cache_full_blocks(Seq& s, std::uint32_t tokens_known_computed);
  Seq* pick_victim() const;
  void preempt(Seq* victim, StepStats& st);
  bool ensure_tenant_resident(std::uint32_t tenant, StepStats& st, double& extra_seconds);
  // Whether a sequence with this adapter may join the running batch.
  bool lora_fits(std::uint32_t adapter) const;
  // Brings the adapter onto the GPU when it is not there (evicting the least
  // recently used one no running sequence needs) and marks it used.
  void use_adapter(std::uint32_t adapter, StepStats& st, double& extra_seconds);
  void finish(Seq* s, Nanos t, bool aborted);

  EffectiveEngine eff_;
  EngineSettings settings_;
  std::unique_ptr<CostModel> cost_;
  std::unique_ptr<Perturber> perturber_;
  std::uint32_t replica_ = 0;
  EngineObserver* observer_;
  std::vector<KvBlockPool> pools_;
  std::vector<Seq*> running_;
  std::deque<Seq*> waiting_fcfs_;
  std::set<Seq*, PriorityOrder> waiting_priority_;
  std::deque<Seq*> swapped_;
  std::uint64_t admit_sequence_ = 0;
  // Tenant residency.
  std::vector<bool> resident_;
  std::vector<std::uint64_t> tenant_last_used_;
  std::vector<std::uint32_t> tenant_live_seqs_;  // running or swapped
  std::uint32_t resident_count_ = 0;
  HostKvPool host_pool_;                 // dynamic tenant reuse: blocks offloaded to host memory
  std::vector<std::uint32_t> lora_gpu_;  // adapters on the GPU, least recently used first
  struct GroupTraffic {
    std::uint64_t steps = 0;
    double other_bytes = 0, total_bytes = 0, max_other_encoder_s = 0;
    std::vector<float> plain_step_s;  // durations of its steps without encoder work
  };
  std::map<std::uint16_t, GroupTraffic> coupling_;
  void track_coupling(const StepCost& cost, double duration_s);
  std::vector<std::pair<std::uint16_t, double>> step_encoder_flops_;  // this step's encoders, by group
  std::unordered_map<std::uint64_t, Seq*> by_id_;
  EngineCounters counters_;
  // Scratch, reused across steps.
  std::vector<std::pair<Seq*, std::uint32_t>> scheduled_;
  // AttentionSpan::kOccupancy: the idle slots' kept tokens by when they were
  // last used (the least recently used is taken first), and their sum.
  // Never-used or emptied slots are counted, not kept (they go first).
  std::multimap<Nanos, std::uint32_t> idle_slots_;
  std::uint64_t idle_slot_tokens_ = 0;
  std::uint64_t empty_slots_ = 0;
  void take_slot(Seq* s);
  void release_slot(Seq* s, Nanos t, std::uint32_t kept);
};

}  // namespace tokenscope::engine
