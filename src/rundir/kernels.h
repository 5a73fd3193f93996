// Check item 9's kernel records (../shared/design/CHECKLIST.md: "kernel
// inventory diff where CUPTI data exist"; docs/check.md): the GPU kernels a
// run launched, read from either of two files, told apart by their content.
//
//  * JSON lines, one CUPTI activity record per line, as `tokenscope probe
//    gpu-context|kv-swap --out DIR` writes them into DIR/samples.jsonl
//    (probe/gpu_probes.h samples_jsonl()):
//      {"t": 12.000001000, "source": "cupti", "name": "kernel_duration_ns",
//       "labels": {"gpu": "0", "stream": "7", "what": "decode_kernel", "bytes": "0"},
//       "value": 7000}
//    t: the launch's start in seconds (0 to 9.2e9), value: its duration in
//    ns (0 to 1e15), labels.what: the kernel's name (non-empty). Other lines
//    are passed over: the probe's other records (other CUPTI kinds, NVML
//    readings: an object with "t" and "source") and a run's own samples.jsonl
//    lines (observations: an object with "t_ns"), so that a run's
//    samples.jsonl with the probe's lines in it reads too. Blank lines are
//    passed over; any other line is bad input.
//  * An Nsight Systems SQLite export (`nsys export --type sqlite`; the file
//    starts with "SQLite format 3"): the rows of CUPTI_ACTIVITY_KIND_KERNEL,
//    start and end in ns, the name an id into StringIds(id, value). Kernels
//    are matched by mangledName where the export has it (the name CUPTI
//    itself gives, so that an export and the probe's lines match), else
//    demangledName, else shortName; demangledName is the label shown.
//
// Bad input is an InputError naming the file, the line (JSON lines) or the
// table and row (SQLite), the field and what was expected; a file with no
// kernel launch at all is one too.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/clock.h"

namespace tokenscope::rundir {

// Launches of one kernel needed for its first-launch excess: the median
// then stands on at least two launches besides the first.
inline constexpr std::uint64_t kMinLaunchesForExcess = 3;

// One kernel of a run: its launches summed up.
struct KernelStats {
  std::string name;   // what the two runs are matched by
  std::string label;  // for people: the demangled name where the file has one, else name
  std::uint64_t launches = 0;
  std::int64_t total_ns = 0;
  double median_ns = 0;  // nearest rank, every launch counted
  // The earliest launch (by start; of equal starts the first read): its
  // start on the file's clock and its duration.
  Nanos first_start_ns = 0;
  std::int64_t first_duration_ns = 0;
  // The first launch's duration over the median, minus 1; nullopt with fewer
  // than kMinLaunchesForExcess launches or a median of 0.
  std::optional<double> first_excess() const;
};

struct KernelInventory {
  std::string source;                // the file
  std::string format;                // "cupti-jsonl" or "nsys-sqlite"
  std::vector<KernelStats> kernels;  // ascending by name
  std::uint64_t launches = 0;
  std::int64_t total_ns = 0;
  std::uint64_t passed_over = 0;  // lines or rows of other kinds
  bool empty() const { return kernels.empty(); }
  const KernelStats* find(std::string_view name) const;  // nullptr when the run has no such kernel
};

// Sums launches up per kernel as they are read (each launch's duration is
// kept, 8 bytes, for the median).
class KernelCollector {
 public:
  // label "": the name. duration_ns >= 0. false (the launch left out): the
  // kernel time of all launches would add up past 2^63 ns.
  [[nodiscard]] bool add(std::string_view name, std::string_view label, Nanos start_ns,
                         std::int64_t duration_ns);
  void pass_over() { ++passed_over_; }
  std::uint64_t launches() const { return launches_; }
  KernelInventory finish(std::string source, std::string format);

 private:
  struct Kernel {
    std::string name, label;
    std::vector<std::int64_t> durations;
    std::int64_t total_ns = 0;
    Nanos first_start_ns = 0;
    std::int64_t first_duration_ns = 0;
  };
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::size_t, NameHash, std::equal_to<>> index_;
  std::vector<Kernel> kernels_;
  std::uint64_t launches_ = 0, passed_over_ = 0;
  std::int64_t total_ns_ = 0;
};

// ------------------------------------------------------------ JSON lines
// What one line is.
enum class KernelLineKind {
  kKernel,       // a CUPTI kernel record
  kCuptiOther,   // another CUPTI record (memcpy, context, ...)
  kOther,        // another line of a samples.jsonl: an NVML reading, an observation
  kNotOneOfOurs  // not JSON, not an object, or neither format
};
struct KernelRecord {
  std::string_view name;  // valid until the parser's next call
  Nanos start_ns = 0;
  std::int64_t duration_ns = 0;
};
// Parses lines (simdjson; its buffers reused from line to line).
class KernelLineParser {
 public:
  KernelLineParser();
  ~KernelLineParser();
  KernelLineParser(const KernelLineParser&) = delete;
  KernelLineParser& operator=(const KernelLineParser&) = delete;
  // kKernel fills rec. Throws rundir::LineError (the field, what was
  // expected) for a CUPTI kernel record with a bad field. With
  // kNotOneOfOurs, why() says what the line is not.
  KernelLineKind parse(std::string_view line, KernelRecord& rec);
  const std::string& why() const { return why_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string why_;
};

// The kernel records of a JSON-lines text; file names it in errors.
KernelInventory parse_kernel_lines(std::string_view text, const std::string& file);

// ---------------------------------------------------------------- files
// Reads a file of either format (SQLite by its first 16 bytes). UsageError
// when it cannot be read; InputError for bad content.
KernelInventory load_kernels(const std::filesystem::path& file);
// An Nsight Systems SQLite export.
KernelInventory load_nsys_sqlite(const std::filesystem::path& file);

}  // namespace tokenscope::rundir
