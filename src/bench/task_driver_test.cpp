// Agentic tasks end to end against the in-process simulator and the mock
// tools, over loopback HTTP: the graph's order and joins, records linked to
// their tasks, failure classes equal to what was injected, the model-driven
// loop with serve's tool policy and faults, and stopping. Bounded: a few
// dozen tasks of short steps.
#include "bench/task_driver.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>

#include "bench/mock_tools.h"
#include "bench/server_prompts.h"
#include "bench/task_replay.h"
#include "core/metrics.h"
#include "engine/catalog.h"
#include "serve/metrics.h"
#include "serve/server_app.h"

namespace tokenscope::bench {
namespace {

struct TaskTarget {
  explicit TaskTarget(double step_ms, std::vector<serve::FaultRule> faults = {},
                      serve::ToolPolicy tools = {}) {
    engine::EngineSettings s;
    s.model = "llama-3-8b";
    s.gpu = "h100-sxm";
    s.fixed_step_ms = step_ms;
    const auto eff = engine::resolve_engine(s, engine::Catalog::builtin());
    serve::ServerAppSettings ss;
    ss.faults = std::move(faults);
    ss.fault_seed = 5;
    ss.core.tools = tools;
    app = std::make_unique<serve::ServerApp>(eff, s, std::make_unique<engine::FixedCostModel>(step_ms * 1e-3),
                                             ss);
    app->start();
    endpoint = net::Endpoint::parse_url("http://127.0.0.1:" + std::to_string(app->port()));
  }
  std::unique_ptr<serve::ServerApp> app;
  net::Endpoint endpoint;
};

struct TaskRunResult {
  std::vector<nlohmann::json> tasks;
  std::vector<RequestRecord> requests;
  std::map<std::string, InjectedToolErrors> injected;
};

TaskRunResult run_tasks(const BenchWorkload& b, const TaskTarget& target, bool stop_early = false,
                        std::optional<net::Endpoint> judge = std::nullopt, std::int64_t chat_added = -1) {
  MockToolServer tools(b.tasks->catalog, 9);
  TaskDriverSettings s;
  s.request.api = Api::kChat;
  s.request.model = "llama-3-8b";
  s.target = target.endpoint;
  s.tools = net::Endpoint::parse_url("http://127.0.0.1:" + std::to_string(tools.port()));
  s.seed = 3;
  s.first_request_id = 1000;
  s.chat_added = chat_added;
  if (judge) {
    s.judge = judge;
    s.judge_model = "llama-3-8b";
  }
  RecordQueue rq;
  TaskRecordQueue tq;
  TaskDriver d(*b.tasks, b.workload, s, rq, tq);
  SteadyClock clock;
  d.start(clock.now_ns() + 20 * kNanosPerMilli);
  if (stop_early) {
    d.wait_for(150);
    d.stop_sending();
    d.cancel_in_flight();
  }
  while (!d.wait_for(1000)) {
  }
  d.join();
  TaskRunResult r;
  tq.drain(r.tasks);
  rq.drain(r.requests);
  r.injected = tools.injected();
  return r;
}

const char* kResearchTasks = R"y(num_requests: 6
arrival: {process: constant, rate_rps: 50}
documents: {count: 100, tokens: fixed:30}
tools:
  - name: search
    kind: search
    parameters: {type: object, properties: {query: {type: string}, top_k: {type: integer}}, required: [query]}
    latency_ms: fixed:5
  - name: weather
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    response: {type: object, properties: {temp_c: {type: number}}, required: [temp_c]}
    latency_ms: uniform:2:8
  - name: calc
    kind: calculator
    parameters: {type: object, properties: {expression: {type: string}}, required: [expression]}
classes:
  - name: research
    task:
      input_len: fixed:12
      steps:
        - {id: plan, model: {prompt: "Plan: {{input}}", output_len: fixed:8}}
        - {id: r1, retrieve: {query: "{{plan}}", top_k: 3}, after: [plan]}
        - {id: r2, retrieve: {query: "{{input}}"}, after: [plan]}
        - {id: r3, retrieve: {query: "{{plan}} {{input}}"}, after: [plan]}
        - {id: api1, tool: weather, after: [plan]}
        - {id: api2, tool: {name: calc, arguments: {expression: "2 * (3 + 4)"}}, after: [plan]}
        - id: summary
          after: [r1, r2, r3, api1, api2]
          model: {prompt: "Summarize: {{r1}} {{r2}} {{r3}} {{api1}} {{api2}}", output_len: fixed:40}
          cite: [r1, r2, r3]
)y";

const nlohmann::json& task_step(const nlohmann::json& task, const std::string& id) {
  for (const auto& s : task["steps"])
    if (s["id"] == id) return s;
  throw std::runtime_error("no step " + id);
}

// The research task: a plan, three retrievals and two API calls in
// parallel, a summary that waits for all of them.
TEST(TaskDriver, RunsTheGraphWithItsJoinsAndLinksTheRecords) {
  auto b = parse_workload_yaml(kResearchTasks, "research.yaml", 1);
  std::const_pointer_cast<TaskSet>(b.tasks)->warmup_tasks = 2;  // the first two apart
  TaskTarget target(2);
  const TaskRunResult r = run_tasks(b, target);
  ASSERT_EQ(r.tasks.size(), 6u);
  EXPECT_EQ(r.requests.size(), 12u);  // two model calls a task
  for (const auto& t : r.tasks) EXPECT_EQ(t.value("warmup", false), t["id"].get<int>() < 2) << t["id"];
  for (const auto& q : r.requests) EXPECT_EQ(q.warmup, q.task < 2);
  std::map<std::uint64_t, const RequestRecord*> by_id;
  for (const auto& q : r.requests) {
    by_id[q.id] = &q;
    EXPECT_EQ(q.outcome, Outcome::kOk) << q.detail;
    EXPECT_GE(q.task, 0);
    EXPECT_GE(q.id, 1000u);
  }
  for (const auto& t : r.tasks) {
    ASSERT_EQ(t["outcome"], "ok") << t.dump(1);
    ASSERT_EQ(t["steps"].size(), 7u);
    const auto& plan = task_step(t, "plan");
    const auto& summary = task_step(t, "summary");
    for (const char* id : {"r1", "r2", "r3", "api1", "api2"}) {
      const auto& s = task_step(t, id);
      EXPECT_EQ(s["outcome"], "ok") << s;
      EXPECT_GE(s["t_start_ns"].get<Nanos>(), plan["t_end_ns"].get<Nanos>()) << id;
      EXPECT_LE(s["t_end_ns"].get<Nanos>(), summary["t_start_ns"].get<Nanos>()) << id;
    }
    // Each boundary on the one clock: ready <= started <= tool request sent <= answer read <= step done.
    for (const char* id : {"r1", "api1"}) {
      const auto& s = task_step(t, id);
      EXPECT_LE(s["t_ready_ns"].get<Nanos>(), s["t_start_ns"].get<Nanos>());
      EXPECT_LE(s["t_start_ns"].get<Nanos>(), s["t_sent_ns"].get<Nanos>());
      EXPECT_LT(s["t_sent_ns"].get<Nanos>(), s["t_returned_ns"].get<Nanos>());
      EXPECT_LE(s["t_returned_ns"].get<Nanos>(), s["t_end_ns"].get<Nanos>());
    }
    EXPECT_EQ(task_step(t, "r1")["documents"].size(), 3u);
    EXPECT_EQ(summary["after"], nlohmann::json::array({"r1", "r2", "r3", "api1", "api2"}));
    EXPECT_FALSE(plan.contains("after"));
    EXPECT_EQ(task_step(t, "r2")["documents"].size(), 3u);
    // The model calls are in requests.jsonl under the task's id and the step's.
    for (const char* id : {"plan", "summary"}) {
      const auto& s = task_step(t, id);
      ASSERT_EQ(s["requests"].size(), 1u);
      const RequestRecord& q = *by_id.at(s["requests"][0].get<std::uint64_t>());
      EXPECT_EQ(q.task, t["id"].get<std::int64_t>());
      EXPECT_EQ(q.step, id);
      EXPECT_EQ(q.task_class, "research");
    }
    // The critical path ends with the summary and adds up to the task's time.
    const auto& cp = t["critical_path"];
    EXPECT_EQ(cp["steps"].front(), "plan");
    EXPECT_EQ(cp["steps"].back(), "summary");
    const double parts = cp["model_ms"].get<double>() + cp["tool_ms"].get<double>() +
                         cp["client_ms"].get<double>() + cp["queue_ms"].get<double>();
    EXPECT_NEAR(parts, cp["total_ms"].get<double>(), 0.01 * cp["total_ms"].get<double>());
    // client_ms is the remainder: it must be a small one (the steps run back to back, nothing waits).
    EXPECT_LT(cp["client_ms"].get<double>(), 0.25 * cp["total_ms"].get<double>()) << cp;
    EXPECT_LT(cp["queue_ms"].get<double>(), 0.25 * cp["total_ms"].get<double>()) << cp;
    EXPECT_NEAR(cp["total_ms"].get<double>(), t["duration_ms"].get<double>(), 1e-6);
    EXPECT_GT(cp["model_ms"].get<double>(), 0);
    EXPECT_GT(cp["tool_ms"].get<double>(), 0);
  }
}

// A model that does not cite what it retrieved makes an unsupported claim:
// the summary fails, and the task with it.
TEST(TaskDriver, AnAnswerWithoutCitationsIsAnUnsupportedClaim) {
  const auto b = parse_workload_yaml(kResearchTasks, "research.yaml", 1);
  serve::ToolPolicy silent;
  silent.cite_prob = 0;
  TaskTarget target(2, {}, silent);
  const TaskRunResult r = run_tasks(b, target);
  ASSERT_EQ(r.tasks.size(), 6u);
  for (const auto& t : r.tasks) {
    EXPECT_EQ(t["outcome"], "failed");
    EXPECT_EQ(t["failure"], "unsupported_claim");
    EXPECT_EQ(t["failed_step"], "summary");
  }
  TaskSummary summary(*b.tasks, b.workload.classes);
  for (const auto& t : r.tasks) summary.add(t);
  const auto j = summary.build();
  EXPECT_EQ(j["failed"], 6);
  EXPECT_EQ(j["failures_by_class"]["unsupported_claim"], 6);
  EXPECT_EQ(j["tasks_failed_by_class"]["unsupported_claim"], 6);
  EXPECT_EQ(j["failures_by_step"]["summary"], 6);
  EXPECT_EQ(j["pass_rate"], 0.0);
  EXPECT_EQ(j["per_task"]["model_calls"], 2.0);
}

// The judge grades each summary (here a second simulator, whose answers to
// response_format json_schema are drawn from the verdict's schema): a score
// under min_score fails the task as judge_rejected at that step; the judge's
// time is outside the task's (the task ends with its summary, the verdict
// after it).
TEST(TaskDriver, TheJudgeGradesAnswersApartFromTheTasksTime) {
  std::string yaml = kResearchTasks;
  yaml.replace(yaml.find("num_requests: 6"), 15, "num_requests: 12");
  yaml += "          judge: {min_score: 4}\n";
  const auto b = parse_workload_yaml(yaml, "research.yaml", 1);
  ASSERT_EQ(b.tasks->judged_steps(), 1u);
  TaskTarget target(2), judge(1);
  const TaskRunResult r = run_tasks(b, target, false, judge.endpoint);
  ASSERT_EQ(r.tasks.size(), 12u);
  std::uint64_t passed = 0, rejected = 0;
  for (const auto& t : r.tasks) {
    const auto& sum = task_step(t, "summary");
    ASSERT_TRUE(sum.contains("judge")) << sum;
    const auto& j = sum["judge"];
    ASSERT_TRUE(j.contains("score")) << j;
    const int score = j["score"].get<int>();
    EXPECT_GE(score, 1);
    EXPECT_LE(score, 5);
    EXPECT_TRUE(j["reason"].is_string());
    EXPECT_GT(j["latency_ms"].get<double>(), 0);
    // The verdict came after the task's end: the judge is not the task's time.
    EXPECT_GT(j["t_end_ns"].get<Nanos>(), t["t_end_ns"].get<Nanos>());
    EXPECT_GE(j["t_start_ns"].get<Nanos>(), task_step(t, "plan")["t_end_ns"].get<Nanos>());
    EXPECT_EQ(t["critical_path"]["steps"].back(), "summary");
    if (score >= 4) {
      ++passed;
      EXPECT_EQ(j["outcome"], "pass");
      EXPECT_EQ(t["outcome"], "ok") << t.dump(1);
    } else {
      ++rejected;
      EXPECT_EQ(j["outcome"], "reject");
      EXPECT_EQ(t["outcome"], "failed");
      EXPECT_EQ(t["failure"], "judge_rejected");
      EXPECT_EQ(t["failed_step"], "summary");
      EXPECT_EQ(sum["outcome"], "failed");
    }
  }
  EXPECT_GT(passed, 0u);  // the seeded draws give both
  EXPECT_GT(rejected, 0u);
  TaskSummary summary(*b.tasks, b.workload.classes);
  for (const auto& t : r.tasks) summary.add(t);
  const auto j = summary.build();
  EXPECT_EQ(j["judge"]["judged"], 12);
  EXPECT_EQ(j["judge"]["passed"], passed);
  EXPECT_EQ(j["judge"]["rejected"], rejected);
  EXPECT_EQ(j["judge"]["errors"], 0);
  EXPECT_EQ(j["failures_by_class"]["judge_rejected"], rejected);
  EXPECT_EQ(j["tasks_failed_by_class"]["judge_rejected"], rejected);
  EXPECT_EQ(j["goodput"]["tasks"], passed);
}

// A judge that cannot be reached grades nothing and fails nothing: its
// errors are counted apart.
TEST(TaskDriver, AJudgeThatFailsFailsNoTask) {
  std::string yaml = kResearchTasks;
  yaml += "          judge: true\n";
  const auto b = parse_workload_yaml(yaml, "research.yaml", 1);
  TaskTarget target(2);
  std::uint16_t closed = 0;
  {  // a port nothing listens on
    TaskTarget gone(1);
    closed = gone.app->port();
  }
  const TaskRunResult r =
      run_tasks(b, target, false, net::Endpoint::parse_url(fmt::format("http://127.0.0.1:{}", closed)));
  ASSERT_EQ(r.tasks.size(), 6u);
  for (const auto& t : r.tasks) {
    EXPECT_EQ(t["outcome"], "ok") << t.dump(1);
    const auto& j = task_step(t, "summary")["judge"];
    EXPECT_EQ(j["outcome"], "error") << j;
    EXPECT_FALSE(j["detail"].get<std::string>().empty());
  }
  TaskSummary summary(*b.tasks, b.workload.classes);
  for (const auto& t : r.tasks) summary.add(t);
  EXPECT_EQ(summary.build()["judge"]["errors"], 6);
  EXPECT_EQ(summary.build()["pass_rate"], 1.0);
}

// A run's tasks.jsonl replayed: the same tasks with the same graphs, each
// model call with the recorded prompt and output tokens exactly (the chat
// template's tokens learned from the target's /tokenize, as bench does),
// the tool calls answered after their recorded latency.
TEST(TaskDriver, ARecordedRunReplaysWithItsGraphsAndTokenCounts) {
  const auto b = parse_workload_yaml(kResearchTasks, "research.yaml", 1);
  TaskTarget target(2);
  const TaskRunResult first = run_tasks(b, target);
  ASSERT_EQ(first.tasks.size(), 6u);
  std::string recording;
  for (const auto& t : first.tasks) recording += t.dump() + "\n";
  const auto replay = parse_task_replay(recording, "tasks.jsonl");
  TokenizeClient tokenize(target.endpoint, {}, "", "llama-3-8b");
  const auto facts = learn_server_prompts(tokenize, false, true);
  ASSERT_GT(facts.chat_added, 0) << facts.chat_note;
  const TaskRunResult second = run_tasks(replay, target, false, std::nullopt, facts.chat_added);
  ASSERT_EQ(second.tasks.size(), 6u);
  // The replay's tasks are numbered in arrival order.
  std::vector<nlohmann::json> recorded = first.tasks;
  std::sort(recorded.begin(), recorded.end(),
            [](const auto& x, const auto& y) { return x["t_sched_ns"] < y["t_sched_ns"]; });
  std::map<std::uint64_t, nlohmann::json> replayed;
  for (const auto& t : second.tasks) replayed[t["id"].get<std::uint64_t>()] = t;
  for (std::size_t i = 0; i < recorded.size(); ++i) {
    const auto& o = recorded[i];
    const auto& r = replayed.at(i);
    EXPECT_EQ(r["outcome"], "ok") << r.dump(1);
    EXPECT_EQ(r["class"], o["class"]);
    ASSERT_EQ(r["steps"].size(), o["steps"].size());
    for (const auto& so : o["steps"]) {
      const auto& sr = task_step(r, so["id"]);
      EXPECT_EQ(sr["kind"], so["kind"]);
      EXPECT_EQ(sr["name"], so["name"]);
      EXPECT_EQ(sr.value("after", nlohmann::json::array()), so.value("after", nlohmann::json::array()));
      if (so["kind"] == "model") {
        EXPECT_EQ(sr["prompt_tokens"], so["prompt_tokens"]) << so["id"];
        EXPECT_EQ(sr["output_tokens"], so["output_tokens"]) << so["id"];
      }
    }
  }
  // Each tool step's latency, as the replay asks the mock for it: the recorded exchange's.
  const TaskSet& set = *replay.tasks;
  for (std::size_t i = 0; i < recorded.size(); ++i)
    for (const auto& so : recorded[i]["steps"]) {
      if (so["kind"] == "model") continue;
      const auto* spec = &set.arrivals[i].spec->steps.front();
      for (const auto& st : set.arrivals[i].spec->steps)
        if (st.id == so["id"]) spec = &st;
      ASSERT_TRUE(spec->replay && spec->replay->latency_ms);
      // The tool's own exchange (request sent to answer read), in whole ms.
      const Nanos ns = so["t_returned_ns"].get<Nanos>() - so["t_sent_ns"].get<Nanos>();
      EXPECT_EQ(*spec->replay->latency_ms,
                static_cast<std::uint32_t>((ns + kNanosPerMilli / 2) / kNanosPerMilli))
          << so;
    }
}

// A retrieval that names no search tool, in a file that declares none,
// reads the mock's built-in search of the document store.
TEST(TaskDriver, RetrievalsWithoutASearchToolUseTheBuiltInOne) {
  const auto b = parse_workload_yaml(R"(num_requests: 3
arrival: {process: constant, rate_rps: 50}
documents: {count: 40, tokens: fixed:10}
tools:
  - {name: search, parameters: {type: object}}
classes:
  - name: t
    task:
      steps:
        - {id: r, retrieve: {query: "{{input}}", top_k: 4}}
        - {id: a, model: {prompt: "{{r}}", output_len: fixed:20}, after: [r], cite: [r]}
)",
                                     "builtin.yaml", 6);
  TaskTarget target(1);
  const TaskRunResult r = run_tasks(b, target);
  ASSERT_EQ(r.tasks.size(), 3u);
  for (const auto& t : r.tasks) {
    EXPECT_EQ(t["outcome"], "ok") << t.dump(1);
    EXPECT_EQ(task_step(t, "r")["documents"].size(), 4u);
    EXPECT_EQ(task_step(t, "r")["name"], "search");
  }
  EXPECT_FALSE(r.injected.count("search"));  // the json_api tool named search was not called
}

