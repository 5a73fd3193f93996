// The checklist's items 1 (latency model), 2 (SLO attainment), 3 (mixed-load coupling) and 4 (tail shift):
// what the requests' latencies say.
#include "analyze/checklist_items.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <boost/math/distributions/binomial.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <boost/sort/spreadsort/integer_sort.hpp>

#include "analyze/change_point.h"
#include "analyze/checklist_util.h"
#include "analyze/collectives_input.h"
#include "analyze/kernel_diff.h"
#include "analyze/quantization.h"
#include "analyze/regression.h"
#include "core/error.h"
#include "core/stats.h"
#include "probe/collectives.h"
#include "rundir/readers.h"

namespace tokenscope::analyze::detail {

// ----------------------------------------------------------------- 2 SLO
std::map<std::string, Slo> slos_of(const RunData& run, const Thresholds& t) {
  if (!t.slos.empty()) return t.slos;
  std::map<std::string, Slo> out;
  const auto* att = rundir::json_path(run.summary, {"slo_attainment"});
  if (!att || !att->is_object()) return out;
  for (const auto& [cls, c] : att->items()) {
    Slo s;
    if (c.contains("percentile") && c["percentile"].is_number()) s.percentile = c["percentile"].get<double>();
    for (const auto& [key, target] : {std::pair{"ttft_ms", &s.ttft_ms}, std::pair{"tpot_ms", &s.tpot_ms},
                                      std::pair{"e2e_ms", &s.e2e_ms}, std::pair{"ttfo_ms", &s.ttfo_ms}})
      if (const auto* v = rundir::json_path(c, {key, "target"}); v && v->is_number())
        *target = v->get<double>();
    if (!s.empty()) out[cls == "default" ? "" : cls] = s;
  }
  return out;
}

std::optional<std::uint16_t> class_index(const RunData& run, const std::string& name) {
  const auto& names = run.requests.class_names;
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name || (name.empty() && names[i] == "default")) return static_cast<std::uint16_t>(i);
  return std::nullopt;
}

// A class's requests against its SLO: those that met every target, of all
// (failures miss every target); and per metric the values (failed: +inf).
SloCounts slo_counts(const RunData& run, const std::string& cls, const Slo& slo) {
  SloCounts c;
  const auto idx = class_index(run, cls);
  if (!idx) return c;
  const RequestArrays& a = run.requests;
  const auto* from = rundir::json_path(run.summary, {"slo_latency_from"});
  const bool from_schedule = from && from->is_string() && *from == "schedule";
  constexpr double kInf = HUGE_VAL;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a.warmup[i] || a.task_class[i] != *idx) continue;
    if (i < a.cancel_planned.size() && a.cancel_planned[i]) continue;  // cancelled on purpose: no SLO
    ++c.requests;
    const bool ok = a.outcome[i] == Outcome::kOk;
    bool met = ok;
    const auto check = [&](const char* key, const std::optional<double>& target, double v) {
      if (!target) return;
      if (!ok || std::isnan(v)) v = key == std::string_view("tpot_ms") && ok ? 0.0 : kInf;
      c.values[key].push_back(v);
      met = met && v <= *target;
    };
    check("ttft_ms", slo.ttft_ms, from_schedule ? a.ttft_sched_ms(i) : a.ttft_ms(i));
    check("tpot_ms", slo.tpot_ms, a.tpot_ms(i));
    const double e2e = a.e2e_ms(i);
    const double lag = from_schedule ? a.ttft_sched_ms(i) - a.ttft_ms(i) : 0.0;
    check("e2e_ms", slo.e2e_ms, e2e + (std::isnan(lag) ? 0.0 : lag));
    check("ttfo_ms", slo.ttfo_ms, a.ttfo_ms(i) + (std::isnan(lag) ? 0.0 : lag));  // no answer: missed
    c.met += met ? 1 : 0;
    if (met) c.met_index.push_back(i);
  }
  return c;
}

std::vector<std::uint8_t> slo_met(const RunData& run, const std::map<std::string, Slo>& slos) {
  std::vector<std::uint8_t> out(run.requests.size(), 0);
  for (const auto& [cls, slo] : slos)
    for (const std::size_t i : slo_counts(run, cls, slo).met_index) out[i] = 1;
  return out;
}

