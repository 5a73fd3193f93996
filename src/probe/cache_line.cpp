#include "probe/cache_line.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "probe/perf_counters.h"

namespace tokenscope::probe {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct AlignedBuffer {
  explicit AlignedBuffer(std::size_t bytes, std::size_t align = 4096) : size(bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, align, bytes) != 0) throw std::bad_alloc();
    data = static_cast<char*>(p);
    std::memset(data, 0, bytes);  // fault every page in before timing
  }
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  char* data = nullptr;
  std::size_t size = 0;
};

int hdis() {
#ifdef __cpp_lib_hardware_interference_size
  return static_cast<int>(std::hardware_destructive_interference_size);
#else
  return 64;
#endif
}

double sweep_once(char* buf, std::size_t bytes, std::size_t stride) {
  volatile char* p = buf;
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < bytes; i += stride) p[i] = static_cast<char>(p[i] + 1);
  return seconds_since(t0);
}

std::uint64_t last_level_cache_bytes(const Topology& t) {
  std::uint64_t best = 0;
  int best_level = 0;
  for (const auto& c : t.caches)
    if (c.type != "Instruction" && c.level >= best_level) {
      best_level = c.level;
      best = c.size_bytes;
    }
  return best;
}

// One compare-and-swap ping-pong between two pinned threads; returns the
// one-way latency in ns (round trip / 2), or a negative value when a thread
// could not be pinned (then nothing is timed: two unpinned spinning threads
// on one cpu would take a scheduler tick per hand-over).
double ping_pong_once(int cpu_a, int cpu_b, std::uint64_t round_trips) {
  alignas(128) std::atomic<std::uint64_t> flag{0};
  std::atomic<int> responder_state{0};  // 0 starting, 1 pinned, -1 could not pin
  std::atomic<bool> abort{false};
  std::thread responder([&] {
    responder_state.store(pin_current_thread(cpu_b) ? 1 : -1);
    for (std::uint64_t k = 0; k < round_trips && !abort.load(std::memory_order_relaxed); ++k) {
      std::uint64_t expected = 2 * k + 1;
      while (!flag.compare_exchange_weak(expected, 2 * k + 2, std::memory_order_acq_rel)) {
        if (abort.load(std::memory_order_relaxed)) return;
        expected = 2 * k + 1;
      }
    }
  });
  // The initiator is a thread of its own too, so the caller's affinity is left alone.
  double one_way_ns = -1.0;
  std::thread initiator([&] {
    const bool pinned = pin_current_thread(cpu_a);
    while (responder_state.load() == 0) std::this_thread::yield();
    if (!pinned || responder_state.load() < 0) {
      abort.store(true);
      return;
    }
    const auto t0 = Clock::now();
    for (std::uint64_t k = 0; k < round_trips; ++k) {
      std::uint64_t expected = 2 * k;
      while (!flag.compare_exchange_weak(expected, 2 * k + 1, std::memory_order_acq_rel)) expected = 2 * k;
    }
    const std::uint64_t done = 2 * round_trips;
    while (flag.load(std::memory_order_acquire) != done) {
    }
    one_way_ns = seconds_since(t0) * 1e9 / (2.0 * static_cast<double>(round_trips));
  });
  initiator.join();
  responder.join();
  return one_way_ns;
}

}  // namespace

int find_stride_knee(const std::vector<int>& strides, const std::vector<double>& sweep_times, double drop) {
  for (std::size_t i = 0; i + 1 < strides.size() && i + 1 < sweep_times.size(); ++i) {
    if (sweep_times[i] <= 0.0) continue;
    if (sweep_times[i + 1] < drop * sweep_times[i]) return strides[i];
  }
  return 0;
}

