// `tokenscope probe numa`: local against remote memory bandwidth and the
// false-sharing penalty across nodes (libnuma). With one node there is
// nothing to compare and the result says so.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "probe/probe_stats.h"
#include "probe/topology.h"

namespace tokenscope::probe {

struct NumaSettings {
  std::uint64_t buffer_bytes = 256ull << 20;
  int repetitions = 7;
  std::uint64_t increments_per_thread = 2'000'000;
};

struct NumaBandwidth {
  int cpu_node = 0;
  int memory_node = 0;
  MedianCi gb_per_s;  // read bandwidth of one thread
};

// What can be measured on a machine: which cpu reads each node's memory,
// and the two cpu pairs of the false-sharing comparison. Node ids may be
// sparse (nodes 0 and 2) and a node may have memory without cpus (CXL, HBM)
// or cpus without memory.
struct NumaPlan {
  std::map<int, int> reader;      // cpu node -> the cpu (a physical core's first) that reads
  std::vector<int> memory_nodes;  // nodes with memory, ascending
  std::vector<int> cross_pair;    // two physical cores on different nodes, or empty
  std::vector<int> same_pair;     // two physical cores of one node, or empty
  int same_pair_node = -1;
  std::vector<std::string> notes;  // what cannot be measured, and why
};
NumaPlan plan_numa(const Topology& topology, const std::vector<int>& memory_nodes);

struct NumaResult {
  NumaSettings settings;
  bool libnuma = false;  // built with libnuma and numa_available() >= 0
  int nodes = 1;
  std::string note;  // "one node: ..." or why nothing was measured
  NumaPlan plan;
  std::vector<NumaBandwidth> bandwidth;
  MedianCi remote_over_local;  // bandwidth ratio, remote / local, per repetition
  MedianCi cross_node_packed_over_padded;
  MedianCi same_node_packed_over_padded;
};

// Bandwidth of every (cpu node, memory node) pair, interleaved within every
// repetition; remote / local pairs each remote reading with the local reading
// of the same cpu node in the same repetition.
NumaResult run_numa_probe(const NumaSettings& settings, const Topology& topology);
nlohmann::json to_json(const NumaResult& r);
std::string format_table(const NumaResult& r);

}  // namespace tokenscope::probe
