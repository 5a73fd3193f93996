// tokenscope: benchmark and diagnose LLM inference serving.
#include <fmt/format.h>
#include <unistd.h>

#include <signal.h>
#include <atomic>
#include <csignal>
#include <iostream>

#include <CLI/CLI.hpp>

#include "bench/server_sweep.h"
#include "cli/bench_command.h"
#include "cli/check_command.h"
#include "cli/fidelity_command.h"
#include "cli/history_command.h"
#include "cli/merge_command.h"
#include "cli/probe_command.h"
#include "cli/profile_command.h"
#include "cli/report_command.h"
#include "cli/serve_command.h"
#include "cli/sim_command.h"
#include "core/error.h"

namespace {
// SIGINT or SIGTERM: the first stops new work and lets what is in flight
// finish (bench: --grace-s); the second cancels what is in flight at once
// (the results are still written); the third ends the process now.
std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_hurry{false};
std::atomic<int> g_signals{0};
extern "C" void on_signal(int) {
  const int n = g_signals.fetch_add(1) + 1;
  if (n == 1) g_interrupted.store(true);
  if (n == 2) g_hurry.store(true);
  if (n >= 3) {
    static const char kMsg[] =
        "\ntokenscope: interrupted three times: exiting now (finished requests are on disk)\n";
    [[maybe_unused]] const auto w = ::write(2, kMsg, sizeof kMsg - 1);
    // A server bench started (--server-cmd) is in a process group of its
    // own, out of the terminal's reach: it goes now too.
    if (const int group = tokenscope::bench::managed_server_group(); group > 0) ::kill(-group, SIGKILL);
    ::_exit(130);
  }
}
}  // namespace

int main(int argc, char** argv) {
  using namespace tokenscope;
  CLI::App app{
      "tokenscope " TOKENSCOPE_VERSION
      ": benchmark and diagnose LLM inference serving.\n\n"
      "  tokenscope bench [options]   benchmark an OpenAI-compatible server (default: the built-in\n"
      "                               simulator, started in-process) with realistic load\n"
      "  tokenscope sim [options]     replay a trace or synthetic workload through the serving\n"
      "                               simulator in virtual time (capacity planning, what-if)\n"
      "  tokenscope serve [options]   the simulator as an OpenAI-compatible streaming server\n"
      "                               with vLLM's Prometheus metrics\n"
      "  tokenscope probe PROBE        hardware probes: cache-line, kv-layout, line-sim, numa,\n"
      "                               gpu-context, kv-swap, collectives\n"
      "  tokenscope report RUN...     one self-contained HTML page of runs (charts), or their summary\n"
      "                               as text, JSON or Markdown\n"
      "  tokenscope check BASE CAND   the regression checklist: verdicts with their statistics, exit\n"
      "                               1 when something regressed (check RUN: one run's health)\n"
      "  tokenscope history           the runs bench and sim registered, newest first\n"
      "  tokenscope merge DIR...      the run directories of a sharded bench (bench --shard) as one\n"
      "  tokenscope profile           fit a server's step costs from the outside, for --profile\n"
      "  tokenscope fidelity          the planner's error against a real server, beside its own spread\n\n"
      "Run 'tokenscope COMMAND --help' for the options of a command.",
      "tokenscope"};
  app.set_version_flag("--version", TOKENSCOPE_VERSION);
  app.require_subcommand(1);
  const cli::Interrupts interrupts{&g_interrupted, &g_hurry};
  // sim and bench stop early on SIGINT/SIGTERM and keep their results;
  // serve waits for the signals itself; the others end by default on them.
  // In the order --help lists them (a braced list is evaluated left to right).
  const cli::Command commands[] = {cli::add_sim_command(app, interrupts),
                                   cli::add_serve_command(app),
                                   cli::add_bench_command(app, interrupts),
                                   cli::add_probe_command(app),
                                   cli::add_report_command(app),
                                   cli::add_check_command(app),
                                   cli::add_history_command(app),
                                   cli::add_merge_command(app),
                                   cli::add_profile_command(app, interrupts),
                                   cli::add_fidelity_command(app, interrupts)};
  const CLI::App* const sim = commands[0].app;
  const CLI::App* const bench = commands[2].app;

  // One try for both: options whose values are small languages (--faults,
  // --perturb, --input-len, ...) are parsed as CLI11 reads them, and their
  // errors are UsageErrors like those of the run.
  try {
    app.parse(argc, argv);
    for (const cli::Command& command : commands) {
      if (!command.app->parsed()) continue;
      if (command.app == sim || command.app == bench || command.app == commands[7].app ||
          command.app == commands[8].app) {
        std::signal(SIGINT, on_signal);
        std::signal(SIGTERM, on_signal);
        std::signal(SIGHUP, on_signal);  // the terminal closed: as Ctrl-C (a started server is stopped)
      }
      // mpirun passes SIGUSR1 on to every rank, while its Ctrl-C is SIGTERM
      // then SIGKILL a second later: bench --mpi stops early on it, and the
      // ranks still gather and merge (docs/fleet.md "Under Open MPI"; sim
      // --grid's ranks gather what ran).
      if (command.app == bench || command.app == sim) std::signal(SIGUSR1, on_signal);
      return command.run();
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "tokenscope: " << display_lines(e.what()) << "\nRun 'tokenscope --help' for usage.\n";
    return kExitUsage;
  } catch (const UsageError& e) {
    std::cerr << "tokenscope: " << display_lines(e.what()) << "\n";
    return kExitUsage;
  } catch (const TargetError& e) {
    std::cerr << "tokenscope: " << display_lines(e.what()) << "\n";
    return kExitFailure;
  } catch (const IoError& e) {
    std::cerr << "tokenscope: " << display_lines(e.what()) << "\n";
    return kExitFailure;
  } catch (const std::bad_alloc&) {
    std::cerr << "tokenscope: out of memory\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << "tokenscope: internal error: " << display_lines(e.what()) << "\n";
    return kExitFailure;
  }
  return kExitUsage;
}
