// The regression checklist (../shared/design/CHECKLIST.md, docs/check.md):
// twelve items, each reading what bench, sim and observe wrote in the run
// directories (analyze/run_data.h), each giving a verdict with the
// statistic, its interval and the threshold behind it.
//
// `check BASE CAND` compares two runs: every item. `check RUN` judges one
// run's health: the items that make sense alone (lifecycle, tail, batching,
// contention, locality, SLO); there "regressed" means the run fails the
// item's health threshold.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyze/attribution.h"
#include "analyze/run_data.h"
#include "analyze/thresholds.h"
#include "analyze/verdict.h"

namespace tokenscope::analyze {

// One statistic behind an item's verdict: a metric's change (or, for one
// run, its value) with the interval, the threshold it was held against and
// its own verdict.
struct Finding {
  std::string metric;            // "p99 TTFT", "kappa chat/long", ...
  std::string unit;              // "ms", "%", "ratio", "bits", ...
  std::optional<double> base;    // the base run's value (nullopt: one run, or none)
  std::optional<double> value;   // the candidate's (or the run's) value
  std::optional<double> change;  // the statistic the verdict is taken on (candidate - base, relative, ...)
  std::optional<double> ci_low, ci_high;
  std::string change_unit;  // the statistic's unit ("%" for relative changes)
  std::string threshold;    // the rule it was held against, in words ("tolerance 10%")
  Verdict verdict = Verdict::kNoData;
  // When inconclusive: about how many more requests per run would decide
  // (early stopping, statistics.h); nullopt when not estimable.
  std::optional<std::uint64_t> more_requests;
  std::string note;
  // In the family of the check (family_control): the one-sided p-value of
  // the change in the direction it moved, from its interval; nullopt for a
  // finding outside the family (no interval, or a rule rather than the
  // tolerance band).
  std::optional<double> p_value;
};

struct ItemResult {
  int number = 0;
  std::string id;     // "tail", "slo", ...
  std::string title;  // "tail shift"
  Verdict verdict = Verdict::kNoData;
  std::string summary;  // one sentence: what was found, or why no data
  std::vector<Finding> findings;
  // The decisive finding (the one the verdict comes from), an index into
  // findings; nullopt when there is none.
  std::optional<std::size_t> decisive;
  nlohmann::json evidence = nlohmann::json::object();  // numbers and the chart's data
  double elapsed_ms = 0;                               // how long the item took
};

// Inputs beyond the run directories (CHECKLIST.md items 8, 9 and 11).
struct ExtraInputs {
  // nccl-tests output or `probe collectives` JSON of the base and candidate.
  std::string collectives_base, collectives_cand;
  // Activation histograms (analyze/quantization.h) of the base and the
  // candidate; "": the run directory's activations.jsonl, when it has one.
  std::string activations_base, activations_cand;
  // CUPTI kernel records (rundir/kernels.h: the probe's JSON lines or an
  // Nsight Systems SQLite export) of the base and the candidate; "": the
  // CUPTI lines of each run's samples.jsonl, when both have them.
  std::string kernels_base, kernels_cand;
  // Repeats (bench/sim --repeat: rundir/run_set.h): each repeat's run.json
  // summary. With two or more on both sides the headline takes the run as
  // its unit (docs/check.md "Repeats"); the items read the runs given.
  std::vector<nlohmann::json> base_repeats, cand_repeats;
};

// A difference between the two runs' environments (docs/check.md
// "Environment"): what, each run's value as text, why it matters.
struct EnvironmentDifference {
  std::string what;
  std::string base, candidate;
  std::string note;
};
// What differed between the runs' environments: the clock (sim against a
// measured run), tokenscope's version, the host (name, CPUs, kernel, clock
// source: bench's run.json settings.effective.host), the server as it
// described itself (engine, version, batch cap, context length), the model,
// host CPU pressure and steal (a significant change beyond the tolerance),
// and other processes' CPU (more than half a core apart). A setting only one
// run recorded is not compared.
std::vector<EnvironmentDifference> compare_environments(const RunData& base, const RunData& cand,
                                                        const Thresholds& t);

struct CheckResult {
  bool single = false;  // one run
  std::string base_name, cand_name;
  Verdict overall = Verdict::kNoData;
  std::vector<ItemResult> items;
  Thresholds thresholds;
  std::size_t family_size = 0;  // findings in the family-wise error control (family_control)
  // Two runs: what differed between their environments, judged first; not empty: "environment differs".
  std::vector<EnvironmentDifference> environment;
  // Lifecycle phases found per run (phases.json of each run directory):
  // [{"phase", "start_ns", "end_ns"}].
  nlohmann::json base_phases = nlohmann::json::array(), cand_phases = nlohmann::json::array();
  // What moves ITL and throughput within each run (attribution.h); nullopt
  // when the run has neither steps nor server samples.
  std::optional<Attribution> base_attribution, cand_attribution;
  double attribution_ms = 0;
};

// Family-wise error control over the findings of a check (docs/check.md
// "Many findings, one gate"): the family is every finding judged by the
// tolerance band on an interval (its threshold reads "tolerance ..."), m of
// them. Each gets the one-sided p-value of its change in the direction it
// moved, p = 1 - Phi(|change| z / h), z the normal quantile of the
// interval's confidence and h the interval's half on the side of zero (a
// Student's t or asymmetric interval gives a larger p than its own: the
// approximation errs towards keeping a pass). The regressed ones, in
// ascending p, keep their verdict while p <= alpha / (m - j) (Holm 1979, j
// counted from 0 over the whole family; the findings that did not regress
// are taken to come after them, which only makes the bounds smaller); from
// the first that fails on, each becomes inconclusive with a note. The
// probability that any finding of the family regresses when nothing
// changed is then at most alpha, whatever their dependence. alpha <= 0:
// nothing is changed. Returns m.
std::size_t family_control(std::vector<ItemResult>& items, double alpha, double confidence);

// Runs every item on the pair (base may be null for one run).
CheckResult run_checklist(const RunData* base, const RunData& cand, const Thresholds& thresholds,
                          const ExtraInputs& extra = {});

// check.json (docs/check.md "check.json").
nlohmann::json to_json(const CheckResult& r);

// The items, for the table and docs: number, id, title; and whether each
// runs on a single run.
struct ItemInfo {
  int number;
  const char* id;
  const char* title;
  bool single_run;
};
const std::vector<ItemInfo>& checklist_items();

}  // namespace tokenscope::analyze
