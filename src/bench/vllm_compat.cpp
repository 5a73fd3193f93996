#include "bench/vllm_compat.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/stats.h"

namespace tokenscope::bench {

namespace {

// numpy: np.mean(x or 0), np.std(x or 0), np.median, np.percentile(x, p).
struct Described {
  double mean = 0, std = 0, median = 0, p90 = 0, p95 = 0, p99 = 0;
};

Described describe_numpy(std::vector<double> v) {
  Described d;
  if (v.empty()) return d;  // `x or 0`: every statistic of [0] is 0
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  d.mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
  double ss = 0;
  for (double x : v) ss += (x - d.mean) * (x - d.mean);
  d.std = std::sqrt(ss / n);
  d.median = linear_quantile(v, 0.5);
  d.p90 = linear_quantile(v, 0.9);
  d.p95 = linear_quantile(v, 0.95);
  d.p99 = linear_quantile(v, 0.99);
  return d;
}

}  // namespace

void VllmCompat::add(const RequestRecord& r, std::int64_t planned_prompt_tokens) {
  if (r.warmup) return;
  const bool ok = r.outcome == Outcome::kOk;
  // A later turn of a session has no planned prompt: the server's count of
  // the conversation so far stands in for it (0 when unknown).
  const std::int64_t input =
      planned_prompt_tokens >= 0 ? planned_prompt_tokens : std::max<std::int64_t>(0, r.prompt_tokens);
  input_lens_.push_back(input);
  const std::int64_t out = ok ? std::max<std::int64_t>(0, r.output_tokens) : 0;
  output_lens_.push_back(out);
  // What the request measured, also when it failed later (vLLM keeps a
  // failed request's ttft and gaps in its ttfts and itls lists).
  std::vector<double> gaps;
  for (std::size_t i = 1; i < r.event_times.size(); ++i)
    gaps.push_back(nanos_to_s(r.event_times[i] - r.event_times[i - 1]));
  const double ttft = r.t_first_token >= 0 && r.t_send >= 0 ? nanos_to_s(r.t_first_token - r.t_send) : 0.0;
  ttfts_s_.push_back(ttft);
  errors_.push_back(ok ? "" : fmt::format("{}: {}", outcome_name(r.outcome), r.detail));
  if (ok) {
    ++completed_;
    total_input_ += input;
    total_output_ += out;
    const double e2el = nanos_to_s((r.t_last_token >= 0 ? r.t_last_token : r.t_close) - r.t_send);
    ok_ttft_s_.push_back(ttft);
    ok_e2el_s_.push_back(e2el);
    double tpot = 0;  // vLLM: 0 for goodput when output_len <= 1
    if (out > 1) {
      tpot = (e2el - ttft) / static_cast<double>(out - 1);
      ok_tpot_s_.push_back(tpot);
    }
    ok_itl_s_.insert(ok_itl_s_.end(), gaps.begin(), gaps.end());
    ok_checks_.push_back({ttft, tpot, e2el});
  }
  itls_s_.push_back(std::move(gaps));
}

nlohmann::json VllmCompat::build(const VllmCompatInfo& info) const {
  nlohmann::json j;
  j["date"] = info.date;
  j["backend"] = info.backend;
  j["model_id"] = info.model_id;
  j["tokenizer_id"] = info.tokenizer_id;
  j["num_prompts"] = input_lens_.size();
  j["request_rate"] = info.request_rate ? nlohmann::json(*info.request_rate) : nlohmann::json("inf");
  j["burstiness"] = info.burstiness;
  j["max_concurrency"] =
      info.max_concurrency ? nlohmann::json(*info.max_concurrency) : nlohmann::json(nullptr);
  const double dur = info.duration_s;
  j["duration"] = dur;
  j["completed"] = completed_;
  j["total_input_tokens"] = total_input_;
  j["total_output_tokens"] = total_output_;
  auto per_s = [&](double v) { return dur > 0 ? v / dur : 0.0; };
  j["request_throughput"] = per_s(static_cast<double>(completed_));
  if (info.goodput_slo) {
    std::uint64_t good = 0;
    const Slo& s = *info.goodput_slo;
    for (const auto& c : ok_checks_)
      // vLLM compares in seconds (slo_ms / 1000 >= value), which rounds
      // differently from value * 1000 <= slo_ms at the boundary.
      good += (!s.ttft_ms || c.ttft_s <= *s.ttft_ms / 1000) &&
              (!s.tpot_ms || c.tpot_s <= *s.tpot_ms / 1000) && (!s.e2e_ms || c.e2el_s <= *s.e2e_ms / 1000);
    j["request_goodput"] = per_s(static_cast<double>(good));
  } else {
    j["request_goodput"] = nullptr;
  }
  j["output_throughput"] = per_s(static_cast<double>(total_output_));
  j["total_token_throughput"] = per_s(static_cast<double>(total_input_ + total_output_));
  for (const auto& [name, values] :
       {std::pair{"ttft", &ok_ttft_s_}, {"tpot", &ok_tpot_s_}, {"itl", &ok_itl_s_}, {"e2el", &ok_e2el_s_}}) {
    const Described d = describe_numpy(*values);
    j[fmt::format("mean_{}_ms", name)] = d.mean * 1e3;
    j[fmt::format("median_{}_ms", name)] = d.median * 1e3;
    j[fmt::format("std_{}_ms", name)] = d.std * 1e3;
    j[fmt::format("p90_{}_ms", name)] = d.p90 * 1e3;
    j[fmt::format("p95_{}_ms", name)] = d.p95 * 1e3;
    j[fmt::format("p99_{}_ms", name)] = d.p99 * 1e3;
  }
  j["input_lens"] = input_lens_;
  j["output_lens"] = output_lens_;
  j["ttfts"] = ttfts_s_;
  j["itls"] = itls_s_;
  j["generated_texts"] = std::vector<std::string>(input_lens_.size());
  j["errors"] = errors_;
  return j;
}

}  // namespace tokenscope::bench
