// multipart/form-data (RFC 7578 over RFC 2046's multipart syntax): the body
// bench builds for an upload (/v1/audio/transcriptions) and the strict,
// bounded parser serve reads it with.
//
// Built: each part is "--B\r\nContent-Disposition: form-data; name="N"
// [; filename="F"]\r\n[Content-Type: T\r\n]\r\n" + data + "\r\n", then
// "--B--\r\n". The boundary B is drawn from a seed and checked against the
// bytes of every part: a boundary that occurs in the data is drawn again, so
// the body always parses back to its parts.
//
// Parsed: the boundary from the Content-Type's `boundary` parameter (1 to 70
// characters of RFC 2046's set, quoted or not); an optional preamble before
// the first delimiter; each part's headers (Content-Disposition: form-data
// with a name, an optional filename; Content-Type; others ignored; no
// folded lines) and its data up to the next "\r\n--B"; the close delimiter
// "--B--" must come (a body cut short is an error); the epilogue after it is
// ignored. Bounded: parts, header bytes per part, bytes of a field's value
// (a part without a filename) and of a file. Every error says what is wrong
// and in which part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tokenscope::net {

struct FormPart {
  std::string_view name{};
  std::string_view data{};
  std::string_view filename{};      // "": a plain field (no filename parameter)
  std::string_view content_type{};  // "": no Content-Type header (text/plain by RFC 7578)
};

// A boundary that occurs in no part's data (nor its headers): "tokenscope-"
// and 32 hex digits drawn from `seed`, drawn again (from the next seed)
// while it occurs in a part.
std::string multipart_boundary(const std::vector<FormPart>& parts, std::uint64_t seed);
// The body of the parts with that boundary. A name or filename's '"', CR and
// LF are sent percent-encoded (%22, %0D, %0A), as RFC 7578 section 4.2 says.
std::string multipart_body(const std::vector<FormPart>& parts, std::string_view boundary);
// "multipart/form-data; boundary=B"
std::string multipart_content_type(std::string_view boundary);

struct MultipartLimits {
  std::size_t max_parts = 64;
  std::size_t max_header_bytes = 8192;    // a part's header block
  std::size_t max_field_bytes = 1 << 16;  // a part without a filename
  std::size_t max_file_bytes = 64u << 20;
};

// A parsed part: views into the body given to parse_multipart.
struct ParsedPart {
  std::string name;
  std::string filename;  // "" when the part had no filename parameter
  bool has_filename = false;
  std::string content_type;
  std::string_view data;
};

// The boundary of a Content-Type "multipart/form-data; boundary=..."; ""
// and `error` set when the type is another or the boundary is missing or
// not one RFC 2046 allows.
std::string multipart_boundary_of(std::string_view content_type, std::string& error);

struct MultipartResult {
  std::vector<ParsedPart> parts;
  std::string error;  // "": parsed
  bool ok() const { return error.empty(); }
};
// The parts of a multipart/form-data body, or what is wrong with it.
MultipartResult parse_multipart(std::string_view content_type, std::string_view body,
                                const MultipartLimits& limits = {});

}  // namespace tokenscope::net
