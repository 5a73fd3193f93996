#include "probe/kv_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>

#include "core/error.h"

namespace tokenscope::probe {

std::string to_string(KvLayout l) {
  return l == KvLayout::kHeadInterleaved ? "head-interleaved" : "head-contiguous";
}
std::string to_string(KvSplit s) {
  return s == KvSplit::kBySequence ? "by-sequence" : "by-head";
}

int dtype_bytes(const std::string& dtype) {
  if (dtype == "bf16" || dtype == "fp16") return 2;
  if (dtype == "fp8") return 1;
  if (dtype == "fp32") return 4;
  throw UsageError("dtype must be bf16, fp16, fp8 or fp32, got '" + dtype + "'");
}

int KvGeometry::row_bytes() const {
  return head_dim * dtype_bytes(dtype);
}
std::uint64_t KvGeometry::block_bytes() const {
  return 2ull * static_cast<std::uint64_t>(block_size) * static_cast<std::uint64_t>(kv_heads) *
         static_cast<std::uint64_t>(row_bytes());
}

namespace {

// Byte offsets of the cache and metadata, shared by the analysis and the
// timed run so that both look at exactly the same addresses.
struct KvAddressing {
  KvGeometry g;
  KvLayout layout;
  bool padded;
  int sequences;
  int blocks_per_sequence;
  std::uint64_t row;
  std::uint64_t block;
  std::uint64_t kv_bytes;     // the pool, from its (possibly misaligned) start
  std::uint64_t meta_offset;  // where metadata starts (line-aligned, after the pool)
  std::uint64_t meta_bytes;

