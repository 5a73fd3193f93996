// Workload options shared by `sim` and `bench`: a trace to replay or a
// synthetic workload, the arrival process, lengths, shared prefixes, tenants
// and one seed per random dimension.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "workload/workload_spec.h"

namespace tokenscope::cli {

using WorkloadOptions = workload::WorkloadSpec;

void add_workload_options(CLI::App* app, WorkloadOptions& o);
// The options as given (run.json's "requested" settings).
nlohmann::json workload_options_json(const WorkloadOptions& o);

using BuiltWorkload = workload::BuiltWorkload;
// build_workload() is workload::build_workload (found by ADL).

}  // namespace tokenscope::cli
