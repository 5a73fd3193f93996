#include "net/http_server.h"

#include <fmt/format.h>

#include <list>
#include <mutex>

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
      sweep();
    });
  }

  Impl(asio::io_context& io, ServerOptions o, const ServerLimits& limits, HttpHandler& handler,
       const Clock& clock)
      : ioc(io), options(std::move(o)), acceptor(asio::make_strand(io)), sweeper(acceptor.get_executor()) {
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
        return accept();  // e.g. EMFILE: keep serving the others
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
  return s;
}

}  // namespace tokenscope::net
