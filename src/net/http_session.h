// One HTTP/1.1 connection: reads requests with Beast's parser under the
// server's limits, hands them to the HttpHandler, and writes responses from a
// queue, coalescing what accumulated while a write was in flight. The queue
// is bounded (max_send_queue_bytes) and a write must make progress within
// the write timeout, so a client that stops reading costs a bounded amount
// of memory and time. Templated
// on the stream so that unit tests run it over an in-memory stream
// (boost::beast::test::stream) and production over a TCP stream.
//
// Internal header: include it only where a Session is instantiated.
#pragma once

#include <array>
#include <atomic>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/clock.h"
#include "net/http.h"

namespace tokenscope::net {

// What the sessions of one server share.
struct ServerContext {
  HttpHandler* handler = nullptr;
  const Clock* clock = nullptr;
  ServerLimits limits;
  std::atomic<std::size_t> connections{0};
  std::atomic<std::size_t> responses{0};  // connections between a request and the end of its response
  std::atomic<bool> draining{false};      // finish current responses, take no new requests
  std::array<std::atomic<std::uint64_t>, kDropReasons> dropped{};  // by DropReason
  void count_drop(DropReason r) {
    dropped[static_cast<std::size_t>(r)].fetch_add(1, std::memory_order_relaxed);
  }
  // One I/O thread: connections share the io_context's executor (no strands)
  // and a Responder call made on that thread runs at once instead of being
  // queued, so a step's writes reach the sockets as they are issued.
  bool single_thread = false;
};

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace asio = boost::asio;

template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(Stream stream, ServerContext& ctx) : stream_(std::move(stream)), ctx_(ctx) { ++ctx_.connections; }
  ~Session() {
    set_in_response(false);
    --ctx_.connections;
  }

