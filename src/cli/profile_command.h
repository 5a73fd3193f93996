// `tokenscope profile`: fit a server's step costs from the outside
// (docs/profile.md). --target URL runs the designed sweep
// (bench/profile_sweep.h) and fits it; --from RUN... fits finished bench
// runs. Writes the profile (engine/profile.h) for --profile.
#pragma once

#include "cli/command.h"

namespace tokenscope::cli {

Command add_profile_command(CLI::App& app, Interrupts interrupts);

}  // namespace tokenscope::cli
