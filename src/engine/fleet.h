// A fleet of engines behind a router (docs/engine.md "Fleets"): each
// request is routed once, on arrival, to one replica, which runs it on its
// own clock. Between two arrivals the replicas are independent: each runs
// every step that starts before the next arrival, and only then is the
// arrival routed, so that it reaches its replica before any step that
// starts after it (as run_simulation does for one engine). A router that
// reads no replica's state (round-robin, session-affinity) lets the
// replicas run apart: run_fleet_simulation routes 60 s of arrivals first,
// then runs each replica through them in one go (the same steps).
//
// Routers:
//   round-robin       request k to replica k mod N;
//   least-loaded      the replica with the fewest outstanding tokens (prompts
//                     and outputs of its requests not yet finished);
//   power-of-two      two replicas at random (seeded), the less loaded;
//   prefix-affinity   the replica that was sent the longest prefix of the
//                     prompt (whole blocks, an index of what each replica was
//                     sent), among those under the load bound (bound x the
//                     mean load after this request: consistent hashing with
//                     bounded loads); a prompt that matches nowhere goes to
//                     its first block's point on a consistent-hash ring (the
//                     first replica clockwise under the bound), so that
//                     requests sharing a first block meet;
//   session-affinity  the session's point on the ring, always (sessions:
//                     the request's session key; sim's are its tenants).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/random.h"
#include "engine/engine.h"
#include "engine/simulator.h"
#include "workload/workload.h"

namespace tokenscope::engine {

enum class RouterPolicy : std::uint8_t {
  kRoundRobin,
  kLeastLoaded,
  kPowerOfTwo,
  kPrefixAffinity,
  kSessionAffinity,
};
// UsageError naming --router for an unknown name.
RouterPolicy parse_router_policy(std::string_view name);
std::string_view name_of(RouterPolicy p);

struct RouterSettings {
  RouterPolicy policy = RouterPolicy::kRoundRobin;
  std::uint64_t seed = 0;              // power-of-two's choices
  std::uint32_t block_tokens = 16;     // prefix-affinity's blocks
  double load_bound = 1.25;            // prefix-affinity: at most this x the mean load
  std::uint32_t ring_points = 64;      // points per replica on the ring
  std::size_t index_blocks = 1 << 20;  // blocks remembered per replica (oldest forgotten first)
  // Pools of different speeds: least-loaded, power-of-two and
  // prefix-affinity's bound compare each replica's load over its speed
  // (reference_tokens_per_s), the time its outstanding tokens take to
  // drain, not the tokens alone. Round-robin and session-affinity ignore it.
  bool speed_weighted = true;
};

// A replica's speed for the routers: the tokens of a reference step (a
// 2,048-token prefill chunk beside 64 sequences decoding at 1,024 tokens of
// context) over the step's time under its cost model.
double reference_tokens_per_s(const CostModel& cost);

struct RouteKey {
  std::uint64_t id = 0;
  std::span<const tokenizers::TokenId> prompt;
  std::uint64_t session = 0;
  double tokens = 0;              // what it adds to its replica's load: prompt and output tokens
  std::uint64_t prefix_seed = 0;  // its tenant and adapter: prefixes match within one only
};

class Router {
 public:
  Router(const RouterSettings& s, std::size_t replicas);
  // The replica for a request; loads: each replica's outstanding tokens.
  std::size_t route(const RouteKey& k, std::span<const double> loads);
  const RouterSettings& settings() const { return s_; }
  // Prefix-affinity: the blocks of the prompt the chosen replica had been
  // sent before (0 for other policies).
  std::uint32_t last_match_blocks() const { return last_match_; }
  // Each replica's speed (any unit; > 0); the routers weigh loads by them
  // when settings().speed_weighted. Equal speeds change nothing.
  void set_speeds(std::span<const double> speeds);
  std::span<const double> weights() const { return weights_; }
  // Whether route() reads the replicas' loads or what they were sent
  // (false: round-robin and session-affinity, whose choice depends on the
  // arrivals alone).
  bool reads_state() const {
    return s_.policy != RouterPolicy::kRoundRobin && s_.policy != RouterPolicy::kSessionAffinity;
  }

