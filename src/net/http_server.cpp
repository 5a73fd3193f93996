#include "net/http_server.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <list>
#include <mutex>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/error.h"
#include "net/http_session.h"

namespace tokenscope::net {

using tcp = asio::ip::tcp;

struct HttpServer::Impl {
  asio::io_context& ioc;
  ServerOptions options;
  ServerContext ctx;
  tcp::acceptor acceptor;
  std::mutex mutex;
  std::list<std::weak_ptr<Session<beast::tcp_stream>>> sessions;
  asio::steady_timer sweeper;
  asio::steady_timer accept_backoff;
  std::array<std::atomic<std::uint64_t>, kAcceptErrors> accept_errors{};
  std::array<bool, kAcceptErrors> warned{};  // acceptor's executor only
  std::size_t peak_since_trim = 0;           // sweeper only
  Nanos last_trim = 0;
  bool stopped = false;

  // Checks the header, idle and write deadlines of every connection, every
  // 50 ms.
  void sweep() {
    sweeper.expires_after(std::chrono::milliseconds(50));
    sweeper.async_wait([this](beast::error_code ec) {
      if (ec) return;
      const Nanos now = ctx.clock->now_ns();
      {
        std::lock_guard lock(mutex);
        sessions.remove_if([&](const auto& w) {
          auto s = w.lock();
          if (!s) return true;
          s->poll_deadline(now);
          return false;
        });
      }
      trim_memory(now);
      sweep();
    });
  }

  // glibc keeps freed heap memory for reuse: after a crowd of connections
  // (an idle flood, stalled readers) has gone, the process would stay at its
  // peak. Once the open connections have fallen to half their peak since the
  // last trim, give the free pages back, at most once a second and only
  // while no response is in progress: returning memory takes about 1 ms per
  // MB returned, and holds up allocations meanwhile.
  void trim_memory(Nanos now) {
    const std::size_t open = ctx.connections.load(std::memory_order_relaxed);
    peak_since_trim = std::max(peak_since_trim, open);
    if (peak_since_trim == 0 || open > peak_since_trim / 2 || now - last_trim < kNanosPerSecond ||
        ctx.responses.load(std::memory_order_relaxed) > 0)
      return;
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
    last_trim = now;
    peak_since_trim = open;
  }

  void warn(std::string_view message) const {
    if (options.warn)
      options.warn(message);
    else
      std::cerr << message << std::endl;
  }

  Impl(asio::io_context& io, ServerOptions o, const ServerLimits& limits, HttpHandler& handler,
       const Clock& clock)
      : ioc(io),
        options(std::move(o)),
        acceptor(asio::make_strand(io)),
        sweeper(acceptor.get_executor()),
        accept_backoff(acceptor.get_executor()) {
    ctx.handler = &handler;
    ctx.clock = &clock;
    ctx.limits = limits;
    ctx.single_thread = options.single_thread;
  }

  void accept() {
    auto executor = ctx.single_thread ? asio::any_io_executor(ioc.get_executor())
                                      : asio::any_io_executor(asio::make_strand(ioc));
    acceptor.async_accept(executor, [this](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
        return accept_failed(ec);
      }
      socket.set_option(tcp::no_delay(true), ec);
      if (ctx.connections.load() >= ctx.limits.max_connections) {
        refuse(std::move(socket));
      } else {
        auto session =
            std::make_shared<Session<beast::tcp_stream>>(beast::tcp_stream(std::move(socket)), ctx);
        {
          std::lock_guard lock(mutex);
          sessions.push_back(session);
        }
        session->start();
      }
      accept();
    });
  }

