// GPU probes: `probe gpu-context`, `probe kv-swap`, `probe collectives`.
// One header either way (STYLE.md rule 6): built with the CUDA toolkit
// (TOKENSCOPE_HAVE_CUDA, cudart linked statically, the driver API reached
// through cudaGetDriverEntryPointByVersion, CUPTI and NCCL through dlopen)
// the probes run where a GPU is; built without it, or run without a GPU,
// every probe returns ran = false with the reason, and the CLI prints it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "probe/collectives.h"
#include "probe/nvml.h"
#include "probe/probe_stats.h"

namespace tokenscope::probe {

// True when this binary was built with the CUDA toolkit.
bool gpu_probes_built();

struct GpuDevice {
  int index = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  std::uint64_t memory_bytes = 0;
  int async_engines = 0;  // copy engines
  std::string pci_bus_id;
};

struct GpuEnvironment {
  bool built = false;
  bool available = false;
  std::string reason;  // why there is no GPU to probe
  int runtime_version = 0;
  int driver_version = 0;
  std::string nvml_driver;
  std::vector<GpuDevice> devices;
};
GpuEnvironment gpu_environment();

// One CUPTI activity record, kept for samples.jsonl and trace.json.
struct CuptiActivity {
  std::string kind;  // context, memcpy, kernel
  std::string name;  // kernel name or memcpy direction (HtoD, DtoH, DtoD, ...)
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::uint32_t device = 0;
  std::uint32_t context = 0;
  std::uint32_t stream = 0;
  std::uint64_t bytes = 0;
};
struct CuptiCapture {
  bool enabled = false;
  std::string reason;              // why not, or which kinds were missing
  std::vector<std::string> kinds;  // kinds enabled
  std::vector<CuptiActivity> activities;
  std::uint64_t dropped = 0;  // records CUPTI itself dropped (buffers full)
  std::uint64_t capped = 0;   // records past kMaxCuptiActivities, counted but not kept
};
// The most activity records one capture keeps (samples.jsonl and trace.json
// stay in the tens of MB).
inline constexpr std::size_t kMaxCuptiActivities = 200'000;

struct LatencyRow {
  std::string operation;  // cuCtxCreate, cuCtxDestroy, cuCtxSetCurrent, ...
  std::string variant;    // sched flag, or "" when not applicable
  LatencySummary us;
  std::string error;  // set when the call failed (the row has no samples)
};

struct GpuContextSettings {
  int device = 0;
  int repetitions = 50;
  bool green_contexts = true;
  bool cupti = true;
};
struct GpuContextResult {
  GpuContextSettings settings;
  GpuEnvironment env;
  bool ran = false;
  std::string reason;
  std::vector<LatencyRow> rows;
  std::string green_note;  // support, SM split used, or why not
  CuptiCapture cupti;
  std::vector<NvmlReading> nvml;
};
GpuContextResult run_gpu_context_probe(const GpuContextSettings& settings);

struct KvSwapSettings {
  int device = 0;
  std::vector<int> tenants{2, 4, 8};
  std::vector<std::uint64_t> kv_bytes{64ull << 20, 256ull << 20};
  // Per-transfer sizes: 0 = one copy per KV cache; smaller values split it
  // into as many copies as a paged cache would issue per block.
  std::vector<std::uint64_t> chunk_bytes{0, 1ull << 20, 64ull << 10};
  int switches = 16;    // per configuration (latency distribution)
  int repetitions = 5;  // per bandwidth point (median)
  bool overlap_decode = true;
  bool cupti = true;
  double nvml_interval_s = 0.05;
  std::uint64_t max_host_bytes = 16ull << 30;  // pinned host memory cap: configurations beyond are skipped
};
struct KvSwapRow {
  int tenants = 0;
  std::uint64_t kv_bytes = 0;
  std::uint64_t chunk_bytes = 0;  // 0: whole
  bool overlapped = false;        // a decode-like kernel ran beside the copies
  LatencySummary switch_ms;       // evict (D2H) + restore (H2D), one switch
  MedianCi d2h_gbps;
  MedianCi h2d_gbps;
  MedianCi bidir_gbps;                    // both directions at once on two copy engines
  std::optional<double> decode_slowdown;  // decode kernel time with copies / alone
  bool small_transfer_collapse = false;
  std::string skipped;  // why this configuration did not run
};
struct KvSwapResult {
  KvSwapSettings settings;
  GpuEnvironment env;
  bool ran = false;
  std::string reason;
  std::vector<KvSwapRow> rows;
  std::vector<std::string> findings;
  CuptiCapture cupti;
  std::vector<NvmlReading> nvml;
};
KvSwapResult run_kv_swap_probe(const KvSwapSettings& settings);

struct CollectivesSettings {
  std::uint64_t min_bytes = 8;
  std::uint64_t max_bytes = 256ull << 20;
  int factor = 4;
  int warmup = 5;
  int iterations = 20;
  bool pairs = true;  // per-pair sendrecv matrix when there are 2+ GPUs
};
struct CollectivesResult {
  CollectivesSettings settings;
  GpuEnvironment env;
  bool ran = false;
  std::string reason;
  int ranks = 0;
  std::vector<CollectiveRow> all_reduce;
  std::vector<CollectiveRow> alltoall;
  CollectiveAnalysis all_reduce_analysis;
  CollectiveAnalysis alltoall_analysis;
  std::vector<std::vector<double>> pair_gbps;  // sendrecv of max_bytes, [from][to]
  std::vector<PairDeviation> slow;
  std::string nccl_version;
};
CollectivesResult run_collectives_probe(const CollectivesSettings& settings);

nlohmann::json to_json(const GpuEnvironment& e);
nlohmann::json to_json(const GpuContextResult& r);
nlohmann::json to_json(const KvSwapResult& r);
nlohmann::json to_json(const CollectivesResult& r);
std::string format_table(const GpuContextResult& r);
std::string format_table(const KvSwapResult& r);
std::string format_table(const CollectivesResult& r);

// samples.jsonl lines ({"t","source","name","labels","value"}) of NVML
// readings and CUPTI activities, and a Chrome trace (trace.json) with one
// track per device and stream.
std::string samples_jsonl(const std::vector<NvmlReading>& nvml, const CuptiCapture& cupti);
nlohmann::json chrome_trace(const CuptiCapture& cupti);

// Marks configurations whose per-transfer size is under 1 MiB and whose
// bandwidth fell under half of the whole-cache copy of the same size.
void flag_small_transfer_collapse(std::vector<KvSwapRow>& rows);

}  // namespace tokenscope::probe