namespace {

// A percentile against its target, on a sorted sample (values may be
// infinite: failures that count as over): LoadGen's early-stopping rule on
// the count over the target, the percentile with its exact interval. The
// note starts "K of N"; the caller says of what.
Finding percentile_target_finding(std::string metric, const std::vector<double>& v, double target, double q,
                                  double conf) {
  const std::uint64_t n = v.size();
  const auto over = static_cast<std::uint64_t>(v.end() - std::upper_bound(v.begin(), v.end(), target));
  Finding f;
  f.metric = std::move(metric);
  f.unit = "ms";
  f.change_unit = "ms";
  const double at = nearest_rank(v, q);
  if (std::isfinite(at)) f.value = f.change = at;
  const auto ci = quantile_confidence_interval(n, q, conf);
  if (ci.lower_rank && std::isfinite(v[*ci.lower_rank - 1])) f.ci_low = v[*ci.lower_rank - 1];
  if (ci.upper_rank && std::isfinite(v[*ci.upper_rank - 1])) f.ci_high = v[*ci.upper_rank - 1];
  f.threshold = fmt::format("target {:g} ms", target);
  if (q >= 1.0) {
    f.verdict = over == 0 ? Verdict::kPass : Verdict::kRegressed;
  } else if (early_stopping_pass(n, over, q, conf)) {
    f.verdict = Verdict::kPass;
  } else {
    // The opposite claim: more over the target than the percentile allows.
    boost::math::binomial_distribution<double> bin(static_cast<double>(n), 1 - q);
    const double p_more = over == 0 ? 1.0 : boost::math::cdf(boost::math::complement(bin, over - 1.0));
    if (p_more <= 1 - conf) {
      f.verdict = Verdict::kRegressed;
    } else {
      f.verdict = Verdict::kInconclusive;
      f.more_requests = more_queries_needed(n, over, q, conf);
    }
  }
  f.note = fmt::format("{} of {}", over, n);
  return f;
}

}  // namespace

// ---- agentic tasks (tasks.jsonl; docs/tasks.md)

TaskSample task_sample(const RunData& run, const std::string& cls, Nanos t0, Nanos t1) {
  TaskSample out;
  for (const auto& t : run.tasks) {
    if (t.warmup || (!cls.empty() && t.task_class != cls) || t.t_start < t0 || t.t_start >= t1) continue;
    if (t.outcome == "ok" && t.t_end >= t.t_start) {
      ++out.ok;
      out.ok_ms.push_back(static_cast<double>(t.t_end - t.t_start) / 1e6);
      out.ok_start.push_back(t.t_start);
    } else if (t.outcome == "failed") {
      ++out.failed;
    }
  }
  return out;
}

namespace {

// The median start of a run's counted tasks: where a single run's halves meet.
Nanos task_midpoint(const RunData& run) {
  std::vector<Nanos> starts;
  for (const auto& t : run.tasks)
    if (!t.warmup) starts.push_back(t.t_start);
  if (starts.empty()) return 0;
  std::nth_element(starts.begin(), starts.begin() + static_cast<std::ptrdiff_t>(starts.size() / 2),
                   starts.end());
  return starts[starts.size() / 2];
}

// The task SLOs bench recorded (run.json tasks.by_class.CLASS.slo).
std::map<std::string, nlohmann::json> task_slos(const RunData& run) {
  std::map<std::string, nlohmann::json> out;
  const auto* by = rundir::json_path(run.run_json, {"tasks", "by_class"});
  if (!by || !by->is_object()) return out;
  for (const auto& [cls, v] : by->items())
    if (v.is_object() && v.contains("slo") && v["slo"].is_object()) out[cls] = v["slo"];
  return out;
}

// A class's task SLO findings: completion time at the percentile (failed
// tasks count as over the target, as bench's verdict does), with LoadGen's
// early-stopping rule as for requests; the pass rate against its target with
// an exact (Clopper-Pearson) interval.
void task_slo_findings(const Pair& p, const std::string& cls, const nlohmann::json& slo, ItemResult& r) {
  const double conf = p.t.confidence;
  const TaskSample s = task_sample(p.cand, cls);
  const std::uint64_t n = s.ok + s.failed;
  if (n == 0) return;
  const double pct = slo.value("percentile", 99.0);
  if (slo.contains("task_ms") && slo["task_ms"].is_number()) {
    const double target = slo["task_ms"].get<double>();
    std::vector<double> v = s.ok_ms;
    v.insert(v.end(), s.failed, std::numeric_limits<double>::infinity());
    std::sort(v.begin(), v.end());
    Finding f = percentile_target_finding(fmt::format("{} p{:g} task completion", cls, pct), v, target,
                                          pct / 100.0, conf);
    f.note += " tasks over the target or failed";
    r.findings.push_back(std::move(f));
  }
  if (slo.contains("pass_rate") && slo["pass_rate"].is_number()) {
    const double target = slo["pass_rate"].get<double>();
    using B = boost::math::binomial_distribution<double>;
    const double alpha = 1 - conf;
    Finding f;
    f.metric = fmt::format("{} task pass rate", cls);
    f.unit = "ratio";
    f.change_unit = "ratio";
    f.value = f.change = static_cast<double>(s.ok) / static_cast<double>(n);
    f.ci_low = B::find_lower_bound_on_p(static_cast<double>(n), static_cast<double>(s.ok), alpha / 2);
    f.ci_high = B::find_upper_bound_on_p(static_cast<double>(n), static_cast<double>(s.ok), alpha / 2);
    f.threshold = fmt::format("target {:g}", target);
    f.verdict = *f.ci_low >= target   ? Verdict::kPass
                : *f.ci_high < target ? Verdict::kRegressed
                                      : Verdict::kInconclusive;
    f.note = fmt::format("{} of {} tasks passed (Clopper-Pearson interval)", s.ok, n);
    r.findings.push_back(std::move(f));
  }
}

// Two runs: each task class's pass rate, candidate against base.
void task_pass_rate_changes(const Pair& p, ItemResult& r) {
  std::set<std::string> classes;
  for (const auto& t : p.cand.tasks) classes.insert(t.task_class);
  for (const auto& cls : classes) {
    const TaskSample b = task_sample(*p.base, cls), c = task_sample(p.cand, cls);
    const std::uint64_t nb = b.ok + b.failed, nc = c.ok + c.failed;
    if (nb == 0 || nc == 0) continue;
    const double pb = static_cast<double>(b.ok) / static_cast<double>(nb);
    const double pc = static_cast<double>(c.ok) / static_cast<double>(nc);
    const double se =
        std::sqrt(std::max(pb * (1 - pb), 0.25 / static_cast<double>(nb)) / static_cast<double>(nb) +
                  std::max(pc * (1 - pc), 0.25 / static_cast<double>(nc)) / static_cast<double>(nc));
    Finding f = normal_change_finding(cls + " task pass rate", "ratio", pb, pc, se, p.t.attainment_tolerance,
                                      Worse::kLower, p.t.confidence, "ratio");
    f.note = fmt::format("{} of {} tasks passed; base {} of {}", c.ok, nc, b.ok, nb);
    r.findings.push_back(std::move(f));
  }
}

}  // namespace

