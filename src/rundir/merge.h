// `tokenscope merge`: the run directories of a sharded bench (one per shard,
// rundir/shard_info.h) into one run directory (docs/fleet.md "Merging").
//
// Every shard built the same schedule from the seed and sent its share of
// it, each on its own host's monotonic clock, from the start all shards
// agreed on. The merge maps each shard's times onto the first shard's clock
// (t + epoch_first - epoch_shard: the agreed start is the same instant on
// both, as far as their clocks agree, which run.json's clock_sync states),
// puts the records in one canonical order (by id) and rebuilds the summary
// from them with the SLOs the shards ran with: the same summary, histograms
// and SLO verdicts one process computes on the union of the records.
//
// Memory: the records are not held; an index of (id, shard, line offset),
// 24 bytes a record, is sorted and the lines are read again in that order.
//
// What is not merged: shard 0's samples.jsonl (the server's scrapes and the
// host samples: only shard 0 observes) is copied as it is, on the merged
// clock already; the summary's server counters are left null (shard 0's
// scrapes end when its own share does, not when the others' do) unless
// shard 0 says its last scrape came after every shard's last response
// (bench --mpi's barrier: "counters_span_all_shards"); the hidden
// queue and the KV-cache locality fit, computed on a shard's own records,
// are dropped. Shards that are missing, cut short or ready late are listed
// in run.json's "shards" and make the merged run partial (missing, cut
// short) or marked (late): never silently averaged in.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <vector>

#include <nlohmann/json.hpp>

namespace tokenscope::rundir {

struct MergeOutcome {
  std::uint64_t records = 0;
  std::uint32_t count = 0;             // shards the run had
  std::vector<std::uint32_t> missing;  // indexes no directory gave
  std::vector<std::uint32_t> partial;  // shards whose run was cut short
  std::vector<std::uint32_t> late;     // shards ready after the agreed start
  bool complete() const { return missing.empty() && partial.empty(); }
};

// The task summary (run.json "tasks") of the merged task records: bench's
// TaskSummary, which this module does not see. first_tasks: the first
// shard's run.json "tasks" (its classes, their SLOs, the judge's settings);
// tasks: every shard's task records on the merged clock, in id order.
using TaskSummarizer = std::function<nlohmann::json(const nlohmann::json& first_tasks,
                                                    const std::vector<nlohmann::json>& tasks)>;

// Merges `shards` into `out` (claimed as bench claims --out: refused when it
// holds a run unless overwrite); `tags` are added to the first shard's in
// run.json. Throws InputError (a directory that is not a shard, shards of
// different runs, a duplicate shard or record), UsageError, IoError.
// `launcher`: what started the shards (bench --mpi: its ranks, hosts,
// clocks and failures), written as run.json "shards"."launcher" (null: none).
// Runs of task classes (each task whole on one shard): tasks.jsonl merged
// (times on the merged clock, by id) and run.json "tasks" rebuilt by
// summarize_tasks (none: "tasks" is null and says why).
MergeOutcome merge_shards(const std::vector<std::filesystem::path>& shards, const std::filesystem::path& out,
                          bool overwrite, std::ostream& log, const std::vector<std::string>& tags = {},
                          const nlohmann::json& launcher = nullptr,
                          const TaskSummarizer& summarize_tasks = {});

}  // namespace tokenscope::rundir
