#include "observe/proc_files.h"

#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
#include "observe/collector_test_util.h"

namespace tokenscope::observe {
namespace {

// The message of the InputError fn throws ("" when it throws none).
template <typename F>
std::string input_error(F fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

using testing::contains;

TEST(ProcStat, ReadsTheAggregateCpuLineAndCounters) {
  const std::string text =
      "cpu  100 2 30 4000 50 6 7 8 9 10\n"
      "cpu0 50 1 15 2000 25 3 3 4 4 5\n"
      "intr 123456 1 2 3 4 5 6 7 8 9 10 11 12\n"
      "ctxt 987654\n"
      "btime 1700000000\n"
      "processes 4242\n"
      "procs_running 3\n"
      "procs_blocked 1\n"
      "softirq 1 2 3\n";
  const ProcStat s = parse_proc_stat(text, "/proc/stat");
  EXPECT_EQ(s.cpu.user, 100u);
  EXPECT_EQ(s.cpu.nice, 2u);
  EXPECT_EQ(s.cpu.system, 30u);
  EXPECT_EQ(s.cpu.idle, 4000u);
  EXPECT_EQ(s.cpu.iowait, 50u);
  EXPECT_EQ(s.cpu.irq, 6u);
  EXPECT_EQ(s.cpu.softirq, 7u);
  EXPECT_EQ(s.cpu.steal, 8u);
  EXPECT_EQ(s.cpu.guest, 9u);
  EXPECT_EQ(s.cpu.guest_nice, 10u);
  // guest time is inside user time already: not added twice.
  EXPECT_EQ(s.cpu.total(), 100u + 2 + 30 + 4000 + 50 + 6 + 7 + 8);
  EXPECT_EQ(s.ctxt, 987654u);
  EXPECT_EQ(s.processes, 4242u);
  EXPECT_EQ(s.procs_running, 3u);
  EXPECT_EQ(s.procs_blocked, 1u);
}

TEST(ProcStat, AnOldKernelsShortCpuLineLeavesTheLaterFieldsZero) {
  const ProcStat s = parse_proc_stat("cpu 1 2 3 4\n", "/proc/stat");
  EXPECT_EQ(s.cpu.idle, 4u);
  EXPECT_EQ(s.cpu.iowait, 0u);
  EXPECT_EQ(s.cpu.steal, 0u);
  EXPECT_FALSE(s.ctxt);
  // A newer kernel's extra field is skipped.
  EXPECT_EQ(parse_proc_stat("cpu 1 2 3 4 5 6 7 8 9 10 11\n", "/proc/stat").cpu.guest_nice, 10u);
}

TEST(ProcStat, GarbageNamesTheFileLineAndField) {
  const std::string e = input_error([] { parse_proc_stat("intr 1\ncpu 1 2 x 4\n", "/root/proc/stat"); });
  EXPECT_TRUE(contains(e, "/root/proc/stat:2: field 'cpu'")) << e;
  EXPECT_TRUE(contains(e, "'x'")) << e;
  EXPECT_TRUE(
      contains(input_error([] { parse_proc_stat("cpu0 1 2 3 4\n", "f"); }), "no aggregate 'cpu' line"));
  EXPECT_TRUE(contains(input_error([] { parse_proc_stat("cpu 1 2\n", "f"); }), "at least 4"));
  EXPECT_TRUE(
      contains(input_error([] { parse_proc_stat("cpu 1 2 3 4\nctxt -5\n", "f"); }), "f:2: field 'ctxt'"));
  // 2^64 does not fit.
  EXPECT_TRUE(contains(input_error([] { parse_proc_stat("cpu 18446744073709551616 2 3 4\n", "f"); }),
                       "unsigned integer"));
}

TEST(Meminfo, ConvertsKilobytesToBytesAndKeepsCounts) {
  const auto v = parse_meminfo(
      "MemTotal:       16384000 kB\n"
      "MemAvailable:    8192000 kB\n"
      "Active(anon):       1024 kB\n"
      "HugePages_Total:       4\n",
      "/proc/meminfo");
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0].name, "MemTotal");
  EXPECT_EQ(v[0].value, 16384000ull * 1024);
  EXPECT_TRUE(v[0].bytes);
  EXPECT_EQ(v[2].name, "Active(anon)");
  EXPECT_EQ(v[3].name, "HugePages_Total");
  EXPECT_EQ(v[3].value, 4u);
  EXPECT_FALSE(v[3].bytes);
}

TEST(Meminfo, RejectsGarbageWithItsLine) {
  EXPECT_TRUE(contains(input_error([] { parse_meminfo("MemTotal: 1 kB\nMemFree: lots kB\n", "m"); }),
                       "m:2: field 'MemFree'"));
  EXPECT_TRUE(contains(input_error([] { parse_meminfo("MemTotal: 1 MB\n", "m"); }), "unit 'kB'"));
  EXPECT_TRUE(contains(input_error([] { parse_meminfo("no colon here\n", "m"); }), "m:1"));
  EXPECT_TRUE(contains(input_error([] { parse_meminfo("MemTotal: 1 kB extra\n", "m"); }), "after the value"));
}

TEST(Pressure, ReadsSomeAndFull) {
  const Pressure p = parse_pressure(
      "some avg10=1.50 avg60=0.75 avg300=0.10 total=123456\n"
      "full avg10=0.25 avg60=0.00 avg300=0.00 total=99\n",
      "/proc/pressure/memory");
  ASSERT_TRUE(p.some && p.full);
  EXPECT_DOUBLE_EQ(p.some->avg10, 1.5);
  EXPECT_DOUBLE_EQ(p.some->avg60, 0.75);
  EXPECT_DOUBLE_EQ(p.some->avg300, 0.1);
  EXPECT_EQ(p.some->total_us, 123456u);
  EXPECT_DOUBLE_EQ(p.full->avg10, 0.25);
  EXPECT_EQ(p.full->total_us, 99u);
  // The cpu file before Linux 5.13 has no "full" line.
  EXPECT_FALSE(parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "c").full);
}

