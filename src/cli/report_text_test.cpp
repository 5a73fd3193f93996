#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "analyze/run_data.h"
#include "cli/report_command.h"
#include "report/report_data.h"

namespace tokenscope::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kTestdata = fs::path(TOKENSCOPE_SOURCE_DIR) / "src/report/testdata";

// The text report of runs, compared with a golden file (TOKENSCOPE_UPDATE_GOLDEN=1
// rewrites it); returns the text.
std::string expect_text_golden(const std::vector<std::filesystem::path>& runs, const std::string& name) {
  std::ostringstream os;
  print_report_text(os, report::report_data(report::load_report_input(runs)));
  const fs::path golden = kTestdata / "golden" / name;
  if (std::getenv("TOKENSCOPE_UPDATE_GOLDEN")) {
    std::ofstream(golden, std::ios::binary) << os.str();
    return os.str();
  }
  std::ifstream f(golden, std::ios::binary);
  std::stringstream want;
  want << f.rdbuf();
  EXPECT_EQ(os.str(), want.str()) << "TOKENSCOPE_UPDATE_GOLDEN=1 rewrites " << golden;
  return os.str();
}

TEST(ReportText, GoldenTablesOfAPartialAndASampledRun) {
  expect_text_golden({kTestdata / "partial", kTestdata / "sampled"}, "report.txt");
}

TEST(ReportText, GoldenTablesOfASimRunWithTenantsAndTheSlowestRequests) {
  const std::string text = expect_text_golden({kTestdata / "sim"}, "report_sim.txt");
  // What the golden file holds, said plainly.
  EXPECT_THAT(text, HasSubstr("per tenant"));
  EXPECT_THAT(text, HasSubstr("slowest (ms)"));
}

TEST(ReportText, ShowsTheSummaryTableWarningsAndNotes) {
  const auto in = report::load_report_input({kTestdata / "sampled"});
  std::ostringstream os;
  print_report_text(os, report::report_data(in));
  const std::string t = os.str();
  EXPECT_THAT(t, HasSubstr("tokenscope report: sampled (sim)"));
  EXPECT_THAT(t, HasSubstr("3 total, 2 completed, 1 failed"));
  EXPECT_THAT(t, HasSubstr("TTFT"));
  EXPECT_THAT(t,
              HasSubstr("server            preemptions 1, prefix_cache_hit_rate 0.25, requests_finished 2"));
  EXPECT_THAT(t, HasSubstr("server_ttft_seconds: mean 0.075"));
  EXPECT_THAT(t, HasSubstr("WARNING: scrape errors: server"));
  EXPECT_THAT(t, HasSubstr("note: run.json has no summary"));
}

}  // namespace
}  // namespace tokenscope::cli
