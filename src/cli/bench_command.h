// `tokenscope bench`: drive an OpenAI-compatible server (or, without
// --target, the built-in simulator started in-process on a loopback port)
// with an open- or closed-loop load; summary, run directory, sweeps.
#pragma once

#include "cli/command.h"

namespace tokenscope::cli {

// interrupts.interrupted: the first Ctrl-C (no new requests, --grace-s for
// those in flight); interrupts.hurry: the second (cancel what is in flight now).
Command add_bench_command(CLI::App& app, Interrupts interrupts);

}  // namespace tokenscope::cli
