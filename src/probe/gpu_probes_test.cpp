// The GPU probes. Without a GPU they must say why they did not run; on a
// GPU they must run and measure what is physically possible (wide bounds:
// sanity, not performance). The parts that need no GPU (collapse rule,
// exports, link peaks) are tested on made-up data.
#include "probe/gpu_probes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace tokenscope::probe {
namespace {

// Whether the NVIDIA kernel driver lists a GPU on this machine, asked of the
// kernel and not of this binary: a binary that fails to see a GPU that is
// there must fail the GPU tests, not skip them.
bool nvidia_gpu_on_this_machine() {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists("/dev/nvidia0", ec)) return true;
  const fs::path gpus = "/proc/driver/nvidia/gpus";
  return fs::is_directory(gpus, ec) && fs::directory_iterator(gpus, ec) != fs::directory_iterator();
}

// Why a GPU test cannot run here (no GPU on this machine, or a binary
// without the GPU probes), or "" when it must.
std::string why_no_gpu_test(const GpuEnvironment& env) {
  if (!gpu_probes_built()) return env.reason;
  if (!nvidia_gpu_on_this_machine() && !env.available) return env.reason;
  return "";
}

TEST(GpuProbes, WithoutAGpuTheyReportWhy) {
  const auto env = gpu_environment();
  if (nvidia_gpu_on_this_machine() || env.available)
    GTEST_SKIP() << "a GPU is present: GpuProbes.OnAGpu* run the probes on it";
  EXPECT_FALSE(env.available);
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
  EXPECT_FALSE(nvml.max_pcie_link(0));
}

TEST(GpuProbes, PciePeakPerDirection) {
  // lane rate (GT/s) x encoding x lanes / 8 bits
  EXPECT_DOUBLE_EQ(*pcie_peak_gbps({1, 1}), 2.5 * 0.8 / 8);          // 0.25
  EXPECT_DOUBLE_EQ(*pcie_peak_gbps({2, 16}), 5 * 0.8 * 16 / 8);      // 8
  EXPECT_DOUBLE_EQ(*pcie_peak_gbps({3, 16}), 8 * 128.0 / 130 * 2);   // 15.75
  EXPECT_DOUBLE_EQ(*pcie_peak_gbps({4, 8}), 16 * 128.0 / 130);       // 15.75
  EXPECT_DOUBLE_EQ(*pcie_peak_gbps({5, 16}), 32 * 128.0 / 130 * 2);  // 63.02
  EXPECT_DOUBLE_EQ(*pcie_peak_gbps({6, 16}), 128.0);
  EXPECT_FALSE(pcie_peak_gbps({0, 16}));
  EXPECT_FALSE(pcie_peak_gbps({7, 16}));
  EXPECT_FALSE(pcie_peak_gbps({5, 0}));
}

// The most one direction of the host link can carry: the fastest PCIe link
// NVML reports for any GPU here; without NVML's word, 1000 GB/s (above every
// host link there is, NVLink-C2C's 450 GB/s included).
double host_link_peak_gbps(std::string& source) {
  Nvml nvml;
  double peak = 0;
  for (int i = 0; i < nvml.device_count(); ++i)
    if (const auto link = nvml.max_pcie_link(i))
      if (const auto p = pcie_peak_gbps(*link)) {
        peak = std::max(peak, *p);
        source = "PCIe gen " + std::to_string(link->generation) + " x" + std::to_string(link->width);
      }
  if (peak > 0) return peak;
  source = "no PCIe link from NVML (" + (nvml.available() ? std::string("not reported") : nvml.reason()) +
           "): 1000 GB/s";
  return 1000;
}

