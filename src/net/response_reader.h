// An HTTP/1.1 response's reader for the client: the status, the first
// Content-Type, and every piece of the body (chunked or not) handed to a
// sink where it lies in the read buffer (no header container, no copy).
//
// Beast's parser reads every response, with one exception taken for speed:
// a header that has arrived whole and is of the plainest kind (HTTP/1.0 or
// 1.1, a status from 200 to 599 other than 204 and 304, one Content-Length,
// no Transfer-Encoding or Upgrade, Connection at most close or keep-alive,
// every byte of the kind the grammar allows) is read by a scan of its own,
// a little over half of Beast's instructions for a typical server's header
// (docs/performance.md, issue 29 part 6). Any
// other header, or one still arriving, goes to Beast from its first byte,
// so that what is refused and how is Beast's alone. The scan accepts only
// what Beast accepts, with the same status, Content-Type, length and
// keep-alive: fuzz/fuzz_response_reader.cpp checks both on every input.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http/basic_parser.hpp>

namespace tokenscope::net {

namespace detail {

// Beast's parser with the callbacks the reader needs.
class BeastResponseParser final : public boost::beast::http::basic_parser<false> {
 public:
  using Sink = void (*)(void* context, std::string_view piece);
  BeastResponseParser(Sink sink, void* context, std::string& content_type)
      : sink_(sink), context_(context), content_type_(content_type) {}
  int status() const { return status_; }
  bool has_content_type() const { return has_content_type_; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;
  void on_request_impl(boost::beast::http::verb, string_view, string_view, int, error_code&) override {}
  void on_response_impl(int code, string_view, int, error_code&) override { status_ = code; }
  void on_field_impl(boost::beast::http::field name, string_view, string_view value, error_code&) override {
    if (name != boost::beast::http::field::content_type || has_content_type_)
      return;  // the first, as a lookup finds it
    has_content_type_ = true;
    content_type_.assign(value.data(), value.size());
  }
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(string_view body, error_code&) override {
    if (!body.empty()) sink_(context_, std::string_view(body.data(), body.size()));
    return body.size();
  }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) override {
    return on_body_impl(body, ec);
  }
  void on_finish_impl(error_code&) override {}

  Sink sink_;
  void* context_;
  int status_ = 0;
  bool has_content_type_ = false;
  std::string& content_type_;
};

}  // namespace detail

// What the fast scan made of a whole header (see scan_plain_header).
struct PlainHeader {
  std::size_t size = 0;  // bytes, the blank line included
  int status = 0;
  std::uint64_t content_length = 0;
  bool keep_alive = false;
  bool has_content_type = false;
  std::string_view content_type;  // into the scanned bytes
};

// The fast scan alone: the header at the start of data when it is whole and
// of the plainest kind (above), nothing otherwise. header_limit: the most
// bytes it may take (Beast's header limit), larger ones left to Beast.
std::optional<PlainHeader> scan_plain_header(std::string_view data, std::size_t header_limit);

class ResponseReader {
 public:
  using Sink = detail::BeastResponseParser::Sink;
  // content_type: where the Content-Type goes (cleared here), kept by the
  // connection so that its storage serves every exchange on it.
  ResponseReader(Sink sink, void* context, std::string& content_type, std::size_t header_limit);

  // As Beast's basic_parser::put (eager): the bytes used, and an error
  // code for what could not be read. Where the message is not complete,
  // Beast may return success or need_more with bytes used, and the fast
  // path returns need_more: a caller reads more in either case (as
  // Connection::parse does), and calls again with what is buffered.
  std::size_t put(std::string_view data, boost::beast::error_code& ec);
  void put_eof(boost::beast::error_code& ec);

  bool is_header_done() const { return fast_ || beast_.is_header_done(); }
  bool is_done() const { return fast_ ? remaining_ == 0 : beast_.is_done(); }
  bool keep_alive() const { return fast_ ? fast_keep_alive_ : beast_.keep_alive(); }
  bool need_eof() const { return fast_ ? false : beast_.need_eof(); }
  int status() const { return fast_ ? fast_status_ : beast_.status(); }
  bool has_content_type() const { return fast_ ? fast_has_content_type_ : beast_.has_content_type(); }
  const std::string& content_type() const { return content_type_; }
  // Whether the fast scan read this response's header (for tests).
  bool read_fast() const { return fast_; }

 private:
  detail::BeastResponseParser beast_;
  Sink sink_;
  void* context_;
  std::string& content_type_;
  std::size_t header_limit_;
  bool decided_ = false;  // the fast scan was tried (it is, once, on the first bytes)
  bool fast_ = false;
  bool fast_keep_alive_ = false;
  bool fast_has_content_type_ = false;
  int fast_status_ = 0;
  std::uint64_t remaining_ = 0;  // of the body, on the fast path
};

}  // namespace tokenscope::net
