#include "analyze/checklist_util.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <boost/math/distributions/normal.hpp>

#include "core/stats.h"
#include "rundir/readers.h"

namespace tokenscope::analyze::detail {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

std::string_view metric_name(Metric m) {
  switch (m) {
    case Metric::kTtft:
      return "TTFT";
    case Metric::kTtftSched:
      return "TTFT from schedule";
    case Metric::kTpot:
      return "TPOT";
    case Metric::kE2e:
      return "E2E";
    case Metric::kItlMean:
      return "ITL (mean per request)";
    case Metric::kItlMax:
      return "ITL (largest gap per request)";
    case Metric::kTtfo:
      return "TTFO";
    case Metric::kTpotAnswer:
      return "TPOT (answer)";
  }
  return "";
}

double metric_value(const RunData& run, Metric m, std::size_t i) {
  const RequestArrays& a = run.requests;
  switch (m) {
    case Metric::kTtft:
      return a.ttft_ms(i);
    case Metric::kTtftSched:
      return a.ttft_sched_ms(i);
    case Metric::kTpot:
      return a.tpot_ms(i);
    case Metric::kE2e:
      return a.e2e_ms(i);
    case Metric::kItlMean:
      return a.counted(i) ? static_cast<double>(a.itl_mean_ms[i]) : kNaN;
    case Metric::kItlMax:
      return a.counted(i) ? static_cast<double>(a.itl_max_ms[i]) : kNaN;
    case Metric::kTtfo:
      return a.ttfo_ms(i);
    case Metric::kTpotAnswer:
      return a.tpot_answer_ms(i);
  }
  return kNaN;
}

std::vector<double> metric_sample(const RunData& run, Metric m, std::optional<std::uint16_t> task_class,
                                  Nanos t0, Nanos t1) {
  const RequestArrays& a = run.requests;
  std::vector<double> out;
  out.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a.counted(i)) continue;
    if (task_class && a.task_class[i] != *task_class) continue;
    if (a.t_send[i] < t0 || a.t_send[i] >= t1) continue;
    const double v = metric_value(run, m, i);
    if (std::isfinite(v) && v > 0) out.push_back(v);
  }
  return out;
}

std::size_t counted_requests(const RunData& run) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < run.requests.size(); ++i) n += run.requests.counted(i) ? 1 : 0;
  return n;
}

Series find_series(const RunData& run, std::string_view name) {
  std::vector<std::pair<Nanos, double>> pts;
  for (const SampledSeries& s : run.series) {
    if (s.name != name || s.kind != "canonical") continue;
    for (std::size_t i = 0; i < s.t.size(); ++i)
      if (std::isfinite(s.v[i])) pts.emplace_back(s.t[i], s.v[i]);
  }
  std::stable_sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Series out;
  for (const auto& [t, v] : pts) {
    out.t.push_back(t);
    out.v.push_back(v);
  }
  return out;
}

Series counter_rate(const Series& c) {
  Series out;
  for (std::size_t i = 1; i < c.t.size(); ++i) {
    const double dt = nanos_to_s(c.t[i] - c.t[i - 1]);
    const double dv = c.v[i] - c.v[i - 1];
    if (dt <= 0 || dv < 0) continue;
    out.t.push_back(c.t[i]);
    out.v.push_back(dv / dt);
  }
  return out;
}

std::vector<double> block_means(const std::vector<double>& v, std::size_t block) {
  block = std::max<std::size_t>(1, block);
  std::vector<double> out;
  for (std::size_t i = 0; i < v.size(); i += block) {
    const std::size_t end = std::min(v.size(), i + block);
    if (end - i < (block + 1) / 2 && !out.empty()) break;
    out.push_back(std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(i),
                                  v.begin() + static_cast<std::ptrdiff_t>(end), 0.0) /
                  static_cast<double>(end - i));
  }
  return out;
}

std::vector<std::vector<std::size_t>> time_blocks(const std::vector<Nanos>& send) {
  const std::size_t n = send.size();
  const std::size_t k = std::min<std::size_t>(10, n / 100);
  if (k < 5) return {};
  // By send time, ties in index order (the pairs side by side sort faster
  // than indexes compared through the array).
  std::vector<std::pair<Nanos, std::size_t>> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = {send[i], i};
  std::sort(order.begin(), order.end());
  std::vector<std::vector<std::size_t>> blocks(k);
  for (auto& b : blocks) b.reserve(n / k + 1);
  for (std::size_t j = 0; j < n; ++j) blocks[j * k / n].push_back(order[j].second);
  return blocks;
}

