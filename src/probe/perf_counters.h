// Hardware counters through perf_event_open, as an extra beside the timing
// probes. On VMs where the hypervisor hides the PMU (these machines) opening
// fails and the group reports itself unsupported with the reason; callers
// print that and carry on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tokenscope::probe {

struct CounterReading {
  std::string name;
  std::uint64_t value = 0;
};

// Counts cycles, instructions, cache references and cache misses of the
// calling process (all its threads, including ones created after start()).
class PerfCounters {
 public:
  PerfCounters();
  ~PerfCounters();
  PerfCounters(const PerfCounters&) = delete;
  PerfCounters& operator=(const PerfCounters&) = delete;

  bool supported() const { return !fds_.empty(); }
  const std::string& unsupported_reason() const { return reason_; }
  void start();
  std::vector<CounterReading> stop();

 private:
  std::vector<int> fds_;
  std::vector<std::string> names_;
  std::string reason_;
};

nlohmann::json to_json(const std::vector<CounterReading>& readings);

}  // namespace tokenscope::probe