ItemResult item_slo(const Pair& p) {
  ItemResult r;
  const auto slos = slos_of(p.cand, p.t);
  const auto tslos = task_slos(p.cand);
  if (slos.empty() && tslos.empty() && (p.single() || p.cand.tasks.empty()))
    return no_data(2, "no SLO: the runs were measured without --slo and the thresholds file sets none");
  const double conf = p.t.confidence;
  // Agentic tasks: their SLOs, and (two runs) their pass rates.
  for (const auto& [cls, slo] : tslos) task_slo_findings(p, cls, slo, r);
  if (!p.single() && !p.cand.tasks.empty() && !p.base->tasks.empty()) task_pass_rate_changes(p, r);
  for (const auto& [cls, slo] : slos) {
    const std::string cname = cls.empty() ? "default" : cls;
    const SloCounts cand = slo_counts(p.cand, cls, slo);
    if (cand.requests == 0) continue;
    // Each target at its percentile: LoadGen's early-stopping rule on the
    // count of requests over the target.
    for (const auto& [key, target] : {std::pair{"ttft_ms", slo.ttft_ms}, std::pair{"tpot_ms", slo.tpot_ms},
                                      std::pair{"e2e_ms", slo.e2e_ms}, std::pair{"ttfo_ms", slo.ttfo_ms}}) {
      if (!target || !cand.values.count(key)) continue;
      std::vector<double> v = cand.values.at(key);
      std::sort(v.begin(), v.end());
      Finding f = percentile_target_finding(
          fmt::format("{} p{:g} {}", cname, slo.percentile, std::string_view(key).substr(0, 4)), v, *target,
          slo.percentile / 100.0, conf);
      f.note += " over the target";
      if (!p.single()) f.note += " (candidate)";
      r.findings.push_back(std::move(f));
    }
    if (p.single()) continue;
    // Attainment (share meeting every target) and goodput, against the base.
    const SloCounts base = slo_counts(*p.base, cls, slo);
    if (base.requests == 0) continue;
    const double pb = static_cast<double>(base.met) / static_cast<double>(base.requests);
    const double pc = static_cast<double>(cand.met) / static_cast<double>(cand.requests);
    const double se = std::sqrt(std::max(pb * (1 - pb), 0.25 / static_cast<double>(base.requests)) /
                                    static_cast<double>(base.requests) +
                                std::max(pc * (1 - pc), 0.25 / static_cast<double>(cand.requests)) /
                                    static_cast<double>(cand.requests));
    Finding f = normal_change_finding(cname + " attainment", "ratio", pb, pc, se, p.t.attainment_tolerance,
                                      Worse::kLower, p.t.confidence, "ratio");
    f.note = fmt::format("{} of {} met every target; base {} of {}", cand.met, cand.requests, base.met,
                         base.requests);
    r.findings.push_back(std::move(f));
  }
  if (r.findings.empty()) return no_data(2, "no request or task of a class with an SLO");
  if (!p.single()) {
    const auto gp = [](const RunData& run) {
      const auto* g = rundir::json_path(run.summary, {"goodput_rps"});
      return g && g->is_number() ? std::optional<double>(g->get<double>()) : std::nullopt;
    };
    if (gp(*p.base) && gp(p.cand))
      r.evidence["goodput_rps"] = {{"base", *gp(*p.base)}, {"candidate", *gp(p.cand)}};
  }
  return r;
}

