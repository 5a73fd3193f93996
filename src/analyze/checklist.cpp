#include "analyze/checklist.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <boost/math/distributions/binomial.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <boost/sort/spreadsort/integer_sort.hpp>

#include "analyze/change_point.h"
#include "analyze/checklist_util.h"
#include "analyze/collectives_input.h"
#include "analyze/kernels.h"
#include "analyze/quantization.h"
#include "analyze/regression.h"
#include "core/error.h"
#include "core/stats.h"
#include "observe/export_run.h"
#include "probe/collectives.h"

namespace tokenscope::analyze {

using namespace detail;

namespace {

const std::vector<ItemInfo> kItems = {
    {1, "latency-model", "latency model", false},
    {2, "slo", "SLO attainment", true},
    {3, "coupling", "mixed-load coupling", false},
    {4, "tail", "tail shift", true},
    {5, "lifecycle", "lifecycle", true},
    {6, "gpu", "GPU efficiency", false},
    {7, "locality", "KV-cache locality", true},
    {8, "collectives", "collectives", false},
    {9, "recompile", "recompilation", false},
    {10, "batching", "batching behaviour", true},
    {11, "quantization", "quantisation drift", false},
    {12, "contention", "contention", true},
};

// Two samples an item compares: the base and the candidate, or for one run
// its first and second half (by send time).
struct Pair {
  const RunData* base = nullptr;  // null: one run
  const RunData& cand;
  const Thresholds& t;
  bool single() const { return base == nullptr; }
};

template <class F>
auto halves(const RunData& run, F&& sample) {
  const Nanos mid = send_midpoint(run);
  return std::make_pair(sample(INT64_MIN, mid), sample(mid, INT64_MAX));
}

// Why the runs that lack a series lack it, as bench recorded for its source
// (source_missing): " (gpu of both runs: REASON)", " (base's gpu: REASON;
// candidate's gpu: REASON)", or "" when no run says.
std::string missing_reasons(const Pair& p, std::string_view source, bool base_lacks, bool cand_lacks) {
  const std::string b = base_lacks && p.base ? source_missing(*p.base, source) : "";
  const std::string c = cand_lacks ? source_missing(p.cand, source) : "";
  if (b.empty() && c.empty()) return "";
  if (p.single()) return fmt::format(" ({}: {})", source, c);
  if (b == c && base_lacks && cand_lacks) return fmt::format(" ({} of both runs: {})", source, b);
  std::string out;
  for (const auto& [who, why] : {std::pair{"base", b}, std::pair{"candidate", c}})
    if (!why.empty()) out += fmt::format("{}{}'s {}: {}", out.empty() ? "" : "; ", who, source, why);
  return " (" + out + ")";
}

// ----------------------------------------------------------------- 2 SLO
std::map<std::string, Slo> slos_of(const RunData& run, const Thresholds& t) {
  if (!t.slos.empty()) return t.slos;
  std::map<std::string, Slo> out;
  const auto* att = observe::json_path(run.summary, {"slo_attainment"});
  if (!att || !att->is_object()) return out;
  for (const auto& [cls, c] : att->items()) {
    Slo s;
    if (c.contains("percentile") && c["percentile"].is_number()) s.percentile = c["percentile"].get<double>();
    for (const auto& [key, target] :
         {std::pair{"ttft_ms", &s.ttft_ms}, std::pair{"tpot_ms", &s.tpot_ms}, std::pair{"e2e_ms", &s.e2e_ms}})
      if (const auto* v = observe::json_path(c, {key, "target"}); v && v->is_number())
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
struct SloCounts {
  std::uint64_t requests = 0, met = 0;
  std::map<std::string, std::vector<double>> values;
};

SloCounts slo_counts(const RunData& run, const std::string& cls, const Slo& slo) {
  SloCounts c;
  const auto idx = class_index(run, cls);
  if (!idx) return c;
  const RequestArrays& a = run.requests;
  const auto* from = observe::json_path(run.summary, {"slo_latency_from"});
  const bool from_schedule = from && from->is_string() && *from == "schedule";
  constexpr double kInf = HUGE_VAL;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a.warmup[i] || a.task_class[i] != *idx) continue;
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
    c.met += met ? 1 : 0;
  }
  return c;
}

ItemResult item_slo(const Pair& p) {
  ItemResult r;
  const auto slos = slos_of(p.cand, p.t);
  if (slos.empty())
    return no_data(2, "no SLO: the runs were measured without --slo and the thresholds file sets none");
  const double conf = p.t.confidence;
  for (const auto& [cls, slo] : slos) {
    const std::string cname = cls.empty() ? "default" : cls;
    const SloCounts cand = slo_counts(p.cand, cls, slo);
    if (cand.requests == 0) continue;
    // Each target at its percentile: LoadGen's early-stopping rule on the
    // count of requests over the target.
    for (const auto& [key, target] : {std::pair{"ttft_ms", slo.ttft_ms}, std::pair{"tpot_ms", slo.tpot_ms},
                                      std::pair{"e2e_ms", slo.e2e_ms}}) {
      if (!target || !cand.values.count(key)) continue;
      std::vector<double> v = cand.values.at(key);
      std::sort(v.begin(), v.end());
      const std::uint64_t n = v.size();
      const std::uint64_t over =
          static_cast<std::uint64_t>(v.end() - std::upper_bound(v.begin(), v.end(), *target));
      const double q = slo.percentile / 100.0;
      Finding f;
      f.metric = fmt::format("{} p{:g} {}", cname, slo.percentile, std::string_view(key).substr(0, 4));
      f.unit = "ms";
      f.change_unit = "ms";
      f.value = nearest_rank(v, q);
      const auto ci = quantile_confidence_interval(n, q, conf);
      if (ci.lower_rank) f.ci_low = v[*ci.lower_rank - 1];
      if (ci.upper_rank) f.ci_high = v[*ci.upper_rank - 1];
      f.change = f.value;
      f.threshold = fmt::format("target {:g} ms", *target);
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
      f.note = fmt::format("{} of {} over the target", over, n);
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
  if (r.findings.empty()) return no_data(2, "no request of a class with an SLO");
  if (!p.single()) {
    const auto gp = [](const RunData& run) {
      const auto* g = observe::json_path(run.summary, {"goodput_rps"});
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
  for (Metric m : {Metric::kTtft, Metric::kTpot, Metric::kE2e}) {
    std::vector<double> b, c;
    if (p.single()) {
      std::tie(b, c) =
          halves(p.cand, [&](Nanos t0, Nanos t1) { return metric_sample(p.cand, m, {}, t0, t1); });
    } else {
      b = metric_sample(*p.base, m);
      c = metric_sample(p.cand, m);
    }
    if (b.size() < p.t.min_requests || c.size() < p.t.min_requests) continue;
    const SortedSample sb(std::move(b), fmt::format("base {}", metric_name(m))),
        sc(std::move(c), fmt::format("candidate {}", metric_name(m)));
    for (double q : {0.99, 0.999}) {
      r.findings.push_back(relative_shift_finding(fmt::format("p{:g} {}", q * 100, metric_name(m)), sb, sc, q,
                                                  p.t.tail_tolerance, Worse::kHigher, conf));
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
  if (r.findings.empty())
    return no_data(4, fmt::format("fewer than {:g} completed requests with latencies in a run{}",
                                  p.t.min_requests, p.single() ? " half" : ""));
  return r;
}

// --------------------------------------------------------- 3 coupling
ItemResult item_coupling(const Pair& p) {
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
  if (p.single()) return no_data(3, "needs two runs");
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
      Finding f;
      f.metric = fmt::format("kappa {} {}", names[ci], metric_name(m));
      f.unit = "ratio";
      f.change_unit = "%";
      f.base = 1 + kb->estimate;
      f.value = 1 + kc->estimate;
      f.change = std::expm1(lc - lb);
      f.ci_low = std::expm1(lc - lb - z * s);
      f.ci_high = std::expm1(lc - lb + z * s);
      f.threshold = fmt::format("tolerance {}", pct(p.t.coupling_tolerance));
      f.verdict = classify_change({*f.change, *f.ci_low, *f.ci_high}, p.t.coupling_tolerance, Worse::kHigher);
      r.findings.push_back(std::move(f));
    }
  }
  if (r.findings.empty())
    return no_data(3,
                   fmt::format("no class with {:g} requests both alone and beside another class in both runs",
                               p.t.coupling_min_group));
  return r;
}

// ---------------------------------------------------------- 5 lifecycle
// A run's phases from change points of its per-window series: output
// tokens/s (by completion) and the median TPOT of the requests completing in
// each window. Warm-up: from the first send to the first change point in the
// first half of the sending time at which throughput rises or TPOT falls;
// degradation: from the last change point at which TPOT rises (after the
// warm-up) to the last send; drain: from the last send to the last
// completion (no new arrivals); steady: the rest.
struct Lifecycle {
  Nanos start = 0, warmup_end = 0, steady_end = 0, send_end = 0, end = 0;
  double window_s = 1;
  std::vector<double> t_s, tokens_per_s, tpot_p50;  // per window (t_s from start)
  std::vector<std::size_t> change_points_tokens, change_points_tpot;
  std::optional<LinearTrend> drift;  // TPOT over minutes within the steady phase, relative to its mean
  double steady_minutes = 0;
  double steady_share() const {
    return send_end > start
               ? static_cast<double>(steady_end - warmup_end) / static_cast<double>(send_end - start)
               : 0.0;
  }
};

std::optional<Lifecycle> lifecycle_of(const RunData& run, const Thresholds& th) {
  const RequestArrays& a = run.requests;
  Lifecycle L;
  L.start = INT64_MAX;
  L.send_end = INT64_MIN;
  L.end = INT64_MIN;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a.counted(i)) continue;
    L.start = std::min(L.start, a.t_send[i]);
    L.send_end = std::max(L.send_end, a.t_send[i]);
    L.end = std::max(L.end, a.t_last_token[i]);
  }
  if (L.start >= L.send_end) return std::nullopt;
  const double span_s = nanos_to_s(L.send_end - L.start);
  L.window_s = th.window_s > 0 ? th.window_s : std::max(1.0, span_s / 60);
  const auto windows = static_cast<std::size_t>(std::floor(span_s / L.window_s));
  if (windows < 8) return std::nullopt;
  std::vector<double> tokens(windows, 0.0);
  std::vector<std::vector<double>> tpot(windows);
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a.counted(i) || a.t_last_token[i] < L.start) continue;
    const auto w = static_cast<std::size_t>(nanos_to_s(a.t_last_token[i] - L.start) / L.window_s);
    if (w >= windows) continue;
    tokens[w] += std::max(0, a.output_tokens[i]);
    const double tp = a.tpot_ms(i);
    if (std::isfinite(tp)) tpot[w].push_back(tp);
  }
  for (std::size_t w = 0; w < windows; ++w) {
    if (tpot[w].empty()) continue;
    std::sort(tpot[w].begin(), tpot[w].end());
    L.t_s.push_back((static_cast<double>(w) + 0.5) * L.window_s);
    L.tokens_per_s.push_back(tokens[w] / L.window_s);
    L.tpot_p50.push_back(nearest_rank(tpot[w], 0.5));
  }
  if (L.t_s.size() < 8) return std::nullopt;
  ChangePointSettings cps;
  cps.max_pvalue = th.change_point_pvalue;
  cps.window_len = std::max<std::size_t>(8, L.t_s.size());
  const auto cp_tok = find_change_points(L.tokens_per_s, cps);
  const auto cp_tpot = find_change_points(L.tpot_p50, cps);
  for (const auto& c : cp_tok) L.change_points_tokens.push_back(c.index);
  for (const auto& c : cp_tpot) L.change_points_tpot.push_back(c.index);
  const auto at = [&](std::size_t index) {
    return L.start + static_cast<Nanos>((L.t_s[index] - L.window_s / 2) * 1e9);
  };
  const double half = span_s / 2;
  L.warmup_end = L.start;
  for (const auto& c : cp_tok)
    if (L.t_s[c.index] <= half && c.mean_after > c.mean_before)
      L.warmup_end = std::max(L.warmup_end, at(c.index));
  for (const auto& c : cp_tpot)
    if (L.t_s[c.index] <= half && c.mean_after < c.mean_before)
      L.warmup_end = std::max(L.warmup_end, at(c.index));
  L.steady_end = L.send_end;
  for (const auto& c : cp_tpot)
    if (at(c.index) > L.warmup_end && c.mean_after > c.mean_before && L.t_s[c.index] > half) {
      L.steady_end = at(c.index);
      break;
    }
  // The drift: TPOT's trend over the steady phase, per minute, relative to its mean.
  std::vector<double> tm, y;
  for (std::size_t w = 0; w < L.t_s.size(); ++w) {
    const Nanos t = L.start + static_cast<Nanos>(L.t_s[w] * 1e9);
    if (t < L.warmup_end || t > L.steady_end) continue;
    tm.push_back(L.t_s[w] / 60);
    y.push_back(L.tpot_p50[w]);
  }
  if (y.size() >= 8) {
    const double mean = std::accumulate(y.begin(), y.end(), 0.0) / static_cast<double>(y.size());
    if (mean > 0) {
      for (double& v : y) v /= mean;
      L.drift = linear_trend(tm, y, th.confidence);
      L.steady_minutes = nanos_to_s(L.steady_end - L.warmup_end) / 60;
    }
  }
  return L;
}

nlohmann::json phases_json(const Lifecycle& L) {
  nlohmann::json p = nlohmann::json::array();
  const auto add = [&](const char* name, Nanos a, Nanos b) {
    if (b > a) p.push_back({{"phase", name}, {"start_ns", a}, {"end_ns", b}});
  };
  add("warm-up", L.start, L.warmup_end);
  add("steady", L.warmup_end, L.steady_end);
  add("degradation", L.steady_end, L.send_end);
  add("drain", L.send_end, L.end);
  return p;
}

ItemResult item_lifecycle(const Pair& p, nlohmann::json& base_phases, nlohmann::json& cand_phases) {
  const auto lc = lifecycle_of(p.cand, p.t);
  if (!lc) return no_data(5, "fewer than 8 windows with completions: the run is too short for phases");
  cand_phases = phases_json(*lc);
  ItemResult r;
  const auto evidence = [](const Lifecycle& L) {
    return nlohmann::json{{"window_s", L.window_s},
                          {"t_s", L.t_s},
                          {"output_tokens_per_s", L.tokens_per_s},
                          {"tpot_p50_ms", L.tpot_p50},
                          {"change_points_tokens", L.change_points_tokens},
                          {"change_points_tpot", L.change_points_tpot},
                          {"warmup_s", nanos_to_s(L.warmup_end - L.start)},
                          {"steady_share", L.steady_share()}};
  };
  r.evidence["candidate"] = evidence(*lc);
  const auto drift_finding = [&](const Lifecycle& L, const Lifecycle* B) {
    // The growth over the steady phase: the trend's slope times its length
    // (the candidate's), relative to the phase's mean TPOT.
    Finding f;
    f.metric = "TPOT growth over the steady phase";
    f.unit = "%";
    f.change_unit = "%";
    f.threshold = fmt::format("tolerance {}", pct(p.t.drift_tolerance));
    if (!L.drift || (B && !B->drift)) {
      f.note = "the steady phase is too short for a trend";
      return f;
    }
    const double z = z_of(p.t.confidence);
    const double len = L.steady_minutes;
    double est = L.drift->slope.estimate * len, se = L.drift->slope.std_error * len;
    if (B) {
      f.base = B->drift->slope.estimate * len;
      est -= *f.base;
      se = std::hypot(se, B->drift->slope.std_error * len);
    }
    f.value = L.drift->slope.estimate * len;
    f.change = est;
    f.ci_low = est - z * se;
    f.ci_high = est + z * se;
    f.verdict = classify_change({est, *f.ci_low, *f.ci_high}, p.t.drift_tolerance, Worse::kHigher);
    return f;
  };
  if (p.single()) {
    r.findings.push_back(drift_finding(*lc, nullptr));
    Finding d;
    d.metric = "degradation before the end of sending";
    d.unit = "s";
    d.change_unit = "s";
    d.value = nanos_to_s(lc->send_end - lc->steady_end);
    d.change = d.value;
    d.threshold = "a TPOT change point upwards in the second half";
    d.verdict = lc->steady_end < lc->send_end ? Verdict::kRegressed : Verdict::kPass;
    r.findings.push_back(std::move(d));
    return r;
  }
  const auto lb = lifecycle_of(*p.base, p.t);
  if (!lb) return no_data(5, "the base run is too short for phases");
  base_phases = phases_json(*lb);
  r.evidence["base"] = evidence(*lb);
  r.findings.push_back(drift_finding(*lc, &*lb));
  Finding w;
  w.metric = "warm-up length";
  w.unit = "s";
  w.change_unit = "s";
  w.base = nanos_to_s(lb->warmup_end - lb->start);
  w.value = nanos_to_s(lc->warmup_end - lc->start);
  w.change = *w.value - *w.base;
  w.threshold = fmt::format("tolerance {:g} s", p.t.warmup_tolerance_s);
  w.verdict = *w.change > p.t.warmup_tolerance_s    ? Verdict::kRegressed
              : *w.change < -p.t.warmup_tolerance_s ? Verdict::kImproved
                                                    : Verdict::kPass;
  w.note = "change points at the windows' resolution; no interval";
  r.findings.push_back(std::move(w));
  Finding s;
  s.metric = "steady phase's share of the sending time";
  s.unit = "share";
  s.change_unit = "share";
  s.base = lb->steady_share();
  s.value = lc->steady_share();
  s.change = *s.value - *s.base;
  s.threshold = fmt::format("tolerance {:g} share", p.t.steady_share_tolerance);
  s.verdict = *s.change < -p.t.steady_share_tolerance  ? Verdict::kRegressed
              : *s.change > p.t.steady_share_tolerance ? Verdict::kImproved
                                                       : Verdict::kPass;
  r.findings.push_back(std::move(s));
  return r;
}

// -------------------------------------------------------- sampled series
// Values of a series in blocks of about 10 points (roughly independent).
std::vector<double> blocked(const Series& s) {
  return block_means(s.v, 10);
}

Finding block_shift_finding(const std::string& metric, const std::string& unit, const std::vector<double>& b,
                            const std::vector<double>& c, double tolerance, Worse worse, double confidence) {
  Finding f;
  f.metric = metric;
  f.unit = unit;
  f.change_unit = unit;
  f.threshold = fmt::format("tolerance {:g} {}", tolerance, unit);
  if (b.size() < 3 || c.size() < 3) {
    f.note = fmt::format("too few values to compare ({} against {}; 3 each at least)", b.size(), c.size());
    return f;
  }
  const SortedSample sb(b, "base " + metric), sc(c, "candidate " + metric);
  f.base = std::accumulate(b.begin(), b.end(), 0.0) / static_cast<double>(b.size());
  f.value = std::accumulate(c.begin(), c.end(), 0.0) / static_cast<double>(c.size());
  const auto s = hodges_lehmann_shift(sb, sc, confidence);
  f.change = s.estimate;
  f.ci_low = s.ci_low;
  f.ci_high = s.ci_high;
  if (!s.ci_low || !s.ci_high) {
    f.verdict = Verdict::kInconclusive;
    f.note = "too few samples to bound the change";
    return f;
  }
  f.verdict = classify_change({s.estimate, *s.ci_low, *s.ci_high}, tolerance, worse);
  return f;
}

// A finding on blocks of a sampled series: when there were too few blocks,
// its note says what gives more.
Finding sampled(Finding f, std::size_t block) {
  if (f.verdict == Verdict::kNoData && !f.note.empty())
    f.note += fmt::format(
        "; each value is the mean of {} samples: a longer run, or a shorter bench --scrape-interval (1 s by "
        "default)",
        block);
  return f;
}

// A pair of blocked series: the base's and the candidate's, or the run's halves.
std::pair<std::vector<double>, std::vector<double>> blocked_pair(const Pair& p, const Series& b,
                                                                 const Series& c) {
  if (!p.single()) return {blocked(b), blocked(c)};
  Series first, second;
  const Nanos mid = c.t.empty() ? 0 : c.t.front() + (c.t.back() - c.t.front()) / 2;
  for (std::size_t i = 0; i < c.t.size(); ++i) {
    Series& s = c.t[i] < mid ? first : second;
    s.t.push_back(c.t[i]);
    s.v.push_back(c.v[i]);
  }
  return {blocked(first), blocked(second)};
}

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

// -------------------------------------------------------- 8 collectives
ItemResult item_collectives(const Pair& p, const ExtraInputs& extra) {
  if (p.single()) return no_data(8, "needs two runs");
  const auto source = [](const std::string& given,
                         const RunData& run) -> std::optional<std::filesystem::path> {
    if (!given.empty()) return std::filesystem::path(given);
    if (run.dir.empty()) return std::nullopt;
    return find_collectives(run.dir);
  };
  const auto fb = source(extra.collectives_base, *p.base), fc = source(extra.collectives_cand, p.cand);
  if (!fb || !fc)
    return no_data(
        8,
        "no collectives measurements (check --collectives BASE_FILE,CAND_FILE, or collectives.json "
        "/ nccl-tests output in the run directories)");
  const CollectivesData b = load_collectives(*fb), c = load_collectives(*fc);
  ItemResult r;
  const double conf = p.t.confidence;
  for (const CollectiveSeries& sc : c.series) {
    const auto sb = std::find_if(b.series.begin(), b.series.end(),
                                 [&](const CollectiveSeries& s) { return s.collective == sc.collective; });
    if (sb == b.series.end() || sc.bytes.empty()) continue;
    // Matched message sizes in the bandwidth regime (at least 1/64 of the
    // largest): the log ratio of times per size, its mean with a t interval.
    const double big = std::min(sb->bytes.back(), sc.bytes.back()) / 64;
    std::vector<double> lr;
    for (std::size_t i = 0; i < sc.bytes.size(); ++i) {
      if (sc.bytes[i] < big) continue;
      const auto it = std::lower_bound(sb->bytes.begin(), sb->bytes.end(), sc.bytes[i]);
      if (it == sb->bytes.end() || *it != sc.bytes[i]) continue;
      lr.push_back(std::log(sb->time_us[static_cast<std::size_t>(it - sb->bytes.begin())] / sc.time_us[i]));
    }
    Finding f;
    f.metric = sc.collective + " bandwidth at large messages";
    f.unit = "ratio";
    f.change_unit = "%";
    f.threshold = fmt::format("tolerance {}", pct(p.t.busbw_tolerance));
    if (lr.size() < 3) {
      f.note = "fewer than 3 message sizes in common";
      r.findings.push_back(std::move(f));
      continue;
    }
    const double n = static_cast<double>(lr.size());
    const double mean = std::accumulate(lr.begin(), lr.end(), 0.0) / n;
    double ss = 0;
    for (double v : lr) ss += (v - mean) * (v - mean);
    const double se = std::sqrt(ss / (n - 1) / n);
    const double tq = boost::math::quantile(boost::math::students_t(n - 1), 0.5 + conf / 2);
    f.change = std::expm1(mean);
    f.ci_low = std::expm1(mean - tq * se);
    f.ci_high = std::expm1(mean + tq * se);
    f.note = fmt::format("{} message sizes from {:.0f} bytes", lr.size(), big);
    f.verdict = classify_change({*f.change, *f.ci_low, *f.ci_high}, p.t.busbw_tolerance, Worse::kLower);
    r.findings.push_back(std::move(f));
    // The alpha-beta fits (evidence).
    const auto ab = [](const CollectiveSeries& s) {
      const auto fit = probe::fit_alpha_beta(s.bytes, s.time_us);
      return nlohmann::json{{"alpha_us", fit.alpha_us},
                            {"alpha_ci95", fit.alpha_ci95},
                            {"asymptotic_gbps", fit.asymptotic_gbps()},
                            {"r_squared", fit.r_squared}};
    };
    r.evidence[sc.collective] = {{"base", ab(*sb)},         {"candidate", ab(sc)},
                                 {"bytes", sc.bytes},       {"candidate_busbw_gbps", sc.busbw_gbps},
                                 {"base_bytes", sb->bytes}, {"base_busbw_gbps", sb->busbw_gbps}};
  }
  if (!c.pair_gbps.empty()) {
    const auto slow = probe::slow_pairs(c.pair_gbps, 1 - p.t.pair_deviation_max);
    const auto slow_b = b.pair_gbps.empty() ? std::vector<probe::PairDeviation>{}
                                            : probe::slow_pairs(b.pair_gbps, 1 - p.t.pair_deviation_max);
    Finding f;
    f.metric = "pairs slower than the median pair";
    f.unit = "pairs";
    f.change_unit = "pairs";
    f.base = static_cast<double>(slow_b.size());
    f.value = static_cast<double>(slow.size());
    f.change = f.value;
    f.threshold = fmt::format("a pair below {} of the median", pct(1 - p.t.pair_deviation_max));
    f.verdict = slow.size() > slow_b.size() ? Verdict::kRegressed : Verdict::kPass;
    nlohmann::json pairs = nlohmann::json::array();
    for (const auto& s : slow)
      pairs.push_back({{"from", s.from}, {"to", s.to}, {"gbps", s.gbps}, {"vs_median", s.vs_median}});
    r.evidence["slow_pairs"] = pairs;
    r.findings.push_back(std::move(f));
  }
  if (r.findings.empty()) return no_data(8, "no collective measured in both runs");
  return r;
}

// ------------------------------------------------------ 6 GPU efficiency
ItemResult item_gpu(const Pair& p) {
  if (p.single()) return no_data(6, "needs two runs");
  const auto efficiency = [&](const RunData& run, std::vector<double>& eff, double& idle_backlog) {
    const Series util = find_series(run, "gpu_utilization");
    const Series tokens = counter_rate(find_series(run, "generation_tokens"));
    const Series waiting = find_series(run, "requests_waiting");
    if (util.empty() || tokens.empty()) return false;
    // Per tokens interval: tokens/s divided by the mean utilisation sampled in it.
    std::size_t u = 0, w = 0, idle = 0, counted = 0;
    for (std::size_t i = 0; i < tokens.t.size(); ++i) {
      const Nanos t0 = i == 0 ? INT64_MIN : tokens.t[i - 1];
      double sum = 0;
      std::size_t n = 0;
      while (u < util.t.size() && util.t[u] <= tokens.t[i]) {
        if (util.t[u] > t0) sum += util.v[u], ++n;
        ++u;
      }
      if (n == 0 || sum <= 0) continue;
      eff.push_back(tokens.v[i] / (sum / static_cast<double>(n)));
    }
    for (std::size_t i = 0; i < util.t.size(); ++i) {
      while (w + 1 < waiting.t.size() && waiting.t[w + 1] <= util.t[i]) ++w;
      if (waiting.empty()) break;
      ++counted;
      if (util.v[i] < p.t.idle_utilization && waiting.v[w] > 0) ++idle;
    }
    idle_backlog = counted ? static_cast<double>(idle) / static_cast<double>(counted) : 0.0;
    return true;
  };
  std::vector<double> eb, ec;
  double ib = 0, ic = 0;
  if (!efficiency(*p.base, eb, ib) || !efficiency(p.cand, ec, ic)) {
    // Say which series is missing from which run, and why bench has none.
    const auto lacks = [](const RunData& run, const char* name, bool rate) {
      const Series s = find_series(run, name);
      return rate ? counter_rate(s).empty() : s.empty();
    };
    std::vector<std::string> why;
    const bool ub = lacks(*p.base, "gpu_utilization", false), uc = lacks(p.cand, "gpu_utilization", false);
    if (ub || uc)
      why.push_back(fmt::format(
          "no GPU utilisation among the {} samples{}: bench samples the GPUs of the machine it runs on "
          "through NVML, a remote server's with --gpu-sampler URL (a DCGM exporter); sim writes none",
          ub && uc ? "runs'"
          : ub     ? "base's"
                   : "candidate's",
          missing_reasons(p, "gpu", ub, uc)));
    const bool tb = lacks(*p.base, "generation_tokens", true), tc = lacks(p.cand, "generation_tokens", true);
    if (tb || tc)
      why.push_back(
          fmt::format("no output-token counter among the {} samples{}: it comes from the server's /metrics "
                      "(llama-server serves them with --metrics)",
                      tb && tc ? "runs'"
                      : tb     ? "base's"
                               : "candidate's",
                      missing_reasons(p, "server", tb, tc)));
    return no_data(6, fmt::format("{}", fmt::join(why, "; ")));
  }
  ItemResult r;
  r.findings.push_back(
      sampled(block_shift_finding("output tokens/s per GPU busy", "tok/s", block_means(eb, 5),
                                  block_means(ec, 5), 0, Worse::kLower, p.t.confidence),
              5));
  // Relative tolerance: turn it into the base's units.
  Finding& f = r.findings.back();
  if (f.base) {
    const double tol = p.t.gpu_efficiency_tolerance * *f.base;
    f.threshold = fmt::format("tolerance {}", pct(p.t.gpu_efficiency_tolerance));
    if (f.ci_low && f.ci_high)
      f.verdict = classify_change({*f.change, *f.ci_low, *f.ci_high}, tol, Worse::kLower);
  }
  Finding idle;
  idle.metric = "GPU idle while requests wait";
  idle.unit = "share";
  idle.change_unit = "share";
  idle.base = ib;
  idle.value = ic;
  idle.change = ic;
  idle.threshold = fmt::format("at most {:g} share", p.t.idle_backlog_max);
  idle.verdict = ic > p.t.idle_backlog_max && ic > ib ? Verdict::kRegressed : Verdict::kPass;
  r.findings.push_back(idle);
  return r;
}

// ------------------------------------------------------ 7 KV locality
struct HitRate {
  double rate = 0, se = 0;
  std::size_t n = 0, blocks = 0;
};

// The prefix-cache hit rate of prompt tokens over requests (cached / prompt,
// token weighted), with the ratio estimator's standard error; from the
// requests' cached_tokens (sent by vLLM, sim and the built-in server).
std::optional<HitRate> hit_rate(const RunData& run, Nanos t0 = INT64_MIN, Nanos t1 = INT64_MAX) {
  const RequestArrays& a = run.requests;
  std::vector<double> c, q;
  std::vector<Nanos> send;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a.counted(i) || a.cached_tokens[i] < 0 || a.prompt_tokens[i] <= 0) continue;
    if (a.t_send[i] < t0 || a.t_send[i] >= t1) continue;
    c.push_back(a.cached_tokens[i]);
    q.push_back(a.prompt_tokens[i]);
    send.push_back(a.t_send[i]);
  }
  if (c.size() < 2) return std::nullopt;
  HitRate h;
  h.n = c.size();
  h.rate = std::accumulate(c.begin(), c.end(), 0.0) / std::accumulate(q.begin(), q.end(), 0.0);
  // The standard error by batch means over blocks of consecutive requests:
  // the cache's state carries over from request to request, so requests
  // close in time hit alike.
  std::vector<double> rates;
  for (const auto& block : time_blocks(send)) {
    double sc = 0, sq = 0;
    for (std::size_t i : block) sc += c[i], sq += q[i];
    if (sq > 0) rates.push_back(sc / sq);
  }
  const BlockEstimate be = block_estimate(rates);
  if (be.blocks < 5) return std::nullopt;
  h.se = be.se;
  h.blocks = be.blocks;
  return h;
}

