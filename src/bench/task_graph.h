// Agentic tasks in workload files (docs/tasks.md): the tools a run offers,
// the built-in document store, and per task class a graph of steps — model
// calls, tool calls, retrievals — with fan-out and joins, or a model-driven
// loop in which the model's tool calls decide what runs next.
//
//   tools:
//     - name: web_search            # a built-in mock served on loopback
//       kind: search                # search | calculator | json_api | url
//       parameters: {type: object, properties: {query: {type: string}}, required: [query]}
//       latency_ms: lognormal:80:0.5
//       errors: {http_5xx: 0.02, timeout: 0.01, malformed: 0.01}
//   documents: {count: 500, tokens: uniform:150:400}
//   classes:
//     - name: research
//       task:
//         steps:
//           - {id: plan, model: {prompt: "Plan: {{input}}", output_len: fixed:60}}
//           - {id: r1, retrieve: {query: "{{plan}}", top_k: 3}, after: [plan]}
//           - {id: answer, model: {prompt: "Answer from {{r1}}", output_len: fixed:200},
//              after: [r1], cite: [r1]}
//
// Everything is checked before a run starts: a step graph with a cycle, an
// unknown step or tool, a template naming an output that is not an
// ancestor's, a tool without a parameter schema, a schema valijson cannot
// read are InputErrors with the file, line and field.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "core/json_schema.h"
#include "core/yaml_fields.h"
#include "workload/lengths.h"

