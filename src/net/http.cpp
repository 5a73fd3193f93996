#include "net/http.h"

#include <fmt/format.h>

namespace tokenscope::net {

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& h : headers)
    if (h.name == name) return h.value;
  return {};
}

std::string_view HttpRequest::path() const {
  const std::string_view t = target;
  return t.substr(0, t.find('?'));
}

std::string_view drop_reason_name(DropReason r) {
  switch (r) {
    case DropReason::kHeaderTimeout:
      return "header_timeout";
    case DropReason::kIdleTimeout:
      return "idle_timeout";
    case DropReason::kWriteTimeout:
      return "write_timeout";
    case DropReason::kSendQueueFull:
      return "send_queue_full";
    case DropReason::kMaxConnections:
      return "max_connections";
  }
  return "unknown";
}

std::string_view accept_error_name(AcceptError e) {
  switch (e) {
    case AcceptError::kEmfile:
      return "EMFILE";
    case AcceptError::kEnfile:
      return "ENFILE";
    case AcceptError::kOther:
      return "other";
  }
  return "other";
}

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

namespace {
void append_head(std::string& out, int status, std::string_view content_type,
                 const std::vector<Header>& headers, bool keep_alive) {
  fmt::format_to(std::back_inserter(out), "HTTP/1.1 {} {}\r\nServer: tokenscope\r\n", status,
                 reason_phrase(status));
  if (!content_type.empty()) fmt::format_to(std::back_inserter(out), "Content-Type: {}\r\n", content_type);
  for (const auto& h : headers) fmt::format_to(std::back_inserter(out), "{}: {}\r\n", h.name, h.value);
  if (!keep_alive) out += "Connection: close\r\n";
}
}  // namespace

std::string serialize_response(const HttpResponse& r, bool keep_alive) {
  std::string out;
  out.reserve(160 + r.body.size());
  append_head(out, r.status, r.content_type, r.headers, keep_alive);
  fmt::format_to(std::back_inserter(out), "Content-Length: {}\r\n\r\n", r.body.size());
  out += r.body;
  return out;
}

std::string serialize_stream_head(int status, std::string_view content_type,
                                  const std::vector<Header>& headers, bool keep_alive, bool chunked) {
  std::string out;
  append_head(out, status, content_type, headers, keep_alive && chunked);
  out += chunked ? "Transfer-Encoding: chunked\r\n\r\n" : "\r\n";
  return out;
}

std::string chunk(std::string_view data) {
  char hex[16];
  int n = 0;
  std::size_t size = data.size();
  do {
    hex[n++] = "0123456789abcdef"[size & 15];
    size >>= 4;
  } while (size != 0);
  std::string out;
  out.reserve(data.size() + static_cast<std::size_t>(n) + 4);
  while (n > 0) out += hex[--n];
  out += "\r\n";
  out += data;
  out += "\r\n";
  return out;
}

}  // namespace tokenscope::net