ItemResult item_locality(const Pair& p) {
  std::optional<HitRate> b, c;
  if (p.single()) {
    const Nanos mid = send_midpoint(p.cand);
    b = hit_rate(p.cand, INT64_MIN, mid);
    c = hit_rate(p.cand, mid, INT64_MAX);
  } else {
    b = hit_rate(*p.base);
    c = hit_rate(p.cand);
  }
  if (!b || !c) {
    const auto reported = [](const RunData& run) {
      const RequestArrays& a = run.requests;
      std::size_t n = 0;
      for (std::size_t i = 0; i < a.size(); ++i)
        n += a.counted(i) && a.cached_tokens[i] >= 0 && a.prompt_tokens[i] > 0 ? 1 : 0;
      return n;
    };
    return no_data(
        7,
        fmt::format("fewer than 500 requests (per run, or per half of one run) reported their cached prompt "
                    "tokens ({}): the hit rate's interval needs at least five blocks of 100 (vLLM sends "
                    "them with prompt_tokens_details, llama-server as its timings' prompt tokens "
                    "evaluated, sim and the built-in server always)",
                    p.single() ? fmt::format("{} in the run", reported(p.cand))
                               : fmt::format("base {}, candidate {}", reported(*p.base), reported(p.cand))));
  }
  ItemResult r;
  Finding f = normal_change_finding(
      p.single() ? "hit rate, second half against first" : "prefix-cache hit rate", "ratio", b->rate, c->rate,
      std::hypot(b->se, c->se), p.t.hit_rate_tolerance, Worse::kLower, p.t.confidence, "ratio");
  r.findings.push_back(std::move(f));
  // bench's fit of the hit probability over reuse distance (run.json
  // kv_locality: hit(d) = a exp(-d / scale), bootstrap intervals): the
  // candidate's scale against the base's, in logs, the standard errors from
  // the intervals' widths.
  const auto fit_of = [](const RunData* run) -> const nlohmann::json* {
    if (!run) return nullptr;
    const auto* fit = observe::json_path(run->run_json, {"kv_locality", "fit"});
    return fit && fit->is_object() ? fit : nullptr;
  };
  for (const RunData* run : {p.base, &p.cand})
    if (const auto* fit = fit_of(run))
      r.evidence[run == p.base ? "base_reuse_fit" : "candidate_reuse_fit"] = *fit;
  const auto scale = [](const nlohmann::json* fit) -> std::optional<std::pair<double, double>> {
    if (!fit || !fit->contains("scale_blocks") || !(*fit)["scale_blocks"].is_number() ||
        !fit->contains("scale_blocks_ci95") || !(*fit)["scale_blocks_ci95"].is_array() ||
        (*fit)["scale_blocks_ci95"].size() != 2 || !(*fit)["scale_blocks_ci95"][0].is_number() ||
        !(*fit)["scale_blocks_ci95"][1].is_number())
      return std::nullopt;
    const double s = (*fit)["scale_blocks"].get<double>(), lo = (*fit)["scale_blocks_ci95"][0].get<double>(),
                 hi = (*fit)["scale_blocks_ci95"][1].get<double>();
    if (!(s > 0 && lo > 0 && hi >= lo)) return std::nullopt;
    return std::pair{std::log(s), (std::log(hi) - std::log(lo)) / (2 * 1.959963984540054)};
  };
  if (!p.single())
    if (const auto sb = scale(fit_of(p.base)), sc = scale(fit_of(&p.cand)); sb && sc) {
      const double z = z_of(p.t.confidence), d = sc->first - sb->first,
                   se = std::hypot(sb->second, sc->second);
      Finding f;
      f.metric = "decay scale of the hit probability over reuse distance";
      f.unit = "blocks";
      f.change_unit = "%";
      f.base = std::exp(sb->first);
      f.value = std::exp(sc->first);
      f.change = std::expm1(d);
      f.ci_low = std::expm1(d - z * se);
      f.ci_high = std::expm1(d + z * se);
      f.threshold = fmt::format("tolerance {}", pct(p.t.reuse_scale_tolerance));
      f.verdict =
          classify_change({*f.change, *f.ci_low, *f.ci_high}, p.t.reuse_scale_tolerance, Worse::kLower);
      f.note = "bench's kv_locality fit, intervals from its bootstrap";
      r.findings.push_back(std::move(f));
    }
  return r;
}

