#include "net/multipart.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/random.h"

namespace tokenscope::net {

namespace {

// RFC 7578 section 4.2: a name's '"', CR and LF percent-encoded.
void append_form_name(std::string& out, std::string_view name) {
  for (const char c : name) {
    if (c == '"')
      out += "%22";
    else if (c == '\r')
      out += "%0D";
    else if (c == '\n')
      out += "%0A";
    else
      out += c;
  }
}

char lower_ascii(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals_ascii(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower_ascii(a[i]) != lower_ascii(b[i])) return false;
  return true;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// RFC 2046's bchars: DIGIT / ALPHA / "'()+_,-./:=?" and space (not last).
bool boundary_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::string_view("'()+_,-./:=? ").find(c) != std::string_view::npos;
}

// Header parameters "; name=value; name="quoted \" value"" after the first
// value. Returns false on a malformed list (the message in `error`).
struct HeaderParam {
  std::string name;  // lowercased
  std::string value;
};
bool parse_params(std::string_view s, std::vector<HeaderParam>& out, std::string& error) {
  while (true) {
    s = trim_ows(s);
    if (s.empty()) return true;
    if (s.front() != ';') {
      error = fmt::format("expected ';' before {}", quote_input(s, 40));
      return false;
    }
    s.remove_prefix(1);
    s = trim_ows(s);
    if (s.empty()) return true;  // a trailing ';'
    const std::size_t eq = s.find('=');
    if (eq == std::string_view::npos) {
      error = fmt::format("parameter {} has no value", quote_input(s, 40));
      return false;
    }
    HeaderParam p;
    for (const char c : trim_ows(s.substr(0, eq))) p.name += lower_ascii(c);
    if (p.name.empty()) {
      error = "a parameter without a name";
      return false;
    }
    s = trim_ows(s.substr(eq + 1));
    if (!s.empty() && s.front() == '"') {
      std::size_t i = 1;
      for (; i < s.size() && s[i] != '"'; ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) ++i;
        p.value += s[i];
      }
      if (i >= s.size()) {
        error = fmt::format("parameter {}: unterminated quoted value", quote_input(p.name, 40));
        return false;
      }
      s.remove_prefix(i + 1);
    } else {
      const std::size_t end = s.find(';');
      p.value = std::string(trim_ows(s.substr(0, end)));
      s = end == std::string_view::npos ? std::string_view() : s.substr(end);
    }
    out.push_back(std::move(p));
  }
}

}  // namespace

std::string multipart_boundary(const std::vector<FormPart>& parts, std::uint64_t seed) {
  for (std::uint64_t attempt = 0;; ++attempt) {
    const std::uint64_t a = mix64(hash_combine64(seed, attempt));
    const std::uint64_t b = mix64(a ^ 0x6d756c7469706172ULL);  // "multipar"
    std::string boundary = fmt::format("tokenscope-{:016x}{:016x}", a, b);
    bool clash = false;
    for (const auto& p : parts)
      clash |= p.data.find(boundary) != std::string_view::npos ||
               p.name.find(boundary) != std::string_view::npos ||
               p.filename.find(boundary) != std::string_view::npos ||
               p.content_type.find(boundary) != std::string_view::npos;
    if (!clash) return boundary;
  }
}

std::string multipart_body(const std::vector<FormPart>& parts, std::string_view boundary) {
  std::size_t size = boundary.size() + 8;
  for (const auto& p : parts)
    size += p.data.size() + p.name.size() + p.filename.size() + p.content_type.size() + boundary.size() + 96;
  std::string out;
  out.reserve(size);
  for (const auto& p : parts) {
    out += "--";
    out += boundary;
    out += "\r\nContent-Disposition: form-data; name=\"";
    append_form_name(out, p.name);
    out += '"';
    if (!p.filename.empty()) {
      out += "; filename=\"";
      append_form_name(out, p.filename);
      out += '"';
    }
    out += "\r\n";
    if (!p.content_type.empty()) {
      out += "Content-Type: ";
      for (const char c : p.content_type)
        if (c != '\r' && c != '\n') out += c;
      out += "\r\n";
    }
    out += "\r\n";
    out += p.data;
    out += "\r\n";
  }
  out += "--";
  out += boundary;
  out += "--\r\n";
  return out;
}

std::string multipart_content_type(std::string_view boundary) {
  return fmt::format("multipart/form-data; boundary={}", boundary);
}

std::string multipart_boundary_of(std::string_view content_type, std::string& error) {
  const std::size_t semi = content_type.find(';');
  const std::string_view type = trim_ows(content_type.substr(0, semi));
  if (!iequals_ascii(type, "multipart/form-data")) {
    error = fmt::format("expected Content-Type multipart/form-data, got {}",
                        type.empty() ? std::string("none") : quote_input(type, 60));
    return "";
  }
  std::vector<HeaderParam> params;
  if (semi != std::string_view::npos && !parse_params(content_type.substr(semi), params, error)) {
    error = "Content-Type: " + error;
    return "";
  }
  const auto it =
      std::find_if(params.begin(), params.end(), [](const HeaderParam& p) { return p.name == "boundary"; });
  if (it == params.end()) {
    error = "Content-Type multipart/form-data without a boundary parameter";
    return "";
  }
  const std::string& b = it->value;
  if (b.empty() || b.size() > 70 || b.back() == ' ' || !std::all_of(b.begin(), b.end(), boundary_char)) {
    error = fmt::format(
        "Content-Type: the boundary {} is not 1 to 70 of RFC 2046's characters (letters, digits, "
        "'()+_,-./:=? and inner spaces)",
        quote_input(b, 80));
    return "";
  }
  return b;
}

