// Where a run's records go as they are made (docs/architecture.md "A run's
// data path"): the request records and the engine's steps. The run
// session (rundir/run_session.h) is the one a run writes through: it writes
// each record's line into the run directory, hands it to the run cache and
// adds it to the summary. Lower layers that make records (the simulator's
// recording observer) take this interface, not the session itself.
#pragma once

#include "core/record.h"
#include "core/step_record.h"
#include "core/summary.h"

namespace tokenscope {

class RecordSink {
 public:
  virtual ~RecordSink() = default;
  virtual void add_request(const RequestRecord& r) = 0;  // a request that finished (or failed)
  virtual void add_step(const StepRecord& s) = 0;        // an engine step (sim)
};

// A sink that only sums the requests up: the summary of a run that writes
// no files (the engine's own tests).
class SummarySink final : public RecordSink {
 public:
  void add_request(const RequestRecord& r) override { summary.add(r); }
  void add_step(const StepRecord&) override {}
  SummaryBuilder summary;
};

}  // namespace tokenscope
