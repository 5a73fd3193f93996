// JSON Schema validation (json_schema.h) against the official
// JSON-Schema-Test-Suite as Debian ships it (json-schema-test-suite,
// /usr/share/json-schema-test-suite; scripts/setup.sh installs it): every
// case of every draft 7 file, each instance judged as the suite says, but
// for refRemote.json (its schemas name documents on a web server the suite
// runs beside itself; tokenscope fetches nothing) and the four groups in
// kRemote, whose schemas name the draft 7 meta-schema or ids by URL, which
// valijson resolves only by fetching (refused: no fetching at run time).
// The suite's optional/ directory (format assertions, big numbers, ECMA
// regular expressions: optional in draft 7) is not run.
#include "core/json_schema.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/random.h"

namespace tokenscope {
namespace {

namespace fs = std::filesystem;
const fs::path kSuite = "/usr/share/json-schema-test-suite/tests/draft7";

const std::set<std::string> kRemote = {
    "definitions.json: valid definition",
    "definitions.json: invalid definition",
    "ref.json: remote ref, containing refs itself",
    "ref.json: Recursive references between schemas",
};

TEST(JsonSchema, OfficialTestSuiteDraft7) {
  ASSERT_TRUE(fs::is_directory(kSuite))
      << kSuite << " is missing: run scripts/setup.sh (json-schema-test-suite)";
  std::size_t files = 0, cases = 0, wrong = 0, refused = 0;
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(kSuite))
    if (e.path().extension() == ".json" && e.path().filename() != "refRemote.json") paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) {
    std::ifstream in(p);
    const auto groups = nlohmann::json::parse(in);
    ++files;
    for (const auto& g : groups) {
      const std::string what = p.filename().string() + ": " + g["description"].get<std::string>();
      std::optional<JsonSchema> schema;
      try {
        schema.emplace(g["schema"], what, /*conformance=*/true);
      } catch (const UsageError& e) {
        if (!kRemote.contains(what)) ADD_FAILURE() << what << ": the schema is refused: " << e.what();
        ++refused;
        continue;
      }
      EXPECT_FALSE(kRemote.contains(what)) << what << " is read now: move it into the test";
      for (const auto& t : g["tests"]) {
        ++cases;
        const bool got = schema->valid(t["data"]);
        if (got != t["valid"].get<bool>() && ++wrong <= 20)
          ADD_FAILURE() << what << " / " << t["description"].get<std::string>() << ": valid " << got
                        << ", the suite says " << t["valid"];
      }
    }
  }
  std::cout << files << " files, " << cases << " cases, " << wrong << " judged otherwise, " << refused
            << " groups with remote references\n";
  EXPECT_EQ(refused, kRemote.size());
  EXPECT_GE(cases, 400u);  // 402 cases in the other groups of the suite's draft 7 files at 2.0.0
  EXPECT_EQ(wrong, 0u);
}

