// `tokenscope serve`: the simulator as an OpenAI-compatible streaming server.
#pragma once

#include <CLI/CLI.hpp>

namespace tokenscope::cli {

CLI::App* add_serve_command(CLI::App& app);
// Runs until SIGINT/SIGTERM, then shuts down gracefully; returns the exit code.
int run_serve();

}  // namespace tokenscope::cli
