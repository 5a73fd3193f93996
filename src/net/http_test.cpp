// The connection layer over an in-memory stream: parsing, limits, framing.
#include <gtest/gtest.h>
#include <stdexcept>

#include <boost/beast/_experimental/test/stream.hpp>

#include "net/http_server.h"
#include "net/http_session.h"

namespace tokenscope::net {
namespace {

using TestStream = beast::test::stream;

// Records requests; answers according to the path.
struct EchoHandler : HttpHandler {
  std::vector<HttpRequest> seen;
  std::shared_ptr<Responder> last;
  bool disconnected = false;
  void handle(HttpRequest req, std::shared_ptr<Responder> r) override {
    seen.push_back(req);
    last = r;
    if (req.path() == "/stream") {
      r->on_disconnect([this] { disconnected = true; });
      r->start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
      r->send("data: one\n\n");
      r->send("data: two\n\n");
      if (req.target.find("hold") == std::string::npos) r->end_stream();
      return;
    }
    if (req.path() == "/reset") return r->reset();
    if (req.path() == "/throw") throw std::runtime_error("a defect");
    HttpResponse resp;
    resp.body =
        "{\"path\":\"" + std::string(req.path()) + "\",\"len\":" + std::to_string(req.body.size()) + "}";
    r->respond(resp);
  }
  HttpResponse connection_error(int status, std::string_view message) override {
    HttpResponse r;
    r.status = status;
    r.body = "{\"error\":\"" + std::string(message) + "\"}";
    return r;
  }
};

class Connection : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx.handler = &handler;
    ctx.clock = &clock;
    ctx.limits.max_body_bytes = 1000;
    ctx.limits.max_header_bytes = 500;
    ctx.limits.header_timeout_s = 1.0;
    server.connect(client);
    session = std::make_shared<Session<TestStream>>(std::move(server), ctx);
    session->start();
    pump();
  }
  void pump() {
    ioc.restart();
    while (ioc.poll() > 0) {
    }
  }
  std::string send(const std::string& bytes) {
    client.write_some(asio::buffer(bytes));
    pump();
    std::string out(client.str());
    client.clear();
    return out;
  }

  // Runs the server's deadline check as its sweeper would.
  void sweep() {
    session->poll_deadline(clock.now_ns());
    pump();
  }

  asio::io_context ioc;
  ManualClock clock{1000};
  EchoHandler handler;
  ServerContext ctx;
  TestStream server{ioc};
  // The client's end; resetting it is a peer that is gone entirely (the
  // server's next write fails, as after a TCP reset), while client.close()
  // only ends what the client sends (a half-close: it still reads).
  std::unique_ptr<TestStream> client_end = std::make_unique<TestStream>(ioc);
  TestStream& client = *client_end;
  std::shared_ptr<Session<TestStream>> session;
};

TEST(LoopbackHost, OnlyTheLoopbackInterface) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "::1", "localhost"}) EXPECT_TRUE(is_loopback_host(h)) << h;
  for (const char* h : {"0.0.0.0", "::", "10.0.0.1", "192.168.1.5", "example.com", "", "127.0.0.1.evil"})
    EXPECT_FALSE(is_loopback_host(h)) << h;
}

TEST_F(Connection, ParsesRequestsAndKeepsTheConnectionAlive) {
  const auto a = send("POST /v1/x?y=1 HTTP/1.1\r\nHost: h\r\nX-Key: Val\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(
      a,
      "HTTP/1.1 200 OK\r\nServer: tokenscope\r\nContent-Type: application/json\r\nContent-Length: 24\r\n\r\n"
      "{\"path\":\"/v1/x\",\"len\":5}");
  ASSERT_EQ(handler.seen.size(), 1u);
  EXPECT_EQ(handler.seen[0].method, "POST");
  EXPECT_EQ(handler.seen[0].target, "/v1/x?y=1");
  EXPECT_EQ(handler.seen[0].header("x-key"), "Val");
  EXPECT_EQ(handler.seen[0].body, "hello");
  EXPECT_EQ(handler.seen[0].t_received, 1000);
  const auto b = send("GET /again HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_NE(b.find("{\"path\":\"/again\",\"len\":0}"), std::string::npos);
  EXPECT_EQ(handler.seen.size(), 2u);
}

