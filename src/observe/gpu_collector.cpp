#include "observe/gpu_collector.h"

#include <dlfcn.h>

#include <iterator>
#include <utility>
#include <vector>

#include "probe/nvml.h"

namespace tokenscope::observe {
namespace {

// The NVML ABI as the NVML API reference documents it (nvml.h is not
// installed here): int return codes (0 = NVML_SUCCESS), opaque handles,
// plain structs.
using nvmlReturn_t = int;
using nvmlDevice = void*;
using nvmlGpmSample = void*;
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kNotFound = 6;  // NVML_ERROR_NOT_FOUND

struct NvmlUtilization {  // nvmlUtilization_t: percent of the last sample period
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {  // nvmlMemory_t (v1): bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr unsigned kTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
constexpr unsigned kClockSm = 1;         // nvmlClockType_t NVML_CLOCK_SM
constexpr unsigned kClockMem = 2;        // NVML_CLOCK_MEM
constexpr unsigned kPcieTxBytes = 0;     // nvmlPcieUtilCounter_t NVML_PCIE_UTIL_TX_BYTES
constexpr unsigned kPcieRxBytes = 1;     // NVML_PCIE_UTIL_RX_BYTES
constexpr unsigned kMigEnable = 1;       // NVML_DEVICE_MIG_ENABLE

// GPM ("GPM Structs", "GPM Enums"). NVML_GPM_METRIC_MAX, the size of the
// metrics array, has grown between driver releases; NVML reads and writes
// only the first numMetrics entries, and the array is the struct's last
// member, so more slots than any header's maximum keep the layout right
// whatever the driver.
struct NvmlGpmMetric {
  unsigned int metricId;    // NVML_GPM_METRIC_*
  nvmlReturn_t nvmlReturn;  // per metric: 0 when value is valid
  double value;
  struct {
    char* shortName;
    char* longName;
    char* unit;
  } metricInfo;
};
constexpr unsigned kGpmMetricSlots = 512;
struct NvmlGpmMetricsGet {
  unsigned int version;  // NVML_GPM_METRICS_GET_VERSION
  unsigned int numMetrics;
  nvmlGpmSample sample1;
  nvmlGpmSample sample2;
  NvmlGpmMetric metrics[kGpmMetricSlots];
};
struct NvmlGpmSupport {
  unsigned int version;  // NVML_GPM_SUPPORT_VERSION
  unsigned int isSupportedDevice;
};
constexpr unsigned kGpmMetricsGetVersion = 1;
constexpr unsigned kGpmSupportVersion = 1;
// nvmlGpmMetricId_t values read, each a percentage 0..100.
constexpr unsigned kGpmSmUtil = 2;         // NVML_GPM_METRIC_SM_UTIL: SMs with a warp assigned, time-averaged
constexpr unsigned kGpmSmOccupancy = 3;    // NVML_GPM_METRIC_SM_OCCUPANCY: warps resident vs the maximum
constexpr unsigned kGpmAnyTensorUtil = 5;  // NVML_GPM_METRIC_ANY_TENSOR_UTIL
constexpr unsigned kGpmDramBwUtil = 10;    // NVML_GPM_METRIC_DRAM_BW_UTIL

struct GpmRead {
  unsigned id;
  const char* canonical;  // nullptr: raw only
  const char* raw;
};
constexpr GpmRead kGpmReads[] = {
    {kGpmDramBwUtil, "gpu_dram_active", "nvml_gpm_dram_bw_util_percent"},
    {kGpmSmUtil, "gpu_sm_active", "nvml_gpm_sm_util_percent"},
    {kGpmSmOccupancy, nullptr, "nvml_gpm_sm_occupancy_percent"},
    {kGpmAnyTensorUtil, "gpu_tensor_active", "nvml_gpm_any_tensor_util_percent"},
};

// NVML reports PCIe throughput in KB/s; taken as KiB/s (1024 bytes), the
// unit nvidia-smi's "KB/s" means.
constexpr double kBytesPerKb = 1024.0;

template <typename F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

}  // namespace

struct GpuCollector::State {
  void* lib = nullptr;
  bool initialised = false;  // nvmlInit_v2 succeeded: shut down at the end
  std::string unavailable;   // why NVML cannot work here (set once)

  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*count)(unsigned*) = nullptr;
  nvmlReturn_t (*handle)(unsigned, nvmlDevice*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice, NvmlUtilization*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice, NvmlMemory*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice, unsigned*) = nullptr;
  nvmlReturn_t (*clock)(nvmlDevice, unsigned, unsigned*) = nullptr;
  nvmlReturn_t (*pcie)(nvmlDevice, unsigned, unsigned*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice, unsigned, unsigned*) = nullptr;
  // nvmlDeviceGetCurrentClocksEventReasons (R535+), or the older
  // nvmlDeviceGetCurrentClocksThrottleReasons it renames: same bits.
  nvmlReturn_t (*clocks_event_reasons)(nvmlDevice, unsigned long long*) = nullptr;
  const char* clocks_event_reasons_name = "";
  nvmlReturn_t (*mig_mode)(nvmlDevice, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*max_mig_count)(nvmlDevice, unsigned*) = nullptr;
  nvmlReturn_t (*mig_handle)(nvmlDevice, unsigned, nvmlDevice*) = nullptr;
  nvmlReturn_t (*gpu_instance_id)(nvmlDevice, unsigned*) = nullptr;
  nvmlReturn_t (*gpm_support)(nvmlDevice, NvmlGpmSupport*) = nullptr;
  nvmlReturn_t (*gpm_alloc)(nvmlGpmSample*) = nullptr;
  nvmlReturn_t (*gpm_free)(nvmlGpmSample) = nullptr;
  nvmlReturn_t (*gpm_sample)(nvmlDevice, nvmlGpmSample) = nullptr;
  nvmlReturn_t (*gpm_metrics)(NvmlGpmMetricsGet*) = nullptr;

