// GPU probes, built with the CUDA toolkit. The runtime is linked statically
// (it finds the driver at run time, and a machine without one gets a clean
// error); the driver API comes through cudaGetDriverEntryPointByVersion, and
// CUPTI and NCCL through dlopen, so this binary starts anywhere.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "probe/gpu_probes.h"

namespace tokenscope::probe {

namespace {

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

std::string cuda_error(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

__global__ void empty_kernel() {}

// Spins until *flag becomes non-zero (host writes it through mapped pinned
// memory) or about `max_cycles` have passed, so a lost release cannot hang.
__global__ void spin_kernel(volatile int* flag, long long max_cycles) {
  const long long t0 = clock64();
  while (*flag == 0 && clock64() - t0 < max_cycles) {
  }
}

// A decode-like, memory-bound kernel: every thread streams over its share of
// the buffer `passes` times and folds it into a sum.
__global__ void decode_kernel(const float4* data, std::size_t n, int passes, float* out) {
  float acc = 0.f;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (int p = 0; p < passes; ++p)
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
         i += stride) {
      const float4 v = data[i];
      acc += v.x + v.y + v.z + v.w;
    }
  if (acc == 1234.5f) *out = acc;  // practically never: keeps the loads alive
}

// ---- driver API through the runtime ---------------------------------------

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

struct Driver {
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
  decltype(&::cuDeviceGetDevResource) get_resource = nullptr;
  decltype(&::cuDevSmResourceSplitByCount) split_sm = nullptr;
  decltype(&::cuDevResourceGenerateDesc) generate_desc = nullptr;
  decltype(&::cuGreenCtxCreate) green_create = nullptr;
  decltype(&::cuGreenCtxDestroy) green_destroy = nullptr;
  decltype(&::cuCtxFromGreenCtx) ctx_from_green = nullptr;
  std::string missing;

  Driver() {
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
    // Green contexts are optional (CUDA 12.4+ drivers).
    driver_entry("cuDeviceGetDevResource", get_resource);
    driver_entry("cuDevSmResourceSplitByCount", split_sm);
    driver_entry("cuDevResourceGenerateDesc", generate_desc);
    driver_entry("cuGreenCtxCreate", green_create);
    driver_entry("cuGreenCtxDestroy", green_destroy);
    driver_entry("cuCtxFromGreenCtx", ctx_from_green);
  }
  bool green() const {
    return get_resource && split_sm && generate_desc && green_create && green_destroy && ctx_from_green;
  }
  std::string err(CUresult r) const {
    const char* s = nullptr;
    if (error_name && error_name(r, &s) == CUDA_SUCCESS && s) return s;
    return "CUresult " + std::to_string(static_cast<int>(r));
  }
};

// ---- CUPTI through dlopen -------------------------------------------------

struct CuptiFns {
  decltype(&::cuptiActivityEnable) enable = nullptr;
  decltype(&::cuptiActivityDisable) disable = nullptr;
  decltype(&::cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&::cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&::cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&::cuptiActivityGetNumDroppedRecords) dropped = nullptr;
};

std::mutex g_cupti_mutex;
CuptiFns g_cupti;
CuptiCapture* g_capture = nullptr;  // the capture being filled (one at a time)

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr std::size_t kBytes = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = *buffer ? kBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_cupti_mutex);
  CUpti_Activity* rec = nullptr;
  while (g_capture && g_cupti.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    CuptiActivity a;
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        a.kind = "memcpy";
        a.name = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "HtoD"
                 : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "DtoH"
                 : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD ? "DtoD"
                                                                  : "memcpy";
        a.start_ns = m->start;
        a.end_ns = m->end;
        a.device = m->deviceId;
        a.context = m->contextId;
        a.stream = m->streamId;
        a.bytes = m->bytes;
        break;
      }
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        a.kind = "kernel";
        a.name = k->name ? k->name : "kernel";
        a.start_ns = k->start;
        a.end_ns = k->end;
        a.device = k->deviceId;
        a.context = k->contextId;
        a.stream = k->streamId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_CONTEXT: {
        const auto* c = reinterpret_cast<const CUpti_ActivityContext3*>(rec);
        a.kind = "context";
        a.name = c->isGreenContext ? "green context" : "context";
        a.device = c->deviceId;
        a.context = c->contextId;
        break;
      }
      default:
        continue;
    }
    if (g_capture->activities.size() >= kMaxCuptiActivities) {
      ++g_capture->capped;
      continue;
    }
    g_capture->activities.push_back(std::move(a));
  }
  if (g_capture && g_cupti.dropped) {
    size_t dropped = 0;
    if (g_cupti.dropped(ctx, stream, &dropped) == CUPTI_SUCCESS) g_capture->dropped += dropped;
  }
  std::free(buffer);
}

