#include "serve/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

namespace tokenscope::serve {
namespace {

using json = nlohmann::json;

TEST(SimulatedLogprobs, DeterministicPerTokenAndScaledByTheShift) {
  const LogprobModel base, shifted{0.5, 0.5};
  const std::uint64_t key = logprob_key(7, std::nullopt, 0, 3);
  const double lp = simulated_logprob(base, key, 4, 1234);
  EXPECT_LE(lp, 0.0);
  EXPECT_EQ(simulated_logprob(base, key, 4, 1234), lp);
  // The same draw E, scaled by mean + shift: 1.0 against 0.5 (exact).
  EXPECT_EQ(simulated_logprob(shifted, key, 4, 1234), 2 * lp);
  EXPECT_NE(simulated_logprob(base, key, 5, 1234), lp);  // another position
  EXPECT_NE(simulated_logprob(base, key, 4, 1235), lp);  // another token
  // Keys: the request's seed (and choice) when it sent one, else the engine id.
  EXPECT_EQ(logprob_key(7, 42, 0, 3), logprob_key(7, 42, 0, 99));
  EXPECT_NE(logprob_key(7, 42, 0, 3), logprob_key(7, 42, 1, 3));
  EXPECT_NE(logprob_key(7, std::nullopt, 0, 3), logprob_key(7, std::nullopt, 0, 4));
  EXPECT_NE(logprob_key(7, std::nullopt, 0, 3), logprob_key(8, std::nullopt, 0, 3));
}

// -logprob is exponential with mean mean + shift: over 200,000 tokens the
// sample mean is within 1% (the standard error is 0.22%) and half of the
// values lie above the median -(mean + shift) ln 2.
TEST(SimulatedLogprobs, NegativeLogprobIsExponentialWithTheModelsMean) {
  for (const LogprobModel m : {LogprobModel{}, LogprobModel{0.5, 0.25}}) {
    const double mean = m.mean_nats + m.shift_nats;
    double sum = 0;
    int above_median = 0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
      const double lp =
          simulated_logprob(m, logprob_key(1, std::nullopt, 0, static_cast<std::uint64_t>(i / 100)),
                            static_cast<std::uint32_t>(i % 100), static_cast<tokenizers::TokenId>(i * 31));
      sum += -lp;
      above_median += lp > -mean * std::log(2.0) ? 1 : 0;
    }
    EXPECT_NEAR(sum / n, mean, 0.01 * mean);
    EXPECT_NEAR(above_median / static_cast<double>(n), 0.5, 0.005);
  }
}

TEST(SimulatedLogprobs, TopAlternativesShareTheRestAndComeMostLikelyFirst) {
  // p = 0.8: the alternatives get 0.1, 0.05, 0.025; the sampled token leads.
  const TokenLogprob sampled{100, std::log(0.8)};
  const auto top = simulated_top_logprobs(sampled, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 100u);
  EXPECT_EQ(top[1].token, 100u + 7919u);
  EXPECT_NEAR(std::exp(top[1].logprob), 0.1, 1e-12);
  EXPECT_NEAR(std::exp(top[2].logprob), 0.05, 1e-12);
  // p = 0.1: the alternatives (0.45, 0.225, 0.1125, ...) come before it.
  const auto unsure = simulated_top_logprobs({100, std::log(0.1)}, 4);
  EXPECT_EQ(unsure[0].token, 100u + 7919u);
  EXPECT_EQ(unsure[2].token, 100u + 3 * 7919u);
  EXPECT_EQ(unsure[3].token, 100u);
  EXPECT_TRUE(simulated_top_logprobs(sampled, 0).empty());
  // p = 1: the alternatives get log 0, written as vLLM writes it.
  EXPECT_EQ(simulated_top_logprobs({5, 0.0}, 2)[1].logprob, -9999.0);
}

TEST(SimulatedLogprobs, JsonInBothApisForms) {
  const std::vector<TokenLogprob> tokens = {{tokenizers::spaced_word_id("the"), -0.25},
                                            {tokenizers::spaced_word_id("cat"), -1.5}};
  const auto c = json::parse(logprobs_json(Api::kCompletions, tokens, 1, 10));
  EXPECT_EQ(c["tokens"], json({" the", " cat"}));
  EXPECT_EQ(c["token_logprobs"], json({-0.25, -1.5}));
  EXPECT_EQ(c["text_offset"], json({10, 14}));
  ASSERT_EQ(c["top_logprobs"].size(), 2u);
  EXPECT_EQ(c["top_logprobs"][0][" the"], -0.25);
  const auto chat = json::parse(logprobs_json(Api::kChat, tokens, 2, 0));
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_EQ(chat["content"][1]["token"], " cat");
  EXPECT_EQ(chat["content"][1]["logprob"], -1.5);
  EXPECT_EQ(chat["content"][1]["bytes"], json({32, 99, 97, 116}));
  EXPECT_EQ(chat["content"][1]["top_logprobs"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["top_logprobs"][0]["token"], " the");
}

}  // namespace
}  // namespace tokenscope::serve
