// The checklist's item 5 (lifecycle): warm-up, steady phase, drift.
#include "analyze/checklist_items.h"

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
#include "analyze/kernel_diff.h"
#include "analyze/quantization.h"
#include "analyze/regression.h"
#include "core/error.h"
#include "core/stats.h"
#include "probe/collectives.h"
#include "rundir/readers.h"

namespace tokenscope::analyze::detail {

namespace {
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
  // What ended the warm-up and what started the degradation, in words: the
  // series, its step and when ("median TPOT fell 8.2 -> 7.5 ms at 65.8 s");
  // empty when there was none.
  std::string warmup_cause, degradation_cause;
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
  // A change point starts or ends a phase only when the series' mean moved
  // by lifecycle.phase_min_change at least: windows of a queue are
  // correlated, and a significant but small step is the queue's wander.
  const auto material = [&](const ChangePoint& c) {
    return c.mean_before != 0 &&
           std::abs(c.mean_after - c.mean_before) / std::abs(c.mean_before) >= th.phase_min_change;
  };
  const auto cause = [&](const char* series, const char* moved, const char* unit, const ChangePoint& c) {
    return fmt::format("{} {} {:.4g} -> {:.4g} {} at {:.1f} s", series, moved, c.mean_before, c.mean_after,
                       unit, nanos_to_s(at(c.index) - L.start));
  };
  L.warmup_end = L.start;
  for (const auto& c : cp_tok)
    if (L.t_s[c.index] <= half && c.mean_after > c.mean_before && material(c) && at(c.index) > L.warmup_end) {
      L.warmup_end = at(c.index);
      L.warmup_cause = cause("output tokens/s", "rose", "tok/s", c);
    }
  for (const auto& c : cp_tpot)
    if (L.t_s[c.index] <= half && c.mean_after < c.mean_before && material(c) && at(c.index) > L.warmup_end) {
      L.warmup_end = at(c.index);
      L.warmup_cause = cause("median TPOT", "fell", "ms", c);
    }
  L.steady_end = L.send_end;
  for (const auto& c : cp_tpot)
    if (at(c.index) > L.warmup_end && c.mean_after > c.mean_before && L.t_s[c.index] > half && material(c)) {
      L.steady_end = at(c.index);
      L.degradation_cause = cause("median TPOT", "rose", "ms", c);
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

}  // namespace

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
    if (!lc->degradation_cause.empty()) d.note = "the degradation: " + lc->degradation_cause;
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
  w.note = fmt::format(
      "change points at the windows' resolution ({:.3g} s); no interval; candidate's warm-up: {}; base's: {}",
      lc->window_s, lc->warmup_cause.empty() ? "none" : lc->warmup_cause,
      lb->warmup_cause.empty() ? "none" : lb->warmup_cause);
  r.findings.push_back(std::move(w));
  Finding s;
  s.metric = "steady phase's share of the sending time";
  s.unit = "share";
  s.change_unit = "share";
  s.base = lb->steady_share();
  s.value = lc->steady_share();
  s.change = *s.value - *s.base;
  s.threshold = fmt::format("tolerance {:g} share", p.t.steady_share_tolerance);
  if (!lc->degradation_cause.empty() || !lb->degradation_cause.empty())
    s.note = fmt::format("candidate's degradation: {}; base's: {}",
                         lc->degradation_cause.empty() ? "none" : lc->degradation_cause,
                         lb->degradation_cause.empty() ? "none" : lb->degradation_cause);
  s.verdict = *s.change < -p.t.steady_share_tolerance  ? Verdict::kRegressed
              : *s.change > p.t.steady_share_tolerance ? Verdict::kImproved
                                                       : Verdict::kPass;
  r.findings.push_back(std::move(s));
  return r;
}

}  // namespace tokenscope::analyze::detail
