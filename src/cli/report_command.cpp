#include "cli/report_command.h"

#include <fmt/format.h>

#include <iostream>
#include <sstream>

#include "cli/summary_table.h"
#include "core/error.h"
#include "core/run_dir.h"
#include "report/render.h"
#include "report/report_data.h"
#include "report/run_data.h"

namespace tokenscope::cli {

namespace {

struct ReportCommandOptions {
  std::vector<std::string> runs;
  std::string out;
  std::string format;
};
ReportCommandOptions g_report;

// o[key], or null when o has no such key.
const nlohmann::json& field(const nlohmann::json& o, const char* key) {
  static const nlohmann::json kNull;
  if (!o.is_object()) return kNull;
  const auto it = o.find(key);
  return it == o.end() ? kNull : *it;
}

std::string value_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{:g}", v.get<double>());
  return v.dump();
}

// The format named by --format, else by --out's extension, else html.
std::string format_of(const ReportCommandOptions& o) {
  if (!o.format.empty()) return o.format;
  const std::string ext = std::filesystem::path(o.out).extension().string();
  if (ext == ".json") return "json";
  if (ext == ".md") return "md";
  if (ext == ".txt") return "text";
  return "html";
}

}  // namespace

void print_report_text(std::ostream& os, const nlohmann::json& data) {
  for (const auto& n : data["notes"]) os << "note: " << n.get<std::string>() << "\n";
  for (const auto& r : data["runs"]) {
    SummaryHeader h;
    const std::string command = r.value("command", std::string());
    h.client_rows = command == "bench";
    h.title = fmt::format("tokenscope report: {}{}{}", r["name"].get<std::string>(),
                          command.empty() ? "" : " (" + command + ")",
                          r.value("partial", false) ? ", partial" : "");
    for (const auto& [k, v] : r["settings"].items())
      if (k != "command") h.lines.push_back(fmt::format("{}: {}", k, value_text(v)));
    const auto& s = r["summary"];
    if (s.is_object()) {
      try {
        print_summary_table(os, h, s);
      } catch (const nlohmann::json::exception& e) {
        os << "  the summary in run.json is not in the form this version reads (" << e.what() << ")\n";
      }
    } else {
      os << h.title << "\n  no summary\n";
    }
    if (const auto& server = r["server"]; server.is_object()) {
      std::string line;
      for (const auto& [k, v] : server.items()) {
        if (v.is_object() || v.is_array() || v.is_null()) continue;
        line += fmt::format("{}{} {}", line.empty() ? "" : ", ", k, value_text(v));
      }
      if (!line.empty()) os << fmt::format("{:<18}{}\n", "server", line);
      for (const auto& [k, v] : server.items()) {
        if (!v.is_object() || !v.contains("p50")) continue;
        os << fmt::format("{:<18}{}: mean {}, p50 {}, p99 {} ({} observations)\n", "", k,
                          value_text(v["mean"]), value_text(v["p50"]), value_text(v["p99"]),
                          value_text(v["count"]));
      }
    }
    for (const auto& w : r["warnings"]) os << "WARNING: " << w.get<std::string>() << "\n";
    for (const auto& n : r["notes"]) os << "note: " << n.get<std::string>() << "\n";
    os << "\n";
  }
  for (const auto& sw : data["sweeps"]) {
    os << "sweep " << sw["name"].get<std::string>() << "\n";
    os << fmt::format("{:>10}{:>12}{:>12}{:>12}{:>12}{:>12}  {}\n", "rate", "achieved", "goodput", "TTFT p99",
                      "TPOT p99", "failed", "SLO");
    auto cell = [](const nlohmann::json& v) {
      return v.is_number() ? format_ms_cell(v.get<double>(), 12) : std::string("-");
    };
    auto rate = [](const nlohmann::json& v) {
      return v.is_number() ? fmt::format("{:.2f}", v.get<double>()) : std::string("-");
    };
    if (sw["curve"].is_array())
      for (const auto& c : sw["curve"])
        os << fmt::format(
            "{:>10}{:>12}{:>12}{:>12}{:>12}{:>12}  {}\n", rate(field(c, "rate_rps")),
            rate(field(c, "achieved_rps")), rate(field(c, "goodput_rps")), cell(field(c, "ttft_p99_ms")),
            cell(field(c, "tpot_p99_ms")), value_text(field(c, "failed")),
            field(c, "slo_pass").is_boolean() ? (c["slo_pass"].get<bool>() ? "pass" : "FAIL") : "-");
    if (sw["max_rate_meeting_slo"].is_number())
      os << fmt::format("highest rate meeting every SLO: {:.3g} req/s\n",
                        sw["max_rate_meeting_slo"].get<double>());
    os << "\n";
  }
}

CLI::App* add_report_command(CLI::App& app) {
  auto& o = g_report;
  CLI::App* report = app.add_subcommand(
      "report",
      "Report on one or more run directories (bench, sim; a sweep directory adds its rate-* runs): one\n"
      "self-contained HTML page that opens offline (summary, SLOs, warnings, latency CDFs of every run\n"
      "overlaid, and every layer over time on one zoom-linked axis), or the same summary as text, JSON\n"
      "(the data behind the page) or Markdown (for a pull-request comment).");
  report->add_option("RUN", o.runs, "Run directories (bench --out, sim --out) or sweep directories")
      ->required()
      ->check(CLI::ExistingDirectory);
  report->add_option("--out", o.out,
                     "Write here [default: html: RUN/report.html of the first run; other formats: standard "
                     "output]");
  report->add_option("--format", o.format, "html|text|json|md [default: from --out's extension, else html]")
      ->check(CLI::IsMember({"html", "text", "json", "md"}));
  return report;
}

bool write_run_report(const std::string& dir, std::ostream& log) {
  const auto path = std::filesystem::path(dir) / "report.html";
  try {
    const auto input = report::load_report_input({std::filesystem::path(dir)});
    write_file_atomic(path, report::render_html(report::report_data(input)));
    return true;
  } catch (const std::exception& e) {
    log << fmt::format(
        "tokenscope: {} not written: {} (the run's results are kept; tokenscope report {} "
        "tries again)\n",
        path.string(), e.what(), dir);
    return false;
  }
}

int run_report() {
  const auto& o = g_report;
  std::vector<std::filesystem::path> paths(o.runs.begin(), o.runs.end());
  const report::ReportInput input = report::load_report_input(paths);
  const nlohmann::json data = report::report_data(input);
  const std::string format = format_of(o);
  std::string text;
  if (format == "html") {
    text = report::render_html(data);
  } else if (format == "json") {
    text = data.dump(1) + "\n";
  } else if (format == "md") {
    text = report::render_markdown(data);
  } else {
    std::ostringstream os;
    print_report_text(os, data);
    text = os.str();
  }
  std::string out = o.out;
  if (out.empty() && format == "html") out = (paths.front() / "report.html").string();
  if (out.empty()) {
    std::cout << text;
    return kExitOk;
  }
  write_file_atomic(out, text);
  std::cerr << fmt::format("tokenscope report: wrote {} ({} run{}, {:.1f} KB)\n", out, input.runs.size(),
                           input.runs.size() == 1 ? "" : "s", static_cast<double>(text.size()) / 1024.0);
  return kExitOk;
}

}  // namespace tokenscope::cli