TEST(JsonSchema, ViolationsNameThePathAndBadSchemasAreRefused) {
  const JsonSchema s(nlohmann::json::parse(R"({"type": "object", "required": ["city"],
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}}})"),
                     "weather.parameters");
  EXPECT_TRUE(s.valid(nlohmann::json::parse(R"({"city": "Oslo", "days": 3})")));
  const auto v = s.violations(nlohmann::json::parse(R"({"days": 0})"));
  ASSERT_FALSE(v.empty());
  std::string all;
  for (const auto& x : v) all += x + "\n";
  EXPECT_NE(all.find("city"), std::string::npos) << all;
  EXPECT_NE(all.find("days"), std::string::npos) << all;
  EXPECT_TRUE(s.violations(nlohmann::json::parse(R"({"city": "x"})")).empty());
  try {
    JsonSchema bad(nlohmann::json::parse(R"({"type": 7})"), "tools[0].parameters");
    ADD_FAILURE() << "a type of 7 accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("tools[0].parameters: not a JSON Schema"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(JsonSchema(nlohmann::json::parse(R"({"$ref": "http://example.com/s.json"})"), "remote"),
               UsageError);
  // References that loop on the same value would make validation recurse
  // without end (a request's tool schema took serve down before this).
  for (
      const char* looping : {
          R"({"$ref": "#"})",
          R"({"definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"anyOf": [{"$ref": "#/definitions/a"}]}},
               "$ref": "#/definitions/a"})",
          R"({"allOf": [{"not": {"$ref": "#"}}]})",
          R"({"definitions": {"x": {"$id": "#x", "oneOf": [{"$ref": "#x"}]}}, "$ref": "#x"})",
          R"({"properties": {"p": {"$ref": "#/properties/p"}}})",
      }) {
    try {
      JsonSchema loop(nlohmann::json::parse(looping), "tools[0].function.parameters");
      ADD_FAILURE() << "accepted " << looping;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("references loop"), std::string::npos) << e.what();
    }
  }
  // A relative reference valijson resolved against the document itself, in a loop (found by
  // fuzz_json_schema).
  EXPECT_THROW(JsonSchema(nlohmann::json::parse(R"({"definitions": {"a": {"$ref": "#/definitions/b"}},
                                                   "$ref": "$/definitions/a"})"),
                          "relative"),
               UsageError);
  // A long string under a pattern or a format: std::regex, which valijson matches with, recurses once a
  // character and overflowed the stack at about 40,000 characters; it is checked on a larger stack now.
  const JsonSchema patterned(
      nlohmann::json::parse(R"({"type": "object", "properties": {"s": {"type": "string",
                                                       "pattern": "^(a|b)+$"}, "d": {"format": "date"}}})"),
      "t");
  const nlohmann::json long_ok = {{"s", std::string(300'000, 'a')}, {"d", std::string(300'000, '1')}};
  EXPECT_FALSE(patterned.valid(long_ok));  // the date is not one
  const auto why = patterned.violations(long_ok);
  ASSERT_FALSE(why.empty());
  for (const auto& w : why) EXPECT_EQ(w.find("[s]"), std::string::npos) << w;  // the long match held
  EXPECT_NE(why[0].find("[d]"), std::string::npos) << why[0];
  EXPECT_TRUE(patterned.valid(nlohmann::json{{"s", std::string(300'000, 'b')}}));
  EXPECT_FALSE(
      patterned.valid(nlohmann::json{{"s", std::string(2'000'000, 'b')}}));  // past the bound: refused
  EXPECT_NE(patterned.violations(nlohmann::json{{"s", std::string(2'000'000, 'b')}})[0].find("longer than"),
            std::string::npos);
  // Found by review: a pattern that is no regular expression (valijson compiles it only when it
  // validates, and threw from there), a loop through dependencies, chains of references past the bound.
  for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type": "string", "pattern": "("})", "is not a regular expression"},
           {R"({"patternProperties": {"[": {}}})", "is not a regular expression"},
           {R"({"type": "object", "dependencies": {"a": {"$ref": "#"}}})", "references loop"},
           // "#/" is the root's "" member to a JSON pointer, the root itself to valijson (fuzz_json_schema).
           {R"({"definitions": {"a": {"allOf": [{"$ref": "#/"}]}}, "$ref": "#/definitions/a"})",
            "names nothing"},
           {R"({"$id": "http://example.com/root", "$ref": "#/definitions/a"})", "only \"#name\" ids"},
       }) {
    try {
      JsonSchema bad(nlohmann::json::parse(text), "response_format");
      ADD_FAILURE() << "accepted " << text;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  nlohmann::json chain = {{"definitions", nlohmann::json::object()}, {"$ref", "#/definitions/a0"}};
  for (int i = 0; i < 300; ++i)
    chain["definitions"][fmt::format("a{}", i)] = {{"$ref", fmt::format("#/definitions/a{}", i + 1)}};
  chain["definitions"]["a300"] = {{"type", "string"}};
  EXPECT_THROW(JsonSchema(chain, "chain"), UsageError);
  // A small schema asking for an enormous value: refused, not drawn.
  Rng rng(1);
  EXPECT_THROW(
      draw_instance(nlohmann::json::parse(R"({"type": "array", "minItems": 256, "items": {"type": "array",
                   "minItems": 256, "items": {"type": "array", "minItems": 256, "items": {"type": "integer"}}}})"),
                    rng, "big"),
      UsageError);
  // Recursion through a member is a tree, not a loop: accepted and bounded by the value.
  const JsonSchema tree(
      nlohmann::json::parse(R"({"type": "object", "properties": {"child": {"$ref": "#"}}})"), "t");
  EXPECT_TRUE(tree.valid(nlohmann::json::parse(R"({"child": {"child": {}}})")));
  EXPECT_FALSE(tree.valid(nlohmann::json::parse(R"({"child": {"child": 3}})")));
}

// Values drawn for tool schemas of the shapes tools declare: every draw
// valid (valijson, itself checked above, is the judge), the same seed the
// same values, optional properties and enum values all seen, and an
// unsatisfiable schema refused by name.
TEST(JsonSchema, DrawnInstancesSatisfyTheirSchemas) {
  const std::vector<std::string> schemas = {
      R"({"type": "object", "properties": {"city": {"type": "string", "minLength": 2, "maxLength": 40},
          "unit": {"enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer", "minimum": 1, "maximum": 14}},
          "required": ["city"]})",
      R"({"type": "object", "properties": {"query": {"type": "string"}, "top_k": {"type": "integer",
          "exclusiveMinimum": 0, "maximum": 50, "multipleOf": 5}, "filters": {"type": "array", "minItems": 1,
          "maxItems": 4, "items": {"type": "object", "properties": {"field": {"type": "string"},
          "value": {"type": ["string", "number", "boolean"]}}, "required": ["field", "value"]}}},
          "required": ["query", "filters"], "additionalProperties": false})",
      R"({"definitions": {"point": {"type": "object", "properties": {"x": {"type": "number", "minimum": -1,
          "maximum": 1}, "y": {"type": "number"}}, "required": ["x", "y"]}},
          "type": "object", "properties": {"path": {"type": "array", "items": {"$ref": "#/definitions/point"}},
          "when": {"type": "string", "format": "date-time"}, "mail": {"type": "string", "format": "email"}},
          "required": ["path", "when"]})",
      R"({"anyOf": [{"type": "object", "properties": {"a": {"const": 1}}, "required": ["a"]},
          {"type": "array", "items": [{"type": "string"}, {"type": "null"}]}]})",
      R"({"allOf": [{"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]},
          {"properties": {"b": {"type": "string", "pattern": "^[a-z]+$"}}, "required": ["b"]}]})",
  };
  for (std::size_t i = 0; i < schemas.size(); ++i) {
    const auto schema = nlohmann::json::parse(schemas[i]);
    const JsonSchema check(schema, "schema");
    Rng rng(40 + i), again(40 + i);
    std::set<std::string> seen;
    for (int k = 0; k < 300; ++k) {
      const auto v = draw_instance(schema, rng, "schema " + std::to_string(i));
      ASSERT_TRUE(check.valid(v)) << i << ": " << v.dump();
      ASSERT_EQ(v, draw_instance(schema, check, again, "again")) << "not deterministic";
      if (i == 0) {
        seen.insert(v.contains("unit") ? v["unit"].get<std::string>() : "no unit");
        seen.insert(v.contains("days") ? "days" : "no days");
      }
    }
    if (i == 0) {
      EXPECT_EQ(seen, (std::set<std::string>{"celsius", "fahrenheit", "no unit", "days", "no days"}));
    }
  }
  Rng rng(1);
  for (const char* unsatisfiable : {R"(false)", R"({"type": "integer", "minimum": 5, "maximum": 3})",
                                    R"({"type": "string", "pattern": "^[0-9]{40}$"})"}) {
    try {
      (void)draw_instance(nlohmann::json::parse(unsatisfiable), rng, "tools[2].parameters");
      ADD_FAILURE() << unsatisfiable << " gave a value";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("tools[2].parameters: no value drawn"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace tokenscope
