// The line-ownership simulator: replays an address trace through a per-line
// MESI-like owner model and classifies every coherence event.
//
// Model, per cache line of `line_size` bytes and per thread: whether the
// thread holds a copy, whether it ever did, and the bytes other threads wrote
// since it lost its copy (infinite caches: copies are lost only to
// invalidation). A write invalidates every other copy; a read of a line that
// another thread holds Modified downgrades it (a HITM in perf-c2c's words).
// When a thread that lost its copy touches the line again, that coherence
// miss is classified as Dubois et al. define it:
//  * true sharing when it touches a byte another thread wrote since the loss
//    (the miss moved data the thread needed);
//  * false sharing when every byte it touches is one nobody else wrote since
//    (the line moved only because it holds other threads' data).
// A thread's first touch of a line is a cold miss, not classified. Accesses
// that span lines are split.
//
// Predictions: the same trace replayed with another line size, or with the
// objects of a layout map moved so each starts on its own line (padding),
// gives the events the change would leave.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "probe/access_trace.h"

namespace tokenscope::probe {

inline constexpr int kMaxSimLineSize = 256;

struct LineReport {
  std::uint64_t line_address = 0;
  std::uint64_t reads = 0;
  std::uint64_t writes = 0;
  std::uint64_t cold_misses = 0;
  std::uint64_t misses_true = 0;       // coherence misses, true sharing
  std::uint64_t misses_false = 0;      // coherence misses, false sharing
  std::uint64_t invalidations = 0;     // copies invalidated by writes
  std::uint64_t hitm = 0;              // reads that found the line Modified in another thread
  std::vector<std::uint32_t> threads;  // every thread that touched the line
  // Byte ranges [begin, end) within the line with the threads that touched them.
  struct Range {
    std::uint32_t begin = 0;
    std::uint32_t end = 0;
    std::vector<std::uint32_t> threads;
    bool written = false;
  };
  std::vector<Range> ranges;
  std::vector<std::string> symbols;  // layout entries on this line, "name+0xOFF" style

  std::uint64_t true_events() const { return misses_true; }
  std::uint64_t false_events() const { return misses_false; }
  std::uint64_t events() const { return misses_true + misses_false; }
  // By its coherence misses: "false", "true", "mixed" or "none".
  std::string classification() const;
};

struct SimTotals {
  std::uint64_t accesses = 0;
  std::uint64_t line_accesses = 0;  // after splitting accesses that span lines
  std::uint64_t lines = 0;
  std::uint64_t cold_misses = 0;
  std::uint64_t misses_true = 0;
  std::uint64_t misses_false = 0;
  std::uint64_t invalidations = 0;
  std::uint64_t hitm = 0;
  std::uint64_t lines_false_sharing = 0;  // lines with at least one false-sharing miss
  std::uint64_t lines_true_sharing = 0;   // lines with at least one true-sharing miss
  std::uint64_t true_events() const { return misses_true; }
  std::uint64_t false_events() const { return misses_false; }
};

struct SimResult {
  int line_size = 64;
  SimTotals totals;
  std::vector<LineReport>
      lines;  // lines with coherence misses, invalidations or HITMs; most false sharing first
};

// Replays the trace. line_size must be a power of two in [8, 256]
// (UsageError otherwise). layout names the objects on reported lines.
SimResult simulate_lines(const std::vector<Access>& trace, int line_size,
                         const std::vector<LayoutEntry>& layout = {});

// Moves every object of the layout to its own line (objects keep their order
// and size; each starts at a multiple of line_size in a fresh address range);
// accesses outside every object are left where they are.
std::vector<Access> pad_layout(const std::vector<Access>& trace, const std::vector<LayoutEntry>& layout,
                               int line_size, std::vector<LayoutEntry>* padded_layout = nullptr);

struct Prediction {
  std::string scenario;  // "as traced (64 B lines)", "128 B lines", "padded to 64 B"
  int line_size = 0;
  bool padded = false;
  SimTotals totals;
};

// The trace as recorded at line_size, at each of other_line_sizes, and with
// the layout padded at line_size (when a layout is given).
std::vector<Prediction> predict(const std::vector<Access>& trace, int line_size,
                                const std::vector<int>& other_line_sizes,
                                const std::vector<LayoutEntry>& layout);

nlohmann::json to_json(const SimResult& r, std::size_t max_lines = 1000);
nlohmann::json to_json(const std::vector<Prediction>& p);
// perf-c2c-like table of the top `max_lines` lines, then the predictions.
std::string format_table(const SimResult& r, const std::vector<Prediction>& predictions,
                         std::size_t max_lines = 20);

}  // namespace tokenscope::probe
