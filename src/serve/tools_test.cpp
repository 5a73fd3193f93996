#include "serve/tools.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tokenizers/builtin.h"

namespace tokenscope::serve {
namespace {

using nlohmann::json;

ToolDef tool(std::string name, json parameters) {
  ToolDef t;
  t.name = std::move(name);
  t.parameters = std::move(parameters);
  t.checker = std::make_shared<const JsonSchema>(t.parameters, "test");
  return t;
}

ToolRequest weather_and_search() {
  ToolRequest r;
  r.tools.push_back(tool(
      "get_weather",
      {{"type", "object"},
       {"properties", {{"city", {{"type", "string"}, {"minLength", 2}}}, {"unit", {{"enum", {"c", "f"}}}}}},
       {"required", {"city", "unit"}},
       {"additionalProperties", false}}));
  r.tools.push_back(
      tool("search", {{"type", "object"},
                      {"properties", {{"query", {{"type", "string"}}}, {"k", {{"type", "integer"}}}}},
                      {"required", {"query"}}}));
  return r;
}

const ToolDef& find(const ToolRequest& r, const std::string& name) {
  for (const auto& t : r.tools)
    if (t.name == name) return t;
  throw std::runtime_error("no tool " + name);
}

// The plan's text is the calls' markup, its tokens are that text's, and
// the offsets point at each call's name and arguments.
void expect_consistent(const OutputPlan& p) {
  EXPECT_EQ(p.tokens, tokenizers::tokenize(p.text));
  ASSERT_EQ(p.ends.size(), p.tokens.size());
  EXPECT_EQ(p.ends.back(), p.text.size());
  std::string joined;
  for (std::size_t j = 0; j < p.calls.size(); ++j) {
    const auto& c = p.calls[j];
    if (j) joined += '\n';
    joined += render_tool_call(c.name, c.arguments);
    EXPECT_EQ(p.text.substr(c.args_begin, c.args_end - c.args_begin), c.arguments);
    EXPECT_EQ(p.text.substr(c.name_end - c.name.size() - 1, c.name.size() + 1), c.name + "\"");
    EXPECT_EQ(c.id.rfind("chatcmpl-tool-", 0), 0u);
  }
  if (!p.calls.empty()) {
    EXPECT_EQ(p.text, joined);
  }
}

TEST(ToolPlan, RequiredCallsADeclaredToolWithSchemaValidArguments) {
  const ToolRequest r = [] {
    auto t = weather_and_search();
    t.choice = ToolRequest::Choice::kRequired;
    return t;
  }();
  std::set<std::string> names;
  for (std::uint64_t key = 0; key < 200; ++key) {
    const auto p = plan_output(r, {}, {}, key, key, FaultKind::kNone);
    ASSERT_TRUE(p);
    ASSERT_EQ(p->calls.size(), 1u);
    expect_consistent(*p);
    const auto& c = p->calls[0];
    names.insert(c.name);
    EXPECT_TRUE(find(r, c.name).checker->valid(json::parse(c.arguments))) << c.arguments;
    EXPECT_EQ(p->fault, FaultKind::kNone);
  }
  EXPECT_EQ(names, (std::set<std::string>{"get_weather", "search"}));  // both drawn
  // The same key, the same plan.
  const auto a = plan_output(r, {}, {}, 7, 1, FaultKind::kNone),
             b = plan_output(r, {}, {}, 7, 1, FaultKind::kNone);
  EXPECT_EQ(a->text, b->text);
  EXPECT_EQ(a->calls[0].id, b->calls[0].id);
}

TEST(ToolPlan, TheChoiceAndTheRoundsDecideWhetherToCall) {
  ToolRequest r = weather_and_search();
  ToolPolicy policy;
  policy.call_prob = 0.5;
  policy.max_rounds = 2;
  int calls = 0;
  constexpr int kN = 2000;
  for (std::uint64_t key = 0; key < kN; ++key)
    calls += plan_output(r, {}, policy, key, key, FaultKind::kNone).has_value();
  // Binomial(2000, 0.5): within 5 standard deviations.
  EXPECT_NEAR(calls, kN / 2, 5 * 22.4);
  r.rounds = 2;  // the budget spent: text
  for (std::uint64_t key = 0; key < 100; ++key)
    EXPECT_FALSE(plan_output(r, {}, policy, key, key, FaultKind::kNone));
  r.choice = ToolRequest::Choice::kRequired;  // required calls anyway
  EXPECT_TRUE(plan_output(r, {}, policy, 1, 1, FaultKind::kNone));
  r.choice = ToolRequest::Choice::kNone;
  r.rounds = 0;
  for (std::uint64_t key = 0; key < 100; ++key)
    EXPECT_FALSE(plan_output(r, {}, policy, key, key, FaultKind::kNone));
  r.choice = ToolRequest::Choice::kNamed;
  r.named = "search";
  for (std::uint64_t key = 0; key < 50; ++key) {
    const auto p = plan_output(r, {}, policy, key, key, FaultKind::kNone);
    ASSERT_TRUE(p);
    ASSERT_EQ(p->calls.size(), 1u);
    EXPECT_EQ(p->calls[0].name, "search");
  }
}

TEST(ToolPlan, ParallelCallsUpToThePolicysBound) {
  ToolRequest r = weather_and_search();
  r.choice = ToolRequest::Choice::kRequired;
  ToolPolicy policy;
  policy.max_parallel = 3;
  std::map<std::size_t, int> counts;
  for (std::uint64_t key = 0; key < 300; ++key) {
    const auto p = plan_output(r, {}, policy, key, key, FaultKind::kNone);
    ASSERT_TRUE(p);
    expect_consistent(*p);
    ++counts[p->calls.size()];
    std::set<std::string> ids;
    for (const auto& c : p->calls) ids.insert(c.id);
    EXPECT_EQ(ids.size(), p->calls.size());  // every call its own id
  }
  EXPECT_EQ(counts.size(), 3u);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[3], 0);
  r.parallel = false;
  for (std::uint64_t key = 0; key < 100; ++key)
    EXPECT_EQ(plan_output(r, {}, policy, key, key, FaultKind::kNone)->calls.size(), 1u);
}

TEST(ToolPlan, FaultsShapeTheFirstCall) {
  ToolRequest r = weather_and_search();
  r.choice = ToolRequest::Choice::kRequired;
  for (std::uint64_t key = 0; key < 100; ++key) {
    const auto wrong = plan_output(r, {}, {}, key, key, FaultKind::kWrongTool);
    EXPECT_EQ(wrong->fault, FaultKind::kWrongTool);
    for (const auto& t : r.tools) EXPECT_NE(wrong->calls[0].name, t.name);
    expect_consistent(*wrong);

    const auto invalid = plan_output(r, {}, {}, key, key, FaultKind::kInvalidArguments);
    EXPECT_EQ(invalid->fault, FaultKind::kInvalidArguments);
    const auto& c = invalid->calls[0];
    const auto args = json::parse(c.arguments);  // still JSON
    EXPECT_FALSE(find(r, c.name).checker->valid(args)) << c.arguments;

    const auto malformed = plan_output(r, {}, {}, key, key, FaultKind::kMalformedJson);
    EXPECT_EQ(malformed->fault, FaultKind::kMalformedJson);
    EXPECT_FALSE(json::accept(malformed->calls[0].arguments)) << malformed->calls[0].arguments;
    expect_consistent(*malformed);

    // Faults of other kinds leave the calls alone.
    EXPECT_EQ(plan_output(r, {}, {}, key, key, FaultKind::kReset)->fault, FaultKind::kNone);
  }
  // A schema that accepts everything cannot be violated: the fault does not take effect.
  ToolRequest any;
  any.tools.push_back(tool("anything", json::object()));
  any.choice = ToolRequest::Choice::kRequired;
  const auto p = plan_output(any, {}, {}, 3, 3, FaultKind::kInvalidArguments);
  EXPECT_EQ(p->fault, FaultKind::kNone);
}

TEST(ToolPlan, JsonAnswersFollowTheResponseFormat) {
  OutputFormat f;
  f.kind = OutputFormat::Kind::kJsonSchema;
  f.schema = {
      {"type", "object"},
      {"properties", {{"title", {{"type", "string"}}}, {"year", {{"type", "integer"}, {"minimum", 1900}}}}},
      {"required", {"title", "year"}}};
  f.checker = std::make_shared<const JsonSchema>(f.schema, "test");
  for (std::uint64_t key = 0; key < 100; ++key) {
    const auto p = plan_output({}, f, {}, key, key, FaultKind::kNone);
    ASSERT_TRUE(p);
    EXPECT_TRUE(p->calls.empty());
    EXPECT_TRUE(f.checker->valid(json::parse(p->text))) << p->text;
    expect_consistent(*p);
    const auto bad = plan_output({}, f, {}, key, key, FaultKind::kInvalidArguments);
    EXPECT_FALSE(f.checker->valid(json::parse(bad->text))) << bad->text;
    EXPECT_FALSE(json::accept(plan_output({}, f, {}, key, key, FaultKind::kMalformedJson)->text));
    // wrong_tool has no tool to get wrong.
    EXPECT_EQ(plan_output({}, f, {}, key, key, FaultKind::kWrongTool)->fault, FaultKind::kNone);
  }
  OutputFormat object;
  object.kind = OutputFormat::Kind::kJsonObject;
  EXPECT_TRUE(json::parse(plan_output({}, object, {}, 1, 1, FaultKind::kNone)->text).is_object());
  EXPECT_TRUE(json::parse(plan_output({}, object, {}, 1, 1, FaultKind::kInvalidArguments)->text).is_array());
  EXPECT_FALSE(plan_output({}, {}, {}, 1, 1, FaultKind::kNone));  // plain text
  // A schema no value satisfies: the error names the response format.
  OutputFormat never;
  never.kind = OutputFormat::Kind::kJsonSchema;
  never.schema = false;
  never.checker = std::make_shared<const JsonSchema>(never.schema, "test");
  try {
    plan_output({}, never, {}, 1, 1, FaultKind::kNone);
    ADD_FAILURE() << "an unsatisfiable schema was planned";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("response_format"), std::string::npos) << e.what();
  }
}

TEST(ToolPlan, ViolatingInstancesAreRefusedByTheirSchema) {
  const JsonSchema typed(json{{"type", "integer"}}, "t");
  const auto v = violating_instance(typed, 3);
  ASSERT_TRUE(v);
  EXPECT_FALSE(typed.valid(*v));
  const JsonSchema closed(json{{"type", "object"}, {"additionalProperties", false}}, "t");
  const auto w = violating_instance(closed, json::object());
  ASSERT_TRUE(w);
  EXPECT_FALSE(closed.valid(*w));
  const JsonSchema anything(json::object(), "t");
  EXPECT_FALSE(violating_instance(anything, json{{"a", 1}}));
}

}  // namespace
}  // namespace tokenscope::serve
