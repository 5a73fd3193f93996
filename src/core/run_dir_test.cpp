#include "core/run_dir.h"

#include <gtest/gtest.h>

#include "core/temp_dir.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/record.h"

namespace tokenscope {
namespace {

std::filesystem::path temp_dir(const std::string& name) {
  auto p =
      std::filesystem::temp_directory_path() / ("tokenscope_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p;
}

TEST(RunDirectory, RequestsAreOnDiskAsSoonAsAppended) {
  const auto dir = temp_dir("durable");
  RunDirectory run(dir / "nested");
  run.requests().append_line(R"({"id":1})");
  // Not closed, not flushed explicitly: the line is already readable.
  EXPECT_EQ(read_file(dir / "nested" / "requests.jsonl"), "{\"id\":1}\n");
  run.steps().append_line(R"({"step":0})");
  run.close();
  EXPECT_EQ(read_file(dir / "nested" / "steps.jsonl"), "{\"step\":0}\n");
  std::filesystem::remove_all(dir);
}

TEST(RunDirectory, RunJsonIsWrittenWhole) {
  const auto dir = temp_dir("runjson");
  RunDirectory run(dir);
  run.write_run_json({{"summary", {{"requests_total", 3}}}});
  const auto j = nlohmann::json::parse(read_file(dir / "run.json"));
  EXPECT_EQ(j["summary"]["requests_total"], 3);
  EXPECT_FALSE(std::filesystem::exists(dir / "run.json.tmp"));
  std::filesystem::remove_all(dir);
}

TEST(RunDirectory, FullDiskIsAnIoErrorNamingTheFile) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  JsonlWriter w("/dev/full", true);
  try {
    w.append_line("x");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("No space"), std::string::npos);
  }
}

TEST(RunDirectory, UncreatableDirectoryIsAnIoError) {
  EXPECT_THROW(RunDirectory("/proc/definitely/not/here"), IoError);
}

TEST(RequestRecord, JsonLineHasEveryFieldAndOffsets) {
  RequestRecord r;
  r.id = 7;
  r.tenant = "a\"b";
  r.t_sched = 100;
  r.t_send = 110;
  r.t_first_token = 210;
  r.t_last_token = 410;
  r.t_close = 410;
  r.event_times = {210, 310, 410};
  r.event_tokens = {1, 1, 2};
  r.prompt_tokens = 5;
  r.output_tokens = 4;
  r.outcome = Outcome::kOk;
  std::string line;
  r.append_json(line);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["id"], 7);
  EXPECT_EQ(j["tenant"], "a\"b");
  EXPECT_EQ(j["event_offsets_ns"], nlohmann::json({100, 200, 300}));
  EXPECT_EQ(j["event_tokens"], nlohmann::json({1, 1, 2}));
  EXPECT_EQ(j["outcome"], "ok");
  EXPECT_EQ(j["t_headers_ns"], -1);
  Outcome o;
  EXPECT_TRUE(parse_outcome("rejected", o));
  EXPECT_EQ(o, Outcome::kRejected);
  EXPECT_FALSE(parse_outcome("nope", o));
}

// A run directory handed around (a tarball, a CI artifact) may hold links
// planted where tokenscope writes: no write goes through one.
TEST(SafeWrites, AtomicWritesReplaceAPlantedLinkNotItsTarget) {
  TempDir t("links");
  const std::string victim = t.write("victim", "keep");
  std::filesystem::create_symlink(victim, t / "report.html.tmp");  // the old temporary's name
  std::filesystem::create_symlink(victim, t / "report.html");
  write_file_atomic(t / "report.html", "page");
  EXPECT_EQ(read_file(victim), "keep");
  EXPECT_FALSE(std::filesystem::is_symlink(t / "report.html"));
  EXPECT_EQ(read_file(t / "report.html"), "page");
  EXPECT_TRUE(std::filesystem::is_symlink(t / "report.html.tmp"));  // left alone
  // No temporary is left behind.
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(t.path())) ++entries;
  EXPECT_EQ(entries, 3u);
}

TEST(SafeWrites, ARunFileThatIsALinkIsRefusedNotWrittenThrough) {
  TempDir t("links");
  std::filesystem::create_symlink(t / "elsewhere", t / "requests.jsonl");  // dangling
  EXPECT_THROW(JsonlWriter(t / "requests.jsonl", true), IoError);
  EXPECT_FALSE(std::filesystem::exists(t / "elsewhere"));
  const std::string victim = t.write("victim", "keep");
  std::filesystem::create_symlink(victim, t / "steps.jsonl");
  try {
    JsonlWriter w(t / "steps.jsonl", false);
    ADD_FAILURE() << "wrote through a link";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(victim), "keep");
}

TEST(SafeWrites, ClaimingADirectoryFindsLinksAndOverwriteRemovesOnlyTheLink) {
  TempDir t("links");
  const auto dir = t / "run";
  std::filesystem::create_directory(dir);
  std::filesystem::create_symlink(t / "nowhere", dir / "requests.jsonl");  // dangling
  EXPECT_THROW(claim_run_directory(dir, false, "--out"), UsageError);
  claim_run_directory(dir, true, "--out");
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(dir / "requests.jsonl")));
  EXPECT_FALSE(std::filesystem::exists(t / "nowhere"));
  const std::string victim = t.write("victim", "keep");
  std::filesystem::create_symlink(victim, dir / "run.json");
  EXPECT_THROW(claim_run_directory(dir, false, "--out"), UsageError);
  claim_run_directory(dir, true, "--out");
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(dir / "run.json")));
  EXPECT_EQ(read_file(victim), "keep");
}

// A sweep's listed runs go with --overwrite; a listed name that leaves the
// directory, is a link, or holds no run stays whatever sweep.json says.
TEST(SafeWrites, OverwriteRemovesOnlyTheRunsASweepListsInsideIt) {
  TempDir t("sweep");
  const auto dir = t / "out";
  namespace fs = std::filesystem;
  fs::create_directories(dir / "np-1");
  t.write("out/np-1/run.json", "{}");
  fs::create_directories(dir / "data");  // a user's directory, no run in it
  t.write("out/data/keep.txt", "keep");
  fs::create_directories(t / "outside");
  t.write("outside/run.json", "{}");
  fs::create_directory_symlink(t / "outside", dir / "linked");
  t.write("out/sweep.json",
          std::string(R"({"kind":"server","runs":[{"dir":"np-1"},{"dir":"data"},{"dir":"linked"},)") +
              R"({"dir":"../outside"},{"dir":"..\u0000"},{"dir":"\u0000"},{"dir":"."}]})");
  EXPECT_THROW(claim_run_directory(dir, false, "--out"), UsageError);
  claim_run_directory(dir, true, "--out");
  EXPECT_FALSE(fs::exists(dir / "np-1"));
  EXPECT_FALSE(fs::exists(dir / "sweep.json"));
  EXPECT_EQ(read_file((dir / "data" / "keep.txt").string()), "keep");
  EXPECT_TRUE(fs::exists(t / "outside" / "run.json"));
  EXPECT_TRUE(fs::exists(dir));
}

}  // namespace
}  // namespace tokenscope
