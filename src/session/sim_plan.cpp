#include "session/sim_plan.h"

#include <algorithm>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"

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

}  // namespace

PlanResult plan_fleet(const SimRunSettings& base, const PlanSettings& settings,
                      const std::atomic<bool>& interrupted, std::ostream& log) {
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
  PlanResult result;
  std::map<std::uint32_t, PlanPoint> tried;
  const auto evaluate = [&](std::uint32_t n) -> bool {
    if (const auto it = tried.find(n); it != tried.end()) return it->second.pass;
    if (interrupted.load()) {
      result.interrupted = true;
      return false;
    }
    SimRunSettings one = base;
    one.replicas = n;
    one.out.clear();
    one.finish = Finishers{};
    one.cache = false;
    one.steps = false;
    one.samples = false;
    one.plan = nullptr;
    std::ostringstream quiet;
    const SimRunResult r = run_sim(one, interrupted, quiet);
    if (r.report.interrupted) {
      result.interrupted = true;
      return false;
    }
    if (tried.empty() && (!r.summary.contains("slo_attainment") || r.summary["slo_attainment"].empty()))
      throw UsageError(
          "--plan: the fleet must meet an SLO: give --slo (e.g. --slo ttft_ms=500,tpot_ms=50) or a "
          "workload file with SLOs");
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
    points_json.push_back({{"replicas", p.replicas},
                           {"gpus", p.gpus},
                           {"cost_per_hour", settings.gpu_cost_per_hour > 0
                                                 ? nlohmann::json(p.gpus * settings.gpu_cost_per_hour)
                                                 : nlohmann::json(nullptr)},
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
  return {
      {"router", base.router},
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
