// The machine a probe runs on: CPU model, online CPUs, SMT siblings, cache
// line sizes and NUMA nodes, read from Linux's /proc and /sys. The root is a
// parameter so tests read a fake tree.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/cpu_set.h"

namespace tokenscope::probe {

// The most threads a CPU probe runs (cache-line, kv-layout): kv-layout's line
// analysis keeps one bit per writer in a 64-bit mask. Without --threads the
// probes run one thread per physical core, clamped to 2..64.
inline constexpr int kMaxProbeThreads = 64;

// Linux CPU lists ("0-3,8,10-11"): core/cpu_set.h.
using tokenscope::parse_cpu_list;

struct CacheLevel {
  int level = 0;
  std::string type;  // Data, Instruction, Unified
  std::uint64_t size_bytes = 0;
  int coherency_line_size = 0;
  std::vector<int> shared_cpu_list;
};

struct Topology {
  std::string cpu_model;
  std::vector<int> online_cpus;
  std::map<int, std::vector<int>> thread_siblings;  // cpu -> its SMT siblings (itself included)
  std::map<int, int> core_id;                       // cpu -> physical core id
  std::map<int, int> package_id;                    // cpu -> socket
  std::vector<CacheLevel> caches;                   // of cpu0 (or the first online cpu)
  std::map<int, std::vector<int>> numa_nodes;       // node -> its cpus
  std::vector<std::string> notes;                   // what could not be read

  // The line size the caches report (coherency_line_size of L1d), if known.
  std::optional<int> reported_line_size() const;
  // True when cpu a and cpu b are SMT siblings of one physical core.
  bool are_siblings(int a, int b) const;
  // One cpu per physical core, in order (the first sibling of each core).
  std::vector<int> one_cpu_per_core() const;
  nlohmann::json to_json() const;
};

// Reads the topology under root (default "/": /proc/cpuinfo, /sys/devices/system/...).
// Missing files are noted, never fatal; a malformed file is an InputError.
Topology read_topology(const std::filesystem::path& root = "/");

// Pins the calling thread to one cpu. Returns false (and leaves the thread
// where it was) when the kernel refuses.
bool pin_current_thread(int cpu);

// Chooses `count` cpus for threads that must not share an L1: one per
// physical core first, then siblings. `siblings_used` is set when two chosen
// cpus share a core (the false-sharing effect cannot show between them).
std::vector<int> choose_cpus(const Topology& topo, int count, bool& siblings_used);

}  // namespace tokenscope::probe
