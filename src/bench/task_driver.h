// The task driver: runs agentic tasks (bench/task_graph.h) against the
// target, beside the runner's requests, on the run's one clock. Open loop:
// each task starts at its arrival time; its steps run as soon as the steps
// they come after are done (fan-out runs in parallel, joins wait), each
// attempt with its timeout, failed attempts retried after a backoff that
// doubles. Model steps are chat requests to the target, recorded like any
// request (requests.jsonl, with the task's id and the step's); tool steps
// POST to the mock tools (bench/mock_tools.h) or to a tool's URL;
// retrievals are calls to a search tool. Model-driven tasks send the
// declared tools and run the calls the model makes until it answers in text
// or its step budget is spent.
//
// Each task ends in one record (tasks.jsonl): outcome, the failure class and
// the step that caused it, its steps (kind, name, times, attempts, outcome,
// the classes of failed attempts, the model calls' request ids and cached
// prompt tokens), and its critical path: model time, tool time, client
// time and queueing, which add up to the task's wall time.
//
// Failure classes: format (an answer or a tool's body that is not the JSON
// asked for), tool_selection (no tool called, or one not declared),
// invalid_arguments (arguments the tool's schema refuses), unsupported_claim
// (an answer without the citations asked for), timeout, http, overload
// (429, 503), budget (a model-driven task out of steps), judge_rejected
// (the judge scored an answer under its step's min_score).
//
// The judge: a step's answer that passed its own checks is sent, with the
// step's request and a rubric, to an OpenAI-compatible judge that answers
// a verdict {"score": 1-5, "reason"} (response_format json_schema; the
// verdict is validated). The judge does not hold the task up: the steps
// after a judged one go on, the task's time ends with its last step, and
// its record waits for the verdicts. The judge's latency and its own
// failures (no answer, no valid verdict) are recorded apart, in the step's
// "judge", and fail nothing.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_workload.h"
#include "bench/exchange.h"
#include "bench/runner.h"
#include "net/http_client.h"

namespace tokenscope::bench {

// Finished task records (one JSON object each), pushed by the driver's
// thread, drained by the caller.
class TaskRecordQueue {
 public:
  void push(nlohmann::json&& task);
  void drain(std::vector<nlohmann::json>& out);

 private:
  std::mutex mutex_;
  std::vector<nlohmann::json> pending_;
};

// The tasks of a run, summarised (run.json "tasks", docs/tasks.md): counts
// by outcome, the pass rate, completion-time percentiles with 95%
// bootstrap intervals, failures by class and by step, retried failures,
// steps, model calls, tool calls and tokens per task, tool latency per
// tool, the critical path's parts, per class with its task SLO, the task
// goodput, the judge's verdicts. Warm-up tasks are counted apart.
class TaskSummary {
 public:
  TaskSummary(const TaskSet& set, std::vector<std::string> classes);
  void add(const nlohmann::json& task);
  nlohmann::json build() const;

 private:
  struct Group {
    std::uint64_t tasks = 0, ok = 0, failed = 0, cancelled = 0;
    std::vector<double> completion_ms;  // ok tasks
  };
  const TaskSet& set_;
  std::vector<std::string> classes_;
  Group all_;
  std::map<std::string, Group> by_class_;
  std::uint64_t warmup_ = 0;
  std::vector<double> warmup_ms_;
  std::map<std::string, std::uint64_t> failures_by_class_, tasks_failed_by_class_, failures_by_step_,
      retried_by_class_;
  double steps_ = 0, model_calls_ = 0, tool_calls_ = 0, prompt_tokens_ = 0, output_tokens_ = 0;
  double cp_model_ = 0, cp_tool_ = 0, cp_client_ = 0, cp_queue_ = 0;
  std::map<std::string, std::vector<double>> tool_ms_;
  // The judge's verdicts (pass, reject) and its own failures, its latency.
  std::uint64_t judged_ = 0, judge_pass_ = 0, judge_reject_ = 0, judge_errors_ = 0;
  std::vector<double> judge_ms_;
  // Goodput: ok tasks within their class's task_ms (any ok task where none
  // is set), over the span from the first task's arrival to the last end.
  std::uint64_t good_ = 0;
  Nanos first_sched_ = -1, last_end_ = -1;
};

// run.json "tasks" rebuilt from task records (tokenscope merge of a sharded
// run, rundir/merge.h TaskSummarizer): the task classes and their SLOs from
// first_tasks (a shard's run.json "tasks": its by_class and their slo), the
// records in any order.
nlohmann::json summarize_task_records(const nlohmann::json& first_tasks,
                                      const std::vector<nlohmann::json>& tasks);

// The request ids of task model calls start here: apart from the
// workload's requests (closed loops wrap past the workload's size).
inline constexpr std::uint64_t kTaskRequestIdBase = std::uint64_t{1} << 40;

struct TaskDriverSettings {
  RequestSettings request;  // the target's model, API key, sampling (chat is sent)
  net::Endpoint target;
  net::ClientOptions client;
  net::Endpoint tools;  // the mock tool server
  std::uint64_t seed = 0;
  // The model calls' request ids start here (after the workload's requests).
  std::uint64_t first_request_id = 0;
  double warmup_s = 0;  // tasks arriving earlier are marked warm-up
  std::size_t max_events = ResponseCollector::kDefaultMaxEvents;
  // The judge (bench --judge-target, --judge-model, --judge-api-key): the
  // answers of steps with `judge` are graded there; none: not graded.
  std::optional<net::Endpoint> judge;
  std::string judge_model, judge_api_key;
  nlohmann::json judge_extra_body;  // an object merged into each judge request (null: none)
  // The tokens the target's chat template adds around one user message (-1:
  // unknown): a replayed model call's prompt leaves them out of its count.
  std::int64_t chat_added = -1;
};

struct TaskCounters {
  std::atomic<std::uint64_t> started{0}, finished{0}, failed{0};
  std::atomic<std::uint64_t> model_calls{0}, tool_calls{0};
  std::atomic<std::int64_t> in_flight{0};
};

class TaskDriver {
 public:
  TaskDriver(const TaskSet& tasks, const workload::Workload& w, TaskDriverSettings settings,
             RecordQueue& requests, TaskRecordQueue& out);
  ~TaskDriver();
  TaskDriver(const TaskDriver&) = delete;
  TaskDriver& operator=(const TaskDriver&) = delete;

  // Starts the driver's thread; the first task is due at epoch + its arrival.
  void start(Nanos epoch);
  // Blocks up to timeout_ms; true when every task has ended.
  bool wait_for(int timeout_ms);
  // Ctrl-C: no task starts, no step starts; running exchanges go on.
  void stop_sending();
  // After the grace period: exchanges in flight end (cancelled), and so do their tasks.
  void cancel_in_flight();
  void join();
  const TaskCounters& counters() const { return counters_; }
  std::uint64_t not_started() const { return not_started_.load(); }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  TaskCounters counters_;
  std::atomic<std::uint64_t> not_started_{0};
};

}  // namespace tokenscope::bench