// Failure classes equal what the mock tools injected: 500s are http,
// bodies that are not JSON are format, held answers time out; retried
// failures are listed beside the final outcome.
TEST(TaskDriver, FailureClassesEqualTheInjectedErrors) {
  const std::string file = R"(num_requests: 40
arrival: {process: constant, rate_rps: 200}
tools:
  - name: flaky
    parameters: {type: object, properties: {q: {type: string}}, required: [q]}
    errors: {http_5xx: 0.2, malformed: 0.15, timeout: 0.1}
classes:
  - name: t
    task:
      steps:
        - {id: call, tool: flaky, timeout_ms: 300, retries: 1, backoff_ms: 5}
        - {id: answer, model: {prompt: "{{call}}", output_len: fixed:3}, after: [call]}
)";
  const auto b = parse_workload_yaml(file, "flaky.yaml", 2);
  TaskTarget target(1);
  const TaskRunResult r = run_tasks(b, target);
  ASSERT_EQ(r.tasks.size(), 40u);
  std::map<std::string, std::uint64_t> seen;  // every failed attempt, retried or final
  std::uint64_t ok = 0;
  for (const auto& t : r.tasks) {
    const auto& s = task_step(t, "call");
    if (s.contains("retried"))
      for (const auto& c : s["retried"]) ++seen[c.get<std::string>()];
    if (t["outcome"] == "ok") {
      ++ok;
      continue;
    }
    EXPECT_EQ(t["failed_step"], "call");
    EXPECT_EQ(t["failure"], s["failure"]);
    EXPECT_EQ(task_step(t, "answer")["outcome"], "skipped");
    ++seen[t["failure"].get<std::string>()];
  }
  const auto& inj = r.injected.at("flaky");
  EXPECT_EQ(seen["http"], inj.http_5xx);
  EXPECT_EQ(seen["format"], inj.malformed);
  EXPECT_EQ(seen["timeout"], inj.timeout);
  EXPECT_EQ(inj.calls, inj.http_5xx + inj.malformed + inj.timeout + ok);
  EXPECT_GT(inj.http_5xx + inj.malformed + inj.timeout, 0u);
}

