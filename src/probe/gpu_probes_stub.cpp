// Built when the CUDA toolkit was not found: every GPU probe says so.
#include "probe/gpu_probes.h"

namespace tokenscope::probe {

namespace {
constexpr const char* kNotBuilt =
    "built without the CUDA toolkit (CMake found no CUDAToolkit): GPU probes are not in this binary";
}

bool gpu_probes_built() {
  return false;
}

GpuEnvironment gpu_environment() {
  GpuEnvironment e;
  e.reason = kNotBuilt;
  Nvml nvml;
  if (nvml.available()) e.nvml_driver = nvml.driver_version();
  return e;
}

GpuContextResult run_gpu_context_probe(const GpuContextSettings& s) {
  GpuContextResult r;
  r.settings = s;
  r.env = gpu_environment();
  r.reason = kNotBuilt;
  r.cupti.reason = kNotBuilt;
  return r;
}

KvSwapResult run_kv_swap_probe(const KvSwapSettings& s) {
  KvSwapResult r;
  r.settings = s;
  r.env = gpu_environment();
  r.reason = kNotBuilt;
  r.cupti.reason = kNotBuilt;
  return r;
}

CollectivesResult run_collectives_probe(const CollectivesSettings& s) {
  CollectivesResult r;
  r.settings = s;
  r.env = gpu_environment();
  r.reason = kNotBuilt;
  return r;
}

}  // namespace tokenscope::probe
