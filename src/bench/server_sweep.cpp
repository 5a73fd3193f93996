#include "bench/server_sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "net/http_fetch.h"

extern char** environ;

namespace tokenscope::bench {

namespace {

bool name_char(char c, bool first) {
  const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return first ? letter : letter || (c >= '0' && c <= '9') || c == '-';
}

bool is_param_name(std::string_view s) {
  if (s.empty() || s.size() > 64 || !name_char(s[0], true)) return false;
  for (char c : s.substr(1))
    if (!name_char(c, false)) return false;
  return true;
}

// The {NAME} placeholders of a command: their names, in order (a ${NAME} is
// the shell's, not a placeholder).
std::vector<std::string> placeholders(const std::string& command) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < command.size(); ++i) {
    if (command[i] != '{' || (i > 0 && command[i - 1] == '$')) continue;
    const auto close = command.find('}', i + 1);
    if (close == std::string::npos) break;
    const std::string name = command.substr(i + 1, close - i - 1);
    if (is_param_name(name)) out.push_back(name);
  }
  return out;
}

constexpr std::size_t kMaxGridPoints = 256;

}  // namespace

std::vector<ServerParam> parse_server_sweep(const std::vector<std::string>& specs,
                                            const std::string& command) {
  if (specs.empty() && command.empty()) return {};
  if (command.empty())
    throw UsageError("--server-sweep needs --server-cmd (the command that starts the server)");
  if (command.find('\0') != std::string::npos || command.find('\n') != std::string::npos)
    throw UsageError("--server-cmd: expected one line of shell");
  std::vector<ServerParam> params;
  std::set<std::string> names;
  std::size_t points = 1;
  for (const auto& spec : specs) {
    const auto eq = spec.find('=');
    const std::string name = spec.substr(0, eq);
    if (eq == std::string::npos || !is_param_name(name))
      throw UsageError(
          fmt::format("--server-sweep {}: expected NAME=V1,V2,... (NAME: letters, digits, '_' "
                      "and '-', a letter or '_' first), e.g. np=1,2,4",
                      quote_input(spec)));
    if (!names.insert(name).second)
      throw UsageError(
          fmt::format("--server-sweep: {} is swept twice; give its values once", quote_input(name)));
    ServerParam p{name, {}};
    std::set<std::string> seen;
    std::string_view rest = std::string_view(spec).substr(eq + 1);
    while (true) {
      const auto comma = rest.find(',');
      const std::string value(rest.substr(0, comma));
      if (value.empty())
        throw UsageError(
            fmt::format("--server-sweep {}: an empty value (expected NAME=V1,V2,...)", quote_input(spec)));
      for (unsigned char c : value)
        if (c < 0x20 || c == 0x7f)
          throw UsageError(
              fmt::format("--server-sweep {}: a value with a control character", quote_input(spec)));
      if (!seen.insert(value).second)
        throw UsageError(fmt::format("--server-sweep {}: the value {} is given twice", quote_input(spec),
                                     quote_input(value)));
      p.values.push_back(value);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    points *= p.values.size();
    if (points > kMaxGridPoints)
      throw UsageError(
          fmt::format("--server-sweep: the grid has over {} points; sweep fewer values", kMaxGridPoints));
    params.push_back(std::move(p));
  }
  const auto used = placeholders(command);
  for (const auto& u : used)
    if (!names.count(u))
      throw UsageError(
          fmt::format("--server-cmd: {{{}}} is not swept (add --server-sweep {}=V1,V2,...; the shell's "
                      "${{{}}} is left alone)",
                      u, u, u));
  for (const auto& p : params)
    if (std::find(used.begin(), used.end(), p.name) == used.end())
      throw UsageError(fmt::format("--server-sweep {}: the command has no {{{}}} to put its values in",
                                   quote_input(p.name), p.name));
  return params;
}

std::vector<ServerPoint> server_grid(const std::vector<ServerParam>& params) {
  std::vector<ServerPoint> grid{{}};
  for (const auto& p : params) {
    std::vector<ServerPoint> next;
    for (const auto& point : grid)
      for (const auto& v : p.values) {
        ServerPoint q = point;
        q.emplace_back(p.name, v);
        next.push_back(std::move(q));
      }
    grid = std::move(next);
  }
  return grid;
}

std::string server_command_for(const std::string& command, const ServerPoint& point) {
  std::string out;
  for (std::size_t i = 0; i < command.size(); ++i) {
    if (command[i] == '{' && !(i > 0 && command[i - 1] == '$')) {
      const auto close = command.find('}', i + 1);
      if (close != std::string::npos) {
        const std::string name = command.substr(i + 1, close - i - 1);
        const auto it =
            std::find_if(point.begin(), point.end(), [&](const auto& kv) { return kv.first == name; });
        if (it != point.end()) {
          out += it->second;
          i = close;
          continue;
        }
      }
    }
    out += command[i];
  }
  return out;
}

std::string server_point_dir(const ServerPoint& point) {
  std::string out;
  for (const auto& [name, value] : point) {
    if (!out.empty()) out += '_';
    out += name + '-';
    for (char c : value) {
      const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                        c == '.' || c == '+' || c == '-';
      out += keep ? c : '_';
    }
  }
  if (out.size() > 200) out = out.substr(0, 200);
  return out;
}

void check_point_dirs(const std::vector<ServerPoint>& grid) {
  std::map<std::string, const ServerPoint*> dirs;
  for (const auto& p : grid) {
    const auto dir = server_point_dir(p);
    if (dir.find("..") != std::string::npos)
      throw UsageError(
          fmt::format("--server-sweep: the directory {} of a value holds '..'", quote_input(dir)));
    auto [it, fresh] = dirs.emplace(dir, &p);
    if (!fresh)
      throw UsageError(
          fmt::format("--server-sweep: two points of the grid share the directory {}; give values "
                      "that differ in letters, digits, '.', '+' or '-'",
                      quote_input(dir)));
  }
}

namespace {

std::atomic<int> g_server_group{0};

// The line the shell runs: `exec` before a simple command, so that the
// server replaces the shell and its PID is the server's (for the process
// samples), after the leading NAME=VALUE words if any (`exec env A=1 srv`);
// a compound line (a ';', a '|', a "&&" or a '&' that sends to the
// background — not the '&' of a redirection like 2>&1 or &>) runs under the
// shell as written.
std::string shell_line(const std::string& command) {
  // Outside quotes ('...' as is, "..." and a backslash escaping one character).
  bool compound = false, single = false, dbl = false;
  for (std::size_t i = 0; i < command.size() && !compound; ++i) {
    const char c = command[i];
    if (single) {
      single = c != '\'';
    } else if (c == '\\') {
      ++i;
    } else if (dbl) {
      dbl = c != '"';
    } else if (c == '\'') {
      single = true;
    } else if (c == '"') {
      dbl = true;
    } else if (c == ';' || c == '|') {
      compound = true;
    } else if (c == '&') {
      const bool redirect = (i > 0 && (command[i - 1] == '>' || command[i - 1] == '<')) ||
                            (i + 1 < command.size() && command[i + 1] == '>');
      compound = !redirect;
    }
  }
  if (compound) return command;
  // The first word: an assignment NAME=... goes through env.
  std::size_t start = command.find_first_not_of(" \t");
  if (start == std::string::npos) return command;
  std::size_t eq = start;
  while (eq < command.size() &&
         ((command[eq] >= 'a' && command[eq] <= 'z') || (command[eq] >= 'A' && command[eq] <= 'Z') ||
          command[eq] == '_' || (eq > start && command[eq] >= '0' && command[eq] <= '9')))
    ++eq;
  const bool assignment = eq > start && eq < command.size() && command[eq] == '=';
  return (assignment ? "exec env " : "exec ") + command;
}

// Whether any process of process group `pgid` is alive (not a zombie): from
// /proc/PID/stat (state, the third field, and pgrp, the fifth, after the
// command name in parentheses).
bool group_alive(int pgid) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(it->path() / "stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0, pgrp = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d %d", &state, &ppid, &pgrp) != 3) continue;
    if (pgrp == pgid && state != 'Z' && state != 'X') return true;
  }
  return false;
}

}  // namespace

