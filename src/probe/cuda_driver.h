// The CUDA driver API as the GPU probes reach it: through the runtime's
// cudaGetDriverEntryPointByVersion, so the binary has no link dependency on
// libcuda and starts on a machine without a driver. Used by the CUDA build's
// probes only (host code, compiled by the C++ compiler).
#pragma once

#include <cuda.h>

#include <string>

namespace tokenscope::probe {

struct CudaDriver {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuCtxCreate) ctx_create = nullptr;
  decltype(&::cuCtxDestroy) ctx_destroy = nullptr;
  decltype(&::cuCtxSetCurrent) ctx_set_current = nullptr;
  decltype(&::cuCtxPushCurrent) ctx_push = nullptr;
  decltype(&::cuCtxPopCurrent) ctx_pop = nullptr;
  decltype(&::cuCtxSynchronize) ctx_sync = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primary_retain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) primary_release = nullptr;
  decltype(&::cuGetErrorName) error_name = nullptr;
  // Green contexts: optional (drivers of CUDA 12.4 and later).
  decltype(&::cuDeviceGetDevResource) get_resource = nullptr;
  decltype(&::cuDevSmResourceSplitByCount) split_sm = nullptr;
  decltype(&::cuDevResourceGenerateDesc) generate_desc = nullptr;
  decltype(&::cuGreenCtxCreate) green_create = nullptr;
  decltype(&::cuGreenCtxDestroy) green_destroy = nullptr;
  decltype(&::cuCtxFromGreenCtx) ctx_from_green = nullptr;
  // The required entry points the driver did not give, comma-separated;
  // empty when every one of them is bound.
  std::string missing;

  // Binds every entry point (at the ABI version of the runtime this binary
  // was built with).
  CudaDriver();
  // Whether every green-context entry point is bound.
  bool green() const;
  // The CUresult's name ("CUDA_ERROR_OUT_OF_MEMORY"), or its number when the
  // driver cannot name it.
  std::string err(CUresult r) const;
};

}  // namespace tokenscope::probe
