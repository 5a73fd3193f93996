#include "analyze/statistics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numbers>

#include <boost/math/distributions/binomial.hpp>
#include <boost/math/distributions/normal.hpp>
#include <boost/sort/spreadsort/float_sort.hpp>
#include <boost/version.hpp>
#if BOOST_VERSION >= 107500
#include <boost/math/distributions/kolmogorov_smirnov.hpp>
#endif
#include <fmt/format.h>

#include "core/error.h"
#include "core/random.h"
#include "core/stats.h"

namespace tokenscope::analyze {
namespace {

// Throws UsageError unless 0 < value < 1.
void require_open_unit(double value, const char* what, const char* function) {
  if (!(value > 0.0 && value < 1.0))
    throw UsageError(fmt::format("{}: {} must lie in (0, 1), got {}", function, what, value));
}

void require_positive_values(const SortedSample& s, const char* function) {
  if (!(s.values().front() > 0.0))
    throw InputError(
        s.name(), 0, "",
        fmt::format("{} takes logarithms: every value must be > 0, found {}", function, s.values().front()));
}

// n1 n2, throwing when it does not fit 64 bits.
std::uint64_t pair_count(std::size_t n1, std::size_t n2) {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(static_cast<std::uint64_t>(n1), static_cast<std::uint64_t>(n2), &product))
    throw UsageError(fmt::format("samples of {} and {} values have too many pairs to count", n1, n2));
  return product;
}

// The rank-sum quantities of two sorted samples, by one merge walk over the
// groups of equal values: U of cand (pairs with cand above base, ties
// counting 1/2) and the tie term sum(t^3 - t) over the groups of the pooled
// sample.
struct RankSums {
  double u = 0.0;
  double tie_term = 0.0;
  bool has_ties = false;
};

RankSums rank_sums(std::span<const double> base, std::span<const double> cand) {
  RankSums out;
  std::size_t i = 0, j = 0;
  while (i < base.size() || j < cand.size()) {
    const double v = j == cand.size() || (i < base.size() && base[i] < cand[j]) ? base[i] : cand[j];
    const std::size_t base_below = i;
    std::size_t a = 0, b = 0;  // how many of base, cand equal v
    while (i < base.size() && base[i] == v) ++i, ++a;
    while (j < cand.size() && cand[j] == v) ++j, ++b;
    out.u += static_cast<double>(b) * (static_cast<double>(base_below) + 0.5 * static_cast<double>(a));
    const double t = static_cast<double>(a + b);
    out.tie_term += t * t * t - t;
    if (a + b > 1) out.has_ties = true;
  }
  return out;
}

bool exact_feasible(std::size_t n1, std::size_t n2) {
  const std::uint64_t pairs = pair_count(n1, n2);
  const std::uint64_t m = std::min(n1, n2);
  return pairs <= kMannWhitneyExactMaxPairs && m * pairs <= kMannWhitneyExactMaxWork;
}

// P(U >= u) under the null, from the lower tail by symmetry (U and n1 n2 - U
// share a distribution): the sum of pmf[0 .. n1 n2 - u], whose small terms
// the product construction keeps accurate.
double exact_upper_tail(const std::vector<double>& pmf, double u) {
  const auto n_pairs = static_cast<double>(pmf.size() - 1);
  const double last = n_pairs - std::ceil(u);  // U is an integer without ties
  if (last < 0.0) return 0.0;
  double acc = 0.0;
  for (std::size_t k = 0; k <= static_cast<std::size_t>(last); ++k) acc += pmf[k];
  return acc;
}

// The boundaries, per row i of base, of the cand indices j whose difference
// cand_j - base_i lies below t (strictly, or at most t when kAtMost), into
// `bounds`, and their total. The difference falls as base_i grows, so the
// boundaries never decrease: a merge-like walk over both samples, O(n1 + n2).
// Each step of one walk waits on the previous step's comparison, so the rows
// are cut into kChains blocks walked in lockstep (each block's first boundary
// by binary search), and a step has no data-dependent branch (whether it
// moves to the next row or the next cand index is unpredictable).
template <bool kAtMost>
std::uint64_t row_boundaries(std::span<const double> x, std::span<const double> y, double t,
                             std::vector<std::uint32_t>& bounds) {
  constexpr std::size_t kChains = 8;
  const std::size_t n1 = x.size(), n2 = y.size();
  bounds.resize(n1);
  const auto inside = [t](double d) { return kAtMost ? d <= t : d < t; };
  struct Walk {
    std::size_t i, end;
    std::uint32_t j;
  };
  std::array<Walk, kChains> walks;
  for (std::size_t c = 0; c < kChains; ++c) {
    Walk& w = walks[c];
    w.i = n1 * c / kChains;
    w.end = n1 * (c + 1) / kChains;
    const double xi = w.i < n1 ? x[w.i] : 0.0;
    w.j = w.i < w.end
              ? static_cast<std::size_t>(
                    std::partition_point(y.begin(), y.end(), [&](double v) { return inside(v - xi); }) -
                    y.begin())
              : n2;
  }
  const auto step = [&](Walk& w) {
    const bool in = inside(y[w.j] - x[w.i]);
    bounds[w.i] = w.j;  // final for row i when the step moves on to the next row
    w.j += in;
    w.i += !in;
  };
  const auto live = [n2](const Walk& w) { return w.i < w.end && w.j < n2; };
  while (std::all_of(walks.begin(), walks.end(), live))
    for (Walk& w : walks) step(w);
  for (Walk& w : walks) {
    while (live(w)) step(w);
    for (; w.i < w.end; ++w.i) bounds[w.i] = static_cast<std::uint32_t>(n2);  // all inside for the rows left
  }
  std::uint64_t total = 0;
  for (const std::uint32_t v : bounds) total += v;
  return total;
}

// The number of pairwise differences at most v, and the smallest difference
// above v (nullopt when none is): the minimum over rows of cand_j - base_i at
// the first j past the row's boundary. One count, O(n1 + n2).
std::pair<std::uint64_t, std::optional<double>> at_most_and_next_above(std::span<const double> x,
                                                                       std::span<const double> y, double v,
                                                                       std::vector<std::uint32_t>& bounds) {
  const std::uint64_t at_most = row_boundaries<true>(x, y, v, bounds);
  std::optional<double> next;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (bounds[i] == y.size()) continue;
    const double d = y[bounds[i]] - x[i];
    if (!next || d < *next) next = d;
  }
  return {at_most, next};
}

