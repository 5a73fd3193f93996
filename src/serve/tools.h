// Tool calls and structured outputs as the simulator answers them (chat's
// "tools", "tool_choice", "parallel_tool_calls", "response_format").
//
// A simulated model that decides to call tools writes them as Hermes-style
// markup, one block per call:
//   <tool_call>\n{"name":NAME,"arguments":ARGS}\n</tool_call>
// (blocks joined by "\n"), which costs its tokens like any output and is
// answered as OpenAI's tool_calls (the markup is not content), the way
// vLLM's tool parsers answer it. An assistant message that carries
// tool_calls is rendered back into the prompt as the same markup, so a
// conversation's next turn finds its prefix in the KV cache.
//
// The decision is a seeded policy (ToolPolicy), a function of the seed and
// the prompt's tokens (the same conversation gets the same answer, whatever
// the arrival order); arguments are drawn from the tool's parameter schema
// (core/json_schema.h), valid unless a fault (wrong_tool,
// invalid_arguments, malformed_json) says otherwise.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_schema.h"
#include "serve/faults.h"
#include "tokenizers/builtin.h"

namespace tokenscope::serve {

struct ToolDef {
  std::string name;
  nlohmann::json parameters;                  // its JSON schema ({"type": "object"} when not given)
  std::shared_ptr<const JsonSchema> checker;  // parameters, compiled
};

struct ToolRequest {
  enum class Choice { kAuto, kNone, kRequired, kNamed };
  std::vector<ToolDef> tools;  // empty: no tools
  Choice choice = Choice::kAuto;
  std::string named;     // Choice::kNamed: the function
  bool parallel = true;  // "parallel_tool_calls"
  // Assistant turns with tool calls since the last user message.
  std::uint32_t rounds = 0;
};

struct OutputFormat {
  enum class Kind { kText, kJsonObject, kJsonSchema };
  Kind kind = Kind::kText;
  nlohmann::json schema;  // kJsonSchema
  std::shared_ptr<const JsonSchema> checker;
};

// How the simulated model uses tools (serve --tool-call-prob,
// --tool-rounds, --parallel-tool-calls). With tool_choice "auto", a turn
// calls tools with probability call_prob while the conversation has had
// fewer than max_rounds tool rounds since its last user message, and
// answers in text after that; "required" and a named function always call,
// "none" never does. A turn calls 1..max_parallel tools (uniformly; one
// when parallel_tool_calls is false or a function is named), each tool
// drawn uniformly from those declared.
struct ToolPolicy {
  double call_prob = 0.9;
  std::uint32_t max_rounds = 3;
  std::uint32_t max_parallel = 1;
  // A text answer to a conversation that holds documents ("[doc-N]" ids,
  // as retrieval results bring them) cites each with this probability
  // (serve --cite-prob), spread through its words; its length is unchanged.
  double cite_prob = 1.0;
};

struct PlannedCall {
  std::string id;  // "chatcmpl-tool-<hex>"
  std::string name;
  std::string arguments;  // as written (JSON text, or not JSON under malformed_json)
  // Byte offsets in OutputPlan::text: the end of the name (the call's
  // header can be sent), and the arguments' span.
  std::size_t name_end = 0, args_begin = 0, args_end = 0;
};

// A choice's whole output decided before it is generated: its text, the
// tokens that text is (with each token's end offset), and the tool calls
// it holds (none: the text is the content, a JSON value under
// response_format).
struct OutputPlan {
  std::string text;
  std::vector<tokenizers::TokenId> tokens;
  std::vector<std::uint32_t> ends;
  std::vector<PlannedCall> calls;
  FaultKind fault = FaultKind::kNone;  // the fault that shaped it (kNone: none took effect)
};

// Whether a name is one a tool may have: 1 to 64 characters of a-z, A-Z,
// 0-9, _ and - (OpenAI's rule for function names).
bool valid_tool_name(std::string_view name);

// "<tool_call>\n{"name":NAME,"arguments":ARGUMENTS}\n</tool_call>"
std::string render_tool_call(std::string_view name, std::string_view arguments);

// The output of one choice. key: the seed of the decision and the draws
// (the server's seed mixed with the prompt's tokens and the choice's index);
// id_key: of the call ids (unique per response). fault: the request's fault,
// applied when it can be (wrong_tool, invalid_arguments, malformed_json on
// a turn that calls tools; invalid_arguments and malformed_json on a JSON
// answer; invalid_arguments only where some value violates the schema);
// plan.fault says whether it was. nullopt: plain text, generated as usual.
// Throws UsageError naming the tool or the response format when a schema
// accepts no value.
std::optional<OutputPlan> plan_output(const ToolRequest& tools, const OutputFormat& format,
                                      const ToolPolicy& policy, std::uint64_t key, std::uint64_t id_key,
                                      FaultKind fault);

// The "[doc-N]" ids a text mentions, each once, in order, at most 256.
void collect_citations(std::string_view text, std::vector<std::string>& out);

// A text answer of exactly `tokens` tokens (fewer only when the citations
// alone are longer) that cites each of `documents` with the policy's
// probability, as " [doc-N]" between words; nullopt when none is cited.
std::optional<OutputPlan> plan_citations(const std::vector<std::string>& documents, std::uint32_t tokens,
                                         double cite_prob, std::uint64_t key);

// A value `checker` refuses, near `valid` (a required member left out, a
// member of the wrong type, or a value of another type); nullopt when the
// schema accepts everything tried.
std::optional<nlohmann::json> violating_instance(const JsonSchema& checker, const nlohmann::json& valid);

}  // namespace tokenscope::serve
