#include "session/sim_grid.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "core/yaml_fields.h"
#include "rundir/run_set.h"

namespace tokenscope::session {

namespace {

// The grid's own options (it writes the files and chooses the seeds) and
// those that would make a point more than one run.
const std::set<std::string>& grid_owned() {
  static const std::set<std::string> owned = {
      "out",  "overwrite", "seed",   "grid",    "mpi",        "plan", "plan-max-replicas", "repeat",
      "json", "quiet",     "report", "history", "no-history", "tag",  "coupling",          "help"};
  return owned;
}

bool option_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || !(name[0] >= 'a' && name[0] <= 'z')) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

// One key: value of base or of an axis's map value, into options.
void add_option(const yaml::Fields& f, const std::string& name, const YAML::Node& value,
                const std::string& field, std::vector<GridOption>& out, bool lists) {
  if (!option_name(name))
    f.fail(
        value, field,
        fmt::format("{}: expected a sim option's long name (router, num-requests, ...)", quote_input(name)));
  if (grid_owned().count(name))
    f.fail(value, field,
           fmt::format("--{} is the grid's own (it writes the files, chooses the seeds and runs each point "
                       "once): not a point's option",
                       name));
  if (value.IsSequence()) {
    if (!lists) f.fail(value, field, "expected a value (a list here would be a list of lists)");
    if (value.size() == 0) f.fail(value, field, "expected at least one value");
    for (std::size_t k = 0; k < value.size(); ++k)
      add_option(f, name, value[k], fmt::format("{}[{}]", field, k), out, false);
    return;
  }
  if (!value.IsScalar()) f.fail(value, field, "expected a value (a number, a word or true)");
  GridOption o{
      .name = name, .value = value.Scalar(), .flag = false, .line = yaml::line_of(value), .field = field};
  // A plain true or false is a flag given or left out; quoted, a value.
  if (value.Tag() == "?" && (o.value == "true" || o.value == "false")) {
    if (o.value == "false") return;
    o.flag = true;
    o.value.clear();
  }
  if (o.value.size() > 4096) f.fail(value, field, "expected a value of at most 4096 bytes");
  if (!o.flag && o.value.empty()) f.fail(value, field, "expected a value (this one is empty)");
  out.push_back(std::move(o));
}

std::string label_of(const YAML::Node& v) {
  if (v.IsScalar()) return v.Scalar();
  std::string s;
  for (const auto& kv : v) {
    if (!s.empty()) s += " ";
    s += kv.first.Scalar() + "=" + (kv.second.IsScalar() ? kv.second.Scalar() : "...");
  }
  return s;
}

double mean_of(const std::vector<double>& v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  double s = 0;
  for (const double x : v) s += x;
  return s / static_cast<double>(v.size());
}

}  // namespace

std::vector<std::string> GridPoint::args() const {
  std::vector<std::string> out;
  for (const auto& o : options) {
    out.push_back("--" + o.name);
    if (!o.flag) out.push_back(o.value);
  }
  return out;
}