// The buffers of a selection over pairwise differences, kept across the
// selections of one estimate (each is n1 or about 2^17 long; allocating and
// first touching them anew costs as much as a count).
struct SelectionBuffers {
  std::vector<std::uint32_t> lo, hi, bounds;
  std::vector<double> sample, positions, rest;
};

// The lower rank k of the Hodges-Lehmann interval (see the header) and the
// interval's coverage; nullopt rank when no k >= 1 qualifies.
struct CriticalRank {
  std::optional<std::uint64_t> k;
  double coverage = 1.0;
};

CriticalRank hodges_lehmann_rank(std::size_t n1, std::size_t n2, double confidence) {
  const double half_alpha = (1.0 - confidence) / 2.0;
  CriticalRank out;
  if (std::min(n1, n2) <= 8 && exact_feasible(n1, n2)) {
    const std::vector<double> pmf = mann_whitney_null_pmf(n1, n2);
    // k - 1 = the largest u with P(U <= u) <= alpha / 2 (a relative slack of
    // 1e-12 for the rounding of the cumulative sum).
    double cdf = 0.0;
    for (std::size_t u = 0; u < pmf.size(); ++u) {
      const double next = cdf + pmf[u];
      if (next > half_alpha * (1.0 + 1e-12)) break;
      cdf = next;
      out.k = u + 1;
    }
    if (out.k) out.coverage = 1.0 - 2.0 * cdf;
    return out;
  }
  const double nn = static_cast<double>(n1) * static_cast<double>(n2);
  const double sigma = std::sqrt(nn * (static_cast<double>(n1) + static_cast<double>(n2) + 1.0) / 12.0);
  const boost::math::normal_distribution<double> normal;
  const double z = boost::math::quantile(boost::math::complement(normal, half_alpha));
  const double k = std::floor(nn / 2.0 + 0.5 - z * sigma);
  if (k >= 1.0) {
    out.k = static_cast<std::uint64_t>(k);
    out.coverage = 1.0 - 2.0 * boost::math::cdf(normal, (k - 0.5 - nn / 2.0) / sigma);
  }
  return out;
}

// exp(x) - 1 of an optional interval end.
std::optional<double> relative(std::optional<double> log_value) {
  if (!log_value) return std::nullopt;
  return std::expm1(*log_value);
}

// Empirical CDF gap F_base(t) - F_cand(t) = i / n1 - j / n2 from the counts
// at or below t, as (i n2 - j n1) / (n1 n2) in integers and one division, so
// that the gap is the correctly rounded rational (i / n1 - j / n2 in floating
// point would round twice).
double cdf_gap(std::size_t i, std::size_t n1, std::size_t j, std::size_t n2) {
  const std::uint64_t a = static_cast<std::uint64_t>(i) * n2, b = static_cast<std::uint64_t>(j) * n1;
  const double denominator = static_cast<double>(pair_count(n1, n2));
  return a >= b ? static_cast<double>(a - b) / denominator : -static_cast<double>(b - a) / denominator;
}

// Checks a histogram: finite counts >= 0, not all 0; returns the total.
double histogram_total(std::span<const double> counts, const char* which) {
  if (counts.empty()) throw InputError(which, 0, "", "a histogram with at least one bin");
  double total = 0.0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (!std::isfinite(counts[i]) || counts[i] < 0.0)
      throw InputError(which, 0, "", fmt::format("bin {}: a finite count >= 0, got {}", i, counts[i]));
    total += counts[i];
  }
  if (!(total > 0.0)) throw InputError(which, 0, "", "a histogram with a count > 0 in some bin");
  return total;
}

