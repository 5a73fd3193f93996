// The GPU probes without a GPU: they must say why they did not run, and the
// parts that need no GPU (collapse rule, exports) are tested on made-up data.
#include "probe/gpu_probes.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tokenscope::probe {
namespace {

TEST(GpuProbes, WithoutAGpuTheyReportWhy) {
  const auto env = gpu_environment();
  if (env.available) GTEST_SKIP() << "a GPU is present: scripts/gpu-check runs the probes there";
  EXPECT_EQ(env.built, gpu_probes_built());
  EXPECT_FALSE(env.reason.empty());
  GpuContextSettings cs;
  cs.repetitions = 1;
  const auto c = run_gpu_context_probe(cs);
  EXPECT_FALSE(c.ran);
  EXPECT_FALSE(c.reason.empty());
  EXPECT_NE(format_table(c).find("not run"), std::string::npos);
  EXPECT_EQ(to_json(c)["ran"], false);
  KvSwapSettings ks;
  ks.tenants = {2};
  const auto k = run_kv_swap_probe(ks);
  EXPECT_FALSE(k.ran);
  EXPECT_FALSE(k.reason.empty());
  const auto n = run_collectives_probe({});
  EXPECT_FALSE(n.ran);
  EXPECT_EQ(to_json(n)["gpu"]["available"], false);
}

TEST(GpuProbes, NvmlAbsentIsClean) {
  Nvml nvml;
  if (nvml.available()) GTEST_SKIP() << "NVML is present here";
  EXPECT_FALSE(nvml.reason().empty());
  EXPECT_EQ(nvml.device_count(), 0);
  EXPECT_TRUE(nvml.sample(0, 0.0).empty());
  NvmlSampler s(nvml, 0.01);
  EXPECT_TRUE(s.stop().empty());
}

KvSwapRow row(std::uint64_t chunk, double d2h, double h2d) {
  KvSwapRow r;
  r.tenants = 4;
  r.kv_bytes = 256ull << 20;
  r.chunk_bytes = chunk;
  r.d2h_gbps.n = 5;
  r.d2h_gbps.median = d2h;
  r.h2d_gbps.n = 5;
  r.h2d_gbps.median = h2d;
  return r;
}

TEST(GpuProbes, SmallTransferCollapseRule) {
  std::vector<KvSwapRow> rows{row(0, 50, 52), row(1 << 20, 48, 50), row(64 << 10, 20, 51),
                              row(4 << 10, 30, 30)};
  rows.push_back(row(64 << 10, 40, 45));
  rows.back().tenants = 8;  // no whole-copy row for 8 tenants: nothing to compare with
  flag_small_transfer_collapse(rows);
  EXPECT_FALSE(rows[0].small_transfer_collapse);  // the whole copy itself
  EXPECT_FALSE(rows[1].small_transfer_collapse);  // 1 MiB is not "small"
  EXPECT_TRUE(rows[2].small_transfer_collapse);   // D2H under half of 50
  EXPECT_FALSE(rows[3].small_transfer_collapse);  // 30 of 50 and 52: not under half
  EXPECT_FALSE(rows[4].small_transfer_collapse);
}

TEST(GpuProbes, SamplesAndChromeTrace) {
  CuptiCapture c;
  c.enabled = true;
  c.activities.push_back({"memcpy", "DtoH", 1000, 3000, 0, 1, 7, 4096});
  c.activities.push_back({"kernel", "decode_kernel", 2000, 9000, 0, 1, 8, 0});
  const std::vector<NvmlReading> nvml{{0.5, 0, "power_w", 312.5}};
  const auto lines = samples_jsonl(nvml, c);
  std::size_t n = 0;
  for (std::size_t p = 0; (p = lines.find('\n', p)) != std::string::npos; ++p) ++n;
  EXPECT_EQ(n, 3u);
  const auto first = nlohmann::json::parse(lines.substr(0, lines.find('\n')));
  EXPECT_EQ(first["source"], "nvml");
  EXPECT_EQ(first["labels"]["gpu"], "0");
  EXPECT_DOUBLE_EQ(first["value"].get<double>(), 312.5);
  const auto t = chrome_trace(c);
  ASSERT_EQ(t["traceEvents"].size(), 2u);
  EXPECT_EQ(t["traceEvents"][0]["ph"], "X");
  EXPECT_DOUBLE_EQ(t["traceEvents"][0]["ts"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(t["traceEvents"][0]["dur"].get<double>(), 2.0);  // us
  EXPECT_EQ(t["traceEvents"][1]["tid"], 8);
}

}  // namespace
}  // namespace tokenscope::probe
