// The checklist's items 8 (collectives) and 9 (recompilation): the GPU's kernels and links.
#include "analyze/checklist_items.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
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

namespace {
// -------------------------------------------------------- 9 recompilation
// Per request shape (its prompt length rounded up to a power of two, the
// padded length a server compiles kernels or captures graphs for): the TTFT
// of the first request of the shape against the next one's, as a relative
// excess. For runs against a server, which has no steps to read. With
// `server_time`, the server's own prefill time of each request (llama.cpp's
// timings) instead of its TTFT: a first request that waited in a queue does
// not look like a recompilation.
std::vector<double> request_shape_excess(const RunData& run, bool server_time) {
  const RequestArrays& a = run.requests;
  const auto time_ms = [&](std::size_t i) -> double {
    if (!server_time) return a.ttft_ms(i);
    return i < a.server_prompt_ms.size() ? a.server_prompt_ms[i] : std::numeric_limits<double>::quiet_NaN();
  };
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a.counted(i) && a.prompt_tokens[i] > 0 && std::isfinite(time_ms(i))) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return a.t_send[x] < a.t_send[y]; });
  std::map<std::uint32_t, ShapeSightings> shapes;
  for (std::size_t i : order) {
    std::uint32_t b = 1;
    while (b < static_cast<std::uint32_t>(a.prompt_tokens[i]) && b < (1u << 30)) b <<= 1;
    shapes[b].add(a.t_send[i], time_ms(i));
  }
  std::vector<double> out;
  for (const auto& [shape, s] : shapes)
    if (s.first_t >= 0 && s.second_t >= 0 && s.second_ms > 0) out.push_back(s.first_ms / s.second_ms - 1);
  return out;
}

// Whether 90% of a run's counted requests carry the server's prompt time.
bool has_server_prompt_time(const RunData& run) {
  const RequestArrays& a = run.requests;
  std::size_t n = 0, with = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a.counted(i)) {
      ++n;
      with += i < a.server_prompt_ms.size() && std::isfinite(a.server_prompt_ms[i]);
    }
  return n > 0 && static_cast<double>(with) >= 0.9 * static_cast<double>(n);
}

// How many new, gone and most first-launch-heavy kernels item 9's evidence lists.
constexpr std::size_t kKernelsListed = 10;

// The kernel inventory diff (kernel_diff.h): the candidate's GPU time in
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

}  // namespace

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
    const bool server_time = !steps && has_server_prompt_time(*p.base) && has_server_prompt_time(p.cand);
    const auto b = steps ? step_excess(*p.base) : request_shape_excess(*p.base, server_time);
    const auto c = steps ? step_excess(p.cand) : request_shape_excess(p.cand, server_time);
    if (b.size() < 3 || c.size() < 3) {
      shapes_missing = fmt::format("fewer than 3 shapes seen twice in a run (base {}, candidate {}): {}",
                                   b.size(), c.size(),
                                   steps ? "step shapes of sim"
                                         : "prompt-length buckets of the requests, powers of two (prompts of "
                                           "one length are one bucket)");
    } else {
      Finding f =
          block_shift_finding(steps         ? "first step of a shape over its next"
                              : server_time ? "first request of a prompt-length bucket over its next "
                                              "(server prompt time)"
                                            : "first request of a prompt-length bucket over its next (TTFT)",
                              "ratio", b, c, p.t.recompile_tolerance, Worse::kHigher, p.t.confidence);
      f.change_unit = "ratio";
      f.note = fmt::format("{}{} shapes seen twice in the candidate, {} in the base",
                           f.note.empty() ? "" : f.note + "; ", c.size(), b.size());
      r.findings.push_back(std::move(f));
      r.evidence["source"] = steps ? "steps" : server_time ? "requests (server prompt time)" : "requests";
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

}  // namespace tokenscope::analyze::detail
