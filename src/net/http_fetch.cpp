#include "net/http_fetch.h"

#include <fmt/format.h>

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

namespace tokenscope::net {

namespace {
struct Collect final : ExchangeHandler {
  FetchResult* out;
  std::size_t cap;
  boost::asio::io_context* ioc = nullptr;  // set: abandon the exchange past the cap
  HttpClient* client = nullptr;
  bool over = false;
  Collect(FetchResult* o, std::size_t c) : out(o), cap(c) {}
  void on_sent(Nanos) override {}
  void on_headers(int status, Nanos) override { out->status = status; }
  void on_body(std::string_view d, Nanos) override {
    if (out->body.size() < cap) out->body.append(d.substr(0, cap - out->body.size()));
    if (ioc && !over && d.size() > 0 && out->body.size() >= cap) {
      over = true;
      boost::asio::post(*ioc, [c = client] { c->cancel_all(); });
    }
  }
  void on_complete(ExchangeError e, std::string_view m, Nanos) override {
    if (over)
      out->error = fmt::format("the answer is over {} bytes", cap);
    else if (e != ExchangeError::kNone)
      out->error = m.empty() ? std::string(exchange_error_name(e)) : std::string(m);
  }
};
}  // namespace

FetchResult fetch(const Endpoint& endpoint, const ClientOptions& options, const FetchRequest& request) {
  boost::asio::io_context ioc;
  SteadyClock clock;
  HttpClient client(ioc, endpoint, options, clock);
  FetchResult result;
  Collect handler(&result, request.max_body_bytes);
  if (request.abandon_over_cap) {
    handler.ioc = &ioc;
    handler.client = &client;
  }
  std::string msg = fmt::format("{} {}{} HTTP/1.1\r\nHost: {}\r\nAccept: */*\r\n", request.method,
                                endpoint.base_path, request.path, endpoint.host_header());
  for (const auto& [name, value] : request.headers) msg += name + ": " + value + "\r\n";
  if (!request.body.empty() || request.method == "POST")
    msg += fmt::format("Content-Type: application/json\r\nContent-Length: {}\r\n", request.body.size());
  msg += "\r\n";
  msg += request.body;
  const Nanos deadline = request.timeout_s > 0 ? clock.now_ns() + seconds_to_nanos(request.timeout_s) : 0;
  client.start(std::make_shared<const std::string>(std::move(msg)), &handler, deadline);
  ioc.run();
  return result;
}

}  // namespace tokenscope::net
