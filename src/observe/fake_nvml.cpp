// A fake NVML for gpu_collector_test: a shared library, built only with the
// tests, that exports the NVML entry points GpuCollector (and probe::Nvml)
// bind, with the signatures of the NVML API reference, answering known
// values. Two devices:
//   gpu 0: GPM supported, MIG disabled; every call answers.
//   gpu 1: no GPM, MIG enabled with 7 slots, instances at index 0 (GPU
//          instance 1) and 2 (GPU instance 5); no utilisation (MIG GPUs
//          do not report it).
// nvmlInit_v2 returns the value of $TOKENSCOPE_FAKE_NVML_INIT_RESULT when set
// (to test the unavailable path). fake_nvml_live_samples() and
// fake_nvml_init_count() let a test check that GPM samples are freed and
// NVML shut down.
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 2;
constexpr int kNotSupported = 3;
constexpr int kNotFound = 6;
constexpr int kArgumentVersionMismatch = 25;

struct Device {
  unsigned index;
  int parent;  // -1: a physical GPU; else the MIG instance's GPU
  unsigned gpu_instance_id;
  unsigned long long memory_total, memory_used;
};
constexpr unsigned long long kGiB = 1ull << 30;
Device g_gpus[2] = {{0, -1, 0, 80 * kGiB, 20 * kGiB}, {1, -1, 0, 141 * kGiB, 30 * kGiB}};
Device g_migs[2] = {{0, 1, 1, 16 * kGiB, 1 * kGiB}, {2, 1, 5, 32 * kGiB, 3 * kGiB}};

int g_init_count = 0;
int g_live_samples = 0;
unsigned g_sequence = 0;

struct Sample {
  const Device* device = nullptr;
  unsigned sequence = 0;  // 0: never filled
};

// Mirrors of the NVML structs (see gpu_collector.cpp).
struct Utilization {
  unsigned gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};
struct GpmMetric {
  unsigned metricId;
  int nvmlReturn;
  double value;
  struct {
    char *shortName, *longName, *unit;
  } metricInfo;
};
struct GpmMetricsGet {
  unsigned version, numMetrics;
  void *sample1, *sample2;
  GpmMetric metrics[1];  // numMetrics of them
};
struct GpmSupport {
  unsigned version, isSupportedDevice;
};

const Device* dev(void* h) {
  return static_cast<const Device*>(h);
}
bool is_gpu(void* h, unsigned index) {
  return h == &g_gpus[index];
}

}  // namespace

