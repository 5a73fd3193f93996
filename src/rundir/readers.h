// rundir: reading a run directory (docs/architecture.md "The run-directory
// contract"): the fields of run.json every reader needs, requests.jsonl and
// samples.jsonl line by line in bounded memory (core/text_reader.h), whole
// or in byte ranges, and tasks.jsonl (docs/tasks.md) line by line. The exporters (exporters/), the checklist
// and the report (analyze/, report/) read runs through it.
//
// A run can hold millions of requests: nothing here keeps more than one line
// of a file. Bad lines follow BadLines: kFail stops with an InputError naming
// the file, the line, the field and what was expected; kSkip counts them and
// keeps the first message (ReadStats), so that a run whose last line was cut
// by a crash can still be exported.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/record.h"
#include "core/text_reader.h"
#include "observe/observation.h"

namespace tokenscope::rundir {

// run.json is written by tokenscope and small; a larger one is not a run.json.
inline constexpr std::uint64_t kMaxRunJsonBytes = 64u << 20;

using observe::Observation;

// The run's wall-clock anchor: CLOCK_MONOTONIC and the Unix time (CLOCK_REALTIME)
// read at the same instant at run start, in run.json as
//   "clock": {"monotonic_ns": 123456789, "unix_ns": 1767225600000000000}
// It maps every monotonic time of the run to Unix time for OTLP:
// unix = unix_ns + (t - monotonic_ns).
struct ClockAnchor {
  Nanos monotonic_ns = 0;
  std::int64_t unix_ns = 0;
  // The Unix time of monotonic time t, saturated to [0, INT64_MAX].
  std::int64_t to_unix(Nanos t) const;
};

// What the exporters read from run.json (the rest of it is the report's).
struct RunInfo {
  std::optional<ClockAnchor> clock;
  std::string command;     // "bench", "sim", ... ("" when absent)
  std::string version;     // tokenscope's version that wrote the run
  std::string model;       // the model served ("" when run.json names none)
  std::string api;         // "chat" or "completions" ("" for sim)
  std::string target_url;  // the server's URL ("" when in-process or absent)
};

// Parses run.json's text; file names it in errors. Throws InputError when it
// is not a JSON object or a field the exporters read has the wrong type.
RunInfo parse_run_info(std::string_view text, const std::string& file);

// j[k1][k2]..., or nullptr when a step is not an object or lacks the key.
const nlohmann::json* json_path(const nlohmann::json& j, std::initializer_list<const char*> keys);
// dir/run.json; a run directory without one gives an empty RunInfo.
RunInfo read_run_info(const std::filesystem::path& dir);

enum class BadLines : std::uint8_t { kFail, kSkip };

struct ReadStats {
  std::uint64_t lines = 0;    // lines read, blank ones included
  std::uint64_t records = 0;  // lines returned
  std::uint64_t skipped = 0;  // bad lines skipped (BadLines::kSkip)
  std::string first_skipped;  // the message of the first one
  // What that message is made of (InputError), for a read in byte ranges to
  // number the line in the whole file (join_range_stats).
  std::uint64_t first_skipped_line = 0;
  std::string first_skipped_field;
  std::string first_skipped_problem;
};

// The stats of a file read in byte ranges, from those of its ranges in file
// order: the counts added up, and the first bad line's message numbered in
// the file (each range numbers its lines from its own first one). file names
// the file in that message.
ReadStats join_range_stats(const std::vector<ReadStats>& ranges, const std::string& file);

// A bad line: the field (empty when the line is not an object at all) and
// what was wrong. RequestsReader and SamplesReader turn it into an InputError.
class LineError : public std::runtime_error {
 public:
  LineError(std::string field, const std::string& problem)
      : std::runtime_error(problem), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// Parses requests.jsonl lines (simdjson; the parser and its buffer are
// reused from line to line). Throws LineError.
class RequestLineParser {
 public:
  RequestLineParser();
  ~RequestLineParser();
  RequestLineParser(const RequestLineParser&) = delete;
  RequestLineParser& operator=(const RequestLineParser&) = delete;
  // Fills out (its vectors keep their capacity).
  void parse(std::string_view line, RequestRecord& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// requests.jsonl, one record at a time.
class RequestsReader {
 public:
  // Opens a file (UsageError when it cannot be opened).
  RequestsReader(const std::filesystem::path& file, BadLines bad_lines);
  // Reads text in memory (which must outlive the reader); file names it in errors.
  RequestsReader(std::string_view text, std::string file, BadLines bad_lines);
  // Reads the lines of a file that start in its bytes [begin, end): one of
  // the byte ranges of a read in parallel, each line in exactly one range
  // (a range not at 0 starts at begin - 1 and passes over the end of the
  // line before, through its '\n'; the range's last line is read to its end,
  // past `end`). Bad lines are skipped. Line numbers count from the range's
  // first line; stats().lines is how many lines the range holds, so that
  // join_range_stats() numbers them in the file.
  RequestsReader(const std::filesystem::path& file, std::uint64_t begin, std::uint64_t end);
  // The next record; false at the end. Blank lines are passed over.
  bool next(RequestRecord& out);
  std::uint64_t line_number() const { return reader_.line_number() - lines_before_; }
  std::uint64_t offset() const { return reader_.offset(); }  // bytes of the file read so far
  const ReadStats& stats() const { return stats_; }

 private:
  TextReader reader_;
  std::string file_;
  BadLines bad_lines_;
  RequestLineParser parser_;
  ReadStats stats_;
  std::uint64_t end_ = UINT64_MAX;  // lines starting here or after are not this reader's
  std::uint64_t lines_before_ = 0;  // the end of the line before a range, passed over
  bool ended_ = false;
};

// samples.jsonl, one Observation at a time (parse_observation_json). Lines
// that carry an error or "unavailable" instead of series are counted and
// passed over: they are not data points.
class SamplesReader {
 public:
  SamplesReader(const std::filesystem::path& file, BadLines bad_lines);
  SamplesReader(std::string_view text, std::string file, BadLines bad_lines);
  bool next(Observation& out);
  const ReadStats& stats() const { return stats_; }
  std::uint64_t without_series() const { return without_series_; }
  // Lines of another format kept in the same file (the CUPTI records of
  // `probe gpu-context`, rundir/kernels.h): a line that is not an
  // observation is offered to `take` before it counts as bad. true: taken
  // (neither a record nor a bad line); false: bad as it was; a LineError it
  // throws: bad, with its field and problem.
  void take_other_lines(std::function<bool(std::string_view line)> take) { take_ = std::move(take); }

 private:
  TextReader reader_;
  std::string file_;
  BadLines bad_lines_;
  ReadStats stats_;
  std::uint64_t without_series_ = 0;
  std::function<bool(std::string_view)> take_;
};

// ---------------------------------------------------------------- tasks

// One step of a task record (tasks.jsonl, written by bench/task_driver.cpp),
// the fields the exporters draw. Times are the run's monotonic ns, -1 when
// the step never got there (a skipped step has no t_start_ns).
struct TaskStepRecord {
  std::string id;
  std::string kind;     // model, tool or retrieval
  std::string name;     // the tool's name; "model" for model steps
  std::string outcome;  // ok, failed, skipped (running, waiting: a task cut short)
  std::string failure;  // the failure class of a failed step
  std::string detail;
  std::uint32_t attempts = 0;
  Nanos t_ready = -1, t_start = -1, t_end = -1;
  std::vector<std::string> retried;     // the classes of failed attempts that were retried
  std::vector<std::uint64_t> requests;  // model steps: their records' ids in requests.jsonl
  std::int64_t prompt_tokens = -1, cached_tokens = -1, output_tokens = -1;
  std::vector<std::string> documents;  // retrievals: the documents' ids
  std::vector<std::string> after;      // the steps it waited for (has_after: the record says)
  bool has_after = false;
  Nanos t_sent = -1, t_returned = -1;  // a tool call's last attempt: request sent, answer read
};

// Where a task's time went (docs/tasks.md "The critical path"), in ms; -1
// where the record has no such number.
struct TaskCriticalPath {
  std::vector<std::string> steps;
  double total_ms = -1, model_ms = -1, tool_ms = -1, client_ms = -1, queue_ms = -1;
};

// One line of tasks.jsonl. A record that contradicts itself is refused: a
// step that started without ending, a time below -1, an end before its
// start, a step outside its task's [t_start_ns, t_end_ns] (the task driver
// ends a task once its last step has ended, so every step nests in it, and
// the exporters draw it nested), two steps with one id.
struct TaskRecord {
  std::uint64_t id = 0;
  std::string task_class;
  std::string tenant;
  std::string mode;     // scripted or model-driven
  std::string outcome;  // ok, failed or cancelled
  std::string failure;  // the class that failed the task
  std::string failed_step;
  Nanos t_sched = -1, t_start = -1, t_end = -1;
  bool warmup = false;
  std::vector<TaskStepRecord> steps;
  std::optional<TaskCriticalPath> critical_path;
};

// The most steps one task record may hold: a model-driven task of bench's
// largest budget (1,000 model calls) with a few tool calls each.
inline constexpr std::size_t kMaxTaskRecordSteps = 16'384;

// Parses tasks.jsonl lines (simdjson, as RequestLineParser). Throws
// LineError naming the field, steps' fields as "steps[2].kind".
class TaskLineParser {
 public:
  TaskLineParser();
  ~TaskLineParser();
  TaskLineParser(const TaskLineParser&) = delete;
  TaskLineParser& operator=(const TaskLineParser&) = delete;
  TaskLineParser(TaskLineParser&&) noexcept;  // a TasksReader is handed out in a std::optional
  TaskLineParser& operator=(TaskLineParser&&) noexcept;
  void parse(std::string_view line, TaskRecord& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// tasks.jsonl, one record at a time; bad lines follow BadLines as in
// RequestsReader.
class TasksReader {
 public:
  TasksReader(const std::filesystem::path& file, BadLines bad_lines);
  TasksReader(std::string_view text, std::string file, BadLines bad_lines);
  bool next(TaskRecord& out);
  const ReadStats& stats() const { return stats_; }

 private:
  TextReader reader_;
  std::string file_;
  BadLines bad_lines_;
  TaskLineParser parser_;
  ReadStats stats_;
};

// Where the inputs of an export come from: a run directory, or text in
// memory (tests, fuzzing). A source can be opened more than once (the
// exporters read requests.jsonl twice: once for the time origin and the
// lanes, once to write).
struct RunSource {
  std::filesystem::path dir;  // used when the views below are not set
  std::optional<std::string_view> requests_text;
  std::optional<std::string_view> samples_text;  // nullopt with dir: dir/samples.jsonl if it exists
  bool no_samples = false;                       // in memory: there is no samples.jsonl
  // nullopt with dir: dir/tasks.jsonl if it exists; in memory: no tasks.
  std::optional<std::string_view> tasks_text;

  RequestsReader open_requests(BadLines bad_lines) const;
  // nullopt when the run has no samples.jsonl.
  std::optional<SamplesReader> open_samples(BadLines bad_lines) const;
  // nullopt when the run has no tasks.jsonl (a run without agentic tasks).
  std::optional<TasksReader> open_tasks(BadLines bad_lines) const;
  std::string requests_name() const;
  std::string samples_name() const;
  std::string tasks_name() const;
};

}  // namespace tokenscope::rundir
