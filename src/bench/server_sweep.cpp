#include "bench/server_sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
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

ManagedServer::ManagedServer(const std::string& command, const std::filesystem::path& log_path)
    : log_(log_path) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  const std::string log = log_path.string();
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGPIPE, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  // A simple command replaces the shell (its PID is the server's, for the
  // process samples); a compound line (; & | in it) runs under the shell.
  const bool compound = command.find_first_of(";&|") != std::string::npos;
  const std::string line = compound ? command : "exec " + command;
  const char* argv[] = {"sh", "-c", line.c_str(), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    throw TargetError(fmt::format("--server-cmd: cannot start /bin/sh: {} (log {})", std::strerror(rc), log));
  pid_ = pid;
}

ManagedServer::~ManagedServer() {
  try {
    stop(5.0);
  } catch (...) {
  }
}

bool ManagedServer::running() {
  if (reaped_ || pid_ <= 0) return false;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    status_ = status;
    return false;
  }
  return r == 0;
}

std::string ManagedServer::ended(int status) const {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return "ended";
}

std::string ManagedServer::stop(double grace_s) {
  if (pid_ <= 0) return "not started";
  if (!running()) return ended(status_);
  ::kill(-pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!reaped_) {
    ::kill(-pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    status_ = status;
    return ended(status_) + fmt::format(" (SIGKILL after {:g} s)", grace_s);
  }
  // What the shell started in the group (a server's own children) goes too.
  ::kill(-pid_, SIGKILL);
  return ended(status_);
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
                      ended(status_), root.url(), log_.string(), log_tail(log_)));
    auto r = get_route(root, quick, "/health", api_key, 2.0);
    if (r.status == 404) r = get_route(target, quick, "/v1/models", api_key, 2.0);
    if (r.status == 200) return true;
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
