#include "probe/topology.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/cpu_set.h"
#include "core/error.h"
#include "core/strings.h"

namespace tokenscope::probe {

namespace {

std::optional<std::string> read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<int> read_int_file(const std::filesystem::path& p) {
  auto t = read_text(p);
  if (!t) return std::nullopt;
  const auto s = trim(*t);
  int v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size())
    throw InputError(p.string(), 1, "value", "expected an integer, got " + quote_input(s));
  return v;
}

// "32K", "1024K", "8M" as sysfs cache sizes are written.
std::uint64_t parse_size(std::string_view s, const std::string& file) {
  s = trim(s);
  std::uint64_t mult = 1;
  if (!s.empty() && (s.back() == 'K' || s.back() == 'k'))
    mult = 1024, s.remove_suffix(1);
  else if (!s.empty() && s.back() == 'M')
    mult = 1024 * 1024, s.remove_suffix(1);
  else if (!s.empty() && s.back() == 'G')
    mult = 1024ull * 1024 * 1024, s.remove_suffix(1);
  std::uint64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size())
    throw InputError(file, 1, "size", "expected a size like 32K, got " + quote_input(s));
  return v * mult;
}

}  // namespace

std::optional<int> Topology::reported_line_size() const {
  for (const auto& c : caches)
    if (c.level == 1 && c.type != "Instruction" && c.coherency_line_size > 0) return c.coherency_line_size;
  for (const auto& c : caches)
    if (c.coherency_line_size > 0) return c.coherency_line_size;
  return std::nullopt;
}

bool Topology::are_siblings(int a, int b) const {
  if (a == b) return true;
  const auto it = thread_siblings.find(a);
  if (it == thread_siblings.end()) return false;
  return std::find(it->second.begin(), it->second.end(), b) != it->second.end();
}

std::vector<int> Topology::one_cpu_per_core() const {
  std::vector<int> out;
  std::set<int> seen_first;
  for (int cpu : online_cpus) {
    const auto it = thread_siblings.find(cpu);
    const int first = (it == thread_siblings.end() || it->second.empty()) ? cpu : it->second.front();
    if (seen_first.insert(first).second) out.push_back(cpu);
  }
  return out;
}

nlohmann::json Topology::to_json() const {
  nlohmann::json j;
  j["cpu_model"] = cpu_model;
  j["online_cpus"] = online_cpus;
  j["physical_cores"] = one_cpu_per_core().size();
  nlohmann::json sib = nlohmann::json::object();
  for (const auto& [cpu, list] : thread_siblings) sib[std::to_string(cpu)] = list;
  j["thread_siblings"] = sib;
  nlohmann::json caches_j = nlohmann::json::array();
  for (const auto& c : caches)
    caches_j.push_back({{"level", c.level},
                        {"type", c.type},
                        {"size_bytes", c.size_bytes},
                        {"coherency_line_size", c.coherency_line_size},
                        {"shared_cpu_list", c.shared_cpu_list}});
  j["caches"] = caches_j;
  nlohmann::json nodes = nlohmann::json::object();
  for (const auto& [node, cpus] : numa_nodes) nodes[std::to_string(node)] = cpus;
  j["numa_nodes"] = nodes;
  if (const auto l = reported_line_size()) j["reported_line_size"] = *l;
  j["notes"] = notes;
  return j;
}

Topology read_topology(const std::filesystem::path& root) {
  Topology t;
  const auto sys_cpu = root / "sys/devices/system/cpu";
  if (auto info = read_text(root / "proc/cpuinfo")) {
    std::istringstream in(*info);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
        const auto colon = line.find(':');
        if (colon != std::string::npos) {
          t.cpu_model = std::string(trim(std::string_view(line).substr(colon + 1)));
          break;
        }
      }
    }
  } else {
    t.notes.push_back("no /proc/cpuinfo: cpu model unknown");
  }
  if (auto online = read_text(sys_cpu / "online")) {
    t.online_cpus = parse_cpu_list(*online, (sys_cpu / "online").string());
  } else {
    t.notes.push_back("no " + (sys_cpu / "online").string() + ": cpus taken from the scheduler");
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) t.online_cpus.push_back(c);
  }
  for (int cpu : t.online_cpus) {
    const auto dir = sys_cpu / ("cpu" + std::to_string(cpu));
    const auto sib_file = dir / "topology/thread_siblings_list";
    if (auto s = read_text(sib_file)) {
      t.thread_siblings[cpu] = parse_cpu_list(*s, sib_file.string());
    } else {
      t.notes.push_back("no " + sib_file.string() + ": cpu " + std::to_string(cpu) +
                        " assumed to be its own core");
      t.thread_siblings[cpu] = {cpu};
    }
    if (auto v = read_int_file(dir / "topology/core_id")) t.core_id[cpu] = *v;
    if (auto v = read_int_file(dir / "topology/physical_package_id")) t.package_id[cpu] = *v;
  }
  if (!t.online_cpus.empty()) {
    const auto cache_dir = sys_cpu / ("cpu" + std::to_string(t.online_cpus.front())) / "cache";
    for (int i = 0; i < 16; ++i) {
      const auto idx = cache_dir / ("index" + std::to_string(i));
      if (!std::filesystem::exists(idx)) break;
      CacheLevel c;
      if (auto v = read_int_file(idx / "level")) c.level = *v;
      if (auto s = read_text(idx / "type")) c.type = std::string(trim(*s));
      if (auto s = read_text(idx / "size")) c.size_bytes = parse_size(*s, (idx / "size").string());
      if (auto v = read_int_file(idx / "coherency_line_size")) c.coherency_line_size = *v;
      if (auto s = read_text(idx / "shared_cpu_list"))
        c.shared_cpu_list = parse_cpu_list(*s, (idx / "shared_cpu_list").string());
      t.caches.push_back(std::move(c));
    }
    if (t.caches.empty()) t.notes.push_back("no cache information in " + cache_dir.string());
  }
  const auto node_dir = root / "sys/devices/system/node";
  if (auto online = read_text(node_dir / "online")) {
    for (int node : parse_cpu_list(*online, (node_dir / "online").string())) {
      const auto f = node_dir / ("node" + std::to_string(node)) / "cpulist";
      auto s = read_text(f);
      t.numa_nodes[node] = s ? parse_cpu_list(*s, f.string()) : std::vector<int>{};
    }
  } else {
    t.notes.push_back("no NUMA information: one node assumed");
    t.numa_nodes[0] = t.online_cpus;
  }
  return t;
}

bool pin_current_thread(int cpu) {
  return set_thread_cpus({cpu});
}

std::vector<int> choose_cpus(const Topology& topo, int count, bool& siblings_used) {
  siblings_used = false;
  std::vector<int> out = topo.one_cpu_per_core();
  if (static_cast<int>(out.size()) >= count) {
    out.resize(static_cast<std::size_t>(count));
    return out;
  }
  for (int cpu : topo.online_cpus) {
    if (static_cast<int>(out.size()) >= count) break;
    if (std::find(out.begin(), out.end(), cpu) == out.end()) {
      out.push_back(cpu);
      siblings_used = true;
    }
  }
  // More threads than cpus: wrap around (oversubscribed; reported by the caller).
  for (std::size_t i = 0; static_cast<int>(out.size()) < count && !topo.online_cpus.empty(); ++i)
    out.push_back(out[i]);
  for (std::size_t i = 0; i < out.size(); ++i)
    for (std::size_t j = i + 1; j < out.size(); ++j)
      if (topo.are_siblings(out[i], out[j])) siblings_used = true;
  return out;
}

}  // namespace tokenscope::probe
