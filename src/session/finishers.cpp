#include "session/finishers.h"

#include <filesystem>

#include <fmt/format.h>

#include "analyze/history.h"
#include "analyze/run_data.h"
#include "core/run_dir.h"
#include "report/render.h"
#include "report/report_data.h"

namespace tokenscope::session {

bool write_run_report(const std::string& dir, std::ostream& log) {
  const auto path = std::filesystem::path(dir) / "report.html";
  try {
    // The run's cache is written here too when the run left none: `check`
    // and `report` of the run then read it instead of the JSONL files.
    analyze::LoadOptions load;
    load.cache = analyze::RunCache::kReadWrite;
    const auto input = report::load_report_input({std::filesystem::path(dir)}, load);
    write_file_atomic(path, report::render_html(report::report_data(input)));
    return true;
  } catch (const std::exception& e) {
    log << fmt::format(
        "tokenscope: {} not written: {} (the run's results are kept; tokenscope report {} "
        "tries again)\n",
        path.string(), e.what(), dir);
    return false;
  }
}

void register_run_in_history(const HistoryRegistration& history, const std::string& run_dir,
                             std::optional<double> started_unix, std::ostream& log) {
  if (history.disabled || run_dir.empty()) return;
  std::string where = history.path;
  try {
    const std::filesystem::path path =
        history.path.empty() ? analyze::default_history_path() : std::filesystem::path(history.path);
    where = path.string();
    analyze::RegisterOptions ro;
    ro.started_unix = started_unix;
    analyze::History(path).register_run(run_dir, ro);
  } catch (const std::exception& e) {
    log << fmt::format("tokenscope: warning: {} was not registered in the history{}: {}\n", run_dir,
                       where.empty() ? "" : " " + where, e.what());
  }
}

bool finish_run(const Finishers& finishers, const std::string& dir, const std::vector<std::string>& runs,
                std::optional<double> started_unix, std::ostream& log) {
  // The history first: a run registered is found by check --baseline auto
  // even when its page could not be written.
  for (const auto& run : runs) register_run_in_history(finishers.history, run, started_unix, log);
  return finishers.report && !dir.empty() && write_run_report(dir, log);
}

}  // namespace tokenscope::session