  KvAddressing(const KvGeometry& geo, KvLayout l, bool pad, int seqs, int bps)
      : g(geo), layout(l), padded(pad), sequences(seqs), blocks_per_sequence(bps) {
    row = static_cast<std::uint64_t>(g.row_bytes());
    block = g.block_bytes();
    kv_bytes = block * static_cast<std::uint64_t>(seqs) * static_cast<std::uint64_t>(bps);
    const std::uint64_t L = static_cast<std::uint64_t>(g.line_size);
    const std::uint64_t pool_end = static_cast<std::uint64_t>(g.base_offset_bytes) + kv_bytes;
    meta_offset = (pool_end + 4096 + L - 1) / L * L;
    const std::uint64_t S = static_cast<std::uint64_t>(seqs), H = static_cast<std::uint64_t>(g.kv_heads);
    const std::uint64_t P = static_cast<std::uint64_t>(g.metadata_pad_bytes);
    meta_bytes = padded ? (S + S * H) * P : align(S * 4) * 2 + S * H * 4;
  }
  std::uint64_t align(std::uint64_t v) const {
    const std::uint64_t L = static_cast<std::uint64_t>(g.line_size);
    return (v + L - 1) / L * L;
  }
  std::uint64_t row_at(int seq, int token, int head, int kv) const {
    const std::uint64_t b =
        static_cast<std::uint64_t>(seq) * static_cast<std::uint64_t>(blocks_per_sequence) +
        static_cast<std::uint64_t>(token / g.block_size);
    const std::uint64_t t = static_cast<std::uint64_t>(token % g.block_size);
    const std::uint64_t h = static_cast<std::uint64_t>(head);
    const std::uint64_t within = layout == KvLayout::kHeadInterleaved
                                     ? (t * static_cast<std::uint64_t>(g.kv_heads) + h) * row
                                     : (h * static_cast<std::uint64_t>(g.block_size) + t) * row;
    return static_cast<std::uint64_t>(g.base_offset_bytes) + b * block +
           static_cast<std::uint64_t>(kv) * (block / 2) + within;
  }
  // Sequence length and tokens-generated counters, and per-(seq, head) progress.
  std::uint64_t len_at(int seq) const {
    return meta_offset +
           (padded ? static_cast<std::uint64_t>(seq) * pad() : static_cast<std::uint64_t>(seq) * 4);
  }
  std::uint64_t generated_at(int seq) const {
    return padded ? len_at(seq) + 4
                  : meta_offset + align(static_cast<std::uint64_t>(sequences) * 4) +
                        static_cast<std::uint64_t>(seq) * 4;
  }
  std::uint64_t progress_at(int seq, int head) const {
    const std::uint64_t idx = static_cast<std::uint64_t>(seq) * static_cast<std::uint64_t>(g.kv_heads) +
                              static_cast<std::uint64_t>(head);
    const std::uint64_t S = static_cast<std::uint64_t>(sequences);
    return padded ? meta_offset + (S + idx) * pad() : meta_offset + align(S * 4) * 2 + idx * 4;
  }
  std::uint64_t pad() const { return static_cast<std::uint64_t>(g.metadata_pad_bytes); }
};

int writer_of(KvSplit split, int seq, int head, int threads) {
  return split == KvSplit::kBySequence ? seq % threads : head % threads;
}

void validate(const KvGeometry& g) {
  if (g.block_size < 1 || g.block_size > 1024) throw UsageError("--block-size must be 1..1024");
  if (g.head_dim < 1 || g.head_dim > 1024) throw UsageError("--head-dim must be 1..1024");
  if (g.kv_heads < 1 || g.kv_heads > 256) throw UsageError("--kv-heads must be 1..256");
  if (g.line_size < 8 || (g.line_size & (g.line_size - 1)) != 0 || g.line_size > 4096)
    throw UsageError("--line-size must be a power of two from 8 to 4096");
  if (g.base_offset_bytes < 0 || g.base_offset_bytes > 4096)
    throw UsageError("--base-offset must be 0..4096 bytes");
  if (g.metadata_pad_bytes < 8 || g.metadata_pad_bytes > 4096 || g.metadata_pad_bytes % 8 != 0)
    throw UsageError("--metadata-pad must be a multiple of 8 from 8 to 4096 bytes");
  (void)dtype_bytes(g.dtype);
}

}  // namespace

KvAnalysis analyze_kv_layout(const KvGeometry& g, KvLayout layout, KvSplit split, bool metadata_padded,
                             int threads, int sequences, int blocks_per_sequence) {
  validate(g);
  if (threads < 1 || threads > 64) throw UsageError("the analysis takes 1..64 threads");
  KvAddressing a(g, layout, metadata_padded, sequences, blocks_per_sequence);
  KvAnalysis r;
  r.layout = layout;
  r.split = split;
  r.metadata_padded = metadata_padded;
  const std::uint64_t L = static_cast<std::uint64_t>(g.line_size);
  std::unordered_map<std::uint64_t, std::uint64_t> kv_writers;  // line -> thread mask
  std::unordered_map<std::uint64_t, std::uint32_t> rows_on_line;
  const int tokens = g.block_size * blocks_per_sequence;
  const std::uint64_t min_lines = (a.row + L - 1) / L;
  auto visit_rows = [&](auto&& fn) {
    for (int s = 0; s < sequences; ++s)
      for (int t = 0; t < tokens; ++t)
        for (int h = 0; h < g.kv_heads; ++h)
          for (int kv = 0; kv < 2; ++kv) fn(s, h, a.row_at(s, t, h, kv));
  };
  visit_rows([&](int s, int h, std::uint64_t start) {
    const std::uint64_t first = start / L, last = (start + a.row - 1) / L;
    ++r.rows;
    if (last - first + 1 > min_lines) ++r.rows_straddling;
    const std::uint64_t mask = 1ull << writer_of(split, s, h, threads);
    for (std::uint64_t l = first; l <= last; ++l) {
      kv_writers[l] |= mask;
      ++rows_on_line[l];
    }
  });
  visit_rows([&](int, int, std::uint64_t start) {
    const std::uint64_t first = start / L, last = (start + a.row - 1) / L;
    if (rows_on_line[first] > 1 || rows_on_line[last] > 1) ++r.rows_sharing_lines;
  });
  r.kv_lines = kv_writers.size();
  for (const auto& [_, m] : kv_writers)
    if ((m & (m - 1)) != 0) ++r.kv_lines_shared;

  std::map<std::uint64_t, std::uint64_t> meta_writers;
  auto mark = [&](std::uint64_t off, int thread) { meta_writers[off / L] |= 1ull << thread; };
  for (int s = 0; s < sequences; ++s) {
    const int owner = split == KvSplit::kBySequence ? s % threads : 0;
    mark(a.len_at(s), owner);
    mark(a.generated_at(s), owner);
    for (int h = 0; h < g.kv_heads; ++h) mark(a.progress_at(s, h), writer_of(split, s, h, threads));
  }
  r.metadata_lines = meta_writers.size();
  for (const auto& [_, m] : meta_writers)
    if ((m & (m - 1)) != 0) ++r.metadata_lines_shared;
  return r;
}

namespace {
std::string variant_name(KvLayout layout, KvSplit split, bool padded) {
  return fmt::format("{} {} {}", to_string(layout), to_string(split), padded ? "padded" : "packed");
}
}  // namespace

std::string KvVariantResult::name() const {
  return variant_name(analysis.layout, analysis.split, analysis.metadata_padded);
}

namespace {

using Clock = std::chrono::steady_clock;

// A sense-reversing spin barrier: decode workers of an engine spin between
// steps rather than sleep, and a futex wake-up per step (std::barrier) costs
// more than the step itself on a small VM. Yields after a while so an
// oversubscribed run still makes progress.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    const bool sense = !sense_.load(std::memory_order_relaxed);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      count_.store(0, std::memory_order_relaxed);
      sense_.store(sense, std::memory_order_release);
      return;
    }
    for (int spins = 0; sense_.load(std::memory_order_acquire) != sense; ++spins)
      if (spins > 2000) std::this_thread::yield();
  }

 private:
  const int n_;
  alignas(128) std::atomic<int> count_{0};
  alignas(128) std::atomic<bool> sense_{false};
};

