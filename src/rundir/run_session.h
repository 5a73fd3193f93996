// One run from its start to its end, the one path a run's data takes
// (docs/architecture.md "A run's data path"): bench and sim open a session,
// append what the run makes, and finish it.
//
//   open    RunSession(dir, ...) claims nothing (the caller has claimed the
//           directory: claim_run_directory); start() writes run.json as it
//           stands at the start ("partial": true), for a run whose settings
//           must survive whatever ends it (bench).
//   append  add_request / add_step / add_observation: a line of its file,
//           the same record to the run cache (its listener) and, for a
//           request, to the summary. observed(): an observation another
//           writer put in samples.jsonl (bench's collectors write their own,
//           line by line durable), for the run cache only.
//   finish  finish(run, reached_end): the files flushed, run.json written,
//           then the finishers that add to run.json (exports), run.json
//           rewritten if they did, then — for a run that reached its end —
//           the run cache (its key is run.json's size and time, so it comes
//           after the last write of run.json), then the finishers that read
//           the finished run (the report page, the history). A finisher
//           that fails without throwing tells it itself (the exports:
//           run.json's "exports"); one that throws ends finish() there (the
//           later finishers and the cache are skipped; the run's files and
//           run.json stand).
//
// Without a directory (sim's summary only) a session only sums the requests
// up: nothing is written and finish() does nothing.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/record_sink.h"
#include "core/run_dir.h"
#include "core/summary.h"
#include "observe/observation.h"
#include "observe/run_listener.h"

namespace tokenscope::rundir {

// What a finisher is handed: the finished run.
struct FinishedRun {
  const std::filesystem::path& dir;
  nlohmann::json& run;  // run.json as written
  bool reached_end;     // false: interrupted, or its files could not be written whole
  std::ostream& log;
  // Set by a finisher that added to `run`: run.json is written again
  // before the run cache (kAddsToRunJson finishers only).
  bool run_json_changed = false;
};

enum class FinisherKind {
  kAddsToRunJson,     // before the run cache: exports, compatibility files
  kReadsFinishedRun,  // after it: the report page, the history
};

using Finisher = std::function<void(FinishedRun&)>;

class RunSession final : public RecordSink {
 public:
  struct Options {
    std::filesystem::path dir;  // empty: no files (the summary only)
    // Write each request line through at once; false when the run appends
    // in batches and calls flush_requests() after each (bench).
    bool requests_line_durable = true;
    // The run cache (rundir::run_cache_writer()), fed every line as it is
    // written and finished at the end of a run that reached it; null: none.
    std::unique_ptr<observe::RunListener> cache;
  };
  explicit RunSession(Options options);
  ~RunSession() override;
  RunSession(const RunSession&) = delete;
  RunSession& operator=(const RunSession&) = delete;

  bool has_dir() const { return files_ != nullptr; }
  const std::filesystem::path& dir() const { return dir_; }
  SummaryBuilder& summary() { return summary_; }
  const SummaryBuilder& summary() const { return summary_; }

  // run.json at the start (the caller's "partial": true head, rundir/run_json.h).
  void start(const nlohmann::json& run);
  // requests.jsonl opened now (before a client's connections take the descriptors).
  void open_requests();
  // samples.jsonl created now (sim: the file is there from the start).
  void open_samples();

  void add_request(const RequestRecord& r) override;
  void add_step(const StepRecord& s) override;
  void add_observation(const observe::Observation& o);
  void observed(const observe::Observation& o);
  // The request lines appended so far, written (runs that append in batches).
  void flush_requests();

  void add_finisher(FinisherKind kind, Finisher finisher);

  // The end of the run (above). Throws IoError when run.json or the files
  // cannot be written (the lines already written stay).
  void finish(nlohmann::json& run, bool reached_end, std::ostream& log);
  // A run whose files could not be written (a full disk): run.json with
  // what the run has, if it still fits; no finisher, no cache. Never throws.
  void abandon(const nlohmann::json& run) noexcept;

 private:
  std::filesystem::path dir_;
  std::unique_ptr<RunDirectory> files_;
  std::unique_ptr<observe::RunListener> cache_;
  SummaryBuilder summary_;
  std::vector<Finisher> adds_, reads_;
};

}  // namespace tokenscope::rundir
