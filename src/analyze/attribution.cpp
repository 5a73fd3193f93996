#include "analyze/attribution.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"

namespace tokenscope::analyze {

namespace {

struct Column {
  std::string name, unit;
  std::vector<double> v;
};

Eigen::MatrixXd matrix(const std::vector<Column>& cols, std::size_t rows) {
  Eigen::MatrixXd m(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols.size()));
  for (std::size_t c = 0; c < cols.size(); ++c)
    for (std::size_t r = 0; r < rows; ++r)
      m(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = cols[c].v[r];
  return m;
}

double sd(const Eigen::VectorXd& v) {
  if (v.size() < 2) return 0;
  const double mean = v.mean();
  return std::sqrt((v.array() - mean).square().sum() / static_cast<double>(v.size() - 1));
}

WindowTable make_table(const std::string& source, double window_s, std::vector<Column> y,
                       std::vector<Column> d, std::vector<Column> x) {
  WindowTable t;
  t.source = source;
  t.window_s = window_s;
  const std::size_t n = y.empty() ? 0 : y.front().v.size();
  for (const auto& c : y) t.outcomes.push_back(c.name), t.outcome_units.push_back(c.unit);
  for (const auto& c : d) t.causes.push_back(c.name), t.cause_units.push_back(c.unit);
  for (const auto& c : x) t.controls.push_back(c.name);
  t.y = matrix(y, n);
  t.d = matrix(d, n);
  t.x = matrix(x, n);
  return t;
}

// At most this many windows: a long run's seconds are merged into windows of
// several seconds (its estimates need no more rows, and the nuisance fits
// stay cheap).
constexpr std::size_t kMaxWindows = 2000;

std::optional<WindowTable> from_steps(const RunData& run) {
  const auto& w = run.steps.stats.windows;
  if (w.empty() || run.steps.stats.steps_with_duration == 0) return std::nullopt;
  const std::int64_t first = w.begin()->first, last = w.rbegin()->first;
  const std::int64_t span = last - first + 1;
  const std::int64_t k = std::max<std::int64_t>(
      1, (span + static_cast<std::int64_t>(kMaxWindows) - 1) / static_cast<std::int64_t>(kMaxWindows));
  std::map<std::int64_t, StepWindow> merged;
  for (const auto& [sec, s] : w) merged[(sec - first) / k].add(s);
  const double seconds = static_cast<double>(k);
  Column itl{"ITL", "ms", {}}, tput{"output throughput", "tok/s", {}};
  Column pre{"preemptions", "per s", {}}, swap{"KV swap traffic", "MB/s", {}},
      sw{"tenant switches", "per s", {}}, batch{"batch size", "sequences", {}},
      miss{"prefix misses", "k tokens/s", {}};
  Column wait{"waiting", "", {}}, prefill{"prefill tokens/s", "", {}};
  for (const auto& [index, s] : merged) {
    // Windows with decoding only (a window without decode steps has no ITL).
    if (s.steps < 1 || s.decode_tokens <= 0) continue;
    itl.v.push_back(s.busy_ns / 1e6 / s.steps);
    tput.v.push_back(s.decode_tokens / seconds);
    pre.v.push_back(s.preemptions / seconds);
    swap.v.push_back(s.swap_bytes / 1e6 / seconds);
    sw.v.push_back(s.tenant_switches / seconds);
    batch.v.push_back(s.seqs / s.steps);
    miss.v.push_back((s.query_tokens - s.hit_tokens) / 1e3 / seconds);
    wait.v.push_back(s.waiting / s.steps);
    prefill.v.push_back(s.prefill_tokens / seconds);
  }
  if (itl.v.empty()) return std::nullopt;
  return make_table("steps", seconds, {itl, tput}, {pre, swap, sw, batch, miss}, {wait, prefill});
}

// The series' value at each of the given times (the last point at or before).
std::vector<double> at_times(const std::vector<Nanos>& t, const std::vector<double>& v,
                             const std::vector<Nanos>& when) {
  std::vector<double> out;
  std::size_t k = 0;
  for (Nanos x : when) {
    while (k + 1 < t.size() && t[k + 1] <= x) ++k;
    out.push_back(t.empty() || t[k] > x ? std::numeric_limits<double>::quiet_NaN() : v[k]);
  }
  return out;
}

const SampledSeries* series(const RunData& run, const std::string& name, const char* kind = "canonical") {
  for (const auto& s : run.series)
    if (s.name == name && s.kind == kind && s.source != "gpu" && s.source != "host") return &s;
  return nullptr;
}

std::optional<WindowTable> from_samples(const RunData& run) {
  const SampledSeries* running = series(run, "requests_running");
  const SampledSeries* gen = series(run, "generation_tokens_per_s", "derived");
  if (!running || !gen || running->t.size() < 3) return std::nullopt;
  // Windows: the running series' sampling intervals (t[k-1], t[k]].
  const std::vector<Nanos>& t = running->t;
  const std::size_t n = t.size() - 1;
  // ITL per window: the mean of the per-request mean ITL of the requests
  // whose last token falls in it.
  std::vector<double> itl_sum(n, 0), itl_count(n, 0);
  const RequestArrays& a = run.requests;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a.counted(i) || !std::isfinite(a.itl_mean_ms[i])) continue;
    const auto it = std::lower_bound(t.begin(), t.end(), a.t_last_token[i]);
    if (it == t.begin() || it == t.end()) continue;
    const auto k = static_cast<std::size_t>(it - t.begin()) - 1;
    itl_sum[k] += a.itl_mean_ms[i];
    itl_count[k] += 1;
  }
  std::vector<Nanos> ends(t.begin() + 1, t.end());
  const auto get = [&](const char* name, const char* kind) {
    const SampledSeries* s = series(run, name, kind);
    return s ? at_times(s->t, s->v, ends) : std::vector<double>(n, std::numeric_limits<double>::quiet_NaN());
  };
  const auto tokens = at_times(gen->t, gen->v, ends);
  const auto pre = get("preemptions_per_s", "derived");
  const auto queries = get("prefix_cache_queries_tokens_per_s", "derived");
  const auto hits = get("prefix_cache_hits_tokens_per_s", "derived");
  const auto swapped = get("requests_swapped", "canonical");
  const auto waiting = get("requests_waiting", "canonical");
  const auto prompt = get("prompt_tokens_per_s", "derived");
  Column itl{"ITL", "ms", {}}, tput{"output throughput", "tok/s", {}};
  Column cpre{"preemptions", "per s", {}}, cswap{"requests swapped", "requests", {}},
      batch{"batch size", "sequences", {}}, miss{"prefix misses", "k tokens/s", {}};
  Column cwait{"waiting", "", {}}, cprompt{"prompt tokens/s", "", {}};
  const auto z = [](double v) { return std::isfinite(v) ? v : 0.0; };
  for (std::size_t k = 0; k < n; ++k) {
    if (itl_count[k] == 0 || !std::isfinite(tokens[k])) continue;
    itl.v.push_back(itl_sum[k] / itl_count[k]);
    tput.v.push_back(tokens[k]);
    cpre.v.push_back(z(pre[k]));
    cswap.v.push_back(z(swapped[k]));
    batch.v.push_back(running->v[k + 1]);
    miss.v.push_back((z(queries[k]) - z(hits[k])) / 1e3);
    cwait.v.push_back(z(waiting[k]));
    cprompt.v.push_back(z(prompt[k]));
  }
  if (itl.v.empty()) return std::nullopt;
  double window_s = nanos_to_s(t.back() - t.front()) / static_cast<double>(n);
  // A long run's intervals averaged in groups (at most kMaxWindows rows).
  const std::size_t k = (itl.v.size() + kMaxWindows - 1) / kMaxWindows;
  if (k > 1) {
    for (Column* c : {&itl, &tput, &cpre, &cswap, &batch, &miss, &cwait, &cprompt}) {
      std::vector<double> m;
      for (std::size_t i = 0; i < c->v.size(); i += k) {
        const std::size_t e = std::min(c->v.size(), i + k);
        m.push_back(std::accumulate(c->v.begin() + static_cast<std::ptrdiff_t>(i),
                                    c->v.begin() + static_cast<std::ptrdiff_t>(e), 0.0) /
                    static_cast<double>(e - i));
      }
      c->v = std::move(m);
    }
    window_s *= static_cast<double>(k);
  }
  return make_table("samples", window_s, {itl, tput}, {cpre, cswap, batch, miss}, {cwait, cprompt});
}

}  // namespace