std::string false_sharing_verdict(const MedianCi& penalty, const std::string& sharing_caveat,
                                  std::size_t threads) {
  if (!sharing_caveat.empty()) return "cannot show here: " + sharing_caveat;
  if (penalty.ci_low && *penalty.ci_low > 1.1)
    return fmt::format("false sharing costs {} x (packed vs padded to 64 B, median [95% CI]) with {} threads",
                       format_ci(penalty), threads);
  // Packing faster than padding, beyond the interval: false sharing cannot
  // do that, and the probe cannot say what did. Said so, with what would tell.
  if (penalty.ci_high && *penalty.ci_high < 0.9)
    return fmt::format(
        "unexplained: packed ran faster than padded to 64 B ({} x), which false sharing cannot cause; "
        "possible causes this probe cannot see: threads on vCPUs that share a physical core behind the "
        "topology a virtual machine reports (their L1 shared, so packed lines never leave it), or a "
        "prefetcher that pulls the padded lines' neighbours; what would tell: the perf counters of each "
        "variant (probe cache-line on a host with perf access: HITM per increment), a rerun with --threads 2 "
        "on cpus known to be separate cores, or on bare metal",
        format_ci(penalty));
  if (penalty.ci_high && *penalty.ci_high < 1.1)
    return fmt::format("no false-sharing penalty measured between separate cores ({} x)", format_ci(penalty));
  return fmt::format("inconclusive: packed/padded64 = {} x; raise --repetitions", format_ci(penalty));
}

int find_coherence_granularity(const std::vector<int>& distances, const std::vector<double>& slowdowns,
                               double threshold) {
  const std::size_t n = std::min(distances.size(), slowdowns.size());
  // Last distance still above the threshold; the granularity is the next one.
  std::optional<std::size_t> last_above;
  for (std::size_t i = 0; i < n; ++i)
    if (slowdowns[i] >= threshold) last_above = i;
  if (!last_above || *last_above + 1 >= n) return 0;
  return distances[*last_above + 1];
}

CounterRun time_counter_updates(const std::vector<int>& cpus, char* base, std::size_t stride_bytes,
                                std::uint64_t increments) {
  const std::size_t n = cpus.size();
  std::atomic<std::size_t> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> cpu_seconds(n, 0.0);
  std::vector<std::thread> workers;
  workers.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    workers.emplace_back([&, i] {
      pin_current_thread(cpus[i]);
      volatile std::uint64_t* counter = reinterpret_cast<volatile std::uint64_t*>(base + i * stride_bytes);
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      const double c0 = thread_cpu_seconds();
      for (std::uint64_t k = 0; k < increments; ++k) *counter = *counter + 1;
      cpu_seconds[i] = thread_cpu_seconds() - c0;
    });
  }
  while (ready.load() < n) std::this_thread::yield();
  const auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& w : workers) w.join();
  CounterRun run;
  run.seconds = seconds_since(t0);
  double total = 0;
  for (double c : cpu_seconds) total += c;
  run.concurrency = run.seconds > 0 ? total / run.seconds : 0.0;
  return run;
}

