// A shard of a bench run spread over several processes or hosts
// (docs/fleet.md "Load from many hosts"): what one shard's run.json says of
// its place in the whole ("shard"), written by bench and read by merge.
//
//   "shard": {
//     "index": 1, "count": 4,            // this shard of how many
//     "source": "--shard" | "JOB_COMPLETION_INDEX" | "SLURM_PROCID" | ...,
//     "start_at_unix_ns": N,             // the start every shard agreed on
//     "epoch_monotonic_ns": N,           // that instant on this host's monotonic clock
//     "ready_late_ns": N,                // how long after it this shard was ready (0: in time)
//     "planned_requests": N,             // open loop: this shard's share of the schedule
//     "users": N | null,                 // closed loop: this shard's users (largest stage)
//     "clock_sync": {"available": bool, "synchronized": bool,
//                    "max_error_us": X, "est_error_us": X, "source": "adjtimex"},
//     "clock_offset": {"offset_ns": N, "error_ns": N, "rtt_ns": N, "rounds": N,
//                      "to": "rank 0", "by": "mpi"},   // bench --mpi only: rank 0's clock
//                                                      // minus this host's, measured
//     "counters_span_all_shards": bool,  // bench --mpi, shard 0: its last scrape came after
//                                        // every shard's last response (an MPI barrier)
//     "slo_from_schedule": bool,         // what the summary needs to be rebuilt
//     "slos": {"CLASS": {"ttft_ms": X|null, "tpot_ms": ..., "e2e_ms": ...,
//                        "ttfo_ms": ..., "percentile": X}}}
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/summary.h"

namespace tokenscope::rundir {

// The host's clock discipline (Linux adjtimex): whether NTP (chrony, ntpd,
// systemd-timesyncd) keeps it synchronized, and the error it estimates.
struct ClockSync {
  bool available = false;
  bool synchronized = false;
  double max_error_us = 0;
  double est_error_us = 0;
  std::string source;  // "adjtimex", or why it is not available
};

// Rank 0's clock against this shard's host, measured by round trips
// (bench --mpi; cluster/clock_offset.h).
struct ClockOffsetInfo {
  std::int64_t offset_ns = 0;  // rank 0's clock minus this host's
  std::int64_t error_ns = 0;   // the bound on |true - offset_ns|
  std::int64_t rtt_ns = 0;
  std::uint32_t rounds = 0;
};

struct ShardInfo {
  std::uint32_t index = 0;
  std::uint32_t count = 1;
  std::string source;
  std::int64_t start_at_unix_ns = 0;
  Nanos epoch_monotonic_ns = 0;
  Nanos ready_late_ns = 0;
  std::uint64_t planned_requests = 0;
  std::optional<std::uint64_t> users;
  ClockSync clock_sync;
  std::optional<ClockOffsetInfo> clock_offset;
  bool counters_span_all_shards = false;
  bool slo_from_schedule = false;
  std::map<std::string, Slo> slos;
};

nlohmann::json to_json(const ShardInfo& s);
// run.json's "shard" object; file names it in errors (InputError naming
// the field and what was expected).
ShardInfo shard_info_from_json(const nlohmann::json& j, const std::string& file);

nlohmann::json slo_to_json(const Slo& s);
Slo slo_from_json(const nlohmann::json& j, const std::string& file, const std::string& field);

}  // namespace tokenscope::rundir