// -------------------------------------------------------- 9 recompilation
// Per request shape (its prompt length rounded up to a power of two, the
// padded length a server compiles kernels or captures graphs for): the TTFT
// of the first request of the shape against the next one's, as a relative
// excess. For runs against a server, which has no steps to read.
std::vector<double> request_shape_excess(const RunData& run) {
  const RequestArrays& a = run.requests;
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a.counted(i) && a.prompt_tokens[i] > 0 && std::isfinite(a.ttft_ms(i))) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return a.t_send[x] < a.t_send[y]; });
  std::map<std::uint32_t, ShapeSightings> shapes;
  for (std::size_t i : order) {
    std::uint32_t b = 1;
    while (b < static_cast<std::uint32_t>(a.prompt_tokens[i]) && b < (1u << 30)) b <<= 1;
    shapes[b].add(a.t_send[i], a.ttft_ms(i));
  }
  std::vector<double> out;
  for (const auto& [shape, s] : shapes)
    if (s.first_t >= 0 && s.second_t >= 0 && s.second_ms > 0) out.push_back(s.first_ms / s.second_ms - 1);
  return out;
}

// How many new, gone and most first-launch-heavy kernels item 9's evidence lists.
constexpr std::size_t kKernelsListed = 10;

// The kernel inventory diff (analyze/kernels.h): the candidate's GPU time in
// kernels the base never launched, and each common kernel's first launch
// over its median, the candidate's against the base's (Hodges-Lehmann).
void kernel_findings(const Pair& p, const KernelInventory& kb, const KernelInventory& kc, ItemResult& r) {
  const KernelDiff d = diff_kernels(kb, kc);
  {
    Finding f;
    f.metric = "candidate GPU time in kernels the base did not launch";
    f.unit = "share";
    f.change_unit = "share";
    f.value = d.new_time_share;
    f.change = d.new_time_share;
    f.threshold = fmt::format("at most {}", pct(p.t.new_kernel_share_max));
    f.verdict = d.new_time_share > p.t.new_kernel_share_max ? Verdict::kRegressed : Verdict::kPass;
    f.note = fmt::format("{} new kernel{}, {} gone ({} of the base's kernel time), {} in both",
                         d.new_kernels.size(), d.new_kernels.size() == 1 ? "" : "s", d.gone_kernels.size(),
                         pct(d.gone_time_share), d.common);
    r.findings.push_back(std::move(f));
  }
  Finding e = block_shift_finding("first launch of a kernel over its median (CUPTI)", "ratio", d.base_excess,
                                  d.cand_excess, p.t.recompile_tolerance, Worse::kHigher, p.t.confidence);
  e.change_unit = "ratio";
  e.note = fmt::format("{} kernel{} launched at least {} times in both runs{}", d.compared.size(),
                       d.compared.size() == 1 ? "" : "s", kMinLaunchesForExcess,
                       e.note.empty() ? "" : "; " + e.note);
  r.findings.push_back(std::move(e));
  const auto run = [](const KernelInventory& k) {
    return nlohmann::json{{"source", k.source},
                          {"format", k.format},
                          {"kernels", k.kernels.size()},
                          {"launches", k.launches},
                          {"gpu_ms", static_cast<double>(k.total_ns) / 1e6}};
  };
  const auto listed = [](const std::vector<KernelStats>& ks, const KernelInventory& of) {
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t i = 0; i < ks.size() && i < kKernelsListed; ++i)
      out.push_back(
          {{"name", ks[i].label},
           {"launches", ks[i].launches},
           {"gpu_ms", static_cast<double>(ks[i].total_ns) / 1e6},
           {"share",
            of.total_ns > 0 ? static_cast<double>(ks[i].total_ns) / static_cast<double>(of.total_ns) : 0.0}});
    return out;
  };
  // The common kernels whose first launch stands out most in the candidate.
  std::vector<std::size_t> order(d.compared.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return d.cand_excess[x] > d.cand_excess[y]; });
  nlohmann::json first = nlohmann::json::array();
  for (std::size_t i = 0; i < order.size() && i < kKernelsListed; ++i) {
    const std::size_t k = order[i];
    const KernelStats* s = kc.find(d.compared[k]);
    first.push_back({{"name", s ? s->label : d.compared[k]},
                     {"base_excess", d.base_excess[k]},
                     {"candidate_excess", d.cand_excess[k]}});
  }
  r.evidence["kernels"] = {{"base", run(kb)},
                           {"candidate", run(kc)},
                           {"common", d.common},
                           {"new", d.new_kernels.size()},
                           {"gone", d.gone_kernels.size()},
                           {"new_time_share", d.new_time_share},
                           {"gone_time_share", d.gone_time_share},
                           {"top_new", listed(d.new_kernels, kc)},
                           {"top_gone", listed(d.gone_kernels, kb)},
                           {"compared", d.compared.size()},
                           {"largest_first_launch_excess", first}};
}

