// Checklist item 8's input (docs/check.md): collective-communication
// measurements of a run, from nccl-tests stdout (all_reduce_perf, ...) or the
// JSON of `tokenscope probe collectives` (a run on GPUs, or --parse of
// nccl-tests output). Given with check --collectives, or found in the run
// directory: collectives.json (probe ... --out RUN), nccl-tests.txt or
// *_perf.txt / *_perf.log.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tokenscope::analyze {

struct CollectiveSeries {
  std::string collective;  // all_reduce, alltoall, ...
  int ranks = 0;
  std::vector<double> bytes, time_us, busbw_gbps;  // one entry per message size, ascending
};

struct CollectivesData {
  std::string source;  // the file
  std::vector<CollectiveSeries> series;
  std::vector<std::vector<double>> pair_gbps;  // sendrecv per pair [from][to]; empty when not measured
};

// Reads a file of either kind (JSON when it starts with '{'). Throws
// InputError (file, line, field) when it is neither.
CollectivesData load_collectives(const std::filesystem::path& file);

// The collectives file of a run directory, if it holds one.
std::optional<std::filesystem::path> find_collectives(const std::filesystem::path& run_dir);

}  // namespace tokenscope::analyze
