// A run as `check` and `report` see it: run.json whole (it is small) and,
// as its base, what the run's JSONL files hold (rundir/run_files.h:
// RunFilesRead), from the run cache or from a read of the files, put on the
// run's time axis.
//
// A run directory is read as it is: a run cut by Ctrl-C or a crash
// ("partial": true, no summary, a truncated last line of requests.jsonl), or
// one without samples.jsonl, loads with a note saying what is missing; it
// never throws for that. What does throw (InputError, UsageError): a path
// that holds no run at all, a run.json that is not JSON.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "rundir/readers.h"
#include "rundir/run_files.h"

namespace tokenscope::analyze {

// The run directory's types, as the analyses name them.
using rundir::cached_prompt_tokens;
using rundir::keep_freed_memory;
using rundir::kSlowestKept;
using rundir::LoadOptions;
using rundir::LogprobPool;
using rundir::RequestArrays;
using rundir::RunCache;
using rundir::RunFilesBuilder;
using rundir::RunFilesRead;
using rundir::SampledSeries;
using rundir::ShapeSightings;
using rundir::SlowestRequests;
using rundir::SlowRequest;
using rundir::split_half;
using rundir::StepsData;
using rundir::StepSeries;
using rundir::StepShape;
using rundir::StepStats;
using rundir::StepWindow;

// A run as the report and check see it: run.json's part (settings,
// summary, notes) and, as its base, what its JSONL files hold
// (RunFilesRead), taken whole from the run's cache or from a read of the
// files, then put on the run's time axis (origin).
struct RunData : RunFilesRead {
  std::filesystem::path dir;
  std::string name;         // how the report names the run (the directory's name)
  nlohmann::json run_json;  // run.json, null when the directory has none
  std::string command;      // tool.command: "bench", "sim", ...
  bool partial = false;
  // The summary: run.json's, or recomputed from requests.jsonl when run.json
  // has none (a run killed before its end); summary_recomputed says which.
  nlohmann::json summary;
  bool summary_recomputed = false;
  // The time origin of the report's time axes: the earliest t_sched, t_send
  // or sample of the run (0 when it has none). The steps (the base's
  // `steps`) are shifted to it; the requests and samples keep their times.
  Nanos origin = 0;
  // Lifecycle phases from `check` (phases.json in the run directory, when
  // there is one): [{"phase", "start_ns", "end_ns"}] on the run's clock.
  nlohmann::json phases = nlohmann::json::array();
  // check.json of the run directory (`check BASE CAND` writes it in CAND):
  // the checklist's verdicts, findings and evidence; null when none.
  nlohmann::json check;
  // tasks.jsonl (agentic tasks, docs/tasks.md), in file order, at most
  // kMaxTasksLoaded tasks of kMaxTaskStepsLoaded steps in all (the rest
  // counted in tasks_left_out, noted); its bad
  // lines are skipped and noted. Times are the run's clock (not shifted).
  std::vector<rundir::TaskRecord> tasks;
  std::uint64_t tasks_left_out = 0;
};

inline constexpr std::size_t kMaxTasksLoaded = 200'000;
inline constexpr std::size_t kMaxTaskStepsLoaded = 2'000'000;

// Loads one run directory. Throws UsageError when dir is not a directory
// or holds neither run.json nor requests.jsonl, InputError when run.json is
// not a JSON object.
RunData load_run(const std::filesystem::path& dir, const LoadOptions& options = {});

}  // namespace tokenscope::analyze
