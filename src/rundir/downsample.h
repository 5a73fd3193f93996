// Reducing data for display, never for statistics.
//
// minmax_columns: an M4-style reducer (Jugel et al., "M4: A
// Visualization-Oriented Time Series Data Aggregation", VLDB 2014). The x
// range is cut into `columns` equal pixel columns; of the points in each it
// keeps the first, the one with the smallest y, the one with the largest y
// and the last, in x order. A line drawn through what is kept covers the same
// pixels as one through every point, so a spike of one sample stays visible
// (an average per column would hide it). Points whose y is NaN are gaps and
// are kept as gaps (one per column at most). When there are no more points
// than 4 per column, every point is kept.
//
// cdf_points: the empirical CDF of values as (value, fraction at or below),
// with ranks chosen for the eye: evenly over [0, 1] plus more and more of
// them towards the tail (p99, p99.9, p99.99, ...), always the minimum and the
// maximum. Computed on every value; only the number of points drawn is cut.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/histogram.h"

namespace tokenscope::rundir {

struct XY {
  std::vector<double> x;
  std::vector<double> y;
};

// x must be sorted ascending (ties allowed) and as long as y.
XY minmax_columns(const std::vector<double>& x, const std::vector<double>& y, std::size_t columns);

// The same reduction for points that arrive one at a time (a file too large
// to hold), over an x range known before the first: per column its first,
// lowest, highest and last point and its first gap (NaN y), in x order. x
// must not decrease; points outside [x0, x1] go to the first or last column.
// Each column keeps 5 points at most, whatever the number of points added.
class ColumnReducer {
 public:
  ColumnReducer(double x0, double x1, std::size_t columns);
  void add(double x, double y);
  // Joins the points of `later` (a reducer of the same range and columns
  // fed the points that came after this one's), their y moved by
  // y_offset: the same result as one reducer fed every point in order.
  void append(const ColumnReducer& later, double y_offset = 0);
  XY result() const;

 private:
  struct Point {
    double x = 0, y = 0;
    std::uint64_t seq = 0;  // order of arrival, to sort ties on x
  };
  struct Column {
    bool any = false, has_lo = false, has_gap = false;
    Point first, lo, hi, last, gap;
  };
  double x0_, span_;
  std::uint64_t seq_ = 0;
  std::vector<Column> columns_;
};

// NaN values are left out. values is sorted in place.
XY cdf_points(std::vector<double>& values, std::size_t even_points = 256);

// The same from a histogram of nanoseconds, in milliseconds: each kept rank
// at the upper bound of its bucket (clamped to the histogram's max).
XY cdf_points(const LogLinearHistogram& h_ns, std::size_t even_points = 256);

}  // namespace tokenscope::rundir
