#include "probe/collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/strings.h"

namespace tokenscope::probe {

namespace {

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    const std::size_t b = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i > b) out.push_back(s.substr(b, i - b));
  }
  return out;
}

std::optional<double> number(std::string_view w) {
  double v = 0;
  const auto r = std::from_chars(w.data(), w.data() + w.size(), v);
  if (r.ec != std::errc() || r.ptr != w.data() + w.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

std::string normalize_collective(std::string_view name) {
  std::string s;
  for (char c : name)
    if (std::isalnum(static_cast<unsigned char>(c)))
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s.size() > 4 && s.compare(s.size() - 4, 4, "perf") == 0) s.resize(s.size() - 4);
  if (s == "allreduce") return "all_reduce";
  if (s == "allgather") return "all_gather";
  if (s == "reducescatter") return "reduce_scatter";
  if (s == "alltoall") return "alltoall";
  if (s == "broadcast") return "broadcast";
  if (s == "reduce") return "reduce";
  if (s == "sendrecv") return "sendrecv";
  if (s == "gather") return "gather";
  if (s == "scatter") return "scatter";
  if (s == "hypercube") return "hypercube";
  return "";
}

std::optional<double> busbw_factor(const std::string& collective, int ranks) {
  if (ranks < 1) return std::nullopt;
  const double n = ranks;
  const std::string c = normalize_collective(collective);
  if (c == "all_reduce") return 2.0 * (n - 1) / n;
  if (c == "all_gather" || c == "reduce_scatter" || c == "alltoall" || c == "gather" || c == "scatter" ||
      c == "hypercube")
    return (n - 1) / n;
  if (c == "broadcast" || c == "reduce" || c == "sendrecv") return 1.0;
  return std::nullopt;
}

NcclTestsOutput parse_nccl_tests(std::string_view text, const std::string& source,
                                 const std::string& collective_hint) {
  NcclTestsOutput out;
  std::vector<std::string> header;  // column names of the table, '#' removed
  std::size_t line_no = 0;
  int n_gpus = 0, n_threads = 1;
  bool saw_table_header = false;
  std::size_t data_rows = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    if (line.empty()) continue;
    if (line.front() == '#') {
      const std::string_view body = trim(line.substr(1));
      if (const auto p = body.find("Collective test starting:"); p != std::string_view::npos)
        out.collective = normalize_collective(trim(body.substr(p + 25)));
      const auto w = words(body);
      for (std::size_t i = 0; i + 1 < w.size(); ++i) {
        if (w[i] == "nGpus")
          if (auto v = number(w[i + 1])) n_gpus = static_cast<int>(*v);
        if (w[i] == "nThread")
          if (auto v = number(w[i + 1])) n_threads = static_cast<int>(*v);
      }
      if (!w.empty() && w[0] == "Rank") {
        ++out.ranks;
        if (const auto d = body.find("device"); d != std::string_view::npos)
          out.devices.emplace_back(trim(body.substr(d)));
      }
      if (w.size() >= 6 && w[0] == "size" && w[1] == "count") {
        header.clear();
        for (auto x : w) header.emplace_back(x);
        saw_table_header = true;
      }
      if (body.rfind("Avg bus bandwidth", 0) == 0) {
        const auto colon = body.find(':');
        if (colon != std::string_view::npos) out.avg_busbw_gbps = number(trim(body.substr(colon + 1)));
      }
      if (body.rfind("Out of bounds values", 0) == 0 && body.find("OK") == std::string_view::npos)
        out.out_of_bounds_ok = false;
      continue;
    }
    const auto w = words(line);
    if (w.empty() || !number(w[0])) continue;  // other output (NCCL INFO lines, warnings)
    if (!saw_table_header)
      throw InputError(source, line_no, "table", "the '# size count type ...' header before the first row");
    if (w.size() != header.size())
      throw InputError(source, line_no, "row",
                       fmt::format("{} columns as the header has, got {}", header.size(), w.size()));
    CollectiveRow r;
    int time_seen = 0;
    for (std::size_t i = 0; i < header.size(); ++i) {
      const std::string& h = header[i];
      const auto v = number(w[i]);
      auto need = [&](const char* what) {
        if (!v)
          throw InputError(source, line_no, h, fmt::format("a number ({}), got {}", what, quote_input(w[i])));
        return *v;
      };
      if (h == "size") {
        r.bytes = need("bytes");
        if (r.bytes < 0) throw InputError(source, line_no, "size", "a size >= 0");
      } else if (h == "count") {
        r.count = need("elements");
      } else if (h == "type") {
        r.type = std::string(w[i]);
      } else if (h == "redop") {
        r.redop = std::string(w[i]);
      } else if (h == "time") {
        ++time_seen;
        if (time_seen == 1) {
          r.time_us = need("microseconds");
          if (r.time_us <= 0) throw InputError(source, line_no, "time", "a time > 0 us");
        } else {
          r.inplace_time_us = v;
        }
      } else if (h == "algbw") {
        if (time_seen <= 1)
          r.algbw_gbps = need("GB/s");
        else
          r.inplace_algbw_gbps = v;
      } else if (h == "busbw") {
        if (time_seen <= 1)
          r.busbw_gbps = need("GB/s");
        else
          r.inplace_busbw_gbps = v;
      } else if (h == "#wrong" || h == "error" || h == "wrong") {
        if (time_seen <= 1) r.wrong = v;
      }
    }
    if (time_seen == 0) throw InputError(source, line_no, "header", "a 'time' column");
    out.rows.push_back(std::move(r));
    if (++data_rows > 100000) throw InputError(source, line_no, "rows", "at most 100000 rows");
  }
  if (out.ranks == 0) out.ranks = n_gpus * n_threads;
  if (out.collective.empty()) out.collective = normalize_collective(collective_hint);
  if (out.collective.empty()) {
    // The file name may hold it: ".../alltoall_perf.txt".
    for (const std::string& where : {collective_hint, source}) {
      for (const char* name : {"all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter",
                               "reducescatter", "alltoall", "broadcast", "sendrecv", "reduce"})
        if (where.find(name) != std::string::npos) {
          out.collective = normalize_collective(name);
          break;
        }
      if (!out.collective.empty()) break;
    }
  }
  if (out.rows.empty()) throw InputError(source, 0, "rows", "at least one result row of nccl-tests output");
  return out;
}

