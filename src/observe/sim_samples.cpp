#include "observe/sim_samples.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "serve/metrics.h"

namespace tokenscope::observe {

void SimSampler::append(std::vector<Sample>& out, const prometheus::Histogram& h, const std::string& name) {
  append_histogram(out, h, name);
}

void append_histogram(std::vector<Sample>& out, const prometheus::Histogram& h, const std::string& name) {
  std::uint64_t cum = 0;
  for (std::size_t i = 0; i < h.counts().size(); ++i) {
    cum += h.counts()[i];
    out.push_back({name + "_bucket",
                   {{"le", i < h.bounds().size() ? fmt::format("{}", h.bounds()[i]) : "+Inf"}},
                   static_cast<double>(cum)});
  }
  out.push_back({name + "_sum", {}, h.sum()});
  out.push_back({name + "_count", {}, static_cast<double>(cum)});
}

// ---- StolenTimeSeries ---------------------------------------------------------

void StolenTimeSeries::add(Nanos begin_ns, Nanos end_ns) {
  if (end_ns > begin_ns) pending_.emplace_back(std::max(begin_ns, folded_until_), end_ns);
}

void StolenTimeSeries::close_windows_until(Nanos t_ns) {
  // The kernel's decay per 2 s update of a 10 s average.
  static const double decay = std::exp(-2.0 / 10.0);
  if ((window_ + 1) * kWindowNs > t_ns) return;
  avg10_ = avg10_ * decay + static_cast<double>(window_stalled_ns_) / kWindowNs * (1.0 - decay);
  window_stalled_ns_ = 0;
  ++window_;
  // Windows without stalls in between: the average only decays.
  const std::int64_t empty = t_ns / kWindowNs - window_;
  if (empty > 0) {
    avg10_ *= std::pow(decay, static_cast<double>(empty));
    window_ += empty;
  }
}

void StolenTimeSeries::fold(Nanos from, Nanos to) {
  while (from < to) {
    close_windows_until(from);
    const Nanos end = std::min(to, (window_ + 1) * kWindowNs);
    window_stalled_ns_ += end - from;
    stalled_ns_ += end - from;
    const std::int64_t first = std::max(from / kPeriodNs, last_period_ + 1);
    const std::int64_t last = (end - 1) / kPeriodNs;
    if (last >= first) periods_ += static_cast<std::uint64_t>(last - first + 1);
    last_period_ = std::max(last_period_, last);
    from = end;
  }
}

void StolenTimeSeries::advance(Nanos t_ns) {
  while (!pending_.empty()) {
    auto& [begin, end] = pending_.front();
    const Nanos from = std::max(begin, folded_until_);
    const Nanos to = std::min(end, t_ns);
    if (to > from) fold(from, to);
    if (end > t_ns) break;
    pending_.pop_front();
  }
  folded_until_ = std::max(folded_until_, t_ns);
  close_windows_until(t_ns);
}

// ---- SimSampler ----------------------------------------------------------------

SimSampler::SimSampler(engine::EngineObserver& inner, std::function<void(const Observation&)> sink,
                       Nanos interval_ns)
    : inner_(inner), sink_(std::move(sink)), interval_ns_(std::max<Nanos>(interval_ns, 1)), next_ns_(0) {}

void SimSampler::attach(const engine::Engine* e) {
  engine_ = e;
  // The baseline: nothing has run yet.
  emit(0);
  next_ns_ = interval_ns_;
}

void SimSampler::snapshot() {
  if (!engine_) return;
  // The engine's own counters, counted as its /metrics counts them (prompt
  // tokens when a request's prefill ends, cached ones included).
  const auto& e = engine_->counters();
  prefix_queries_ = e.prefix_queries_tokens;
  prefix_hits_ = e.prefix_hits_tokens;
  preemptions_ = e.preemptions;
  prompt_tokens_ = e.prompt_tokens;
  generation_tokens_ = e.generation_tokens;
}

void SimSampler::on_first_scheduled(std::uint64_t id, Nanos t, std::uint32_t cached_tokens) {
  inner_.on_first_scheduled(id, t, cached_tokens);
}

void SimSampler::on_token(std::uint64_t id, Nanos t, tokenizers::TokenId token) {
  inner_.on_token(id, t, token);
}

void SimSampler::on_reject(std::uint64_t id, Nanos t, std::string_view reason) {
  inner_.on_reject(id, t, reason);
}

void SimSampler::on_finish(const engine::FinishedRequest& r) {
  inner_.on_finish(r);
  ++finished_;
  if (r.first_token >= 0) ttft_.observe(nanos_to_s(r.first_token - r.arrival));
  e2e_.observe(nanos_to_s(r.finished - r.arrival));
  if (r.first_scheduled >= 0) queue_.observe(nanos_to_s(r.first_scheduled - r.arrival));
}

void SimSampler::on_step(const engine::StepStats& s) {
  // Samples due before this step see the state after the previous one.
  while (s.start >= next_ns_) {
    emit(next_ns_);
    next_ns_ += interval_ns_;
    // An idle gap: jump to the last boundary before this step (one sample
    // per interval would write hours of identical lines).
    if (s.start - next_ns_ > interval_ns_) next_ns_ += (s.start - next_ns_) / interval_ns_ * interval_ns_;
  }
  inner_.on_step(s);
  running_ = s.num_running;
  waiting_ = s.num_waiting;
  kv_usage_ = s.kv_usage;
  prefix_queries_ += s.prefix_queries_tokens;
  prefix_hits_ += s.prefix_hits_tokens;
  preemptions_ += s.preemptions;
  prompt_tokens_ += s.prefill_tokens;
  generation_tokens_ += s.decode_tokens;
  iteration_tokens_.observe(static_cast<double>(s.prefill_tokens + s.decode_tokens));
  if (contention_ && s.stolen_ns > 0) stolen_.add(s.start + s.duration - s.stolen_ns, s.start + s.duration);
  snapshot();
}

void SimSampler::finish(Nanos end_ns) {
  snapshot();
  if (end_ns > last_emit_ns_) emit(end_ns);
}

void SimSampler::emit(Nanos t) {
  Observation o;
  o.t_ns = t;
  o.source = "sim";
  auto& c = o.canonical;
  c.push_back({"requests_running", {}, running_});
  c.push_back({"requests_waiting", {}, waiting_});
  c.push_back({"kv_cache_usage", {}, kv_usage_});
  c.push_back({"prefix_cache_queries_tokens", {}, static_cast<double>(prefix_queries_)});
  c.push_back({"prefix_cache_hits_tokens", {}, static_cast<double>(prefix_hits_)});
  c.push_back({"preemptions", {}, static_cast<double>(preemptions_)});
  c.push_back({"prompt_tokens", {}, static_cast<double>(prompt_tokens_)});
  c.push_back({"generation_tokens", {}, static_cast<double>(generation_tokens_)});
  c.push_back({"requests_finished", {}, static_cast<double>(finished_)});
  append(c, iteration_tokens_, "iteration_tokens");
  append(c, ttft_, "server_ttft_seconds");
  append(c, e2e_, "server_e2e_seconds");
  append(c, queue_, "server_queue_seconds");
  last_emit_ns_ = t;
  write(o, tracker_);
  ++observations_;
  if (contention_) emit_contention(t);
}

void SimSampler::write(Observation& o, SeriesTracker& tracker) {
  tracker.feed(o);
  if (sink_) sink_(o);
}

void SimSampler::emit_contention(Nanos t) {
  stolen_.advance(t);
  const double avg10 = stolen_.some_avg10();
  const double stalled_us = std::round(stolen_.stalled_seconds() * 1e6);
  // Raw names as the host and cgroup collectors keep them (system_collectors.cpp).
  Observation host;
  host.t_ns = t;
  host.source = "host";
  host.canonical.push_back({"host_cpu_pressure_some", {}, avg10});
  host.raw.push_back({"pressure_cpu_some_avg10", {}, avg10 * 100.0});
  host.raw.push_back({"pressure_cpu_some_total_us", {}, stalled_us});
  write(host, host_tracker_);
  Observation cgroup;
  cgroup.t_ns = t;
  cgroup.source = "cgroup";
  const auto periods = static_cast<double>(stolen_.throttled_periods());
  cgroup.canonical.push_back({"cgroup_cpu_throttled_periods", {}, periods});
  cgroup.canonical.push_back({"cgroup_cpu_throttled_seconds", {}, stalled_us / 1e6});
  cgroup.canonical.push_back({"cgroup_cpu_pressure_some", {}, avg10});
  cgroup.raw.push_back({"cpu.stat.nr_throttled", {}, periods});
  cgroup.raw.push_back({"cpu.stat.throttled_usec", {}, stalled_us});
  cgroup.raw.push_back({"cpu.pressure.some.avg10", {}, avg10 * 100.0});
  cgroup.raw.push_back({"cpu.pressure.some.total_us", {}, stalled_us});
  write(cgroup, cgroup_tracker_);
  ++contention_observations_;
}

// ---- FleetSampler -----------------------------------------------------------

FleetSampler::FleetSampler(engine::EngineObserver& inner, std::function<void(const Observation&)> sink,
                           Nanos interval_ns)
    : inner_(inner), sink_(std::move(sink)), interval_ns_(std::max<Nanos>(interval_ns, 1)) {}

void FleetSampler::attach(const engine::Fleet* fleet) {
  fleet_ = fleet;
  replicas_.assign(fleet->size(), Replica{});
  offer(build(0));  // the baseline: nothing has run yet
  next_ns_ = interval_ns_;
  for (auto& r : replicas_) r.next_ns = interval_ns_;
}

void FleetSampler::on_first_scheduled(std::uint64_t id, Nanos t, std::uint32_t cached_tokens) {
  inner_.on_first_scheduled(id, t, cached_tokens);
}

void FleetSampler::on_token(std::uint64_t id, Nanos t, tokenizers::TokenId token) {
  inner_.on_token(id, t, token);
}

void FleetSampler::on_reject(std::uint64_t id, Nanos t, std::string_view reason) {
  inner_.on_reject(id, t, reason);
}

void FleetSampler::on_finish(const engine::FinishedRequest& r) {
  inner_.on_finish(r);
  Ended e;
  e.finished = r.finished;
  if (r.first_token >= 0) e.ttft_s = nanos_to_s(r.first_token - r.arrival);
  e.e2e_s = nanos_to_s(r.finished - r.arrival);
  if (r.first_scheduled >= 0) e.queue_s = nanos_to_s(r.first_scheduled - r.arrival);
  e.replica = fleet_ != nullptr ? fleet_->replica_of(r.id) : -1;
  ended_.push_back(e);
  std::push_heap(ended_.begin(), ended_.end(), std::greater<>());
}

void FleetSampler::on_step(const engine::StepStats& s) {
  inner_.on_step(s);
  if (fleet_ == nullptr || s.replica >= replicas_.size()) return;
  Replica& r = replicas_[s.replica];
  // The sample times before this step see the state after the replica's previous one.
  if (s.start >= r.next_ns) {
    const Nanos last = r.next_ns + (s.start - r.next_ns) / interval_ns_ * interval_ns_;
    r.captured.push_back({r.next_ns, last, r.state});
    r.next_ns = last + interval_ns_;
  }
  State& st = r.state;
  st.running = s.num_running;
  st.waiting = s.num_waiting;
  st.kv_usage = s.kv_usage;
  // The engine's own counters, as its /metrics counts them.
  const auto& c = fleet_->engine(s.replica).counters();
  st.prefix_queries = c.prefix_queries_tokens;
  st.prefix_hits = c.prefix_hits_tokens;
  st.preemptions = c.preemptions;
  st.prompt_tokens = c.prompt_tokens;
  st.generation_tokens = c.generation_tokens;
  r.steps.emplace_back(s.start, s.prefill_tokens + s.decode_tokens);
}

bool FleetSampler::quiet_until(Nanos t) const {
  if (!ended_.empty() && ended_.front().finished <= t) return false;
  for (const auto& r : replicas_)
    if (!r.captured.empty() || (!r.steps.empty() && r.steps.front().first < t)) return false;
  return true;
}

void FleetSampler::advance(Nanos t) {
  while (fleet_ != nullptr && next_ns_ <= t) {
    offer(build(next_ns_));
    next_ns_ += interval_ns_;
    // Nothing happens before t: every sample time up to t has the values just built, so only the
    // last of them can be written (the end of their run).
    if (next_ns_ < t && quiet_until(t)) next_ns_ += (t - next_ns_) / interval_ns_ * interval_ns_;
  }
}

void FleetSampler::finish(Nanos end_ns) {
  if (fleet_ == nullptr) return;
  advance(end_ns);
  if (end_ns > last_built_ns_) offer(build(end_ns));
  if (held_ && !held_written_) write(*held_);
  held_written_ = true;
}

namespace {
bool same_samples(const std::vector<Sample>& a, const std::vector<Sample>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].value != b[i].value || a[i].name != b[i].name || !(a[i].labels == b[i].labels)) return false;
  return true;
}
}  // namespace

