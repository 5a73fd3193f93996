#include "net/response_reader.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>

#include <boost/beast/http/error.hpp>

namespace tokenscope::net {

namespace {

// Byte classes of the header grammar (RFC 9110/9112), as Beast reads them.
enum : std::uint8_t {
  kToken = 1,  // tchar: a field name's byte
  kText = 2,   // a reason phrase's or field value's byte: HTAB, SP, VCHAR, obs-text
};

constexpr std::array<std::uint8_t, 256> make_classes() {
  std::array<std::uint8_t, 256> c{};
  for (int i = 0x20; i < 0x7f; ++i) c[static_cast<std::size_t>(i)] |= kText;
  for (int i = 0x80; i < 0x100; ++i) c[static_cast<std::size_t>(i)] |= kText;
  c['\t'] |= kText;
  for (int i = '0'; i <= '9'; ++i) c[static_cast<std::size_t>(i)] |= kToken;
  for (int i = 'a'; i <= 'z'; ++i) c[static_cast<std::size_t>(i)] |= kToken;
  for (int i = 'A'; i <= 'Z'; ++i) c[static_cast<std::size_t>(i)] |= kToken;
  for (const char ch : std::string_view("!#$%&'*+-.^_`|~")) c[static_cast<unsigned char>(ch)] |= kToken;
  return c;
}
constexpr std::array<std::uint8_t, 256> kClasses = make_classes();

bool is(char c, std::uint8_t cls) {
  return (kClasses[static_cast<unsigned char>(c)] & cls) != 0;
}

// Case-insensitive equality with a literal of lower-case letters and '-',
// eight bytes at a time. s must hold no control byte (its bytes are a
// field name's or a value's, checked before): a byte ORed with 0x20 is then
// a lower-case letter only if it was that letter in either case, and '-'
// only if it was '-' (CR, the other byte that maps there, is excluded).
bool iequals_lower(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t a = 0, b = 0;
    std::memcpy(&a, s.data() + i, 8);
    std::memcpy(&b, lower.data() + i, 8);
    if ((a | 0x2020202020202020ull) != b) return false;
  }
  for (; i < s.size(); ++i)
    if ((s[i] | 0x20) != lower[i]) return false;
  return true;
}

// The first byte at or after p that is not text (a control byte other than
// HTAB, or DEL), eight bytes at a time: in a word, the lowest byte flagged
// by the below-0x20 and DEL tests is exactly the first such byte (a borrow
// can flag only bytes above a true one); an HTAB there is text, and the
// search goes on after it.
std::size_t find_control(std::string_view data, std::size_t p) {
  static_assert(std::endian::native == std::endian::little, "the lowest byte of a word is its first");
  constexpr std::uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
  while (p + 8 <= data.size()) {
    std::uint64_t x = 0;
    std::memcpy(&x, data.data() + p, 8);
    const std::uint64_t below_space = (x - kOnes * 0x20) & ~x & kHigh;
    const std::uint64_t y = x ^ (kOnes * 0x7f);
    const std::uint64_t del = (y - kOnes) & ~y & kHigh;
    const std::uint64_t flagged = below_space | del;
    if (flagged == 0) {
      p += 8;
      continue;
    }
    const std::size_t at = p + static_cast<std::size_t>(__builtin_ctzll(flagged)) / 8;
    if (data[at] != '\t') return at;
    p = at + 1;
  }
  for (; p < data.size(); ++p)
    if (!is(data[p], kText)) return p;
  return data.size();
}

// The end of the line that starts at p: the index of its CR when every byte
// before it is text and the CR is followed by LF; npos otherwise (a control
// byte, a bare CR, or no CR within data).
std::size_t text_line_end(std::string_view data, std::size_t p) {
  const std::size_t i = find_control(data, p);
  if (i + 1 < data.size() && data[i] == '\r' && data[i + 1] == '\n') return i;
  return std::string_view::npos;
}

}  // namespace

