// The run directory (shared ARCHITECTURE.md): run.json (settings requested and
// effective, environment, summary), requests.jsonl (appended as requests
// finish: line by line durable, or in batches the caller flushes — bench
// every 50 ms, sim every 64 KiB; an interrupted run flushes what it has),
// steps.jsonl (engine steps, buffered), samples.jsonl (buffered). A run
// writes through rundir::RunSession (docs/architecture.md).
// Every write is checked: a full disk raises IoError naming the file, and
// what was written before stays readable.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace tokenscope {

// An append-only file of JSON lines with its own buffer and checked writes.
class JsonlWriter {
 public:
  // line_durable: write every line through to the kernel as it is appended.
  JsonlWriter(std::filesystem::path path, bool line_durable);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  // Appends line plus '\n'. line must not contain a newline.
  void append_line(std::string_view line);
  // Zero-copy variant: append one line's text to the returned buffer, then
  // call end_line(). Nothing else may be appended in between.
  std::string& begin_line();
  void end_line();
  void flush();
  void close();
  std::uint64_t lines() const { return lines_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_all(const char* data, std::size_t size);

  std::filesystem::path path_;
  int fd_ = -1;
  bool line_durable_;
  std::string buffer_;
  std::uint64_t lines_ = 0;
  std::uint64_t size_ = 0;  // bytes in the file
};

class RunDirectory {
 public:
  // Creates the directory (and parents). Existing run files are replaced.
  // requests_line_durable: write each request line through at once; false
  // when the caller writes batches and calls flush() after each.
  explicit RunDirectory(std::filesystem::path dir, bool requests_line_durable = true);

  const std::filesystem::path& path() const { return dir_; }
  JsonlWriter& requests();
  JsonlWriter& steps();
  // samples.jsonl, buffered (sim's virtual-time samples; bench's observer writes its own).
  JsonlWriter& samples();
  // Writes run.json atomically (temporary file, then rename), pretty-printed.
  void write_run_json(const nlohmann::json& run);
  void flush();
  void close();

 private:
  std::filesystem::path dir_;
  bool requests_line_durable_;
  std::unique_ptr<JsonlWriter> requests_;
  std::unique_ptr<JsonlWriter> steps_;
  std::unique_ptr<JsonlWriter> samples_;
};

// Before a run writes into dir: refuses (UsageError naming `option`) when dir
// already holds a run (run.json, requests.jsonl, sweep.json, grid.json, a sweep's
// rate-* runs...) unless overwrite, which removes those files first, so that
// two runs never mix in one directory. A symbolic link in a run file's
// place, dangling or not, counts as one (overwrite removes the link, never
// what it points to). Also refuses a path that is not a directory.
void claim_run_directory(const std::filesystem::path& dir, bool overwrite, std::string_view option);

// Files are never written through a symbolic link (docs/reliability.md
// "Files"): a planted link in a run directory must not make a run, a report
// or a check overwrite the file it points to.
//
// A new temporary file beside path (`PATH.XXXXXX.tmp`, a name of its own,
// created exclusively: never through a link, never one another process
// has), mode 0644, for a write that ends with a rename into path (rename
// replaces a link at path itself, not its target). Throws IoError.
struct TempFile {
  int fd = -1;
  std::filesystem::path path;
};
TempFile create_temp_beside(const std::filesystem::path& path);

// Writes text to path atomically (a temporary beside it, create_temp_beside,
// and a fsync-free rename). Throws IoError.
void write_file_atomic(const std::filesystem::path& path, std::string_view text);

}  // namespace tokenscope
