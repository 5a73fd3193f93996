// CUPTI activity records for the GPU probes' traced pass, with CUPTI loaded
// through dlopen (libcupti ships with the toolkit, not the driver: a machine
// without it gets a reason, not a failed start). Used by the CUDA build's
// probes only (host code, compiled by the C++ compiler).
#pragma once

#include <cupti.h>

#include <vector>

#include "probe/gpu_probes.h"

namespace tokenscope::probe {

// CUPTI is loaded and enabled only for a probe's traced pass: enabling
// activity records makes the driver do more work per context creation and
// per copy, so the measured repetitions run before CUPTI is first loaded
// (and, for later configurations, with its activity kinds disabled). The
// traced pass repeats each measurement once for the timeline and is not in
// the statistics.
//
// One session at a time per process: CUPTI delivers records to callbacks
// with no user pointer, so the capture being filled is process-wide state
// (guarded by a mutex, as CUPTI calls back from its own thread).
class CuptiSession {
 public:
  // `capture` receives the records and the reason; it must outlive the
  // session. With `wanted` false the session does nothing
  // ("disabled (--no-cupti)").
  CuptiSession(CuptiCapture& capture, bool wanted);
  ~CuptiSession();
  CuptiSession(const CuptiSession&) = delete;
  CuptiSession& operator=(const CuptiSession&) = delete;

  // Starts (or restarts) recording; loads CUPTI the first time.
  void resume();
  // Stops recording and hands the records gathered so far to the capture.
  void pause();
  // Stops recording for good and detaches the capture. CUPTI stays loaded:
  // unloading it under a live driver is not supported.
  void finish();

 private:
  bool load();

  CuptiCapture& capture_;
  bool wanted_ = false;
  bool failed_ = false;
  bool paused_ = false;
  void* lib_ = nullptr;
  std::vector<CUpti_ActivityKind> enabled_;
};

}  // namespace tokenscope::probe
