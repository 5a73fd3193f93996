// Reads outside input in bounded memory: a file through a fixed buffer, never
// the whole of it, or bytes already in memory (without a copy). Readers of
// traces and other input files use it so that their memory follows what they
// keep, not the size of the file, and a file that is not what it claims to be
// (a sparse file of NUL bytes, a binary file) is rejected from its first bytes.
//
// Lines: next_line() returns one line at a time without its '\n' (and the
// '\r' of a CRLF). Memory is the buffer (64 KiB) plus the longest line
// returned, at most max_line_bytes: a longer line comes back cut at that
// length with flaw() == kTooLong, and the rest of it is skipped without being
// stored. A line that holds a NUL byte comes back with flaw() == kNulByte and
// the column of the first NUL: no text format read with this class has one,
// so it means binary data. Its text is what was buffered of it (for a
// message: quote it with quote_input), and the rest of the line is skipped
// without being stored.
//
// Bytes: next_byte() for byte-wise parsers (a JSON document), which keeps
// line_number() current, and take() for binary records, which does not.
//
// Not thread-safe. Views it returns are valid until the next call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tokenscope {

class TextReader {
 public:
  static constexpr std::size_t kDefaultMaxLineBytes = std::size_t{64} << 20;
  static constexpr std::size_t kChunkBytes = std::size_t{64} << 10;

  enum class Flaw { kNone, kTooLong, kNulByte };

  // Reads `text`, which must outlive the reader.
  explicit TextReader(std::string_view text, std::size_t max_line_bytes = kDefaultMaxLineBytes);
  // Opens a file. Throws UsageError "PATH: cannot open WHAT: REASON" (WHAT
  // names the kind of file, e.g. "trace file") and InputError
  // "PATH: is a directory". Reading starts at byte `start` of the file (a
  // reader of one byte range of a file; a regular file only, else UsageError):
  // offset() and line_offset() count from the file's first byte,
  // line_number() from the first line read (the one at `start`).
  static TextReader open(const std::string& path, std::string_view what = "file",
                         std::size_t max_line_bytes = kDefaultMaxLineBytes, std::uint64_t start = 0);
  // As open(), for a file of a run directory or another file tokenscope
  // wrote: a regular file only (a link to one is followed: users link big
  // files). A FIFO, a device or a socket is an InputError "PATH: is not a
  // regular file (a FIFO)"; it is opened non-blocking, so that a FIFO with
  // no writer does not hang the open (docs/reliability.md "Files read").
  static TextReader open_regular(const std::string& path, std::string_view what = "file",
                                 std::size_t max_line_bytes = kDefaultMaxLineBytes, std::uint64_t start = 0);

  TextReader(TextReader&& other) noexcept;
  TextReader& operator=(TextReader&&) = delete;
  TextReader(const TextReader&) = delete;
  ~TextReader();

  // The size of a regular file or of the text; nullopt for a pipe or device.
  std::optional<std::uint64_t> size() const { return size_; }

  // Up to n bytes from the current position, without consuming them (reads
  // at most n bytes ahead; for format detection).
  std::string_view peek(std::size_t n);

  // The next line; false at the end of the input.
  bool next_line(std::string_view& line);
  Flaw flaw() const { return flaw_; }
  // 1-based byte of the line where the first NUL is (with kNulByte).
  std::size_t nul_column() const { return nul_column_; }
  // Why the last line cannot be a line of JSON (or other text) in plain
  // words ("line longer than 64 MiB", "NUL byte at column 7: binary data,
  // not JSON lines"); nullopt when it has no flaw.
  std::optional<std::string> flaw_message() const;

  // The next byte (0..255), or -1 at the end of the input.
  int next_byte() {
    if (pos_ == end_ && !fill(1)) return -1;
    const auto c = static_cast<unsigned char>(data_[pos_++]);
    if (c == '\n') ++newlines_;
    line_ = newlines_ + 1 - (c == '\n');
    return c;
  }
  // Up to n bytes, consumed (fewer only at the end of the input).
  std::string_view take(std::size_t n);

  // The 1-based line of the last line or byte returned (0 before any).
  std::uint64_t line_number() const { return line_; }
  // Bytes consumed so far (the offset in the file of the next byte).
  std::uint64_t offset() const { return consumed_ + pos_; }
  // Where the last line returned by next_line() starts (its offset in the file).
  std::uint64_t line_offset() const { return line_offset_; }

 private:
  TextReader(std::string path, int fd, std::optional<std::uint64_t> size, std::size_t max_line_bytes);
  static TextReader open_file(const std::string& path, std::string_view what, std::size_t max_line_bytes,
                              std::uint64_t start, bool regular_only);
  // Makes at least `want` bytes available from pos_ unless the input ends
  // first; returns whether any byte is available.
  bool fill(std::size_t want);
  // Consumes bytes up to and including the next '\n' (or the end).
  void skip_rest_of_line();

  std::string path_;
  int fd_ = -1;  // -1: reading text in memory
  std::optional<std::uint64_t> size_;
  std::size_t max_line_bytes_;
  std::string buffer_;          // the file's bytes [consumed_, consumed_ + end_)
  const char* data_ = nullptr;  // buffer_.data() or the text
  std::size_t pos_ = 0, end_ = 0;
  std::uint64_t consumed_ = 0;  // bytes dropped from the front of buffer_
  bool eof_ = false;
  bool skip_pending_ = false;  // the rest of the last line is to be skipped
  Flaw flaw_ = Flaw::kNone;
  std::size_t nul_column_ = 0;
  std::uint64_t newlines_ = 0;
  std::uint64_t line_ = 0;
  std::uint64_t line_offset_ = 0;
};

// A regular file read whole (TextReader::open_regular's checks), at most
// max_bytes: a larger one is an InputError "PATH: N bytes: larger than the
// M MiB a WHAT can be" (a file tokenscope wrote is never that large).
std::string read_regular_file(const std::string& path, std::string_view what, std::uint64_t max_bytes);

}  // namespace tokenscope