ItemResult item_recompile(const Pair& p, const ExtraInputs& extra) {
  if (p.single()) return no_data(9, "needs two runs");
  ItemResult r;
  // Each shape's first step against its second (relative excess): from
  // sim's steps when both runs have them (shapes as the engine keys them),
  // else from the requests (first-shape times); the candidate's excesses
  // against the base's (Hodges-Lehmann).
  const auto step_excess = [](const RunData& run) {
    std::vector<double> out;
    for (const auto& [shape, s] : run.steps.stats.shapes)
      if (s.first_t >= 0 && s.second_t >= 0 && s.second_ms > 0) out.push_back(s.first_ms / s.second_ms - 1);
    return out;
  };
  const bool enough =
      counted_requests(*p.base) >= p.t.min_requests && counted_requests(p.cand) >= p.t.min_requests;
  const bool steps = !p.base->steps.stats.shapes.empty() && !p.cand.steps.stats.shapes.empty();
  std::string shapes_missing;
  if (!enough) {
    shapes_missing = fmt::format("fewer than {:g} completed requests in a run", p.t.min_requests);
  } else {
    const auto b = steps ? step_excess(*p.base) : request_shape_excess(*p.base);
    const auto c = steps ? step_excess(p.cand) : request_shape_excess(p.cand);
    if (b.size() < 3 || c.size() < 3) {
      shapes_missing = fmt::format("fewer than 3 shapes seen twice in a run (base {}, candidate {}): {}",
                                   b.size(), c.size(),
                                   steps ? "step shapes of sim"
                                         : "prompt-length buckets of the requests, powers of two (prompts of "
                                           "one length are one bucket)");
    } else {
      Finding f = block_shift_finding(steps ? "first step of a shape over its next"
                                            : "first request of a prompt-length bucket over its next (TTFT)",
                                      "ratio", b, c, p.t.recompile_tolerance, Worse::kHigher, p.t.confidence);
      f.change_unit = "ratio";
      f.note = fmt::format("{}{} shapes seen twice in the candidate, {} in the base",
                           f.note.empty() ? "" : f.note + "; ", c.size(), b.size());
      r.findings.push_back(std::move(f));
      r.evidence["source"] = steps ? "steps" : "requests";
      r.evidence["base_excess"] = b;
      r.evidence["candidate_excess"] = c;
    }
  }
  // The kernel records: the files given, else the CUPTI lines of both runs' samples.jsonl.
  std::optional<KernelInventory> loaded_b, loaded_c;
  const KernelInventory *kb = nullptr, *kc = nullptr;
  std::string kernels_missing;
  if (!extra.kernels_base.empty() && !extra.kernels_cand.empty()) {
    loaded_b = load_kernels(extra.kernels_base);
    loaded_c = load_kernels(extra.kernels_cand);
    kb = &*loaded_b;
    kc = &*loaded_c;
  } else if (!p.base->kernels.empty() && !p.cand.kernels.empty()) {
    kb = &p.base->kernels;
    kc = &p.cand.kernels;
  } else {
    kernels_missing = fmt::format(
        "{} (check --kernels BASE_FILE,CAND_FILE: the CUPTI lines of probe gpu-context or an nsys SQLite "
        "export)",
        p.base->kernels.empty() && p.cand.kernels.empty()
            ? "no CUPTI kernel records"
            : fmt::format("CUPTI kernel records in the {}'s samples.jsonl only",
                          p.base->kernels.empty() ? "candidate" : "base"));
  }
  if (kb && kc) kernel_findings(p, *kb, *kc, r);
  if (r.findings.empty()) return no_data(9, shapes_missing + "; " + kernels_missing);
  return r;
}

