#include "probe/nvml.h"

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace tokenscope::probe {

// The NVML ABI as documented (nvml.h is not in the toolkit here): opaque
// device handles, int return codes (0 = success), plain structs.
namespace {
using nvmlReturn = int;
using nvmlDevice = void*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr unsigned kNvmlTemperatureGpu = 0;
constexpr unsigned kNvmlClockSm = 1;
constexpr unsigned kNvmlPcieTx = 0;
constexpr unsigned kNvmlPcieRx = 1;
}  // namespace

void* open_nvml_library(const std::string& path, std::string& error) {
  std::string chosen = path;
  if (chosen.empty())
    if (const char* env = std::getenv("TOKENSCOPE_NVML_LIBRARY"); env && *env) chosen = env;
  void* lib = nullptr;
  if (!chosen.empty()) {
    lib = dlopen(chosen.c_str(), RTLD_NOW | RTLD_LOCAL);
  } else {
    for (const char* n : {"libnvidia-ml.so.1", "libnvidia-ml.so"}) {
      lib = dlopen(n, RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
    }
  }
  if (!lib) {
    const char* why = dlerror();
    error = why ? why : "dlopen failed";
  }
  return lib;
}

std::string nvml_return_name(int code) {
  // nvmlReturn_t, NVML API reference "Device Enums" / nvmlReturn_enum.
  static constexpr const char* kNames[] = {"NVML_SUCCESS",
                                           "NVML_ERROR_UNINITIALIZED",
                                           "NVML_ERROR_INVALID_ARGUMENT",
                                           "NVML_ERROR_NOT_SUPPORTED",
                                           "NVML_ERROR_NO_PERMISSION",
                                           "NVML_ERROR_ALREADY_INITIALIZED",
                                           "NVML_ERROR_NOT_FOUND",
                                           "NVML_ERROR_INSUFFICIENT_SIZE",
                                           "NVML_ERROR_INSUFFICIENT_POWER",
                                           "NVML_ERROR_DRIVER_NOT_LOADED",
                                           "NVML_ERROR_TIMEOUT",
                                           "NVML_ERROR_IRQ_ISSUE",
                                           "NVML_ERROR_LIBRARY_NOT_FOUND",
                                           "NVML_ERROR_FUNCTION_NOT_FOUND",
                                           "NVML_ERROR_CORRUPTED_INFOROM",
                                           "NVML_ERROR_GPU_IS_LOST",
                                           "NVML_ERROR_RESET_REQUIRED",
                                           "NVML_ERROR_OPERATING_SYSTEM",
                                           "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
                                           "NVML_ERROR_IN_USE",
                                           "NVML_ERROR_MEMORY",
                                           "NVML_ERROR_NO_DATA",
                                           "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
                                           "NVML_ERROR_INSUFFICIENT_RESOURCES",
                                           "NVML_ERROR_FREQ_NOT_SUPPORTED",
                                           "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
                                           "NVML_ERROR_DEPRECATED",
                                           "NVML_ERROR_NOT_READY",
                                           "NVML_ERROR_GPU_NOT_FOUND",
                                           "NVML_ERROR_INVALID_STATE"};
  if (code >= 0 && code < static_cast<int>(std::size(kNames))) return kNames[code];
  if (code == 999) return "NVML_ERROR_UNKNOWN";
  return "NVML return code " + std::to_string(code);
}

struct Nvml::Fns {
  nvmlReturn (*init)() = nullptr;
  nvmlReturn (*shutdown)() = nullptr;
  nvmlReturn (*count)(unsigned*) = nullptr;
  nvmlReturn (*handle)(unsigned, nvmlDevice*) = nullptr;
  nvmlReturn (*name)(nvmlDevice, char*, unsigned) = nullptr;
  nvmlReturn (*driver)(char*, unsigned) = nullptr;
  nvmlReturn (*util)(nvmlDevice, NvmlUtilization*) = nullptr;
  nvmlReturn (*mem)(nvmlDevice, NvmlMemory*) = nullptr;
  nvmlReturn (*power)(nvmlDevice, unsigned*) = nullptr;
  nvmlReturn (*temp)(nvmlDevice, unsigned, unsigned*) = nullptr;
  nvmlReturn (*clock)(nvmlDevice, unsigned, unsigned*) = nullptr;
  nvmlReturn (*pcie)(nvmlDevice, unsigned, unsigned*) = nullptr;
  nvmlReturn (*max_link_gen)(nvmlDevice, unsigned*) = nullptr;
  nvmlReturn (*max_link_width)(nvmlDevice, unsigned*) = nullptr;
};

namespace {
template <typename F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}
}  // namespace

Nvml::Nvml() : fns_(std::make_unique<Fns>()) {
  std::string why;
  lib_ = open_nvml_library("", why);
  if (!lib_) {
    reason_ = "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine): " + why;
    return;
  }
  auto& f = *fns_;
  const bool ok =
      bind(lib_, "nvmlInit_v2", f.init) && bind(lib_, "nvmlShutdown", f.shutdown) &&
      bind(lib_, "nvmlDeviceGetCount_v2", f.count) && bind(lib_, "nvmlDeviceGetHandleByIndex_v2", f.handle) &&
      bind(lib_, "nvmlDeviceGetName", f.name) && bind(lib_, "nvmlSystemGetDriverVersion", f.driver);
  if (!ok) {
    reason_ = "libnvidia-ml.so.1 lacks the v2 entry points";
    return;
  }
  bind(lib_, "nvmlDeviceGetUtilizationRates", f.util);
  bind(lib_, "nvmlDeviceGetMemoryInfo", f.mem);
  bind(lib_, "nvmlDeviceGetPowerUsage", f.power);
  bind(lib_, "nvmlDeviceGetTemperature", f.temp);
  bind(lib_, "nvmlDeviceGetClockInfo", f.clock);
  bind(lib_, "nvmlDeviceGetPcieThroughput", f.pcie);
  bind(lib_, "nvmlDeviceGetMaxPcieLinkGeneration", f.max_link_gen);
  bind(lib_, "nvmlDeviceGetMaxPcieLinkWidth", f.max_link_width);
  if (const int rc = f.init(); rc != 0) {
    reason_ = "nvmlInit failed: " + nvml_return_name(rc);
    return;
  }
  available_ = true;
}

Nvml::~Nvml() {
  if (available_) fns_->shutdown();
  if (lib_) dlclose(lib_);
}

std::string Nvml::driver_version() const {
  if (!available_) return "";
  char buf[96] = {};
  return fns_->driver(buf, sizeof buf) == 0 ? std::string(buf) : std::string();
}

int Nvml::device_count() const {
  unsigned n = 0;
  return available_ && fns_->count(&n) == 0 ? static_cast<int>(n) : 0;
}

std::string Nvml::device_name(int index) const {
  nvmlDevice d = nullptr;
  char buf[128] = {};
  if (!available_ || fns_->handle(static_cast<unsigned>(index), &d) != 0 ||
      fns_->name(d, buf, sizeof buf) != 0)
    return "";
  return buf;
}

std::optional<PcieLink> Nvml::max_pcie_link(int index) const {
  nvmlDevice d = nullptr;
  const auto& f = *fns_;
  unsigned gen = 0, width = 0;
  if (!available_ || !f.max_link_gen || !f.max_link_width ||
      f.handle(static_cast<unsigned>(index), &d) != 0 || f.max_link_gen(d, &gen) != 0 ||
      f.max_link_width(d, &width) != 0)
    return std::nullopt;
  return PcieLink{static_cast<int>(gen), static_cast<int>(width)};
}

std::optional<double> pcie_peak_gbps(const PcieLink& link) {
  // Lane rates in GT/s and line-encoding efficiency, by generation (PCI-SIG).
  static constexpr double kGtPerS[] = {2.5, 5, 8, 16, 32, 64};
  static constexpr double kEncoding[] = {8.0 / 10, 8.0 / 10, 128.0 / 130, 128.0 / 130, 128.0 / 130, 1.0};
  if (link.generation < 1 || link.generation > 6 || link.width <= 0) return std::nullopt;
  const auto g = static_cast<std::size_t>(link.generation - 1);
  return kGtPerS[g] * kEncoding[g] * link.width / 8;
}

std::vector<NvmlReading> Nvml::sample(int index, double t) const {
  std::vector<NvmlReading> out;
  nvmlDevice d = nullptr;
  if (!available_ || fns_->handle(static_cast<unsigned>(index), &d) != 0) return out;
  const auto& f = *fns_;
  if (NvmlUtilization u{}; f.util && f.util(d, &u) == 0) {
    out.push_back({t, index, "gpu_util_pct", static_cast<double>(u.gpu)});
    out.push_back({t, index, "mem_util_pct", static_cast<double>(u.memory)});
  }
  if (NvmlMemory m{}; f.mem && f.mem(d, &m) == 0)
    out.push_back({t, index, "mem_used_bytes", static_cast<double>(m.used)});
  if (unsigned mw = 0; f.power && f.power(d, &mw) == 0) out.push_back({t, index, "power_w", mw / 1000.0});
  if (unsigned c = 0; f.temp && f.temp(d, kNvmlTemperatureGpu, &c) == 0)
    out.push_back({t, index, "temperature_c", static_cast<double>(c)});
  if (unsigned mhz = 0; f.clock && f.clock(d, kNvmlClockSm, &mhz) == 0)
    out.push_back({t, index, "sm_clock_mhz", static_cast<double>(mhz)});
  if (unsigned kb = 0; f.pcie && f.pcie(d, kNvmlPcieTx, &kb) == 0)
    out.push_back({t, index, "pcie_tx_kbps", static_cast<double>(kb)});
  if (unsigned kb = 0; f.pcie && f.pcie(d, kNvmlPcieRx, &kb) == 0)
    out.push_back({t, index, "pcie_rx_kbps", static_cast<double>(kb)});
  return out;
}

struct NvmlSampler::State {
  std::atomic<bool> stop{false};
  std::mutex m;
  std::vector<NvmlReading> readings;
  std::thread thread;
};

NvmlSampler::NvmlSampler(const Nvml& nvml, double interval_s) : state_(std::make_unique<State>()) {
  if (!nvml.available()) return;
  State* s = state_.get();
  s->thread = std::thread([s, &nvml, interval_s] {
    const auto t0 = std::chrono::steady_clock::now();
    const int n = nvml.device_count();
    while (!s->stop.load()) {
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (int d = 0; d < n; ++d) {
        auto r = nvml.sample(d, t);
        std::lock_guard<std::mutex> lock(s->m);
        s->readings.insert(s->readings.end(), r.begin(), r.end());
      }
      // Short sleeps so stop() returns promptly.
      for (double waited = 0; waited < interval_s && !s->stop.load(); waited += 0.005)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
}

NvmlSampler::~NvmlSampler() {
  stop();
}

std::vector<NvmlReading> NvmlSampler::stop() {
  state_->stop.store(true);
  if (state_->thread.joinable()) state_->thread.join();
  std::lock_guard<std::mutex> lock(state_->m);
  return state_->readings;
}

}  // namespace tokenscope::probe
