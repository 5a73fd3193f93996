// Renders report_data() (report_data.h): one self-contained HTML page, or a
// Markdown summary for a pull-request comment.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tokenscope::report {

// The page: uPlot and the page's script inlined, the data in a
// <script type="application/json" id="report-data"> element. Opens offline:
// nothing is loaded from anywhere.
std::string render_html(const nlohmann::json& data);

// The data as JSON text that can sit inside a <script> element: every '<'
// written as \u003c, so that no "</script>" or "<!--" can end it early.
std::string script_safe_json(const nlohmann::json& data);

// One table of the runs (requests, failures, throughput, latency
// percentiles), the sweeps' curves, then the warnings and notes.
std::string render_markdown(const nlohmann::json& data);

}  // namespace tokenscope::report
