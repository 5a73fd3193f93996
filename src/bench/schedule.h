// Load plans computed before a run (nothing random happens during it):
// stages of request rate (open loop) or of users (closed loop), each for a
// duration, and the arrival offsets of open-loop stages from the seeded
// arrival process.
#pragma once

#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/random.h"
#include "workload/arrivals.h"

namespace tokenscope::bench {

struct Stage {
  double value = 0.0;  // requests/s (open loop) or users (closed loop)
  double duration_s = 0.0;
};

// "V@S[,V@S...]": value V for S seconds per stage (e.g. "10@30,20@30").
// Throws UsageError naming `option` and the bad part.
std::vector<Stage> parse_stages(std::string_view spec, std::string_view option);
// "A,B,C": a list of positive numbers (sweep rates).
std::vector<double> parse_number_list(std::string_view spec, std::string_view option);

double total_duration_s(const std::vector<Stage>& stages);

// Open-loop offsets (ns from the start of the run, ascending): each stage
// runs `base`'s process (poisson, gamma or constant) at the stage's rate over
// its window; a stage with rate 0 is a pause.
std::vector<Nanos> stage_arrivals(const std::vector<Stage>& stages, const workload::ArrivalSettings& base,
                                  Rng& rng);

}  // namespace tokenscope::bench
