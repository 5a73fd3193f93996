#include "analyze/thresholds.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"

namespace tokenscope::analyze {
namespace {

using ::testing::HasSubstr;

std::string error_of(std::string_view yaml) {
  try {
    parse_thresholds(yaml, "t.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Thresholds, EmptyFileGivesTheDefaults) {
  const Thresholds t = parse_thresholds("", "t.yaml");
  EXPECT_EQ(t.confidence, 0.95);
  EXPECT_EQ(t.tail_tolerance, 0.10);
  EXPECT_TRUE(t.slos.empty());
}

TEST(Thresholds, SectionsAndTopLevelKeysAreRead) {
  const Thresholds t = parse_thresholds(
      "confidence: 0.99\n"
      "tail:\n"
      "  tolerance: 0.2\n"
      "batching: {cap_share_max: 0.7}\n"
      "slo:\n"
      "  attainment_tolerance: 0.03\n"
      "  classes:\n"
      "    chat: {ttft_ms: 300, tpot_ms: 40, percentile: 90}\n"
      "    default: {e2e_ms: 9000}\n",
      "t.yaml");
  EXPECT_EQ(t.confidence, 0.99);
  EXPECT_EQ(t.tail_tolerance, 0.2);
  EXPECT_EQ(t.cap_share_max, 0.7);
  EXPECT_EQ(t.attainment_tolerance, 0.03);
  ASSERT_EQ(t.slos.size(), 2u);
  EXPECT_EQ(t.slos.at("chat").ttft_ms, 300);
  EXPECT_EQ(t.slos.at("chat").tpot_ms, 40);
  EXPECT_EQ(t.slos.at("chat").percentile, 90);
  EXPECT_FALSE(t.slos.at("chat").e2e_ms);
  EXPECT_EQ(t.slos.at("").e2e_ms, 9000);  // "default" is the class of requests naming none
  EXPECT_EQ(t.slos.at("").percentile, 99);
}

TEST(Thresholds, BadInputNamesTheFileLineAndKey) {
  EXPECT_THAT(error_of("tail:\n  tolerence: 0.2\n"),
              HasSubstr("t.yaml:2: field 'tail.tolerence': unknown key"));
  EXPECT_THAT(error_of("confidence: 1.5\n"),
              HasSubstr("t.yaml:1: field 'confidence': expected a number in [0.5"));
  EXPECT_THAT(error_of("tail:\n  tolerance: lots\n"), HasSubstr("field 'tail.tolerance': expected a number"));
  EXPECT_THAT(error_of("nonsense: 1\n"), HasSubstr("field 'nonsense': unknown key"));
  EXPECT_THAT(error_of("slo:\n  classes:\n    chat: {ttft: 3}\n"), HasSubstr("slo.classes.chat.ttft"));
  EXPECT_THAT(error_of("slo:\n  classes:\n    chat: {}\n"), HasSubstr("expected at least one of"));
  EXPECT_THAT(error_of("[1, 2]\n"), HasSubstr("expected a mapping"));
  EXPECT_THAT(error_of("tail: {tolerance: [1\n"), HasSubstr("malformed YAML"));
  // Keys that are not text (found by fuzz_thresholds_yaml): an error, not a crash.
  EXPECT_THAT(error_of("[a, b]: 1\n"), HasSubstr("expected a mapping of keys (text) to numbers"));
  EXPECT_THAT(error_of("tail:\n  {x: 1}: 2\n"), HasSubstr("expected a mapping of keys (text) to numbers"));
  EXPECT_THAT(error_of("slo:\n  classes:\n    [c]: {ttft_ms: 1}\n"), HasSubstr("keys (text)"));
}

TEST(Thresholds, ThePrintedDefaultsParseBackToTheDefaults) {
  Thresholds changed;
  changed.tail_tolerance = 0.25;
  changed.idle_backlog_max = 0.2;
  const Thresholds back = parse_thresholds(thresholds_yaml(changed), "printed.yaml");
  for (const auto& k : threshold_keys())
    EXPECT_EQ(threshold_value(back, k.key), threshold_value(changed, k.key)) << k.key;
  EXPECT_FALSE(threshold_value(changed, "no.such").has_value());
}

}  // namespace
}  // namespace tokenscope::analyze