// Positions wrap around the `tokens` slots of each sequence (a ring), so a
// run of `steps` > tokens keeps the cache's size and layout fixed.
double run_variant(const KvAddressing& a, KvSplit split, const std::vector<int>& cpus, int tokens, int window,
                   long long steps, char* mem, std::atomic<std::uint64_t>& sink) {
  const int T = static_cast<int>(cpus.size());
  const int S = a.sequences, H = a.g.kv_heads;
  for (int s = 0; s < S; ++s) {
    std::memset(mem + a.len_at(s), 0, 4);
    std::memset(mem + a.generated_at(s), 0, 4);
    for (int h = 0; h < H; ++h) std::memset(mem + a.progress_at(s, h), 0, 4);
  }
  SpinBarrier step_barrier(T);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  auto i32 = [&](std::uint64_t off) { return reinterpret_cast<volatile std::int32_t*>(mem + off); };
  std::vector<std::thread> workers;
  for (int w = 0; w < T; ++w) {
    workers.emplace_back([&, w] {
      pin_current_thread(cpus[static_cast<std::size_t>(w)]);
      std::vector<unsigned char> source(a.row, static_cast<unsigned char>(w + 1));
      std::vector<std::pair<int, int>> items;  // (seq, head) this thread appends
      for (int s = 0; s < S; ++s)
        for (int h = 0; h < H; ++h)
          if (writer_of(split, s, h, T) == w) items.emplace_back(s, h);
      std::uint64_t acc = 0;
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      for (long long step = 0; step < steps; ++step) {
        for (std::size_t i = 0; i < items.size(); ++i) {
          const auto [s, h] = items[i];
          const int len = *i32(a.len_at(s));
          const int pos = len % tokens;
          source[0] = static_cast<unsigned char>(step);
          std::memcpy(mem + a.row_at(s, pos, h, 0), source.data(), a.row);
          std::memcpy(mem + a.row_at(s, pos, h, 1), source.data(), a.row);
          for (int back = std::min(window, len + 1) - 1; back >= 0; --back) {
            const char* p = mem + a.row_at(s, (pos - back + tokens) % tokens, h, 0);
            for (std::uint64_t b = 0; b + 8 <= a.row; b += 8) {
              std::uint64_t v;
              std::memcpy(&v, p + b, 8);
              acc += v;
            }
            acc += static_cast<unsigned char>(p[a.row - 1]);
          }
          *i32(a.progress_at(s, h)) = *i32(a.progress_at(s, h)) + 1;
          if (split == KvSplit::kBySequence && (i + 1 == items.size() || items[i + 1].first != s)) {
            *i32(a.len_at(s)) = *i32(a.len_at(s)) + 1;
            *i32(a.generated_at(s)) = *i32(a.generated_at(s)) + 1;
          }
        }
        step_barrier.arrive_and_wait();
        if (split == KvSplit::kByHead) {
          if (w == 0)
            for (int s = 0; s < S; ++s) {
              *i32(a.len_at(s)) = *i32(a.len_at(s)) + 1;
              *i32(a.generated_at(s)) = *i32(a.generated_at(s)) + 1;
            }
          step_barrier.arrive_and_wait();
        }
      }
      sink.fetch_add(acc, std::memory_order_relaxed);
    });
  }
  while (ready.load() < T) std::this_thread::yield();
  const auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& t : workers) t.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