AlphaBetaFit fit_alpha_beta(const std::vector<double>& x, const std::vector<double>& y) {
  AlphaBetaFit f;
  const std::size_t n = std::min(x.size(), y.size());
  if (n < 2) return f;
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < n; ++i) mx += x[i], my += y[i];
  mx /= n;
  my /= n;
  double sxx = 0, sxy = 0, syy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx <= 0) return f;
  f.points = n;
  f.beta_us_per_byte = sxy / sxx;
  f.alpha_us = my - f.beta_us_per_byte * mx;
  double sse = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double e = y[i] - (f.alpha_us + f.beta_us_per_byte * x[i]);
    sse += e * e;
  }
  f.r_squared = syy > 0 ? 1.0 - sse / syy : 1.0;
  if (n > 2) {
    const double s2 = sse / static_cast<double>(n - 2);
    double sum_x2 = 0;
    for (std::size_t i = 0; i < n; ++i) sum_x2 += x[i] * x[i];
    f.beta_ci95 = 1.96 * std::sqrt(s2 / sxx);
    f.alpha_ci95 = 1.96 * std::sqrt(s2 * sum_x2 / (static_cast<double>(n) * sxx));
  }
  return f;
}

CollectiveAnalysis analyze_collective(const std::string& collective, int ranks,
                                      const std::vector<CollectiveRow>& rows) {
  CollectiveAnalysis a;
  a.collective = normalize_collective(collective);
  if (a.collective.empty()) a.collective = collective;
  a.ranks = ranks;
  a.factor = busbw_factor(a.collective, ranks);
  std::vector<double> x, y;
  for (const auto& r : rows) {
    if (r.bytes <= 0 || r.time_us <= 0) continue;
    x.push_back(r.bytes);
    y.push_back(r.time_us);
    const double algbw = r.bytes / (r.time_us * 1e3);  // bytes/us -> GB/s: bytes / (us * 1e3)
    a.peak_algbw_gbps = std::max(a.peak_algbw_gbps, algbw);
    if (a.factor) {
      const double busbw = algbw * *a.factor;
      a.peak_busbw_gbps = std::max(a.peak_busbw_gbps, busbw);
      // nccl-tests prints two decimals: compare only where the value is visible.
      if (busbw >= 0.05 && r.busbw_gbps > 0)
        a.max_busbw_mismatch = std::max(a.max_busbw_mismatch, std::abs(r.busbw_gbps - busbw) / busbw);
    }
  }
  a.fit = fit_alpha_beta(x, y);
  if (ranks <= 1)
    a.note = "one rank: nothing crosses a link (busbw factor " +
             fmt::format("{:.2f}", a.factor.value_or(0.0)) +
             "), so the bandwidth is a local copy and the numbers say nothing about the interconnect";
  else if (!a.factor)
    a.note = "unknown collective '" + collective + "': busbw not computed (give --collective)";
  return a;
}

