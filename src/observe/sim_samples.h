// `tokenscope sim` writes the canonical server series into samples.jsonl
// as a scrape of its /metrics would give them, on virtual time: every
// interval of simulated time, the state after the last step before that
// moment (gauges) and the totals so far (counters, histograms). A report then
// reads a simulated and a real run alike. The sampler sits between the
// engine and the recording observer and forwards every event to it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/run_dir.h"
#include "engine/engine.h"
#include "observe/derived.h"
#include "observe/observation.h"

namespace tokenscope::observe {

class SimSampler final : public engine::EngineObserver {
 public:
  // inner: the observer the engine's events go on to. out: samples.jsonl
  // (nullptr: nothing written, the totals are still kept).
  SimSampler(engine::EngineObserver& inner, JsonlWriter* out, Nanos interval_ns);

  void on_first_scheduled(std::uint64_t id, Nanos t, std::uint32_t cached_tokens) override;
  void on_token(std::uint64_t id, Nanos t, workload::TokenId token) override;
  void on_finish(const engine::FinishedRequest& r) override;
  void on_reject(std::uint64_t id, Nanos t, std::string_view reason) override;
  void on_step(const engine::StepStats& s) override;

  // The engine whose counters the samples carry (the engine is made with
  // this sampler as its observer, so it is attached after). Until attached,
  // counters are summed from the steps.
  void attach(const engine::Engine* e);
  // Writes the sample at end_ns (the end of the simulation), if later than the last one.
  void finish(Nanos end_ns);
  std::uint64_t observations() const { return observations_; }
  const SeriesTracker& tracker() const { return tracker_; }

 private:
  struct Histogram {
    std::vector<double> bounds;
    std::vector<std::uint64_t> counts;  // per bucket (not cumulative), +Inf last
    double sum = 0;
    void add(double v);
    void append(std::vector<Sample>& out, const std::string& name) const;
  };
  void emit(Nanos t);
  void snapshot();  // the engine's counters after the last step

  engine::EngineObserver& inner_;
  const engine::Engine* engine_ = nullptr;
  JsonlWriter* out_;
  Nanos interval_ns_;
  Nanos next_ns_;
  Nanos last_emit_ns_ = -1;
  // The state after the last step, and totals.
  double running_ = 0, waiting_ = 0, kv_usage_ = 0;
  std::uint64_t prefix_queries_ = 0, prefix_hits_ = 0, preemptions_ = 0, prompt_tokens_ = 0,
                generation_tokens_ = 0, finished_ = 0;
  Histogram iteration_tokens_, ttft_, e2e_, queue_;
  SeriesTracker tracker_;
  std::uint64_t observations_ = 0;
  std::string line_;
};

}  // namespace tokenscope::observe
