#include "probe/probe_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>

#include "core/stats.h"

namespace tokenscope::probe {

MedianCi median_ci(std::span<const double> values, double confidence) {
  MedianCi m;
  if (values.empty()) return m;
  m.values.assign(values.begin(), values.end());
  std::vector<double> v = m.values;
  std::sort(v.begin(), v.end());
  m.n = v.size();
  m.median = nearest_rank(v, 0.5);
  m.min = v.front();
  m.max = v.back();
  m.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  const auto ci = quantile_confidence_interval(v.size(), 0.5, confidence);
  if (ci.lower_rank) m.ci_low = v[*ci.lower_rank - 1];
  if (ci.upper_rank) m.ci_high = v[*ci.upper_rank - 1];
  return m;
}

MedianCi ratio_ci(std::span<const double> numerator, std::span<const double> denominator, double confidence) {
  if (numerator.size() != denominator.size())
    throw std::invalid_argument("ratio_ci: spans of different length");
  std::vector<double> r;
  r.reserve(numerator.size());
  for (std::size_t i = 0; i < numerator.size(); ++i)
    if (denominator[i] != 0.0) r.push_back(numerator[i] / denominator[i]);
  return median_ci(r, confidence);
}

LatencySummary summarize_latencies(std::vector<double> values) {
  LatencySummary s;
  if (values.empty()) return s;
  s.values = values;
  std::sort(values.begin(), values.end());
  s.n = values.size();
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.p50 = nearest_rank(values, 0.5);
  s.p90 = nearest_rank(values, 0.9);
  s.p99 = nearest_rank(values, 0.99);
  s.min = values.front();
  s.max = values.back();
  return s;
}

nlohmann::json to_json(const MedianCi& m) {
  nlohmann::json j{{"n", m.n},     {"median", m.median}, {"min", m.min},
                   {"max", m.max}, {"mean", m.mean},     {"values", m.values}};
  j["ci95_low"] = m.ci_low ? nlohmann::json(*m.ci_low) : nlohmann::json(nullptr);
  j["ci95_high"] = m.ci_high ? nlohmann::json(*m.ci_high) : nlohmann::json(nullptr);
  return j;
}

nlohmann::json to_json(const LatencySummary& s) {
  return {{"n", s.n},     {"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90},
          {"p99", s.p99}, {"min", s.min},   {"max", s.max}, {"values", s.values}};
}

std::string format_ci(const MedianCi& m, int decimals) {
  if (m.n == 0) return "n/a";
  if (!m.ci_low || !m.ci_high) return fmt::format("{:.{}f} [n/a]", m.median, decimals);
  return fmt::format("{:.{}f} [{:.{}f}, {:.{}f}]", m.median, decimals, *m.ci_low, decimals, *m.ci_high,
                     decimals);
}

}  // namespace tokenscope::probe