// Long: the probe's sweeps in the order they run (stride, coherence,
// packed/padded counters, ping-pong), sharing the pinned threads.
CacheLineResult run_cache_line_probe(const CacheLineSettings& s, const Topology& topo) {
  CacheLineResult r;
  r.settings = s;
  r.topology = topo;
  r.hardware_destructive_interference_size = hdis();
  const int physical = static_cast<int>(topo.one_cpu_per_core().size());
  if (s.threads < 0 || s.threads > kMaxProbeThreads)
    throw UsageError(fmt::format("--threads: expected 1..{} threads, got {}", kMaxProbeThreads, s.threads));
  const int threads = s.threads > 0 ? s.threads : std::clamp(physical, 2, kMaxProbeThreads);
  r.cpus_used = choose_cpus(topo, threads, r.siblings_used);
  r.single_cpu = topo.online_cpus.size() <= 1;
  if (r.single_cpu) {
    r.sharing_caveat =
        "one cpu online: the threads take turns on one core and never hold the line at the same time, so "
        "false "
        "sharing cannot show here (this is not a 'no false sharing' result)";
  } else if (r.siblings_used) {
    r.sharing_caveat =
        "some chosen cpus are SMT siblings of one core (thread_siblings_list): they share the L1 cache, so "
        "the "
        "line never moves between them and false sharing cannot show between them";
  }

  if (s.run_stride) {
    std::uint64_t bytes = s.stride_buffer_bytes;
    if (bytes == 0)
      bytes = std::clamp<std::uint64_t>(4 * last_level_cache_bytes(topo), 64ull << 20, 512ull << 20);
    AlignedBuffer buf(bytes);
    const std::vector<int> strides{8, 16, 32, 64, 128, 256, 512};
    std::vector<std::vector<double>> times(strides.size());
    for (int rep = 0; rep < s.stride_repetitions; ++rep)
      for (std::size_t i = 0; i < strides.size(); ++i)
        times[i].push_back(sweep_once(buf.data, buf.size, static_cast<std::size_t>(strides[i])) * 1e3);
    std::vector<double> medians;
    for (std::size_t i = 0; i < strides.size(); ++i) {
      StridePoint p;
      p.stride_bytes = strides[i];
      p.sweep_ms = median_ci(times[i]);
      std::vector<double> per_access;
      const double accesses = static_cast<double>(bytes) / strides[i];
      for (double ms : times[i]) per_access.push_back(ms * 1e6 / accesses);
      p.ns_per_access = median_ci(per_access);
      medians.push_back(p.sweep_ms.median);
      r.stride.push_back(p);
    }
    r.stride_line_size = find_stride_knee(strides, medians);
  }

  PerfCounters counters(s.events.empty() ? default_events() : s.events);
  r.counters = CounterTotals(counters, {}).to_json("increment", 0);

  if (s.run_coherence && r.cpus_used.size() >= 2) {
    const std::vector<int> pair{r.cpus_used[0], r.cpus_used[1]};
    const std::vector<int> distances{8, 16, 32, 64, 128, 256, 4096};
    AlignedBuffer buf(2 * 4096 + 4096);
    std::vector<std::vector<double>> times(distances.size());
    for (int rep = 0; rep < s.repetitions; ++rep)
      for (std::size_t i = 0; i < distances.size(); ++i)
        times[i].push_back(time_counter_updates(pair, buf.data, static_cast<std::size_t>(distances[i]),
                                                s.increments_per_thread)
                               .seconds);
    const auto& far = times.back();
    std::vector<double> slow;
    for (std::size_t i = 0; i + 1 < distances.size(); ++i) {
      DistancePoint p;
      p.distance_bytes = distances[i];
      p.seconds = median_ci(times[i]);
      p.slowdown = ratio_ci(times[i], far);
      slow.push_back(p.slowdown.median);
      r.coherence.push_back(p);
    }
    DistancePoint farp;
    farp.distance_bytes = distances.back();
    farp.seconds = median_ci(far);
    farp.slowdown = ratio_ci(far, far);
    r.coherence.push_back(farp);
    if (r.sharing_caveat.empty()) {
      std::vector<int> d(distances.begin(), distances.end() - 1);
      r.coherence_line_size = find_coherence_granularity(d, slow);
      if (r.coherence_line_size == 0 && !slow.empty() && slow.back() >= 1.3) r.coherence_line_size = 4096;
    }
  }
  if (r.coherence_line_size > 0) {
    r.detected_line_size = r.coherence_line_size;
  } else if (r.stride_line_size > 0) {
    r.detected_line_size = r.stride_line_size;
  } else if (const auto l = topo.reported_line_size()) {
    r.detected_line_size = *l;
  }

  if (s.run_false_sharing && !r.cpus_used.empty()) {
    struct V {
      std::string name;
      int stride;
    };
    std::vector<V> variants{{"packed", 8}, {"padded64", 64}, {"padded128", 128}};
    const int h = r.hardware_destructive_interference_size;
    if (h != 64 && h != 128 && h > 8) variants.push_back({"padded_hdis", h});
    AlignedBuffer buf(static_cast<std::size_t>(r.cpus_used.size()) * 256 + 4096);
    std::vector<std::vector<double>> times(variants.size());
    std::vector<std::string> names;
    for (const auto& v : variants) names.push_back(v.name);
    CounterTotals counts(counters, names);  // over every repetition
    std::vector<double> concurrency;
    for (int rep = 0; rep < s.repetitions; ++rep) {
      for (std::size_t i = 0; i < variants.size(); ++i) {
        const bool count = counters.supported();
        if (count) counters.start();
        const auto run = time_counter_updates(
            r.cpus_used, buf.data, static_cast<std::size_t>(variants[i].stride), s.increments_per_thread);
        times[i].push_back(run.seconds);
        concurrency.push_back(run.concurrency);
        if (count) counts.add(i, counters.stop());
      }
    }
    r.concurrency = median_ci(concurrency).median;
    const double threads_d = static_cast<double>(r.cpus_used.size());
    if (r.sharing_caveat.empty() && threads_d >= 2 && r.concurrency < 0.75 * threads_d)
      r.sharing_caveat = fmt::format(
          "the threads ran at the same time only {:.2f} of {} cpus' worth (sum of thread CPU time / wall "
          "time): "
          "other load on these cpus kept them apart, so a line rarely had two owners at once and the penalty "
          "cannot show fully; rerun on an idle machine",
          r.concurrency, r.cpus_used.size());
    for (std::size_t i = 0; i < variants.size(); ++i) {
      PaddingVariant v;
      v.name = variants[i].name;
      v.stride_bytes = variants[i].stride;
      v.seconds = median_ci(times[i]);
      std::vector<double> per;
      for (double t : times[i]) per.push_back(t * 1e9 / static_cast<double>(s.increments_per_thread));
      v.ns_per_increment = median_ci(per);
      r.variants.push_back(v);
    }
    r.counters =
        counts.to_json("increment", static_cast<double>(s.increments_per_thread) * threads_d * s.repetitions);
    for (std::size_t i = 1; i < variants.size(); ++i)
      r.ratios.push_back({"packed/" + variants[i].name, ratio_ci(times[0], times[i])});
    if (variants.size() > 2) r.ratios.push_back({"padded64/padded128", ratio_ci(times[1], times[2])});

    r.verdict = false_sharing_verdict(r.ratios.front().ratio, r.sharing_caveat, r.cpus_used.size());
  }

  if (s.run_ping_pong && topo.online_cpus.size() >= 2) {
    std::vector<std::pair<int, int>> pairs;
    for (std::size_t i = 0; i < topo.online_cpus.size(); ++i)
      for (std::size_t j = i + 1; j < topo.online_cpus.size(); ++j)
        pairs.emplace_back(topo.online_cpus[i], topo.online_cpus[j]);
    if (s.max_ping_pong_pairs > 0 && static_cast<int>(pairs.size()) > s.max_ping_pong_pairs) {
      std::vector<std::pair<int, int>> sampled;
      const double step = static_cast<double>(pairs.size()) / s.max_ping_pong_pairs;
      for (int k = 0; k < s.max_ping_pong_pairs; ++k)
        sampled.push_back(pairs[static_cast<std::size_t>(k * step)]);
      pairs = std::move(sampled);
    }
    for (const auto& [a, b] : pairs) {
      std::vector<double> ns;
      bool failed = false;
      for (int rep = 0; rep < s.ping_pong_repetitions && !failed; ++rep) {
        const double v = ping_pong_once(a, b, s.ping_pong_round_trips);
        if (v < 0)
          failed = true;
        else
          ns.push_back(v);
      }
      if (failed) continue;  // a cpu we may not run on (cgroup cpuset): no number rather than a wrong one
      r.ping_pong.push_back({a, b, topo.are_siblings(a, b), median_ci(ns)});
    }
  }
  return r;
}

