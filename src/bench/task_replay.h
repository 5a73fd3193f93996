// A recorded tasks.jsonl as a workload (docs/tasks.md "Replaying recorded
// tasks"): bench --workload runs/X/tasks.jsonl sends the same tasks again,
// each its own graph as it ran, at its recorded arrival offset (divided by
// --time-scale), its model calls with the recorded prompt and output token
// counts, its tool calls and retrievals answered by the mock tools after
// their recorded latency. A production agent's log written in the same
// format becomes a benchmark the same way.
//
// What is read of each line: id, class, tenant, warmup, t_sched_ns (or
// t_start_ns); of each step: id, kind (model, tool, retrieval), name (the
// tool), outcome (a skipped step never ran, and is left out with the steps
// that came after it), after (the steps it waited for; when absent, the
// steps that had ended by its t_ready_ns, else its t_start_ns), t_start_ns,
// t_end_ns and attempts (a tool's latency per attempt), prompt_tokens and
// output_tokens (a model call's; both required), documents (a retrieval's
// top_k), t_sent_ns and t_returned_ns (a tool's exchange). Failures are
// not replayed: a step that failed when recorded is sent again, and its
// outcome is the replay's; a model call that failed without the server's
// counts is left out, with the steps after it. Judges are not replayed: the
// prompts are words of the recorded lengths, nothing a judge could grade.
#pragma once

#include <string>
#include <string_view>

#include "bench/bench_workload.h"

namespace tokenscope::bench {

// Whether a workload file is a recorded tasks.jsonl (its first line a JSON
// object with "id" and "steps") rather than a YAML workload.
bool is_task_recording(const std::string& path);

// Reads a recorded tasks.jsonl (at most kMaxReplayBytes) into a workload of
// tasks. Bad input is an InputError naming the file, the line and the
// field ("steps[2].after[0]") and what was expected; a cycle in a task's
// steps, an unknown step in after, two steps with one id included.
BenchWorkload load_task_replay(const std::string& path, double time_scale = 1.0);
BenchWorkload parse_task_replay(std::string_view text, const std::string& name, double time_scale = 1.0);

// Bounds on a recording (each a clear InputError past it): its size, its
// tasks, their steps in all (each about half a kilobyte in memory), the
// span of its arrivals.
inline constexpr std::uint64_t kMaxReplayBytes = std::uint64_t{1} << 30;
inline constexpr std::size_t kMaxReplayTasks = 200'000;
inline constexpr std::size_t kMaxReplaySteps = 1'000'000;
inline constexpr Nanos kMaxReplaySpan = Nanos{30} * 86'400 * 1'000'000'000;

}  // namespace tokenscope::bench
