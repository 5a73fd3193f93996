// The headline comparison (item 0 of the check, docs/check.md "The
// headline"): what a user reads first, the candidate against the base —
// TTFT, TPOT, ITL and E2E at p50, p90 and p99 (p99.9 of the per-request
// ones in long runs), TTFO
// for reasoning models, request and output-token throughput, goodput, and
// the agentic tasks' completion time and pass rate — each change with an
// interval that respects the runs' dependence, judged by the tolerance rule.
//
// Requests close in time share the server's queue, so their latencies are
// correlated and an interval that takes them as independent is too narrow.
// The intervals here are by sectioning (Asmussen and Glynn, Stochastic
// Simulation, 2007, III.5a; Nakayama, "Confidence intervals for quantiles
// using sectioning when applying variance-reduction techniques", ACM TOMACS
// 24(4), 2014): the whole run's estimate, with the standard error of the
// same estimate taken in K contiguous blocks of the run by send time
// (K <= 10, Student's t with Welch's degrees of freedom over the two runs).
// A block must hold at least 5 values beyond a quantile for its estimate to
// mean something: a quantile that leaves fewer than 5 blocks so filled
// takes item 4's interval instead: the exact order-statistic interval,
// widened to each run's effective size by the tail's design effect
// (statistics.h tail_design_effect), and its note says so.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <boost/math/distributions/students_t.hpp>

#include "analyze/checklist_items.h"
#include "analyze/checklist_util.h"
#include "core/histogram.h"
#include "core/stats.h"
#include "rundir/run_set.h"

