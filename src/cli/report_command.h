// `tokenscope report RUN [RUN...]`: one self-contained HTML page of one or
// more runs (and sweeps), or their summary as text, JSON or Markdown.
#pragma once

#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"

namespace tokenscope::cli {

Command add_report_command(CLI::App& app);

// The terminal summary of report::report_data(): per run the summary table
// (as bench and sim print it), the server's own counters, warnings and
// notes; per sweep its curve.
void print_report_text(std::ostream& os, const nlohmann::json& data);

}  // namespace tokenscope::cli