// ----------------------------------------------------------- 10 batching
ItemResult item_batching(const Pair& p) {
  ItemResult r;
  const Series wc = find_series(p.cand, "requests_waiting"), rc = find_series(p.cand, "requests_running");
  if (rc.empty())
    return no_data(
        10, fmt::format("no running-requests series among the {} samples{}: it comes from the "
                        "server's /metrics (llama-server serves them with --metrics) or sim",
                        p.single() ? "run's" : "candidate's", missing_reasons(p, "server", false, true)));
  // The waiting queue: a batcher that admits less leaves more waiting.
  if (!p.single()) {
    const Series wb = find_series(*p.base, "requests_waiting");
    const auto [b, c] = blocked_pair(p, wb, wc);
    Finding f = sampled(
        block_shift_finding("requests waiting", "requests", b, c, 0, Worse::kHigher, p.t.confidence), 10);
    f.threshold = fmt::format("tolerance {} (1 request at least)", pct(p.t.batch_tolerance));
    if (f.base && f.ci_low && f.ci_high) {
      const double tol = std::max(1.0, p.t.batch_tolerance * std::max(*f.base, 1.0));
      f.threshold = fmt::format("tolerance {:g} requests", tol);
      f.verdict = classify_change({*f.change, *f.ci_low, *f.ci_high}, tol, Worse::kHigher);
    }
    // llama-server's waiting gauge (requests_deferred) counts the requests
    // its HTTP threads hold without a slot; requests beyond its threads
    // wait in its HTTP queue, where no metric sees them.
    if (server_engine_is(*p.base, "llama.cpp") || server_engine_is(p.cand, "llama.cpp"))
      f.note += std::string(f.note.empty() ? "" : "; ") +
                "llama-server counts as waiting only the requests its HTTP threads hold (max(--parallel + 2, "
                "cores - 1) threads by default); more in flight wait unseen in its HTTP queue";
    r.findings.push_back(std::move(f));
  }
  // The share of time at the batch cap.
  const auto cap_share = [&](const RunData& run, const Series& running, const Series& waiting,
                             std::vector<double>& blocks) -> std::optional<double> {
    const auto cap = engine_setting(run, "max_num_seqs");
    if (!cap || running.empty()) return std::nullopt;
    std::vector<double> at;
    std::size_t w = 0;
    for (std::size_t i = 0; i < running.t.size(); ++i) {
      while (w + 1 < waiting.t.size() && waiting.t[w + 1] <= running.t[i]) ++w;
      at.push_back(running.v[i] >= *cap && !waiting.empty() && waiting.v[w] > 0 ? 1.0 : 0.0);
    }
    blocks = block_means(at, 10);
    return std::accumulate(at.begin(), at.end(), 0.0) / static_cast<double>(at.size());
  };
  std::vector<double> blocks_c;
  const auto sc = cap_share(p.cand, rc, wc, blocks_c);
  if (p.single() && sc) {
    Finding f;
    f.metric = "time at the batch cap with requests waiting";
    f.unit = "share";
    f.change_unit = "share";
    f.value = *sc;
    f.change = *sc;
    f.threshold = fmt::format("at most {:g} share", p.t.cap_share_max);
    f.verdict = *sc > p.t.cap_share_max ? Verdict::kRegressed : Verdict::kPass;
    r.findings.push_back(std::move(f));
  } else if (!p.single() && sc) {
    std::vector<double> blocks_b;
    const auto sb = cap_share(*p.base, find_series(*p.base, "requests_running"),
                              find_series(*p.base, "requests_waiting"), blocks_b);
    if (sb) {
      Finding f =
          sampled(block_shift_finding("time at the batch cap with requests waiting", "share", blocks_b,
                                      blocks_c, p.t.batch_tolerance, Worse::kHigher, p.t.confidence),
                  10);
      r.findings.push_back(std::move(f));
    }
  }
  // The batch-size distribution: its entropy (evidence).
  const auto entropy = [](const RunData& run) -> std::optional<double> {
    const auto& h = run.steps.stats.seqs_histogram;
    std::vector<double> counts;
    if (!h.empty()) {
      for (const auto& [k, n] : h) counts.push_back(static_cast<double>(n));
    } else {
      std::map<long, double> m;
      for (double v : find_series(run, "requests_running").v) m[std::lround(v)] += 1;
      for (const auto& [k, n] : m) counts.push_back(n);
    }
    if (counts.empty()) return std::nullopt;
    return shannon_entropy_bits(counts);
  };
  if (const auto ec = entropy(p.cand)) {
    r.evidence["entropy_bits"] = {{"candidate", *ec}};
    if (!p.single())
      if (const auto eb = entropy(*p.base)) {
        r.evidence["entropy_bits"]["base"] = *eb;
        r.evidence["entropy_bits"]["regime_changed"] = std::abs(*ec - *eb) > p.t.entropy_tolerance;
      }
  }
  if (r.findings.empty())
    return no_data(10, p.single()
                           ? "one run is judged by its time at the batch cap, and its cap is not known: "
                             "max_num_seqs of sim and of the built-in server; bench does not record a "
                             "remote server's (llama-server's --parallel, vLLM's --max-num-seqs)"
                           : "no batch cap known (max_num_seqs) and no waiting series");
  return r;
}