// ---------------------------------------------------------------- 4 tail
ItemResult item_tail(const Pair& p) {
  ItemResult r;
  const double conf = p.t.confidence;
  // Reasoning models: the answer's TTFO and TPOT too, when both runs have them.
  // ITL two ways: each request's largest gap (a stall that one request met
  // once), and for two runs every token gap pooled, sectioned over stretches
  // of the runs (a stalled step delays every sequence in it: the gaps of a
  // stall are never taken as independent).
  std::vector<Metric> metrics{Metric::kTtft, Metric::kTpot, Metric::kItlMax, Metric::kE2e};
  if (!p.single()) {
    if (p.base->requests.itl_ns.count() >= p.t.min_requests &&
        p.cand.requests.itl_ns.count() >= p.t.min_requests)
      for (double q : {0.99, 0.999})
        r.findings.push_back(itl_row(*p.base, p.cand, q, p.t.tail_tolerance, conf));
  }
  if (p.cand.requests.any_reasoning() && (p.single() || p.base->requests.any_reasoning()))
    metrics.insert(metrics.end(), {Metric::kTtfo, Metric::kTpotAnswer});
  // In send order: the design effect reads the tail's clustering in time.
  const std::vector<std::uint32_t> cand_order = send_order(p.cand);
  const std::vector<std::uint32_t> base_order =
      p.single() ? std::vector<std::uint32_t>{} : send_order(*p.base);
  for (Metric m : metrics) {
    std::vector<double> b, c;
    if (p.single()) {
      const Nanos mid = send_midpoint(p.cand);
      b = metric_in_send_order(p.cand, m, cand_order, INT64_MIN, mid);
      c = metric_in_send_order(p.cand, m, cand_order, mid, INT64_MAX);
    } else {
      b = metric_in_send_order(*p.base, m, base_order);
      c = metric_in_send_order(p.cand, m, cand_order);
    }
    if (b.size() < p.t.min_requests || c.size() < p.t.min_requests) continue;
    const double db = tail_design_effect(b, 0.9), dc = tail_design_effect(c, 0.9);
    const SortedSample sb(std::move(b), fmt::format("base {}", metric_name(m))),
        sc(std::move(c), fmt::format("candidate {}", metric_name(m)));
    for (double q : {0.99, 0.999}) {
      r.findings.push_back(relative_shift_finding(fmt::format("p{:g} {}", q * 100, metric_name(m)), sb, sc, q,
                                                  p.t.tail_tolerance, Worse::kHigher, conf, db, dc));
    }
    // The median, for "while the median holds" (evidence, not judged).
    const auto med = quantile_relative_shift(sb, sc, 0.5, conf);
    const auto tail = compare_upper_tails(sb, sc, 0.9, 1 - conf);
    r.evidence[std::string(metric_name(m))] = {
        {"median_change", med.estimate},
        {"median_holds", std::abs(med.estimate) <= p.t.median_tolerance},
        {"tail_above_base_p90",
         {{"max_gap", tail.max_gap},
          {"signed_gap", tail.signed_gap},
          {"at_ms", tail.at},
          {"band", tail.epsilon_base + tail.epsilon_cand},
          {"shifted", tail.shifted}}}};
  }
  // Agentic tasks' completion times (ok tasks, warm-up left out), as a request latency.
  if (!p.cand.tasks.empty() && (p.single() || !p.base->tasks.empty())) {
    std::vector<double> b, c;
    if (p.single()) {
      const Nanos mid = task_midpoint(p.cand);
      b = task_sample(p.cand, "", INT64_MIN, mid).ok_ms;
      c = task_sample(p.cand, "", mid, INT64_MAX).ok_ms;
    } else {
      b = task_sample(*p.base, "").ok_ms;
      c = task_sample(p.cand, "").ok_ms;
    }
    // A task of 0 ms (its end stamped at its start) has no logarithm: left out of the relative shift.
    std::erase_if(b, [](double v) { return !(v > 0); });
    std::erase_if(c, [](double v) { return !(v > 0); });
    if (b.size() >= p.t.min_requests && c.size() >= p.t.min_requests) {
      const SortedSample sb(std::move(b), "base task completion"),
          sc(std::move(c), "candidate task completion");
      for (double q : {0.99, 0.999})
        r.findings.push_back(relative_shift_finding(fmt::format("p{:g} task completion", q * 100), sb, sc, q,
                                                    p.t.tail_tolerance, Worse::kHigher, conf));
      r.evidence["task completion"] = {
          {"median_change", quantile_relative_shift(sb, sc, 0.5, conf).estimate}};
    }
  }
  if (r.findings.empty())
    return no_data(4, fmt::format("fewer than {:g} completed requests (or tasks) with latencies in a run{}",
                                  p.t.min_requests, p.single() ? " half" : ""));
  return r;
}