  struct Device {
    unsigned index = 0;
    nvmlDevice handle = nullptr;
    // GPM: the previous read's sample and this read's; swapped after each read.
    nvmlGpmSample previous = nullptr, current = nullptr;
    bool have_previous = false;
  };
  std::vector<Device> devices;
  std::unique_ptr<NvmlGpmMetricsGet> metrics_get;

  ~State() {
    for (Device& d : devices) {
      if (d.previous) gpm_free(d.previous);
      if (d.current) gpm_free(d.current);
    }
    if (initialised) shutdown();
    if (lib) dlclose(lib);
  }
};

GpuCollector::GpuCollector(std::string library_path)
    : library_path_(std::move(library_path)), state_(std::make_unique<State>()) {}

GpuCollector::~GpuCollector() = default;

bool GpuCollector::start() {
  State& s = *state_;
  if (!s.unavailable.empty()) return false;
  if (s.initialised) return true;
  const auto unavailable = [&](const std::string& why) {
    s.unavailable = "NVML not available: " + why;
    return false;
  };
  std::string error;
  s.lib = probe::open_nvml_library(library_path_, error);
  if (!s.lib) return unavailable(error);
  for (const auto& [name, ok] :
       {std::pair{"nvmlInit_v2", bind(s.lib, "nvmlInit_v2", s.init)},
        {"nvmlShutdown", bind(s.lib, "nvmlShutdown", s.shutdown)},
        {"nvmlDeviceGetCount_v2", bind(s.lib, "nvmlDeviceGetCount_v2", s.count)},
        {"nvmlDeviceGetHandleByIndex_v2", bind(s.lib, "nvmlDeviceGetHandleByIndex_v2", s.handle)}})
    if (!ok) return unavailable(std::string("the library lacks ") + name);
  bind(s.lib, "nvmlDeviceGetUtilizationRates", s.utilization);
  bind(s.lib, "nvmlDeviceGetMemoryInfo", s.memory);
  bind(s.lib, "nvmlDeviceGetPowerUsage", s.power);
  bind(s.lib, "nvmlDeviceGetClockInfo", s.clock);
  bind(s.lib, "nvmlDeviceGetPcieThroughput", s.pcie);
  bind(s.lib, "nvmlDeviceGetTemperature", s.temperature);
  if (bind(s.lib, "nvmlDeviceGetCurrentClocksEventReasons", s.clocks_event_reasons))
    s.clocks_event_reasons_name = "nvmlDeviceGetCurrentClocksEventReasons";
  else if (bind(s.lib, "nvmlDeviceGetCurrentClocksThrottleReasons", s.clocks_event_reasons))
    s.clocks_event_reasons_name = "nvmlDeviceGetCurrentClocksThrottleReasons";
  bind(s.lib, "nvmlDeviceGetMigMode", s.mig_mode);
  bind(s.lib, "nvmlDeviceGetMaxMigDeviceCount", s.max_mig_count);
  bind(s.lib, "nvmlDeviceGetMigDeviceHandleByIndex", s.mig_handle);
  bind(s.lib, "nvmlDeviceGetGpuInstanceId", s.gpu_instance_id);
  const bool gpm =
      bind(s.lib, "nvmlGpmQueryDeviceSupport", s.gpm_support) &&
      bind(s.lib, "nvmlGpmSampleAlloc", s.gpm_alloc) && bind(s.lib, "nvmlGpmSampleFree", s.gpm_free) &&
      bind(s.lib, "nvmlGpmSampleGet", s.gpm_sample) && bind(s.lib, "nvmlGpmMetricsGet", s.gpm_metrics);
  if (const nvmlReturn_t rc = s.init(); rc != kSuccess)
    return unavailable("nvmlInit_v2 returned " + probe::nvml_return_name(rc));
  s.initialised = true;
  unsigned n = 0;
  if (const nvmlReturn_t rc = s.count(&n); rc != kSuccess)
    return unavailable("nvmlDeviceGetCount_v2 returned " + probe::nvml_return_name(rc));
  if (n == 0) return unavailable("NVML sees no GPU");
  for (unsigned i = 0; i < n; ++i) {
    State::Device d;
    d.index = i;
    if (const nvmlReturn_t rc = s.handle(i, &d.handle); rc != kSuccess) {
      // A GPU outside this container's cgroup answers NO_PERMISSION.
      note_once("gpu " + std::to_string(i) + ": nvmlDeviceGetHandleByIndex_v2 returned " +
                probe::nvml_return_name(rc) + ": left out");
      continue;
    }
    NvmlGpmSupport support{kGpmSupportVersion, 0};
    if (gpm && s.gpm_support(d.handle, &support) == kSuccess && support.isSupportedDevice) {
      if (s.gpm_alloc(&d.previous) != kSuccess || s.gpm_alloc(&d.current) != kSuccess) {
        note_once("gpu " + std::to_string(i) + ": nvmlGpmSampleAlloc failed: GPM metrics left out");
        if (d.previous) s.gpm_free(d.previous);
        d.previous = d.current = nullptr;
      }
    } else {
      note_once("gpu " + std::to_string(i) +
                ": no GPM support (nvmlGpmQueryDeviceSupport): " + "DRAM, SM and tensor activity left out");
    }
    s.devices.push_back(d);
  }
  if (s.devices.empty()) return unavailable("no GPU NVML lists could be opened");
  s.metrics_get = std::make_unique<NvmlGpmMetricsGet>();
  return true;
}

// Long by nature: one block per NVML reading of each device.
Observation GpuCollector::read(const Clock& clock) {
  Observation o;
  o.source = "gpu";
  const Nanos t0 = clock.now_ns();
  if (!start()) {
    o.unavailable = state_->unavailable;
    o.t_ns = clock.now_ns();
    o.rtt_ns = o.t_ns - t0;
    return o;
  }
  State& s = *state_;
  std::string first_failure;
  // A call that fails leaves its series out; each (device, call, code) is noted once.
  const auto ok = [&](nvmlReturn_t rc, const Labels& l, const char* call) {
    if (rc == kSuccess) return true;
    std::string where = "gpu " + l[0].value + (l.size() > 1 ? " mig " + l[1].value : "");
    const std::string text = where + ": " + call + " returned " + probe::nvml_return_name(rc) + ": left out";
    if (first_failure.empty()) first_failure = text;
    note_once(text);
    return false;
  };
  const auto both = [&](const char* canonical, double canonical_value, const char* raw, double raw_value,
                        const Labels& l) {
    if (canonical) o.canonical.push_back({canonical, l, canonical_value});
    o.raw.push_back({raw, l, raw_value});
  };
  const auto memory = [&](nvmlDevice h, const Labels& l) {
    NvmlMemory m{};
    if (!s.memory || !ok(s.memory(h, &m), l, "nvmlDeviceGetMemoryInfo")) return;
    both("gpu_memory_used_bytes", static_cast<double>(m.used), "nvml_memory_used_bytes",
         static_cast<double>(m.used), l);
    both("gpu_memory_total_bytes", static_cast<double>(m.total), "nvml_memory_total_bytes",
         static_cast<double>(m.total), l);
    both(nullptr, 0, "nvml_memory_free_bytes", static_cast<double>(m.free), l);
  };

  for (State::Device& d : s.devices) {
    const Labels l{{"gpu", std::to_string(d.index)}};
    const nvmlDevice h = d.handle;
    if (NvmlUtilization u{}; s.utilization && ok(s.utilization(h, &u), l, "nvmlDeviceGetUtilizationRates")) {
      both("gpu_utilization", u.gpu / 100.0, "nvml_utilization_gpu_percent", u.gpu, l);
      both(nullptr, 0, "nvml_utilization_memory_percent", u.memory, l);
    }
    memory(h, l);
    if (unsigned mw = 0; s.power && ok(s.power(h, &mw), l, "nvmlDeviceGetPowerUsage"))
      both("gpu_power_watts", mw / 1000.0, "nvml_power_usage_milliwatts", mw, l);
    if (unsigned mhz = 0;
        s.clock && ok(s.clock(h, kClockSm, &mhz), l, "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"))
      both("gpu_sm_clock_hz", mhz * 1e6, "nvml_clock_sm_mhz", mhz, l);
    if (unsigned mhz = 0;
        s.clock && ok(s.clock(h, kClockMem, &mhz), l, "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)"))
      both("gpu_memory_clock_hz", mhz * 1e6, "nvml_clock_mem_mhz", mhz, l);
    if (unsigned kb = 0;
        s.pcie && ok(s.pcie(h, kPcieRxBytes, &kb), l, "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_RX_BYTES)"))
      both("gpu_pcie_rx_bytes_per_s", kb * kBytesPerKb, "nvml_pcie_rx_kilobytes_per_s", kb, l);
    if (unsigned kb = 0;
        s.pcie && ok(s.pcie(h, kPcieTxBytes, &kb), l, "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES)"))
      both("gpu_pcie_tx_bytes_per_s", kb * kBytesPerKb, "nvml_pcie_tx_kilobytes_per_s", kb, l);
    if (unsigned c = 0; s.temperature && ok(s.temperature(h, kTemperatureGpu, &c), l,
                                            "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)"))
      both("gpu_temperature_c", c, "nvml_temperature_gpu_c", c, l);
    if (unsigned long long bits = 0;
        s.clocks_event_reasons && ok(s.clocks_event_reasons(h, &bits), l, s.clocks_event_reasons_name))
      both("gpu_throttle_reasons", static_cast<double>(bits), "nvml_clocks_event_reasons",
           static_cast<double>(bits), l);

    // GPM: metrics over the interval from the previous read's sample.
    if (d.current && ok(s.gpm_sample(h, d.current), l, "nvmlGpmSampleGet")) {
      if (d.have_previous) {
        NvmlGpmMetricsGet& g = *s.metrics_get;
        g.version = kGpmMetricsGetVersion;
        g.numMetrics = static_cast<unsigned>(std::size(kGpmReads));
        g.sample1 = d.previous;
        g.sample2 = d.current;
        for (unsigned i = 0; i < g.numMetrics; ++i) g.metrics[i] = NvmlGpmMetric{kGpmReads[i].id, 0, 0, {}};
        if (ok(s.gpm_metrics(&g), l, "nvmlGpmMetricsGet")) {
          for (unsigned i = 0; i < g.numMetrics; ++i) {
            const NvmlGpmMetric& m = g.metrics[i];
            if (!ok(m.nvmlReturn, l, kGpmReads[i].raw)) continue;
            both(kGpmReads[i].canonical, m.value / 100.0, kGpmReads[i].raw, m.value, l);
          }
        }
      }
      std::swap(d.previous, d.current);
      d.have_previous = true;
    }

    // MIG: the mode, and each instance's memory when enabled.
    unsigned mode = 0, pending = 0;
    if (s.mig_mode && s.mig_mode(h, &mode, &pending) == kSuccess) {
      both(nullptr, 0, "nvml_mig_mode_current", mode, l);
      both(nullptr, 0, "nvml_mig_mode_pending", pending, l);
      unsigned max = 0;
      if (mode == kMigEnable && s.max_mig_count && s.mig_handle &&
          ok(s.max_mig_count(h, &max), l, "nvmlDeviceGetMaxMigDeviceCount")) {
        for (unsigned j = 0; j < max; ++j) {
          nvmlDevice mig = nullptr;
          const nvmlReturn_t rc = s.mig_handle(h, j, &mig);
          if (rc == kNotFound) continue;  // no instance at this index
          if (!ok(rc, l, "nvmlDeviceGetMigDeviceHandleByIndex")) continue;
          unsigned gi = j;  // the GPU instance id where NVML gives it, else the index
          if (s.gpu_instance_id) s.gpu_instance_id(mig, &gi);
          memory(mig, Labels{l[0], {"mig", std::to_string(gi)}});
        }
      }
    }
    // NOT_SUPPORTED from nvmlDeviceGetMigMode: a GPU without MIG; nothing to say.
  }
  o.t_ns = clock.now_ns();
  o.rtt_ns = o.t_ns - t0;
  if (o.raw.empty()) o.error = first_failure.empty() ? "no GPU answered" : first_failure;
  return o;
}

}  // namespace tokenscope::observe