// Long: every layout x split x metadata variant, interleaved over the
// repetitions in one loop (so that drift hits every variant alike).
KvLayoutResult run_kv_layout_probe(const KvLayoutSettings& s, const Topology& topo) {
  validate(s.geometry);
  if (s.tokens_per_sequence < 1 || s.tokens_per_sequence > 1'000'000)
    throw UsageError("--tokens must be 1..1000000");
  if (s.read_window < 1) throw UsageError("--read-window must be at least 1");
  if (s.repetitions < 1) throw UsageError("--repetitions must be at least 1");
  KvLayoutResult r;
  r.settings = s;
  r.topology = topo;
  const int physical = static_cast<int>(topo.one_cpu_per_core().size());
  if (s.threads < 0 || s.threads > kMaxProbeThreads)
    throw UsageError(fmt::format("--threads: expected 1..{} threads, got {}", kMaxProbeThreads, s.threads));
  const int threads = s.threads > 0 ? s.threads : std::clamp(physical, 2, kMaxProbeThreads);
  bool siblings = false;
  r.cpus_used = choose_cpus(topo, threads, siblings);
  if (topo.online_cpus.size() <= 1)
    r.caveat = "one cpu online: threads take turns, so sharing costs cannot show";
  else if (siblings)
    r.caveat = "some threads run on SMT siblings that share L1: sharing between them costs nothing";
  const int sequences = s.sequences > 0 ? s.sequences : 4 * threads;
  r.settings.threads = threads;
  r.settings.sequences = sequences;
  const int bps = (s.tokens_per_sequence + s.geometry.block_size - 1) / s.geometry.block_size;

  struct Variant {
    KvLayout layout;
    KvSplit split;
    bool padded;
  };
  std::vector<Variant> variants;
  for (auto l : s.layouts)
    for (auto sp : s.splits)
      for (bool p : s.metadata) variants.push_back({l, sp, p});
  if (variants.empty()) throw UsageError("no kv-layout variant selected");

  std::vector<KvAddressing> addr;
  std::uint64_t bytes = 0;
  for (const auto& v : variants) {
    addr.emplace_back(s.geometry, v.layout, v.padded, sequences, bps);
    bytes = std::max(bytes, addr.back().meta_offset + addr.back().meta_bytes + 64);
  }
  void* raw = nullptr;
  if (posix_memalign(&raw, 4096, bytes) != 0) throw std::bad_alloc();
  std::unique_ptr<char, decltype(&std::free)> mem(static_cast<char*>(raw), &std::free);
  std::memset(mem.get(), 0, bytes);

  std::atomic<std::uint64_t> sink{0};
  // Calibrate: enough steps that the first variant's run lasts
  // min_seconds_per_run, the same steps for every variant.
  long long steps = s.tokens_per_sequence;
  if (s.min_seconds_per_run > 0) {
    const double t = run_variant(addr[0], variants[0].split, r.cpus_used, s.tokens_per_sequence,
                                 s.read_window, steps, mem.get(), sink);
    if (t > 0 && t < s.min_seconds_per_run)
      steps = std::min<long long>(steps * 1000,
                                  static_cast<long long>(std::ceil(steps * s.min_seconds_per_run / t)));
  }
  r.steps_per_run = steps;
  PerfCounters counters(s.events.empty() ? default_events() : s.events);
  std::vector<std::string> names;
  for (const auto& v : variants) names.push_back(variant_name(v.layout, v.split, v.padded));
  CounterTotals counts(counters, names);
  std::vector<std::vector<double>> times(variants.size());
  for (int rep = 0; rep < s.repetitions; ++rep)
    for (std::size_t i = 0; i < variants.size(); ++i) {
      if (counters.supported()) counters.start();
      times[i].push_back(run_variant(addr[i], variants[i].split, r.cpus_used, s.tokens_per_sequence,
                                     s.read_window, steps, mem.get(), sink));
      if (counters.supported()) counts.add(i, counters.stop());
    }

  std::size_t best = 0;
  std::vector<double> med(variants.size());
  for (std::size_t i = 0; i < variants.size(); ++i) {
    med[i] = median_ci(times[i]).median;
    if (med[i] < med[best]) best = i;
  }
  const double positions = static_cast<double>(sequences) * static_cast<double>(steps);
  r.counters = counts.to_json("position", positions * s.repetitions);
  for (std::size_t i = 0; i < variants.size(); ++i) {
    KvVariantResult v;
    v.analysis = analyze_kv_layout(s.geometry, variants[i].layout, variants[i].split, variants[i].padded,
                                   std::min(threads, 64), sequences, bps);
    std::vector<double> tps;
    for (double t : times[i]) tps.push_back(positions / t);
    v.tokens_per_s = median_ci(tps);
    v.vs_best = ratio_ci(times[i], times[best]);
    r.variants.push_back(v);
  }
  r.winner = r.variants[best].name();
  // Padding effect per (layout, split), layout effect per (split, metadata).
  auto find = [&](KvLayout l, KvSplit sp, bool p) -> int {
    for (std::size_t i = 0; i < variants.size(); ++i)
      if (variants[i].layout == l && variants[i].split == sp && variants[i].padded == p)
        return static_cast<int>(i);
    return -1;
  };
  for (auto l : s.layouts)
    for (auto sp : s.splits) {
      const int packed = find(l, sp, false), padded = find(l, sp, true);
      if (packed < 0 || padded < 0) continue;
      const auto ratio =
          ratio_ci(times[static_cast<std::size_t>(packed)], times[static_cast<std::size_t>(padded)]);
      r.findings.push_back(fmt::format("{} {}: packed metadata takes {} x the time of padded", to_string(l),
                                       to_string(sp), format_ci(ratio)));
    }
  for (auto sp : s.splits)
    for (bool p : s.metadata) {
      const int il = find(KvLayout::kHeadInterleaved, sp, p), hc = find(KvLayout::kHeadContiguous, sp, p);
      if (il < 0 || hc < 0) continue;
      const auto ratio = ratio_ci(times[static_cast<std::size_t>(il)], times[static_cast<std::size_t>(hc)]);
      r.findings.push_back(fmt::format("{} {}: head-interleaved takes {} x the time of head-contiguous",
                                       to_string(sp), p ? "padded" : "packed", format_ci(ratio)));
    }
  r.verdict =
      fmt::format("fastest: {} ({:.0f} positions/s){}", r.winner, r.variants[best].tokens_per_s.median,
                  r.caveat.empty() ? "" : "; NOTE: " + r.caveat);
  return r;
}

