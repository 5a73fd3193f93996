// `tokenscope sim` as a library call: the workload through the simulator in
// virtual time, the run directory written as the run goes (requests.jsonl,
// steps.jsonl, samples.jsonl, then run.json), the run cache from memory, and
// the finishers (report page, history). Nothing is printed but warnings on
// `log`; the caller prints the result (src/cli/sim_command.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyze/coupling.h"
#include "bench/bench_settings.h"
#include "engine/engine.h"
#include "engine/engine_options.h"
#include "engine/fleet_setup.h"
#include "engine/simulator.h"
#include "session/finishers.h"
#include "workload/workload.h"
#include "workload/workload_spec.h"

namespace tokenscope::session {

struct SimRunSettings {
  workload::WorkloadSpec workload;
  // A YAML workload file (bench's format, docs/bench.md) instead: its
  // classes, lengths, images and audio, tenants and SLOs; sessions (turns)
  // need bench's closed loop and are refused.
  std::string workload_file;
  // --coupling: after the mix, each task class alone at its own arrival
  // times (OUT/coupling/CLASS/, needs --out) and run.json "coupling"
  // (analyze/coupling.h).
  bool coupling = false;
  std::string only_class;  // the workload's requests of this class only ("" : all)
  engine::EngineOptions engine;
  // A fleet (engine/fleet_setup.h, docs/engine.md "Fleets"): --replicas,
  // --router, --pools, --prefill-replicas, ...; one engine by default.
  engine::FleetOptions fleet;
  // --slo (bench's grammar, bench/bench_settings.h): SLOs per class, or for
  // every class without one from the workload file; the summary's goodput
  // and attainment.
  std::vector<bench::SloSpec> slo;
  // sim --plan (session/sim_plan.h): the plan that chose this fleet, as
  // run.json "plan"; null: none.
  nlohmann::json plan;
  // Output: a run directory (empty: the summary only).
  std::string out;
  bool overwrite = false;          // replace the run already in `out`
  bool steps = true;               // steps.jsonl
  bool samples = true;             // samples.jsonl
  double sample_interval_s = 1.0;  // virtual seconds between two samples
  bool cache = true;               // .tokenscope-cache at the end
  std::vector<std::string> tags;   // run.json "tags"
  Finishers finish;
};

struct SimRunResult {
  nlohmann::json summary;  // run.json "summary"
  engine::EngineSettings settings;
  engine::EffectiveEngine engine;
  engine::SimReport report;
  std::string workload_description;
  workload::ReadReport read_report;
  nlohmann::json perturbations = nlohmann::json::array();  // what was injected (run.json "perturbations")
  double cpu_s = 0.0;                                      // the process's CPU time over the run
  bool report_written = false;
  nlohmann::json coupling;  // --coupling: run.json "coupling"; null otherwise
  nlohmann::json
      fleet;  // --replicas > 1 or --pools: run.json "fleet" (the router, each replica); null otherwise
  std::uint32_t gpus = 1;  // the GPUs the run's engines hold (replicas x TP, summed over the pools)
  std::map<std::string, analyze::ClassLatencies> latencies;  // by class (with --coupling or only_class)
  std::map<std::string, Slo> slos;  // the SLOs the summary held the requests to, by class ("" : default)
};

// Throws UsageError for bad settings or input, IoError when the run
// directory cannot be written. *interrupted ends the run early: the results
// so far are written, no run cache, report.interrupted is set.
SimRunResult run_sim(const SimRunSettings& settings, const std::atomic<bool>& interrupted, std::ostream& log);

// run.json's "requested" settings of a sim run (the options as given).
nlohmann::json requested_settings(const SimRunSettings& settings);

}  // namespace tokenscope::session
