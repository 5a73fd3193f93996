// The HTTP/1.1 server: a listening socket on an io_context, one Session per
// connection (each on its own strand), limits from ServerLimits. Run the
// io_context on as many threads as wanted. When accept() fails (EMFILE:
// out of descriptors) it waits 100 ms before the next try, instead of
// retrying in a loop; and when the number of open connections has fallen to
// half its peak, it returns freed heap memory to the system (glibc's
// malloc_trim, at most once a second, while no response is in progress).
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "net/http.h"

namespace tokenscope::net {

struct ServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8000;  // 0: an ephemeral port (see HttpServer::port())
  int backlog = 4096;
  bool single_thread = false;  // the io_context runs on one thread only
  // One-line warnings (the first failed accept of a kind); default: standard error.
  std::function<void(std::string_view)> warn;
};

// The descriptor limit (RLIMIT_NOFILE) of the process against the
// connections a server should take.
struct DescriptorBudget {
  std::uint64_t soft_before = 0;  // the soft limit found
  std::uint64_t soft = 0;         // the soft limit now
  std::uint64_t hard = 0;
  std::size_t reserved = 0;         // descriptors kept for everything but connections
  std::size_t max_connections = 0;  // what the limit allows, at most the number asked
};

// Raises the soft descriptor limit to what max_connections connections need
// (one each, one for a connection being refused with 503, and a reserve for
// the process's own files: those open now and 16 more), up to the hard
// limit. When the hard limit is lower, max_connections in the result is what
// it allows (at least 1), so that the server answers 503 before accept()
// fails with EMFILE.
DescriptorBudget fit_descriptor_limit(std::size_t max_connections);

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& ioc, ServerOptions options, const ServerLimits& limits,
             HttpHandler& handler, const Clock& clock);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts accepting; throws UsageError when the address cannot be bound.
  void start();
  std::uint16_t port() const;
  // Stops accepting, lets current responses finish, closes idle connections.
  void drain();
  std::size_t connections() const;
  // Open connections and the counters of dropped connections and failed
  // accepts. Thread-safe.
  ConnectionStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether a --host binds the loopback interface only: "localhost", or an
// IPv4 address in 127.0.0.0/8, or ::1. Anything else (0.0.0.0, a name, an
// interface's address) can be reached from other machines.
bool is_loopback_host(std::string_view host);

}  // namespace tokenscope::net
