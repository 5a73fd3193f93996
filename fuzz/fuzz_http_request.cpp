// libFuzzer target: the HTTP/1.1 connection layer over an in-memory stream.
// The bytes arrive in two reads (split at a point the input chooses); the
// session must answer or close, never crash, whatever they hold.
#include <cstddef>
#include <cstdint>
#include <string>

#include <boost/beast/_experimental/test/stream.hpp>

#include "net/http_session.h"

namespace {
using namespace tokenscope;

struct Handler : net::HttpHandler {
  void handle(net::HttpRequest req, std::shared_ptr<net::Responder> r) override {
    if (req.path() == "/stream") {
      r->start_stream(200, "text/event-stream", {});
      r->send("data: " + req.body + "\n\n");
      r->end_stream();
      return;
    }
    net::HttpResponse resp;
    resp.body = req.target + req.body;
    r->respond(resp);
  }
  net::HttpResponse connection_error(int status, std::string_view message) override {
    net::HttpResponse r;
    r.status = status;
    r.body = std::string(message);
    return r;
  }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace asio = boost::asio;
  if (size == 0) return 0;
  const std::size_t split = data[0] % size;
  const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  asio::io_context ioc;
  Handler handler;
  ManualClock clock;
  net::ServerContext ctx;
  ctx.handler = &handler;
  ctx.clock = &clock;
  ctx.limits.max_body_bytes = 4096;
  ctx.limits.max_header_bytes = 2048;
  boost::beast::test::stream server(ioc), client(ioc);
  server.connect(client);
  auto session = std::make_shared<net::Session<boost::beast::test::stream>>(std::move(server), ctx);
  session->start();
  auto pump = [&] {
    ioc.restart();
    for (int i = 0; i < 100000 && ioc.poll() > 0; ++i) {
    }
  };
  pump();
  const std::size_t cut = std::min(split, input.size());
  client.write_some(asio::buffer(input.data(), cut));
  pump();
  client.write_some(asio::buffer(input.data() + cut, input.size() - cut));
  pump();
  client.close();
  pump();
  return 0;
}