// CUPTI is loaded and enabled only for a probe's traced pass: enabling
// activity records makes the driver do more work per context creation and
// per copy, so the measured repetitions run before CUPTI is first loaded
// (and, for later configurations, with its activity kinds disabled). The
// traced pass repeats each measurement once for the timeline and is not in
// the statistics.
class CuptiSession {
 public:
  CuptiSession(CuptiCapture& capture, bool wanted) : capture_(capture), wanted_(wanted) {
    capture.reason = wanted ? "not started" : "disabled (--no-cupti)";
  }
  ~CuptiSession() { finish(); }
  // Starts (or restarts) recording; loads CUPTI the first time.
  void resume() {
    if (!wanted_ || failed_) return;
    if (!lib_ && !load()) {
      failed_ = true;
      return;
    }
    for (const auto& [k, name] : kinds_) {
      const bool already = std::find(enabled_.begin(), enabled_.end(), k) != enabled_.end();
      if (already) {
        if (paused_) g_cupti.enable(k);
        continue;
      }
      if (g_cupti.enable(k) == CUPTI_SUCCESS) {
        enabled_.push_back(k);
        capture_.kinds.push_back(name);
      }
    }
    paused_ = false;
    capture_.enabled = !enabled_.empty();
    capture_.reason = capture_.enabled ? "traced pass only (one extra repetition per measurement, not in the "
                                         "statistics); COMPUTE_ENGINE_CTX_SWITCH: no such activity kind in "
                                         "this CUPTI"
                                       : "no CUPTI activity kind could be enabled";
  }
  // Stops recording and hands the records gathered so far to the capture.
  void pause() {
    if (!lib_ || enabled_.empty() || paused_) return;
    g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    for (auto k : enabled_) g_cupti.disable(k);
    g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    paused_ = true;
  }
  void finish() {
    if (!lib_) return;
    pause();
    {
      std::lock_guard<std::mutex> lock(g_cupti_mutex);
      g_capture = nullptr;
    }
    enabled_.clear();
    lib_ = nullptr;  // CUPTI stays loaded: unloading it under a live driver is not supported
  }