BlockEstimate block_estimate(const std::vector<double>& v) {
  BlockEstimate b;
  b.blocks = v.size();
  if (v.empty()) return b;
  b.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  if (v.size() < 2) return b;
  double ss = 0;
  for (double x : v) ss += (x - b.mean) * (x - b.mean);
  b.se = std::sqrt(ss / static_cast<double>(v.size() - 1) / static_cast<double>(v.size()));
  return b;
}

Nanos send_midpoint(const RunData& run) {
  const RequestArrays& a = run.requests;
  Nanos lo = INT64_MAX, hi = INT64_MIN;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a.counted(i) || a.t_send[i] < 0) continue;
    lo = std::min(lo, a.t_send[i]);
    hi = std::max(hi, a.t_send[i]);
  }
  return lo <= hi ? lo + (hi - lo) / 2 : 0;
}

std::string source_missing(const RunData& run, std::string_view source) {
  const auto* sources = rundir::json_path(run.run_json, {"observe", "sources"});
  if (!sources || !sources->is_array()) return "";
  for (const auto& s : *sources) {
    if (!s.is_object()) continue;
    const auto name = s.find("source");
    if (name == s.end() || !name->is_string() || name->get_ref<const std::string&>() != source) continue;
    if (const auto u = s.find("unavailable"); u != s.end() && u->is_string()) return u->get<std::string>();
    if (const auto c = s.find("collected"); c != s.end() && c->is_boolean() && !c->get<bool>()) {
      const auto reasons = s.find("errors_by_reason");
      if (reasons != s.end() && reasons->is_object() && !reasons->empty())
        return "not collected: " + reasons->begin().key();
      return "not collected";
    }
    return "";
  }
  return "not sampled";
}

bool server_engine_is(const RunData& run, std::string_view engine) {
  if (const auto* engines = rundir::json_path(run.run_json, {"server", "engines"});
      engines && engines->is_array())
    for (const auto& e : *engines)
      if (e.is_string() && e.get_ref<const std::string&>() == engine) return true;
  if (const auto* sources = rundir::json_path(run.run_json, {"observe", "sources"});
      sources && sources->is_array())
    for (const auto& s : *sources)
      if (s.is_object())
        if (const auto e = s.find("engine");
            e != s.end() && e->is_string() && e->get_ref<const std::string&>() == engine)
          return true;
  return false;
}

double z_of(double confidence) {
  return boost::math::quantile(boost::math::normal(), 0.5 + confidence / 2);
}

std::string pct(double ratio) {
  return fmt::format("{:.1f}%", ratio * 100);
}

std::vector<std::uint32_t> send_order(const RunData& run) {
  const RequestArrays& a = run.requests;
  std::vector<std::pair<Nanos, std::uint32_t>> tv(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) tv[i] = {a.t_send[i], static_cast<std::uint32_t>(i)};
  std::sort(tv.begin(), tv.end());  // ties by index: stable
  std::vector<std::uint32_t> out(tv.size());
  for (std::size_t i = 0; i < tv.size(); ++i) out[i] = tv[i].second;
  return out;
}

std::vector<double> metric_in_send_order(const RunData& run, Metric m,
                                         const std::vector<std::uint32_t>& order, Nanos t0, Nanos t1) {
  const RequestArrays& a = run.requests;
  std::vector<double> out;
  out.reserve(order.size());
  for (const std::uint32_t i : order) {
    if (!a.counted(i) || a.t_send[i] < t0 || a.t_send[i] >= t1) continue;
    const double v = metric_value(run, m, i);
    if (std::isfinite(v) && v > 0) out.push_back(v);
  }
  return out;
}

