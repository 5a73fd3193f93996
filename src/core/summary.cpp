#include "core/summary.h"

#include <fmt/format.h>
#include <algorithm>

namespace tokenscope {

namespace {
std::string quantile_key(double p) {
  // 0.5 -> p50, 0.999 -> p99_9
  std::string s = fmt::format("{:g}", p * 100.0);
  std::replace(s.begin(), s.end(), '.', '_');
  return "p" + s;
}
}  // namespace

void SummaryBuilder::add(const RequestRecord& r) {
  if (r.t_sched >= 0 && (first_sched_ < 0 || r.t_sched < first_sched_)) first_sched_ = r.t_sched;
  if (r.t_close >= 0) last_close_ = std::max(last_close_, r.t_close);
  if (r.outcome != Outcome::kOk) {
    ++failed_;
    return;
  }
  ++completed_;
  if (r.prompt_tokens > 0) prompt_tokens_ += static_cast<std::uint64_t>(r.prompt_tokens);
  const std::int64_t n = r.output_tokens >= 0 ? r.output_tokens : 0;
  output_tokens_ += static_cast<std::uint64_t>(n);
  if (r.t_first_token < 0 || r.t_send < 0) return;
  const double ttft = nanos_to_ms(r.t_first_token - r.t_send);
  const double e2e = nanos_to_ms(r.t_last_token - r.t_send);
  ttft_ms_.push_back(ttft);
  e2e_ms_.push_back(e2e);
  if (n > 1) tpot_ms_.push_back((e2e - ttft) / static_cast<double>(n - 1));
  for (std::size_t i = 1; i < r.event_times.size(); ++i) {
    const Nanos gap = r.event_times[i] - r.event_times[i - 1];
    const std::uint32_t k = i < r.event_tokens.size() ? std::max<std::uint32_t>(1, r.event_tokens[i]) : 1;
    itl_ns_.record(static_cast<std::uint64_t>(std::max<Nanos>(0, gap)) / k, k);
  }
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

nlohmann::json SummaryBuilder::build() const {
  nlohmann::json s;
  const double dur = duration_s();
  s["requests_total"] = requests_total();
  s["requests_completed"] = completed_;
  s["requests_failed"] = failed_;
  s["duration_s"] = dur;
  s["request_throughput_rps"] = dur > 0 ? static_cast<double>(completed_) / dur : 0.0;
  s["output_token_throughput_tps"] = dur > 0 ? static_cast<double>(output_tokens_) / dur : 0.0;
  s["prompt_tokens_total"] = prompt_tokens_;
  s["output_tokens_total"] = output_tokens_;
  s["prefix_cache_queries_tokens"] = counters_.prefix_cache_queries_tokens;
  s["prefix_cache_hits_tokens"] = counters_.prefix_cache_hits_tokens;
  s["prefix_cache_hit_rate"] = counters_.prefix_cache_queries_tokens > 0
                                   ? static_cast<double>(counters_.prefix_cache_hits_tokens) /
                                         static_cast<double>(counters_.prefix_cache_queries_tokens)
                                   : 0.0;
  s["preemptions_total"] = counters_.preemptions_total;
  s["kv_cache_usage_peak"] = counters_.kv_cache_usage_peak ? nlohmann::json(*counters_.kv_cache_usage_peak)
                                                           : nlohmann::json(nullptr);
  auto dist = [](std::vector<double> v) {  // copy: describe() sorts
    return distribution_json(describe(v));
  };
  s["ttft_ms"] = dist(ttft_ms_);
  s["tpot_ms"] = dist(tpot_ms_);
  s["itl_ms"] = histogram_distribution_json(itl_ns_, 1e-6);
  s["e2e_ms"] = dist(e2e_ms_);
  return s;
}

}  // namespace tokenscope
