#include "cli/probe_command.h"

#include <fmt/format.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/run_dir.h"
#include "probe/access_trace.h"
#include "probe/cache_line.h"
#include "probe/collectives.h"
#include "probe/gpu_probes.h"
#include "probe/kv_layout.h"
#include "probe/line_sim.h"
#include "probe/line_sim_cases.h"
#include "probe/numa_probe.h"
#include "probe/perf_counters.h"
#include "probe/probe_output.h"
#include "probe/topology.h"

namespace tokenscope::cli {

namespace {

struct ProbeOptions {
  std::string out;
  bool json = false;
  probe::CacheLineSettings cache_line;
  std::vector<std::string> cache_line_skip;
  std::uint64_t stride_mib = 0;

  probe::KvLayoutSettings kv;
  std::string kv_layouts = "both", kv_splits = "both", kv_metadata = "both";

  std::string trace;
  std::string layout;
  int sim_line_size = 64;
  std::vector<int> predict_line_sizes{32, 128};
  std::size_t top = 20;
  std::string generate;
  std::uint64_t generate_seed = 1;
  int generate_threads = 4;
  int generate_iterations = 200;
  std::string write_trace;

  probe::NumaSettings numa;
  std::uint64_t numa_buffer_mib = 256;

  probe::GpuContextSettings gpu_context;
  bool no_green = false;
  bool no_cupti = false;

  probe::KvSwapSettings kv_swap;
  std::vector<std::uint64_t> kv_mib{64, 256};
  std::vector<std::uint64_t> chunk_kib{0, 1024, 64};
  bool no_overlap = false;
  std::uint64_t max_host_mib = 16384;

  probe::CollectivesSettings collectives;
  std::string parse;
  std::string collective;

  std::vector<std::string> events;  // --events of cache-line, kv-layout and events
  std::string events_pmu;
  bool events_all = false;
};

// --threads of the CPU probes: 1..64, as kv-layout's line analysis (one bit
// per writer) allows; without it, one per physical core, at most 64. A count
// past that made cache-line spawn threads until it aborted or spun for
// minutes, and 0 or a negative count silently meant the default.
CLI::Validator thread_count() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        int n = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (ec != std::errc() || end != value.data() + value.size() || n < 1 || n > probe::kMaxProbeThreads)
          return "expected 1.." + std::to_string(probe::kMaxProbeThreads) + " threads, got " +
                 quote_input(value);
        return "";
      },
      "1..64");
}

void add_output(CLI::App* c, ProbeOptions& o) {
  c->add_option("--out", o.out,
                "Write <probe>.json (settings, environment, every repetition) into this folder");
  c->add_flag("--json", o.json, "Print the JSON result instead of the table");
}

probe::Topology topology() {
  return probe::read_topology("/");
}

// --events: empty or "default" gives the default set (an empty list).
std::vector<probe::EventSpec> resolve_events(const std::vector<std::string>& names) {
  std::vector<probe::EventSpec> out;
  for (const auto& n : names) {
    if (n == "default") {
      for (auto& e : probe::default_events()) out.push_back(std::move(e));
      continue;
    }
    if (n.empty()) throw UsageError("--events: an empty event name (two commas in a row?)");
    out.push_back(probe::resolve_event(n));
  }
  return out;
}

void add_events_option(CLI::App* c, ProbeOptions& o) {
  c->add_option("--events", o.events,
                "Hardware events to count per variant where the PMU is visible: perf's generic names, "
                "rNNN, or (libpfm4) PMU::EVENT:UMASK; 'default' = cycles,instructions,cache-references,"
                "cache-misses and this CPU's HITM event. `probe events` lists them")
      ->delimiter(',');
}

void emit(const ProbeOptions& o, const std::string& name, const nlohmann::json& result,
          const std::string& table, const probe::Topology& topo) {
  const auto env = probe::environment_json(topo, TOKENSCOPE_VERSION);
  if (o.json) {
    nlohmann::json j = result;
    j["format_version"] = probe::kProbeFormatVersion;
    j["environment"] = env;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << table;
  }
  if (!o.out.empty()) {
    const auto path = probe::write_probe_json(o.out, name, result, env);
    if (!o.json) std::cout << "\nwrote " << path.string() << "\n";
  }
}

