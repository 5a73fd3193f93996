// Small run directories for the exporters' tests, written by the same code
// that writes real runs (RequestRecord::append_json, append_observation_json).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/record.h"
#include "core/temp_dir.h"
#include "observe/observation.h"

namespace tokenscope::exporters::testing {

using observe::Observation;

using TempDir = tokenscope::TempDir;

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<std::string> read_lines(const std::filesystem::path& p) {
  std::vector<std::string> lines;
  std::ifstream in(p, std::ios::binary);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::string requests_jsonl(const std::vector<RequestRecord>& records) {
  std::string out;
  for (const auto& r : records) {
    r.append_json(out);
    out += '\n';
  }
  return out;
}

inline std::string samples_jsonl(const std::vector<Observation>& observations) {
  std::string out;
  for (const auto& o : observations) {
    append_observation_json(out, o);
    out += '\n';
  }
  return out;
}

// A streamed request: scheduled at t0, sent `queue` later, first token
// `ttft` after the send, then `tokens` events `gap` apart.
inline RequestRecord streamed(std::uint64_t id, Nanos t0, Nanos queue, Nanos ttft, int tokens, Nanos gap) {
  RequestRecord r;
  r.id = id;
  r.tenant = "tenant-a";
  r.t_sched = t0;
  r.t_send = t0 + queue;
  r.t_headers = r.t_send + ttft / 2;
  for (int i = 0; i < tokens; ++i) {
    r.event_times.push_back(r.t_send + ttft + i * gap);
    r.event_tokens.push_back(1);
  }
  r.t_first_token = tokens > 0 ? r.event_times.front() : -1;
  r.t_last_token = tokens > 0 ? r.event_times.back() : -1;
  r.t_close = (tokens > 0 ? r.t_last_token : r.t_send + ttft) + 1'000;
  r.prompt_tokens = 100 + static_cast<std::int64_t>(id);
  r.output_tokens = tokens;
  r.output_tokens_planned = tokens;
  r.http_status = 200;
  r.response_id = "cmpl-" + std::to_string(id);
  return r;
}

inline nlohmann::json run_json(std::int64_t monotonic_ns, std::int64_t unix_ns,
                               const std::string& model = "llama-3-8b", const std::string& api = "chat") {
  return {{"tool", {{"name", "tokenscope"}, {"version", "0.1.0"}, {"command", "bench"}}},
          {"clock", {{"monotonic_ns", monotonic_ns}, {"unix_ns", unix_ns}}},
          {"settings",
           {{"requested", {{"target", {{"api", api}, {"model", nullptr}}}}},
            {"effective", {{"target", {{"url", "http://127.0.0.1:8123"}, {"model", model}}}}}}}};
}

// A run with agentic tasks: tasks.jsonl as bench/task_driver.cpp writes it
// (docs/tasks.md "Output") and the requests.jsonl of their model calls.
//  * task 3, class "research", ok: plan, then r1, r2 (retrievals) and
//    weather (a tool, retried once) at once, then summary; critical path
//    plan → r2 → summary.
//  * task 4, class "support", failed (timeout at lookup-1): model-0, then
//    the tool lookup-1 times out; reply never runs. It overlaps task 3.
// Requests, in file order: plan's call, plain request 5 (after a task's
// call: nothing of the task may stick to it), summary's call, model-0's
// call, and request 6 naming task 99, which tasks.jsonl does not hold.
struct TaskRun {
  Nanos base = 0;
  std::vector<RequestRecord> requests;
  std::vector<nlohmann::json> tasks;
  std::string tasks_jsonl() const {
    std::string out;
    for (const auto& t : tasks) out += t.dump() + '\n';
    return out;
  }
};

inline constexpr std::uint64_t kFirstTaskRequest = std::uint64_t{1} << 40;

inline TaskRun task_run(Nanos base) {
  constexpr Nanos ms = 1'000'000;
  TaskRun run;
  run.base = base;
  const auto step = [&](const char* id, const char* kind, const char* name, Nanos ready, Nanos start,
                        Nanos end) {
    return nlohmann::json{{"id", id},
                          {"kind", kind},
                          {"name", name},
                          {"outcome", "ok"},
                          {"attempts", 1},
                          {"t_ready_ns", base + ready},
                          {"t_start_ns", base + start},
                          {"t_end_ns", base + end}};
  };
  nlohmann::json plan = step("plan", "model", "model", 100'000, 200'000, 300 * ms);
  plan["requests"] = {kFirstTaskRequest};
  plan["prompt_tokens"] = 64;
  plan["cached_tokens"] = 16;
  plan["output_tokens"] = 40;
  nlohmann::json r1 = step("r1", "retrieval", "web_search", 300 * ms, 300 * ms + 100'000, 350 * ms);
  r1["documents"] = {"doc-58", "doc-285", "doc-446"};
  nlohmann::json r2 = step("r2", "retrieval", "web_search", 300 * ms, 300 * ms + 200'000, 400 * ms);
  r2["documents"] = {"doc-98"};
  nlohmann::json weather = step("weather", "tool", "weather", 300 * ms, 300 * ms + 300'000, 380 * ms);
  weather["attempts"] = 2;
  weather["retried"] = {"http"};
  nlohmann::json summary = step("summary", "model", "model", 400 * ms, 400 * ms + 100'000, 899 * ms);
  summary["requests"] = {kFirstTaskRequest + 1};
  summary["prompt_tokens"] = 900;
  summary["output_tokens"] = 200;
  run.tasks.push_back({{"id", 3},
                       {"class", "research"},
                       {"tenant", "default"},
                       {"mode", "scripted"},
                       {"t_sched_ns", base},
                       {"t_start_ns", base + 100'000},
                       {"t_end_ns", base + 900 * ms},
                       {"duration_ms", 899.9},
                       {"outcome", "ok"},
                       {"steps", {plan, r1, r2, weather, summary}},
                       {"critical_path",
                        {{"steps", {"plan", "r2", "summary"}},
                         {"total_ms", 899.9},
                         {"model_ms", 790.5},
                         {"tool_ms", 99.8},
                         {"client_ms", 0.4},
                         {"queue_ms", 9.2}}}});

  nlohmann::json model0 = step("model-0", "model", "model", 200 * ms + 100'000, 200 * ms + 100'000, 400 * ms);
  model0["requests"] = {kFirstTaskRequest + 2};
  model0["prompt_tokens"] = 120;
  model0["output_tokens"] = 30;
  nlohmann::json lookup = step("lookup-1", "tool", "lookup", 400 * ms, 400 * ms + 100'000, 600 * ms);
  lookup["outcome"] = "failed";
  lookup["failure"] = "timeout";
  lookup["detail"] = "no answer within 200 ms";
  const nlohmann::json reply = {
      {"id", "reply"}, {"kind", "model"}, {"name", "model"}, {"outcome", "skipped"}, {"attempts", 0}};
  run.tasks.push_back({{"id", 4},
                       {"class", "support"},
                       {"tenant", "tenant-b"},
                       {"mode", "model-driven"},
                       {"t_sched_ns", base + 200 * ms},
                       {"t_start_ns", base + 200 * ms},
                       {"t_end_ns", base + 700 * ms},
                       {"duration_ms", 500.0},
                       {"outcome", "failed"},
                       {"failure", "timeout"},
                       {"failed_step", "lookup-1"},
                       {"steps", {model0, lookup, reply}},
                       {"critical_path",
                        {{"steps", {"model-0", "lookup-1"}},
                         {"total_ms", 500.0},
                         {"model_ms", 199.0},
                         {"tool_ms", 199.9},
                         {"client_ms", 1.0},
                         {"queue_ms", 100.1}}}});

  const auto call = [&](std::uint64_t id, std::int64_t task, const char* step_id, Nanos at) {
    RequestRecord r = streamed(id, base + at, 50'000, 20 * ms, 3, 5 * ms);
    r.tenant = "default";
    r.task_class = task == 4 ? "support" : "research";
    r.task = task;
    r.step = step_id;
    return r;
  };
  run.requests.push_back(call(kFirstTaskRequest, 3, "plan", 300'000));
  run.requests.push_back(streamed(5, base + 50 * ms, 100'000, 10 * ms, 2, 5 * ms));
  run.requests.push_back(call(kFirstTaskRequest + 1, 3, "summary", 400 * ms + 200'000));
  run.requests.push_back(call(kFirstTaskRequest + 2, 4, "model-0", 200 * ms + 200'000));
  run.requests.push_back(call(6, 99, "x", 800 * ms));
  return run;
}

}  // namespace tokenscope::exporters::testing