namespace tokenscope::analyze::detail {

namespace {

// The values of a sample in time order (a request's send time, a task's
// start): blocks are contiguous stretches of it.
struct TimedValues {
  std::vector<double> v;
};

// Tasks' completion times in the order they started.
TimedValues tasks_in_time_order(const TaskSample& s) {
  std::vector<std::pair<Nanos, double>> tv;
  for (std::size_t i = 0; i < s.ok_ms.size(); ++i)
    if (s.ok_ms[i] > 0) tv.emplace_back(s.ok_start[i], s.ok_ms[i]);  // a 0 ms task has no logarithm
  std::stable_sort(tv.begin(), tv.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  TimedValues out;
  for (const auto& [t, v] : tv) out.v.push_back(v);
  return out;
}

// Blocks a quantile q of n values can be estimated in: at most 10, each with
// at least 5 values beyond the quantile.
std::size_t headline_block_count(std::size_t n, double q) {
  return std::min<std::size_t>(10,
                               static_cast<std::size_t>(std::floor(static_cast<double>(n) * (1 - q) / 5)));
}

// The values in k contiguous blocks of equal count.
std::vector<std::vector<double>> headline_blocks(const TimedValues& x, std::size_t k) {
  const std::size_t n = x.v.size();
  std::vector<std::vector<double>> out(k);
  for (std::size_t j = 0; j < k; ++j)
    out[j].assign(x.v.begin() + static_cast<std::ptrdiff_t>(j * n / k),
                  x.v.begin() + static_cast<std::ptrdiff_t>((j + 1) * n / k));
  return out;
}

// An estimate on the log scale with the variance of that estimate (s^2 / K
// of K block estimates).
struct Sectioned {
  double log_value = 0;
  double var = 0;
  std::size_t blocks = 0;
};

double sample_variance(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return ss / static_cast<double>(v.size() - 1);
}

Sectioned sectioned_quantile(const TimedValues& x, double q, std::size_t k) {
  Sectioned s;
  std::vector<double> all = x.v;
  s.log_value = std::log(nearest_rank_select(all, q));
  std::vector<double> logs;
  for (auto& b : headline_blocks(x, k)) logs.push_back(std::log(nearest_rank_select(b, q)));
  s.blocks = logs.size();
  s.var = sample_variance(logs) / static_cast<double>(logs.size());
  return s;
}

// Student's t quantile of the two-sided interval, with Welch-Satterthwaite
// degrees of freedom over the two runs' block variances.
double welch_t(const Sectioned& b, const Sectioned& c, double confidence, double& df) {
  const double den = (b.blocks > 1 ? b.var * b.var / static_cast<double>(b.blocks - 1) : 0) +
                     (c.blocks > 1 ? c.var * c.var / static_cast<double>(c.blocks - 1) : 0);
  df = den > 0 ? (b.var + c.var) * (b.var + c.var) / den : static_cast<double>(b.blocks + c.blocks - 2);
  df = std::max(1.0, df);
  return boost::math::quantile(boost::math::students_t(df), 0.5 + confidence / 2);
}

// The relative change of two log-scale estimates: expm1 of their difference
// with its Welch t interval, judged by the tolerance band; df set.
void judge_log_change(Finding& f, const Sectioned& sb, const Sectioned& sc, double tolerance, Worse worse,
                      double confidence, double& df) {
  const double tq = welch_t(sb, sc, confidence, df);
  const double d = sc.log_value - sb.log_value, se = std::sqrt(sb.var + sc.var);
  f.change_unit = "%";
  f.change = std::expm1(d);
  f.ci_low = std::expm1(d - tq * se);
  f.ci_high = std::expm1(d + tq * se);
  f.threshold = fmt::format("tolerance {}", pct(tolerance));
  f.verdict = classify_change({*f.change, *f.ci_low, *f.ci_high}, tolerance, worse);
}

// The more-requests estimate of an inconclusive relative change (as
// relative_shift_finding's).
void more_requests_of(Finding& f, std::size_t n, double tolerance) {
  if (f.verdict != Verdict::kInconclusive || !f.ci_low || !f.ci_high || !f.change ||
      !std::isfinite(*f.ci_low) || !std::isfinite(*f.ci_high) || !std::isfinite(*f.change))
    return;
  const double half = (*f.ci_high - *f.ci_low) / 2;
  const double e = std::abs(*f.change);
  const double distance = e > tolerance ? e : std::max(e, tolerance - e);
  f.more_requests = more_samples_needed(n, half, distance);
}

// A quantile's relative change: by sectioning when both runs fill 5 blocks,
// else item 4's order-statistic interval widened by the design effects.
Finding quantile_row(const std::string& label, const std::string& unit, const TimedValues& b,
                     const TimedValues& c, double q, double tolerance, double confidence) {
  const std::string metric = fmt::format("p{:g} {}", q * 100, label);
  const std::size_t kb = headline_block_count(b.v.size(), q), kc = headline_block_count(c.v.size(), q);
  if (kb < 5 || kc < 5) {
    const SortedSample sb(b.v, "base " + label), sc(c.v, "candidate " + label);
    Finding f = relative_shift_finding(metric, sb, sc, q, tolerance, Worse::kHigher, confidence,
                                       tail_design_effect(b.v, std::min(q, 0.9)),
                                       tail_design_effect(c.v, std::min(q, 0.9)));
    f.unit = unit;
    f.note = (f.note.empty() ? "" : f.note + "; ") +
             fmt::format(
                 "interval by order statistics (too few values beyond the p{:g} for 5 time blocks: {} and {} "
                 "values, {:.0f} each needed)",
                 q * 100, b.v.size(), c.v.size(), std::ceil(25 / (1 - q)));
    return f;
  }
  const Sectioned sb = sectioned_quantile(b, q, kb), sc = sectioned_quantile(c, q, kc);
  double df = 0;
  Finding f;
  f.metric = metric;
  f.unit = unit;
  f.base = std::exp(sb.log_value);
  f.value = std::exp(sc.log_value);
  judge_log_change(f, sb, sc, tolerance, Worse::kHigher, confidence, df);
  more_requests_of(f, std::min(b.v.size(), c.v.size()), tolerance);
  f.note =
      fmt::format("interval by sectioning: the p{:g} in {} and {} time blocks (t, {:.1f} degrees of freedom)",
                  q * 100, sb.blocks, sc.blocks, df);
  return f;
}

}  // namespace

// The pooled token gaps (itl_ns, the summary's itl_ms) in at most k groups
// of consecutive request-id chunks of about equal gap counts: stretches of
// the run. Empty groups are left out.
static std::vector<LogLinearHistogram> itl_groups(const RequestArrays& a, std::size_t k) {
  std::vector<LogLinearHistogram> out(k);
  const double total = static_cast<double>(a.itl_ns.count());
  double before = 0;
  for (const auto& [key, h] : a.itl_chunks) {
    const double mid = before + static_cast<double>(h.count()) / 2;
    out[std::min<std::size_t>(k - 1, static_cast<std::size_t>(mid / total * static_cast<double>(k)))].merge(
        h);
    before += static_cast<double>(h.count());
  }
  std::erase_if(out, [](const LogLinearHistogram& h) { return h.count() == 0; });
  return out;
}

static Sectioned sectioned_itl(const RequestArrays& a, double q, std::size_t k) {
  Sectioned s;
  s.log_value = std::log(a.itl_ns.quantile(q) / 1e6);
  std::vector<double> logs;
  for (const auto& h : itl_groups(a, k))
    if (h.quantile(q) > 0) logs.push_back(std::log(h.quantile(q) / 1e6));
  s.blocks = logs.size();
  // At least the rounding of a histogram bucket (2^-8 of the value wide: a
  // uniform error of that width on the log scale), so that blocks that all
  // land in one bucket give an interval of that width, not none.
  const double bucket = std::log1p(1.0 / (1 << LogLinearHistogram::kSubBucketBits));
  s.var = std::max(sample_variance(logs), bucket * bucket / 12) /
          static_cast<double>(std::max<std::size_t>(1, logs.size()));
  return s;
}

// ITL (every token gap, as the summary's itl_ms) at quantile q: sectioning
// over stretches of each run (groups of request-id chunks). Gaps are never
// taken as independent (a stalled step delays every sequence in it): with
// fewer than 5 stretches there is no interval.
Finding itl_row(const RunData& base, const RunData& cand, double q, double tolerance, double confidence) {
  const RequestArrays &b = base.requests, &c = cand.requests;
  Finding f;
  f.metric = fmt::format("p{:g} ITL", q * 100);
  f.unit = "ms";
  f.change_unit = "%";
  f.threshold = fmt::format("tolerance {}", pct(tolerance));
  f.base = b.itl_ns.quantile(q) / 1e6;
  f.value = c.itl_ns.quantile(q) / 1e6;
  const auto k = [&](const RequestArrays& a) {
    return std::min<std::size_t>(
        10, static_cast<std::size_t>(std::floor(static_cast<double>(a.itl_ns.count()) * (1 - q) / 5)));
  };
  const std::size_t kb = k(b), kc = k(c);
  const Sectioned sb = kb >= 5 ? sectioned_itl(b, q, kb) : Sectioned{},
                  sc = kc >= 5 ? sectioned_itl(c, q, kc) : Sectioned{};
  if (sb.blocks < 5 || sc.blocks < 5 || *f.base <= 0 || *f.value <= 0) {
    f.note = fmt::format("too few stretches of the runs for an interval ({} and {}; 5 each needed)",
                         sb.blocks, sc.blocks);
    return f;
  }
  double df = 0;
  judge_log_change(f, sb, sc, tolerance, Worse::kHigher, confidence, df);
  more_requests_of(f, std::min(counted_requests(base), counted_requests(cand)), tolerance);
  f.note = fmt::format(
      "every token gap; interval by sectioning: the p{:g} in {} and {} stretches of the runs by request id "
      "(t, {:.1f} degrees of freedom)",
      q * 100, sb.blocks, sc.blocks, df);
  return f;
}

namespace {

// A run's rates in k equal windows of its span (first counted send to last
// counted token): completed requests, their output tokens, and those that
// met the SLO, per second.
struct Rates {
  std::vector<double> requests, tokens, good;
  double span_s = 0;
  std::size_t completed = 0;
};

Rates window_rates(const RunData& run, const std::vector<std::uint8_t>& met, std::size_t k) {
  const RequestArrays& a = run.requests;
  Rates r;
  Nanos t0 = INT64_MAX, t1 = INT64_MIN;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a.counted(i) || a.t_send[i] < 0 || a.t_last_token[i] < 0) continue;
    t0 = std::min(t0, a.t_send[i]);
    t1 = std::max(t1, a.t_last_token[i]);
    ++r.completed;
  }
  if (t1 <= t0 || k == 0) return r;
  r.span_s = nanos_to_s(t1 - t0);
  r.requests.assign(k, 0);
  r.tokens.assign(k, 0);
  r.good.assign(k, 0);
  const double w = r.span_s / static_cast<double>(k);
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a.counted(i) || a.t_send[i] < 0 || a.t_last_token[i] < 0) continue;
    const double at = static_cast<double>(a.t_last_token[i] - t0) / static_cast<double>(t1 - t0);
    const auto j =
        std::min<std::size_t>(k - 1, static_cast<std::size_t>(std::max(0.0, at) * static_cast<double>(k)));
    r.requests[j] += 1 / w;
    if (a.output_tokens[i] > 0) r.tokens[j] += a.output_tokens[i] / w;
    if (i < met.size() && met[i]) r.good[j] += 1 / w;
  }
  return r;
}

