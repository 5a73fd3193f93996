#include "observe/canonical.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>

#include "observe/canonical_maps.h"

namespace tokenscope::observe {
namespace {

using maps::Aggregation;
using maps::Mapping;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Families by name. parse_exposition files a sample under its own name or
// under the family its name is a suffixed sample of (x_bucket, x_sum → x;
// x_total → x in OpenMetrics, while prometheus_client's 0.0.4 text names the
// counter family x_total itself), so the samples of a name are found in the
// families named by it or by its stem. Matching then goes by the samples' own
// names: a counter is found whatever its family is called. Indexing a page's
// hundred-odd families rather than its thousands of samples keeps mapping a
// scrape well under parsing it (docs/performance.md).
using FamilyIndex = std::unordered_map<std::string_view, std::vector<const MetricFamily*>>;

FamilyIndex index_families(const Exposition& e) {
  FamilyIndex index;
  for (const auto& family : e.families) index[family.name].push_back(&family);
  return index;
}

// Calls fn(sample) for every sample named exactly name.
template <class Fn>
void for_each_sample(const FamilyIndex& index, std::string_view name, Fn&& fn) {
  std::string_view stem;
  for (std::string_view suffix : {"_total", "_bucket", "_sum", "_count"}) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      stem = name.substr(0, name.size() - suffix.size());
      break;
    }
  }
  for (std::string_view family_name : {name, stem}) {
    if (family_name.empty()) continue;
    const auto it = index.find(family_name);
    if (it == index.end()) continue;
    for (const MetricFamily* f : it->second)
      for (const auto& s : f->samples)
        if (s.name == name) fn(s);
  }
}

const std::string* label_value(const Labels& labels, std::string_view name) {
  for (const auto& l : labels)
    if (l.name == name) return &l.value;
  return nullptr;
}

bool selected(const ExpositionSample& s, const Mapping& m) {
  if (m.match_label.empty()) return true;
  const std::string* v = label_value(s.labels, m.match_label);
  return v && *v == m.match_value;
}

// One canonical output series: empty for a server; a GPU and MIG instance
// for per-GPU tables (DCGM's gpu and GPU_I_ID labels).
struct Group {
  std::string gpu;
  std::string mig;
  // Device indices in numeric order ("2" before "10"), then by text.
  bool operator<(const Group& o) const {
    if (gpu.size() != o.gpu.size()) return gpu.size() < o.gpu.size();
    if (gpu != o.gpu) return gpu < o.gpu;
    if (mig.size() != o.mig.size()) return mig.size() < o.mig.size();
    return mig < o.mig;
  }
};

Group group_of(const ExpositionSample& s, bool per_gpu) {
  Group g;
  if (!per_gpu) return g;
  if (const std::string* v = label_value(s.labels, "gpu")) g.gpu = *v;
  if (const std::string* v = label_value(s.labels, "GPU_I_ID")) g.mig = *v;
  return g;
}

Labels group_labels(const Group& g) {
  Labels out;
  if (!g.gpu.empty()) out.push_back({"gpu", g.gpu});
  if (!g.mig.empty()) out.push_back({"mig", g.mig});
  return out;
}

// The sample names a mapping reads for a gauge or counter canonical: a
// counter with and without "_total".
std::vector<std::string> scalar_names(const Mapping& m, SeriesKind kind) {
  std::string name(m.engine_name);
  if (kind != SeriesKind::kCounter) return {name};
  constexpr std::string_view kTotal = "_total";
  if (name.size() > kTotal.size() && name.ends_with(kTotal)) name.resize(name.size() - kTotal.size());
  return {name, name + std::string(kTotal)};
}

double aggregate(const std::vector<double>& values, Aggregation a) {
  double out = a == Aggregation::kMax ? -kInf : 0.0;
  for (double v : values) {
    if (a == Aggregation::kMax)
      out = std::isnan(v) || std::isnan(out) ? std::nan("") : std::max(out, v);
    else
      out += v;
  }
  if (a == Aggregation::kMean) out /= static_cast<double>(values.size());
  return out;
}

// Value of one canonical group at the lowest rank present; same-rank
// mappings add up.
struct Ranked {
  int rank = std::numeric_limits<int>::max();
  double value = 0.0;
  void add(int r, double v) {
    if (r < rank) {
      rank = r;
      value = v;
    } else if (r == rank) {
      value += v;
    }
  }
};