// --------------------------------------------------------- 3 coupling
namespace {
// A change of kappa on the log scale: lb, lc the base's and the candidate's
// log kappa, s the standard error of their difference.
Finding kappa_finding(const Pair& p, std::string metric, double base, double value, double lb, double lc,
                      double s) {
  const double z = z_of(p.t.confidence);
  Finding f;
  f.metric = std::move(metric);
  f.unit = "ratio";
  f.change_unit = "%";
  f.base = base;
  f.value = value;
  f.change = std::expm1(lc - lb);
  f.ci_low = std::expm1(lc - lb - z * s);
  f.ci_high = std::expm1(lc - lb + z * s);
  f.threshold = fmt::format("tolerance {}", pct(p.t.coupling_tolerance));
  f.verdict = classify_change({*f.change, *f.ci_low, *f.ci_high}, p.t.coupling_tolerance, Worse::kHigher);
  return f;
}

// kappa measured by running each class alone (bench/sim --coupling: run.json
// "coupling"): one run's kappa against 1, or the candidate's against the base's.
std::optional<ItemResult> coupling_measured_alone(const Pair& p) {
  const auto* cc = rundir::json_path(p.cand.run_json, {"coupling", "classes"});
  const auto* bc = p.single() ? nullptr : rundir::json_path(p.base->run_json, {"coupling", "classes"});
  if (!cc || !cc->is_object() || (!p.single() && (!bc || !bc->is_object()))) return std::nullopt;
  // The stored intervals' confidence gives their standard errors; the finding's at the check's.
  const auto stored_z = [](const nlohmann::json& run) {
    const auto* c = rundir::json_path(run, {"coupling", "confidence"});
    return z_of(c && c->is_number() && c->get<double>() > 0 && c->get<double>() < 1 ? c->get<double>()
                                                                                    : 0.95);
  };
  const double zc = stored_z(p.cand.run_json), zb = p.single() ? zc : stored_z(p.base->run_json);
  ItemResult r;
  for (const auto& [cls, metrics] : cc->items())
    for (const char* m : {"ttft_ms", "tpot_ms", "e2e_ms"}) {
      const auto* kc = rundir::json_path(metrics, {m, "p50"});
      const auto* kb = bc ? rundir::json_path(*bc, {cls.c_str(), m, "p50"}) : nullptr;
      auto usable = [](const nlohmann::json* k) {
        return k && k->is_object() && (*k)["kappa"].is_number() && (*k)["ci"].is_array() &&
               (*k)["ci"].size() == 2 && (*k)["ci"][0].is_number() && (*k)["ci"][1].is_number() &&
               (*k)["ci"][0].get<double>() > 0 && (*k)["kappa"].get<double>() > 0;
      };
      if (!usable(kc) || (!p.single() && !usable(kb))) continue;
      // log kappa's standard error from its interval's width.
      const auto se = [&](const nlohmann::json& k, double zk) {
        return (std::log(k["ci"][1].get<double>()) - std::log(k["ci"][0].get<double>())) / (2 * zk);
      };
      const double lc = std::log((*kc)["kappa"].get<double>());
      const double lb = p.single() ? 0.0 : std::log((*kb)["kappa"].get<double>());
      const double s = p.single() ? se(*kc, zc) : std::hypot(se(*kb, zb), se(*kc, zc));
      const std::string_view label = m == std::string_view("ttft_ms")   ? "TTFT"
                                     : m == std::string_view("tpot_ms") ? "TPOT"
                                                                        : "E2E";
      r.findings.push_back(kappa_finding(p, fmt::format("kappa {} {} p50 (alone)", cls, label),
                                         p.single() ? 1.0 : (*kb)["kappa"].get<double>(),
                                         (*kc)["kappa"].get<double>(), lb, lc, s));
    }
  if (r.findings.empty()) return std::nullopt;
  return r;
}
}  // namespace

