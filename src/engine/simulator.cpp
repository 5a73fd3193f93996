#include "engine/simulator.h"

#include <functional>
#include <limits>
#include <queue>

#include "core/json_out.h"

namespace tokenscope::engine {

RecordingObserver::RecordingObserver(const workload::Workload& w, RecordSink& sink, bool steps)
    : workload_(w), sink_(sink), write_steps_(steps), slot_of_(w.requests.size(), 0) {
  for (std::uint32_t i = 0; i < w.requests.size(); ++i) {
    const auto id = w.requests[i].id;
    if (id >= index_of_id_.size()) index_of_id_.resize(id + 1, UINT32_MAX);
    index_of_id_[id] = i;
  }
}

void RecordingObserver::on_first_scheduled(std::uint64_t, Nanos, std::uint32_t) {}

std::vector<Nanos>* RecordingObserver::times_of(std::uint64_t id, bool create) {
  std::uint32_t& slot = slot_of_[index_of_id_[id]];
  if (slot == 0) {
    if (!create) return nullptr;
    if (free_slots_.empty()) {
      slots_.emplace_back();
      slot = static_cast<std::uint32_t>(slots_.size());
    } else {
      slot = free_slots_.back();
      free_slots_.pop_back();
    }
  }
  return &slots_[slot - 1];
}

void RecordingObserver::release_slot(std::uint64_t id) {
  std::uint32_t& slot = slot_of_[index_of_id_[id]];
  if (slot == 0) return;
  slots_[slot - 1].clear();
  free_slots_.push_back(slot);
  slot = 0;
}

void RecordingObserver::on_token(std::uint64_t id, Nanos t, tokenizers::TokenId) {
  times_of(id, true)->push_back(t);
}

void RecordingObserver::emit(RequestRecord& r) {
  if (replica_of_) r.replica = replica_of_(r.id);
  sink_.add_request(r);
}

void RecordingObserver::on_finish(const FinishedRequest& f) {
  RequestRecord r;
  r.id = f.id;
  const auto& req = workload_.requests[index_of_id_[f.id]];
  r.tenant = workload_.tenants[req.tenant];
  if (req.task_class < workload_.classes.size()) r.task_class = workload_.classes[req.task_class];
  r.t_sched = req.arrival_ns;
  r.t_send = f.arrival;
  r.t_first_scheduled = f.first_scheduled;
  r.t_first_token = f.first_token;
  r.t_last_token = f.finished;
  r.t_close = f.finished;
  if (auto* times = times_of(f.id, false)) r.event_times.assign(times->begin(), times->end());
  release_slot(f.id);
  r.event_tokens.assign(r.event_times.size(), 1);
  r.prompt_tokens = f.prompt_tokens;
  r.output_tokens = f.output_tokens;
  r.output_tokens_client = static_cast<std::int64_t>(r.event_times.size());
  r.cached_tokens = f.cached_tokens;
  r.preemptions = f.preemptions;
  if (req.audio_ms > 0) r.audio_ms = req.audio_ms;
  r.outcome = Outcome::kOk;
  emit(r);
}

void RecordingObserver::on_reject(std::uint64_t id, Nanos t, std::string_view reason) {
  release_slot(id);
  RequestRecord r;
  r.id = id;
  const auto& req = workload_.requests[index_of_id_[id]];
  r.tenant = workload_.tenants[req.tenant];
  if (req.task_class < workload_.classes.size()) r.task_class = workload_.classes[req.task_class];
  r.t_sched = req.arrival_ns;
  r.t_send = t;
  r.t_close = t;
  r.prompt_tokens = req.input_tokens;
  r.outcome = Outcome::kRejected;
  r.detail = std::string(reason);
  emit(r);
}

void RecordingObserver::on_step(const StepStats& s) {
  if (!write_steps_) return;
  StepRecord r;
  r.index = s.index;
  r.t = s.start;
  r.dur = s.duration;
  r.seqs = s.num_seqs;
  r.prefill_tokens = s.prefill_tokens;
  r.decode_tokens = s.decode_tokens;
  r.running = s.num_running;
  r.waiting = s.num_waiting;
  r.kv_usage = s.kv_usage;
  r.kv_blocks = s.kv_blocks_in_use;
  r.query_tokens = s.prefix_queries_tokens;
  r.hit_tokens = s.prefix_hits_tokens;
  r.preemptions = s.preemptions;
  r.tenant_switches = s.tenant_switches;
  r.swap_out_bytes = s.swap_out_bytes;
  r.swap_in_bytes = s.swap_in_bytes;
  r.host_kv_blocks = s.host_kv_blocks;
  r.host_kv_evictions = s.host_kv_evictions;
  r.host_kv_recomputed_blocks = s.host_kv_recomputed_blocks;
  r.has_perturbations = write_perturbations_;
  r.perturbation_ns = s.perturbation_ns;
  r.stolen_ns = s.stolen_ns;
  sink_.add_step(r);
}

SimReport run_simulation(const workload::Workload& w, Engine& engine, const std::atomic<bool>* stop) {
  // Images or audio for a model without the encoder: refused before the run.
  bool images = false, audio = false;
  for (const auto& r : w.requests) {
    if ((r.images > 0 && !images) || (r.audio_ms > 0 && !audio)) {
      EngineRequest probe;
      append_media(engine.effective().model, r, 0, probe);
    }
    images |= r.images > 0;
    audio |= r.audio_ms > 0;
  }
  SimReport report;
  Nanos now = 0;
  std::size_t next = 0;
  const std::size_t n = w.requests.size();
  Perturber* perturber = engine.perturber();
  const bool holds = perturber != nullptr && perturber->holds_requests();
  // Requests a request tail holds: (release time, workload position), earliest first.
  using Held = std::pair<Nanos, std::size_t>;
  std::priority_queue<Held, std::vector<Held>, std::greater<>> held;
  // Into the engine's queue at t (a held request keeps its arrival time).
  auto enter = [&](const workload::Request& req, Nanos t) {
    EngineRequest er;
    er.id = req.id;
    workload::append_prompt_tokens(w, req, er.prompt);
    if (req.images > 0 || req.audio_ms > 0) append_media(engine.effective().model, req, w.token_seed, er);
    er.max_output_tokens = req.output_tokens;
    er.tenant = req.tenant;
    er.priority = req.priority;
    er.arrival = req.arrival_ns;
    er.group = req.task_class;
    engine.add_request(std::move(er), t);
  };
  auto admit_until = [&](Nanos t) {
    while (true) {
      const bool arrival = next < n && w.requests[next].arrival_ns <= t;
      const bool release = !held.empty() && held.top().first <= t;
      if (!arrival && !release) break;
      // In the order they reach the queue: a held request released before an arrival goes first.
      if (release && (!arrival || held.top().first <= w.requests[next].arrival_ns)) {
        const auto [release_ns, i] = held.top();
        held.pop();
        enter(w.requests[i], release_ns);
        continue;
      }
      const std::size_t i = next++;
      const auto& req = w.requests[i];
      ++report.requests_submitted;
      // A row may claim up to 2^30 tokens: reject what cannot run before its
      // tokens are made (4 bytes each), naming the row it came from.
      if (auto problem = engine.admission_problem(req.input_tokens, req.output_tokens, req.tenant)) {
        const std::string origin = workload::prompt_origin(w, req);
        engine.reject(req.id, req.arrival_ns, origin.empty() ? *problem : origin + ": " + *problem);
        continue;
      }
      if (holds) {
        if (const Nanos hold = perturber->request_hold(req.id); hold > 0) {
          held.emplace(req.arrival_ns + hold, i);
          continue;
        }
      }
      enter(req, req.arrival_ns);
    }
  };
  // The next moment a request reaches the queue: an arrival or a release.
  auto next_event = [&] {
    Nanos t = next < n ? w.requests[next].arrival_ns : std::numeric_limits<Nanos>::max();
    if (!held.empty()) t = std::min(t, held.top().first);
    return t;
  };
  std::uint64_t iterations = 0;
  while (next < n || !held.empty() || engine.has_work()) {
    if (stop != nullptr && (++iterations & 0xff) == 0 && stop->load(std::memory_order_relaxed)) {
      report.interrupted = true;
      break;
    }
    if (!engine.has_work()) now = std::max(now, next_event());
    admit_until(now);
    const std::uint64_t steps_before = engine.counters().steps;
    now += engine.step(now);
    if (engine.counters().steps == steps_before && engine.has_work() && engine.num_running() == 0) {
      // Nothing could run and nothing is running: only a later arrival can change that.
      if (next < n || !held.empty()) {
        now = std::max(now, next_event());
      } else {
        engine.reject_all_waiting(now, "cannot be scheduled (no KV blocks or tenant slot can ever free up)");
      }
    }
  }
  report.virtual_end_ns = now;
  report.counters = engine.counters();
  return report;
}

ServerCounters server_counters(const EngineCounters& c) {
  ServerCounters s;
  s.prefix_cache_queries_tokens = c.prefix_queries_tokens;
  s.prefix_cache_hits_tokens = c.prefix_hits_tokens;
  s.preemptions_total = c.preemptions;
  s.kv_cache_usage_peak = c.kv_usage_peak;
  return s;
}

}  // namespace tokenscope::engine
