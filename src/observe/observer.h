// Runs the collectors of a run: each on its own thread at its own interval
// (low priority, so that sampling never delays a send), one read at start
// (the baseline, all sources at once) and one at stop (the final counters,
// all at once), every Observation
// appended to samples.jsonl as it arrives (written through, so a crash
// loses nothing already sampled) after the per-window series are derived.
// Failures are logged once per source and counted; the run goes on.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/clock.h"
#include "observe/derived.h"
#include "observe/observation.h"

namespace tokenscope::observe {

struct CollectorOptions {
  Nanos interval_ns = kNanosPerSecond;
  // A default source that may not exist (the target's own /metrics): when
  // its first read fails it is dropped with one note instead of retried.
  bool optional = false;
  // Extra facts for run.json's entry of this source (the URL, the engine...).
  std::string description;
  // A default collector that cannot work here (no NVML) says so in run.json
  // only, not on the terminal.
  bool quiet_unavailable = false;
};

class Observer {
 public:
  // samples_path: samples.jsonl (created, or appended to). log: one line per
  // source that fails or is slow, once. clock: the run's monotonic clock.
  Observer(std::filesystem::path samples_path, const Clock& clock, std::ostream& log);
  ~Observer();
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  void add(std::unique_ptr<Collector> collector, CollectorOptions options);
  // Every observation, as it is written to samples.jsonl, is also given to
  // `listener` (under the writer's lock: one at a time, in file order).
  // Call before start().
  void set_listener(std::function<void(const Observation&)> listener);
  // The bound on samples.jsonl's growth (docs/reliability.md "Scrape
  // bounds"): a minute's worth at once, then `bytes` per hour. A line over it
  // is written without its raw series, or, still over, not at all; both are
  // counted in report()'s "samples_bound". 0: no bound. Call before start().
  void set_samples_bytes_per_hour(std::uint64_t bytes);
  // Starts a thread per collector, each reading its baseline at once, and
  // waits until every baseline read has ended or baseline_wait_ns passed.
  void start(Nanos baseline_wait_ns = 2 * kNanosPerSecond);
  // Stops the threads; each reads its collector once more first (the final
  // counters, all at once), unless final_read is false. Idempotent.
  void stop(bool final_read = true);

  // run.json "observe": {"samples_file", "sources": [{source, interval_s,
  // reads, errors, errors_by_reason, unavailable, overruns, rtt_ms {p50,max},
  // cpu_ms_per_read, cpu_share_of_core, clock_offset (when the server sent
  // timestamps)}], "write_error"}.
  nlohmann::json report() const;
  // The tracker of one source (nullptr when unknown); valid after stop().
  const SeriesTracker* tracker(std::string_view source) const;
  // Every source's name, in the order added.
  std::vector<std::string> sources() const;
  // Extra facts about a source (e.g. a ScrapeCollector's stats), merged
  // into its report entry; call after stop().
  void annotate(std::string_view source, const nlohmann::json& facts);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Median and spread of (t_recv - rtt/2 - t_server) over the observations of
// one source that carried a server time: how to map the server's clock onto
// the client's monotonic clock. Null when none carried one.
nlohmann::json clock_offset_json(const std::vector<double>& offsets_ns);

}  // namespace tokenscope::observe