 private:
  bool load() {
    for (const char* n : {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/lib64/libcupti.so",
                          "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"}) {
      lib_ = dlopen(n, RTLD_NOW | RTLD_LOCAL);
      if (lib_) break;
    }
    if (!lib_) {
      capture_.reason = "libcupti.so not found";
      return false;
    }
    auto bind = [&](const char* n, auto& f) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib_, n));
      return f != nullptr;
    };
    CuptiFns f;
    if (!bind("cuptiActivityEnable", f.enable) || !bind("cuptiActivityDisable", f.disable) ||
        !bind("cuptiActivityRegisterCallbacks", f.register_callbacks) ||
        !bind("cuptiActivityFlushAll", f.flush_all) || !bind("cuptiActivityGetNextRecord", f.next_record)) {
      capture_.reason = "libcupti.so lacks the activity API";
      lib_ = nullptr;
      return false;
    }
    bind("cuptiActivityGetNumDroppedRecords", f.dropped);
    {
      std::lock_guard<std::mutex> lock(g_cupti_mutex);
      g_cupti = f;
      g_capture = &capture_;
    }
    if (f.register_callbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
      capture_.reason = "cuptiActivityRegisterCallbacks failed";
      std::lock_guard<std::mutex> lock(g_cupti_mutex);
      g_capture = nullptr;
      lib_ = nullptr;
      return false;
    }
    return true;
  }

  static constexpr std::pair<CUpti_ActivityKind, const char*> kinds_[] = {
      {CUPTI_ACTIVITY_KIND_CONTEXT, "CONTEXT"},
      {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY"},
      {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL"}};
  CuptiCapture& capture_;
  bool wanted_ = false;
  bool failed_ = false;
  bool paused_ = false;
  void* lib_ = nullptr;
  std::vector<CUpti_ActivityKind> enabled_;
};

// ---- shared helpers -------------------------------------------------------

struct Check {
  std::string* error;
  bool operator()(cudaError_t e, const char* what) const {
    if (e == cudaSuccess) return true;
    if (error->empty()) *error = std::string(what) + ": " + cuda_error(e);
    return false;
  }
};

LatencySummary summarize_us(std::vector<double> v) {
  return summarize_latencies(std::move(v));
}

// Fills r.env and says whether device `device` is there to probe; when not,
// r.reason (and r.cupti.reason) say why.
template <typename Result>
bool gpu_ready(Result& r, int device) {
  r.env = gpu_environment();  // declared in gpu_probes.h, defined below
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

}  // namespace

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

// ---- gpu-context ----------------------------------------------------------

GpuContextResult run_gpu_context_probe(const GpuContextSettings& s) {
  GpuContextResult r;
  r.settings = s;
  if (!gpu_ready(r, s.device)) return r;
  Driver drv;
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
      rows.push_back({op, variant, summarize_us(std::move(us)), error});
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
        empty_kernel<<<1, 1>>>();
        drv.ctx_sync();
        first.push_back(us_since(t0));
        t0 = Clock::now();
        empty_kernel<<<1, 1>>>();
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
              empty_kernel<<<1, 1>>>();
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

// ---- kv-swap --------------------------------------------------------------

namespace {

struct SwapBuffers {
  char* host = nullptr;    // tenants x kv pinned
  char* device = nullptr;  // slots x kv
  std::uint64_t host_bytes = 0, device_bytes = 0;
  ~SwapBuffers() {
    if (host) cudaFreeHost(host);
    if (device) cudaFree(device);
  }
};

// Copies are queued behind a spinning kernel so their enqueue cost is not
// timed; the GPU's work queue is finite, though, so after kMaxQueuedCopies the
// kernel is released (`release`) and the rest is enqueued while the copies
// run, as an engine that swaps block by block pays it.
constexpr int kMaxQueuedCopies = 256;

struct CopyQueue {
  int queued = 0;
  bool released = false;
  volatile int* flag = nullptr;  // host side of the spin kernel's flag; null: nothing to release
  void count() {
    if (++queued >= kMaxQueuedCopies) release();
  }
  void release() {
    if (released || !flag) return;
    __atomic_store_n(const_cast<int*>(flag), 1, __ATOMIC_SEQ_CST);
    released = true;
  }
};

void enqueue_copy(char* dst, const char* src, std::uint64_t bytes, std::uint64_t chunk, cudaMemcpyKind kind,
                  cudaStream_t stream, CopyQueue* queue = nullptr) {
  if (chunk == 0 || chunk >= bytes) {
    cudaMemcpyAsync(dst, src, bytes, kind, stream);
    if (queue) queue->count();
    return;
  }
  for (std::uint64_t off = 0; off < bytes; off += chunk) {
    cudaMemcpyAsync(dst + off, src + off, std::min(chunk, bytes - off), kind, stream);
    if (queue) queue->count();
  }
}

}  // namespace

KvSwapResult run_kv_swap_probe(const KvSwapSettings& s) {
  KvSwapResult r;
  r.settings = s;
  if (!gpu_ready(r, s.device)) return r;
  std::string error;
  Check ok{&error};
  if (!ok(cudaSetDevice(s.device), "cudaSetDevice")) {
    r.reason = error;
    return r;
  }
  CuptiSession cupti(r.cupti, s.cupti);
  Nvml nvml;
  NvmlSampler sampler(nvml, s.nvml_interval_s);

  int* flag = nullptr;
  int* flag_dev = nullptr;
  if (!ok(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped), "cudaHostAlloc(mapped flag)") ||
      !ok(cudaHostGetDevicePointer(&flag_dev, flag, 0), "cudaHostGetDevicePointer")) {
    r.reason = error;
    if (flag) cudaFreeHost(flag);
    return r;
  }
  cudaStream_t s_d2h = nullptr, s_h2d = nullptr, s_decode = nullptr;
  cudaStreamCreateWithFlags(&s_d2h, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s_h2d, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s_decode, cudaStreamNonBlocking);
  cudaEvent_t e0, e1, e2, d0, d1;
  for (auto* e : {&e0, &e1, &e2, &d0, &d1}) cudaEventCreate(e);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, s.device);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, s.device);
  const long long spin_cycles = std::max(1LL, static_cast<long long>(clock_khz)) * 1000LL * 10;  // ~10 s

  // Decode kernel buffer: 1 GiB (or less where memory is short).
  std::size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  const std::size_t decode_bytes = std::min<std::size_t>(1ull << 30, free_b / 8);
  float4* decode_buf = nullptr;
  float* decode_out = nullptr;
  if (s.overlap_decode) {
    ok(cudaMalloc(&decode_buf, decode_bytes), "cudaMalloc(decode)");
    ok(cudaMalloc(&decode_out, sizeof(float)), "cudaMalloc");
    if (decode_buf) cudaMemset(decode_buf, 0, decode_bytes);
  }
  const int decode_blocks = prop.multiProcessorCount * 4;
  auto launch_decode = [&](cudaStream_t st) {
    decode_kernel<<<decode_blocks, 256, 0, st>>>(decode_buf, decode_bytes / sizeof(float4), 4, decode_out);
  };
  double decode_alone_ms = 0;
  if (decode_buf) {
    std::vector<double> t;
    for (int i = 0; i < 3; ++i) {
      cudaEventRecord(d0, s_decode);
      launch_decode(s_decode);
      cudaEventRecord(d1, s_decode);
      cudaEventSynchronize(d1);
      float ms = 0;
      cudaEventElapsedTime(&ms, d0, d1);
      t.push_back(ms);
    }
    decode_alone_ms = median_ci(t).median;
  }

  // Times copies queued behind a spin kernel (enqueue cost excluded up to
  // kMaxQueuedCopies), in ms. enqueue(CopyQueue&) issues the copies.
  auto timed_copy = [&](auto&& enqueue, bool both, bool with_decode, double* decode_ms) -> double {
    *flag = 0;
    spin_kernel<<<1, 1, 0, s_d2h>>>(flag_dev, spin_cycles);
    cudaEventRecord(e0, s_d2h);
    if (both) cudaStreamWaitEvent(s_h2d, e0, 0);
    if (with_decode) {
      cudaStreamWaitEvent(s_decode, e0, 0);
      cudaEventRecord(d0, s_decode);
      launch_decode(s_decode);
      cudaEventRecord(d1, s_decode);
    }
    CopyQueue queue;
    queue.flag = flag;
    enqueue(queue);
    cudaEventRecord(e1, s_d2h);
    if (both) cudaEventRecord(e2, s_h2d);
    queue.release();
    cudaEventSynchronize(e1);
    float a = 0, b = 0;
    cudaEventElapsedTime(&a, e0, e1);
    if (both) {
      cudaEventSynchronize(e2);
      cudaEventElapsedTime(&b, e0, e2);
    }
    if (with_decode) {
      cudaEventSynchronize(d1);
      float m = 0;
      cudaEventElapsedTime(&m, d0, d1);
      *decode_ms = m;
    }
    return std::max(a, b);
  };

  for (int tenants : s.tenants)
    for (std::uint64_t kv : s.kv_bytes)
      for (std::uint64_t chunk : s.chunk_bytes)
        for (int overlap = 0; overlap <= (s.overlap_decode && decode_buf ? 1 : 0); ++overlap) {
          KvSwapRow row;
          row.tenants = tenants;
          row.kv_bytes = kv;
          row.chunk_bytes = chunk;
          row.overlapped = overlap == 1;
          const int resident = std::max(1, tenants / 2);
          SwapBuffers buf;
          buf.host_bytes = static_cast<std::uint64_t>(tenants) * kv;
          buf.device_bytes =
              static_cast<std::uint64_t>(resident + 1) * kv;  // one spare slot for two-way copies
          cudaMemGetInfo(&free_b, &total_b);
          if (buf.host_bytes > s.max_host_bytes) {
            row.skipped = "needs " + std::to_string(buf.host_bytes >> 20) +
                          " MiB pinned host memory (cap --max-host-mib)";
          } else if (buf.device_bytes > free_b * 0.9) {
            row.skipped = "needs " + std::to_string(buf.device_bytes >> 20) + " MiB GPU memory";
          } else if (cudaHostAlloc(&buf.host, buf.host_bytes, cudaHostAllocDefault) != cudaSuccess) {
            row.skipped = "cudaHostAlloc failed";
            cudaGetLastError();
          } else if (cudaMalloc(&buf.device, buf.device_bytes) != cudaSuccess) {
            row.skipped = "cudaMalloc failed";
            cudaGetLastError();
          }
          if (!row.skipped.empty()) {
            r.rows.push_back(row);
            continue;
          }
          std::memset(buf.host, 1, buf.host_bytes);
          cudaMemset(buf.device, 2, buf.device_bytes);
          cudaDeviceSynchronize();
          auto host_of = [&](int t) { return buf.host + static_cast<std::uint64_t>(t) * kv; };
          auto slot = [&](int i) { return buf.device + static_cast<std::uint64_t>(i) * kv; };
          std::vector<double> d2h, h2d, bidir, slow;
          for (int rep = 0; rep < s.repetitions; ++rep) {
            double dm = 0;
            double ms = timed_copy(
                [&](CopyQueue& q) {
                  enqueue_copy(host_of(0), slot(0), kv, chunk, cudaMemcpyDeviceToHost, s_d2h, &q);
                },
                false, row.overlapped, &dm);
            d2h.push_back(kv / (ms * 1e6));
            if (row.overlapped && decode_alone_ms > 0) slow.push_back(dm / decode_alone_ms);
            ms = timed_copy(
                [&](CopyQueue& q) {
                  enqueue_copy(slot(0), host_of(1 % tenants), kv, chunk, cudaMemcpyHostToDevice, s_d2h, &q);
                },
                false, row.overlapped, &dm);
            h2d.push_back(kv / (ms * 1e6));
            ms = timed_copy(
                [&](CopyQueue& q) {
                  enqueue_copy(host_of(0), slot(0), kv, chunk, cudaMemcpyDeviceToHost, s_d2h, &q);
                  enqueue_copy(slot(resident), host_of(1 % tenants), kv, chunk, cudaMemcpyHostToDevice, s_h2d,
                               &q);
                },
                true, row.overlapped, &dm);
            bidir.push_back(2.0 * kv / (ms * 1e6));
          }
          row.d2h_gbps = median_ci(d2h);
          row.h2d_gbps = median_ci(h2d);
          row.bidir_gbps = median_ci(bidir);
          if (!slow.empty()) row.decode_slowdown = median_ci(slow).median;

          // Switch latency: round-robin over the tenants; the resident tenant
          // longest in the GPU is evicted (D2H) and the next one restored (H2D)
          // into its slot, as the engine sees it (enqueue included).
          std::vector<int> slot_owner(static_cast<std::size_t>(resident));
          for (int i = 0; i < resident; ++i) slot_owner[static_cast<std::size_t>(i)] = i;
          int next = resident % tenants, victim_slot = 0;
          std::vector<double> sw;
          for (int k = 0; k < s.switches; ++k) {
            if (row.overlapped) launch_decode(s_decode);
            const int victim = slot_owner[static_cast<std::size_t>(victim_slot)];
            cudaEventRecord(e0, s_d2h);
            enqueue_copy(host_of(victim), slot(victim_slot), kv, chunk, cudaMemcpyDeviceToHost, s_d2h);
            enqueue_copy(slot(victim_slot), host_of(next), kv, chunk, cudaMemcpyHostToDevice, s_d2h);
            cudaEventRecord(e1, s_d2h);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            sw.push_back(ms);
            slot_owner[static_cast<std::size_t>(victim_slot)] = next;
            victim_slot = (victim_slot + 1) % resident;
            next = (next + 1) % tenants;
            if (tenants <= resident) next = victim;  // every tenant fits: swap the same two back and forth
          }
          cudaStreamSynchronize(s_decode);
          row.switch_ms = summarize_latencies(sw);
          // Traced pass: each copy pattern once more, and two switches, with
          // CUPTI recording; not in the statistics.
          if (s.cupti) {
            cupti.resume();
            double dm = 0;
            timed_copy(
                [&](CopyQueue& q) {
                  enqueue_copy(host_of(0), slot(0), kv, chunk, cudaMemcpyDeviceToHost, s_d2h, &q);
                },
                false, row.overlapped, &dm);
            timed_copy(
                [&](CopyQueue& q) {
                  enqueue_copy(host_of(0), slot(0), kv, chunk, cudaMemcpyDeviceToHost, s_d2h, &q);
                  enqueue_copy(slot(resident), host_of(1 % tenants), kv, chunk, cudaMemcpyHostToDevice, s_h2d,
                               &q);
                },
                true, row.overlapped, &dm);
            for (int k = 0; k < std::min(2, s.switches); ++k) {
              if (row.overlapped) launch_decode(s_decode);
              enqueue_copy(host_of(0), slot(0), kv, chunk, cudaMemcpyDeviceToHost, s_d2h);
              enqueue_copy(slot(0), host_of(1 % tenants), kv, chunk, cudaMemcpyHostToDevice, s_d2h);
            }
            cudaDeviceSynchronize();
            cupti.pause();
          }
          if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) row.skipped = cuda_error(e);
          r.rows.push_back(row);
        }
  flag_small_transfer_collapse(r.rows);
  for (const auto& row : r.rows)
    if (row.small_transfer_collapse)
      r.findings.push_back(
          "many-small-transfers collapse: " + std::to_string(row.chunk_bytes >> 10) + " KiB copies of a " +
          std::to_string(row.kv_bytes >> 20) + " MiB cache reach " +
          std::to_string(static_cast<int>(std::min(row.d2h_gbps.median, row.h2d_gbps.median))) +
          " GB/s, under half of one whole copy");
  if (decode_alone_ms > 0)
    r.findings.push_back("decode kernel alone: " + std::to_string(decode_alone_ms) + " ms per launch");
  for (auto* e : {e0, e1, e2, d0, d1}) cudaEventDestroy(e);
  cudaFreeHost(flag);
  if (decode_buf) cudaFree(decode_buf);
  if (decode_out) cudaFree(decode_out);
  cudaStreamDestroy(s_d2h);
  cudaStreamDestroy(s_h2d);
  cudaStreamDestroy(s_decode);
  cupti.finish();
  r.nvml = sampler.stop();
  r.ran = true;
  return r;
}

