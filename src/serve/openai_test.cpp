#include "serve/openai.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tokenscope::serve {
namespace {

using nlohmann::json;

const ParseContext kCtx{{"llama-3-8b", "alias"}, 8192, 16};

GenerationRequest ok(Api api, const std::string& body) {
  auto r = parse_generation_request(api, body, kCtx);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->message;
  return std::get<GenerationRequest>(r);
}

ApiError err(Api api, const std::string& body) {
  auto r = parse_generation_request(api, body, kCtx);
  if (!std::holds_alternative<ApiError>(r)) {
    ADD_FAILURE() << "accepted " << body;
    return {};
  }
  return std::get<ApiError>(r);
}

TEST(OpenAiParse, CompletionPromptsInEveryForm) {
  EXPECT_EQ(ok(Api::kCompletions, R"({"prompt": "hello world"})").prompts.size(), 1u);
  EXPECT_EQ(ok(Api::kCompletions, R"({"prompt": ["a", "b", "c"]})").prompts.size(), 3u);
  const auto ids = ok(Api::kCompletions, R"({"prompt": [1, 2, 3]})");
  EXPECT_EQ(ids.prompts, (std::vector<std::vector<tokenizers::TokenId>>{{1, 2, 3}}));
  EXPECT_EQ(ok(Api::kCompletions, R"({"prompt": [[1, 2], [3]]})").prompts.size(), 2u);
  const auto d = ok(Api::kCompletions, R"({"prompt": "x"})");
  EXPECT_EQ(d.max_tokens, 16u);  // OpenAI's default for completions
  EXPECT_EQ(d.model, "llama-3-8b");
  EXPECT_FALSE(d.stream);
}

TEST(OpenAiParse, ChatAppliesTheTemplateAndReadsOptions) {
  const auto r = ok(Api::kChat, R"({"model": "alias", "messages": [{"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_completion_tokens": 40, "stream": true,
      "stream_options": {"include_usage": true}, "ignore_eos": true, "min_tokens": 3, "temperature": 0.5,
      "seed": 7, "stop": ["\n", "end"], "n": 1, "priority": -2})");
  EXPECT_EQ(r.prompts[0], tokenizers::tokenize("<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n"));
  EXPECT_EQ(r.model, "alias");
  EXPECT_EQ(r.max_tokens, 40u);
  EXPECT_TRUE(r.stream && r.include_usage && r.ignore_eos);
  EXPECT_EQ(r.min_tokens, 3u);
  EXPECT_EQ(r.seed, std::optional<std::uint64_t>(7));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "end"}));
  EXPECT_EQ(r.priority, -2);
  // Without max_tokens a chat request may use the rest of the context.
  EXPECT_EQ(ok(Api::kChat, R"({"messages": [{"role": "user", "content": "x"}]})").max_tokens,
            8192u - tokenizers::tokenize("<|user|>\nx\n<|assistant|>\n").size());
}

