// `tokenscope sim`: replays a workload through the engine in virtual time.
// Requests enter the engine at the first step boundary at or after their
// arrival; when the engine is idle, time jumps to the next arrival. Every
// finished request is written to requests.jsonl as it finishes (its per-token
// times are held only while it is in flight), every step to steps.jsonl.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/record.h"
#include "core/record_sink.h"
#include "core/step_record.h"
#include "engine/engine.h"
#include "workload/workload.h"

namespace tokenscope::engine {

// Collects the engine's events into request records and engine steps and
// hands them to the run's sink (rundir::RunSession: the run directory, the
// run cache, the summary). steps: whether steps are made and handed on.
class RecordingObserver final : public EngineObserver {
 public:
  RecordingObserver(const workload::Workload& w, RecordSink& sink, bool steps);

  void on_first_scheduled(std::uint64_t id, Nanos t, std::uint32_t cached_tokens) override;
  void on_token(std::uint64_t id, Nanos t, tokenizers::TokenId token) override;
  void on_finish(const FinishedRequest& r) override;
  void on_reject(std::uint64_t id, Nanos t, std::string_view reason) override;
  void on_step(const StepStats& s) override;

  // steps.jsonl gets each step's perturbation_ns and stolen_ns (runs with perturbations).
  void write_perturbations(bool on) { write_perturbations_ = on; }
  // A fleet's records carry the replica each request went to (engine/fleet.h).
  void set_replica_of(std::function<int(std::uint64_t)> f) { replica_of_ = std::move(f); }

 private:
  std::vector<Nanos>* times_of(std::uint64_t id, bool create);
  void release_slot(std::uint64_t id);
  void emit(RequestRecord& r);

  const workload::Workload& workload_;
  std::vector<std::uint32_t> index_of_id_;  // request id -> position in workload
  RecordSink& sink_;
  bool write_steps_;
  bool write_perturbations_ = false;
  std::function<int(std::uint64_t)> replica_of_;
  // Token times of requests in flight, in reusable slots (their buffers keep
  // their capacity): 4 bytes per request for the slot index, and memory for
  // the requests in flight only.
  std::vector<std::uint32_t> slot_of_;  // per workload position: slot + 1, 0 = none
  std::vector<std::vector<Nanos>> slots_;
  std::vector<std::uint32_t> free_slots_;
};

struct SimReport {
  std::uint64_t requests_submitted = 0;
  Nanos virtual_end_ns = 0;
  bool interrupted = false;
  EngineCounters counters;
};

// Runs the whole workload (or until *stop becomes true). A request tail of
// the engine's perturbations holds a request before it enters the queue
// (keyed by its id); it keeps its arrival time.
SimReport run_simulation(const workload::Workload& w, Engine& engine,
                         const std::atomic<bool>* stop = nullptr);

// The summary's engine-side counters from the engine's.
ServerCounters server_counters(const EngineCounters& c);

}  // namespace tokenscope::engine
