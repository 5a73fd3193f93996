// Injected perturbations: known changes to the engine's step times, request
// admission and capacity, written down as the ground truth against which the
// regression checklist's detectors are validated (docs/engine.md
// "Perturbations"). `sim --perturb SPEC` and `serve --perturb SPEC` share the
// grammar and the engine applies them, so both commands inject alike.
//
// SPEC is a ';'-separated list of KIND[:KEY=VALUE[,KEY=VALUE...]], or
// "none". Every value is a number (fractions may be written as per cent,
// "2%" = 0.02) except the words of target, dist and curve:
//   tail:target=steps|requests,fraction=F,dist=pareto,scale_ms=X,shape=A[,max_ms=M]
//   tail:target=...,fraction=F,dist=lognormal,median_ms=X,sigma=S[,max_ms=M]
//   warmup:factor=F,duration_s=D[,curve=linear|exp]
//   leak:per_min=R
//   steal:share=S,period_s=P,on_s=O[,offset_s=T]
//   batch_cap:max_num_seqs=N
//   kv:fraction=F
//   recompile:ms=X
// A kind appears at most once, except tail, once per target.
//
// Run time t is measured from the start of the engine's first step. A step
// whose cost model says d seconds takes, in this order,
//   d1 = d  * warmup(t)                          warmup: its extra is d1 - d
//   d2 = d1 * (1 + per_min * t / 60)             leak
//   d3 = d2 * (1 + share) inside an on-interval  steal (the stolen time d3 - d2
//                                                 comes at the end of the step)
//   d4 = d3 + ms on the first step of a shape    recompile
//   d5 = d4 + a tail draw for a `fraction` of the steps
// and each kind is charged what its own line adds. Draws are keyed by the
// step index or the request's key through hash functions of the
// perturbation seed, so they do not depend on the order of other draws and
// never touch the workload's random streams.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/clock.h"

