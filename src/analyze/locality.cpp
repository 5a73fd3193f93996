#include "analyze/locality.h"

#include "core/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/random.h"

namespace tokenscope::analyze {
namespace {

// Fenwick tree of 0/1 marks over reference positions.
class Fenwick {
 public:
  explicit Fenwick(std::size_t n) : t_(n + 1, 0) {}
  void add(std::size_t i, int v) {
    for (++i; i < t_.size(); i += i & (~i + 1)) t_[i] += v;
  }
  std::int64_t prefix(std::size_t i) const {  // sum of [0, i)
    std::int64_t s = 0;
    for (; i > 0; i -= i & (~i + 1)) s += t_[i];
    return s;
  }

 private:
  std::vector<std::int32_t> t_;
};

int bin_of(std::int64_t d) {
  if (d <= 0) return 0;
  int b = 1;
  while (b < 62 && (std::int64_t{1} << b) <= d) ++b;
  return b;  // d in [2^(b-1), 2^b)
}

struct BinCount {
  std::uint64_t n = 0, hits = 0;
  double distance_sum = 0;
};

DecayFit fit_at(double scale, const std::vector<double>& d, const std::vector<double>& r,
                const std::vector<double>& w) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const double e = std::isinf(scale) ? 1.0 : std::exp(-d[i] / scale);
    num += w[i] * r[i] * e;
    den += w[i] * e * e;
  }
  DecayFit f;
  f.scale = scale;
  f.a = den > 0 ? std::clamp(num / den, 0.0, 1.0) : 0.0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const double e = std::isinf(scale) ? 1.0 : std::exp(-d[i] / scale);
    const double diff = r[i] - f.a * e;
    f.sse += w[i] * diff * diff;
  }
  return f;
}

// numpy's default percentile (linear, type 7), as the fit's reference has it.
double percentile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  return linear_quantile(v, q);
}

nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

std::vector<std::int64_t> stack_distances(const std::vector<std::uint64_t>& refs) {
  std::vector<std::int64_t> out(refs.size(), -1);
  Fenwick marks(refs.size());
  std::unordered_map<std::uint64_t, std::size_t> last;
  last.reserve(refs.size());
  for (std::size_t t = 0; t < refs.size(); ++t) {
    auto [it, fresh] = last.try_emplace(refs[t], t);
    if (!fresh) {
      const std::size_t p = it->second;
      // Distinct items referenced in (p, t): each has exactly one mark, at its latest reference.
      out[t] = marks.prefix(t) - marks.prefix(p + 1);
      marks.add(p, -1);
      it->second = t;
    }
    marks.add(t, 1);
  }
  return out;
}

DecayFit fit_exponential_decay(const std::vector<double>& d, const std::vector<double>& rate,
                               const std::vector<double>& weight) {
  DecayFit best = fit_at(std::numeric_limits<double>::infinity(), d, rate, weight);
  if (d.empty()) return best;
  const double dmax = std::max(1.0, *std::max_element(d.begin(), d.end()));
  // A log grid over scales from a tenth of a block to 1000x the longest distance, then golden-section
  // refinement.
  const double lo = std::log(0.1), hi = std::log(dmax * 1000);
  constexpr int kGrid = 240;
  int best_i = -1;
  for (int i = 0; i <= kGrid; ++i) {
    const double s = std::exp(lo + (hi - lo) * i / kGrid);
    const auto f = fit_at(s, d, rate, weight);
    if (f.sse < best.sse - 1e-15) best = f, best_i = i;
  }
  if (best_i < 0) return best;  // no decay explains the data better than a flat rate
  double a = lo + (hi - lo) * std::max(0, best_i - 1) / kGrid,
         b = lo + (hi - lo) * std::min(kGrid, best_i + 1) / kGrid;
  const double g = (std::sqrt(5.0) - 1) / 2;
  for (int it = 0; it < 60; ++it) {
    const double c = b - g * (b - a), e = a + g * (b - a);
    if (fit_at(std::exp(c), d, rate, weight).sse < fit_at(std::exp(e), d, rate, weight).sse)
      b = e;
    else
      a = c;
  }
  const auto refined = fit_at(std::exp((a + b) / 2), d, rate, weight);
  return refined.sse <= best.sse ? refined : best;
}

