// Parsers of the /proc and cgroup v2 files the host, process and cgroup
// collectors read (system_collectors.h), one function per file format, each
// on the file's whole text. Formats as documented in the Linux kernel:
// proc(5) and Documentation/filesystems/proc.rst (/proc/stat, /proc/meminfo,
// /proc/net/dev, /proc/PID/stat, /proc/PID/status, /proc/PID/cgroup),
// Documentation/accounting/psi.rst (pressure files) and
// Documentation/admin-guide/cgroup-v2.rst ("Interface Files": flat-keyed,
// nested-keyed and single-value files; cpu.stat, memory.events, io.stat).
//
// The text is outside input: a line that is not what the format says throws
// InputError naming the file, the 1-based line, the field and what was
// expected (the offending text quoted with quote_input); nothing else is
// thrown. Fields a newer kernel adds are skipped, fields an older kernel
// lacks are absent (std::optional or left out of the list), never an error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tokenscope::observe {

// --- /proc/stat: the aggregate "cpu" line (USER_HZ ticks) and a few counters.
struct CpuTimes {
  // Fields a kernel does not print (steal before 2.6.11, guest before
  // 2.6.24, guest_nice before 2.6.33) stay 0.
  std::uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0,
                guest = 0, guest_nice = 0;
  // Every tick the CPUs spent: guest and guest_nice are already counted in
  // user and nice (proc(5)), so they are not added again.
  std::uint64_t total() const { return user + nice + system + idle + iowait + irq + softirq + steal; }
};
struct ProcStat {
  CpuTimes cpu;
  std::optional<std::uint64_t> ctxt, processes, procs_running, procs_blocked;
};
ProcStat parse_proc_stat(std::string_view text, const std::string& file);

// --- /proc/meminfo: "Name:   123 kB" (kB is 1024 bytes) or "Name:  123" (a count).
struct MeminfoEntry {
  std::string name;
  std::uint64_t value = 0;  // bytes where the line has a "kB" unit, else the number as written
  bool bytes = false;       // whether the line had a unit (value converted to bytes)
};
std::vector<MeminfoEntry> parse_meminfo(std::string_view text, const std::string& file);

// --- /proc/pressure/{cpu,memory,io} and the cgroup's *.pressure files:
// "some avg10=0.12 avg60=0.05 avg300=0.01 total=12345" and the same for
// "full". The averages are percentages of wall time (0..100); total is
// microseconds of stall time since boot (or cgroup creation).
struct PressureLine {
  double avg10 = 0, avg60 = 0, avg300 = 0;
  std::uint64_t total_us = 0;
};
struct Pressure {
  std::optional<PressureLine> some, full;  // "full" is absent for the cpu file before Linux 5.13
};
Pressure parse_pressure(std::string_view text, const std::string& file);

// --- /proc/net/dev: two header lines, then "NAME: 16 counters" per interface.
struct NetDevice {
  std::string name;
  std::uint64_t rx_bytes = 0, rx_packets = 0, rx_errs = 0, rx_drop = 0;
  std::uint64_t tx_bytes = 0, tx_packets = 0, tx_errs = 0, tx_drop = 0;
};
std::vector<NetDevice> parse_net_dev(std::string_view text, const std::string& file);

// --- /proc/PID/stat: one line, "PID (COMM) STATE PPID ..."; COMM may hold
// spaces and parentheses, so the fields start after the last ')'. Field
// numbers below are proc(5)'s.
struct PidStat {
  char state = '?';               // (3) R, S, D, Z, X, ...
  std::uint64_t utime_ticks = 0;  // (14) user CPU, clock ticks (sysconf(_SC_CLK_TCK))
  std::uint64_t stime_ticks = 0;  // (15) system CPU, clock ticks
  std::uint64_t num_threads = 0;  // (20)
  std::uint64_t start_ticks = 0;  // (22) start time after boot, clock ticks: tells a reused PID apart
  std::uint64_t rss_pages = 0;    // (24) resident set size in pages
};
PidStat parse_pid_stat(std::string_view text, const std::string& file);

// --- /proc/PID/status: "Name:\tvalue" lines; only these are read (a kernel
// thread has no Vm* lines: they stay empty).
struct PidStatus {
  std::optional<char> state;                   // State: "S (sleeping)"
  std::optional<std::uint64_t> vm_rss_bytes;   // VmRSS (kB)
  std::optional<std::uint64_t> vm_hwm_bytes;   // VmHWM (kB): peak RSS
  std::optional<std::uint64_t> vm_size_bytes;  // VmSize (kB)
  std::optional<std::uint64_t> threads;        // Threads
  std::optional<std::uint64_t> voluntary_ctxt_switches;
  std::optional<std::uint64_t> nonvoluntary_ctxt_switches;
};
PidStatus parse_pid_status(std::string_view text, const std::string& file);

// --- /proc/PID/cgroup: "HIERARCHY-ID:CONTROLLERS:PATH" lines. The cgroup v2
// (unified) line is "0::PATH".
struct PidCgroup {
  std::optional<std::string> unified_path;  // PATH of the "0::" line
  bool has_v1 = false;                      // any line with a non-zero hierarchy id
};
PidCgroup parse_pid_cgroup(std::string_view text, const std::string& file);

// --- cgroup v2 flat-keyed files (cpu.stat, memory.events, memory.stat):
// "KEY VALUE" per line, in the order written.
std::vector<std::pair<std::string, std::uint64_t>> parse_flat_keyed(std::string_view text,
                                                                    const std::string& file);

// --- cgroup v2 single-value files (memory.current): one unsigned number.
std::uint64_t parse_single_value(std::string_view text, const std::string& file);

// --- cgroup v2 io.stat (nested-keyed): "MAJ:MIN rbytes=1 wbytes=2 rios=3
// wios=4 dbytes=0 dios=0" per device.
struct IoStatDevice {
  std::string device;  // "MAJ:MIN"
  std::vector<std::pair<std::string, std::uint64_t>> values;
};
std::vector<IoStatDevice> parse_io_stat(std::string_view text, const std::string& file);

}  // namespace tokenscope::observe