nlohmann::json to_json(const KvLayoutResult& r) {
  const auto& s = r.settings;
  const auto& g = s.geometry;
  nlohmann::json j;
  j["probe"] = "kv-layout";
  j["settings"] = {{"block_size", g.block_size},
                   {"head_dim", g.head_dim},
                   {"kv_heads", g.kv_heads},
                   {"dtype", g.dtype},
                   {"row_bytes", g.row_bytes()},
                   {"base_offset_bytes", g.base_offset_bytes},
                   {"line_size", g.line_size},
                   {"metadata_pad_bytes", g.metadata_pad_bytes},
                   {"threads", s.threads},
                   {"sequences", s.sequences},
                   {"tokens_per_sequence", s.tokens_per_sequence},
                   {"read_window", s.read_window},
                   {"repetitions", s.repetitions},
                   {"min_seconds_per_run", s.min_seconds_per_run},
                   {"steps_per_run", r.steps_per_run}};
  j["cpus_used"] = r.cpus_used;
  j["caveat"] = r.caveat;
  auto& vs = j["variants"] = nlohmann::json::array();
  for (const auto& v : r.variants) {
    const auto& a = v.analysis;
    vs.push_back({{"name", v.name()},
                  {"layout", to_string(a.layout)},
                  {"split", to_string(a.split)},
                  {"metadata", a.metadata_padded ? "padded" : "packed"},
                  {"analysis",
                   {{"rows", a.rows},
                    {"rows_straddling", a.rows_straddling},
                    {"straddle_share", a.straddle_share()},
                    {"rows_sharing_lines", a.rows_sharing_lines},
                    {"shared_row_share", a.shared_row_share()},
                    {"kv_lines", a.kv_lines},
                    {"kv_lines_shared_between_threads", a.kv_lines_shared},
                    {"metadata_lines", a.metadata_lines},
                    {"metadata_lines_shared_between_threads", a.metadata_lines_shared}}},
                  {"positions_per_s", to_json(v.tokens_per_s)},
                  {"time_vs_fastest", to_json(v.vs_best)}});
  }
  j["winner"] = r.winner;
  j["perf_counters"] = r.counters;
  j["findings"] = r.findings;
  j["verdict"] = r.verdict;
  return j;
}

