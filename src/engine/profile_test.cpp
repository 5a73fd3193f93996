#include "engine/profile.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/engine_options.h"

namespace tokenscope::engine {
namespace {

Profile sample_profile() {
  Profile p;
  p.created = "2026-12-05T07:00:00Z";
  p.server = {{"url", "http://127.0.0.1:8080"}, {"engine", "llama.cpp"}, {"model", "tiny \"q\" model"}};
  p.coef = {0.5e-3, 180e-6, 1.5e-3, 1.25e-3 * 1e-3 * 1000, 0.43e-9, 0.8e-9};
  p.stderr_ = {0.01e-3, 2e-6, 0.1e-3, 0.01e-3, 0.02e-9, 0.05e-9};
  p.max_num_seqs = 4;
  p.max_num_batched_tokens = 2048;
  p.kv_capacity_tokens = 8192;
  p.found = {{"max_num_seqs", "the server's GET /props total_slots"}};
  p.fit.observations = 1234;
  p.fit.points = 40;
  p.fit.r2 = 0.998;
  p.fit.rmse_ms = 0.25;
  p.fit.mape = 0.031;
  p.fit.p90_abs_rel_error = 0.07;
  p.ranges = {2048, 1536, 8, 2100};
  p.notes = {"no chunked prefill was seen"};
  return p;
}

TEST(Profile, RoundTripsThroughItsYaml) {
  const Profile p = sample_profile();
  const Profile q = parse_profile(profile_yaml(p), "p.yaml");
  for (std::size_t i = 0; i < kProfileTerms; ++i) {
    EXPECT_NEAR(q.coef[i], p.coef[i], 1e-15 + 1e-12 * p.coef[i]) << profile_terms()[i].key;
    EXPECT_NEAR(q.stderr_[i], p.stderr_[i], 1e-15 + 1e-12 * p.stderr_[i]) << profile_terms()[i].key;
  }
  EXPECT_EQ(q.server, p.server);
  EXPECT_EQ(q.max_num_seqs, p.max_num_seqs);
  EXPECT_EQ(q.max_num_batched_tokens, p.max_num_batched_tokens);
  EXPECT_EQ(q.kv_capacity_tokens, p.kv_capacity_tokens);
  EXPECT_EQ(q.found, p.found);
  EXPECT_EQ(q.fit.observations, 1234u);
  EXPECT_DOUBLE_EQ(q.fit.mape, 0.031);
  EXPECT_EQ(q.ranges.max_batch, 8u);
  EXPECT_EQ(q.notes, p.notes);
  EXPECT_EQ(to_json(q), to_json(p));
}

TEST(Profile, PlainNumbersAndNullLimitsAreRead) {
  const Profile q = parse_profile(
      "tokenscope_profile: 1\n"
      "cost: {step_overhead_ms: 1, prefill_token_us: 2, prefill_seq_ms: 0, decode_seq_us: 3,\n"
      "       prefill_attention_ns: 0, decode_context_ns: 4}\n"
      "scheduler: {max_num_seqs: null}\n",
      "p.yaml");
  EXPECT_DOUBLE_EQ(q.coef[0], 1e-3);
  EXPECT_DOUBLE_EQ(q.coef[1], 2e-6);
  EXPECT_DOUBLE_EQ(q.coef[3], 3e-6);
  EXPECT_DOUBLE_EQ(q.coef[5], 4e-9);
  EXPECT_FALSE(q.max_num_seqs);
}

std::string profile_error(const std::string& text) {
  try {
    parse_profile(text, "p.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Profile, BadFilesNameTheLineAndTheField) {
  const std::string cost =
      "cost: {step_overhead_ms: 1, prefill_token_us: 2, prefill_seq_ms: 0, decode_seq_us: 3, "
      "prefill_attention_ns: 0, decode_context_ns: 4}\n";
  EXPECT_NE(profile_error("- a\n- b\n").find("expected a mapping"), std::string::npos);
  EXPECT_NE(profile_error(cost).find("tokenscope_profile"), std::string::npos);
  EXPECT_NE(profile_error("tokenscope_profile: 2\n" + cost).find("version 2 is not read"), std::string::npos);
  EXPECT_NE(profile_error("tokenscope_profile: 1\n").find("cost"), std::string::npos);
  const std::string missing = profile_error(
      "tokenscope_profile: 1\ncost: {step_overhead_ms: 1, prefill_token_us: 2, prefill_seq_ms: 0, "
      "decode_seq_us: 3, prefill_attention_ns: 0}\n");
  EXPECT_NE(missing.find("cost.decode_context_ns"), std::string::npos) << missing;
  const std::string negative = profile_error(
      "tokenscope_profile: 1\ncost:\n  step_overhead_ms: 1\n  prefill_token_us: -2\n  prefill_seq_ms: 0\n"
      "  decode_seq_us: 3\n  prefill_attention_ns: 0\n  decode_context_ns: 4\n");
  EXPECT_NE(negative.find(":4:"), std::string::npos) << negative;
  EXPECT_NE(negative.find("cost.prefill_token_us"), std::string::npos) << negative;
  EXPECT_NE(profile_error("tokenscope_profile: 1\n" + cost + "colour: blue\n").find("unknown key"),
            std::string::npos);
  EXPECT_NE(profile_error("tokenscope_profile: 1\n" + cost + "scheduler: {max_num_seqs: 0}\n")
                .find("scheduler.max_num_seqs"),
            std::string::npos);
  EXPECT_NE(profile_error("tokenscope_profile: [1\n").find("malformed YAML"), std::string::npos);
  // Costs past any server (they would overflow the simulator's clock).
  const std::string huge = profile_error(
      "tokenscope_profile: 1\ncost: {step_overhead_ms: 1, prefill_token_us: 2, prefill_seq_ms: 0, "
      "decode_seq_us: 3, prefill_attention_ns: 1e12, decode_context_ns: 4}\n");
  EXPECT_NE(huge.find("cost.prefill_attention_ns"), std::string::npos) << huge;
  EXPECT_NE(huge.find("[0, 1e+09]"), std::string::npos) << huge;
  // A key that is not a name.
  const std::string key = profile_error("tokenscope_profile: 1\nserver: {? [a, b] : c}\n" + cost);
  EXPECT_NE(key.find("server"), std::string::npos) << key;
}

TEST(Profile, TheCostIsLinearInTheStepsShape) {
  const Profile p = sample_profile();
  const ProfileCostModel m(p, 0.0);
  StepShape s;
  s.num_seqs = 5;
  s.prefill_tokens = 300;
  s.decode_tokens = 3;
  s.logit_tokens = 5;
  s.prefill_attention_pairs = 45150;
  s.decode_attention_pairs = 1200;
  const auto x = step_features(s);
  EXPECT_EQ(x[0], 1.0);
  EXPECT_EQ(x[2], 2.0);  // two sequences in prefill
  double expected = 0;
  for (std::size_t i = 0; i < kProfileTerms; ++i) expected += p.coef[i] * x[i];
  EXPECT_NEAR(m.step_cost(s).total_s(), expected, 1e-15);
  EXPECT_EQ(m.step_cost(StepShape{}).total_s(), 0.0);
}

TEST(Profile, ADecodeCurveIsLinearBetweenItsPointsAndNeverFallsBeyondTheLast) {
  const std::vector<CurvePoint> c = {{1, 1.5e-3, 0}, {2, 4.0e-3, 0}, {4, 5.0e-3, 0}, {8, 4.0e-3, 0}};
  EXPECT_DOUBLE_EQ(curve_seconds(c, 1), 1.5e-3);
  EXPECT_DOUBLE_EQ(curve_seconds(c, 2), 4.0e-3);
  EXPECT_DOUBLE_EQ(curve_seconds(c, 3), 4.5e-3);
  EXPECT_DOUBLE_EQ(curve_seconds(c, 6), 4.5e-3);
  // Below the first point, its value.
  EXPECT_DOUBLE_EQ(curve_seconds(c, 0), 1.5e-3);
  EXPECT_DOUBLE_EQ(curve_seconds({{2, 3e-3, 0}, {4, 4e-3, 0}}, 0), 3e-3);
  // Beyond the last: its last segment fell, so it stays flat.
  EXPECT_DOUBLE_EQ(curve_seconds(c, 16), 4.0e-3);
  EXPECT_DOUBLE_EQ(curve_seconds({{1, 1e-3, 0}, {2, 3e-3, 0}}, 4), 7e-3);
  EXPECT_DOUBLE_EQ(curve_seconds({{4, 2e-3, 0}}, 9), 2e-3);
  EXPECT_DOUBLE_EQ(curve_seconds({}, 3), 0.0);
}

TEST(Profile, ADecodeCurvePricesTheStepInPlaceOfTwoTermsAndRoundTrips) {
  Profile p = sample_profile();
  p.coef[0] = p.coef[3] = 0;
  p.stderr_[0] = p.stderr_[3] = 0;
  p.decode_curve = {{0, 0.4e-3, 0.1e-3}, {1, 1.3e-3, 0.02e-3}, {2, 4.0e-3, 0.2e-3}, {4, 5.0e-3, 0.25e-3}};
  const Profile q = parse_profile(profile_yaml(p), "p.yaml");
  ASSERT_EQ(q.decode_curve.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(q.decode_curve[i].seqs, p.decode_curve[i].seqs);
    EXPECT_NEAR(q.decode_curve[i].seconds, p.decode_curve[i].seconds, 1e-15);
    EXPECT_NEAR(q.decode_curve[i].stderr_, p.decode_curve[i].stderr_, 1e-15);
  }
  EXPECT_EQ(to_json(q), to_json(p));
  const ProfileCostModel m(q, 0.0);
  StepShape s;
  s.num_seqs = 5;
  s.prefill_tokens = 300;
  s.decode_tokens = 3;  // between the points at 2 and 4
  s.prefill_attention_pairs = 45150;
  s.decode_attention_pairs = 1200;
  const auto x = step_features(s);
  const double expected = 4.5e-3 + q.coef[1] * x[1] + q.coef[2] * x[2] + q.coef[4] * x[4] + q.coef[5] * x[5];
  EXPECT_NEAR(m.step_cost(s).total_s(), expected, 1e-15);
  // A prefill-only step costs the curve at 0 decodes; an empty step nothing.
  StepShape pre;
  pre.num_seqs = 1;
  pre.prefill_tokens = 10;
  EXPECT_NEAR(m.step_cost(pre).total_s(), 0.4e-3 + q.coef[1] * 10 + q.coef[2], 1e-15);
  EXPECT_EQ(m.step_cost(StepShape{}).total_s(), 0.0);
}

TEST(Profile, ABadDecodeCurveNamesItsPoint) {
  const std::string head =
      "tokenscope_profile: 1\ncost:\n  step_overhead_ms: 0\n  prefill_token_us: 2\n  prefill_seq_ms: 0\n"
      "  decode_seq_us: 0\n  prefill_attention_ns: 0\n  decode_context_ns: 4\n";
  EXPECT_EQ(profile_error(head + "  decode_curve: [{seqs: 1, ms: 1}, {seqs: 2, ms: 3}]\n"), "");
  const std::string order =
      profile_error(head + "  decode_curve:\n    - {seqs: 2, ms: 1}\n    - {seqs: 2, ms: 3}\n");
  EXPECT_NE(order.find("cost.decode_curve[1].seqs"), std::string::npos) << order;
  EXPECT_NE(order.find(":11:"), std::string::npos) << order;
  EXPECT_NE(order.find("increasing"), std::string::npos) << order;
  const std::string ms = profile_error(head + "  decode_curve: [{seqs: 1, ms: -1}]\n");
  EXPECT_NE(ms.find("cost.decode_curve[0].ms"), std::string::npos) << ms;
  EXPECT_NE(profile_error(head + "  decode_curve: []\n").find("cost.decode_curve"), std::string::npos);
  EXPECT_NE(profile_error(head + "  decode_curve: [{seqs: 1}]\n").find("cost.decode_curve[0].ms"),
            std::string::npos);
  EXPECT_NE(profile_error(head + "  decode_curve: [{seqs: 1, ms: 1, slope: 2}]\n").find("unknown key"),
            std::string::npos);
  // Beyond its last point the curve follows its last segment: that slope is
  // bounded as decode_seq_us is (1 s per sequence), or a hostile file would
  // overflow the simulator's clock.
  const std::string steep =
      profile_error(head + "  decode_curve: [{seqs: 0, ms: 0}, {seqs: 1, ms: 60000}]\n");
  EXPECT_NE(steep.find("cost.decode_curve[1].ms"), std::string::npos) << steep;
  EXPECT_NE(steep.find("at most 1000 ms per decoding sequence"), std::string::npos) << steep;
  EXPECT_EQ(profile_error(head + "  decode_curve: [{seqs: 0, ms: 59000}, {seqs: 1, ms: 60000}]\n"), "");
  // The curve replaces the per-step and per-decoding-sequence terms: both 0.
  std::string both = head;
  both.replace(both.find("decode_seq_us: 0"), 16, "decode_seq_us: 5");
  const std::string twice = profile_error(both + "  decode_curve: [{seqs: 1, ms: 1}]\n");
  EXPECT_NE(twice.find("cost.decode_seq_us"), std::string::npos) << twice;
  EXPECT_NE(twice.find("expected 0 with a decode_curve"), std::string::npos) << twice;
}

TEST(Profile, EngineSettingsTakeTheProfilesLimitsUnlessOptionsAreGiven) {
  const std::string path = testing::TempDir() + "/tokenscope-profile-test.yaml";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    const std::string text = profile_yaml(sample_profile());
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  EngineOptions o;
  o.profile_file = path;
  EngineSettings s = engine_settings(o);
  ASSERT_TRUE(s.profile);
  EXPECT_EQ(s.max_num_seqs, 4u);
  EXPECT_EQ(s.max_num_batched_tokens, 2048u);
  EXPECT_EQ(s.num_gpu_blocks_override, 8192u / 16u);
  o.max_num_seqs_given = true;
  o.engine.max_num_seqs = 7;
  EXPECT_EQ(engine_settings(o).max_num_seqs, 7u);
  o.fixed_step_ms = 1.0;
  EXPECT_THROW(engine_settings(o), UsageError);
  o.fixed_step_ms = -1.0;
  o.profile_file = path + ".missing";
  EXPECT_THROW(engine_settings(o), UsageError);
}

}  // namespace
}  // namespace tokenscope::engine
