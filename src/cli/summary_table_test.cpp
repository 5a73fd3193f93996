// The terminal summary: latency cells never run into their neighbours, and
// what a cell shows reads back as the value it stands for.
#include "cli/summary_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/summary.h"

namespace tokenscope::cli {
namespace {

// The milliseconds a cell shows ("12.34", "1.50s", "2.00m", "3h"), and half a
// unit of its last digit in milliseconds (its rounding error).
struct Shown {
  double ms;
  double half_step_ms;
};

Shown read_cell(const std::string& cell) {
  std::string number = cell;
  double per = 1.0;
  if (!number.empty() && !std::isdigit(static_cast<unsigned char>(number.back()))) {
    const char unit = number.back();
    number.pop_back();
    per = unit == 's' ? 1e3 : unit == 'm' ? 60e3 : unit == 'h' ? 3600e3 : NAN;
    EXPECT_FALSE(std::isnan(per)) << "unknown unit in '" << cell << "'";
  }
  EXPECT_EQ(number.find_first_not_of("0123456789."), std::string::npos) << "'" << cell << "'";
  const auto dot = number.find('.');
  const int decimals = dot == std::string::npos ? 0 : static_cast<int>(number.size() - dot - 1);
  return {std::stod(number) * per, 0.5 * std::pow(10.0, -decimals) * per};
}

TEST(FormatMsCell, LeavesALeadingSpaceAndReadsBackFrom1UsTo1e9Ms) {
  std::vector<double> values;
  for (double v = 1e-3; v <= 1e9; v *= std::pow(10.0, 1.0 / 16)) values.push_back(v);
  // Where rounding adds a digit or a unit changes.
  for (double v : {9.995, 99.995, 999.995, 9999.995, 99999.995, 999999.95, 9999999.5, 59999.5, 999999.995,
                   5999999.5, 59999999.5, 99999999.5, 359999999.5, 999999999.5, 1e9})
    values.push_back(v);
  for (const std::size_t width : {std::size_t{10}, std::size_t{12}}) {
    for (double v : values) {
      const std::string cell = format_ms_cell(v, width);
      SCOPED_TRACE(std::to_string(v) + " ms, width " + std::to_string(width) + ": '" + cell + "'");
      ASSERT_FALSE(cell.empty());
      EXPECT_LT(cell.size(), width);  // right-aligned, a space stays before it
      EXPECT_EQ(cell.find(' '), std::string::npos);
      const Shown s = read_cell(cell);
      EXPECT_LE(std::abs(s.ms - v), s.half_step_ms * (1 + 1e-9)) << "shows " << s.ms << " ms";
      // Never coarser than 3 significant digits (a unit switch keeps the precision useful).
      EXPECT_LE(s.half_step_ms, 0.005 * v + 0.005) << "shows " << s.ms << " ms";
    }
  }
}

TEST(FormatMsCell, MillisecondsWhileTheyFit) {
  EXPECT_EQ(format_ms_cell(0.004, 10), "0.00");
  EXPECT_EQ(format_ms_cell(1234.5678, 10), "1234.57");
  EXPECT_EQ(format_ms_cell(109508.19, 10), "109508.19");
  EXPECT_EQ(format_ms_cell(99999.999, 10), "100000.00");
  EXPECT_EQ(format_ms_cell(1234567.8, 10), "1234567.8");
  EXPECT_EQ(format_ms_cell(12345678.9, 10), "12345679");
  EXPECT_EQ(format_ms_cell(123456789.0, 10), "123456789");
  EXPECT_EQ(format_ms_cell(1e9, 10), "1000000s");
  EXPECT_EQ(format_ms_cell(109508.19, 8), "109508");
  EXPECT_EQ(format_ms_cell(1234567.8, 8), "1234568");
  EXPECT_EQ(format_ms_cell(12345678.9, 8), "12346s");
}

// A summary with six-digit latencies (as a 109,508.19 ms p99 once printed
// "61175.84109508.19114156.48"): every cell keeps its column and a space.
TEST(SummaryTable, SixDigitLatenciesStayInTheirColumns) {
  SummaryBuilder b;
  RequestRecord r;
  r.t_sched = r.t_send = 0;
  r.event_times = {1'000'000, 2'000'000};
  r.event_tokens = {1, 1};
  r.t_first_token = 1'000'000;
  r.t_last_token = r.t_close = 2'000'000;
  r.output_tokens = 2;
  b.add(r);
  nlohmann::json s = b.build();
  s["ttft_ms"]["mean"] = 50000.5;
  s["ttft_ms"]["min"] = 0.004;
  s["ttft_ms"]["p50"] = 1234.5678;
  s["ttft_ms"]["p90"] = 61175.84;
  s["ttft_ms"]["p95"] = 99999.999;
  s["ttft_ms"]["p99"] = 109508.19;
  s["ttft_ms"]["p99_9"] = 114156.48;
  s["ttft_ms"]["max"] = 1e9;
  SummaryHeader h;
  h.title = "test";
  h.client_rows = true;
  std::ostringstream os;
  print_summary_table(os, h, s);
  const std::string out = os.str();
  const std::string expected_row = std::string("TTFT        ") + "  50000.50" + "      0.00" + "   1234.57" +
                                   "  61175.84" + " 100000.00" + " 109508.19" + " 114156.48" + "  1000000s";
  EXPECT_NE(out.find("\n" + expected_row + "\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("61175.84109508.19"), std::string::npos) << out;
  // Every latency row: a 12-character label, then eight 10-character cells,
  // each starting with a space.
  std::istringstream in(out);
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("(ms)", 0) != 0 && line.rfind("TTFT", 0) != 0 && line.rfind("E2E", 0) != 0 &&
        line.rfind("ITL", 0) != 0 && line.rfind("ICL", 0) != 0 && line.rfind("TPOT", 0) != 0 &&
        line.rfind("send lag", 0) != 0)
      continue;
    ++rows;
    ASSERT_EQ(line.size(), 12u + 8 * 10) << line;
    for (std::size_t c = 12; c < line.size(); c += 10) EXPECT_EQ(line[c], ' ') << line;
  }
  EXPECT_EQ(rows, 1 + 7);  // the header; TTFT, TTFT sched, TPOT, ITL, ICL, E2E, send lag
}

// Completed requests without usage get a row that says what it means.
TEST(SummaryTable, RequestsWithoutUsageAreNamed) {
  SummaryBuilder b;
  RequestRecord r;
  r.t_sched = r.t_send = 0;
  r.event_times = {1'000'000};
  r.event_tokens = {1};
  r.t_first_token = r.t_last_token = r.t_close = 1'000'000;
  r.output_tokens = -1;  // the server sent no usage
  b.add(r);
  SummaryHeader h;
  h.client_rows = true;
  std::ostringstream os;
  print_summary_table(os, h, b.build());
  EXPECT_NE(os.str().find("no usage          1 completed requests came without a usage count: their output "
                          "tokens count as 0; give --tokenizer to count them\n"),
            std::string::npos)
      << os.str();
  h.client_rows = false;  // sim: no client rows
  std::ostringstream sim;
  print_summary_table(sim, h, b.build());
  EXPECT_EQ(sim.str().find("no usage"), std::string::npos) << sim.str();
}

}  // namespace
}  // namespace tokenscope::cli
