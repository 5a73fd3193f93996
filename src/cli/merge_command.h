// `tokenscope merge DIR... --out OUT`: the run directories of a sharded
// bench (bench --shard) into one run directory (rundir/merge.h,
// docs/fleet.md "Load from many hosts").
#pragma once

#include "cli/command.h"

namespace tokenscope::cli {

Command add_merge_command(CLI::App& app);

}  // namespace tokenscope::cli