nlohmann::json to_json(const CacheLineResult& r) {
  nlohmann::json j;
  j["probe"] = "cache-line";
  const auto& s = r.settings;
  j["settings"] = {{"threads", s.threads},
                   {"increments_per_thread", s.increments_per_thread},
                   {"repetitions", s.repetitions},
                   {"stride_buffer_bytes", s.stride_buffer_bytes},
                   {"stride_repetitions", s.stride_repetitions},
                   {"ping_pong_round_trips", s.ping_pong_round_trips},
                   {"ping_pong_repetitions", s.ping_pong_repetitions},
                   {"max_ping_pong_pairs", s.max_ping_pong_pairs}};
  j["cpus_used"] = r.cpus_used;
  j["siblings_used"] = r.siblings_used;
  j["single_cpu"] = r.single_cpu;
  j["sharing_caveat"] = r.sharing_caveat;
  j["concurrency"] = r.concurrency;
  j["hardware_destructive_interference_size"] = r.hardware_destructive_interference_size;
  // A size the probe did not find is null (unknown), never 0 bytes.
  const auto size_or_null = [](int bytes) {
    return bytes > 0 ? nlohmann::json(bytes) : nlohmann::json(nullptr);
  };
  j["line_size"] = {{"detected", size_or_null(r.detected_line_size)},
                    {"stride_knee", size_or_null(r.stride_line_size)},
                    {"coherence_granularity", size_or_null(r.coherence_line_size)},
                    {"sysfs", size_or_null(r.topology.reported_line_size().value_or(0))}};
  auto& st = j["stride_sweep"] = nlohmann::json::array();
  for (const auto& p : r.stride)
    st.push_back({{"stride_bytes", p.stride_bytes},
                  {"sweep_ms", to_json(p.sweep_ms)},
                  {"ns_per_access", to_json(p.ns_per_access)}});
  auto& co = j["coherence_sweep"] = nlohmann::json::array();
  for (const auto& p : r.coherence)
    co.push_back({{"distance_bytes", p.distance_bytes},
                  {"seconds", to_json(p.seconds)},
                  {"slowdown_vs_far", to_json(p.slowdown)}});
  auto& va = j["false_sharing"]["variants"] = nlohmann::json::array();
  for (const auto& v : r.variants)
    va.push_back({{"name", v.name},
                  {"stride_bytes", v.stride_bytes},
                  {"seconds", to_json(v.seconds)},
                  {"ns_per_increment", to_json(v.ns_per_increment)}});
  auto& ra = j["false_sharing"]["ratios"] = nlohmann::json::array();
  for (const auto& x : r.ratios) ra.push_back({{"name", x.name}, {"ratio", to_json(x.ratio)}});
  j["false_sharing"]["verdict"] = r.verdict;
  j["false_sharing"]["perf_counters"] = r.counters;
  auto& pp = j["core_to_core"] = nlohmann::json::array();
  for (const auto& p : r.ping_pong)
    pp.push_back({{"cpu_a", p.cpu_a},
                  {"cpu_b", p.cpu_b},
                  {"siblings", p.siblings},
                  {"one_way_ns", to_json(p.one_way_ns)}});
  return j;
}

