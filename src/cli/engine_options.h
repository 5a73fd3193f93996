// Engine options shared by `sim` and `serve`: model, GPU, KV cache,
// scheduler, tenants and cost model, with units and defaults in --help.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/engine_options.h"
#include "engine/fleet_setup.h"

namespace tokenscope::cli {

using EngineOptions = engine::EngineOptions;

void add_engine_options(CLI::App* app, EngineOptions& o);
// The fleet options shared by `sim`, `serve` and `bench` (engine/fleet_setup.h),
// in the "Fleet" group; returns --pools (sim's --plan options refer to it).
CLI::Option* add_fleet_options(CLI::App* app, engine::FleetOptions& o);
// The options as given (for run.json's "requested" settings).
nlohmann::json engine_options_json(const EngineOptions& o);
// engine_settings(), load_catalog() and make_cost_model() are engine:: functions (found by ADL).

}  // namespace tokenscope::cli
