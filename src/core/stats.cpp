#include "core/stats.h"

#include <limits>

#include <math.h>
#include <algorithm>

#include <cmath>
#include <stdexcept>

namespace tokenscope {

std::size_t nearest_rank_index(std::size_t n, double p) {
  if (n == 0) throw std::invalid_argument("nearest_rank_index: empty sample");
  if (!(p > 0.0)) return 0;
  if (p >= 1.0) return n - 1;
  // ceil(p*n) - 1, with a guard against p*n landing a hair above an integer.
  const double pn = p * static_cast<double>(n);
  double k = std::ceil(pn - 1e-9 * std::max(1.0, pn));
  if (k < 1.0) k = 1.0;
  return std::min(n, static_cast<std::size_t>(k)) - 1;
}

double linear_quantile(std::span<const double> sorted, double p) {
  const double h = static_cast<double>(sorted.size() - 1) * std::clamp(p, 0.0, 1.0);
  const auto lo = static_cast<std::size_t>(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted[lo];
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[lo + 1] - sorted[lo]);
}

double nearest_rank(std::span<const double> sorted, double p) {
  return sorted[nearest_rank_index(sorted.size(), p)];
}

double nearest_rank_select(std::vector<double>& v, double p) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  const std::size_t i = nearest_rank_index(v.size(), p);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

namespace {
// log Γ(x) without std::lgamma's write of the global signgam: the checklist's
// items run on several threads at once (lgamma_r is the reentrant form).
double log_gamma(double x) {
  int sign = 0;
  return ::lgamma_r(x, &sign);
}

// Binomial pmf over a window that holds all but a negligible mass, and the
// CDF at any point from it. log-space start at the mode, recurrence outward.
class BinomialCdf {
 public:
  BinomialCdf(std::size_t n, double p) : n_(n) {
    const double nd = static_cast<double>(n);
    const auto mode = static_cast<std::size_t>(std::floor((nd + 1.0) * p));
    const std::size_t m = std::min(mode, n);
    const double log_pmf_mode = log_gamma(nd + 1.0) - log_gamma(static_cast<double>(m) + 1.0) -
                                log_gamma(nd - static_cast<double>(m) + 1.0) +
                                static_cast<double>(m) * std::log(p) +
                                (nd - static_cast<double>(m)) * std::log1p(-p);
    const double ratio_up = p / (1.0 - p);
    // Walk down from the mode.
    std::vector<double> down;
    double v = std::exp(log_pmf_mode);
    const double mode_pmf = v;
    for (std::size_t k = m; k > 0;) {
      // pmf(k-1) = pmf(k) * k / ((n-k+1) * ratio_up)
      v = v * static_cast<double>(k) / (static_cast<double>(n - k + 1) * ratio_up);
      --k;
      if (v < mode_pmf * 1e-20) break;
      down.push_back(v);
    }
    lo_ = m - down.size();
    pmf_.assign(down.rbegin(), down.rend());
    pmf_.push_back(mode_pmf);
    v = mode_pmf;
    for (std::size_t k = m; k < n;) {
      v = v * static_cast<double>(n - k) / static_cast<double>(k + 1) * ratio_up;
      ++k;
      pmf_.push_back(v);
      if (v < mode_pmf * 1e-20) break;
    }
    cdf_.resize(pmf_.size());
    double acc = 0.0;
    for (std::size_t i = 0; i < pmf_.size(); ++i) {
      acc += pmf_[i];
      cdf_[i] = acc;
    }
    // Normalise away the rounding of the window's total mass.
    for (double& c : cdf_) c /= acc;
  }

  // P(B <= k) for integer k (k may be -1).
  double cdf(long long k) const {
    if (k < static_cast<long long>(lo_)) return 0.0;
    const auto idx = static_cast<std::size_t>(k) - lo_;
    if (idx >= cdf_.size()) return 1.0;
    return cdf_[idx];
  }
  std::size_t n() const { return n_; }

