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

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"

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
        schema.emplace(g["schema"], what);
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
}

}  // namespace
}  // namespace tokenscope
