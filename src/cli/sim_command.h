// `tokenscope sim`: options, run, terminal summary and run directory.
#pragma once

#include <atomic>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace tokenscope::cli {

// Registers the subcommand; run_sim() executes it after parsing.
CLI::App* add_sim_command(CLI::App& app);
int run_sim(const std::atomic<bool>& interrupted);
// One line of the terminal summary for a perturbation's ground truth
// (run.json "perturbations"): "perturbation tail (steps): steps=12 ...".
std::string describe_perturbation(const nlohmann::json& p);

}  // namespace tokenscope::cli
