// Helpers shared by the CUDA build's probe sources (gpu_environment_cuda.cpp,
// gpu_context_probe.cpp, kv_swap_probe.cpp, collectives_nccl.cpp): runtime
// error text, a first-error recorder, and the readiness check of a probe.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "probe/gpu_probes.h"

namespace tokenscope::probe {

// "cudaErrorMemoryAllocation: out of memory".
std::string cuda_error(cudaError_t e);

// Records the first failing runtime call in *error ("what: name: text") and
// says whether the call succeeded.
struct CudaCheck {
  std::string* error;
  bool operator()(cudaError_t e, const char* what) const {
    if (e == cudaSuccess) return true;
    if (error->empty()) *error = std::string(what) + ": " + cuda_error(e);
    return false;
  }
};

// Fills r.env and says whether device `device` is there to probe; when not,
// r.reason (and r.cupti.reason) say why.
template <typename Result>
bool gpu_ready(Result& r, int device) {
  r.env = gpu_environment();
  if (!r.env.available) {
    r.reason = r.env.reason;
    r.cupti.reason = r.env.reason;
    return false;
  }
  if (device < 0 || device >= static_cast<int>(r.env.devices.size())) {
    r.reason =
        "no device " + std::to_string(device) + " (" + std::to_string(r.env.devices.size()) + " visible)";
    r.cupti.reason = r.reason;
    return false;
  }
  return true;
}

}  // namespace tokenscope::probe