namespace {

Grid parse_grid_checked(const std::string& text, const std::string& file) {
  const YAML::Node root = yaml::load(text, file);
  const yaml::Fields f(file);
  if (!root.IsMap()) f.fail(root, "", "expected a mapping with base, seeds and axes");
  f.only_keys(root, "", {"base", "seeds", "axes"});
  Grid g;
  g.file = file;
  std::vector<GridOption> base;
  if (const YAML::Node b = root["base"]; b) {
    if (!b.IsMap()) f.fail(b, "base", "expected a mapping of sim options to values");
    for (const auto& kv : b) {
      const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
      add_option(f, name, kv.second, "base." + name, base, true);
    }
  }
  if (const YAML::Node s = root["seeds"]; s) {
    if (s.IsScalar()) {
      const auto n = f.whole(s, "seeds", 1, 10'000);
      for (std::uint64_t k = 1; k <= n; ++k) g.seeds.push_back(k);
    } else if (s.IsSequence() && s.size() > 0) {
      std::set<std::uint64_t> seen;
      for (std::size_t k = 0; k < s.size(); ++k) {
        const auto seed = f.whole(s[k], fmt::format("seeds[{}]", k), 0, 9.0e15);
        if (!seen.insert(seed).second) f.fail(s[k], fmt::format("seeds[{}]", k), "a seed given twice");
        g.seeds.push_back(seed);
      }
    } else {
      f.fail(s, "seeds", "expected a count of seeds (1, 2, ...) or a list of seeds");
    }
  } else {
    g.seeds.push_back(0);
  }
  // Each axis: its values, each a list of options.
  std::vector<std::vector<std::vector<GridOption>>> axis_values;
  std::vector<std::vector<std::string>> axis_labels;
  if (const YAML::Node a = root["axes"]; a) {
    if (!a.IsMap()) f.fail(a, "axes", "expected a mapping of axes to their lists of values");
    for (const auto& kv : a) {
      const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
      const std::string field = "axes." + name;
      if (name.empty() || name.size() > 64) f.fail(kv.first, "axes", "expected an axis name");
      if (!kv.second.IsSequence() || kv.second.size() == 0)
        f.fail(kv.second, field, "expected a list of at least one value");
      g.axes.push_back(name);
      axis_values.emplace_back();
      axis_labels.emplace_back();
      for (std::size_t k = 0; k < kv.second.size(); ++k) {
        const YAML::Node v = kv.second[k];
        const std::string vf = fmt::format("{}[{}]", field, k);
        std::vector<GridOption> opts;
        if (v.IsMap()) {
          if (v.size() == 0) f.fail(v, vf, "expected at least one option");
          for (const auto& o : v) {
            const std::string oname = o.first.IsScalar() ? o.first.Scalar() : "";
            add_option(f, oname, o.second, vf + "." + oname, opts, false);
          }
        } else {
          add_option(f, name, v, vf, opts, false);
        }
        axis_values.back().push_back(std::move(opts));
        axis_labels.back().push_back(label_of(v));
      }
    }
  }
  // The product, the first axis varying slowest; its size checked first.
  std::size_t points = 1;
  for (const auto& values : axis_values) {
    if (points > kMaxGridRuns / values.size())
      f.fail(root["axes"], "axes", fmt::format("more than {} points", kMaxGridRuns));
    points *= values.size();
  }
  if (points > kMaxGridRuns / g.seeds.size())
    f.fail(root, "seeds",
           fmt::format("{} points x {} seeds: more than {} runs", points, g.seeds.size(), kMaxGridRuns));
  // Each point holds its options: their count over all points is bounded
  // too (a base of a thousand options times a large product).
  std::size_t per_point = base.size();
  for (const auto& values : axis_values) {
    std::size_t most = 0;
    for (const auto& v : values) most = std::max(most, v.size());
    per_point += most;
  }
  if (per_point > kMaxGridPointOptions)
    f.fail(root, "base", fmt::format("{} options in a point: at most {}", per_point, kMaxGridPointOptions));
  if (points * per_point > kMaxGridOptions)
    f.fail(root, "axes",
           fmt::format("{} points of up to {} options each: more than {} options in all", points, per_point,
                       kMaxGridOptions));
  std::vector<std::size_t> at(axis_values.size(), 0);
  for (std::size_t p = 0; p < points; ++p) {
    GridPoint point;
    point.options = base;
    for (std::size_t a = 0; a < axis_values.size(); ++a) {
      const auto& opts = axis_values[a][at[a]];
      point.options.insert(point.options.end(), opts.begin(), opts.end());
      point.labels.push_back(axis_labels[a][at[a]]);
    }
    g.points.push_back(std::move(point));
    for (std::size_t a = axis_values.size(); a-- > 0;) {
      if (++at[a] < axis_values[a].size()) break;
      at[a] = 0;
    }
  }
  return g;
}

}  // namespace

// A YAML exception (a key that is not a scalar, a bad conversion) is an
// InputError at the line yaml-cpp names, as every YAML reader's.
Grid parse_grid(const std::string& text, const std::string& file) {
  try {
    return parse_grid_checked(text, file);
  } catch (const YAML::Exception& e) {
    throw yaml::load_error(e, file);
  }
}

Grid load_grid(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("--grid {}: cannot read the file", path));
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (text.size() > (std::size_t{16} << 20)) throw InputError(path, 0, "", "a grid file of over 16 MiB");
  return parse_grid(text, path);
}

