#include "engine/fleet.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace tokenscope::engine {

namespace {

constexpr std::array<std::pair<RouterPolicy, std::string_view>, 5> kRouterNames = {{
    {RouterPolicy::kRoundRobin, "round-robin"},
    {RouterPolicy::kLeastLoaded, "least-loaded"},
    {RouterPolicy::kPowerOfTwo, "power-of-two"},
    {RouterPolicy::kPrefixAffinity, "prefix-affinity"},
    {RouterPolicy::kSessionAffinity, "session-affinity"},
}};

// The chained hash of a prompt's blocks: block k's hash covers blocks 0..k.
std::uint64_t chain(std::uint64_t parent, std::span<const tokenizers::TokenId> block) {
  std::uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ULL);
  for (const auto t : block) h = mix64(h ^ t);
  return h;
}

}  // namespace

RouterPolicy parse_router_policy(std::string_view name) {
  for (const auto& [p, n] : kRouterNames)
    if (n == name) return p;
  throw UsageError(fmt::format(
      "--router: '{}' is not a router (expected round-robin, least-loaded, power-of-two, prefix-affinity or "
      "session-affinity)",
      name));
}

std::string_view name_of(RouterPolicy p) {
  for (const auto& [q, n] : kRouterNames)
    if (q == p) return n;
  return "?";
}

Router::Router(const RouterSettings& s, std::size_t replicas)
    : s_(s), n_(replicas), rng_(s.seed ^ 0x5eed0f07e5ULL), index_(replicas) {
  if (replicas == 0) throw UsageError("--replicas: expected at least 1");
  if (s_.block_tokens == 0) s_.block_tokens = 16;
  if (!(s_.load_bound >= 1.0)) throw UsageError("--router-load-bound: expected a number at least 1");
  for (std::uint32_t r = 0; r < replicas; ++r)
    for (std::uint32_t k = 0; k < std::max<std::uint32_t>(s_.ring_points, 1); ++k)
      ring_.emplace_back(mix64((std::uint64_t{r} << 32) ^ k ^ 0xa11ce5ULL), r);
  std::sort(ring_.begin(), ring_.end());
}

double reference_tokens_per_s(const CostModel& cost) {
  StepShape shape;
  shape.num_seqs = 65;
  shape.prefill_tokens = 2048;
  shape.prefill_attention_pairs = 2048.0 * 2049.0 / 2.0;
  shape.prefill_kv_read_tokens = 2048;
  shape.decode_tokens = 64;
  shape.decode_attention_pairs = 64.0 * 1025.0;
  shape.logit_tokens = 65;
  const double t = cost.step_cost(shape).total_s();
  return t > 0 ? (2048.0 + 64.0) / t : 0.0;
}

void Router::set_speeds(std::span<const double> speeds) {
  weights_.clear();
  if (!s_.speed_weighted || speeds.size() != n_) return;
  const double mean = std::accumulate(speeds.begin(), speeds.end(), 0.0) / static_cast<double>(n_);
  if (!(mean > 0) || !std::isfinite(mean)) return;
  bool alike = true;
  for (const double v : speeds) {
    if (!(v > 0) || !std::isfinite(v)) return;  // a speed unknown: every replica alike
    alike = alike && v == speeds[0];
  }
  if (alike) return;  // the same arithmetic as without weights
  for (const double v : speeds) weights_.push_back(v / mean);
}

std::size_t Router::least(std::span<const double> loads) const {
  std::size_t best = 0;
  for (std::size_t i = 1; i < loads.size(); ++i)
    if (weighted(loads, i) < weighted(loads, best)) best = i;
  return best;
}

std::size_t Router::on_ring(std::uint64_t key, std::span<const double> loads, double bound) const {
  auto it = std::lower_bound(ring_.begin(), ring_.end(), std::make_pair(key, std::uint32_t{0}));
  for (std::size_t step = 0; step < ring_.size(); ++step, ++it) {
    if (it == ring_.end()) it = ring_.begin();
    if (weighted(loads, it->second) <= bound) return it->second;
  }
  // Every replica over the bound (cannot happen with bound >= the mean): the least loaded.
  return least(loads);
}

