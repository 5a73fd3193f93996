// What a workload is made of, as options: a trace to replay or a synthetic
// mix, the arrival process, lengths, shared prefixes, tenants and one seed per
// random dimension. Shared by `sim` and `bench` (the CLI fills it; error
// messages name the command-line option of each field).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "workload/lengths.h"
#include "workload/synthetic.h"
#include "workload/workload.h"

namespace tokenscope::workload {

// --input-len and --output-len (lengths.h); UsageError naming the option.
LengthDistribution parse_input_len(std::string_view text);
LengthDistribution parse_output_len(std::string_view text);

struct WorkloadSpec {
  std::string trace;
  std::string trace_format = "auto";
  bool skip_bad_rows = false;
  std::uint64_t max_requests = 0;
  std::string arrival;    // default: trace when the trace has timestamps, else poisson
  double rate_rps = 8.0;  // +inf: every request at t = 0
  double burstiness = 1.0;
  double time_scale = 1.0;
  double jitter_bucket_ms = 0.0;
  std::uint64_t num_requests = 0;
  double duration_s = 300.0;
  // Parsed where given (the CLI; parse_input_len / parse_output_len), the
  // text kept in their `spec`.
  LengthDistribution input_len = parse_input_len("lognormal:1155:0.9:max=7000");
  LengthDistribution output_len = parse_output_len("lognormal:211:0.8:max=1000");
  std::uint32_t prefix_groups = 0;
  std::uint32_t prefix_tokens = 0;
  std::uint32_t tenants = 1;
  std::uint64_t seed = 0;
  std::optional<std::uint64_t> seed_arrival, seed_input_len, seed_output_len, seed_prefix, seed_tenant,
      seed_tokens;
};

// The spec as given (run.json's "requested" settings).
nlohmann::json to_json(const WorkloadSpec& o);

struct BuiltWorkload {
  Workload w;
  WorkloadSeeds seeds;
  nlohmann::json effective;
};

// Reads or generates the workload; throws UsageError on bad options or input.
BuiltWorkload build_workload(const WorkloadSpec& o);

}  // namespace tokenscope::workload
