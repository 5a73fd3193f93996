#include "core/yaml_fields.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "core/error.h"

namespace tokenscope::yaml {
namespace {

using ::testing::HasSubstr;

// The message of what f throws, "" when it throws nothing.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(YamlFields, MalformedYamlNamesItsLine) {
  const std::string m = error_of([] { load("a: 1\nb: [1, 2\n", "f.yaml"); });
  EXPECT_THAT(m, HasSubstr("f.yaml:"));
  EXPECT_THAT(m, HasSubstr("malformed YAML"));
  EXPECT_EQ(load("a: 1\n", "f.yaml")["a"].as<int>(), 1);
}

TEST(YamlFields, NestingPastYamlCppsBoundIsSaidToBeThat) {
  // yaml-cpp stops at 500 levels with "bad file" as its message.
  const std::string m = error_of([] { load(std::string(5000, '[') + std::string(5000, ']'), "deep.yaml"); });
  EXPECT_THAT(m, HasSubstr("deep.yaml:1: YAML nested too deep: yaml-cpp stops at 500 levels"));
  EXPECT_NO_THROW(load(std::string(100, '[') + std::string(100, ']'), "ok.yaml"));
}

TEST(YamlFields, NumbersInRangeOrAMessageWithFileLineFieldAndWhatWasExpected) {
  const Fields f("f.yaml");
  const YAML::Node root = load("x: 0.5\ny: -1\nz: lots\nw: [1]\ni: 3\nh: 2.5\n", "f.yaml");
  constexpr double kInf = std::numeric_limits<double>::infinity();
  EXPECT_DOUBLE_EQ(f.number(root["x"], "x", 0, 1, false, "a share"), 0.5);
  EXPECT_EQ(error_of([&] { f.number(root["y"], "y", 0, kInf, true, "a positive number"); }),
            "f.yaml:2: field 'y': expected a positive number, got -1");
  EXPECT_EQ(error_of([&] { f.number(root["z"], "z", 0, 1, false, "a number in [0, 1]"); }),
            "f.yaml:3: field 'z': expected a number in [0, 1]");
  EXPECT_EQ(error_of([&] { f.number(root["w"], "w", 0, 1, false, "a number in [0, 1]"); }),
            "f.yaml:4: field 'w': expected a number in [0, 1]");
  // An open lower bound refuses the bound itself.
  const YAML::Node zero = load("0", "f.yaml");
  EXPECT_THAT(error_of([&] { f.number(zero, "n", 0, 1, true, "a number > 0"); }), HasSubstr("got 0"));
  EXPECT_DOUBLE_EQ(f.number(zero, "n", 0, 1, false, "a number >= 0"), 0.0);
  EXPECT_EQ(f.whole(root["i"], "i", 1, 10), 3u);
  EXPECT_EQ(error_of([&] { f.whole(root["h"], "h", 1, 10); }),
            "f.yaml:6: field 'h': expected a whole number in [1, 10]");
  EXPECT_THAT(error_of([&] { f.whole(root["i"], "i", 1, 2); }), HasSubstr("got 3"));
}

TEST(YamlFields, OnlyKnownKeysAndNonEmptyStrings) {
  const Fields f("f.yaml");
  const YAML::Node root = load("a:\n  p: 1\n  q: 2\ns: ''\nt: name\n", "f.yaml");
  f.only_keys(root["a"], "a", {"p", "q"});
  EXPECT_EQ(error_of([&] { f.only_keys(root["a"], "a", {"p"}); }),
            "f.yaml:3: field 'a.q': unknown key (expected one of: p)");
  EXPECT_EQ(error_of([&] { f.only_keys(root["t"], "t", {"p"}); }), "f.yaml:5: field 't': expected a mapping");
  EXPECT_EQ(error_of([&] { f.string(root["s"], "s"); }), "f.yaml:4: field 's': expected a non-empty string");
  EXPECT_EQ(f.string(root["t"], "t"), "name");
}

}  // namespace
}  // namespace tokenscope::yaml
