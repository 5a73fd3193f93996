#include "cli/check_command.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "analyze/run_data.h"
#include "analyze/thresholds.h"
#include "cli/history_command.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "core/run_dir.h"
#include "report/render.h"
#include "report/report_data.h"
#include "rundir/run_set.h"

namespace tokenscope::cli {

namespace {

struct CheckCommandOptions {
  std::vector<std::string> runs;
  std::string thresholds;
  std::string out;
  std::string format = "text";
  std::vector<std::string> collectives;
  bool verbose = false;
  bool report = false;
  bool print_thresholds = false;
  bool no_cache = false;
  bool fail_on_environment = false;      // exit 5 when the runs' environments differ
  std::vector<std::string> activations;  // item 11 (analyze/quantization.h): BASE,CAND
  std::vector<std::string> kernels;      // item 9 (rundir/kernels.h): BASE,CAND
  CheckHistoryOptions history;           // --baseline auto, --trend and their filters
};
int run_check(CheckCommandOptions& o);

std::string number(double v, const std::string& unit) {
  if (!std::isfinite(v)) return "-";
  if (unit == "%") return fmt::format("{:+.1f}%", v * 100);
  const double a = std::abs(v);
  if (a != 0 && (a < 0.01 || a >= 1e6)) return fmt::format("{:.3g}", v);
  return fmt::format("{:.{}f}", v, a < 10 ? 3 : (a < 1000 ? 1 : 0));
}

std::string opt_number(const std::optional<double>& v, const std::string& unit) {
  return v ? number(*v, unit) : "-";
}

std::string interval(const analyze::Finding& f) {
  if (!f.ci_low && !f.ci_high) return "";
  return fmt::format("[{}, {}]", f.ci_low ? number(*f.ci_low, f.change_unit) : "-inf",
                     f.ci_high ? number(*f.ci_high, f.change_unit) : "+inf");
}

std::string change_text(const analyze::Finding& f) {
  std::string s = opt_number(f.change, f.change_unit);
  if (f.change && f.change_unit != "%" && !f.change_unit.empty()) s += " " + f.change_unit;
  return s;
}

struct Row {
  std::string number, item, verdict, statistic, change, ci, threshold, more;
  std::string note;  // the finding's note (printed under it with -v)
};

// The headline comparison (item 0), when the check has one.
const analyze::ItemResult* headline_of(const analyze::CheckResult& r) {
  for (const auto& it : r.items)
    if (it.number == 0) return &it;
  return nullptr;
}

// A value in its unit ("31.99 ms", "7.84 req/s").
std::string value_text(const std::optional<double>& v, const std::string& unit) {
  if (!v) return "-";
  return unit == "ratio" ? number(*v, "") : number(*v, "") + " " + unit;
}

std::vector<Row> rows(const analyze::CheckResult& r, bool verbose) {
  std::vector<Row> out;
  for (const auto& it : r.items) {
    if (it.number == 0) continue;  // the headline is its own table, first
    const auto row_of = [&](const analyze::Finding* f, bool first) {
      Row row;
      row.number = first ? std::to_string(it.number) : "";
      row.item = first ? it.title : "";
      row.verdict = std::string(analyze::to_string(f ? f->verdict : it.verdict));
      if (!f) {
        row.statistic = it.summary;
        return row;
      }
      row.statistic = f->metric;
      row.change = change_text(*f);
      row.ci = interval(*f);
      row.threshold = f->threshold;
      if (f->more_requests && *f->more_requests > 0)
        row.more = fmt::format("~{} more requests", *f->more_requests);
      if (verbose) row.note = f->note;
      return row;
    };
    // An item without data: why (its summary), unless every finding is asked for.
    if (!it.decisive || (!verbose && it.verdict == analyze::Verdict::kNoData)) {
      out.push_back(row_of(nullptr, true));
      continue;
    }
    if (!verbose) {
      Row row = row_of(&it.findings[*it.decisive], true);
      row.verdict = std::string(analyze::to_string(it.verdict));
      // A regression says what was found (item 5: which series moved, and when) without -v too.
      if (it.verdict == analyze::Verdict::kRegressed) row.note = it.findings[*it.decisive].note;
      out.push_back(row);
      continue;
    }
    for (std::size_t i = 0; i < it.findings.size(); ++i) out.push_back(row_of(&it.findings[i], i == 0));
  }
  return out;
}

}  // namespace

void print_check_table(std::ostream& os, const analyze::CheckResult& r, bool verbose) {
  // The names are the run directories' and notes may quote a server: shown
  // through display_text.
  if (r.single)
    os << fmt::format("tokenscope check: {} (one run: its health)\n", display_text(r.cand_name));
  else
    os << fmt::format("tokenscope check: base {} -> candidate {}\n", display_text(r.base_name),
                      display_text(r.cand_name));
  const std::string conf = fmt::format("{:g}% interval", r.thresholds.confidence * 100);
  // Validity first: what differed between the runs' environments.
  if (!r.single) {
    if (r.environment.empty()) {
      os << "environment: same (as far as the runs recorded it)\n";
    } else {
      os << "environment: DIFFERS — a reason to distrust the comparison, not the candidate's regression\n";
      for (const auto& d : r.environment)
        os << fmt::format("  {:<22} {} -> {}{}\n", display_text(d.what), display_text(d.base),
                          display_text(d.candidate),
                          d.note.empty() ? "" : "  (" + display_text(d.note) + ")");
    }
  }
  if (const auto* h = headline_of(r)) {
    os << fmt::format("headline: {}\n", analyze::to_string(h->verdict));
    if (h->findings.empty()) {
      os << fmt::format("  {}\n", display_text(h->summary));
    } else {
      os << fmt::format("  {:<26} {:>14} {:>14} {:>9}  {:<20} {:<13} {}\n", "statistic", "base", "candidate",
                        "change", conf, "verdict", "threshold");
      for (const auto& f : h->findings)
        os << fmt::format("  {:<26} {:>14} {:>14} {:>9}  {:<20} {:<13} {}{}\n", display_text(f.metric),
                          value_text(f.base, f.unit), value_text(f.value, f.unit), change_text(f),
                          interval(f), analyze::to_string(f.verdict), display_text(f.threshold),
                          verbose && !f.note.empty() ? "\n      note: " + display_text(f.note) : "");
    }
    os << "\n";
  }
  const auto rs = rows(r, verbose);
  std::size_t w_stat = 9, w_ci = 8, w_th = 9;
  for (const Row& row : rs) {
    if (!row.change.empty()) w_stat = std::max(w_stat, row.statistic.size());
    w_ci = std::max(w_ci, row.ci.size());
    w_th = std::max(w_th, row.threshold.size());
  }
  w_stat = std::min<std::size_t>(w_stat, 48);
  os << fmt::format("{:>3}  {:<20} {:<13} {:<{}} {:>12}  {:<{}}  {:<{}}\n", "#", "item", "verdict",
                    "statistic", w_stat, "change", conf, std::max(w_ci, conf.size()), "threshold", w_th);
  for (Row row : rs) {
    // Statistics name classes, collectives and kernels from the runs' files.
    for (std::string* text :
         {&row.item, &row.verdict, &row.statistic, &row.change, &row.ci, &row.threshold, &row.more})
      *text = display_text(*text);
    if (row.change.empty() && row.ci.empty()) {
      os << fmt::format("{:>3}  {:<20} {:<13} {}\n", row.number, row.item, row.verdict, row.statistic);
    } else {
      os << fmt::format("{:>3}  {:<20} {:<13} {:<{}} {:>12}  {:<{}}  {:<{}}{}\n", row.number, row.item,
                        row.verdict, row.statistic, w_stat, row.change, row.ci, std::max(w_ci, conf.size()),
                        row.threshold, w_th, row.more.empty() ? "" : "  " + row.more);
    }
    if (!row.note.empty())
      os << fmt::format("{:>3}  {:<20} {:<13} note: {}\n", "", "", "", display_text(row.note));
  }
  if (r.cand_attribution && !r.cand_attribution->rows.empty()) {
    const auto& a = *r.cand_attribution;
    os << fmt::format(
        "\nattribution ({}): effect on each outcome per unit of each cause, over {} windows of {:g} s; "
        "double machine learning beside the naive regression\n",
        display_text(r.single ? r.cand_name : "candidate " + r.cand_name), a.windows, a.window_s);
    os << fmt::format("  {:<26} {:<30} {:>28}  {:>28}\n", "outcome", "cause (unit)", "DML [interval]",
                      "naive [interval]");
    for (const auto& row : a.rows) {
      const auto est = [](const analyze::Estimate& e) {
        return fmt::format("{} [{}, {}]", number(e.estimate, ""), number(e.ci_low, ""),
                           number(e.ci_high, ""));
      };
      os << fmt::format(
          "  {:<26} {:<30} {:>28}  {:>28}\n", display_text(row.outcome + " (" + row.outcome_unit + ")"),
          display_text(row.cause + " (" + row.cause_unit + ")"), est(row.effect.dml), est(row.effect.naive));
    }
    for (const auto& n : a.notes) os << "  note: " << display_text(n) << "\n";
  }
  if (r.family_size > 0 && r.thresholds.family_alpha > 0)
    os << fmt::format(
        "family-wise error: {:g} over the {} findings judged on an interval (Holm; docs/check.md)\n",
        r.thresholds.family_alpha, r.family_size);
  os << fmt::format("overall: {} (exit {})\n", analyze::to_string(r.overall),
                    analyze::exit_code_for(r.overall));
}

std::string check_markdown(const analyze::CheckResult& r) {
  // Every cell through markdown_text: the names are directories' and the
  // statistics and notes may quote a server.
  const auto md = [](std::string_view t) { return markdown_text(t); };
  std::string s = r.single
                      ? fmt::format("### tokenscope check: {}\n\n", md(r.cand_name))
                      : fmt::format("### tokenscope check: {} → {}\n\n", md(r.base_name), md(r.cand_name));
  if (!r.environment.empty()) {
    s += "**environment differs** (a reason to distrust the comparison)\n\n| what | base | candidate | why "
         "it matters |\n"
         "|---|---|---|---|\n";
    for (const auto& d : r.environment)
      s += fmt::format("| {} | {} | {} | {} |\n", md(d.what), md(d.base), md(d.candidate), md(d.note));
    s += "\n";
  }
  if (const auto* h = headline_of(r); h && !h->findings.empty()) {
    s += fmt::format(
        "**headline: {}**\n\n| statistic | base | candidate | change | {:g}% interval | verdict |\n",
        analyze::to_string(h->verdict), r.thresholds.confidence * 100);
    s += "|---|---:|---:|---:|---|---|\n";
    for (const auto& f : h->findings)
      s += fmt::format("| {} | {} | {} | {} | {} | **{}** |\n", md(f.metric), md(value_text(f.base, f.unit)),
                       md(value_text(f.value, f.unit)), md(change_text(f)), md(interval(f)),
                       md(analyze::to_string(f.verdict)));
    s += "\n";
  }
  s += fmt::format("| # | item | verdict | statistic | change | {:g}% interval | threshold |\n",
                   r.thresholds.confidence * 100);
  s += "|---:|---|---|---|---:|---|---|\n";
  for (const Row& row : rows(r, false))
    s += fmt::format("| {} | {} | **{}** | {} | {} | {} | {} |\n", row.number, md(row.item), md(row.verdict),
                     md(row.statistic), md(row.change), md(row.ci), md(row.threshold));
  s += fmt::format("\n**overall: {}**\n", analyze::to_string(r.overall));
  return s;
}

Command add_check_command(CLI::App& app) {
  const auto options = std::make_shared<CheckCommandOptions>();
  auto& o = *options;
  CLI::App* check = app.add_subcommand(
      "check",
      "The regression checklist (docs/check.md): `check BASE CAND` compares a candidate run with a\n"
      "baseline item by item (latency model, SLO attainment, mixed-load coupling, tail shift, lifecycle,\n"
      "GPU efficiency, KV-cache locality, collectives, recompilation, batching, quantisation drift,\n"
      "contention), each verdict with its statistic, interval and threshold; `check RUN` judges one run's\n"
      "health. Writes check.json. Exit codes: 0 nothing regressed, 1 an item regressed, 2 bad input.");
  check->add_option("RUN", o.runs, "BASE CAND (two run directories), or one RUN")
      ->expected(1, 2)
      ->check(CLI::ExistingDirectory);
  check
      ->add_option("--thresholds", o.thresholds,
                   "YAML file of thresholds and tolerances (--print-thresholds)")
      ->check(CLI::ExistingFile);
  check->add_option("--out", o.out, "Write check.json here [default: CAND/check.json]");
  check->add_option("--format", o.format, "What to print: text|json|md [default: text]")
      ->check(CLI::IsMember({"text", "json", "md"}));
  check
      ->add_option("--collectives", o.collectives,
                   "Item 8: the base's and the candidate's collectives measurements (nccl-tests output or "
                   "probe collectives JSON) [default: found in the run directories]")
      ->expected(2)
      ->delimiter(',')
      ->check(CLI::ExistingFile);
  check
      ->add_option("--kernels", o.kernels,
                   "Item 9: the base's and the candidate's CUPTI kernel records (the samples.jsonl of probe "
                   "gpu-context|kv-swap, or an nsys export --type sqlite file) [default: the CUPTI lines of "
                   "each run's samples.jsonl]")
      ->expected(2)
      ->delimiter(',')
      ->check(CLI::ExistingFile);
  check
      ->add_option("--activations", o.activations,
                   "Item 11: the base's and the candidate's activation histograms (JSON lines {name, bins, "
                   "counts}; docs/check.md) [default: activations.jsonl in the run directories]")
      ->expected(2)
      ->delimiter(',')
      ->check(CLI::ExistingFile);
  check->add_flag("--verbose,-v", o.verbose, "Print every finding of every item, not only the decisive one");
  check->add_flag(
      "--report", o.report,
      "Also write CAND/report.html: the runs overlaid with the checklist's section (tokenscope report)");
  check->add_flag("--print-thresholds", o.print_thresholds, "Print the default thresholds file and exit");
  check->add_flag(
      "--fail-on-environment", o.fail_on_environment,
      "Exit 5 when the two runs' environments differ (host, clock source, CPU pressure or steal, other\n"
      "processes' CPU, the server's identity: the environment section), whatever the verdicts");
  check->add_flag("--no-cache", o.no_cache,
                  "Read the runs' JSONL files even when a valid run cache (.tokenscope-cache) is there, and "
                  "write none (docs/check.md)");
  add_check_history_options(check, o.history);  // --baseline auto, --trend (cli/history_command.h)
  return {check, [options] { return run_check(*options); }};
}

namespace {

int run_check(CheckCommandOptions& o) {
  analyze::keep_freed_memory();
  // --trend METRIC, or --baseline auto CAND: BASE from the history of runs.
  if (const auto trend_exit = run_check_history(o.history, o.runs, o.format, std::cout, std::cerr))
    return *trend_exit;
  if (o.print_thresholds) {
    std::cout << analyze::thresholds_yaml();
    return kExitOk;
  }
  if (o.runs.empty()) throw UsageError("check: name BASE CAND, or one RUN");
  const analyze::Thresholds t =
      o.thresholds.empty() ? analyze::Thresholds{} : analyze::load_thresholds(o.thresholds);
  analyze::LoadOptions load;
  load.cache = o.no_cache ? analyze::RunCache::kOff : analyze::RunCache::kReadWrite;
  // A directory of repeats (bench/sim --repeat): the items read its first
  // run; the headline takes each repeat's summary, the run as the unit,
  // when both sides are repeats.
  analyze::ExtraInputs extra;
  std::vector<std::string> item_runs = o.runs;
  std::vector<std::vector<nlohmann::json>*> repeats_of = {&extra.base_repeats, &extra.cand_repeats};
  if (o.runs.size() == 1) repeats_of = {&extra.cand_repeats};
  for (std::size_t i = 0; i < o.runs.size(); ++i) {
    if (std::filesystem::exists(std::filesystem::path(o.runs[i]) / "run.json")) continue;
    const auto set = rundir::read_run_set(o.runs[i]);
    if (!set || set->kind != "repeats" || set->runs.empty()) continue;
    item_runs[i] = set->runs.front().string();
    for (const auto& dir : set->runs) {
      std::ifstream in(dir / "run.json");
      std::stringstream text;
      text << in.rdbuf();
      if (json_too_deep_at(text.str()) != std::string_view::npos) continue;  // not a run.json bench wrote
      const auto run = nlohmann::json::parse(text.str(), nullptr, false);
      if (run.is_object() && run.contains("summary") && run["summary"].is_object())
        repeats_of[i]->push_back(run["summary"]);
    }
    if (o.format == "text")
      std::cout << fmt::format("{}: {} repeats; the items read {}\n", display_text(o.runs[i]),
                               set->runs.size(), display_text(item_runs[i]));
  }
  // The two runs read at once (the base on a thread of its own); the base's
  // error first when both fail, as when they were read one after the other.
  std::optional<analyze::RunData> base;
  std::future<analyze::RunData> base_load;
  if (o.runs.size() == 2)
    base_load = std::async(std::launch::async, [&] { return analyze::load_run(item_runs[0], load); });
  std::optional<analyze::RunData> cand_loaded;
  std::exception_ptr cand_error;
  try {
    cand_loaded = analyze::load_run(item_runs.back(), load);
  } catch (...) {
    cand_error = std::current_exception();
  }
  if (base_load.valid()) base = base_load.get();
  if (cand_error) std::rethrow_exception(cand_error);
  analyze::RunData cand = std::move(*cand_loaded);
  // A directory of repeats is named as given, with its count.
  const auto name_of = [](const std::string& given, std::size_t repeats) {
    std::filesystem::path p = std::filesystem::path(given).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();  // "dir/"
    return fmt::format("{} ({} repeats)", p.filename().string(), repeats);
  };
  if (base && !extra.base_repeats.empty()) base->name = name_of(o.runs.front(), extra.base_repeats.size());
  if (!extra.cand_repeats.empty()) cand.name = name_of(o.runs.back(), extra.cand_repeats.size());
  if (o.collectives.size() == 2) {
    extra.collectives_base = o.collectives[0];
    extra.collectives_cand = o.collectives[1];
  }
  if (o.kernels.size() == 2) {
    extra.kernels_base = o.kernels[0];
    extra.kernels_cand = o.kernels[1];
  }
  if (o.activations.size() == 2) {
    extra.activations_base = o.activations[0];
    extra.activations_cand = o.activations[1];
  }
  const analyze::CheckResult r = analyze::run_checklist(base ? &*base : nullptr, cand, t, extra);
  const nlohmann::json j = analyze::to_json(r);
  if (o.format == "json")
    std::cout << j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  else if (o.format == "md")
    std::cout << check_markdown(r);
  else
    print_check_table(std::cout, r, o.verbose);
  const std::filesystem::path out =
      o.out.empty() ? std::filesystem::path(o.runs.back()) / "check.json" : std::filesystem::path(o.out);
  try {
    write_file_atomic(out, j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  } catch (const std::exception& e) {
    std::cerr << fmt::format("tokenscope check: {} not written: {}\n", out.string(), e.what());
    return kExitUsage;
  }
  // The lifecycle phases of each run, for the report's time axes.
  const auto write_phases = [&](const std::string& dir, const nlohmann::json& phases) {
    if (phases.empty()) return;
    const auto path = std::filesystem::path(dir) / "phases.json";
    try {
      write_file_atomic(path, nlohmann::json{{"phases", phases}}.dump(1) + "\n");
    } catch (const std::exception& e) {
      std::cerr << fmt::format("tokenscope check: {} not written: {}\n", path.string(), e.what());
    }
  };
  if (base) write_phases(item_runs.front(), r.base_phases);
  write_phases(item_runs.back(), r.cand_phases);
  if (o.format == "text") std::cout << fmt::format("wrote {}\n", out.string());
  if (o.report) {
    const auto page = std::filesystem::path(o.runs.back()) / "report.html";
    try {
      std::vector<std::filesystem::path> dirs(o.runs.begin(), o.runs.end());
      write_file_atomic(page,
                        report::render_html(report::report_data(report::load_report_input(dirs, load))));
      if (o.format == "text") std::cout << fmt::format("report: {}\n", page.string());
    } catch (const std::exception& e) {
      std::cerr << fmt::format("tokenscope check: {} not written: {}\n", page.string(), e.what());
    }
  }
  if (o.fail_on_environment && !r.environment.empty()) return kExitEnvironment;
  return analyze::exit_code_for(r.overall);
}

}  // namespace

}  // namespace tokenscope::cli
