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

}  // namespace
}  // namespace tokenscope
