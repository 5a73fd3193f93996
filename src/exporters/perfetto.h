// A run as a trace for Perfetto UI (ui.perfetto.dev) and chrome://tracing:
// trace.json in the Chrome JSON Trace Event Format ("JSON Object Format":
// {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}), one
// event per line. docs/observe.md "Exports" says why JSON and not Perfetto's
// protobuf format, and what each track holds:
//
//  * process "requests": requests on lanes (threads) — a lane is reused once
//    the request on it has ended, so lanes = the most requests in flight at
//    once — or one thread per request (PerfettoOptions::lanes = false). Per
//    request a slice "request ID" over its whole life, and inside it
//    "queued" (t_sched → t_send), "waiting" (t_send → first token, or the end
//    when none came) and "decoding" (first → last token); an instant
//    "headers" at t_headers and an instant "token" at each output event.
//  * process "tasks" (when the run has tasks.jsonl): per task a slice named
//    by its class over t_start..t_end, and its steps' slices nested in it,
//    on lanes of threads as for requests: a task's steps that run at once
//    go on more threads of the task, right below its own (perfetto.cpp
//    says why). Model calls keep their slices under "requests", their args
//    naming the task and the step, the step's args their request ids.
//  * one process per samples.jsonl source ("server", "gpu", "host", ...):
//    counter tracks ("C" events) for every canonical series — gauges as
//    read, counters as their rate per second over each interval between two
//    observations, histograms as observations per second (NAME_count) and
//    their mean over each interval (Δsum / Δcount).
//
// Timestamps are microseconds (three decimals: exact nanoseconds) on the
// run's monotonic clock from the earliest time in the run (the first
// scheduled request, or an earlier task start or sample), so that none is
// negative; tasks and requests share it.
//
// requests.jsonl is read twice, a line at a time: once for the time origin
// and the lanes (16 bytes kept per request, plus 4 for its lane), once to
// write. tasks.jsonl likewise (20 bytes a task, plus 4 for its lane).
// samples.jsonl likewise, keeping the previous value of each series.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "exporters/output.h"

namespace tokenscope::exporters {

struct PerfettoOptions {
  bool lanes = true;        // false: one thread per request (unreadable past a few thousand)
  bool token_marks = true;  // an instant per output event (the bulk of a large trace)
  bool include_warmup = true;
  BadLines bad_lines = BadLines::kFail;
};

struct PerfettoStats {
  std::uint64_t events = 0;  // trace events written, all kinds
  std::uint64_t requests = 0;
  std::uint64_t slices = 0;       // "X" events
  std::uint64_t instants = 0;     // "i" events (tokens and headers)
  std::uint64_t token_marks = 0;  // of which tokens
  std::uint64_t counter_events = 0;
  std::uint64_t metadata_events = 0;
  std::uint64_t counter_tracks = 0;          // distinct (source, name, labels, unit) tracks
  std::uint32_t lanes = 0;                   // threads of the "requests" process
  std::uint64_t requests_without_times = 0;  // records with no time at all (not drawn)
  std::uint64_t warmup_left_out = 0;
  bool samples_found = false;
  std::uint64_t observations = 0;                 // samples.jsonl lines with series
  std::uint64_t observations_without_series = 0;  // error / unavailable lines
  std::uint64_t non_finite_values = 0;            // NaN / Inf values left out (JSON has none)
  ReadStats requests_read;
  ReadStats samples_read;
  // tasks.jsonl (agentic tasks, docs/tasks.md)
  bool tasks_found = false;
  std::uint64_t tasks = 0;                  // task slices
  std::uint64_t task_steps = 0;             // step slices (steps that ran)
  std::uint32_t task_threads = 0;           // threads of the "tasks" process
  std::uint64_t tasks_without_times = 0;    // records without a start and an end (not drawn)
  std::uint64_t warmup_tasks_left_out = 0;  // include_warmup = false
  ReadStats tasks_read;
  Nanos origin_ns = 0;  // monotonic time of ts 0
  std::uint64_t bytes = 0;
};

// Writes out_path (through out_path.tmp, renamed when whole) from run_dir's
// requests.jsonl and, when there are, tasks.jsonl and samples.jsonl. Throws InputError for
// a bad line (BadLines::kFail), UsageError when requests.jsonl cannot be
// opened, IoError when the output cannot be written.
PerfettoStats export_perfetto(const std::filesystem::path& run_dir, const std::filesystem::path& out_path,
                              const PerfettoOptions& options = {});

// The same from any source, into a string (tests, fuzzing).
PerfettoStats write_perfetto(const RunSource& source, std::string& out, const PerfettoOptions& options = {});

}  // namespace tokenscope::exporters