// --------------------------------------------------------- 12 contention
ItemResult item_contention(const Pair& p) {
  ItemResult r;
  for (const char* name : {"cgroup_cpu_pressure_some", "host_cpu_pressure_some"}) {
    const Series c = find_series(p.cand, name);
    if (c.empty()) continue;
    if (p.single()) {
      const double mean = std::accumulate(c.v.begin(), c.v.end(), 0.0) / static_cast<double>(c.v.size());
      Finding f;
      f.metric = std::string("mean ") + name;
      f.unit = "share";
      f.change_unit = "share";
      f.value = mean;
      f.change = mean;
      f.threshold = fmt::format("at most {:g} share", p.t.psi_max);
      f.verdict = mean > p.t.psi_max ? Verdict::kRegressed : Verdict::kPass;
      r.findings.push_back(std::move(f));
    } else {
      const Series b = find_series(*p.base, name);
      if (b.empty()) continue;
      r.findings.push_back(
          sampled(block_shift_finding(std::string("mean ") + name, "share", blocked(b), blocked(c),
                                      p.t.psi_tolerance, Worse::kHigher, p.t.confidence),
                  10));
    }
    break;  // the server's own cgroup when there is one, else the host
  }
  {
    const Series c = counter_rate(find_series(p.cand, "cgroup_cpu_throttled_seconds"));
    if (!c.empty() && !p.single()) {
      const Series b = counter_rate(find_series(*p.base, "cgroup_cpu_throttled_seconds"));
      if (!b.empty())
        r.findings.push_back(
            sampled(block_shift_finding("share of time throttled", "share", blocked(b), blocked(c),
                                        p.t.throttle_tolerance, Worse::kHigher, p.t.confidence),
                    10));
    }
  }
  if (r.findings.empty())
    return no_data(
        12, fmt::format("no pressure-stall or cgroup series among the samples{}{}: bench reads the "
                        "host's CPU pressure from /proc/pressure/cpu (a Linux kernel with PSI) and, "
                        "with --server-pid PID, the server's cgroup v2",
                        missing_reasons(p, "host", true, true), missing_reasons(p, "cgroup", true, true)));
  return r;
}

}  // namespace

