#include "report/report_data.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <string_view>
#include <tuple>

#include "analyze/hidden_queue.h"
#include "core/stats.h"
#include "core/summary.h"
#include "observe/canonical.h"
#include "rundir/downsample.h"
#include "rundir/readers.h"

namespace tokenscope::report {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// A send lag over this at p99 is worth a warning: the client, not the
// server, made those requests late.
constexpr double kSendLagWarnMs = 10.0;
// Tenants drawn one line each in the per-tenant rate chart; the rest are summed.
constexpr std::size_t kMaxTenantLines = 8;
constexpr std::size_t kMaxLinesPerChart = 16;
constexpr std::size_t kMaxSeriesLines = 2000;

// v rounded to 6 significant digits, so that the page stays small (the
// statistics are computed before). NaN and infinities become null.
nlohmann::json num(double v) {
  if (!std::isfinite(v)) return nullptr;
  if (v == 0) return 0.0;
  const double scale = std::pow(10.0, 5 - static_cast<int>(std::floor(std::log10(std::fabs(v)))));
  return std::round(v * scale) / scale;
}

nlohmann::json array_of(const std::vector<double>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (const double x : v) a.push_back(num(x));
  return a;
}

nlohmann::json xy_json(const XY& xy) {
  return {{"x", array_of(xy.x)}, {"y", array_of(xy.y)}};
}

double number_or(const nlohmann::json& j, double fallback) {
  return j.is_number() ? j.get<double>() : fallback;
}

double run_end_s(const RunData& run) {
  const auto& a = run.requests;
  Nanos end = run.origin;
  for (std::size_t i = 0; i < a.size(); ++i)
    end = std::max({end, a.t_close[i], a.t_last_token[i], a.t_send[i], a.t_sched[i]});
  for (const auto& s : run.series)
    if (!s.t.empty()) end = std::max(end, s.t.back());
  return nanos_to_s(end - run.origin);
}

nlohmann::json cdfs(const RunData& run, const ReportOptions& o) {
  const auto& a = run.requests;
  nlohmann::json j = nlohmann::json::object();
  const std::pair<const char*, double (RequestArrays::*)(std::size_t) const> metrics[] = {
      {"ttft_ms", &RequestArrays::ttft_ms},
      {"ttft_sched_ms", &RequestArrays::ttft_sched_ms},
      {"tpot_ms", &RequestArrays::tpot_ms},
      {"e2e_ms", &RequestArrays::e2e_ms},
      {"send_lag_ms", &RequestArrays::send_lag_ms}};
  std::vector<double> v;
  for (const auto& [key, f] : metrics) {
    v.clear();
    for (std::size_t i = 0; i < a.size(); ++i) v.push_back((a.*f)(i));
    j[key] = xy_json(cdf_points(v, o.cdf_points));
  }
  j["itl_ms"] = xy_json(cdf_points(a.itl_ns, o.cdf_points));
  if (a.any_reasoning()) {  // a reasoning model: the answer's own latencies too
    for (const auto& [key, f] : {std::pair{"ttfo_ms", &RequestArrays::ttfo_ms},
                                 std::pair{"tpot_answer_ms", &RequestArrays::tpot_answer_ms}}) {
      v.clear();
      for (std::size_t i = 0; i < a.size(); ++i) v.push_back((a.*f)(i));
      j[key] = xy_json(cdf_points(v, o.cdf_points));
    }
  }
  return j;
}

// A canonical counter of the server ("server" or "sim" source), nullptr when not sampled.
const SampledSeries* server_counter(const RunData& run, std::string_view name) {
  for (const auto& s : run.series)
    if (s.kind == "canonical" && s.name == name && s.labels.empty() &&
        (s.source == "server" || s.source == "sim"))
      return &s;
  return nullptr;
}

// The counter's value at t: its last sample at or before t, else its first.
double counter_at(const SampledSeries& s, Nanos t) {
  const auto it = std::upper_bound(s.t.begin(), s.t.end(), t);
  return it == s.t.begin() ? s.v.front() : s.v[static_cast<std::size_t>(it - s.t.begin()) - 1];
}

// Per window of the run: rates, requests in flight, latency percentiles.
// Long by nature: one block per layer of the timeline (client, server,
// GPU, host, steps), in the order the page draws them.
nlohmann::json timeline(const RunData& run, const ReportOptions& o) {
  const auto& a = run.requests;
  const double duration = run_end_s(run);
  const double w = o.window_s > 0 ? o.window_s : timeline_window_s(duration, a.size());
  const auto windows = static_cast<std::size_t>(std::max(1.0, std::ceil(duration / w)));
  auto window_of = [&](Nanos t) -> std::ptrdiff_t {
    if (t < 0 || t < run.origin) return -1;  // not there, or before the run's start (a bad record)
    const auto k = static_cast<std::size_t>(nanos_to_s(t - run.origin) / w);
    return static_cast<std::ptrdiff_t>(std::min(k, windows - 1));
  };
  std::vector<double> planned(windows, 0), sent(windows, 0), done(windows, 0), failed(windows, 0),
      output_tokens(windows, 0);
  // Completed requests per tenant and window, for runs with more than one
  // tenant: the busiest kMaxTenantLines by name order of their totals, the
  // rest as "other".
  const std::size_t tenants = a.tenant_names.size();
  std::vector<std::vector<double>> done_by_tenant(tenants > 1 ? tenants : 0, std::vector<double>(windows, 0));
  std::vector<std::vector<double>> ttft(windows), tpot(windows), itl_mean(windows), itl_max(windows),
      lag(windows);
  std::vector<Nanos> starts, ends,
      hidden_ends;  // hidden_ends: a request without a close ends at its last token
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (const auto k = window_of(a.t_sched[i]); k >= 0) planned[k] += 1;
    if (const auto k = window_of(a.t_send[i]); k >= 0) {
      sent[k] += 1;
      if (const double l = a.send_lag_ms(i); !std::isnan(l)) lag[k].push_back(l);
    }
    if (a.t_send[i] >= 0) {
      starts.push_back(a.t_send[i]);
      if (a.t_close[i] >= 0) ends.push_back(a.t_close[i]);
      if (const Nanos end = a.t_close[i] >= 0 ? a.t_close[i] : a.t_last_token[i]; end >= 0)
        hidden_ends.push_back(end);
    }
    if (const auto k = window_of(a.t_close[i]); k >= 0) {
      if (a.outcome[i] == Outcome::kOk) {
        done[k] += 1;
        if (!done_by_tenant.empty() && a.tenant[i] < done_by_tenant.size())
          done_by_tenant[a.tenant[i]][k] += 1;
      } else if (!(i < a.cancel_planned.size() && a.cancel_planned[i])) {  // a planned cancel: no failure
        failed[k] += 1;
      }
    }
    if (!a.counted(i)) continue;
    if (const auto k = window_of(a.t_first_token[i]); k >= 0) ttft[k].push_back(a.ttft_ms(i));
    if (const auto k = window_of(a.t_last_token[i]); k >= 0) {
      if (const double t = a.tpot_ms(i); !std::isnan(t)) tpot[k].push_back(t);
      if (!std::isnan(a.itl_mean_ms[i])) itl_mean[k].push_back(a.itl_mean_ms[i]);
      if (!std::isnan(a.itl_max_ms[i])) itl_max[k].push_back(a.itl_max_ms[i]);
      if (a.output_tokens[i] > 0) output_tokens[k] += a.output_tokens[i];
    }
  }
  std::sort(starts.begin(), starts.end());
  std::sort(ends.begin(), ends.end());
  std::vector<double> t_s(windows), in_flight(windows), hit_rate(windows, kNaN);
  const SampledSeries* hits = server_counter(run, "prefix_cache_hits_tokens");
  const SampledSeries* queries = server_counter(run, "prefix_cache_queries_tokens");
  if (hits && queries && (hits->t.empty() || queries->t.empty())) hits = queries = nullptr;
  std::size_t s = 0, e = 0;
  for (std::size_t k = 0; k < windows; ++k) {
    t_s[k] = (static_cast<double>(k) + 0.5) * w;
    const Nanos begin = run.origin + static_cast<Nanos>(std::llround(static_cast<double>(k) * w * 1e9));
    const Nanos end = run.origin + static_cast<Nanos>(std::llround((static_cast<double>(k) + 1) * w * 1e9));
    // The prefix-cache hit rate of the window, from the increase of the
    // server's counters over it (their last samples before each edge).
    if (hits && queries) {
      const double q_tokens = counter_at(*queries, end) - counter_at(*queries, begin);
      const double h_tokens = counter_at(*hits, end) - counter_at(*hits, begin);
      // A counter that went down was reset (a server restart): no rate there.
      if (q_tokens > 0 && h_tokens >= 0) hit_rate[k] = h_tokens / q_tokens;
    }
    while (s < starts.size() && starts[s] < end) ++s;
    while (e < ends.size() && ends[e] < end) ++e;
    in_flight[k] = static_cast<double>(s) - static_cast<double>(e);
  }
  // The hidden queue per window: the mean, over the server's running
  // samples in it, of the requests in flight its running and waiting gauges
  // do not show (analyze/hidden_queue.h); null without those gauges.
  std::vector<double> hidden(windows, kNaN);
  if (const SampledSeries* running = server_counter(run, "requests_running");
      running && !running->t.empty()) {
    const SampledSeries* waiting = server_counter(run, "requests_waiting");
    static const std::vector<Nanos> kNoT;
    static const std::vector<double> kNoV;
    const auto h = analyze::hidden_queue(starts, hidden_ends, running->t, running->v,
                                         waiting ? waiting->t : kNoT, waiting ? waiting->v : kNoV);
    std::vector<double> sum(windows, 0), n(windows, 0);
    for (std::size_t k = 0; k < h.t.size(); ++k)
      if (const auto wk = window_of(h.t[k]); wk >= 0) sum[wk] += h.value[k], n[wk] += 1;
    // A window without a sample of the gauges (sampled less often than the
    // windows) holds the last one's value, as the gauge did: a line, not dots.
    std::size_t last_sampled = windows;
    for (std::size_t k = 0; k < windows; ++k)
      if (n[k] > 0) last_sampled = k;
    for (std::size_t k = 0; k < windows; ++k) {
      if (n[k] > 0)
        hidden[k] = sum[k] / n[k];
      else if (k > 0 && k < last_sampled && !std::isnan(hidden[k - 1]))
        hidden[k] = hidden[k - 1];
    }
  }
  auto per_s = [w](std::vector<double> v) {
    for (auto& x : v) x /= w;
    return v;
  };
  auto q = [](std::vector<std::vector<double>>& groups, double p) {
    std::vector<double> out;
    out.reserve(groups.size());
    for (auto& g : groups) out.push_back(nearest_rank_select(g, p));
    return out;
  };
  nlohmann::json j;
  j["window_s"] = w;
  j["t_s"] = array_of(t_s);
  j["planned_rps"] = array_of(per_s(planned));
  j["sent_rps"] = array_of(per_s(sent));
  j["completed_rps"] = array_of(per_s(done));
  j["failed_rps"] = array_of(per_s(failed));
  j["output_tokens_per_s"] = array_of(per_s(output_tokens));
  j["in_flight"] = array_of(in_flight);
  j["hidden_queue"] = array_of(hidden);
  j["ttft_p50_ms"] = array_of(q(ttft, 0.5));
  j["ttft_p99_ms"] = array_of(q(ttft, 0.99));
  j["tpot_p50_ms"] = array_of(q(tpot, 0.5));
  j["tpot_p99_ms"] = array_of(q(tpot, 0.99));
  j["itl_mean_p50_ms"] = array_of(q(itl_mean, 0.5));
  j["itl_max_p99_ms"] = array_of(q(itl_max, 0.99));
  j["send_lag_p99_ms"] = array_of(q(lag, 0.99));
  j["send_lag_max_ms"] = array_of(q(lag, 1.0));
  // From the server's samples: null where the window saw no prefix-cache
  // query or the run has no samples.
  j["prefix_cache_hit_rate"] = array_of(hit_rate);
  nlohmann::json by_tenant = nlohmann::json::array();
  if (!done_by_tenant.empty()) {
    std::vector<std::size_t> order(tenants);
    for (std::size_t i = 0; i < tenants; ++i) order[i] = i;
    std::vector<double> total(tenants, 0);
    for (std::size_t i = 0; i < tenants; ++i)
      for (const double v : done_by_tenant[i]) total[i] += v;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t x, std::size_t y) { return total[x] > total[y]; });
    std::vector<double> other(windows, 0);
    bool any_other = false;
    for (std::size_t r = 0; r < order.size(); ++r) {
      const std::size_t i = order[r];
      if (r < kMaxTenantLines) {
        by_tenant.push_back(
            {{"tenant", a.tenant_names[i]}, {"completed_rps", array_of(per_s(done_by_tenant[i]))}});
      } else {
        any_other = true;
        for (std::size_t k = 0; k < windows; ++k) other[k] += done_by_tenant[i][k];
      }
    }
    if (any_other)
      by_tenant.push_back({{"tenant", fmt::format("{} other tenants", tenants - kMaxTenantLines)},
                           {"completed_rps", array_of(per_s(other))}});
  }
  j["completed_rps_by_tenant"] = std::move(by_tenant);
  return j;
}