std::size_t Router::route(const RouteKey& k, std::span<const double> loads) {
  last_match_ = 0;
  switch (s_.policy) {
    case RouterPolicy::kRoundRobin:
      return static_cast<std::size_t>(next_++ % n_);
    case RouterPolicy::kLeastLoaded:
      return least(loads);
    case RouterPolicy::kPowerOfTwo: {
      if (n_ == 1) return 0;
      const auto a = static_cast<std::size_t>(rng_.uniform_int(0, n_ - 1));
      auto b = static_cast<std::size_t>(rng_.uniform_int(0, n_ - 2));
      if (b >= a) ++b;
      return weighted(loads, b) < weighted(loads, a) ? b : a;
    }
    case RouterPolicy::kSessionAffinity:
      return on_ring(mix64(k.session ^ 0x5e55101ULL), loads, std::numeric_limits<double>::infinity());
    case RouterPolicy::kPrefixAffinity:
      break;
  }
  // Prefix affinity: the blocks' chained hashes, the longest prefix each
  // replica was sent, among the replicas under the bound.
  const std::size_t bs = s_.block_tokens;
  const std::size_t blocks = k.prompt.size() / bs;
  std::vector<std::uint64_t> hashes;
  hashes.reserve(std::max<std::size_t>(blocks, 1));
  // Seeded by the tenant and adapter, as the engine's prefix cache is keyed:
  // one tenant's prompt never matches another's.
  const std::uint64_t root = mix64(k.prefix_seed ^ 0x7e4a47ULL);
  std::uint64_t h = root;
  for (std::size_t b = 0; b < blocks; ++b) hashes.push_back(h = chain(h, k.prompt.subspan(b * bs, bs)));
  if (hashes.empty()) hashes.push_back(chain(root, k.prompt));  // under a block: the whole prompt
  // The bound on a replica's load over its weight: the weights' mean is 1,
  // so without weights this is load_bound x the mean load.
  const double total = std::accumulate(loads.begin(), loads.end(), 0.0) + k.tokens;
  const double bound = s_.load_bound * total / static_cast<double>(n_);
  std::size_t best = n_;
  std::size_t best_len = 0;
  for (std::size_t r = 0; r < n_; ++r) {
    if (weighted(loads, r) > bound) continue;  // over the bound: passed over
    const auto& seen = index_[r].seen;
    // The longest prefix present (prefixes are remembered whole: binary search).
    std::size_t lo = 0, hi = hashes.size();
    while (lo < hi) {
      const std::size_t mid = (lo + hi + 1) / 2;
      if (seen.count(hashes[mid - 1]) != 0)
        lo = mid;
      else
        hi = mid - 1;
    }
    if (lo > best_len ||
        (lo == best_len && lo > 0 && best < n_ && weighted(loads, r) < weighted(loads, best))) {
      best = r;
      best_len = lo;
    }
  }
  std::size_t chosen;
  if (best < n_ && best_len > 0) {
    chosen = best;
    last_match_ = static_cast<std::uint32_t>(best_len);
  } else {
    // Matched nowhere: the first block's point on the ring, under the bound
    // (the least loaded replica is always under it: bound >= the mean).
    chosen = on_ring(hashes.front(), loads, bound);
  }
  // The chosen replica now holds these blocks (the oldest forgotten past the
  // bound). Deepest first: a prompt's shorter prefixes are newer than its
  // longer ones, so a prefix is never forgotten before its extensions.
  auto& idx = index_[chosen];
  for (auto it = hashes.rbegin(); it != hashes.rend(); ++it) idx.seen[*it] = ++idx.clock;
  if (idx.seen.size() > s_.index_blocks) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> by_age(idx.seen.begin(), idx.seen.end());
    const std::size_t drop = idx.seen.size() - s_.index_blocks / 2;
    std::nth_element(by_age.begin(), by_age.begin() + static_cast<std::ptrdiff_t>(drop), by_age.end(),
                     [](const auto& a, const auto& b) { return a.second < b.second; });
    for (std::size_t i = 0; i < drop; ++i) idx.seen.erase(by_age[i].first);
  }
  return chosen;
}

