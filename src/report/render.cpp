#include "report/render.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "report/assets.h"
#include "report/report_data.h"

namespace tokenscope::report {

namespace {

// Text of the run directories in the Markdown: names, warnings and notes
// (which quote servers) shown as text (core/error.h markdown_text).
std::string md_cell(std::string_view s) {
  return markdown_text(s);
}

std::string fixed(const nlohmann::json& v, int decimals) {
  if (!v.is_number()) return "-";
  return fmt::format("{:.{}f}", v.get<double>(), decimals);
}

}  // namespace

std::string script_safe_json(const nlohmann::json& data) {
  // Names from the file system need not be UTF-8: replaced, never a throw.
  const std::string text = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + 64);
  for (const char c : text) {
    if (c == '<')
      out += "\\u003c";
    else
      out += c;
  }
  return out;
}

std::string render_html(const nlohmann::json& data) {
  std::string title = "tokenscope report";
  if (const auto& runs = data["runs"]; runs.is_array() && !runs.empty()) {
    std::string names;
    for (const auto& r : runs) names += (names.empty() ? "" : ", ") + r.value("name", std::string());
    title += ": " + names;
  }
  std::string out;
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<meta name=\"generator\" content=\"tokenscope report; uPlot ";
  out += assets::uplot_version();
  out += "\">\n<title>" + html_escape(title) + "</title>\n<style>\n";
  out += assets::uplot_css();
  out += "\n";
  out += assets::report_css();
  out +=
      "\n</style>\n</head>\n<body>\n<div id=\"report\"><noscript>This report draws its charts with "
      "JavaScript; enable it to see them.</noscript></div>\n";
  out += "<script type=\"application/json\" id=\"report-data\">";
  out += script_safe_json(data);
  out += "</script>\n<script>\n";
  out += assets::uplot_js();
  out += "\n</script>\n<script>\n";
  out += assets::report_js();
  out += "\n</script>\n</body>\n</html>\n";
  return out;
}