 private:
  std::size_t n_;
  std::size_t lo_ = 0;
  std::vector<double> pmf_;
  std::vector<double> cdf_;
};
}  // namespace

OrderStatisticInterval quantile_confidence_interval(std::size_t n, double p, double confidence) {
  OrderStatisticInterval out;
  if (n == 0 || !(p > 0.0 && p < 1.0) || !(confidence > 0.0 && confidence < 1.0)) return out;
  const double half_alpha = (1.0 - confidence) / 2.0;
  const BinomialCdf bin(n, p);
  const auto nl = static_cast<long long>(n);
  // r = max{r in [1, n] : F(r-1) <= alpha/2}; F is increasing, so binary search.
  if (bin.cdf(0) <= half_alpha) {
    long long lo = 1, hi = nl;
    while (lo < hi) {
      const long long mid = lo + (hi - lo + 1) / 2;
      if (bin.cdf(mid - 1) <= half_alpha)
        lo = mid;
      else
        hi = mid - 1;
    }
    out.lower_rank = static_cast<std::size_t>(lo);
  }
  // s = min{s in [1, n] : F(s-1) >= 1 - alpha/2}.
  if (bin.cdf(nl - 1) >= 1.0 - half_alpha) {
    long long lo = 1, hi = nl;
    while (lo < hi) {
      const long long mid = lo + (hi - lo) / 2;
      if (bin.cdf(mid - 1) >= 1.0 - half_alpha)
        hi = mid;
      else
        lo = mid + 1;
    }
    out.upper_rank = static_cast<std::size_t>(lo);
  }
  const double upper_cdf = out.upper_rank ? bin.cdf(static_cast<long long>(*out.upper_rank) - 1) : 1.0;
  const double lower_cdf = out.lower_rank ? bin.cdf(static_cast<long long>(*out.lower_rank) - 1) : 0.0;
  out.coverage = upper_cdf - lower_cdf;
  return out;
}

Distribution describe(std::vector<double>& values, double confidence) {
  Distribution d;
  d.count = values.size();
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  RunningStats rs;
  for (double v : values) rs.add(v);
  d.mean = rs.mean();
  d.std = rs.stddev();
  d.min = values.front();
  d.max = values.back();
  for (double p : kSummaryQuantiles) {
    QuantileWithInterval q;
    q.p = p;
    q.value = nearest_rank(values, p);
    const auto ci = quantile_confidence_interval(values.size(), p, confidence);
    if (ci.lower_rank) q.ci_low = values[*ci.lower_rank - 1];
    if (ci.upper_rank) q.ci_high = values[*ci.upper_rank - 1];
    d.quantiles.push_back(q);
  }
  return d;
}

void RunningStats::add(double x) {
  if (n_ == 0) {
    min_ = max_ = x;
  } else {
    min_ = std::min(min_, x);
    max_ = std::max(max_, x);
  }
  ++n_;
  const double delta = x - mean_;
  mean_ += delta / static_cast<double>(n_);
  m2_ += delta * (x - mean_);
}

void RunningStats::merge(const RunningStats& o) {
  if (o.n_ == 0) return;
  if (n_ == 0) {
    *this = o;
    return;
  }
  const double n1 = static_cast<double>(n_), n2 = static_cast<double>(o.n_);
  const double delta = o.mean_ - mean_;
  const double total = n1 + n2;
  mean_ += delta * n2 / total;
  m2_ += o.m2_ + delta * delta * n1 * n2 / total;
  n_ += o.n_;
  min_ = std::min(min_, o.min_);
  max_ = std::max(max_, o.max_);
}

double RunningStats::variance() const {
  return n_ < 2 ? 0.0 : m2_ / static_cast<double>(n_ - 1);
}

double RunningStats::stddev() const {
  return std::sqrt(variance());
}

}  // namespace tokenscope