void canonicalize_scalar(const CanonicalDefinition& def, const maps::EngineTable& table,
                         const FamilyIndex& index, const CanonicalLimits& limits, CanonicalDrops& drops,
                         std::vector<Sample>& out) {
  std::map<Group, Ranked> groups;
  for (const Mapping& m : table.mappings) {
    if (m.canonical != def.name) continue;
    std::map<Group, std::vector<double>> values;
    for (const std::string& name : scalar_names(m, def.kind)) {
      for_each_sample(index, name, [&](const ExpositionSample& s) {
        if (selected(s, m)) values[group_of(s, table.per_gpu)].push_back(s.value);
      });
    }
    for (const auto& [g, v] : values) groups[g].add(m.rank, m.scale.apply(aggregate(v, m.aggregation)));
  }
  std::size_t kept = 0;
  for (const auto& [g, r] : groups) {
    if (kept++ == limits.max_label_sets) {
      drops.label_sets += groups.size() - limits.max_label_sets;
      break;
    }
    out.push_back({std::string(def.name), group_labels(g), r.value});
  }
}

std::string format_le(double v) {
  if (std::isinf(v)) return "+Inf";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// One label set of one histogram in canonical units: cumulative counts by
// upper bound, ascending (servers write them in order: adding is appending).
struct HistogramSeries {
  std::vector<std::pair<double, double>> buckets;  // le (finite or +Inf), cumulative count
  std::optional<double> sum;
  std::optional<double> count;
  // More bounds than a canonical histogram may have: the series is not used
  // (and no more are stored: an exposition in descending order would make
  // each insertion a move of all before it).
  bool too_many_bounds = false;
  std::size_t max_bounds = std::numeric_limits<std::size_t>::max();

  void add_bucket(double le, double n) {
    if (buckets.empty() || le > buckets.back().first) {
      if (buckets.size() > max_bounds) {
        too_many_bounds = true;
        return;
      }
      buckets.emplace_back(le, n);
      return;
    }
    if (buckets.size() > max_bounds) {
      too_many_bounds = true;
      return;
    }
    const auto it = std::lower_bound(buckets.begin(), buckets.end(), le,
                                     [](const auto& b, double v) { return b.first < v; });
    if (it->first == le)
      it->second = std::max(it->second, n);  // two bounds that scale to one double: the larger count
    else
      buckets.insert(it, {le, n});
  }
  // Observations in all: _count, else the +Inf bucket.
  double observations() const {
    if (count) return *count;
    return !buckets.empty() && std::isinf(buckets.back().first) ? buckets.back().second : 0.0;
  }
  // Cumulative count at or below bound: a bucket's count holds up to the next
  // bound this series has, so a bound it lacks reads the one below it.
  double cumulative_at(double bound) const {
    const auto it = std::upper_bound(buckets.begin(), buckets.end(), bound,
                                     [](double v, const auto& b) { return v < b.first; });
    return it == buckets.begin() ? 0.0 : std::prev(it)->second;
  }
  bool has_buckets() const { return !buckets.empty(); }
};

// The label set of a histogram sample without le: which series it belongs to.
std::string series_key(const Labels& labels) {
  std::vector<const Label*> sorted;
  for (const auto& l : labels)
    if (l.name != "le") sorted.push_back(&l);
  std::sort(sorted.begin(), sorted.end(), [](const Label* a, const Label* b) { return a->name < b->name; });
  std::string key;
  for (const Label* l : sorted) {
    key += l->name;
    key += '\x1f';
    key += l->value;
    key += '\x1e';
  }
  return key;
}

// Whether two samples' labels are the same but for le, in the same order: a
// series' buckets come in a run, so most samples reuse the series before.
bool same_series(const Labels& a, const Labels& b) {
  std::size_t i = 0, j = 0;
  for (;;) {
    while (i < a.size() && a[i].name == "le") ++i;
    while (j < b.size() && b[j].name == "le") ++j;
    if (i == a.size() || j == b.size()) return i == a.size() && j == b.size();
    if (!(a[i] == b[j])) return false;
    ++i;
    ++j;
  }
}

using SeriesByKey = std::map<std::string, HistogramSeries>;

// The label sets of one histogram mapping by output group, in canonical
// units: bounds and sum scaled (5 ms → 0.005 s), counts never.
std::map<Group, SeriesByKey> collect_histogram(const Mapping& m, const FamilyIndex& index, bool per_gpu,
                                               std::size_t max_bounds) {
  std::map<Group, SeriesByKey> out;
  const std::string base(m.engine_name);
  auto each = [&](const std::string& name, auto&& fn) {
    const Labels* last_labels = nullptr;
    HistogramSeries* last = nullptr;
    for_each_sample(index, name, [&](const ExpositionSample& s) {
      if (!selected(s, m)) return;
      if (!last_labels || !same_series(*last_labels, s.labels)) {
        last = &out[group_of(s, per_gpu)][series_key(s.labels)];
        last->max_bounds = max_bounds;
      }
      last_labels = &s.labels;
      fn(s, *last);
    });
  };
  each(base + "_bucket", [&](const ExpositionSample& s, HistogramSeries& h) {
    const std::string* le = label_value(s.labels, "le");
    // A count that is not a number (the format allows NaN and Inf) is no
    // count: left out, as a bad bound is (the merge sums counts in one sweep).
    if (!le || !std::isfinite(s.value)) return;
    if (const auto bound = parse_le(*le))
      h.add_bucket(std::isinf(*bound) ? *bound : m.scale.apply(*bound), s.value);
  });
  each(base + "_sum", [&](const ExpositionSample& s, HistogramSeries& h) { h.sum = m.scale.apply(s.value); });
  each(base + "_count", [](const ExpositionSample& s, HistogramSeries& h) { h.count = s.value; });
  return out;
}

// Merges label sets bucket by bucket on the union of their bounds (each
// series read as a cumulative step function) into the canonical NAME_bucket,
// NAME_sum and NAME_count. One sweep over every series' buckets in bound
// order (sorting them: N log N in the buckets read; it was bounds x series,
// 3.8 CPU s a scrape for 560 label sets of 560 bounds each). A union of more
// than max_bounds finite bounds, or a series with more, is not merged:
// returns false and emits nothing.
bool emit_merged(std::string_view name, const Group& g, const std::vector<HistogramSeries>& series,
                 std::size_t max_bounds, std::vector<Sample>& out) {
  struct Step {
    double le;
    std::size_t series;
    double cumulative;
  };
  std::vector<Step> steps;
  bool any_buckets = false;
  std::optional<double> sum;
  double count = 0.0, observations = 0.0;
  bool any_count = false;
  for (std::size_t i = 0; i < series.size(); ++i) {
    const HistogramSeries& h = series[i];
    if (h.too_many_bounds) return false;
    for (const auto& [le, n] : h.buckets)
      if (le != kInf) steps.push_back({le, i, n});
    any_buckets = any_buckets || h.has_buckets();
    if (h.sum) sum = sum.value_or(0.0) + *h.sum;
    if (h.count || h.has_buckets()) {
      count += h.observations();
      any_count = true;
    }
    // A series without a +Inf bucket has all its observations below +Inf.
    if (h.has_buckets()) observations += h.observations();
  }
  std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.le < b.le; });
  std::size_t distinct = 0;
  for (std::size_t k = 0; k < steps.size(); ++k) distinct += k == 0 || steps[k].le != steps[k - 1].le;
  if (distinct > max_bounds) return false;
  const Labels labels = group_labels(g);
  const std::string bucket_name = std::string(name) + "_bucket";
  const auto bucket = [&](double le, double total) {
    Labels l = labels;
    l.push_back({"le", format_le(le)});
    out.push_back({bucket_name, std::move(l), total});
  };
  // Each series' count at or below the bound swept to: its step function.
  std::vector<double> at(series.size(), 0.0);
  double total = 0.0;
  for (std::size_t k = 0; k < steps.size();) {
    const double le = steps[k].le;
    for (; k < steps.size() && steps[k].le == le; ++k) {
      total += steps[k].cumulative - at[steps[k].series];
      at[steps[k].series] = steps[k].cumulative;
    }
    bucket(le, total);
  }
  if (any_buckets) bucket(kInf, observations);
  if (sum) out.push_back({std::string(name) + "_sum", labels, *sum});
  if (any_count) out.push_back({std::string(name) + "_count", labels, count});
  return true;
}

