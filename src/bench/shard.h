// One shard of a bench run spread over processes or hosts (docs/fleet.md
// "Load from many hosts"): which shard this process is, from --shard or
// from the environment of the scheduler that started it, when the shards
// start, and this shard's share of the load plan.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "bench/bench_settings.h"
#include "bench/runner.h"
#include "rundir/shard_info.h"

namespace tokenscope::bench {

// The environment, as getenv (a test passes its own).
using EnvLookup = std::function<const char*(const char*)>;

// --shard I/N (0 <= I < N), or --shard env: the index and count from the
// first of
//   TOKENSCOPE_SHARD_INDEX + TOKENSCOPE_SHARD_COUNT
//   JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) + TOKENSCOPE_SHARD_COUNT
//   SLURM_PROCID + SLURM_NTASKS (Slurm's srun)
//   OMPI_COMM_WORLD_RANK + OMPI_COMM_WORLD_SIZE (Open MPI's mpirun)
// Throws UsageError naming the option or the variable and what was expected.
ShardSpec parse_shard(std::string_view text, const EnvLookup& env);

// --start-at: the instant every shard starts its schedule, as Unix seconds
// (1767225600 or 1767225600.25) or UTC (2026-12-05T12:00:00Z, with
// optional fractional seconds); Unix nanoseconds. Throws UsageError.
std::int64_t parse_start_at(std::string_view text);

// The agreed start on this host's monotonic clock: start_at_unix_ns is on
// the wall clock of the host that set it (this one, or rank 0's under
// --mpi), offset_ns that host's wall clock minus this one's (0: the same
// clock), and (anchor_monotonic_ns, anchor_unix_ns) one reading of this
// host's two clocks.
Nanos epoch_of_start(std::int64_t start_at_unix_ns, std::int64_t offset_ns, Nanos anchor_monotonic_ns,
                     std::int64_t anchor_unix_ns);

// The host's clock discipline (Linux adjtimex).
rundir::ClockSync read_clock_sync();

// --out with "{shard}" replaced by the shard's index (one manifest for
// every pod of an Indexed Job).
std::string shard_out_dir(std::string out, const ShardSpec& shard);

// This shard's share of the plan: the open loop's schedule entries j with
// j % count == index, in schedule order (a session's later turns follow
// its first, so sessions stay whole); the closed loop's users split
// (index < users % count gets one more) and its workload positions
// index, index + count, ... A --max-concurrency cap is split as the
// users are (UsageError when there are more shards than it allows).
// Returns the requests (open loop) or the most users (closed loop) this
// shard has.
std::uint64_t keep_share(LoadPlan& plan, const ShardSpec& shard);

}  // namespace tokenscope::bench
