// The run session's protocol (rundir/run_session.h): every line written and
// handed to the run cache in the order written, the summary fed, run.json
// written at the start and at the end, the finishers in their order around
// the run cache, and no cache for a run that did not reach its end.
#include "rundir/run_session.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/temp_dir.h"

namespace tokenscope::rundir {
namespace {

// A run cache that notes what it was handed, into a log shared with the test.
class NotingCache final : public observe::RunListener {
 public:
  explicit NotingCache(std::vector<std::string>& log) : log_(log) {}
  void add_request(const RequestRecord& r) override { log_.push_back("request " + std::to_string(r.id)); }
  void add_observation(const observe::Observation& o) override { log_.push_back("observation " + o.source); }
  void add_step(const StepRecord& s) override { log_.push_back("step " + std::to_string(s.index)); }
  void finish(const std::filesystem::path& dir) override {
    // The cache's key is run.json as it is now: its last write is done.
    log_.push_back("cache " + read_file(dir / "run.json"));
  }

 private:
  std::vector<std::string>& log_;
};

RequestRecord request(std::uint64_t id) {
  RequestRecord r;
  r.id = id;
  r.tenant = "t";
  r.t_sched = r.t_send = 1000 * static_cast<Nanos>(id);
  r.event_times = {r.t_send + 500};
  r.event_tokens = {1};
  r.t_first_token = r.t_last_token = r.t_close = r.t_send + 500;
  r.output_tokens = 1;
  r.outcome = Outcome::kOk;
  return r;
}

TEST(RunSession, WritesEveryLineHandsItToTheCacheAndFinishesInOrder) {
  TempDir t("session");
  std::vector<std::string> log;
  RunSession session({.dir = t.path(), .cache = std::make_unique<NotingCache>(log)});
  ASSERT_TRUE(session.has_dir());
  session.start({{"partial", true}});
  EXPECT_EQ(nlohmann::json::parse(read_file(t.path() / "run.json"))["partial"], true);
  session.add_request(request(1));
  StepRecord step;
  step.index = 7;
  session.add_step(step);
  observe::Observation ob;
  ob.source = "sim";
  session.add_observation(ob);
  ob.source = "server";
  session.observed(ob);  // written by another writer: the cache only
  session.add_request(request(2));
  EXPECT_EQ(session.summary().requests_completed(), 2u);

  session.add_finisher(FinisherKind::kReadsFinishedRun,
                       [&](FinishedRun& r) { log.push_back("report " + r.run["exports"].dump()); });
  session.add_finisher(FinisherKind::kAddsToRunJson, [&](FinishedRun& r) {
    log.push_back("export");
    r.run["exports"] = {{"perfetto", 1}};
    r.run_json_changed = true;
  });
  nlohmann::json run = {{"partial", false}};
  std::ostringstream out;
  session.finish(run, /*reached_end=*/true, out);

  const std::string final_run = read_file(t.path() / "run.json");
  EXPECT_EQ(nlohmann::json::parse(final_run)["exports"]["perfetto"], 1);
  const std::vector<std::string> expected = {
      "request 1", "step 7", "observation sim",    "observation server",
      "request 2", "export", "cache " + final_run, "report {\"perfetto\":1}"};
  EXPECT_EQ(log, expected);
  // The lines as written.
  std::istringstream requests(read_file(t.path() / "requests.jsonl"));
  std::string line;
  std::vector<std::uint64_t> ids;
  while (std::getline(requests, line)) ids.push_back(nlohmann::json::parse(line)["id"].get<std::uint64_t>());
  EXPECT_EQ(ids, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(nlohmann::json::parse(read_file(t.path() / "steps.jsonl"))["step"], 7);
  EXPECT_EQ(nlohmann::json::parse(read_file(t.path() / "samples.jsonl"))["source"], "sim");
}

TEST(RunSession, AnInterruptedRunGetsItsFinishersButNoCache) {
  TempDir t("session");
  std::vector<std::string> log;
  RunSession session({.dir = t.path(), .cache = std::make_unique<NotingCache>(log)});
  session.add_request(request(1));
  bool finished = false;
  session.add_finisher(FinisherKind::kReadsFinishedRun, [&](FinishedRun& r) { finished = !r.reached_end; });
  nlohmann::json run = {{"partial", true}};
  std::ostringstream out;
  session.finish(run, /*reached_end=*/false, out);
  EXPECT_TRUE(finished);
  EXPECT_EQ(log, std::vector<std::string>{"request 1"});
  EXPECT_EQ(nlohmann::json::parse(read_file(t.path() / "run.json"))["partial"], true);
}

TEST(RunSession, WithoutADirectoryItOnlySumsUp) {
  std::vector<std::string> log;
  RunSession::Options options;  // no directory
  options.cache = std::make_unique<NotingCache>(log);
  RunSession session(std::move(options));
  EXPECT_FALSE(session.has_dir());
  session.add_request(request(1));
  StepRecord step;
  session.add_step(step);
  session.add_observation({});
  bool called = false;
  session.add_finisher(FinisherKind::kReadsFinishedRun, [&](FinishedRun&) { called = true; });
  nlohmann::json run = nlohmann::json::object();
  std::ostringstream out;
  session.finish(run, true, out);
  EXPECT_EQ(session.summary().requests_completed(), 1u);
  EXPECT_TRUE(log.empty());  // no files, no cache
  EXPECT_FALSE(called);
}

TEST(RunSession, AnAbandonedRunKeepsRunJsonAndNoCache) {
  TempDir t("session");
  std::vector<std::string> log;
  {
    RunSession session({.dir = t.path(), .cache = std::make_unique<NotingCache>(log)});
    session.add_request(request(3));
    session.abandon({{"error", "disk full"}});
  }
  EXPECT_EQ(nlohmann::json::parse(read_file(t.path() / "run.json"))["error"], "disk full");
  EXPECT_EQ(log, std::vector<std::string>{"request 3"});
  EXPECT_NE(read_file(t.path() / "requests.jsonl").find("\"id\":3"), std::string::npos);
}

}  // namespace
}  // namespace tokenscope::rundir