int managed_server_group() {
  return g_server_group.load();
}

ManagedServer::ManagedServer(const std::string& command, const std::filesystem::path& log_path)
    : log_(log_path) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  const std::string log = log_path.string();
  // A log of this run only, never written through a link planted in its place.
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  // None of tokenscope's descriptors (sockets, the live-metrics listener, run files) reach the server.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGPIPE, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const std::string line = shell_line(command);
  const char* argv[] = {"sh", "-c", line.c_str(), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    throw TargetError(fmt::format("--server-cmd: cannot start /bin/sh: {} (log {})", std::strerror(rc), log));
  pid_ = pid;
  g_server_group.store(pid);  // for a signal handler that must end now (cli/main.cpp)
}

ManagedServer::~ManagedServer() {
  try {
    stop(5.0);
  } catch (...) {
  }
}

bool ManagedServer::running() {
  if (exited_ || pid_ <= 0) return false;
  // Whether the leader has exited, without reaping it: its zombie keeps the
  // process group's id taken until stop() has ended the whole group.
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
      info.si_pid == pid_) {
    exited_ = true;
    how_ = info.si_code == CLD_EXITED ? fmt::format("exited with status {}", info.si_status)
                                      : fmt::format("killed by signal {}", info.si_status);
    return false;
  }
  return true;
}

