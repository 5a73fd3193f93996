#include "probe/numa_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
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

NumaPlan plan_numa(const Topology& topo, const std::vector<int>& memory_nodes) {
  NumaPlan p;
  p.memory_nodes = memory_nodes;
  std::sort(p.memory_nodes.begin(), p.memory_nodes.end());
  const auto cores = topo.one_cpu_per_core();
  auto is_core = [&](int cpu) { return std::find(cores.begin(), cores.end(), cpu) != cores.end(); };
  std::map<int, std::vector<int>> node_cores;  // node -> its physical cores' first cpus
  for (const auto& [node, cpus] : topo.numa_nodes) {
    for (int c : cpus)
      if (is_core(c)) node_cores[node].push_back(c);
    if (node_cores[node].empty() && !cpus.empty()) node_cores[node].push_back(cpus.front());
    if (!node_cores[node].empty()) p.reader[node] = node_cores[node].front();
  }
  for (const auto& [node, cpus] : topo.numa_nodes)
    if (std::find(p.memory_nodes.begin(), p.memory_nodes.end(), node) == p.memory_nodes.end())
      p.notes.push_back(fmt::format("node {} has no memory: its cpus read only other nodes' memory", node));
  for (int m : p.memory_nodes)
    if (!p.reader.count(m))
      p.notes.push_back(
          fmt::format("node {} has memory but no cpu (CXL or HBM?): read from the others only", m));
  if (p.reader.size() >= 2) {
    auto it = p.reader.begin();
    const int a = it->second;
    ++it;
    p.cross_pair = {a, it->second};
  } else {
    p.notes.push_back("fewer than two nodes with cpus: no cross-node false-sharing pair");
  }
  for (const auto& [node, c] : node_cores)
    if (c.size() >= 2) {
      p.same_pair = {c[0], c[1]};
      p.same_pair_node = node;
      break;
    }
  if (p.same_pair.empty())
    p.notes.push_back(
        "no node has two physical cores: the same-node false-sharing baseline cannot be measured");
  return p;
}

NumaResult run_numa_probe(const NumaSettings& s, const Topology& topo) {
  NumaResult r;
  r.settings = s;
  r.nodes = static_cast<int>(topo.numa_nodes.size());
  if (s.repetitions < 1) throw UsageError("--repetitions must be at least 1");
  if (s.buffer_bytes < (1u << 20)) throw UsageError("--buffer-mib must be at least 1");
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
  std::vector<int> memory_nodes;
  for (int n = 0; n <= numa_max_node(); ++n)
    if (numa_bitmask_isbitset(numa_all_nodes_ptr, static_cast<unsigned>(n)) &&
        numa_node_size64(n, nullptr) > 0)
      memory_nodes.push_back(n);
  r.plan = plan_numa(topo, memory_nodes);

  // One buffer per memory node, read by one pinned thread per cpu node.
  struct Buffer {
    int node;
    char* data;
  };
  std::vector<Buffer> buffers;
  for (int m : r.plan.memory_nodes) {
    char* b = static_cast<char*>(numa_alloc_onnode(s.buffer_bytes, m));
    if (!b) {
      r.plan.notes.push_back(fmt::format("numa_alloc_onnode({} MiB, node {}) failed: node {} not measured",
                                         s.buffer_bytes >> 20, m, m));
      continue;
    }
    std::memset(b, 1, s.buffer_bytes);
    buffers.push_back({m, b});
  }
  struct Pair {
    int cpu_node, cpu, buffer;
    std::vector<double> gbps;
  };
  std::vector<Pair> pairs;
  for (const auto& [node, cpu] : r.plan.reader)
    for (std::size_t b = 0; b < buffers.size(); ++b) pairs.push_back({node, cpu, static_cast<int>(b), {}});
  for (int rep = 0; rep < s.repetitions; ++rep)
    for (auto& p : pairs) {
      double g = 0;
      std::thread t([&] {
        pin_current_thread(p.cpu);
        g = read_gbps(buffers[static_cast<std::size_t>(p.buffer)].data, s.buffer_bytes);
      });
      t.join();
      p.gbps.push_back(g);
    }
  for (const auto& b : buffers) numa_free(b.data, s.buffer_bytes);
  std::vector<double> local, remote;
  for (const auto& p : pairs) {
    const int mem = buffers[static_cast<std::size_t>(p.buffer)].node;
    r.bandwidth.push_back({p.cpu_node, mem, median_ci(p.gbps)});
    if (mem == p.cpu_node) continue;
    // The local reading of the same cpu node in the same repetition.
    for (const auto& l : pairs)
      if (l.cpu_node == p.cpu_node && buffers[static_cast<std::size_t>(l.buffer)].node == p.cpu_node)
        for (int rep = 0; rep < s.repetitions; ++rep) {
          remote.push_back(p.gbps[static_cast<std::size_t>(rep)]);
          local.push_back(l.gbps[static_cast<std::size_t>(rep)]);
        }
  }
  if (!local.empty()) r.remote_over_local = ratio_ci(remote, local);

  alignas(4096) static char counters[8192];
  auto penalty = [&](const std::vector<int>& cpus) {
    std::vector<double> packed, padded;
    for (int rep = 0; rep < s.repetitions; ++rep) {
      packed.push_back(time_counter_updates(cpus, counters, 8, s.increments_per_thread).seconds);
      padded.push_back(time_counter_updates(cpus, counters, 128, s.increments_per_thread).seconds);
    }
    return ratio_ci(packed, padded);
  };
  if (!r.plan.cross_pair.empty()) r.cross_node_packed_over_padded = penalty(r.plan.cross_pair);
  if (!r.plan.same_pair.empty()) r.same_node_packed_over_padded = penalty(r.plan.same_pair);
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
  j["plan"] = {{"readers", nlohmann::json::object()},  {"memory_nodes", r.plan.memory_nodes},
               {"cross_node_cpus", r.plan.cross_pair}, {"same_node_cpus", r.plan.same_pair},
               {"same_node", r.plan.same_pair_node},   {"notes", r.plan.notes}};
  for (const auto& [node, cpu] : r.plan.reader) j["plan"]["readers"][std::to_string(node)] = cpu;
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
  for (const auto& n : r.plan.notes) out += "  NOTE: " + n + "\n";
  for (const auto& b : r.bandwidth)
    out += fmt::format("  cpu node {} reading memory of node {}: {} GB/s\n", b.cpu_node, b.memory_node,
                       format_ci(b.gb_per_s));
  if (r.remote_over_local.n) out += "  remote / local bandwidth: " + format_ci(r.remote_over_local) + "\n";
  if (r.cross_node_packed_over_padded.n)
    out += fmt::format("  false sharing across nodes, cpus {} (packed / padded): {}\n",
                       fmt::join(r.plan.cross_pair, " and "), format_ci(r.cross_node_packed_over_padded));
  if (r.same_node_packed_over_padded.n)
    out +=
        fmt::format("  false sharing within node {}, cpus {} (packed / padded): {}\n", r.plan.same_pair_node,
                    fmt::join(r.plan.same_pair, " and "), format_ci(r.same_node_packed_over_padded));
  return out;
}

}  // namespace tokenscope::probe
