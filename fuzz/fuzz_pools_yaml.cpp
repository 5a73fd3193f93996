// libFuzzer target: sim --pools's YAML file (engine/pools.h). Any input
// either parses into pools within their documented bounds or is refused
// with an InputError.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "core/error.h"
#include "engine/pools.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  try {
    const auto pools =
        engine::parse_pools(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    if (pools.empty()) __builtin_trap();
    std::uint64_t replicas = 0;
    std::set<std::string> names;
    for (const auto& p : pools) {
      if (p.gpu.empty() || p.name.empty() || !names.insert(p.name).second) __builtin_trap();
      if (p.count < 1 || p.tensor_parallel < 1 || p.tensor_parallel > 64) __builtin_trap();
      if (p.gpu_cost_per_hour && !(*p.gpu_cost_per_hour >= 0 && *p.gpu_cost_per_hour <= 1e6))
        __builtin_trap();
      replicas += p.count;
    }
    if (replicas > engine::kMaxPoolReplicas) __builtin_trap();
  } catch (const UsageError&) {
  }
  return 0;
}
