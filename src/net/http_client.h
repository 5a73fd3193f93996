// The HTTP/1.1 client: a keep-alive connection pool to one endpoint (plain
// TCP or TLS through OpenSSL) on one io_context. Requests are complete
// HTTP/1.1 messages built by the caller; responses are parsed by Beast's
// parser from bytes the client reads itself, so every piece of the body is
// handed over with the time of the socket read that brought it (what the
// latency metrics need), also when one read holds many SSE events.
//
// The pool: a request goes to an idle kept-alive connection (LIFO, so few
// stay warm; one the server has closed meanwhile is noticed and dropped
// before it is used), else to a connection still being opened ahead of time
// (preconnect) that has no request yet, else to a new connection while fewer
// than max_connections are open; otherwise it waits, in order, for the next
// connection that frees up, and is written then (the wait shows as the
// caller's send lag, never as a failure). A request written on a reused
// connection that the server had closed meanwhile (no response byte came
// back) is resent once on a fresh one, as browsers and curl do. Idle
// connections beyond set_idle_target() are closed after the current event:
// thread-per-connection servers (cpp-httplib in llama.cpp, many Python
// servers) keep a worker waiting on every open idle connection. One
// HttpClient per thread: it is not thread-safe, and every callback runs on
// its io_context.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/clock.h"

namespace boost::asio {
class io_context;
}

namespace tokenscope::net {

struct Endpoint {
  bool tls = false;
  std::string host;
  std::uint16_t port = 0;
  std::string base_path;  // the URL's path without a trailing '/', e.g. "" or "/proxy"

  // http://host[:port][/path] or https://...; throws UsageError with the reason.
  static Endpoint parse_url(std::string_view url);
  std::string url() const;
  // The Host header value.
  std::string host_header() const;
};

struct ClientOptions {
  double connect_timeout_s = 10.0;
  bool verify_tls = true;  // --insecure turns certificate and host name checks off
  std::string ca_file;     // extra CA bundle (PEM); the system store is always used
  std::size_t max_header_bytes = 64u << 10;
  std::size_t max_connections = 0;  // open at most (connecting, busy or idle); 0: no limit
  // TCP handshakes in progress at most (0: no limit). A burst of connects
  // overflows the listen backlog of servers that keep it small (cpp-httplib's
  // is 5, so llama-server's): the kernel then drops handshakes and requests,
  // and retransmits them seconds later (see docs/bench.md).
  std::size_t max_connecting = 0;
};

enum class ExchangeError {
  kNone,
  kConnect,    // could not connect (refused, unreachable, TLS handshake failed)
  kClosed,     // the connection was reset or closed before the response ended
  kTimeout,    // the deadline passed
  kProtocol,   // not a valid HTTP/1.1 response
  kCancelled,  // cancel_all()
};

std::string_view exchange_error_name(ExchangeError e);

// Callbacks of one request/response exchange, all on the client's thread.
// on_complete is called exactly once; the handler must live until then.
class ExchangeHandler {
 public:
  virtual ~ExchangeHandler() = default;
  // Right before the first byte of the request is written (again if resent).
  virtual void on_sent(Nanos t) = 0;
  virtual void on_headers(int status, Nanos t) = 0;
  // The response's Content-Type (when it has one), right before on_headers.
  virtual void on_content_type(std::string_view) {}
  // Body bytes (chunked framing removed) that arrived with the read at time t.
  virtual void on_body(std::string_view data, Nanos t) = 0;
  virtual void on_complete(ExchangeError error, std::string_view message, Nanos t) = 0;
};

struct ClientCounters {
  std::uint64_t connects = 0;  // connections opened
  std::uint64_t connect_failures = 0;
  std::uint64_t connect_retries = 0;  // handshake attempts abandoned as too slow and started afresh
  std::uint64_t reused = 0;           // requests answered on a kept-alive connection (resends not counted)
  std::uint64_t resent = 0;           // requests resent after a stale keep-alive connection
  std::uint64_t stale_dropped = 0;    // idle connections found closed by the server before reuse
  std::uint64_t idle_closed = 0;      // idle connections closed beyond the idle target
  std::uint64_t waited = 0;           // requests that waited for a connection (max_connections)
  std::uint64_t peak_open = 0;        // most connections open at once
  std::uint64_t open = 0;             // connections open now
  std::uint64_t idle = 0;             // of which idle in the pool
};

class HttpClient {
 public:
  // Resolves the endpoint now (blocking); throws UsageError when it cannot.
  HttpClient(boost::asio::io_context& ioc, Endpoint endpoint, ClientOptions options, const Clock& clock);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends request (a whole HTTP/1.1 message) on an idle or new connection.
  // deadline: absolute time on the clock (steady clock ns) when the exchange
  // is abandoned with kTimeout; <= 0 for none.
  void start(std::shared_ptr<const std::string> request, ExchangeHandler* handler, Nanos deadline);
  // Opens up to n connections ahead of the requests (within max_connections;
  // failures are only counted). done, when given, runs on the io_context once
  // each of them has connected or failed.
  void preconnect(std::size_t n, std::function<void()> done = {});
  // How many idle connections to keep; more are closed (default: all).
  void set_idle_target(std::size_t n);
  // Ends every exchange in progress or waiting with kCancelled and closes idle connections.
  void cancel_all();
  // Ends the exchange of this handler, in progress (its connection is
  // closed: the server sees the client go, as when a user closes the tab) or
  // waiting for a connection, with kCancelled; on_complete runs later, from
  // the io_context, never inside this call. False when the handler has no
  // exchange here (it ended already). Call on the io_context's thread.
  bool cancel(ExchangeHandler* handler);
  ClientCounters counters() const;
  const Endpoint& endpoint() const;

  struct Impl;  // opaque; public so the connection classes can name it

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tokenscope::net