  void start() {
    asio::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->read_request(); });
  }

  // Closes the connection if it is between requests (used when draining).
  void close_if_idle() {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      if (!self->in_response_) self->close();
    });
  }

  class SessionResponder;

 private:
  struct Pending {
    std::string bytes;
    std::function<void(Nanos)> on_written;
  };

  // Header, idle and write timeouts are deadlines checked by the server's
  // sweeper (HttpServer, every 50 ms): no timer system call per request,
  // and the 408 can still be written (Beast's stream timeouts close the
  // socket).
  void set_timeout(double seconds) {
    deadline_.store(ctx_.clock->now_ns() + static_cast<Nanos>(seconds * 1e9), std::memory_order_relaxed);
  }
  void clear_timeout() { deadline_.store(0, std::memory_order_relaxed); }

  // Between responses: the idle timeout until a request's first byte, then
  // the header timeout from that byte on, for the whole request, never
  // restarted by the bytes that follow (a head trickled byte by byte is cut
  // at the timeout all the same). A new connection's first request counts
  // from the accept. During a response: none (the write timeout applies).
  void arm_deadline() {
    if (in_response_) return clear_timeout();
    if (request_deadline_armed_) return;
    if (requests_served_ == 0 || buffer_.size() > 0 || parser_->got_some()) {
      set_timeout(ctx_.limits.header_timeout_s);
      request_deadline_armed_ = true;
    } else {
      set_timeout(ctx_.limits.idle_timeout_s);
    }
  }

 public:
  // Called by the sweeper from any thread: when a deadline has passed, the
  // connection's executor handles it.
  void poll_deadline(Nanos now) {
    const Nanos d = deadline_.load(std::memory_order_relaxed);
    const Nanos w = write_deadline_.load(std::memory_order_relaxed);
    if ((d == 0 || now < d) && (w == 0 || now < w)) return;
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] { self->on_deadline(); });
  }

 private:
  void on_deadline() {
    if (closed_) return;
    const Nanos now = ctx_.clock->now_ns();
    const Nanos w = write_deadline_.load(std::memory_order_relaxed);
    if (writing_ && w != 0 && now >= w) {
      // The client stopped reading: drop it (its request is aborted).
      ctx_.count_drop(DropReason::kWriteTimeout);
      return abortive_close();
    }
    const Nanos d = deadline_.load(std::memory_order_relaxed);
    if (in_response_ || d == 0 || now < d) return;
    clear_timeout();
    // The pending read stays; closing the connection ends it.
    on_read_error(beast::error::timeout);
  }

  // One read loop for the connection's life: between responses its bytes
  // feed the parser (under the header or idle timeout); during a response it
  // keeps reading without a timeout, buffering pipelined bytes and noticing
  // at once when the peer goes away.
  void read_request() {
    if (ctx_.draining.load() || closed_) return close();
    reset_parser();
    if (buffer_.size() > 0 && parse_buffered()) return;
    arm_read();
  }

  void set_in_response(bool v) {
    if (v == in_response_) return;
    in_response_ = v;
    if (v)
      ctx_.responses.fetch_add(1, std::memory_order_relaxed);
    else
      ctx_.responses.fetch_sub(1, std::memory_order_relaxed);
  }

  void reset_parser() {
    request_deadline_armed_ = false;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(ctx_.limits.max_header_bytes));
    parser_->body_limit(ctx_.limits.max_body_bytes);
    parser_->eager(true);
    continue_sent_ = false;
  }

  void arm_read() {
    if (reading_ || closed_ || peer_closed_) return;
    arm_deadline();
    reading_ = true;
    // Into a chunk of its own, appended to buffer_ when the read completes:
    // the buffered bytes are parsed (and consumed) while this read is
    // pending (after a response, see after_writes), and a consume that
    // empties a flat_buffer moves its write position, so a read into
    // buffer_.prepare() would commit the wrong bytes (a request's first
    // bytes read twice).
    stream_.async_read_some(asio::buffer(read_chunk_),
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
                              self->reading_ = false;
                              self->on_read(ec, n);
                            });
  }

  void on_read(beast::error_code ec, std::size_t n) {
    if (closed_) return;
    if (ec == asio::error::operation_aborted) return arm_read();
    if (ec == asio::error::eof && in_response_) {
      // The client ended what it sends (shutdown(SHUT_WR)) or went away;
      // the two look the same until a write draws a reset. Finish the
      // response, then close: a client that is gone is noticed when a write
      // fails.
      peer_closed_ = true;
      keep_alive_ = false;
      return;
    }
    if (ec) {
      if (in_response_) return close();  // the peer reset the connection mid-response
      return on_read_error(ec);
    }
    buffer_.commit(asio::buffer_copy(buffer_.prepare(n), asio::buffer(read_chunk_.data(), n)));
    if (!in_response_ && parse_buffered()) return;
    // Pipelined bytes beyond this wait in the socket until the response is
    // written (the peer leaving is then noticed by a failing write).
    if (in_response_ && buffer_.size() >= kMaxBufferedDuringResponse) return;
    if (buffer_.size() > ctx_.limits.max_header_bytes + ctx_.limits.max_body_bytes + 16384) return close();
    arm_read();
  }

  // Feeds buffered bytes to the parser; true when a request was dispatched
  // or the connection is being closed with an error response.
  bool parse_buffered() {
    while (buffer_.size() > 0) {
      beast::error_code ec;
      const std::size_t used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == http::error::need_more) break;
      if (ec) {
        on_read_error(ec);
        return true;
      }
      if (parser_->is_header_done() && !continue_sent_ &&
          beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
        continue_sent_ = true;
        enqueue("HTTP/1.1 100 Continue\r\n\r\n", nullptr);
      }
      if (parser_->is_done()) {
        dispatch();
        return true;
      }
      if (used == 0) break;
    }
    return false;
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
        closed_)
      return close();
    int status = 400;
    std::string message = "malformed HTTP request: " + ec.message();
    if (ec == beast::error::timeout) {
      // Nothing started: an idle keep-alive connection simply closes.
      if (buffer_.size() == 0 && !parser_->got_some()) {
        ctx_.count_drop(requests_served_ == 0 ? DropReason::kHeaderTimeout : DropReason::kIdleTimeout);
        return close();
      }
      ctx_.count_drop(DropReason::kHeaderTimeout);
      status = 408;
      message = "request not received in time";
    } else if (ec == http::error::header_limit) {
      status = 431;
      message = "request headers larger than " + std::to_string(ctx_.limits.max_header_bytes) + " bytes";
    } else if (ec == http::error::body_limit) {
      status = 413;
      message = "request body larger than " + std::to_string(ctx_.limits.max_body_bytes) + " bytes";
    }
    HttpResponse r = ctx_.handler->connection_error(status, message);
    set_in_response(true);
    keep_alive_ = false;
    response_done_ = true;
    enqueue(serialize_response(r, false), nullptr);
  }

  void dispatch() {
    auto& msg = parser_->get();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    for (const auto& f : msg) {
      std::string name(f.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      req.headers.push_back({std::move(name), std::string(f.value())});
    }
    req.body = std::move(msg.body());
    req.keep_alive = msg.keep_alive();
    req.t_received = ctx_.clock->now_ns();
    keep_alive_ = req.keep_alive;
    http10_ = msg.version() < 11;
    set_in_response(true);
    clear_timeout();  // the request is whole (a pending watch read keeps no deadline)
    response_done_ = false;
    ++requests_served_;
    responder_ = std::make_shared<SessionResponder>(this->shared_from_this());
    // A handler that throws (a defect: requests are checked, see the
    // fuzz targets) fails its own request with 500, never the server.
    try {
      ctx_.handler->handle(std::move(req), responder_);
    } catch (const std::exception& e) {
      responder_->respond(ctx_.handler->connection_error(500, std::string("internal error: ") + e.what()));
    }
    arm_read();  // watch the peer while answering
  }

  void enqueue(std::string bytes, std::function<void(Nanos)> on_written) {
    if (closed_) return;
    if (unsent_bytes_ > 0 && unsent_bytes_ + bytes.size() > ctx_.limits.max_send_queue_bytes) {
      // The client does not read as fast as its response comes: drop it
      // (its request is aborted) rather than hold the rest in memory.
      ctx_.count_drop(DropReason::kSendQueueFull);
      return abortive_close();
    }
    unsent_bytes_ += bytes.size();
    queue_.push_back({std::move(bytes), std::move(on_written)});
    if (!writing_) do_write();
  }

  void do_write() {
    if (queue_.empty()) return after_writes();
    written_callbacks_.clear();
    if (queue_.size() == 1) {
      write_buffer_.swap(queue_.front().bytes);  // the common case: no copy
      if (queue_.front().on_written) written_callbacks_.push_back(std::move(queue_.front().on_written));
      queue_.pop_front();
    } else {
      write_buffer_.clear();
      while (!queue_.empty()) {
        write_buffer_ += queue_.front().bytes;
        if (queue_.front().on_written) written_callbacks_.push_back(std::move(queue_.front().on_written));
        queue_.pop_front();
      }
    }
    writing_ = true;
    write_offset_ = 0;
    const Nanos t = ctx_.clock->now_ns();
    for (auto& cb : written_callbacks_) cb(t);
    write_some(t);
  }

  // Writes the rest of write_buffer_; the write deadline moves with every
  // write that makes progress.
  void write_some(Nanos now) {
    write_deadline_.store(now + static_cast<Nanos>(ctx_.limits.write_timeout_s * 1e9),
                          std::memory_order_relaxed);
    stream_.async_write_some(
        asio::buffer(write_buffer_.data() + write_offset_, write_buffer_.size() - write_offset_),
        [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
          if (ec || self->closed_) {
            self->writing_ = false;
            self->write_deadline_.store(0, std::memory_order_relaxed);
            return self->close();
          }
          self->write_offset_ += n;
          self->unsent_bytes_ -= n;
          if (self->write_offset_ < self->write_buffer_.size())
            return self->write_some(self->ctx_.clock->now_ns());
          self->writing_ = false;
          self->write_deadline_.store(0, std::memory_order_relaxed);
          self->do_write();
        });
  }

  void after_writes() {
    if (!response_done_ || abort_pending_) {
      if (abort_pending_) abortive_close();
      return;
    }
    set_in_response(false);
    responder_.reset();
    if (!keep_alive_ || ctx_.draining.load()) return graceful_close();
    if (reading_) {
      // The watch read stays pending and now waits for the next request.
      reset_parser();
      if (buffer_.size() > 0 && parse_buffered()) return;
      arm_deadline();
      return;
    }
    read_request();
  }

  void graceful_close() {
    if (closed_) return;
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      beast::error_code ec;
      stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
    }
    close();
  }

  void abortive_close() {
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      beast::error_code ec;
      stream_.socket().set_option(asio::socket_base::linger(true, 0), ec);
    }
    close();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    clear_timeout();
    write_deadline_.store(0, std::memory_order_relaxed);
    beast::error_code ec;
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>)
      stream_.socket().close(ec);
    else
      stream_.close();
    queue_.clear();
    unsent_bytes_ = 0;
    if (in_response_ && !response_done_) {
      auto callbacks = std::move(disconnect_callbacks_);
      for (auto& cb : callbacks) cb();
    }
    set_in_response(false);
    responder_.reset();
  }

  // Pipelined bytes read while a response is written, at most (the watch
  // read that notices a peer leaving stops beyond).
  static constexpr std::size_t kMaxBufferedDuringResponse = 64u << 10;

  Stream stream_;
  ServerContext& ctx_;
  std::atomic<Nanos> deadline_{0};        // header or idle timeout; 0: none
  std::atomic<Nanos> write_deadline_{0};  // while writing: the last progress + write timeout; 0: none
  beast::flat_buffer buffer_;
  std::array<char, 16384> read_chunk_{};  // what a pending read reads into (arm_read)
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<Pending> queue_;
  std::string write_buffer_;
  std::size_t write_offset_ = 0;  // bytes of write_buffer_ written
  std::size_t unsent_bytes_ = 0;  // queued and not yet written, write_buffer_'s rest included
  std::vector<std::function<void(Nanos)>> written_callbacks_;
  std::shared_ptr<SessionResponder> responder_;
  std::vector<std::function<void()>> disconnect_callbacks_;
  std::uint64_t requests_served_ = 0;
  bool writing_ = false;
  bool in_response_ = false;
  bool response_done_ = false;
  bool keep_alive_ = true;
  bool streaming_ = false;
  bool abort_pending_ = false;
  bool closed_ = false;
  bool reading_ = false;
  bool continue_sent_ = false;
  bool request_deadline_armed_ = false;  // the header timeout of the request being read runs
  bool http10_ = false;                  // the current request is HTTP/1.0
  bool peer_closed_ = false;             // the peer sent end-of-stream during a response

 public:
  // The Responder of the current request: every call hops onto the session's
  // executor, so it may be used from any thread.
  class SessionResponder final : public Responder {
   public:
    explicit SessionResponder(std::shared_ptr<Session> s) : session_(std::move(s)) {}

    void respond(HttpResponse r) override {
      run([r = std::move(r)](Session& s) mutable {
        if (s.response_done_) return;
        if (s.streaming_) return s.abortive_close();  // only after a handler failed mid-stream
        s.response_done_ = true;
        const bool keep_alive = s.keep_alive_ && !s.ctx_.draining.load();
        if (s.http10_ && keep_alive) r.headers.push_back({"Connection", "keep-alive"});
        s.enqueue(serialize_response(r, keep_alive), nullptr);
      });
    }
    // HTTP/1.0 has no chunked coding (RFC 9112): its stream is the raw body,
    // ended by closing the connection.
    void start_stream(int status, std::string content_type, std::vector<Header> headers) override {
      run([status, ct = std::move(content_type), h = std::move(headers)](Session& s) {
        if (s.response_done_ || s.streaming_) return;
        s.streaming_ = true;
        if (s.http10_) s.keep_alive_ = false;
        s.enqueue(serialize_stream_head(status, ct, h, s.keep_alive_, !s.http10_), nullptr);
      });
    }
    void send(std::string data, std::function<void(Nanos)> on_written) override {
      run([d = std::move(data), cb = std::move(on_written)](Session& s) mutable {
        if (s.response_done_ || !s.streaming_ || d.empty()) return;
        s.enqueue(s.http10_ ? std::move(d) : chunk(d), std::move(cb));
      });
    }
    void end_stream() override {
      run([](Session& s) {
        if (s.response_done_ || !s.streaming_) return;
        s.streaming_ = false;
        s.response_done_ = true;
        if (!s.http10_)
          s.enqueue(std::string(kLastChunk), nullptr);
        else if (!s.writing_)
          s.after_writes();  // everything is written: close
      });
    }
    void reset() override {
      run([](Session& s) {
        s.response_done_ = true;
        s.abort_pending_ = true;
        if (!s.writing_) s.abortive_close();
      });
    }
    void on_disconnect(std::function<void()> cb) override {
      run([cb = std::move(cb)](Session& s) mutable {
        if (s.closed_) return cb();
        s.disconnect_callbacks_.push_back(std::move(cb));
      });
    }

   private:
    template <class F>
    void run(F&& f) {
      auto s = session_;
      if (s->ctx_.single_thread)
        asio::dispatch(s->stream_.get_executor(), [s, f = std::forward<F>(f)]() mutable { f(*s); });
      else
        asio::post(s->stream_.get_executor(), [s, f = std::forward<F>(f)]() mutable { f(*s); });
    }
    std::shared_ptr<Session> session_;
  };
};

}  // namespace tokenscope::net