std::string render_markdown(const nlohmann::json& data) {
  std::string out = "### tokenscope report\n\n";
  const auto& runs = data["runs"];
  out += "| run | requests | failed | req/s | output tok/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | ";
  out += "ITL p99 | E2E p99 |\n";
  out += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& r : runs) {
    const auto& s = r["summary"];
    std::string name = md_cell(r.value("name", std::string()));
    if (r.value("partial", false)) name += " (partial)";
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", name,
                       fixed(json_at(s, {"requests_total"}), 0), fixed(json_at(s, {"requests_failed"}), 0),
                       fixed(json_at(s, {"request_throughput_rps"}), 2),
                       fixed(json_at(s, {"output_token_throughput_tps"}), 1),
                       fixed(json_at(s, {"ttft_ms", "p50"}), 1), fixed(json_at(s, {"ttft_ms", "p99"}), 1),
                       fixed(json_at(s, {"tpot_ms", "p50"}), 2), fixed(json_at(s, {"tpot_ms", "p99"}), 2),
                       fixed(json_at(s, {"itl_ms", "p99"}), 2), fixed(json_at(s, {"e2e_ms", "p99"}), 1));
  }
  out += "\nLatencies in ms.\n";
  // Agentic tasks (report_data's runs[].tasks), for the runs that have them.
  std::string tasks;
  for (const auto& r : runs) {
    const auto& t = json_at(r, {"tasks"});
    if (!t.is_object()) continue;
    const auto& s = t["summary"];
    const auto& counts = s.is_object() ? s : t["records"];
    std::string failures;
    if (const auto& f = json_at(s, {"failures_by_class"}); f.is_object())
      for (const auto& [k, n] : f.items())
        failures += fmt::format("{}{} {}", failures.empty() ? "" : ", ", md_cell(k), fixed(n, 0));
    tasks += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", md_cell(r.value("name", std::string())),
        fixed(json_at(counts, {"tasks"}), 0), fixed(json_at(counts, {"ok"}), 0),
        fixed(json_at(counts, {"failed"}), 0), fixed(json_at(counts, {"cancelled"}), 0),
        json_at(s, {"pass_rate"}).is_number() ? fmt::format("{:.1f}%", 100 * s["pass_rate"].get<double>())
                                              : "-",
        fixed(json_at(s, {"completion_ms", "p50", "value"}), 0),
        fixed(json_at(s, {"completion_ms", "p99", "value"}), 0), fixed(json_at(s, {"goodput", "per_s"}), 2),
        failures.empty() ? "-" : failures);
  }
  if (!tasks.empty()) {
    out += "\n#### Agentic tasks\n\n";
    out +=
        "| run | tasks | ok | failed | cancelled | pass rate | completion p50 (ms) | completion p99 (ms) | ";
    out += "goodput (tasks/s) | failed steps by class |\n";
    out += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n" + tasks;
  }
  for (const auto& sw : data["sweeps"]) {
    if (json_at(sw, {"kind"}) == "repeats") {
      out += fmt::format("\n#### repeats {}\n\n| metric | mean | 95% interval |\n|---|---:|---|\n",
                         md_cell(sw.value("name", std::string())));
      if (const auto& st = json_at(sw, {"statistics"}); st.is_object())
        for (const auto& [key, v] : st.items())
          out += fmt::format("| {} | {} | {} |\n", md_cell(key), fixed(json_at(v, {"mean"}), 4),
                             json_at(v, {"ci"}).is_array() && v["ci"].size() == 2
                                 ? fmt::format("[{}, {}]", fixed(v["ci"][0], 4), fixed(v["ci"][1], 4))
                                 : std::string("-"));
      continue;
    }
    if (json_at(sw, {"kind"}) == "server") {
      out += fmt::format("\n#### server sweep {}\n\n", md_cell(sw.value("name", std::string())));
      out +=
          "| server setting | req/s | output tok/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | failed |\n";
      out += "|---|---:|---:|---:|---:|---:|---:|---:|\n";
      if (sw["curve"].is_array())
        for (const auto& c : sw["curve"]) {
          std::string setting;
          if (const auto& st = json_at(c, {"settings"}); st.is_object())
            for (const auto& [k, v] : st.items())
              setting +=
                  (setting.empty() ? "" : " ") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
          out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", md_cell(setting),
                             fixed(json_at(c, {"achieved_rps"}), 3), fixed(json_at(c, {"output_tps"}), 1),
                             fixed(json_at(c, {"ttft_p50_ms"}), 1), fixed(json_at(c, {"ttft_p99_ms"}), 1),
                             fixed(json_at(c, {"tpot_p50_ms"}), 2), fixed(json_at(c, {"tpot_p99_ms"}), 2),
                             fixed(json_at(c, {"failed"}), 0));
        }
      continue;
    }
    out += fmt::format("\n#### sweep {}\n\n", md_cell(sw.value("name", std::string())));
    out += "| rate (req/s) | achieved | goodput | TTFT p99 | TPOT p99 | failed | SLO |\n";
    out += "|---:|---:|---:|---:|---:|---:|---|\n";
    if (sw["curve"].is_array())
      for (const auto& c : sw["curve"])
        out += fmt::format(
            "| {} | {} | {} | {} | {} | {} | {} |\n", fixed(json_at(c, {"rate_rps"}), 2),
            fixed(json_at(c, {"achieved_rps"}), 2), fixed(json_at(c, {"goodput_rps"}), 2),
            fixed(json_at(c, {"ttft_p99_ms"}), 1), fixed(json_at(c, {"tpot_p99_ms"}), 2),
            fixed(json_at(c, {"failed"}), 0),
            json_at(c, {"slo_pass"}).is_boolean() ? (c["slo_pass"].get<bool>() ? "pass" : "**FAIL**") : "-");
    if (const auto& best = sw["max_rate_meeting_slo"]; best.is_number())
      out += fmt::format("\nHighest rate meeting every SLO: {:.3g} req/s.\n", best.get<double>());
  }
  std::string warnings;
  for (const auto& r : runs) {
    for (const auto& w : r["warnings"])
      warnings += fmt::format("- **{}**: {}\n", md_cell(r.value("name", std::string())),
                              md_cell(w.get<std::string>()));
    for (const auto& n : r["notes"])
      warnings +=
          fmt::format("- {}: {}\n", md_cell(r.value("name", std::string())), md_cell(n.get<std::string>()));
  }
  for (const auto& n : data["notes"]) warnings += fmt::format("- {}\n", md_cell(n.get<std::string>()));
  if (!warnings.empty()) out += "\n#### Warnings and notes\n\n" + warnings;
  return out;
}

}  // namespace tokenscope::report