TEST(OpenAiParse, ErrorsNameTheField) {
  struct Case {
    Api api;
    std::string body;
    int status;
    std::string param;
    std::string needle;
  };
  const Case cases[] = {
      {Api::kCompletions, "{not json", 400, "", "not valid JSON"},
      {Api::kCompletions, "[1]", 400, "", "JSON object"},
      {Api::kCompletions, "{}", 400, "prompt", "'prompt' is required"},
      {Api::kCompletions, R"({"prompt": 5})", 400, "prompt", "got a number"},
      {Api::kCompletions, R"({"prompt": ""})", 400, "prompt", "must not be empty"},
      {Api::kCompletions, R"({"prompt": [-1]})", 400, "prompt", "outside the vocabulary"},
      {Api::kCompletions, R"({"prompt": "x", "model": "gpt-4"})", 404, "model", "`gpt-4` does not exist"},
      {Api::kCompletions, R"({"prompt": "x", "n": 2})", 400, "n", "only n = 1"},
      {Api::kCompletions, R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens", "in [1, 1073741824]"},
      {Api::kCompletions, R"({"prompt": "x", "max_tokens": "ten"})", 400, "max_tokens", "must be an integer"},
      {Api::kCompletions, R"({"prompt": "x", "max_tokens": 8192})", 400, "prompt",
       "maximum context length is 8192"},
      {Api::kCompletions, R"({"prompt": "x", "stream_options": {"include_usage": true}})", 400,
       "stream_options", "only allowed with"},
      {Api::kCompletions, R"({"prompt": "x", "temperature": 3})", 400, "temperature", "[0, 2]"},
      {Api::kCompletions, R"({"prompt": "x", "stop": [1]})", 400, "stop", "list of strings"},
      {Api::kCompletions, R"({"prompt": "x", "echo": true})", 400, "echo", "not supported"},
      {Api::kCompletions, R"({"prompt": "x", "logprobs": 21})", 400, "logprobs", "in [0, 20]"},
      {Api::kCompletions, R"({"prompt": "x", "logprobs": true})", 400, "logprobs", "must be an integer"},
      {Api::kCompletions, R"({"prompt": "x", "top_logprobs": 2})", 400, "top_logprobs", "use 'logprobs': N"},
      {Api::kChat, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", 400,
       "top_logprobs", "needs \"logprobs\": true"},
      {Api::kChat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})", 400, "logprobs",
       "must be a boolean"},
      {Api::kCompletions, R"({"prompt": "x", "max_tokens": 5, "min_tokens": 9})", 400, "min_tokens",
       "must not exceed"},
      {Api::kChat, R"({"messages": []})", 400, "messages", "non-empty list"},
      {Api::kChat, R"({"messages": [{"content": "x"}]})", 400, "messages[0].role", "non-empty string"},
      {Api::kChat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
       "messages[0].content", "an image part needs"},
      // A part whose type is not a string threw out of the parser and ended
      // the server (found by scripts/fuzz-depth.sh).
      {Api::kChat, R"({"messages": [{"role": "user", "content": [{"type": 2, "text": "hi"}]}]})", 400,
       "messages[0].content", "content parts must be text"},
      {Api::kChat, R"({"messages": [{"role": "user", "content": [{"text": "hi"}]}]})", 400,
       "messages[0].content", "content parts must be text"},
  };
  for (const auto& c : cases) {
    const ApiError e = err(c.api, c.body);
    EXPECT_EQ(e.status, c.status) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_NE(e.message.find(c.needle), std::string::npos) << c.body << " -> " << e.message;
  }
  std::string long_prompt(9000 * 2, 'a');
  for (std::size_t i = 0; i < long_prompt.size(); i += 2) long_prompt[i] = ' ';
  EXPECT_NE(err(Api::kCompletions, json{{"prompt", long_prompt}}.dump()).message.find("9000 input tokens"),
            std::string::npos);
}

