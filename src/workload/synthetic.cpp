#include "workload/synthetic.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/random.h"

namespace tokenscope::workload {

WorkloadSeeds WorkloadSeeds::from_master(std::uint64_t master) {
  WorkloadSeeds s;
  s.arrival = derive_seed(master, "arrival");
  s.input_len = derive_seed(master, "input_len");
  s.output_len = derive_seed(master, "output_len");
  s.prefix = derive_seed(master, "prefix");
  s.tenant = derive_seed(master, "tenant");
  s.tokens = derive_seed(master, "tokens");
  return s;
}

Workload make_synthetic(const SyntheticSettings& s, const WorkloadSeeds& seeds) {
  if (s.num_requests == 0 && !(s.duration_s > 0.0))
    throw UsageError("synthetic workload: give --num-requests N or --duration-s S (> 0)");
  if (s.num_requests > 100'000'000) throw UsageError("--num-requests: at most 100,000,000");
  if (s.tenants == 0) throw UsageError("--tenants: expected at least 1");
  if (s.prefix_groups > 0 && s.prefix_tokens == 0)
    throw UsageError("--prefix-groups needs --prefix-tokens > 0");
  Rng arrival_rng(seeds.arrival), in_rng(seeds.input_len), out_rng(seeds.output_len),
      prefix_rng(seeds.prefix);
  const std::vector<Nanos> times =
      s.num_requests > 0 ? generate_arrivals(s.arrival, s.num_requests, arrival_rng)
                         : generate_arrivals_until(s.arrival, seconds_to_nanos(s.duration_s), arrival_rng);
  Workload w;
  w.token_seed = seeds.tokens;
  w.description =
      fmt::format("synthetic: {} at {} req/s, input {}, output {}", arrival_kind_name(s.arrival.kind),
                  s.arrival.rate_rps, s.input.spec, s.output.spec);
  w.requests.reserve(times.size());
  for (std::size_t i = 0; i < times.size(); ++i) {
    Request r;
    r.id = i;
    r.arrival_ns = times[i];
    r.input_tokens = s.input.sample(in_rng);
    r.output_tokens = s.output.sample(out_rng);
    if (s.prefix_groups > 0) {
      r.source = PromptSource::kPrefixGroup;
      r.source_begin = static_cast<std::uint32_t>(prefix_rng.uniform_int(0, s.prefix_groups - 1));
      r.source_count = s.prefix_tokens;
    }
    w.requests.push_back(r);
  }
  if (s.tenants > 1) assign_tenants(w, s.tenants, seeds.tenant);
  return w;
}

void assign_tenants(Workload& w, std::uint32_t n, std::uint64_t seed) {
  if (n <= 1 || w.tenants.size() > 1) return;
  w.tenants.clear();
  for (std::uint32_t t = 0; t < n; ++t) w.tenants.push_back(fmt::format("t{}", t));
  Rng rng(seed);
  for (auto& r : w.requests) r.tenant = static_cast<std::uint32_t>(rng.uniform_int(0, n - 1));
}

void fill_output_lengths(Workload& w, const LengthDistribution& d, std::uint64_t seed) {
  Rng rng(seed);
  for (auto& r : w.requests)
    if (r.output_tokens == 0) r.output_tokens = d.sample(rng);
}

}  // namespace tokenscope::workload