// Long: the one pass over the body, delimiter by delimiter, with a message per way it can be wrong.
MultipartResult parse_multipart(std::string_view content_type, std::string_view body,
                                const MultipartLimits& limits) {
  MultipartResult r;
  const std::string boundary = multipart_boundary_of(content_type, r.error);
  if (boundary.empty()) return r;
  const std::string dash = "--" + boundary;
  const std::string delimiter = "\r\n" + dash;
  auto fail = [&](std::string message) {
    r.parts.clear();
    r.error = "multipart body: " + std::move(message);
    return r;
  };
  // The first delimiter: at the start, or after a preamble and CRLF.
  std::size_t at = 0;
  if (body.substr(0, dash.size()) != dash) {
    const std::size_t d = body.find(delimiter);
    if (d == std::string_view::npos) return fail(fmt::format("no boundary line {}", quote_input(dash, 80)));
    at = d + 2;
  }
  for (std::size_t index = 0;; ++index) {
    at += dash.size();                         // past "--B"
    if (body.substr(at, 2) == "--") return r;  // the close delimiter: done (the epilogue is ignored)
    while (at < body.size() && (body[at] == ' ' || body[at] == '\t')) ++at;  // transport padding
    if (body.substr(at, 2) != "\r\n")
      return fail(at >= body.size()
                      ? "the body ends after a boundary line, without the closing --BOUNDARY--"
                      : fmt::format("part {}: the boundary line is not followed by CRLF", index));
    at += 2;
    if (index >= limits.max_parts) return fail(fmt::format("more than {} parts", limits.max_parts));
    // Headers, up to an empty line.
    const std::size_t head_end = body.find("\r\n\r\n", at > 2 ? at - 2 : 0);
    const std::size_t head_bytes = head_end == std::string_view::npos ? body.size() - at : head_end + 2 - at;
    if (head_bytes > limits.max_header_bytes)
      return fail(fmt::format("part {}: headers over {} bytes", index, limits.max_header_bytes));
    if (head_end == std::string_view::npos)
      return fail(fmt::format("part {}: the body ends inside its headers", index));
    ParsedPart part;
    bool disposition = false;
    std::string_view headers = body.substr(at, head_end + 2 - at);  // "" or lines each ending in CRLF
    while (!headers.empty()) {
      const std::size_t eol = headers.find("\r\n");
      const std::string_view line = headers.substr(0, eol);
      headers.remove_prefix(eol + 2);
      if (line.empty()) continue;
      if (line.front() == ' ' || line.front() == '\t')
        return fail(fmt::format("part {}: folded header lines are not accepted", index));
      const std::size_t colon = line.find(':');
      if (colon == std::string_view::npos || colon == 0)
        return fail(fmt::format("part {}: header line {} has no name", index, quote_input(line, 60)));
      const std::string_view name = line.substr(0, colon);
      const std::string_view value = trim_ows(line.substr(colon + 1));
      if (iequals_ascii(name, "content-disposition")) {
        if (disposition) return fail(fmt::format("part {}: two Content-Disposition headers", index));
        disposition = true;
        const std::size_t semi = value.find(';');
        if (!iequals_ascii(trim_ows(value.substr(0, semi)), "form-data"))
          return fail(
              fmt::format("part {}: Content-Disposition {} is not form-data", index, quote_input(value, 60)));
        std::vector<HeaderParam> params;
        std::string error;
        if (semi != std::string_view::npos && !parse_params(value.substr(semi), params, error))
          return fail(fmt::format("part {}: Content-Disposition: {}", index, error));
        bool named = false;
        for (auto& p : params) {
          if (p.name == "name") {
            if (named) return fail(fmt::format("part {}: two name parameters", index));
            named = true;
            part.name = std::move(p.value);
          } else if (p.name == "filename") {
            part.has_filename = true;
            part.filename = std::move(p.value);
          }
        }
        if (!named || part.name.empty())
          return fail(
              fmt::format("part {} has no name (Content-Disposition: form-data; name=\"...\")", index));
      } else if (iequals_ascii(name, "content-type")) {
        part.content_type = std::string(value);
      }
    }
    if (!disposition)
      return fail(fmt::format("part {} has no Content-Disposition header (form-data; name=\"...\")", index));
    // The data: up to the next delimiter.
    at = head_end + 4;
    const std::size_t end = body.find(delimiter, at);
    if (end == std::string_view::npos)
      return fail(fmt::format("part {} ({}): the body ends before the next boundary (truncated?)", index,
                              quote_input(part.name, 40)));
    const std::size_t size = end - at;
    const std::size_t cap = part.has_filename ? limits.max_file_bytes : limits.max_field_bytes;
    if (size > cap)
      return fail(fmt::format("part {} ({}): {} bytes, over the limit of {} for a {}", index,
                              quote_input(part.name, 40), size, cap, part.has_filename ? "file" : "field"));
    part.data = body.substr(at, size);
    r.parts.push_back(std::move(part));
    at = end + 2;  // at "--B"
  }
}

}  // namespace tokenscope::net
