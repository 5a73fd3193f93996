// `sim --plan` (docs/engine.md "Planning a fleet"): the smallest fleet of
// identical replicas behind the router that meets every SLO on the
// workload as given (a trace at a rate multiple: --time-scale, or --rate),
// and the frontier of the fleets tried: GPUs against goodput and the p99s.
//
// The search doubles the replicas from 1 until a fleet passes (or
// --plan-max-replicas is reached), then bisects between the last that
// failed and the first that passed. It takes passing to be monotone in the
// replicas (more replicas never miss an SLO that fewer met), which holds
// for the routers here on most workloads but is not guaranteed: every fleet
// tried is listed, and one that breaks the assumption is said.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "session/sim_run.h"

namespace tokenscope::session {

struct PlanSettings {
  std::uint32_t max_replicas = 64;
  // A GPU's price per hour, for the cost column (0: not shown).
  double gpu_cost_per_hour = 0;
};

struct PlanPoint {
  std::uint32_t replicas = 0;
  std::uint32_t gpus = 0;
  bool pass = false;
  nlohmann::json summary;  // the fleet's summary (run.json "summary" of that fleet)
  double cpu_s = 0;
};

struct PlanResult {
  std::vector<PlanPoint> points;          // by replicas
  std::optional<std::uint32_t> smallest;  // the fewest replicas that met every SLO
  std::uint32_t gpus_per_replica = 1;
  bool monotone = true;             // no fleet failed with more replicas than one that passed
  bool interrupted = false;         // Ctrl-C: the search stopped, and chose nothing
  std::map<std::string, Slo> slos;  // the SLOs the fleets were held to, by class ("" : default)
  // run.json "plan": the settings, every point (replicas, gpus, cost, pass,
  // goodput, throughput, p99s, each class's attainment) and the choice.
  nlohmann::json to_json(const PlanSettings& settings, const SimRunSettings& base) const;
};

// Runs the search on `base` (its replicas are the plan's to choose; nothing
// is written: each fleet's summary only). Throws UsageError when base has no
// SLO (--slo, or a workload file's).
PlanResult plan_fleet(const SimRunSettings& base, const PlanSettings& settings,
                      const std::atomic<bool>& interrupted, std::ostream& log);

}  // namespace tokenscope::session
