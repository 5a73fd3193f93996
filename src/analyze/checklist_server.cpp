// The checklist's items 6 (GPU efficiency), 7 (KV-cache locality), 10 (batching behaviour) and 12
// (contention): what the server's and the machine's series say.
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

namespace {
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

}  // namespace

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
    const auto* fit = rundir::json_path(run->run_json, {"kv_locality", "fit"});
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

// ----------------------------------------------------------- 10 batching
HiddenQueue hidden_queue(const RunData& run) {
  const Series running = find_series(run, "requests_running"), waiting = find_series(run, "requests_waiting");
  if (running.empty()) return {};
  const RequestArrays& a = run.requests;
  std::vector<Nanos> sends, closes;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a.t_send[i] < 0) continue;
    sends.push_back(a.t_send[i]);
    const Nanos end = a.t_close[i] >= 0 ? a.t_close[i] : a.t_last_token[i];
    if (end >= 0) closes.push_back(end);
  }
  return analyze::hidden_queue(std::move(sends), std::move(closes), running.t, running.v, waiting.t,
                               waiting.v);
}

ItemResult item_batching(const Pair& p) {
  ItemResult r;
  // The hidden queue: requests the client has in flight that the server's
  // running and waiting gauges do not show (llama-server's HTTP queue).
  const auto hidden_json = [](const HiddenQueue& h) { return hidden_queue_json(h); };
  const HiddenQueue hc = hidden_queue(p.cand);
  if (hc.samples > 0) r.evidence["hidden_queue"]["candidate"] = hidden_json(hc);
  HiddenQueue hb;
  if (!p.single()) {
    hb = hidden_queue(*p.base);
    if (hb.samples > 0) r.evidence["hidden_queue"]["base"] = hidden_json(hb);
  }
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
    if (f.verdict != Verdict::kNoData && hb.samples > 0 && hc.samples > 0 && (hb.max > 0 || hc.max > 0))
      f.note += fmt::format(
          "{}hidden queue (the client's requests in flight less the server's running and waiting): mean "
          "{:.1f}, "
          "max {:.0f} in the candidate; mean {:.1f}, max {:.0f} in the base",
          f.note.empty() ? "" : "; ", hc.mean, hc.max, hb.mean, hb.max);
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
  if (r.findings.empty()) {
    ItemResult none = no_data(
        10, p.single() ? "one run is judged by its time at the batch cap, and its cap is not known: "
                         "max_num_seqs of sim and of the built-in server, a remote server's where it says "
                         "(llama-server's total_slots in /props, SGLang's max_running_requests); vLLM "
                         "does not say its --max-num-seqs"
                       : "no batch cap known (max_num_seqs) and no waiting series");
    none.evidence = std::move(r.evidence);  // the hidden queue and the entropy, all the same
    return none;
  }
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
    // Whose pressure it is: the server's own, or every process's on the machine (the client's too).
    const bool own = std::string_view(name).rfind("cgroup", 0) == 0;
    std::string& note = r.findings.back().note;
    note +=
        std::string(note.empty() ? "" : "; ") +
        (own ? "read from the server's cgroup"
             : "read from the whole host (no --server-pid or --cgroup): any process's CPU pressure counts, "
               "the client's included");
    r.evidence["pressure_source"] = own ? "cgroup" : "host";
    // Two runs, the whole host's pressure: the environment changed (check's
    // environment section says so first); not the candidate's regression.
    if (!own && !p.single() && r.findings.back().verdict == Verdict::kRegressed) {
      r.findings.back().verdict = Verdict::kInconclusive;
      note +=
          "; the whole machine's pressure rose: an environment difference (shown first), not the candidate's "
          "regression; bench --server-pid gives the server's own";
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

}  // namespace tokenscope::analyze::detail