// Forwards a replica's events to the fleet's observer; a request's end
// takes its tokens off the replica's load. In a disaggregated fleet a
// prefill replica's token is not delivered and its end starts the KV
// transfer; a decode replica's first schedule is not the request's (its
// prefill's is) and its end is the request's, merged with its prefill.
struct Fleet::Tap final : EngineObserver {
  Fleet* fleet;
  EngineObserver* down;
  std::size_t index;
  Tap(Fleet* f, EngineObserver* d, std::size_t i) : fleet(f), down(d), index(i) {}
  bool prefill() const { return fleet->is_prefill(index); }
  bool decode() const { return fleet->pd_.has_value() && !prefill(); }
  void on_first_scheduled(std::uint64_t id, Nanos t, std::uint32_t cached) override {
    if (decode()) return;
    if (prefill())
      if (const auto it = fleet->pending_.find(id); it != fleet->pending_.end()) {
        it->second.first_scheduled = t;
        it->second.cached_tokens = cached;
      }
    if (down) down->on_first_scheduled(id, t, cached);
  }
  void on_token(std::uint64_t id, Nanos t, tokenizers::TokenId token) override {
    if (prefill()) return;
    if (down) down->on_token(id, t, token);
  }
  // A request's end reaches the router when the fleet's time passes it: a
  // replica's step is computed whole, ahead of the arrivals inside it.
  void on_finish(const FinishedRequest& r) override {
    fleet->ends_.emplace(r.finished, r.id);
    if (prefill() && !r.aborted) {
      fleet->prefill_done(r, index);
      return;
    }
    const auto it = decode() ? fleet->pending_.find(r.id) : fleet->pending_.end();
    if (it != fleet->pending_.end()) {
      FinishedRequest merged = r;
      merged.arrival = it->second.arrival;
      merged.first_scheduled = it->second.first_scheduled;
      merged.cached_tokens = it->second.cached_tokens;
      merged.preemptions += it->second.preemptions;
      if (down) down->on_finish(merged);
      fleet->pending_.erase(it);
      return;
    }
    if (down) down->on_finish(r);
    fleet->pending_.erase(r.id);
  }
  void on_reject(std::uint64_t id, Nanos t, std::string_view reason) override {
    fleet->ends_.emplace(t, id);
    if (down) down->on_reject(id, t, reason);
    fleet->pending_.erase(id);
  }
  void on_step(const StepStats& s) override {
    if (down) down->on_step(s);
  }
};

Fleet::Fleet(std::size_t replicas, const EffectiveEngine& eff, const EngineSettings& s,
             const std::function<std::unique_ptr<CostModel>()>& make_cost, EngineObserver* observer,
             const RouterSettings& router)
    : loads_(replicas, 0.0),
      pools_(replicas, 0),
      representatives_{0},
      router_(router, replicas),
      observer_(observer) {
  for (std::size_t i = 0; i < replicas; ++i) {
    taps_.push_back(std::make_unique<Tap>(this, observer, i));
    engines_.push_back(std::make_unique<Engine>(eff, s, make_cost(), taps_.back().get()));
    engines_.back()->set_replica(static_cast<std::uint32_t>(i));
  }
}