// The two histograms' smoothed probabilities (c_i + a) / (total + K a).
std::pair<std::vector<double>, std::vector<double>> smoothed_pair(std::span<const double> p_counts,
                                                                  std::span<const double> q_counts,
                                                                  double pseudo_count) {
  if (!(pseudo_count >= 0.0) || !std::isfinite(pseudo_count))
    throw UsageError(fmt::format("pseudo-count must be a finite number >= 0, got {}", pseudo_count));
  const double p_total = histogram_total(p_counts, "histogram P");
  const double q_total = histogram_total(q_counts, "histogram Q");
  if (p_counts.size() != q_counts.size())
    throw InputError("histograms", 0, "",
                     fmt::format("P has {} bins and Q has {}: compare histograms over the same bins",
                                 p_counts.size(), q_counts.size()));
  const double k = static_cast<double>(p_counts.size());
  std::vector<double> p(p_counts.size()), q(q_counts.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    p[i] = (p_counts[i] + pseudo_count) / (p_total + k * pseudo_count);
    q[i] = (q_counts[i] + pseudo_count) / (q_total + k * pseudo_count);
  }
  return {std::move(p), std::move(q)};
}

// sum p_i log2(p_i / q_i) over bins with p_i > 0 (infinite where q_i = 0).
double kl_of_probabilities(const std::vector<double>& p, const std::vector<double>& q) {
  double sum = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0) continue;
    if (q[i] == 0.0) return kInf;
    sum += p[i] * std::log2(p[i] / q[i]);
  }
  return std::max(0.0, sum);
}

// P(Bin(n, 1 - p) <= over_bound): the chance of so few over-bound queries.
double over_bound_cdf(std::uint64_t n, std::uint64_t over_bound, double p) {
  if (over_bound >= n) return 1.0;
  const boost::math::binomial_distribution<double> over(static_cast<double>(n), 1.0 - p);
  return boost::math::cdf(over, static_cast<double>(over_bound));
}

void require_early_stopping_parameters(double p, double confidence, const char* function) {
  require_open_unit(p, "the percentile p", function);
  require_open_unit(confidence, "the confidence", function);
}

}  // namespace

SortedSample::SortedSample(std::vector<double> values, std::string name)
    : values_(std::move(values)), name_(std::move(name)) {
  check();
  // A radix sort of the values' bits (Boost.Sort): the same order as
  // std::sort for finite doubles (checked above), a few times faster on the
  // million-request samples of a long run.
  boost::sort::spreadsort::float_sort(values_.begin(), values_.end());
}

SortedSample SortedSample::from_sorted(std::vector<double> values, std::string name) {
  SortedSample out;
  out.values_ = std::move(values);
  out.name_ = std::move(name);
  out.check();
  if (!std::is_sorted(out.values_.begin(), out.values_.end()))
    throw UsageError(fmt::format("{}: SortedSample::from_sorted needs values in ascending order", out.name_));
  return out;
}

void SortedSample::check() const {
  if (values_.empty()) throw InputError(name_, 0, "", "an empty sample: at least one value is needed");
  for (std::size_t i = 0; i < values_.size(); ++i) {
    if (!std::isfinite(values_[i]))
      throw InputError(name_, 0, "",
                       fmt::format("value {} is {}: every value must be finite", i, values_[i]));
  }
}

SortedSample log_sample(const SortedSample& sample) {
  require_positive_values(sample, "a relative shift");
  std::vector<double> logs(sample.size());
  std::transform(sample.values().begin(), sample.values().end(), logs.begin(),
                 [](double v) { return std::log(v); });
  return SortedSample::from_sorted(std::move(logs), "log " + sample.name());  // log keeps the order
}

bool mann_whitney_exact_feasible(std::size_t n1, std::size_t n2) {
  return exact_feasible(n1, n2);
}

std::vector<double> mann_whitney_null_pmf(std::size_t n1, std::size_t n2) {
  if (n1 == 0 || n2 == 0) throw UsageError("mann_whitney_null_pmf: both samples need a value");
  if (!exact_feasible(n1, n2))
    throw UsageError(fmt::format(
        "the exact Mann-Whitney distribution for samples of {} and {} is too large to compute; use the "
        "normal approximation",
        n1, n2));
  const std::size_t m = std::min(n1, n2), n = std::max(n1, n2);
  std::vector<double> c(m * n + 1, 0.0);
  c[0] = 1.0;
  for (std::size_t i = 1; i <= m; ++i) {
    const std::size_t degree = i * n;  // of [n + i choose i]_q
    // Multiply by (1 - q^(n+i)), keeping terms up to `degree` (the division
    // below cancels the rest exactly).
    for (std::size_t u = degree; u >= n + i && u <= degree; --u) c[u] -= c[u - (n + i)];
    // Divide by (1 - q^i): c[u] += c[u - i], ascending.
    for (std::size_t u = i; u <= degree; ++u) c[u] += c[u - i];
    // [n+i choose i] = [n+i-1 choose i-1] (n+i)/i in total count: rescale.
    const double scale = static_cast<double>(i) / static_cast<double>(n + i);
    for (std::size_t u = 0; u <= degree; ++u) c[u] *= scale;
  }
  // The recurrence keeps the lower tail accurate to rounding (its first terms
  // are sums of positive terms) but loses relative accuracy in the far upper
  // tail; the distribution is symmetric, so the upper half mirrors the lower.
  const std::size_t last = m * n;
  for (std::size_t u = 0; u < last - u; ++u) c[last - u] = c[u];
  return c;
}

