#include "core/run_dir.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/json_depth.h"

namespace tokenscope {

namespace {
constexpr std::size_t kBufferBytes = 1 << 16;
// The buffer's room: twice the flush threshold, so that the line that
// crosses the threshold fits without the buffer growing (a reallocation
// and a copy of all of it, once per flush, before).
constexpr std::size_t kBufferRoom = 2 * kBufferBytes;

[[noreturn]] void throw_io(const std::filesystem::path& path, std::string_view action, int err) {
  throw IoError(fmt::format("{}: cannot {}: {}", path.string(), action, std::strerror(err)));
}
}  // namespace

JsonlWriter::JsonlWriter(std::filesystem::path path, bool line_durable)
    : path_(std::move(path)), line_durable_(line_durable) {
  // O_NOFOLLOW: a link in the file's place is refused, never written through.
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0 && errno == ELOOP)
    throw IoError(
        fmt::format("{}: is a symbolic link; refusing to write through it (remove it, or "
                    "write the run elsewhere)",
                    path_.string()));
  if (fd_ < 0) throw_io(path_, "create", errno);
  buffer_.reserve(kBufferRoom);
}

JsonlWriter::~JsonlWriter() {
  try {
    close();
  } catch (...) {
    // Destructors do not throw; callers who care call close() themselves.
  }
}

// data holds whole lines. When a write fails part way (a full disk), the
// file is cut back to the last whole line written, so that every line in it
// stays readable.
void JsonlWriter::write_all(const char* data, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd_, data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      std::size_t whole = 0;  // bytes up to and including the last newline written
      for (std::size_t i = done; i > 0; --i)
        if (data[i - 1] == '\n') {
          whole = i;
          break;
        }
      if (whole < done && ::ftruncate(fd_, static_cast<off_t>(size_ + whole)) == 0)
        ::lseek(fd_, static_cast<off_t>(size_ + whole), SEEK_SET);
      size_ += whole;
      throw_io(path_, "write", err);
    }
    done += static_cast<std::size_t>(n);
  }
  size_ += size;
}

void JsonlWriter::append_line(std::string_view line) {
  if (fd_ < 0) throw IoError(fmt::format("{}: write after close", path_.string()));
  buffer_.append(line);
  buffer_.push_back('\n');
  ++lines_;
  if (line_durable_ || buffer_.size() >= kBufferBytes) flush();
}

std::string& JsonlWriter::begin_line() {
  if (fd_ < 0) throw IoError(fmt::format("{}: write after close", path_.string()));
  return buffer_;
}

void JsonlWriter::end_line() {
  buffer_.push_back('\n');
  ++lines_;
  if (line_durable_ || buffer_.size() >= kBufferBytes) flush();
}

void JsonlWriter::flush() {
  if (fd_ < 0 || buffer_.empty()) return;
  // Clear the buffer even when the write fails, so a failing disk does not
  // make every later call re-raise for the same bytes. Its storage stays
  // (one that grew for a long line is let go).
  struct ClearAfter {
    std::string& b;
    ~ClearAfter() {
      b.clear();
      if (b.capacity() <= kBufferRoom) return;
      std::string().swap(b);
      try {
        b.reserve(kBufferRoom);
      } catch (...) {  // a destructor, perhaps while a write's error unwinds: grown again as lines come
      }
    }
  } clear_after{buffer_};
  write_all(buffer_.data(), buffer_.size());
}

void JsonlWriter::close() {
  if (fd_ < 0) return;
  try {
    flush();
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw_io(path_, "close", errno);
  }
  fd_ = -1;
}

RunDirectory::RunDirectory(std::filesystem::path dir, bool requests_line_durable)
    : dir_(std::move(dir)), requests_line_durable_(requests_line_durable) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw IoError(fmt::format("{}: cannot create directory: {}", dir_.string(), ec.message()));
}

JsonlWriter& RunDirectory::requests() {
  if (!requests_) requests_ = std::make_unique<JsonlWriter>(dir_ / "requests.jsonl", requests_line_durable_);
  return *requests_;
}

JsonlWriter& RunDirectory::steps() {
  if (!steps_) steps_ = std::make_unique<JsonlWriter>(dir_ / "steps.jsonl", false);
  return *steps_;
}

JsonlWriter& RunDirectory::samples() {
  if (!samples_) samples_ = std::make_unique<JsonlWriter>(dir_ / "samples.jsonl", false);
  return *samples_;
}

void RunDirectory::write_run_json(const nlohmann::json& run) {
  write_file_atomic(dir_ / "run.json", run.dump(2) + "\n");
}

void RunDirectory::flush() {
  if (requests_) requests_->flush();
  if (steps_) steps_->flush();
  if (samples_) samples_->flush();
}

