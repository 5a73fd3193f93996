#include "probe/collectives.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tokenscope::probe {
namespace {

// Shaped as nccl-tests prints it (all_reduce_perf -b 8 -e 128M -f 4 -g 8);
// the numbers are made up so that algbw = bytes / time exactly.
constexpr const char* kAllReduce =
    R"(# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   4242 on     node01 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   4242 on     node01 device  1 [0x2a] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid   4242 on     node01 device  2 [0x3a] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid   4242 on     node01 device  3 [0x5d] NVIDIA H100 80GB HBM3
#  Rank  4 Group  0 Pid   4242 on     node01 device  4 [0x9a] NVIDIA H100 80GB HBM3
#  Rank  5 Group  0 Pid   4242 on     node01 device  5 [0xab] NVIDIA H100 80GB HBM3
#  Rank  6 Group  0 Pid   4242 on     node01 device  6 [0xba] NVIDIA H100 80GB HBM3
#  Rank  7 Group  0 Pid   4242 on     node01 device  7 [0xdb] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
NCCL INFO some line the parser skips
        8000          2000     float     sum      -1    20.00    0.40    0.70      0    20.00    0.40    0.70      0
     8000000       2000000     float     sum      -1   100.00   80.00  140.00      0   100.00   80.00  140.00      0
   800000000     200000000     float     sum      -1  8020.00   99.75  174.56      0  8020.00   99.75  174.56      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 105.0867
#
)";

TEST(NcclTests, ParsesRanksRowsAndAverage) {
  const auto o = parse_nccl_tests(kAllReduce, "all_reduce_perf.txt");
  EXPECT_EQ(o.ranks, 8);
  EXPECT_EQ(o.collective, "all_reduce");  // from the file name
  EXPECT_EQ(o.devices.size(), 8u);
  ASSERT_EQ(o.rows.size(), 3u);
  EXPECT_DOUBLE_EQ(o.rows[1].bytes, 8e6);
  EXPECT_DOUBLE_EQ(o.rows[1].time_us, 100.0);
  EXPECT_DOUBLE_EQ(o.rows[1].busbw_gbps, 140.0);
  ASSERT_TRUE(o.rows[1].inplace_time_us);
  EXPECT_DOUBLE_EQ(*o.rows[1].inplace_time_us, 100.0);
  EXPECT_DOUBLE_EQ(*o.rows[1].wrong, 0.0);
  ASSERT_TRUE(o.avg_busbw_gbps);
  EXPECT_NEAR(*o.avg_busbw_gbps, 105.0867, 1e-9);
  EXPECT_TRUE(o.out_of_bounds_ok);
}

