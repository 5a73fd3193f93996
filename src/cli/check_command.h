// `tokenscope check BASE CAND` / `tokenscope check RUN`: the regression
// checklist (docs/check.md). Exit 0 when nothing regressed, 1 when an item
// regressed, 2 on bad input.
#pragma once

#include <ostream>

#include "cli/command.h"

#include "analyze/checklist.h"

namespace tokenscope::cli {

Command add_check_command(CLI::App& app);

// The table: one row per item (its decisive finding), then the verdict.
// verbose: every finding of every item, each with its note under it.
void print_check_table(std::ostream& os, const analyze::CheckResult& r, bool verbose);
// The same as a Markdown table (for a pull-request comment).
std::string check_markdown(const analyze::CheckResult& r);

}  // namespace tokenscope::cli
