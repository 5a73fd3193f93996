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

#include "cli/command.h"
#include "session/finishers.h"

namespace tokenscope::cli {

// Adds --history PATH, --no-history and --tag TEXT (repeatable, into tags)
// to a run command, in the given help group.
void add_run_history_options(CLI::App* command, session::HistoryRegistration& options,
                             std::vector<std::string>& tags, const char* group);

// `tokenscope history`.
Command add_history_command(CLI::App& app);

// The filters of `history` and of check's history options.
struct HistoryFilterOptions {
  std::string history;  // --history; "": the default database
  std::string command, target, tag, workload, since;
  std::size_t limit = 0;
};

// check's --baseline auto, --trend METRIC and their --history and filters.
struct CheckHistoryOptions {
  HistoryFilterOptions f;
  std::string baseline;  // "auto"
  std::string trend;     // a metric
  double trend_pvalue = 0.001;
  double trend_min_change = 0.05;
};
void add_check_history_options(CLI::App* check, CheckHistoryOptions& options);
// Before the checklist: with --trend, runs the trend and returns its exit
// code; with --baseline auto, puts the base run found in the history in
// front of runs (printing which: on `out` for text output, else `err`) and
// returns nullopt; otherwise does nothing. Throws UsageError (exit 2) for
// bad combinations and when no comparable run is there.
std::optional<int> run_check_history(const CheckHistoryOptions& options, std::vector<std::string>& runs,
                                     const std::string& format, std::ostream& out, std::ostream& err);

}  // namespace tokenscope::cli
