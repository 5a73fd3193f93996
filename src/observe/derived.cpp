#include "observe/derived.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include <nlohmann/json.hpp>

#include "observe/canonical.h"

namespace tokenscope::observe {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// For a histogram part: its family and which part ("bucket", "sum", "count").
struct HistogramPart {
  std::string_view family;
  std::string_view part;
};
std::optional<HistogramPart> histogram_part(std::string_view name) {
  for (std::string_view suffix : {"_bucket", "_sum", "_count"})
    if (ends_with(name, suffix)) {
      const auto family = name.substr(0, name.size() - suffix.size());
      const auto* def = find_canonical(family);
      if (def && def->kind == SeriesKind::kHistogram) return HistogramPart{family, suffix.substr(1)};
    }
  return std::nullopt;
}

// Increases of one histogram (one label set, le apart) over some window.
struct HistogramDelta {
  std::vector<std::pair<double, double>> buckets;  // (le, cumulative increase)
  double sum = 0, count = 0;
  bool has_count = false;
  Labels labels;  // without le
};

// Groups (sample, increase) pairs of histogram parts by family + labels.
class HistogramGroups {
 public:
  void add(const Sample& s, const HistogramPart& hp, double increase) {
    Labels rest;
    double le = std::nan("");
    for (const auto& l : s.labels)
      if (l.name == "le")
        le = parse_le(l.value).value_or(std::nan(""));
      else
        rest.push_back(l);
    Sample key_sample{std::string(hp.family), std::move(rest), 0};
    const std::string key = series_key(key_sample);
    auto [it, fresh] = groups_.try_emplace(key);
    HistogramDelta& h = it->second;
    if (fresh) {  // the key holds the family and the labels: they are the group's for good
      h.labels = std::move(key_sample.labels);
      family_[key] = std::move(key_sample.name);
    }
    if (hp.part == "bucket") {
      if (!std::isnan(le)) h.buckets.emplace_back(le, increase);
    } else if (hp.part == "sum") {
      h.sum = increase;
    } else {
      h.count = increase;
      h.has_count = true;
    }
  }
  // Appends NAME_p50.., NAME_mean, NAME_per_s (when dt_s > 0) to out.
  void emit(std::vector<Sample>& out, double dt_s) {
    for (auto& [key, h] : groups_) {
      const std::string& family = family_[key];
      std::sort(h.buckets.begin(), h.buckets.end());
      if (dt_s > 0 && h.has_count) out.push_back({family + "_count_per_s", h.labels, h.count / dt_s});
      if (h.count <= 0) continue;
      out.push_back({family + "_mean", h.labels, h.sum / h.count});
      for (double q : kDerivedQuantiles)
        if (const auto v = histogram_quantile(q, h.buckets))
          out.push_back({fmt_quantile(family, q), h.labels, *v});
    }
  }
  nlohmann::json to_json() {
    nlohmann::json j = nlohmann::json::object();
    for (auto& [key, h] : groups_) {
      std::sort(h.buckets.begin(), h.buckets.end());
      nlohmann::json e = {{"count", h.count}, {"sum", h.sum}};
      e["mean"] = h.count > 0 ? nlohmann::json(h.sum / h.count) : nlohmann::json(nullptr);
      for (double q : kDerivedQuantiles) {
        const auto v = histogram_quantile(q, h.buckets);
        e[fmt_quantile("p", q).substr(2)] = v ? nlohmann::json(*v) : nlohmann::json(nullptr);
      }
      j[key] = e;
    }
    return j;
  }
  static std::string fmt_quantile(const std::string& family, double q) {
    return family + "_p" + std::to_string(static_cast<int>(std::lround(q * 100)));
  }

