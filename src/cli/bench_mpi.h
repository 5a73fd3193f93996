// bench --mpi: this process as one rank of an mpirun, the ranks as the
// shards of one run (docs/fleet.md "Under Open MPI").
//
//   mpirun -n K tokenscope bench --mpi --target URL ... --out DIR
//
// 1. MPI starts; every rank measures its clock against rank 0's (32 round
//    trips, the shortest kept: cluster/clock_offset.h) and takes rank 0's
//    --out (or its default) so that every rank names the same run.
// 2. Each rank builds the schedule from the seed and keeps its share (shard
//    RANK of K: bench/shard.h); with every plan built, rank 0 sets the start
//    kStartLead from its now and each rank turns it into its own clock's.
//    Rank 0 alone observes the server and the host.
// 3. After its last response each rank waits at a barrier, so that rank 0's
//    last scrape of the server's counters comes after every rank's last
//    response: the merged run keeps the server's counters.
// 4. Each rank's run directory is DIR.shards/RANK (or --mpi-shards ROOT/
//    RANK). Rank 0 reads it where it can (a shared file system), and is
//    sent run.json and requests.jsonl over MPI where it cannot (a path local
//    to each host), into DIR.shards/RANK on its own host.
// 5. Rank 0 merges the shards into DIR (rundir/merge.h), with run.json
//    "shards"."launcher" naming the ranks, their hosts, clocks and failures.
//
// A rank whose run fails (before or after the start) still takes every
// step, so the others neither hang nor lose their runs: its share is
// missing from the merged run, which is then partial (exit 1), and rank 0
// names the rank and its error. A rank that dies (a signal, a kill) ends the
// whole mpirun, as MPI does; every rank's directory holds what it wrote,
// and `tokenscope merge` joins them afterwards.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cluster/mpi_world.h"
#include "rundir/shard_info.h"
#include "session/finishers.h"

namespace tokenscope::cli {

// From rank 0's clock reading to the start: every rank's plan is built by
// then, and shard 0's observers take their first reads 2 s before it.
inline constexpr std::int64_t kMpiStartLeadNs = 3'000'000'000;

class MpiBench {
 public:
  // Collective: MPI started, clocks measured, rank 0's out (default
  // runs/bench-UTC) and shard root given to every rank, and the out
  // claimed by rank 0 (UsageError on every rank when it cannot be).
  MpiBench(const std::string& out, const std::string& shard_root, bool overwrite);
  ~MpiBench();

  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  const std::string& merged_out() const { return out_; }
  // This rank's own run directory.
  std::string shard_dir() const;
  rundir::ClockOffsetInfo clock_offset() const { return offset_; }
  // Rank 0: whether finish merged a run into merged_out().
  bool merged() const { return merged_; }

  // Collective (bench's agree_start): the start, Unix ns on rank 0's clock
  // (bench moves it onto this host's by clock_offset()).
  std::int64_t agree_start();
  // Collective (bench's all_done): after this rank's last response.
  void all_done();

  // After this rank's run: the steps it did not take (its run failed:
  // `error` non-empty), the gather, and on rank 0 the merge into
  // merged_out() and its finishers. Returns rank 0's exit code (0 whole, 1
  // partial or failed, 3 an SLO failed); other ranks get 0.
  int finish(const std::string& error, bool overwrite, const session::Finishers& finishers,
             const std::vector<std::string>& tags, bool json, bool quiet, std::ostream& out,
             std::ostream& log);

 private:
  // The start's collective: whether this rank is ready (its run got there).
  std::int64_t start_step(bool ready);

  std::unique_ptr<cluster::MpiWorld> world_;
  std::string out_, root_;
  rundir::ClockOffsetInfo offset_;
  bool started_ = false, done_ = false;
  bool reached_start_ = false;  // this rank's run called agree_start
  bool merged_ = false;
  std::vector<int> not_ready_;  // rank 0: ranks that did not reach the start
};

}  // namespace tokenscope::cli
