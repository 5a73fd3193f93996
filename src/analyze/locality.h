// KV-cache locality of a run (METRICS.md, docs/observe.md): how the prefix
// cache's hits fall off with reuse distance. Each request's prompt is a chain
// of blocks known from the workload (Mooncake-style hash ids, or the shared
// prefix of a prefix group, the rest unique); in the order the server got the
// requests, each reuse of a block has a stack distance — the number of
// distinct blocks referenced since that block was last referenced — which
// is exactly what decides a hit in an LRU cache of a given size. The server
// says per request how many prompt tokens it found cached; prefix caching
// hits a leading run of blocks, so the first floor(cached / block) blocks of
// the request are hits and the rest misses. Hit rate per distance bin (powers
// of two) is fitted with hit(d) = a * exp(-d / scale), with bootstrap
// intervals over requests.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/clock.h"
#include "workload/workload.h"

namespace tokenscope::analyze {

struct LocalityRequest {
  std::uint32_t index = 0;          // position in Workload::requests
  Nanos t_send = 0;                 // the order the server got them
  std::int64_t cached_tokens = -1;  // as the server reported (-1: not reported)
};

struct LocalityOptions {
  // Block size of prefix-group prompts (hash-id prompts use the trace's own
  // block, Workload::hash_block_tokens). 16 is vLLM's default block size.
  std::uint32_t prefix_block_tokens = 16;
  unsigned bootstrap = 200;
  std::uint64_t seed = 1;
};

// Stack distances of a reference string: for each reference, the number of
// distinct other items referenced since the previous reference to the same
// item, or -1 for a first reference. O(n log n).
std::vector<std::int64_t> stack_distances(const std::vector<std::uint64_t>& refs);

// A weighted fit of hit(d) = a * exp(-d / scale) to (distance, hit rate,
// weight) points; {a, scale}. scale is +inf when the rate does not fall.
struct DecayFit {
  double a = 0;
  double scale = 0;
  double sse = 0;
};
DecayFit fit_exponential_decay(const std::vector<double>& d, const std::vector<double>& rate,
                               const std::vector<double>& weight);

// run.json "kv_locality". Requests whose prompt blocks are not known
// (text prompts, later turns) are left out and counted.
nlohmann::json kv_locality(const workload::Workload& w, std::vector<LocalityRequest> requests,
                           const LocalityOptions& options = {});

}  // namespace tokenscope::analyze