void write_gpu_extras(const ProbeOptions& o, const std::vector<probe::NvmlReading>& nvml,
                      const probe::CuptiCapture& cupti) {
  if (o.out.empty()) return;
  const std::filesystem::path dir(o.out);
  const std::string samples = probe::samples_jsonl(nvml, cupti);
  if (!samples.empty()) write_file_atomic(dir / "samples.jsonl", samples);
  if (!cupti.activities.empty())
    write_file_atomic(dir / "trace.json", probe::chrome_trace(cupti).dump() + "\n");
}

std::vector<probe::KvLayout> parse_layouts(const std::string& s) {
  if (s == "both") return {probe::KvLayout::kHeadInterleaved, probe::KvLayout::kHeadContiguous};
  if (s == "head-interleaved" || s == "interleaved") return {probe::KvLayout::kHeadInterleaved};
  if (s == "head-contiguous" || s == "contiguous") return {probe::KvLayout::kHeadContiguous};
  throw UsageError("--layout must be both, head-interleaved or head-contiguous, got '" + s + "'");
}
std::vector<probe::KvSplit> parse_splits(const std::string& s) {
  if (s == "both") return {probe::KvSplit::kBySequence, probe::KvSplit::kByHead};
  if (s == "sequence" || s == "by-sequence") return {probe::KvSplit::kBySequence};
  if (s == "head" || s == "by-head") return {probe::KvSplit::kByHead};
  throw UsageError("--split must be both, sequence or head, got '" + s + "'");
}
std::vector<bool> parse_metadata(const std::string& s) {
  if (s == "both") return {false, true};
  if (s == "packed") return {false};
  if (s == "padded") return {true};
  throw UsageError("--metadata must be both, packed or padded, got '" + s + "'");
}

int run_cache_line(const ProbeOptions& o) {
  auto s = o.cache_line;
  s.stride_buffer_bytes = o.stride_mib << 20;
  for (const auto& k : o.cache_line_skip) {
    if (k == "stride")
      s.run_stride = false;
    else if (k == "coherence")
      s.run_coherence = false;
    else if (k == "false-sharing")
      s.run_false_sharing = false;
    else if (k == "ping-pong")
      s.run_ping_pong = false;
    else
      throw UsageError("--skip takes stride, coherence, false-sharing or ping-pong, got '" + k + "'");
  }
  s.events = resolve_events(o.events);
  const auto topo = topology();
  const auto r = probe::run_cache_line_probe(s, topo);
  emit(o, "cache-line", probe::to_json(r), probe::format_table(r), topo);
  return kExitOk;
}

int run_kv_layout(const ProbeOptions& o) {
  auto s = o.kv;
  s.layouts = parse_layouts(o.kv_layouts);
  s.splits = parse_splits(o.kv_splits);
  s.metadata = parse_metadata(o.kv_metadata);
  s.events = resolve_events(o.events);
  const auto topo = topology();
  const auto r = probe::run_kv_layout_probe(s, topo);
  emit(o, "kv-layout", probe::to_json(r), probe::format_table(r), topo);
  return kExitOk;
}

int run_line_sim(const ProbeOptions& o) {
  std::vector<probe::Access> trace;
  std::vector<probe::LayoutEntry> layout;
  std::string description;
  if (!o.generate.empty()) {
    auto c = probe::make_sharing_case(o.generate, o.generate_seed, o.generate_threads, o.generate_iterations);
    trace = std::move(c.trace);
    layout = std::move(c.layout);
    description = c.name + ": " + c.description;
    if (!o.write_trace.empty()) {
      write_file_atomic(o.write_trace, probe::encode_text_trace(trace));
      write_file_atomic(o.write_trace + ".layout", probe::encode_layout_map(layout));
    }
  } else {
    if (o.trace.empty()) throw UsageError("line-sim needs a TRACE file (or --generate CASE)");
    trace = probe::read_access_trace(o.trace);
    if (!o.layout.empty()) layout = probe::read_layout_map(o.layout);
    description = o.trace;
  }
  const auto sim = probe::simulate_lines(trace, o.sim_line_size, layout);
  const auto pred = probe::predict(trace, o.sim_line_size, o.predict_line_sizes, layout);
  nlohmann::json j{
      {"probe", "line-sim"},
      {"input", description},
      {"settings", {{"line_size", o.sim_line_size}, {"predict_line_sizes", o.predict_line_sizes}}},
      {"simulation", probe::to_json(sim)},
      {"predictions", probe::to_json(pred)}};
  emit(o, "line-sim", j, description + "\n" + probe::format_table(sim, pred, o.top), topology());
  return kExitOk;
}

