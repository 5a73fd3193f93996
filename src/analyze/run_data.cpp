#include "analyze/run_data.h"

#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/text_reader.h"
#include "rundir/run_cache.h"

namespace tokenscope::analyze {

namespace fs = std::filesystem;
using rundir::load_phases;
using rundir::load_run_cache;
using rundir::read_json_file;
using rundir::read_run_files;
using rundir::run_files_key;
using rundir::RunFilesKey;
using rundir::save_run_cache;

RunData load_run(const fs::path& dir, const LoadOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UsageError(fmt::format("{}: not a run directory (no such directory)", dir.string()));
  const bool has_run_json = fs::exists(dir / "run.json", ec);
  const bool has_requests = fs::exists(dir / "requests.jsonl", ec);
  if (!has_run_json && !has_requests)
    throw UsageError(
        fmt::format("{}: not a run directory: it holds neither run.json nor requests.jsonl (bench and sim "
                    "--out write them)",
                    dir.string()));

  RunData run;
  run.dir = dir;
  run.name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  if (has_run_json) {
    run.run_json = read_json_file(dir / "run.json");
    const auto& j = run.run_json;
    if (j.contains("tool") && j["tool"].is_object() && j["tool"].contains("command") &&
        j["tool"]["command"].is_string())
      run.command = j["tool"]["command"].get<std::string>();
    run.partial = j.contains("partial") && j["partial"].is_boolean() && j["partial"].get<bool>();
    if (j.contains("summary") && j["summary"].is_object()) run.summary = j["summary"];
    if (run.partial)
      run.notes.push_back(
          "partial run: it was interrupted (Ctrl-C) or stopped early; what finished before is shown");
  } else {
    run.notes.push_back("no run.json: settings, environment and server counters are unknown");
  }

  // The JSONL files: from the run's cache when it is valid, else read (and
  // the cache written).
  const RunFilesKey key = run_files_key(dir);
  std::optional<RunFilesRead> files;
  if (options.cache == RunCache::kReadWrite) files = load_run_cache(dir, key);
  if (!files) {
    files = read_run_files(dir, has_run_json, run.summary.is_null(), options);
    if (options.cache == RunCache::kReadWrite) save_run_cache(dir, key, *files);
  }
  std::vector<std::string> run_json_notes = std::move(run.notes);
  static_cast<RunFilesRead&>(run) = std::move(*files);
  run.notes.insert(run.notes.begin(), std::make_move_iterator(run_json_notes.begin()),
                   std::make_move_iterator(run_json_notes.end()));
  if (!run.recomputed_summary.is_null()) {
    run.summary = std::exchange(run.recomputed_summary, nullptr);
    run.summary_recomputed = true;
  }

  // The time origin: the earliest time of the run.
  Nanos origin = -1;
  auto earlier = [&origin](Nanos t) {
    if (t >= 0 && (origin < 0 || t < origin)) origin = t;
  };
  const auto& a = run.requests;
  for (std::size_t i = 0; i < a.size(); ++i) {
    earlier(a.t_sched[i]);
    earlier(a.t_send[i]);
  }
  for (const auto& s : run.series)
    if (!s.t.empty()) earlier(s.t.front());
  run.origin = origin < 0 ? 0 : origin;

  // sim's steps.jsonl (sim --no-steps leaves it out; bench has none), on
  // the run's time axis.
  const double origin_s = nanos_to_s(run.origin);
  for (auto& series : run.steps.series)
    for (double& t : series.t_s) t -= origin_s;
  run.steps.first_t_s -= origin_s;
  run.steps.last_t_s -= origin_s;
  if (fs::exists(dir / "phases.json", ec)) run.phases = load_phases(dir / "phases.json", run.notes);
  rundir::RunSource source;
  source.dir = dir;
  if (auto reader = source.open_tasks(rundir::BadLines::kSkip)) {
    rundir::TaskRecord t;
    std::size_t steps = 0;
    while (reader->next(t)) {
      if (run.tasks.size() < kMaxTasksLoaded && steps + t.steps.size() <= kMaxTaskStepsLoaded) {
        steps += t.steps.size();
        run.tasks.push_back(t);
      } else {
        ++run.tasks_left_out;
      }
    }
    if (reader->stats().skipped > 0)
      run.notes.push_back(fmt::format("tasks.jsonl: {} bad lines skipped; the first: {}",
                                      reader->stats().skipped, reader->stats().first_skipped));
    if (run.tasks_left_out > 0)
      run.notes.push_back(
          fmt::format("tasks.jsonl: {} tasks are shown and checked, {} more are not (at most {} "
                      "tasks and {} steps are kept in memory)",
                      run.tasks.size(), run.tasks_left_out, kMaxTasksLoaded, kMaxTaskStepsLoaded));
  }
  if (fs::exists(dir / "check.json", ec)) {
    const std::string text =
        read_regular_file((dir / "check.json").string(), "check.json", rundir::kMaxCheckJsonBytes);
    require_json_depth(text, (dir / "check.json").string());
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("items") && j["items"].is_array())
      run.check = std::move(j);
    else
      run.notes.push_back("check.json: not the output of tokenscope check; no checklist shown");
  }
  return run;
}

}  // namespace tokenscope::analyze
