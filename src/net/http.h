// HTTP/1.1 types shared by the server (and later the client): requests,
// responses, the serialisation of response heads and chunked bodies, and the
// two interfaces between the connection layer and an application:
//  * HttpHandler answers a parsed request through a Responder;
//  * Responder writes one response, whole or streamed (chunked), from any
//    thread; it is the seam that lets the application be tested in memory.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"

namespace tokenscope::net {

struct ServerLimits {
  std::size_t max_body_bytes = 8u << 20;     // larger bodies get 413
  std::size_t max_header_bytes = 16u << 10;  // larger heads get 431
  // A request must arrive whole within this, counted from its first byte (a
  // new connection's first request: from the accept); 408, then close.
  double header_timeout_s = 10.0;
  double idle_timeout_s = 60.0;  // keep-alive connections idle longer are closed
  // A write that makes no progress for this long (the client stopped
  // reading) ends the connection, and its request is aborted.
  double write_timeout_s = 30.0;
  // Response bytes queued on a connection but not yet written: a response
  // that would queue more (a stalled reader of a stream) ends the connection
  // and its request is aborted. One response or chunk alone may exceed it.
  std::size_t max_send_queue_bytes = 1u << 20;
  std::size_t max_connections = 10000;  // more get 503 with Retry-After
};

// Why the server itself ended a connection
// (tokenscope:connections_dropped_total{reason}).
enum class DropReason {
  kHeaderTimeout,   // no whole request within the header timeout (408 when it had begun)
  kIdleTimeout,     // a keep-alive connection idle past the idle timeout
  kWriteTimeout,    // a write made no progress within the write timeout
  kSendQueueFull,   // more unwritten response bytes than max_send_queue_bytes
  kMaxConnections,  // refused with 503 at max_connections
};
inline constexpr std::size_t kDropReasons = 5;
std::string_view drop_reason_name(DropReason r);  // "header_timeout", ...

// Why accepting a connection failed (tokenscope:accept_errors_total{error}).
enum class AcceptError { kEmfile, kEnfile, kOther };
inline constexpr std::size_t kAcceptErrors = 3;
std::string_view accept_error_name(AcceptError e);  // "EMFILE", "ENFILE", "other"

// A snapshot of a server's connection counters.
struct ConnectionStats {
  std::size_t open = 0;  // connections open now
  std::array<std::uint64_t, kDropReasons> dropped{};
  std::array<std::uint64_t, kAcceptErrors> accept_errors{};
};

struct Header {
  std::string name;
  std::string value;
};

struct HttpRequest {
  std::string method;
  std::string target;
  std::vector<Header> headers;  // names in lowercase
  std::string body;
  bool keep_alive = true;
  Nanos t_received = 0;  // when the whole request had been read

  // The value of a header (name in lowercase), or "" when absent.
  std::string_view header(std::string_view lowercase_name) const;
  // The target without its query string.
  std::string_view path() const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<Header> headers;  // extra headers (Retry-After, ...)
  std::string body;
};

std::string_view reason_phrase(int status);
// Status line, headers, Content-Length and body.
std::string serialize_response(const HttpResponse& r, bool keep_alive);
// Status line and headers of a streamed response: chunked, or, for an
// HTTP/1.0 client (chunked = false), delimited by closing the connection.
std::string serialize_stream_head(int status, std::string_view content_type,
                                  const std::vector<Header>& headers, bool keep_alive, bool chunked = true);
// One chunk of a chunked body: "<hex size>\r\n<data>\r\n" (data must not be empty).
std::string chunk(std::string_view data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// Writes one response. Every method is thread-safe and returns at once; the
// bytes are written in call order on the connection's own executor.
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void respond(HttpResponse r) = 0;
  virtual void start_stream(int status, std::string content_type, std::vector<Header> headers) = 0;
  // Sends raw body bytes of a stream (they are framed as one chunk). When
  // given, on_written runs with the time the bytes were handed to the socket.
  virtual void send(std::string data, std::function<void(Nanos)> on_written = nullptr) = 0;
  virtual void end_stream() = 0;
  // Abortive close: the peer sees a connection reset.
  virtual void reset() = 0;
  // cb runs once if the connection ends before the response is complete.
  virtual void on_disconnect(std::function<void()> cb) = 0;
};

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  virtual void handle(HttpRequest request, std::shared_ptr<Responder> responder) = 0;
  // The response to a request refused by the connection layer itself (400,
  // 408, 413, 431, 503), in the application's error format.
  virtual HttpResponse connection_error(int status, std::string_view message) = 0;
};

}  // namespace tokenscope::net