Finding relative_shift_finding(const std::string& metric, const SortedSample& b, const SortedSample& c,
                               std::optional<double> quantile, double tolerance, Worse worse,
                               double confidence, double base_deff, double cand_deff) {
  Finding f;
  f.metric = metric;
  f.unit = "ms";
  f.change_unit = "%";
  f.threshold = fmt::format("tolerance {}", pct(tolerance));
  if (b.size() == 0 || c.size() == 0) {
    f.note = "no values in one of the runs";
    return f;
  }
  const double p = quantile.value_or(0.5);
  f.base = nearest_rank(b.values(), p);
  f.value = nearest_rank(c.values(), p);
  const ShiftWithInterval s = quantile ? quantile_relative_shift(b, c, p, confidence, base_deff, cand_deff)
                                       : hodges_lehmann_relative_shift(b, c, confidence);
  if (quantile && (base_deff > 1 || cand_deff > 1))
    f.note = fmt::format(
        "interval widened for neighbouring requests' dependence: design effect {:.2f} and {:.2f} (worth "
        "{:.0f} "
        "and {:.0f} independent requests)",
        base_deff, cand_deff, static_cast<double>(b.size()) / std::max(1.0, base_deff),
        static_cast<double>(c.size()) / std::max(1.0, cand_deff));
  f.change = s.estimate;
  f.ci_low = s.ci_low;
  f.ci_high = s.ci_high;
  if (!s.ci_low || !s.ci_high) {
    // Too few requests to bound the quantile: the early-stopping count says how many would.
    // At the runs' effective sizes when their design effects widened them.
    const double deff = std::max({1.0, base_deff, cand_deff});
    const std::size_t n = std::min(b.size(), c.size());
    const auto need = static_cast<std::uint64_t>(
        std::ceil(static_cast<double>(queries_needed(0, p, 1 - (1 - confidence) / 4)) * deff));
    f.verdict = Verdict::kInconclusive;
    f.more_requests = need > n ? need - n : 0;
    f.note = deff > 1 ? fmt::format(
                            "too few requests to bound the p{:g} at the runs' effective sizes (design effect "
                            "{:.2f} and {:.2f}: neighbouring requests' latencies move together; about {} per "
                            "run needed)",
                            p * 100, base_deff, cand_deff, need)
                      : fmt::format("too few requests to bound the p{:g} (about {} per run needed)", p * 100,
                                    need);
    return f;
  }
  f.verdict = classify_change({s.estimate, *s.ci_low, *s.ci_high}, tolerance, worse);
  if (f.verdict == Verdict::kInconclusive) {
    // The interval straddles zero or an end of the band: how much narrower it
    // must get. Beyond the band, it decides once it excludes zero; within
    // the band, once it excludes zero or fits in the band, whichever comes
    // first.
    const double half = (*s.ci_high - *s.ci_low) / 2;
    const double e = std::abs(s.estimate);
    const double distance = e > tolerance ? e : std::max(e, tolerance - e);
    f.more_requests = more_samples_needed(std::min(b.size(), c.size()), half, distance);
  }
  return f;
}

Finding normal_change_finding(const std::string& metric, const std::string& unit, double base, double cand,
                              double se, double tolerance, Worse worse, double confidence,
                              const std::string& change_unit) {
  Finding f;
  f.metric = metric;
  f.unit = unit;
  f.change_unit = change_unit;
  f.base = base;
  f.value = cand;
  f.change = cand - base;
  const double z = z_of(confidence);
  f.ci_low = *f.change - z * se;
  f.ci_high = *f.change + z * se;
  f.threshold = change_unit == "%" ? fmt::format("tolerance {}", pct(tolerance))
                                   : fmt::format("tolerance {:g} {}", tolerance, change_unit);
  f.verdict = classify_change({*f.change, *f.ci_low, *f.ci_high}, tolerance, worse);
  return f;
}

void conclude(ItemResult& item) {
  item.verdict = Verdict::kNoData;
  item.decisive.reset();
  for (std::size_t i = 0; i < item.findings.size(); ++i) {
    const Verdict v = item.findings[i].verdict;
    const Verdict c = combine(item.verdict, v);
    if (!item.decisive || (c == v && c != item.verdict)) {
      item.verdict = c;
      item.decisive = i;
    }
  }
}

ItemResult no_data(int number, const std::string& why) {
  ItemResult r;
  r.number = number;
  r.verdict = Verdict::kNoData;
  r.summary = why;
  return r;
}

std::optional<double> engine_setting(const RunData& run, const char* key) {
  // A batch_cap perturbation replaces the setting (docs/engine.md "Perturbations").
  if (std::string_view(key) == "max_num_seqs")
    if (const auto* ps = rundir::json_path(run.run_json, {"perturbations"}); ps && ps->is_array())
      for (const auto& p : *ps)
        if (p.is_object() && p.value("kind", "") == "batch_cap" && p.contains("max_num_seqs") &&
            p["max_num_seqs"].is_number())
          return p["max_num_seqs"].get<double>();
  for (const auto* p : {rundir::json_path(run.run_json, {"settings", "requested", "engine", key}),
                        rundir::json_path(run.run_json, {"settings", "requested", "server", "engine", key})})
    if (p && p->is_number()) return p->get<double>();
  // A remote server's batch cap, as it said (bench: llama-server's total_slots, SGLang's
  // max_running_requests).
  if (std::string_view(key) == "max_num_seqs")
    if (const auto* m =
            rundir::json_path(run.run_json, {"settings", "effective", "target", "server_info", "max_batch"});
        m && m->is_number())
      return m->get<double>();
  return std::nullopt;
}

}  // namespace tokenscope::analyze::detail