TEST(Pressure, RejectsGarbage) {
  EXPECT_TRUE(contains(input_error([] { parse_pressure("some avg10=0.00 avg60=0.00 total=0\n", "p"); }),
                       "p:1: field 'some'"));
  EXPECT_TRUE(contains(input_error([] { parse_pressure("some avg10=200 avg60=0 avg300=0 total=0\n", "p"); }),
                       "percentage"));
  EXPECT_TRUE(contains(input_error([] { parse_pressure("some avg10=nan avg60=0 avg300=0 total=0\n", "p"); }),
                       "percentage"));
  EXPECT_TRUE(contains(input_error([] { parse_pressure("most avg10=0\n", "p"); }), "'some' or 'full'"));
  EXPECT_TRUE(contains(input_error([] { parse_pressure("", "p"); }), "no 'some' or 'full' line"));
  EXPECT_TRUE(contains(input_error([] { parse_pressure("some avg10\n", "p"); }), "KEY=VALUE"));
}

TEST(NetDev, SkipsTheHeaderAndReadsEachInterface) {
  const std::string text =
      "Inter-|   Receive                                                |  Transmit\n"
      " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo "
      "colls "
      "carrier compressed\n"
      "    lo:  500 5 0 0 0 0 0 0  500 5 0 0 0 0 0 0\n"
      "  eth0: 1000 10 1 2 0 0 0 0 2000 20 3 4 0 0 0 0\n"
      "eth0:1: 7 1 0 0 0 0 0 0 8 1 0 0 0 0 0 0\n";
  const auto v = parse_net_dev(text, "/proc/net/dev");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].name, "lo");
  EXPECT_EQ(v[1].name, "eth0");
  EXPECT_EQ(v[1].rx_bytes, 1000u);
  EXPECT_EQ(v[1].rx_packets, 10u);
  EXPECT_EQ(v[1].rx_errs, 1u);
  EXPECT_EQ(v[1].rx_drop, 2u);
  EXPECT_EQ(v[1].tx_bytes, 2000u);
  EXPECT_EQ(v[1].tx_packets, 20u);
  EXPECT_EQ(v[1].tx_errs, 3u);
  EXPECT_EQ(v[1].tx_drop, 4u);
  EXPECT_EQ(v[2].name, "eth0:1");
  EXPECT_EQ(v[2].tx_bytes, 8u);
}

