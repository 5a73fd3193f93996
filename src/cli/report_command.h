// `tokenscope report RUN [RUN...]`: one self-contained HTML page of one or
// more runs (and sweeps), or their summary as text, JSON or Markdown.
#pragma once

#include <ostream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace tokenscope::cli {

CLI::App* add_report_command(CLI::App& app);
int run_report();

// bench --report, sim --report: dir/report.html at the end of a run. A
// failure is told on log and does not fail the run (its results are on
// disk); returns whether the page was written.
bool write_run_report(const std::string& dir, std::ostream& log);

// The terminal summary of report::report_data(): per run the summary table
// (as bench and sim print it), the server's own counters, warnings and
// notes; per sweep its curve.
void print_report_text(std::ostream& os, const nlohmann::json& data);

}  // namespace tokenscope::cli
