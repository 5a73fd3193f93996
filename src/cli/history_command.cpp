#include "cli/history_command.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "analyze/history.h"
#include "core/error.h"
#include "core/json_out.h"

namespace tokenscope::cli {

namespace {

namespace fs = std::filesystem;

struct HistoryCommandOptions {
  HistoryFilterOptions f = [] {
    HistoryFilterOptions f;
    f.limit = 50;  // --limit's default for `history`
    return f;
  }();
  bool json = false;
};

int run_history(const HistoryCommandOptions& o);

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

fs::path history_path(const std::string& option) {
  return option.empty() ? analyze::default_history_path() : fs::path(option);
}

// "2026-12-02 04:36:12" (UTC).
std::string utc_text(double unix_s) {
  const auto t = static_cast<std::time_t>(std::floor(unix_s));
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

analyze::HistoryFilter filter_of(const HistoryFilterOptions& o) {
  analyze::HistoryFilter f;
  if (!o.command.empty()) f.command = o.command;
  if (!o.target.empty()) f.target = o.target;
  if (!o.tag.empty()) f.tag = o.tag;
  if (!o.workload.empty()) f.workload_hash = o.workload;
  if (!o.since.empty()) f.since_unix = analyze::parse_since(o.since, now_unix());
  f.limit = o.limit;
  return f;
}

void add_filter_options(CLI::App* cmd, HistoryFilterOptions& o, const char* group) {
  cmd->add_option("--history", o.history,
                  "The history database [default: $XDG_DATA_HOME/tokenscope/history.db, XDG_DATA_HOME "
                  "defaulting to ~/.local/share]")
      ->group(group);
  cmd->add_option("--command", o.command, "Only runs of this command: bench|sim")
      ->check(CLI::IsMember({"bench", "sim"}))
      ->group(group);
  cmd->add_option("--target", o.target, "Only runs against this target (bench's URL, in-process, sim)")
      ->group(group);
  cmd->add_option("--tag", o.tag, "Only runs with this tag")->group(group);
  cmd->add_option("--workload", o.workload, "Only runs of this workload hash")->group(group);
  cmd->add_option("--since", o.since,
                  "Only runs finished since: 7d, 12h, 30m ago, a UTC date YYYY-MM-DD[THH:MM[:SS]], or Unix "
                  "seconds")
      ->group(group);
}

std::string cell(const std::optional<double>& v, int decimals) {
  return v ? fmt::format("{:.{}f}", *v, decimals) : "-";
}

// One run as a line of JSON (written directly: 10,000 runs in a few
// milliseconds, where building the document first took most of a second).
void append_run_json(std::string& out, const analyze::HistoryRun& r) {
  using jsonout::append_string;
  const auto number = [&](double v) { fmt::format_to(std::back_inserter(out), "{}", v); };
  out += fmt::format("{{\"id\":{},\"path\":", r.id);
  append_string(out, r.path);
  out += ",\"command\":";
  append_string(out, r.command);
  out += ",\"started_unix\":";
  if (r.started_unix)
    number(*r.started_unix);
  else
    out += "null";
  out += ",\"finished_unix\":";
  number(r.finished_unix);
  out += ",\"finished_utc\":";
  append_string(out, utc_text(r.finished_unix));
  out += r.partial ? ",\"partial\":true,\"target\":" : ",\"partial\":false,\"target\":";
  append_string(out, r.target);
  out += ",\"target_version\":";
  append_string(out, r.target_version);
  out += ",\"workload_hash\":";
  append_string(out, r.workload_hash);
  out += ",\"settings_hash\":";
  append_string(out, r.settings_hash);
  out += ",\"tags\":[";
  for (std::size_t i = 0; i < r.tags.size(); ++i) {
    if (i) out += ',';
    append_string(out, r.tags[i]);
  }
  out += "],\"metrics\":{";
  for (std::size_t i = 0; i < r.metrics.size(); ++i) {
    if (i) out += ',';
    append_string(out, r.metrics[i].first);
    out += ':';
    number(r.metrics[i].second);
  }
  out += "}}";
}

void print_runs(std::ostream& os, const std::vector<analyze::HistoryRun>& runs) {
  // The paths, targets and commands come from run.json files and the history
  // file: outside text, shown through display_text.
  std::size_t w_id = 2, w_target = 6;
  for (const auto& r : runs) {
    w_id = std::max(w_id, std::to_string(r.id).size());
    w_target = std::max(w_target, display_text(r.target).size());
  }
  w_target = std::min<std::size_t>(w_target, 40);
  std::string out = fmt::format("{:>{}}  {:<19}  {:<7}  {:<{}}  {:<8}  {:>10}  {:>10}  {:>8}  {}\n", "id",
                                w_id, "finished (UTC)", "command", "target", w_target, "workload", "TTFT p99",
                                "TPOT p99", "req/s", "path");
  bool any_partial = false;
  for (const auto& r : runs) {
    any_partial |= r.partial;
    out += fmt::format("{:>{}}  {:<19}  {:<7}  {:<{}}  {:<8}  {:>10}  {:>10}  {:>8}  {}\n", r.id, w_id,
                       utc_text(r.finished_unix), display_text(r.command) + (r.partial ? "*" : ""),
                       display_text(r.target), w_target, display_text(r.workload_hash.substr(0, 8)),
                       cell(r.metric("ttft_ms.p99"), 1), cell(r.metric("tpot_ms.p99"), 2),
                       cell(r.metric("request_throughput_rps"), 2), display_text(r.path));
  }
  if (any_partial) out += "* interrupted: partial results\n";
  os << out;
}

// The run a directory is in the history (its latest registration), or its
// entry read from its run.json when it was never registered.
analyze::HistoryRun candidate_of(const analyze::History& h, const std::string& dir) {
  analyze::HistoryRun from_file = analyze::history_run_from_directory(dir);
  if (auto registered = h.find_by_path(from_file.path)) return *registered;
  return from_file;
}

int run_trend(const CheckHistoryOptions& o, const std::string& format, std::ostream& out) {
  if (!analyze::find_history_metric(o.trend)) analyze::find_trend(o.trend, {});  // throws: names the metrics
  if (!(o.trend_pvalue > 0 && o.trend_pvalue <= 1))
    throw UsageError(fmt::format("--trend-pvalue: expected a p-value in (0, 1], got {:g}", o.trend_pvalue));
  if (!(o.trend_min_change >= 0) || !std::isfinite(o.trend_min_change))
    throw UsageError(
        fmt::format("--trend-min-change: expected a relative change >= 0, got {:g}", o.trend_min_change));
  const fs::path path = history_path(o.f.history);
  const analyze::History h(path, /*create=*/false);
  analyze::HistoryFilter f = filter_of(o.f);
  // Comparable runs: those of the latest run's settings and target.
  analyze::HistoryFilter latest_filter = f;
  latest_filter.include_partial = false;
  latest_filter.limit = 1;
  const auto latest = h.list(latest_filter);
  if (latest.empty())
    throw UsageError(fmt::format("--trend: no complete run in the history {} matches", path.string()));
  f.settings_hash = latest[0].settings_hash;
  f.target = latest[0].target;
  analyze::ChangePointSettings cps;
  cps.max_pvalue = o.trend_pvalue;
  cps.min_magnitude = o.trend_min_change;
  const analyze::Trend t = analyze::find_trend(o.trend, h.metric_series(o.trend, f), cps);
  if (t.points.empty())
    throw UsageError(fmt::format("--trend {}: no run like {} has this metric in the history {}", o.trend,
                                 latest[0].path, path.string()));
  const auto* metric = analyze::find_history_metric(o.trend);
  const int exit_code = t.last_is_regression() ? kExitFailure : kExitOk;
  if (format == "json") {
    nlohmann::json changes = nlohmann::json::array();
    for (const auto& c : t.changes)
      changes.push_back({{"run_id", c.at.run_id},
                         {"path", c.at.path},
                         {"finished_unix", c.at.finished_unix},
                         {"finished_utc", utc_text(c.at.finished_unix)},
                         {"index", c.change.index},
                         {"mean_before", c.change.mean_before},
                         {"mean_after", c.change.mean_after},
                         {"relative_change", c.change.relative_change},
                         {"p_value", c.change.p_value},
                         {"regression", c.regression}});
    nlohmann::json points = nlohmann::json::array();
    for (const auto& p : t.points)
      points.push_back({{"run_id", p.run_id}, {"finished_unix", p.finished_unix}, {"value", p.value}});
    out << nlohmann::json{{"metric", t.metric},
                          {"unit", metric->unit},
                          {"history", path.string()},
                          {"settings_hash", f.settings_hash.value()},
                          {"target", f.target.value()},
                          {"max_pvalue", o.trend_pvalue},
                          {"min_change", o.trend_min_change},
                          {"points", points},
                          {"changes", changes},
                          {"last_is_regression", t.last_is_regression()},
                          {"exit_code", exit_code}}
               .dump(1)
        << "\n";
    return exit_code;
  }
  out << fmt::format("tokenscope check --trend {}: {} runs of {} (settings {}, target {}), {} to {} UTC\n",
                     t.metric, t.points.size(), display_text(path.string()),
                     display_text(f.settings_hash.value().substr(0, 8)), display_text(f.target.value()),
                     utc_text(t.points.front().finished_unix), utc_text(t.points.back().finished_unix));
  if (t.points.size() < 3) {
    out << "fewer than 3 runs: no change point can be found (exit 0)\n";
    return kExitOk;
  }
  if (t.changes.empty()) {
    out << fmt::format(
        "no change point (E-divisive, t-test p < {:g}, change > {:g}%): the metric held (exit 0)\n",
        o.trend_pvalue, 100 * o.trend_min_change);
    return kExitOk;
  }
  out << fmt::format(
      "change points (E-divisive, t-test p < {:g}, change > {:g}%), each at the first run after it:\n",
      o.trend_pvalue, 100 * o.trend_min_change);
  out << fmt::format("  {:>8}  {:<19}  {:>12}  {:>12}  {:>8}  {:>9}  {}\n", "run", "finished (UTC)", "before",
                     "after", "change", "p-value", "");
  for (const auto& c : t.changes)
    out << fmt::format(
        "  {:>8}  {:<19}  {:>12}  {:>12}  {:>+7.1f}%  {:>9.2g}  {}\n", fmt::format("#{}", c.at.run_id),
        utc_text(c.at.finished_unix), fmt::format("{:.4g} {}", c.change.mean_before, metric->unit),
        fmt::format("{:.4g} {}", c.change.mean_after, metric->unit), 100 * c.change.relative_change,
        c.change.p_value, c.regression ? "regression" : "improvement");
  out << fmt::format("last change: {} (exit {})\n",
                     t.last_is_regression() ? "a regression" : "not a regression", exit_code);
  return exit_code;
}

}  // namespace

void add_run_history_options(CLI::App* command, session::HistoryRegistration& options,
                             std::vector<std::string>& tags, const char* group) {
  CLI::Option* path =
      command
          ->add_option("--history", options.path,
                       "Register the run in this history database [default: "
                       "$XDG_DATA_HOME/tokenscope/history.db, XDG_DATA_HOME defaulting to ~/.local/share]")
          ->group(group);
  command->add_flag("--no-history", options.disabled, "Do not register the run in the history")
      ->excludes(path)
      ->group(group);
  command
      ->add_option(
          "--tag", tags,
          "A tag for the run (repeatable): run.json \"tags\" and the history; version=TEXT names the "
          "target's version")
      ->group(group);
}

Command add_history_command(CLI::App& app) {
  const auto options = std::make_shared<HistoryCommandOptions>();
  auto& o = *options;
  CLI::App* cmd = app.add_subcommand(
      "history",
      "The history of runs (docs/check.md \"History\"): every bench and sim run directory, newest first,\n"
      "with its target, workload hash and key metrics. Exit 2 when the database is not a history.");
  const char* F = "Filters";
  add_filter_options(cmd, o.f, F);
  cmd->add_option("--limit", o.f.limit, "At most this many runs, the newest (0: all)")
      ->capture_default_str()
      ->group(F);
  cmd->add_flag("--json", o.json, "Print the runs as JSON");
  return {cmd, [options] { return run_history(*options); }};
}

namespace {

int run_history(const HistoryCommandOptions& o) {
  const fs::path path = history_path(o.f.history);
  const analyze::HistoryFilter f = filter_of(o.f);
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)  // a link loop: no "does not exist"
    throw UsageError(fmt::format("history {}: cannot be opened: {}", path.string(), ec.message()));
  if (!exists) {
    if (o.json)
      std::cout << nlohmann::json{{"history", path.string()}, {"runs", nlohmann::json::array()}}.dump(1)
                << "\n";
    else
      std::cout << fmt::format("no runs registered yet ({} does not exist)\n", path.string());
    return kExitOk;
  }
  const analyze::History h(path, /*create=*/false);
  const auto runs = h.list(f);
  if (o.json) {
    // {"history": PATH, "runs": [ one run a line ]}
    std::string text = "{\"history\":";
    jsonout::append_string(text, path.string());
    text += ",\"runs\":[";
    for (std::size_t i = 0; i < runs.size(); ++i) {
      text += i ? ",\n" : "\n";
      append_run_json(text, runs[i]);
    }
    text += "\n]}\n";
    std::cout << text;
    return kExitOk;
  }
  if (runs.empty()) {
    std::cout << fmt::format("no runs match in {}\n", path.string());
    return kExitOk;
  }
  print_runs(std::cout, runs);
  return kExitOk;
}

}  // namespace

void add_check_history_options(CLI::App* check, CheckHistoryOptions& o) {
  const char* H = "History (docs/check.md \"History\")";
  check
      ->add_option("--baseline", o.baseline,
                   "auto: compare CAND with the latest comparable run of the history (same workload, target "
                   "and settings hash) as BASE; --tag, --target, --since narrow the choice")
      ->check(CLI::IsMember({"auto"}))
      ->group(H);
  check
      ->add_option("--trend", o.trend,
                   "Change points of this metric (ttft_ms.p99, output_token_throughput_tps, ...) across the "
                   "history's runs like the latest one; exit 1 when the last change is a regression")
      ->group(H);
  check->add_option("--trend-pvalue", o.trend_pvalue, "--trend: the change points' significance level")
      ->capture_default_str()
      ->group(H);
  check
      ->add_option(
          "--trend-min-change", o.trend_min_change,
          "--trend: a change point's relative change of the mean must exceed this (Otava's magnitude)")
      ->capture_default_str()
      ->group(H);
  add_filter_options(check, o.f, H);
  check->add_option("--limit", o.f.limit, "--trend: the newest this many runs (0: all)")->group(H);
}

std::optional<int> run_check_history(const CheckHistoryOptions& o, std::vector<std::string>& runs,
                                     const std::string& format, std::ostream& out, std::ostream& err) {
  if (!o.trend.empty()) {
    if (!o.baseline.empty()) throw UsageError("check: --trend and --baseline cannot be combined");
    if (!runs.empty()) throw UsageError("check --trend METRIC reads the history: name no run directory");
    return run_trend(o, format, out);
  }
  if (o.baseline.empty()) return std::nullopt;
  if (runs.size() != 1) throw UsageError("check --baseline auto CAND: name the candidate run only");
  const fs::path path = history_path(o.f.history);
  const analyze::History h(path, /*create=*/false);
  const analyze::HistoryRun cand = candidate_of(h, runs[0]);
  const analyze::HistoryFilter narrow = filter_of(o.f);  // --tag, --target, --command, --workload, --since
  const auto base = h.latest_comparable(cand, narrow);
  if (!base)
    throw UsageError(
        fmt::format("check --baseline auto: no comparable run before {} in the history {} (same workload {}, "
                    "target {} and "
                    "settings {}{}; complete runs only); name BASE yourself",
                    runs[0], path.string(), cand.workload_hash, narrow.target.value_or(cand.target),
                    cand.settings_hash, narrow.tag ? ", tagged " + *narrow.tag : std::string()));
  std::error_code ec;
  if (!fs::is_directory(base->path, ec))
    throw UsageError(fmt::format("check --baseline auto: the comparable run #{} was in {}, which is gone",
                                 base->id, base->path));
  (format == "text" ? out : err) << fmt::format(
      "baseline (auto): {} (history run #{}, finished {} UTC{})\n", base->path, base->id,
      utc_text(base->finished_unix), base->target_version.empty() ? "" : ", " + base->target_version);
  runs.insert(runs.begin(), base->path);
  return std::nullopt;
}

}  // namespace tokenscope::cli
