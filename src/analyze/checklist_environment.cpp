// Validity before verdicts (docs/check.md "Environment"): what differed
// between the two runs' environments — the machine, its clock source, the
// CPU pressure and steal every process felt, the CPU other processes took,
// the server's identity and settings as it described itself — judged before
// the items, as a reason to distrust the comparison rather than as the
// candidate's regression.
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "analyze/checklist_items.h"
#include "analyze/checklist_util.h"
#include "rundir/readers.h"

namespace tokenscope::analyze {

namespace {

std::string env_text(const nlohmann::json* v) {
  if (!v || v->is_null()) return "";
  return v->is_string() ? v->get<std::string>() : v->dump();
}

double env_mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// The cores a run's other processes took: the host's busy share of its CPUs
// less the server process's CPU (both sampled by bench: --server-pid);
// nullopt without either.
std::optional<double> other_processes_cores(const RunData& run) {
  const auto* cpus = rundir::json_path(run.run_json, {"settings", "effective", "host", "cpus"});
  const detail::Series util = detail::find_series(run, "host_cpu_utilization");
  const detail::Series server = detail::counter_rate(detail::find_series(run, "process_cpu_seconds"));
  if (!cpus || !cpus->is_number() || util.empty() || server.empty()) return std::nullopt;
  return env_mean(util.v) * cpus->get<double>() - env_mean(server.v);
}

}  // namespace

std::vector<EnvironmentDifference> compare_environments(const RunData& base, const RunData& cand,
                                                        const Thresholds& t) {
  std::vector<EnvironmentDifference> out;
  // Settings both runs recorded (a key only one has tells nothing: sim has no host).
  const auto setting = [&](const std::string& what, std::initializer_list<const char*> path,
                           const std::string& note) {
    const std::string b = env_text(rundir::json_path(base.run_json, path));
    const std::string c = env_text(rundir::json_path(cand.run_json, path));
    if (!b.empty() && !c.empty() && b != c) out.push_back({what, b, c, note});
  };
  const auto virtual_clock = [](const RunData& r) {
    const auto* v = rundir::json_path(r.run_json, {"clock", "virtual"});
    return v && v->is_boolean() && v->get<bool>();
  };
  if (base.run_json.is_object() && cand.run_json.is_object() && virtual_clock(base) != virtual_clock(cand))
    out.push_back({"clock", virtual_clock(base) ? "virtual (sim)" : "wall clock",
                   virtual_clock(cand) ? "virtual (sim)" : "wall clock",
                   "a simulated run against a measured one: their latencies are not the same kind"});
  setting("tokenscope version", {"tool", "version"}, "the client that measured differs");
  setting("host", {"settings", "effective", "host", "hostname"},
          "the runs were measured on different machines");
  setting("host CPUs", {"settings", "effective", "host", "cpus"}, "");
  setting("host kernel", {"settings", "effective", "host", "kernel"}, "");
  setting(
      "clock source", {"settings", "effective", "host", "clocksource"},
      "timestamps come from different clock sources (tsc, hpet, a hypervisor's): their cost and resolution "
      "differ");
  for (const auto& [what, key] :
       {std::pair{"server engine", "engine"}, std::pair{"server version", "version"},
        std::pair{"server batch cap", "max_batch"}, std::pair{"server context length", "n_ctx"}})
    setting(what, {"settings", "effective", "target", "server_info", key},
            "as the server described itself (run.json settings.effective.target.server_info)");
  setting("model", {"settings", "effective", "target", "model"}, "");
  // Every process's CPU pressure and the hypervisor's steal: the machine's, not the server's.
  const auto series_shift = [&](const char* name, const std::string& what, double tolerance,
                                const std::string& note) {
    const detail::Series b = detail::find_series(base, name), c = detail::find_series(cand, name);
    if (b.empty() || c.empty()) return;
    const Finding f = detail::block_shift_finding(what, "share", detail::blocked(b), detail::blocked(c),
                                                  tolerance, Worse::kHigher, t.confidence);
    if (f.verdict != Verdict::kRegressed && f.verdict != Verdict::kImproved) return;
    out.push_back(
        {what, detail::pct(env_mean(b.v)), detail::pct(env_mean(c.v)),
         fmt::format("{} (mean over the run; change {:+.3f}, {:g}% interval [{:.3f}, {:.3f}], tolerance "
                     "{:g})",
                     note, *f.change, t.confidence * 100, *f.ci_low, *f.ci_high, tolerance)});
  };
  series_shift(
      "host_cpu_pressure_some", "host CPU pressure", t.psi_tolerance,
      "the share of time some runnable task waited for a CPU on the whole machine (/proc/pressure/cpu): "
      "any process's, the client's too");
  series_shift("host_cpu_steal", "host CPU steal", 0.02,
               "the share of CPU time a hypervisor gave to other guests");
  if (const auto b = other_processes_cores(base), c = other_processes_cores(cand);
      b && c && std::abs(*c - *b) > 0.5)
    out.push_back(
        {"other processes' CPU", fmt::format("{:.2f} cores", *b), fmt::format("{:.2f} cores", *c),
         "the host's busy CPUs less the server process's (--server-pid), mean over the run; more than "
         "half a core apart"});
  return out;
}

}  // namespace tokenscope::analyze
