// Parser of the Prometheus text exposition format 0.0.4 and of OpenMetrics
// 1.0 text: # HELP / # TYPE / # UNIT / # EOF, label value escaping (\\, \",
// \n), histograms, summaries, gauge histograms, info and stateset families,
// _created / _total / _bucket / _count / _sum / _gcount / _gsum suffixes,
// exemplars (parsed past and dropped), NaN / +Inf / -Inf, and optional
// timestamps (integer milliseconds in 0.0.4, float seconds in OpenMetrics).
// A malformed line is rejected with its line number and reason; parsing goes
// on with the next line, so one bad line never loses a whole scrape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "observe/observation.h"

namespace tokenscope::observe {

enum class MetricType : std::uint8_t {
  kUntyped,  // 0.0.4 "untyped", OpenMetrics "unknown", or no TYPE line
  kCounter,
  kGauge,
  kHistogram,
  kSummary,
  kGaugeHistogram,
  kInfo,
  kStateSet,
};
std::string_view metric_type_name(MetricType t);

enum class ExpositionFormat : std::uint8_t { kAuto, kPrometheusText, kOpenMetrics };

struct ExpositionSample {
  std::string name;  // the sample's own name, suffix included ("x_bucket", "x_total")
  Labels labels;     // in the order written
  double value = 0.0;
  std::optional<std::int64_t> timestamp_ns;  // epoch ns, when the line carried a timestamp
};

struct MetricFamily {
  std::string name;  // family name (OpenMetrics counters: without _total)
  MetricType type = MetricType::kUntyped;
  std::string help;  // unescaped
  std::string unit;  // OpenMetrics # UNIT
  std::vector<ExpositionSample> samples;
};

struct RejectedLine {
  std::size_t line = 0;  // 1-based
  std::string reason;    // what was expected, with the offending text quoted (bounded)
};

struct Exposition {
  ExpositionFormat format = ExpositionFormat::kPrometheusText;  // as detected or given
  std::vector<MetricFamily> families;                           // in order of first appearance
  std::vector<RejectedLine> rejected;  // at most kMaxRejectedKept kept; rejected_lines counts all
  std::size_t rejected_lines = 0;
  std::size_t lines = 0;
  std::size_t samples = 0;
  bool eof_marker = false;  // OpenMetrics "# EOF" seen (its absence is itself reported as rejected)
  // Sample lines past parse_exposition's max_series: counted, not parsed.
  std::size_t series_over_limit = 0;
};

inline constexpr std::size_t kMaxRejectedKept = 100;

// Chooses the format from a Content-Type ("application/openmetrics-text" →
// OpenMetrics, anything else → Prometheus text).
ExpositionFormat format_from_content_type(std::string_view content_type);

// Parses text. kAuto: OpenMetrics when the text ends with "# EOF", else
// Prometheus text. Never throws on bad input. At most max_series samples (or
// metric families) are kept: the lines after are counted
// (series_over_limit), not parsed (a scrape's bound, as Prometheus's
// sample_limit; docs/reliability.md "Scrape bounds").
Exposition parse_exposition(std::string_view text, ExpositionFormat format = ExpositionFormat::kAuto,
                            std::size_t max_series = std::numeric_limits<std::size_t>::max());

// Every sample of every family as (name, labels, value): the raw series of an Observation.
std::vector<Sample> flatten(const Exposition& e);
// The same, moving each sample's name and labels out of e instead of copying
// them (half the allocations of a scrape): for a caller done with e.
std::vector<Sample> flatten(Exposition&& e);

}  // namespace tokenscope::observe
