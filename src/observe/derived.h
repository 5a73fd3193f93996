// What the observe layer computes from successive observations of one
// source: per-window series (counter rates, the prefix-cache hit rate,
// quantiles of the server's histograms over the window) and totals over the
// whole run (counter increases, histogram quantiles of the run, gauge peaks
// and means). Counters are followed series by series as Prometheus's
// increase() does: a value lower than the previous one is a reset, and the
// increase across it is the new value.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "observe/observation.h"

namespace tokenscope::observe {

// The quantiles written per window and per run.
inline constexpr double kDerivedQuantiles[] = {0.5, 0.9, 0.99};

// A derived series: its name pattern, unit and definition (docs/observe.md prints these).
struct DerivedDefinition {
  std::string_view name;
  std::string_view unit;
  std::string_view definition;
};
inline constexpr DerivedDefinition kDerivedSeries[] = {
    {"<counter>_per_s", "unit/s", "increase of a canonical counter over the window / the window's length"},
    {"prefix_cache_hit_rate", "ratio",
     "increase of prefix_cache_hits_tokens / increase of prefix_cache_queries_tokens over the window "
     "(prefill "
     "only: decode steps never query the prefix cache, so no decode figure exists)"},
    {"<histogram>_p50, _p90, _p99", "unit",
     "quantile of the server's histogram over the window, from the increase of each bucket, interpolated "
     "linearly inside the bucket (Prometheus's histogram_quantile)"},
    {"<histogram>_mean", "unit", "increase of _sum / increase of _count over the window"},
    {"<histogram>_count_per_s", "1/s",
     "increase of _count over the window / the window's length (observations per second)"},
};

// Prometheus's histogram_quantile over cumulative buckets (le, count) sorted
// by le (the last +Inf): nullopt when the total is 0.
std::optional<double> histogram_quantile(double q, const std::vector<std::pair<double, double>>& buckets);

class SeriesTracker {
 public:
  // Adds o.derived (against the previous observation fed) and folds o into
  // the run's totals. Observations with an error or no series are counted
  // and skipped.
  void feed(Observation& o);

  // Totals over every observation fed: {"window_s", "counters": {name:
  // increase} (labels folded in: name{a="b"}), "histograms": {name: {count,
  // sum, mean, p50, p90, p99}}, "gauges": {name: {min, max, mean, last}},
  // "resets": n}. Null when fewer than two observations had series.
  nlohmann::json totals() const;

  // The increase of a canonical counter (all label sets summed) over the run; nullopt when never seen.
  std::optional<double> increase(std::string_view name) const;
  // Gauge peak over the run (all label sets summed per observation).
  std::optional<double> gauge_max(std::string_view name) const;

  // (t_ns, prefix-cache hit rate) of every window that had queries (prefill only).
  const std::vector<std::pair<Nanos, double>>& hit_rate_points() const { return hit_rate_points_; }
  Nanos first_t() const { return first_t_; }
  // (t_ns, value) of requests_running and of requests_waiting (label sets
  // summed) at every observation that had them: the hidden queue's input.
  const std::vector<std::pair<Nanos, double>>& running_points() const { return running_points_; }
  const std::vector<std::pair<Nanos, double>>& waiting_points() const { return waiting_points_; }

  std::uint64_t observations() const { return observations_; }
  std::uint64_t resets() const { return resets_; }

 private:
  struct Counter {
    Sample sample;  // name and labels (value unused)
    double last = 0, increase = 0;
  };
  // A gauge over the run: the read before the first request (the baseline)
  // apart, so that what a previous run left (a KV cache still full) is not
  // this run's peak; min, max, mean over the reads after it.
  struct Gauge {
    double min = 0, max = 0, sum = 0, last = 0;
    std::uint64_t n = 0;
    std::optional<double> before;
  };
  std::map<std::string, Counter> counters_;  // key: name + rendered labels
  std::map<std::string, Gauge> gauges_;      // key: name (label sets summed)
  Nanos previous_t_ = 0;
  Nanos first_t_ = 0;
  std::uint64_t observations_ = 0;
  std::uint64_t resets_ = 0;
  std::vector<std::pair<Nanos, double>> hit_rate_points_;
  std::vector<std::pair<Nanos, double>> running_points_, waiting_points_;
};

// run.json "server": the server's own view of a run from the trackers of
// its sources (replicas): counter increases summed over them, gauge peaks
// (the highest any one reported), and with one source the quantiles of its
// histograms over the run. Null when no tracker has two observations.
nlohmann::json server_view(const std::vector<const SeriesTracker*>& trackers);

// The series key "name{a="x",b="y"}" (labels in the order given).
std::string series_key(const Sample& s);

}  // namespace tokenscope::observe