void RunDirectory::close() {
  if (requests_) requests_->close();
  if (steps_) steps_->close();
  if (samples_) samples_->close();
}

void claim_run_directory(const std::filesystem::path& dir, bool overwrite, std::string_view option) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(dir, ec);
  if (ec || !fs::exists(st)) return;  // a new directory
  if (!fs::is_directory(st))
    throw UsageError(fmt::format("{} {}: exists and is not a directory", option, dir.string()));
  static constexpr const char* kRunFiles[] = {
      "run.json",         "run.json.tmp",      "requests.jsonl", "requests.csv",  "steps.jsonl",
      "vllm_result.json", "sweep.json",        "sweep.json.tmp", "samples.jsonl", "trace.json",
      "otlp_traces.json", "otlp_metrics.json", "server.log",     "grid.json"};
  std::vector<fs::path> found;
  // symlink_status: a link in a run file's place is found whether or not
  // what it points to exists.
  for (const char* f : kRunFiles)
    if (fs::exists(fs::symlink_status(dir / f, ec))) found.push_back(dir / f);
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec) &&
        (it->path().filename().string().rfind("rate-", 0) == 0 ||
         it->path().filename().string().rfind("repeat-", 0) == 0) &&
        (fs::exists(it->path() / "run.json", ec) || fs::exists(it->path() / "sweep.json", ec)))
      found.push_back(it->path());
  // The runs a sweep.json lists (a server sweep's NAME-V/, a run or a run set
  // of repeats): a plain name (letters, digits, '.', '_', '+', '-'; not "."
  // or ".."), a directory itself (not a link) holding a run.json or a
  // sweep.json. sweep.json is read only as a regular file (not a link, a FIFO
  // or a device) of at most 16 MiB.
  const auto plain_name = [](const std::string& n) {
    if (n.empty() || n == "." || n == ".." || n.size() > 255) return false;
    for (const char c : n)
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
            c == '_' || c == '+' || c == '-'))
        return false;
    return true;
  };
  std::error_code sweep_ec;
  if (const auto sst = fs::symlink_status(dir / "sweep.json", sweep_ec);
      !sweep_ec && fs::is_regular_file(sst) && fs::file_size(dir / "sweep.json", sweep_ec) <= (16u << 20) &&
      !sweep_ec) {
    std::ifstream in(dir / "sweep.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (json_too_deep_at(text) != std::string_view::npos) text.clear();
    const auto doc = nlohmann::json::parse(text, nullptr, false);
    if (doc.is_object() && doc.contains("runs") && doc["runs"].is_array())
      for (const auto& r : doc["runs"]) {
        if (!r.is_object() || !r.contains("dir") || !r["dir"].is_string()) continue;
        const std::string name = r["dir"].get<std::string>();
        if (!plain_name(name)) continue;
        const fs::path sub = dir / name;
        if (fs::is_directory(fs::symlink_status(sub, ec)) &&
            (fs::exists(sub / "run.json", ec) || fs::exists(sub / "sweep.json", ec)) &&
            std::find(found.begin(), found.end(), sub) == found.end())
          found.push_back(sub);
      }
  }
  if (found.empty()) return;
  if (!overwrite)
    throw UsageError(fmt::format(
        "{} {}: holds an earlier run ({}); choose another directory, or add --overwrite to replace it",
        option, dir.string(), found.front().filename().string()));
  // The earlier run's cache (rundir/run_cache.h) goes with it: stale, it
  // would be ignored, but it is the earlier run's.
  found.push_back(dir / ".tokenscope-cache");
  for (const auto& p : found) {
    fs::remove_all(p, ec);
    if (ec) throw IoError(fmt::format("{}: cannot remove: {}", p.string(), ec.message()));
  }
}

TempFile create_temp_beside(const std::filesystem::path& path) {
  std::string name = path.string() + ".XXXXXX.tmp";
  // mkostemps: O_CREAT|O_EXCL on a fresh name (a link there fails it).
  const int fd = ::mkostemps(name.data(), 4, O_CLOEXEC);
  if (fd < 0) throw_io(path.string() + ".*.tmp", "create", errno);
  ::fchmod(fd, 0644);  // mkostemps makes 0600; run files are readable as before
  return {fd, std::filesystem::path(name)};
}

void write_file_atomic(const std::filesystem::path& path, std::string_view text) {
  const auto [fd, tmp] = create_temp_beside(path);
  const char* data = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());  // the earlier file stays whole; the space is given back
      throw_io(tmp, "write", err);
    }
    data += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_io(tmp, "close", err);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("{}: cannot rename into place: {}", path.string(), ec.message()));
  }
}

}  // namespace tokenscope
