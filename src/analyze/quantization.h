// Check item 11, quantisation drift (../shared/design/CHECKLIST.md,
// docs/check.md): a cheaper model format that lost accuracy changes the
// distribution of what the model computes. Two kinds of histograms show it:
//
//  * output-token logprobs (bench --logprobs: requests.jsonl `logprobs`,
//    core/logprob.h), all counted requests of a run pooled;
//  * activation histograms per layer or tensor (activations.jsonl in the run
//    directory, or check --activations BASE_FILE,CAND_FILE), as a
//    calibration tool writes them.
//
// Per histogram the candidate's divergence from the base, D(base || cand)
// in bits with additive smoothing (statistics.h kl_divergence_bits, pseudo
// count 0.5 per bin: the base, the calibration run, is the reference
// distribution, as in TensorRT's entropy calibration), is held against an
// adaptive threshold: max(quantization.kl_threshold, 3 x the base's own
// split-half KL). The split-half KL is the divergence between two halves of
// the base drawn at random with a fixed seed: its requests (split_half() of
// run_data.h) for logprobs; its samples for activations, each bin's count
// split binomially (split_counts()). It is what sampling alone gives on data
// of this size, so the threshold rises for small or noisy runs and a
// regression is only called beyond three times that noise.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "analyze/checklist.h"
#include "core/logprob.h"

namespace tokenscope::analyze {

// ------------------------------------------------------- activations.jsonl
// One histogram per line (blank lines are passed over):
//   {"name": "layers.0.mlp.down_proj", "bins": [e0, e1, ..., eK],
//    "counts": [c1, ..., cK]}
// name: a non-empty string, unique in the file; bins: the K + 1 edges, finite
// and strictly increasing (bin k holds values in [e(k-1), e(k))); counts: K
// non-negative integers (at most 2^53) adding up to at least 1. Other keys are
// passed over. At most kMaxActivationBins bins.
struct ActivationHistogram {
  std::string name;
  std::vector<double> edges;
  std::vector<double> counts;  // integers, as doubles (exact below 2^53)
  std::size_t line = 0;        // its line in the file
};
inline constexpr std::size_t kMaxActivationBins = std::size_t{1} << 20;

// Parses the text of an activations file; file names it in errors. Throws
// InputError naming the file, the line and the field ("bins", "counts[3]", ...)
// for anything else, and for a file that holds no histogram.
std::vector<ActivationHistogram> parse_activations(std::string_view text, const std::string& file);
// Reads and parses a file (UsageError when it cannot be read).
std::vector<ActivationHistogram> load_activations(const std::filesystem::path& file);

// ------------------------------------------------------------- statistics
// The factor on the base's split-half KL in the adaptive threshold.
inline constexpr double kSplitHalfFactor = 3.0;
// The pseudo count added to every bin before a KL divergence.
inline constexpr double kKlPseudoCount = 0.5;

// max(floor_bits, kSplitHalfFactor x split_half_kl_bits).
double adaptive_kl_threshold(double floor_bits, double split_half_kl_bits);

// A histogram's samples split in two halves at random: each bin's count c
// into Binomial(c, 1/2) and the rest, which is how c samples fall when each
// goes to either half with probability 1/2. Exact (a coin per sample, 64 to
// a random word) for c <= 2^16; above, the normal approximation
// round(c/2 + sqrt(c)/2 Z), clamped to [0, c]. Deterministic in the seed
// (core/random.h). Counts must be non-negative integers (UsageError).
std::array<std::vector<double>, 2> split_counts(std::span<const double> counts, std::uint64_t seed);

// A logprob histogram's counts, bin 0 (the highest logprobs) first.
std::vector<double> logprob_counts(const LogprobHistogram& h);

// The latency-accuracy point of a run: the median TPOT of its counted
// requests and the mean of their per-request mean logprobs.
struct ParetoPoint {
  double tpot_p50_ms = std::numeric_limits<double>::quiet_NaN();
  double mean_logprob = std::numeric_limits<double>::quiet_NaN();
};
// How the candidate's point stands against the base's: "dominated" when it
// is both slower (higher TPOT) and less accurate (lower mean logprob),
// "dominates" when both faster and more accurate, "equal" when both are the
// same, "trade-off" otherwise, "unknown" when a coordinate is missing.
std::string_view pareto_relation(const ParetoPoint& base, const ParetoPoint& cand);

// ------------------------------------------------------------------ item
// Item 11 on the pair (base non-null): a finding per histogram (the
// logprobs', and each activation tensor present in both runs with the same
// bins), regressed when its KL exceeds its threshold, pass otherwise. no-data
// when neither run has logprobs or activations, or only one run has them.
// Activation files: extra.activations_base / _cand, else activations.jsonl in
// each run directory when there is one (InputError when one is malformed).
ItemResult quantization_item(const RunData& base, const RunData& cand, const Thresholds& t,
                             const ExtraInputs& extra);

}  // namespace tokenscope::analyze
