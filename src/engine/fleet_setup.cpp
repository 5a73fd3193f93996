#include "engine/fleet_setup.h"

#include <fmt/format.h>

#include <numeric>

#include "core/clock.h"
#include "core/error.h"
#include "core/stats.h"
#include "engine/engine_options.h"

namespace tokenscope::engine {

// Long by nature: every check of the fleet options, in the order a user meets them.
FleetSetup resolve_fleet(const FleetOptions& o, const EngineSettings& settings, const EffectiveEngine& eff,
                         const Catalog& catalog, std::uint64_t router_seed) {
  FleetSetup f;
  if (o.replicas == 0 || o.replicas > 4096) throw UsageError("--replicas: expected 1 to 4096");
  // Heterogeneous pools: each resolved on its GPU and TP degree.
  if (!o.pools_file.empty()) {
    if (o.replicas != 1) throw UsageError("--pools gives the replicas (each pool's count): drop --replicas");
    if (settings.profile)
      throw UsageError("--pools and --profile cannot be combined (a profile is measured on one GPU)");
    f.pools = load_pools(o.pools_file);
    if (!o.pool_counts.empty()) {
      if (o.pool_counts.size() != f.pools.size())
        throw UsageError(fmt::format("{}: {} pools, but {} counts were given", o.pools_file, f.pools.size(),
                                     o.pool_counts.size()));
      std::vector<PoolSpec> kept;
      for (std::size_t k = 0; k < f.pools.size(); ++k)
        if (o.pool_counts[k] > 0) {
          kept.push_back(f.pools[k]);
          kept.back().count = o.pool_counts[k];
        }
      if (kept.empty()) throw UsageError(fmt::format("{}: every pool's count is 0", o.pools_file));
      f.pools = std::move(kept);
    }
    for (std::size_t k = 0; k < f.pools.size(); ++k) {
      EngineSettings ps = settings;
      ps.gpu = f.pools[k].gpu;
      ps.tensor_parallel = f.pools[k].tensor_parallel;
      try {
        f.pool_engines.push_back(resolve_engine(ps, catalog));
      } catch (const UsageError& e) {
        throw InputError(o.pools_file, f.pools[k].line, fmt::format("pools[{}]", k), e.what());
      }
    }
  }
  f.replicas = o.replicas;
  if (!f.pools.empty()) {
    f.replicas = 0;
    for (const auto& p : f.pools) f.replicas += p.count;
  }
  if (o.prefill_replicas > 0 || o.decode_replicas > 0) {
    if (o.prefill_replicas == 0 || o.decode_replicas == 0)
      throw UsageError("--prefill-replicas and --decode-replicas go together (each at least 1)");
    if (o.replicas != 1)
      throw UsageError("--prefill-replicas and --decode-replicas make the fleet: drop --replicas");
    if (!f.pools.empty()) throw UsageError("--prefill-replicas and --pools cannot be combined yet");
    if (o.prefill_replicas > 4096 || o.decode_replicas > 4096)
      throw UsageError("--prefill-replicas, --decode-replicas: at most 4096 each");
    if (!(o.kv_link_gb_s >= 1e-3 && o.kv_link_gb_s <= 1e6))
      throw UsageError(
          fmt::format("--kv-link-gb-s: expected a bandwidth in [0.001, 1e6] GB/s, got {}", o.kv_link_gb_s));
    if (!(o.kv_link_latency_us >= 0 && o.kv_link_latency_us <= 1e9))
      throw UsageError(fmt::format("--kv-link-latency-us: expected a latency in [0, 1e9] us, got {}",
                                   o.kv_link_latency_us));
    f.pd.emplace();
    f.pd->prefill_replicas = o.prefill_replicas;
    f.pd->link_bytes_per_s = o.kv_link_gb_s * 1e9;
    f.pd->link_latency_ns = seconds_to_nanos(o.kv_link_latency_us * 1e-6);
    f.pd->decode_policy = parse_router_policy(o.decode_router);
    f.replicas = o.prefill_replicas + o.decode_replicas;
  }
  f.gpus = f.replicas * eff.tensor_parallel;
  if (!f.pools.empty()) {
    f.gpus = 0;
    for (const auto& p : f.pools) f.gpus += p.count * p.tensor_parallel;
  }
  if (f.fleet()) {
    f.router.policy = parse_router_policy(o.router);
    f.router.seed = router_seed;
    if (!(o.router_load_bound >= 1.0 && o.router_load_bound <= 1000.0))
      throw UsageError(
          fmt::format("--router-load-bound: expected a number in [1, 1000], got {}", o.router_load_bound));
    f.router.load_bound = o.router_load_bound;
    if (o.router_weights != "speed" && o.router_weights != "equal")
      throw UsageError(fmt::format("--router-weights: expected speed or equal, got '{}'", o.router_weights));
    f.router.speed_weighted = o.router_weights == "speed";
  }
  return f;
}

std::vector<ReplicaSpec> FleetSetup::specs(const EffectiveEngine& base_eff,
                                           const EngineSettings& base) const {
  std::vector<ReplicaSpec> out;
  if (pools.empty()) {
    for (std::uint32_t i = 0; i < replicas; ++i)
      out.push_back({.eff = base_eff, .settings = base, .pool = 0});
    return out;
  }
  for (std::size_t k = 0; k < pools.size(); ++k)
    for (std::uint32_t c = 0; c < pools[k].count; ++c) {
      ReplicaSpec r{.eff = pool_engines[k], .settings = base, .pool = k};
      r.settings.gpu = pools[k].gpu;
      r.settings.tensor_parallel = pools[k].tensor_parallel;
      out.push_back(std::move(r));
    }
  return out;
}

std::unique_ptr<Fleet> FleetSetup::make(const EffectiveEngine& base_eff, const EngineSettings& base,
                                        EngineObserver* observer) const {
  std::unique_ptr<Fleet> fleet;
  if (pools.empty())
    fleet = std::make_unique<Fleet>(
        replicas, base_eff, base, [&] { return make_cost_model(base, base_eff); }, observer, router);
  else
    fleet = std::make_unique<Fleet>(
        specs(base_eff, base), [](const ReplicaSpec& r) { return make_cost_model(r.settings, r.eff); },
        observer, router);
  if (pd) fleet->disaggregate(*pd);
  return fleet;
}

nlohmann::json FleetSetup::pools_json() const {
  if (pools.empty()) return nullptr;
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t k = 0; k < pools.size(); ++k) {
    const auto& p = pools[k];
    out.push_back({{"name", p.name},
                   {"gpu", pool_engines[k].gpu.name},
                   {"tensor_parallel", p.tensor_parallel},
                   {"count", p.count},
                   {"gpus", p.count * p.tensor_parallel},
                   {"gpu_cost_per_hour",
                    p.gpu_cost_per_hour ? nlohmann::json(*p.gpu_cost_per_hour) : nlohmann::json(nullptr)},
                   {"kv_cache_blocks_per_replica", pool_engines[k].num_gpu_blocks
                                                       ? nlohmann::json(*pool_engines[k].num_gpu_blocks)
                                                       : nlohmann::json(nullptr)}});
  }
  return out;
}

