// `tokenscope sim`: options, run, terminal summary and run directory.
#pragma once

#include <atomic>
#include <string>

#include <CLI/CLI.hpp>

namespace tokenscope::cli {

// Registers the subcommand; run_sim() executes it after parsing.
CLI::App* add_sim_command(CLI::App& app);
int run_sim(const std::atomic<bool>& interrupted);

}  // namespace tokenscope::cli
