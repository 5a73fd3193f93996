// The parts of the GPU probes that need no GPU: serialisation, tables, the
// small-transfer collapse rule, samples and Chrome-trace export.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "core/json_out.h"
#include "probe/gpu_probes.h"

namespace tokenscope::probe {

void flag_small_transfer_collapse(std::vector<KvSwapRow>& rows) {
  for (auto& r : rows) {
    r.small_transfer_collapse = false;
    if (r.chunk_bytes == 0 || r.chunk_bytes >= (1ull << 20) || !r.skipped.empty()) continue;
    for (const auto& whole : rows) {
      if (whole.chunk_bytes != 0 || whole.kv_bytes != r.kv_bytes || whole.tenants != r.tenants ||
          whole.overlapped != r.overlapped || !whole.skipped.empty())
        continue;
      const bool d2h = r.d2h_gbps.n && whole.d2h_gbps.n && r.d2h_gbps.median < 0.5 * whole.d2h_gbps.median;
      const bool h2d = r.h2d_gbps.n && whole.h2d_gbps.n && r.h2d_gbps.median < 0.5 * whole.h2d_gbps.median;
      r.small_transfer_collapse = d2h || h2d;
    }
  }
}

nlohmann::json to_json(const GpuEnvironment& e) {
  nlohmann::json devs = nlohmann::json::array();
  for (const auto& d : e.devices)
    devs.push_back({{"index", d.index},
                    {"name", d.name},
                    {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
                    {"sm_count", d.sm_count},
                    {"memory_bytes", d.memory_bytes},
                    {"copy_engines", d.async_engines},
                    {"pci_bus_id", d.pci_bus_id}});
  return {{"built_with_cuda", e.built},
          {"available", e.available},
          {"reason", e.reason},
          {"cuda_runtime", e.runtime_version},
          {"cuda_driver", e.driver_version},
          {"nvml_driver", e.nvml_driver},
          {"devices", devs}};
}

namespace {
nlohmann::json cupti_json(const CuptiCapture& c) {
  std::map<std::string, std::size_t> counts;
  for (const auto& a : c.activities) ++counts[a.kind];
  return {{"enabled", c.enabled}, {"reason", c.reason},   {"kinds", c.kinds},
          {"records", counts},    {"dropped", c.dropped}, {"capped", c.capped}};
}
std::string latency_cell(const LatencySummary& s) {
  if (s.n == 0) return "n/a";
  return fmt::format("{:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f}", s.mean, s.p50, s.p99, s.max);
}
std::string human_bytes(std::uint64_t b) {
  if (b == 0) return "whole";
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) return fmt::format("{} GiB", b >> 30);
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return fmt::format("{} MiB", b >> 20);
  if (b >= 1024 && b % 1024 == 0) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} B", b);
}
}  // namespace

nlohmann::json to_json(const GpuContextResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& x : r.rows)
    rows.push_back(
        {{"operation", x.operation}, {"variant", x.variant}, {"us", to_json(x.us)}, {"error", x.error}});
  return {{"probe", "gpu-context"},
          {"settings",
           {{"device", r.settings.device},
            {"repetitions", r.settings.repetitions},
            {"green_contexts", r.settings.green_contexts},
            {"cupti", r.settings.cupti}}},
          {"gpu", to_json(r.env)},
          {"ran", r.ran},
          {"reason", r.reason},
          {"latencies", rows},
          {"green_contexts", r.green_note},
          {"cupti", cupti_json(r.cupti)}};
}

nlohmann::json to_json(const KvSwapResult& r) {
  const auto& s = r.settings;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& x : r.rows) {
    nlohmann::json j{{"tenants", x.tenants},
                     {"kv_bytes", x.kv_bytes},
                     {"chunk_bytes", x.chunk_bytes},
                     {"overlapped_with_decode", x.overlapped},
                     {"switch_ms", to_json(x.switch_ms)},
                     {"d2h_gbps", to_json(x.d2h_gbps)},
                     {"h2d_gbps", to_json(x.h2d_gbps)},
                     {"bidirectional_gbps", to_json(x.bidir_gbps)},
                     {"small_transfer_collapse", x.small_transfer_collapse},
                     {"skipped", x.skipped}};
    j["decode_slowdown"] = x.decode_slowdown ? nlohmann::json(*x.decode_slowdown) : nlohmann::json(nullptr);
    rows.push_back(j);
  }
  return {{"probe", "kv-swap"},
          {"settings",
           {{"device", s.device},
            {"tenants", s.tenants},
            {"kv_bytes", s.kv_bytes},
            {"chunk_bytes", s.chunk_bytes},
            {"switches", s.switches},
            {"repetitions", s.repetitions},
            {"overlap_decode", s.overlap_decode},
            {"max_host_bytes", s.max_host_bytes}}},
          {"gpu", to_json(r.env)},
          {"ran", r.ran},
          {"reason", r.reason},
          {"rows", rows},
          {"findings", r.findings},
          {"cupti", cupti_json(r.cupti)},
          {"nvml_samples", r.nvml.size()}};
}