extern "C" {

int fake_nvml_live_samples() {
  return g_live_samples;
}
int fake_nvml_init_count() {
  return g_init_count;
}

int nvmlInit_v2() {
  if (const char* forced = std::getenv("TOKENSCOPE_FAKE_NVML_INIT_RESULT"); forced && *forced)
    return std::atoi(forced);
  ++g_init_count;
  return kSuccess;
}
int nvmlShutdown() {
  --g_init_count;
  return kSuccess;
}
int nvmlSystemGetDriverVersion(char* buf, unsigned size) {
  std::strncpy(buf, "999.99-fake", size);
  return kSuccess;
}
int nvmlDeviceGetCount_v2(unsigned* n) {
  *n = 2;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** h) {
  if (i >= 2) return kInvalidArgument;
  *h = &g_gpus[i];
  return kSuccess;
}
int nvmlDeviceGetName(void* h, char* buf, unsigned size) {
  std::strncpy(buf, dev(h)->parent < 0 ? "Fake H200" : "Fake H200 MIG 1g", size);
  return kSuccess;
}
int nvmlDeviceGetUtilizationRates(void* h, Utilization* u) {
  if (!is_gpu(h, 0)) return kNotSupported;
  *u = {75, 40};
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(void* h, Memory* m) {
  const Device* d = dev(h);
  *m = {d->memory_total, d->memory_total - d->memory_used, d->memory_used};
  return kSuccess;
}
int nvmlDeviceGetPowerUsage(void* h, unsigned* mw) {
  if (dev(h)->parent >= 0) return kNotSupported;
  *mw = is_gpu(h, 0) ? 312500 : 100000;
  return kSuccess;
}
int nvmlDeviceGetClockInfo(void* h, unsigned type, unsigned* mhz) {
  if (dev(h)->parent >= 0) return kNotSupported;
  if (type == 1)
    *mhz = is_gpu(h, 0) ? 1980 : 1755;  // NVML_CLOCK_SM
  else if (type == 2)
    *mhz = is_gpu(h, 0) ? 2619 : 3201;  // NVML_CLOCK_MEM
  else
    return kInvalidArgument;
  return kSuccess;
}
int nvmlDeviceGetPcieThroughput(void* h, unsigned counter, unsigned* kb) {
  if (dev(h)->parent >= 0) return kNotSupported;
  if (counter > 1) return kInvalidArgument;
  *kb = is_gpu(h, 0) ? (counter == 0 ? 1000 : 2000) : 0;  // 0 = TX, 1 = RX
  return kSuccess;
}
int nvmlDeviceGetTemperature(void* h, unsigned sensor, unsigned* c) {
  if (sensor != 0) return kInvalidArgument;
  *c = is_gpu(h, 0) ? 61 : 45;
  return kSuccess;
}
int nvmlDeviceGetCurrentClocksEventReasons(void* h, unsigned long long* bits) {
  *bits = is_gpu(h, 0) ? 0x4 : 0x1;  // SwPowerCap; GpuIdle
  return kSuccess;
}
int nvmlDeviceGetMigMode(void* h, unsigned* current, unsigned* pending) {
  *current = *pending = is_gpu(h, 1) ? 1 : 0;
  return kSuccess;
}
int nvmlDeviceGetMaxMigDeviceCount(void* h, unsigned* n) {
  *n = is_gpu(h, 1) ? 7 : 0;
  return kSuccess;
}
int nvmlDeviceGetMigDeviceHandleByIndex(void* h, unsigned i, void** mig) {
  if (!is_gpu(h, 1) || i >= 7) return kInvalidArgument;
  if (i == 0)
    *mig = &g_migs[0];
  else if (i == 2)
    *mig = &g_migs[1];
  else
    return kNotFound;
  return kSuccess;
}
int nvmlDeviceGetGpuInstanceId(void* h, unsigned* id) {
  if (dev(h)->parent < 0) return kNotSupported;
  *id = dev(h)->gpu_instance_id;
  return kSuccess;
}
int nvmlGpmQueryDeviceSupport(void* h, GpmSupport* s) {
  if (s->version != 1) return kArgumentVersionMismatch;
  s->isSupportedDevice = is_gpu(h, 0) ? 1 : 0;
  return kSuccess;
}
int nvmlGpmSampleAlloc(void** sample) {
  *sample = new Sample;
  ++g_live_samples;
  return kSuccess;
}
int nvmlGpmSampleFree(void* sample) {
  delete static_cast<Sample*>(sample);
  --g_live_samples;
  return kSuccess;
}
int nvmlGpmSampleGet(void* h, void* sample) {
  if (!is_gpu(h, 0)) return kNotSupported;
  auto* s = static_cast<Sample*>(sample);
  s->device = dev(h);
  s->sequence = ++g_sequence;
  return kSuccess;
}
// The metrics exist only between two consecutive samples of one device, the
// older first: a collector that passes them in another order gets an error.
int nvmlGpmMetricsGet(GpmMetricsGet* g) {
  if (g->version != 1) return kArgumentVersionMismatch;
  const auto* a = static_cast<const Sample*>(g->sample1);
  const auto* b = static_cast<const Sample*>(g->sample2);
  if (!a || !b || !a->sequence || a->device != b->device || b->sequence != a->sequence + 1)
    return kInvalidArgument;
  GpmMetric* metrics = g->metrics;  // numMetrics long, whatever the declared size
  for (unsigned i = 0; i < g->numMetrics; ++i) {
    GpmMetric& m = metrics[i];
    m.nvmlReturn = kSuccess;
    switch (m.metricId) {
      case 10:
        m.value = 55.5;
        break;  // NVML_GPM_METRIC_DRAM_BW_UTIL
      case 2:
        m.value = 80.0;
        break;  // NVML_GPM_METRIC_SM_UTIL
      case 3:
        m.value = 33.25;
        break;  // NVML_GPM_METRIC_SM_OCCUPANCY
      case 5:
        m.value = 42.0;
        break;  // NVML_GPM_METRIC_ANY_TENSOR_UTIL
      default:
        m.nvmlReturn = kNotSupported;
        break;
    }
  }
  return kSuccess;
}

}  // extern "C"
