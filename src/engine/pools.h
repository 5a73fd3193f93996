// Heterogeneous pools of a fleet (sim --pools FILE; docs/engine.md
// "Heterogeneous pools"): replicas of one model on different GPUs and
// tensor-parallel degrees behind one router.
//
//   pools:
//     - name: fast              # optional (default: GPU x TP)
//       gpu: h100               # a GPU of the catalog (or its alias)
//       tensor-parallel: 2      # optional (default 1)
//       count: 2                # replicas in the pool
//       gpu-cost-per-hour: 4.1  # optional: a GPU's price, for the fleet's cost
//     - gpu: a100
//       count: 4
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tokenscope::engine {

struct PoolSpec {
  std::string name;
  std::string gpu;
  std::uint32_t tensor_parallel = 1;
  std::uint32_t count = 1;
  std::optional<double> gpu_cost_per_hour;
  std::size_t line = 0;  // in the file: errors found later (an unknown GPU) name it
};

// At most this many replicas over all pools (as --replicas).
inline constexpr std::uint32_t kMaxPoolReplicas = 4096;

// Throws InputError naming the file, line and field.
std::vector<PoolSpec> parse_pools(const std::string& text, const std::string& file);
std::vector<PoolSpec> load_pools(const std::string& path);

}  // namespace tokenscope::engine
