// `tokenscope bench`: drive an OpenAI-compatible server (or, without
// --target, the built-in simulator started in-process on a loopback port)
// with an open- or closed-loop load; summary, run directory, sweeps.
#pragma once

#include <atomic>

#include <CLI/CLI.hpp>

namespace tokenscope::cli {

CLI::App* add_bench_command(CLI::App& app);
// interrupted: the first Ctrl-C; hurry: the second (cancel what is in flight now).
int run_bench(const std::atomic<bool>& interrupted, const std::atomic<bool>* hurry = nullptr);

}  // namespace tokenscope::cli
