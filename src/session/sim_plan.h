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
  // A plan over pools: each pool's replicas, and the fleet's cost per hour
  // when every pool has a price.
  std::vector<std::uint32_t> counts;
  std::optional<double> cost_per_hour;
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
  // A plan over pools (--pools): the pools' names and their most replicas
  // (the file's counts), and the cheapest mix that met every SLO: the least
  // cost per hour when every pool has a price, else the fewest GPUs (ties:
  // the most goodput).
  std::vector<std::string> pool_names;
  std::vector<std::uint32_t> pool_max;
  bool priced = false;
  std::optional<std::vector<std::uint32_t>> cheapest;
  // run.json "plan": the settings, every point (replicas, gpus, cost, pass,
  // goodput, throughput, p99s, each class's attainment) and the choice.
  nlohmann::json to_json(const PlanSettings& settings, const SimRunSettings& base) const;
};

// With base.pools_file, the search is over the mixes of the pools: each
// pool's count in the file is the most replicas of it the plan may use.
// For every mix of all the pools but the last (at most 4,096 mixes), the
// fewest replicas of the last pool that meet every SLO are bisected
// (taking meeting them to be monotone in those replicas); a mix that costs
// more without the last pool than the cheapest found is passed over.
//
// Runs the search on `base` (its replicas are the plan's to choose; nothing
// is written: each fleet's summary only). Throws UsageError when base has no
// SLO (--slo, or a workload file's).
PlanResult plan_fleet(const SimRunSettings& base, const PlanSettings& settings,
                      const std::atomic<bool>& interrupted, std::ostream& log);

}  // namespace tokenscope::session