  // Out of descriptors (EMFILE, ENFILE) or kernel memory, accept() fails
  // again at once: trying again in a loop would spin a core and starve the
  // connections being served. Wait 100 ms between tries (the clients wait in
  // the listen backlog), count every failure and say so once per kind.
  void accept_failed(const beast::error_code& ec) {
    const AcceptError kind = ec == boost::system::errc::too_many_files_open             ? AcceptError::kEmfile
                             : ec == boost::system::errc::too_many_files_open_in_system ? AcceptError::kEnfile
                                                                                        : AcceptError::kOther;
    const auto k = static_cast<std::size_t>(kind);
    accept_errors[k].fetch_add(1, std::memory_order_relaxed);
    if (!warned[k]) {
      warned[k] = true;
      warn(fmt::format(
          "accept failed: {} ({}), with {} connections open; trying again every 100 ms while it lasts "
          "(counted in tokenscope:accept_errors_total, not logged again)",
          ec.message(), accept_error_name(kind), ctx.connections.load()));
    }
    accept_backoff.expires_after(std::chrono::milliseconds(100));
    accept_backoff.async_wait([this](beast::error_code e) {
      if (!e) accept();
    });
  }

  // Over the connection limit: a short 503 with Retry-After, written inline.
  void refuse(tcp::socket socket) {
    ctx.count_drop(DropReason::kMaxConnections);
    HttpResponse r = ctx.handler->connection_error(503, "too many connections; retry later");
    r.headers.push_back({"Retry-After", "1"});
    const std::string bytes = serialize_response(r, false);
    beast::error_code ec;
    socket.non_blocking(false, ec);
    asio::write(socket, asio::buffer(bytes), ec);
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
  }
};

HttpServer::HttpServer(asio::io_context& ioc, ServerOptions options, const ServerLimits& limits,
                       HttpHandler& handler, const Clock& clock)
    : impl_(std::make_unique<Impl>(ioc, std::move(options), limits, handler, clock)) {}

HttpServer::~HttpServer() = default;

void HttpServer::start() {
  beast::error_code ec;
  const auto address = asio::ip::make_address(impl_->options.host, ec);
  if (ec) throw UsageError(fmt::format("--host: '{}' is not an IP address", impl_->options.host));
  const tcp::endpoint endpoint(address, impl_->options.port);
  auto& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(impl_->options.backlog, ec);
  if (ec)
    throw UsageError(
        fmt::format("cannot listen on {}:{}: {}", impl_->options.host, impl_->options.port, ec.message()));
  impl_->accept();
  impl_->sweep();
}

std::uint16_t HttpServer::port() const {
  beast::error_code ec;
  const auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

void HttpServer::drain() {
  impl_->ctx.draining.store(true);
  asio::post(impl_->acceptor.get_executor(), [impl = impl_.get()] {
    beast::error_code ec;
    impl->acceptor.close(ec);
    impl->accept_backoff.cancel();
  });
  std::lock_guard lock(impl_->mutex);
  for (auto& w : impl_->sessions)
    if (auto s = w.lock()) s->close_if_idle();
}

std::size_t HttpServer::connections() const {
  return impl_->ctx.connections.load();
}

ConnectionStats HttpServer::stats() const {
  ConnectionStats s;
  s.open = impl_->ctx.connections.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < kDropReasons; ++i)
    s.dropped[i] = impl_->ctx.dropped[i].load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < kAcceptErrors; ++i)
    s.accept_errors[i] = impl_->accept_errors[i].load(std::memory_order_relaxed);
  return s;
}

DescriptorBudget fit_descriptor_limit(std::size_t max_connections) {
  DescriptorBudget b;
  b.max_connections = max_connections;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return b;
  std::error_code ec;
  std::size_t open_now = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++open_now;
  b.reserved = std::max<std::size_t>(open_now, 3) + 16;
  b.soft_before = lim.rlim_cur;
  b.hard = lim.rlim_max;
  // Each connection, one being refused with 503, and the reserve.
  const std::uint64_t needed = static_cast<std::uint64_t>(max_connections) + 1 + b.reserved;
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < needed) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max == RLIM_INFINITY ? needed : std::min<std::uint64_t>(needed, lim.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  b.soft = lim.rlim_cur;
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < needed) {
    const std::uint64_t allowed = lim.rlim_cur > b.reserved + 2 ? lim.rlim_cur - b.reserved - 1 : 1;
    b.max_connections = static_cast<std::size_t>(std::min<std::uint64_t>(allowed, max_connections));
  }
  return b;
}

bool is_loopback_host(std::string_view host) {
  if (host == "localhost") return true;
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(std::string(host), ec);
  return !ec && address.is_loopback();
}

}  // namespace tokenscope::net
