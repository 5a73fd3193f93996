#include "probe/pfm_events.h"

#include <perfmon/pfmlib_perf_event.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace tokenscope::probe::pfm {

namespace {

std::mutex g_mutex;
bool g_initialized = false;
int g_init_status = PFM_SUCCESS;

// Call with g_mutex held.
int ensure_initialized() {
  if (!g_initialized) {
    g_init_status = pfm_initialize();
    g_initialized = true;
  }
  return g_init_status;
}

}  // namespace

bool encode(const std::string& name, EventSpec* out, std::string* error) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const int rc = ensure_initialized(); rc != PFM_SUCCESS) {
    *error = std::string("libpfm4 did not initialize: ") + pfm_strerror(rc);
    return false;
  }
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  char* fstr = nullptr;
  pfm_perf_encode_arg_t arg;
  std::memset(&arg, 0, sizeof arg);
  arg.size = sizeof arg;
  arg.attr = &attr;
  arg.fstr = &fstr;
  const int rc = pfm_get_os_event_encoding(name.c_str(), PFM_PLM3, PFM_OS_PERF_EVENT_EXT, &arg);
  if (rc != PFM_SUCCESS) {
    *error = std::string("libpfm4: ") + pfm_strerror(rc);
    std::free(fstr);
    return false;
  }
  out->name = name;
  out->encoding = fstr ? fstr : name;
  out->source = "libpfm4";
  out->type = attr.type;
  out->config = attr.config;
  out->config1 = attr.config1;
  out->config2 = attr.config2;
  std::free(fstr);
  return true;
}

std::vector<PmuEvents> pmus(bool with_events, const std::string& only_pmu) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<PmuEvents> out;
  if (ensure_initialized() != PFM_SUCCESS) return out;
  int p = 0;
  pfm_for_all_pmus(p) {
    pfm_pmu_info_t info;
    std::memset(&info, 0, sizeof info);
    info.size = sizeof info;
    if (pfm_get_pmu_info(static_cast<pfm_pmu_t>(p), &info) != PFM_SUCCESS || !info.is_present) continue;
    if (!only_pmu.empty() && only_pmu != info.name) continue;
    PmuEvents pe;
    pe.pmu = info.name ? info.name : "";
    pe.description = info.desc ? info.desc : "";
    pe.is_default = info.is_dfl != 0;
    // Core PMUs and perf's generic one count per thread; uncore and RAPL
    // PMUs only system-wide.
    pe.core = info.type == PFM_PMU_TYPE_CORE || info.type == PFM_PMU_TYPE_OS_GENERIC;
    pe.event_count = info.nevents;
    if (with_events) {
      for (int e = info.first_event; e != -1; e = pfm_get_event_next(e)) {
        pfm_event_info_t ei;
        std::memset(&ei, 0, sizeof ei);
        ei.size = sizeof ei;
        if (pfm_get_event_info(e, PFM_OS_NONE, &ei) != PFM_SUCCESS || !ei.name) continue;
        bool umask = false;
        for (int a = 0; a < ei.nattrs; ++a) {
          pfm_event_attr_info_t ai;
          std::memset(&ai, 0, sizeof ai);
          ai.size = sizeof ai;
          if (pfm_get_event_attr_info(e, a, PFM_OS_NONE, &ai) != PFM_SUCCESS || ai.type != PFM_ATTR_UMASK)
            continue;
          pe.events.push_back(std::string(ei.name) + ":" + ai.name);
          umask = true;
        }
        if (!umask) pe.events.push_back(ei.name);
      }
    }
    out.push_back(std::move(pe));
  }
  return out;
}

}  // namespace tokenscope::probe::pfm
