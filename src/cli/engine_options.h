// Engine options shared by `sim` and `serve`: model, GPU, KV cache,
// scheduler, tenants and cost model, with units and defaults in --help.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/catalog.h"
#include "engine/cost_model.h"
#include "engine/engine.h"

namespace tokenscope::cli {

struct EngineOptions {
  engine::EngineSettings engine;
  std::string catalog_file;
  std::string policy = "fcfs";
  std::string preemption = "recompute";
  std::string tenant_kv_policy = "none";
  std::uint32_t num_gpu_blocks = 0;
  double fixed_step_ms = -1.0;
};

void add_engine_options(CLI::App* app, EngineOptions& o);
// The options as given (for run.json's "requested" settings).
nlohmann::json engine_options_json(const EngineOptions& o);
// Settings with the string options parsed; throws UsageError.
engine::EngineSettings engine_settings(const EngineOptions& o);
// The built-in catalog plus --catalog.
engine::Catalog load_catalog(const EngineOptions& o);
std::unique_ptr<engine::CostModel> make_cost_model(const engine::EngineSettings& s,
                                                   const engine::EffectiveEngine& e);

}  // namespace tokenscope::cli