namespace tokenscope::bench {

// A tool a task may call.
struct ToolSpec {
  enum class Kind {
    kSearch,      // retrieval over the document store: {"query", "top_k"} -> documents
    kCalculator,  // {"expression"} -> {"value"}: + - * / and parentheses
    kJsonApi,     // any parameters -> a value drawn from `response`
    kUrl          // POSTed to a URL the user runs
  };
  std::string name, description;
  Kind kind = Kind::kJsonApi;
  nlohmann::json parameters;  // the arguments' JSON schema
  nlohmann::json response;    // kJsonApi: the answer's schema
  std::shared_ptr<const JsonSchema> parameters_checker, response_checker;
  std::string url;  // kUrl
  // The mock's behaviour: latency before it answers, the chances of an
  // HTTP 500, of no answer before the caller's timeout, of a body that is
  // not JSON; extra tokens of text in each answer.
  std::optional<workload::LengthDistribution> latency_ms;
  double error_5xx = 0, error_timeout = 0, error_malformed = 0;
  std::optional<workload::LengthDistribution> payload_tokens;
  std::size_t line = 0;
};

// The built-in document store that search tools read: `count` documents of
// `tokens` tokens each (words of tokenscope's own vocabulary, seeded), with
// ids "doc-0" ... .
struct DocumentStoreSpec {
  std::uint32_t count = 200;
  workload::LengthDistribution tokens;  // default fixed:200
};

inline constexpr std::size_t kMaxTaskSteps = 256;

// An answer graded by a judge model (bench --judge-target/--judge-model):
// the rubric it is given (the default one when empty, docs/tasks.md), the
// lowest score of 1-5 that passes, the judge call's timeout.
struct JudgeSpec {
  std::string rubric;
  int min_score = 3;
  double timeout_ms = 60'000;
};

// The rubric a judge is given when a step names none.
std::string_view default_judge_rubric();
// The JSON schema of a judge's verdict: {"score": 1-5, "reason": text}.
const nlohmann::json& judge_verdict_schema();
inline constexpr std::size_t kMaxTools = 128;

// A replayed step (bench/task_replay.h). A model call: its prompt is words
// of its recorded prompt tokens less the chat template's (the driver's
// chat_added), the first cached_tokens of them the task's own words, shared
// by its model calls (the recorded prefix-cache reuse), the rest the
// step's. A tool call or retrieval: the mock answers after latency_ms, as
// recorded.
struct StepReplay {
  std::uint32_t prompt_tokens = 0, cached_tokens = 0;
  std::optional<std::uint32_t> latency_ms;
};

struct StepSpec {
  enum class Kind { kModel, kTool, kRetrieve };
  std::string id;
  Kind kind = Kind::kModel;
  std::vector<std::uint32_t> after;  // steps that must be done first
  // kModel: the messages' templates ({{STEP}}: that step's output;
  // {{input}}: the task's input text), filler to input_len tokens when
  // given, max_tokens from output_len.
  std::string system, prompt;
  std::optional<workload::LengthDistribution> input_len;
  workload::LengthDistribution output_len;
  // kTool: the tool, and its arguments (a JSON object whose strings are
  // templates; drawn from the tool's schema when not given).
  std::uint32_t tool = 0;
  std::optional<nlohmann::json> arguments;
  // kRetrieve: the query template and the documents asked for; the search
  // tool used (the first of kind search, or a built-in one).
  std::string query;
  std::uint32_t top_k = 3;
  // Every kind: a timeout per attempt, retries after a failure, with
  // backoff doubling from backoff_ms.
  double timeout_ms = 60'000;
  std::uint32_t retries = 0;
  double backoff_ms = 100;
  // Retrieval steps whose documents this step's output must cite ("[doc-N]").
  std::vector<std::uint32_t> cite;
  // A JSON schema the output must satisfy (a model step's answer).
  std::optional<nlohmann::json> output_schema;
  std::shared_ptr<const JsonSchema> output_checker;
  // The answer, graded by the judge (when the run has one).
  std::optional<JudgeSpec> judge;
  // A replayed step (bench/task_replay.h, StepReplay).
  std::optional<StepReplay> replay;
  std::size_t line = 0;
};

struct TaskSpec {
  enum class Mode { kScripted, kModelDriven };
  Mode mode = Mode::kScripted;
  // The task's input text ({{input}}): this many tokens of words.
  workload::LengthDistribution input_len;
  // Scripted: the graph, and an order in which every step comes after its `after`.
  std::vector<StepSpec> steps;
  std::vector<std::uint32_t> order;
  // Model-driven: the model is sent `tools`, calls them (each call a tool
  // step), gets their results as tool messages, until it answers in text or
  // `max_steps` model calls were made.
  std::vector<std::uint32_t> tools;
  std::string tool_choice = "auto";
  bool parallel_tool_calls = true;
  std::uint32_t max_steps = 8;
  std::string system, prompt;
  workload::LengthDistribution output_len;
  double timeout_ms = 60'000;  // per model call and per tool call
  std::uint32_t retries = 0;
  double backoff_ms = 100;
  // Both modes: stream the model calls or not (nullopt: as bench's
  // --no-stream says). llama-server refuses tools with streaming.
  std::optional<bool> stream;
  // Model-driven: the final answer, graded by the judge (when the run has one).
  std::optional<JudgeSpec> judge;
  std::size_t line = 0;
};

// A task class's SLO (its `slo`): the task's completion time at a
// percentile, and the share of tasks that must pass.
struct TaskSlo {
  std::optional<double> task_ms;
  std::optional<double> pass_rate;
  double percentile = 99.0;
};

// The tools and the document store of a workload file (top-level `tools`
// and `documents`).
struct TaskCatalog {
  std::vector<ToolSpec> tools;
  DocumentStoreSpec documents;
  // The index of a tool by name; nullopt when there is none.
  std::optional<std::uint32_t> find(std::string_view name) const;
};

// Reads `tools` and `documents` (either may be absent).
TaskCatalog parse_task_catalog(const YAML::Node& root, const yaml::Fields& rd);
// Reads a class's `task` (field names it in messages, e.g. "classes[2].task").
TaskSpec parse_task(const YAML::Node& node, const std::string& field, const TaskCatalog& catalog,
                    const yaml::Fields& rd);

// A YAML value as JSON: mappings, sequences, and scalars typed as YAML 1.2's
// core schema types plain ones (null, booleans, integers, floats; quoted
// scalars stay strings). Throws InputError past 64 levels of nesting.
nlohmann::json yaml_to_json(const YAML::Node& n, const yaml::Fields& rd, const std::string& field);

// The names a template refers to ({{NAME}}), in order, each once.
std::vector<std::string> template_names(std::string_view text);

}  // namespace tokenscope::bench