ItemResult item_coupling(const Pair& p) {
  // Measured alone (bench/sim --coupling) when the runs have it.
  if (auto alone = coupling_measured_alone(p)) return *alone;
  // Per class: requests sent while a request of another class was in flight
  // (mixed) against those sent while none was (quiet); kappa = the
  // Hodges-Lehmann ratio of their TTFT. The candidate's kappa against the base's.
  const auto kappa = [&](const RunData& run, std::uint16_t cls,
                         Metric m) -> std::optional<ShiftWithInterval> {
    const RequestArrays& a = run.requests;
    // In-flight intervals of other classes, swept by send time.
    std::vector<std::pair<Nanos, int>> events;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a.task_class[i] != cls && a.t_send[i] >= 0 && a.t_close[i] >= a.t_send[i]) {
        events.emplace_back(a.t_send[i], +1);
        events.emplace_back(a.t_close[i], -1);
      }
    std::sort(events.begin(), events.end());
    std::vector<std::pair<Nanos, std::size_t>> sends;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a.task_class[i] == cls && a.counted(i)) sends.emplace_back(a.t_send[i], i);
    std::sort(sends.begin(), sends.end());
    std::vector<double> mixed, quiet;
    std::size_t e = 0;
    int inflight = 0;
    for (const auto& [t, i] : sends) {
      while (e < events.size() && events[e].first <= t) inflight += events[e++].second;
      const double v = metric_value(run, m, i);
      if (!std::isfinite(v) || v <= 0) continue;
      (inflight > 0 ? mixed : quiet).push_back(v);
    }
    if (mixed.size() < p.t.coupling_min_group || quiet.size() < p.t.coupling_min_group) return std::nullopt;
    return hodges_lehmann_relative_shift(SortedSample(quiet, "quiet"), SortedSample(mixed, "mixed"),
                                         p.t.confidence);
  };
  if (p.single()) return no_data(3, "needs two runs, or one run with --coupling (each class run alone)");
  ItemResult r;
  const auto& names = p.cand.requests.class_names;
  if (names.size() < 2) return no_data(3, "one task class: nothing to couple");
  const double z = z_of(p.t.confidence);
  for (std::size_t ci = 0; ci < names.size(); ++ci) {
    const auto bi = class_index(*p.base, names[ci]);
    if (!bi) continue;
    for (Metric m : {Metric::kTtft, Metric::kTpot}) {
      const auto kc = kappa(p.cand, static_cast<std::uint16_t>(ci), m);
      const auto kb = kappa(*p.base, *bi, m);
      if (!kc || !kb || !kc->ci_low || !kc->ci_high || !kb->ci_low || !kb->ci_high) continue;
      // log kappa's standard error from each interval's width; the change of
      // log kappa with the two combined.
      const auto se = [&](const ShiftWithInterval& s) {
        return (std::log1p(*s.ci_high) - std::log1p(*s.ci_low)) / (2 * z);
      };
      const double lb = std::log1p(kb->estimate), lc = std::log1p(kc->estimate);
      const double s = std::hypot(se(*kb), se(*kc));
      r.findings.push_back(kappa_finding(p, fmt::format("kappa {} {}", names[ci], metric_name(m)),
                                         1 + kb->estimate, 1 + kc->estimate, lb, lc, s));
    }
  }
  if (r.findings.empty())
    return no_data(3,
                   fmt::format("no class with {:g} requests both alone and beside another class in both runs",
                               p.t.coupling_min_group));
  return r;
}

namespace {
// ------------------------------------------------------ 1 latency model
// Per request: the queue ahead of it when it was sent (requests sent before
// it still without a first token) and the mean number of requests decoding
// beside it over its decode (the time average of the decoding count).
struct LatencyModelData {
  std::vector<double> ttft, prompt, queue;  // for TTFT ~ a + b prompt + c queue
  std::vector<Nanos> ttft_send;
  std::vector<double> itl, batch;  // for ITL ~ d + e batch
  std::vector<Nanos> itl_send;
};

LatencyModelData latency_model_data(const RunData& run) {
  const RequestArrays& a = run.requests;
  LatencyModelData d;
  // One sweep over the run's events in time order, each carrying its
  // request: waiting for a first token (+1 at t_send, -1 at the first token,
  // or the close without one) and decoding (+1 at the first token, -1 at the
  // last). At each instant, before its events are applied: the waiting count
  // (the queue ahead of a request sent then: one that got its token when
  // another was sent is no longer ahead of it) and the integral of the
  // decoding count from the first event (the batch over a request's decode
  // is the integral over its span divided by the span).
  struct Event {
    Nanos t;
    std::uint32_t request;
    std::int8_t wait_delta, decode_delta;
    bool send;  // the request's send: its queue is read here
  };
  std::vector<Event> events;
  events.reserve(a.size() * 3);
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a.t_send[i] < 0) continue;
    const auto req = static_cast<std::uint32_t>(i);
    const Nanos first = a.t_first_token[i] >= 0 ? a.t_first_token[i] : a.t_close[i];
    const bool waits = first >= a.t_send[i];
    const bool decodes = a.t_first_token[i] >= 0 && a.t_last_token[i] > a.t_first_token[i];
    events.push_back({a.t_send[i], req, static_cast<std::int8_t>(waits ? +1 : 0), 0, true});
    // The first token ends the wait and starts the decode (decoding implies
    // a first token, so `first` is it): one event.
    if (waits || decodes)
      events.push_back({first, req, static_cast<std::int8_t>(waits ? -1 : 0),
                        static_cast<std::int8_t>(decodes ? +1 : 0), false});
    if (decodes) events.push_back({a.t_last_token[i], req, 0, -1, false});
  }
  // Times are never negative here (sends are, and the rest come after them):
  // a radix sort on them (Boost.Sort).
  boost::sort::spreadsort::integer_sort(
      events.begin(), events.end(), [](const Event& e, unsigned shift) { return e.t >> shift; },
      [](const Event& x, const Event& y) { return x.t < y.t; });
  std::vector<int> queue(a.size(), 0);
  std::vector<double> area_first(a.size(), 0), area_last(a.size(), 0);
  int waiting = 0, decoding = 0;
  double area = 0;
  Nanos last_t = events.empty() ? 0 : events.front().t;
  for (std::size_t k = 0; k < events.size();) {
    const Nanos t = events[k].t;
    area += static_cast<double>(decoding) * static_cast<double>(t - last_t);
    last_t = t;
    std::size_t end = k;
    while (end < events.size() && events[end].t == t) ++end;
    for (std::size_t j = k; j < end; ++j) {
      const Event& e = events[j];
      if (e.send) queue[e.request] = waiting;
      if (e.decode_delta > 0) area_first[e.request] = area;
      if (e.decode_delta < 0) area_last[e.request] = area;
    }
    for (std::size_t j = k; j < end; ++j) {
      waiting += events[j].wait_delta;
      decoding += events[j].decode_delta;
    }
    k = end;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a.counted(i) || a.prompt_tokens[i] < 0) continue;
    const double ttft = a.ttft_ms(i);
    if (!std::isfinite(ttft)) continue;
    d.ttft.push_back(ttft);
    d.ttft_send.push_back(a.t_send[i]);
    d.prompt.push_back(a.prompt_tokens[i]);
    d.queue.push_back(std::max(0, queue[i]));
    const double itl = a.itl_mean_ms[i];
    if (std::isfinite(itl) && a.t_last_token[i] > a.t_first_token[i]) {
      d.itl.push_back(itl);
      d.itl_send.push_back(a.t_send[i]);
      d.batch.push_back((area_last[i] - area_first[i]) /
                        static_cast<double>(a.t_last_token[i] - a.t_first_token[i]));
    }
  }
  return d;
}