 private:
  std::map<std::string, HistogramDelta> groups_;
  std::map<std::string, std::string> family_;
};

nlohmann::json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

std::string series_key(const Sample& s) {
  std::string k = s.name;
  if (s.labels.empty()) return k;
  k += '{';
  for (std::size_t i = 0; i < s.labels.size(); ++i) {
    if (i) k += ',';
    k += s.labels[i].name;
    k += "=\"";
    k += s.labels[i].value;
    k += '"';
  }
  k += '}';
  return k;
}

std::optional<double> histogram_quantile(double q, const std::vector<std::pair<double, double>>& buckets) {
  if (buckets.empty()) return std::nullopt;
  const double total = buckets.back().second;
  if (!(total > 0)) return std::nullopt;
  const double rank = q * total;
  double lower_le = 0, lower_count = 0;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const auto [le, count] = buckets[i];
    if (count >= rank) {
      if (std::isinf(le))
        return i == 0 ? std::nullopt : std::optional<double>(lower_le);  // above the last bound
      if (i == 0 && le <= 0) return le;
      const double in_bucket = count - lower_count;
      if (in_bucket <= 0) return le;
      return lower_le + (le - lower_le) * (rank - lower_count) / in_bucket;
    }
    lower_le = le;
    lower_count = count;
  }
  return lower_le;
}

void SeriesTracker::feed(Observation& o) {
  if (!o.error.empty() || !o.unavailable.empty() || o.canonical.empty()) return;
  const bool has_previous = observations_ > 0;
  const double dt_s = has_previous ? nanos_to_s(o.t_ns - previous_t_) : 0.0;
  HistogramGroups window;
  double hits_inc = 0, queries_inc = 0;
  bool hits_seen = false, queries_seen = false;
  double running = 0, waiting = 0;
  bool running_seen = false, waiting_seen = false;
  for (const auto& s : o.canonical) {
    if (std::isfinite(s.value) && s.name == "requests_running") running += s.value, running_seen = true;
    if (std::isfinite(s.value) && s.name == "requests_waiting") waiting += s.value, waiting_seen = true;
    const std::string key = series_key(s);
    const auto hp = histogram_part(s.name);
    const auto* def = hp ? nullptr : find_canonical(s.name);
    const bool counter = hp || (def && def->kind == SeriesKind::kCounter);
    if (!counter) {
      // A gauge's +Inf or NaN (the exposition format allows them) is no level
      // of anything: left out of its min, max and mean (a "+Inf" KV usage
      // printed "KV usage peak inf%").
      if (!std::isfinite(s.value)) continue;
      Gauge& g = gauges_[key];
      g.last = s.value;
      if (!has_previous) {  // the baseline read, before the run
        g.before = s.value;
        continue;
      }
      if (g.n == 0 || s.value < g.min) g.min = s.value;
      if (g.n == 0 || s.value > g.max) g.max = s.value;
      g.sum += s.value;
      ++g.n;
      continue;
    }
    auto [it, fresh] = counters_.try_emplace(key);
    Counter& c = it->second;
    double inc = 0;
    if (fresh) {
      c.sample = Sample{s.name, s.labels, 0};
      c.last = s.value;
      // A series that appears after the first observation was created
      // during the run (servers create labelled series on first use): it
      // counted from 0.
      if (has_previous) {
        inc = s.value;
        c.increase = inc;
      }
    } else {
      if (s.value >= c.last) {
        inc = s.value - c.last;
      } else {
        inc = s.value;  // a reset: the counter started again from 0
        ++resets_;
      }
      c.increase += inc;
      c.last = s.value;
    }
    if (!has_previous) continue;
    if (hp) {
      window.add(s, *hp, inc);
    } else {
      if (dt_s > 0) o.derived.push_back({s.name + "_per_s", s.labels, inc / dt_s});
      if (s.name == "prefix_cache_hits_tokens") hits_inc += inc, hits_seen = true;
      if (s.name == "prefix_cache_queries_tokens") queries_inc += inc, queries_seen = true;
    }
  }
  if (has_previous) {
    window.emit(o.derived, dt_s);
    if (hits_seen && queries_seen && queries_inc > 0) {
      o.derived.push_back({"prefix_cache_hit_rate", {}, hits_inc / queries_inc});
      hit_rate_points_.emplace_back(o.t_ns, hits_inc / queries_inc);
    }
  }
  if (running_seen) running_points_.emplace_back(o.t_ns, running);
  if (waiting_seen) waiting_points_.emplace_back(o.t_ns, waiting);
  if (observations_ == 0) first_t_ = o.t_ns;
  previous_t_ = o.t_ns;
  ++observations_;
}

