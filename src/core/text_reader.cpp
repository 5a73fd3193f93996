#include "core/text_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"

namespace tokenscope {

TextReader::TextReader(std::string_view text, std::size_t max_line_bytes)
    : size_(text.size()), max_line_bytes_(max_line_bytes), data_(text.data()), end_(text.size()) {
  eof_ = true;
}

TextReader::TextReader(std::string path, int fd, std::optional<std::uint64_t> size,
                       std::size_t max_line_bytes)
    : path_(std::move(path)), fd_(fd), size_(size), max_line_bytes_(max_line_bytes) {
  buffer_.resize(kChunkBytes);
  data_ = buffer_.data();
}

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

}  // namespace

TextReader TextReader::open(const std::string& path, std::string_view what, std::size_t max_line_bytes,
                            std::uint64_t start) {
  return open_file(path, what, max_line_bytes, start, false);
}

TextReader TextReader::open_regular(const std::string& path, std::string_view what,
                                    std::size_t max_line_bytes, std::uint64_t start) {
  return open_file(path, what, max_line_bytes, start, true);
}

TextReader TextReader::open_file(const std::string& path, std::string_view what, std::size_t max_line_bytes,
                                 std::uint64_t start, bool regular_only) {
  const auto cannot_open = [&](int err) {
    return UsageError(path + ": cannot open " + std::string(what) + ": " + std::strerror(err));
  };
  // Non-blocking for a regular file only: a FIFO without a writer would
  // block the open; it is refused below (reads of a regular file never block).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (regular_only ? O_NONBLOCK : 0));
  if (fd < 0) throw cannot_open(errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw cannot_open(err);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw InputError(path, 0, "", "is a directory");
  }
  if (regular_only && !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(path, 0, "",
                     fmt::format("is not a regular file ({}): a {} must be one", kind_of(st.st_mode), what));
  }
  std::optional<std::uint64_t> size;
  if (S_ISREG(st.st_mode)) size = static_cast<std::uint64_t>(st.st_size);
  if (start > 0) {
    if (!size || start > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max()) ||
        ::lseek(fd, static_cast<off_t>(start), SEEK_SET) < 0) {
      const int err = size ? errno : ESPIPE;
      ::close(fd);
      throw cannot_open(err);
    }
  }
  TextReader reader(path, fd, size, max_line_bytes);
  reader.consumed_ = start;
  reader.line_offset_ = start;
  return reader;
}

std::optional<std::string> TextReader::flaw_message() const {
  switch (flaw_) {
    case Flaw::kNone:
      return std::nullopt;
    case Flaw::kTooLong:
      return "line longer than " + std::to_string(max_line_bytes_ >> 20) + " MiB";
    case Flaw::kNulByte:
      return "NUL byte at column " + std::to_string(nul_column_) + ": binary data, not JSON lines";
  }
  return std::nullopt;
}

TextReader::TextReader(TextReader&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      size_(o.size_),
      max_line_bytes_(o.max_line_bytes_),
      buffer_(std::move(o.buffer_)),
      data_(fd_ >= 0 ? buffer_.data() : o.data_),
      pos_(o.pos_),
      end_(o.end_),
      consumed_(o.consumed_),
      eof_(o.eof_),
      skip_pending_(o.skip_pending_),
      flaw_(o.flaw_),
      nul_column_(o.nul_column_),
      newlines_(o.newlines_),
      line_(o.line_),
      line_offset_(o.line_offset_) {}

TextReader::~TextReader() {
  if (fd_ >= 0) ::close(fd_);
}

bool TextReader::fill(std::size_t want) {
  if (end_ - pos_ >= want) return true;
  if (fd_ < 0 || eof_) return end_ > pos_;
  if (pos_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + pos_, end_ - pos_);
    consumed_ += pos_;
    end_ -= pos_;
    pos_ = 0;
  }
  if (buffer_.size() < want) buffer_.resize((want + kChunkBytes - 1) / kChunkBytes * kChunkBytes);
  data_ = buffer_.data();
  while (end_ < want && !eof_) {
    const ssize_t n = ::read(fd_, buffer_.data() + end_, buffer_.size() - end_);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(path_ + ": cannot read: " + std::strerror(errno));
    }
    if (n == 0)
      eof_ = true;
    else
      end_ += static_cast<std::size_t>(n);
  }
  return end_ > pos_;
}