std::optional<WindowTable> window_table(const RunData& run) {
  if (auto t = from_steps(run)) return t;
  return from_samples(run);
}

std::optional<Attribution> attribute(const RunData& run, const DmlOptions& options) {
  const auto t = window_table(run);
  if (!t || t->y.rows() < 30) return std::nullopt;
  Attribution a;
  a.source = t->source;
  a.window_s = t->window_s;
  a.windows = static_cast<std::size_t>(t->y.rows());
  // Causes that vary; the others are left out (and said so).
  std::vector<Eigen::Index> keep;
  for (Eigen::Index c = 0; c < t->d.cols(); ++c) {
    if (sd(t->d.col(c)) > 1e-12) {
      keep.push_back(c);
      // A cause that only takes two values (0 and 1: a switch on or off in a
      // window): its "slope" is the difference between the windows with it
      // and those without, not a rate per unit. Said, so nobody reads it as one.
      const auto col = t->d.col(c);
      const bool binary = (col.array() == 0.0 || col.array() == 1.0).all();
      if (binary)
        a.notes.push_back(fmt::format(
            "{}: only 0 or 1 in this run's windows: its effect is the difference between windows with it and "
            "without, not a slope",
            t->causes[static_cast<std::size_t>(c)]));
    } else
      a.notes.push_back(fmt::format("{}: constant in this run, no effect estimable",
                                    t->causes[static_cast<std::size_t>(c)]));
  }
  if (keep.empty()) return a;
  Eigen::MatrixXd d(t->d.rows(), static_cast<Eigen::Index>(keep.size()));
  for (std::size_t k = 0; k < keep.size(); ++k) d.col(static_cast<Eigen::Index>(k)) = t->d.col(keep[k]);
  // Controls that vary.
  std::vector<Eigen::Index> xk;
  for (Eigen::Index c = 0; c < t->x.cols(); ++c)
    if (sd(t->x.col(c)) > 1e-12) xk.push_back(c);
  Eigen::MatrixXd x(t->x.rows(), static_cast<Eigen::Index>(xk.size()));
  for (std::size_t k = 0; k < xk.size(); ++k) x.col(static_cast<Eigen::Index>(k)) = t->x.col(xk[k]);
  for (Eigen::Index o = 0; o < t->y.cols(); ++o) {
    std::vector<DmlEffect> effects;
    try {
      effects = dml_partial_linear_each(t->y.col(o), d, x, options);
    } catch (const UsageError& e) {
      a.notes.push_back(
          fmt::format("{}: not estimable ({})", t->outcomes[static_cast<std::size_t>(o)], e.what()));
      continue;
    }
    for (std::size_t k = 0; k < keep.size(); ++k) {
      AttributionRow r;
      r.outcome = t->outcomes[static_cast<std::size_t>(o)];
      r.outcome_unit = t->outcome_units[static_cast<std::size_t>(o)];
      r.cause = t->causes[static_cast<std::size_t>(keep[k])];
      r.cause_unit = t->cause_units[static_cast<std::size_t>(keep[k])];
      r.effect = effects[k];
      r.cause_sd = sd(d.col(static_cast<Eigen::Index>(k)));
      a.rows.push_back(std::move(r));
    }
  }
  return a;
}

nlohmann::json to_json(const Attribution& a) {
  const auto est = [](const Estimate& e) {
    return nlohmann::json{
        {"estimate", e.estimate}, {"std_error", e.std_error}, {"ci_low", e.ci_low}, {"ci_high", e.ci_high}};
  };
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : a.rows)
    rows.push_back({{"outcome", r.outcome},
                    {"outcome_unit", r.outcome_unit},
                    {"cause", r.cause},
                    {"cause_unit", r.cause_unit},
                    {"cause_sd", r.cause_sd},
                    {"dml", est(r.effect.dml)},
                    {"naive", est(r.effect.naive)},
                    {"naive_adjusted", est(r.effect.naive_adjusted)},
                    {"observations", r.effect.observations}});
  return {{"source", a.source},
          {"window_s", a.window_s},
          {"windows", a.windows},
          {"rows", rows},
          {"notes", a.notes}};
}

}  // namespace tokenscope::analyze