nlohmann::json grid_figures(const nlohmann::json& summary, std::uint32_t gpus) {
  const auto value = [&](const char* key) {
    const auto v = rundir::summary_value(summary, key);
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  nlohmann::json slo_met = nullptr;
  if (const auto it = summary.find("slo_attainment");
      it != summary.end() && it->is_object() && !it->empty()) {
    bool met = true;
    for (const auto& [cls, a] : it->items()) met = met && a.is_object() && a.value("pass", false);
    slo_met = met;
  }
  return {{"gpus", gpus},
          {"goodput_rps", value("goodput_rps")},
          {"throughput_rps", value("request_throughput_rps")},
          {"ttft_p99_ms", value("ttft_ms.p99")},
          {"tpot_p99_ms", value("tpot_ms.p99")},
          {"e2e_p99_ms", value("e2e_ms.p99")},
          {"requests_failed", value("requests_failed")},
          {"slo_met", slo_met}};
}

nlohmann::json grid_table(const Grid& grid, const std::vector<nlohmann::json>& figures) {
  static const char* const kMeans[] = {"goodput_rps", "throughput_rps", "ttft_p99_ms",
                                       "tpot_p99_ms", "e2e_p99_ms",     "requests_failed"};
  const std::size_t n_seeds = grid.seeds.size();
  nlohmann::json points = nlohmann::json::array();
  bool any_slo = false;
  for (std::size_t p = 0; p < grid.points.size(); ++p) {
    nlohmann::json row = {{"labels", grid.points[p].labels}, {"args", grid.points[p].args()}};
    std::size_t ran = 0, failed = 0;
    std::optional<std::uint32_t> gpus;
    nlohmann::json slo_met = nullptr;
    std::map<std::string, std::vector<double>> values;
    nlohmann::json errors = nlohmann::json::array();
    for (std::size_t s = 0; s < n_seeds; ++s) {
      const std::size_t j = p * n_seeds + s;
      if (j >= figures.size() || figures[j].is_null()) continue;
      const auto& fig = figures[j];
      if (fig.contains("error")) {
        ++failed;
        errors.push_back({{"seed", grid.seeds[s]}, {"error", fig["error"]}});
        continue;
      }
      ++ran;
      if (fig.contains("gpus") && fig["gpus"].is_number_unsigned()) gpus = fig["gpus"].get<std::uint32_t>();
      for (const char* k : kMeans)
        if (fig.contains(k) && fig[k].is_number()) values[k].push_back(fig[k].get<double>());
      if (fig.contains("slo_met") && fig["slo_met"].is_boolean()) {
        any_slo = true;
        slo_met = (slo_met.is_null() || slo_met.get<bool>()) && fig["slo_met"].get<bool>();
      }
    }
    row["runs"] = ran;
    row["failed"] = failed;
    if (!errors.empty()) row["errors"] = errors;
    row["gpus"] = gpus ? nlohmann::json(*gpus) : nlohmann::json(nullptr);
    for (const char* k : kMeans)
      row[k] = values.count(k) && values[k].size() == ran && ran > 0 ? nlohmann::json(mean_of(values[k]))
                                                                     : nlohmann::json(nullptr);
    // A point meets the SLOs when every seed's run did, and every seed ran.
    row["slo_met"] = slo_met.is_null() ? slo_met : nlohmann::json(slo_met.get<bool>() && ran == n_seeds);
    row["frontier"] = false;
    points.push_back(std::move(row));
  }
  const std::string metric = any_slo ? "goodput_rps" : "throughput_rps";
  std::vector<std::size_t> frontier;
  for (std::size_t p = 0; p < points.size(); ++p) {
    const auto& a = points[p];
    if (a["gpus"].is_null() || !a[metric].is_number() || a["runs"] != n_seeds) continue;
    bool beaten = false;
    for (std::size_t q = 0; q < points.size() && !beaten; ++q) {
      const auto& b = points[q];
      if (q == p || b["gpus"].is_null() || !b[metric].is_number() || b["runs"] != n_seeds) continue;
      const auto ga = a["gpus"].get<std::uint32_t>(), gb = b["gpus"].get<std::uint32_t>();
      const double ma = a[metric].get<double>(), mb = b[metric].get<double>();
      beaten = gb <= ga && mb >= ma && (gb < ga || mb > ma);
    }
    if (!beaten) frontier.push_back(p);
  }
  std::stable_sort(frontier.begin(), frontier.end(), [&](std::size_t x, std::size_t y) {
    return points[x]["gpus"].get<std::uint32_t>() < points[y]["gpus"].get<std::uint32_t>();
  });
  for (const auto p : frontier) points[p]["frontier"] = true;
  return {{"file", grid.file}, {"axes", grid.axes},    {"seeds", grid.seeds},
          {"points", points},  {"frontier", frontier}, {"frontier_metric", metric}};
}

}  // namespace tokenscope::session