const char* kReactTasks = R"(num_requests: 8
arrival: {process: constant, rate_rps: 100}
tools:
  - name: search
    kind: search
    parameters: {type: object, properties: {query: {type: string}}, required: [query]}
  - name: calc
    kind: calculator
    parameters: {type: object, properties: {expression: {type: string, enum: ["1 + 1", "6 * 7"]}}, required: [expression]}
classes:
  - name: react
    task:
      mode: model-driven
      tools: [search, calc]
      max_steps: 5
      prompt: "Answer: {{input}}"
      output_len: fixed:150
)";

// The model decides: serve's policy calls tools for two rounds, then
// answers; every call runs and its result goes back in.
TEST(TaskDriver, ModelDrivenTasksFollowTheModelsCalls) {
  const auto b = parse_workload_yaml(kReactTasks, "react.yaml", 3);
  serve::ToolPolicy policy;
  policy.call_prob = 1.0;
  policy.max_rounds = 2;
  policy.max_parallel = 2;
  TaskTarget target(1, {}, policy);
  const TaskRunResult r = run_tasks(b, target);
  ASSERT_EQ(r.tasks.size(), 8u);
  for (const auto& t : r.tasks) {
    ASSERT_EQ(t["outcome"], "ok") << t.dump(1);
    int models = 0, tools = 0;
    std::vector<std::string> round;  // the tool calls since the last model call
    std::string last_model;
    for (const auto& s : t["steps"]) {
      EXPECT_EQ(s["outcome"], "ok") << s;
      // The graph as it ran ("after"): a model call after the round's tool calls, each call after its model
      // call.
      if (s["kind"] == "model") {
        ++models;
        EXPECT_EQ(s.value("after", std::vector<std::string>{}), round) << s;
        round.clear();
        last_model = s["id"];
      } else {
        ++tools;
        EXPECT_EQ(s["after"], nlohmann::json::array({last_model})) << s;
        round.push_back(s["id"]);
      }
    }
    EXPECT_EQ(models, 3);  // two rounds of calls, then the answer
    EXPECT_GE(tools, 2);
    EXPECT_LE(tools, 4);
  }
  // Each model call is a request of its own, with a growing prompt (the tool results went back in).
  std::map<std::int64_t, std::vector<const RequestRecord*>> by_task;
  for (const auto& q : r.requests) by_task[q.task].push_back(&q);
  for (auto& [task, qs] : by_task) {
    ASSERT_EQ(qs.size(), 3u);
    std::sort(qs.begin(), qs.end(), [](auto* a, auto* c) { return a->id < c->id; });
    EXPECT_LT(qs[0]->prompt_tokens, qs[1]->prompt_tokens);
    EXPECT_LT(qs[1]->prompt_tokens, qs[2]->prompt_tokens);
    EXPECT_GT(qs[1]->cached_tokens, 0);  // the conversation's prefix
  }
}