// A rate's relative change from window rates (lower is worse): the ratio of
// the means, its standard error by the delta method over the windows'
// variances (no logarithm: a rate may fall to 0).
Finding rate_row(const std::string& metric, const std::string& unit, const std::vector<double>& b,
                 const std::vector<double>& c, double tolerance, double confidence) {
  Finding f;
  f.metric = metric;
  f.unit = unit;
  f.change_unit = "%";
  f.threshold = fmt::format("tolerance {}", pct(tolerance));
  const double mb = std::accumulate(b.begin(), b.end(), 0.0) / static_cast<double>(b.size());
  const double mc = std::accumulate(c.begin(), c.end(), 0.0) / static_cast<double>(c.size());
  f.base = mb;
  f.value = mc;
  if (mb <= 0) {
    f.note = "the base has none";
    return f;
  }
  const Sectioned sb{0, sample_variance(b) / static_cast<double>(b.size()), b.size()},
      sc{0, sample_variance(c) / static_cast<double>(c.size()), c.size()};
  // Var(mc / mb) by the delta method: Var(mc) / mb^2 + mc^2 Var(mb) / mb^4.
  const Sectioned rb{0, mc * mc * sb.var / (mb * mb * mb * mb), sb.blocks},
      rc{0, sc.var / (mb * mb), sc.blocks};
  double df = 0;
  const double tq = welch_t(rb, rc, confidence, df);
  const double se = std::sqrt(rb.var + rc.var);
  f.change = mc / mb - 1;
  f.ci_low = *f.change - tq * se;
  f.ci_high = *f.change + tq * se;
  f.verdict = classify_change({*f.change, *f.ci_low, *f.ci_high}, tolerance, Worse::kLower);
  f.note = fmt::format("interval over {} and {} equal windows of each run (t, {:.1f} degrees of freedom)",
                       b.size(), c.size(), df);
  return f;
}

}  // namespace