std::vector<PairDeviation> slow_pairs(const std::vector<std::vector<double>>& m, double slow_fraction) {
  std::vector<double> all;
  for (std::size_t i = 0; i < m.size(); ++i)
    for (std::size_t j = 0; j < m[i].size(); ++j)
      if (i != j && m[i][j] > 0) all.push_back(m[i][j]);
  std::vector<PairDeviation> out;
  if (all.empty()) return out;
  std::sort(all.begin(), all.end());
  const double median = all[(all.size() - 1) / 2];
  for (std::size_t i = 0; i < m.size(); ++i)
    for (std::size_t j = 0; j < m[i].size(); ++j)
      if (i != j && m[i][j] > 0 && m[i][j] < slow_fraction * median)
        out.push_back({static_cast<int>(i), static_cast<int>(j), m[i][j], m[i][j] / median});
  return out;
}

nlohmann::json to_json(const NcclTestsOutput& o) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : o.rows) {
    nlohmann::json j{{"bytes", r.bytes},          {"count", r.count},     {"type", r.type},
                     {"redop", r.redop},          {"time_us", r.time_us}, {"algbw_gbps", r.algbw_gbps},
                     {"busbw_gbps", r.busbw_gbps}};
    if (r.inplace_time_us) j["inplace_time_us"] = *r.inplace_time_us;
    if (r.inplace_busbw_gbps) j["inplace_busbw_gbps"] = *r.inplace_busbw_gbps;
    if (r.wrong) j["wrong"] = *r.wrong;
    rows.push_back(j);
  }
  nlohmann::json j{{"collective", o.collective},
                   {"ranks", o.ranks},
                   {"devices", o.devices},
                   {"rows", rows},
                   {"out_of_bounds_ok", o.out_of_bounds_ok}};
  if (o.avg_busbw_gbps) j["avg_busbw_gbps"] = *o.avg_busbw_gbps;
  return j;
}

nlohmann::json to_json(const CollectiveAnalysis& a) {
  return {{"collective", a.collective},
          {"ranks", a.ranks},
          {"busbw_factor", a.factor ? nlohmann::json(*a.factor) : nlohmann::json(nullptr)},
          {"peak_algbw_gbps", a.peak_algbw_gbps},
          {"peak_busbw_gbps", a.peak_busbw_gbps},
          {"max_busbw_mismatch", a.max_busbw_mismatch},
          {"alpha_beta",
           {{"points", a.fit.points},
            {"alpha_us", a.fit.alpha_us},
            {"alpha_ci95_half_width", a.fit.alpha_ci95},
            {"beta_us_per_byte", a.fit.beta_us_per_byte},
            {"beta_ci95_half_width", a.fit.beta_ci95},
            {"asymptotic_gbps", a.fit.asymptotic_gbps()},
            {"r_squared", a.fit.r_squared}}},
          {"note", a.note}};
}

std::string format_table(const CollectiveAnalysis& a, const std::vector<CollectiveRow>& rows) {
  std::string out = fmt::format(
      "{} over {} rank{} (busbw factor {})\n", a.collective.empty() ? "collective" : a.collective, a.ranks,
      a.ranks == 1 ? "" : "s", a.factor ? fmt::format("{:.3f}", *a.factor) : std::string("unknown"));
  if (!a.note.empty()) out += "NOTE: " + a.note + "\n";
  out += fmt::format("  {:>14} {:>12} {:>12} {:>12}\n", "bytes", "time us", "algbw GB/s", "busbw GB/s");
  for (const auto& r : rows) {
    const double algbw = r.time_us > 0 ? r.bytes / (r.time_us * 1e3) : 0.0;
    out += fmt::format("  {:>14.0f} {:>12.2f} {:>12.2f} {:>12.2f}\n", r.bytes, r.time_us, algbw,
                       algbw * a.factor.value_or(0.0));
  }
  out += fmt::format(
      "  alpha-beta fit ({} points, R^2 {:.4f}): alpha {:.2f} +/- {:.2f} us, "
      "asymptotic bandwidth {:.2f} GB/s\n",
      a.fit.points, a.fit.r_squared, a.fit.alpha_us, a.fit.alpha_ci95, a.fit.asymptotic_gbps());
  out +=
      fmt::format("  peak algbw {:.2f} GB/s, peak busbw {:.2f} GB/s\n", a.peak_algbw_gbps, a.peak_busbw_gbps);
  return out;
}

}  // namespace tokenscope::probe
