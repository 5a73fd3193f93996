// What bench drives: a workload (requests with lengths, prompt sources,
// tenants and task classes), the links between turns of multi-turn
// sessions, and SLOs per task class. It comes either from the workload
// options shared with `sim` (a trace or a synthetic mix) or from a YAML
// workload file (format in docs/bench.md):
//
//   duration_s: 60            # or num_requests: N
//   seed: 1
//   arrival: {process: poisson, rate_rps: 4, burstiness: 1}
//   tenants:                  # optional; shares are normalised
//     - {name: acme, share: 3}
//     - {name: beta, share: 1}
//   classes:
//     - name: chat
//       share: 0.7
//       input_len: lognormal:600:0.6:max=4000
//       output_len: lognormal:200:0.5:max=800
//       prefix: {groups: 4, tokens: 256}      # shared system prompts
//       turns: {count: 3, think_ms: 1000, input_len: uniform:20:120}
//       tenants: [acme]                       # optional: only these tenants
//       slo: {ttft_ms: 500, tpot_ms: 60, percentile: 99}   # also ttfo_ms, e2e_ms
//
// Each arrival starts a request (or a session's first turn) of a class drawn
// by share, for a tenant drawn by share; later turns are sent when the
// previous one ended plus think_ms, their prompt being the conversation so far
// plus a new user message of the turn's input length.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/runner.h"
#include "bench/task_graph.h"
#include "core/summary.h"
#include "workload/workload.h"

namespace tokenscope::bench {

// One arrival of an agentic task (a class with `task`, bench/task_graph.h).
struct TaskArrival {
  Nanos t = 0;  // offset from the start
  std::uint64_t id = 0;
  std::uint16_t task_class = 0;  // index into workload.classes
  std::uint32_t tenant = 0;
  std::uint32_t input_tokens = 0;  // the task's input ({{input}})
  // A replayed task's own graph (bench/task_replay.h); null: its class's.
  std::shared_ptr<const TaskSpec> spec;
};

// The task classes of a workload file: the tools and documents they use,
// each task class's graph (by class index; null for a class of requests),
// and the tasks' arrivals in time order.
struct TaskSet {
  TaskCatalog catalog;
  std::vector<std::shared_ptr<const TaskSpec>> by_class;
  std::vector<TaskSlo> slo_by_class;
  // The steps whose answers a judge grades (model steps and model-driven
  // tasks with `judge`), over the classes.
  std::size_t judged_steps() const;
  std::vector<TaskArrival> arrivals;
  // The first this many tasks (cold caches) are reported apart, as
  // warm-up (`warmup_tasks`; --warmup-s marks them by time as well).
  std::uint64_t warmup_tasks = 0;
};

struct BenchWorkload {
  // Task classes (null when the file has none): their arrivals are tasks,
  // not entries of workload.requests.
  std::shared_ptr<const TaskSet> tasks;
  workload::Workload workload;
  std::vector<TurnLink> turns;  // empty when there are no sessions
  std::map<std::string, Slo> slos;
  nlohmann::json effective;
};

inline constexpr std::uint64_t kMaxWorkloadRequests = 10'000'000;

// A model mix: {name, weight} (weights > 0, names distinct). Parses
// "NAME=WEIGHT,..." (--model-mix); UsageError naming `what` and the entry.
std::vector<std::pair<std::string, double>> parse_model_mix(std::string_view text, std::string_view what);
// Sends the requests without a model (Request::model 0) to the mix's models,
// drawn by weight from (seed, the session, else the request id): the turns
// of a session go to one model. Adds the names to w.models.
void apply_model_mix(workload::Workload& w, const std::vector<TurnLink>& turns,
                     const std::vector<std::pair<std::string, double>>& mix, std::uint64_t seed);
// A workload file is a regular file of at most this many bytes (a file of
// prompts is a trace, read another way; docs/reliability.md "Files read").
inline constexpr std::uint64_t kMaxWorkloadFileBytes = std::uint64_t{16} << 20;

// Reads a YAML workload file; errors name the file, line and field (UsageError).
// master_seed: used when the file sets none; rate: overrides arrival.rate_rps.
BenchWorkload load_workload_file(const std::string& path, std::uint64_t master_seed,
                                 std::optional<double> rate = std::nullopt);
// The same from text (tests, fuzzing); `name` is used in messages. A file
// that would generate more than max_requests requests is an error.
BenchWorkload parse_workload_yaml(const std::string& text, const std::string& name, std::uint64_t master_seed,
                                  std::optional<double> rate = std::nullopt,
                                  std::uint64_t max_requests = kMaxWorkloadRequests);

}  // namespace tokenscope::bench
