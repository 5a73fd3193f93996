#include "bench/task_graph.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "bench/bench_workload.h"
#include "core/error.h"

namespace tokenscope::bench {
namespace {

// A research task: a plan, three retrievals in parallel, two API calls, a
// summary that joins them and cites the retrievals.
const char* kResearch = R"y(num_requests: 20
arrival: {process: poisson, rate_rps: 2}
documents: {count: 300, tokens: uniform:100:300}
tools:
  - name: web_search
    kind: search
    parameters: {type: object, properties: {query: {type: string}, top_k: {type: integer}}, required: [query]}
    latency_ms: lognormal:60:0.4
  - name: weather
    kind: json_api
    description: "The weather in a city"
    parameters:
      type: object
      properties: {city: {type: string}, days: {type: integer, minimum: 1, maximum: 7}}
      required: [city]
    response: {type: object, properties: {temp_c: {type: number}}, required: [temp_c]}
    errors: {http_5xx: 0.05, timeout: 0.01, malformed: 0.02}
  - name: calc
    kind: calculator
    parameters: {type: object, properties: {expression: {type: string}}, required: [expression]}
classes:
  - name: research
    slo: {task_ms: 8000, pass_rate: 0.9, percentile: 90}
    task:
      input_len: uniform:20:40
      steps:
        - id: plan
          model: {system: "You plan research.", prompt: "Plan: {{input}}", output_len: fixed:40}
        - {id: r1, retrieve: {query: "{{plan}} history", top_k: 3}, after: [plan]}
        - {id: r2, retrieve: {query: "{{plan}} today"}, after: [plan]}
        - {id: r3, retrieve: {query: "{{ plan }} data", tool: web_search}, after: [plan]}
        - {id: api1, tool: weather, after: [plan], retries: 2, backoff_ms: 50}
        - {id: api2, tool: {name: calc, arguments: {expression: "2 * (3 + 4)"}}, after: [plan]}
        - id: summary
          after: [r1, r2, r3, api1, api2]
          model: {prompt: "Summarize with citations: {{r1}} {{r2}} {{r3}} {{api1}} {{api2}}", output_len: fixed:200}
          cite: [r1, r2, r3]
          timeout_ms: 30000
  - name: chat
    share: 1
    input_len: fixed:50
    output_len: fixed:20
)y";

TEST(TaskGraph, TheResearchTaskReadsWithItsOrderAndArrivals) {
  const auto b = parse_workload_yaml(kResearch, "research.yaml", 7);
  ASSERT_TRUE(b.tasks);
  const auto& set = *b.tasks;
  ASSERT_EQ(set.catalog.tools.size(), 3u);
  EXPECT_EQ(set.catalog.tools[0].kind, ToolSpec::Kind::kSearch);
  EXPECT_EQ(set.catalog.tools[1].error_5xx, 0.05);
  EXPECT_TRUE(set.catalog.tools[1].response_checker->valid(nlohmann::json{{"temp_c", 3.5}}));
  EXPECT_FALSE(set.catalog.tools[1].parameters_checker->valid(nlohmann::json{{"city", "Oslo"}, {"days", 9}}));
  EXPECT_EQ(set.catalog.documents.count, 300u);
  ASSERT_EQ(set.by_class.size(), 2u);
  ASSERT_TRUE(set.by_class[0]);
  EXPECT_FALSE(set.by_class[1]);  // chat is a class of requests
  EXPECT_EQ(set.slo_by_class[0].task_ms, 8000.0);
  EXPECT_EQ(set.slo_by_class[0].pass_rate, 0.9);
  const TaskSpec& t = *set.by_class[0];
  ASSERT_EQ(t.steps.size(), 7u);
  // Every step comes after what it names.
  std::vector<std::size_t> position(t.steps.size());
  for (std::size_t k = 0; k < t.order.size(); ++k) position[t.order[k]] = k;
  for (std::size_t i = 0; i < t.steps.size(); ++i)
    for (const auto a : t.steps[i].after) EXPECT_LT(position[a], position[i]) << t.steps[i].id;
  EXPECT_EQ(t.order.front(), 0u);  // plan
  EXPECT_EQ(t.order.back(), 6u);   // summary
  EXPECT_EQ(t.steps[1].kind, StepSpec::Kind::kRetrieve);
  EXPECT_EQ(t.steps[1].top_k, 3u);
  EXPECT_EQ(t.steps[1].tool, 0u);  // the first search tool
  EXPECT_EQ(t.steps[4].retries, 2u);
  EXPECT_FALSE(t.steps[4].arguments.has_value());  // drawn from the schema
  EXPECT_EQ((*t.steps[5].arguments)["expression"], "2 * (3 + 4)");
  EXPECT_EQ(t.steps[6].cite, (std::vector<std::uint32_t>{1, 2, 3}));
  // Arrivals: the research class's are tasks, the chat class's requests.
  std::size_t requests = b.workload.requests.size();
  EXPECT_EQ(requests + set.arrivals.size(), 20u);
  EXPECT_GT(set.arrivals.size(), 0u);
  for (const auto& a : set.arrivals) {
    EXPECT_EQ(a.task_class, 0u);
    EXPECT_GE(a.input_tokens, 20u);
    EXPECT_LE(a.input_tokens, 40u);
  }
  for (const auto& r : b.workload.requests) EXPECT_EQ(r.task_class, 1u);
}

TEST(TaskGraph, WarmupTasksAreReadAndOnlyWithTasks) {
  const auto b = parse_workload_yaml(R"(num_requests: 5
warmup_tasks: 2
classes:
  - name: t
    task:
      steps:
        - {id: a, model: {prompt: x, output_len: fixed:2}}
)",
                                     "w.yaml", 1);
  EXPECT_EQ(b.tasks->warmup_tasks, 2u);
  EXPECT_THROW(
      parse_workload_yaml("num_requests: 5\nwarmup_tasks: 2\nclasses:\n  - {name: c, input_len: fixed:1, "
                          "output_len: fixed:1}\n",
                          "w.yaml", 1),
      InputError);
}