MannWhitneyResult mann_whitney_u(const SortedSample& base, const SortedSample& cand, Alternative alternative,
                                 MannWhitneyMethod method) {
  const std::size_t n1 = base.size(), n2 = cand.size();
  const RankSums sums = rank_sums(base.values(), cand.values());
  const double nn = static_cast<double>(pair_count(n1, n2));
  const double n_total = static_cast<double>(n1 + n2);
  MannWhitneyResult out;
  out.u = sums.u;
  const double u_other = nn - sums.u;
  double u_tested = 0.0;
  double sides = 1.0;
  switch (alternative) {
    case Alternative::kGreater:
      u_tested = sums.u;
      break;
    case Alternative::kLess:
      u_tested = u_other;
      break;
    case Alternative::kTwoSided:
      u_tested = std::max(sums.u, u_other);
      sides = 2.0;
      break;
  }
  const double variance = nn / 12.0 * ((n_total + 1.0) - sums.tie_term / (n_total * (n_total - 1.0)));
  const double sigma = variance > 0.0 ? std::sqrt(variance) : 0.0;
  out.z = sigma > 0.0 ? (sums.u - nn / 2.0) / sigma : 0.0;

  if (method == MannWhitneyMethod::kAuto) {
    method = std::min(n1, n2) <= 8 && !sums.has_ties && exact_feasible(n1, n2)
                 ? MannWhitneyMethod::kExact
                 : MannWhitneyMethod::kAsymptotic;
  }
  out.method = method;
  if (method == MannWhitneyMethod::kExact) {
    if (sums.has_ties) throw UsageError("the exact Mann-Whitney p-value needs samples without tied values");
    const std::vector<double> pmf = mann_whitney_null_pmf(n1, n2);  // throws when too large
    out.p_value = std::clamp(sides * exact_upper_tail(pmf, u_tested), 0.0, 1.0);
    return out;
  }
  if (sigma == 0.0) {
    out.p_value = 1.0;
    return out;
  }
  const boost::math::normal_distribution<double> normal;
  const double z_tested = (u_tested - nn / 2.0 - 0.5) / sigma;
  out.p_value = std::clamp(sides * boost::math::cdf(boost::math::complement(normal, z_tested)), 0.0, 1.0);
  return out;
}