std::optional<double> SeriesTracker::increase(std::string_view name) const {
  std::optional<double> sum;
  for (const auto& [key, c] : counters_)
    if (key == name ||
        (key.size() > name.size() && key.compare(0, name.size(), name) == 0 && key[name.size()] == '{'))
      sum = sum.value_or(0.0) + c.increase;
  return sum;
}

std::optional<double> SeriesTracker::gauge_max(std::string_view name) const {
  std::optional<double> best;
  for (const auto& [key, g] : gauges_)
    if (key == name ||
        (key.size() > name.size() && key.compare(0, name.size(), name) == 0 && key[name.size()] == '{'))
      if (g.n > 0) best = std::max(best.value_or(g.max), g.max);
  return best;
}

nlohmann::json server_view(const std::vector<const SeriesTracker*>& all) {
  std::vector<const SeriesTracker*> trackers;
  for (const auto* t : all)
    if (t && t->observations() >= 2) trackers.push_back(t);
  if (trackers.empty()) return nullptr;
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  auto sum_increase = [&](std::string_view name) {
    std::optional<double> v;
    for (const auto* t : trackers)
      if (const auto x = t->increase(name)) v = v.value_or(0.0) + *x;
    return v;
  };
  auto max_gauge = [&](std::string_view name) {
    std::optional<double> v;
    for (const auto* t : trackers)
      if (const auto x = t->gauge_max(name)) v = std::max(v.value_or(*x), *x);
    return v;
  };
  nlohmann::json out;
  out["definition"] =
      "the server's own counters: their increase from the first observation (before the first request) to "
      "the "
      "last (after the last response), counter resets handled, summed over the server sources; *_max: the "
      "highest value any one source reported";
  for (const char* k : {"requests_finished", "prompt_tokens", "generation_tokens",
                        "prefix_cache_queries_tokens", "prefix_cache_hits_tokens", "preemptions"})
    out[k] = opt(sum_increase(k));
  const auto q = sum_increase("prefix_cache_queries_tokens"), h = sum_increase("prefix_cache_hits_tokens");
  out["prefix_cache_hit_rate"] = q && h && *q > 0 ? nlohmann::json(*h / *q) : nlohmann::json(nullptr);
  for (const char* k : {"requests_running", "requests_waiting", "kv_cache_usage"})
    out[std::string(k) + "_max"] = opt(max_gauge(k));
  if (trackers.size() == 1) {
    // Quantiles of the server's histograms over the run (one source: no merge of buckets across sources).
    const auto totals = trackers[0]->totals();
    for (const char* k : {"server_ttft_seconds", "server_itl_seconds", "server_e2e_seconds",
                          "server_queue_seconds", "iteration_tokens"})
      out[k] = totals["histograms"].contains(k) ? totals["histograms"][k] : nlohmann::json(nullptr);
    out["window_s"] = totals["window_s"];
    out["counter_resets"] = totals["resets"];
  }
  return out;
}

nlohmann::json SeriesTracker::totals() const {
  if (observations_ < 2) return nullptr;
  nlohmann::json j;
  j["window_s"] = nanos_to_s(previous_t_ - first_t_);
  j["observations"] = observations_;
  j["resets"] = resets_;
  nlohmann::json counters = nlohmann::json::object();
  HistogramGroups hist;
  for (const auto& [key, c] : counters_) {
    if (const auto hp = histogram_part(c.sample.name)) {
      hist.add(c.sample, *hp, c.increase);
    } else {
      counters[key] = c.increase;
    }
  }
  j["counters"] = counters;
  j["histograms"] = hist.to_json();
  nlohmann::json gauges = nlohmann::json::object();
  for (const auto& [key, g] : gauges_) {
    const bool read = g.n > 0;  // read during the run, not only before it
    gauges[key] = {
        {"min", read ? number_or_null(g.min) : nlohmann::json(nullptr)},
        {"max", read ? number_or_null(g.max) : nlohmann::json(nullptr)},
        {"mean", read ? number_or_null(g.sum / static_cast<double>(g.n)) : nlohmann::json(nullptr)},
        {"last", number_or_null(g.last)},
        {"before", g.before ? number_or_null(*g.before) : nlohmann::json(nullptr)}};
  }
  j["gauges"] = gauges;
  return j;
}

}  // namespace tokenscope::observe
