#include "net/http_client.h"

#include <fmt/format.h>

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <sys/socket.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <deque>
#include <limits>
#include <optional>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/error.h"
#include "net/response_reader.h"

namespace tokenscope::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string_view exchange_error_name(ExchangeError e) {
  switch (e) {
    case ExchangeError::kNone:
      return "none";
    case ExchangeError::kConnect:
      return "connect";
    case ExchangeError::kClosed:
      return "closed";
    case ExchangeError::kTimeout:
      return "timeout";
    case ExchangeError::kProtocol:
      return "protocol";
    case ExchangeError::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

Endpoint Endpoint::parse_url(std::string_view url) {
  Endpoint e;
  std::string_view rest;
  if (url.starts_with("http://")) {
    rest = url.substr(7);
    e.port = 80;
  } else if (url.starts_with("https://")) {
    rest = url.substr(8);
    e.tls = true;
    e.port = 443;
  } else {
    throw UsageError(fmt::format("--target '{}': expected http://HOST[:PORT][/PATH] or https://...", url));
  }
  const std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) e.base_path = std::string(rest.substr(slash));
  while (!e.base_path.empty() && e.base_path.back() == '/') e.base_path.pop_back();
  if (authority.find('@') != std::string_view::npos)
    throw UsageError(
        fmt::format("--target '{}': credentials in the URL are not supported (use --api-key)", url));
  std::string_view host = authority;
  if (!authority.empty() && authority.front() == '[') {  // [v6]:port
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos)
      throw UsageError(fmt::format("--target '{}': unterminated IPv6 address", url));
    host = authority.substr(1, close - 1);
    authority.remove_prefix(close + 1);
    if (!authority.empty() && authority.front() != ':')
      throw UsageError(fmt::format("--target '{}': expected ':PORT' after the IPv6 address", url));
  } else {
    const std::size_t colon = authority.rfind(':');
    host = authority.substr(0, colon);
    authority = colon == std::string_view::npos ? std::string_view() : authority.substr(colon);
  }
  if (!authority.empty()) {  // ":port"
    const std::string_view p = authority.substr(1);
    unsigned value = 0;
    const auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
    if (ec != std::errc() || ptr != p.data() + p.size() || value == 0 || value > 65535)
      throw UsageError(fmt::format("--target '{}': port '{}' is not a number in 1..65535", url, p));
    e.port = static_cast<std::uint16_t>(value);
  }
  if (host.empty()) throw UsageError(fmt::format("--target '{}': no host", url));
  e.host = std::string(host);
  return e;
}

std::string Endpoint::host_header() const {
  const bool v6 = host.find(':') != std::string::npos;
  const std::string h = v6 ? "[" + host + "]" : host;
  if ((tls && port == 443) || (!tls && port == 80)) return h;
  return fmt::format("{}:{}", h, port);
}

std::string Endpoint::url() const {
  return fmt::format("{}://{}{}", tls ? "https" : "http", host_header(), base_path);
}

namespace {

constexpr std::size_t kReadChunk = 16u << 10;
// An idle connection is checked for a close by the server (a system call)
// only when it has been idle this long: one freed a moment ago is reused at
// once (a server that closes a connection within a millisecond of answering
// on it says Connection: close).
constexpr Nanos kStaleCheckAfter = kNanosPerMilli;

class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  // Writes the request (after connecting when needed; a preconnect still
  // connecting writes it once connected).
  virtual void run(std::shared_ptr<const std::string> request, ExchangeHandler* handler, Nanos deadline,
                   bool reused) = 0;
  virtual void preconnect() = 0;  // connects without a request; joins the idle pool when it succeeds
  virtual void cancel() = 0;      // ends a running exchange with kCancelled, or closes an idle connection
  virtual void close() = 0;       // closes without a callback
  // An idle connection: false when the server has closed it (or sent bytes
  // nobody asked for), so it must not carry a request.
  virtual bool alive() = 0;
  // Starts a connect that waited for a free handshake slot.
  virtual void start_connect() = 0;
  // The handler of the exchange in progress (nullptr when idle).
  virtual ExchangeHandler* handler() const = 0;
  // An idle connection leaves no timer waiting, so that an io_context with
  // nothing else to do can finish (the timer outlives exchanges otherwise).
  virtual void drop_timer() = 0;
  virtual bool timer_waiting() const = 0;
  Nanos idle_since = 0;  // when it last joined the idle pool
};

}  // namespace

