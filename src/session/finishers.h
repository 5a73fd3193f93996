// What follows a run once its directory is complete (docs/architecture.md
// "A run's data path"): the page of `tokenscope report` and the run's entry
// in the history of runs. The run cache is not among them: the run writes it
// from memory as it ends (rundir::run_cache_writer), and the report page
// reads it. bench and sim finish through the same list.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace tokenscope::session {

// Where a run is registered (docs/check.md "History").
struct HistoryRegistration {
  std::string path;  // "": $XDG_DATA_HOME/tokenscope/history.db
  bool disabled = false;
};

struct Finishers {
  bool report = false;  // report.html in the run (or sweep) directory
  HistoryRegistration history;
};

// One run's directory, or a sweep's: the report covers `dir`, and every
// directory of `runs` (the sweep's each rate, or the run itself) is
// registered. started_unix: when the run started (s since the epoch) where
// run.json does not say (sim runs on virtual time). A failure of either is
// told on `log` and never fails the run: its results are on disk. Returns
// whether report.html was written.
bool finish_run(const Finishers& finishers, const std::string& dir, const std::vector<std::string>& runs,
                std::optional<double> started_unix, std::ostream& log);

// The pieces of finish_run, also for check --report.
bool write_run_report(const std::string& dir, std::ostream& log);
void register_run_in_history(const HistoryRegistration& history, const std::string& run_dir,
                             std::optional<double> started_unix, std::ostream& log);

}  // namespace tokenscope::session
