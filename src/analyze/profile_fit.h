// Fitting a server's step costs from the outside (docs/profile.md): the
// server's steps are rebuilt from the client's records alone, then the
// profile's linear cost model (engine/profile.h) is fitted to them.
//
// Rebuilding the steps: a continuous-batching server gives every running
// sequence one token per step, though not at one moment (llama.cpp samples
// and sends slot by slot). So one request's gap between two tokens is one
// step, and the other requests' tokens inside that gap are the step's other
// decodes (each attending to its prompt and the outputs before). Such a
// period is kept when nothing joined or left within a period of it and no
// request was waiting (it may have been prefilled in chunks unseen, unless
// the batch was full), and when every event carried one token. Prefills are
// seen from an idle server: the requests sent before the first of them
// answered, whose first tokens are the next events, were one step that began
// at the first send (the per-sequence prefill term takes in the request's
// own handling: parsing, tokenizing, sampling).
//
// The fit: steps of one shape are merged into a point (their median
// duration, weighted by their count); the coefficients (and the decode
// curve's points, when asked: hat functions over the decode count) are non-negative
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
#include "observe/observation.h"

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
  // What attention is priced over (engine::AttentionSpan). With occupancy
  // (llama.cpp) the slots are replayed from the records: a request takes
  // the least recently used idle slot when it is sent, and its slot keeps
  // its tokens after it ended; every token of a step attends over the
  // sequences' tokens and what the idle slots keep. Needs batch_cap (the
  // slots); without it, own contexts. Each run begins with empty slots:
  // carrying the slots one sweep cell left into the next fitted llama-server
  // worse (docs/profile.md).
  engine::AttentionSpan attention = engine::AttentionSpan::kOwnContext;
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
};

StepReconstruction reconstruct_steps(const std::vector<RequestRecord>& records, const ReconstructOptions& o);

struct CostFit {
  std::array<double, engine::kProfileTerms> coef{};  // seconds per unit
  std::array<double, engine::kProfileTerms> se{};
  std::array<bool, engine::kProfileTerms> identified{};  // the data varied this term
  // The decode curve when fitted (coef[0] and coef[3] are 0 then).
  std::vector<engine::CurvePoint> curve;
  engine::ProfileFitQuality quality;
  engine::ProfileRanges ranges;
  std::vector<std::string> notes;
};

// What a server's own counters (samples.jsonl's canonical requests_running,
// requests_waiting and kv_cache_usage) say of its limits, over one run's
// scrapes. A scrape counts toward the KV capacity when no request waited,
// the server ran exactly the requests the client had in flight, and its KV
// usage was at least 2%: the tokens those requests held (their prompts and
// the outputs streamed by then) over that usage is one estimate. The batch
// cap: the most requests running while some waited.
struct CounterReadings {
  std::vector<double> kv_estimates;         // tokens, one per scrape that counts
  std::uint32_t running_while_waiting = 0;  // the most running at a scrape where some waited
  std::uint32_t max_running = 0;            // the most running at any scrape
  std::uint64_t scrapes = 0;                // scrapes with the three series
  void merge(const CounterReadings& o);
};
CounterReadings read_counters(const std::vector<RequestRecord>& records,
                              const std::vector<observe::Observation>& samples);

struct FitOptions {
  // A decode curve (engine::Profile::decode_curve) in place of the per-step
  // and per-decoding-sequence terms, when the steps measured hold at least
  // three decode counts: its points are decode counts the steps hold.
  bool decode_curve = false;
};

// Throws InputError (naming `what`) when there are too few steps to fit.
CostFit fit_step_costs(const std::vector<ObservedStep>& steps, const std::string& what,
                       const FitOptions& o = {});

// A profile from finished runs (bench run directories; a directory of runs
// such as `profile`'s or a sweep's is read run by run): their records are
// rebuilt into steps, fitted, and the server's identity and limits are taken
// from their run.json (the server's own word where it gave one: llama.cpp's
// /props, vLLM's cache_config_info) or from behaviour. Progress on log.
// attention: what to fit the attention terms over ("" : occupancy when a
// simulated run used it, else own; llama.cpp servers too: fitted over
// occupancy, two sweeps of one llama-server gave 22% and 80% MAPE, over own
// contexts 17% and 20%, docs/profile.md). decode_cost: "curve" (a decode
// curve where the steps hold three decode counts) or "linear".
engine::Profile profile_from_runs(const std::vector<std::filesystem::path>& runs, std::ostream& log,
                                  const std::string& attention = "",
                                  const std::string& decode_cost = "curve");

}  // namespace tokenscope::analyze