// A handler that throws fails its own request with 500; the connection (and
// the server) go on.
TEST_F(Connection, AHandlerThatThrowsFailsOnlyItsRequest) {
  const auto out = send("GET /throw HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_NE(out.find("HTTP/1.1 500"), std::string::npos) << out;
  EXPECT_NE(out.find("internal error: a defect"), std::string::npos) << out;
  EXPECT_NE(send("GET /next HTTP/1.1\r\n\r\n").find("200 OK"), std::string::npos);
}

TEST_F(Connection, StreamsChunkedFrames) {
  const auto out = send("POST /stream HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\nServer: tokenscope\r\nContent-Type: text/event-stream\r\nCache-Control: "
            "no-cache\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
            "b\r\ndata: one\n\n\r\nb\r\ndata: two\n\n\r\n0\r\n\r\n");
  // Still alive for the next request.
  EXPECT_NE(send("GET /next HTTP/1.1\r\n\r\n").find("200 OK"), std::string::npos);
}

TEST_F(Connection, OversizedBodyGets413AndClose) {
  const auto out = send("POST /x HTTP/1.1\r\nContent-Length: 5000\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 413 Payload Too Large\r\n", 0), 0u) << out;
  EXPECT_NE(out.find("Connection: close"), std::string::npos);
  EXPECT_NE(out.find("larger than 1000 bytes"), std::string::npos);
  EXPECT_TRUE(handler.seen.empty());
}

TEST_F(Connection, OversizedHeadersGet431) {
  const auto out = send("GET /x HTTP/1.1\r\nX-Big: " + std::string(1000, 'a') + "\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 431 ", 0), 0u) << out;
  EXPECT_TRUE(handler.seen.empty());
}