// serve's tool faults become the tasks' failure classes, one for one.
TEST(TaskDriver, ModelDrivenFailuresAreClassedAsServeInjectedThem) {
  const auto b = parse_workload_yaml(kReactTasks, "react.yaml", 4);
  serve::ToolPolicy policy;
  policy.call_prob = 1.0;
  policy.max_rounds = 1;
  TaskTarget target(1,
                    {{serve::FaultKind::kWrongTool, 0.2, 0},
                     {serve::FaultKind::kInvalidArguments, 0.2, 0},
                     {serve::FaultKind::kMalformedJson, 0.2, 0}},
                    policy);
  const TaskRunResult r = run_tasks(b, target);
  std::map<std::string, double> failures;
  for (const auto& t : r.tasks)
    if (t["outcome"] == "failed") ++failures[t["failure"].get<std::string>()];
  const auto& m = target.app->metrics();
  EXPECT_EQ(failures["tool_selection"], m.value("tokenscope:faults_injected_total", "wrong_tool"));
  EXPECT_EQ(failures["invalid_arguments"], m.value("tokenscope:faults_injected_total", "invalid_arguments"));
  EXPECT_EQ(failures["format"], m.value("tokenscope:faults_injected_total", "malformed_json"));
  EXPECT_GT(failures["tool_selection"] + failures["invalid_arguments"] + failures["format"], 0);
  // A model that never calls a tool is a tool-selection failure of its first step.
  serve::ToolPolicy never;
  never.call_prob = 0.0;
  TaskTarget silent(1, {}, never);
  const TaskRunResult q = run_tasks(b, silent);
  for (const auto& t : q.tasks) {
    EXPECT_EQ(t["failure"], "tool_selection") << t.dump(1);
    EXPECT_EQ(t["failed_step"], "model-0");
  }
}