struct HttpClient::Impl : std::enable_shared_from_this<HttpClient::Impl> {
  Impl(asio::io_context& io, Endpoint ep, ClientOptions opt, const Clock& c)
      : ioc(io),
        endpoint(std::move(ep)),
        options(std::move(opt)),
        clock(c),
        ssl(asio::ssl::context::tls_client) {}

  // A request waiting for a connection; its timeout starts when it is written.
  struct Waiting {
    std::shared_ptr<const std::string> request;
    ExchangeHandler* handler = nullptr;
    Nanos timeout = 0;  // relative; 0: none
  };

  asio::io_context& ioc;
  Endpoint endpoint;
  ClientOptions options;
  const Clock& clock;
  asio::ssl::context ssl;
  tcp::resolver::results_type addresses;
  std::vector<std::shared_ptr<ConnectionBase>> idle;       // LIFO
  std::deque<std::shared_ptr<ConnectionBase>> unassigned;  // preconnects still connecting, no request yet
  std::deque<Waiting> waiting;
  // The last `unlimited` of `waiting` came while the connection limit
  // allowed them one and wait for open_for_waiting's turn; the others were
  // held by the limit, each counted once in counters.waited.
  std::size_t unlimited = 0;
  Waiting take_waiting() {  // the oldest
    Waiting w = std::move(waiting.front());
    if (waiting.size() == unlimited) --unlimited;
    waiting.pop_front();
    return w;
  }
  // Every request waiting now is held by the connection limit.
  void count_limited() {
    counters.waited += unlimited;
    unlimited = 0;
  }
  std::unordered_set<ConnectionBase*> open;  // every connection not closed yet
  std::size_t idle_target = std::numeric_limits<std::size_t>::max();
  bool trim_posted = false;
  bool open_posted = false;  // open_for_waiting's turn is queued
  bool shutting_down = false;
  std::size_t connecting = 0;  // TCP handshakes in progress
  std::size_t preconnects_pending = 0;
  std::function<void()> preconnect_done;
  // Connections waiting for a handshake slot (max_connecting); held here, as
  // no operation of theirs is pending yet.
  std::deque<std::shared_ptr<ConnectionBase>> connect_queue;
  ClientCounters counters;
  std::string host_header;

  bool below_limit() const { return options.max_connections == 0 || open.size() < options.max_connections; }
  std::shared_ptr<ConnectionBase> make_connection();
  void start(std::shared_ptr<const std::string> request, ExchangeHandler* handler, Nanos deadline,
             bool retry);
  // A kept-alive connection is free: the next waiting request, else the idle pool.
  void release(std::shared_ptr<ConnectionBase> c);
  // When every open connection is idle: their timers go (ConnectionBase::drop_timer).
  void drop_idle_timers_when_quiet();
  // Connections that set a timer's wait since the last quiet moment (those
  // that closed or whose wait ended since are pruned when it outgrows the
  // open ones), and the list they are dropped from.
  std::vector<std::weak_ptr<ConnectionBase>> timed, timed_scratch;
  void timer_set(const std::shared_ptr<ConnectionBase>& c) {
    if (timed.size() >= 2 * open.size() + 16)
      std::erase_if(timed, [](const std::weak_ptr<ConnectionBase>& w) {
        const auto c = w.lock();
        return !c || !c->timer_waiting();
      });
    timed.push_back(c);
  }
  // A preconnect finished connecting with no request assigned.
  void preconnected(const std::shared_ptr<ConnectionBase>& c);
  void opened(ConnectionBase* c) {
    open.insert(c);
    ++counters.connects;
    counters.peak_open = std::max<std::uint64_t>(counters.peak_open, open.size());
  }
  // A connection closed (once per connection): a waiting request may open a new one.
  void closed(ConnectionBase* c);
  // After the handlers ready now (the reads the same wake-up brought, which
  // may free connections for the waiting requests): each request still
  // waiting opens a connection while the limit allows.
  void open_for_waiting();
  void schedule_trim();
  // Handshake times seen (an exponential moving average), and how long an
  // attempt may take before it is started afresh: 8 times that average,
  // between 20 ms and 1 s; 200 ms before any handshake completed.
  double handshake_ewma_ns = 0;
  void handshake_took(Nanos ns) {
    handshake_ewma_ns = handshake_ewma_ns == 0 ? static_cast<double>(ns)
                                               : 0.9 * handshake_ewma_ns + 0.1 * static_cast<double>(ns);
  }
  Nanos handshake_retry_after() const {
    if (handshake_ewma_ns == 0) return 200 * kNanosPerMilli;
    return std::clamp<Nanos>(static_cast<Nanos>(8 * handshake_ewma_ns), 20 * kNanosPerMilli, kNanosPerSecond);
  }
  // A preconnect connected, failed or was closed before it could.
  void preconnect_finished() {
    if (preconnects_pending == 0 || --preconnects_pending > 0 || !preconnect_done) return;
    asio::post(ioc, std::exchange(preconnect_done, nullptr));
  }
  // A handshake ended: the next queued connection starts its own.
  void connect_done() {
    --connecting;
    while (!connect_queue.empty() && (options.max_connecting == 0 || connecting < options.max_connecting)) {
      std::shared_ptr<ConnectionBase> c = std::move(connect_queue.front());
      connect_queue.pop_front();
      c->start_connect();
    }
  }
  Nanos deadline_of(Nanos timeout) const { return timeout > 0 ? clock.now_ns() + timeout : 0; }
};

