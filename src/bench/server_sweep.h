// A server tokenscope starts itself (docs/bench.md "Sweeps over server
// settings"): `--server-cmd 'CMD … {NAME} …'` is started for each run and
// stopped after it, and `--server-sweep NAME=V1,V2,…` (repeatable: a grid)
// runs the same workload once per value, as vLLM's `bench sweep serve` does.
// Restarting the server for every run resets its caches, so the runs are
// independent.
#pragma once

#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "net/http_client.h"

namespace tokenscope::bench {

struct ServerParam {
  std::string name;
  std::vector<std::string> values;
};

// --server-sweep specs ("np=1,2,4") against the command: every NAME is a
// name (letters, digits, '_' and '-', a letter or '_' first), once; every
// value is non-empty, once, printable; every NAME appears in the command as
// {NAME}, and every {NAME} of the command (not ${NAME}: the shell's) is
// swept. The grid holds at most 256 points. Throws UsageError naming the
// option and what was expected.
std::vector<ServerParam> parse_server_sweep(const std::vector<std::string>& specs,
                                            const std::string& command);

// One point of the grid: NAME -> value, in the order of the specs.
using ServerPoint = std::vector<std::pair<std::string, std::string>>;

// Every combination, the first parameter outermost (one empty point when
// there are no parameters).
std::vector<ServerPoint> server_grid(const std::vector<ServerParam>& params);

// The command with each {NAME} replaced by the point's value (verbatim: the
// command is the user's own shell line).
std::string server_command_for(const std::string& command, const ServerPoint& point);

// The run directory of a point: "np-1", "np-4_ctx-2048" (characters other
// than letters, digits, '.', '+' and '-' become '_'). Throws UsageError when
// two points of the grid would share a directory.
std::string server_point_dir(const ServerPoint& point);
void check_point_dirs(const std::vector<ServerPoint>& grid);

// A server process started with /bin/sh -c 'exec CMD' (without the exec
// when CMD is a compound line: ';', '&' or '|' in it) in a process group of
// its own (Ctrl-C at the terminal does not reach it: tokenscope stops it),
// with default signal dispositions and mask, stdin from /dev/null and its
// output appended to a log file. The destructor stops it.
class ManagedServer {
 public:
  ManagedServer(const std::string& command, const std::filesystem::path& log_path);
  ~ManagedServer();
  ManagedServer(const ManagedServer&) = delete;
  ManagedServer& operator=(const ManagedServer&) = delete;

  int pid() const { return pid_; }
  bool running();  // not yet exited (reaps it when it has)

  // Polls GET /health at the target's root (then /v1/models where /health
  // is 404) every 100 ms until it answers 200: true. False when interrupted
  // first. Throws TargetError when the process exits first (its status and
  // the log's last lines) or timeout_s passes.
  bool wait_ready(const net::Endpoint& target, const net::ClientOptions& options, const std::string& api_key,
                  double timeout_s, const std::atomic<bool>& interrupted);

  // SIGTERM to its process group (whether or not the leader is still
  // there), SIGKILL to what of the group is left after grace_s; returns
  // once no process of the group is alive and the leader is reaped. Returns
  // how the leader ended ("exited with status 0", "killed by signal 15", …,
  // and " (SIGKILL after N s)" when it came to that).
  std::string stop(double grace_s = 15.0);

 private:
  std::string ended(int status) const;
  int pid_ = -1;
  bool exited_ = false;   // the leader has exited (not yet reaped before stop())
  bool stopped_ = false;  // stop() has ended the group and reaped the leader
  std::string how_;       // how the leader ended
  std::filesystem::path log_;
};

// The process group of the server started last and not yet stopped (0:
// none): a signal handler that ends tokenscope at once kills it first.
int managed_server_group();

// Something already answers HTTP at the target (a server left running would
// be measured instead of the one started): throws UsageError saying so.
void require_port_free(const net::Endpoint& target, const net::ClientOptions& options);

// The last lines of a log file, at most max_bytes (for error messages).
std::string log_tail(const std::filesystem::path& path, std::size_t max_lines = 8,
                     std::size_t max_bytes = 2048);

}  // namespace tokenscope::bench