namespace {

// kth_pairwise_difference for valid arguments (see the header), with buffers.
double select_pairwise_difference(std::span<const double> x, std::span<const double> y, std::uint64_t k,
                                  SelectionBuffers& buffers) {
  const std::size_t n1 = x.size(), n2 = y.size();
  const std::uint64_t total = static_cast<std::uint64_t>(n1) * n2;
  // Pairs still in play: per row i, cand indices [lo[i], hi[i]); every pair
  // left of lo is below the answer, every pair from hi on above it. Their
  // values lie strictly between lo_value and hi_value.
  auto& [lo, hi, bounds, sample, positions, rest] = buffers;
  lo.assign(n1, 0);
  hi.assign(n1, static_cast<std::uint32_t>(n2));
  double lo_value = -kInf, hi_value = kInf;
  std::uint64_t lo_total = 0, hi_total = total;
  const std::uint64_t materialise_at = std::max<std::uint64_t>((n1 + n2) / 16, 1u << 16);
  // The pivot sampler's generator (splitmix64). Its seed is fixed: the
  // selected value does not depend on it, only the running time does.
  std::uint64_t rng = 0x746f6b656e73636fULL;
  while (hi_total - lo_total > materialise_at) {
    const std::uint64_t active = hi_total - lo_total;
    // A uniform random sample of the pairs in play, drawn in row order: m
    // sorted uniform positions among the active pairs (cumulative sums of
    // exponential spacings, normalised), then one walk over the rows, O(n1 +
    // m) without a search per draw.
    const auto m = static_cast<std::size_t>(std::min<std::uint64_t>(active / 8, 1u << 17));
    positions.resize(m + 1);
    double sum = 0.0;
    for (double& p : positions) {
      sum -= std::log1p(-static_cast<double>(splitmix64_next(rng) >> 11) * 0x1p-53);  // Exp(1)
      p = sum;
    }
    const double scale = static_cast<double>(active) / sum;
    sample.clear();
    std::size_t next = 0;
    std::uint64_t passed = 0;  // pairs in play in the rows before row i
    for (std::size_t i = 0; i < n1 && next < m; ++i) {
      const std::uint64_t width = hi[i] - lo[i];
      for (; next < m; ++next) {
        const auto r = std::min(static_cast<std::uint64_t>(positions[next] * scale), active - 1);
        if (r >= passed + width) break;
        sample.push_back(y[lo[i] + static_cast<std::size_t>(r - passed)] - x[i]);
      }
      passed += width;
    }
    // Two pivots four binomial standard deviations either side of the wanted
    // rank's place in the sample: the k-th lies between them but for a
    // negligible chance, and about 8 sqrt(q (1 - q) / m) of the pairs stay in
    // play (q the wanted rank's fraction of them).
    const std::size_t size = sample.size();
    const double q = static_cast<double>(k - lo_total) / static_cast<double>(active);
    const double at = q * static_cast<double>(size);
    const auto spread = static_cast<std::size_t>(4.0 * std::sqrt(at * (1.0 - q))) + 2;
    const auto centre = static_cast<std::size_t>(std::clamp(at, 0.0, static_cast<double>(size - 1)));
    const std::size_t first = centre > spread ? centre - spread : 0;
    const std::size_t second = std::min(size - 1, centre + spread);
    std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(first), sample.end());
    // The second selection leaves the first pivot in place: it starts after it
    // (second > first: spread >= 2 and centre < size).
    std::nth_element(sample.begin() + static_cast<std::ptrdiff_t>(first) + 1,
                     sample.begin() + static_cast<std::ptrdiff_t>(second), sample.end());
    for (const double t : {sample[first], sample[second]}) {
      if (!(t > lo_value && t < hi_value)) continue;  // no longer in play
      if (const std::uint64_t n_below = row_boundaries<false>(x, y, t, bounds); k <= n_below) {
        hi.swap(bounds);  // the k-th is below t
        hi_value = t;
        hi_total = n_below;
      } else if (const std::uint64_t n_at_most = row_boundaries<true>(x, y, t, bounds); k > n_at_most) {
        lo.swap(bounds);  // the k-th is above t
        lo_value = t;
        lo_total = n_at_most;
      } else {
        return t;  // the k-th lies among the pairs equal to t
      }
    }
  }
  rest.clear();
  for (std::size_t i = 0; i < n1; ++i)
    for (std::size_t j = lo[i]; j < hi[i]; ++j) rest.push_back(y[j] - x[i]);
  const auto nth = rest.begin() + static_cast<std::ptrdiff_t>(k - lo_total - 1);
  std::nth_element(rest.begin(), nth, rest.end());
  return *nth;
}

}  // namespace

double kth_pairwise_difference(std::span<const double> x, std::span<const double> y, std::uint64_t k) {
  if (x.empty() || y.empty()) throw UsageError("kth_pairwise_difference: both samples need a value");
  if (y.size() >= std::numeric_limits<std::uint32_t>::max())
    throw UsageError(fmt::format("kth_pairwise_difference: {} values is more than 2^32 - 1", y.size()));
  const std::uint64_t total = pair_count(x.size(), y.size());
  if (k < 1 || k > total)
    throw UsageError(fmt::format("kth_pairwise_difference: k = {} outside [1, {}]", k, total));
  SelectionBuffers buffers;
  return select_pairwise_difference(x, y, k, buffers);
}

ShiftWithInterval hodges_lehmann_shift(const SortedSample& base, const SortedSample& cand,
                                       double confidence) {
  require_open_unit(confidence, "the confidence", "hodges_lehmann_shift");
  const auto x = base.values(), y = cand.values();
  const std::uint64_t total = pair_count(x.size(), y.size());
  ShiftWithInterval out;
  if (y.size() >= std::numeric_limits<std::uint32_t>::max())
    throw UsageError(fmt::format("hodges_lehmann_shift: {} values is more than 2^32 - 1", y.size()));
  SelectionBuffers buffers;
  const double lower_middle = select_pairwise_difference(x, y, (total + 1) / 2, buffers);
  out.estimate = lower_middle;
  if (total % 2 == 0) {
    // The upper middle is the same value while pairs equal to it reach past
    // rank total / 2, else the next difference above it.
    const auto [at_most, next] = at_most_and_next_above(x, y, lower_middle, buffers.bounds);
    const double upper_middle = at_most > total / 2 ? lower_middle : next.value();
    out.estimate = lower_middle / 2.0 + upper_middle / 2.0;
  }
  const CriticalRank rank = hodges_lehmann_rank(x.size(), y.size(), confidence);
  out.coverage = rank.coverage;
  if (rank.k) {
    out.ci_low = select_pairwise_difference(x, y, *rank.k, buffers);
    out.ci_high = select_pairwise_difference(x, y, total + 1 - *rank.k, buffers);
  }
  return out;
}

