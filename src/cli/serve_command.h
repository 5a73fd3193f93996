// `tokenscope serve`: the simulator as an OpenAI-compatible streaming server.
#pragma once

#include "cli/command.h"

namespace tokenscope::cli {

// Its run serves until SIGINT/SIGTERM (waited for on the calling thread),
// then shuts down gracefully.
Command add_serve_command(CLI::App& app);

}  // namespace tokenscope::cli
