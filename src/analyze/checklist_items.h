// The checklist's items as the registry in checklist.cpp runs them: one
// function per item, in files by group (checklist_latency.cpp,
// checklist_lifecycle.cpp, checklist_server.cpp, checklist_kernels.cpp),
// and the helpers more than one group uses. Internal to analyze.
#pragma once

#include "analyze/hidden_queue.h"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyze/checklist.h"
#include "analyze/checklist_util.h"

namespace tokenscope::analyze::detail {

// Two samples an item compares: the base and the candidate, or for one run
// its first and second half (by send time).
struct Pair {
  const RunData* base = nullptr;  // null: one run
  const RunData& cand;
  const Thresholds& t;
  bool single() const { return base == nullptr; }
};

template <class F>
auto halves(const RunData& run, F&& sample) {
  const Nanos mid = send_midpoint(run);
  return std::make_pair(sample(INT64_MIN, mid), sample(mid, INT64_MAX));
}

// Why the runs that lack a series lack it, as bench recorded for its source
// (source_missing): " (gpu of both runs: REASON)", " (base's gpu: REASON;
// candidate's gpu: REASON)", or "" when no run says.
std::string missing_reasons(const Pair& p, std::string_view source, bool base_lacks, bool cand_lacks);

// Sampled series compared in blocks of about 10 points (roughly independent).
std::vector<double> blocked(const Series& s);
Finding block_shift_finding(const std::string& metric, const std::string& unit, const std::vector<double>& b,
                            const std::vector<double>& c, double tolerance, Worse worse, double confidence);
// A finding on blocks of a sampled series: when there were too few blocks,
// its note says what gives more.
Finding sampled(Finding f, std::size_t block);
// A pair of blocked series: the base's and the candidate's, or the run's halves.
std::pair<std::vector<double>, std::vector<double>> blocked_pair(const Pair& p, const Series& b,
                                                                 const Series& c);

// ---- SLOs (item 2, the headline's goodput)
// The SLOs of a run: the thresholds file's, else those the run was measured with.
std::map<std::string, Slo> slos_of(const RunData& run, const Thresholds& t);
// A class's requests against its SLO: those that met every target, of all
// (failures miss every target); per metric the values (failed: +inf); the
// indexes of the requests that met it.
struct SloCounts {
  std::uint64_t requests = 0, met = 0;
  std::map<std::string, std::vector<double>> values;
  std::vector<std::size_t> met_index;
};
SloCounts slo_counts(const RunData& run, const std::string& cls, const Slo& slo);
// Per request of the run: 1 when it met every target of its class's SLO.
std::vector<std::uint8_t> slo_met(const RunData& run, const std::map<std::string, Slo>& slos);

// ---- agentic tasks (tasks.jsonl; docs/tasks.md)
// A run's tasks of a class ("": every class) that started in [t0, t1),
// warm-up ones left out: the ok ones' completion times (and start times),
// and the counts.
struct TaskSample {
  std::vector<double> ok_ms;
  std::vector<Nanos> ok_start;
  std::uint64_t ok = 0, failed = 0;
};
TaskSample task_sample(const RunData& run, const std::string& cls, Nanos t0 = INT64_MIN,
                       Nanos t1 = INT64_MAX);

// The q-quantile of ITL over every token gap of two runs (the summary's
// itl_ms), its relative change with an interval by sectioning over
// stretches of each run (RequestArrays::itl_chunks); no-data with fewer than
// 5 stretches (checklist_headline.cpp).
Finding itl_row(const RunData& base, const RunData& cand, double q, double tolerance, double confidence);

// The hidden queue of a run (item 10, the report): at each sample of the
// server's running gauge, the client's requests in flight (sent, not yet
// closed) less the server's running and waiting requests, at least 0 —
// requests the server holds where no gauge sees them (llama-server's HTTP
// queue). Over the samples within the run: the mean and the largest.
HiddenQueue hidden_queue(const RunData& run);

// The items (the number is the checklist's; 0 is the headline comparison).
ItemResult item_headline(const Pair& p);  // 0
// The headline with the run as the unit: each repeat's summary value.
ItemResult item_headline_repeats(const Pair& p, const std::vector<nlohmann::json>& base,
                                 const std::vector<nlohmann::json>& cand);
ItemResult item_latency_model(const Pair& p);                                                        // 1
ItemResult item_slo(const Pair& p);                                                                  // 2
ItemResult item_coupling(const Pair& p);                                                             // 3
ItemResult item_tail(const Pair& p);                                                                 // 4
ItemResult item_lifecycle(const Pair& p, nlohmann::json& base_phases, nlohmann::json& cand_phases);  // 5
ItemResult item_gpu(const Pair& p);                                                                  // 6
ItemResult item_locality(const Pair& p);                                                             // 7
ItemResult item_collectives(const Pair& p, const ExtraInputs& extra);                                // 8
ItemResult item_recompile(const Pair& p, const ExtraInputs& extra);                                  // 9
ItemResult item_batching(const Pair& p);                                                             // 10
ItemResult item_contention(const Pair& p);                                                           // 12

}  // namespace tokenscope::analyze::detail
