// `tokenscope sim`: options, run, terminal summary and run directory.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"

namespace tokenscope::cli {

// Registers the subcommand; its run stops early (results kept) when
// *interrupts.interrupted is set.
Command add_sim_command(CLI::App& app, Interrupts interrupts);
// One line of the terminal summary for a perturbation's ground truth
// (run.json "perturbations"): "perturbation tail (steps): steps=12 ...".
std::string describe_perturbation(const nlohmann::json& p);

}  // namespace tokenscope::cli