ShiftWithInterval hodges_lehmann_relative_shift(const SortedSample& base, const SortedSample& cand,
                                                double confidence) {
  const ShiftWithInterval logs = hodges_lehmann_shift(log_sample(base), log_sample(cand), confidence);
  return {std::expm1(logs.estimate), relative(logs.ci_low), relative(logs.ci_high), logs.coverage};
}

double kolmogorov_survival(double x) {
  if (!(x > 0.0)) return 1.0;
  if (x < 1.0) {
    // 1 - K(x), K(x) = sqrt(2 pi) / x sum_(k >= 1) exp(-(2k - 1)^2 pi^2 / (8 x^2)):
    // the theta-function form, fast where the alternating series is slow.
    const double w = std::numbers::pi * std::numbers::pi / (8.0 * x * x);
    double sum = 0.0;
    for (int k = 1; k < 100; ++k) {
      const double odd = 2.0 * k - 1.0;
      const double term = std::exp(-odd * odd * w);
      sum += term;
      if (term < 1e-17 * sum) break;
    }
    return 1.0 - std::sqrt(2.0 * std::numbers::pi) / x * sum;
  }
  double sum = 0.0;
  for (int k = 1; k < 100; ++k) {
    const double term = std::exp(-2.0 * k * k * x * x);
    sum += (k % 2 == 1 ? term : -term);
    if (term < 1e-17 * sum) break;
  }
  return std::clamp(2.0 * sum, 0.0, 1.0);
}

KolmogorovSmirnovResult kolmogorov_smirnov(const SortedSample& base, const SortedSample& cand) {
  const auto x = base.values(), y = cand.values();
  const std::size_t n1 = x.size(), n2 = y.size();
  KolmogorovSmirnovResult out;
  std::size_t i = 0, j = 0;
  while (i < n1 || j < n2) {
    const double v = j == n2 || (i < n1 && x[i] < y[j]) ? x[i] : y[j];
    while (i < n1 && x[i] == v) ++i;
    while (j < n2 && y[j] == v) ++j;
    const double gap = cdf_gap(i, n1, j, n2);
    out.d = std::max(out.d, std::abs(gap));
    out.d_plus = std::max(out.d_plus, gap);
  }
  const double n_eff = static_cast<double>(n1) * static_cast<double>(n2) / static_cast<double>(n1 + n2);
#if BOOST_VERSION >= 107500
  const boost::math::kolmogorov_smirnov_distribution<double> limit(n_eff);
  out.p_value = out.d > 0.0 ? boost::math::cdf(boost::math::complement(limit, out.d)) : 1.0;
#else
  // Boost.Math before 1.75 (Debian bookworm ships 1.74) has no
  // Kolmogorov-Smirnov distribution: the same limit by its series.
  out.p_value = kolmogorov_survival(std::sqrt(n_eff) * out.d);
#endif
  out.p_value_plus = std::exp(-2.0 * n_eff * out.d_plus * out.d_plus);
  return out;
}

double dkw_epsilon(std::size_t n, double alpha) {
  require_open_unit(alpha, "alpha", "dkw_epsilon");
  if (n == 0) throw UsageError("dkw_epsilon: the sample must have at least one value");
  return std::sqrt(std::log(2.0 / alpha) / (2.0 * static_cast<double>(n)));
}

TailComparison compare_upper_tails(const SortedSample& base, const SortedSample& cand, double p,
                                   double alpha) {
  require_open_unit(p, "the tail's quantile p", "compare_upper_tails");
  require_open_unit(alpha, "alpha", "compare_upper_tails");
  const auto x = base.values(), y = cand.values();
  const std::size_t n1 = x.size(), n2 = y.size();
  TailComparison out;
  out.threshold = nearest_rank(x, p);
  // The gap is a step function: its largest absolute value on [threshold,
  // inf) is at the threshold or at a sample value above it.
  auto i = static_cast<std::size_t>(std::upper_bound(x.begin(), x.end(), out.threshold) - x.begin());
  auto j = static_cast<std::size_t>(std::upper_bound(y.begin(), y.end(), out.threshold) - y.begin());
  out.signed_gap = cdf_gap(i, n1, j, n2);
  out.max_gap = std::abs(out.signed_gap);
  out.at = out.threshold;
  while (i < n1 || j < n2) {
    const double v = j == n2 || (i < n1 && x[i] < y[j]) ? x[i] : y[j];
    while (i < n1 && x[i] == v) ++i;
    while (j < n2 && y[j] == v) ++j;
    const double gap = cdf_gap(i, n1, j, n2);
    if (std::abs(gap) > out.max_gap) {
      out.max_gap = std::abs(gap);
      out.signed_gap = gap;
      out.at = v;
    }
  }
  out.epsilon_base = dkw_epsilon(n1, alpha / 2.0);
  out.epsilon_cand = dkw_epsilon(n2, alpha / 2.0);
  out.shifted = out.max_gap > out.epsilon_base + out.epsilon_cand;
  return out;
}