Fleet::Fleet(std::vector<ReplicaSpec> replicas,
             const std::function<std::unique_ptr<CostModel>(const ReplicaSpec&)>& make_cost,
             EngineObserver* observer, const RouterSettings& router)
    : loads_(replicas.size(), 0.0), router_(router, replicas.size()), observer_(observer) {
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    const ReplicaSpec& r = replicas[i];
    if (i == 0 || r.pool != replicas[i - 1].pool) representatives_.push_back(i);
    pools_.push_back(r.pool);
    taps_.push_back(std::make_unique<Tap>(this, observer, i));
    auto cost = make_cost(r);
    speeds_.push_back(reference_tokens_per_s(*cost));
    engines_.push_back(std::make_unique<Engine>(r.eff, r.settings, std::move(cost), taps_.back().get()));
    engines_.back()->set_replica(static_cast<std::uint32_t>(i));
  }
  router_.set_speeds(speeds_);
}

std::optional<std::string> Fleet::admission_problem(std::uint64_t input_tokens, std::uint32_t output_tokens,
                                                    std::uint32_t tenant) const {
  std::optional<std::string> first;
  for (const std::size_t i : representatives_) {
    auto problem = engines_[i]->admission_problem(input_tokens, output_tokens, tenant);
    if (!problem) return std::nullopt;
    if (!first) first = std::move(problem);
  }
  return first;
}

Fleet::~Fleet() = default;

int Fleet::replica_of(std::uint64_t id) const {
  const auto it = routed_.find(id);
  return it == routed_.end() ? -1 : static_cast<int>(it->second.first);
}

void Fleet::done(std::uint64_t id) {
  const auto it = routed_.find(id);
  if (it == routed_.end()) return;
  loads_[it->second.first] = std::max(0.0, loads_[it->second.first] - it->second.second);
  it->second.second = 0;  // counted off once; the replica stays known
  // Forgotten unless it waits for its decode (a prefill's end: the transfer routes it again).
  if (forget_ended_ && !pending_.contains(id)) {
    routed_.erase(it);
    prefill_of_.erase(id);
  }
}

bool Fleet::abort(std::uint64_t id, Nanos t) {
  const int r = replica_of(id);
  // On its replica: the engine's end (aborted) reaches the observer through the tap.
  if (r >= 0 && engines_[static_cast<std::size_t>(r)]->abort(id, t)) return true;
  if (pending_.erase(id) > 0 && forget_ended_) {  // its KV in flight delivers nothing
    settle(t);
    // Forgotten now if its prefill's end is off the load; else done() forgets it when it is.
    if (const auto it = routed_.find(id); it != routed_.end() && it->second.second == 0) {
      routed_.erase(it);
      prefill_of_.erase(id);
    }
  }
  return false;
}

void Fleet::settle(Nanos t) {
  while (!ends_.empty() && ends_.top().first <= t) {
    done(ends_.top().second);
    ends_.pop();
  }
}

void Fleet::reject_unrouted(std::uint64_t id, Nanos t, std::string_view reason) {
  ++unrouted_rejects_;
  if (observer_) observer_->on_reject(id, t, reason);
}

bool Fleet::add_request(EngineRequest r, Nanos t, std::uint64_t session) {
  settle(t);  // what ended by t is off its replica's load
  RouteKey key;
  key.id = r.id;
  key.prompt = r.prompt;
  key.session = session;
  key.prefix_seed = (std::uint64_t{r.tenant} << 32) ^ r.adapter;
  key.tokens = static_cast<double>(r.prompt.size()) + r.max_output_tokens;
  if (!pd_) {
    const std::size_t i = router_.route(key, loads_);
    routed_[r.id] = {static_cast<std::uint32_t>(i), key.tokens};
    loads_[i] += key.tokens;
    return engines_[i]->add_request(std::move(r), t);
  }
  // Disaggregated: to a prefill replica, for one token; the request is kept for its decode.
  const std::size_t p = pd_->prefill_replicas;
  key.tokens = static_cast<double>(r.prompt.size()) + 1.0;
  const std::size_t i = router_.route(key, std::span<const double>(loads_).first(p));
  routed_[r.id] = {static_cast<std::uint32_t>(i), key.tokens};
  prefill_of_[r.id] = static_cast<std::uint32_t>(i);
  loads_[i] += key.tokens;
  EngineRequest prefill = r;
  prefill.max_output_tokens = 1;
  Pending& pending = pending_[r.id];
  pending.prefill_replica = static_cast<std::uint32_t>(i);
  pending.arrival = r.arrival >= 0 && r.arrival < t ? r.arrival : t;
  pending.session = session;
  pending.request = std::move(r);
  pending.request.image_encoder_flops = pending.request.audio_encoder_flops = 0;  // run by the prefill
  return engines_[i]->add_request(std::move(prefill), t);
}