void canonicalize_histogram(const CanonicalDefinition& def, const maps::EngineTable& table,
                            const FamilyIndex& index, const CanonicalLimits& limits, CanonicalDrops& drops,
                            std::vector<Sample>& out) {
  struct Chosen {
    int rank = std::numeric_limits<int>::max();
    std::vector<HistogramSeries> series;
  };
  std::map<Group, Chosen> groups;
  for (const Mapping& m : table.mappings) {
    if (m.canonical != def.name) continue;
    for (auto& [g, by_key] : collect_histogram(m, index, table.per_gpu, limits.max_bucket_bounds)) {
      Chosen& c = groups[g];
      if (m.rank > c.rank) continue;
      if (m.rank < c.rank) c = Chosen{m.rank, {}};
      if (m.aggregation == Aggregation::kMax) {
        // The label set with the most observations (the first of equals).
        HistogramSeries* busiest = nullptr;
        for (auto& [key, h] : by_key)
          if (!busiest || h.observations() > busiest->observations()) busiest = &h;
        c.series.push_back(std::move(*busiest));
      } else {
        for (auto& [key, h] : by_key) c.series.push_back(std::move(h));
      }
    }
  }
  std::size_t kept = 0;
  for (const auto& [g, c] : groups) {
    if (kept++ == limits.max_label_sets) {
      drops.label_sets += groups.size() - limits.max_label_sets;
      break;
    }
    if (!emit_merged(def.name, g, c.series, limits.max_bucket_bounds, out)) ++drops.histograms;
  }
}

}  // namespace