TEST_F(Connection, GarbageGets400) {
  const auto out = send("NOT HTTP AT ALL\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << out;
  EXPECT_NE(out.find("malformed HTTP request"), std::string::npos);
}

TEST_F(Connection, ExpectContinueIsAnswered) {
  client.write_some(
      asio::buffer(std::string("POST /x HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")));
  pump();
  EXPECT_EQ(std::string(client.str()), "HTTP/1.1 100 Continue\r\n\r\n");
  client.clear();
  EXPECT_NE(send("abc").find("\"len\":3"), std::string::npos);
}

TEST_F(Connection, ConnectionCloseIsHonoured) {
  const auto out = send("GET /x HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_NE(out.find("Connection: close\r\n"), std::string::npos);
  send("GET /y HTTP/1.1\r\n\r\n");
  EXPECT_EQ(handler.seen.size(), 1u);  // closed after the first
}

TEST_F(Connection, PeerGoneMidStreamIsReported) {
  send("POST /stream?hold HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_FALSE(handler.disconnected);
  client.close();
  client_end.reset();
  handler.last->send("data: three\n\n");  // the write fails: the peer is gone
  pump();
  EXPECT_TRUE(handler.disconnected);
}

// Bound: a client that half-closes (shutdown(SHUT_WR)) after its request
// still gets the whole response, then the connection closes.
TEST_F(Connection, HalfClosedPeerStillGetsTheResponse) {
  send("POST /stream?hold HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  client.close();  // the server reads end-of-stream; the client still reads
  pump();
  handler.last->send("data: three\n\n");
  handler.last->end_stream();
  pump();
  EXPECT_FALSE(handler.disconnected);
  const std::string out(client.str());
  EXPECT_NE(out.find("d\r\ndata: three\n\n\r\n0\r\n\r\n"), std::string::npos) << out;
}

// Bound: a request head trickled one byte at a time, each well within the
// header timeout (1 s), is cut with 408 once 1 s has passed since its first
// byte (the timeout used to restart with every read: slowloris).
TEST_F(Connection, HeaderTimeoutCountsFromTheFirstByteNotTheLast) {
  const std::string head = "GET /slow HTTP/1.1\r\nHost: h\r\nX-Slow: " + std::string(40, 'a') + "\r\n\r\n";
  std::string out;
  std::size_t sent = 0;
  for (; sent < head.size() && out.empty(); ++sent) {
    out = send(head.substr(sent, 1));
    clock.advance(300 * kNanosPerMilli);
    sweep();
    out += std::string(client.str());
  }
  EXPECT_EQ(out.rfind("HTTP/1.1 408 ", 0), 0u) << out;
  EXPECT_LE(sent, 5u);  // bytes at 0, 0.3, 0.6, 0.9 s; cut at 1.2 s
  EXPECT_TRUE(handler.seen.empty());
  EXPECT_EQ(ctx.dropped[static_cast<std::size_t>(DropReason::kHeaderTimeout)].load(), 1u);
}

// The same for a later request on a kept-alive connection: its deadline
// starts with its first byte (before it, the idle timeout applies).
TEST_F(Connection, HeaderTimeoutOfALaterRequestCountsFromItsFirstByte) {
  EXPECT_NE(send("GET /first HTTP/1.1\r\n\r\n").find("200 OK"), std::string::npos);
  clock.advance(5 * kNanosPerSecond);  // idle, within the 60 s idle timeout
  sweep();
  std::string out;
  for (int i = 0; i < 10 && out.empty(); ++i) {
    out = send(i == 0 ? "GET /second HTTP/1.1\r\n" : "X");
    clock.advance(300 * kNanosPerMilli);
    sweep();
    out += std::string(client.str());
  }
  EXPECT_EQ(out.rfind("HTTP/1.1 408 ", 0), 0u) << out;
  EXPECT_EQ(handler.seen.size(), 1u);
}

// Bound: response bytes queued but not written stay under
// max_send_queue_bytes; a response that would queue more ends the
// connection (its request is told, to abort it) and is counted.
TEST_F(Connection, SendQueueBoundDropsAReaderThatFallsBehind) {
  send("POST /stream?hold HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_FALSE(handler.disconnected);
  ctx.limits.max_send_queue_bytes = 100;
  // Ten 40-byte chunks in one go: the first is being written, the second
  // waits (88 bytes unwritten), the third would make 132.
  for (int i = 0; i < 10; ++i) handler.last->send(std::string(38, 'x') + "\n\n");
  pump();
  EXPECT_TRUE(handler.disconnected);
  EXPECT_EQ(ctx.dropped[static_cast<std::size_t>(DropReason::kSendQueueFull)].load(), 1u);
  // Only the chunk in flight reached the client.
  const std::string out(client.str());
  EXPECT_EQ(out, "28\r\n" + std::string(38, 'x') + "\n\n\r\n");
}

// RFC 9112: no chunked transfer coding for an HTTP/1.0 client; the stream is
// delimited by closing the connection.
TEST_F(Connection, Http10StreamIsDelimitedByClose) {
  const auto out = send("POST /stream HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\nServer: tokenscope\r\nContent-Type: text/event-stream\r\nCache-Control: "
            "no-cache\r\nConnection: close\r\n\r\n"
            "data: one\n\ndata: two\n\n");
  // The server closed: a next request is not read.
  send("GET /next HTTP/1.0\r\n\r\n");
  EXPECT_EQ(handler.seen.size(), 1u);
}

// An HTTP/1.0 client that asks for keep-alive gets whole responses with
// Content-Length and "Connection: keep-alive", and the connection stays.
TEST_F(Connection, Http10KeepAliveIsAnswered) {
  const auto a = send("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_NE(a.find("Connection: keep-alive\r\n"), std::string::npos) << a;
  EXPECT_NE(a.find("Content-Length: "), std::string::npos) << a;
  const auto b = send("GET /b HTTP/1.0\r\n\r\n");
  EXPECT_NE(b.find("Connection: close\r\n"), std::string::npos) << b;
  EXPECT_EQ(handler.seen.size(), 2u);
}

TEST(HttpFormat, ChunksAndResponses) {
  EXPECT_EQ(chunk("hello world, this is 29 bytes"), "1d\r\nhello world, this is 29 bytes\r\n");
  HttpResponse r;
  r.status = 429;
  r.headers.push_back({"Retry-After", "1"});
  r.body = "{}";
  EXPECT_EQ(serialize_response(r, true),
            "HTTP/1.1 429 Too Many Requests\r\nServer: tokenscope\r\nContent-Type: application/json\r\n"
            "Retry-After: 1\r\nContent-Length: 2\r\n\r\n{}");
}

}  // namespace
}  // namespace tokenscope::net
