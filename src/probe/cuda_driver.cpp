#include "probe/cuda_driver.h"

#include <cuda_runtime.h>

namespace tokenscope::probe {

namespace {

template <typename F>
bool driver_entry(const char* name, F& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, CUDART_VERSION, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !p) {
    fn = nullptr;
    return false;
  }
  fn = reinterpret_cast<F>(p);
  return true;
}

}  // namespace

CudaDriver::CudaDriver() {
  auto need = [&](const char* n, auto& f) {
    if (!driver_entry(n, f)) missing += std::string(missing.empty() ? "" : ", ") + n;
  };
  need("cuInit", init);
  need("cuDeviceGet", device_get);
  need("cuCtxCreate", ctx_create);
  need("cuCtxDestroy", ctx_destroy);
  need("cuCtxSetCurrent", ctx_set_current);
  need("cuCtxPushCurrent", ctx_push);
  need("cuCtxPopCurrent", ctx_pop);
  need("cuCtxSynchronize", ctx_sync);
  need("cuDevicePrimaryCtxRetain", primary_retain);
  need("cuDevicePrimaryCtxRelease", primary_release);
  need("cuGetErrorName", error_name);
  driver_entry("cuDeviceGetDevResource", get_resource);
  driver_entry("cuDevSmResourceSplitByCount", split_sm);
  driver_entry("cuDevResourceGenerateDesc", generate_desc);
  driver_entry("cuGreenCtxCreate", green_create);
  driver_entry("cuGreenCtxDestroy", green_destroy);
  driver_entry("cuCtxFromGreenCtx", ctx_from_green);
}

bool CudaDriver::green() const {
  return get_resource && split_sm && generate_desc && green_create && green_destroy && ctx_from_green;
}

std::string CudaDriver::err(CUresult r) const {
  const char* s = nullptr;
  if (error_name && error_name(r, &s) == CUDA_SUCCESS && s) return s;
  return "CUresult " + std::to_string(static_cast<int>(r));
}

}  // namespace tokenscope::probe
