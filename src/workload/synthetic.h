// Synthetic workloads and the per-dimension seeds of every workload.
#pragma once

#include <cstdint>

#include "workload/arrivals.h"
#include "workload/lengths.h"
#include "workload/workload.h"

namespace tokenscope::workload {

// One seed per random dimension (see core/random.h). from_master() derives
// them all from one seed; any may then be overridden on its own.
struct WorkloadSeeds {
  std::uint64_t arrival = 0;
  std::uint64_t input_len = 0;
  std::uint64_t output_len = 0;
  std::uint64_t prefix = 0;
  std::uint64_t tenant = 0;
  std::uint64_t tokens = 0;

  static WorkloadSeeds from_master(std::uint64_t master);
};

struct SyntheticSettings {
  ArrivalSettings arrival;
  std::uint64_t num_requests = 0;  // when 0, duration_s bounds the schedule
  double duration_s = 0.0;
  LengthDistribution input;
  LengthDistribution output;
  std::uint32_t prefix_groups = 0;  // requests pick a group uniformly; 0: no shared prefix
  std::uint32_t prefix_tokens = 0;  // shared leading tokens per group (capped by the prompt)
  std::uint32_t tenants = 1;        // tenants t0..t{N-1}, uniform shares
};

// Throws UsageError on impossible settings (no length, no bound, ...).
Workload make_synthetic(const SyntheticSettings& s, const WorkloadSeeds& seeds);

// Gives every request a tenant drawn uniformly from n names t0..t{n-1}
// (n >= 1), unless the workload already names tenants.
void assign_tenants(Workload& w, std::uint32_t n, std::uint64_t seed);

// Draws output lengths for requests without one (ShareGPT prompts).
void fill_output_lengths(Workload& w, const LengthDistribution& d, std::uint64_t seed);

}  // namespace tokenscope::workload
