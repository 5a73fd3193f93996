#include "probe/cupti_session.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

namespace tokenscope::probe {

namespace {

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

constexpr std::pair<CUpti_ActivityKind, const char*> kKinds[] = {
    {CUPTI_ACTIVITY_KIND_CONTEXT, "CONTEXT"},
    {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY"},
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL"}};

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

}  // namespace

CuptiSession::CuptiSession(CuptiCapture& capture, bool wanted) : capture_(capture), wanted_(wanted) {
  capture.reason = wanted ? "not started" : "disabled (--no-cupti)";
}

CuptiSession::~CuptiSession() {
  finish();
}

void CuptiSession::resume() {
  if (!wanted_ || failed_) return;
  if (!lib_ && !load()) {
    failed_ = true;
    return;
  }
  for (const auto& [k, name] : kKinds) {
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

void CuptiSession::pause() {
  if (!lib_ || enabled_.empty() || paused_) return;
  g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (auto k : enabled_) g_cupti.disable(k);
  g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  paused_ = true;
}

void CuptiSession::finish() {
  if (!lib_) return;
  pause();
  {
    std::lock_guard<std::mutex> lock(g_cupti_mutex);
    g_capture = nullptr;
  }
  enabled_.clear();
  lib_ = nullptr;
}

bool CuptiSession::load() {
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

}  // namespace tokenscope::probe
