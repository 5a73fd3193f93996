#include "probe/numa_probe.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "probe/cache_line.h"

#ifdef TOKENSCOPE_HAVE_NUMA
#include <numa.h>
#endif

namespace tokenscope::probe {

#ifdef TOKENSCOPE_HAVE_NUMA
namespace {
double read_gbps(const char* buf, std::size_t bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t acc = 0;
  for (std::size_t i = 0; i + 8 <= bytes; i += 64) {
    std::uint64_t v;
    std::memcpy(&v, buf + i, 8);
    acc += v;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile std::uint64_t sink = acc;
  (void)sink;
  return static_cast<double>(bytes) / s / 1e9;
}
}  // namespace
#endif

NumaResult run_numa_probe(const NumaSettings& s, const Topology& topo) {
  NumaResult r;
  r.settings = s;
  r.nodes = static_cast<int>(topo.numa_nodes.size());
#ifdef TOKENSCOPE_HAVE_NUMA
  r.libnuma = numa_available() >= 0;
  if (!r.libnuma) {
    r.note = "libnuma reports NUMA unavailable (numa_available() < 0): nothing measured";
    return r;
  }
  r.nodes = numa_num_configured_nodes();
  if (r.nodes <= 1) {
    r.note = "one node: all memory is local, there is no remote bandwidth or cross-node penalty to measure";
    return r;
  }
  std::vector<int> first_cpu;  // per node, its first cpu (or -1)
  for (int n = 0; n < r.nodes; ++n) {
    const auto it = topo.numa_nodes.find(n);
    first_cpu.push_back(it == topo.numa_nodes.end() || it->second.empty() ? -1 : it->second.front());
  }
  std::vector<double> local, remote;
  for (int cpu_node = 0; cpu_node < r.nodes; ++cpu_node) {
    if (first_cpu[static_cast<std::size_t>(cpu_node)] < 0) continue;
    for (int mem_node = 0; mem_node < r.nodes; ++mem_node) {
      char* buf = static_cast<char*>(numa_alloc_onnode(s.buffer_bytes, mem_node));
      if (!buf) continue;
      std::memset(buf, 1, s.buffer_bytes);
      std::vector<double> g;
      std::thread t([&] {
        pin_current_thread(first_cpu[static_cast<std::size_t>(cpu_node)]);
        for (int rep = 0; rep < s.repetitions; ++rep) g.push_back(read_gbps(buf, s.buffer_bytes));
      });
      t.join();
      numa_free(buf, s.buffer_bytes);
      r.bandwidth.push_back({cpu_node, mem_node, median_ci(g)});
      (cpu_node == mem_node ? local : remote)
          .insert((cpu_node == mem_node ? local : remote).end(), g.begin(), g.end());
    }
  }
  if (!local.empty() && !remote.empty()) {
    const std::size_t n = std::min(local.size(), remote.size());
    r.remote_over_local =
        ratio_ci(std::span<const double>(remote.data(), n), std::span<const double>(local.data(), n));
  }
  // False sharing between two cores on different nodes, and on the first node.
  std::vector<int> cross{first_cpu[0], first_cpu[1]};
  std::vector<int> same;
  if (!topo.numa_nodes.empty())
    for (int c : topo.numa_nodes.begin()->second)
      if (same.size() < 2) same.push_back(c);
  alignas(4096) static char counters[8192];
  auto penalty = [&](const std::vector<int>& cpus) {
    std::vector<double> packed, padded;
    for (int rep = 0; rep < s.repetitions; ++rep) {
      packed.push_back(time_counter_updates(cpus, counters, 8, s.increments_per_thread).seconds);
      padded.push_back(time_counter_updates(cpus, counters, 128, s.increments_per_thread).seconds);
    }
    return ratio_ci(packed, padded);
  };
  if (cross[0] >= 0 && cross[1] >= 0) r.cross_node_packed_over_padded = penalty(cross);
  if (same.size() == 2) r.same_node_packed_over_padded = penalty(same);
#else
  r.note = r.nodes <= 1 ? "one node (from sysfs); built without libnuma, so nothing else is measured"
                        : "built without libnuma (install libnuma-dev and rebuild): bandwidth not measured";
#endif
  return r;
}

nlohmann::json to_json(const NumaResult& r) {
  nlohmann::json j;
  j["probe"] = "numa";
  j["settings"] = {{"buffer_bytes", r.settings.buffer_bytes},
                   {"repetitions", r.settings.repetitions},
                   {"increments_per_thread", r.settings.increments_per_thread}};
  j["libnuma"] = r.libnuma;
  j["nodes"] = r.nodes;
  j["note"] = r.note;
  auto& bw = j["bandwidth"] = nlohmann::json::array();
  for (const auto& b : r.bandwidth)
    bw.push_back(
        {{"cpu_node", b.cpu_node}, {"memory_node", b.memory_node}, {"gb_per_s", to_json(b.gb_per_s)}});
  j["remote_over_local_bandwidth"] = to_json(r.remote_over_local);
  j["cross_node_packed_over_padded"] = to_json(r.cross_node_packed_over_padded);
  j["same_node_packed_over_padded"] = to_json(r.same_node_packed_over_padded);
  return j;
}

std::string format_table(const NumaResult& r) {
  std::string out =
      fmt::format("NUMA: {} node{}{}\n", r.nodes, r.nodes == 1 ? "" : "s", r.libnuma ? "" : " (no libnuma)");
  if (!r.note.empty()) out += "  " + r.note + "\n";
  for (const auto& b : r.bandwidth)
    out += fmt::format("  cpu node {} reading memory of node {}: {} GB/s\n", b.cpu_node, b.memory_node,
                       format_ci(b.gb_per_s));
  if (r.remote_over_local.n) out += "  remote / local bandwidth: " + format_ci(r.remote_over_local) + "\n";
  if (r.cross_node_packed_over_padded.n)
    out += "  false sharing across nodes (packed / padded): " + format_ci(r.cross_node_packed_over_padded) +
           "\n";
  if (r.same_node_packed_over_padded.n)
    out += "  false sharing within one node (packed / padded): " + format_ci(r.same_node_packed_over_padded) +
           "\n";
  return out;
}

}  // namespace tokenscope::probe