int run_numa(const ProbeOptions& o) {
  auto s = o.numa;
  s.buffer_bytes = o.numa_buffer_mib << 20;
  const auto topo = topology();
  const auto r = probe::run_numa_probe(s, topo);
  emit(o, "numa", probe::to_json(r), probe::format_table(r), topo);
  return kExitOk;
}

int run_events(const ProbeOptions& o) {
  const auto pmus = probe::list_pmus(o.events_all || !o.events_pmu.empty(), o.events_pmu);
  if (!o.events_pmu.empty() && pmus.empty())
    throw UsageError("--pmu: no PMU named '" + o.events_pmu + "' on this machine" +
                     (probe::have_libpfm() ? "" : " (this build has no libpfm4)") +
                     "; `tokenscope probe events` lists the PMUs found");
  auto events = o.events.empty() ? probe::default_events() : resolve_events(o.events);
  const probe::PerfCounters counters(events);
  std::string paranoid;
  if (std::ifstream f("/proc/sys/kernel/perf_event_paranoid"); f) std::getline(f, paranoid);

  nlohmann::json j{{"probe", "events"},
                   {"libpfm4", probe::have_libpfm()},
                   {"perf_event_paranoid", paranoid},
                   {"counting", counters.supported()},
                   {"events", probe::to_json(events)}};
  if (!counters.supported()) j["unsupported"] = counters.unsupported_reason();
  auto& pj = j["pmus"] = nlohmann::json::array();
  for (const auto& p : pmus)
    pj.push_back({{"name", p.pmu},
                  {"description", p.description},
                  {"core", p.core},
                  {"default", p.is_default},
                  {"event_count", p.event_count},
                  {"events", p.events}});

  std::string t;
  t += probe::have_libpfm() ? "event names: libpfm4\n"
                            : "event names: perf's generic names only (built without libpfm4)\n";
  t += "counting here: " +
       (counters.supported() ? std::string("yes") : "no: " + counters.unsupported_reason()) +
       (paranoid.empty() ? "" : "  (perf_event_paranoid " + paranoid + ")") + "\n";
  if (!pmus.empty()) {
    t += "\nPMUs found\n";
    for (const auto& p : pmus)
      t += fmt::format("  {:<28} {:>5} events  {}{}\n", p.pmu, p.event_count, p.description,
                       p.core ? "" : " (system-wide only: not countable per process)");
  }
  t += o.events.empty() ? "\ndefault events\n" : "\nevents\n";
  for (const auto& e : events)
    t += fmt::format("  {}  [{}{}] type {} config {:#x}{}{}\n", e.name, e.source,
                     e.role.empty() ? "" : ", " + e.role, e.type, e.config,
                     e.config1 ? fmt::format(" config1 {:#x}", e.config1) : "",
                     e.encoding != e.name ? "\n      = " + e.encoding : "");
  if (probe::have_libpfm() && !probe::sharing_event())
    t += "  (libpfm4 knows no HITM-like event for this CPU's PMU)\n";
  for (const auto& p : pmus) {
    if (p.events.empty()) continue;
    t += fmt::format("\n{} events\n", p.pmu);
    for (const auto& e : p.events) t += "  " + p.pmu + "::" + e + "\n";
  }
  emit(o, "events", j, t, topology());
  return kExitOk;
}

int gpu_exit(bool ran) {
  if (!ran) std::cerr << "tokenscope: the probe did not run here (exit code 4); see the reason above\n";
  return ran ? kExitOk : kExitProbeUnavailable;
}

int run_gpu_context(const ProbeOptions& o) {
  auto s = o.gpu_context;
  s.green_contexts = !o.no_green;
  s.cupti = !o.no_cupti;
  const auto r = probe::run_gpu_context_probe(s);
  emit(o, "gpu-context", probe::to_json(r), probe::format_table(r), topology());
  write_gpu_extras(o, r.nvml, r.cupti);
  return gpu_exit(r.ran);
}