std::optional<PlainHeader> scan_plain_header(std::string_view data, std::size_t header_limit) {
  if (data.size() > header_limit) data = data.substr(0, header_limit);
  // Status line: HTTP/1.x SP 3DIGIT SP reason CRLF.
  constexpr std::size_t kStatusPrefix = 13;  // "HTTP/1.1 200 "
  if (data.size() < kStatusPrefix || std::memcmp(data.data(), "HTTP/1.", 7) != 0) return std::nullopt;
  const char minor = data[7];
  if ((minor != '0' && minor != '1') || data[8] != ' ' || data[12] != ' ') return std::nullopt;
  for (int i = 9; i < 12; ++i)
    if (data[static_cast<std::size_t>(i)] < '0' || data[static_cast<std::size_t>(i)] > '9')
      return std::nullopt;
  PlainHeader h;
  h.status = (data[9] - '0') * 100 + (data[10] - '0') * 10 + (data[11] - '0');
  // No body by status (1xx, 204, 304) and codes outside 2xx-5xx: Beast's.
  if (h.status < 200 || h.status > 599 || h.status == 204 || h.status == 304) return std::nullopt;
  std::size_t p = text_line_end(data, kStatusPrefix);
  if (p == std::string_view::npos) return std::nullopt;
  p += 2;
  bool has_length = false, close = false, keep_alive = false;
  for (;;) {
    if (p + 2 > data.size()) return std::nullopt;  // not whole (or over the limit): Beast's
    if (data[p] == '\r') {
      if (data[p + 1] != '\n') return std::nullopt;
      h.size = p + 2;
      break;
    }
    // field-name ":" OWS value OWS CRLF, with no obs-fold after it.
    const std::size_t name_start = p;
    while (p < data.size() && is(data[p], kToken)) ++p;
    if (p == name_start || p >= data.size() || data[p] != ':') return std::nullopt;
    const std::string_view name = data.substr(name_start, p - name_start);
    ++p;
    const std::size_t eol = text_line_end(data, p);
    if (eol == std::string_view::npos) return std::nullopt;
    if (eol + 2 >= data.size() || data[eol + 2] == ' ' || data[eol + 2] == '\t') return std::nullopt;
    std::size_t vb = p, ve = eol;
    while (vb < ve && (data[vb] == ' ' || data[vb] == '\t')) ++vb;
    while (ve > vb && (data[ve - 1] == ' ' || data[ve - 1] == '\t')) --ve;
    const std::string_view value = data.substr(vb, ve - vb);
    p = eol + 2;
    // The fields that change how the message is framed or kept: the plain
    // forms only. The first letter sorts out most names at once.
    switch (name[0] | 0x20) {
      case 'c':
        if (name.size() == 14 && iequals_lower(name, "content-length")) {
          if (has_length || value.empty() || value.size() > 15) return std::nullopt;
          std::uint64_t n = 0;
          for (const char c : value) {
            if (c < '0' || c > '9') return std::nullopt;
            n = n * 10 + static_cast<std::uint64_t>(c - '0');
          }
          has_length = true;
          h.content_length = n;
        } else if (name.size() == 12 && iequals_lower(name, "content-type")) {
          if (!h.has_content_type) h.has_content_type = true, h.content_type = value;
        } else if (name.size() == 10 && iequals_lower(name, "connection")) {
          if (iequals_lower(value, "close"))
            close = true;
          else if (iequals_lower(value, "keep-alive"))
            keep_alive = true;
          else
            return std::nullopt;
        }
        break;
      case 't':
        if (iequals_lower(name, "transfer-encoding")) return std::nullopt;
        break;
      case 'u':
        if (iequals_lower(name, "upgrade")) return std::nullopt;
        break;
      case 'p':
        if (iequals_lower(name, "proxy-connection")) return std::nullopt;
        break;
      default:
        break;
    }
  }
  if (!has_length) return std::nullopt;  // a body to the end of the stream: Beast's
  h.keep_alive = minor == '1' ? !close : keep_alive;
  return h;
}

ResponseReader::ResponseReader(Sink sink, void* context, std::string& content_type, std::size_t header_limit)
    : beast_(sink, context, content_type),
      sink_(sink),
      context_(context),
      content_type_(content_type),
      header_limit_(header_limit) {
  content_type_.clear();
  beast_.eager(true);
  beast_.header_limit(static_cast<std::uint32_t>(header_limit));
  // An explicit limit: Boost 1.74 compares the Content-Length with an empty
  // optional (boost::none) as if it were 0 and fails every response whose
  // header is parsed before its body arrives ("body limit exceeded").
  beast_.body_limit(std::numeric_limits<std::uint64_t>::max());
}

std::size_t ResponseReader::put(std::string_view data, boost::beast::error_code& ec) {
  ec = {};
  std::size_t used = 0;
  if (!decided_) {
    decided_ = true;
    if (const auto h = scan_plain_header(data, header_limit_)) {
      fast_ = true;
      fast_status_ = h->status;
      fast_keep_alive_ = h->keep_alive;
      fast_has_content_type_ = h->has_content_type;
      if (h->has_content_type) content_type_.assign(h->content_type);
      remaining_ = h->content_length;
      used = h->size;
      data.remove_prefix(h->size);
    }
  }
  if (!fast_) return beast_.put(boost::asio::const_buffer(data.data(), data.size()), ec);
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, data.size()));
  if (n > 0) {
    remaining_ -= n;
    sink_(context_, data.substr(0, n));
  }
  if (remaining_ > 0) ec = boost::beast::http::error::need_more;
  return used + n;
}

void ResponseReader::put_eof(boost::beast::error_code& ec) {
  if (!fast_) return beast_.put_eof(ec);
  ec = remaining_ > 0 ? boost::beast::error_code(boost::beast::http::error::partial_message)
                      : boost::beast::error_code{};
}

}  // namespace tokenscope::net