std::size_t Fleet::route_only(std::uint64_t id, std::uint64_t session) {
  RouteKey key;
  key.id = id;
  key.session = session;
  return router_.route(key, loads_);
}

bool Fleet::add_request_to(std::size_t i, EngineRequest r, Nanos t) {
  settle(t);
  const double tokens = static_cast<double>(r.prompt.size()) + r.max_output_tokens;
  routed_[r.id] = {static_cast<std::uint32_t>(i), tokens};
  loads_[i] += tokens;
  return engines_[i]->add_request(std::move(r), t);
}

void Fleet::disaggregate(const Disaggregation& d) {
  if (d.prefill_replicas == 0 || d.prefill_replicas >= engines_.size())
    throw UsageError(fmt::format(
        "--prefill-replicas: a disaggregated fleet needs at least one prefill and one decode replica (got {} "
        "prefill of {} replicas)",
        d.prefill_replicas, engines_.size()));
  // At least 1 MB/s: a transfer's time stays far inside the nanosecond clock's range.
  if (!(d.link_bytes_per_s >= 1e6) || !std::isfinite(d.link_bytes_per_s))
    throw UsageError("--kv-link-gb-s: expected a bandwidth of at least 0.001 GB/s");
  if (d.link_latency_ns < 0) throw UsageError("--kv-link-latency-us: expected a latency of at least 0");
  if (!routed_.empty()) throw UsageError("a fleet is disaggregated before its first request");
  pd_ = d;
  RouterSettings prefill = router_.settings();
  router_ = Router(prefill, d.prefill_replicas);
  RouterSettings decode = prefill;
  decode.policy = d.decode_policy;
  decode.seed = prefill.seed ^ 0xdec0deULL;
  decode_router_ = std::make_unique<Router>(decode, engines_.size() - d.prefill_replicas);
  if (!speeds_.empty()) {  // pools: each side weighs its own replicas
    router_.set_speeds(std::span<const double>(speeds_).first(d.prefill_replicas));
    decode_router_->set_speeds(std::span<const double>(speeds_).subspan(d.prefill_replicas));
  }
  link_free_.assign(d.prefill_replicas, 0);
  link_bytes_.assign(d.prefill_replicas, 0.0);
}

int Fleet::prefill_replica_of(std::uint64_t id) const {
  const auto it = prefill_of_.find(id);
  return it == prefill_of_.end() ? -1 : static_cast<int>(it->second);
}

void Fleet::prefill_done(const FinishedRequest& f, std::size_t replica) {
  const auto it = pending_.find(f.id);
  if (it == pending_.end()) return;
  it->second.preemptions = f.preemptions;
  KvTransfer x;
  x.id = f.id;
  x.prefill_replica = static_cast<std::uint32_t>(replica);
  x.bytes = static_cast<double>(f.prompt_tokens) * engines_[replica]->effective().kv_bytes_per_token;
  x.ready = f.finished;
  // One transfer at a time on the link; the latency does not hold it.
  x.start = std::max(x.ready, link_free_[replica]);
  const Nanos wire = seconds_to_nanos(x.bytes / pd_->link_bytes_per_s);
  link_free_[replica] = x.start + wire;
  x.arrive = x.start + wire + pd_->link_latency_ns;
  link_bytes_[replica] += x.bytes;
  if (forget_ended_) {
    flying_.emplace(next_flying_, x);
    in_flight_.emplace(x.arrive, next_flying_++);
  } else {
    transfers_.push_back(x);
    in_flight_.emplace(x.arrive, transfers_.size() - 1);
  }
}

