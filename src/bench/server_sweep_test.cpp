#include "bench/server_sweep.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <fstream>

#include "core/error.h"
#include "core/temp_dir.h"

namespace tokenscope::bench {
namespace {

std::string usage_error(const std::vector<std::string>& specs, const std::string& cmd) {
  try {
    parse_server_sweep(specs, cmd);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(ServerSweep, ParsesAGridAndPutsEachPointsValuesInTheCommand) {
  const auto params = parse_server_sweep({"np=1,2,4", "ctx=2048,4096"},
                                         "llama-server -m m.gguf -np {np} -c {ctx} --port 8091");
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].name, "np");
  EXPECT_EQ(params[0].values, (std::vector<std::string>{"1", "2", "4"}));
  const auto grid = server_grid(params);
  ASSERT_EQ(grid.size(), 6u);
  // The first parameter outermost.
  EXPECT_EQ(server_point_dir(grid[0]), "np-1_ctx-2048");
  EXPECT_EQ(server_point_dir(grid[1]), "np-1_ctx-4096");
  EXPECT_EQ(server_point_dir(grid[5]), "np-4_ctx-4096");
  EXPECT_EQ(server_command_for("llama-server -np {np} -c {ctx} --port 8091", grid[3]),
            "llama-server -np 2 -c 4096 --port 8091");
  // The shell's ${VAR} is left alone; a value goes in verbatim.
  EXPECT_EQ(server_command_for("${HOME}/srv --opt {np}", {{"np", "a b"}}), "${HOME}/srv --opt a b");
  EXPECT_EQ(server_grid({}).size(), 1u);
}

TEST(ServerSweep, RefusesBadSweepsBeforeAnythingStarts) {
  EXPECT_NE(usage_error({"np=1,2"}, ""), "");  // no command
  EXPECT_NE(usage_error({"np"}, "srv {np}").find("NAME=V1,V2"), std::string::npos);
  EXPECT_NE(usage_error({"1np=1"}, "srv {1np}").find("NAME=V1,V2"), std::string::npos);
  EXPECT_NE(usage_error({"np=1,,2"}, "srv {np}").find("empty value"), std::string::npos);
  EXPECT_NE(usage_error({"np="}, "srv {np}").find("empty value"), std::string::npos);
  EXPECT_NE(usage_error({"np=1,1"}, "srv {np}").find("given twice"), std::string::npos);
  EXPECT_NE(usage_error({"np=1", "np=2"}, "srv {np}").find("swept twice"), std::string::npos);
  EXPECT_NE(usage_error({"np=1"}, "srv {ctx} {np}").find("{ctx} is not swept"), std::string::npos);
  EXPECT_NE(usage_error({"np=1", "ctx=1"}, "srv {np}").find("has no {ctx}"), std::string::npos);
  EXPECT_NE(usage_error({std::string("np=1\x01")}, "srv {np}").find("control character"), std::string::npos);
  EXPECT_NE(usage_error({}, "srv\nother").find("one line"), std::string::npos);
  // A grid over 256 points.
  std::string many = "a=";
  for (int i = 0; i < 20; ++i) many += (i ? "," : "") + std::to_string(i);
  std::string more = "b=";
  for (int i = 0; i < 20; ++i) more += (i ? "," : "") + std::to_string(i);
  EXPECT_NE(usage_error({many, more}, "srv {a} {b}").find("over 256"), std::string::npos);
  // Values that name one directory.
  EXPECT_THROW(check_point_dirs(server_grid(parse_server_sweep({"m=a/b,a_b"}, "srv {m}"))), UsageError);
  EXPECT_NO_THROW(check_point_dirs(server_grid(parse_server_sweep({"m=a.gguf,b.gguf"}, "srv {m}"))));
  EXPECT_THROW(check_point_dirs(server_grid(parse_server_sweep({"m=.."}, "srv {m}"))), UsageError);
  // No command and no sweep: nothing to do.
  EXPECT_TRUE(parse_server_sweep({}, "").empty());
}

TEST(ServerSweep, StopsTheServerItStartedAndWhatItsShellStarted) {
  TempDir dir("server-sweep");
  // The shell execs the command: the PID is the server's. A child it starts
  // itself is in its process group and goes with it.
  ManagedServer server("sh -c 'sleep 300 & echo started; wait'", dir.path() / "server.log");
  ASSERT_GT(server.pid(), 0);
  EXPECT_TRUE(server.running());
  const std::string how = server.stop(5.0);
  EXPECT_EQ(how, "killed by signal 15");
  EXPECT_FALSE(server.running());
  EXPECT_NE(::kill(server.pid(), 0), 0);   // gone, and reaped
  EXPECT_NE(::kill(-server.pid(), 0), 0);  // its group too
}

TEST(ServerSweep, AServerThatIgnoresSigtermIsKilled) {
  TempDir dir("server-sweep");
  ManagedServer server("trap '' TERM; echo up; while :; do sleep 0.05; done", dir.path() / "server.log");
  // The trap must be set before the SIGTERM: wait for its line in the log.
  for (int i = 0; i < 400 && log_tail(dir.path() / "server.log").find("up") == std::string::npos; ++i)
    ::usleep(10'000);
  const std::string how = server.stop(0.3);
  EXPECT_NE(how.find("SIGKILL after"), std::string::npos) << how;
}

TEST(ServerSweep, AServerThatExitsBeforeItAnswersIsATargetErrorWithItsLog) {
  TempDir dir("server-sweep");
  ManagedServer server("echo 'error: model file not found' >&2; exit 3", dir.path() / "server.log");
  const auto ep = net::Endpoint::parse_url("http://127.0.0.1:1");  // nothing listens on port 1
  std::atomic<bool> interrupted{false};
  try {
    server.wait_ready(ep, {}, "", 30, interrupted);
    FAIL() << "expected a TargetError";
  } catch (const TargetError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("exited with status 3"), std::string::npos) << what;
    EXPECT_NE(what.find("model file not found"), std::string::npos) << what;
  }
}

TEST(ServerSweep, WaitingForTheServerStopsOnCtrlC) {
  TempDir dir("server-sweep");
  ManagedServer server("sleep 300", dir.path() / "server.log");
  std::atomic<bool> interrupted{true};
  EXPECT_FALSE(server.wait_ready(net::Endpoint::parse_url("http://127.0.0.1:1"), {}, "", 30, interrupted));
  EXPECT_EQ(server.stop(5.0), "killed by signal 15");
}

TEST(ServerSweep, ACommandWithLeadingAssignmentsIsExecutedThroughEnvWithItsPid) {
  TempDir dir("server-sweep");
  ManagedServer server("X_TOKENSCOPE_TEST=42 sh -c 'echo value $X_TOKENSCOPE_TEST; exec sleep 300'",
                       dir.path() / "server.log");
  for (int i = 0; i < 400 && log_tail(dir.path() / "server.log").find("value 42") == std::string::npos; ++i)
    ::usleep(10'000);
  EXPECT_NE(log_tail(dir.path() / "server.log").find("value 42"), std::string::npos);
  // env, then sh, then sleep replaced the shell that started them: one PID.
  std::string comm;
  for (int i = 0; i < 400 && comm != "sleep"; ++i) {
    std::ifstream in("/proc/" + std::to_string(server.pid()) + "/comm");
    std::getline(in, comm);
    if (comm != "sleep") ::usleep(10'000);
  }
  EXPECT_EQ(comm, "sleep");
  EXPECT_EQ(server.stop(5.0), "killed by signal 15");
}

TEST(ServerSweep, StoppingWaitsForTheWholeGroupWithinTheGrace) {
  TempDir dir("server-sweep");
  // The leader (a shell waiting) ends at once on SIGTERM; its child takes
  // 0.3 s to finish: stop() waits for it rather than killing it.
  ManagedServer server(
      "(trap 'sleep 0.3; echo child done; exit 0' TERM; echo up; while :; do sleep 0.05; done) & wait",
      dir.path() / "server.log");
  for (int i = 0; i < 400 && log_tail(dir.path() / "server.log").find("up") == std::string::npos; ++i)
    ::usleep(10'000);
  const std::string how = server.stop(5.0);
  EXPECT_EQ(how.find("SIGKILL"), std::string::npos) << how;
  EXPECT_NE(log_tail(dir.path() / "server.log").find("child done"), std::string::npos);
  // Gone (a child reparented to init may stay a zombie for a moment).
  for (int i = 0; i < 200 && ::kill(-server.pid(), 0) == 0; ++i) ::usleep(10'000);
  EXPECT_NE(::kill(-server.pid(), 0), 0);
  EXPECT_EQ(managed_server_group(), 0);
}

TEST(ServerSweep, LogTailKeepsTheLastLines) {
  TempDir dir("server-sweep");
  {
    std::ofstream f(dir.path() / "log");
    for (int i = 1; i <= 20; ++i) f << "line " << i << "\n";
  }
  const std::string tail = log_tail(dir.path() / "log", 3);
  EXPECT_EQ(tail, "line 18\nline 19\nline 20");
  EXPECT_EQ(log_tail(dir.path() / "missing"), "");
}

}  // namespace
}  // namespace tokenscope::bench
