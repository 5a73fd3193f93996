// A directory of runs (docs/bench.md "Directories of runs"): a rate sweep,
// repeats of one setting, and whatever else varies from run to run share
// one layout — DIR/sweep.json, which says its `kind` and lists its `runs`
// (each with its `dir`, relative to DIR, and what was set for it: `rate_rps`,
// `repeat`, `seed`), and the run directories beside it (`rate-R/`,
// `repeat-K/`). Repeats add `statistics`: each headline metric over the
// runs, with the between-run interval of its mean.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tokenscope::rundir {

inline constexpr const char* kRunSetFile = "sweep.json";

// The headline metrics of a run's summary that repeats are summarised by:
// "ttft_ms.p50", ..., "request_throughput_rps", ... (dotted paths into
// run.json's summary), and whether higher is worse.
struct RepeatMetric {
  const char* key;
  bool higher_is_worse;
};
const std::vector<RepeatMetric>& repeat_metrics();

// The value of a dotted key in a summary; nullopt when absent or not a number.
std::optional<double> summary_value(const nlohmann::json& summary, const std::string& dotted_key);

// The between-run statistics of repeated runs (their summaries, in order):
// per metric of repeat_metrics() that every run has, {"values": [...],
// "mean", "sd" (n - 1), "ci": [low, high]} — the Student t interval of the
// mean with n - 1 degrees of freedom at `confidence` (null with one run).
nlohmann::json repeat_statistics(const std::vector<nlohmann::json>& summaries, double confidence = 0.95);

// A directory of runs as sweep.json lists it: its kind and the runs'
// directories (in the listed order; a listed run that is not there is left
// out). nullopt when dir has no sweep.json, or one without a `runs` list
// (a sweep written before the list existed).
struct RunSet {
  std::string kind;  // "rates", "search", "repeats", "server"
  std::vector<std::filesystem::path> runs;
  // Every listed directory that is there, run directories and run sets (a
  // server sweep's point with --repeat: its own sweep.json), in order.
  std::vector<std::filesystem::path> listed;
  nlohmann::json doc;
};
std::optional<RunSet> read_run_set(const std::filesystem::path& dir);

}  // namespace tokenscope::rundir
