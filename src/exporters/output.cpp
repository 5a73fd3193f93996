#include "exporters/output.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <system_error>

#include "core/error.h"
#include "core/run_dir.h"

namespace tokenscope::exporters {

// ---------------------------------------------------------------- output

namespace {
constexpr std::size_t kOutputBufferBytes = 1u << 20;

[[noreturn]] void throw_io(const std::filesystem::path& path, std::string_view action, int err) {
  throw IoError(fmt::format("{}: cannot {}: {}", path.string(), action, std::strerror(err)));
}
}  // namespace

OutputFile::OutputFile(std::filesystem::path path) : path_(std::move(path)) {
  // A temporary of its own beside the output, never written through a link.
  TempFile temp = create_temp_beside(path_);
  tmp_ = std::move(temp.path);
  fd_ = temp.fd;
  buffer_.reserve(kOutputBufferBytes + (64u << 10));
}

OutputFile::~OutputFile() {
  if (fd_ < 0) return;  // committed
  ::close(fd_);
  std::error_code ec;
  std::filesystem::remove(tmp_, ec);
}

void OutputFile::write_all(std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd_, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_io(tmp_, "write", errno);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
    bytes_ += static_cast<std::uint64_t>(n);
  }
}

void OutputFile::flush() {
  if (buffer_.empty()) return;
  write_all(buffer_);
  buffer_.clear();
}

void OutputFile::end_line() {
  buffer_ += '\n';
  if (buffer_.size() >= kOutputBufferBytes) flush();
}

void OutputFile::write_line(std::string_view line) {
  if (line.size() < (64u << 10)) {
    buffer_.append(line);
    return end_line();
  }
  flush();
  write_all(line);
  write_all("\n");
}

void OutputFile::commit() {
  flush();
  if (::close(fd_) != 0) {
    fd_ = -1;
    const int err = errno;
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
    throw_io(tmp_, "close", err);
  }
  fd_ = -1;
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    const std::string why = ec.message();  // before remove() reuses ec
    std::filesystem::remove(tmp_, ec);
    throw IoError(fmt::format("{}: cannot rename to {}: {}", tmp_.string(), path_.string(), why));
  }
}

std::string_view utf8_prefix(std::string_view s, std::size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  std::size_t n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // s[n] continues a character
  return s.substr(0, n);
}

void append_micros(std::string& out, Nanos ns) {
  if (ns < 0) {
    out += '-';
    // -INT64_MIN does not fit: nanosecond times never come near it, but
    // say something finite rather than overflow.
    ns = ns == std::numeric_limits<Nanos>::min() ? std::numeric_limits<Nanos>::max() : -ns;
  }
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, ns / 1000);
  out.append(buf, r.ptr);
  int frac = static_cast<int>(ns % 1000);
  if (frac == 0) return;
  char digits[4] = {'.', static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10),
                    static_cast<char>('0' + frac % 10)};
  int n = 4;
  while (digits[n - 1] == '0') --n;
  out.append(digits, static_cast<std::size_t>(n));
}

void append_double(std::string& out, double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace tokenscope::exporters
