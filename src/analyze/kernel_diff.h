// Check item 9's comparison of two runs' kernel inventories
// (rundir/kernels.h reads them): the kernels new in the candidate, those
// gone from the base, and the first-launch excess of the kernels in both.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "rundir/kernels.h"

namespace tokenscope::analyze {

using rundir::KernelInventory;
using rundir::KernelStats;
using rundir::kMinLaunchesForExcess;
using rundir::load_kernels;
using rundir::parse_kernel_lines;

// How the candidate's kernels differ from the base's.
struct KernelDiff {
  std::vector<KernelStats> new_kernels;   // only in the candidate, most GPU time first (ties: by name)
  std::vector<KernelStats> gone_kernels;  // only in the base, likewise
  std::size_t common = 0;                 // kernels in both runs
  // The candidate's kernel time in new kernels, of all its kernel time; the
  // base's in gone kernels, of all its kernel time (0 when a run has no
  // kernel time).
  double new_time_share = 0, gone_time_share = 0;
  // The kernels in both runs with a first-launch excess in each (by name),
  // and their excesses in each run.
  std::vector<std::string> compared;
  std::vector<double> base_excess, cand_excess;
};
KernelDiff diff_kernels(const KernelInventory& base, const KernelInventory& cand);

}  // namespace tokenscope::analyze