// The hit rate x p99 latency -> throughput heat map. Its windows follow
// the server's samples (a hit rate needs the increase of both prefix-cache
// counters over the window): consecutive sample intervals, grouped so that
// there are at most kHeatWindows. Per window: the hit rate, the p99 TTFT of
// the requests whose first token came in it and the p99 TPOT of those that
// ended in it, and the output tokens/s (the server's generation_tokens
// counter when it has one, else the output tokens of the requests that
// ended in the window). The windows are binned by hit rate (10 bins over
// [0, 1]) and by latency (12 log-spaced bins between the smallest and the
// largest window's), each cell coloured by the mean tokens/s of its windows.
constexpr std::size_t kHeatWindows = 1000;

nlohmann::json heat_bins(const std::vector<double>& hit, const std::vector<double>& lat,
                         const std::vector<double>& tps, const char* latency_key, double window_s) {
  struct W {
    double h, l, t;
  };
  std::vector<W> w;
  for (std::size_t k = 0; k < hit.size(); ++k)
    if (std::isfinite(hit[k]) && std::isfinite(lat[k]) && lat[k] > 0 && std::isfinite(tps[k]))
      w.push_back({std::clamp(hit[k], 0.0, 1.0), lat[k], tps[k]});
  if (w.empty()) return nullptr;
  constexpr std::size_t kX = 10, kY = 12;
  double lo = w[0].l, hi = w[0].l;
  for (const auto& x : w) lo = std::min(lo, x.l), hi = std::max(hi, x.l);
  const double l0 = std::log10(lo);
  const double l1 = std::log10(hi) > l0 ? std::log10(hi) : l0 + 0.1;
  std::vector<double> x_edges, y_edges;
  for (std::size_t i = 0; i <= kX; ++i) x_edges.push_back(static_cast<double>(i) / kX);
  for (std::size_t i = 0; i <= kY; ++i)
    y_edges.push_back(std::pow(10.0, l0 + (l1 - l0) * static_cast<double>(i) / kY));
  std::vector<double> sum(kX * kY, 0), count(kX * kY, 0);
  for (const auto& x : w) {
    const auto xi = std::min<std::size_t>(kX - 1, static_cast<std::size_t>(x.h * kX));
    const auto yi = std::min<std::size_t>(
        kY - 1, static_cast<std::size_t>(std::max(0.0, (std::log10(x.l) - l0) / (l1 - l0) * kY)));
    sum[xi * kY + yi] += x.t;
    count[xi * kY + yi] += 1;
  }
  nlohmann::json cells = nlohmann::json::array();
  double vmin = INFINITY, vmax = -INFINITY;
  for (std::size_t xi = 0; xi < kX; ++xi)
    for (std::size_t yi = 0; yi < kY; ++yi) {
      const double c = count[xi * kY + yi];
      if (c == 0) continue;
      const double mean = sum[xi * kY + yi] / c;
      vmin = std::min(vmin, mean);
      vmax = std::max(vmax, mean);
      cells.push_back({xi, yi, c, num(mean)});
    }
  return {{"latency", latency_key},       {"windows", w.size()},          {"window_s", num(window_s)},
          {"x_edges", array_of(x_edges)}, {"y_edges", array_of(y_edges)}, {"cells", std::move(cells)},
          {"tps_min", num(vmin)},         {"tps_max", num(vmax)}};
}

