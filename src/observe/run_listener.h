// What a run writes into its directory, handed — as it is written — to
// whoever builds more from it in memory: the run cache
// (rundir::run_cache_writer(), docs/architecture.md "A run's data path").
// bench and sim call it in the order of each file's lines; a listener is
// called from one thread at a time for each file, but requests, samples and
// steps may come from different threads at once.
#pragma once

#include <filesystem>

#include "core/record.h"
#include "core/step_record.h"
#include "observe/observation.h"

namespace tokenscope::observe {

class RunListener {
 public:
  virtual ~RunListener() = default;
  virtual void add_request(const RequestRecord& r) = 0;    // a line of requests.jsonl
  virtual void add_observation(const Observation& o) = 0;  // a line of samples.jsonl
  virtual void add_step(const StepRecord& s) = 0;          // a line of steps.jsonl
  // The run reached its end and its files are whole and closed (never
  // called for an interrupted run or one whose files could not be written).
  virtual void finish(const std::filesystem::path& dir) = 0;
};

}  // namespace tokenscope::observe
