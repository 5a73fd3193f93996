// The history of runs on the command line (docs/check.md "History"):
//  * bench and sim register every run directory they write (--history PATH,
//    --no-history, --tag TEXT);
//  * `tokenscope history` lists the runs;
//  * `check --baseline auto CAND` and `check --trend METRIC` read them.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tokenscope::cli {

// Where a run command registers its run.
struct HistoryOptions {
  std::string path;  // "": $XDG_DATA_HOME/tokenscope/history.db
  bool disabled = false;
};

// Adds --history PATH, --no-history and --tag TEXT (repeatable, into tags)
// to a run command, in the given help group.
void add_run_history_options(CLI::App* command, HistoryOptions& options, std::vector<std::string>& tags,
                             const char* group);

// Registers a run directory (finished or interrupted) in the history. Never
// throws: a failure prints one warning on `warn` and the run stands.
// started_unix: when the run started (s since the epoch), when run.json
// does not say (sim runs on virtual time).
void register_run_in_history(const HistoryOptions& options, const std::string& run_dir,
                             std::optional<double> started_unix, std::ostream& warn);

// `tokenscope history`.
CLI::App* add_history_command(CLI::App& app);
int run_history();

// check's --baseline auto, --trend METRIC and their --history and filters.
void add_check_history_options(CLI::App* check);
// Before the checklist: with --trend, runs the trend and returns its exit
// code; with --baseline auto, puts the base run found in the history in
// front of runs (printing which: on `out` for text output, else `err`) and
// returns nullopt; otherwise does nothing. Throws UsageError (exit 2) for
// bad combinations and when no comparable run is there.
std::optional<int> run_check_history(std::vector<std::string>& runs, const std::string& format,
                                     std::ostream& out, std::ostream& err);

}  // namespace tokenscope::cli
