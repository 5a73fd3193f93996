// How far the planner is from a real server (docs/profile.md "fidelity"):
// one workload run twice on the server and through `sim` with a profile and
// with the defaults, compared metric by metric. For each of ttft_ms,
// tpot_ms, itl_ms, e2e_ms at p50, p90 and p99, and for the throughputs:
// the real value (the first real run), sim's, rel_error = sim/real − 1, the
// server's own spread (the second real run against the first, the same
// way), the defaults' value and error, the target (5% at p50 and for the
// throughputs, 10% at p90 and p99), and whether the error is within the
// target and within the server's own spread. Beside them, BLIS's mean
// absolute percentage error over every request's TTFT and e2e, matched by
// request id.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

namespace tokenscope::analyze {

struct FidelityRuns {
  std::filesystem::path real, real_repeat, sim, sim_defaults;  // sim_defaults may be empty
  // The real id of each sim request id (sim replays the real run's
  // completed requests, numbered from 0); empty: the ids are the same.
  std::vector<std::uint64_t> sim_ids;
};

// fidelity.json's content; throws InputError/UsageError when a run cannot be read.
nlohmann::json fidelity(const FidelityRuns& runs);

}  // namespace tokenscope::analyze
