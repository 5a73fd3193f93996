// Canonical series: one name per quantity whatever the server, GPU or host
// reports it as. kCanonicalSeries is the contract between the collectors,
// samples.jsonl, the exporters and the report (docs/observe.md prints it).
// Each engine's metric names map onto these in canonical_maps.cpp, one
// table per engine with the source of every name. Histograms are canonical
// families: NAME_bucket{le="..."}, NAME_sum, NAME_count (summed over the
// server's label sets, bucket by bucket).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "observe/exposition.h"
#include "observe/observation.h"

namespace tokenscope::observe {

enum class SeriesKind : std::uint8_t { kGauge, kCounter, kHistogram };

struct CanonicalDefinition {
  std::string_view name;
  SeriesKind kind;
  std::string_view unit;
  std::string_view definition;
};

// clang-format off
inline constexpr CanonicalDefinition kCanonicalSeries[] = {
    // --- the serving engine (source "server"), from its /metrics
    {"requests_running", SeriesKind::kGauge, "requests", "requests in the running batch"},
    {"requests_waiting", SeriesKind::kGauge, "requests", "requests queued, not yet scheduled"},
    {"requests_swapped", SeriesKind::kGauge, "requests", "requests whose KV cache is swapped to host memory"},
    {"kv_cache_usage", SeriesKind::kGauge, "ratio", "fraction of the KV cache in use (0..1)"},
    {"prefix_cache_queries_tokens", SeriesKind::kCounter, "tokens", "prompt tokens looked up in the prefix cache"},
    {"prefix_cache_hits_tokens", SeriesKind::kCounter, "tokens", "prompt tokens found in the prefix cache"},
    {"preemptions", SeriesKind::kCounter, "count", "running requests preempted (recompute or swap)"},
    {"prompt_tokens", SeriesKind::kCounter, "tokens", "prompt (prefill) tokens processed"},
    {"generation_tokens", SeriesKind::kCounter, "tokens", "output (decode) tokens generated"},
    {"requests_finished", SeriesKind::kCounter, "requests", "requests the server finished"},
    {"iteration_tokens", SeriesKind::kHistogram, "tokens", "tokens per engine step (batch size in tokens)"},
    {"server_ttft_seconds", SeriesKind::kHistogram, "s", "the server's time to first token"},
    {"server_itl_seconds", SeriesKind::kHistogram, "s", "the server's inter-token latency"},
    {"server_e2e_seconds", SeriesKind::kHistogram, "s", "the server's end-to-end request latency"},
    {"server_queue_seconds", SeriesKind::kHistogram, "s", "the server's time in the waiting queue"},
    {"server_tpot_seconds", SeriesKind::kHistogram, "s", "the server's time per output token, one value per request"},
    {"server_prefill_seconds", SeriesKind::kHistogram, "s", "the server's prefill time per request (scheduled to first token)"},
    {"server_decode_seconds", SeriesKind::kHistogram, "s", "the server's decode time per request (first to last token)"},
    {"server_inference_seconds", SeriesKind::kHistogram, "s", "the server's running time per request (prefill and decode)"},
    // --- GPUs (source "gpu": NVML, or a DCGM exporter's /metrics); label gpu="N" (and mig="..." for instances)
    {"gpu_utilization", SeriesKind::kGauge, "ratio", "fraction of time a kernel was running (NVML/DCGM GPU_UTIL)"},
    {"gpu_memory_used_bytes", SeriesKind::kGauge, "bytes", "device memory in use"},
    {"gpu_memory_total_bytes", SeriesKind::kGauge, "bytes", "device memory in all"},
    {"gpu_power_watts", SeriesKind::kGauge, "W", "board power draw"},
    {"gpu_sm_clock_hz", SeriesKind::kGauge, "Hz", "SM clock"},
    {"gpu_memory_clock_hz", SeriesKind::kGauge, "Hz", "memory clock"},
    {"gpu_pcie_rx_bytes_per_s", SeriesKind::kGauge, "B/s", "PCIe traffic into the GPU"},
    {"gpu_pcie_tx_bytes_per_s", SeriesKind::kGauge, "B/s", "PCIe traffic out of the GPU"},
    {"gpu_temperature_c", SeriesKind::kGauge, "C", "GPU core temperature"},
    {"gpu_throttle_reasons", SeriesKind::kGauge, "bitmask", "NVML clocks-event (throttle) reasons bitmask"},
    {"gpu_dram_active", SeriesKind::kGauge, "ratio", "fraction of cycles the memory interface was busy (GPM/DCGM)"},
    {"gpu_sm_active", SeriesKind::kGauge, "ratio", "fraction of time at least one warp was active on an SM"},
    {"gpu_tensor_active", SeriesKind::kGauge, "ratio", "fraction of cycles the tensor pipes were active"},
    // --- the host (source "host"), from /proc
    {"host_cpu_utilization", SeriesKind::kGauge, "ratio", "busy fraction of all CPUs over the interval (/proc/stat)"},
    {"host_cpu_iowait", SeriesKind::kGauge, "ratio", "iowait fraction of all CPUs over the interval"},
    {"host_cpu_steal", SeriesKind::kGauge, "ratio",
     "steal fraction of all CPUs over the interval (time a hypervisor gave this VM's CPUs to another)"},
    {"host_memory_available_bytes", SeriesKind::kGauge, "bytes", "MemAvailable (/proc/meminfo)"},
    {"host_memory_total_bytes", SeriesKind::kGauge, "bytes", "MemTotal"},
    {"host_cpu_pressure_some", SeriesKind::kGauge, "ratio", "/proc/pressure/cpu some avg10 / 100"},
    {"host_memory_pressure_some", SeriesKind::kGauge, "ratio", "/proc/pressure/memory some avg10 / 100"},
    {"host_io_pressure_some", SeriesKind::kGauge, "ratio", "/proc/pressure/io some avg10 / 100"},
    {"host_net_rx_bytes", SeriesKind::kCounter, "bytes", "bytes received on all interfaces but lo (/proc/net/dev)"},
    {"host_net_tx_bytes", SeriesKind::kCounter, "bytes", "bytes sent on all interfaces but lo"},
    // --- the server's process (source "process", --server-pid)
    {"process_cpu_seconds", SeriesKind::kCounter, "s", "user + system CPU time (/proc/PID/stat)"},
    {"process_rss_bytes", SeriesKind::kGauge, "bytes", "resident set size"},
    {"process_threads", SeriesKind::kGauge, "threads", "threads of the process"},
    {"process_voluntary_ctx_switches", SeriesKind::kCounter, "count", "voluntary context switches (all threads)"},
    {"process_nonvoluntary_ctx_switches", SeriesKind::kCounter, "count", "involuntary context switches (all threads)"},
    // --- the server's cgroup v2 (source "cgroup")
    {"cgroup_cpu_usage_seconds", SeriesKind::kCounter, "s", "cpu.stat usage_usec"},
    {"cgroup_cpu_throttled_periods", SeriesKind::kCounter, "count", "cpu.stat nr_throttled"},
    {"cgroup_cpu_throttled_seconds", SeriesKind::kCounter, "s", "cpu.stat throttled_usec"},
    {"cgroup_cpu_pressure_some", SeriesKind::kGauge, "ratio", "cpu.pressure some avg10 / 100"},
    {"cgroup_memory_current_bytes", SeriesKind::kGauge, "bytes", "memory.current"},
    {"cgroup_memory_high_events", SeriesKind::kCounter, "count", "memory.events high"},
    {"cgroup_memory_max_events", SeriesKind::kCounter, "count", "memory.events max"},
    {"cgroup_memory_oom_kills", SeriesKind::kCounter, "count", "memory.events oom_kill"},
    {"cgroup_memory_pressure_some", SeriesKind::kGauge, "ratio", "memory.pressure some avg10 / 100"},
    {"cgroup_io_read_bytes", SeriesKind::kCounter, "bytes", "io.stat rbytes, all devices"},
    {"cgroup_io_write_bytes", SeriesKind::kCounter, "bytes", "io.stat wbytes, all devices"},
};
// clang-format on

// The definition of a canonical name (a histogram's _bucket/_sum/_count
// resolve to their family); nullptr when the name is not canonical.
const CanonicalDefinition* find_canonical(std::string_view name);

// Servers whose metric names are mapped (canonical_maps.cpp).
enum class Engine : std::uint8_t { kUnknown, kVllmV1, kVllmV0, kSglang, kLlamaCpp, kTgi, kTriton, kDcgm };
std::string_view engine_name(Engine e);

// Which engine wrote an exposition, from the names it carries (kUnknown
// when none matches: its series stay raw only, which is not an error).
Engine detect_engine(const Exposition& e);

// The canonical series of an exposition written by engine, in
// kCanonicalSeries order: gauges and counters summed over label sets (ratios
// averaged; a quantity repeated per label set, its maximum), histograms
// merged bucket by bucket on the union of their bounds, units converted (ms →
// s, % → ratio, MiB → bytes, MHz → Hz). Server series carry no labels; GPU
// series keep gpu="N" and, for a MIG instance, mig="I". An engine without a
// table (kUnknown) gives none. Never throws: a malformed bucket bound is left
// out. docs/observe.md "Canonical series" has the rules and the tables.
std::vector<Sample> canonicalize(const Exposition& e, Engine engine);

// Bounds on one exposition's canonical series (docs/reliability.md "Scrape
// bounds"): the label sets of one canonical series (a value per GPU, per
// model...: the first max_label_sets in label order are kept), and the
// distinct bucket bounds of one canonical histogram, its label sets merged
// (a histogram over the bound is left out of the canonical series whole: a
// part of its buckets would give wrong quantiles).
struct CanonicalLimits {
  std::size_t max_label_sets = 1024;
  std::size_t max_bucket_bounds = 512;
};
// What the bounds left out of one exposition.
struct CanonicalDrops {
  std::uint64_t label_sets = 0;  // canonical series (one label set each) not kept
  std::uint64_t histograms = 0;  // canonical histograms (of one label set) not merged
};
std::vector<Sample> canonicalize(const Exposition& e, Engine engine, const CanonicalLimits& limits,
                                 CanonicalDrops& drops);

// A canonical series name resolved: its definition (nullptr when the name is
// not canonical) and, for a histogram family, which member it is.
struct CanonicalName {
  const CanonicalDefinition* definition = nullptr;
  std::string_view family;  // the definition's name
  enum class Member : std::uint8_t { kSeries, kBucket, kSum, kCount } member = Member::kSeries;
};
CanonicalName resolve_canonical(std::string_view name);

// A histogram bucket's `le` label: "+Inf", "0.005", "1e-05", "2.0"; nullopt
// for anything else (a malformed bound is left out, never guessed at).
std::optional<double> parse_le(std::string_view s);

}  // namespace tokenscope::observe