std::string format_table(const KvLayoutResult& r) {
  const auto& g = r.settings.geometry;
  std::string out = fmt::format(
      "KV cache: block {} tokens, head_dim {}, {} KV heads, {} ({} B rows), base offset {} B, {} B lines; "
      "{} threads on cpus {}, {} sequences x {} token slots, {} decode steps a run, read window {}\n",
      g.block_size, g.head_dim, g.kv_heads, g.dtype, g.row_bytes(), g.base_offset_bytes, g.line_size,
      r.settings.threads, fmt::join(r.cpus_used, ","), r.settings.sequences, r.settings.tokens_per_sequence,
      r.steps_per_run, r.settings.read_window);
  if (!r.caveat.empty()) out += "NOTE: " + r.caveat + "\n";
  out += fmt::format("\n  {:<40} {:>9} {:>9} {:>12} {:>12} {:>16} {:>22}\n", "variant", "straddle",
                     "row-share", "kv shared", "meta shared", "positions/s", "time vs fastest [CI]");
  for (const auto& v : r.variants) {
    const auto& a = v.analysis;
    out +=
        fmt::format("  {:<40} {:>8.1f}% {:>8.1f}% {:>6}/{:<5} {:>6}/{:<5} {:>16.0f} {:>22}\n", v.name(),
                    100 * a.straddle_share(), 100 * a.shared_row_share(), a.kv_lines_shared, a.kv_lines,
                    a.metadata_lines_shared, a.metadata_lines, v.tokens_per_s.median, format_ci(v.vs_best));
  }
  out += "\n";
  for (const auto& f : r.findings) out += "  " + f + "\n";
  out += "  " + r.verdict + "\n";
  out += format_counters(r.counters, "  ");
  return out;
}

}  // namespace tokenscope::probe
