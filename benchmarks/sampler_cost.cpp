// CPU cost per read of the observe module's samplers on this machine (not a
// test: nothing is asserted). For each collector: READS reads, ROUNDS times;
// the CPU time per read is the collector's own count (cpu_ns_total() /
// reads(): CLOCK_THREAD_CPUTIME_ID around collect()), and beside it the
// floor: the same files opened and read with no parsing. Prints one line per
// collector and round:
//   collector ROUND cpu_ns_per_read wall_ns_per_read samples_per_read
// benchmarks/sampler_cost.sh runs it beside the psutil peer and prints the
// table in docs/performance.md ("Sampler costs").
//
//   sampler_cost [--reads N] [--rounds R] [--pid PID] [--nvml PATH] [--cgroup-root DIR] [--cgroup-pid PID]
// --pid: the process read (default: this one). --nvml: an NVML library (the
// test build's fake, libtokenscope_fake_nvml.so, where there is no GPU).
// --cgroup-root: a root whose /proc/PID/cgroup and /sys/fs/cgroup to read
// (default "/"; a host without cgroup v2 prints "unavailable"), of the
// process --cgroup-pid (default: --pid).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "observe/gpu_collector.h"
#include "observe/measured_collector.h"
#include "observe/system_collectors.h"

namespace {
using namespace tokenscope;
using namespace tokenscope::observe;

struct Options {
  int reads = 2000;
  int rounds = 5;
  int pid = static_cast<int>(::getpid());
  std::string nvml;
  std::string cgroup_root = "/";
  int cgroup_pid = 0;  // 0: --pid
};

std::int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One round of reads of a fresh collector; false when it cannot work here.
bool round_of(const char* name, int round, int reads, MeasuredCollector& c) {
  SteadyClock clock;
  std::size_t samples = 0;
  const std::int64_t w0 = wall_ns();
  for (int i = 0; i < reads; ++i) {
    const Observation o = c.collect(clock);
    if (!o.unavailable.empty()) {
      std::printf("%s unavailable: %s\n", name, o.unavailable.c_str());
      return false;
    }
    if (!o.error.empty()) {
      std::printf("%s error: %s\n", name, o.error.c_str());
      return false;
    }
    samples += o.canonical.size() + o.raw.size();
  }
  const std::int64_t wall = wall_ns() - w0;
  std::printf("%s %d %.0f %.0f %.1f\n", name, round, static_cast<double>(c.cpu_ns_total()) / c.reads(),
              static_cast<double>(wall) / reads, static_cast<double>(samples) / reads);
  return true;
}

// The floor: the files alone, opened and read whole, no parsing.
void floor_round(const char* name, int round, int reads, const std::vector<std::string>& files) {
  std::string buffer;
  const std::int64_t c0 = thread_cpu_ns(), w0 = wall_ns();
  for (int i = 0; i < reads; ++i)
    for (const std::string& f : files) read_small_file(f, buffer);
  std::printf("%s %d %.0f %.0f 0\n", name, round, static_cast<double>(thread_cpu_ns() - c0) / reads,
              static_cast<double>(wall_ns() - w0) / reads);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--reads")
      opt.reads = std::atoi(argv[i + 1]);
    else if (a == "--rounds")
      opt.rounds = std::atoi(argv[i + 1]);
    else if (a == "--pid")
      opt.pid = std::atoi(argv[i + 1]);
    else if (a == "--nvml")
      opt.nvml = argv[i + 1];
    else if (a == "--cgroup-root")
      opt.cgroup_root = argv[i + 1];
    else if (a == "--cgroup-pid")
      opt.cgroup_pid = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--reads N] [--rounds R] [--pid PID] [--nvml PATH] [--cgroup-root DIR] "
                   "[--cgroup-pid PID]\n",
                   argv[0]);
      return 2;
    }
  }
  const std::string pid = std::to_string(opt.pid);
  const std::vector<std::string> host_files = {"/proc/stat",         "/proc/meminfo",
                                               "/proc/pressure/cpu", "/proc/pressure/memory",
                                               "/proc/pressure/io",  "/proc/net/dev"};
  const std::vector<std::string> process_files = {"/proc/" + pid + "/stat", "/proc/" + pid + "/status"};
  bool cgroup = true, gpu = !opt.nvml.empty();
  for (int r = 1; r <= opt.rounds; ++r) {
    HostCollector host;
    round_of("host", r, opt.reads, host);
    floor_round("host_files_only", r, opt.reads, host_files);
    ProcessCollector process(opt.pid);
    round_of("process", r, opt.reads, process);
    floor_round("process_files_only", r, opt.reads, process_files);
    if (cgroup) {
      CgroupCollector c({.directory = {}, .pid = opt.cgroup_pid ? opt.cgroup_pid : opt.pid}, opt.cgroup_root);
      cgroup = round_of("cgroup", r, opt.reads, c);
    }
    if (gpu) {
      GpuCollector g(opt.nvml);
      gpu = round_of("gpu", r, opt.reads, g);
    }
  }
  return 0;
}