 private:
  std::size_t on_ring(std::uint64_t key, std::span<const double> loads, double bound) const;
  // A replica's load over its weight (its speed over the mean speed).
  double weighted(std::span<const double> loads, std::size_t i) const {
    return weights_.empty() ? loads[i] : loads[i] / weights_[i];
  }
  std::size_t least(std::span<const double> loads) const;
  RouterSettings s_;
  std::vector<double> weights_;  // empty: every replica alike
  std::size_t n_;
  std::uint64_t next_ = 0;
  Rng rng_;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> ring_;  // (point, replica), sorted
  // Per replica: chained block hashes it was sent, with when (LRU by count).
  struct Index {
    std::unordered_map<std::uint64_t, std::uint64_t> seen;  // block hash -> last use
    std::uint64_t clock = 0;
  };
  std::vector<Index> index_;
  std::uint32_t last_match_ = 0;
};

// One replica's engine: its resolved engine and settings (a pool's GPU and
// TP degree, engine/pools.h), and its pool.
struct ReplicaSpec {
  EffectiveEngine eff;
  EngineSettings settings;
  std::size_t pool = 0;
};

// Prefill/decode disaggregation (docs/engine.md "Disaggregated prefill"),
// as Splitwise and DistServe run it and vLLM's disaggregated serving does:
// replicas [0, P) only prefill, the rest only decode. A request is routed to
// a prefill replica (the fleet's router) and runs there with one output
// token (vLLM's max_tokens 1 to the prefill instance; that token is not
// delivered). When it ends, its prompt's KV (prompt tokens x the prefill
// replica's KV bytes per token) goes over that replica's link: transfers
// leave one at a time (bandwidth), each arrives a latency after it left.
// On arrival it is routed to a decode replica (decode_policy over the decode
// replicas' loads), which admits it with the KV in place (blocks taken, no
// compute; the last prompt token is computed and samples the first token)
// and generates every output token. The first token the client sees is the
// decode replica's: TTFT counts the prefill, the transfer and the decode
// queue. A decode replica short of blocks keeps it waiting, KV held
// elsewhere (no back-pressure on the link is modelled).
struct Disaggregation {
  std::size_t prefill_replicas = 0;  // 0: off
  double link_bytes_per_s = 50e9;    // per prefill replica (400 Gb/s)
  Nanos link_latency_ns = 10'000;
  RouterPolicy decode_policy = RouterPolicy::kLeastLoaded;
};

// One KV transfer of a disaggregated fleet.
struct KvTransfer {
  std::uint64_t id = 0;
  std::uint32_t prefill_replica = 0;
  std::int32_t decode_replica =
      -1;  // its index in the fleet once delivered, even if rejected there (-1: in flight)
  double bytes = 0;
  Nanos ready = 0;   // the prefill ended
  Nanos start = 0;   // it left (the link was free)
  Nanos arrive = 0;  // it reached the decode side
};

// N engines, each with its own cost model, their events forwarded to one
// observer; each replica's outstanding tokens kept for the router.
class Fleet {
 public:
  // N engines alike.
  Fleet(std::size_t replicas, const EffectiveEngine& eff, const EngineSettings& s,
        const std::function<std::unique_ptr<CostModel>()>& make_cost, EngineObserver* observer,
        const RouterSettings& router);
  // Engines of several pools (heterogeneous fleets); make_cost: each replica's cost model.
  Fleet(std::vector<ReplicaSpec> replicas,
        const std::function<std::unique_ptr<CostModel>(const ReplicaSpec&)>& make_cost,
        EngineObserver* observer, const RouterSettings& router);
  ~Fleet();
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  std::size_t size() const { return engines_.size(); }
  Engine& engine(std::size_t i) { return *engines_[i]; }
  const Engine& engine(std::size_t i) const { return *engines_[i]; }
  Router& router() { return router_; }
  // The replica a request was routed to; -1: not routed.
  int replica_of(std::uint64_t id) const;
  std::span<const double> loads() const { return loads_; }
  // Routes a request arriving at t and queues it on its replica (false:
  // rejected there). session: its session key. Requests that ended by t
  // are off their replicas' loads first.
  bool add_request(EngineRequest r, Nanos t, std::uint64_t session);
  // A router that reads no state (Router::reads_state false): routes a
  // request, then queues it on that replica (add_request in two halves, for
  // a loop that routes a stretch of arrivals before it runs the replicas).
  std::size_t route_only(std::uint64_t id, std::uint64_t session);
  bool add_request_to(std::size_t replica, EngineRequest r, Nanos t);
  // Takes the requests that ended by t off their replicas' loads (a
  // replica's step is computed whole, ahead of the arrivals within it).
  void settle(Nanos t);
  // Aborts a request wherever it is (its replica, or its KV in flight: the
  // transfer then delivers nothing). False: no engine held it.
  bool abort(std::uint64_t id, Nanos t);
  // A long-running fleet (serve): a request's route is forgotten once its
  // end is settled (replica_of then answers -1), and a KV transfer once it
  // is delivered (transfers() stays empty; link_bytes() still counts), so
  // that memory stays bounded. Set before the first request.
  void forget_ended(bool on) { forget_ended_ = on; }
  // A request refused before routing (too long for any replica): its record
  // through the observer, counted apart from every replica.
  void reject_unrouted(std::uint64_t id, Nanos t, std::string_view reason);
  std::uint64_t unrouted_rejects() const { return unrouted_rejects_; }
  // Why no replica could take a request (nullopt: one of the pools can).
  std::optional<std::string> admission_problem(std::uint64_t input_tokens, std::uint32_t output_tokens,
                                               std::uint32_t tenant) const;
  // The pool of replica i.
  std::size_t pool_of(std::size_t i) const { return pools_[i]; }
  // Each replica's reference speed (reference_tokens_per_s; pooled fleets only, else empty).
  std::span<const double> speeds() const { return speeds_; }