TEST(NcclTests, BusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(*busbw_factor("all_reduce", 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(*busbw_factor("alltoall", 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(*busbw_factor("all_gather_perf", 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(*busbw_factor("ReduceScatter", 2), 0.5);
  EXPECT_DOUBLE_EQ(*busbw_factor("broadcast", 8), 1.0);
  EXPECT_DOUBLE_EQ(*busbw_factor("alltoall", 1), 0.0);
  EXPECT_FALSE(busbw_factor("mystery", 8));
}

TEST(NcclTests, AnalysisRecomputesBusbwAndFitsAlphaBeta) {
  const auto o = parse_nccl_tests(kAllReduce, "x", "all_reduce");
  const auto a = analyze_collective(o.collective, o.ranks, o.rows);
  ASSERT_TRUE(a.factor);
  EXPECT_DOUBLE_EQ(*a.factor, 1.75);
  EXPECT_NEAR(a.peak_algbw_gbps, 8e8 / (8020.0 * 1e3), 1e-9);
  EXPECT_NEAR(a.peak_busbw_gbps, a.peak_algbw_gbps * 1.75, 1e-9);
  EXPECT_LT(a.max_busbw_mismatch, 0.01);  // the printed busbw agrees with bytes/time x factor
  // time = 20 + 1e-5 * bytes (us): alpha 19.92, beta ~1e-5 us/B -> ~100 GB/s.
  EXPECT_EQ(a.fit.points, 3u);
  EXPECT_NEAR(a.fit.beta_us_per_byte, 1e-5, 1e-8);
  EXPECT_NEAR(a.fit.asymptotic_gbps(), 100.0, 0.1);
  EXPECT_NEAR(a.fit.alpha_us, 20.0, 1.0);
  EXPECT_GT(a.fit.r_squared, 0.9999);
  EXPECT_TRUE(a.note.empty());
}

TEST(NcclTests, OneRankIsTrivialAndSaysWhy) {
  std::vector<CollectiveRow> rows(2);
  rows[0].bytes = 1024;
  rows[0].time_us = 5;
  rows[1].bytes = 1 << 20;
  rows[1].time_us = 50;
  const auto a = analyze_collective("alltoall", 1, rows);
  EXPECT_NE(a.note.find("one rank"), std::string::npos);
  EXPECT_DOUBLE_EQ(a.peak_busbw_gbps, 0.0);
}

TEST(NcclTests, OlderFormatWithoutRootColumnAndAlltoall) {
  const std::string text =
      "# Collective test starting: alltoall_perf\n"
      "# nThread 1 nGpus 2 minBytes 1024 maxBytes 4096 step: 2(factor)\n"
      "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw "
      " error\n"
      "        1024           256     float    none    10.24    0.10    0.05  0e+00    10.24    0.10    0.05 "
      "   N/A\n"
      "        4096          1024     float    none    20.48    0.20    0.10  0e+00    20.48    0.20    0.10 "
      "   N/A\n";
  const auto o = parse_nccl_tests(text, "t");
  EXPECT_EQ(o.collective, "alltoall");
  EXPECT_EQ(o.ranks, 2);  // from nGpus x nThread
  ASSERT_EQ(o.rows.size(), 2u);
  EXPECT_DOUBLE_EQ(o.rows[0].busbw_gbps, 0.05);
  const auto a = analyze_collective(o.collective, o.ranks, o.rows);
  EXPECT_DOUBLE_EQ(*a.factor, 0.5);
}

TEST(NcclTests, BadRowsNameTheLine) {
  const std::string header = "#  size count type redop root time algbw busbw #wrong\n";
  try {
    parse_nccl_tests(header + "8 2 float sum -1 1.0 0.1\n", "t.txt");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.line(), 2u);
    EXPECT_EQ(e.field(), "row");
  }
  EXPECT_THROW(parse_nccl_tests(header + "8 2 float sum -1 abc 0.1 0.1 0\n", "t"), InputError);
  EXPECT_THROW(parse_nccl_tests(header + "8 2 float sum -1 0 0.1 0.1 0\n", "t"), InputError);
  EXPECT_THROW(parse_nccl_tests("8 2 float sum -1 1 0.1 0.1 0\n", "t"), InputError);  // no header
  EXPECT_THROW(parse_nccl_tests("# nothing\n", "t"), InputError);                     // no rows
  try {
    parse_nccl_tests(header + "8 2 float sum -1 \x1b[2J 0.1 0.1 0\n", "t");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("got '\\x1b[2J'"), std::string::npos) << e.what();
  }
}

TEST(PairMatrix, SlowPairsAgainstTheMedian) {
  const std::vector<std::vector<double>> m{
      {0, 100, 100, 100}, {100, 0, 100, 40}, {100, 100, 0, 100}, {100, 100, 100, 0}};
  const auto slow = slow_pairs(m);
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(slow[0].from, 1);
  EXPECT_EQ(slow[0].to, 3);
  EXPECT_DOUBLE_EQ(slow[0].vs_median, 0.4);
}

TEST(AlphaBeta, ExactLine) {
  const auto f = fit_alpha_beta({0, 1, 2, 3}, {5, 7, 9, 11});
  EXPECT_DOUBLE_EQ(f.alpha_us, 5);
  EXPECT_DOUBLE_EQ(f.beta_us_per_byte, 2);
  EXPECT_DOUBLE_EQ(f.r_squared, 1.0);
  EXPECT_NEAR(f.alpha_ci95, 0.0, 1e-12);
  EXPECT_EQ(fit_alpha_beta({1}, {1}).points, 0u);
  EXPECT_EQ(fit_alpha_beta({2, 2}, {1, 3}).points, 0u);
}

}  // namespace
}  // namespace tokenscope::probe