TEST(NetDev, AShortLineNamesItsInterface) {
  const std::string e = input_error([] { parse_net_dev("h|\nh|\n eth0: 1 2 3\n", "/proc/net/dev"); });
  EXPECT_TRUE(contains(e, "/proc/net/dev:3: field 'eth0'")) << e;
  EXPECT_TRUE(contains(e, "expected 16 counters, got 3")) << e;
}

// Fields 1..24 of proc(5), then a few more.
const char* kPidStat =
    "1234 (my (weird) proc) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 12345 1000000 512 "
    "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";

TEST(PidStat, FindsTheFieldsAfterTheLastParenthesis) {
  const PidStat s = parse_pid_stat(kPidStat, "/proc/1234/stat");
  EXPECT_EQ(s.state, 'S');
  EXPECT_EQ(s.utime_ticks, 250u);
  EXPECT_EQ(s.stime_ticks, 50u);
  EXPECT_EQ(s.num_threads, 7u);
  EXPECT_EQ(s.start_ticks, 12345u);
  EXPECT_EQ(s.rss_pages, 512u);
}

TEST(PidStat, RejectsAShortOrBrokenLine) {
  EXPECT_TRUE(contains(input_error([] { parse_pid_stat("1234 (x) S 1 2 3\n", "s"); }), "at least 24 fields"));
  EXPECT_TRUE(contains(input_error([] { parse_pid_stat("1234 x S 1 2 3\n", "s"); }), "PID (COMM)"));
  EXPECT_TRUE(contains(input_error([] {
                         parse_pid_stat(
                             "1 (x) S 1 1 1 0 -1 0 0 0 0 0 2.5 50 0 0 20 0 7 0 12345 1000000 512\n", "s");
                       }),
                       "s:1: field 'utime'"));
}

TEST(PidStatus, ReadsTheFieldsItKnows) {
  const PidStatus s = parse_pid_status(
      "Name:\tvllm\n"
      "State:\tS (sleeping)\n"
      "Uid:\t1000\t1000\t1000\t1000\n"
      "VmSize:\t  900000 kB\n"
      "VmHWM:\t    4096 kB\n"
      "VmRSS:\t    2048 kB\n"
      "Threads:\t7\n"
      "Cpus_allowed_list:\t0-1\n"
      "voluntary_ctxt_switches:\t11\n"
      "nonvoluntary_ctxt_switches:\t3\n",
      "/proc/1234/status");
  EXPECT_EQ(s.state, 'S');
  EXPECT_EQ(s.vm_rss_bytes, 2048u * 1024);
  EXPECT_EQ(s.vm_hwm_bytes, 4096u * 1024);
  EXPECT_EQ(s.vm_size_bytes, 900000u * 1024);
  EXPECT_EQ(s.threads, 7u);
  EXPECT_EQ(s.voluntary_ctxt_switches, 11u);
  EXPECT_EQ(s.nonvoluntary_ctxt_switches, 3u);
  // A kernel thread has no Vm* lines.
  const PidStatus k = parse_pid_status("Name:\tkthreadd\nThreads:\t1\n", "s");
  EXPECT_FALSE(k.vm_rss_bytes);
  EXPECT_EQ(k.threads, 1u);
}

TEST(PidStatus, RejectsGarbageInAFieldItReads) {
  const std::string e =
      input_error([] { parse_pid_status("Name:\tx\nVmRSS:\t12 pages\n", "/proc/9/status"); });
  EXPECT_TRUE(contains(e, "/proc/9/status:2: field 'VmRSS'")) << e;
  EXPECT_TRUE(contains(input_error([] { parse_pid_status("Threads:\tmany\n", "s"); }), "'many'"));
}