std::string_view engine_name(Engine e) {
  switch (e) {
    case Engine::kVllmV1:
      return "vllm-v1";
    case Engine::kVllmV0:
      return "vllm-v0";
    case Engine::kSglang:
      return "sglang";
    case Engine::kLlamaCpp:
      return "llama.cpp";
    case Engine::kTgi:
      return "tgi";
    case Engine::kTriton:
      return "triton";
    case Engine::kDcgm:
      return "dcgm";
    case Engine::kUnknown:
      break;
  }
  return "unknown";
}

Engine detect_engine(const Exposition& e) {
  // Family names suffice: a sample is filed under its own name or its stem,
  // which has the same prefix. The earliest marker present wins.
  const auto markers = maps::detection_markers();
  std::size_t best = markers.size();
  for (const auto& family : e.families) {
    for (std::size_t i = 0; i < best; ++i) {
      const maps::Marker& marker = markers[i];
      if (marker.prefix ? family.name.starts_with(marker.name) : family.name == marker.name) {
        best = i;
        break;
      }
    }
  }
  return best < markers.size() ? markers[best].engine : Engine::kUnknown;
}

std::vector<Sample> canonicalize(const Exposition& e, Engine engine) {
  CanonicalDrops drops;
  return canonicalize(e, engine, CanonicalLimits{}, drops);
}

std::vector<Sample> canonicalize(const Exposition& e, Engine engine, const CanonicalLimits& limits,
                                 CanonicalDrops& drops) {
  std::vector<Sample> out;
  const maps::EngineTable table = maps::table_for(engine);
  if (table.mappings.empty()) return out;
  const FamilyIndex index = index_families(e);
  for (const CanonicalDefinition& def : kCanonicalSeries) {
    if (def.kind == SeriesKind::kHistogram)
      canonicalize_histogram(def, table, index, limits, drops, out);
    else
      canonicalize_scalar(def, table, index, limits, drops, out);
  }
  return out;
}

CanonicalName resolve_canonical(std::string_view name) {
  for (const auto& d : kCanonicalSeries) {
    if (name == d.name) return {&d, d.name, CanonicalName::Member::kSeries};
    if (d.kind != SeriesKind::kHistogram || !name.starts_with(d.name)) continue;
    const std::string_view rest = name.substr(d.name.size());
    if (rest == "_bucket") return {&d, d.name, CanonicalName::Member::kBucket};
    if (rest == "_sum") return {&d, d.name, CanonicalName::Member::kSum};
    if (rest == "_count") return {&d, d.name, CanonicalName::Member::kCount};
  }
  return {};
}

std::optional<double> parse_le(std::string_view s) {
  if (s == "+Inf" || s == "Inf" || s == "+inf" || s == "inf") return kInf;
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double v = 0.0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace tokenscope::observe