// {"ttft": map or null, "tpot": map or null}; null when the run has no
// prefix-cache counters sampled.
nlohmann::json heatmaps(const RunData& run) {
  const SampledSeries* hits = server_counter(run, "prefix_cache_hits_tokens");
  const SampledSeries* queries = server_counter(run, "prefix_cache_queries_tokens");
  const SampledSeries* generated = server_counter(run, "generation_tokens");
  if (!hits || !queries || hits->t.empty() || queries->t.size() < 2) return nullptr;
  const std::size_t step = (queries->t.size() - 1 + kHeatWindows - 1) / kHeatWindows;
  std::vector<Nanos> edges;
  for (std::size_t i = 0; i < queries->t.size(); i += step) edges.push_back(queries->t[i]);
  if (edges.back() != queries->t.back()) edges.push_back(queries->t.back());
  const std::size_t n = edges.size() - 1;
  if (n == 0) return nullptr;
  std::vector<double> hit(n, kNaN), tps(n, kNaN), client_tokens(n, 0);
  std::vector<std::vector<double>> ttft(n), tpot(n);
  auto window_of = [&](Nanos t) -> std::ptrdiff_t {
    if (t < edges.front() || t >= edges.back()) return -1;
    return std::upper_bound(edges.begin(), edges.end(), t) - edges.begin() - 1;
  };
  const auto& a = run.requests;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a.counted(i)) continue;
    if (const auto k = window_of(a.t_first_token[i]); k >= 0) ttft[k].push_back(a.ttft_ms(i));
    if (const auto k = window_of(a.t_last_token[i]); k >= 0) {
      if (const double t = a.tpot_ms(i); !std::isnan(t)) tpot[k].push_back(t);
      if (a.output_tokens[i] > 0) client_tokens[k] += a.output_tokens[i];
    }
  }
  std::vector<double> ttft_p99(n), tpot_p99(n);
  for (std::size_t k = 0; k < n; ++k) {
    const double dt = nanos_to_s(edges[k + 1] - edges[k]);
    const double dq = counter_at(*queries, edges[k + 1]) - counter_at(*queries, edges[k]);
    const double dh = counter_at(*hits, edges[k + 1]) - counter_at(*hits, edges[k]);
    // A counter that went down was reset (a server restart): that window is left out.
    if (dq > 0 && dh >= 0) hit[k] = dh / dq;
    const double dg = generated && !generated->t.empty()
                          ? counter_at(*generated, edges[k + 1]) - counter_at(*generated, edges[k])
                          : 0;
    if (dt > 0 && dg >= 0) tps[k] = generated && !generated->t.empty() ? dg / dt : client_tokens[k] / dt;
    ttft_p99[k] = nearest_rank_select(ttft[k], 0.99);
    tpot_p99[k] = nearest_rank_select(tpot[k], 0.99);
  }
  // No prefix-cache hit in any window (no shared prefixes, or caching off):
  // one column of cells would say nothing the summary does not.
  if (std::none_of(hit.begin(), hit.end(), [](double h) { return h > 0; })) return nullptr;
  const double window_s = nanos_to_s(edges.back() - edges.front()) / static_cast<double>(n);
  return {{"ttft", heat_bins(hit, ttft_p99, tps, "ttft_p99_ms", window_s)},
          {"tpot", heat_bins(hit, tpot_p99, tps, "tpot_p99_ms", window_s)},
          {"tokens_from", generated && !generated->t.empty() ? "server" : "client"}};
}

