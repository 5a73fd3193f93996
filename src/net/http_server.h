// The HTTP/1.1 server: a listening socket on an io_context, one Session per
// connection (each on its own strand), limits from ServerLimits. Run the
// io_context on as many threads as wanted.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "net/http.h"

namespace tokenscope::net {

struct ServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8000;  // 0: an ephemeral port (see HttpServer::port())
  int backlog = 4096;
  bool single_thread = false;  // the io_context runs on one thread only
};

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

}  // namespace tokenscope::net