std::string ManagedServer::stop(double grace_s) {
  if (pid_ <= 0) return "not started";
  if (stopped_) return how_;
  // The whole group, the leader exited or not (a server's own children,
  // what a compound line started), SIGTERM first; SIGKILL to what is left
  // after the grace; then the leader reaped.
  ::kill(-pid_, SIGTERM);
  const auto wait_group = [this](double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (group_alive(pid_) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return !group_alive(pid_);
  };
  bool killed = false;
  if (!wait_group(grace_s)) {
    ::kill(-pid_, SIGKILL);
    killed = true;
    wait_group(5.0);
  }
  // A leader that left its group (setsid) is not reached by the group's
  // signals: it gets its own, so that the wait below cannot hang.
  if (running()) {
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    while (running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (running()) {
      ::kill(pid_, SIGKILL);
      killed = true;
    }
  }
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  stopped_ = exited_ = true;
  g_server_group.store(0);
  how_ = ended(status) + (killed ? fmt::format(" (SIGKILL after {:g} s)", grace_s) : std::string());
  return how_;
}

std::string ManagedServer::ended(int status) const {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return "ended";
}

std::string log_tail(const std::filesystem::path& path, std::size_t max_lines, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::size_t>(in.tellg());
  const std::size_t take = std::min(size, max_bytes);
  in.seekg(static_cast<std::streamoff>(size - take));
  std::string text(take, '\0');
  in.read(text.data(), static_cast<std::streamsize>(take));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  std::size_t pos = text.size(), lines = 0;
  while (pos > 0 && lines < max_lines) {
    const auto nl = text.rfind('\n', pos - 1);
    ++lines;
    if (nl == std::string::npos) {
      pos = 0;
      break;
    }
    pos = nl;
    if (lines == max_lines) ++pos;
  }
  return display_lines(text.substr(pos == 0 ? 0 : pos));
}

namespace {

net::Endpoint root_of(const net::Endpoint& e) {
  net::Endpoint r = e;
  r.base_path.clear();
  return r;
}

net::FetchResult get_route(const net::Endpoint& root, const net::ClientOptions& options, const char* path,
                           const std::string& api_key, double timeout_s) {
  net::FetchRequest req;
  req.path = path;
  req.timeout_s = timeout_s;
  req.max_body_bytes = 64u << 10;
  if (!api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + api_key);
  return net::fetch(root, options, req);
}

}  // namespace

bool ManagedServer::wait_ready(const net::Endpoint& target, const net::ClientOptions& options,
                               const std::string& api_key, double timeout_s,
                               const std::atomic<bool>& interrupted) {
  const net::Endpoint root = root_of(target);
  net::ClientOptions quick = options;
  quick.connect_timeout_s = 1.0;
  const auto start = std::chrono::steady_clock::now();
  std::string last = "no answer yet";
  while (true) {
    if (interrupted.load()) return false;
    if (!running())
      throw TargetError(
          fmt::format("--server-cmd: the server {} before it answered at {}; the end of its log {}:\n{}",
                      how_, root.url(), log_.string(), log_tail(log_)));
    auto r = get_route(root, quick, "/health", api_key, 2.0);
    if (r.status == 404) r = get_route(target, quick, "/v1/models", api_key, 2.0);
    if (r.status == 200 && running()) return true;  // and not a server that answered as it ended
    last = r.status ? fmt::format("HTTP {}", r.status) : r.error;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_s)
      throw TargetError(
          fmt::format("--server-cmd: the server did not answer GET /health with 200 within {:g} s "
                      "(--server-start-timeout; last: {}); the end of its log {}:\n{}",
                      timeout_s, display_text(last), log_.string(), log_tail(log_)));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void require_port_free(const net::Endpoint& target, const net::ClientOptions& options) {
  net::ClientOptions quick = options;
  quick.connect_timeout_s = 1.0;
  const auto r = get_route(root_of(target), quick, "/health", {}, 2.0);
  if (r.status != 0)
    throw UsageError(
        fmt::format("--server-cmd: something already answers at {} (GET /health: HTTP {}); stop it "
                    "first, or drop --server-cmd to measure it as it is",
                    root_of(target).url(), r.status));
}

}  // namespace tokenscope::bench
