// `probe gpu-context`: the cost of creating, switching and destroying CUDA
// contexts (plain, primary, green) and of a fresh context's first launch,
// timed on the host around driver-API calls.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "probe/cuda_driver.h"
#include "probe/cupti_session.h"
#include "probe/gpu_cuda.h"
#include "probe/gpu_kernels.h"
#include "probe/gpu_probes.h"

namespace tokenscope::probe {

namespace {

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

}  // namespace

// Long: the probe's protocol in the order it runs on the device (contexts,
// green contexts, switches, CUPTI); the steps share the contexts they make.
GpuContextResult run_gpu_context_probe(const GpuContextSettings& s) {
  GpuContextResult r;
  r.settings = s;
  if (!gpu_ready(r, s.device)) return r;
  CudaDriver drv;
  if (!drv.missing.empty()) {
    r.reason = "the driver lacks " + drv.missing;
    return r;
  }
  CuptiSession cupti(r.cupti, s.cupti);
  Nvml nvml;
  NvmlSampler sampler(nvml, 0.05);
  drv.init(0);
  CUdevice dev = 0;
  drv.device_get(&dev, s.device);
  // Every measurement, `reps` times each, into rows (the traced pass runs
  // it once more with CUPTI on and throws its rows away).
  auto measure = [&](int reps, std::vector<LatencyRow>& rows, std::string& green_note) {
    // Plain contexts: no creation parameters (neither execution affinity
    // nor CIG), passed as NULL as CUDA 13's cuCtxCreate (_v4) allows.
    CUctxCreateParams* no_params = nullptr;

    auto add = [&](const std::string& op, const std::string& variant, std::vector<double> us,
                   const std::string& error) {
      rows.push_back({op, variant, summarize_latencies(std::move(us)), error});
    };

    const std::pair<unsigned, const char*> flags[] = {{CU_CTX_SCHED_SPIN, "spin"},
                                                      {CU_CTX_SCHED_YIELD, "yield"},
                                                      {CU_CTX_SCHED_BLOCKING_SYNC, "blocking_sync"}};
    for (const auto& [flag, name] : flags) {
      std::vector<double> create, destroy;
      std::string error;
      for (int i = 0; i < reps && error.empty(); ++i) {
        CUcontext ctx = nullptr;
        auto t0 = Clock::now();
        const CUresult rc = drv.ctx_create(&ctx, no_params, flag, dev);
        const double c = us_since(t0);
        if (rc != CUDA_SUCCESS) {
          error = drv.err(rc);
          break;
        }
        create.push_back(c);
        t0 = Clock::now();
        drv.ctx_destroy(ctx);
        destroy.push_back(us_since(t0));
      }
      add("cuCtxCreate", name, create, error);
      add("cuCtxDestroy", name, destroy, error);
    }

    // Switching between two live contexts, and push/pop.
    {
      CUcontext a = nullptr, b = nullptr;
      std::string error;
      if (CUresult rc = drv.ctx_create(&a, no_params, CU_CTX_SCHED_SPIN, dev); rc != CUDA_SUCCESS)
        error = drv.err(rc);
      if (error.empty())
        if (CUresult rc = drv.ctx_create(&b, no_params, CU_CTX_SCHED_SPIN, dev); rc != CUDA_SUCCESS)
          error = drv.err(rc);
      std::vector<double> set, push, pop;
      for (int i = 0; i < reps && error.empty(); ++i) {
        auto t0 = Clock::now();
        drv.ctx_set_current(i % 2 ? a : b);
        set.push_back(us_since(t0));
        t0 = Clock::now();
        drv.ctx_push(i % 2 ? b : a);
        push.push_back(us_since(t0));
        CUcontext popped = nullptr;
        t0 = Clock::now();
        drv.ctx_pop(&popped);
        pop.push_back(us_since(t0));
      }
      add("cuCtxSetCurrent (alternating 2)", "", set, error);
      add("cuCtxPushCurrent", "", push, error);
      add("cuCtxPopCurrent", "", pop, error);
      drv.ctx_set_current(nullptr);
      if (a) drv.ctx_destroy(a);
      if (b) drv.ctx_destroy(b);
    }

    // Primary context: retain with the count at zero creates it; release to
    // zero destroys it. Warm retains (count already > 0) are also timed.
    {
      std::vector<double> cold, release, warm;
      std::string error;
      for (int i = 0; i < reps && error.empty(); ++i) {
        CUcontext p = nullptr;
        auto t0 = Clock::now();
        const CUresult rc = drv.primary_retain(&p, dev);
        if (rc != CUDA_SUCCESS) {
          error = drv.err(rc);
          break;
        }
        cold.push_back(us_since(t0));
        CUcontext q = nullptr;
        t0 = Clock::now();
        drv.primary_retain(&q, dev);
        warm.push_back(us_since(t0));
        drv.primary_release(dev);
        t0 = Clock::now();
        drv.primary_release(dev);
        release.push_back(us_since(t0));
      }
      add("cuDevicePrimaryCtxRetain (first)", "", cold, error);
      add("cuDevicePrimaryCtxRetain (held)", "", warm, error);
      add("cuDevicePrimaryCtxRelease (last)", "", release, error);
    }

    // First kernel launch in a fresh context (module load, launch setup),
    // against the second launch in the same context.
    {
      std::vector<double> first, second;
      std::string error;
      for (int i = 0; i < reps && error.empty(); ++i) {
        CUcontext ctx = nullptr;
        if (CUresult rc = drv.ctx_create(&ctx, no_params, CU_CTX_SCHED_SPIN, dev); rc != CUDA_SUCCESS) {
          error = drv.err(rc);
          break;
        }
        drv.ctx_set_current(ctx);
        auto t0 = Clock::now();
        launch_empty_kernel();
        drv.ctx_sync();
        first.push_back(us_since(t0));
        t0 = Clock::now();
        launch_empty_kernel();
        drv.ctx_sync();
        second.push_back(us_since(t0));
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) error = cuda_error(e);
        drv.ctx_set_current(nullptr);
        drv.ctx_destroy(ctx);
      }
      add("first kernel launch+sync (fresh ctx)", "", first, error);
      add("second kernel launch+sync", "", second, error);
    }

    // Green contexts over an SM partition.
    if (!s.green_contexts) {
      green_note = "not measured (--no-green)";
    } else if (!drv.green()) {
      green_note = "not supported by this driver (no cuGreenCtxCreate entry point)";
    } else {
      CUdevResource all{};
      CUresult rc = drv.get_resource(dev, &all, CU_DEV_RESOURCE_TYPE_SM);
      if (rc != CUDA_SUCCESS) {
        green_note = "cuDeviceGetDevResource(SM) failed: " + drv.err(rc);
      } else {
        // Half the SMs, on the partition granularity the driver reports
        // (co-scheduled alignment, minimum partition size).
        const unsigned total = all.sm.smCount;
        const unsigned align = std::max(1u, all.sm.smCoscheduledAlignment);
        const unsigned least = std::max({align, all.sm.minSmPartitionSize, 1u});
        const unsigned want = std::min(total, std::max(least, (total / 2) / align * align));
        CUdevResource part{}, rest{};
        unsigned groups = 1;
        rc = drv.split_sm(&part, &groups, &all, &rest, 0, want);
        CUdevResourceDesc desc{};
        if (rc == CUDA_SUCCESS) rc = drv.generate_desc(&desc, &part, 1);
        if (rc != CUDA_SUCCESS) {
          green_note = "SM split of " + std::to_string(want) + " of " + std::to_string(total) +
                       " failed: " + drv.err(rc);
        } else {
          green_note =
              "partition of " + std::to_string(part.sm.smCount) + " of " + std::to_string(total) + " SMs";
          std::vector<double> create, destroy, launch;
          std::string error;
          for (int i = 0; i < reps && error.empty(); ++i) {
            CUgreenCtx g = nullptr;
            auto t0 = Clock::now();
            rc = drv.green_create(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
            if (rc != CUDA_SUCCESS) {
              error = drv.err(rc);
              break;
            }
            create.push_back(us_since(t0));
            CUcontext ctx = nullptr;
            if (drv.ctx_from_green(&ctx, g) == CUDA_SUCCESS) {
              drv.ctx_set_current(ctx);
              t0 = Clock::now();
              launch_empty_kernel();
              drv.ctx_sync();
              launch.push_back(us_since(t0));
              drv.ctx_set_current(nullptr);
            }
            t0 = Clock::now();
            drv.green_destroy(g);
            destroy.push_back(us_since(t0));
          }
          add("cuGreenCtxCreate", "", create, error);
          add("cuGreenCtxDestroy", "", destroy, error);
          add("first kernel launch+sync (green ctx)", "", launch, error);
        }
      }
    }
  };
  measure(std::max(1, s.repetitions), r.rows, r.green_note);
  if (s.cupti) {
    std::vector<LatencyRow> traced;
    std::string note;
    cupti.resume();
    measure(1, traced, note);
    cupti.pause();
  }
  cupti.finish();
  r.nvml = sampler.stop();
  r.ran = true;
  return r;
}

}  // namespace tokenscope::probe
