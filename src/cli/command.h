// One subcommand of the CLI: its CLI11 app and what runs it once the command
// line is parsed. Each command's options live in its own closure (filled by
// CLI11, read by run): the CLI keeps no option globals (docs/architecture.md).
#pragma once

#include <atomic>
#include <functional>

#include <CLI/CLI.hpp>

namespace tokenscope::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  // the exit code (core/error.h)
};

// What the signal handler tells a run: the first SIGINT/SIGTERM (stop new
// work, keep what is in flight) and the second (cancel what is in flight).
struct Interrupts {
  const std::atomic<bool>* interrupted = nullptr;
  const std::atomic<bool>* hurry = nullptr;
};

}  // namespace tokenscope::cli
