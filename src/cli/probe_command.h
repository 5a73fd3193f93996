// `tokenscope probe ...`: hardware probes (cache-line, kv-layout, line-sim,
// numa, gpu-context, kv-swap, collectives). See docs/probes.md.
#pragma once

#include <CLI/CLI.hpp>

namespace tokenscope::cli {

CLI::App* add_probe_command(CLI::App& app);
int run_probe();

}  // namespace tokenscope::cli
