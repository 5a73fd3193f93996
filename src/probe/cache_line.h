// `tokenscope probe cache-line`: the cache line as the hardware sees it and
// what sharing one costs, by differential timing (no performance counters
// needed; they are read as an extra where the PMU is visible).
//
//  * stride sweep: one read-modify-write every `stride` bytes over a buffer
//    larger than the last-level cache. Below the line size every line is
//    fetched whatever the stride, so the sweep time is flat; past it, each
//    doubling halves the lines fetched. The knee is the transfer granularity.
//  * coherence sweep: two threads on different physical cores write 8-byte
//    counters `distance` bytes apart. While both counters sit in one line the
//    line bounces between the cores; the smallest distance with no slowdown
//    is the coherence granularity (128 on CPUs whose adjacent-line prefetcher
//    pairs lines).
//  * false-sharing penalty: N threads each increment their own counter,
//    packed (8 bytes apart, one line) vs padded to 64 and 128 bytes (and to
//    std::hardware_destructive_interference_size). Ratio of times per
//    repetition, median with its exact 95% interval.
//  * core-to-core latency: a compare-and-swap ping-pong between each pair of
//    cpus; one-way latency = round trip / 2.
// Threads are pinned one per physical core; when the machine only offers SMT
// siblings (or one cpu) the result says the effect cannot show here rather
// than report "no false sharing".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "probe/perf_counters.h"
#include "probe/probe_stats.h"
#include "probe/topology.h"

namespace tokenscope::probe {

struct CacheLineSettings {
  int threads = 0;  // 1..kMaxProbeThreads; 0: one per physical core (2..64)
  std::uint64_t increments_per_thread = 5'000'000;
  int repetitions = 21;                   // per variant, interleaved
  std::uint64_t stride_buffer_bytes = 0;  // 0: 4x the last-level cache, 64 MiB..512 MiB
  int stride_repetitions = 7;
  std::uint64_t ping_pong_round_trips = 20'000;  // per repetition
  int ping_pong_repetitions = 7;
  int max_ping_pong_pairs = 256;  // more pairs than this are sampled evenly
  bool run_stride = true;
  bool run_coherence = true;
  bool run_false_sharing = true;
  bool run_ping_pong = true;
  // Hardware events counted over the false-sharing variants where the PMU
  // is visible; empty: default_events().
  std::vector<EventSpec> events;
};

struct StridePoint {
  int stride_bytes = 0;
  MedianCi sweep_ms;       // time to touch the whole buffer at this stride
  MedianCi ns_per_access;  // sweep time / accesses
};

struct DistancePoint {
  int distance_bytes = 0;
  MedianCi seconds;
  MedianCi slowdown;  // time at this distance / time at the far (4096 B) distance
};

struct PaddingVariant {
  std::string name;      // packed, padded64, padded128, padded_hdis
  int stride_bytes = 0;  // distance between consecutive counters
  MedianCi seconds;
  MedianCi ns_per_increment;
};

struct RatioResult {
  std::string name;  // e.g. packed/padded64
  MedianCi ratio;
};

struct PingPongPair {
  int cpu_a = 0;
  int cpu_b = 0;
  bool siblings = false;
  MedianCi one_way_ns;
};

struct CacheLineResult {
  CacheLineSettings settings;
  Topology topology;
  std::vector<int> cpus_used;
  bool siblings_used = false;  // two of the chosen cpus share a core (and its L1)
  bool single_cpu = false;
  std::string sharing_caveat;  // set when false sharing cannot show between the cpus used
  double concurrency = 0;      // median over the false-sharing runs (see CounterRun)
  int hardware_destructive_interference_size = 0;

  std::vector<StridePoint> stride;
  int stride_line_size = 0;  // knee of the stride sweep; 0 when none was found
  std::vector<DistancePoint> coherence;
  int coherence_line_size = 0;  // smallest distance without a slowdown; 0 when undetermined
  int detected_line_size = 0;   // coherence granularity, else the stride knee, else sysfs

  std::vector<PaddingVariant> variants;
  std::vector<RatioResult> ratios;
  std::string verdict;  // one line: penalty measured / none / cannot show here

  std::vector<PingPongPair> ping_pong;
  nlohmann::json counters;  // CounterTotals::to_json over the variants, unit "increment"
};

// Finds the knee of a stride sweep: the first stride s whose doubling
// shortens the sweep by more than `drop` (0.7: at least 30% less time).
// Returns 0 when no knee is found. strides must ascend by doubling.
int find_stride_knee(const std::vector<int>& strides, const std::vector<double>& sweep_times,
                     double drop = 0.7);

// The smallest distance from which on every slowdown (median) stays under
// `threshold`, provided some smaller distance is above it; 0 otherwise.
int find_coherence_granularity(const std::vector<int>& distances, const std::vector<double>& slowdowns,
                               double threshold = 1.3);

// The verdict of the false-sharing variants from packed/padded64 (median
// [95% CI]): a penalty, none, inconclusive, or — packed faster beyond its
// interval, which false sharing cannot cause — unexplained, with what would
// tell. A caveat (siblings, one cpu, threads kept apart) comes first.
std::string false_sharing_verdict(const MedianCi& penalty, const std::string& sharing_caveat,
                                  std::size_t threads);

struct CounterRun {
  double seconds = 0;      // wall time from the common start until the last thread finished
  double concurrency = 0;  // sum of the threads' CPU time / wall time: ~threads when they ran at once
};

// Runs `threads` pinned threads, each doing `increments` plain
// read-modify-writes of the 8-byte counter at base + i * stride_bytes.
CounterRun time_counter_updates(const std::vector<int>& cpus, char* base, std::size_t stride_bytes,
                                std::uint64_t increments);

CacheLineResult run_cache_line_probe(const CacheLineSettings& settings, const Topology& topology);

nlohmann::json to_json(const CacheLineResult& r);
std::string format_table(const CacheLineResult& r);

}  // namespace tokenscope::probe