std::string format_table(const CacheLineResult& r) {
  std::string out;
  out += fmt::format("cpu: {}  ({} online, {} physical cores; threads pinned to cpus {})\n",
                     r.topology.cpu_model, r.topology.online_cpus.size(),
                     r.topology.one_cpu_per_core().size(), fmt::join(r.cpus_used, ","));
  if (!r.sharing_caveat.empty()) out += "NOTE: " + r.sharing_caveat + "\n";
  const auto bytes = [](int b) { return b > 0 ? fmt::format("{} B", b) : std::string("not found"); };
  out += fmt::format(
      "line size: detected {} (stride knee {}, coherence granularity {}, sysfs {}); "
      "std::hardware_destructive_interference_size {} B\n",
      bytes(r.detected_line_size), bytes(r.stride_line_size), bytes(r.coherence_line_size),
      bytes(r.topology.reported_line_size().value_or(0)), r.hardware_destructive_interference_size);
  if (!r.stride.empty()) {
    out += "\nstride sweep (one read-modify-write per stride over the buffer)\n";
    out += fmt::format("  {:>8}  {:>22}  {:>12}\n", "stride B", "sweep ms [95% CI]", "ns/access");
    for (const auto& p : r.stride)
      out += fmt::format("  {:>8}  {:>22}  {:>12.2f}\n", p.stride_bytes, format_ci(p.sweep_ms, 2),
                         p.ns_per_access.median);
  }
  if (!r.coherence.empty()) {
    out += "\ncoherence sweep (2 threads, counters DISTANCE bytes apart; slowdown vs 4096 B apart)\n";
    out += fmt::format("  {:>10}  {:>14}  {:>24}\n", "distance B", "median s", "slowdown [95% CI]");
    for (const auto& p : r.coherence)
      out += fmt::format("  {:>10}  {:>14.4f}  {:>24}\n", p.distance_bytes, p.seconds.median,
                         format_ci(p.slowdown));
  }
  if (!r.variants.empty()) {
    out += fmt::format("\nfalse sharing ({} threads, {} increments each)\n", r.cpus_used.size(),
                       r.settings.increments_per_thread);
    out += fmt::format("  {:<12}  {:>8}  {:>14}  {:>12}\n", "variant", "stride B", "median s", "ns/incr");
    for (const auto& v : r.variants)
      out += fmt::format("  {:<12}  {:>8}  {:>14.4f}  {:>12.2f}\n", v.name, v.stride_bytes, v.seconds.median,
                         v.ns_per_increment.median);
    for (const auto& x : r.ratios) out += fmt::format("  {:<22} {}\n", x.name, format_ci(x.ratio));
    out += "  verdict: " + r.verdict + "\n";
    out += format_counters(r.counters, "  ");
  }
  if (!r.ping_pong.empty()) {
    out += "\ncore-to-core latency (CAS ping-pong, one way, ns median [95% CI])\n";
    for (const auto& p : r.ping_pong)
      out += fmt::format("  cpu {:>3} <-> cpu {:>3}{}  {}\n", p.cpu_a, p.cpu_b,
                         p.siblings ? " (siblings)" : "", format_ci(p.one_way_ns, 1));
  }
  return out;
}

}  // namespace tokenscope::probe