std::optional<Nanos> Fleet::next_transfer() const {
  if (in_flight_.empty()) return std::nullopt;
  return in_flight_.top().first;
}

int Fleet::deliver_next_transfer() {
  const auto [t, k] = in_flight_.top();
  in_flight_.pop();
  // A long-running fleet keeps no history: the transfer goes once delivered.
  const std::uint64_t id = forget_ended_ ? flying_.at(k).id : transfers_[k].id;
  if (forget_ended_) flying_.erase(k);
  const auto it = pending_.find(id);
  if (it == pending_.end()) return -1;
  settle(t);  // its prefill's end, and what else ended by t, are off the loads
  EngineRequest r = std::move(it->second.request);
  const std::size_t p = pd_->prefill_replicas;
  RouteKey key;
  key.id = r.id;
  key.prompt = r.prompt;
  key.session = it->second.session;
  key.prefix_seed = (std::uint64_t{r.tenant} << 32) ^ r.adapter;
  key.tokens = static_cast<double>(r.prompt.size()) + r.max_output_tokens;
  const std::size_t i = p + decode_router_->route(key, std::span<const double>(loads_).subspan(p));
  routed_[r.id] = {static_cast<std::uint32_t>(i), key.tokens};
  loads_[i] += key.tokens;
  if (!forget_ended_) transfers_[k].decode_replica = static_cast<std::int32_t>(i);
  r.preloaded_tokens = static_cast<std::uint32_t>(r.prompt.size());  // the engine computes the last one
  r.arrival = -1;                                                    // it arrives at the decode replica now
  // A rejection there reaches the observer at once and ends the pending
  // request; it still counts as routed there, as a colocated fleet's does.
  engines_[i]->add_request(std::move(r), t);
  return static_cast<int>(i);
}

