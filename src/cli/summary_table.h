// The terminal summary shared by sim (and later bench).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tokenscope::cli {

struct SummaryHeader {
  std::string title;
  std::vector<std::string> lines;
  bool client_rows = false;  // bench: schedule-based latencies, send lag, ICL, outcomes, SLOs
};

void print_summary_table(std::ostream& os, const SummaryHeader& header, const nlohmann::json& summary);

}  // namespace tokenscope::cli
