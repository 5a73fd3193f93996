// For response_reader_test.cpp and fuzz/fuzz_response_reader.cpp: the
// client's response reader and Beast's parser fed the same bytes in the
// same pieces, and what each made of them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>

#include "net/response_reader.h"

namespace tokenscope::net::reader_test {

// What a reader made of a response fed in pieces: everything the client
// reads from it.
struct Read {
  bool error = false;
  bool header_done = false;
  bool done = false;
  bool keep_alive = false;
  int status = 0;
  bool has_content_type = false;
  std::string content_type;
  std::string body;
  std::size_t used = 0;  // bytes taken from the input
  bool fast = false;     // the reader's own scan took the header (left false for Beast)
  bool operator==(const Read&) const = default;
};

// The body sink both are given: `body` is a std::string.
inline void append_piece(void* body, std::string_view piece) {
  static_cast<std::string*>(body)->append(piece);
}

// Feeds the bytes in pieces cut at splits (ascending offsets), as the
// client does: each put gets what is buffered and not yet used. body and
// content_type are what the parser was given to fill.
template <typename Parser>
Read feed(Parser& parser, std::string_view bytes, std::vector<std::size_t> splits, const std::string& body,
          const std::string& content_type) {
  Read r;
  std::string buffered;
  std::size_t from = 0;
  splits.push_back(bytes.size());
  for (const std::size_t cut : splits) {
    buffered.append(bytes.substr(from, cut - from));
    from = cut;
    for (;;) {
      boost::beast::error_code ec;
      std::size_t used = 0;
      if constexpr (std::is_same_v<Parser, ResponseReader>)
        used = parser.put(buffered, ec);
      else
        used = parser.put(boost::asio::const_buffer(buffered.data(), buffered.size()), ec);
      buffered.erase(0, used);
      r.used += used;
      if (ec == boost::beast::http::error::need_more) break;
      if (ec) {
        r.error = true;
        break;
      }
      if (parser.is_done() || used == 0) break;
    }
    if (r.error || parser.is_done()) break;
  }
  r.header_done = parser.is_header_done();
  r.done = parser.is_done();
  if (r.header_done) {
    r.keep_alive = parser.keep_alive();
    r.status = parser.status();
    r.has_content_type = parser.has_content_type();
    if (r.has_content_type) r.content_type = content_type;
  }
  r.body = body;
  return r;
}

}  // namespace tokenscope::net::reader_test