// The slowest requests for the waterfall: per request its segments in ms
// from its scheduled time (or its send when it has none) and every output
// event. Where the server's queue ends is known for sim (the first step that
// ran it) and for servers that send their prefill time (llama.cpp's
// timings: the prefill ends at the first token); otherwise "waiting and
// prefill" is one segment.
nlohmann::json waterfall(const RunData& run) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : run.slowest) {
    const Nanos t0 = r.t_sched >= 0 ? r.t_sched : r.t_send;
    auto ms = [t0](Nanos t) { return t < 0 ? nlohmann::json() : num(nanos_to_ms(t - t0)); };
    Nanos prefill_start = -1;
    const char* split = "none";
    if (r.t_first_scheduled >= 0 && r.t_first_scheduled <= r.t_first_token) {
      prefill_start = std::max(r.t_send, r.t_first_scheduled);
      split = "engine";
    } else if (r.server_prompt_ms >= 0) {
      const Nanos p = static_cast<Nanos>(std::llround(r.server_prompt_ms * 1e6));
      prefill_start = std::max(r.t_send, r.t_first_token - p);
      split = "server_timings";
    }
    nlohmann::json events = nlohmann::json::array();
    for (const Nanos t : r.event_times) events.push_back(num(nanos_to_ms(t - t0)));
    out.push_back({{"id", r.id},
                   {"tenant", r.tenant},
                   {"class", r.task_class},
                   {"start_s", num(nanos_to_s(t0 - run.origin))},
                   {"sched_ms", ms(r.t_sched)},
                   {"dispatch_ms", ms(r.t_dispatch)},
                   {"send_ms", ms(r.t_send)},
                   {"prefill_start_ms", ms(prefill_start)},
                   {"prefill_split", split},
                   {"first_token_ms", ms(r.t_first_token)},
                   {"last_token_ms", ms(r.t_last_token)},
                   {"close_ms", ms(r.t_close)},
                   {"e2e_ms", num(nanos_to_ms(r.e2e()))},
                   {"prompt_tokens", r.prompt_tokens},
                   {"cached_tokens", r.cached_tokens},
                   {"output_tokens", r.output_tokens},
                   {"preemptions", r.preemptions},
                   {"events_ms", std::move(events)}});
  }
  return out;
}

nlohmann::json steps_json(const RunData& run) {
  if (!run.steps.present) return nullptr;
  nlohmann::json series = nlohmann::json::array();
  for (const auto& s : run.steps.series)
    series.push_back({{"name", s.name}, {"x", array_of(s.t_s)}, {"y", array_of(s.v)}});
  return {
      {"steps", run.steps.steps}, {"lines_skipped", run.steps.lines_skipped}, {"series", std::move(series)}};
}

nlohmann::json phases_json(const RunData& run) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : run.phases)
    out.push_back({{"phase", p["phase"]},
                   {"start_s", num(nanos_to_s(p["start_ns"].get<Nanos>() - run.origin))},
                   {"end_s", num(nanos_to_s(p["end_ns"].get<Nanos>() - run.origin))}});
  return out;
}

// ---- agentic tasks (tasks.jsonl, run.json's "tasks")

// A task's end: its t_end, or for a record without one (a task cut short),
// its last step's end; -1 when nothing ended.
Nanos task_end_ns(const rundir::TaskRecord& t) {
  Nanos end = t.t_end;
  if (end < 0)
    for (const auto& s : t.steps) end = std::max(end, s.t_end);
  return end;
}

// Up to n of `from` appended to out, the middle one of each of n equal parts:
// a sample that keeps the spread of `from` (start order: over the run).
void take_tasks_evenly(const std::vector<std::size_t>& from, std::size_t n, std::vector<std::size_t>& out) {
  if (n == 0) return;
  if (from.size() <= n) {
    out.insert(out.end(), from.begin(), from.end());
    return;
  }
  for (std::size_t k = 0; k < n; ++k) out.push_back(from[(2 * k + 1) * from.size() / (2 * n)]);
}

// One row of the task waterfall: the task's times in seconds from the run's
// origin, and its steps that started (a skipped step has no time to draw),
// at most kTaskStepsShown. Durations come in ms from the nanoseconds, as the
// times are rounded for the page.
nlohmann::json task_row_json(const RunData& run, const rundir::TaskRecord& t, const char* shown_as) {
  const auto s_of = [&run](Nanos ns) { return ns < 0 ? nlohmann::json() : num(nanos_to_s(ns - run.origin)); };
  nlohmann::json steps = nlohmann::json::array();
  std::size_t started = 0;
  for (const auto& s : t.steps) {
    if (s.t_start < 0) continue;
    if (++started > kTaskStepsShown) continue;
    nlohmann::json j = {
        {"id", s.id},
        {"kind", s.kind},
        {"name", s.name},
        {"outcome", s.outcome},
        {"attempts", s.attempts},
        {"start_s", s_of(s.t_start)},
        {"end_s", s_of(s.t_end)},
        {"duration_ms", s.t_end >= s.t_start ? num(nanos_to_ms(s.t_end - s.t_start)) : nullptr}};
    if (!s.failure.empty()) j["failure"] = s.failure;
    if (!s.retried.empty()) j["retried"] = s.retried;
    steps.push_back(std::move(j));
  }
  const Nanos end = task_end_ns(t);
  return {{"id", t.id},
          {"class", t.task_class},
          {"tenant", t.tenant},
          {"outcome", t.outcome},
          {"failure", t.failure},
          {"failed_step", t.failed_step},
          {"warmup", t.warmup},
          {"shown_as", shown_as},
          {"sched_s", s_of(t.t_sched)},
          {"start_s", s_of(t.t_start)},
          {"end_s", s_of(end)},
          {"duration_ms", end >= t.t_start ? num(nanos_to_ms(end - t.t_start)) : nullptr},
          {"steps_total", t.steps.size()},
          {"steps_started", started},
          {"steps", std::move(steps)}};
}

