// GPU probes, built with the CUDA toolkit. The runtime is linked statically
// (it finds the driver at run time, and a machine without one gets a clean
// error); the driver API comes through cudaGetDriverEntryPointByVersion
// (cuda_driver.h), and CUPTI and NCCL through dlopen, so this binary starts
// anywhere. The probes are host code in gpu_context_probe.cpp,
// kv_swap_probe.cpp and collectives_nccl.cpp; their kernels are in
// gpu_kernels.cu, the one source nvcc compiles.
#include <string>

#include "probe/gpu_cuda.h"
#include "probe/gpu_probes.h"

namespace tokenscope::probe {

std::string cuda_error(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

bool gpu_probes_built() {
  return true;
}

GpuEnvironment gpu_environment() {
  GpuEnvironment e;
  e.built = true;
  cudaRuntimeGetVersion(&e.runtime_version);
  Nvml nvml;
  if (nvml.available()) e.nvml_driver = nvml.driver_version();
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    e.reason = (err == cudaErrorInsufficientDriver && !nvml.available()
                    ? "no GPU here: no NVIDIA driver is installed (" + cuda_error(err) + ")"
                    : "no GPU here (" + cuda_error(err) + ")");
    cudaGetLastError();
    return e;
  }
  if (n == 0) {
    e.reason = "no GPU here (cudaGetDeviceCount returned 0)";
    return e;
  }
  cudaDriverGetVersion(&e.driver_version);
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    GpuDevice d;
    d.index = i;
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.sm_count = p.multiProcessorCount;
    d.memory_bytes = p.totalGlobalMem;
    d.async_engines = p.asyncEngineCount;
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess) d.pci_bus_id = bus;
    e.devices.push_back(d);
  }
  e.available = !e.devices.empty();
  if (!e.available) e.reason = "no GPU answered cudaGetDeviceProperties";
  return e;
}

}  // namespace tokenscope::probe