nlohmann::json to_json(const CollectivesResult& r) {
  nlohmann::json ar = nlohmann::json::array(), a2a = nlohmann::json::array();
  for (const auto& x : r.all_reduce)
    ar.push_back({{"bytes", x.bytes},
                  {"time_us", x.time_us},
                  {"algbw_gbps", x.algbw_gbps},
                  {"busbw_gbps", x.busbw_gbps}});
  for (const auto& x : r.alltoall)
    a2a.push_back({{"bytes", x.bytes},
                   {"time_us", x.time_us},
                   {"algbw_gbps", x.algbw_gbps},
                   {"busbw_gbps", x.busbw_gbps}});
  nlohmann::json slow = nlohmann::json::array();
  for (const auto& p : r.slow)
    slow.push_back({{"from", p.from}, {"to", p.to}, {"gbps", p.gbps}, {"vs_median", p.vs_median}});
  return {{"probe", "collectives"},
          {"settings",
           {{"min_bytes", r.settings.min_bytes},
            {"max_bytes", r.settings.max_bytes},
            {"factor", r.settings.factor},
            {"warmup", r.settings.warmup},
            {"iterations", r.settings.iterations}}},
          {"gpu", to_json(r.env)},
          {"ran", r.ran},
          {"reason", r.reason},
          {"ranks", r.ranks},
          {"nccl_version", r.nccl_version},
          {"all_reduce", {{"rows", ar}, {"analysis", to_json(r.all_reduce_analysis)}}},
          {"alltoall", {{"rows", a2a}, {"analysis", to_json(r.alltoall_analysis)}}},
          {"pair_sendrecv_gbps", r.pair_gbps},
          {"slow_pairs", slow}};
}

std::string format_table(const GpuContextResult& r) {
  if (!r.ran) return "gpu-context: not run: " + r.reason + "\n";
  std::string out = fmt::format(
      "gpu-context on device {} ({}), {} repetitions, microseconds\n", r.settings.device,
      r.env.devices.empty() ? "?"
                            : r.env.devices[static_cast<std::size_t>(std::max(0, r.settings.device))].name,
      r.settings.repetitions);
  out += fmt::format("  {:<34} {:<14} {:>10} {:>10} {:>10} {:>10}\n", "operation", "variant", "mean", "p50",
                     "p99", "max");
  for (const auto& x : r.rows)
    out += fmt::format("  {:<34} {:<14} {}\n", x.operation, x.variant,
                       x.error.empty() ? latency_cell(x.us) : "failed: " + x.error);
  if (!r.green_note.empty()) out += "  green contexts: " + r.green_note + "\n";
  out += "  CUPTI: " +
         (r.cupti.enabled ? fmt::format("{} activity records", r.cupti.activities.size()) : r.cupti.reason) +
         "\n";
  return out;
}

