// A server's profile (docs/profile.md): the step-cost coefficients and the
// scheduler limits of one deployment, fitted from the outside by `tokenscope
// profile` (analyze/profile_fit.h), read by `sim`, `serve` and in-process
// `bench` through --profile, where they replace the roofline model.
//
// The cost of a step is linear in the step's shape (StepShape):
//   step = step_overhead                       (a step that runs any token)
//        + prefill_token   · prefill tokens
//        + prefill_seq     · sequences in prefill
//        + decode_seq      · sequences decoding
//        + prefill_attention · sum(n·s + n(n+1)/2) over prefill chunks
//        + decode_context  · sum(c + 1) over decoding sequences
// with n a chunk's new tokens, s the tokens before it and c a decoding
// sequence's cached tokens. A server whose cost per decoding sequence is
// not linear (llama.cpp on a CPU: 1.3 ms a step at one sequence, 4.0 at two,
// 5.1 at four) has a decode curve instead: the first and fourth terms are 0
// and a step that runs any token costs curve(decoding sequences), linear
// between the curve's points, its first point's value below it, and beyond
// its last along its last segment (never falling). The file is YAML, versioned (`tokenscope_profile:
// 1`), with each coefficient's standard error, the server's identity, how
// each limit was found, the fit's quality and the ranges it measured.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cost_model.h"
#include "engine/engine.h"

namespace tokenscope::engine {

inline constexpr int kProfileVersion = 1;
inline constexpr std::size_t kProfileTerms = 6;

// One coefficient: its key in the file, the unit of its value there, that
// unit in seconds, and what it multiplies.
struct ProfileTerm {
  const char* key;
  const char* unit;
  double seconds_per_unit;
  const char* multiplies;
};
const std::array<ProfileTerm, kProfileTerms>& profile_terms();

// The features of a step, in the order of profile_terms().
std::array<double, kProfileTerms> step_features(const StepShape& s);

// A point of the decode curve: a step with `seqs` decoding sequences (and
// any prefill) costs `seconds` before its other terms.
struct CurvePoint {
  std::uint32_t seqs = 0;
  double seconds = 0.0;
  double stderr_ = 0.0;
  bool operator==(const CurvePoint&) const = default;
};
inline constexpr std::size_t kMaxCurvePoints = 256;

// The curve at d decoding sequences: linear between points, the first
// point's value below it, along the last segment beyond the last (its slope
// not below 0); one point is a constant.
double curve_seconds(const std::vector<CurvePoint>& curve, double d);

struct ProfileFitQuality {
  std::uint64_t observations = 0;  // steps the fit used
  std::uint64_t points = 0;        // distinct step shapes (each a median of its steps)
  double r2 = 0;                   // of the points' durations, weighted
  double rmse_ms = 0;              // weighted, over the points
  double mape = 0;                 // mean |predicted/measured − 1| over the points
  double p90_abs_rel_error = 0;    // over the points
};

// The ranges of the steps the profile measured; a run outside them is an
// extrapolation.
struct ProfileRanges {
  std::uint32_t max_prefill_tokens = 0;  // new tokens in one step
  std::uint32_t max_prompt_tokens = 0;   // one request's prompt
  std::uint32_t max_batch = 0;           // sequences in one step
  std::uint32_t max_context_tokens = 0;  // one sequence's context
};

struct Profile {
  int version = kProfileVersion;
  std::string created;    // UTC, ISO 8601
  nlohmann::json server;  // identity: url, model, engine, version, ... (strings and numbers)
  std::array<double, kProfileTerms> coef{};     // seconds per feature unit
  std::array<double, kProfileTerms> stderr_{};  // standard errors, alike
  // When not empty, prices a step and its decoding sequences in place of
  // coef[0] and coef[3] (both 0 then); points by increasing seqs.
  std::vector<CurvePoint> decode_curve;
  // The scheduler as found (nullopt: not found), and how each was found.
  std::optional<std::uint32_t> max_num_seqs;
  std::optional<std::uint32_t> max_num_batched_tokens;
  std::optional<std::uint64_t> kv_capacity_tokens;
  // What the attention terms are priced over (engine.h AttentionSpan): the
  // fit's features and the engine's agree.
  AttentionSpan attention = AttentionSpan::kOwnContext;
  std::map<std::string, std::string> found;
  ProfileFitQuality fit;
  ProfileRanges ranges;
  std::vector<std::string> notes;  // what the fit could not tell
};

// Parses a profile; file names it in errors (InputError: file, line, field,
// what was expected). Unknown keys, missing coefficients, negative values and
// a version this build does not read are errors.
Profile parse_profile(const std::string& text, const std::string& file);
// Reads a file (UsageError when it cannot be opened; InputError as above).
Profile read_profile(const std::filesystem::path& path);
// The YAML text of a profile, with a comment per coefficient.
std::string profile_yaml(const Profile& p);
nlohmann::json to_json(const Profile& p);

// The step costs of a profile. Host transfers and charged extra time are
// kept as the roofline model keeps them (host_link_gbps: the GPU's link).
class ProfileCostModel final : public CostModel {
 public:
  ProfileCostModel(const Profile& p, double host_link_gbps);
  StepCost step_cost(const StepShape& shape) const override;

 private:
  std::array<double, kProfileTerms> coef_;
  std::vector<CurvePoint> curve_;
  double host_link_bytes_per_s_;
};

}  // namespace tokenscope::engine
