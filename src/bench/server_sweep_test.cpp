#include "bench/server_sweep.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
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

// Whether process `pid` is alive: neither gone nor a zombie. An orphaned
// child's zombie waits for PID 1 to reap it, which in a container may be
// late or never; it still counts in kill(-pgid, 0), so that is not asked.
bool process_alive(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  const char state = stat[close + 2];
  return state != 'Z' && state != 'X';
}

TEST(ServerSweep, StopsTheServerItStartedAndWhatItsShellStarted) {
  TempDir dir("server-sweep");
  // The shell execs the command: the PID is the server's. A child it starts
  // itself is in its process group and goes with it.
  ManagedServer server("sh -c 'sleep 300 & echo child $!; wait'", dir.path() / "server.log");
  ASSERT_GT(server.pid(), 0);
  EXPECT_TRUE(server.running());
  // The shell writes its line in one write: once the log has text, it has the line.
  std::string log;
  for (int i = 0; i < 500 && log.empty(); ++i) {
    ::usleep(10'000);
    log = log_tail(dir.path() / "server.log");
  }
  long child = 0;
  ASSERT_EQ(std::sscanf(log.c_str(), "child %ld", &child), 1) << log;
  EXPECT_TRUE(process_alive(child));
  const std::string how = server.stop(5.0);
  EXPECT_EQ(how, "killed by signal 15");
  EXPECT_FALSE(server.running());
  EXPECT_NE(::kill(server.pid(), 0), 0);  // gone, and reaped
  EXPECT_FALSE(process_alive(child));     // what it started too
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
      "(trap 'sleep 0.3; echo child done; exit 0' TERM; echo up; while :; do sleep 0.05; done) & "
      "echo child $!; wait",
      dir.path() / "server.log");
  // "up" (the child's) and "child PID" (the leader's) come in either order.
  const auto started = [&] {
    const std::string l = log_tail(dir.path() / "server.log");
    return l.find("up") != std::string::npos && l.find("child ") != std::string::npos;
  };
  for (int i = 0; i < 400 && !started(); ++i) ::usleep(10'000);
  const std::string log = log_tail(dir.path() / "server.log");
  const auto at = log.find("child ");
  ASSERT_NE(at, std::string::npos) << log;
  const long child = std::atol(log.c_str() + at + 6);
  ASSERT_GT(child, 0) << log;
  EXPECT_TRUE(process_alive(child));
  const std::string how = server.stop(5.0);
  EXPECT_EQ(how.find("SIGKILL"), std::string::npos) << how;
  EXPECT_NE(log_tail(dir.path() / "server.log").find("child done"), std::string::npos);
  EXPECT_FALSE(process_alive(child));
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