struct LatencyModel {
  std::optional<OlsFit> ttft, itl;  // coefficients: (a, b, c), (d, e)
  // The standard errors of c and e by batch means: the model fitted on
  // contiguous blocks of the run (by send time), the spread of the blocks'
  // coefficients. Requests close in time share the server's state, so the
  // per-request errors are not independent and the fit's own errors are too
  // small; blocks of a hundred or more requests are nearly independent.
  BlockEstimate queue_coef, batch_coef;
  // Why a model could not be fitted (empty when it was).
  std::string ttft_missing, itl_missing;
};

LatencyModel fit_latency_model(const RunData& run, double confidence) {
  LatencyModelData d = latency_model_data(run);
  LatencyModel m;
  OlsOptions o;
  o.confidence = confidence;
  const auto fit = [&](const std::vector<std::vector<double>*>& cols,
                       const std::vector<double>& y) -> std::optional<OlsFit> {
    if (y.size() < 10) return std::nullopt;
    Eigen::MatrixXd x(static_cast<Eigen::Index>(y.size()), static_cast<Eigen::Index>(cols.size()));
    for (std::size_t c = 0; c < cols.size(); ++c)
      for (std::size_t i = 0; i < y.size(); ++i)
        x(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(c)) = (*cols[c])[i];
    const Eigen::VectorXd yy =
        Eigen::Map<const Eigen::VectorXd>(y.data(), static_cast<Eigen::Index>(y.size()));
    try {
      return ols(x, yy, o);
    } catch (const UsageError&) {
      return std::nullopt;  // a constant column (every prompt the same length, no queue): not estimable
    }
  };
  m.ttft = fit({&d.prompt, &d.queue}, d.ttft);
  const bool with_prompt = m.ttft.has_value();
  if (!m.ttft) m.ttft = fit({&d.queue}, d.ttft);  // prompts of one length: a + c queue
  m.itl = fit({&d.batch}, d.itl);
  if (!m.ttft)
    m.ttft_missing = d.ttft.size() < 10
                         ? "fewer than 10 requests with a prompt length and a first token"
                         : "the queue ahead of every request was the same (no request was sent "
                           "while another waited for its first token)";
  if (!m.itl)
    m.itl_missing = d.itl.size() < 10 ? "fewer than 10 requests with two output events or more"
                                      : "every request decoded beside the same number of others (one at a "
                                        "time: one slot, or requests that never overlapped)";
  // Batch means of the coefficients.
  std::vector<double> qc, bc;
  for (const auto& block : time_blocks(d.ttft_send)) {
    LatencyModelData b;
    for (std::size_t i : block) {
      b.prompt.push_back(d.prompt[i]);
      b.queue.push_back(d.queue[i]);
      b.ttft.push_back(d.ttft[i]);
    }
    const auto f = with_prompt ? fit({&b.prompt, &b.queue}, b.ttft) : fit({&b.queue}, b.ttft);
    if (f) qc.push_back(f->coefficients(f->coefficients.size() - 1));
  }
  for (const auto& block : time_blocks(d.itl_send)) {
    LatencyModelData b;
    for (std::size_t i : block) {
      b.batch.push_back(d.batch[i]);
      b.itl.push_back(d.itl[i]);
    }
    if (const auto f = fit({&b.batch}, b.itl)) bc.push_back(f->coefficients(1));
  }
  m.queue_coef = block_estimate(qc);
  m.batch_coef = block_estimate(bc);
  return m;
}

}  // namespace

