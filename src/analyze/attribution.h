// Attribution (../shared/design/CHECKLIST.md, docs/check.md "Attribution"):
// how much each candidate cause — preemptions, KV swap traffic, tenant
// switches, batch size, prefix-cache misses — moves the inter-token latency
// and the output throughput of a run, estimated per window of the run with
// partialling-out double machine learning (regression.h), each cause in turn
// with the other causes and the load among the controls, beside the naive
// regressions, so a reader sees what confounding did.
//
// Windows: one second of sim's steps (steps.jsonl: ITL = the mean step time,
// throughput = decode tokens per second), or, for a run against a server, the
// sampling intervals of its metrics (ITL = the mean ITL of the requests
// finishing in the interval, throughput = the output-token counter's rate).
// A long run's windows are merged so that there are at most 2,000.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyze/regression.h"
#include "analyze/run_data.h"

namespace tokenscope::analyze {

// The table the estimates come from: one row per window.
struct WindowTable {
  std::string source;  // "steps" or "samples"
  double window_s = 1;
  std::vector<std::string> outcomes;  // names of the outcome columns
  std::vector<std::string> outcome_units;
  std::vector<std::string> causes;  // names of the cause columns
  std::vector<std::string> cause_units;
  std::vector<std::string> controls;
  Eigen::MatrixXd y, d, x;  // windows x outcomes, causes, controls
};

// The run's windows; nullopt when it has neither steps with durations nor
// server samples with a running-requests series.
std::optional<WindowTable> window_table(const RunData& run);

struct AttributionRow {
  std::string outcome, outcome_unit;
  std::string cause, cause_unit;
  DmlEffect effect;  // per unit of the cause
  // The cause's spread over the windows (standard deviation), to read an
  // effect as "per typical change".
  double cause_sd = 0;
};

struct Attribution {
  std::string source;
  double window_s = 1;
  std::size_t windows = 0;
  std::vector<AttributionRow> rows;
  std::vector<std::string> notes;  // causes left out (constant in the run), ...
};

// Every (outcome, cause) pair of the run's table whose cause varies; nullopt
// when there is no table or fewer than 30 windows.
std::optional<Attribution> attribute(const RunData& run, const DmlOptions& options = {});

nlohmann::json to_json(const Attribution& a);

}  // namespace tokenscope::analyze
