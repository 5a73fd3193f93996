// exporters: writing what other tools read from a run directory — a
// Perfetto (Chrome JSON) trace (perfetto.h) and OTLP traces and metrics
// (otlp.h) — and the output file and number formats they share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "rundir/readers.h"

namespace tokenscope::exporters {

// The run directory's readers, as the exporters name them.
using rundir::BadLines;
using rundir::ClockAnchor;
using rundir::ReadStats;
using rundir::RunInfo;
using rundir::RunSource;

// Writes an export's output to PATH.tmp and renames it to PATH on commit(),
// so that a failed export never leaves a partial file under the real name
// (the temporary file is removed). Checked writes: IoError naming the file.
class OutputFile {
 public:
  explicit OutputFile(std::filesystem::path path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  // Append one line's text to the returned buffer, then call end_line().
  std::string& begin_line() { return buffer_; }
  void end_line();
  // One whole line (an OTLP export request of megabytes): written from
  // where it is, not copied into the buffer.
  void write_line(std::string_view line);
  void commit();
  std::uint64_t bytes() const { return bytes_ + buffer_.size(); }

 private:
  void flush();
  void write_all(std::string_view data);

  std::filesystem::path path_;
  std::filesystem::path tmp_;
  int fd_ = -1;
  std::string buffer_;
  std::uint64_t bytes_ = 0;  // written to the file
};

// At most max_bytes of s, never cutting a UTF-8 character in two.
std::string_view utf8_prefix(std::string_view s, std::size_t max_bytes);

// JSON number appenders shared by the exporters.
// ns as microseconds with up to three decimals, exactly (no floating point).
void append_micros(std::string& out, Nanos ns);
// The shortest text that reads back as v (finite v only).
void append_double(std::string& out, double v);

}  // namespace tokenscope::exporters