  // Disaggregates the fleet (before any request): the first
  // d.prefill_replicas replicas prefill, the others decode. Throws
  // UsageError unless both sides have a replica.
  void disaggregate(const Disaggregation& d);
  const std::optional<Disaggregation>& disaggregation() const { return pd_; }
  bool is_prefill(std::size_t i) const { return pd_ && i < pd_->prefill_replicas; }
  // The prefill replica of a request of a disaggregated fleet; -1: none.
  int prefill_replica_of(std::uint64_t id) const;
  // When the next KV transfer reaches the decode side (nullopt: none in flight).
  std::optional<Nanos> next_transfer() const;
  // Delivers the next transfer to its decode replica and returns that
  // replica (a rejection there included; -1: its request had ended).
  int deliver_next_transfer();
  // Every transfer, in the order the prefills ended.
  const std::vector<KvTransfer>& transfers() const { return transfers_; }
  // Bytes each prefill replica's link carried.
  std::span<const double> link_bytes() const { return link_bytes_; }

 private:
  struct Tap;
  std::vector<std::unique_ptr<Tap>> taps_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<double> loads_;
  std::vector<std::size_t> pools_;            // each replica's pool
  std::vector<double> speeds_;                // each replica's reference speed (pooled fleets)
  std::vector<std::size_t> representatives_;  // the first replica of each pool
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, double>> routed_;  // id -> (replica, tokens)
  Router router_;
  EngineObserver* observer_;
  // Ends not yet seen by the router: (when, id), earliest first.
  std::priority_queue<std::pair<Nanos, std::uint64_t>, std::vector<std::pair<Nanos, std::uint64_t>>,
                      std::greater<>>
      ends_;
  std::uint64_t unrouted_rejects_ = 0;
  bool forget_ended_ = false;
  void done(std::uint64_t id);

  // Disaggregation: the decode side's router, the requests between their
  // prefill and their decode (the request as it came, the prefill's first
  // schedule), the links and the transfers in flight.
  std::optional<Disaggregation> pd_;
  std::unique_ptr<Router> decode_router_;
  struct Pending {
    EngineRequest request;
    std::uint32_t prefill_replica = 0;
    Nanos first_scheduled = -1;
    std::uint32_t cached_tokens = 0;
    std::uint32_t preemptions = 0;
    Nanos arrival = 0;
    std::uint64_t session = 0;
  };
  std::unordered_map<std::uint64_t, Pending> pending_;
  std::unordered_map<std::uint64_t, std::uint32_t> prefill_of_;  // id -> its prefill replica
  std::vector<Nanos> link_free_;
  std::vector<double> link_bytes_;
  std::priority_queue<std::pair<Nanos, std::uint64_t>, std::vector<std::pair<Nanos, std::uint64_t>>,
                      std::greater<>>
      in_flight_;  // (arrival, index in transfers_)
  std::vector<KvTransfer> transfers_;
  std::unordered_map<std::uint64_t, KvTransfer> flying_;  // forget_ended: the transfers in flight
  std::uint64_t next_flying_ = 0;
  void prefill_done(const FinishedRequest& f, std::size_t replica);
};

struct FleetReport {
  SimReport total;                    // counters summed (peaks: the largest)
  std::vector<SimReport> replicas;    // each replica's
  std::vector<std::uint64_t> routed;  // requests routed to each replica
};

// Runs the whole workload through the fleet (or until *stop). Each
// request's session key is its tenant. Request holds (a perturbation's
// request tail) are not applied; step perturbations act on each replica
// (sim refuses --perturb with replicas).
// on_window(t), when given, is called whenever every replica has run every
// step that starts before t (before each arrival is routed): a sampler's
// moment to write the samples up to t (observe/sim_samples.h FleetSampler).
FleetReport run_fleet_simulation(const workload::Workload& w, Fleet& fleet,
                                 const std::atomic<bool>* stop = nullptr,
                                 const std::function<void(Nanos)>& on_window = {});

}  // namespace tokenscope::engine