std::string_view TextReader::peek(std::size_t n) {
  fill(n);
  return {data_ + pos_, std::min(n, end_ - pos_)};
}

std::string_view TextReader::take(std::size_t n) {
  fill(n);
  const std::size_t k = std::min(n, end_ - pos_);
  const std::string_view out(data_ + pos_, k);
  pos_ += k;
  return out;
}

void TextReader::skip_rest_of_line() {
  while (fill(1)) {
    const void* nl = std::memchr(data_ + pos_, '\n', end_ - pos_);
    if (nl != nullptr) {
      pos_ = static_cast<std::size_t>(static_cast<const char*>(nl) - data_) + 1;
      ++newlines_;
      return;
    }
    pos_ = end_;
  }
}

bool TextReader::next_line(std::string_view& line) {
  if (skip_pending_) {
    skip_pending_ = false;
    skip_rest_of_line();
  }
  flaw_ = Flaw::kNone;
  nul_column_ = 0;
  if (!fill(1)) return false;
  line_ = newlines_ + 1;
  line_offset_ = consumed_ + pos_;
  std::size_t scanned = 0;  // bytes from pos_ searched for '\n' and NUL so far
  for (;;) {
    const char* start = data_ + pos_;
    const std::size_t avail = end_ - pos_;
    const auto* nl = static_cast<const char*>(std::memchr(start + scanned, '\n', avail - scanned));
    const std::size_t len = nl != nullptr ? static_cast<std::size_t>(nl - start) : avail;
    const auto* nul = static_cast<const char*>(std::memchr(start + scanned, '\0', len - scanned));
    if (nul != nullptr || len > max_line_bytes_) {
      if (nul != nullptr) {
        flaw_ = Flaw::kNulByte;
        nul_column_ = static_cast<std::size_t>(nul - start) + 1;
      } else {
        flaw_ = Flaw::kTooLong;
      }
      line = std::string_view(start, std::min(len, max_line_bytes_));
      if (nl != nullptr) {
        pos_ += len + 1;
        ++newlines_;
      } else {
        pos_ += avail;
        skip_pending_ = true;
      }
      return true;
    }
    // Not a whole line yet: read more, twice as much each time (so a long
    // line costs linear time), but never past the longest line allowed.
    if (nl == nullptr && fd_ >= 0) fill(std::min(std::max(avail + 1, 2 * avail), max_line_bytes_ + 1));
    if (nl != nullptr || end_ - pos_ == avail) {
      // A whole line, or the last one (no '\n' before the end of the input).
      line = std::string_view(data_ + pos_, len);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      pos_ += len + (nl != nullptr ? 1 : 0);
      if (nl != nullptr) ++newlines_;
      return true;
    }
    scanned = avail;  // the bytes read before hold no '\n' and no NUL
  }
}

std::string read_regular_file(const std::string& path, std::string_view what, std::uint64_t max_bytes) {
  TextReader reader = TextReader::open_regular(path, what);
  if (reader.size() && *reader.size() > max_bytes)
    throw InputError(
        path, 0, "",
        fmt::format("{} bytes: larger than the {} MiB a {} can be", *reader.size(), max_bytes >> 20, what));
  std::string text;
  std::string_view chunk;
  // The size may grow while it is read: the bound holds for what is read.
  while (!(chunk = reader.take(64u << 10)).empty()) {
    if (text.size() + chunk.size() > max_bytes)
      throw InputError(path, 0, "", fmt::format("larger than the {} MiB a {} can be", max_bytes >> 20, what));
    text.append(chunk);
  }
  return text;
}

}  // namespace tokenscope
