// The data behind the report page (`report --format json`, and what the
// HTML embeds): per run its summary, server block, warnings and notes, the
// latency CDFs, the per-window timeline and the sampled series, every curve
// already reduced for display (downsample.h); per sweep its curve.
// Deterministic: the same input gives the same bytes (golden tests).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyze/run_data.h"
#include "rundir/downsample.h"

namespace tokenscope::report {

// The runs are read by analyze (run_data.h: the checklist reads the same
// arrays) from the run directory's files (rundir/run_files.h); the report
// names them as its own.
using analyze::load_run;
using analyze::RunData;
using rundir::cdf_points;
using rundir::ColumnReducer;
using rundir::kSlowestKept;
using rundir::LoadOptions;
using rundir::minmax_columns;
using rundir::RequestArrays;
using rundir::SampledSeries;
using rundir::SlowestRequests;
using rundir::SlowRequest;
using rundir::StepsData;
using rundir::StepSeries;
using rundir::XY;

// A probe's result file (`probe ... --out DIR` writes DIR/<probe>.json).
struct ProbeData {
  std::filesystem::path file;
  std::string probe;  // "cache-line", "kv-layout", "line-sim", ...
  nlohmann::json result;
};

// A sweep directory (bench --sweep-rates / --sweep-search): sweep.json and
// one run per rate-*/ subdirectory.
struct SweepData {
  std::filesystem::path dir;
  std::string name;
  nlohmann::json sweep_json;
  std::vector<std::size_t> runs;  // indexes into ReportInput::runs
};

struct ReportInput {
  std::vector<RunData> runs;
  std::vector<SweepData> sweeps;
  std::vector<ProbeData> probes;
  std::vector<std::string> notes;  // about the set (runs with different settings overlaid)
};

// Loads every path given: a run directory, a sweep directory whose rate-*/
// runs are loaded in the order of their rates, a probe's result file
// (<probe>.json) or a directory of them (probe --out DIR).
ReportInput load_report_input(const std::vector<std::filesystem::path>& paths,
                              const LoadOptions& options = {});

// The task waterfall (report_data's runs[].tasks.waterfall) is bounded, so
// that a run of 100,000 tasks stays a small page: at most kTaskRowsShown
// tasks, the kTaskSlowestShown slowest and an even sample of up to
// kTaskFailedShown failed ones first, the rest an even sample of the others;
// at most kTaskStepsShown steps of each.
inline constexpr std::size_t kTaskRowsShown = 60;
inline constexpr std::size_t kTaskSlowestShown = kSlowestKept;
inline constexpr std::size_t kTaskFailedShown = 20;
inline constexpr std::size_t kTaskStepsShown = 64;

struct ReportOptions {
  std::size_t columns = 1000;    // pixel columns a time chart is reduced to (minmax_columns)
  std::size_t cdf_points = 256;  // evenly spaced ranks of a CDF (its tail gets more)
  double window_s = 0;           // the timeline's window; 0: from the run's length (about 300 windows)
};

// The warnings a reader must not miss, in plain words: failed requests,
// client lag, token count mismatches, scrape and sampling errors, requests
// not sent, the run's own verdict.
std::vector<std::string> run_warnings(const RunData& run);

// What the reader should know but need not worry about: the run's notes
// (what is missing or cut) and the collectors that could not sample here
// (no NVML on a client machine without a GPU is normal).
std::vector<std::string> run_notes(const RunData& run);

// The window of the timeline for a run of duration_s seconds with `requests`
// requests: 0.1, 0.2, 0.5, 1, 2, 5, ... s, the smallest giving at most 300
// windows and, on average, at least 5 requests per window (fewer make every
// per-window rate and percentile noise) unless that leaves fewer than 10
// windows. Runs overlaid share the longest window any of them needs.
double timeline_window_s(double duration_s, std::size_t requests = 0);

nlohmann::json report_data(const ReportInput& in, const ReportOptions& options = {});

// j[k1][k2]..., or null when a step is not an object or lacks the key.
const nlohmann::json& json_at(const nlohmann::json& j, std::initializer_list<const char*> keys);

}  // namespace tokenscope::report
