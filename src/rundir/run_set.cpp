#include "rundir/run_set.h"

#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include <boost/math/distributions/students_t.hpp>

#include "core/json_depth.h"

namespace tokenscope::rundir {

const std::vector<RepeatMetric>& repeat_metrics() {
  static const std::vector<RepeatMetric> m = {{"ttft_ms.p50", true},
                                              {"ttft_ms.p90", true},
                                              {"ttft_ms.p99", true},
                                              {"tpot_ms.p50", true},
                                              {"tpot_ms.p90", true},
                                              {"tpot_ms.p99", true},
                                              {"itl_ms.p50", true},
                                              {"itl_ms.p90", true},
                                              {"itl_ms.p99", true},
                                              {"e2e_ms.p50", true},
                                              {"e2e_ms.p90", true},
                                              {"e2e_ms.p99", true},
                                              {"request_throughput_rps", false},
                                              {"output_token_throughput_tps", false},
                                              {"goodput_rps", false}};
  return m;
}

std::optional<double> summary_value(const nlohmann::json& summary, const std::string& dotted_key) {
  const nlohmann::json* at = &summary;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = dotted_key.find('.', start);
    const std::string part =
        dotted_key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!at->is_object()) return std::nullopt;
    const auto it = at->find(part);
    if (it == at->end()) return std::nullopt;
    at = &*it;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (!at->is_number()) return std::nullopt;
  const double v = at->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

nlohmann::json repeat_statistics(const std::vector<nlohmann::json>& summaries, double confidence) {
  nlohmann::json out = nlohmann::json::object();
  for (const RepeatMetric& m : repeat_metrics()) {
    std::vector<double> v;
    for (const auto& s : summaries)
      if (const auto x = summary_value(s, m.key)) v.push_back(*x);
    if (v.empty() || v.size() != summaries.size()) continue;  // a metric some run lacks
    const auto n = static_cast<double>(v.size());
    const double mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
    double ss = 0;
    for (double x : v) ss += (x - mean) * (x - mean);
    nlohmann::json j = {{"values", v}, {"mean", mean}};
    if (v.size() >= 2) {
      const double sd = std::sqrt(ss / (n - 1));
      const double t = boost::math::quantile(boost::math::students_t(n - 1), 0.5 + confidence / 2);
      j["sd"] = sd;
      j["ci"] = {mean - t * sd / std::sqrt(n), mean + t * sd / std::sqrt(n)};
    } else {
      j["sd"] = nullptr;
      j["ci"] = nullptr;
    }
    out[m.key] = std::move(j);
  }
  return out;
}

std::optional<RunSet> read_run_set(const std::filesystem::path& dir) {
  std::ifstream in(dir / kRunSetFile);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  RunSet set;
  const std::string text = ss.str();
  if (json_too_deep_at(text) != std::string_view::npos) return std::nullopt;  // not a sweep.json we wrote
  set.doc = nlohmann::json::parse(text, nullptr, false);
  if (!set.doc.is_object()) return std::nullopt;
  const auto runs = set.doc.find("runs");
  if (runs == set.doc.end() || !runs->is_array()) return std::nullopt;
  if (const auto k = set.doc.find("kind"); k != set.doc.end() && k->is_string())
    set.kind = k->get<std::string>();
  for (const auto& r : *runs) {
    if (!r.is_object()) continue;
    const auto d = r.find("dir");
    if (d == r.end() || !d->is_string()) continue;
    const std::filesystem::path p = dir / d->get<std::string>();
    std::error_code ec;
    // Only a run directory inside the set: a listed "../x" or absolute path is not followed.
    if (d->get<std::string>().find("..") != std::string::npos ||
        std::filesystem::path(d->get<std::string>()).is_absolute())
      continue;
    if (std::filesystem::exists(p / "run.json", ec)) {
      set.runs.push_back(p);
      set.listed.push_back(p);
    } else if (std::filesystem::exists(p / kRunSetFile, ec)) {
      set.listed.push_back(p);  // a run set of its own: a server sweep's repeats
    }
  }
  return set;
}

}  // namespace tokenscope::rundir
