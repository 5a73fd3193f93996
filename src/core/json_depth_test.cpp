#include "core/json_depth.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace tokenscope {
namespace {

std::string nested(std::size_t levels, char open = '[', char close = ']') {
  return std::string(levels, open) + std::string(levels, close);
}

TEST(JsonDepth, CountsArraysAndObjectsButNotBracketsInStrings) {
  EXPECT_EQ(json_too_deep_at(nested(3), 3), std::string_view::npos);
  EXPECT_EQ(json_too_deep_at(nested(4), 3), 3u);
  EXPECT_EQ(json_too_deep_at(R"({"a":{"b":[1]}})", 3), std::string_view::npos);
  EXPECT_EQ(json_too_deep_at(R"({"a":{"b":[{}]}})", 3), 11u);
  // Brackets in strings, escaped quotes and escaped backslashes before a quote.
  EXPECT_EQ(json_too_deep_at(R"(["[[[[{{{{", "\"[[[[", "\\", "]]]"])", 1), std::string_view::npos);
  EXPECT_EQ(json_too_deep_at(R"(["\\"[])", 1), 5u);
  // Siblings do not add up: depth is the deepest path, not the count.
  std::string wide = "[";
  for (int i = 0; i < 1000; ++i) wide += (i ? ",[[]]" : "[[]]");
  wide += "]";
  EXPECT_EQ(json_too_deep_at(wide, 3), std::string_view::npos);
  EXPECT_EQ(json_too_deep_at(wide, 2), 2u);
}

TEST(JsonDepth, TheDefaultBoundRefusesTheDocumentsThatCrashedCheckAndReport) {
  EXPECT_EQ(json_too_deep_at(nested(kMaxJsonDepth)), std::string_view::npos);
  EXPECT_EQ(json_too_deep_at(nested(200000)), kMaxJsonDepth);
  const std::string doc = "{\n\"server\":\n" + nested(200000, '{', '}') + "}";
  try {
    require_json_depth(doc, "RUN/run.json");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "RUN/run.json");
    EXPECT_EQ(e.line(), 3u);
    EXPECT_NE(e.problem().find("nested deeper than 256 levels"), std::string::npos) << e.problem();
  }
  // A line of a JSON Lines file: the line number is the file's.
  try {
    require_json_depth(nested(300), "requests.jsonl", 42);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.line(), 42u);
  }
  EXPECT_NO_THROW(require_json_depth(nested(10), "x.json"));
}

}  // namespace
}  // namespace tokenscope
