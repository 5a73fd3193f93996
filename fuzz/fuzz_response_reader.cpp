// libFuzzer target: the client's response reader against Beast's parser.
// Whatever the bytes, a header the reader's own scan takes must be one
// Beast takes, of the same length, with the same status, first
// Content-Type, Content-Length and keep-alive; and the reader, fed the
// bytes in two reads, must give the body, the end and the errors that
// Beast gives fed them the same way.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include <boost/beast/http/error.hpp>

#include "net/response_reader.h"
#include "net/response_reader_test_util.h"

namespace {
using namespace tokenscope::net;

using reader_test::append_piece;
using reader_test::feed;
using reader_test::Read;

detail::BeastResponseParser::Sink sink() {
  return append_piece;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 2, size - 2);
  const std::size_t limit = 64 + data[0] * 4;  // 64..1084: some headers over it
  const std::size_t cut = data[1] % (bytes.size() + 1);

  // The scan alone, against Beast given just the header.
  if (const auto h = scan_plain_header(bytes, limit)) {
    std::string body, content_type;
    detail::BeastResponseParser beast(sink(), &body, content_type);
    beast.eager(true);
    beast.header_limit(static_cast<std::uint32_t>(limit));
    beast.body_limit(std::numeric_limits<std::uint64_t>::max());
    boost::beast::error_code ec;
    const std::size_t used = beast.put(boost::asio::const_buffer(bytes.data(), h->size), ec);
    if (ec && ec != boost::beast::http::error::need_more) __builtin_trap();
    if (used != h->size || !beast.is_header_done()) __builtin_trap();
    if (beast.status() != h->status || beast.keep_alive() != h->keep_alive) __builtin_trap();
    if (beast.content_length().value_or(std::numeric_limits<std::uint64_t>::max()) != h->content_length)
      __builtin_trap();
    if (beast.has_content_type() != h->has_content_type) __builtin_trap();
    if (h->has_content_type && content_type != h->content_type) __builtin_trap();
  }

  // The reader as the client uses it, against Beast fed the same way.
  std::string body_r, type_r = "stale", body_b, type_b;
  ResponseReader reader(sink(), &body_r, type_r, limit);
  detail::BeastResponseParser beast(sink(), &body_b, type_b);
  beast.eager(true);
  beast.header_limit(static_cast<std::uint32_t>(limit));
  beast.body_limit(std::numeric_limits<std::uint64_t>::max());
  const Read r = feed(reader, bytes, {cut}, body_r, type_r);
  const Read b = feed(beast, bytes, {cut}, body_b, type_b);
  if (!(r == b)) __builtin_trap();
  if (r.header_done && !r.done && reader.need_eof() != beast.need_eof()) __builtin_trap();
  return 0;
}
