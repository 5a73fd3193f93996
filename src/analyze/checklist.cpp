#include "analyze/checklist.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <future>
#include <map>
#include <numeric>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <boost/math/distributions/binomial.hpp>
#include <boost/math/distributions/normal.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <boost/sort/spreadsort/integer_sort.hpp>

#include "analyze/change_point.h"
#include "analyze/checklist_items.h"
#include "analyze/checklist_util.h"
#include "analyze/collectives_input.h"
#include "analyze/kernel_diff.h"
#include "analyze/quantization.h"
#include "analyze/regression.h"
#include "core/error.h"
#include "core/stats.h"
#include "probe/collectives.h"
#include "rundir/readers.h"

namespace tokenscope::analyze {

namespace detail {

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

}  // namespace detail

using namespace detail;

namespace {

const std::vector<ItemInfo> kItems = {
    {0, "headline", "headline", false},
    {1, "latency-model", "latency model", false},
    {2, "slo", "SLO attainment", true},
    {3, "coupling", "mixed-load coupling", false},  // one run: only with --coupling's kappa (below)
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
  if (base) out.environment = compare_environments(*base, cand, thresholds);
  const bool enough = counted_requests(cand) >= thresholds.min_requests &&
                      (!base || counted_requests(*base) >= thresholds.min_requests);
  // The items that apply, computed on up to one thread per core (each reads
  // the runs, never writes them; item 5's phases go to their own slots),
  // kept in the checklist's order.
  std::vector<const ItemInfo*> todo;
  for (const ItemInfo& info : kItems) {
    // Item 3 on one run: when it measured its classes alone (--coupling).
    const bool coupling_alone =
        info.number == 3 && cand.run_json.is_object() && cand.run_json.contains("coupling");
    if (out.single && !info.single_run && !coupling_alone) continue;
    todo.push_back(&info);
  }
  std::vector<ItemResult> results(todo.size());
  const auto compute = [&](const ItemInfo& info) {
    ItemResult r;
    const auto started = std::chrono::steady_clock::now();
    if (!enough && info.number != 8 && info.number != 9 && info.number != 11) {
      r = no_data(info.number,
                  fmt::format("fewer than {:g} completed requests in a run", thresholds.min_requests));
    } else {
      switch (info.number) {
        case 0:
          r = extra.base_repeats.size() >= 2 && extra.cand_repeats.size() >= 2
                  ? item_headline_repeats(p, extra.base_repeats, extra.cand_repeats)
                  : item_headline(p);
          break;
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
    }
    r.number = info.number;
    r.id = info.id;
    r.title = info.title;
    r.elapsed_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    return r;
  };
  std::atomic<std::size_t> next{0};
  std::vector<std::exception_ptr> errors(todo.size());
  const auto worker = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < todo.size();) {
      try {
        results[i] = compute(*todo[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  {
    const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
  }
  for (const auto& e : errors)  // the first item's error, as when they ran one by one
    if (e) std::rethrow_exception(e);
  for (auto& r : results) out.items.push_back(std::move(r));
  out.family_size = family_control(out.items, thresholds.family_alpha, thresholds.confidence);
  for (ItemResult& r : out.items) {
    if (!r.findings.empty()) conclude(r);
    if (r.summary.empty() && r.decisive) {
      // An item whose findings have no data says why (the decisive one's note).
      const Finding& f = r.findings[*r.decisive];
      r.summary =
          f.metric + ": " +
          (r.verdict == Verdict::kNoData && !f.note.empty() ? f.note : std::string(to_string(f.verdict)));
    }
    out.overall = combine(out.overall, r.verdict);
  }
  DmlOptions dml;
  dml.confidence = thresholds.confidence;
  const auto started = std::chrono::steady_clock::now();
  // The two runs' attributions at once.
  std::future<std::optional<Attribution>> base_attribution;
  if (base) base_attribution = std::async(std::launch::async, [&] { return attribute(*base, dml); });
  out.cand_attribution = attribute(cand, dml);
  if (base_attribution.valid()) out.base_attribution = base_attribution.get();
  out.attribution_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return out;
}

std::size_t family_control(std::vector<ItemResult>& items, double alpha, double confidence) {
  const double z = z_of(confidence);
  struct Test {
    std::vector<Finding*>
        f;  // one statistic: the findings that carry it (the headline's p99 TTFT is item 4's)
    double p;
  };
  std::vector<Test> regressed;
  std::map<std::string, std::size_t> seen;  // a statistic's key -> its index in regressed, or npos
  std::size_t m = 0;
  for (ItemResult& it : items)
    for (Finding& f : it.findings) {
      f.p_value.reset();
      if (f.verdict == Verdict::kNoData || !f.change || !f.ci_low || !f.ci_high ||
          !f.threshold.starts_with("tolerance") || !std::isfinite(*f.change) || !std::isfinite(*f.ci_low) ||
          !std::isfinite(*f.ci_high))
        continue;
      // A relative change whose interval came from the log scale: its p on that scale.
      double c = *f.change, lo = *f.ci_low, hi = *f.ci_high;
      if (f.change_unit == "%" && lo > -1) c = std::log1p(c), lo = std::log1p(lo), hi = std::log1p(hi);
      const double half = c >= 0 ? c - lo : hi - c;
      double pv = c == 0 ? 1.0 : 0.0;
      if (half > 0)
        pv = boost::math::cdf(boost::math::complement(boost::math::normal(), std::abs(c) * z / half));
      f.p_value = pv;
      // The same statistic in two items is one test of the family.
      const std::string key = fmt::format("{}|{}|{:.17g}|{:.17g}|{:.17g}", f.metric, f.threshold, *f.change,
                                          *f.ci_low, *f.ci_high);
      const auto [at, fresh] = seen.emplace(key, std::string::npos);
      if (fresh) ++m;
      if (f.verdict != Verdict::kRegressed) continue;
      if (at->second == std::string::npos) {
        at->second = regressed.size();
        regressed.push_back({{&f}, pv});
      } else {
        regressed[at->second].f.push_back(&f);
      }
    }
  if (alpha <= 0) return m;
  std::stable_sort(regressed.begin(), regressed.end(),
                   [](const Test& a, const Test& b) { return a.p < b.p; });
  bool rejected = true;
  for (std::size_t j = 0; j < regressed.size(); ++j) {
    const double bound = alpha / static_cast<double>(m - j);
    rejected = rejected && regressed[j].p <= bound;
    if (rejected) continue;
    for (Finding* one : regressed[j].f) {
      Finding& f = *one;
      f.verdict = Verdict::kInconclusive;
      f.note = (f.note.empty() ? "" : f.note + "; ") +
               fmt::format(
                   "beyond the tolerance but not significant among the {} findings of this check: one-sided "
                   "p {:.2g} above Holm's bound {:.2g} (family-wise error {:g})",
                   m, regressed[j].p, bound, alpha);
    }
  }
  return m;
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
      jf["p_value"] = opt(f.p_value);
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
  nlohmann::json env = nlohmann::json::array();
  for (const auto& d : r.environment)
    env.push_back({{"what", d.what}, {"base", d.base}, {"candidate", d.candidate}, {"note", d.note}});
  j["environment"] = r.single ? nlohmann::json(nullptr)
                              : nlohmann::json{{"differs", !r.environment.empty()}, {"differences", env}};
  j["family"] = {{"size", r.family_size}, {"alpha", r.thresholds.family_alpha}, {"procedure", "holm"}};
  j["phases"] = {{"base", r.base_phases}, {"candidate", r.cand_phases}};
  j["attribution"] = {
      {"base", r.base_attribution ? to_json(*r.base_attribution) : nlohmann::json(nullptr)},
      {"candidate", r.cand_attribution ? to_json(*r.cand_attribution) : nlohmann::json(nullptr)}};
  return j;
}

}  // namespace tokenscope::analyze
