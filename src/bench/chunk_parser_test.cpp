#include "bench/chunk_parser.h"

#include <gtest/gtest.h>

namespace tokenscope::bench {
namespace {

TEST(ChunkParser, CompletionTextAndFinishReason) {
  ChunkParser p;
  const auto c = p.parse(
      R"({"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null}]})");
  EXPECT_TRUE(c.valid);
  EXPECT_TRUE(c.has_output);
  EXPECT_EQ(c.text, " the");
  EXPECT_EQ(c.id, "cmpl-1");
  EXPECT_EQ(c.finish_reason, "");
  const auto last = p.parse(R"({"choices":[{"index":0,"text":" end","finish_reason":"length"}]})");
  EXPECT_EQ(last.finish_reason, "length");
}

TEST(ChunkParser, RoleOnlyAndEmptyChunksAreNotOutput) {
  ChunkParser p;
  const auto role =
      p.parse(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})");
  EXPECT_TRUE(role.valid);
  EXPECT_FALSE(role.has_output);
  EXPECT_TRUE(role.role_only);
  const auto empty = p.parse(R"({"choices":[{"index":0,"delta":{"content":""}}]})");
  EXPECT_FALSE(empty.has_output);
  EXPECT_FALSE(empty.role_only);
  const auto content = p.parse(R"({"choices":[{"delta":{"role":"assistant","content":"Hi"}}]})");
  EXPECT_TRUE(content.has_output);
  EXPECT_FALSE(content.role_only);
}

TEST(ChunkParser, ReasoningAndToolCallsAreOutput) {
  ChunkParser p;
  EXPECT_TRUE(p.parse(R"({"choices":[{"delta":{"reasoning_content":"Let me think"}}]})").has_output);
  EXPECT_TRUE(p.parse(R"({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]})")
                  .has_output);
  EXPECT_FALSE(p.parse(R"({"choices":[{"delta":{"tool_calls":[]}}]})").has_output);
}

TEST(ChunkParser, UsageInBothForms) {
  ChunkParser p;
  const auto spec = p.parse(
      R"({"id":"x","choices":[],"usage":{"prompt_tokens":10,"total_tokens":14,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":8}}})");
  ASSERT_TRUE(spec.usage);
  EXPECT_EQ(spec.usage->prompt_tokens, 10);
  EXPECT_EQ(spec.usage->completion_tokens, 4);
  EXPECT_EQ(spec.usage->cached_tokens, 8);
  EXPECT_FALSE(spec.has_output);
  // Some servers put an empty choice beside the usage.
  const auto compat =
      p.parse(R"({"choices":[{"index":0,"delta":{}}],"usage":{"prompt_tokens":3,"completion_tokens":2}})");
  ASSERT_TRUE(compat.usage);
  EXPECT_EQ(compat.usage->cached_tokens, -1);
  EXPECT_FALSE(compat.has_output);
  EXPECT_FALSE(p.parse(R"({"choices":[{"text":"a"}],"usage":null})").usage);
}

TEST(ChunkParser, ErrorsAndGarbage) {
  ChunkParser p;
  const auto err =
      p.parse(R"({"error":{"message":"the server is shutting down","type":"server_error","code":503}})");
  EXPECT_TRUE(err.valid);
  EXPECT_TRUE(err.is_error);
  EXPECT_EQ(err.error_message, "the server is shutting down");
  EXPECT_FALSE(p.parse(R"({"id": "malformed-event", "choices": [)").valid);
  EXPECT_FALSE(p.parse("[1,2]").valid);
  EXPECT_FALSE(p.parse(R"({"id":"x"})").valid);
  EXPECT_EQ(p.parse(R"({"choices":[{"text":"a\"b\u00e9"}]})").text, "a\"b\xc3\xa9");
}

// llama.cpp's final chunk carries the server's own timings of the request.
TEST(ChunkParser, LlamaCppTimings) {
  ChunkParser p;
  const auto c = p.parse(
      R"({"choices":[{"text":"","index":0,"finish_reason":"length"}],"id":"cmpl-1","timings":{"prompt_n":63,)"
      R"("prompt_ms":4.01,"prompt_per_token_ms":0.06,"predicted_n":8,"predicted_ms":10.5,"predicted_per_second":761.9}})");
  ASSERT_TRUE(c.valid);
  ASSERT_TRUE(c.timings);
  EXPECT_DOUBLE_EQ(c.timings->prompt_ms, 4.01);
  EXPECT_EQ(c.timings->prompt_n, 63);
  EXPECT_DOUBLE_EQ(c.timings->predicted_ms, 10.5);
  EXPECT_EQ(c.timings->predicted_n, 8);
  EXPECT_FALSE(p.parse(R"({"choices":[{"text":"a"}]})").timings);
}

}  // namespace
}  // namespace tokenscope::bench