TEST(TaskGraph, ModelDrivenTasksNameTheirTools) {
  const auto b = parse_workload_yaml(R"(num_requests: 3
tools:
  - {name: search, kind: search, parameters: {type: object, properties: {query: {type: string}}}}
  - {name: calc, kind: calculator, parameters: {type: object, properties: {expression: {type: string}}}}
classes:
  - name: react
    task:
      mode: model-driven
      tools: [search, calc]
      tool_choice: auto
      max_steps: 6
      prompt: "Answer: {{input}}"
      output_len: fixed:64
      retries: 1
)",
                                     "react.yaml", 1);
  const TaskSpec& t = *b.tasks->by_class[0];
  EXPECT_EQ(t.mode, TaskSpec::Mode::kModelDriven);
  EXPECT_EQ(t.tools, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(t.max_steps, 6u);
  EXPECT_EQ(t.retries, 1u);
  EXPECT_EQ(b.tasks->arrivals.size(), 3u);
  EXPECT_TRUE(b.workload.requests.empty());
}

// Bad task files are refused before a run, naming the file, the line and
// the field, and what was expected.
TEST(TaskGraph, BadTaskFilesAreRefusedWithFileLineAndField) {
  const std::string tools = R"(tools:
  - {name: search, kind: search, parameters: {type: object}}
  - {name: api, parameters: {type: object, properties: {n: {type: integer}}, required: [n]}}
)";
  struct Case {
    std::string classes;
    std::size_t line;  // 0: not checked
    std::string field, needle;
  };
  const Case cases[] = {
      {R"(    task:
      steps:
        - {id: a, model: {prompt: x, output_len: fixed:5}, after: [c]}
        - {id: b, model: {prompt: x, output_len: fixed:5}, after: [a]}
        - {id: c, model: {prompt: x, output_len: fixed:5}, after: [b]}
)",
       0, ".after", "the steps form a cycle"},
      {R"(    task:
      steps:
        - {id: a, model: {prompt: x, output_len: fixed:5}, after: [nope]}
)",
       9, "classes[0].task.steps[0].after[0]", "unknown step 'nope'"},
      {R"(    task:
      steps:
        - {id: a, model: {prompt: "{{b}}", output_len: fixed:5}}
        - {id: b, model: {prompt: x, output_len: fixed:5}}
)",
       9, "classes[0].task.steps[0].model.prompt",
       "names {{b}}, which is not the output of a step this one comes after"},
      {R"(    task:
      steps:
        - {id: a, model: {prompt: "{{missing}}", output_len: fixed:5}}
)",
       9, "classes[0].task.steps[0].model.prompt", "names {{missing}}"},
      {R"(    task:
      steps:
        - {id: a, tool: nope}
)",
       9, "classes[0].task.steps[0].tool", "unknown tool 'nope'"},
      {R"(    task:
      steps:
        - {id: a, retrieve: {query: x}, judge: true}
)",
       9, "classes[0].task.steps[0].judge", "only a model step's answer is judged"},
      {R"(    task:
      steps:
        - {id: a, model: {prompt: x, output_len: fixed:5}, judge: {min_score: 9}}
)",
       9, "classes[0].task.steps[0].judge.min_score", ""},
      {R"(    task:
      steps:
        - {id: a, model: {prompt: x, output_len: fixed:5}, judge: {rubric: x, scale: 10}}
)",
       9, "classes[0].task.steps[0].judge", "scale"},
      {R"(    task:
      steps:
        - {id: a, model: {prompt: x, output_len: fixed:5}, judge: yes please}
)",
       9, "classes[0].task.steps[0].judge", "expected true or a mapping"},
      {R"(    task:
      judge: true
      steps:
        - {id: a, model: {prompt: x, output_len: fixed:5}}
)",
       8, "classes[0].task.judge", "belongs to a model-driven task"},
      {R"(    task:
      steps:
        - {id: a, tool: {name: api, arguments: {n: "x"}}}
)",
       9, "classes[0].task.steps[0].tool.arguments", "not valid for the parameters of 'api'"},
      {R"(    task:
      steps:
        - {id: a, model: {prompt: x, output_len: fixed:5}, tool: api}
)",
       9, "classes[0].task.steps[0]", "exactly one of model, tool, retrieve"},
      {R"(    task:
      steps:
        - {id: a, model: {prompt: x, output_len: fixed:5}}
        - {id: a, model: {prompt: x, output_len: fixed:5}}
)",
       10, "classes[0].task.steps[1].id", "duplicate step 'a'"},
      {R"(    task:
      steps:
        - {id: r, retrieve: {query: q}}
        - {id: s, model: {prompt: x, output_len: fixed:5}, cite: [r]}
)",
       10, "classes[0].task.steps[1].cite[0]", "does not come before this step"},
      {R"(    task:
      steps:
        - {id: a, model: {prompt: "{{a", output_len: fixed:5}}
)",
       9, "classes[0].task.steps[0].model.prompt", "without its '}}'"},
      {R"(    task:
      mode: model-driven
      tools: [api]
      output_len: fixed:5
)",
       0, "classes[0].task.prompt", "missing"},
      {R"(    input_len: fixed:5
    task:
      steps:
        - {id: a, model: {prompt: x, output_len: fixed:5}}
)",
       7, "classes[0].input_len", "a task class's lengths are its steps'"},
      {R"(    slo: {ttft_ms: 5}
    task:
      steps:
        - {id: a, model: {prompt: x, output_len: fixed:5}}
)",
       0, "classes[0].slo", "unknown key"},
  };
  for (const auto& c : cases) {
    const std::string text = "num_requests: 2\n" + tools + "classes:\n  - name: t\n" + c.classes;
    try {
      parse_workload_yaml(text, "tasks.yaml", 1);
      ADD_FAILURE() << "accepted:\n" << text;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("tasks.yaml"), std::string::npos) << what;
      if (c.line) {
        EXPECT_NE(what.find(fmt::format("tasks.yaml:{}", c.line)), std::string::npos) << what;
      }
      EXPECT_NE(what.find(c.field), std::string::npos) << what;
      EXPECT_NE(what.find(c.needle), std::string::npos) << what;
    }
  }
  // Tools: a schema is required, and must be one valijson reads.
  for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
           {"tools:\n  - {name: x}\n", "missing (a JSON schema"},
           {"tools:\n  - {name: x, parameters: {type: 3}}\n", "not a JSON Schema"},
           {"tools:\n  - {name: x, parameters: {$ref: \"#\"}}\n", "references loop"},
           {"tools:\n  - {name: x, kind: url, parameters: {}}\n", "missing (kind url needs one)"},
           {"tools:\n  - {name: x, parameters: {}, errors: {http_5xx: 0.7, timeout: 0.5}}\n",
            "add up to more than 1"},
           {"tools:\n  - {name: \"a b\", parameters: {}}\n", "tools[0].name"},
       }) {
    try {
      parse_workload_yaml(
          "num_requests: 1\n" + text + "classes:\n  - {name: c, input_len: fixed:1, output_len: fixed:1}\n",
          "tools.yaml", 1);
      ADD_FAILURE() << "accepted " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tools.yaml:3"), std::string::npos) << e.what();
    }
  }
}

TEST(TaskGraph, YamlValuesBecomeJsonOfTheirType) {
  const auto n = YAML::Load(R"({a: 1, b: -2.5e3, c: true, d: "7", e: ~, f: [x, 'y', 0x1], g: {h: null}})");
  const yaml::Fields rd("t.yaml");
  const auto j = yaml_to_json(n, rd, "v");
  EXPECT_EQ(j["a"], 1);
  EXPECT_EQ(j["b"], -2500.0);
  EXPECT_EQ(j["c"], true);
  EXPECT_EQ(j["d"], "7");  // quoted: a string
  EXPECT_TRUE(j["e"].is_null());
  EXPECT_EQ(j["f"], nlohmann::json({"x", "y", "0x1"}));
  EXPECT_TRUE(j["g"]["h"].is_null());
  EXPECT_EQ(template_names("{{a}} and {{ b }} and {{a}}"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(template_names("no names").empty());
  EXPECT_THROW(template_names("{{a b}}"), UsageError);
}

}  // namespace
}  // namespace tokenscope::bench