// Ctrl-C: no task starts after it, those in flight end cancelled, every
// finished task and step is kept.
TEST(TaskDriver, StoppingKeepsEveryTaskThatRan) {
  const std::string file = R"(num_requests: 200
arrival: {process: constant, rate_rps: 400}
tools:
  - {name: slow, parameters: {type: object}, latency_ms: fixed:100}
classes:
  - name: t
    task:
      steps:
        - {id: a, model: {prompt: x, output_len: fixed:2}}
        - {id: b, tool: slow, after: [a]}
)";
  const auto b = parse_workload_yaml(file, "stop.yaml", 5);
  TaskTarget target(1);
  const TaskRunResult r = run_tasks(b, target, true);
  ASSERT_GT(r.tasks.size(), 0u);
  EXPECT_LT(r.tasks.size(), 200u);
  int cancelled = 0;
  for (const auto& t : r.tasks) {
    if (t["outcome"] == "cancelled") ++cancelled;
    EXPECT_TRUE(t["outcome"] == "ok" || t["outcome"] == "cancelled") << t.dump(1);
  }
  EXPECT_GT(cancelled, 0);
}

// A task that can make no progress (a graph whose step waits for one that
// can never end it: here a predecessor named twice, which the file readers
// refuse) still ends at a stop, cancelled, instead of holding the run.
TEST(TaskDriver, AStopEndsATaskThatCannotProgress) {
  auto b = parse_workload_yaml(R"(num_requests: 2
arrival: {process: constant, rate_rps: 100}
tools:
  - {name: t, parameters: {type: object}}
classes:
  - name: c
    task:
      steps:
        - {id: a, tool: t}
        - {id: b, tool: t, after: [a]}
)",
                               "stuck.yaml", 1);
  auto spec = std::make_shared<TaskSpec>(*b.tasks->by_class[0]);
  spec->steps[1].after = {0, 0};  // waits for a twice: a's end counts once
  auto set = std::make_shared<TaskSet>(*b.tasks);
  set->by_class[0] = spec;
  b.tasks = set;
  TaskTarget target(1);
  MockToolServer tools(b.tasks->catalog, 9);
  TaskDriverSettings s;
  s.request.model = "llama-3-8b";
  s.target = target.endpoint;
  s.tools = net::Endpoint::parse_url("http://127.0.0.1:" + std::to_string(tools.port()));
  RecordQueue rq;
  TaskRecordQueue tq;
  TaskDriver d(*b.tasks, b.workload, s, rq, tq);
  SteadyClock clock;
  d.start(clock.now_ns());
  EXPECT_FALSE(d.wait_for(300));  // stuck: b never becomes ready
  d.stop_sending();
  ASSERT_TRUE(d.wait_for(10'000));  // ends at the stop, nothing in flight to wait for
  d.join();
  std::vector<nlohmann::json> out;
  tq.drain(out);
  ASSERT_EQ(out.size(), 2u);
  for (const auto& t : out) {
    EXPECT_EQ(t["outcome"], "cancelled") << t.dump(1);
    EXPECT_EQ(task_step(t, "a")["outcome"], "ok");
    EXPECT_EQ(task_step(t, "b")["outcome"], "skipped");
  }
}

}  // namespace
}  // namespace tokenscope::bench

