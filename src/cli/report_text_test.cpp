#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "analyze/run_data.h"
#include "cli/check_command.h"
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

// A run with agentic tasks (src/report/testdata/tasks): its summary in
// lines under the run's table; a run without tasks has none.
TEST(ReportText, TheTasksSummaryOfARunWithTasks) {
  std::ostringstream os;
  print_report_text(os, report::report_data(report::load_report_input({kTestdata / "tasks"})));
  const std::string t = os.str();
  EXPECT_THAT(t,
              HasSubstr("tasks             3 total, 1 ok, 1 failed, 1 cancelled (pass rate 50.0%); 1 warm-up "
                        "apart\n"));
  EXPECT_THAT(t, HasSubstr("  completion      p50 1999 [1999, 1999] ms, p90 1999 [1999, 1999] ms, p99 1999 "
                           "[1999, 1999] ms\n"));
  EXPECT_THAT(t, HasSubstr("  goodput         1 tasks within their SLO, 0.28/s over 3.6 s\n"));
  EXPECT_THAT(t,
              HasSubstr("  per task        3.00 steps, 1.67 model calls, 1.33 tool calls, 100 prompt tokens, "
                        "6 output tokens\n"));
  EXPECT_THAT(t, HasSubstr("  critical path   model 1599.0 ms, tool 400.0 ms, client 0.0 ms, queue 0.0 ms"));
  EXPECT_THAT(t, HasSubstr("  failures        http 1 (failed steps)\n"));
  EXPECT_THAT(t, HasSubstr("  failed at step  api 1\n"));
  EXPECT_THAT(t, HasSubstr("  retried         http 2 (attempts)\n"));
  EXPECT_THAT(t, HasSubstr("  tool latency    weather 1 calls, p50 400.00 ms, p99 400.00 ms\n"));
  EXPECT_THAT(t,
              HasSubstr("  class research  2 tasks, 1 ok, 1 failed, 0 cancelled, p99 1999 ms; p90 past the "
                        "failed tasks / 20000 ms; pass rate 50.0% / 90.0%: SLO FAIL\n"));

  std::ostringstream plain;
  print_report_text(plain, report::report_data(report::load_report_input({kTestdata / "sampled"})));
  EXPECT_THAT(plain.str(), ::testing::Not(HasSubstr("tasks ")));
}

// check -v prints every finding with its note under it (why an interval is
// missing, what a server does not count); without -v, the decisive finding
// alone and no notes.
TEST(CheckText, VerbosePrintsEachFindingsNoteUnderIt) {
  analyze::CheckResult r;
  r.base_name = "base";
  r.cand_name = "cand";
  r.overall = analyze::Verdict::kInconclusive;
  analyze::ItemResult it;
  it.number = 1;
  it.id = "latency-model";
  it.title = "latency model";
  it.verdict = analyze::Verdict::kInconclusive;
  analyze::Finding f;
  f.metric = "TTFT per request queued ahead";
  f.unit = f.change_unit = "ms";
  f.change = 45.25;
  f.threshold = "tolerance 5 ms";
  f.verdict = analyze::Verdict::kInconclusive;
  f.note = "too few blocks of requests (500 requests at least) to bound the change";
  analyze::Finding g;
  g.metric = "ITL per request in the batch";
  g.unit = g.change_unit = "ms";
  g.threshold = "tolerance 0.05 ms";
  g.verdict = analyze::Verdict::kNoData;
  g.note = "not fitted in the candidate: every request decoded beside the same number of others";
  it.findings = {f, g};
  it.decisive = 0;
  r.items.push_back(it);
  // An item whose only finding has no data: its summary says why.
  analyze::ItemResult none;
  none.number = 12;
  none.id = "contention";
  none.title = "contention";
  none.verdict = analyze::Verdict::kNoData;
  none.summary = "mean host_cpu_pressure_some: too few values to compare (2 against 2; 3 each at least)";
  analyze::Finding h;
  h.metric = "mean host_cpu_pressure_some";
  h.threshold = "tolerance 0.05 share";
  h.note = "too few values to compare (2 against 2; 3 each at least)";
  none.findings = {h};
  none.decisive = 0;
  r.items.push_back(none);
  std::ostringstream verbose, plain;
  print_check_table(verbose, r, true);
  print_check_table(plain, r, false);
  const std::string v = verbose.str();
  const auto first = v.find("TTFT per request queued ahead");
  const auto note1 = v.find("note: too few blocks of requests (500 requests at least) to bound the change");
  const auto second = v.find("ITL per request in the batch");
  const auto note2 = v.find("note: not fitted in the candidate: every request decoded beside the same");
  ASSERT_NE(first, std::string::npos) << v;
  ASSERT_NE(note1, std::string::npos) << v;
  ASSERT_NE(second, std::string::npos) << v;
  ASSERT_NE(note2, std::string::npos) << v;
  EXPECT_LT(first, note1);
  EXPECT_LT(note1, second);
  EXPECT_LT(second, note2);
  EXPECT_THAT(v, HasSubstr("45.2 ms"));
  EXPECT_THAT(plain.str(), HasSubstr("TTFT per request queued ahead"));
  EXPECT_EQ(plain.str().find("note:"), std::string::npos) << plain.str();
  EXPECT_EQ(plain.str().find("ITL per request"), std::string::npos) << plain.str();
  EXPECT_THAT(plain.str(),
              HasSubstr("no-data       mean host_cpu_pressure_some: too few values to compare (2 "
                        "against 2; 3 each at least)\n"));
  EXPECT_THAT(check_markdown(r),
              HasSubstr("| 12 | contention | **no-data** | mean host\\_cpu\\_pressure\\_some: too few "
                        "values to compare (2 against 2; 3 each at least) |  |  |  |"));
}

}  // namespace
}  // namespace tokenscope::cli
