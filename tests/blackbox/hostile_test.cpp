// Black-box tests of hostile run directories and hostile servers
// (docs/reliability.md "Files written", "Files read", "Bounds" and "Output of
// outside text"): what a user gets from a run directory someone else made (a
// tarball attached to a bug report) and from another team's server. Each test
// ran against the build before the fix and failed there: a file written
// through a planted link, a run that hangs on a FIFO, a crash on deep JSON,
// terminal escape sequences printed raw.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "process.h"
#include "server.h"

namespace tokenscope::testing {
namespace {

namespace fs = std::filesystem;

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tokenscope_hostile_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A small simulated run directory (a few seconds of load, fixed seed).
  // history: register it there (else not at all).
  fs::path sim_run(const std::string& name, const std::string& history = "") {
    const fs::path out = dir_ / name;
    std::vector<std::string> argv = {kBin,        "sim",         "--num-requests", "40",           "--rate",
                                     "20",        "--input-len", "fixed:64",       "--output-len", "fixed:16",
                                     "--tenants", "2",           "--out",          out.string()};
    if (history.empty()) {
      argv.push_back("--no-history");
    } else {
      argv.push_back("--history");
      argv.push_back(history);
    }
    const auto r = run_process(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
  }
  static void write(const fs::path& p, const std::string& text) {
    std::ofstream(p, std::ios::binary) << text;
  }
  static std::string nested(std::size_t levels) {
    return std::string(levels, '[') + std::string(levels, ']');
  }

  fs::path dir_;
};

bool has_control_bytes(const std::string& s) {
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n') || u == 0x7f) return true;
  }
  return false;
}

// A planted link where report writes its page (and the temporary beside it)
// is never written through: the file it points at keeps its bytes.
TEST_F(Hostile, ReportNeverWritesThroughAPlantedLink) {
  const fs::path run = sim_run("run");
  const fs::path precious = dir_ / "precious";
  write(precious, "keep me");
  fs::remove(run / "report.html");
  fs::create_symlink(precious, run / "report.html.tmp");
  auto r = run_process({kBin, "report", run.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(precious), "keep me");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(run / "report.html")));
  // The page itself a link: replaced by the page, its target untouched.
  fs::remove(run / "report.html");
  fs::create_symlink(precious, run / "report.html");
  r = run_process({kBin, "report", run.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(precious), "keep me");
  // A dangling link where sim --out would write requests.jsonl: refused.
  const fs::path out = dir_ / "out";
  fs::create_directories(out);
  fs::create_symlink(dir_ / "created-through-link", out / "requests.jsonl");
  r = run_process({kBin, "sim", "--num-requests", "5", "--out", out.string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "created-through-link"));
}

// A FIFO as any file of a run directory is named and refused at once, never
// waited on (it used to block report and check forever).
TEST_F(Hostile, AFifoInARunDirectoryIsRefusedNotWaitedOn) {
  const fs::path base = sim_run("base");
  for (const char* name : {"requests.jsonl", "steps.jsonl", "check.json", "phases.json", "run.json"}) {
    const fs::path run = dir_ / (std::string("fifo-") + name);
    fs::copy(base, run, fs::copy_options::recursive);
    fs::remove(run / name);
    ASSERT_EQ(::mkfifo((run / name).c_str(), 0600), 0);
    fs::remove(run / ".tokenscope-cache");
    for (const std::vector<std::string>& argv :
         {std::vector<std::string>{kBin, "report", run.string(), "--format", "text"},
          std::vector<std::string>{kBin, "check", run.string()}}) {
      const auto r = run_process(argv, 60);
      EXPECT_EQ(r.exit_code, 2) << name << " " << argv[1] << ": " << r.err;
      EXPECT_NE(r.err.find("is not a regular file"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find(name), std::string::npos) << r.err;
    }
  }
}

// JSON nested 100,000-200,000 deep (a few hundred KB) in check.json, in
// run.json's server and in settings.requested (check --baseline auto
// compares it): exit 2 naming the file and the bound, not a crash on the
// stack (SIGSEGV before).
TEST_F(Hostile, DeeplyNestedJsonIsRefusedWithTheFileAndTheDepth) {
  const fs::path base = sim_run("base");
  const std::string run_json = slurp(base / "run.json");

  const fs::path check_dir = dir_ / "deep-check";
  fs::copy(base, check_dir, fs::copy_options::recursive);
  write(check_dir / "check.json", "{\"items\": " + nested(100000) + "}");
  auto r = run_process({kBin, "report", check_dir.string(), "--format", "text"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("check.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nested deeper than 256 levels"), std::string::npos) << r.err;

  const fs::path server_dir = dir_ / "deep-server";
  fs::copy(base, server_dir, fs::copy_options::recursive);
  fs::remove(server_dir / ".tokenscope-cache");
  const auto at = run_json.find('{', 1);
  ASSERT_NE(at, std::string::npos);
  write(server_dir / "run.json", run_json.substr(0, at + 1) + "\"server\": {\"x\": " + nested(200000) +
                                     "}, " + run_json.substr(at + 1));
  for (const char* command : {"report", "check"}) {
    r = run_process({kBin, command, server_dir.string(), "--format", "text"});
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.err;
    EXPECT_NE(r.err.find("run.json"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("nested deeper than 256 levels"), std::string::npos) << r.err;
  }

  // settings.requested nested deep, found by check --baseline auto through
  // the history.
  const fs::path history = dir_ / "history.db";
  sim_run("first", history.string());
  const fs::path deep = dir_ / "deep-settings";
  fs::copy(base, deep, fs::copy_options::recursive);
  fs::remove(deep / ".tokenscope-cache");
  const auto req = run_json.find("\"requested\": {");
  ASSERT_NE(req, std::string::npos);
  write(deep / "run.json",
        run_json.substr(0, req + 14) + "\"deep\": " + nested(150000) + ", " + run_json.substr(req + 14));
  r = run_process({kBin, "check", deep.string(), "--baseline", "auto", "--history", history.string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.term_signal, 0);
  EXPECT_NE(r.err.find("nested deeper than 256 levels"), std::string::npos) << r.err;

  // A thresholds file nested past yaml-cpp's bound says so.
  const fs::path thresholds = dir_ / "deep.yaml";
  write(thresholds, std::string(5000, '[') + std::string(5000, ']') + "\n");
  r = run_process({kBin, "check", base.string(), "--thresholds", thresholds.string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("deep.yaml"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("YAML nested too deep"), std::string::npos) << r.err;
}

// A link loop among a sweep's rate-* directories is a note, and a history
// file that is a link loop is said to be one (not "does not exist").
TEST_F(Hostile, LinkLoopsAreNamedAsSuch) {
  const fs::path sweep = dir_ / "sweep";
  fs::create_directories(sweep);
  fs::copy(sim_run("r1"), sweep / "rate-1", fs::copy_options::recursive);
  write(sweep / "sweep.json", R"({"rates": [1, 2]})");
  fs::create_symlink(sweep / "rate-2", sweep / "rate-2");
  auto r = run_process({kBin, "report", sweep.string(), "--format", "text"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rate-2: left out: Too many levels of symbolic links"), std::string::npos) << r.out;

  const fs::path loop = dir_ / "loop.db";
  fs::create_symlink(loop, loop);
  r = run_process({kBin, "history", "--history", loop.string()});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("Too many levels of symbolic links"), std::string::npos) << r.err;
}

// A hostile server's model id (screen clear, window title, an OSC 52
// clipboard write, a newline forging a line) reaches the terminal escaped
// on bench's first line, and the report of the run in text and Markdown
// shows names as text.
TEST_F(Hostile, OutsideTextIsShownNotObeyed) {
  const std::string model = "m\x1b[2J\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\nFAILED: forged\xe2\x80\xae";
  Server server(dir_, {"--served-model-name", model});
  const fs::path run = dir_ / "run";
  auto r = run_process({kBin, "bench", "--target", server.url(""), "--num-requests", "3", "--rate", "inf",
                        "--input-len", "fixed:8", "--output-len", "fixed:2", "--out", run.string(),
                        "--progress", "none", "--no-history"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(has_control_bytes(r.out)) << r.out;
  EXPECT_NE(r.out.find("m\\x1b[2J\\x1b]0;pwned\\x07"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\nFAILED: forged"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\\u{202e}"), std::string::npos) << r.out;

  // Tenant names in the run's files and a note that quotes them.
  std::string requests = slurp(run / "requests.jsonl");
  for (std::size_t at = 0; (at = requests.find("\"tenant\":\"", at)) != std::string::npos; at += 10) {
    const auto end = requests.find('"', at + 10);
    requests.replace(at + 10, end - at - 10, "t\\u001b]0;x\\u0007|[a](b)<i>");
  }
  write(run / "requests.jsonl", requests);
  fs::remove(run / ".tokenscope-cache");
  r = run_process({kBin, "report", run.string(), "--format", "text"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(has_control_bytes(r.out)) << r.out;
  // Markdown for a pull-request comment: a run named like markup stays text.
  const fs::path marked = dir_ / "r[x](http:y)<i>|*a*\x1b[1m";
  fs::rename(run, marked);
  r = run_process({kBin, "report", marked.string(), "--format", "md"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(has_control_bytes(r.out)) << r.out;
  EXPECT_EQ(r.out.find("<i>"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("r\\[x\\](http:y)&lt;i&gt;\\|\\*a\\*\\\\x1b\\[1m"), std::string::npos) << r.out;
  // The history's path column.
  const fs::path history = dir_ / "h.db";
  sim_run("odd\x1b[31mname", history.string());
  r = run_process({kBin, "history", "--history", history.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(has_control_bytes(r.out)) << r.out;
  EXPECT_NE(r.out.find("odd\\x1b[31mname"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tokenscope::testing
