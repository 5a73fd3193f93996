// `tokenscope probe kv-layout`: a CPU KV cache laid out as serving engines
// lay theirs out, analysed for cache-line sharing and timed under a
// decode-like load.
//
// Layouts of one paged block (K part, then V part, each):
//   head-interleaved  [token][head][dim]   (vLLM's flash-attention cache shape)
//   head-contiguous   [head][token][dim]   (each head's rows of a block together)
// A row is one token of one head: head_dim x dtype bytes (bf16/fp16 2, fp8 1).
// Per-sequence metadata (length, tokens generated, per-head progress) is
// either packed (int32 arrays) or padded (each sequence's fields on their own
// `metadata_pad_bytes` slot).
//
// Work is split between T threads either by sequence (thread = seq mod T
// appends and reads every head of its sequences) or by head (thread = head
// mod T, across every sequence). Each decode step appends one K and one V row
// per (sequence, head) and reads back the last `read_window` K rows, as
// attention does; a barrier ends the step, as the engine's step does.
// Positions wrap around each sequence's token slots, so runs can be made as
// long as a stable timing needs without growing the cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "probe/perf_counters.h"
#include "probe/probe_stats.h"
#include "probe/topology.h"

namespace tokenscope::probe {

enum class KvLayout { kHeadInterleaved, kHeadContiguous };
enum class KvSplit { kBySequence, kByHead };

std::string to_string(KvLayout l);
std::string to_string(KvSplit s);
// "bf16", "fp16", "fp8" -> bytes per element; UsageError otherwise.
int dtype_bytes(const std::string& dtype);

struct KvGeometry {
  int block_size = 16;  // tokens per block
  int head_dim = 128;
  int kv_heads = 8;
  std::string dtype = "bf16";
  int base_offset_bytes = 0;  // misalignment of the pool's start (0: line-aligned)
  int line_size = 64;
  int metadata_pad_bytes = 128;

  int row_bytes() const;
  std::uint64_t block_bytes() const;  // K and V
};

struct KvAnalysis {
  KvLayout layout = KvLayout::kHeadInterleaved;
  KvSplit split = KvSplit::kBySequence;
  bool metadata_padded = false;
  std::uint64_t rows = 0;
  std::uint64_t rows_straddling = 0;     // touch more lines than ceil(row/line) needs
  std::uint64_t rows_sharing_lines = 0;  // first or last line also holds another row
  std::uint64_t kv_lines = 0;
  std::uint64_t kv_lines_shared = 0;  // written by more than one thread
  std::uint64_t metadata_lines = 0;
  std::uint64_t metadata_lines_shared = 0;
  double straddle_share() const { return rows ? static_cast<double>(rows_straddling) / rows : 0.0; }
  double shared_row_share() const { return rows ? static_cast<double>(rows_sharing_lines) / rows : 0.0; }
};

// Exact counts over `sequences` sequences of `blocks_per_sequence` blocks.
KvAnalysis analyze_kv_layout(const KvGeometry& g, KvLayout layout, KvSplit split, bool metadata_padded,
                             int threads, int sequences, int blocks_per_sequence);

struct KvLayoutSettings {
  KvGeometry geometry;
  int threads = 0;                // 1..kMaxProbeThreads; 0: one per physical core (2..64)
  int sequences = 0;              // 0: 4 per thread
  int tokens_per_sequence = 128;  // token slots per sequence (the cache's size)
  int read_window = 32;
  int repetitions = 15;
  double min_seconds_per_run = 0.05;  // decode steps are added (positions wrap) until a run lasts this long
  std::vector<KvLayout> layouts{KvLayout::kHeadInterleaved, KvLayout::kHeadContiguous};
  std::vector<KvSplit> splits{KvSplit::kBySequence, KvSplit::kByHead};
  std::vector<bool> metadata{false, true};  // packed, padded
  std::vector<EventSpec> events;            // hardware events per variant; empty: default_events()
};

struct KvVariantResult {
  KvAnalysis analysis;
  MedianCi tokens_per_s;  // sequence positions appended per second (all heads)
  MedianCi vs_best;       // this variant's time / the fastest variant's time, per repetition
  std::string name() const;
};

struct KvLayoutResult {
  KvLayoutSettings settings;
  Topology topology;
  std::vector<int> cpus_used;
  std::string caveat;
  long long steps_per_run = 0;  // decode steps of every timed run
  std::vector<KvVariantResult> variants;
  std::string winner;
  std::string verdict;  // the padding and layout effects in one line each
  std::vector<std::string> findings;
  nlohmann::json counters;  // CounterTotals::to_json over the variants, unit "position"
};

KvLayoutResult run_kv_layout_probe(const KvLayoutSettings& settings, const Topology& topology);

nlohmann::json to_json(const KvLayoutResult& r);
std::string format_table(const KvLayoutResult& r);

}  // namespace tokenscope::probe
