// A folder of its own under the temporary directory, removed with what it
// holds at the end (for tests).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tokenscope {

class TempDir {
 public:
  // $TMPDIR/tokenscope-<tag>-XXXXXX, made by mkdtemp (unique per call).
  explicit TempDir(std::string_view tag = "test") {
    std::string name =
        (std::filesystem::temp_directory_path() / ("tokenscope-" + std::string(tag) + "-XXXXXX")).string();
    if (!::mkdtemp(name.data())) throw std::runtime_error("mkdtemp failed for " + name);
    path_ = name;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }
  // Writes bytes to path()/name; returns that path.
  std::string write(std::string_view name, std::string_view bytes) const {
    const auto p = path_ / name;
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }

 private:
  std::filesystem::path path_;
};

// A file's bytes, whole ("" when it cannot be read), for tests.
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace tokenscope