int run_kv_swap(const ProbeOptions& o) {
  auto s = o.kv_swap;
  s.kv_bytes.clear();
  for (auto m : o.kv_mib) s.kv_bytes.push_back(m << 20);
  s.chunk_bytes.clear();
  for (auto k : o.chunk_kib) s.chunk_bytes.push_back(k << 10);
  s.overlap_decode = !o.no_overlap;
  s.cupti = !o.no_cupti;
  s.max_host_bytes = o.max_host_mib << 20;
  for (int t : s.tenants)
    if (t < 1 || t > 64) throw UsageError("--tenants takes counts from 1 to 64");
  const auto r = probe::run_kv_swap_probe(s);
  emit(o, "kv-swap", probe::to_json(r), probe::format_table(r), topology());
  write_gpu_extras(o, r.nvml, r.cupti);
  return gpu_exit(r.ran);
}

int run_collectives(const ProbeOptions& o) {
  if (!o.parse.empty()) {
    std::ifstream in(o.parse);
    if (!in) throw UsageError("cannot open " + o.parse);
    std::stringstream ss;
    ss << in.rdbuf();
    const auto parsed =
        probe::parse_nccl_tests(ss.str(), o.parse, o.collective.empty() ? o.parse : o.collective);
    const std::string coll = o.collective.empty() ? parsed.collective : o.collective;
    if (parsed.ranks <= 0)
      throw InputError(o.parse, 0, "ranks",
                       "'# Rank' lines or '# nThread N nGpus M' in the nccl-tests header");
    const auto a = probe::analyze_collective(coll, parsed.ranks, parsed.rows);
    nlohmann::json j{{"probe", "collectives"},
                     {"source", o.parse},
                     {"parsed", probe::to_json(parsed)},
                     {"analysis", probe::to_json(a)}};
    emit(o, "collectives", j, probe::format_table(a, parsed.rows), topology());
    return kExitOk;
  }
  const auto r = probe::run_collectives_probe(o.collectives);
  emit(o, "collectives", probe::to_json(r), probe::format_table(r), topology());
  return gpu_exit(r.ran);
}

int run_probe(const ProbeOptions& o, const CLI::App& cmd);

}  // namespace