TEST(GpuProbes, OnAGpuContextCostsArePhysicallyPossible) {
  const auto env = gpu_environment();
  if (const auto why = why_no_gpu_test(env); !why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(env.available) << "the kernel driver lists a GPU but the probes see none: " << env.reason;
  EXPECT_TRUE(env.built);
  const auto& d = env.devices.front();
  EXPECT_FALSE(d.name.empty());
  EXPECT_GT(d.sm_count, 0);
  EXPECT_GE(d.cc_major, 7);  // what the kernels are built for (sm_80, sm_90) runs on nothing older
  EXPECT_GT(d.memory_bytes, 1ull << 30);
  EXPECT_GT(env.driver_version, 0);

  GpuContextSettings s;
  s.repetitions = 5;
  const auto r = run_gpu_context_probe(s);
  ASSERT_TRUE(r.ran) << r.reason;
  EXPECT_TRUE(r.reason.empty()) << r.reason;
  EXPECT_FALSE(r.green_note.empty());
  std::size_t creations = 0;
  for (const auto& row : r.rows) {
    const std::string what = row.operation + " " + row.variant;
    const bool green =
        row.operation.find("green") != std::string::npos || row.operation.find("Green") != std::string::npos;
    if (!green) {
      // Plain and primary contexts work on every GPU of the last ten years.
      EXPECT_TRUE(row.error.empty()) << what << ": " << row.error;
      EXPECT_EQ(row.us.n, 5u) << what;
    }
    if (!row.error.empty() || row.us.n == 0) continue;
    EXPECT_GE(row.us.min, 0.0) << what;
    EXPECT_LE(row.us.p50, 1e6) << what << ": a driver call or launch of over a second";
    const bool creates = row.operation == "cuCtxCreate" || row.operation == "cuGreenCtxCreate" ||
                         row.operation == "cuDevicePrimaryCtxRetain (first)";
    const bool launches = row.operation.find("kernel launch+sync") != std::string::npos;
    if (creates || launches) {
      // A context creation, or a launch waited for, is at least a round trip to the GPU.
      EXPECT_GE(row.us.min, 1.0) << what;
      creations += creates;
    }
  }
  EXPECT_GE(creations, 4u);  // three scheduling flags and the primary context
  if (r.cupti.enabled) {
    EXPECT_FALSE(r.cupti.activities.empty()) << "CUPTI on, but no record of the traced pass";
  }
  const auto j = to_json(r);
  EXPECT_EQ(j["ran"], true);
  EXPECT_EQ(j["gpu"]["available"], true);
}

TEST(GpuProbes, OnAGpuKvSwapBandwidthIsWithinTheHostLink) {
  const auto env = gpu_environment();
  if (const auto why = why_no_gpu_test(env); !why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(env.available) << "the kernel driver lists a GPU but the probes see none: " << env.reason;
  std::string link;
  const double peak = host_link_peak_gbps(link);
  KvSwapSettings s;
  s.tenants = {2};
  s.kv_bytes = {64ull << 20};
  s.chunk_bytes = {0, 1ull << 20};
  s.switches = 4;
  s.repetitions = 3;
  const auto r = run_kv_swap_probe(s);
  ASSERT_TRUE(r.ran) << r.reason;
  ASSERT_EQ(r.rows.size(), 4u);  // 2 transfer sizes x with and without the decode kernel
  for (const auto& row : r.rows) {
    const std::string what = std::to_string(row.chunk_bytes) + (row.overlapped ? " overlapped" : "");
    ASSERT_TRUE(row.skipped.empty()) << what << ": " << row.skipped;
    EXPECT_EQ(row.d2h_gbps.n, 3u);
    // A 64 MiB copy over any host link takes more than 1 GB/s and less than the link's peak.
    for (const auto* m : {&row.d2h_gbps, &row.h2d_gbps}) {
      EXPECT_GE(m->median, 1.0) << what;
      EXPECT_LE(m->max, peak) << what << ", host link " << link;
    }
    EXPECT_GE(row.bidir_gbps.median, 1.0) << what;
    EXPECT_LE(row.bidir_gbps.max, 2 * peak) << what << ", host link " << link;
    EXPECT_EQ(row.switch_ms.n, 4u);
    EXPECT_GT(row.switch_ms.min, 0.0) << what;
    EXPECT_LE(row.switch_ms.p50, 1000.0) << what;
    if (row.overlapped) {
      ASSERT_TRUE(row.decode_slowdown) << what;
      // Copies beside it cannot make the kernel twice as fast.
      EXPECT_GT(*row.decode_slowdown, 0.5) << what;
    }
  }
  EXPECT_TRUE(std::any_of(r.findings.begin(), r.findings.end(),
                          [](const std::string& f) { return f.starts_with("decode kernel alone"); }));
  if (r.cupti.enabled) {
    const bool memcpy = std::any_of(r.cupti.activities.begin(), r.cupti.activities.end(),
                                    [](const CuptiActivity& a) { return a.kind == "memcpy" && a.bytes > 0; });
    EXPECT_TRUE(memcpy) << "CUPTI on, but no copy recorded in the traced pass";
  }
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
