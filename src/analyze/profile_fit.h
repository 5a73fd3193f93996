// Fitting a server's step costs from the outside (docs/profile.md): the
// server's steps are rebuilt from the client's records alone, then the
// profile's linear cost model (engine/profile.h) is fitted to them.
//
// Rebuilding the steps: a continuous-batching server emits the tokens of one
// step together, so the output events of all requests, merged in time order,
// fall into clusters, one per step. A cluster's shape follows from what its
// events are: a request's first event is its prefill (prompt tokens, less
// those it found cached), a later one a decode (attending to its prompt and
// the outputs before). Its duration runs from the cluster before (or, when
// the server was idle, from the latest send of the requests it prefilled).
// Steps the client cannot see are guarded against: a cluster is left out
// when a request sent before it began had no token yet and was not in it
// (it may have been prefilled in chunks there, unless the batch was full),
// or when an event carried several tokens (several steps, or speculation).
//
// The fit: steps of one shape are merged into a point (their median
// duration, weighted by their count); the coefficients are non-negative
// least squares (Lawson–Hanson) on relative errors, with standard errors
// from the residuals; a term whose feature never varied is left at 0 and
// said so.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/record.h"
#include "engine/cost_model.h"
#include "engine/profile.h"

namespace tokenscope::analyze {

struct ObservedStep {
  Nanos end = 0;         // when its tokens arrived (the cluster's first event)
  double seconds = 0.0;  // its duration
  engine::StepShape shape;
  std::uint32_t max_prompt = 0;   // the longest prompt it prefilled
  std::uint32_t max_context = 0;  // the longest context of a sequence in it
};

struct ReconstructOptions {
  // The server's batch cap, when known: a request still waiting while a full
  // batch ran was queued, not prefilled in chunks.
  std::optional<std::uint32_t> batch_cap;
  // Events this close (ms) are one step; 0: a quarter of the 5th percentile
  // of the requests' own gaps, at most 1 ms.
  double epsilon_ms = 0.0;
};

struct StepReconstruction {
  std::vector<ObservedStep> steps;  // the steps kept
  std::uint64_t clusters = 0;       // steps seen
  std::uint64_t left_out_pending = 0;
  std::uint64_t left_out_multi_token = 0;
  std::uint64_t requests = 0;  // requests with output events used
  std::uint32_t max_batch_seen = 0;
  // A step of max_batch_seen sequences ran while requests sent before it
  // had no token yet: the cap was reached (they were queued).
  bool cap_reached = false;
  double epsilon_ms = 0.0;
};

StepReconstruction reconstruct_steps(const std::vector<RequestRecord>& records, const ReconstructOptions& o);

struct CostFit {
  std::array<double, engine::kProfileTerms> coef{};  // seconds per unit
  std::array<double, engine::kProfileTerms> se{};
  std::array<bool, engine::kProfileTerms> identified{};  // the data varied this term
  engine::ProfileFitQuality quality;
  engine::ProfileRanges ranges;
  std::vector<std::string> notes;
};

// Throws InputError (naming `what`) when there are too few steps to fit.
CostFit fit_step_costs(const std::vector<ObservedStep>& steps, const std::string& what);

// A profile from finished runs (bench run directories; a directory of runs
// such as `profile`'s or a sweep's is read run by run): their records are
// rebuilt into steps, fitted, and the server's identity and limits are taken
// from their run.json (the server's own word where it gave one: llama.cpp's
// /props, vLLM's cache_config_info) or from behaviour. Progress on log.
engine::Profile profile_from_runs(const std::vector<std::filesystem::path>& runs, std::ostream& log);

}  // namespace tokenscope::analyze