namespace tokenscope::bench {
namespace {

// The summary's arithmetic on known tasks: percentiles by nearest rank with
// intervals around them, pass rate, classes, warm-up apart, SLO verdicts.
TEST(TaskSummary, PercentilesPassRateAndSlos) {
  TaskSet set;
  set.by_class = {std::make_shared<const TaskSpec>()};
  TaskSlo slo;
  slo.task_ms = 95;
  slo.percentile = 90;
  slo.pass_rate = 0.9;
  set.slo_by_class = {slo};
  TaskSummary summary(set, {"agent"});
  auto task = [](int i, const char* outcome) {
    nlohmann::json t = {
        {"id", i},
        {"class", "agent"},
        {"outcome", outcome},
        {"duration_ms", static_cast<double>(i)},
        {"t_sched_ns", 0},
        {"t_end_ns", Nanos{i} * 1'000'000},
        {"steps", nlohmann::json::array({{{"kind", "model"}, {"requests", {1}}, {"outcome", "ok"}}})},
        {"critical_path", {{"model_ms", 1.0}, {"tool_ms", 0.0}, {"client_ms", 0.0}, {"queue_ms", 0.0}}}};
    if (std::string(outcome) == "failed") {
      t["failure"] = "timeout";
      t["failed_step"] = "s";
      t["steps"][0]["outcome"] = "failed";
      t["steps"][0]["failure"] = "timeout";
    }
    return t;
  };
  for (int i = 1; i <= 100; ++i) summary.add(task(i, "ok"));
  for (int i = 0; i < 5; ++i) summary.add(task(1000, "failed"));
  nlohmann::json w = task(7, "ok");
  w["warmup"] = true;
  summary.add(w);
  const auto j = summary.build();
  EXPECT_EQ(j["tasks"], 105);
  EXPECT_EQ(j["ok"], 100);
  EXPECT_EQ(j["failed"], 5);
  EXPECT_NEAR(j["pass_rate"].get<double>(), 100.0 / 105.0, 1e-12);
  // Its exact interval (Clopper-Pearson, 100 of 105): about [0.89, 0.98], around the rate.
  EXPECT_NEAR(j["pass_rate_ci95"][0].get<double>(), 0.892, 0.005);
  EXPECT_NEAR(j["pass_rate_ci95"][1].get<double>(), 0.984, 0.005);
  const auto& p50 = j["completion_ms"]["p50"];
  EXPECT_EQ(p50["value"], 50.0);
  EXPECT_LE(p50["ci95"][0].get<double>(), 50.0);
  EXPECT_GE(p50["ci95"][1].get<double>(), 50.0);
  EXPECT_LT(p50["ci95"][0].get<double>(), p50["ci95"][1].get<double>());
  EXPECT_GT(p50["ci95"][0].get<double>(), 35.0);  // about sqrt(100 x 0.25) = 5 ranks either side
  EXPECT_LT(p50["ci95"][1].get<double>(), 65.0);
  EXPECT_EQ(j["completion_ms"]["p99"]["value"], 99.0);
  EXPECT_EQ(j["failures_by_class"]["timeout"], 5);
  EXPECT_EQ(j["warmup"]["tasks"], 1);
  EXPECT_EQ(j["warmup"]["completion_p50_ms"], 7.0);
  // The SLO: the 90th percentile over every finished task (failed ones miss it) is 95 ms; pass rate 0.952.
  const auto& v = j["by_class"]["agent"]["slo"];
  EXPECT_EQ(v["task_ms_at_percentile"], 95.0);
  EXPECT_EQ(v["met"], true);
  // Exactly the keys of the contract (core/metrics.h), but tools_injected, which bench adds.
  for (const auto& k : metrics::kTaskKeys)
    EXPECT_EQ(j.contains(std::string(k.key)), k.key != "tools_injected") << k.key;
  EXPECT_EQ(j.size(), std::size(metrics::kTaskKeys) - 1) << j.dump();
  // Goodput: the ok tasks within 95 ms (95 of them) over the span, 0 to the last end (1 s).
  EXPECT_EQ(j["goodput"]["tasks"], 95);
  EXPECT_NEAR(j["goodput"]["per_s"].get<double>(), 95.0, 1e-9);
}

// The summary of a merged run's task records (tokenscope merge): the classes
// and their SLOs from a shard's run.json "tasks"; records as merge reads
// them, even ones without a critical path or steps, summarised without a
// crash; a percentile out of (0, 100] refused with the field named.
TEST(TaskSummary, RebuiltFromRecordsAndAShardsClasses) {
  const nlohmann::json first = {
      {"by_class",
       {{"agent", {{"slo", {{"task_ms", 100.0}, {"percentile", 50.0}}}}}, {"other", {{"tasks", 0}}}}}};
  std::vector<nlohmann::json> tasks;
  for (int i = 0; i < 4; ++i)
    tasks.push_back({{"id", i},
                     {"class", "agent"},
                     {"outcome", "ok"},
                     {"duration_ms", 50.0 * (i + 1)},
                     {"t_sched_ns", 1000 * i},
                     {"t_end_ns", 1000 * i + 500},
                     {"steps", {{{"id", "think"}, {"kind", "model"}, {"requests", {1, 2}}}}},
                     {"critical_path", {{"model_ms", 10.0}}}});
  tasks.push_back({{"id", 9}, {"class", "agent"}, {"outcome", "failed"}});  // no steps, no critical path
  const nlohmann::json j = summarize_task_records(first, tasks);
  EXPECT_EQ(j["tasks"], 5);
  EXPECT_EQ(j["ok"], 4);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["by_class"]["agent"]["tasks"], 5);
  EXPECT_TRUE(j["by_class"].contains("other"));
  // p50 over every finished task (the failed one at infinity): 50, 100, 150, 200, inf -> 150.
  EXPECT_EQ(j["by_class"]["agent"]["slo"]["task_ms_at_percentile"], 150.0);
  EXPECT_EQ(j["by_class"]["agent"]["slo"]["met"], false);
  EXPECT_EQ(j["goodput"]["tasks"], 2);  // ok within 100 ms
  nlohmann::json bad = first;
  bad["by_class"]["agent"]["slo"]["percentile"] = 150;
  try {
    summarize_task_records(bad, tasks);
    ADD_FAILURE() << "a percentile of 150 was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tasks.by_class.agent.slo.percentile"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tokenscope::bench