// ---- collectives (NCCL) ---------------------------------------------------

CollectivesResult run_collectives_probe(const CollectivesSettings& s) {
  CollectivesResult r;
  r.settings = s;
  r.env = gpu_environment();
  if (!r.env.available) {
    r.reason = r.env.reason;
    return r;
  }
  void* lib = nullptr;
  for (const char* n : {"libnccl.so.2", "libnccl.so", "/usr/local/cuda/lib64/libnccl.so.2"}) {
    lib = dlopen(n, RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
  }
  if (!lib) {
    r.reason = "libnccl.so.2 not found";
    return r;
  }
  struct {
    decltype(&::ncclGetVersion) version;
    decltype(&::ncclCommInitAll) init_all;
    decltype(&::ncclCommDestroy) destroy;
    decltype(&::ncclAllReduce) all_reduce;
    decltype(&::ncclSend) send;
    decltype(&::ncclRecv) recv;
    decltype(&::ncclGroupStart) group_start;
    decltype(&::ncclGroupEnd) group_end;
    decltype(&::ncclGetErrorString) error_string;
  } nc{};
  auto bind = [&](const char* n, auto& f) {
    f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib, n));
    return f != nullptr;
  };
  if (!bind("ncclGetVersion", nc.version) || !bind("ncclCommInitAll", nc.init_all) ||
      !bind("ncclCommDestroy", nc.destroy) || !bind("ncclAllReduce", nc.all_reduce) ||
      !bind("ncclSend", nc.send) || !bind("ncclRecv", nc.recv) || !bind("ncclGroupStart", nc.group_start) ||
      !bind("ncclGroupEnd", nc.group_end) || !bind("ncclGetErrorString", nc.error_string)) {
    r.reason = "libnccl.so.2 lacks an entry point this probe needs";
    return r;
  }
  int v = 0;
  nc.version(&v);
  r.nccl_version =
      std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
  const int n = static_cast<int>(r.env.devices.size());
  r.ranks = n;
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(n));
  std::vector<int> devs(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) devs[static_cast<std::size_t>(i)] = i;
  if (ncclResult_t rc = nc.init_all(comms.data(), n, devs.data()); rc != ncclSuccess) {
    r.reason = std::string("ncclCommInitAll: ") + nc.error_string(rc);
    return r;
  }
  const std::uint64_t max_bytes = std::max<std::uint64_t>(s.max_bytes, 8);
  std::vector<float*> send(static_cast<std::size_t>(n)), recv(static_cast<std::size_t>(n));
  std::vector<cudaStream_t> streams(static_cast<std::size_t>(n));
  std::vector<cudaEvent_t> start(static_cast<std::size_t>(n)), stop(static_cast<std::size_t>(n));
  std::string error;
  Check ok{&error};
  for (int i = 0; i < n; ++i) {
    const auto u = static_cast<std::size_t>(i);
    cudaSetDevice(i);
    ok(cudaMalloc(&send[u], max_bytes), "cudaMalloc");
    ok(cudaMalloc(&recv[u], max_bytes), "cudaMalloc");
    if (send[u]) cudaMemset(send[u], 0, max_bytes);
    cudaStreamCreateWithFlags(&streams[u], cudaStreamNonBlocking);
    cudaEventCreate(&start[u]);
    cudaEventCreate(&stop[u]);
  }
  if (!error.empty()) {
    r.reason = error;
    return r;
  }
  // Runs op() `iterations` times after warm-up; returns us per call (the
  // slowest rank's).
  auto time_op = [&](auto&& op) {
    for (int w = 0; w < s.warmup; ++w) op();
    for (int i = 0; i < n; ++i) {
      cudaSetDevice(i);
      cudaStreamSynchronize(streams[static_cast<std::size_t>(i)]);
      cudaEventRecord(start[static_cast<std::size_t>(i)], streams[static_cast<std::size_t>(i)]);
    }
    for (int it = 0; it < s.iterations; ++it) op();
    double worst = 0;
    for (int i = 0; i < n; ++i) {
      const auto u = static_cast<std::size_t>(i);
      cudaSetDevice(i);
      cudaEventRecord(stop[u], streams[u]);
      cudaEventSynchronize(stop[u]);
      float ms = 0;
      cudaEventElapsedTime(&ms, start[u], stop[u]);
      worst = std::max(worst, static_cast<double>(ms));
    }
    return worst * 1e3 / std::max(1, s.iterations);
  };
  const double ar_factor = busbw_factor("all_reduce", n).value_or(0.0);
  const double a2a_factor = busbw_factor("alltoall", n).value_or(0.0);
  for (std::uint64_t bytes = std::max<std::uint64_t>(s.min_bytes, 4 * static_cast<std::uint64_t>(n));
       bytes <= max_bytes; bytes *= static_cast<std::uint64_t>(std::max(2, s.factor))) {
    const std::size_t count = bytes / sizeof(float);
    const double t_ar = time_op([&] {
      nc.group_start();
      for (int i = 0; i < n; ++i) {
        const auto u = static_cast<std::size_t>(i);
        nc.all_reduce(send[u], recv[u], count, ncclFloat, ncclSum, comms[u], streams[u]);
      }
      nc.group_end();
    });
    CollectiveRow ar;
    ar.bytes = static_cast<double>(count * sizeof(float));
    ar.count = static_cast<double>(count);
    ar.type = "float";
    ar.redop = "sum";
    ar.time_us = t_ar;
    ar.algbw_gbps = ar.bytes / (t_ar * 1e3);
    ar.busbw_gbps = ar.algbw_gbps * ar_factor;
    r.all_reduce.push_back(ar);
    const std::size_t per_peer = count / static_cast<std::size_t>(n);
    if (per_peer == 0) continue;
    const double t_a2a = time_op([&] {
      nc.group_start();
      for (int i = 0; i < n; ++i) {
        const auto u = static_cast<std::size_t>(i);
        for (int p = 0; p < n; ++p) {
          nc.send(send[u] + static_cast<std::size_t>(p) * per_peer, per_peer, ncclFloat, p, comms[u],
                  streams[u]);
          nc.recv(recv[u] + static_cast<std::size_t>(p) * per_peer, per_peer, ncclFloat, p, comms[u],
                  streams[u]);
        }
      }
      nc.group_end();
    });
    CollectiveRow a2a;
    a2a.bytes = static_cast<double>(per_peer * static_cast<std::size_t>(n) * sizeof(float));
    a2a.count = static_cast<double>(per_peer * static_cast<std::size_t>(n));
    a2a.type = "float";
    a2a.redop = "none";
    a2a.time_us = t_a2a;
    a2a.algbw_gbps = a2a.bytes / (t_a2a * 1e3);
    a2a.busbw_gbps = a2a.algbw_gbps * a2a_factor;
    r.alltoall.push_back(a2a);
  }
  r.all_reduce_analysis = analyze_collective("all_reduce", n, r.all_reduce);
  r.alltoall_analysis = analyze_collective("alltoall", n, r.alltoall);
  if (s.pairs && n > 1) {
    const std::size_t count = max_bytes / sizeof(float);
    r.pair_gbps.assign(static_cast<std::size_t>(n), std::vector<double>(static_cast<std::size_t>(n), 0.0));
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) {
        if (a == b) continue;
        const auto ua = static_cast<std::size_t>(a), ub = static_cast<std::size_t>(b);
        const double us = time_op([&] {
          nc.group_start();
          nc.send(send[ua], count, ncclFloat, b, comms[ua], streams[ua]);
          nc.recv(recv[ub], count, ncclFloat, a, comms[ub], streams[ub]);
          nc.group_end();
        });
        r.pair_gbps[ua][ub] = static_cast<double>(count * sizeof(float)) / (us * 1e3);
      }
    r.slow = slow_pairs(r.pair_gbps);
  }
  for (int i = 0; i < n; ++i) {
    const auto u = static_cast<std::size_t>(i);
    cudaSetDevice(i);
    cudaFree(send[u]);
    cudaFree(recv[u]);
    cudaStreamDestroy(streams[u]);
    cudaEventDestroy(start[u]);
    cudaEventDestroy(stop[u]);
    nc.destroy(comms[u]);
  }
  r.ran = true;
  return r;
}

}  // namespace tokenscope::probe