ShiftWithInterval quantile_shift(const SortedSample& base, const SortedSample& cand, double p,
                                 double confidence) {
  require_open_unit(p, "the quantile p", "quantile_shift");
  require_open_unit(confidence, "the confidence", "quantile_shift");
  const auto x = base.values(), y = cand.values();
  const double each = 1.0 - (1.0 - confidence) / 2.0;
  const OrderStatisticInterval bi = quantile_confidence_interval(x.size(), p, each);
  const OrderStatisticInterval ci = quantile_confidence_interval(y.size(), p, each);
  ShiftWithInterval out;
  out.estimate = nearest_rank(y, p) - nearest_rank(x, p);
  if (ci.lower_rank && bi.upper_rank) out.ci_low = y[*ci.lower_rank - 1] - x[*bi.upper_rank - 1];
  if (ci.upper_rank && bi.lower_rank) out.ci_high = y[*ci.upper_rank - 1] - x[*bi.lower_rank - 1];
  out.coverage = bi.coverage * ci.coverage;
  return out;
}

namespace {
// The order-statistic interval of a sample of n taken as n_eff values.
OrderStatisticInterval effective_interval(std::size_t n, double deff, double p, double each) {
  if (!(deff > 1)) return quantile_confidence_interval(n, p, each);
  const auto n_eff = std::max<std::size_t>(2, static_cast<std::size_t>(static_cast<double>(n) / deff));
  OrderStatisticInterval e = quantile_confidence_interval(n_eff, p, each);
  const double scale = static_cast<double>(n) / static_cast<double>(n_eff);
  if (e.lower_rank)
    e.lower_rank = std::max<std::size_t>(1, static_cast<std::size_t>(std::floor(*e.lower_rank * scale)));
  if (e.upper_rank)
    e.upper_rank = std::min<std::size_t>(n, static_cast<std::size_t>(std::ceil(*e.upper_rank * scale)));
  return e;
}
}  // namespace

double tail_design_effect(std::span<const double> v, double q) {
  const std::size_t n = v.size(), k = 20;
  if (n < 200) return 1.0;
  std::vector<double> sorted(v.begin(), v.end());
  const double at = nearest_rank_select(sorted, q);
  std::size_t above = 0;
  std::vector<double> share(k, 0.0), count(k, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t b = i * k / n;
    count[b] += 1;
    if (v[i] > at) share[b] += 1, ++above;
  }
  const double s = static_cast<double>(above) / static_cast<double>(n);
  if (above == 0 || s >= 1) return 1.0;
  double ss = 0;
  for (std::size_t b = 0; b < k; ++b) ss += (share[b] / count[b] - s) * (share[b] / count[b] - s);
  const double var_blocks = ss / static_cast<double>(k - 1);
  const double ratio = static_cast<double>(n) / static_cast<double>(k) * var_blocks / (s * (1 - s));
  // Its one-sided 90% lower bound (the block variance ~ chi-square with 19
  // degrees of freedom; chi2(0.90, 19) / 19 = 1.4318): independent values
  // seldom get widened by the estimate's own noise.
  return std::max(1.0, ratio / 1.4318);
}

ShiftWithInterval quantile_relative_shift(const SortedSample& base, const SortedSample& cand, double p,
                                          double confidence) {
  return quantile_relative_shift(base, cand, p, confidence, 1.0, 1.0);
}

ShiftWithInterval quantile_relative_shift(const SortedSample& base, const SortedSample& cand, double p,
                                          double confidence, double base_deff, double cand_deff) {
  require_open_unit(p, "the quantile p", "quantile_relative_shift");
  require_open_unit(confidence, "the confidence", "quantile_relative_shift");
  require_positive_values(base, "a relative quantile shift");
  require_positive_values(cand, "a relative quantile shift");
  const auto x = base.values(), y = cand.values();
  const double each = 1.0 - (1.0 - confidence) / 2.0;
  const OrderStatisticInterval bi = effective_interval(x.size(), base_deff, p, each);
  const OrderStatisticInterval ci = effective_interval(y.size(), cand_deff, p, each);
  ShiftWithInterval out;
  out.estimate = nearest_rank(y, p) / nearest_rank(x, p) - 1.0;
  if (ci.lower_rank && bi.upper_rank) out.ci_low = y[*ci.lower_rank - 1] / x[*bi.upper_rank - 1] - 1.0;
  if (ci.upper_rank && bi.lower_rank) out.ci_high = y[*ci.upper_rank - 1] / x[*bi.lower_rank - 1] - 1.0;
  out.coverage = bi.coverage * ci.coverage;
  return out;
}

double shannon_entropy_bits(std::span<const double> counts) {
  const double total = histogram_total(counts, "histogram");
  double h = 0.0;
  for (const double c : counts) {
    if (c == 0.0) continue;
    const double p = c / total;
    h -= p * std::log2(p);
  }
  return std::max(0.0, h);
}

