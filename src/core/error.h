// One error model for tokenscope (see docs/errors.md):
//  * UsageError and InputError: bad configuration or bad outside input. The
//    message names what is wrong and what was expected; the CLI prints it and
//    exits with code 2.
//  * IoError: the environment failed us (disk full, unwritable directory).
//    Exit code 1; results already written stay on disk.
//  * Per-request outcomes (HTTP errors, timeouts, rejections) are data in the
//    request record, never exceptions.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tokenscope {

// Every exit code of the tool, in one place (docs/errors.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // an I/O failure, a failed run; check: something regressed
inline constexpr int kExitUsage = 2;
inline constexpr int kExitSloFailed = 3;         // bench: an SLO failed
inline constexpr int kExitProbeUnavailable = 4;  // probe: a GPU probe with no GPU (or no CUDA build) here
inline constexpr int kExitEnvironment = 5;       // check --fail-on-environment: the runs' environments differ
inline constexpr int kExitInterrupted = 130;     // Ctrl-C: the results so far are kept

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Outside input (a field value, a line of a file) quoted for an error message:
// the text in single quotes, with every byte that would not print as itself
// escaped, so that binary input neither garbles the terminal nor cuts the
// message at a NUL: \0, \t, \n, \r, and \xNN for other control bytes (C0,
// DEL, C1) and bytes that are not valid UTF-8. Valid UTF-8 text and printable
// ASCII (quotes and backslashes too) are kept as they are: the result is for
// people to read, not to parse back. At most `max_bytes` bytes of the input are
// shown (never half a UTF-8 character), then "…" after the closing quote.
// Examples, as C++ literals:
//   quote_input("thirty")               == "'thirty'"
//   quote_input(std::string("a\0b", 3)) == "'a\\0b'"   (shows as 'a\0b')
//   quote_input(std::string(1000, 'x')) == "'" + std::string(80, 'x') + "'…"
std::string quote_input(std::string_view input, std::size_t max_bytes = 80);
// The bidirectional formatting characters (U+061C, U+200E, U+200F,
// U+202A..U+202E, U+2066..U+2069) and the line and paragraph separators
// (U+2028, U+2029) are escaped as \u{202e}: they are valid UTF-8 but change
// how the text around them shows.

// Outside text in a line or a table cell of tokenscope's output (a model id,
// a tenant or class name, a path, a warning that quotes a server): escaped as
// quote_input escapes it, but whole (nothing cut) and without quotes. A
// terminal shows it as text, never as a command (no escape sequence, no
// carriage return or newline that forges a line). docs/reliability.md
// "Output of outside text".
std::string display_text(std::string_view input);
// As display_text, with line breaks kept: for tokenscope's own multi-line
// messages that may quote outside text (an error's what()).
std::string display_lines(std::string_view input);
// s with &, <, > and " as HTML entities: text in HTML (and in Markdown,
// which GitHub renders as HTML).
std::string html_escape(std::string_view s);
// Outside text in Markdown meant for a pull-request comment (report and check
// --format md): display_text, then html_escape (GitHub renders HTML in
// Markdown) and a backslash before each character that is
// Markdown syntax inline (\ ` * _ [ ] | ~), so that a name is shown as
// text: never a link, an image, a table cell boundary or markup.
std::string markdown_text(std::string_view input);

// Length of the well-formed UTF-8 sequence starting at s[i] (1 for ASCII),
// or 0 (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i);

// Bad outside input: names the file, the 1-based line (0 when the error is not
// tied to a line), the field and what was expected. The message is
// "FILE:LINE: field 'FIELD': PROBLEM" (the field escaped as quote_input does);
// a problem that quotes input should quote it with quote_input.
class InputError : public UsageError {
 public:
  InputError(std::string file, std::size_t line, std::string field, const std::string& problem);

  const std::string& file() const { return file_; }
  std::size_t line() const { return line_; }
  const std::string& field() const { return field_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string file_;
  std::size_t line_;
  std::string field_;
  std::string problem_;
};

class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The target server cannot be reached or does not answer as an
// OpenAI-compatible server must before a run can start (no model list, a
// connection refused). Exit code 1: the options may be right, the run failed.
class TargetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tokenscope