// The run's agentic tasks: run.json's summary as it is (null when the run
// has none: a run killed before its end), the counts of the records (warm-up
// apart, as the summary counts), and the waterfall's rows in start order:
// the slowest tasks (warm-up apart: cold caches would fill it), an even
// sample of the failed ones, then an even sample of the rest, at most
// kTaskRowsShown (report_data.h). Null for a run without tasks.
nlohmann::json tasks_json(const RunData& run) {
  const auto& summary = json_at(run.run_json, {"tasks"});
  const auto& tasks = run.tasks;
  if (tasks.empty() && !summary.is_object()) return nullptr;
  std::uint64_t ok = 0, failed = 0, cancelled = 0, warmup = 0;
  std::vector<std::size_t> started;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const auto& t = tasks[i];
    if (t.warmup)
      ++warmup;
    else if (t.outcome == "ok")
      ++ok;
    else if (t.outcome == "failed")
      ++failed;
    else
      ++cancelled;
    if (t.t_start >= 0) started.push_back(i);
  }
  std::stable_sort(started.begin(), started.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(tasks[a].t_start, tasks[a].id) < std::tie(tasks[b].t_start, tasks[b].id);
  });
  const auto duration = [&](std::size_t i) {
    return std::max<Nanos>(0, task_end_ns(tasks[i]) - tasks[i].t_start);
  };
  std::vector<const char*> shown_as(tasks.size(), nullptr);
  std::vector<std::size_t> pool;
  for (const std::size_t i : started)
    if (!tasks[i].warmup) pool.push_back(i);
  const std::size_t slowest = std::min(kTaskSlowestShown, pool.size());
  std::partial_sort(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(slowest), pool.end(),
                    [&](std::size_t a, std::size_t b) {
                      const Nanos da = duration(a), db = duration(b);
                      return da > db || (da == db && tasks[a].id < tasks[b].id);
                    });
  for (std::size_t k = 0; k < slowest; ++k) shown_as[pool[k]] = "slowest";
  pool.clear();
  for (const std::size_t i : started)
    if (!shown_as[i] && !tasks[i].warmup && tasks[i].outcome == "failed") pool.push_back(i);
  std::vector<std::size_t> picked;
  take_tasks_evenly(pool, kTaskFailedShown, picked);
  for (const std::size_t i : picked) shown_as[i] = "failed";
  const std::size_t failed_shown = picked.size();
  pool.clear();
  for (const std::size_t i : started)
    if (!shown_as[i]) pool.push_back(i);
  picked.clear();
  take_tasks_evenly(pool, kTaskRowsShown - slowest - failed_shown, picked);
  for (const std::size_t i : picked) shown_as[i] = "sample";
  nlohmann::json rows = nlohmann::json::array();
  for (const std::size_t i : started)
    if (shown_as[i]) rows.push_back(task_row_json(run, tasks[i], shown_as[i]));
  nlohmann::json waterfall = {{"tasks", tasks.size() + run.tasks_left_out},
                              {"loaded", tasks.size()},
                              {"started", started.size()},
                              {"shown", rows.size()},
                              {"slowest", slowest},
                              {"failed", failed_shown},
                              {"sampled", picked.size()},
                              {"max_rows", kTaskRowsShown},
                              {"max_steps", kTaskStepsShown},
                              {"rows", std::move(rows)}};
  return {{"summary", summary.is_object() ? summary : nlohmann::json()},
          {"records",
           {{"tasks", ok + failed + cancelled},
            {"ok", ok},
            {"failed", failed},
            {"cancelled", cancelled},
            {"warmup", warmup}}},
          {"waterfall", std::move(waterfall)}};
}

// A probe's result as the page shows it: the file, the probe's name, and the
// parts its tables and charts read (the repetitions' values left out).
nlohmann::json strip_values(const nlohmann::json& j) {
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, v] : j.items())
      if (k != "values" && k != "environment") out[k] = strip_values(v);
    return out;
  }
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : j) out.push_back(strip_values(v));
    return out;
  }
  return j;
}

nlohmann::json probe_json(const ProbeData& p) {
  nlohmann::json out = strip_values(p.result);
  out["file"] = p.file.string();
  if (const auto& env = json_at(p.result, {"environment"}); env.is_object()) {
    nlohmann::json e = nlohmann::json::object();
    for (const char* k : {"hostname", "kernel", "machine", "utc", "tokenscope_version"})
      if (env.contains(k)) e[k] = env[k];
    if (const auto& model = json_at(env, {"cpu", "model"}); !model.is_null()) e["cpu"] = model;
    out["environment"] = std::move(e);
  }
  return out;
}

// A sampled series' type ("gauge", "counter", "derived") and unit, from
// the canonical table (observe/canonical.h) and the derived series' naming
// (docs/observe.md "Derived series").
std::pair<std::string, std::string> type_and_unit(const SampledSeries& s) {
  const auto name = std::string_view(s.name);
  if (s.kind == "canonical") {
    const auto c = observe::resolve_canonical(name);
    if (!c.definition) return {"gauge", ""};
    return {c.definition->kind == observe::SeriesKind::kCounter ? "counter" : "gauge",
            std::string(c.definition->unit)};
  }
  if (name == "prefix_cache_hit_rate") return {"derived", "ratio"};
  for (const std::string_view suffix : {"_count_per_s", "_per_s", "_p50", "_p90", "_p99", "_mean"}) {
    if (name.size() <= suffix.size() || name.substr(name.size() - suffix.size()) != suffix) continue;
    const auto base = observe::resolve_canonical(name.substr(0, name.size() - suffix.size()));
    if (suffix == "_count_per_s") return {"derived", "1/s"};
    const std::string unit = base.definition ? std::string(base.definition->unit) : "";
    if (suffix == "_per_s") return {"derived", unit.empty() ? "1/s" : unit + "/s"};
    return {"derived", unit};
  }
  return {"derived", ""};
}

