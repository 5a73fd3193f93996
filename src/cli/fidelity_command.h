// `tokenscope fidelity`: the planner's error against a real server
// (docs/profile.md "Fidelity"). One workload runs twice on --target and
// through `sim` with --profile and with the defaults; fidelity.json and a
// report page with the four runs' CDFs overlaid go into --out.
#pragma once

#include "cli/command.h"

namespace tokenscope::cli {

Command add_fidelity_command(CLI::App& app, Interrupts interrupts);

}  // namespace tokenscope::cli
