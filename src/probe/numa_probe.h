// `tokenscope probe numa`: local against remote memory bandwidth and the
// false-sharing penalty across nodes (libnuma). With one node there is
// nothing to compare and the result says so.
#pragma once

#include <cstdint>
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

struct NumaResult {
  NumaSettings settings;
  bool libnuma = false;  // built with libnuma and numa_available() >= 0
  int nodes = 1;
  std::string note;  // "one node: ..." or why nothing was measured
  std::vector<NumaBandwidth> bandwidth;
  MedianCi remote_over_local;  // bandwidth ratio, remote / local
  MedianCi cross_node_packed_over_padded;
  MedianCi same_node_packed_over_padded;
};

NumaResult run_numa_probe(const NumaSettings& settings, const Topology& topology);
nlohmann::json to_json(const NumaResult& r);
std::string format_table(const NumaResult& r);

}  // namespace tokenscope::probe