// Long by nature: every probe subcommand and its options, in --help order.
Command add_probe_command(CLI::App& app) {
  const auto options = std::make_shared<ProbeOptions>();
  auto& o = *options;
  CLI::App* cmd = app.add_subcommand(
      "probe",
      "Hardware probes for the root causes behind throughput collapses: cache-line false sharing\n"
      "and KV layouts on the CPU, GPU context switching, KV swapping and collectives.");
  cmd->require_subcommand(1);

  auto* cl = cmd->add_subcommand(
      "cache-line",
      "Line size (stride and coherence sweeps), the false-sharing penalty (packed vs padded\n"
      "counters) with 95% intervals, and core-to-core CAS latency");
  cl->add_option("--threads", o.cache_line.threads,
                 "Threads for the false-sharing test, 1..64 [default: one per physical core, 2..64]")
      ->check(thread_count());
  cl->add_option("--increments", o.cache_line.increments_per_thread,
                 "Counter updates per thread per repetition")
      ->capture_default_str();
  cl->add_option("--repetitions", o.cache_line.repetitions, "Repetitions of every variant (interleaved)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cl->add_option("--stride-mib", o.stride_mib,
                 "Stride-sweep buffer, MiB [default: 4x the last-level cache, 64..512]");
  cl->add_option("--ping-pong-round-trips", o.cache_line.ping_pong_round_trips,
                 "CAS round trips per repetition")
      ->capture_default_str();
  cl->add_option("--ping-pong-repetitions", o.cache_line.ping_pong_repetitions,
                 "Ping-pong repetitions per pair")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  cl->add_option("--max-pairs", o.cache_line.max_ping_pong_pairs,
                 "Most cpu pairs to ping-pong (sampled evenly beyond)")
      ->capture_default_str();
  cl->add_option("--skip", o.cache_line_skip,
                 "Parts to leave out: stride, coherence, false-sharing, ping-pong")
      ->delimiter(',');
  add_events_option(cl, o);
  add_output(cl, o);
  cl->callback([] {});

  auto* kv = cmd->add_subcommand(
      "kv-layout",
      "A CPU KV cache in head-interleaved or head-contiguous layout with packed or padded\n"
      "per-sequence metadata: line straddling and sharing, and decode throughput per layout");
  auto& geo = o.kv.geometry;
  kv->add_option("--block-size", geo.block_size, "Tokens per KV block")->capture_default_str();
  kv->add_option("--head-dim", geo.head_dim, "Elements per head")->capture_default_str();
  kv->add_option("--kv-heads", geo.kv_heads, "KV heads")->capture_default_str();
  kv->add_option("--dtype", geo.dtype, "bf16, fp16 or fp8 (fp32 also accepted)")->capture_default_str();
  kv->add_option("--base-offset", geo.base_offset_bytes, "Bytes the pool starts past a line boundary")
      ->capture_default_str();
  kv->add_option("--line-size", geo.line_size, "Cache line size for the analysis, bytes")
      ->capture_default_str();
  kv->add_option("--metadata-pad", geo.metadata_pad_bytes, "Slot size of padded metadata, bytes")
      ->capture_default_str();
  kv->add_option("--threads", o.kv.threads, "Threads, 1..64 [default: one per physical core, 2..64]")
      ->check(thread_count());
  kv->add_option("--sequences", o.kv.sequences, "Sequences [default: 4 per thread]");
  kv->add_option("--tokens", o.kv.tokens_per_sequence, "Decode steps (tokens appended per sequence)")
      ->capture_default_str();
  kv->add_option("--read-window", o.kv.read_window, "K rows read back per step (attention window)")
      ->capture_default_str();
  kv->add_option("--repetitions", o.kv.repetitions, "Repetitions of every variant (interleaved)")
      ->capture_default_str();
  kv->add_option("--layout", o.kv_layouts, "both, head-interleaved or head-contiguous")
      ->capture_default_str();
  kv->add_option("--split", o.kv_splits, "both, sequence or head: how threads divide the work")
      ->capture_default_str();
  kv->add_option("--metadata", o.kv_metadata, "both, packed or padded")->capture_default_str();
  add_events_option(kv, o);
  add_output(kv, o);
  kv->callback([] {});

  auto* ls = cmd->add_subcommand(
      "line-sim",
      "Replay an address trace through a per-line ownership model: true vs false sharing per\n"
      "line (a perf-c2c-like table) and what another line size or padding would change");
  ls->add_option("trace", o.trace,
                 "Trace file: text (THREAD ADDRESS SIZE r|w) or binary (from access_recorder.h)");
  ls->add_option("--layout", o.layout,
                 "Layout map (ADDRESS SIZE NAME per line) naming the objects on each line");
  ls->add_option("--line-size", o.sim_line_size, "Line size of the model, bytes (power of two, 8..256)")
      ->capture_default_str();
  ls->add_option("--predict-line-sizes", o.predict_line_sizes, "Other line sizes to predict for")
      ->delimiter(',')
      ->capture_default_str();
  ls->add_option("--top", o.top, "Lines in the table")->capture_default_str();
  std::string cases;
  for (const auto& n : probe::sharing_case_names()) cases += (cases.empty() ? "" : ", ") + n;
  ls->add_option("--generate", o.generate, "Use a built-in microbenchmark instead of a file: " + cases);
  ls->add_option("--seed", o.generate_seed, "Seed of the generated interleaving")->capture_default_str();
  ls->add_option("--gen-threads", o.generate_threads, "Threads of the generated case")->capture_default_str();
  ls->add_option("--gen-iterations", o.generate_iterations, "Iterations per thread of the generated case")
      ->capture_default_str();
  ls->add_option("--write-trace", o.write_trace, "Also write the generated trace (text) and FILE.layout");
  add_output(ls, o);
  ls->callback([] {});

  auto* nu = cmd->add_subcommand(
      "numa", "Local vs remote memory bandwidth and the cross-node false-sharing penalty (libnuma)");
  nu->add_option("--buffer-mib", o.numa_buffer_mib, "Bandwidth buffer, MiB")->capture_default_str();
  nu->add_option("--repetitions", o.numa.repetitions, "Repetitions")->capture_default_str();
  add_output(nu, o);
  nu->callback([] {});

  auto* ev = cmd->add_subcommand(
      "events",
      "The hardware events the probes can count here: the PMUs libpfm4 finds, the default set\n"
      "(with this CPU's HITM event) and whether perf_event_open may count them");
  ev->add_option("--pmu", o.events_pmu, "List every event of this PMU (as named under 'PMUs found')");
  ev->add_flag("--all", o.events_all, "List every event of every PMU found");
  add_events_option(ev, o);
  add_output(ev, o);
  ev->callback([] {});

  auto* gc = cmd->add_subcommand(
      "gpu-context",
      "Latency of CUDA context create/destroy/set/push/pop per scheduling flag, primary-context\n"
      "retain/release, green contexts, first kernel launch in a fresh context");
  gc->add_option("--device", o.gpu_context.device, "GPU index")->capture_default_str();
  gc->add_option("--repetitions", o.gpu_context.repetitions, "Repetitions per operation")
      ->capture_default_str();
  gc->add_flag("--no-green", o.no_green, "Skip green contexts");
  gc->add_flag("--no-cupti", o.no_cupti, "Do not capture CUPTI activity");
  add_output(gc, o);
  gc->callback([] {});

  auto* ks = cmd->add_subcommand(
      "kv-swap",
      "Tenant switches that evict one tenant's KV cache to pinned host memory and restore\n"
      "another's: switch latency, GB/s per direction, small-transfer collapse, decode overlap");
  ks->add_option("--device", o.kv_swap.device, "GPU index")->capture_default_str();
  ks->add_option("--tenants", o.kv_swap.tenants, "Tenant counts")->delimiter(',')->capture_default_str();
  ks->add_option("--kv-mib", o.kv_mib, "KV cache size per tenant, MiB")
      ->delimiter(',')
      ->capture_default_str();
  ks->add_option("--chunk-kib", o.chunk_kib, "Per-transfer size, KiB (0: one copy per cache)")
      ->delimiter(',')
      ->capture_default_str();
  ks->add_option("--switches", o.kv_swap.switches, "Switches per configuration")->capture_default_str();
  ks->add_option("--repetitions", o.kv_swap.repetitions, "Repetitions per bandwidth point")
      ->capture_default_str();
  ks->add_option("--max-host-mib", o.max_host_mib, "Pinned host memory cap, MiB")->capture_default_str();
  ks->add_flag("--no-overlap", o.no_overlap, "Do not run the decode-like kernel beside the copies");
  ks->add_flag("--no-cupti", o.no_cupti, "Do not capture CUPTI activity");
  add_output(ks, o);
  ks->callback([] {});

  auto* co = cmd->add_subcommand(
      "collectives",
      "NCCL all-reduce and all-to-all over the visible GPUs (algbw, busbw, alpha-beta fit,\n"
      "per-pair matrix), or the same analysis of nccl-tests output with --parse");
  co->add_option("--parse", o.parse, "Analyse this nccl-tests output file instead of running NCCL");
  co->add_option("--collective", o.collective,
                 "Collective of the parsed file (all_reduce, alltoall, ...) when it does not say");
  co->add_option("--min-bytes", o.collectives.min_bytes, "Smallest size")->capture_default_str();
  co->add_option("--max-bytes", o.collectives.max_bytes, "Largest size")->capture_default_str();
  co->add_option("--factor", o.collectives.factor, "Size step factor")->capture_default_str();
  co->add_option("--iterations", o.collectives.iterations, "Timed iterations per size")
      ->capture_default_str();
  co->add_option("--warmup", o.collectives.warmup, "Warm-up iterations per size")->capture_default_str();
  add_output(co, o);
  co->callback([] {});
  return {cmd, [options, cmd] { return run_probe(*options, *cmd); }};
}

namespace {

int run_probe(const ProbeOptions& o, const CLI::App& cmd) {
  for (const CLI::App* sub : cmd.get_subcommands()) {
    const std::string name = sub->get_name();
    if (name == "cache-line") return run_cache_line(o);
    if (name == "kv-layout") return run_kv_layout(o);
    if (name == "line-sim") return run_line_sim(o);
    if (name == "numa") return run_numa(o);
    if (name == "events") return run_events(o);
    if (name == "gpu-context") return run_gpu_context(o);
    if (name == "kv-swap") return run_kv_swap(o);
    if (name == "collectives") return run_collectives(o);
  }
  return kExitUsage;
}

}  // namespace

}  // namespace tokenscope::cli
