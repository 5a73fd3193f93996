#include "observe/system_collectors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "observe/canonical.h"
#include "observe/collector_test_util.h"

namespace tokenscope::observe {
namespace {

namespace fs = std::filesystem;

// A fake root directory: tests write /proc and /sys/fs/cgroup files under it.
class FakeRoot {
 public:
  FakeRoot() {
    std::string pattern = (fs::temp_directory_path() / "tokenscope-root-XXXXXX").string();
    dir_ = ::mkdtemp(pattern.data());
  }
  ~FakeRoot() {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }
  const std::string& path() const { return dir_; }
  void write(const std::string& rel, const std::string& text) const {
    const fs::path p = fs::path(dir_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  }
  void remove(const std::string& rel) const { fs::remove_all(fs::path(dir_) / rel); }
  std::string full(const std::string& rel) const { return (fs::path(dir_) / rel).string(); }

 private:
  std::string dir_;
};

using testing::contains;
using testing::value;

// Every canonical series a collector emits is one kCanonicalSeries defines.
void expect_canonical_names(const Observation& o) {
  for (const Sample& s : o.canonical) {
    const bool known = std::any_of(std::begin(kCanonicalSeries), std::end(kCanonicalSeries),
                                   [&](const CanonicalDefinition& d) { return d.name == s.name; });
    EXPECT_TRUE(known) << s.name;
  }
}

const char* kMeminfo =
    "MemTotal:       16000000 kB\n"
    "MemFree:         1000000 kB\n"
    "MemAvailable:    8000000 kB\n"
    "HugePages_Total:       0\n";
const char* kNetDev =
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls "
    "carrier compressed\n"
    "    lo: 9999 99 0 0 0 0 0 0 9999 99 0 0 0 0 0 0\n"
    "  eth0: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n"
    "  eth1:  300  3 0 0 0 0 0 0  400  4 0 0 0 0 0 0\n";

void write_host(const FakeRoot& r, const std::string& cpu_line) {
  r.write(
      "proc/stat",
      cpu_line + "\ncpu0 1 1 1 1 1 1 1 1 0 0\nctxt 500\nprocesses 40\nprocs_running 2\nprocs_blocked 1\n");
  r.write("proc/meminfo", kMeminfo);
  r.write("proc/pressure/cpu",
          "some avg10=12.50 avg60=1.00 avg300=0.50 total=1000\n"
          "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  r.write("proc/pressure/memory",
          "some avg10=3.00 avg60=0.00 avg300=0.00 total=10\n"
          "full avg10=1.00 avg60=0.00 avg300=0.00 total=5\n");
  r.write("proc/pressure/io",
          "some avg10=50.00 avg60=0.00 avg300=0.00 total=20\n"
          "full avg10=25.00 avg60=0.00 avg300=0.00 total=15\n");
  r.write("proc/net/dev", kNetDev);
}

TEST(HostCollector, FirstReadHasCountersThenTheNextHasCpuFractions) {
  FakeRoot r;
  write_host(r, "cpu 100 0 100 700 100 0 0 0 0 0");
  HostCollector c(r.path());
  ManualClock clock(1000);
  const Observation first = c.collect(clock);
  ASSERT_EQ(first.error, "");
  EXPECT_EQ(first.source, "host");
  EXPECT_EQ(first.t_ns, 1000);
  EXPECT_FALSE(value(first.canonical, "host_cpu_utilization"));
  EXPECT_EQ(value(first.raw, "stat_cpu_user_ticks"), 100);
  EXPECT_EQ(value(first.raw, "stat_cpu_iowait_ticks"), 100);
  EXPECT_EQ(value(first.raw, "stat_ctxt"), 500);
  EXPECT_EQ(value(first.raw, "stat_procs_blocked"), 1);
  EXPECT_EQ(value(first.canonical, "host_memory_total_bytes"), 16000000.0 * 1024);
  EXPECT_EQ(value(first.canonical, "host_memory_available_bytes"), 8000000.0 * 1024);
  EXPECT_EQ(value(first.raw, "meminfo_MemAvailable_bytes"), 8000000.0 * 1024);
  EXPECT_EQ(value(first.raw, "meminfo_HugePages_Total"), 0);
  EXPECT_DOUBLE_EQ(*value(first.canonical, "host_cpu_pressure_some"), 0.125);
  EXPECT_DOUBLE_EQ(*value(first.canonical, "host_memory_pressure_some"), 0.03);
  EXPECT_DOUBLE_EQ(*value(first.canonical, "host_io_pressure_some"), 0.5);
  EXPECT_EQ(value(first.raw, "pressure_io_full_avg10"), 25.0);
  EXPECT_EQ(value(first.raw, "pressure_cpu_some_total_us"), 1000);
  // Every interface but lo.
  EXPECT_EQ(value(first.canonical, "host_net_rx_bytes"), 1300);
  EXPECT_EQ(value(first.canonical, "host_net_tx_bytes"), 2400);
  EXPECT_EQ(value(first.raw, "net_dev_rx_bytes", {{"interface", "lo"}}), 9999);
  EXPECT_EQ(value(first.raw, "net_dev_tx_packets", {{"interface", "eth1"}}), 4);
  expect_canonical_names(first);

  // +200 user, +100 system, +500 idle, +100 iowait, +100 steal: 1000 ticks,
  // 600 of them idle or waiting.
  write_host(r, "cpu 300 0 200 1200 200 0 0 100 0 0");
  clock.advance(5);
  const Observation second = c.collect(clock);
  ASSERT_EQ(second.error, "");
  EXPECT_DOUBLE_EQ(*value(second.canonical, "host_cpu_utilization"), 0.4);
  EXPECT_DOUBLE_EQ(*value(second.canonical, "host_cpu_iowait"), 0.1);
  EXPECT_DOUBLE_EQ(*value(second.canonical, "host_cpu_steal"), 0.1);
  EXPECT_EQ(second.t_ns, 1005);
  EXPECT_EQ(second.rtt_ns, 0);  // the manual clock did not move during the read
  expect_canonical_names(second);
  EXPECT_EQ(c.reads(), 2);
  EXPECT_TRUE(c.notes().empty());
}

TEST(HostCollector, NoTickMeansNoFractionAndAResetRestartsTheBaseline) {
  FakeRoot r;
  write_host(r, "cpu 100 0 100 700 100 0 0 0 0 0");
  HostCollector c(r.path());
  ManualClock clock;
  c.collect(clock);
  // The same counters: no interval to measure.
  EXPECT_FALSE(value(c.collect(clock).canonical, "host_cpu_utilization"));
  // Measured from the first read still.
  write_host(r, "cpu 200 0 100 800 100 0 0 0 0 0");
  EXPECT_DOUBLE_EQ(*value(c.collect(clock).canonical, "host_cpu_utilization"), 0.5);
  // Counters that went backwards: no fraction, a new baseline.
  write_host(r, "cpu 10 0 10 70 10 0 0 0 0 0");
  EXPECT_FALSE(value(c.collect(clock).canonical, "host_cpu_utilization"));
  write_host(r, "cpu 10 0 10 170 10 0 0 0 0 0");
  EXPECT_DOUBLE_EQ(*value(c.collect(clock).canonical, "host_cpu_utilization"), 0.0);
}

TEST(HostCollector, MissingPressureAndNetFilesAreLeftOutAndNotedOnce) {
  FakeRoot r;
  write_host(r, "cpu 100 0 100 700 100 0 0 0 0 0");
  r.remove("proc/pressure");
  r.remove("proc/net");
  HostCollector c(r.path());
  ManualClock clock;
  for (int i = 0; i < 3; ++i) {
    const Observation o = c.collect(clock);
    ASSERT_EQ(o.error, "");
    EXPECT_FALSE(value(o.canonical, "host_cpu_pressure_some"));
    EXPECT_FALSE(value(o.canonical, "host_net_rx_bytes"));
    EXPECT_TRUE(value(o.canonical, "host_memory_total_bytes"));
  }
  const auto notes = c.notes();
  ASSERT_EQ(notes.size(), 4u);  // cpu, memory, io pressure and net/dev: once each
  EXPECT_TRUE(contains(notes[0], r.full("proc/pressure/cpu") + " is missing")) << notes[0];
  EXPECT_TRUE(contains(notes[3], "proc/net/dev")) << notes[3];
}

TEST(HostCollector, MissingUnreadableAndGarbageFilesAreErrorsNamingTheFile) {
  FakeRoot r;
  write_host(r, "cpu 100 0 100 700 100 0 0 0 0 0");
  HostCollector c(r.path());
  ManualClock clock;
  r.remove("proc/stat");
  Observation o = c.collect(clock);
  EXPECT_EQ(o.error, r.full("proc/stat") + ": No such file or directory");
  EXPECT_TRUE(o.canonical.empty() && o.raw.empty());

  // A directory where the file should be cannot be read.
  r.write("proc/stat/x", "");
  o = c.collect(clock);
  EXPECT_EQ(o.error, r.full("proc/stat") + ": Is a directory");
  r.remove("proc/stat");

  write_host(r, "cpu 100 0 100 700 100 0 0 0 0 0");
  r.write("proc/meminfo", "MemTotal: 1 kB\nMemAvailable: ??? kB\n");
  o = c.collect(clock);
  EXPECT_TRUE(contains(o.error, r.full("proc/meminfo") + ":2: field 'MemAvailable'")) << o.error;
  EXPECT_TRUE(o.raw.empty());

  write_host(r, "cpu 100 0 100 700 100 0 0 0 0 0");
  r.write("proc/pressure/io", "some avg10=1 avg60=1 avg300=1\n");
  o = c.collect(clock);
  EXPECT_TRUE(contains(o.error, r.full("proc/pressure/io") + ":1")) << o.error;

  if (::geteuid() != 0) {  // root reads whatever the mode bits say
    write_host(r, "cpu 100 0 100 700 100 0 0 0 0 0");
    ::chmod(r.full("proc/meminfo").c_str(), 0);
    o = c.collect(clock);
    EXPECT_EQ(o.error, r.full("proc/meminfo") + ": Permission denied");
  }
}

TEST(HostCollector, AFifoInPlaceOfAFileDoesNotHang) {
  FakeRoot r;
  write_host(r, "cpu 100 0 100 700 100 0 0 0 0 0");
  r.remove("proc/stat");
  ASSERT_EQ(::mkfifo(r.full("proc/stat").c_str(), 0600), 0);
  HostCollector c(r.path());
  ManualClock clock;
  const Observation o = c.collect(clock);  // no writer: reads as empty
  EXPECT_TRUE(contains(o.error, "no aggregate 'cpu' line")) << o.error;
}

TEST(HostCollector, ReadsThisMachinesProc) {
  HostCollector c;
  SteadyClock clock;
  Observation o = c.collect(clock);
  ASSERT_EQ(o.error, "");
  const double total = value(o.canonical, "host_memory_total_bytes").value_or(-1);
  EXPECT_GT(total, 0);
  if (const auto avail = value(o.canonical, "host_memory_available_bytes")) {  // Linux >= 3.14
    EXPECT_GE(*avail, 0);
    EXPECT_LE(*avail, total);
  }
  EXPECT_GT(value(o.raw, "stat_cpu_idle_ticks").value_or(0), 0);
  for (const char* p : {"host_cpu_pressure_some", "host_memory_pressure_some", "host_io_pressure_some"})
    if (const auto v = value(o.canonical, p)) {
      EXPECT_GE(*v, 0) << p;
      EXPECT_LE(*v, 1) << p;
    }
  // The clock ticks USER_HZ times a second whatever the load: spin until
  // the next read sees at least one tick (bounded: 10 s of reads).
  std::optional<double> busy;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!busy && std::chrono::steady_clock::now() < deadline) {
    o = c.collect(clock);
    ASSERT_EQ(o.error, "");
    busy = value(o.canonical, "host_cpu_utilization");
  }
  ASSERT_TRUE(busy);
  EXPECT_GE(*busy, 0);
  EXPECT_LE(*busy, 1);
  const double iowait = value(o.canonical, "host_cpu_iowait").value_or(-1);
  EXPECT_GE(iowait, 0);
  EXPECT_LE(iowait, 1);
  expect_canonical_names(o);
  EXPECT_GE(c.reads(), 2);
  EXPECT_GT(c.cpu_ns_total(), 0);
}

// --- process

const char* kStatus =
    "Name:\tvllm\nState:\tS (sleeping)\nVmSize:\t  900000 kB\nVmHWM:\t    4096 kB\nVmRSS:\t    2048 kB\n"
    "Threads:\t7\nvoluntary_ctxt_switches:\t11\nnonvoluntary_ctxt_switches:\t3\n";

std::string pid_stat(char state, int utime, int stime, int start) {
  return "4242 (vllm serve) " + std::string(1, state) + " 1 4242 4242 0 -1 4194560 100 0 0 0 " +
         std::to_string(utime) + " " + std::to_string(stime) + " 0 0 20 0 7 0 " + std::to_string(start) +
         " 1000000 512 18446744073709551615 1 1 0\n";
}

TEST(ProcessCollector, ReadsStatAndStatus) {
  FakeRoot r;
  r.write("proc/4242/stat", pid_stat('S', 250, 50, 777));
  r.write("proc/4242/status", kStatus);
  ProcessCollector c(4242, r.path());
  ManualClock clock;
  const Observation o = c.collect(clock);
  ASSERT_EQ(o.error, "");
  EXPECT_EQ(o.source, "process");
  const Labels pid{{"pid", "4242"}};
  const double tck = static_cast<double>(::sysconf(_SC_CLK_TCK));
  EXPECT_DOUBLE_EQ(*value(o.canonical, "process_cpu_seconds", pid), 300 / tck);
  EXPECT_EQ(value(o.canonical, "process_rss_bytes", pid), 2048 * 1024);
  EXPECT_EQ(value(o.canonical, "process_threads", pid), 7);
  EXPECT_EQ(value(o.canonical, "process_voluntary_ctx_switches", pid), 11);
  EXPECT_EQ(value(o.canonical, "process_nonvoluntary_ctx_switches", pid), 3);
  EXPECT_EQ(value(o.raw, "stat_utime_ticks", pid), 250);
  EXPECT_EQ(value(o.raw, "stat_stime_ticks", pid), 50);
  EXPECT_EQ(value(o.raw, "status_VmHWM_bytes", pid), 4096 * 1024);
  EXPECT_EQ(value(o.raw, "status_VmRSS_bytes", pid), 2048 * 1024);
  expect_canonical_names(o);
}

TEST(ProcessCollector, AProcessThatExitsIsAnErrorNotACrash) {
  FakeRoot r;
  r.write("proc/4242/stat", pid_stat('S', 1, 1, 777));
  r.write("proc/4242/status", kStatus);
  ProcessCollector c(4242, r.path());
  ManualClock clock;
  ASSERT_EQ(c.collect(clock).error, "");
  r.remove("proc/4242");
  Observation o = c.collect(clock);
  EXPECT_EQ(o.error, "process 4242 exited");
  EXPECT_TRUE(o.canonical.empty());
  // Gone between the two files.
  r.write("proc/4242/stat", pid_stat('S', 1, 1, 777));
  EXPECT_EQ(c.collect(clock).error, "process 4242 exited");
  // A zombie has exited too.
  r.write("proc/4242/status", kStatus);
  r.write("proc/4242/stat", pid_stat('Z', 1, 1, 777));
  EXPECT_EQ(c.collect(clock).error, "process 4242 exited (a zombie, not yet reaped)");
  // The PID reused by a process started later.
  r.write("proc/4242/stat", pid_stat('S', 1, 1, 999));
  EXPECT_EQ(c.collect(clock).error, "process 4242 exited (the PID now names another process)");
}

TEST(ProcessCollector, GarbageIsAnErrorNamingTheFileAndLine) {
  FakeRoot r;
  r.write("proc/7/stat", pid_stat('S', 1, 1, 1));
  r.write("proc/7/status", "Name:\tx\nThreads:\tseven\n");
  ProcessCollector c(7, r.path());
  ManualClock clock;
  const Observation o = c.collect(clock);
  EXPECT_TRUE(contains(o.error, r.full("proc/7/status") + ":2: field 'Threads'")) << o.error;
  r.write("proc/7/stat", "7 (x\n");
  EXPECT_TRUE(contains(c.collect(clock).error, r.full("proc/7/stat") + ":1")) << c.collect(clock).error;
}

TEST(ProcessCollector, ReadsThisProcessAndSeesARealChildExit) {
  ProcessCollector self(::getpid());
  SteadyClock clock;
  const Observation o = self.collect(clock);
  ASSERT_EQ(o.error, "");
  const Labels pid{{"pid", std::to_string(::getpid())}};
  EXPECT_GE(value(o.canonical, "process_cpu_seconds", pid).value_or(-1), 0);
  EXPECT_GT(value(o.canonical, "process_rss_bytes", pid).value_or(0), 0);
  EXPECT_GE(value(o.canonical, "process_threads", pid).value_or(0), 1);
  EXPECT_GE(value(o.canonical, "process_voluntary_ctx_switches", pid).value_or(-1), 0);

  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);  // reaped: /proc/CHILD is gone
  ProcessCollector gone(child);
  EXPECT_EQ(gone.collect(clock).error, "process " + std::to_string(child) + " exited");
}

// --- cgroup

void write_cgroup(const FakeRoot& r, const std::string& dir) {
  r.write("sys/fs/cgroup/cgroup.controllers", "cpu io memory pids\n");
  r.write(dir + "/cgroup.controllers", "cpu io memory\n");
  r.write(dir + "/cpu.stat",
          "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 100\nnr_throttled 7\n"
          "throttled_usec 350000\n");
  r.write(dir + "/cpu.pressure",
          "some avg10=20.00 avg60=0.00 avg300=0.00 total=5\n"
          "full avg10=10.00 avg60=0.00 avg300=0.00 total=2\n");
  r.write(dir + "/memory.current", "1073741824\n");
  r.write(dir + "/memory.events", "low 0\nhigh 12\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n");
  r.write(dir + "/memory.pressure",
          "some avg10=4.00 avg60=0.00 avg300=0.00 total=9\n"
          "full avg10=2.00 avg60=0.00 avg300=0.00 total=8\n");
  r.write(dir + "/io.stat",
          "8:0 rbytes=1000 wbytes=2000 rios=10 wios=20 dbytes=0 dios=0\n"
          "259:0 rbytes=500 wbytes=700 rios=5 wios=7 dbytes=0 dios=0\n");
  r.write(dir + "/io.pressure",
          "some avg10=1.00 avg60=0.00 avg300=0.00 total=3\n"
          "full avg10=0.50 avg60=0.00 avg300=0.00 total=1\n");
}

TEST(CgroupCollector, FindsTheCgroupOfAPidAndReadsEveryFile) {
  FakeRoot r;
  r.write("proc/31/cgroup", "0::/system.slice/vllm.service\n");
  write_cgroup(r, "sys/fs/cgroup/system.slice/vllm.service");
  CgroupCollector c({.directory = {}, .pid = 31}, r.path());
  ManualClock clock;
  const Observation o = c.collect(clock);
  ASSERT_EQ(o.error, "");
  ASSERT_EQ(o.unavailable, "");
  EXPECT_EQ(o.source, "cgroup");
  EXPECT_EQ(c.directory(), r.full("sys/fs/cgroup/system.slice/vllm.service"));
  EXPECT_DOUBLE_EQ(*value(o.canonical, "cgroup_cpu_usage_seconds"), 2.5);
  EXPECT_EQ(value(o.canonical, "cgroup_cpu_throttled_periods"), 7);
  EXPECT_DOUBLE_EQ(*value(o.canonical, "cgroup_cpu_throttled_seconds"), 0.35);
  EXPECT_DOUBLE_EQ(*value(o.canonical, "cgroup_cpu_pressure_some"), 0.2);
  EXPECT_EQ(value(o.canonical, "cgroup_memory_current_bytes"), 1073741824);
  EXPECT_EQ(value(o.canonical, "cgroup_memory_high_events"), 12);
  EXPECT_EQ(value(o.canonical, "cgroup_memory_max_events"), 3);
  EXPECT_EQ(value(o.canonical, "cgroup_memory_oom_kills"), 1);
  EXPECT_DOUBLE_EQ(*value(o.canonical, "cgroup_memory_pressure_some"), 0.04);
  EXPECT_EQ(value(o.canonical, "cgroup_io_read_bytes"), 1500);
  EXPECT_EQ(value(o.canonical, "cgroup_io_write_bytes"), 2700);
  EXPECT_EQ(value(o.raw, "cpu.stat.nr_periods"), 100);
  EXPECT_EQ(value(o.raw, "cpu.stat.nr_throttled"), 7);
  EXPECT_EQ(value(o.raw, "cpu.pressure.full.avg10"), 10.0);
  EXPECT_EQ(value(o.raw, "memory.events.low"), 0);
  EXPECT_EQ(value(o.raw, "memory.events.oom"), 1);
  EXPECT_EQ(value(o.raw, "memory.current"), 1073741824);
  EXPECT_EQ(value(o.raw, "io.stat.rios", {{"device", "8:0"}}), 10);
  EXPECT_EQ(value(o.raw, "io.stat.wbytes", {{"device", "259:0"}}), 700);
  EXPECT_EQ(value(o.raw, "io.stat.sum.rios"), 15);
  EXPECT_EQ(value(o.raw, "io.stat.sum.wios"), 27);
  EXPECT_EQ(value(o.raw, "io.pressure.some.avg10"), 1.0);
  expect_canonical_names(o);
  EXPECT_TRUE(c.notes().empty());
}

// The quotas in force, as run.json records them: limits and "max" (none),
// the controllers, files that are not there, values that do not parse.
TEST(CgroupCollector, ReadsTheQuotasInForce) {
  FakeRoot r;
  const std::string dir = "sys/fs/cgroup/system.slice/llama.scope";
  write_cgroup(r, dir);
  r.write(dir + "/cpu.max", "250000 100000\n");
  r.write(dir + "/cpu.weight", "100\n");
  r.write(dir + "/memory.max", "8589934592\n");
  r.write(dir + "/memory.high", "max\n");
  r.write(dir + "/memory.swap.max", "0\n");
  r.write(dir + "/cpuset.cpus.effective", "0-3,8\n");
  r.write(dir + "/io.max",
          "8:0 rbps=1048576 wbps=max riops=max wiops=max\n259:0 rbps=max wbps=2097152 riops=max wiops=max\n");
  r.write(dir + "/pids.max", "lots\n");
  CgroupCollector c({.directory = "/" + dir, .pid = 0}, r.path());
  EXPECT_TRUE(c.limits().is_null());  // before the first read
  ManualClock clock;
  ASSERT_EQ(c.collect(clock).error, "");
  const auto l = c.limits();
  EXPECT_EQ(l, cgroup_limits(r.full(dir)));
  EXPECT_EQ(l["controllers"], nlohmann::json::array({"cpu", "io", "memory"}));
  EXPECT_EQ(l["cpu.max"]["quota_us"], 250000);
  EXPECT_EQ(l["cpu.max"]["period_us"], 100000);
  EXPECT_DOUBLE_EQ(l["cpu.max"]["cpus"].get<double>(), 2.5);
  EXPECT_EQ(l["cpu.weight"], 100);
  EXPECT_EQ(l["memory.max"], 8589934592ULL);
  EXPECT_TRUE(l["memory.high"].is_null());  // max: no limit
  EXPECT_EQ(l["memory.swap.max"], 0);
  EXPECT_EQ(l["cpuset.cpus.effective"], "0-3,8");
  ASSERT_EQ(l["io.max"].size(), 2u);
  EXPECT_EQ(l["io.max"][1], "259:0 rbps=max wbps=2097152 riops=max wiops=max");
  EXPECT_EQ(l["unparsed"]["pids.max"], "lots");
  for (const char* m : {"memory.low", "memory.min", "cpuset.mems.effective"})
    EXPECT_NE(std::find(l["missing"].begin(), l["missing"].end(), m), l["missing"].end()) << m;
  EXPECT_FALSE(l.contains("pids.max"));
  // No cpu limit: quota and cpus null, the period kept.
  r.write(dir + "/cpu.max", "max 100000\n");
  const auto none = cgroup_limits(r.full(dir));
  EXPECT_TRUE(none["cpu.max"]["quota_us"].is_null());
  EXPECT_TRUE(none["cpu.max"]["cpus"].is_null());
  EXPECT_EQ(none["cpu.max"]["period_us"], 100000);
  r.write(dir + "/cpu.max", "100000\n");
  EXPECT_EQ(cgroup_limits(r.full(dir))["unparsed"]["cpu.max"], "100000");
}

// A real cgroup v2 with a CPU and a memory quota, as a user would make one
// for a server: its limits read back as written. Where this machine cannot
// make one, the test says why (this build machine: cgroup v1 and hybrid, no
// v2 cpu or memory controller to write).
TEST(CgroupCollector, AQuotaWrittenHereIsReadBackOrTheTestSaysWhyNot) {
  const std::string root = "/sys/fs/cgroup";
  std::string text;
  if (read_small_file(root + "/cgroup.controllers", text) != 0)
    GTEST_SKIP() << "cgroup v2 is not mounted at " << root
                 << " (a cgroup v1 or hybrid host): no v2 quota can be written here";
  if (!contains(text, "cpu") || !contains(text, "memory"))
    GTEST_SKIP() << "the cgroup v2 root offers no cpu and memory controllers (" << text << ")";
  const std::string dir = root + "/tokenscope-test-" + std::to_string(::getpid());
  if (::mkdir(dir.c_str(), 0755) != 0)
    GTEST_SKIP() << "cannot create " << dir << ": " << std::strerror(errno)
                 << " (not root, or a read-only cgroupfs)";
  const auto put = [&](const std::string& file, const std::string& value) {
    const int fd = ::open((dir + "/" + file).c_str(), O_WRONLY);
    const bool ok = fd >= 0 && ::write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
    if (fd >= 0) ::close(fd);
    return ok;
  };
  const bool written = put("cpu.max", "50000 100000") && put("memory.max", "1073741824");
  const auto l = cgroup_limits(dir);
  ::rmdir(dir.c_str());
  if (!written)
    GTEST_SKIP() << "the cpu and memory controllers are not enabled for children of " << root
                 << " (cgroup.subtree_control): no quota can be written";
  EXPECT_DOUBLE_EQ(l["cpu.max"]["cpus"].get<double>(), 0.5);
  EXPECT_EQ(l["memory.max"], 1073741824);
}

TEST(CgroupCollector, FilesOfControllersNotEnabledAreLeftOutAndNotedOnce) {
  FakeRoot r;
  const std::string dir = "sys/fs/cgroup/user.slice";
  r.write("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
  r.write(dir + "/cgroup.controllers", "");
  // Without the cpu controller cpu.stat has the usage lines only.
  r.write(dir + "/cpu.stat", "usage_usec 1000000\nuser_usec 600000\nsystem_usec 400000\n");
  CgroupCollector c({.directory = "/sys/fs/cgroup/user.slice/"}, r.path());
  ManualClock clock;
  for (int i = 0; i < 3; ++i) {
    const Observation o = c.collect(clock);
    ASSERT_EQ(o.error, "");
    EXPECT_DOUBLE_EQ(*value(o.canonical, "cgroup_cpu_usage_seconds"), 1.0);
    EXPECT_FALSE(value(o.canonical, "cgroup_cpu_throttled_periods"));
    EXPECT_FALSE(value(o.canonical, "cgroup_memory_current_bytes"));
    EXPECT_FALSE(value(o.canonical, "cgroup_io_read_bytes"));
  }
  const auto notes = c.notes();
  // nr_throttled, and each of the 6 missing files: once each.
  ASSERT_EQ(notes.size(), 7u);
  EXPECT_TRUE(contains(notes[0], "no nr_throttled")) << notes[0];
  EXPECT_TRUE(contains(notes[1], "cpu.pressure is missing in " + r.full("sys/fs/cgroup/user.slice")))
      << notes[1];
}

TEST(CgroupCollector, ACgroupV1HostIsUnavailableWithTheReason) {
  FakeRoot r;
  r.write("proc/31/cgroup", "4:memory:/x\n1:cpu,cpuacct:/\n");
  CgroupCollector v1({.directory = {}, .pid = 31}, r.path());
  ManualClock clock;
  Observation o = v1.collect(clock);
  EXPECT_TRUE(contains(o.unavailable, "cgroup v1 hierarchies only")) << o.unavailable;
  EXPECT_EQ(o.error, "");

  // Hybrid: a "0::" line, but /sys/fs/cgroup is the v1 tmpfs.
  r.write("proc/32/cgroup", "4:memory:/x\n0::/\n");
  r.write("sys/fs/cgroup/memory/tasks", "");
  CgroupCollector hybrid({.directory = {}, .pid = 32}, r.path());
  o = hybrid.collect(clock);
  EXPECT_TRUE(contains(o.unavailable, "cgroup v2 is not mounted at /sys/fs/cgroup")) << o.unavailable;

  CgroupCollector nowhere({.directory = "/sys/fs/cgroup/nope"}, r.path());
  EXPECT_EQ(nowhere.collect(clock).unavailable, "no cgroup directory " + r.full("sys/fs/cgroup/nope"));
}

TEST(CgroupCollector, AVanishedPidOrCgroupAndGarbageAreErrors) {
  FakeRoot r;
  ManualClock clock;
  CgroupCollector early({.directory = {}, .pid = 55}, r.path());
  EXPECT_EQ(early.collect(clock).error, "process 55 exited");

  const std::string dir = "sys/fs/cgroup/a.slice";
  r.write("proc/31/cgroup", "0::/a.slice\n");
  write_cgroup(r, dir);
  CgroupCollector c({.directory = {}, .pid = 31}, r.path());
  ASSERT_EQ(c.collect(clock).error, "");
  r.write(dir + "/io.stat", "8:0 rbytes=1\nsda rbytes=2\n");
  Observation o = c.collect(clock);
  EXPECT_TRUE(contains(o.error, r.full(dir + "/io.stat") + ":2: field 'device'")) << o.error;
  EXPECT_TRUE(o.canonical.empty() && o.raw.empty());
  r.write(dir + "/memory.current", "lots\n");
  EXPECT_TRUE(contains(c.collect(clock).error, r.full(dir + "/memory.current") + ":1"));
  r.remove(dir);
  o = c.collect(clock);
  EXPECT_EQ(o.error, "cgroup directory " + r.full(dir) + " no longer exists");
}

TEST(CgroupCollector, ReadsThisMachinesCgroupOrSaysWhyNot) {
  CgroupCollector c({.directory = {}, .pid = static_cast<int>(::getpid())});
  SteadyClock clock;
  const Observation o = c.collect(clock);
  ASSERT_EQ(o.error, "");
  if (!o.unavailable.empty()) {
    // A cgroup v1 or hybrid host (this build machine is one).
    EXPECT_TRUE(contains(o.unavailable, "cgroup v")) << o.unavailable;
    EXPECT_TRUE(c.collect(clock).unavailable == o.unavailable);
    return;
  }
  EXPECT_GE(value(o.canonical, "cgroup_cpu_usage_seconds").value_or(-1), 0);
  if (const auto mem = value(o.canonical, "cgroup_memory_current_bytes")) {
    EXPECT_GT(*mem, 0);
  }
  expect_canonical_names(o);
}

}  // namespace
}  // namespace tokenscope::observe
