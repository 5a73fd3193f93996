#include "core/summary.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>

namespace tokenscope {

namespace {
std::string quantile_key(double p) {
  // 0.5 -> p50, 0.999 -> p99_9
  std::string s = fmt::format("{:g}", p * 100.0);
  std::replace(s.begin(), s.end(), '.', '_');
  return "p" + s;
}
}  // namespace

std::uint16_t SummaryBuilder::group_index(std::vector<std::string>& names, std::vector<GroupCounts>& counts,
                                          const std::string& name) {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<std::uint16_t>(i);
  if (names.size() >= 65535) return 65534;  // more groups than anyone reads: the last absorbs the rest
  names.push_back(name);
  counts.emplace_back();
  return static_cast<std::uint16_t>(names.size() - 1);
}

void SummaryBuilder::add(const RequestRecord& r) {
  if (r.warmup) {
    ++warmup_;
    return;
  }
  if (r.t_sched >= 0 && (first_sched_ < 0 || r.t_sched < first_sched_)) first_sched_ = r.t_sched;
  if (r.t_send >= 0 && (first_send_ < 0 || r.t_send < first_send_)) first_send_ = r.t_send;
  if (r.t_close >= 0) last_close_ = std::max(last_close_, r.t_close);
  ++outcomes_[r.outcome];
  if (r.t_send >= 0 && r.t_close >= r.t_send) {
    starts_.push_back(r.t_send);
    ends_.push_back(r.t_close);
  }
  const std::uint16_t cls = group_index(class_names_, class_counts_, r.task_class);
  const std::uint16_t tenant = group_index(tenant_names_, tenant_counts_, r.tenant);
  const std::uint16_t model = group_index(model_names_, model_counts_, r.model);
  if (r.outcome != Outcome::kOk && r.cancel_planned) {  // on purpose: no failure, no SLO, no goodput
    ++cancelled_planned_;
    return;
  }
  if (r.outcome != Outcome::kOk) {
    ++failed_;
    ++class_counts_[cls].failed;
    ++tenant_counts_[tenant].failed;
    ++model_counts_[model].failed;
    return;
  }
  ++completed_;
  ++class_counts_[cls].completed;
  ++tenant_counts_[tenant].completed;
  ++model_counts_[model].completed;
  if (r.t_close >= 0) ok_ends_.push_back(r.t_close);
  if (r.output_tokens < 0 || r.output_tokens_counted_by_client) ++without_usage_;
  if (r.output_tokens_counted_by_client) ++client_counted_;
  if (r.prompt_tokens > 0) prompt_tokens_ += static_cast<std::uint64_t>(r.prompt_tokens);
  if (r.prompt_tokens_planned >= 0 && r.prompt_tokens >= 0) {  // the plan against the server's count
    planned_prompt_tokens_ += static_cast<std::uint64_t>(r.prompt_tokens_planned);
    planned_prompt_reported_ += static_cast<std::uint64_t>(r.prompt_tokens);
    prompt_mismatches_ += r.prompt_tokens != r.prompt_tokens_planned ? 1 : 0;
  }
  const std::int64_t n = r.output_tokens >= 0 ? r.output_tokens : 0;
  output_tokens_ += static_cast<std::uint64_t>(n);
  class_counts_[cls].output_tokens += static_cast<std::uint64_t>(n);
  tenant_counts_[tenant].output_tokens += static_cast<std::uint64_t>(n);
  model_counts_[model].output_tokens += static_cast<std::uint64_t>(n);
  if (r.output_tokens >= 0 && r.output_tokens_client >= 0 && r.output_tokens != r.output_tokens_client)
    ++token_mismatches_;
  if (r.reasoning_tokens >= 0) {
    ++reasoning_requests_;
    reasoning_tokens_ += static_cast<std::uint64_t>(std::min(r.reasoning_tokens, n));
  }
  if (r.inputs >= 0) {
    ++pooling_requests_;
    inputs_ += static_cast<std::uint64_t>(r.inputs);
  }
  if (r.audio_ms > 0) audio_ms_ += static_cast<std::uint64_t>(r.audio_ms);
  if (r.t_dispatch >= 0 && r.t_sched >= 0) queue_ms_.push_back(nanos_to_ms(r.t_dispatch - r.t_sched));
  if (r.t_first_token < 0 || r.t_send < 0) return;
  Sample sample{};
  sample.ttft_ms = nanos_to_ms(r.t_first_token - r.t_send);
  sample.e2e_ms = nanos_to_ms(r.t_last_token - r.t_send);
  const Nanos first_answer = r.reasoning_tokens >= 0 ? r.t_first_answer : r.t_first_token;
  sample.ttfo_ms = first_answer >= 0 ? nanos_to_ms(first_answer - r.t_send) : std::nan("");
  sample.answer_tokens =
      static_cast<std::uint32_t>(std::clamp<std::int64_t>(r.answer_tokens(), 0, UINT32_MAX));
  sample.send_lag_ms = r.t_sched >= 0 ? nanos_to_ms(r.t_send - r.t_sched) : 0.0;
  const Nanos due = r.t_dispatch >= 0 ? r.t_dispatch : r.t_sched;
  sample.due_lag_ms = due >= 0 ? nanos_to_ms(r.t_send - due) : 0.0;
  sample.output_tokens = static_cast<std::uint32_t>(std::min<std::int64_t>(n, UINT32_MAX));
  sample.task_class = cls;
  sample.tenant = tenant;
  sample.model = model;
  samples_.push_back(sample);
  for (std::size_t i = 1; i < r.event_times.size(); ++i) {
    const Nanos gap = std::max<Nanos>(0, r.event_times[i] - r.event_times[i - 1]);
    const std::uint32_t k = i < r.event_tokens.size() ? std::max<std::uint32_t>(1, r.event_tokens[i]) : 1;
    itl_ns_.record(static_cast<std::uint64_t>(gap) / k, k);
    icl_ns_.record(static_cast<std::uint64_t>(gap), 1);
  }
  // Events past the client's per-request cap: their gaps were histogrammed.
  // One token each (every server that streams token by token): exact. With
  // several tokens per event, each bucket's midpoint is split by the mean.
  if (r.dropped_gaps_ns && r.events_dropped > 0) {
    icl_ns_.merge(*r.dropped_gaps_ns);
    if (r.dropped_event_tokens <= r.events_dropped) {
      itl_ns_.merge(*r.dropped_gaps_ns);
    } else {
      const double k = static_cast<double>(r.dropped_event_tokens) / static_cast<double>(r.events_dropped);
      r.dropped_gaps_ns->for_each_bucket([&](std::size_t i, std::uint64_t n) {
        const double mid = (static_cast<double>(LogLinearHistogram::bucket_lower(i)) +
                            static_cast<double>(LogLinearHistogram::bucket_upper(i))) /
                           2;
        itl_ns_.record(static_cast<std::uint64_t>(mid / k), static_cast<std::uint64_t>(std::llround(n * k)));
      });
    }
  }
}

bool SummaryBuilder::meets_slo(const Sample& s) const {
  const auto it = slos_.find(class_names_[s.task_class]);
  if (it == slos_.end()) return true;
  const Slo& slo = it->second;
  if (slo.ttft_ms && slo_ttft(s) > *slo.ttft_ms) return false;
  if (slo.ttfo_ms && !(slo_ttfo(s) <= *slo.ttfo_ms)) return false;  // no answer token: missed
  if (slo.e2e_ms && slo_e2e(s) > *slo.e2e_ms) return false;
  if (slo.tpot_ms && s.output_tokens > 1 &&
      (s.e2e_ms - s.ttft_ms) / static_cast<double>(s.output_tokens - 1) > *slo.tpot_ms)
    return false;
  return true;
}

std::pair<Nanos, Nanos> SummaryBuilder::steady_window() const {
  if (starts_.empty()) return {0, 0};
  std::sort(starts_.begin(), starts_.end());
  std::sort(ends_.begin(), ends_.end());
  // Walks the merged starts (+1) and ends (-1), ends first at equal times
  // unless nothing is in flight (a request of zero length starts first).
  auto walk = [&](auto&& visit) {
    std::size_t i = 0, j = 0;
    int level = 0;
    while (j < ends_.size()) {
      const bool start = i < starts_.size() && (starts_[i] < ends_[j] || (starts_[i] == ends_[j] && i == j));
      const Nanos t = start ? starts_[i++] : ends_[j++];
      const int before = level;
      level += start ? 1 : -1;
      const Nanos next =
          j < ends_.size() ? std::min(i < starts_.size() ? starts_[i] : ends_[j], ends_[j]) : t;
      visit(t, before, level, next - t);
    }
  };
  // Time spent at each in-flight level, and its time-weighted median.
  std::vector<Nanos> time_at;
  walk([&](Nanos, int, int level, Nanos dt) {
    if (static_cast<std::size_t>(level) >= time_at.size())
      time_at.resize(static_cast<std::size_t>(level) + 1, 0);
    time_at[static_cast<std::size_t>(level)] += dt;
  });
  Nanos total = 0;
  for (Nanos t : time_at) total += t;
  int median = 0;
  for (Nanos acc = 0; median < static_cast<int>(time_at.size()); ++median)
    if ((acc += time_at[static_cast<std::size_t>(median)]) * 2 >= total) break;
  median = std::max(median, 1);
  Nanos up = -1, down = -1;
  walk([&](Nanos t, int before, int level, Nanos) {
    if (up < 0 && level >= median) up = t;
    if (before >= median && level < median) down = t;
  });
  if (up < 0 || down < up) return {0, 0};
  return {up, down};
}

double SummaryBuilder::duration_send_s() const {
  if (first_send_ < 0 || last_close_ < first_send_) return 0.0;
  return nanos_to_s(last_close_ - first_send_);
}

double SummaryBuilder::duration_s() const {
  if (first_sched_ < 0 || last_close_ < first_sched_) return 0.0;
  return nanos_to_s(last_close_ - first_sched_);
}

nlohmann::json distribution_json(const Distribution& d) {
  nlohmann::json j;
  j["count"] = d.count;
  if (d.count == 0) {
    for (const char* k : {"mean", "std", "min", "max"}) j[k] = nullptr;
    for (double p : kSummaryQuantiles) j[quantile_key(p)] = nullptr;
    j["ci95"] = nlohmann::json::object();
    return j;
  }
  j["mean"] = d.mean;
  j["std"] = d.std;
  j["min"] = d.min;
  j["max"] = d.max;
  nlohmann::json ci = nlohmann::json::object();
  for (const auto& q : d.quantiles) {
    j[quantile_key(q.p)] = q.value;
    ci[quantile_key(q.p)] = {q.ci_low ? nlohmann::json(*q.ci_low) : nlohmann::json(nullptr),
                             q.ci_high ? nlohmann::json(*q.ci_high) : nlohmann::json(nullptr)};
  }
  j["ci95"] = ci;
  return j;
}

nlohmann::json histogram_distribution_json(const LogLinearHistogram& h, double scale) {
  nlohmann::json j;
  j["count"] = h.count();
  if (h.count() == 0) {
    for (const char* k : {"mean", "std", "min", "max"}) j[k] = nullptr;
    for (double p : kSummaryQuantiles) j[quantile_key(p)] = nullptr;
    j["ci95"] = nlohmann::json::object();
    return j;
  }
  j["mean"] = h.mean() * scale;
  j["std"] = h.stddev() * scale;
  j["min"] = static_cast<double>(h.min()) * scale;
  j["max"] = static_cast<double>(h.max()) * scale;
  nlohmann::json ci = nlohmann::json::object();
  for (double p : kSummaryQuantiles) {
    j[quantile_key(p)] = h.quantile(p) * scale;
    // The order-statistic interval needs ranks; from the histogram the ranks
    // map to bucket midpoints, which is what is reported.
    const auto interval = quantile_confidence_interval(h.count(), p);
    auto at_rank = [&](std::optional<std::size_t> rank) -> nlohmann::json {
      if (!rank) return nullptr;
      const double q = (static_cast<double>(*rank) - 0.5) / static_cast<double>(h.count());
      return h.quantile(q) * scale;
    };
    ci[quantile_key(p)] = {at_rank(interval.lower_rank), at_rank(interval.upper_rank)};
  }
  j["ci95"] = ci;
  return j;
}

namespace {
double tpot_of(double ttft, double e2e, std::uint32_t n) {
  return (e2e - ttft) / static_cast<double>(n - 1);
}
// Over the answer alone: from the first answer token to the last token.
bool has_answer_tpot(double ttfo, std::uint32_t answer_tokens) {
  return answer_tokens > 1 && !std::isnan(ttfo);
}
nlohmann::json short_distribution(std::vector<double>& v) {
  if (v.empty()) return {{"count", 0}, {"p50", nullptr}, {"p90", nullptr}, {"p99", nullptr}};
  std::sort(v.begin(), v.end());
  return {{"count", v.size()},
          {"p50", nearest_rank(v, 0.5)},
          {"p90", nearest_rank(v, 0.9)},
          {"p99", nearest_rank(v, 0.99)}};
}
}  // namespace

nlohmann::json SummaryBuilder::group_json(Group g, std::uint16_t index, double duration) const {
  const GroupCounts& c = g == Group::kClass    ? class_counts_[index]
                         : g == Group::kTenant ? tenant_counts_[index]
                                               : model_counts_[index];
  std::vector<double> ttft, tpot, e2e;
  std::uint64_t met = 0;
  for (const Sample& s : samples_) {
    if ((g == Group::kClass ? s.task_class : g == Group::kTenant ? s.tenant : s.model) != index) continue;
    ttft.push_back(s.ttft_ms);
    e2e.push_back(s.e2e_ms);
    if (s.output_tokens > 1) tpot.push_back(tpot_of(s.ttft_ms, s.e2e_ms, s.output_tokens));
    met += meets_slo(s) ? 1 : 0;
  }
  nlohmann::json j;
  j["requests"] = c.completed + c.failed;
  j["completed"] = c.completed;
  j["failed"] = c.failed;
  j["request_throughput_rps"] = duration > 0 ? static_cast<double>(c.completed) / duration : 0.0;
  j["output_token_throughput_tps"] = duration > 0 ? static_cast<double>(c.output_tokens) / duration : 0.0;
  j["goodput_rps"] = slos_.empty() ? nlohmann::json(nullptr)
                                   : nlohmann::json(duration > 0 ? static_cast<double>(met) / duration : 0.0);
  j["ttft_ms"] = short_distribution(ttft);
  j["tpot_ms"] = short_distribution(tpot);
  j["e2e_ms"] = short_distribution(e2e);
  return j;
}

// Long by nature: one block per metric of the summary (METRICS.md order).
nlohmann::json SummaryBuilder::build() const {
  nlohmann::json s;
  const double dur = duration_s();
  s["requests_total"] = requests_total();
  s["requests_completed"] = completed_;
  s["requests_failed"] = failed_;
  s["requests_warmup_excluded"] = warmup_;
  s["requests_cancelled_planned"] = cancelled_planned_;
  s["duration_s"] = dur;
  s["duration_send_s"] = duration_send_s();
  const auto [steady_from, steady_to] = steady_window();
  const double steady = nanos_to_s(steady_to - steady_from);
  // Completed requests that ended within the half-open window (from, to]:
  // the window opens when starts lift the in-flight level (a request ending
  // at that instant belongs to the ramp) and closes when ends drop it (the
  // request ending then is the plateau's last).
  std::sort(ok_ends_.begin(), ok_ends_.end());
  const auto steady_done =
      static_cast<std::uint64_t>(std::upper_bound(ok_ends_.begin(), ok_ends_.end(), steady_to) -
                                 std::upper_bound(ok_ends_.begin(), ok_ends_.end(), steady_from));
  s["duration_steady_s"] = steady;
  s["request_throughput_steady_rps"] = steady > 0 ? static_cast<double>(steady_done) / steady : 0.0;
  s["request_throughput_rps"] = dur > 0 ? static_cast<double>(completed_) / dur : 0.0;
  s["output_token_throughput_tps"] = dur > 0 ? static_cast<double>(output_tokens_) / dur : 0.0;
  s["input_token_throughput_tps"] = dur > 0 ? static_cast<double>(prompt_tokens_) / dur : 0.0;
  s["prompt_tokens_total"] = prompt_tokens_;
  // Pooling (embeddings, rerank): inputs (documents) sent, per request.
  s["inputs_total"] = inputs_;
  s["inputs_per_request_mean"] =
      pooling_requests_ > 0
          ? nlohmann::json(static_cast<double>(inputs_) / static_cast<double>(pooling_requests_))
          : nlohmann::json(nullptr);
  // Audio (transcriptions, input_audio parts): seconds sent, and per second of the run.
  s["audio_seconds_total"] = static_cast<double>(audio_ms_) / 1e3;
  s["audio_seconds_per_second"] = dur > 0 ? static_cast<double>(audio_ms_) / 1e3 / dur : 0.0;
  s["output_tokens_total"] = output_tokens_;
  s["output_token_mismatches"] = token_mismatches_;
  s["prompt_tokens_planned_total"] = planned_prompt_tokens_;
  s["prompt_tokens_planned_reported"] = planned_prompt_reported_;
  s["prompt_token_mismatches"] = prompt_mismatches_;
  s["requests_without_usage"] = without_usage_;
  s["output_tokens_client_counted"] = client_counted_;
  s["requests_with_reasoning"] = reasoning_requests_;
  s["reasoning_tokens_total"] = reasoning_tokens_;
  s["slo_latency_from"] = slo_from_schedule_ ? "schedule" : "send";
  {
    const ServerCounters c = counters_.value_or(ServerCounters{});
    auto opt = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
    s["prefix_cache_queries_tokens"] = opt(c.prefix_cache_queries_tokens);
    s["prefix_cache_hits_tokens"] = opt(c.prefix_cache_hits_tokens);
    s["prefix_cache_hit_rate"] =
        c.prefix_cache_queries_tokens && c.prefix_cache_hits_tokens
            ? nlohmann::json(*c.prefix_cache_queries_tokens > 0
                                 ? static_cast<double>(*c.prefix_cache_hits_tokens) /
                                       static_cast<double>(*c.prefix_cache_queries_tokens)
                                 : 0.0)
            : nlohmann::json(nullptr);
    s["preemptions_total"] = opt(c.preemptions_total);
    s["kv_cache_usage_peak"] = opt(c.kv_cache_usage_peak);
  }

  // Goodput and SLO attainment.
  std::uint64_t met = 0;
  for (const Sample& x : samples_) met += meets_slo(x) ? 1 : 0;
  s["goodput_rps"] = slos_.empty() ? nlohmann::json(nullptr)
                                   : nlohmann::json(dur > 0 ? static_cast<double>(met) / dur : 0.0);
  nlohmann::json attainment = nlohmann::json::object();
  for (const auto& entry : slos_) {
    const std::string& name = entry.first;
    const Slo& slo = entry.second;  // not a structured binding: lambdas below capture it
    if (slo.empty()) continue;
    std::uint16_t index = 0;
    bool seen = false;
    for (std::size_t i = 0; i < class_names_.size(); ++i)
      if (class_names_[i] == name) index = static_cast<std::uint16_t>(i), seen = true;
    std::vector<double> ttft, tpot, e2e, ttfo;
    std::uint64_t class_met = 0;
    std::uint64_t no_answer = 0;  // completed without an answer token: they miss a TTFO target
    for (const Sample& x : samples_) {
      if (!seen || x.task_class != index) continue;
      ttft.push_back(slo_ttft(x));
      if (std::isnan(x.ttfo_ms))
        ++no_answer;
      else
        ttfo.push_back(slo_ttfo(x));
      e2e.push_back(slo_e2e(x));
      if (x.output_tokens > 1) tpot.push_back(tpot_of(x.ttft_ms, x.e2e_ms, x.output_tokens));
      class_met += meets_slo(x) ? 1 : 0;
    }
    const std::uint64_t requests = seen ? class_counts_[index].completed + class_counts_[index].failed : 0;
    nlohmann::json c;
    c["percentile"] = slo.percentile;
    c["requests"] = requests;
    c["met"] = class_met;
    c["met_fraction"] = requests > 0 ? static_cast<double>(class_met) / static_cast<double>(requests) : 0.0;
    c["goodput_rps"] = dur > 0 ? static_cast<double>(class_met) / dur : 0.0;
    // Failed requests count as missing every target: the percentile is taken
    // over all requests of the class, with failures at +infinity.
    const std::uint64_t failed = seen ? class_counts_[index].failed : 0;
    bool pass = requests > 0;
    auto check = [&](const char* key, const std::optional<double>& target, std::vector<double>& v,
                     std::uint64_t missing = 0) {
      if (!target) return;
      nlohmann::json m;
      m["target"] = *target;
      std::sort(v.begin(), v.end());
      const std::size_t n = v.size() + failed + missing;
      if (n == 0) {
        m["value"] = nullptr;
        m["pass"] = false;
      } else {
        const std::size_t i = nearest_rank_index(n, slo.percentile / 100.0);
        if (i < v.size()) {
          m["value"] = v[i];
          m["pass"] = v[i] <= *target;
        } else {
          m["value"] = nullptr;  // the percentile falls among the failures
          m["pass"] = false;
        }
      }
      pass = pass && m["pass"].get<bool>();
      c[key] = m;
    };
    check("ttft_ms", slo.ttft_ms, ttft);
    check("tpot_ms", slo.tpot_ms, tpot);
    check("e2e_ms", slo.e2e_ms, e2e);
    check("ttfo_ms", slo.ttfo_ms, ttfo, no_answer);
    c["pass"] = pass;
    attainment[name.empty() ? "default" : name] = c;
  }
  s["slo_attainment"] = attainment;
  nlohmann::json outcomes = nlohmann::json::object();
  for (const auto& [o, n] : outcomes_) outcomes[std::string(outcome_name(o))] = n;
  s["requests_by_outcome"] = outcomes;
  nlohmann::json by_class = nlohmann::json::object(), by_tenant = nlohmann::json::object();
  if (class_names_.size() > 1)
    for (std::size_t i = 0; i < class_names_.size(); ++i)
      by_class[class_names_[i].empty() ? "default" : class_names_[i]] =
          group_json(Group::kClass, static_cast<std::uint16_t>(i), dur);
  if (tenant_names_.size() > 1)
    for (std::size_t i = 0; i < tenant_names_.size(); ++i)
      by_tenant[tenant_names_[i]] = group_json(Group::kTenant, static_cast<std::uint16_t>(i), dur);
  s["by_class"] = by_class;
  s["by_tenant"] = by_tenant;
  // A model mix: records name their model (a run without one has none: {}).
  nlohmann::json by_model = nlohmann::json::object();
  if (model_names_.size() > 1 || (model_names_.size() == 1 && !model_names_.front().empty()))
    for (std::size_t i = 0; i < model_names_.size(); ++i)
      by_model[model_names_[i].empty() ? "default" : model_names_[i]] =
          group_json(Group::kModel, static_cast<std::uint16_t>(i), dur);
  s["by_model"] = by_model;

  // Distributions, one at a time through one buffer: the peak memory of a
  // build is one double per request, whatever the number of keys.
  std::vector<double> v;
  v.reserve(samples_.size());
  auto distribution = [&](auto value, bool (*keep)(const Sample&)) {
    v.clear();
    for (const Sample& x : samples_)
      if (keep(x)) v.push_back(value(x));
    return distribution_json(describe(v));
  };
  auto all = [](const Sample&) { return true; };
  auto multi = [](const Sample& x) { return x.output_tokens > 1; };
  auto some = [](const Sample& x) { return x.output_tokens > 0; };
  s["ttft_ms"] = distribution([](const Sample& x) { return x.ttft_ms; }, all);
  s["ttft_sched_ms"] = distribution([](const Sample& x) { return x.ttft_ms + x.send_lag_ms; }, all);
  s["tpot_ms"] =
      distribution([](const Sample& x) { return tpot_of(x.ttft_ms, x.e2e_ms, x.output_tokens); }, multi);
  s["ttfo_ms"] = distribution([](const Sample& x) { return x.ttfo_ms; },
                              [](const Sample& x) { return !std::isnan(x.ttfo_ms); });
  s["tpot_answer_ms"] =
      distribution([](const Sample& x) { return tpot_of(x.ttfo_ms, x.e2e_ms, x.answer_tokens); },
                   [](const Sample& x) { return has_answer_tpot(x.ttfo_ms, x.answer_tokens); });
  s["ntpot_ms"] =
      distribution([](const Sample& x) { return x.e2e_ms / static_cast<double>(x.output_tokens); }, some);
  s["itl_ms"] = histogram_distribution_json(itl_ns_, 1e-6);
  s["icl_ms"] = histogram_distribution_json(icl_ns_, 1e-6);
  s["e2e_ms"] = distribution([](const Sample& x) { return x.e2e_ms; }, all);
  s["e2e_sched_ms"] = distribution([](const Sample& x) { return x.e2e_ms + x.send_lag_ms; }, all);
  s["send_lag_ms"] = distribution([](const Sample& x) { return x.send_lag_ms; }, all);
  std::vector<double> queue = queue_ms_;
  s["queue_ms"] = distribution_json(describe(queue));
  return s;
}

std::string token_check_reason(std::uint64_t usage, std::uint64_t events) {
  if (events < usage)
    return fmt::format(
        "{} events for {} tokens: the server sent some tokens together (llama.cpp holds back a token that "
        "ends "
        "inside a UTF-8 character; a stream interval or speculative decoding batches them); the usage count "
        "is "
        "the one reported",
        events, usage);
  if (events > usage)
    return fmt::format(
        "{} events for {} tokens: some events carried no token the usage counts (empty or role-only chunks, "
        "or a "
        "usage that leaves some out); the usage count is the one reported",
        events, usage);
  return "as many events as tokens overall, spread differently over the requests; the usage count is the one "
         "reported";
}

}  // namespace tokenscope
