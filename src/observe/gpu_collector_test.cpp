#include "observe/gpu_collector.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "observe/canonical.h"
#include "observe/collector_test_util.h"
#include "probe/nvml.h"

namespace tokenscope::observe {
namespace {

// fake_nvml.cpp, built beside this test (src/observe/CMakeLists.txt).
constexpr const char* kFake = TOKENSCOPE_FAKE_NVML;

using testing::contains;
using testing::value;

// The fake's own counters, through a handle of our own (which also keeps
// the library, and so its counters, loaded between collectors).
struct FakeCounters {
  void* lib = dlopen(kFake, RTLD_NOW | RTLD_LOCAL);
  int (*live_samples)() = lib ? reinterpret_cast<int (*)()>(dlsym(lib, "fake_nvml_live_samples")) : nullptr;
  int (*init_count)() = lib ? reinterpret_cast<int (*)()>(dlsym(lib, "fake_nvml_init_count")) : nullptr;
  ~FakeCounters() {
    if (lib) dlclose(lib);
  }
};

const Labels kGpu0{{"gpu", "0"}};
const Labels kGpu1{{"gpu", "1"}};

TEST(GpuCollector, ReadsEveryDeviceInCanonicalUnits) {
  GpuCollector c(kFake);
  ManualClock clock(77);
  const Observation o = c.collect(clock);
  ASSERT_EQ(o.unavailable, "");
  ASSERT_EQ(o.error, "");
  EXPECT_EQ(o.source, "gpu");
  EXPECT_EQ(o.t_ns, 77);
  // gpu 0: every call answers.
  EXPECT_DOUBLE_EQ(*value(o.canonical, "gpu_utilization", kGpu0), 0.75);
  EXPECT_EQ(value(o.canonical, "gpu_memory_used_bytes", kGpu0), 20.0 * (1ull << 30));
  EXPECT_EQ(value(o.canonical, "gpu_memory_total_bytes", kGpu0), 80.0 * (1ull << 30));
  EXPECT_DOUBLE_EQ(*value(o.canonical, "gpu_power_watts", kGpu0), 312.5);
  EXPECT_DOUBLE_EQ(*value(o.canonical, "gpu_sm_clock_hz", kGpu0), 1.98e9);
  EXPECT_DOUBLE_EQ(*value(o.canonical, "gpu_memory_clock_hz", kGpu0), 2.619e9);
  EXPECT_DOUBLE_EQ(*value(o.canonical, "gpu_pcie_tx_bytes_per_s", kGpu0), 1000.0 * 1024);
  EXPECT_DOUBLE_EQ(*value(o.canonical, "gpu_pcie_rx_bytes_per_s", kGpu0), 2000.0 * 1024);
  EXPECT_EQ(value(o.canonical, "gpu_temperature_c", kGpu0), 61);
  EXPECT_EQ(value(o.canonical, "gpu_throttle_reasons", kGpu0), 4);  // SwPowerCap
  // As NVML gave them, raw.
  EXPECT_EQ(value(o.raw, "nvml_utilization_gpu_percent", kGpu0), 75);
  EXPECT_EQ(value(o.raw, "nvml_utilization_memory_percent", kGpu0), 40);
  EXPECT_EQ(value(o.raw, "nvml_power_usage_milliwatts", kGpu0), 312500);
  EXPECT_EQ(value(o.raw, "nvml_clock_sm_mhz", kGpu0), 1980);
  EXPECT_EQ(value(o.raw, "nvml_pcie_rx_kilobytes_per_s", kGpu0), 2000);
  EXPECT_EQ(value(o.raw, "nvml_memory_free_bytes", kGpu0), 60.0 * (1ull << 30));
  EXPECT_EQ(value(o.raw, "nvml_mig_mode_current", kGpu0), 0);
  // GPM needs two samples: none on the first read.
  EXPECT_FALSE(value(o.canonical, "gpu_dram_active", kGpu0));

  // gpu 1: MIG enabled, no utilisation; instances at GPU instance ids 1 and 5.
  EXPECT_FALSE(value(o.canonical, "gpu_utilization", kGpu1));
  EXPECT_DOUBLE_EQ(*value(o.canonical, "gpu_power_watts", kGpu1), 100);
  EXPECT_EQ(value(o.canonical, "gpu_throttle_reasons", kGpu1), 1);  // GpuIdle
  EXPECT_EQ(value(o.raw, "nvml_mig_mode_current", kGpu1), 1);
  EXPECT_EQ(value(o.raw, "nvml_mig_mode_pending", kGpu1), 1);
  EXPECT_EQ(value(o.canonical, "gpu_memory_total_bytes", kGpu1), 141.0 * (1ull << 30));
  const Labels mig1{{"gpu", "1"}, {"mig", "1"}}, mig5{{"gpu", "1"}, {"mig", "5"}};
  EXPECT_EQ(value(o.canonical, "gpu_memory_used_bytes", mig1), 1.0 * (1ull << 30));
  EXPECT_EQ(value(o.canonical, "gpu_memory_total_bytes", mig1), 16.0 * (1ull << 30));
  EXPECT_EQ(value(o.canonical, "gpu_memory_used_bytes", mig5), 3.0 * (1ull << 30));
  EXPECT_EQ(value(o.canonical, "gpu_memory_total_bytes", mig5), 32.0 * (1ull << 30));
  const auto instances = std::count_if(o.canonical.begin(), o.canonical.end(), [](const Sample& s) {
    return s.name == "gpu_memory_total_bytes" && s.labels.size() == 2;
  });
  EXPECT_EQ(instances, 2);  // index 1 and 3..6 hold no instance

  for (const Sample& s : o.canonical) {
    const bool known = std::any_of(std::begin(kCanonicalSeries), std::end(kCanonicalSeries),
                                   [&](const CanonicalDefinition& d) { return d.name == s.name; });
    EXPECT_TRUE(known) << s.name;
  }
  const auto notes = c.notes();
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n == "gpu 1: nvmlDeviceGetUtilizationRates returned NVML_ERROR_NOT_SUPPORTED: left out";
  }));
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(),
                          [](const std::string& n) { return contains(n, "gpu 1: no GPM support"); }));
}