namespace tokenscope::engine {

enum class PerturbationKind : std::uint8_t { kTail, kWarmup, kLeak, kSteal, kBatchCap, kKv, kRecompile };
inline constexpr PerturbationKind kPerturbationKinds[] = {
    PerturbationKind::kTail,     PerturbationKind::kWarmup,   PerturbationKind::kLeak,
    PerturbationKind::kSteal,    PerturbationKind::kBatchCap, PerturbationKind::kKv,
    PerturbationKind::kRecompile};
// "tail", "warmup", "leak", "steal", "batch_cap", "kv", "recompile".
std::string_view name_of(PerturbationKind k);
// A count per kind, indexed by PerturbationKind.
using PerturbationCounts = std::array<std::uint64_t, std::size(kPerturbationKinds)>;

enum class TailTarget : std::uint8_t { kSteps, kRequests };
enum class TailDistribution : std::uint8_t { kPareto, kLognormal };
enum class WarmupCurve : std::uint8_t { kLinear, kExponential };

// Extra latency on a fraction of the steps (every request in the batch sees
// it) or of the requests (held before they enter the engine's queue, as slow
// pre-processing would hold them: their TTFT grows).
struct TailParams {
  TailTarget target = TailTarget::kSteps;
  double fraction = 0.01;  // probability per step or request, [0, 1]
  TailDistribution dist = TailDistribution::kPareto;
  double scale_ms = 5.0;    // Pareto: the minimum x_m, ms
  double shape = 1.5;       // Pareto: the tail index alpha
  double median_ms = 5.0;   // lognormal: e^mu, ms
  double sigma = 1.0;       // lognormal: the standard deviation of the log
  double max_ms = 10000.0;  // every draw is capped here (a Pareto tail with alpha <= 1 has no mean)
};

// Step time multiplied by a factor that decays to 1 over the first
// duration_s seconds of the run (warmup_multiplier()).
struct WarmupParams {
  double factor = 2.0;  // the multiplier at t = 0, >= 1
  double duration_s = 60.0;
  WarmupCurve curve = WarmupCurve::kLinear;
};

// Step time growing linearly with run time.
struct LeakParams {
  double per_min = 0.01;  // fraction of the step time added per minute of run time
};

// A co-located process stealing time: during on-intervals (on_s seconds of
// every period_s, from offset_s) each step takes `share` more of its own time.
struct StealParams {
  double share = 0.5;
  double period_s = 20.0;
  double on_s = 10.0;
  double offset_s = 0.0;
};

// max_num_seqs lowered (or raised) to this.
struct BatchCapParams {
  std::uint32_t max_num_seqs = 0;
};

// A KV cache of floor(fraction * blocks) blocks (at least 1).
struct KvParams {
  double fraction = 0.5;
};

// The first step of each shape (shape_of()) takes ms longer.
struct RecompileParams {
  double ms = 100.0;
};

struct Perturbation {
  std::variant<TailParams, WarmupParams, LeakParams, StealParams, BatchCapParams, KvParams, RecompileParams>
      params;
  PerturbationKind kind() const { return static_cast<PerturbationKind>(params.index()); }
  // "kind" and every parameter, as the spec names them.
  nlohmann::json to_json() const;
};

// Parses SPEC (see above; "" and "none" give no perturbation). Throws
// UsageError naming the item (its position and text), the key and what was
// expected.
std::vector<Perturbation> parse_perturbation_spec(std::string_view spec);

// A --perturb value as settings hold it: parsed where it arrives (the CLI),
// with the text as given for run.json's "requested" settings.
struct PerturbationSpec {
  std::string text;  // as given ("" : none)
  std::vector<Perturbation> items;
};
PerturbationSpec parse_perturbations(std::string_view text);

// ---- the pure functions behind the step times ------------------------------------------

// Warm-up multiplier at run time t_s >= 0 (1 from duration_s on):
//   linear: 1 + (factor - 1) * (1 - t/D)
//   exp:    1 + (factor - 1) * (e^(-5t/D) - e^(-5)) / (1 - e^(-5))
// (exp decays with time constant D/5 and is shifted to reach exactly 1 at D).
double warmup_multiplier(const WarmupParams& p, double t_s);
// Leak multiplier at run time t_s: 1 + per_min * t_s / 60.
double leak_multiplier(const LeakParams& p, double t_s);
// Whether t_s falls in an on-interval: t_s >= offset_s and
// (t_s - offset_s) mod period_s < on_s.
bool steal_active(const StealParams& p, double t_s);
// The bucket of a count: the exponent of the smallest power of two >= n
// (0 for n <= 1): 1 -> 0, 2 -> 1, 3..4 -> 2, 5..8 -> 3, ...
std::uint32_t pow2_bucket(std::uint64_t n);
// A step's shape for recompilation: (pow2_bucket(sequences),
// pow2_bucket(new tokens)) packed as bucket_seqs * 64 + bucket_tokens, as
// CUDA-graph capture sizes and compiled kernels are keyed by padded sizes.
std::uint32_t shape_of(std::uint64_t num_seqs, std::uint64_t batched_tokens);
// The tail's extra milliseconds at the quantile 1 - u, u in (0, 1], capped at max_ms:
//   pareto:    scale_ms * u^(-1/shape)                   (scipy.stats.pareto(shape, scale=scale_ms).isf(u))
//   lognormal: median_ms * exp(sigma * Phi^-1(1 - u))    (scipy.stats.lognorm(sigma, scale=median_ms).isf(u))
double tail_draw_ms(const TailParams& p, double u);
// A uniform number in (0, 1] from a 64-bit hash: ((h >> 11) + 1) / 2^53.
double unit_from_hash(std::uint64_t h);

// What a perturbation did so far.
struct PerturbationTally {
  std::uint64_t count = 0;  // steps (or requests) it changed; batch_cap: steps at the cap; kv: steps run
  std::uint64_t seen = 0;   // steps (or requests) it looked at
  double extra_ms = 0.0;    // time it added
};

// One step's perturbation: the time added in all, and of it the time stolen
// (at the end of the step).
struct StepPerturbation {
  Nanos extra_ns = 0;
  Nanos stolen_ns = 0;
};

// What the capacity perturbations changed (for the ground truth).
struct CapacityBaseline {
  std::uint32_t max_num_seqs = 0;                 // before batch_cap
  std::optional<std::uint32_t> num_gpu_blocks;    // before kv
  std::optional<std::uint32_t> perturbed_blocks;  // after kv
};

// Applies the perturbations of one engine. Thread-safe: the engine's thread
// steps it while the server's threads read tallies() and to_json().
class Perturber {
 public:
  Perturber(std::vector<Perturbation> list, std::uint64_t seed, CapacityBaseline capacity);

  const std::vector<Perturbation>& list() const { return list_; }
  std::uint64_t seed() const { return seed_; }
  bool holds_requests() const { return request_tail_ >= 0; }
  // The extra time of one step, given its index, start, the cost model's
  // duration and its shape; tallies it.
  StepPerturbation on_step(std::uint64_t index, Nanos start, Nanos base_ns, std::uint64_t num_seqs,
                           std::uint64_t batched_tokens);
  // How long the request with this key (sim: the workload's request id;
  // serve: the order the server received it in) is held before it enters
  // the queue: 0 unless a request tail draws it.
  Nanos request_hold(std::uint64_t key);
  // Tallies in list() order.
  std::vector<PerturbationTally> tallies() const;
  // The tallies' counts summed per kind, indexed by PerturbationKind
  // (tokenscope:perturbations_injected_total{kind}).
  PerturbationCounts counts_by_kind() const;
  // The ground truth: per perturbation, to_json() with "injected" (docs/engine.md).
  nlohmann::json to_json() const;

 private:
  std::vector<Perturbation> list_;
  std::uint64_t seed_;
  CapacityBaseline capacity_;
  std::vector<std::uint64_t> seeds_;  // per perturbation, derived from seed_ and its kind (and target)
  // Indices in list_ of each kind, -1 when absent.
  int step_tail_ = -1, request_tail_ = -1, warmup_ = -1, leak_ = -1, steal_ = -1, batch_cap_ = -1, kv_ = -1,
      recompile_ = -1;
  mutable std::mutex mutex_;
  std::vector<PerturbationTally> tallies_;
  std::optional<Nanos> origin_;    // the first step's start
  std::vector<bool> shapes_seen_;  // by shape_of()
};

}  // namespace tokenscope::engine
