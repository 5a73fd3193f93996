// requests.csv (bench --csv): one row per request record, for spreadsheets.
#pragma once

#include <string>
#include <string_view>

#include "core/record.h"

namespace tokenscope::bench {

// The header line (no newline).
extern const std::string_view kRequestsCsvHeader;
// Appends one row (no newline) to out: times in ns, latencies in ms,
// text fields quoted with line breaks replaced by spaces.
void append_csv_row(std::string& out, const RequestRecord& r);

}  // namespace tokenscope::bench
