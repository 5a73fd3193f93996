// Host, process and cgroup v2 collectors: /proc and /sys/fs/cgroup read on
// every collect(), parsed with proc_files.h, mapped to the canonical series
// (canonical.h) with everything read also kept raw under its own name.
// docs/observe.md ("GPU, host, process and cgroup collectors") lists every
// series, file and unit, and what happens when a file is missing.
//
// Every path is under `root` ("/" by default): tests build a fake /proc and
// /sys/fs/cgroup in a temporary directory. Not thread-safe: one thread
// collects (the Observer's); cost and notes may be read from any thread
// (MeasuredCollector).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "observe/measured_collector.h"
#include "observe/proc_files.h"

namespace tokenscope::observe {

// Reads the whole of a small file (a /proc or cgroup file: their size is
// not known before reading) into `out`. Returns 0, or the errno of the
// failure (EFBIG past max_bytes).
int read_small_file(const std::string& path, std::string& out, std::size_t max_bytes = std::size_t{4} << 20);

// Source "host": /proc/stat, /proc/meminfo, /proc/pressure/{cpu,memory,io},
// /proc/net/dev. The CPU fractions come from the difference between two
// reads: the first read has the raw tick counters only.
class HostCollector final : public MeasuredCollector {
 public:
  explicit HostCollector(std::string root = "/");
  std::string source() const override { return "host"; }

 protected:
  Observation read(const Clock& clock) override;

 private:
  std::string root_;
  std::string buffer_;
  std::optional<CpuTimes> previous_cpu_;
};

// Source "process": /proc/PID/stat and /proc/PID/status of one process (the
// server's). A process that exited (or whose PID now names another process)
// gives an error Observation "process PID exited" on every later read.
class ProcessCollector final : public MeasuredCollector {
 public:
  explicit ProcessCollector(int pid, std::string root = "/");
  std::string source() const override { return "process"; }

 protected:
  Observation read(const Clock& clock) override;

 private:
  int pid_;
  std::string root_;
  std::string buffer_;
  long ticks_per_second_;
  std::optional<std::uint64_t> start_ticks_;  // of the first read: a different one means a reused PID
};

struct CgroupTarget {
  // The cgroup directory as seen on the host (e.g.
  // "/sys/fs/cgroup/system.slice/vllm.service"); when empty, the cgroup v2
  // of process `pid` from /proc/PID/cgroup ("0::/PATH" is
  // /sys/fs/cgroup/PATH).
  std::string directory;
  int pid = 0;
};

// Source "cgroup": cpu.stat, cpu.pressure, memory.current, memory.events,
// memory.pressure, io.stat and io.pressure of one cgroup v2. Files that are
// missing (their controller is not enabled) are left out and noted once;
// the cgroup directory itself going away is an error. A host without cgroup
// v2 at /sys/fs/cgroup gives `unavailable` with the reason.
class CgroupCollector final : public MeasuredCollector {
 public:
  explicit CgroupCollector(CgroupTarget target, std::string root = "/");
  std::string source() const override { return "cgroup"; }
  // The cgroup directory read (under root), once found; empty before.
  const std::string& directory() const { return directory_; }
  // The quotas in force when the directory was found (cgroup_limits), null
  // before; thread-safe.
  nlohmann::json limits() const;

 protected:
  Observation read(const Clock& clock) override;

 private:
  // Finds the directory; on failure fills o.error or o.unavailable.
  bool resolve(Observation& o);
  // Reads one file of the cgroup into buffer_: true when read; false when
  // missing (noted) or failed (o.error set).
  bool read_file(const char* name, Observation& o);

  CgroupTarget target_;
  std::string root_;
  std::string directory_;
  std::string buffer_;
  mutable std::mutex limits_mutex_;
  nlohmann::json limits_;
};

// The quotas of a cgroup v2 directory, as run.json records them (docs/
// observe.md "Quotas in force"): cpu.max as {quota_us, period_us, cpus}
// (quota_us and cpus null: no limit), cpu.weight, cpuset.cpus.effective,
// cpuset.mems.effective, memory.max / high / low / min / swap.max in bytes
// (null: "max", no limit), pids.max, io.max lines, the enabled controllers
// (cgroup.controllers); "missing": the files that are not there (their
// controller is not enabled for the cgroup), each named. Values that do not
// parse are kept as their text under "unparsed".
nlohmann::json cgroup_limits(const std::string& directory);

}  // namespace tokenscope::observe
