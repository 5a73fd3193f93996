#include "rundir/downsample.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <stdexcept>

namespace tokenscope::rundir {

namespace {

// The ranks (0-based, ascending, distinct) to keep of n sorted values.
std::vector<std::size_t> cdf_ranks(std::size_t n, std::size_t even_points) {
  std::vector<std::size_t> ranks;
  if (n == 0) return ranks;
  const std::size_t steps = std::max<std::size_t>(even_points, 1);
  ranks.reserve(steps + 200);
  for (std::size_t k = 0; k <= steps; ++k)
    ranks.push_back(static_cast<std::size_t>(std::llround(static_cast<double>(k) / steps * (n - 1))));
  // The tail: 1 - 10^-e for e from 1 to 7 in steps of 1/32.
  for (int k = 32; k <= 7 * 32; ++k) {
    const double f = 1.0 - std::pow(10.0, -k / 32.0);
    ranks.push_back(static_cast<std::size_t>(std::ceil(f * static_cast<double>(n))) - 1);
  }
  for (auto& r : ranks) r = std::min(r, n - 1);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

}  // namespace

XY minmax_columns(const std::vector<double>& x, const std::vector<double>& y, std::size_t columns) {
  if (x.size() != y.size()) throw std::invalid_argument("minmax_columns: x and y differ in length");
  const std::size_t n = x.size();
  if (columns == 0 || n <= 4 * columns) return XY{x, y};
  const double x0 = x.front();
  const double span = x.back() - x0;
  XY out;
  out.x.reserve(4 * columns);
  out.y.reserve(4 * columns);
  std::size_t i = 0;
  while (i < n) {
    // The column of x[i], and the end of the points in it.
    const auto col =
        span > 0
            ? std::min<std::size_t>(
                  columns - 1, static_cast<std::size_t>((x[i] - x0) / span * static_cast<double>(columns)))
            : 0;
    std::size_t j = i;
    std::size_t lo = n, hi = n, gap = n;
    for (; j < n; ++j) {
      const auto c =
          span > 0
              ? std::min<std::size_t>(
                    columns - 1, static_cast<std::size_t>((x[j] - x0) / span * static_cast<double>(columns)))
              : 0;
      if (c != col) break;
      if (std::isnan(y[j])) {
        if (gap == n) gap = j;
        continue;
      }
      if (lo == n || y[j] < y[lo]) lo = j;
      if (hi == n || y[j] > y[hi]) hi = j;
    }
    // Keep first, min, max, last and the first gap, in x order, once each.
    std::size_t keep[5] = {i, lo, hi, j - 1, gap};
    std::sort(std::begin(keep), std::end(keep));
    std::size_t prev = n;
    for (const std::size_t k : keep) {
      if (k == n || k == prev) continue;
      out.x.push_back(x[k]);
      out.y.push_back(y[k]);
      prev = k;
    }
    i = j;
  }
  return out;
}

ColumnReducer::ColumnReducer(double x0, double x1, std::size_t columns)
    : x0_(x0), span_(x1 > x0 ? x1 - x0 : 0), columns_(std::max<std::size_t>(columns, 1)) {}

void ColumnReducer::add(double x, double y) {
  const double f = span_ > 0 ? (x - x0_) / span_ * static_cast<double>(columns_.size()) : 0;
  const std::size_t c =
      f <= 0 || std::isnan(f) ? 0 : std::min(columns_.size() - 1, static_cast<std::size_t>(f));
  Column& col = columns_[c];
  const Point p{x, y, seq_++};
  if (!col.any) {
    col.any = true;
    col.first = p;
  }
  col.last = p;
  if (std::isnan(y)) {
    if (!col.has_gap) {
      col.has_gap = true;
      col.gap = p;
    }
    return;
  }
  if (!col.has_lo) {
    col.has_lo = true;
    col.lo = col.hi = p;
  } else if (y < col.lo.y) {
    col.lo = p;
  } else if (y > col.hi.y) {
    col.hi = p;
  }
}

void ColumnReducer::append(const ColumnReducer& later, double y_offset) {
  if (later.columns_.size() != columns_.size())
    throw std::invalid_argument("ColumnReducer::append: different numbers of columns");
  const std::uint64_t base = seq_;
  const auto moved = [&](Point p) {
    p.y += y_offset;
    p.seq += base;
    return p;
  };
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    const Column& from = later.columns_[c];
    if (!from.any) continue;
    Column& col = columns_[c];
    if (!col.any) {
      col.any = true;
      col.first = moved(from.first);
    }
    col.last = moved(from.last);
    if (from.has_gap && !col.has_gap) {
      col.has_gap = true;
      col.gap = moved(from.gap);
    }
    if (from.has_lo) {
      const Point lo = moved(from.lo), hi = moved(from.hi);
      if (!col.has_lo) {
        col.has_lo = true;
        col.lo = lo;
        col.hi = hi;
      } else {
        if (lo.y < col.lo.y) col.lo = lo;
        if (hi.y > col.hi.y) col.hi = hi;
      }
    }
  }
  seq_ += later.seq_;
}

XY ColumnReducer::result() const {
  XY out;
  for (const Column& col : columns_) {
    if (!col.any) continue;
    Point keep[5];
    std::size_t n = 0;
    keep[n++] = col.first;
    if (col.has_lo) {
      keep[n++] = col.lo;
      keep[n++] = col.hi;
    }
    keep[n++] = col.last;
    if (col.has_gap) keep[n++] = col.gap;
    std::sort(keep, keep + n, [](const Point& a, const Point& b) { return a.seq < b.seq; });
    std::uint64_t prev = UINT64_MAX;
    for (std::size_t i = 0; i < n; ++i) {
      if (keep[i].seq == prev) continue;
      prev = keep[i].seq;
      out.x.push_back(keep[i].x);
      out.y.push_back(keep[i].y);
    }
  }
  return out;
}

XY cdf_points(std::vector<double>& values, std::size_t even_points) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }),
               values.end());
  std::sort(values.begin(), values.end());
  XY out;
  const std::size_t n = values.size();
  for (const std::size_t r : cdf_ranks(n, even_points)) {
    out.x.push_back(values[r]);
    out.y.push_back(static_cast<double>(r + 1) / static_cast<double>(n));
  }
  return out;
}

XY cdf_points(const LogLinearHistogram& h, std::size_t even_points) {
  XY out;
  const std::uint64_t n = h.count();
  if (n == 0) return out;
  const auto ranks = cdf_ranks(n, even_points);
  // Walk the buckets once, handing out ranks as their cumulative count passes.
  std::size_t next = 0;
  std::uint64_t below = 0;
  h.for_each_bucket([&](std::size_t index, std::uint64_t count) {
    const std::uint64_t upto = below + count;
    const double upper_ms =
        static_cast<double>(std::min<std::uint64_t>(LogLinearHistogram::bucket_upper(index), h.max())) / 1e6;
    bool any = false;
    while (next < ranks.size() && ranks[next] < upto) {
      any = true;
      ++next;
    }
    // One point per bucket: at its upper bound, the fraction at or below it.
    if (any) {
      out.x.push_back(upper_ms);
      out.y.push_back(static_cast<double>(upto) / static_cast<double>(n));
    }
    below = upto;
  });
  return out;
}

}  // namespace tokenscope::rundir