const std::vector<ItemInfo>& checklist_items() {
  return kItems;
}

CheckResult run_checklist(const RunData* base, const RunData& cand, const Thresholds& thresholds,
                          const ExtraInputs& extra) {
  CheckResult out;
  out.single = base == nullptr;
  out.base_name = base ? base->name : "";
  out.cand_name = cand.name;
  out.thresholds = thresholds;
  const Pair p{base, cand, thresholds};
  const bool enough = counted_requests(cand) >= thresholds.min_requests &&
                      (!base || counted_requests(*base) >= thresholds.min_requests);
  for (const ItemInfo& info : kItems) {
    ItemResult r;
    if (out.single && !info.single_run) continue;
    const auto started = std::chrono::steady_clock::now();
    if (!enough && info.number != 8 && info.number != 9 && info.number != 11) {
      r = no_data(info.number,
                  fmt::format("fewer than {:g} completed requests in a run", thresholds.min_requests));
    } else {
      switch (info.number) {
        case 1:
          r = item_latency_model(p);
          break;
        case 2:
          r = item_slo(p);
          break;
        case 3:
          r = item_coupling(p);
          break;
        case 4:
          r = item_tail(p);
          break;
        case 5:
          r = item_lifecycle(p, out.base_phases, out.cand_phases);
          break;
        case 6:
          r = item_gpu(p);
          break;
        case 7:
          r = item_locality(p);
          break;
        case 8:
          r = item_collectives(p, extra);
          break;
        case 9:
          r = item_recompile(p, extra);  // gates itself: its kernel records need no requests
          break;
        case 10:
          r = item_batching(p);
          break;
        case 11:
          r = quantization_item(*base, cand, thresholds, extra);  // analyze/quantization.h
          break;
        case 12:
          r = item_contention(p);
          break;
      }
      if (!r.findings.empty()) conclude(r);
    }
    r.number = info.number;
    r.id = info.id;
    r.title = info.title;
    if (r.summary.empty() && r.decisive) {
      // An item whose findings have no data says why (the decisive one's note).
      const Finding& f = r.findings[*r.decisive];
      r.summary =
          f.metric + ": " +
          (r.verdict == Verdict::kNoData && !f.note.empty() ? f.note : std::string(to_string(f.verdict)));
    }
    r.elapsed_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    out.overall = combine(out.overall, r.verdict);
    out.items.push_back(std::move(r));
  }
  DmlOptions dml;
  dml.confidence = thresholds.confidence;
  const auto started = std::chrono::steady_clock::now();
  if (base) out.base_attribution = attribute(*base, dml);
  out.cand_attribution = attribute(cand, dml);
  out.attribution_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return out;
}

