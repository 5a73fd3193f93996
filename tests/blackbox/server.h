// A `tokenscope serve` child process on 127.0.0.1 and an ephemeral port,
// for black-box tests.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "process.h"

namespace tokenscope::testing {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A running server on 127.0.0.1 and an ephemeral port. A launcher, when
// given, runs it (e.g. {"/usr/bin/prlimit", "--nofile=64:64", "--"}).
class Server {
 public:
  Server(const std::filesystem::path& dir, std::vector<std::string> extra,
         std::vector<std::string> launcher = {})
      : dir_(dir) {
    // Several I/O threads, so that the ThreadSanitizer run sees real concurrency.
    std::vector<std::string> args = std::move(launcher);
    args.insert(args.end(), {TOKENSCOPE_BINARY, "serve", "--port", "0", "--port-file",
                             (dir / "port").string(), "--threads", "3"});
    args.insert(args.end(), extra.begin(), extra.end());
    child_ = std::make_unique<Child>(args, (dir / "server.out").string(), (dir / "server.err").string());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline && !std::filesystem::exists(dir / "port"))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    port_ = std::stoi(slurp(dir / "port"));
  }
  int port() const { return port_; }
  pid_t pid() const { return child_->pid(); }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  ProcessResult stop(int sig = SIGTERM, double timeout_s = 30) {
    child_->signal(sig);
    return child_->wait(timeout_s);
  }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<Child> child_;
  int port_ = 0;
};

// GET over HTTP/1.0 on loopback: the whole body (empty on failure).
inline std::string http_get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string resp;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) resp.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  const auto body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

}  // namespace tokenscope::testing