ItemResult item_headline(const Pair& p) {
  ItemResult r;
  const double conf = p.t.confidence;
  const auto tolerance = [&](double q) { return q > 0.9 ? p.t.tail_tolerance : p.t.headline_tolerance; };
  // Latencies at p50, p90, p99, and p99.9 when both runs hold enough for its blocks.
  std::vector<std::pair<Metric, std::string>> metrics{
      {Metric::kTtft, "TTFT"}, {Metric::kTpot, "TPOT"}, {Metric::kItlMean, "ITL"}, {Metric::kE2e, "E2E"}};
  if (p.cand.requests.any_reasoning() && p.base->requests.any_reasoning())
    metrics.emplace_back(Metric::kTtfo, "TTFO");
  const std::vector<std::uint32_t> base_order = send_order(*p.base), cand_order = send_order(p.cand);
  for (const auto& [m, label] : metrics) {
    if (m == Metric::kItlMean) {  // every token gap, pooled
      if (p.base->requests.itl_ns.count() < p.t.min_requests ||
          p.cand.requests.itl_ns.count() < p.t.min_requests)
        continue;
      for (double q : {0.5, 0.9, 0.99}) r.findings.push_back(itl_row(*p.base, p.cand, q, tolerance(q), conf));
      continue;
    }
    const TimedValues b{metric_in_send_order(*p.base, m, base_order)},
        c{metric_in_send_order(p.cand, m, cand_order)};
    if (b.v.size() < p.t.min_requests || c.v.size() < p.t.min_requests) continue;
    for (double q : {0.5, 0.9, 0.99, 0.999}) {
      if (q > 0.99 && (headline_block_count(b.v.size(), q) < 5 || headline_block_count(c.v.size(), q) < 5))
        continue;
      r.findings.push_back(quantile_row(label, "ms", b, c, q, tolerance(q), conf));
    }
  }
  // Throughput and goodput over equal windows of each run.
  const std::size_t nb = counted_requests(*p.base), nc = counted_requests(p.cand);
  const std::size_t k = std::min<std::size_t>(10, std::min(nb, nc) / 20);
  if (k >= 5) {
    const auto slos = slos_of(p.cand, p.t);
    const Rates rb =
        window_rates(*p.base, slos.empty() ? std::vector<std::uint8_t>{} : slo_met(*p.base, slos), k);
    const Rates rc =
        window_rates(p.cand, slos.empty() ? std::vector<std::uint8_t>{} : slo_met(p.cand, slos), k);
    if (!rb.requests.empty() && !rc.requests.empty()) {
      r.findings.push_back(
          rate_row("request throughput", "req/s", rb.requests, rc.requests, p.t.throughput_tolerance, conf));
      r.findings.push_back(
          rate_row("output-token throughput", "tok/s", rb.tokens, rc.tokens, p.t.throughput_tolerance, conf));
      if (!slos.empty())
        r.findings.push_back(rate_row("goodput", "req/s", rb.good, rc.good, p.t.goodput_tolerance, conf));
    }
  }
  // Agentic tasks: completion time (ok tasks) and pass rate.
  if (!p.cand.tasks.empty() && !p.base->tasks.empty()) {
    const TaskSample tb = task_sample(*p.base, ""), tc = task_sample(p.cand, "");
    if (tb.ok_ms.size() >= p.t.min_requests && tc.ok_ms.size() >= p.t.min_requests)
      for (double q : {0.5, 0.9, 0.99})
        r.findings.push_back(quantile_row("task completion", "ms", tasks_in_time_order(tb),
                                          tasks_in_time_order(tc), q, tolerance(q), conf));
    const std::uint64_t n_b = tb.ok + tb.failed, n_c = tc.ok + tc.failed;
    if (n_b > 0 && n_c > 0) {
      const double pb = static_cast<double>(tb.ok) / static_cast<double>(n_b);
      const double pc = static_cast<double>(tc.ok) / static_cast<double>(n_c);
      const double se =
          std::sqrt(std::max(pb * (1 - pb), 0.25 / static_cast<double>(n_b)) / static_cast<double>(n_b) +
                    std::max(pc * (1 - pc), 0.25 / static_cast<double>(n_c)) / static_cast<double>(n_c));
      Finding f = normal_change_finding("task pass rate", "ratio", pb, pc, se, p.t.attainment_tolerance,
                                        Worse::kLower, conf, "ratio");
      f.note = fmt::format("{} of {} tasks passed; base {} of {} (tasks taken as independent)", tc.ok, n_c,
                           tb.ok, n_b);
      r.findings.push_back(std::move(f));
    }
  }
  if (r.findings.empty())
    return no_data(
        0, fmt::format("fewer than {:g} completed requests with latencies in a run", p.t.min_requests));
  return r;
}