nlohmann::json FleetSetup::cost_per_hour() const {
  if (pools.empty()) return nullptr;
  double cost = 0.0;
  for (const auto& p : pools) {
    if (!p.gpu_cost_per_hour) return nullptr;
    cost += *p.gpu_cost_per_hour * p.count * p.tensor_parallel;
  }
  return cost;
}

// run.json fleet.disaggregation: the split, the link, and what the transfers took.
nlohmann::json disaggregation_json(const engine::Fleet& fleet, const FleetOptions& o) {
  std::vector<double> total_ms, wait_ms;
  double bytes = 0;
  std::uint64_t delivered = 0;
  for (const auto& x : fleet.transfers()) {
    bytes += x.bytes;
    total_ms.push_back(nanos_to_ms(x.arrive - x.ready));
    wait_ms.push_back(nanos_to_ms(x.start - x.ready));
    delivered += x.decode_replica >= 0;
  }
  const auto quantiles = [](std::vector<double>& v) {
    if (v.empty()) return nlohmann::json(nullptr);
    nlohmann::json q;
    q["mean"] = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    for (const auto& [name, p] : {std::pair{"p50", 0.5}, {"p99", 0.99}, {"max", 1.0}})
      q[name] = nearest_rank_select(v, p);
    return q;
  };
  nlohmann::json links = nlohmann::json::array();
  for (const double b : fleet.link_bytes()) links.push_back(b);
  return {{"prefill_replicas", o.prefill_replicas},
          {"decode_replicas", o.decode_replicas},
          {"decode_router", o.decode_router},
          {"kv_link_gb_s", o.kv_link_gb_s},
          {"kv_link_latency_us", o.kv_link_latency_us},
          {"transfers", fleet.transfers().size()},
          {"transfers_delivered", delivered},
          {"transfer_bytes", bytes},
          {"link_bytes", links},
          {"transfer_ms", quantiles(total_ms)},
          {"link_wait_ms", quantiles(wait_ms)}};
}

nlohmann::json requested_json(const FleetOptions& o) {
  if (!o.fleet()) return nullptr;
  nlohmann::json out = {
      {"replicas", o.replicas},
      {"pools", o.pools_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.pools_file)},
      {"router", o.router},
      {"router_load_bound", o.router_load_bound}};
  if (!o.pools_file.empty()) out["router_weights"] = o.router_weights;
  if (!o.pool_counts.empty()) out["pool_counts"] = o.pool_counts;  // a plan's choice
  // Only when given: the settings (and their hash) of fleets without it stay as they were.
  if (o.prefill_replicas > 0)
    out["disaggregation"] = {{"prefill_replicas", o.prefill_replicas},
                             {"decode_replicas", o.decode_replicas},
                             {"decode_router", o.decode_router},
                             {"kv_link_gb_s", o.kv_link_gb_s},
                             {"kv_link_latency_us", o.kv_link_latency_us}};
  return out;
}

}  // namespace tokenscope::engine