namespace {
nlohmann::json opt(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
}  // namespace

nlohmann::json to_json(const CheckResult& r) {
  nlohmann::json j;
  j["mode"] = r.single ? "single" : "compare";
  j["base"] = r.single ? nlohmann::json(nullptr) : nlohmann::json(r.base_name);
  j["candidate"] = r.cand_name;
  j["overall"] = std::string(to_string(r.overall));
  j["exit_code"] = exit_code_for(r.overall);
  nlohmann::json items = nlohmann::json::array();
  for (const ItemResult& it : r.items) {
    nlohmann::json ji;
    ji["number"] = it.number;
    ji["id"] = it.id;
    ji["title"] = it.title;
    ji["verdict"] = std::string(to_string(it.verdict));
    ji["summary"] = it.summary;
    ji["elapsed_ms"] = it.elapsed_ms;
    ji["decisive"] = it.decisive ? nlohmann::json(*it.decisive) : nlohmann::json(nullptr);
    nlohmann::json fs = nlohmann::json::array();
    for (const Finding& f : it.findings) {
      nlohmann::json jf = {{"metric", f.metric},        {"unit", f.unit},
                           {"base", opt(f.base)},       {"value", opt(f.value)},
                           {"change", opt(f.change)},   {"ci_low", opt(f.ci_low)},
                           {"ci_high", opt(f.ci_high)}, {"change_unit", f.change_unit},
                           {"threshold", f.threshold},  {"verdict", std::string(to_string(f.verdict))}};
      jf["more_requests"] = f.more_requests ? nlohmann::json(*f.more_requests) : nlohmann::json(nullptr);
      if (!f.note.empty()) jf["note"] = f.note;
      fs.push_back(std::move(jf));
    }
    ji["findings"] = std::move(fs);
    ji["evidence"] = it.evidence;
    items.push_back(std::move(ji));
  }
  j["items"] = std::move(items);
  nlohmann::json th = nlohmann::json::object();
  for (const auto& k : threshold_keys()) th[k.key] = *threshold_value(r.thresholds, k.key);
  j["thresholds"] = std::move(th);
  j["phases"] = {{"base", r.base_phases}, {"candidate", r.cand_phases}};
  j["attribution"] = {
      {"base", r.base_attribution ? to_json(*r.base_attribution) : nlohmann::json(nullptr)},
      {"candidate", r.cand_attribution ? to_json(*r.cand_attribution) : nlohmann::json(nullptr)}};
  return j;
}

}  // namespace tokenscope::analyze
