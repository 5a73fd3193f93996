#include "session/sim_plan.h"

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "engine/pools.h"

namespace tokenscope::session {

namespace {

// Every SLO of the fleet's summary met (false when it has none). A class
// with an SLO and no request in the run (a share too small for a short run)
// has nothing to meet: no number of replicas would change it.
bool passes(const nlohmann::json& summary) {
  const auto it = summary.find("slo_attainment");
  if (it == summary.end() || !it->is_object() || it->empty()) return false;
  bool any = false;
  for (const auto& [cls, a] : it->items()) {
    if (a.value("requests", 0) == 0) continue;
    any = true;
    if (!a.value("pass", false)) return false;
  }
  return any;
}

nlohmann::json p99(const nlohmann::json& summary, const char* key) {
  const auto it = summary.find(key);
  if (it == summary.end() || !it->is_object() || !it->contains("p99")) return nullptr;
  return (*it)["p99"];
}

void check_plan_settings(const SimRunSettings& base, const PlanSettings& settings) {
  if (settings.max_replicas < 1 || settings.max_replicas > 4096)
    throw UsageError(fmt::format("--plan-max-replicas {}: expected 1 to 4096", settings.max_replicas));
  if (!(settings.gpu_cost_per_hour >= 0)) throw UsageError("--gpu-cost-per-hour: expected a price >= 0");
  if (base.slo.empty() && base.workload_file.empty())
    throw UsageError(
        "--plan: the fleet must meet an SLO: give --slo (e.g. --slo ttft_ms=500,tpot_ms=50) or a "
        "workload file with SLOs");
  if (!base.engine.perturb.items.empty())
    throw UsageError("--plan and --perturb cannot be combined yet (the perturbations act on one engine)");
  if (base.coupling) throw UsageError("--plan and --coupling cannot be combined");
}

// One fleet of the search, its summary only.
SimRunResult run_candidate(SimRunSettings one, const std::atomic<bool>& interrupted) {
  one.out.clear();
  one.finish = Finishers{};
  one.cache = false;
  one.steps = false;
  one.samples = false;
  one.plan = nullptr;
  std::ostringstream quiet;
  return run_sim(one, interrupted, quiet);
}

void require_slo(const SimRunResult& r) {
  if (!r.summary.contains("slo_attainment") || r.summary["slo_attainment"].empty())
    throw UsageError(
        "--plan: the fleet must meet an SLO: give --slo (e.g. --slo ttft_ms=500,tpot_ms=50) or a "
        "workload file with SLOs");
}

std::string mix_text(const std::vector<std::string>& names, const std::vector<std::uint32_t>& counts) {
  std::string out;
  for (std::size_t k = 0; k < counts.size(); ++k)
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", names[k], counts[k]);
  return out;
}

PlanResult plan_pools(const SimRunSettings& base, const PlanSettings& settings,
                      const std::atomic<bool>& interrupted, std::ostream& log) {
  if (settings.gpu_cost_per_hour > 0)
    throw UsageError(
        "--gpu-cost-per-hour and --pools: each pool's gpu-cost-per-hour prices it (set it in the pools "
        "file)");
  const std::vector<engine::PoolSpec> pools = engine::load_pools(base.fleet.pools_file);
  const std::size_t k = pools.size();
  PlanResult result;
  result.priced = true;
  for (const auto& p : pools) {
    result.pool_names.push_back(p.name);
    result.pool_max.push_back(p.count);
    result.priced = result.priced && p.gpu_cost_per_hour.has_value();
  }
  std::uint64_t mixes = 1;
  for (std::size_t j = 0; j + 1 < k; ++j) mixes *= pools[j].count + 1ULL;
  if (mixes > 4096)
    throw UsageError(fmt::format(
        "--plan with --pools: the counts of all the pools but the last give {} mixes to try, at most 4,096 "
        "(lower the counts in {})",
        mixes, base.fleet.pools_file));
  const auto gpus_of = [&](const std::vector<std::uint32_t>& c) {
    std::uint32_t g = 0;
    for (std::size_t j = 0; j < k; ++j) g += c[j] * pools[j].tensor_parallel;
    return g;
  };
  const auto cost_of = [&](const std::vector<std::uint32_t>& c) {
    if (!result.priced) return static_cast<double>(gpus_of(c));
    double cost = 0;
    for (std::size_t j = 0; j < k; ++j) cost += c[j] * pools[j].tensor_parallel * *pools[j].gpu_cost_per_hour;
    return cost;
  };
  std::map<std::vector<std::uint32_t>, PlanPoint> tried;
  const auto evaluate = [&](const std::vector<std::uint32_t>& c) -> bool {
    if (const auto it = tried.find(c); it != tried.end()) return it->second.pass;
    if (interrupted.load()) {
      result.interrupted = true;
      return false;
    }
    SimRunSettings one = base;
    one.fleet.pool_counts = c;
    const SimRunResult r = run_candidate(std::move(one), interrupted);
    if (r.report.interrupted) {
      result.interrupted = true;
      return false;
    }
    if (tried.empty()) {
      require_slo(r);
      result.slos = r.slos;
    }
    PlanPoint p;
    p.counts = c;
    for (const auto n : c) p.replicas += n;
    p.gpus = gpus_of(c);
    if (result.priced) p.cost_per_hour = cost_of(c);
    p.pass = passes(r.summary);
    p.summary = r.summary;
    p.cpu_s = r.cpu_s;
    log << fmt::format("plan: {} ({} GPUs{}): {} ({:.2f} CPU s)\n", mix_text(result.pool_names, c), p.gpus,
                       p.cost_per_hour ? fmt::format(", ${:.2f}/hour", *p.cost_per_hour) : std::string(),
                       p.pass ? "meets every SLO" : "misses", p.cpu_s);
    const bool pass = p.pass;
    tried[c] = std::move(p);
    return pass;
  };
  std::optional<double> best_cost;
  double best_goodput = 0;
  std::vector<std::uint32_t> v(k, 0);  // the mix of all but the last pool, as a mixed-radix counter
  for (std::uint64_t m = 0; m < mixes && !result.interrupted; ++m) {
    std::uint64_t rest = m;
    bool any = false;
    for (std::size_t j = 0; j + 1 < k; ++j) {
      v[j] = static_cast<std::uint32_t>(rest % (pools[j].count + 1ULL));
      rest /= pools[j].count + 1ULL;
      any = any || v[j] > 0;
    }
    v[k - 1] = 0;
    if (best_cost && cost_of(v) > *best_cost) continue;  // dearer before the last pool adds any
    // The fewest of the last pool with this mix: none pass if its most does not.
    const std::int64_t lo = any ? 0 : 1;
    std::int64_t pass = pools[k - 1].count;
    v[k - 1] = static_cast<std::uint32_t>(pass);
    if (!evaluate(v)) continue;
    std::int64_t fail = lo - 1;
    while (pass - fail > 1 && !result.interrupted) {
      const std::int64_t mid = fail + (pass - fail) / 2;
      v[k - 1] = static_cast<std::uint32_t>(mid);
      if (evaluate(v))
        pass = mid;
      else if (!result.interrupted)
        fail = mid;
    }
    if (result.interrupted) break;
    v[k - 1] = static_cast<std::uint32_t>(pass);
    const double cost = cost_of(v);
    const double goodput = tried[v].summary.value("goodput_rps", 0.0);
    if (!best_cost || cost < *best_cost || (cost == *best_cost && goodput > best_goodput)) {
      best_cost = cost;
      best_goodput = goodput;
      result.cheapest = v;
    }
  }
  if (result.interrupted) result.cheapest.reset();  // an interrupted search proved nothing
  for (auto& [c, p] : tried) result.points.push_back(std::move(p));
  // Cheapest first (then the fewest GPUs): the table and the report's charts by GPUs.
  std::stable_sort(result.points.begin(), result.points.end(), [](const PlanPoint& a, const PlanPoint& b) {
    return std::pair(a.cost_per_hour.value_or(0.0), a.gpus) <
           std::pair(b.cost_per_hour.value_or(0.0), b.gpus);
  });
  // Monotone as far as was tried: with the other pools alike, no miss with more of a pool than a pass.
  for (const auto& a : result.points)
    for (const auto& b : result.points) {
      if (!a.pass || b.pass) continue;
      bool at_least = true;
      for (std::size_t j = 0; j < k; ++j) at_least = at_least && b.counts[j] >= a.counts[j];
      if (at_least) result.monotone = false;
    }
  if (!result.pool_names.empty()) result.gpus_per_replica = 0;  // pools differ
  return result;
}

}  // namespace

PlanResult plan_fleet(const SimRunSettings& base, const PlanSettings& settings,
                      const std::atomic<bool>& interrupted, std::ostream& log) {
  check_plan_settings(base, settings);
  if (!base.fleet.pools_file.empty()) return plan_pools(base, settings, interrupted, log);
  PlanResult result;
  std::map<std::uint32_t, PlanPoint> tried;
  const auto evaluate = [&](std::uint32_t n) -> bool {
    if (const auto it = tried.find(n); it != tried.end()) return it->second.pass;
    if (interrupted.load()) {
      result.interrupted = true;
      return false;
    }
    SimRunSettings one = base;
    one.fleet.replicas = n;
    const SimRunResult r = run_candidate(std::move(one), interrupted);
    if (r.report.interrupted) {
      result.interrupted = true;
      return false;
    }
    if (tried.empty()) require_slo(r);
    result.gpus_per_replica = r.engine.tensor_parallel;
    PlanPoint p;
    p.replicas = n;
    p.gpus = n * r.engine.tensor_parallel;
    p.pass = passes(r.summary);
    p.summary = r.summary;
    p.cpu_s = r.cpu_s;
    if (tried.empty()) result.slos = r.slos;
    log << fmt::format("plan: {:>4} replicas ({} GPUs): {} ({:.2f} CPU s)\n", n, p.gpus,
                       p.pass ? "meets every SLO" : "misses", p.cpu_s);
    tried[n] = std::move(p);
    return tried[n].pass;
  };
  // Doubling, then bisection between the last failure and the first pass.
  std::uint32_t fail = 0, pass = 0;
  for (std::uint32_t n = 1;; n = std::min(settings.max_replicas, n * 2)) {
    if (evaluate(n)) {
      pass = n;
      break;
    }
    if (result.interrupted) break;
    fail = n;
    if (n == settings.max_replicas) break;
  }
  while (pass > 0 && pass - fail > 1 && !result.interrupted) {
    const std::uint32_t mid = fail + (pass - fail) / 2;
    if (evaluate(mid))
      pass = mid;
    else if (!result.interrupted)
      fail = mid;
  }
  // An interrupted search proved nothing about the fleets it did not settle.
  if (pass > 0 && !result.interrupted) result.smallest = pass;
  for (auto& [n, p] : tried) result.points.push_back(std::move(p));
  // Monotone as far as was tried: no failure above a pass.
  std::uint32_t lowest_pass = 0;
  for (const auto& p : result.points)
    if (p.pass && lowest_pass == 0) lowest_pass = p.replicas;
  for (const auto& p : result.points)
    if (!p.pass && lowest_pass > 0 && p.replicas > lowest_pass) result.monotone = false;
  return result;
}

nlohmann::json PlanResult::to_json(const PlanSettings& settings, const SimRunSettings& base) const {
  nlohmann::json points_json = nlohmann::json::array();
  for (const auto& p : points) {
    nlohmann::json classes = nlohmann::json::object();
    if (const auto it = p.summary.find("slo_attainment"); it != p.summary.end() && it->is_object())
      for (const auto& [cls, a] : it->items())
        classes[cls] = {{"pass", a.value("pass", false)}, {"met_fraction", a.value("met_fraction", 0.0)}};
    nlohmann::json counts = nullptr;
    if (!pool_names.empty()) {
      counts = nlohmann::json::object();
      for (std::size_t k = 0; k < p.counts.size(); ++k) counts[pool_names[k]] = p.counts[k];
    }
    nlohmann::json cost = nullptr;
    if (p.cost_per_hour)
      cost = *p.cost_per_hour;
    else if (pool_names.empty() && settings.gpu_cost_per_hour > 0)
      cost = p.gpus * settings.gpu_cost_per_hour;
    points_json.push_back({{"replicas", p.replicas},
                           {"counts", counts},
                           {"gpus", p.gpus},
                           {"cost_per_hour", cost},
                           {"pass", p.pass},
                           {"goodput_rps", p.summary.value("goodput_rps", 0.0)},
                           {"request_throughput_rps", p.summary.value("request_throughput_rps", 0.0)},
                           {"requests_failed", p.summary.value("requests_failed", 0)},
                           {"requests_total", p.summary.value("requests_total", 0)},
                           {"ttft_p99_ms", p99(p.summary, "ttft_ms")},
                           {"tpot_p99_ms", p99(p.summary, "tpot_ms")},
                           {"e2e_p99_ms", p99(p.summary, "e2e_ms")},
                           {"slo_attainment", classes},
                           {"cpu_s", p.cpu_s}});
  }
  std::vector<std::string> slo_texts;
  for (const auto& s : base.slo) slo_texts.push_back(s.text);
  // The SLOs the fleets were held to, per class: --slo's and the workload file's.
  nlohmann::json applied = nlohmann::json::object();
  for (const auto& [cls, slo] : slos) {
    nlohmann::json t = {{"percentile", slo.percentile}};
    if (slo.ttft_ms) t["ttft_ms"] = *slo.ttft_ms;
    if (slo.tpot_ms) t["tpot_ms"] = *slo.tpot_ms;
    if (slo.e2e_ms) t["e2e_ms"] = *slo.e2e_ms;
    if (slo.ttfo_ms) t["ttfo_ms"] = *slo.ttfo_ms;
    applied[cls.empty() ? "default" : cls] = t;
  }
  if (!pool_names.empty()) {
    nlohmann::json pools = nlohmann::json::array();
    for (std::size_t k = 0; k < pool_names.size(); ++k)
      pools.push_back({{"name", pool_names[k]}, {"max_count", pool_max[k]}});
    nlohmann::json choice = nullptr;
    std::uint32_t gpus = 0;
    std::optional<double> cost;
    if (cheapest) {
      choice = nlohmann::json::object();
      for (std::size_t k = 0; k < cheapest->size(); ++k) choice[pool_names[k]] = (*cheapest)[k];
      for (const auto& p : points)
        if (p.counts == *cheapest) {
          gpus = p.gpus;
          cost = p.cost_per_hour;
        }
    }
    std::uint32_t replicas = 0;
    if (cheapest)
      for (const auto n : *cheapest) replicas += n;
    return {{"router", base.fleet.router},
            {"slos", applied},
            {"pools", pools},
            {"pools_file", base.fleet.pools_file},
            {"objective", priced ? "cost_per_hour" : "gpus"},
            {"gpu_cost_per_hour", nullptr},
            {"slo", slo_texts},
            {"search",
             "for each mix of all the pools but the last (each up to its count in the file), the fewest "
             "replicas of the last pool meeting every SLO, bisected; mixes dearer than the cheapest found "
             "passed over"},
            {"monotone", monotone},
            {"interrupted", interrupted},
            {"cheapest_counts", choice},
            {"smallest_replicas", cheapest ? nlohmann::json(replicas) : nlohmann::json(nullptr)},
            {"smallest_gpus", cheapest ? nlohmann::json(gpus) : nlohmann::json(nullptr)},
            {"cheapest_cost_per_hour", cost ? nlohmann::json(*cost) : nlohmann::json(nullptr)},
            {"points", points_json}};
  }
  return {
      {"router", base.fleet.router},
      {"slos", applied},
      {"max_replicas", settings.max_replicas},
      {"gpus_per_replica", gpus_per_replica},
      {"gpu_cost_per_hour",
       settings.gpu_cost_per_hour > 0 ? nlohmann::json(settings.gpu_cost_per_hour) : nlohmann::json(nullptr)},
      {"slo", slo_texts},
      {"search", "replicas doubled from 1 until a fleet met every SLO, then bisected"},
      {"monotone", monotone},
      {"interrupted", interrupted},
      {"smallest_replicas", smallest ? nlohmann::json(*smallest) : nlohmann::json(nullptr)},
      {"smallest_gpus", smallest ? nlohmann::json(*smallest * gpus_per_replica) : nlohmann::json(nullptr)},
      {"points", points_json}};
}

}  // namespace tokenscope::session