TEST(GpuCollector, GpmMetricsComeFromThePreviousAndThisSample) {
  GpuCollector c(kFake);
  ManualClock clock;
  c.collect(clock);
  // The fake answers only for two consecutive samples of one device, older
  // first: values on every later read mean the samples rotate right.
  for (int read = 2; read <= 4; ++read) {
    const Observation o = c.collect(clock);
    ASSERT_EQ(o.error, "");
    EXPECT_DOUBLE_EQ(*value(o.canonical, "gpu_dram_active", kGpu0), 0.555) << read;
    EXPECT_DOUBLE_EQ(*value(o.canonical, "gpu_sm_active", kGpu0), 0.8) << read;
    EXPECT_DOUBLE_EQ(*value(o.canonical, "gpu_tensor_active", kGpu0), 0.42) << read;
    EXPECT_EQ(value(o.raw, "nvml_gpm_sm_occupancy_percent", kGpu0), 33.25) << read;
    EXPECT_EQ(value(o.raw, "nvml_gpm_dram_bw_util_percent", kGpu0), 55.5) << read;
    EXPECT_FALSE(value(o.canonical, "gpu_dram_active", kGpu1)) << read;  // no GPM there
  }
  EXPECT_EQ(c.reads(), 4);
}

TEST(GpuCollector, FreesItsSamplesAndShutsNvmlDown) {
  FakeCounters fake;
  ASSERT_TRUE(fake.live_samples && fake.init_count) << dlerror();
  {
    GpuCollector c(kFake);
    ManualClock clock;
    c.collect(clock);
    c.collect(clock);
    EXPECT_EQ(fake.live_samples(), 2);  // previous and current, gpu 0 only
    EXPECT_EQ(fake.init_count(), 1);
  }
  EXPECT_EQ(fake.live_samples(), 0);
  EXPECT_EQ(fake.init_count(), 0);
}

TEST(GpuCollector, NoLibraryIsUnavailableWithTheDlopenError) {
  GpuCollector c("/nonexistent/libnvidia-ml.so.1");
  ManualClock clock;
  const Observation o = c.collect(clock);
  EXPECT_EQ(o.unavailable.rfind("NVML not available: ", 0), 0u) << o.unavailable;
  EXPECT_TRUE(contains(o.unavailable, "/nonexistent/libnvidia-ml.so.1")) << o.unavailable;
  EXPECT_TRUE(o.canonical.empty() && o.raw.empty());
  EXPECT_EQ(c.collect(clock).unavailable, o.unavailable);  // the same answer, no retry
}

TEST(GpuCollector, ALibraryWithoutNvmlIsUnavailable) {
  GpuCollector c("libm.so.6");
  ManualClock clock;
  EXPECT_EQ(c.collect(clock).unavailable, "NVML not available: the library lacks nvmlInit_v2");
}

TEST(GpuCollector, AFailedInitIsUnavailableWithTheReturnCodesName) {
  ASSERT_EQ(::setenv("TOKENSCOPE_FAKE_NVML_INIT_RESULT", "9", 1), 0);
  GpuCollector c(kFake);
  ManualClock clock;
  const Observation o = c.collect(clock);
  ::unsetenv("TOKENSCOPE_FAKE_NVML_INIT_RESULT");
  EXPECT_EQ(o.unavailable, "NVML not available: nvmlInit_v2 returned NVML_ERROR_DRIVER_NOT_LOADED");
}

TEST(GpuCollector, TheEnvironmentVariableNamesTheLibrary) {
  ASSERT_EQ(::setenv("TOKENSCOPE_NVML_LIBRARY", kFake, 1), 0);
  GpuCollector c;
  ManualClock clock;
  const Observation o = c.collect(clock);
  // The probes' NVML loads the same way.
  probe::Nvml nvml;
  ::unsetenv("TOKENSCOPE_NVML_LIBRARY");
  ASSERT_EQ(o.unavailable, "");
  EXPECT_EQ(value(o.canonical, "gpu_temperature_c", kGpu1), 45);
  ASSERT_TRUE(nvml.available()) << nvml.reason();
  EXPECT_EQ(nvml.device_count(), 2);
  EXPECT_EQ(nvml.device_name(0), "Fake H200");
}

TEST(NvmlReturnName, NamesTheDocumentedCodes) {
  EXPECT_EQ(probe::nvml_return_name(0), "NVML_SUCCESS");
  EXPECT_EQ(probe::nvml_return_name(3), "NVML_ERROR_NOT_SUPPORTED");
  EXPECT_EQ(probe::nvml_return_name(18), "NVML_ERROR_LIB_RM_VERSION_MISMATCH");
  EXPECT_EQ(probe::nvml_return_name(25), "NVML_ERROR_ARGUMENT_VERSION_MISMATCH");
  EXPECT_EQ(probe::nvml_return_name(999), "NVML_ERROR_UNKNOWN");
  EXPECT_EQ(probe::nvml_return_name(-4), "NVML return code -4");
}

}  // namespace
}  // namespace tokenscope::observe
