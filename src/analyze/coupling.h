// Coupling of a mix's task classes (checklist item 3; docs/metrics.md
// "Coupling"): per class, its latency in the mix over its latency alone —
// the class's requests run by themselves at their own arrival times
// (bench --coupling) — per metric (TTFT, TPOT, E2E) and quantile (p50,
// p99): kappa = Q_q(mix) / Q_q(alone), 1 when the other classes cost it
// nothing, with a percentile-bootstrap interval (both samples resampled).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/record_sink.h"
#include "workload/workload.h"

namespace tokenscope::analyze {

struct CouplingRatio {
  double mix = 0, alone = 0;  // the quantiles (nearest rank)
  double kappa = 0;           // mix / alone
  double ci_low = 0, ci_high = 0;
  std::size_t n_mix = 0, n_alone = 0;
};

// Fewer values than this in either sample: no ratio.
inline constexpr std::size_t kCouplingMinSample = 5;

// The ratio of the q-quantiles of two samples of positive values, with the
// `confidence` interval of `resamples` bootstrap resamples (seeded: the
// same samples give the same interval). nullopt: too few values, or an
// alone quantile of 0.
std::optional<CouplingRatio> quantile_ratio(std::vector<double> mix, std::vector<double> alone, double q,
                                            double confidence, std::uint64_t seed, int resamples = 1000);

// A run's completed, non-warm-up requests by task class: TTFT, TPOT (two or
// more output tokens) and E2E in milliseconds from the send. Reads
// requests.jsonl (bad lines skipped).
struct ClassLatencies {
  std::vector<double> ttft_ms, tpot_ms, e2e_ms;
};
std::map<std::string, ClassLatencies> class_latencies(const std::filesystem::path& requests_jsonl);
// The same from one record (added to its class; others passed over).
void add_latencies(const RequestRecord& r, std::map<std::string, ClassLatencies>& out);

// A record sink that keeps each record's latencies by class and hands the
// record on (sim --coupling: the runs' latencies without reading them back).
class LatencyTap final : public RecordSink {
 public:
  explicit LatencyTap(RecordSink& next) : next_(next) {}
  void add_request(const RequestRecord& r) override {
    add_latencies(r, latencies);
    next_.add_request(r);
  }
  void add_step(const StepRecord& s) override { next_.add_step(s); }
  std::map<std::string, ClassLatencies> latencies;

 private:
  RecordSink& next_;
};

// The task classes a workload's requests use, in the workload's order.
std::vector<std::string> classes_in_use(const workload::Workload& w);
// Where a class's run alone goes, relative to the mix's directory:
// "coupling/NAME" with every byte but [A-Za-z0-9_-] replaced by '_'.
std::string coupling_run_dir(const std::string& task_class);
// The same for every class of a mix, made distinct ("-2", "-3", ... after a
// name another class already took).
std::vector<std::string> coupling_run_dirs(const std::vector<std::string>& classes);

// run.json's "coupling": {"method": "alone", "confidence", "classes": {CLASS:
// {"ttft_ms" | "tpot_ms" | "e2e_ms": {"p50" | "p99": {"kappa", "ci": [lo, hi],
// "mix", "alone", "n_mix", "n_alone"} or null}}}, "alone_runs": {CLASS: dir}}
// (sim adds "design": the design's kappa terms per class, engine::CouplingTerms).
nlohmann::json coupling_json(const std::map<std::string, ClassLatencies>& mix,
                             const std::map<std::string, ClassLatencies>& alone,
                             const std::map<std::string, std::string>& alone_runs, double confidence = 0.95);

}  // namespace tokenscope::analyze
