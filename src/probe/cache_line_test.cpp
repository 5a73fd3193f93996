#include "probe/cache_line.h"

#include <gtest/gtest.h>

#include <sched.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "probe/topology.h"

namespace tokenscope::probe {
namespace {

TEST(StrideKnee, FlatUntilTheLineThenHalving) {
  const std::vector<int> strides{8, 16, 32, 64, 128, 256, 512};
  // Sweep time flat while every line is fetched, halving past the line size.
  EXPECT_EQ(find_stride_knee(strides, {10, 10, 10.2, 10, 5.1, 2.6, 1.3}), 64);
  // Adjacent-line prefetch: flat up to 128.
  EXPECT_EQ(find_stride_knee(strides, {10, 10, 10, 10, 9.5, 4.9, 2.4}), 128);
  // No knee: nothing to report.
  EXPECT_EQ(find_stride_knee(strides, {10, 10, 10, 10, 10, 10, 10}), 0);
}

TEST(CoherenceGranularity, SmallestDistanceWithoutSlowdown) {
  const std::vector<int> d{8, 16, 32, 64, 128, 256};
  EXPECT_EQ(find_coherence_granularity(d, {6, 6, 5.8, 1.0, 1.02, 0.99}), 64);
  // A pairing prefetcher keeps the penalty (smaller) at 64.
  EXPECT_EQ(find_coherence_granularity(d, {6, 6, 5.8, 2.0, 1.05, 1.0}), 128);
  // No slowdown anywhere (e.g. siblings): undetermined, not "8".
  EXPECT_EQ(find_coherence_granularity(d, {1, 1, 1, 1, 1, 1}), 0);
  // Slow at every distance: undetermined within the sweep.
  EXPECT_EQ(find_coherence_granularity(d, {3, 3, 3, 3, 3, 3}), 0);
}

// Two threads pinned to one cpu: each does its increments, and together
// they cannot have had more CPU time than the wall time of the run (the
// concurrency is at most 1; it would be up to 2 on two cpus).
TEST(FalseSharingVerdict, PackedFasterThanPaddedIsSaidToBeUnexplained) {
  MedianCi faster;  // the Xeon VM's 0.76 [0.65, 0.83]
  faster.median = 0.76;
  faster.ci_low = 0.65;
  faster.ci_high = 0.83;
  faster.n = 7;
  const std::string v = false_sharing_verdict(faster, "", 2);
  EXPECT_EQ(v.rfind("unexplained: packed ran faster than padded to 64 B (0.76 [0.65, 0.83] x)", 0), 0u) << v;
  EXPECT_NE(v.find("what would tell"), std::string::npos);
  MedianCi none = faster;
  none.median = 1.0;
  none.ci_low = 0.95;
  none.ci_high = 1.04;
  EXPECT_EQ(false_sharing_verdict(none, "", 2).rfind("no false-sharing penalty", 0), 0u);
  MedianCi costly = faster;
  costly.median = 4.0;
  costly.ci_low = 3.5;
  costly.ci_high = 4.5;
  EXPECT_EQ(false_sharing_verdict(costly, "", 4).rfind("false sharing costs", 0), 0u);
  EXPECT_EQ(false_sharing_verdict(faster, "siblings", 2), "cannot show here: siblings");
}

TEST(CounterUpdates, EveryThreadDoesItsIncrementsAndSharesTheCpu) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &allowed)) ++cpu;
  ASSERT_LT(cpu, CPU_SETSIZE);
  bool pinned = false;
  std::thread([&] { pinned = pin_current_thread(cpu); }).join();
  if (!pinned) GTEST_SKIP() << "cannot pin a thread to cpu " << cpu << " here";
  alignas(128) static char buf[4096] = {};
  const auto run = time_counter_updates({cpu, cpu}, buf, 64, 200'000);
  EXPECT_GT(run.seconds, 0.0);
  EXPECT_GT(run.concurrency, 0.0);
  EXPECT_LE(run.concurrency, 1.01);  // 1% for the thread CPU clock vs the monotonic clock
  std::uint64_t a, b;
  std::memcpy(&a, buf, 8);
  std::memcpy(&b, buf + 64, 8);
  EXPECT_EQ(a, 200'000u);
  EXPECT_EQ(b, 200'000u);
}

CacheLineSettings tiny() {
  CacheLineSettings s;
  s.increments_per_thread = 20'000;
  s.repetitions = 7;
  s.stride_buffer_bytes = 4 << 20;
  s.stride_repetitions = 2;
  s.ping_pong_round_trips = 500;
  s.ping_pong_repetitions = 2;
  return s;
}

TEST(CacheLineProbe, ReportsEveryPartWithIntervals) {
  const Topology topo = read_topology();
  const auto r = run_cache_line_probe(tiny(), topo);
  ASSERT_EQ(r.stride.size(), 7u);
  EXPECT_EQ(r.stride.front().stride_bytes, 8);
  EXPECT_EQ(r.stride.front().sweep_ms.n, 2u);
  ASSERT_GE(r.variants.size(), 3u);
  EXPECT_EQ(r.variants[0].name, "packed");
  EXPECT_EQ(r.variants[0].stride_bytes, 8);
  EXPECT_EQ(r.variants[0].seconds.n, 7u);
  ASSERT_FALSE(r.ratios.empty());
  EXPECT_EQ(r.ratios[0].name, "packed/padded64");
  const auto& ci = r.ratios[0].ratio;
  ASSERT_TRUE(ci.ci_low && ci.ci_high);  // 7 repetitions bound a 95% median interval
  EXPECT_LE(*ci.ci_low, ci.median);
  EXPECT_LE(ci.median, *ci.ci_high);
  EXPECT_FALSE(r.verdict.empty());
  EXPECT_GT(r.detected_line_size, 0);
  if (topo.online_cpus.size() >= 2) {
    EXPECT_FALSE(r.coherence.empty());
    EXPECT_FALSE(r.ping_pong.empty());
  }
  const auto j = to_json(r);
  EXPECT_EQ(j["probe"], "cache-line");
  EXPECT_EQ(j["false_sharing"]["variants"].size(), r.variants.size());
  EXPECT_TRUE(j["line_size"].contains("sysfs"));
  // A size not found is null (unknown), never 0 bytes.
  for (const char* k : {"detected", "stride_knee", "coherence_granularity", "sysfs"})
    EXPECT_TRUE(j["line_size"][k].is_null() || j["line_size"][k].get<int>() > 0) << k << j["line_size"];
  CacheLineResult none = r;
  none.coherence_line_size = 0;
  EXPECT_TRUE(to_json(none)["line_size"]["coherence_granularity"].is_null());
  EXPECT_NE(format_table(none).find("coherence granularity not found"), std::string::npos);
  EXPECT_NE(format_table(r).find("false sharing"), std::string::npos);
}

// Two SMT siblings only: the probe must say the effect cannot show, never
// "no false sharing".
TEST(CacheLineProbe, SiblingsAreReportedAsCannotShow) {
  Topology t;
  t.cpu_model = "fake";
  t.online_cpus = {0, 1};
  t.thread_siblings = {{0, {0, 1}}, {1, {0, 1}}};
  auto s = tiny();
  s.run_stride = false;
  s.run_ping_pong = false;
  const auto r = run_cache_line_probe(s, t);
  EXPECT_TRUE(r.siblings_used);
  EXPECT_NE(r.sharing_caveat.find("siblings"), std::string::npos);
  EXPECT_EQ(r.verdict.rfind("cannot show here", 0), 0u);
  EXPECT_EQ(r.coherence_line_size, 0);
}

TEST(CacheLineProbe, OneCpuIsReportedAsCannotShow) {
  Topology t;
  t.online_cpus = {0};
  t.thread_siblings = {{0, {0}}};
  auto s = tiny();
  s.run_stride = false;
  const auto r = run_cache_line_probe(s, t);
  EXPECT_TRUE(r.single_cpu);
  EXPECT_EQ(r.verdict.rfind("cannot show here", 0), 0u);
  EXPECT_TRUE(r.ping_pong.empty());
}

// --threads is bounded as kv-layout's is: an unbounded count spawned threads
// until the process aborted; a negative one silently meant the default.
TEST(CacheLineProbe, ThreadCountsOutside1To64AreUsageErrors) {
  Topology t;
  t.online_cpus = {0, 1};
  t.thread_siblings = {{0, {0}}, {1, {1}}};
  for (const int threads : {-1, 65, 100000}) {
    auto s = tiny();
    s.threads = threads;
    try {
      run_cache_line_probe(s, t);
      ADD_FAILURE() << threads << " accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), "--threads: expected 1..64 threads, got " + std::to_string(threads));
    }
  }
}

}  // namespace
}  // namespace tokenscope::probe
