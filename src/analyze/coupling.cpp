#include "analyze/coupling.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/random.h"
#include "core/record.h"
#include "core/stats.h"
#include "rundir/readers.h"

namespace tokenscope::analyze {

std::optional<CouplingRatio> quantile_ratio(std::vector<double> mix, std::vector<double> alone, double q,
                                            double confidence, std::uint64_t seed, int resamples) {
  if (mix.size() < kCouplingMinSample || alone.size() < kCouplingMinSample) return std::nullopt;
  std::sort(mix.begin(), mix.end());
  std::sort(alone.begin(), alone.end());
  CouplingRatio r;
  r.n_mix = mix.size();
  r.n_alone = alone.size();
  r.mix = nearest_rank(mix, q);
  r.alone = nearest_rank(alone, q);
  if (!(r.alone > 0)) return std::nullopt;
  r.kappa = r.mix / r.alone;
  // Percentile bootstrap: each sample resampled with replacement; a
  // resample's quantile is the nearest-rank order statistic of n draws of
  // uniform indices into the sorted sample.
  Rng rng(seed);
  std::vector<double> ratios;
  ratios.reserve(static_cast<std::size_t>(resamples));
  std::vector<double> draw;
  auto resampled = [&](const std::vector<double>& v) {
    draw.resize(v.size());
    for (auto& x : draw) x = v[rng.uniform_int(0, v.size() - 1)];
    return nearest_rank_select(draw, q);
  };
  for (int b = 0; b < resamples; ++b) {
    const double m = resampled(mix), a = resampled(alone);
    if (a > 0) ratios.push_back(m / a);
  }
  std::sort(ratios.begin(), ratios.end());
  const double tail = (1 - confidence) / 2;
  r.ci_low = ratios.empty() ? r.kappa : nearest_rank(ratios, std::max(tail, 1e-9));
  r.ci_high = ratios.empty() ? r.kappa : nearest_rank(ratios, 1 - tail);
  return r;
}

void add_latencies(const RequestRecord& r, std::map<std::string, ClassLatencies>& out) {
  if (r.warmup || r.outcome != Outcome::kOk || r.t_send < 0) return;
  const Nanos first = r.first_token(), last = r.last_token();
  if (first < 0 || last < 0) return;
  auto& c = out[r.task_class];
  const double ttft = nanos_to_ms(first - r.t_send), e2e = nanos_to_ms(last - r.t_send);
  c.ttft_ms.push_back(ttft);
  c.e2e_ms.push_back(e2e);
  if (r.output_tokens > 1) c.tpot_ms.push_back((e2e - ttft) / static_cast<double>(r.output_tokens - 1));
}

std::map<std::string, ClassLatencies> class_latencies(const std::filesystem::path& requests_jsonl) {
  std::map<std::string, ClassLatencies> out;
  rundir::RequestsReader reader(requests_jsonl, rundir::BadLines::kSkip);
  RequestRecord r;
  while (reader.next(r)) add_latencies(r, out);
  return out;
}

std::vector<std::string> classes_in_use(const workload::Workload& w) {
  std::vector<bool> used(w.classes.size(), false);
  for (const auto& r : w.requests)
    if (r.task_class < used.size()) used[r.task_class] = true;
  std::vector<std::string> out;
  for (std::size_t i = 0; i < used.size(); ++i)
    if (used[i]) out.push_back(w.classes[i]);
  return out;
}

std::string coupling_run_dir(const std::string& task_class) {
  std::string safe = task_class.empty() ? "default" : task_class;
  for (char& c : safe)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  return "coupling/" + safe;
}

std::vector<std::string> coupling_run_dirs(const std::vector<std::string>& classes) {
  std::vector<std::string> out;
  for (const auto& c : classes) {
    const std::string base = coupling_run_dir(c);
    std::string dir = base;
    for (int k = 2; std::find(out.begin(), out.end(), dir) != out.end(); ++k)
      dir = base + "-" + std::to_string(k);
    out.push_back(dir);
  }
  return out;
}

nlohmann::json coupling_json(const std::map<std::string, ClassLatencies>& mix,
                             const std::map<std::string, ClassLatencies>& alone,
                             const std::map<std::string, std::string>& alone_runs, double confidence) {
  nlohmann::json classes = nlohmann::json::object();
  std::uint64_t seed = 0x636f75706c696e67ULL;  // "coupling"
  for (const auto& [name, m] : mix) {
    const auto it = alone.find(name);
    if (it == alone.end()) continue;
    const ClassLatencies& a = it->second;
    nlohmann::json metrics = nlohmann::json::object();
    const std::pair<const char*, std::pair<const std::vector<double>*, const std::vector<double>*>> sets[] = {
        {"ttft_ms", {&m.ttft_ms, &a.ttft_ms}},
        {"tpot_ms", {&m.tpot_ms, &a.tpot_ms}},
        {"e2e_ms", {&m.e2e_ms, &a.e2e_ms}}};
    for (const auto& [metric, samples] : sets) {
      nlohmann::json q = nlohmann::json::object();
      for (const auto& [label, p] : {std::pair{"p50", 0.5}, std::pair{"p99", 0.99}}) {
        const auto r = quantile_ratio(*samples.first, *samples.second, p, confidence, seed = mix64(seed + 1));
        q[label] = r ? nlohmann::json{{"kappa", r->kappa}, {"ci", {r->ci_low, r->ci_high}},
                                      {"mix", r->mix},     {"alone", r->alone},
                                      {"n_mix", r->n_mix}, {"n_alone", r->n_alone}}
                     : nlohmann::json(nullptr);
      }
      metrics[metric] = q;
    }
    classes[name.empty() ? "default" : name] = metrics;
  }
  return {{"method", "alone"}, {"confidence", confidence}, {"classes", classes}, {"alone_runs", alone_runs}};
}

}  // namespace tokenscope::analyze
