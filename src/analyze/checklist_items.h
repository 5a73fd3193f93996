// The checklist's items as the registry in checklist.cpp runs them: one
// function per item, in files by group (checklist_latency.cpp,
// checklist_lifecycle.cpp, checklist_server.cpp, checklist_kernels.cpp),
// and the helpers more than one group uses. Internal to analyze.
#pragma once

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

// The items (the number is the checklist's).
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
