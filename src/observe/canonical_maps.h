// The mapping tables behind canonicalize() (canonical.h): for each engine,
// which of its metric names becomes which canonical series, with what scale
// and how its label sets are combined. Internal to the observe module; the
// tables themselves are in canonical_maps.cpp, each entry naming where the
// engine documents (or defines) the name.
#pragma once

#include <span>
#include <string_view>

#include "observe/canonical.h"

namespace tokenscope::observe::maps {

// How the samples of one engine metric (its label sets) become one value.
enum class Aggregation : std::uint8_t {
  kSum,   // counts: requests, tokens, bytes (and histograms: merged bucket by bucket)
  kMean,  // ratios: KV cache usage of data-parallel engines, a GPU's utilization
  kMax,   // one quantity reported several times (a Triton ensemble and its steps count the
          // same requests; a GPU seen by two pods); histograms: the label set with most observations
};

// value × multiply ÷ divide. Two factors, so a division (ms → s, % → ratio) is
// one correctly rounded division: 5 ms becomes exactly the double nearest 0.005.
struct Scale {
  double multiply = 1.0;
  double divide = 1.0;
  double apply(double v) const { return v * multiply / divide; }
};
inline constexpr Scale kUnit{};
inline constexpr Scale kPercentToRatio{1.0, 100.0};
inline constexpr Scale kMillisecondsToSeconds{1.0, 1000.0};
inline constexpr Scale kMebibytesToBytes{1048576.0, 1.0};
inline constexpr Scale kMegahertzToHertz{1e6, 1.0};

struct Mapping {
  // The engine's name: a gauge or counter sample name (a counter also matches
  // with "_total" added or removed: OpenMetrics, prometheus_client and
  // hand-written servers differ), a histogram family name (its _bucket, _sum
  // and _count samples), or a histogram's "X_sum" read as a counter.
  std::string_view engine_name;
  std::string_view canonical;  // a name in kCanonicalSeries
  Scale scale = kUnit;
  Aggregation aggregation = Aggregation::kSum;
  // Only the samples whose label match_label has the value match_value (both
  // empty: every sample); for metrics that carry several quantities in one
  // family, such as Triton's nv_trt_llm_request_metrics{request_type=...}.
  std::string_view match_label = {};
  std::string_view match_value = {};
  // Alternatives for one canonical name: the lowest rank present wins (a
  // renamed metric, where a version exports both names), and mappings of
  // the same rank are added (memory used + free + reserved = total).
  int rank = 0;
  // Where the name is documented or defined (page or source file, version).
  std::string_view source = {};
};

struct EngineTable {
  Engine engine;
  // Server engines aggregate over every label; GPU tables keep one series per
  // GPU (label gpu) and per MIG instance (label mig).
  bool per_gpu = false;
  std::span<const Mapping> mappings;
};

// The table of an engine (an empty span for kUnknown).
EngineTable table_for(Engine engine);

// Detection markers, in the order detect_engine tries them: the first whose
// prefix (or exact name) is present among the exposition's names wins.
struct Marker {
  std::string_view name;
  bool prefix;  // name is a prefix ("sglang:"), else an exact family or sample name
  Engine engine;
};
std::span<const Marker> detection_markers();

}  // namespace tokenscope::observe::maps