nlohmann::json kv_locality(const workload::Workload& w, std::vector<LocalityRequest> requests,
                           const LocalityOptions& opt) {
  std::sort(requests.begin(), requests.end(),
            [](const LocalityRequest& a, const LocalityRequest& b) { return a.t_send < b.t_send; });
  // The reference string, and per reference its request and whether it hit.
  std::vector<std::uint64_t> refs;
  std::vector<std::uint32_t> ref_request;  // index into `used`
  std::vector<std::uint8_t> ref_hit;
  std::vector<std::uint32_t> used;  // positions in `requests` whose blocks are known
  std::uint64_t unknown_blocks = 0, no_cached = 0;
  std::uint64_t unique_counter = 0;
  std::uint32_t block_tokens_hash = 0, block_tokens_prefix = 0;
  for (std::uint32_t i = 0; i < requests.size(); ++i) {
    const auto& lr = requests[i];
    if (lr.index >= w.requests.size()) {
      ++unknown_blocks;
      continue;
    }
    const auto& r = w.requests[lr.index];
    if (r.source == workload::PromptSource::kText) {
      ++unknown_blocks;
      continue;
    }
    if (lr.cached_tokens < 0) ++no_cached;
    std::vector<std::uint64_t> blocks;
    std::uint32_t block = opt.prefix_block_tokens;
    if (r.source == workload::PromptSource::kHashIds) {
      block = w.hash_block_tokens;
      block_tokens_hash = block;
      const std::uint32_t full = r.input_tokens / block;
      for (std::uint32_t j = 0; j < std::min(full, r.source_count); ++j)
        blocks.push_back((std::uint64_t{1} << 62) |
                         (w.hash_pool[r.source_begin + j] & ((std::uint64_t{1} << 62) - 1)));
    } else {
      block_tokens_prefix = block;
      std::uint32_t shared = 0;
      if (r.source == workload::PromptSource::kPrefixGroup) {
        shared = std::min(r.source_count, r.input_tokens) / block;
        for (std::uint32_t j = 0; j < shared; ++j)
          blocks.push_back((std::uint64_t{2} << 60) | (std::uint64_t{r.source_begin} << 32) | j);
      }
      const std::uint32_t full = r.input_tokens / block;
      for (std::uint32_t j = shared; j < full; ++j)
        blocks.push_back((std::uint64_t{3} << 60) | unique_counter++);
    }
    const std::int64_t hit_blocks = lr.cached_tokens >= 0 ? lr.cached_tokens / block : -1;
    const auto req = static_cast<std::uint32_t>(used.size());
    used.push_back(i);
    for (std::size_t j = 0; j < blocks.size(); ++j) {
      refs.push_back(blocks[j]);
      ref_request.push_back(req);
      ref_hit.push_back(hit_blocks < 0 ? 2 : (static_cast<std::int64_t>(j) < hit_blocks ? 1 : 0));
    }
  }
  nlohmann::json out;
  out["definition"] =
      "hit rate of reused prompt blocks by stack distance (distinct blocks referenced since the block's last "
      "reference, in the order the server got the requests); a request's first floor(cached_tokens / block) "
      "blocks count as hits (prefix caching hits a leading run). Fit: hit(d) = a * exp(-d / scale)";
  out["block_tokens"] = {
      {"hash_ids", block_tokens_hash ? nlohmann::json(block_tokens_hash) : nlohmann::json(nullptr)},
      {"prefix_and_unique",
       block_tokens_prefix ? nlohmann::json(block_tokens_prefix) : nlohmann::json(nullptr)}};
  out["requests"] = used.size();
  out["requests_left_out_prompt_unknown"] = unknown_blocks;
  out["requests_without_cached_tokens"] = no_cached;
  out["references"] = refs.size();
  if (used.empty() || no_cached == used.size()) {
    out["available"] = false;
    out["reason"] = used.empty() ? "no request's prompt blocks are known (text prompts or no requests)"
                                 : "the server reported no cached prompt tokens per request "
                                   "(usage.prompt_tokens_details.cached_tokens)";
    return out;
  }
  const auto dist = stack_distances(refs);
  // Per request, per bin: (n, hits); and totals per bin.
  std::vector<std::vector<std::pair<int, std::pair<std::uint32_t, std::uint32_t>>>> per_request(used.size());
  std::vector<BinCount> bins;
  std::uint64_t first_refs = 0, first_hits = 0, reuses = 0, reuse_hits = 0;
  for (std::size_t t = 0; t < refs.size(); ++t) {
    if (ref_hit[t] == 2) continue;  // this request's cached tokens are unknown
    const bool hit = ref_hit[t] == 1;
    if (dist[t] < 0) {
      ++first_refs;
      first_hits += hit;
      continue;
    }
    ++reuses;
    reuse_hits += hit;
    const int b = bin_of(dist[t]);
    if (static_cast<int>(bins.size()) <= b) bins.resize(static_cast<std::size_t>(b) + 1);
    ++bins[static_cast<std::size_t>(b)].n;
    bins[static_cast<std::size_t>(b)].hits += hit;
    bins[static_cast<std::size_t>(b)].distance_sum += static_cast<double>(dist[t]);
    auto& pr = per_request[ref_request[t]];
    if (pr.empty() || pr.back().first != b) pr.push_back({b, {0, 0}});
    ++pr.back().second.first;
    pr.back().second.second += hit;
  }
  out["available"] = true;
  out["first_references"] = first_refs;
  out["first_reference_hits"] = first_hits;  // cached before the run began (a warm server)
  out["reuses"] = reuses;
  out["reuse_hits"] = reuse_hits;
  out["reuse_hit_rate"] = reuses
                              ? nlohmann::json(static_cast<double>(reuse_hits) / static_cast<double>(reuses))
                              : nlohmann::json(nullptr);
  nlohmann::json curve = nlohmann::json::array();
  std::vector<double> d, rate, weight, centre(bins.size(), 0);
  for (std::size_t b = 0; b < bins.size(); ++b) {
    if (bins[b].n == 0) continue;
    centre[b] = bins[b].distance_sum / static_cast<double>(bins[b].n);
    const double r = static_cast<double>(bins[b].hits) / static_cast<double>(bins[b].n);
    curve.push_back({{"distance_min", b == 0 ? 0 : std::int64_t{1} << (b - 1)},
                     {"distance_max", b == 0 ? 0 : (std::int64_t{1} << b) - 1},
                     {"distance_mean", centre[b]},
                     {"blocks", bins[b].n},
                     {"hits", bins[b].hits},
                     {"hit_rate", r}});
    d.push_back(centre[b]);
    rate.push_back(r);
    weight.push_back(static_cast<double>(bins[b].n));
  }
  out["curve"] = curve;
  if (d.size() < 2) {
    out["fit"] = nullptr;
    out["fit_note"] = "fewer than two distance bins with reuses: nothing to fit";
    return out;
  }
  const auto fit = fit_exponential_decay(d, rate, weight);
  // Bootstrap over requests: resample them, rebuild the bins, refit.
  std::vector<double> as, scales;
  Rng rng(opt.seed);
  std::vector<BinCount> bb(bins.size());
  for (unsigned k = 0; k < opt.bootstrap; ++k) {
    for (auto& x : bb) x = BinCount{};
    for (std::size_t i = 0; i < used.size(); ++i) {
      const auto& pr = per_request[static_cast<std::size_t>(rng.uniform_int(0, used.size() - 1))];
      for (const auto& [b, nh] : pr) {
        bb[static_cast<std::size_t>(b)].n += nh.first;
        bb[static_cast<std::size_t>(b)].hits += nh.second;
      }
    }
    std::vector<double> d2, r2, w2;
    for (std::size_t b = 0; b < bb.size(); ++b)
      if (bb[b].n > 0) {
        d2.push_back(centre[b]);
        r2.push_back(static_cast<double>(bb[b].hits) / static_cast<double>(bb[b].n));
        w2.push_back(static_cast<double>(bb[b].n));
      }
    if (d2.size() < 2) continue;
    const auto f = fit_exponential_decay(d2, r2, w2);
    as.push_back(f.a);
    scales.push_back(f.scale);
  }
  nlohmann::json jf = {{"model", "hit(d) = a * exp(-d / scale), d in blocks"},
                       {"a", fit.a},
                       {"scale_blocks", finite_or_null(fit.scale)},
                       {"half_life_blocks", finite_or_null(fit.scale * std::log(2.0))},
                       {"bootstrap", as.size()}};
  if (!as.empty()) {
    jf["a_ci95"] = {percentile(as, 0.025), percentile(as, 0.975)};
    jf["scale_blocks_ci95"] = {finite_or_null(percentile(scales, 0.025)),
                               finite_or_null(percentile(scales, 0.975))};
  }
  if (!std::isfinite(fit.scale))
    jf["note"] = "the hit rate does not fall with distance over the distances seen";
  out["fit"] = jf;
  return out;
}

}  // namespace tokenscope::analyze
