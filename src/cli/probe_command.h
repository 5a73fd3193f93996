// `tokenscope probe ...`: hardware probes (cache-line, kv-layout, line-sim,
// numa, gpu-context, kv-swap, collectives). See docs/probes.md.
#pragma once

#include "cli/command.h"

namespace tokenscope::cli {

Command add_probe_command(CLI::App& app);

}  // namespace tokenscope::cli