namespace {

template <bool kTls>
class Connection final : public ConnectionBase, public std::enable_shared_from_this<Connection<kTls>> {
 public:
  using Stream = std::conditional_t<kTls, asio::ssl::stream<tcp::socket>, tcp::socket>;

  explicit Connection(std::shared_ptr<HttpClient::Impl> client)
      : client_(std::move(client)), stream_(make_stream()), timer_(client_->ioc), retry_timer_(client_->ioc) {
    client_->opened(this);
  }
  ~Connection() override {
    if (client_ && counted_) client_->open.erase(this);
  }

  void run(std::shared_ptr<const std::string> request, ExchangeHandler* handler, Nanos deadline,
           bool reused) override {
    request_ = std::move(request);
    handler_ = handler;
    deadline_ = deadline;
    reused_ = reused;
    response_bytes_ = 0;
    headers_reported_ = false;
    failure_ = ExchangeError::kNone;
    parser_.emplace(
        [](void* self, std::string_view piece) { static_cast<Connection*>(self)->on_piece(piece); }, this,
        content_type_, client_->options.max_header_bytes);
    if (connecting_) return;  // a preconnect: written once connected (its connect timer still runs)
    if (!connected_) return connect();
    arm_timer(deadline);
    write();
  }

  bool alive() override {
    if (!connected_) return false;
    char c;
    const ssize_t n = ::recv(lowest().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;  // nothing pending: alive
    if (n == 0) return false;                                   // the server closed it
    // Bytes nobody asked for: on plain HTTP an unsolicited answer (say a 408)
    // before the server closes; under TLS they may be a session ticket the
    // server sent after the handshake, which cannot be told from an alert.
    return kTls;
  }

  void preconnect() override {
    deadline_ = 0;
    preconnect_ = true;
    connect();
  }

  void end_preconnect() {
    if (!preconnect_) return;
    preconnect_ = false;
    client_->preconnect_finished();
  }

  // Not once the exchange is failing (a cancel or timeout on its way): it is
  // ending already.
  ExchangeHandler* handler() const override { return failure_ == ExchangeError::kNone ? handler_ : nullptr; }

  void cancel() override {
    if (connecting_ && !in_handshake_) {  // waiting for a handshake slot: nothing is pending on the socket
      connecting_ = false;
      if (!handler_) return close();
      failure_ = ExchangeError::kCancelled;
      asio::post(client_->ioc,
                 [self = this->shared_from_this()] { self->finish(ExchangeError::kCancelled, "cancelled"); });
      return;
    }
    if (!handler_) return close();
    fail_later(ExchangeError::kCancelled);
  }

  void close() override {
    boost::system::error_code ignored;
    lowest().cancel(ignored);
    lowest().close(ignored);
    drop_timer();
    retry_timer_.cancel();
    connected_ = false;
    if (connecting_ && !in_handshake_) connecting_ = false;  // queued for a handshake: never starts
    end_preconnect();
    release_slot();
  }

 private:
  Stream make_stream() {
    if constexpr (kTls)
      return Stream(client_->ioc, client_->ssl);
    else
      return Stream(client_->ioc);
  }
  tcp::socket& lowest() {
    if constexpr (kTls)
      return stream_.next_layer();
    else
      return stream_;
  }

  // The connect's or the exchange's deadline (0: none). The wait is kept
  // across the exchanges of a kept-alive connection: a later deadline (each
  // request's is later than the one before) only becomes the target, and the
  // wait, when it fires, waits again for the target or ends what is running.
  // An earlier deadline sets the wait at once. No timer is set or cancelled
  // per request (each would be a heap update and, cancelled, a handler).
  void arm_timer(Nanos t) {
    timer_target_ = t;
    if (t <= 0 || (timer_due_ > 0 && timer_due_ <= t)) return;
    wait_timer(t);
  }

  void wait_timer(Nanos t) {
    if (timer_due_ == 0) client_->timer_set(this->shared_from_this());
    timer_due_ = t;
    timer_.expires_at(asio::steady_timer::time_point(std::chrono::nanoseconds(t)));  // cancels a wait set
    timer_.async_wait([self = this->shared_from_this(), token = ++timer_token_](
                          const boost::system::error_code& ec) { self->on_timer(ec, token); });
  }

  void on_timer(const boost::system::error_code& ec, std::uint64_t token) {
    if (token != timer_token_) return;  // a wait set again since
    timer_due_ = 0;
    if (ec || timer_target_ <= 0 || (!handler_ && !connecting_)) return;
    if (timer_target_ > client_->clock.now_ns()) return wait_timer(timer_target_);
    fail_later(connecting_ ? ExchangeError::kConnect : ExchangeError::kTimeout);
  }

  bool timer_waiting() const override { return timer_due_ != 0; }

  void drop_timer() override {
    timer_target_ = 0;
    if (timer_due_ == 0) return;
    timer_due_ = 0;
    ++timer_token_;
    timer_.cancel();
  }

  // Records why the exchange ends and closes the socket; the pending
  // operation then completes with an error and reports this reason.
  void fail_later(ExchangeError why) {
    if (failure_ == ExchangeError::kNone) failure_ = why;
    boost::system::error_code ignored;
    // A request given up (timeout, Ctrl-C) is reset, not closed: a server
    // that takes a close after the request for a half-close (as serve does)
    // would otherwise generate to the end for nobody.
    if (connected_ && (why == ExchangeError::kTimeout || why == ExchangeError::kCancelled))
      lowest().set_option(asio::socket_base::linger(true, 0), ignored);
    lowest().cancel(ignored);
    lowest().close(ignored);
    connected_ = false;
  }

  // The connection no longer counts against max_connections (once).
  void release_slot() {
    if (!counted_) return;
    counted_ = false;
    client_->closed(this);
  }

  void connect() {
    connecting_ = true;
    if (client_->options.max_connecting > 0 && client_->connecting >= client_->options.max_connecting) {
      client_->connect_queue.push_back(this->shared_from_this());
      return;  // start_connect() when a handshake slot frees up
    }
    start_connect();
  }

  void start_connect() override {
    if (!connecting_) return;  // closed while it waited
    ++client_->connecting;
    in_handshake_ = true;
    const Nanos connect_deadline =
        client_->clock.now_ns() + static_cast<Nanos>(client_->options.connect_timeout_s * 1e9);
    // The tighter of the connect timeout and the exchange's deadline; a
    // deadline that passes while connecting is still reported as a timeout.
    if (deadline_ > 0 && deadline_ <= connect_deadline) {
      arm_timer(deadline_);
      deadline_while_connecting_ = true;
    } else {
      arm_timer(connect_deadline);
    }
    retry_after_ = client_->handshake_retry_after();
    attempt();
  }

  // One TCP handshake attempt. A SYN the server dropped (a full listen
  // backlog) is retransmitted by the kernel only after 1 s, then 3 s, 7 s...;
  // an attempt that takes far longer than handshakes have taken here is
  // abandoned and started afresh instead (retry_after_, doubling each time).
  void attempt() {
    handshake_started_ = client_->clock.now_ns();
    // Asio's range connect reports a socket that cannot be opened (no
    // descriptors left) as "Operation canceled"; say what it is.
    boost::system::error_code open_ec;
    lowest().open(client_->addresses.begin()->endpoint().protocol(), open_ec);
    if (open_ec) {
      asio::post(client_->ioc, [self = this->shared_from_this(), open_ec] {
        self->fail_connect("cannot open a socket: " + open_ec.message());
      });
      return;
    }
    asio::async_connect(lowest(), client_->addresses,
                        [self = this->shared_from_this()](const boost::system::error_code& ec,
                                                          const tcp::endpoint&) { self->on_connect(ec); });
    retry_timer_.expires_after(std::chrono::nanoseconds(retry_after_));
    retry_timer_.async_wait(
        [self = this->shared_from_this(), n = ++attempts_](const boost::system::error_code& ec) {
          if (ec || n != self->attempts_ || !self->in_handshake_ || self->failure_ != ExchangeError::kNone)
            return;
          self->retrying_ = true;
          boost::system::error_code ignored;
          self->lowest().close(ignored);  // the pending connect completes with operation_aborted
        });
  }

  // The TCP handshake is over (either way): its slot goes to the next connect.
  void end_handshake() {
    if (!in_handshake_) return;
    in_handshake_ = false;
    client_->connect_done();
  }

  void on_connect(const boost::system::error_code& ec) {
    if (retrying_ && failure_ == ExchangeError::kNone) {
      retrying_ = false;
      ++client_->counters.connect_retries;
      retry_after_ = std::min<Nanos>(2 * retry_after_, kNanosPerSecond);
      return attempt();
    }
    retrying_ = false;
    retry_timer_.cancel();
    if (!ec) client_->handshake_took(client_->clock.now_ns() - handshake_started_);
    end_handshake();
    if (ec) {
      return fail_connect(fmt::format("connect to {}: {}", client_->endpoint.host_header(), ec.message()));
    }
    boost::system::error_code ignored;
    lowest().set_option(tcp::no_delay(true), ignored);
    if constexpr (kTls) {
      if (!SSL_set_tlsext_host_name(stream_.native_handle(), client_->endpoint.host.c_str()))
        return finish(ExchangeError::kConnect, "TLS: cannot set the server name");
      if (client_->options.verify_tls)
        stream_.set_verify_callback(asio::ssl::host_name_verification(client_->endpoint.host));
      stream_.async_handshake(asio::ssl::stream_base::client,
                              [self = this->shared_from_this()](const boost::system::error_code& hec) {
                                if (hec) return self->fail_connect("TLS handshake: " + hec.message());
                                self->connected();
                              });
    } else {
      connected();
    }
  }

  void fail_connect(std::string message) {
    end_handshake();
    end_preconnect();
    ++client_->counters.connect_failures;
    connecting_ = false;
    if (failure_ == ExchangeError::kCancelled) return finish(ExchangeError::kCancelled, "cancelled");
    if (deadline_while_connecting_ && failure_ == ExchangeError::kConnect)
      return finish(ExchangeError::kTimeout, "request timed out while connecting");
    if (failure_ == ExchangeError::kConnect) message = "connect timed out";
    finish(ExchangeError::kConnect, std::move(message));
  }

  void connected() {
    connecting_ = false;
    connected_ = true;
    end_preconnect();
    if (!handler_) {  // preconnected: wait in the pool
      drop_timer();
      client_->preconnected(this->shared_from_this());
      return;
    }
    if (!deadline_while_connecting_) arm_timer(deadline_);
    deadline_while_connecting_ = false;
    write();
  }

  void write() {
    handler_->on_sent(client_->clock.now_ns());
    asio::async_write(stream_, asio::buffer(*request_),
                      [self = this->shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                        if (ec) return self->on_transport_error(ec, /*written=*/false);
                        self->read();
                      });
  }

  void read() {
    auto space = buffer_.prepare(kReadChunk);
    stream_.async_read_some(
        space, [self = this->shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          self->on_read(ec, n);
        });
  }

  void on_read(const boost::system::error_code& ec, std::size_t n) {
    const Nanos t = client_->clock.now_ns();
    if (n > 0) {
      buffer_.commit(n);
      response_bytes_ += n;
      if (!parse(t)) return;
    }
    if (ec) {
      if ((ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) &&
          failure_ == ExchangeError::kNone && parser_->need_eof()) {
        boost::system::error_code pec;
        parser_->put_eof(pec);
        if (!pec) return complete(t);
      }
      return on_transport_error(ec);
    }
    read();
  }

  void report_headers(Nanos t) {
    if (headers_reported_ || !parser_->is_header_done()) return;
    headers_reported_ = true;
    if (parser_->has_content_type()) handler_->on_content_type(parser_->content_type());
    handler_->on_headers(parser_->status(), t);
  }

  // A piece of the body, inside the parser's put(), with the time of its read.
  void on_piece(std::string_view piece) {
    report_headers(read_time_);  // the header and a first piece may come in one put()
    handler_->on_body(piece, read_time_);
  }

  // Feeds buffered bytes to the parser; returns false when the exchange ended.
  bool parse(Nanos t) {
    read_time_ = t;
    for (;;) {
      boost::system::error_code ec;
      const auto bytes = buffer_.data();
      const std::size_t used =
          parser_->put(std::string_view(static_cast<const char*>(bytes.data()), bytes.size()), ec);
      buffer_.consume(used);
      report_headers(t);
      if (ec == http::error::need_more) return true;
      if (ec) {
        finish(ExchangeError::kProtocol, "invalid HTTP response: " + ec.message());
        close();
        return false;
      }
      if (parser_->is_done()) {
        complete(t);
        return false;
      }
      if (used == 0) return true;
    }
  }

  void complete(Nanos t) {
    const bool keep = parser_->keep_alive() && buffer_.size() == 0 && connected_;
    if (served_++ > 0) ++client_->counters.reused;
    timer_target_ = 0;  // the wait stays (see arm_timer); the pool drops it once nothing runs
    ExchangeHandler* h = handler_;
    handler_ = nullptr;
    request_.reset();
    parser_.reset();
    if (keep)
      client_->release(this->shared_from_this());
    else
      close();
    h->on_complete(ExchangeError::kNone, {}, t);
  }

  // written: the whole request went out before the error.
  void on_transport_error(const boost::system::error_code& ec, bool written = true) {
    if (failure_ != ExchangeError::kNone) {
      const auto why = failure_;
      return finish(why, why == ExchangeError::kTimeout ? "request timed out" : "cancelled");
    }
    // A kept-alive connection the server had closed (its close crossed our
    // request: servers such as llama.cpp's close after a number of requests
    // or a stream without saying so): resend once on a fresh connection when
    // nothing of a response came and either the request could not be written
    // whole or the server ended the connection in order (end of stream). A
    // reset (RST) after the request was written is the request's failure,
    // never resent: the server may have received and counted it, and a reset
    // a server or proxy injected would be hidden.
    if (reused_ && response_bytes_ == 0 &&
        (ec == asio::error::eof ||
         (!written && (ec == asio::error::connection_reset || ec == asio::error::broken_pipe)))) {
      close();
      ExchangeHandler* h = handler_;
      handler_ = nullptr;
      auto request = std::move(request_);
      ++client_->counters.resent;
      client_->start(std::move(request), h, deadline_, /*retry=*/true);
      return;
    }
    std::string what =
        ec == asio::error::eof
            ? (response_bytes_ == 0 ? "connection closed by the server before any response"
                                    : "connection closed by the server before the response ended")
            : "connection error: " + ec.message();
    if (reused_ && response_bytes_ == 0)
      what += " (on a kept-alive connection; not resent: the server may have received it)";
    finish(ExchangeError::kClosed, what);
  }

  void finish(ExchangeError e, std::string message) {
    close();
    ExchangeHandler* h = handler_;
    handler_ = nullptr;
    request_.reset();
    if (h) h->on_complete(e, message, client_->clock.now_ns());
  }

  std::shared_ptr<HttpClient::Impl> client_;
  Stream stream_;
  asio::steady_timer timer_;
  Nanos timer_due_ = 0;     // when the wait set fires (0: none set)
  Nanos timer_target_ = 0;  // the deadline of what runs (0: none)
  std::uint64_t timer_token_ = 0;
  beast::flat_buffer buffer_;
  std::string content_type_;  // the parser's, kept across exchanges (declared first: it outlives the parser)
  std::optional<ResponseReader> parser_;
  std::shared_ptr<const std::string> request_;
  ExchangeHandler* handler_ = nullptr;
  bool connected_ = false;
  bool reused_ = false;
  bool headers_reported_ = false;
  bool connecting_ = false;
  bool deadline_while_connecting_ = false;
  Nanos deadline_ = 0;
  std::size_t response_bytes_ = 0;
  ExchangeError failure_ = ExchangeError::kNone;
  bool counted_ = true;        // in the client's open set
  std::uint64_t served_ = 0;   // exchanges completed on this connection
  bool in_handshake_ = false;  // holds one of max_connecting
  bool preconnect_ = false;    // opened by preconnect(), not connected or failed yet
  asio::steady_timer retry_timer_;
  bool retrying_ = false;  // the retry timer closed the socket of the attempt in progress
  std::uint64_t attempts_ = 0;
  Nanos retry_after_ = 0;
  Nanos handshake_started_ = 0;
  Nanos read_time_ = 0;  // of the read being parsed
};

}  // namespace

std::shared_ptr<ConnectionBase> HttpClient::Impl::make_connection() {
  if (endpoint.tls) return std::make_shared<Connection<true>>(shared_from_this());
  return std::make_shared<Connection<false>>(shared_from_this());
}

void HttpClient::Impl::start(std::shared_ptr<const std::string> request, ExchangeHandler* handler,
                             Nanos deadline, bool retry) {
  if (!retry) {
    while (!idle.empty()) {
      std::shared_ptr<ConnectionBase> c = std::move(idle.back());
      idle.pop_back();
      if (clock.now_ns() - c->idle_since < kStaleCheckAfter || c->alive())
        return c->run(std::move(request), handler, deadline, /*reused=*/true);
      ++counters.stale_dropped;  // closed by the server while idle: never written to
      c->close();
    }
    if (!unassigned.empty()) {
      std::shared_ptr<ConnectionBase> c = std::move(unassigned.front());
      unassigned.pop_front();
      return c->run(std::move(request), handler, deadline, /*reused=*/false);
    }
  }
  if (retry) return make_connection()->run(std::move(request), handler, deadline, false);
  // No connection free: the request waits for one. Below the limit it
  // waits only until the handlers ready now have run: a response among
  // them frees a connection that it then takes, and otherwise it opens one.
  // A schedule that fell behind (a client paused by the machine, then many
  // sends due at once) then sends on the connections those responses free
  // instead of opening one per send, each a handshake on the sending core
  // and on the server's.
  waiting.push_back(
      {std::move(request), handler, deadline > 0 ? std::max<Nanos>(1, deadline - clock.now_ns()) : 0});
  ++unlimited;
  if (below_limit())
    open_for_waiting();
  else
    count_limited();
}

void HttpClient::Impl::open_for_waiting() {
  if (open_posted) return;
  open_posted = true;
  asio::post(ioc, [self = shared_from_this()] {
    self->open_posted = false;
    if (self->shutting_down) return;
    while (!self->waiting.empty() && self->below_limit()) {
      Waiting w = self->take_waiting();
      self->make_connection()->run(std::move(w.request), w.handler, self->deadline_of(w.timeout), false);
    }
    self->count_limited();  // those left wait for a connection to close or be freed
  });
}

void HttpClient::Impl::release(std::shared_ptr<ConnectionBase> c) {
  if (!waiting.empty()) {
    Waiting w = take_waiting();
    return c->run(std::move(w.request), w.handler, deadline_of(w.timeout), /*reused=*/true);
  }
  c->idle_since = clock.now_ns();
  idle.push_back(std::move(c));
  drop_idle_timers_when_quiet();
  schedule_trim();
}

void HttpClient::Impl::preconnected(const std::shared_ptr<ConnectionBase>& c) {
  const auto it = std::find(unassigned.begin(), unassigned.end(), c);
  if (it != unassigned.end()) unassigned.erase(it);
  if (!waiting.empty()) {
    Waiting w = take_waiting();
    return c->run(std::move(w.request), w.handler, deadline_of(w.timeout), /*reused=*/false);
  }
  c->idle_since = clock.now_ns();
  // At the cold end of the pool (it is LIFO), behind those made before it:
  // the first made go first. A server accepts connections in the order they
  // were made, so the last made may still wait in its accept queue when the
  // first requests go out (a few hundred made just before a run's start).
  idle.insert(idle.begin(), c);
  drop_idle_timers_when_quiet();
  schedule_trim();
}

void HttpClient::Impl::drop_idle_timers_when_quiet() {
  if (idle.size() != open.size() || timed.empty()) return;  // something runs or connects
  // Those that set a wait since the last quiet moment (a wait that fired or
  // was dropped since is dropped again at no cost).
  timed_scratch.swap(timed);  // drop_timer() sets no wait: `timed` stays empty meanwhile
  for (auto& w : timed_scratch)
    if (auto c = w.lock()) c->drop_timer();
  timed_scratch.clear();
}

void HttpClient::Impl::closed(ConnectionBase* c) {
  open.erase(c);
  drop_idle_timers_when_quiet();
  for (auto it = unassigned.begin(); it != unassigned.end(); ++it)
    if (it->get() == c) {
      unassigned.erase(it);
      break;
    }
  if (shutting_down || waiting.empty() || !below_limit()) return;
  // A slot is free: the oldest waiting request opens a connection, after
  // the current handler (close() runs inside other connections' callbacks).
  open_for_waiting();
}

void HttpClient::Impl::schedule_trim() {
  if (trim_posted || idle.size() <= idle_target) return;
  trim_posted = true;
  // After the current handler: a caller may reuse the connection it just freed.
  asio::post(ioc, [self = shared_from_this()] {
    self->trim_posted = false;
    std::size_t excess = self->idle.size() > self->idle_target ? self->idle.size() - self->idle_target : 0;
    if (excess == 0) return;
    // The oldest idle connections go (the pool is LIFO: the front is coldest).
    std::vector<std::shared_ptr<ConnectionBase>> doomed(
        self->idle.begin(), self->idle.begin() + static_cast<std::ptrdiff_t>(excess));
    self->idle.erase(self->idle.begin(), self->idle.begin() + static_cast<std::ptrdiff_t>(excess));
    self->counters.idle_closed += excess;
    for (auto& c : doomed) c->close();
  });
}

HttpClient::HttpClient(asio::io_context& ioc, Endpoint endpoint, ClientOptions options, const Clock& clock)
    : impl_(std::make_shared<Impl>(ioc, std::move(endpoint), std::move(options), clock)) {
  boost::system::error_code ec;
  tcp::resolver resolver(ioc);
  impl_->addresses = resolver.resolve(impl_->endpoint.host, std::to_string(impl_->endpoint.port), ec);
  if (ec || impl_->addresses.empty())
    throw UsageError(fmt::format("--target: cannot resolve '{}': {}", impl_->endpoint.host, ec.message()));
  if (impl_->endpoint.tls) {
    auto& ssl = impl_->ssl;
    ssl.set_default_verify_paths(ec);
    if (!impl_->options.ca_file.empty()) {
      ssl.load_verify_file(impl_->options.ca_file, ec);
      if (ec) throw UsageError(fmt::format("--ca-file '{}': {}", impl_->options.ca_file, ec.message()));
    }
    ssl.set_verify_mode(impl_->options.verify_tls ? asio::ssl::verify_peer : asio::ssl::verify_none);
  }
}

HttpClient::~HttpClient() {
  impl_->shutting_down = true;
  // Their handlers are not called: an owner destroys its client only when
  // no exchange of its own runs (or after cancel_all()). That includes one
  // started this turn that waits for open_for_waiting's.
  impl_->waiting.clear();
  impl_->unlimited = 0;
  impl_->connect_queue.clear();
  std::vector<std::shared_ptr<ConnectionBase>> idle(impl_->idle.begin(), impl_->idle.end());
  impl_->idle.clear();
  for (auto& c : idle) c->close();
  for (auto& c : std::deque<std::shared_ptr<ConnectionBase>>(impl_->unassigned)) c->close();
  impl_->unassigned.clear();
}

void HttpClient::start(std::shared_ptr<const std::string> request, ExchangeHandler* handler, Nanos deadline) {
  impl_->start(std::move(request), handler, deadline, false);
}

void HttpClient::preconnect(std::size_t n, std::function<void()> done) {
  std::vector<std::shared_ptr<ConnectionBase>> fresh;
  for (std::size_t i = 0; i < n && impl_->below_limit(); ++i) {
    fresh.push_back(impl_->make_connection());
    impl_->unassigned.push_back(fresh.back());
  }
  impl_->preconnects_pending += fresh.size();
  if (done) {
    if (impl_->preconnects_pending == 0)
      asio::post(impl_->ioc, std::move(done));
    else
      impl_->preconnect_done = std::move(done);
  }
  for (auto& c : fresh) c->preconnect();
}

void HttpClient::set_idle_target(std::size_t n) {
  impl_->idle_target = n;
  impl_->schedule_trim();
}

bool HttpClient::cancel(ExchangeHandler* handler) {
  if (!handler) return false;
  for (auto it = impl_->waiting.begin(); it != impl_->waiting.end(); ++it) {
    if (it->handler != handler) continue;
    if (static_cast<std::size_t>(impl_->waiting.end() - it) <= impl_->unlimited) --impl_->unlimited;
    impl_->waiting.erase(it);
    asio::post(impl_->ioc, [handler, self = impl_] {
      handler->on_complete(ExchangeError::kCancelled, "cancelled before a connection was free",
                           self->clock.now_ns());
    });
    return true;
  }
  for (ConnectionBase* c : impl_->open)
    if (c->handler() == handler) {
      c->cancel();
      return true;
    }
  return false;
}

void HttpClient::cancel_all() {
  // Waiting requests end first (after this call returns), so that no
  // connection closed below hands its slot to one of them.
  std::deque<Impl::Waiting> waiting;
  waiting.swap(impl_->waiting);
  impl_->unlimited = 0;
  for (auto& w : waiting)
    asio::post(impl_->ioc, [h = w.handler, self = impl_] {
      h->on_complete(ExchangeError::kCancelled, "cancelled before a connection was free",
                     self->clock.now_ns());
    });
  // Out of the pool before they close: closed() must not take the pool for
  // quiet while those still in it close one by one.
  std::vector<std::shared_ptr<ConnectionBase>> idle(impl_->idle.begin(), impl_->idle.end());
  impl_->idle.clear();
  for (auto& c : idle) c->close();
  std::vector<ConnectionBase*> open(impl_->open.begin(), impl_->open.end());
  for (ConnectionBase* c : open) c->cancel();
}

ClientCounters HttpClient::counters() const {
  ClientCounters c = impl_->counters;
  c.open = impl_->open.size();
  c.idle = impl_->idle.size();
  return c;
}

const Endpoint& HttpClient::endpoint() const {
  return impl_->endpoint;
}

}  // namespace tokenscope::net
