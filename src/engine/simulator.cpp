#include "engine/simulator.h"

#include <fmt/format.h>

#include <iterator>

namespace tokenscope::engine {

RecordingObserver::RecordingObserver(const workload::Workload& w, RunDirectory* out, bool write_steps)
    : workload_(w), out_(out), write_steps_(write_steps) {
  for (std::uint32_t i = 0; i < w.requests.size(); ++i) {
    const auto id = w.requests[i].id;
    if (id >= index_of_id_.size()) index_of_id_.resize(id + 1, UINT32_MAX);
    index_of_id_[id] = i;
  }
}

void RecordingObserver::on_first_scheduled(std::uint64_t id, Nanos t) { in_flight_[id].first_scheduled = t; }

void RecordingObserver::on_token(std::uint64_t id, Nanos t) { in_flight_[id].token_times.push_back(t); }

void RecordingObserver::emit(RequestRecord& r) {
  summary_.add(r);
  if (out_ != nullptr) {
    line_.clear();
    r.append_json(line_);
    out_->requests().append_line(line_);
  }
}

void RecordingObserver::on_finish(const FinishedRequest& f) {
  auto it = in_flight_.find(f.id);
  RequestRecord r;
  r.id = f.id;
  const auto& req = workload_.requests[index_of_id_[f.id]];
  r.tenant = workload_.tenants[req.tenant];
  r.t_sched = req.arrival_ns;
  r.t_send = f.arrival;
  r.t_first_scheduled = f.first_scheduled;
  r.t_first_token = f.first_token;
  r.t_last_token = f.finished;
  r.t_close = f.finished;
  if (it != in_flight_.end()) {
    r.event_times = std::move(it->second.token_times);
    in_flight_.erase(it);
  }
  r.event_tokens.assign(r.event_times.size(), 1);
  r.prompt_tokens = f.prompt_tokens;
  r.output_tokens = f.output_tokens;
  r.output_tokens_client = static_cast<std::int64_t>(r.event_times.size());
  r.cached_tokens = f.cached_tokens;
  r.preemptions = f.preemptions;
  r.outcome = Outcome::kOk;
  emit(r);
}

void RecordingObserver::on_reject(std::uint64_t id, Nanos t, std::string_view reason) {
  in_flight_.erase(id);
  RequestRecord r;
  r.id = id;
  const auto& req = workload_.requests[index_of_id_[id]];
  r.tenant = workload_.tenants[req.tenant];
  r.t_sched = req.arrival_ns;
  r.t_send = t;
  r.t_close = t;
  r.prompt_tokens = req.input_tokens;
  r.outcome = Outcome::kRejected;
  r.detail = std::string(reason);
  emit(r);
}

void RecordingObserver::on_step(const StepStats& s) {
  if (out_ == nullptr || !write_steps_) return;
  line_.clear();
  fmt::format_to(std::back_inserter(line_),
                 "{{\"step\":{},\"t_ns\":{},\"dur_ns\":{},\"seqs\":{},\"prefill_tokens\":{},\"decode_tokens\":{},"
                 "\"running\":{},\"waiting\":{},\"kv_usage\":{:.6f},\"kv_blocks\":{},\"query_tokens\":{},"
                 "\"hit_tokens\":{},\"preemptions\":{},\"tenant_switches\":{},\"swap_out_bytes\":{},"
                 "\"swap_in_bytes\":{}}}",
                 s.index, s.start, s.duration, s.num_seqs, s.prefill_tokens, s.decode_tokens, s.num_running,
                 s.num_waiting, s.kv_usage, s.kv_blocks_in_use, s.prefix_queries_tokens, s.prefix_hits_tokens,
                 s.preemptions, s.tenant_switches, s.swap_out_bytes, s.swap_in_bytes);
  out_->steps().append_line(line_);
}

SimReport run_simulation(const workload::Workload& w, Engine& engine, const std::atomic<bool>* stop) {
  SimReport report;
  Nanos now = 0;
  std::size_t next = 0;
  const std::size_t n = w.requests.size();
  std::vector<workload::TokenId> tokens;
  auto admit_until = [&](Nanos t) {
    while (next < n && w.requests[next].arrival_ns <= t) {
      const auto& req = w.requests[next++];
      EngineRequest er;
      er.id = req.id;
      tokens.clear();
      workload::append_prompt_tokens(w, req, tokens);
      er.prompt = tokens;
      er.max_output_tokens = req.output_tokens;
      er.tenant = req.tenant;
      er.priority = req.priority;
      engine.add_request(std::move(er), req.arrival_ns);
      ++report.requests_submitted;
    }
  };
  std::uint64_t iterations = 0;
  while (next < n || engine.has_work()) {
    if (stop != nullptr && (++iterations & 0xff) == 0 && stop->load(std::memory_order_relaxed)) {
      report.interrupted = true;
      break;
    }
    if (!engine.has_work()) now = std::max(now, w.requests[next].arrival_ns);
    admit_until(now);
    const Nanos d = engine.step(now);
    if (d > 0) {
      now += d;
    } else if (engine.num_running() == 0 && engine.has_work()) {
      // Nothing can run and nothing is running: only a later arrival can change that.
      if (next < n) {
        now = std::max(now, w.requests[next].arrival_ns);
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