// Tools and response formats: what is accepted, how it is rendered into the
// prompt, and every refusal naming its field.
TEST(OpenAiParse, ToolsToolMessagesAndResponseFormats) {
  const std::string tool =
      R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
          "properties": {"city": {"type": "string"}}, "required": ["city"]}}})";
  const auto r =
      ok(Api::kChat, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [)" + tool +
                         R"(], "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                                        "parallel_tool_calls": false})");
  ASSERT_EQ(r.tools.tools.size(), 1u);
  EXPECT_EQ(r.tools.tools[0].name, "get_weather");
  EXPECT_EQ(r.tools.choice, ToolRequest::Choice::kNamed);
  EXPECT_FALSE(r.tools.parallel);
  EXPECT_TRUE(r.tools.tools[0].checker->valid(json{{"city", "Oslo"}}));
  EXPECT_FALSE(r.tools.tools[0].checker->valid(json{{"town", "Oslo"}}));
  // The tools cost prompt tokens (rendered first, as chat templates do).
  const auto plain = ok(Api::kChat, R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_GT(r.prompts[0].size(), plain.prompts[0].size() + 10);
  // An assistant's tool call is rendered as the model wrote it, and counts a round until the next user turn.
  const std::string call =
      R"({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]})";
  const auto turn = ok(Api::kChat, R"({"messages": [{"role": "user", "content": "hi"}, )" + call +
                                       R"(, {"role": "tool", "tool_call_id": "c1", "content": "4 C"}]})");
  EXPECT_EQ(turn.tools.rounds, 1u);
  const std::string templated =
      apply_chat_template({{"user", "hi"},
                           {"assistant", render_tool_call("get_weather", R"({"city":"Oslo"})")},
                           {"tool", "4 C"}});
  EXPECT_EQ(turn.prompts[0], tokenizers::tokenize(templated));
  const auto later = ok(Api::kChat, R"({"messages": [{"role": "user", "content": "hi"}, )" + call + R"(, )" +
                                        call + R"(, {"role": "user", "content": "and now?"}]})");
  EXPECT_EQ(later.tools.rounds, 0u);
  const auto js = ok(Api::kChat, R"({"messages": [{"role": "user", "content": "hi"}], "response_format":
      {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer"}}}})");
  EXPECT_EQ(js.format.kind, OutputFormat::Kind::kJsonSchema);
  EXPECT_EQ(
      ok(Api::kCompletions, R"({"prompt": "x", "response_format": {"type": "json_object"}})").format.kind,
      OutputFormat::Kind::kJsonObject);

  struct Case {
    Api api;
    std::string body;
    std::string param;
    std::string needle;
  };
  const std::string m = R"("messages": [{"role": "user", "content": "hi"}])";
  const Case cases[] = {
      {Api::kCompletions, R"({"prompt": "x", "tools": [)" + tool + "]}", "tools", "belongs to /v1/chat"},
      {Api::kResponses, R"({"input": "x", "tools": [)" + tool + "]}", "tools", "not simulated"},
      {Api::kChat, "{" + m + R"(, "tools": {}})", "tools", "must be a list"},
      {Api::kChat, "{" + m + R"(, "tools": [{"type": "retrieval"}]})", "tools[0].type", "\"function\""},
      {Api::kChat, "{" + m + R"(, "tools": [{"function": {"name": "a b"}}]})", "tools[0].function.name",
       "1 to 64 characters"},
      {Api::kChat, "{" + m + R"(, "tools": [{"function": {"name": "a", "parameters": {"type": 7}}}]})",
       "tools[0].function.parameters", "not a JSON Schema"},
      {Api::kChat, "{" + m + R"(, "tools": [{"function": {"name": "a", "parameters": 7}}]})",
       "tools[0].function.parameters", "must be a JSON schema"},
      {Api::kChat, "{" + m + R"(, "tools": [{"function": {"name": "a"}}, {"function": {"name": "a"}}]})",
       "tools[1].function.name", "two tools are named 'a'"},
      {Api::kChat, "{" + m + R"(, "tools": [)" + tool + R"(], "tool_choice": "sometimes"})", "tool_choice",
       "must be \"auto\""},
      {Api::kChat, "{" + m + R"(, "tools": [)" + tool + R"(], "tool_choice": {"type": "function", "function":
          {"name": "other"}}})",
       "tool_choice", "not in 'tools'"},
      {Api::kChat, "{" + m + R"(, "tool_choice": "required"})", "tool_choice", "needs 'tools'"},
      {Api::kChat, "{" + m + R"(, "parallel_tool_calls": 1})", "parallel_tool_calls", "boolean"},
      {Api::kChat, R"({"messages": [{"role": "user", "content": "hi", "tool_calls": []}]})",
       "messages[0].tool_calls", "only assistant messages"},
      {Api::kChat, R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "a",
          "arguments": 3}}]}]})",
       "messages[0].tool_calls[0].function.arguments", "must be a string"},
      {Api::kChat, "{" + m + R"(, "response_format": {"type": "yaml"}})", "response_format.type",
       "\"json_schema\""},
      {Api::kChat, "{" + m + R"(, "response_format": {"type": "json_schema"}})",
       "response_format.json_schema", "must be an object"},
      {Api::kChat, "{" + m + R"(, "response_format": "json"})", "response_format", "with a \"type\""},
      {Api::kResponses, R"({"input": "x", "response_format": {"type": "json_object"}})", "response_format",
       "not supported on /v1/responses"},
  };
  for (const auto& c : cases) {
    const ApiError e = err(c.api, c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_NE(e.message.find(c.needle), std::string::npos) << c.body << " -> " << e.message;
  }
}

TEST(OpenAiJson, ErrorBodyHasTheOpenAiShape) {
  const auto j = json::parse(error_body(ApiError{404, "nope", "model"}));
  EXPECT_EQ(j["error"]["message"], "nope");
  EXPECT_EQ(j["error"]["type"], "not_found_error");
  EXPECT_EQ(j["error"]["param"], "model");
  EXPECT_EQ(j["error"]["code"], 404);
  EXPECT_TRUE(json::parse(error_body(ApiError{500, "x", ""}))["error"]["param"].is_null());
}

