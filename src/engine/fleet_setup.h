// A fleet as its options give it (docs/engine.md "Fleets"): the options
// that `sim`, `serve` and bench's in-process server share (--replicas,
// --router, --pools, --prefill-replicas, ...), checked and resolved once
// into the replicas' engines, the router's settings and the split, from
// which each command builds its Fleet.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/catalog.h"
#include "engine/engine.h"
#include "engine/fleet.h"
#include "engine/pools.h"

namespace tokenscope::engine {

struct FleetOptions {
  // --replicas: identical replicas behind the router; 1: one engine.
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
  // Prefill/decode disaggregation (Disaggregation, docs/engine.md
  // "Disaggregated prefill"): this many prefill and decode replicas, in
  // place of --replicas (0: off); --router routes to the prefill replicas,
  // decode_router to the decode ones; the KV goes over each prefill
  // replica's link (GB/s, 10^9 bytes a second; one-way latency).
  std::uint32_t prefill_replicas = 0;
  std::uint32_t decode_replicas = 0;
  std::string decode_router = "least-loaded";
  double kv_link_gb_s = 50.0;
  double kv_link_latency_us = 10.0;

  // More than one engine, or pools (checked by resolve_fleet).
  bool fleet() const {
    return replicas > 1 || !pools_file.empty() || prefill_replicas > 0 || decode_replicas > 0;
  }
};

// The options checked and resolved.
struct FleetSetup {
  std::uint32_t replicas = 1;                 // over every pool, or both sides of a split
  std::uint32_t gpus = 1;                     // replicas x TP, summed over the pools
  std::vector<PoolSpec> pools;                // empty: replicas alike
  std::vector<EffectiveEngine> pool_engines;  // each pool's engine
  std::optional<Disaggregation> pd;
  RouterSettings router;
  bool fleet() const { return replicas > 1 || !pools.empty(); }
  // Each replica's engine and settings (base: the replicas of a fleet without pools).
  std::vector<ReplicaSpec> specs(const EffectiveEngine& base_eff, const EngineSettings& base) const;
  // The fleet, its events to observer, each replica's cost model from its
  // settings; disaggregated when pd is set.
  std::unique_ptr<Fleet> make(const EffectiveEngine& base_eff, const EngineSettings& base,
                              EngineObserver* observer) const;
  // run.json's "pools" (null without pools) and the fleet's price per hour
  // (null unless every pool has a price).
  nlohmann::json pools_json() const;
  nlohmann::json cost_per_hour() const;
};

// Checks the options (UsageError naming the option; InputError naming the
// pools file's line) and resolves each pool's engine on its GPU and TP
// degree. router_seed: power-of-two's choices.
FleetSetup resolve_fleet(const FleetOptions& o, const EngineSettings& settings, const EffectiveEngine& eff,
                         const Catalog& catalog, std::uint64_t router_seed);

// run.json fleet.disaggregation: the split, the link, and what the transfers took.
nlohmann::json disaggregation_json(const Fleet& fleet, const FleetOptions& o);

// The options as given, for run.json's "requested" settings (null for one engine).
nlohmann::json requested_json(const FleetOptions& o);

}  // namespace tokenscope::engine
