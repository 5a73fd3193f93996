#include "net/response_reader.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <boost/beast/http/error.hpp>

#include "net/response_reader_test_util.h"

namespace tokenscope::net {
namespace {

using reader_test::append_piece;
using reader_test::feed;
using reader_test::Read;

Read with_reader(std::string_view bytes, const std::vector<std::size_t>& splits, std::size_t limit = 8192) {
  std::string body, content_type = "left from before";
  ResponseReader reader(append_piece, &body, content_type, limit);
  Read r = feed(reader, bytes, splits, body, content_type);
  r.fast = reader.read_fast();
  return r;
}

Read with_beast(std::string_view bytes, const std::vector<std::size_t>& splits, std::size_t limit = 8192) {
  std::string body, content_type;
  detail::BeastResponseParser beast(append_piece, &body, content_type);
  beast.eager(true);
  beast.header_limit(static_cast<std::uint32_t>(limit));
  beast.body_limit(std::numeric_limits<std::uint64_t>::max());
  return feed(beast, bytes, splits, body, content_type);
}

constexpr std::string_view kNginx =
    "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sun, 06 Dec 2026 18:00:00 GMT\r\n"
    "Content-Type: application/json\r\nContent-Length: 11\r\nConnection: keep-alive\r\n\r\n{\"a\":\"tok\"}";

TEST(ResponseReader, APlainHeaderIsReadByTheScanAsBeastReadsIt) {
  for (const std::vector<std::size_t>& splits : {std::vector<std::size_t>{},
                                                 {kNginx.size() - 11},
                                                 {kNginx.size() - 5},
                                                 {kNginx.size() - 11, kNginx.size() - 3}}) {
    const Read fast = with_reader(kNginx, splits);
    EXPECT_TRUE(fast.fast);
    EXPECT_FALSE(fast.error);
    EXPECT_TRUE(fast.done);
    EXPECT_EQ(fast.status, 200);
    EXPECT_EQ(fast.content_type, "application/json");
    EXPECT_TRUE(fast.keep_alive);
    EXPECT_EQ(fast.body, "{\"a\":\"tok\"}");
    EXPECT_EQ(fast.used, kNginx.size());
    Read beast = with_beast(kNginx, splits);
    beast.fast = true;
    EXPECT_EQ(fast, beast);
  }
}

TEST(ResponseReader, AHeaderStillArrivingGoesToBeast) {
  const Read r = with_reader(kNginx, {20});
  EXPECT_FALSE(r.fast);
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.body, "{\"a\":\"tok\"}");
  EXPECT_EQ(r.content_type, "application/json");
}

TEST(ResponseReader, BytesAfterTheBodyAreLeftUnread) {
  const std::string two = std::string(kNginx) + "HTTP/1.1 200 OK\r\n";
  const Read r = with_reader(two, {});
  EXPECT_TRUE(r.fast);
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.used, kNginx.size());
}

TEST(ResponseReader, KeepAliveByVersionAndConnection) {
  struct Case {
    std::string_view header;
    bool keep_alive;
  };
  for (const Case& c :
       {Case{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", true},
        Case{"HTTP/1.1 200 OK\r\nConnection: CLOSE\r\nContent-Length: 2\r\n\r\nhi", false},
        Case{"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", false},
        Case{"HTTP/1.0 200 OK\r\nconnection:\tKeep-Alive \r\nContent-Length: 2\r\n\r\nhi", true}}) {
    const Read r = with_reader(c.header, {});
    EXPECT_TRUE(r.fast) << c.header;
    EXPECT_EQ(r.keep_alive, c.keep_alive) << c.header;
    Read beast = with_beast(c.header, {});
    beast.fast = true;
    EXPECT_EQ(r, beast) << c.header;
  }
}

// Every header the scan leaves to Beast, and every one it takes: the
// reader's result is Beast's in both cases, and the scan takes exactly the
// plain ones.
TEST(ResponseReader, TheScanTakesOnlyPlainHeadersAndAgreesWithBeast) {
  struct Case {
    std::string_view bytes;
    bool fast;
  };
  const std::vector<Case> cases = {
      {"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\ncontent-type: x\r\nContent-Length: "
       "3\r\n\r\nnot",
       true},
      {"HTTP/1.1 500 \r\nContent-Length: 0\r\n\r\n", true},
      {"HTTP/1.1 200 OK\xc3\xa9\r\nX-A:\r\nContent-Length:  007 \r\n\r\n1234567", true},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", false},
      {"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: x\n\n", false},  // to the end
      {"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", false},
      {"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", false},
      {"HTTP/1.1 101 Switching\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n", false},
      {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi", false},
      {"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nhi", false},
      {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive, close\r\n\r\nhi", false},
      {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nProxy-Connection: close\r\n\r\nhi", false},
      {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Folded: a\r\n b\r\n\r\nhi", false},
      {"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\nhi", false},                // Beast refuses it
      {"HTTP/1.1 200 OK\r\nBad Name: 1\r\nContent-Length: 2\r\n\r\nhi", false},  // Beast refuses it
      {"HTTP/1.1 200 OK\r\nX: a\x01z\r\nContent-Length: 2\r\n\r\nhi", false},    // Beast refuses it
      {"HTTP/1.1 200 OK\nContent-Length: 2\n\nhi", false},                       // Beast refuses it
      {"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nhi", false},                    // Beast refuses it
      {"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", false},                 // Beast refuses it
      {"HTTP/1.1 099 X\r\nContent-Length: 2\r\n\r\nhi", false},
  };
  for (const Case& c : cases) {
    const Read r = with_reader(c.bytes, {});
    EXPECT_EQ(r.fast, c.fast) << c.bytes;
    Read beast = with_beast(c.bytes, {});
    beast.fast = r.fast;
    EXPECT_EQ(r, beast) << c.bytes;
  }
}

TEST(ResponseReader, AHeaderOverTheLimitIsBeastsError) {
  const Read r = with_reader(kNginx, {}, 64);
  EXPECT_FALSE(r.fast);
  EXPECT_TRUE(r.error);
  EXPECT_EQ(r, with_beast(kNginx, {}, 64));
  // At the limit exactly, the scan still takes it.
  const std::size_t header = kNginx.size() - 11;
  const Read at = with_reader(kNginx, {}, header);
  EXPECT_TRUE(at.fast);
  Read beast = with_beast(kNginx, {}, header);
  beast.fast = true;
  EXPECT_EQ(at, beast);
  EXPECT_FALSE(with_reader(kNginx, {}, header - 1).fast);
}

TEST(ResponseReader, AnEndBeforeTheLengthIsAPartialMessage) {
  std::string body, content_type;
  ResponseReader reader(append_piece, &body, content_type, 8192);
  const std::string_view head = kNginx.substr(0, kNginx.size() - 4);
  boost::beast::error_code ec;
  EXPECT_EQ(reader.put(head, ec), head.size());
  EXPECT_EQ(ec, boost::beast::http::error::need_more);
  EXPECT_TRUE(reader.read_fast());
  EXPECT_FALSE(reader.need_eof());
  reader.put_eof(ec);
  EXPECT_EQ(ec, boost::beast::http::error::partial_message);
}

TEST(ResponseReader, ScanReportsTheHeaderItTook) {
  const auto h = scan_plain_header(kNginx, 8192);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->size, kNginx.size() - 11);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(h->content_length, 11u);
  EXPECT_TRUE(h->keep_alive);
  EXPECT_EQ(h->content_type, "application/json");
  EXPECT_FALSE(scan_plain_header(kNginx.substr(0, 40), 8192).has_value());  // not whole
}

}  // namespace
}  // namespace tokenscope::net