TEST(OpenAiJson, ChunksAndResponses) {
  const auto first = json::parse(stream_chunk(Api::kChat, "id1", 5, "m", 0, "", true, ""));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const auto next = json::parse(stream_chunk(Api::kChat, "id1", 5, "m", 0, " the", false, "length"));
  EXPECT_FALSE(next["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(next["choices"][0]["delta"]["content"], " the");
  EXPECT_EQ(next["choices"][0]["finish_reason"], "length");
  const auto text = json::parse(stream_chunk(Api::kCompletions, "id2", 5, "m", 1, "\"q\"", false, ""));
  EXPECT_EQ(text["choices"][0]["text"], "\"q\"");
  EXPECT_EQ(text["choices"][0]["index"], 1);
  const auto usage = json::parse(usage_chunk(Api::kChat, "id1", 5, "m", Usage{10, 4, 8, std::nullopt}));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 14);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  const auto full = json::parse(completion_response(
      Api::kChat, "id", 1, "m", {{"hi", "stop", "\n", "", "", "", {}}}, Usage{3, 1, 0, std::nullopt}));
  EXPECT_EQ(full["choices"][0]["message"]["content"], "hi");
  EXPECT_FALSE(full["choices"][0]["message"].contains("reasoning"));
  EXPECT_EQ(full["choices"][0]["stop_reason"], "\n");
  // A reasoning model's message: the reasoning in its field, before the answer.
  const auto thought = json::parse(completion_response(
      Api::kChat, "id", 1, "m", {{"42", "stop", std::nullopt, "", "hm", "reasoning_content", {}}},
      Usage{3, 2, 0, 1}));
  EXPECT_EQ(thought["choices"][0]["message"]["reasoning_content"], "hm");
  EXPECT_EQ(thought["usage"]["completion_tokens_details"]["reasoning_tokens"], 1);
  EXPECT_FALSE(full["usage"].contains("completion_tokens_details"));
  EXPECT_EQ(thought["choices"][0]["message"]["content"], "42");
  const auto delta =
      json::parse(stream_chunk(Api::kChat, "id1", 5, "m", 0, "hm", false, "", "", "reasoning"));
  EXPECT_EQ(delta["choices"][0]["delta"]["reasoning"], "hm");
  EXPECT_FALSE(delta["choices"][0]["delta"].contains("content"));
  EXPECT_EQ(sse_event("{}"), "data: {}\n\n");
}

TEST(OpenAiParse, LogprobsAsVllmTakesThem) {
  const auto ok = [](Api api, const std::string& body) {
    const auto r = parse_generation_request(api, body, kCtx);
    EXPECT_TRUE(std::holds_alternative<GenerationRequest>(r)) << body;
    return std::get<GenerationRequest>(r).logprobs;
  };
  EXPECT_EQ(ok(Api::kCompletions, R"({"prompt": "x"})"), std::nullopt);
  EXPECT_EQ(ok(Api::kCompletions, R"({"prompt": "x", "logprobs": null})"), std::nullopt);
  EXPECT_EQ(ok(Api::kCompletions, R"({"prompt": "x", "logprobs": 0})"), 0u);
  EXPECT_EQ(ok(Api::kCompletions, R"({"prompt": "x", "logprobs": 5})"), 5u);
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(ok(Api::kChat, "{" + m + R"(, "logprobs": false})"), std::nullopt);
  EXPECT_EQ(ok(Api::kChat, "{" + m + R"(, "logprobs": true})"), 0u);
  EXPECT_EQ(ok(Api::kChat, "{" + m + R"(, "logprobs": true, "top_logprobs": 3})"), 3u);
}

TEST(OpenAiJson, ChunksAndResponsesCarryLogprobsWhenGiven) {
  const auto chunk = json::parse(
      stream_chunk(Api::kCompletions, "id", 5, "m", 0, " a", false, "", R"({"token_logprobs":[-1]})"));
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["token_logprobs"][0], -1);
  const auto chat = json::parse(stream_chunk(Api::kChat, "id", 5, "m", 0, " a", false, ""));
  EXPECT_TRUE(chat["choices"][0]["logprobs"].is_null());
  const auto full = json::parse(completion_response(
      Api::kCompletions, "id", 1, "m", {{"a", "length", std::nullopt, R"({"tokens":["a"]})", "", "", {}}},
      Usage{1, 1, 0, std::nullopt}));
  EXPECT_EQ(full["choices"][0]["logprobs"]["tokens"][0], "a");
}

TEST(OpenAiParse, Tokenize) {
  const auto t = parse_tokenize_request(R"({"prompt": "hello world"})", kCtx);
  EXPECT_EQ(std::get<std::vector<tokenizers::TokenId>>(t), tokenizers::tokenize("hello world"));
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_tokenize_request("{}", kCtx)));
}

}  // namespace
}  // namespace tokenscope::serve
