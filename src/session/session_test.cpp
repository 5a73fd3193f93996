// The sim run as a library call and the finishers every run goes through.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "analyze/history.h"
#include "core/error.h"
#include "core/temp_dir.h"
#include "session/finishers.h"
#include "session/sim_run.h"

namespace tokenscope::session {
namespace {

namespace fs = std::filesystem;

SimRunSettings small_run(const fs::path& out) {
  SimRunSettings s;
  s.workload.num_requests = 40;
  s.workload.rate_rps = 20.0;
  s.workload.input_len = workload::parse_input_len("uniform:64:256");
  s.workload.output_len = workload::parse_output_len("uniform:8:32");
  s.workload.seed = 7;
  s.out = out.string();
  return s;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

std::size_t lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

TEST(SimRun, WritesTheRunDirectoryAndItsCacheAndReturnsTheSummary) {
  const TempDir tmp("session");
  std::atomic<bool> stop{false};
  std::ostringstream log;
  SimRunSettings s = small_run(tmp / "run");
  s.finish.history.disabled = true;
  const SimRunResult r = run_sim(s, stop, log);
  EXPECT_FALSE(r.report.interrupted);
  EXPECT_EQ(r.summary["requests_completed"], 40);
  EXPECT_EQ(r.report.counters.requests_finished, 40u);
  const auto run = read_json(tmp / "run" / "run.json");
  EXPECT_EQ(run["tool"]["command"], "sim");
  EXPECT_EQ(run["summary"], r.summary);
  EXPECT_EQ(run["settings"]["requested"], requested_settings(s));
  EXPECT_FALSE(run["partial"].get<bool>());
  EXPECT_EQ(lines_of(tmp / "run" / "requests.jsonl"), 40u);
  EXPECT_EQ(lines_of(tmp / "run" / "steps.jsonl"), r.report.counters.steps);
  EXPECT_TRUE(fs::exists(tmp / "run" / "samples.jsonl"));
  EXPECT_TRUE(fs::exists(tmp / "run" / ".tokenscope-cache"));
  EXPECT_FALSE(fs::exists(tmp / "run" / "report.html"));
  EXPECT_FALSE(r.report_written);
  EXPECT_EQ(log.str(), "");
}

TEST(SimRun, WithoutADirectoryOnlyTheSummaryAndWithoutStepsSamplesOrCacheNoneOfThem) {
  const TempDir tmp("session");
  std::atomic<bool> stop{false};
  std::ostringstream log;
  SimRunSettings s = small_run("");
  const SimRunResult bare = run_sim(s, stop, log);
  EXPECT_EQ(bare.summary["requests_completed"], 40);
  EXPECT_TRUE(fs::is_empty(tmp.path()));

  s = small_run(tmp / "run");
  s.steps = s.samples = s.cache = false;
  s.finish.history.disabled = true;
  const SimRunResult r = run_sim(s, stop, log);
  // The same seeded run: the same summary with or without its files.
  EXPECT_EQ(r.summary, bare.summary);
  EXPECT_FALSE(fs::exists(tmp / "run" / "steps.jsonl"));
  EXPECT_FALSE(fs::exists(tmp / "run" / "samples.jsonl"));
  EXPECT_FALSE(fs::exists(tmp / "run" / ".tokenscope-cache"));
  EXPECT_TRUE(read_json(tmp / "run" / "run.json")["observe"]["samples_file"].is_null());
}

TEST(SimRun, AnInterruptedRunIsPartialAndLeavesNoCache) {
  const TempDir tmp("session");
  std::atomic<bool> stop{true};  // set from the start: seen at the engine's first check (256 iterations)
  std::ostringstream log;
  SimRunSettings s = small_run(tmp / "run");
  s.workload.num_requests = 3000;
  s.finish.history.disabled = true;
  const SimRunResult r = run_sim(s, stop, log);
  EXPECT_TRUE(r.report.interrupted);
  EXPECT_LT(r.report.counters.requests_finished, 3000u);
  EXPECT_TRUE(read_json(tmp / "run" / "run.json")["partial"].get<bool>());
  EXPECT_FALSE(fs::exists(tmp / "run" / ".tokenscope-cache"));
}

TEST(SimRun, BadSettingsAreUsageErrorsBeforeAnythingIsWritten) {
  const TempDir tmp("session");
  std::atomic<bool> stop{false};
  std::ostringstream log;
  SimRunSettings s = small_run(tmp / "run");
  s.workload.rate_rps = 0;
  EXPECT_THROW(run_sim(s, stop, log), UsageError);
  s = small_run(tmp / "run");
  s.engine.engine.model = "no-such-model";
  EXPECT_THROW(run_sim(s, stop, log), UsageError);
  EXPECT_FALSE(fs::exists(tmp / "run"));
}

TEST(Finishers, RegisterEveryRunAndWriteThePageOnce) {
  const TempDir tmp("session");
  std::atomic<bool> stop{false};
  std::ostringstream log;
  SimRunSettings s = small_run(tmp / "a");
  s.finish.history.path = (tmp / "history.db").string();
  s.finish.report = true;
  const SimRunResult a = run_sim(s, stop, log);
  EXPECT_TRUE(a.report_written);
  EXPECT_TRUE(fs::exists(tmp / "a" / "report.html"));
  // A second run, finished by hand: registered without a page.
  s = small_run(tmp / "b");
  s.finish.history.disabled = true;
  run_sim(s, stop, log);
  Finishers f;
  f.history.path = (tmp / "history.db").string();
  EXPECT_FALSE(finish_run(f, (tmp / "b").string(), {(tmp / "b").string()}, 1.0e9, log));
  EXPECT_FALSE(fs::exists(tmp / "b" / "report.html"));
  EXPECT_EQ(log.str(), "");
  const analyze::History h(tmp / "history.db", /*create=*/false);
  const auto runs = h.list({});
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].command, "sim");
  EXPECT_EQ(runs[1].command, "sim");
}

TEST(Finishers, AFailureIsToldAndDoesNotThrow) {
  const TempDir tmp("session");
  std::ostringstream log;
  Finishers f;
  f.report = true;
  // A history that cannot be a database, a run directory that is no run.
  std::ofstream(tmp / "not-a-db") << "plain text, not SQLite";
  f.history.path = (tmp / "not-a-db").string();
  fs::create_directories(tmp / "empty");
  EXPECT_FALSE(finish_run(f, (tmp / "empty").string(), {(tmp / "empty").string()}, std::nullopt, log));
  EXPECT_NE(log.str().find("was not registered in the history"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("report.html not written"), std::string::npos) << log.str();
}

}  // namespace
}  // namespace tokenscope::session