ItemResult item_latency_model(const Pair& p) {
  if (p.single()) return no_data(1, "needs two runs");
  const LatencyModel b = fit_latency_model(*p.base, p.t.confidence),
                     c = fit_latency_model(p.cand, p.t.confidence);
  ItemResult r;
  const auto coef = [&](const char* metric, const OlsFit& fb, const OlsFit& fc, Eigen::Index kb,
                        Eigen::Index kc, const BlockEstimate& bb, const BlockEstimate& cb, double tol) {
    Finding f;
    f.metric = metric;
    f.unit = "ms";
    f.change_unit = "ms";
    f.threshold = fmt::format("tolerance {:g} ms", tol);
    f.base = fb.coefficients(kb);
    f.value = fc.coefficients(kc);
    f.change = *f.value - *f.base;
    if (bb.blocks < 5 || cb.blocks < 5) {
      f.verdict = Verdict::kInconclusive;
      f.note = "too few blocks of requests (500 requests at least) to bound the change";
      return f;
    }
    // The blocks' mean coefficient, the estimate their spread measures (the
    // whole run's fit is evidence).
    f.base = bb.mean;
    f.value = cb.mean;
    f.change = cb.mean - bb.mean;
    const double se = std::hypot(bb.se, cb.se);
    const double df = static_cast<double>(std::min(bb.blocks, cb.blocks) - 1);
    const double q = boost::math::quantile(boost::math::students_t(df), 0.5 + p.t.confidence / 2);
    f.ci_low = *f.change - q * se;
    f.ci_high = *f.change + q * se;
    f.note = fmt::format("interval by batch means over {} and {} blocks of requests", bb.blocks, cb.blocks);
    f.verdict = classify_change({*f.change, *f.ci_low, *f.ci_high}, tol, Worse::kHigher);
    return f;
  };
  const auto json_of = [](const OlsFit& f) {
    std::vector<double> coefs(f.coefficients.data(), f.coefficients.data() + f.coefficients.size());
    std::vector<double> se(f.robust_std_errors.data(),
                           f.robust_std_errors.data() + f.robust_std_errors.size());
    return nlohmann::json{{"coefficients", coefs},
                          {"robust_std_errors", se},
                          {"r_squared", f.r_squared},
                          {"observations", f.observations}};
  };
  if (b.ttft && c.ttft) {
    // The queue's coefficient is the last one (with or without the prompt's).
    const Eigen::Index qb = b.ttft->coefficients.size() - 1, qc = c.ttft->coefficients.size() - 1;
    r.findings.push_back(coef("TTFT per request queued ahead", *b.ttft, *c.ttft, qb, qc, b.queue_coef,
                              c.queue_coef, p.t.queue_coef_tolerance_ms));
    r.evidence["ttft_model"] = {
        {"terms", b.ttft->coefficients.size() == 3
                      ? std::vector<std::string>{"intercept", "prompt_tokens", "queue_depth"}
                      : std::vector<std::string>{"intercept", "queue_depth"}},
        {"base", json_of(*b.ttft)},
        {"candidate", json_of(*c.ttft)}};
  }
  if (b.itl && c.itl) {
    r.findings.push_back(coef("ITL per request in the batch", *b.itl, *c.itl, 1, 1, b.batch_coef,
                              c.batch_coef, p.t.batch_coef_tolerance_ms));
    r.evidence["itl_model"] = {
        {"terms", {"intercept", "batch"}}, {"base", json_of(*b.itl)}, {"candidate", json_of(*c.itl)}};
  }
  // A model one run cannot fit: a finding without a change that says why.
  const auto not_fitted = [&](const char* metric, const std::string& why_base, const std::string& why_cand,
                              double tol) {
    if (why_base.empty() && why_cand.empty()) return;
    Finding f;
    f.metric = metric;
    f.unit = "ms";
    f.change_unit = "ms";
    f.threshold = fmt::format("tolerance {:g} ms", tol);
    f.verdict = Verdict::kNoData;
    f.note = why_base == why_cand ? "not fitted in either run: " + why_base
             : why_base.empty()   ? "not fitted in the candidate: " + why_cand
             : why_cand.empty()
                 ? "not fitted in the base: " + why_base
                 : "not fitted in the base: " + why_base + "; nor in the candidate: " + why_cand;
    r.findings.push_back(std::move(f));
  };
  not_fitted("TTFT per request queued ahead", b.ttft_missing, c.ttft_missing, p.t.queue_coef_tolerance_ms);
  not_fitted("ITL per request in the batch", b.itl_missing, c.itl_missing, p.t.batch_coef_tolerance_ms);
  if (std::none_of(r.findings.begin(), r.findings.end(),
                   [](const Finding& f) { return f.verdict != Verdict::kNoData; })) {
    std::vector<std::string> notes;
    for (const Finding& f : r.findings) notes.push_back(f.metric + ": " + f.note);
    return no_data(1, notes.empty() ? "too few requests with prompt lengths and first tokens"
                                    : fmt::format("{}", fmt::join(notes, "; ")));
  }
  return r;
}

}  // namespace tokenscope::analyze::detail