FleetReport run_fleet_simulation(const workload::Workload& w, Fleet& fleet, const std::atomic<bool>* stop,
                                 const std::function<void(Nanos)>& on_window) {
  const std::size_t n_rep = fleet.size();
  FleetReport report;
  report.replicas.resize(n_rep);
  report.routed.assign(n_rep, 0);
  std::vector<Nanos> now(n_rep, 0);
  // A replica that could not step with nothing running waits for its own
  // next arrival (as one engine waits for the next), out of the scan.
  std::vector<char> parked(n_rep, 0);
  std::size_t next = 0;
  const std::size_t n = w.requests.size();
  // Images or audio for a model without the encoder: refused before the run, as one engine does.
  bool images = false, audio = false;
  for (const auto& r : w.requests) {
    if ((r.images > 0 && !images) || (r.audio_ms > 0 && !audio)) {
      EngineRequest probe;
      append_media(fleet.engine(0).effective().model, r, 0, probe);
    }
    images |= r.images > 0;
    audio |= r.audio_ms > 0;
  }
  std::uint64_t iterations = 0;
  bool interrupted = false;
  constexpr Nanos kNever = std::numeric_limits<Nanos>::max();
  const auto busy = [&](std::size_t i) { return parked[i] == 0 && fleet.engine(i).has_work(); };
  // Steps replica i while its clock is before `limit` (false: interrupted).
  // Between two events (arrivals, KV transfers) the replicas are
  // independent, so each runs its steps of the window in one go, its
  // engine's memory warm, rather than the fleet's steps in time order: the
  // same steps, in another order.
  const auto run_to = [&](std::size_t i, Nanos limit) {
    Engine& e = fleet.engine(i);
    while (busy(i) && now[i] < limit) {
      if (stop != nullptr && (++iterations & 0xff) == 0 && stop->load(std::memory_order_relaxed))
        return false;
      const std::uint64_t steps_before = e.counters().steps;
      now[i] += e.step(now[i]);
      // Nothing could run on it: only its next arrival can change that.
      if (e.counters().steps == steps_before) parked[i] = 1;
    }
    return true;
  };
  const std::size_t n_prefill = fleet.disaggregation() ? fleet.disaggregation()->prefill_replicas : n_rep;
  const auto on_arrival = [&](std::size_t i, Nanos t) {
    ++report.routed[i];
    ++report.replicas[i].requests_submitted;
    // A busy replica's clock is at or past the arrival (its step was
    // computed whole); an idle or parked one's catches up to it.
    now[i] = std::max(now[i], t);
    parked[i] = 0;
  };
  const auto make_request = [&](const workload::Request& req) {
    EngineRequest er;
    er.id = req.id;
    workload::append_prompt_tokens(w, req, er.prompt);
    er.max_output_tokens = req.output_tokens;
    er.tenant = req.tenant;
    er.priority = req.priority;
    er.arrival = req.arrival_ns;
    er.group = req.task_class;
    if (req.images > 0 || req.audio_ms > 0)
      append_media(fleet.engine(0).effective().model, req, w.token_seed, er);
    return er;
  };
  // A refusal before routing (a row may claim up to 2^30 tokens: rejected
  // before its tokens are made, as one engine does); true: refused.
  const auto refused = [&](const workload::Request& req) {
    auto problem = fleet.admission_problem(req.input_tokens, req.output_tokens, req.tenant);
    if (!problem) return false;
    const std::string origin = workload::prompt_origin(w, req);
    fleet.reject_unrouted(req.id, req.arrival_ns, origin.empty() ? *problem : origin + ": " + *problem);
    return true;
  };
  // A router that reads no replica's state (round-robin, session-affinity)
  // on a colocated fleet: the replicas never interact, so the arrivals of a
  // stretch of virtual time are routed first, and then each replica runs
  // the whole stretch in one go, its engine's memory warm, where the loop
  // below must stop every replica at every arrival. The same steps, in
  // another order (docs/performance.md "Fleets").
  if (!fleet.disaggregation() && !fleet.router().reads_state()) {
    constexpr Nanos kStretch = 60 * kNanosPerSecond;
    std::vector<std::vector<std::pair<Nanos, std::size_t>>> share(n_rep);
    while (next < n && !interrupted) {
      const Nanos end = w.requests[next].arrival_ns + kStretch;
      for (auto& sh : share) sh.clear();
      for (; next < n && w.requests[next].arrival_ns < end; ++next) {
        const auto& req = w.requests[next];
        ++report.total.requests_submitted;
        if (!refused(req)) share[fleet.route_only(req.id, req.tenant)].emplace_back(req.arrival_ns, next);
      }
      for (std::size_t i = 0; i < n_rep && !interrupted; ++i) {
        for (const auto& [t, k] : share[i]) {
          interrupted = !run_to(i, t);
          if (interrupted) break;
          fleet.add_request_to(i, make_request(w.requests[k]), t);
          on_arrival(i, t);
        }
        if (!interrupted) interrupted = !run_to(i, end);
      }
      if (!interrupted && on_window) on_window(end);
    }
  }
  while (!interrupted) {
    if (stop != nullptr && (++iterations & 0xff) == 0 && stop->load(std::memory_order_relaxed)) {
      interrupted = true;  // also between arrivals that run no step (all refused before routing)
      break;
    }
    // The next arrival: every step that starts before it is run first (a
    // step that starts at its time runs after it).
    const Nanos t = next < n ? w.requests[next].arrival_ns : kNever;
    // The replicas that take arrivals from the router (all of them, or the
    // prefill replicas of a disaggregated fleet).
    for (std::size_t i = 0; i < n_prefill && !interrupted; ++i) interrupted = !run_to(i, t);
    // Decode replicas: their steps up to each KV transfer that arrives by t,
    // then the transfer (every transfer that arrives before t is known now:
    // it left after a prefill step that started before t).
    while (n_prefill < n_rep && !interrupted) {
      const auto t_kv = fleet.next_transfer();
      const Nanos limit = t_kv && *t_kv <= t ? *t_kv : t;
      for (std::size_t i = n_prefill; i < n_rep && !interrupted; ++i) interrupted = !run_to(i, limit);
      if (interrupted || !t_kv || *t_kv > t) break;
      if (const int r = fleet.deliver_next_transfer(); r >= 0) on_arrival(static_cast<std::size_t>(r), *t_kv);
    }
    if (interrupted) break;
    if (on_window && t != kNever) on_window(t);
    if (t == kNever) {
      // Nothing is left to arrive: what waits on a parked replica can never run.
      bool any = false;
      for (std::size_t i = 0; i < n_rep; ++i)
        if (parked[i] != 0) {
          parked[i] = 0;
          if (fleet.engine(i).has_work()) {
            fleet.engine(i).reject_all_waiting(
                now[i], "cannot be scheduled (no KV blocks or tenant slot can ever free up)");
            any = true;
          }
        }
      if (!any) break;
      continue;
    }
    // The arrival: routed and queued on its replica's clock.
    const auto& req = w.requests[next++];
    ++report.total.requests_submitted;
    if (refused(req)) continue;
    fleet.add_request(make_request(req), t, req.tenant);
    if (const int r = fleet.replica_of(req.id); r >= 0) on_arrival(static_cast<std::size_t>(r), t);
  }
  fleet.settle(std::numeric_limits<Nanos>::max());
  for (std::size_t i = 0; i < n_rep; ++i) {
    auto& r = report.replicas[i];
    r.virtual_end_ns = now[i];
    r.counters = fleet.engine(i).counters();
    r.interrupted = interrupted;
    auto& c = report.total.counters;
    const auto& x = r.counters;
    c.steps += x.steps;
    c.prefix_queries_tokens += x.prefix_queries_tokens;
    c.prefix_hits_tokens += x.prefix_hits_tokens;
    c.preempted_queries_tokens += x.preempted_queries_tokens;
    c.preempted_hits_tokens += x.preempted_hits_tokens;
    c.preemptions += x.preemptions;
    c.tenant_switches += x.tenant_switches;
    c.swap_out_bytes += x.swap_out_bytes;
    c.swap_in_bytes += x.swap_in_bytes;
    c.host_kv_evictions += x.host_kv_evictions;
    c.host_kv_recomputed_blocks += x.host_kv_recomputed_blocks;
    c.max_host_kv_blocks = std::max(c.max_host_kv_blocks, x.max_host_kv_blocks);
    c.lora_loads += x.lora_loads;
    c.requests_rejected += x.requests_rejected;
    c.prompt_tokens += x.prompt_tokens;
    // A prefill replica's one token per request is not delivered; the request ends on its decode replica.
    if (!fleet.is_prefill(i)) {
      c.requests_finished += x.requests_finished;
      c.generation_tokens += x.generation_tokens;
    }
    c.max_batched_tokens_seen = std::max(c.max_batched_tokens_seen, x.max_batched_tokens_seen);
    c.max_blocks_in_use = std::max(c.max_blocks_in_use, x.max_blocks_in_use);
    if (x.kv_usage_peak) c.kv_usage_peak = std::max(c.kv_usage_peak.value_or(0.0), *x.kv_usage_peak);
    report.total.virtual_end_ns = std::max(report.total.virtual_end_ns, now[i]);
  }
  report.total.counters.requests_rejected += fleet.unrouted_rejects();
  report.total.interrupted = interrupted;
  return report;
}

}  // namespace tokenscope::engine