ItemResult item_headline_repeats(const Pair& p, const std::vector<nlohmann::json>& base,
                                 const std::vector<nlohmann::json>& cand) {
  ItemResult r;
  const double conf = p.t.confidence;
  for (const rundir::RepeatMetric& m : rundir::repeat_metrics()) {
    std::vector<double> lb, lc;
    bool usable = true;
    for (const auto& [runs, logs] : {std::pair{&base, &lb}, std::pair{&cand, &lc}})
      for (const auto& s : *runs) {
        const auto v = rundir::summary_value(s, m.key);
        if (!v || !(*v > 0))
          usable = false;
        else
          logs->push_back(std::log(*v));
      }
    if (!usable) continue;  // a run without it (goodput without an SLO), or at 0
    // "ttft_ms.p50" -> "p50 TTFT"; throughputs keep their names.
    const std::string key = m.key;
    const auto dot = key.find('.');
    std::string metric = key, unit = "ms";
    double tolerance = p.t.throughput_tolerance;
    if (dot != std::string::npos) {
      std::string name = key.substr(0, key.find('_'));
      for (auto& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      metric = key.substr(dot + 1) + " " + name;
      tolerance = key.substr(dot + 1) == "p99" ? p.t.tail_tolerance : p.t.headline_tolerance;
    } else if (key == "request_throughput_rps") {
      metric = "request throughput", unit = "req/s";
    } else if (key == "output_token_throughput_tps") {
      metric = "output-token throughput", unit = "tok/s";
    } else if (key == "goodput_rps") {
      metric = "goodput", unit = "req/s", tolerance = p.t.goodput_tolerance;
    }
    const auto mean = [](const std::vector<double>& v) {
      return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    };
    const Sectioned sb{mean(lb), sample_variance(lb) / static_cast<double>(lb.size()), lb.size()},
        sc{mean(lc), sample_variance(lc) / static_cast<double>(lc.size()), lc.size()};
    double df = 0;
    Finding f;
    f.metric = metric;
    f.unit = unit;
    f.base = std::exp(sb.log_value);  // the runs' geometric mean
    f.value = std::exp(sc.log_value);
    judge_log_change(f, sb, sc, tolerance, m.higher_is_worse ? Worse::kHigher : Worse::kLower, conf, df);
    f.note = fmt::format(
        "the run as the unit: {} and {} repeats, each run's summary value (geometric means; Welch's t on "
        "their "
        "logarithms, {:.1f} degrees of freedom)",
        lb.size(), lc.size(), df);
    r.findings.push_back(std::move(f));
  }
  if (r.findings.empty()) return no_data(0, "the repeats' summaries hold no headline metric");
  return r;
}

}  // namespace tokenscope::analyze::detail
