// Source "gpu": every GPU NVML sees, read through NVML loaded with dlopen
// (probe/nvml.h's loading: no link dependency on the driver). Per device
// (label gpu="N", NVML's index): utilisation, memory used / total, power,
// SM and memory clocks, PCIe rx / tx throughput, temperature, the
// clocks-event (throttle) reasons bitmask; GPM metrics (DRAM bandwidth
// utilisation, SM activity and occupancy, tensor activity) on devices where
// nvmlGpmQueryDeviceSupport says so, from the previous read's sample to this
// one's (the first read has none); MIG mode and, on a MIG-enabled GPU, each
// instance's memory (labels gpu="N", mig="GPU instance id"). Values in the
// canonical units: ratios 0..1, bytes, Hz, W, B/s. docs/observe.md lists
// every series.
//
// Where NVML cannot be loaded or initialised, the first read comes back with
// Observation::unavailable "NVML not available: <why>" (the dlopen error, or
// the name of nvmlInit_v2's return code). A call a device does not support
// leaves its series out (noted once).
//
// The library: `library_path` when given, else $TOKENSCOPE_NVML_LIBRARY,
// else libnvidia-ml.so.1. Not thread-safe: one thread collects.
#pragma once

#include <memory>
#include <string>

#include "observe/measured_collector.h"

namespace tokenscope::observe {

class GpuCollector final : public MeasuredCollector {
 public:
  explicit GpuCollector(std::string library_path = "");
  ~GpuCollector() override;
  GpuCollector(const GpuCollector&) = delete;
  GpuCollector& operator=(const GpuCollector&) = delete;
  std::string source() const override { return "gpu"; }

 protected:
  Observation read(const Clock& clock) override;

 private:
  struct State;
  // Loads and initialises NVML (first read); false with the reason set.
  bool start();

  std::string library_path_;
  std::unique_ptr<State> state_;
};

}  // namespace tokenscope::observe
