#include "analyze/fidelity.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "rundir/readers.h"
#include "rundir/run_files.h"

namespace tokenscope::analyze {

namespace {

nlohmann::json summary_of(const std::filesystem::path& dir) {
  const auto file = dir / "run.json";
  const nlohmann::json j = rundir::read_json_file(file);  // bounded size and depth
  if (!j.contains("summary") || !j["summary"].is_object())
    throw InputError(file.string(), 0, "summary", "missing (expected a finished run's summary)");
  return j["summary"];
}

double value_at(const nlohmann::json& j, const char* metric, const char* key) {
  const auto* v = rundir::json_path(j, {metric, key});
  return v && v->is_number() ? v->get<double>() : NAN;
}

double value_at(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json compare(double real, double repeat, double sim, double defaults, double target) {
  const double err = sim / real - 1.0, spread = repeat / real - 1.0, derr = defaults / real - 1.0;
  nlohmann::json o = {{"real", num(real)},
                      {"real_repeat", num(repeat)},
                      {"sim", num(sim)},
                      {"rel_error", num(err)},
                      {"real_spread", num(spread)},
                      {"defaults", num(defaults)},
                      {"defaults_rel_error", num(derr)},
                      {"target", target}};
  o["within_target"] = std::isfinite(err) ? nlohmann::json(std::abs(err) <= target) : nlohmann::json(nullptr);
  o["within_noise"] = std::isfinite(err) && std::isfinite(spread)
                          ? nlohmann::json(std::abs(err) <= std::abs(spread))
                          : nlohmann::json(nullptr);
  return o;
}

struct Times {
  double ttft_ms = NAN, e2e_ms = NAN;
};

std::unordered_map<std::uint64_t, Times> times_by_id(const std::filesystem::path& dir,
                                                     const std::vector<std::uint64_t>* ids = nullptr) {
  std::unordered_map<std::uint64_t, Times> out;
  rundir::RequestsReader reader(dir / "requests.jsonl", rundir::BadLines::kFail);
  RequestRecord r;
  while (reader.next(r)) {
    if (r.outcome != Outcome::kOk || r.warmup || r.t_send < 0 || r.t_first_token < r.t_send) continue;
    Times t;
    t.ttft_ms = static_cast<double>(r.t_first_token - r.t_send) / 1e6;
    if (r.t_last_token >= r.t_send) t.e2e_ms = static_cast<double>(r.t_last_token - r.t_send) / 1e6;
    if (ids && !ids->empty()) {
      if (r.id >= ids->size()) continue;
      out[(*ids)[r.id]] = t;
    } else {
      out[r.id] = t;
    }
  }
  return out;
}

// The mean of |other/real − 1| over the requests both completed; its count.
std::pair<double, std::size_t> mape(const std::unordered_map<std::uint64_t, Times>& real,
                                    const std::unordered_map<std::uint64_t, Times>& other,
                                    double Times::*field) {
  double sum = 0;
  std::size_t n = 0;
  for (const auto& [id, t] : real) {
    const auto it = other.find(id);
    if (it == other.end() || !(t.*field > 0) || !std::isfinite(it->second.*field)) continue;
    sum += std::abs(it->second.*field / t.*field - 1.0);
    ++n;
  }
  return {n ? sum / static_cast<double>(n) : NAN, n};
}

}  // namespace

nlohmann::json fidelity(const FidelityRuns& runs) {
  const nlohmann::json real = summary_of(runs.real), repeat = summary_of(runs.real_repeat),
                       sim = summary_of(runs.sim);
  const nlohmann::json defaults =
      runs.sim_defaults.empty() ? nlohmann::json::object() : summary_of(runs.sim_defaults);
  nlohmann::json out = {{"kind", "fidelity"},
                        {"runs",
                         {{"real", runs.real.filename().string()},
                          {"real_repeat", runs.real_repeat.filename().string()},
                          {"sim", runs.sim.filename().string()},
                          {"sim_defaults", runs.sim_defaults.empty()
                                               ? nlohmann::json(nullptr)
                                               : nlohmann::json(runs.sim_defaults.filename().string())}}}};
  std::size_t within = 0, total = 0;
  for (const char* metric : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    nlohmann::json m = nlohmann::json::object();
    for (const char* p : {"p50", "p90", "p99"}) {
      const double target = std::string(p) == "p50" ? 0.05 : 0.10;
      m[p] = compare(value_at(real, metric, p), value_at(repeat, metric, p), value_at(sim, metric, p),
                     value_at(defaults, metric, p), target);
      total += 1;
      within += m[p]["within_target"] == true;
    }
    out[metric] = m;
  }
  nlohmann::json tp = nlohmann::json::object();
  for (const char* key : {"output_token_throughput_tps", "request_throughput_rps"}) {
    tp[key] = compare(value_at(real, key), value_at(repeat, key), value_at(sim, key), value_at(defaults, key),
                      0.05);
    total += 1;
    within += tp[key]["within_target"] == true;
  }
  out["throughput"] = tp;
  // Per request, as BLIS reports it.
  const auto r = times_by_id(runs.real), rr = times_by_id(runs.real_repeat),
             s = times_by_id(runs.sim, &runs.sim_ids);
  const auto d = runs.sim_defaults.empty() ? decltype(s){} : times_by_id(runs.sim_defaults, &runs.sim_ids);
  nlohmann::json mj = nlohmann::json::object();
  for (const auto& [name, field] :
       {std::pair{"ttft_ms", &Times::ttft_ms}, std::pair{"e2e_ms", &Times::e2e_ms}}) {
    const auto [sim_mape, n] = mape(r, s, field);
    mj[name] = {{"sim", num(sim_mape)},
                {"real_spread", num(mape(r, rr, field).first)},
                {"defaults", num(d.empty() ? NAN : mape(r, d, field).first)},
                {"requests", n}};
  }
  out["mape"] = mj;
  out["within_target"] = {{"count", within}, {"of", total}};
  return out;
}

}  // namespace tokenscope::analyze