double normalized_entropy(std::span<const double> counts) {
  const double h = shannon_entropy_bits(counts);
  if (counts.size() == 1) return 0.0;
  return h / std::log2(static_cast<double>(counts.size()));
}

double kl_divergence_bits(std::span<const double> p_counts, std::span<const double> q_counts,
                          double pseudo_count) {
  const auto [p, q] = smoothed_pair(p_counts, q_counts, pseudo_count);
  return kl_of_probabilities(p, q);
}

double jensen_shannon_bits(std::span<const double> p_counts, std::span<const double> q_counts,
                           double pseudo_count) {
  const auto [p, q] = smoothed_pair(p_counts, q_counts, pseudo_count);
  std::vector<double> m(p.size());
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = (p[i] + q[i]) / 2.0;
  return std::clamp((kl_of_probabilities(p, m) + kl_of_probabilities(q, m)) / 2.0, 0.0, 1.0);
}

bool early_stopping_pass(std::uint64_t n, std::uint64_t over_bound, double p, double confidence) {
  require_early_stopping_parameters(p, confidence, "early_stopping_pass");
  if (over_bound > n)
    throw UsageError(fmt::format("early_stopping_pass: {} over-bound queries out of {}", over_bound, n));
  return over_bound_cdf(n, over_bound, p) <= 1.0 - confidence;
}

std::uint64_t queries_needed(std::uint64_t over_bound, double p, double confidence) {
  require_early_stopping_parameters(p, confidence, "queries_needed");
  // P(Bin(n, 1 - p) <= t) falls as n grows: double n until it passes, then
  // bisect for the smallest n that does.
  const auto passes = [&](std::uint64_t n) { return over_bound_cdf(n, over_bound, p) <= 1.0 - confidence; };
  std::uint64_t fail = over_bound;  // n = t always fails: P = 1
  std::uint64_t pass = std::max<std::uint64_t>(2 * over_bound, 1);
  while (!passes(pass)) {
    fail = pass;
    if (pass > (std::uint64_t{1} << 62))
      throw UsageError("queries_needed: no feasible number of queries for these parameters");
    pass *= 2;
  }
  while (pass - fail > 1) {
    const std::uint64_t mid = fail + (pass - fail) / 2;
    (passes(mid) ? pass : fail) = mid;
  }
  return pass;
}

std::uint64_t more_queries_needed(std::uint64_t n, std::uint64_t over_bound, double p, double confidence) {
  if (over_bound > n)
    throw UsageError(fmt::format("more_queries_needed: {} over-bound queries out of {}", over_bound, n));
  const std::uint64_t needed = queries_needed(over_bound, p, confidence);
  return needed > n ? needed - n : 0;
}

EarlyStoppingEstimate early_stopping_rank(std::size_t n, double p, double confidence) {
  require_early_stopping_parameters(p, confidence, "early_stopping_rank");
  EarlyStoppingEstimate out;
  if (n == 0) return out;
  // s = min{s in [1, n] : F(s - 1) >= confidence}, F the Bin(n, p) CDF.
  const boost::math::binomial_distribution<double> under(static_cast<double>(n), p);
  const auto reaches = [&](std::size_t s) {
    return boost::math::cdf(under, static_cast<double>(s - 1)) >= confidence;
  };
  if (!reaches(n)) return out;
  std::size_t lo = 1, hi = n;
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (reaches(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  out.rank = lo;
  out.over_bound = n - lo;
  return out;
}

EarlyStoppingEstimate early_stopping_estimate(const SortedSample& sample, double p, double confidence) {
  EarlyStoppingEstimate out = early_stopping_rank(sample.size(), p, confidence);
  if (out.rank) out.value = sample.values()[*out.rank - 1];
  return out;
}

std::optional<std::uint64_t> more_samples_needed(std::uint64_t n, double ci_half_width,
                                                 double distance_to_decide) {
  if (!(ci_half_width >= 0.0) || !std::isfinite(ci_half_width) || !(distance_to_decide >= 0.0) ||
      !std::isfinite(distance_to_decide))
    throw UsageError(fmt::format(
        "more_samples_needed: the half-width ({}) and the distance to decide ({}) must be finite and >= 0",
        ci_half_width, distance_to_decide));
  if (ci_half_width <= distance_to_decide) return 0;
  if (distance_to_decide == 0.0) return std::nullopt;
  const double ratio = ci_half_width / distance_to_decide;
  // Rounded up, less a relative 1e-12 so that floating-point noise in an
  // exact product (1000 * 1.1^2) does not add a sample.
  const double target = std::ceil(static_cast<double>(n) * ratio * ratio * (1.0 - 1e-12));
  if (!(target < 1.8e19)) return std::nullopt;
  const auto needed = static_cast<std::uint64_t>(target);
  return needed > n ? needed - n : 0;
}

}  // namespace tokenscope::analyze