TEST(PidCgroup, FindsTheUnifiedLine) {
  const PidCgroup v2 = parse_pid_cgroup("0::/system.slice/vllm.service\n", "c");
  EXPECT_EQ(v2.unified_path, "/system.slice/vllm.service");
  EXPECT_FALSE(v2.has_v1);
  const PidCgroup hybrid = parse_pid_cgroup("4:memory:/x\n1:cpu:/\n0::/\n", "c");
  EXPECT_EQ(hybrid.unified_path, "/");
  EXPECT_TRUE(hybrid.has_v1);
  const PidCgroup v1 = parse_pid_cgroup("4:memory:/x\n1:name=systemd:/a:b\n", "c");
  EXPECT_FALSE(v1.unified_path);
  EXPECT_TRUE(v1.has_v1);
  EXPECT_TRUE(contains(input_error([] { parse_pid_cgroup("0::/\nnonsense\n", "c"); }), "c:2"));
  EXPECT_TRUE(contains(input_error([] { parse_pid_cgroup("0::relative\n", "c"); }), "absolute"));
  EXPECT_TRUE(contains(input_error([] { parse_pid_cgroup("0::/a\n0::/b\n", "c"); }), "second"));
}

TEST(CgroupFiles, FlatKeyedSingleValueAndIoStat) {
  const auto kv = parse_flat_keyed("usage_usec 1500000\nnr_throttled 4\n", "cpu.stat");
  ASSERT_EQ(kv.size(), 2u);
  EXPECT_EQ(kv[0].first, "usage_usec");
  EXPECT_EQ(kv[0].second, 1500000u);
  EXPECT_EQ(kv[1].second, 4u);
  EXPECT_EQ(parse_single_value("1048576\n", "memory.current"), 1048576u);
  const auto io =
      parse_io_stat("8:0 rbytes=100 wbytes=200 rios=1 wios=2 dbytes=0 dios=0\n259:1 rbytes=5\n", "io.stat");
  ASSERT_EQ(io.size(), 2u);
  EXPECT_EQ(io[0].device, "8:0");
  ASSERT_EQ(io[0].values.size(), 6u);
  EXPECT_EQ(io[0].values[1].first, "wbytes");
  EXPECT_EQ(io[0].values[1].second, 200u);
  EXPECT_EQ(io[1].device, "259:1");
}

TEST(CgroupFiles, RejectGarbage) {
  EXPECT_TRUE(contains(input_error([] { parse_flat_keyed("usage_usec 1\nnr_periods\n", "cpu.stat"); }),
                       "cpu.stat:2: field 'nr_periods'"));
  EXPECT_TRUE(contains(input_error([] { parse_flat_keyed("a 1 2\n", "f"); }), "KEY VALUE"));
  EXPECT_TRUE(contains(input_error([] { parse_single_value("max\n", "memory.current"); }), "'max'"));
  EXPECT_TRUE(contains(input_error([] { parse_single_value("1 2\n", "memory.current"); }), "one number"));
  EXPECT_TRUE(contains(input_error([] { parse_io_stat("8:0 rbytes=1\nsda rbytes=1\n", "io.stat"); }),
                       "io.stat:2: field 'device'"));
  EXPECT_TRUE(contains(input_error([] { parse_io_stat("8:0 rbytes\n", "io.stat"); }), "KEY=VALUE"));
}

// Whatever the bytes, a parser returns or throws InputError: nothing else.
TEST(ProcFiles, BinaryAndEmptyInputGetInputErrorsOnly) {
  const std::string inputs[] = {
      "",         std::string("\0\0\0", 3), "cpu",         ":",       "0::",  "(", ")",
      "\xff\xfe", std::string(5000, '9'),   "some avg10=", "a:b:c:d", "1 (x)"};
  for (const std::string& in : inputs) {
    const auto call = [&](auto fn) {
      try {
        fn();
      } catch (const InputError&) {
      }
    };
    call([&] { parse_proc_stat(in, "f"); });
    call([&] { parse_meminfo(in, "f"); });
    call([&] { parse_pressure(in, "f"); });
    call([&] { parse_net_dev(in, "f"); });
    call([&] { parse_pid_stat(in, "f"); });
    call([&] { parse_pid_status(in, "f"); });
    call([&] { parse_pid_cgroup(in, "f"); });
    call([&] { parse_flat_keyed(in, "f"); });
    call([&] { parse_single_value(in, "f"); });
    call([&] { parse_io_stat(in, "f"); });
  }
}

}  // namespace
}  // namespace tokenscope::observe