void FleetSampler::offer(Observation o) {
  const bool same = held_ && same_samples(held_->canonical, o.canonical) && same_samples(held_->raw, o.raw);
  if (held_ && !same && !held_written_) write(*held_);  // the end of its run
  held_ = std::move(o);
  held_written_ = !same;
  if (held_written_) write(*held_);  // the start of a run
}

void FleetSampler::write(const Observation& o) {
  Observation fed = o;  // the tracker adds its derived series; the one held stays as built, to compare
  tracker_.feed(fed);
  if (sink_) sink_(fed);
  ++observations_;
}

Observation FleetSampler::build(Nanos t) {
  last_built_ns_ = t;
  while (!ended_.empty() && ended_.front().finished <= t) {
    std::pop_heap(ended_.begin(), ended_.end(), std::greater<>());
    const Ended& e = ended_.back();
    ++finished_;
    if (e.replica >= 0 && static_cast<std::size_t>(e.replica) < replicas_.size())
      ++replicas_[static_cast<std::size_t>(e.replica)].finished;
    if (e.ttft_s >= 0) ttft_.observe(e.ttft_s);
    e2e_.observe(e.e2e_s);
    if (e.queue_s >= 0) queue_.observe(e.queue_s);
    ended_.pop_back();
  }
  Observation o;
  o.t_ns = t;
  o.source = "sim";
  State sum;
  for (std::size_t i = 0; i < replicas_.size(); ++i) {
    Replica& r = replicas_[i];
    while (!r.steps.empty() && r.steps.front().first < t) {
      iteration_tokens_.observe(static_cast<double>(r.steps.front().second));
      r.steps.pop_front();
    }
    while (!r.captured.empty() && r.captured.front().to < t) r.captured.pop_front();
    const State& st =
        !r.captured.empty() && r.captured.front().from <= t ? r.captured.front().state : r.state;
    sum.running += st.running;
    sum.waiting += st.waiting;
    sum.kv_usage += st.kv_usage;
    sum.prefix_queries += st.prefix_queries;
    sum.prefix_hits += st.prefix_hits;
    sum.preemptions += st.preemptions;
    sum.prompt_tokens += st.prompt_tokens;
    sum.generation_tokens += st.generation_tokens;
    const Labels l{{"engine", std::to_string(i)}};
    auto& raw = o.raw;
    raw.push_back({"vllm:num_requests_running", l, st.running});
    raw.push_back({"vllm:num_requests_waiting", l, st.waiting});
    raw.push_back({"vllm:kv_cache_usage_perc", l, st.kv_usage});
    raw.push_back({"vllm:prefix_cache_queries_total", l, static_cast<double>(st.prefix_queries)});
    raw.push_back({"vllm:prefix_cache_hits_total", l, static_cast<double>(st.prefix_hits)});
    raw.push_back({"vllm:num_preemptions_total", l, static_cast<double>(st.preemptions)});
    raw.push_back({"vllm:prompt_tokens_total", l, static_cast<double>(st.prompt_tokens)});
    raw.push_back({"vllm:generation_tokens_total", l, static_cast<double>(st.generation_tokens)});
    raw.push_back({"vllm:request_success_total", l, static_cast<double>(r.finished)});
  }
  auto& c = o.canonical;
  c.push_back({"requests_running", {}, sum.running});
  c.push_back({"requests_waiting", {}, sum.waiting});
  c.push_back(
      {"kv_cache_usage", {}, replicas_.empty() ? 0.0 : sum.kv_usage / static_cast<double>(replicas_.size())});
  c.push_back({"prefix_cache_queries_tokens", {}, static_cast<double>(sum.prefix_queries)});
  c.push_back({"prefix_cache_hits_tokens", {}, static_cast<double>(sum.prefix_hits)});
  c.push_back({"preemptions", {}, static_cast<double>(sum.preemptions)});
  c.push_back({"prompt_tokens", {}, static_cast<double>(sum.prompt_tokens)});
  c.push_back({"generation_tokens", {}, static_cast<double>(sum.generation_tokens)});
  c.push_back({"requests_finished", {}, static_cast<double>(finished_)});
  append_histogram(c, iteration_tokens_, "iteration_tokens");
  append_histogram(c, ttft_, "server_ttft_seconds");
  append_histogram(c, e2e_, "server_e2e_seconds");
  append_histogram(c, queue_, "server_queue_seconds");
  return o;
}

}  // namespace tokenscope::observe
