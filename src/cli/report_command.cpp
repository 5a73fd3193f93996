#include "cli/report_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <sstream>

#include "analyze/run_data.h"
#include "cli/summary_table.h"
#include "core/error.h"
#include "core/run_dir.h"
#include "report/render.h"
#include "report/report_data.h"

namespace tokenscope::cli {

namespace {

struct ReportCommandOptions {
  std::vector<std::string> runs;
  std::string out;
  std::string format;
  bool no_cache = false;
};
int run_report(const ReportCommandOptions& o);

// o[key], or null when o has no such key.
const nlohmann::json& field(const nlohmann::json& o, const char* key) {
  static const nlohmann::json kNull;
  if (!o.is_object()) return kNull;
  const auto it = o.find(key);
  return it == o.end() ? kNull : *it;
}

// A value of a run's files as one line of text: strings through
// display_text (a run directory is outside input: a name or a server's text
// never reaches the terminal as a control sequence or a forged line).
std::string value_text(const nlohmann::json& v) {
  if (v.is_string()) return display_text(v.get<std::string>());
  if (v.is_number_float()) return fmt::format("{:g}", v.get<double>());
  return display_text(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
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

double number_or_zero(const nlohmann::json& v) {
  return v.is_number() ? v.get<double>() : 0;
}

// A number with `decimals` decimals, "-" when it is not one.
std::string task_number(const nlohmann::json& v, int decimals) {
  return v.is_number() ? fmt::format("{:.{}f}", v.get<double>(), decimals) : std::string("-");
}

// A completion percentile with its 95% interval: {value, ci95: [low, high]}.
std::string task_percentile(const nlohmann::json& q) {
  const auto& ci = field(q, "ci95");
  std::string out = task_number(field(q, "value"), 0);
  if (ci.is_array() && ci.size() == 2 && ci[0].is_number() && ci[1].is_number())
    out += fmt::format(" [{}, {}]", task_number(ci[0], 0), task_number(ci[1], 0));
  return out + " ms";
}

// "k1 n1, k2 n2" of an object of counts, the largest first, at most `most`.
std::string task_counts(const nlohmann::json& counts, std::size_t most) {
  std::vector<std::pair<double, std::string>> v;
  if (counts.is_object())
    for (const auto& [k, n] : counts.items())
      if (n.is_number()) v.emplace_back(n.get<double>(), k);
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out;
  for (std::size_t i = 0; i < std::min(most, v.size()); ++i)
    out += fmt::format("{}{} {:.0f}", out.empty() ? "" : ", ", display_text(v[i].second), v[i].first);
  if (v.size() > most) out += fmt::format(" and {} more", v.size() - most);
  return out;
}

// The run's agentic tasks (report_data's runs[].tasks): run.json's summary
// in lines, as bench prints its tasks line and more; the counts of the
// records when the summary is missing (a run cut short).
void print_task_lines(std::ostream& os, const nlohmann::json& tasks) {
  const auto& s = field(tasks, "summary");
  const auto& rec = field(tasks, "records");
  const auto& counts = s.is_object() ? s : rec;
  os << fmt::format(
      "{:<18}{} total, {} ok, {} failed, {} cancelled{}; {} warm-up apart\n", "tasks",
      task_number(field(counts, "tasks"), 0), task_number(field(counts, "ok"), 0),
      task_number(field(counts, "failed"), 0), task_number(field(counts, "cancelled"), 0),
      field(s, "pass_rate").is_number()
          ? fmt::format(" (pass rate {:.1f}%)", 100 * s["pass_rate"].get<double>())
          : std::string(),
      task_number(field(field(s, "warmup"), "tasks").is_number() ? field(field(s, "warmup"), "tasks")
                                                                 : field(rec, "warmup"),
                  0));
  if (!s.is_object()) {
    os << "  run.json has no tasks summary (a run cut short): the counts are tasks.jsonl's\n";
    return;
  }
  if (const auto& c = field(s, "completion_ms"); c.is_object())
    os << fmt::format("  {:<16}p50 {}, p90 {}, p99 {}\n", "completion", task_percentile(field(c, "p50")),
                      task_percentile(field(c, "p90")), task_percentile(field(c, "p99")));
  if (const auto& g = field(s, "goodput"); g.is_object())
    os << fmt::format("  {:<16}{} tasks within their SLO, {}/s over {} s\n", "goodput",
                      task_number(field(g, "tasks"), 0), task_number(field(g, "per_s"), 2),
                      task_number(field(g, "span_s"), 1));
  if (const auto& p = field(s, "per_task"); p.is_object())
    os << fmt::format("  {:<16}{} steps, {} model calls, {} tool calls, {} prompt tokens, {} output tokens\n",
                      "per task", task_number(field(p, "steps"), 2), task_number(field(p, "model_calls"), 2),
                      task_number(field(p, "tool_calls"), 2), task_number(field(p, "prompt_tokens"), 0),
                      task_number(field(p, "output_tokens"), 0));
  if (const auto& c = field(s, "critical_path_ms"); c.is_object())
    os << fmt::format("  {:<16}model {} ms, tool {} ms, client {} ms, queue {} ms (means)\n", "critical path",
                      task_number(field(c, "model"), 1), task_number(field(c, "tool"), 1),
                      task_number(field(c, "client"), 1), task_number(field(c, "queue"), 1));
  if (const std::string f = task_counts(field(s, "failures_by_class"), 10); !f.empty()) {
    os << fmt::format("  {:<16}{} (failed steps)\n", "failures", f);
    os << fmt::format("  {:<16}{}\n", "tasks failed", task_counts(field(s, "tasks_failed_by_class"), 10));
    os << fmt::format("  {:<16}{}\n", "failed at step", task_counts(field(s, "failures_by_step"), 10));
  }
  if (const std::string r = task_counts(field(s, "retried_by_class"), 10); !r.empty())
    os << fmt::format("  {:<16}{} (attempts)\n", "retried", r);
  if (const auto& tools = field(s, "tool_latency"); tools.is_object() && !tools.empty()) {
    std::string line;
    for (const auto& [name, t] : tools.items())
      line += fmt::format("{}{} {} calls, p50 {} ms, p99 {} ms", line.empty() ? "" : "; ", display_text(name),
                          task_number(field(t, "calls"), 0), task_number(field(t, "p50_ms"), 2),
                          task_number(field(t, "p99_ms"), 2));
    os << fmt::format("  {:<16}{}\n", "tool latency", line);
  }
  if (const auto& j = field(s, "judge"); field(j, "judged").is_number() && j["judged"].get<double>() > 0)
    os << fmt::format("  {:<16}{} judged: {} passed, {} rejected, {} judge errors; p50 {} ms, p99 {} ms\n",
                      "judge", task_number(field(j, "judged"), 0), task_number(field(j, "passed"), 0),
                      task_number(field(j, "rejected"), 0), task_number(field(j, "errors"), 0),
                      task_number(field(j, "latency_p50_ms"), 0), task_number(field(j, "latency_p99_ms"), 0));
  if (const auto& classes = field(s, "by_class"); classes.is_object())
    for (const auto& [name, c] : classes.items()) {
      std::string slo;
      if (const auto& o = field(c, "slo"); o.is_object()) {
        if (field(o, "task_ms").is_number())
          slo += fmt::format("; p{} {} / {} ms", task_number(field(o, "percentile"), 0),
                             field(o, "task_ms_at_percentile").is_number()
                                 ? task_number(o["task_ms_at_percentile"], 0)
                                 : std::string("past the failed tasks"),
                             task_number(o["task_ms"], 0));
        if (field(o, "pass_rate").is_number())
          slo += fmt::format("; pass rate {:.1f}% / {:.1f}%", 100 * number_or_zero(field(c, "pass_rate")),
                             100 * o["pass_rate"].get<double>());
        slo += field(o, "met") == true ? ": SLO pass" : ": SLO FAIL";
      }
      os << fmt::format("  class {:<10}{} tasks, {} ok, {} failed, {} cancelled, p99 {}{}\n",
                        name.empty() ? "(none)" : display_text(name), task_number(field(c, "tasks"), 0),
                        task_number(field(c, "ok"), 0), task_number(field(c, "failed"), 0),
                        task_number(field(c, "cancelled"), 0),
                        task_number(field(field(field(c, "completion_ms"), "p99"), "value"), 0) + " ms", slo);
    }
}

}  // namespace

// Long by nature: the text report's sections in order.
void print_report_text(std::ostream& os, const nlohmann::json& data) {
  for (const auto& n : data["notes"]) os << "note: " << value_text(n) << "\n";
  for (const auto& r : data["runs"]) {
    SummaryHeader h;
    const std::string command = r.value("command", std::string());
    h.client_rows = command == "bench";
    h.title = fmt::format("tokenscope report: {}{}{}", value_text(r["name"]),
                          command.empty() ? "" : " (" + display_text(command) + ")",
                          r.value("partial", false) ? ", partial" : "");
    for (const auto& [k, v] : r["settings"].items())
      if (k != "command") h.lines.push_back(fmt::format("{}: {}", display_text(k), value_text(v)));
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
        line += fmt::format("{}{} {}", line.empty() ? "" : ", ", display_text(k), value_text(v));
      }
      if (!line.empty()) os << fmt::format("{:<18}{}\n", "server", line);
      for (const auto& [k, v] : server.items()) {
        if (!v.is_object() || !v.contains("p50")) continue;
        os << fmt::format("{:<18}{}: mean {}, p50 {}, p99 {} ({} observations)\n", "", display_text(k),
                          value_text(v["mean"]), value_text(v["p50"]), value_text(v["p99"]),
                          value_text(v["count"]));
      }
    }
    // Per task class, tenant and model (a model mix), when the run has more than one.
    const auto num_cell = [](const nlohmann::json& v, int width, int decimals) {
      return v.is_number() ? fmt::format("{:>{}.{}f}", v.get<double>(), width, decimals)
                           : fmt::format("{:>{}}", "-", width);
    };
    for (const auto& [key, label] : {std::pair{"by_class", "per class"}, std::pair{"by_tenant", "per tenant"},
                                     std::pair{"by_model", "per model"}}) {
      const auto& groups = field(s, key);
      if (!groups.is_object() || groups.size() < 2) continue;
      os << fmt::format("{:<18}{:>10}{:>8}{:>10}{:>10}{:>12}{:>12}{:>12}\n", label, "requests", "failed",
                        "req/s", "goodput", "TTFT p99", "TPOT p99", "E2E p99");
      for (const auto& [name, g] : groups.items())
        os << fmt::format("  {:<16}{}{}{}{}{}{}{}\n", name.empty() ? "(none)" : display_text(name),
                          num_cell(field(g, "requests"), 10, 0), num_cell(field(g, "failed"), 8, 0),
                          num_cell(field(g, "request_throughput_rps"), 10, 2),
                          num_cell(field(g, "goodput_rps"), 10, 2),
                          num_cell(field(field(g, "ttft_ms"), "p99"), 12, 1),
                          num_cell(field(field(g, "tpot_ms"), "p99"), 12, 2),
                          num_cell(field(field(g, "e2e_ms"), "p99"), 12, 1));
    }
    if (const auto& tasks = field(r, "tasks"); tasks.is_object()) print_task_lines(os, tasks);
    // The slowest requests: where their time went.
    if (const auto& slow = r["slowest"]; slow.is_array() && !slow.empty()) {
      os << fmt::format("{:<18}{:>10}{:>10}{:>10}{:>10}{:>10}{:>9}  {}\n", "slowest (ms)", "E2E", "client",
                        "queue", "prefill", "decode", "tokens", "tenant");
      const auto diff = [](const nlohmann::json& a, const nlohmann::json& b) -> nlohmann::json {
        return a.is_number() && b.is_number() ? nlohmann::json(b.get<double>() - a.get<double>())
                                              : nlohmann::json();
      };
      for (std::size_t i = 0; i < std::min<std::size_t>(5, slow.size()); ++i) {
        const auto& x = slow[i];
        const bool split = x["prefill_split"] != "none";
        os << fmt::format(
            "  #{:<15}{}{}{}{}{}{}  {}\n", x["id"].get<std::uint64_t>(), num_cell(x["e2e_ms"], 10, 1),
            num_cell(diff(x["sched_ms"], x["send_ms"]), 10, 1),
            split ? num_cell(diff(x["send_ms"], x["prefill_start_ms"]), 10, 1) : fmt::format("{:>10}", "-"),
            split ? num_cell(diff(x["prefill_start_ms"], x["first_token_ms"]), 10, 1)
                  : num_cell(diff(x["send_ms"], x["first_token_ms"]), 10, 1) + "*",
            num_cell(diff(x["first_token_ms"], x["last_token_ms"]), split ? 10 : 9, 1),
            num_cell(x["output_tokens"], 9, 0), display_text(x.value("tenant", std::string("-"))));
      }
      if (slow[0]["prefill_split"] == "none")
        os << "  * waiting and prefill together: this server does not say when its prefill began\n";
    }
    for (const auto& w : r["warnings"]) os << "WARNING: " << value_text(w) << "\n";
    for (const auto& n : r["notes"]) os << "note: " << value_text(n) << "\n";
    os << "\n";
  }
  for (const auto& p : data["probes"]) {
    os << "probe " << value_text(p["probe"]) << " (" << value_text(p["file"]) << ")\n";
    for (const char* k : {"verdict", "winner"})
      if (p.contains(k) && p[k].is_string()) os << "  " << k << ": " << value_text(p[k]) << "\n";
    if (const auto& fs = field(p, "false_sharing"); fs.is_object()) {
      if (fs.contains("verdict") && fs["verdict"].is_string())
        os << "  false sharing: " << value_text(fs["verdict"]) << "\n";
      for (const auto& ratio : field(fs, "ratios")) {
        const auto& m = field(ratio, "ratio");
        const auto g3 = [](const nlohmann::json& v) {
          return v.is_number() ? fmt::format("{:.3g}", v.get<double>()) : std::string("n/a");
        };
        os << fmt::format("  {}: {} [{}, {}]\n", value_text(field(ratio, "name")), g3(field(m, "median")),
                          g3(field(m, "ci95_low")), g3(field(m, "ci95_high")));
      }
    }
    if (const auto& totals = field(field(p, "simulation"), "totals"); totals.is_object())
      os << fmt::format("  {} lines, {} falsely shared, {} truly shared; {} HITM, {} invalidations\n",
                        value_text(field(totals, "lines")),
                        value_text(field(totals, "lines_with_false_sharing")),
                        value_text(field(totals, "lines_with_true_sharing")),
                        value_text(field(totals, "hitm")), value_text(field(totals, "invalidations")));
    if (const auto& findings = field(p, "findings"); findings.is_array())
      for (const auto& f : findings) os << "  - " << value_text(f) << "\n";
    os << "\n";
  }
  for (const auto& sw : data["sweeps"]) {
    os << "sweep " << value_text(sw["name"]) << "\n";
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

Command add_report_command(CLI::App& app) {
  const auto options = std::make_shared<ReportCommandOptions>();
  auto& o = *options;
  CLI::App* report = app.add_subcommand(
      "report",
      "Report on one or more run directories (bench, sim; a sweep directory adds its rate-* runs): one\n"
      "self-contained HTML page that opens offline (summary, SLOs, warnings, latency CDFs of every run\n"
      "overlaid, and every layer over time on one zoom-linked axis), or the same summary as text, JSON\n"
      "(the data behind the page) or Markdown (for a pull-request comment).");
  report
      ->add_option("RUN", o.runs,
                   "Run directories (bench --out, sim --out), sweep directories, or probe results (a "
                   "probe --out directory or one <probe>.json)")
      ->required()
      ->check(CLI::ExistingPath);
  report->add_option("--out", o.out,
                     "Write here [default: html: RUN/report.html of the first run; other formats: standard "
                     "output]");
  report->add_option("--format", o.format, "html|text|json|md [default: from --out's extension, else html]")
      ->check(CLI::IsMember({"html", "text", "json", "md"}));
  report->add_flag("--no-cache", o.no_cache,
                   "Read the runs' JSONL files even when a valid run cache (.tokenscope-cache) is there, and "
                   "write none (docs/check.md)");
  return {report, [options] { return run_report(*options); }};
}

namespace {

int run_report(const ReportCommandOptions& o) {
  analyze::keep_freed_memory();
  std::vector<std::filesystem::path> paths(o.runs.begin(), o.runs.end());
  analyze::LoadOptions load;
  load.cache = o.no_cache ? analyze::RunCache::kOff : analyze::RunCache::kReadWrite;
  const report::ReportInput input = report::load_report_input(paths, load);
  const nlohmann::json data = report::report_data(input);
  const std::string format = format_of(o);
  std::string text;
  if (format == "html") {
    text = report::render_html(data);
  } else if (format == "json") {
    text = data.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  } else if (format == "md") {
    text = report::render_markdown(data);
  } else {
    std::ostringstream os;
    print_report_text(os, data);
    text = os.str();
  }
  std::string out = o.out;
  if (out.empty() && format == "html") {
    std::error_code ec;
    const auto& first = paths.front();
    out = ((std::filesystem::is_directory(first, ec) ? first : first.parent_path()) / "report.html").string();
  }
  if (std::error_code ec; !out.empty() && std::filesystem::is_directory(out, ec))
    throw UsageError(fmt::format("--out {}: is a directory; name the file to write", out));
  if (out.empty()) {
    std::cout << text;
    return kExitOk;
  }
  write_file_atomic(out, text);
  std::cerr << fmt::format("tokenscope report: wrote {} ({} run{}, {:.1f} KB)\n", out, input.runs.size(),
                           input.runs.size() == 1 ? "" : "s", static_cast<double>(text.size()) / 1024.0);
  return kExitOk;
}

}  // namespace

}  // namespace tokenscope::cli
