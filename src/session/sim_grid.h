// sim --grid (docs/engine.md "What-if grids"): a grid of simulator runs,
// configurations × seeds, from a YAML file, and the one table and frontier
// made of their summaries. Under mpirun the runs are spread over the ranks
// (cli/sim_command.cpp); this file is what every rank agrees on: the
// points, in one order, and how their results are reduced.
//
//   base:                  # every point's sim options (long names, no --)
//     rate: 40
//     num-requests: 2000
//     slo: "ttft_ms=500,p=95"          # a list repeats the option
//   seeds: [1, 2, 3]       # or a count: 3 is 1, 2, 3 (default: [0])
//   axes:                  # the product of the axes, the first varying slowest
//     replicas: [1, 2, 4]              # an axis of one option
//     router: [round-robin, prefix-affinity]
//     hardware:                        # an axis of several options at once
//       - {gpu: h100}
//       - {gpu: a100, tensor-parallel: 2}
//
// A plain `true` is a flag given, `false` a flag left out. The options that
// write files or decide the runs themselves (out, seed, plan, repeat, ...)
// are the grid's and are refused in it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tokenscope::session {

// One sim option of a point, where the file set it.
struct GridOption {
  std::string name;   // "router" (given as --router)
  std::string value;  // "" for a flag
  bool flag = false;
  std::size_t line = 0;  // in the grid file
  std::string field;     // "axes.router[1]", "base.rate"
};

struct GridPoint {
  std::vector<std::string> labels;  // each axis's value, as the table shows it
  std::vector<GridOption> options;  // base's, then each axis's
  // The command-line words of the options: --name [value] ...
  std::vector<std::string> args() const;
};

struct Grid {
  std::string file;
  std::vector<std::string> axes;  // the axes' names, in the file's order
  std::vector<std::uint64_t> seeds;
  std::vector<GridPoint> points;  // the product, the first axis varying slowest
  std::size_t runs() const { return points.size() * seeds.size(); }
  // Run j of runs(): point j / seeds.size(), seed j % seeds.size().
};

// At most this many runs (points × seeds) in one grid.
inline constexpr std::size_t kMaxGridRuns = 100'000;
// At most this many options in one point, and over all points.
inline constexpr std::size_t kMaxGridPointOptions = 1'000;
inline constexpr std::size_t kMaxGridOptions = 2'000'000;

// Throws InputError naming the file, line and field.
Grid parse_grid(const std::string& text, const std::string& file);
Grid load_grid(const std::string& path);

// What the table keeps of one run: {"gpus", "goodput_rps" (null without
// SLOs), "throughput_rps", "ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms",
// "requests_failed", "slo_met" (null without SLOs)}; "error" instead when
// the run failed.
nlohmann::json grid_figures(const nlohmann::json& summary, std::uint32_t gpus);

// The grid's table from every run's figures (in run order; null: not run):
// {"axes", "seeds", "points": [{"labels", "args", "runs", "failed", "gpus",
// the seeds' mean of each figure, "slo_met" (every seed met them), "frontier"}],
// "frontier": [point indexes], "frontier_metric": "goodput_rps" |
// "throughput_rps"}. The frontier: the points no other point beats, with
// GPUs as few and the metric as high, strictly on one; ordered by GPUs.
nlohmann::json grid_table(const Grid& grid, const std::vector<nlohmann::json>& figures);

}  // namespace tokenscope::session
