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
  // A fleet (engine/fleet.h, docs/engine.md "Fleets"): this many identical
  // replicas behind a router; 1: one engine.
  std::uint32_t replicas = 1;
  // --pools FILE (engine/pools.h): replicas of several GPUs and TP degrees
  // behind the router, in place of --replicas.
  std::string pools_file;
  // The replicas of each pool of pools_file in place of its counts (sim
  // --plan over pools, session/sim_plan.h); a pool of 0 is left out. Empty:
  // the file's counts.
  std::vector<std::uint32_t> pool_counts;
  std::string router = "round-robin";
  double router_load_bound = 1.25;
  // --router-weights: "speed" (pools: load-aware routers weigh each
  // replica's load by its speed, RouterSettings::speed_weighted) or "equal".
  std::string router_weights = "speed";
  // Prefill/decode disaggregation (engine/fleet.h Disaggregation, docs/engine.md
  // "Disaggregated prefill"): this many prefill and decode replicas, in place
  // of --replicas (0: off); --router routes to the prefill replicas,
  // decode_router to the decode ones; the KV goes over each prefill
  // replica's link (GB/s, 10^9 bytes a second; one-way latency).
  std::uint32_t prefill_replicas = 0;
  std::uint32_t decode_replicas = 0;
  std::string decode_router = "least-loaded";
  double kv_link_gb_s = 50.0;
  double kv_link_latency_us = 10.0;
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
