// The engine as options: model, GPU, KV cache, scheduler, tenants and cost
// model. The perturbations are parsed where they are given (the CLI); the
// scheduler's choices (policy, preemption, tenant KV policy) are names that
// engine_settings() looks up. Shared by `sim`, `serve` and
// `bench`'s in-process server (the CLI fills it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/catalog.h"
#include "engine/cost_model.h"
#include "engine/engine.h"

namespace tokenscope::engine {

struct EngineOptions {
  EngineSettings engine;
  std::string catalog_file;
  std::string policy = "fcfs";
  std::string preemption = "recompute";
  std::string tenant_kv_policy = "none";
  std::string attention;  // own | occupancy; "" : own, or the profile's
  std::uint32_t num_gpu_blocks = 0;
  double fixed_step_ms = -1.0;
  PerturbationSpec perturb;                   // --perturb SPEC (perturbation.h), parsed where given
  std::optional<std::uint64_t> perturb_seed;  // --perturb-seed; default: the command's --seed
  // --profile FILE (engine/profile.h): its coefficients replace the roofline
  // model, and its scheduler limits the defaults of the options not given.
  std::string profile_file;
  bool max_num_seqs_given = false;
  bool max_num_batched_tokens_given = false;
};

// The options as given (for run.json's "requested" settings).
nlohmann::json to_json(const EngineOptions& o);
// Settings with the string options parsed; throws UsageError. The
// perturbation seed is --perturb-seed, else run_seed (the command's --seed).
// A profile is read here (InputError for a bad file).
EngineSettings engine_settings(const EngineOptions& o, std::uint64_t run_seed = 0);
// The built-in catalog plus the catalog file.
Catalog load_catalog(const EngineOptions& o);
std::unique_ptr<CostModel> make_cost_model(const EngineSettings& s, const EffectiveEngine& e);

}  // namespace tokenscope::engine
