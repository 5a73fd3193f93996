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

namespace {
using namespace tokenscope::net;

void append_piece(void* body, std::string_view piece) {
  static_cast<std::string*>(body)->append(piece);
}

struct Result {
  bool error = false, header_done = false, done = false, keep_alive = false, has_content_type = false;
  int status = 0;
  std::string body, content_type;
  std::size_t used = 0;
  bool operator==(const Result&) const = default;
};

template <typename Parser>
std::size_t put(Parser& p, std::string_view data, boost::beast::error_code& ec) {
  if constexpr (std::is_same_v<Parser, ResponseReader>)
    return p.put(data, ec);
  else
    return p.put(boost::asio::const_buffer(data.data(), data.size()), ec);
}

template <typename Parser>
Result feed(Parser& p, std::string_view bytes, std::size_t cut, const std::string& body,
            const std::string& content_type) {
  Result r;
  std::string buffered;
  for (const std::string_view piece : {bytes.substr(0, cut), bytes.substr(cut)}) {
    buffered.append(piece);
    for (;;) {
      boost::beast::error_code ec;
      const std::size_t used = put(p, buffered, ec);
      buffered.erase(0, used);
      r.used += used;
      if (ec == boost::beast::http::error::need_more) break;
      if (ec) {
        r.error = true;
        break;
      }
      if (p.is_done() || used == 0) break;
    }
    if (r.error || p.is_done()) break;
  }
  r.header_done = p.is_header_done();
  r.done = p.is_done();
  if (r.header_done) {
    r.keep_alive = p.keep_alive();
    r.status = p.status();
    r.has_content_type = p.has_content_type();
    if (r.has_content_type) r.content_type = content_type;
  }
  r.body = body;
  return r;
}

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
  const Result r = feed(reader, bytes, cut, body_r, type_r);
  const Result b = feed(beast, bytes, cut, body_b, type_b);
  if (!(r == b)) __builtin_trap();
  if (r.header_done && !r.done && reader.need_eof() != beast.need_eof()) __builtin_trap();
  return 0;
}
