// NVML loaded at run time with dlopen (libnvidia-ml.so.1 ships with the
// driver, not the toolkit): no link dependency, and a clean "not available"
// where there is no driver. Only the few calls the probes sample are bound;
// the observe module's GPU collector (observe/gpu_collector.h) binds more
// through the same loading.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tokenscope::probe {

// Opens the NVML shared library with dlopen: `path` when given, else the
// file named by the environment variable TOKENSCOPE_NVML_LIBRARY (a test
// double, or a driver's library outside the loader's path), else
// libnvidia-ml.so.1, then libnvidia-ml.so. Returns the handle, or nullptr
// with `error` set to dlerror()'s text.
void* open_nvml_library(const std::string& path, std::string& error);

// The name of an nvmlReturn_t value as the NVML API reference spells it
// ("NVML_SUCCESS", "NVML_ERROR_DRIVER_NOT_LOADED"); "NVML return code N"
// for a value it does not list.
std::string nvml_return_name(int code);

struct NvmlReading {
  double t_s = 0;  // seconds since the sampler started (steady clock)
  int device = 0;
  std::string name;  // gpu_util_pct, mem_util_pct, power_w, temperature_c, sm_clock_mhz, pcie_tx_kbps,
                     // pcie_rx_kbps, mem_used_bytes
  double value = 0;
};

// A PCIe link: generation (1 = 2.5 GT/s per lane, ..., 6 = 64 GT/s) and lanes.
struct PcieLink {
  int generation = 0;
  int width = 0;
};

// The most one direction of `link` can carry, in GB/s (1e9 bytes/s): the
// lane rate of its generation times the lanes, less the line encoding
// (8b/10b for generations 1 and 2, 128b/130b for 3 to 5; generation 6's
// FLIT mode counted at the full lane rate, an upper bound). Protocol
// overhead is not taken off, so a copy never reaches it. nullopt for a
// generation outside 1..6 or no lanes.
std::optional<double> pcie_peak_gbps(const PcieLink& link);

class Nvml {
 public:
  // Loads and initialises NVML; available() says whether that worked.
  Nvml();
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool available() const { return available_; }
  const std::string& reason() const { return reason_; }
  std::string driver_version() const;
  int device_count() const;
  std::string device_name(int index) const;
  // The fastest, widest PCIe link this device and the system can train to
  // (nvmlDeviceGetMaxPcieLinkGeneration and ...Width; an idle link trains
  // down, so the current one says less). nullopt when NVML does not say.
  std::optional<PcieLink> max_pcie_link(int index) const;
  // One reading of every metric the device answers (unsupported ones are left out).
  std::vector<NvmlReading> sample(int index, double t_s) const;

 private:
  struct Fns;
  void* lib_ = nullptr;
  std::unique_ptr<Fns> fns_;
  bool available_ = false;
  std::string reason_;
};

// Samples every device every interval on its own thread while alive.
class NvmlSampler {
 public:
  NvmlSampler(const Nvml& nvml, double interval_s);
  ~NvmlSampler();
  std::vector<NvmlReading> stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tokenscope::probe
