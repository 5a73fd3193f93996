#include "probe/perf_counters.h"

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace tokenscope::probe {

namespace {
int open_counter(std::uint64_t config) {
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_HARDWARE;
  attr.config = config;
  attr.disabled = 1;
  attr.inherit = 1;  // threads created later count too
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  return static_cast<int>(syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
}
}  // namespace

PerfCounters::PerfCounters() {
  const struct {
    const char* name;
    std::uint64_t config;
  } events[] = {{"cycles", PERF_COUNT_HW_CPU_CYCLES},
                {"instructions", PERF_COUNT_HW_INSTRUCTIONS},
                {"cache_references", PERF_COUNT_HW_CACHE_REFERENCES},
                {"cache_misses", PERF_COUNT_HW_CACHE_MISSES}};
  for (const auto& e : events) {
    const int fd = open_counter(e.config);
    if (fd < 0) {
      reason_ = std::string("perf_event_open(") + e.name + "): " + std::strerror(errno);
      for (int f : fds_) close(f);
      fds_.clear();
      names_.clear();
      return;
    }
    fds_.push_back(fd);
    names_.push_back(e.name);
  }
}

PerfCounters::~PerfCounters() {
  for (int f : fds_) close(f);
}

void PerfCounters::start() {
  for (int f : fds_) {
    ioctl(f, PERF_EVENT_IOC_RESET, 0);
    ioctl(f, PERF_EVENT_IOC_ENABLE, 0);
  }
}

std::vector<CounterReading> PerfCounters::stop() {
  std::vector<CounterReading> out;
  for (std::size_t i = 0; i < fds_.size(); ++i) {
    ioctl(fds_[i], PERF_EVENT_IOC_DISABLE, 0);
    std::uint64_t v = 0;
    if (read(fds_[i], &v, sizeof v) == static_cast<ssize_t>(sizeof v)) out.push_back({names_[i], v});
  }
  return out;
}

nlohmann::json to_json(const std::vector<CounterReading>& readings) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& r : readings) j[r.name] = r.value;
  return j;
}

}  // namespace tokenscope::probe