std::string format_table(const KvSwapResult& r) {
  if (!r.ran) return "kv-swap: not run: " + r.reason + "\n";
  std::string out =
      "kv-swap: tenant switch = evict one tenant's KV to pinned host memory + restore another's\n";
  out += fmt::format("  {:>7} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>11} {:>11} {:>11} {:>9}\n", "tenants",
                     "KV", "transfer", "decode", "mean ms", "p50 ms", "p99 ms", "D2H GB/s", "H2D GB/s",
                     "both GB/s", "collapse");
  for (const auto& x : r.rows) {
    if (!x.skipped.empty()) {
      out += fmt::format("  {:>7} {:>9} {:>9} {:>8}  skipped: {}\n", x.tenants, human_bytes(x.kv_bytes),
                         human_bytes(x.chunk_bytes), x.overlapped ? "yes" : "no", x.skipped);
      continue;
    }
    out += fmt::format(
        "  {:>7} {:>9} {:>9} {:>8} {:>9.3f} {:>9.3f} {:>9.3f} {:>11.2f} {:>11.2f} {:>11.2f} {:>9}\n",
        x.tenants, human_bytes(x.kv_bytes), human_bytes(x.chunk_bytes), x.overlapped ? "yes" : "no",
        x.switch_ms.mean, x.switch_ms.p50, x.switch_ms.p99, x.d2h_gbps.median, x.h2d_gbps.median,
        x.bidir_gbps.median, x.small_transfer_collapse ? "YES" : "");
  }
  for (const auto& f : r.findings) out += "  " + f + "\n";
  out += "  CUPTI: " +
         (r.cupti.enabled ? fmt::format("{} activity records", r.cupti.activities.size()) : r.cupti.reason) +
         "\n";
  out += fmt::format("  NVML: {} samples\n", r.nvml.size());
  return out;
}

std::string format_table(const CollectivesResult& r) {
  if (!r.ran) return "collectives: not run: " + r.reason + "\n";
  std::string out = fmt::format("NCCL {} over {} GPU(s)\n", r.nccl_version, r.ranks);
  out += format_table(r.all_reduce_analysis, r.all_reduce);
  out += format_table(r.alltoall_analysis, r.alltoall);
  if (!r.pair_gbps.empty()) {
    out += "  sendrecv GB/s [from][to]:\n";
    for (std::size_t i = 0; i < r.pair_gbps.size(); ++i) {
      out += "   ";
      for (std::size_t j = 0; j < r.pair_gbps[i].size(); ++j)
        out += i == j ? fmt::format(" {:>8}", "-") : fmt::format(" {:>8.1f}", r.pair_gbps[i][j]);
      out += "\n";
    }
    for (const auto& p : r.slow)
      out += fmt::format("  slow pair {} -> {}: {:.1f} GB/s, {:.2f} of the median pair\n", p.from, p.to,
                         p.gbps, p.vs_median);
  }
  return out;
}

std::string samples_jsonl(const std::vector<NvmlReading>& nvml, const CuptiCapture& cupti) {
  std::string out;
  for (const auto& r : nvml) {
    out += "{\"t\":";
    jsonout::append_fixed(out, r.t_s, 6);
    out += ",\"source\":\"nvml\",\"name\":";
    jsonout::append_string(out, r.name);
    out += ",\"labels\":{\"gpu\":\"";
    jsonout::append_int(out, r.device);
    out += "\"},\"value\":";
    jsonout::append_fixed(out, r.value, 3);
    out += "}\n";
  }
  for (const auto& a : cupti.activities) {
    out += "{\"t\":";
    jsonout::append_fixed(out, static_cast<double>(a.start_ns) * 1e-9, 9);
    out += ",\"source\":\"cupti\",\"name\":";
    jsonout::append_string(out, a.kind + "_duration_ns");
    out += ",\"labels\":{\"gpu\":\"";
    jsonout::append_uint(out, a.device);
    out += "\",\"stream\":\"";
    jsonout::append_uint(out, a.stream);
    out += "\",\"what\":";
    jsonout::append_string(out, a.name);
    out += ",\"bytes\":\"";
    jsonout::append_uint(out, a.bytes);
    out += "\"},\"value\":";
    jsonout::append_uint(out, a.end_ns - std::min(a.end_ns, a.start_ns));
    out += "}\n";
  }
  return out;
}

nlohmann::json chrome_trace(const CuptiCapture& cupti) {
  nlohmann::json events = nlohmann::json::array();
  std::uint64_t t0 = UINT64_MAX;
  for (const auto& a : cupti.activities) t0 = std::min(t0, a.start_ns);
  for (const auto& a : cupti.activities) {
    nlohmann::json e{{"name", a.name.empty() ? a.kind : a.name},
                     {"cat", a.kind},
                     {"ph", "X"},
                     {"ts", static_cast<double>(a.start_ns - t0) / 1e3},
                     {"dur", static_cast<double>(a.end_ns - std::min(a.end_ns, a.start_ns)) / 1e3},
                     {"pid", a.device},
                     {"tid", a.kind == "context" ? 0u : a.stream}};
    if (a.bytes) e["args"] = {{"bytes", a.bytes}, {"context", a.context}};
    events.push_back(e);
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ns"}};
}

}  // namespace tokenscope::probe