// The sampled series of a run, at most kMaxLinesPerChart of one chart (one
// source, kind and name: a line per label set): those with the highest
// peaks, and the rest summarised as one line, their highest value at each
// sample time, labelled with their number. A DCGM exporter of 400,000
// series made a 128 MB page no browser opened. `notes` gets one line per
// chart summarised.
nlohmann::json series_json(const RunData& run, const ReportOptions& o, std::vector<std::string>& notes) {
  nlohmann::json out = nlohmann::json::array();
  std::vector<double> x, y;
  const auto emit = [&](const SampledSeries& s, const std::string& labels) {
    x.clear();
    y.clear();
    for (std::size_t i = 0; i < s.t.size(); ++i) {
      x.push_back(nanos_to_s(s.t[i] - run.origin));
      y.push_back(s.v[i]);
    }
    const XY r = minmax_columns(x, y, o.columns);
    const auto [type, unit] = type_and_unit(s);
    out.push_back({{"source", s.source},
                   {"kind", s.kind},
                   {"type", type},
                   {"unit", unit},
                   {"name", s.name},
                   {"labels", labels},
                   {"points", s.t.size()},
                   {"x", array_of(r.x)},
                   {"y", array_of(r.y)}});
  };
  // The charts in order of first appearance, each with its series.
  std::map<std::tuple<std::string_view, std::string_view, std::string_view>, std::size_t> chart_of;
  std::vector<std::vector<std::size_t>> charts;
  for (std::size_t i = 0; i < run.series.size(); ++i) {
    const auto& s = run.series[i];
    const auto [it, fresh] = chart_of.try_emplace({s.source, s.kind, s.name}, charts.size());
    if (fresh) charts.emplace_back();
    charts[it->second].push_back(i);
  }
  const auto peak = [&](std::size_t i) {
    double m = -std::numeric_limits<double>::infinity();
    for (const double v : run.series[i].v) m = std::max(m, v);
    return m;
  };
  for (auto& members : charts) {
    // The page draws a chart per name, several sources and families in one:
    // a bound on the lines in all as well (a samples.jsonl of many names).
    if (out.size() >= kMaxSeriesLines) {
      notes.push_back(fmt::format("{} series in all: the first {} lines drawn, the rest left out",
                                  run.series.size(), out.size()));
      break;
    }
    if (members.size() <= kMaxLinesPerChart) {
      for (const std::size_t i : members) emit(run.series[i], run.series[i].labels);
      continue;
    }
    std::vector<std::pair<double, std::size_t>> by_peak;
    for (const std::size_t i : members) by_peak.emplace_back(peak(i), i);
    std::stable_sort(by_peak.begin(), by_peak.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::size_t> kept;
    for (std::size_t k = 0; k < kMaxLinesPerChart; ++k) kept.push_back(by_peak[k].second);
    std::sort(kept.begin(), kept.end());
    for (const std::size_t i : kept) emit(run.series[i], run.series[i].labels);
    std::map<Nanos, double> highest;
    for (std::size_t k = kMaxLinesPerChart; k < by_peak.size(); ++k) {
      const auto& s = run.series[by_peak[k].second];
      for (std::size_t j = 0; j < s.t.size(); ++j) {
        const auto [it, fresh] = highest.try_emplace(s.t[j], s.v[j]);
        if (!fresh) it->second = std::max(it->second, s.v[j]);
      }
    }
    const SampledSeries& first = run.series[members.front()];
    SampledSeries rest{first.source, first.kind, first.name, "", {}, {}};
    for (const auto& [t, v] : highest) {
      rest.t.push_back(t);
      rest.v.push_back(v);
    }
    const std::size_t others = by_peak.size() - kMaxLinesPerChart;
    emit(rest, fmt::format("others={} series, their highest", others));
    notes.push_back(
        fmt::format("chart {} ({}): {} series; the {} with the highest peaks drawn, the other {} "
                    "as one line of their highest value",
                    first.name, first.source, members.size(), kMaxLinesPerChart, others));
  }
  return out;
}

// The settings and the environment worth a line each.
nlohmann::json settings_json(const RunData& run) {
  const auto& j = run.run_json;
  nlohmann::json out = nlohmann::json::object();
  auto put = [&out](const char* key, const nlohmann::json& v) {
    if (!v.is_null()) out[key] = v;
  };
  put("command", run.command.empty() ? nlohmann::json() : nlohmann::json(run.command));
  put("version", json_at(j, {"tool", "version"}));
  put("model", json_at(j, {"settings", "effective", "target", "model"}));
  put("target", json_at(j, {"settings", "effective", "target", "url"}));
  put("in_process", json_at(j, {"settings", "effective", "target", "in_process"}));
  put("workload", json_at(j, {"settings", "effective", "workload", "description"}));
  put("load_mode", json_at(j, {"settings", "effective", "load", "mode"}));
  put("rate_rps", json_at(j, {"settings", "effective", "load", "rate_rps"}));
  put("planned_requests", json_at(j, {"settings", "effective", "load", "planned_requests"}));
  put("max_concurrency", json_at(j, {"settings", "effective", "load", "max_concurrency"}));
  put("gpu", json_at(j, {"settings", "effective", "engine", "gpu", "name"}));
  put("tensor_parallel", json_at(j, {"settings", "effective", "engine", "tensor_parallel"}));
  put("kv_cache_tokens", json_at(j, {"settings", "effective", "engine", "kv_cache_tokens"}));
  put("slo", json_at(j, {"settings", "requested", "load", "slo"}));
  // The environment of the run: when it started (the clock anchor), what the
  // client itself cost.
  if (const auto& unix_ns = json_at(j, {"clock", "unix_ns"}); unix_ns.is_number_integer()) {
    const auto ns = unix_ns.get<std::int64_t>();
    const std::time_t secs = static_cast<std::time_t>(ns / 1'000'000'000);
    std::tm tm{};
    if (gmtime_r(&secs, &tm)) out["started_utc"] = fmt::format("{:%Y-%m-%d %H:%M:%S}", tm);
  }
  put("client_cpu_s", json_at(j, {"client", "process_cpu_s"}));
  put("connections_opened", json_at(j, {"client", "connections_opened"}));
  return out;
}

}  // namespace

const nlohmann::json& json_at(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  static const nlohmann::json kNull;
  const nlohmann::json* p = rundir::json_path(j, keys);
  return p ? *p : kNull;
}

double timeline_window_s(double duration_s, std::size_t requests) {
  constexpr double kSteps[] = {1, 2, 5};
  constexpr double kMinRequestsPerWindow = 5;
  const double per_s = duration_s > 0 ? static_cast<double>(requests) / duration_s : 0;
  for (double decade = 0.1;; decade *= 10)
    for (const double m : kSteps) {
      const double w = m * decade;
      if (w >= 1e6) return w;
      if (duration_s / w > 300) continue;
      // Fewer requests per window than that, unless it would leave fewer
      // than 10 windows (a short run still draws a line, not a point).
      if (requests > 0 && per_s * w < kMinRequestsPerWindow && duration_s / w > 10) continue;
      return w;
    }
}

std::vector<std::string> run_warnings(const RunData& run) {
  std::vector<std::string> w;
  const auto& s = run.summary;
  const auto& j = run.run_json;
  if (const auto& v = json_at(j, {"verdict"});
      json_at(v, {"failed"}) == true && json_at(v, {"reason"}).is_string())
    w.push_back("the run failed: " + v["reason"].get<std::string>());
  if (const double failed = number_or(json_at(s, {"requests_failed"}), 0); failed > 0) {
    std::string outcomes;
    if (const auto& by = json_at(s, {"requests_by_outcome"}); by.is_object())
      for (const auto& [k, n] : by.items())
        if (k != "ok") outcomes += fmt::format("{}{} {}", outcomes.empty() ? "" : ", ", k, n.dump());
    w.push_back(fmt::format("{:.0f} of {:.0f} requests failed ({})", failed,
                            number_or(json_at(s, {"requests_total"}), 0), outcomes));
  }
  // Client lag from the requests (send lag without the wait for a slot
  // under a concurrency cap, which is the cap's doing, not the client's).
  {
    std::vector<double> lags;
    for (std::size_t i = 0; i < run.requests.size(); ++i)
      if (const double l = run.requests.send_lag_ms(i); !std::isnan(l)) lags.push_back(l);
    const double p99 = nearest_rank_select(lags, 0.99);
    if (p99 > kSendLagWarnMs) {
      const double max = *std::max_element(lags.begin(), lags.end());
      w.push_back(
          fmt::format("client lag: p99 send lag {:.1f} ms (max {:.1f} ms): the client sent late, so TTFT "
                      "from the schedule is longer than TTFT from the send; more --client-threads or "
                      "another machine for the client",
                      p99, max));
    }
  }
  if (const double m = number_or(json_at(s, {"output_token_mismatches"}), 0); m > 0)
    w.push_back(fmt::format(
        "token check: {:.0f} requests where the server's usage and the client's event count differ: {}", m,
        token_check_reason(
            static_cast<std::uint64_t>(number_or(json_at(s, {"output_tokens_total"}), 0)),
            static_cast<std::uint64_t>(number_or(json_at(s, {"output_tokens_client_counted"}), 0)))));
  if (const double m = number_or(json_at(s, {"requests_without_usage"}), 0); m > 0)
    w.push_back(fmt::format("{:.0f} completed requests came without a usage count", m));
  // Prompts that did not reach the server at their planned length: off by
  // more than 1% in all (a vocabulary or a chat template not accounted for).
  if (const double planned = number_or(json_at(s, {"prompt_tokens_planned_total"}), 0); planned > 0) {
    const double reported = number_or(json_at(s, {"prompt_tokens_planned_reported"}), 0);
    if (std::abs(reported / planned - 1) > 0.01)
      w.push_back(
          fmt::format("prompt lengths: the server counted {:.0f} prompt tokens where {:.0f} were planned "
                      "({:+.2f}%, {:.0f} "
                      "requests differ): give --tokenizer, or a target whose /tokenize bench can read",
                      reported, planned, 100 * (reported / planned - 1),
                      number_or(json_at(s, {"prompt_token_mismatches"}), 0)));
  }
  if (const double n = number_or(json_at(j, {"client", "requests_not_sent"}), 0); n > 0)
    w.push_back(fmt::format("{:.0f} planned requests were not sent", n));
  if (const auto& sources = json_at(j, {"observe", "sources"}); sources.is_array())
    for (const auto& src : sources) {
      const std::string name = src.value("source", std::string("?"));
      const std::string what = src.contains("description") && src["description"].is_string()
                                   ? fmt::format("{} ({})", name, src["description"].get<std::string>())
                                   : name;
      const double errors = number_or(json_at(src, {"errors"}), 0);
      if (errors > 0) {
        std::string reasons;
        if (const auto& by = json_at(src, {"errors_by_reason"}); by.is_object())
          for (const auto& [r, n] : by.items())
            reasons += fmt::format("{}{} ({})", reasons.empty() ? "" : "; ", r, n.dump());
        w.push_back(fmt::format("scrape errors: {}: {:.0f} of {:.0f} reads failed{}{}", what, errors,
                                number_or(json_at(src, {"reads"}), 0), reasons.empty() ? "" : ": ", reasons));
      }
      // The scrape bounds (docs/reliability.md "Scrape bounds"), when hit.
      const auto& lim = json_at(src, {"limits"});
      if (const double n = number_or(json_at(lim, {"scrapes_over_series_limit"}), 0); n > 0)
        w.push_back(fmt::format(
            "scrape bounds: {}: {:.0f} of {:.0f} scrapes offered more than {:.0f} series (the most: {:.0f}); "
            "the first {:.0f} of each were kept, {:.0f} series left out (bench --scrape-max-series)",
            what, n, number_or(json_at(src, {"reads"}), 0), number_or(json_at(lim, {"max_series"}), 0),
            number_or(json_at(lim, {"most_series"}), 0), number_or(json_at(lim, {"max_series"}), 0),
            number_or(json_at(lim, {"series_dropped"}), 0)));
      if (const double n = number_or(json_at(lim, {"canonical_label_sets_dropped"}), 0); n > 0)
        w.push_back(
            fmt::format("scrape bounds: {}: {:.0f} canonical series over {:.0f} label sets of one name "
                        "left out over the run (bench --scrape-max-label-sets)",
                        what, n, number_or(json_at(lim, {"max_label_sets"}), 0)));
      if (const double n = number_or(json_at(lim, {"canonical_histograms_dropped"}), 0); n > 0)
        w.push_back(
            fmt::format("scrape bounds: {}: {:.0f} times a canonical histogram had more than {:.0f} "
                        "distinct bucket bounds and was left out (bench --scrape-max-bucket-bounds)",
                        what, n, number_or(json_at(lim, {"max_bucket_bounds"}), 0)));
      if (const double n = number_or(json_at(src, {"overruns"}), 0); n > 0)
        w.push_back(fmt::format(
            "sampling: {}: {:.0f} of {:.0f} reads took longer than the interval of {:g} s "
            "(the series have gaps there)",
            what, n, number_or(json_at(src, {"reads"}), 0), number_or(json_at(src, {"interval_s"}), 0)));
    }
  if (const auto& b = json_at(j, {"observe", "samples_bound"}); b.is_object()) {
    const double raw = number_or(json_at(b, {"lines_without_raw"}), 0);
    const double none = number_or(json_at(b, {"lines_not_written"}), 0);
    if (raw > 0 || none > 0)
      w.push_back(
          fmt::format("samples.jsonl bound: {:g} MiB per hour reached: {:.0f} reads written without "
                      "their raw series, {:.0f} not written (bench --samples-max-mib-per-hour)",
                      number_or(json_at(b, {"bytes_per_hour"}), 0) / 1048576.0, raw, none));
  }
  if (const auto& e = json_at(j, {"observe", "write_error"}); e.is_string())
    w.push_back("samples.jsonl stopped being written: " + e.get<std::string>());
  return w;
}

std::vector<std::string> run_notes(const RunData& run) {
  std::vector<std::string> notes = run.notes;
  if (const auto& sources = json_at(run.run_json, {"observe", "sources"}); sources.is_array())
    for (const auto& src : sources) {
      if (!src.contains("unavailable") || !src["unavailable"].is_string()) continue;
      const std::string name = src.value("source", std::string("?"));
      const std::string what = src.contains("description") && src["description"].is_string()
                                   ? fmt::format("{} ({})", name, src["description"].get<std::string>())
                                   : name;
      notes.push_back(
          fmt::format("sampling: {} unavailable: {}", what, src["unavailable"].get<std::string>()));
    }
  return notes;
}

nlohmann::json report_data(const ReportInput& in, const ReportOptions& options) {
  // Runs overlaid share one timeline window (the longest any of them needs),
  // so that their per-window rates and percentiles compare.
  ReportOptions o = options;
  if (o.window_s <= 0 && in.runs.size() > 1)
    for (const auto& run : in.runs)
      o.window_s = std::max(o.window_s, timeline_window_s(run_end_s(run), run.requests.size()));
  nlohmann::json out;
  out["format"] = "tokenscope-report";
  out["version"] = 1;
  out["notes"] = in.notes;
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& run : in.runs) {
    nlohmann::json r;
    r["name"] = run.name;
    r["command"] = run.command;
    r["partial"] = run.partial;
    r["summary_recomputed"] = run.summary_recomputed;
    std::vector<std::string> notes = run_notes(run);
    r["series"] = series_json(run, o, notes);
    r["notes"] = notes;
    r["warnings"] = run_warnings(run);
    r["settings"] = settings_json(run);
    r["summary"] = run.summary;
    r["server"] = json_at(run.run_json, {"server"});
    r["requests"] = {{"records", run.requests.size()}, {"lines_skipped", run.request_lines_skipped}};
    // The prefix-cache hit rate the responses report (their cached prompt
    // tokens over their prompt tokens: vLLM's prompt_tokens_details,
    // llama-server's timings), as check's item 7 derives it: for the tile
    // when the server's counters give none.
    {
      const auto& a = run.requests;
      double cached = 0, prompt = 0;
      std::size_t n = 0;
      for (std::size_t i = 0; i < a.size(); ++i)
        if (a.outcome[i] == Outcome::kOk && !a.warmup[i] && a.cached_tokens[i] >= 0 &&
            a.prompt_tokens[i] > 0) {
          cached += a.cached_tokens[i];
          prompt += a.prompt_tokens[i];
          ++n;
        }
      r["reported_prefix_hit_rate"] =
          n > 0 ? nlohmann::json{{"rate", cached / prompt}, {"requests", n}} : nlohmann::json(nullptr);
    }
    r["samples"] = {{"present", run.has_samples},
                    {"lines", run.sample_lines},
                    {"lines_skipped", run.sample_lines_skipped},
                    {"lines_without_series", run.sample_lines_without_series}};
    r["duration_s"] = num(run_end_s(run));
    r["cdf"] = cdfs(run, o);
    r["timeline"] = timeline(run, o);
    r["heatmap"] = heatmaps(run);
    r["slowest"] = waterfall(run);
    r["steps"] = steps_json(run);
    // Lifecycle phases (warm-up / steady / degradation) from `check`
    // (phases.json): [{"phase", "start_s", "end_s"}], shaded on the time axis.
    r["phases"] = phases_json(run);
    // Agentic tasks (docs/tasks.md): only for runs that have them, so that
    // the data of a run without tasks is as it was.
    if (auto tasks = tasks_json(run); !tasks.is_null()) r["tasks"] = std::move(tasks);
    // sim --plan: the fleets tried (docs/engine.md "Planning a fleet"), as run.json has them.
    if (const auto& plan = json_at(run.run_json, {"plan"}); plan.is_object()) r["plan"] = plan;
    // The regression checklist of `check` (check.json), as it wrote it.
    if (!run.check.is_null()) r["check"] = run.check;
    runs.push_back(std::move(r));
  }
  out["runs"] = std::move(runs);
  nlohmann::json sweeps = nlohmann::json::array();
  for (const auto& s : in.sweeps)
    sweeps.push_back({{"name", s.name},
                      {"kind", json_at(s.sweep_json, {"kind"})},
                      {"statistics", json_at(s.sweep_json, {"statistics"})},
                      {"curve", json_at(s.sweep_json, {"curve"})},
                      {"max_rate_meeting_slo", json_at(s.sweep_json, {"max_rate_meeting_slo"})},
                      {"partial", json_at(s.sweep_json, {"partial"})},
                      {"repeats", json_at(s.sweep_json, {"repeats"})},
                      {"runs", s.runs}});
  out["sweeps"] = std::move(sweeps);
  nlohmann::json probes = nlohmann::json::array();
  for (const auto& p : in.probes) probes.push_back(probe_json(p));
  out["probes"] = std::move(probes);
  return out;
}

}  // namespace tokenscope::report
