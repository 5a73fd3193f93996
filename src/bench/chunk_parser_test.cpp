#include "bench/chunk_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

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

// The fields of two answers, compared.
void expect_same(const ChunkInfo& a, const ChunkInfo& b, const std::string& e) {
  EXPECT_EQ(a.valid, b.valid) << e;
  EXPECT_EQ(a.is_error, b.is_error) << e;
  EXPECT_EQ(a.error_message, b.error_message) << e;
  EXPECT_EQ(a.has_output, b.has_output) << e;
  EXPECT_EQ(a.has_reasoning, b.has_reasoning) << e;
  EXPECT_EQ(a.has_answer, b.has_answer) << e;
  EXPECT_EQ(a.role_only, b.role_only) << e;
  EXPECT_EQ(a.text, b.text) << e;
  EXPECT_EQ(a.reasoning_bytes, b.reasoning_bytes) << e;
  EXPECT_EQ(a.choices, b.choices) << e;
  EXPECT_EQ(a.finish_reason, b.finish_reason) << e;
  EXPECT_EQ(a.id, b.id) << e;
  ASSERT_EQ(a.usage.has_value(), b.usage.has_value()) << e;
  if (a.usage) {
    EXPECT_EQ(a.usage->prompt_tokens, b.usage->prompt_tokens) << e;
    EXPECT_EQ(a.usage->completion_tokens, b.usage->completion_tokens) << e;
    EXPECT_EQ(a.usage->cached_tokens, b.usage->cached_tokens) << e;
    EXPECT_EQ(a.usage->reasoning_tokens, b.usage->reasoning_tokens) << e;
  }
  ASSERT_EQ(a.timings.has_value(), b.timings.has_value()) << e;
  EXPECT_EQ(a.tool_calls.size(), b.tool_calls.size()) << e;
  EXPECT_EQ(a.logprobs.size(), b.logprobs.size()) << e;
}

// An event parsed where it lies (padding of any value after it, as the
// SSE decoder keeps it) reads as the same bytes copied; the answer is the
// parser's own and carries nothing of the event before.
TEST(ChunkParser, InPlaceWithAnyPaddingAndNothingLeftFromTheEventBefore) {
  const std::vector<std::string> events = {
      R"({"id":"chatcmpl-abcdefghijklmnopqrstuvwxyz","choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{\"a\""}}]},"finish_reason":null}],"usage":{"prompt_tokens":5,"completion_tokens":1},"timings":{"prompt_ms":1.5,"prompt_n":5,"predicted_ms":2.5,"predicted_n":1}})",
      R"({"choices":[{"index":0,"delta":{"content":" x"},"finish_reason":"stop"}]})",
      R"({"error":{"message":"boom"}})",
      R"({"choices":[{"index":0,"delta":{"reasoning_content":"think"},"finish_reason":null}]})",
      R"({"choices":[{"index":0,"delta":{"content":" y"}}],"x":tru})",  // invalid JSON
      R"({"choices":[{"index":0,"text":" z"}]})"};
  for (const char fill : {'\0', '"', '}', '\\', '9', 't'}) {
    ChunkParser copied, in_place;
    for (const std::string& e : events) {
      const ChunkInfo want = copied.parse(e);
      std::string padded = e + std::string(64, fill);
      const ChunkInfo& got = in_place.parse(std::string_view(padded).substr(0, e.size()), 64);
      expect_same(got, want, e);
    }
  }
  // Each answer is of its own event alone.
  ChunkParser p;
  const ChunkInfo first = p.parse(events[0]);
  EXPECT_EQ(first.id, "chatcmpl-abcdefghijklmnopqrstuvwxyz");
  EXPECT_EQ(first.tool_calls.size(), 1u);
  EXPECT_TRUE(first.usage && first.timings);
  EXPECT_FALSE(first.role_only);  // a tool call is output
  const ChunkInfo& second = p.parse(events[1]);
  EXPECT_TRUE(second.valid);
  EXPECT_EQ(second.text, " x");
  EXPECT_EQ(second.id, "");
  EXPECT_TRUE(second.tool_calls.empty());
  EXPECT_FALSE(second.usage || second.timings);
  EXPECT_EQ(p.parse(events[4]).valid, false);
  EXPECT_EQ(p.parse(events[4]).text, "");
  const ChunkInfo& error = p.parse(events[2]);
  EXPECT_TRUE(error.is_error);
  EXPECT_EQ(error.finish_reason, "");
}

// A stream's frame: the events of a stream that differ only in their text
// are read from the frame, with the answer the DOM path gives for every
// text — plain, escaped, raw UTF-8 — and for every text it must refuse or
// read itself (an unescaped quote or control character, invalid UTF-8, a
// \u escape, a lone backslash, an empty text).
TEST(ChunkParser, AStreamsFrameAnswersAsTheDomPathDoes) {
  const std::vector<std::string> frames = {
      // vLLM chat, completions, reasoning (both names), llama-server, a whole message.
      R"({"id":"chatcmpl-7f3a","object":"chat.completion.chunk","created":1733000000,"model":"m","choices":[{"index":0,"delta":{"content":"@"},"logprobs":null,"finish_reason":null}]})",
      R"({"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"@","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null})",
      R"({"id":"c","choices":[{"index":0,"delta":{"reasoning":"@"},"finish_reason":null}]})",
      R"({"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"@","content":null}}]})",
      R"({"choices":[{"finish_reason":null,"index":0,"delta":{"content":"@"}}],"created":1,"id":"chatcmpl-q","model":"tiny","system_fingerprint":"b1-x","object":"chat.completion.chunk"})",
      R"({"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"@"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":1}})"};
  const std::vector<std::string> texts = {
      " tok", " the", "x", "\\n", " a\\\"b\\\\c\\/d\\te\\r\\b\\f", "\xc3\xa9\xf0\x9f\x98\x80", " two words ",
      // Not the frame's to read: the DOM path answers.
      "\\u00e9", "a\"b", "a\x01", "\xff\xfe", "\xed\xa0\x80", "trail\\", "\\x", ""};
  for (const std::string& frame_text : frames) {
    const std::size_t at = frame_text.find('@');
    ChunkParser framed, dom;
    ChunkFrame frame;
    std::uint64_t plain = 0;
    for (int round = 0; round < 2; ++round)
      for (std::size_t i = 0; i < texts.size(); ++i) {
        const std::string e = frame_text.substr(0, at) + texts[i] + frame_text.substr(at + 1);
        const ChunkInfo a = framed.parse(e, 0, &frame);
        expect_same(a, dom.parse(e), e);
        if (i < 7) ++plain;
      }
    // Every text the frame may read was read from it, but the first (which made it).
    EXPECT_EQ(frame.learned(), 1u) << frame_text;
    EXPECT_EQ(frame.hits(), plain - 1) << frame_text;
  }
}

// Learning a frame: the text must be found once, where the event's answer
// takes it from; a frame that does not hold (a key, another field, two
// choices, repeated keys) is not taken, and every event still reads as
// the DOM path reads it. A stream whose frame changes before it is used,
// twice, stops learning.
TEST(ChunkParser, AFrameIsTakenOnlyWhereTheTextIs) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"id":"A","choices":[{"delta":{"content":"A"}}]})", "A"},            // twice: no frame
      {R"({"id":"B","choices":[{"delta":{"content":"\u0042"}}]})", "B"},       // found in the id
      {R"({"choices":[{"delta":{"content":"C","content":"D"}}]})", "C"},       // the first wins
      {R"({"choices":[{"delta":{"content":"E","content":"F"}}]})", "F"},       // the second: ignored
      {R"({"choices":[{"text":"G"},{"text":"H"}]})", "G"},                     // two choices
      {R"({"choices":[{"text":"","delta":{"content":"I"}}]})", "I"},           // an empty text beside
      {R"({"J":1,"choices":[{"delta":{"content":"\u004a"}}]})", "J"},          // found as a key
      {R"({"choices":[{"delta":{"content":"K","role":"assistant"}}]})", "K"},  // a role beside the text
      {R"({"choices":[{"delta":{"content":"L"},"finish_reason":"stop"}]})", "L"},
      // The marker already in the event, escaped: found once, but not the text.
      {R"({"choices":[{"text":"tokenscope frame prob\u0065"}],"x":"tokenscope frame probe"})",
       "tokenscope frame probe"},
      // The place found is a key: renamed, another (escaped) key brings the marker.
      {R"({"choices":[{"delta":{"content":"\u0063ontent","c\u006fntent":"tokenscope frame probe"}}]})",
       "content"}};
  for (const auto& [event, text] : cases) {
    ChunkParser framed, dom;
    ChunkFrame frame;
    const std::string quoted = "\"" + text + "\"";
    for (const std::string& other : {text, std::string("zz"), std::string("y y"), std::string("")}) {
      std::string e = event;
      if (const std::size_t at = e.find(quoted); at != std::string::npos)
        e.replace(at + 1, text.size(), other);
      expect_same(framed.parse(e, 0, &frame), dom.parse(e), e);
    }
  }
  // Per-event timings change the frame each time: two frames wasted, then none.
  ChunkParser p;
  ChunkFrame frame;
  for (int i = 0; i < 10; ++i)
    p.parse(R"({"choices":[{"delta":{"content":"t"}}],"timings":{"predicted_n":)" + std::to_string(i) + "}}",
            0, &frame);
  EXPECT_EQ(frame.learned(), 2u);
  EXPECT_EQ(frame.hits(), 0u);
}

// Tool calls as servers stream them: the first fragment of a call brings
// its index, id and function name with empty arguments, later fragments the
// arguments in pieces; two calls in parallel interleave by index. A whole
// message lists complete calls (no index: their positions). Arguments sent
// as an object are taken as its JSON text; entries that are not objects are
// passed over; the assembler stops at its bounds and says why.
TEST(ChunkParser, ToolCallsAreAssembledFromTheirFragments) {
  ChunkParser p;
  ToolCallAssembler a;
  const char* events[] = {
      R"({"choices":[{"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}}]})",
      R"({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": "}}]}}]})",
      R"({"choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"search","arguments":"{\"q\""}}]}}]})",
      R"({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]}}]})",
      R"({"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":": \"tides\"}"}}]},"finish_reason":"tool_calls"}]})",
  };
  std::string finish;
  for (const char* e : events) {
    const auto c = p.parse(e);
    ASSERT_TRUE(c.valid) << e;
    EXPECT_TRUE(c.has_answer) << e;
    for (std::size_t i = 0; i < c.tool_calls.size(); ++i) a.add(c.tool_calls[i], i);
    if (!c.finish_reason.empty()) finish = c.finish_reason;
  }
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(a.calls().size(), 2u);
  EXPECT_EQ(a.calls()[0].id, "call_a");
  EXPECT_EQ(a.calls()[0].name, "get_weather");
  EXPECT_EQ(a.calls()[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(a.calls()[1].name, "search");
  EXPECT_EQ(a.calls()[1].arguments, R"({"q": "tides"})");
  EXPECT_TRUE(a.problem().empty());

  const auto whole = p.parse(
      R"({"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[7,{"id":"c1","type":"function","function":{"name":"f","arguments":{"x":1}}},{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]},"finish_reason":"tool_calls"}]})");
  ASSERT_EQ(whole.tool_calls.size(), 2u);
  ToolCallAssembler w;
  for (std::size_t i = 0; i < whole.tool_calls.size(); ++i) w.add(whole.tool_calls[i], i);
  ASSERT_EQ(w.calls().size(), 2u);
  EXPECT_EQ(w.calls()[0].arguments, R"({"x":1})");
  EXPECT_EQ(w.calls()[1].name, "g");

  ToolCallAssembler bounded;
  for (std::size_t i = 0; i <= ToolCallAssembler::kMaxCalls; ++i) bounded.add(ToolCallPart{}, i);
  EXPECT_EQ(bounded.calls().size(), ToolCallAssembler::kMaxCalls);
  EXPECT_NE(bounded.problem().find("more than 128 tool calls"), std::string::npos) << bounded.problem();
  ToolCallAssembler big;
  ToolCallPart part;
  part.arguments.assign(ToolCallAssembler::kMaxArgumentBytes, 'x');
  big.add(part, 0);
  EXPECT_TRUE(big.problem().empty());
  part.arguments = "y";
  big.add(part, 0);
  EXPECT_NE(big.problem().find("arguments over"), std::string::npos);
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
  // Current vLLM's name: the first reasoning token is the first token (it
  // measured TTFT at the first answer token: 517 ms where 100 ms was right).
  const auto current = p.parse(R"({"choices":[{"delta":{"reasoning":"Let me think"}}]})");
  EXPECT_TRUE(current.has_output);
  EXPECT_TRUE(current.has_reasoning);
  EXPECT_FALSE(current.has_answer);
  EXPECT_EQ(current.text, "Let me think");
  // Both names in one delta (a server in transition): one text, once.
  const auto both = p.parse(R"({"choices":[{"delta":{"reasoning":"Hm","reasoning_content":"Hm"}}]})");
  EXPECT_EQ(both.text, "Hm");
  const auto answer = p.parse(R"({"choices":[{"delta":{"content":"42"}}]})");
  EXPECT_TRUE(answer.has_answer);
  EXPECT_FALSE(answer.has_reasoning);
  // A whole message (stream off) with both parts.
  const auto whole =
      p.parse(R"({"choices":[{"message":{"role":"assistant","reasoning":"Hm","content":"42"}}]})");
  EXPECT_TRUE(whole.has_reasoning);
  EXPECT_TRUE(whole.has_answer);
  EXPECT_EQ(whole.text, "Hm42");
  EXPECT_EQ(whole.reasoning_bytes, 2u);
  EXPECT_EQ(answer.reasoning_bytes, 0u);
  EXPECT_EQ(current.reasoning_bytes, 12u);
  EXPECT_TRUE(p.parse(R"({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]})")
                  .has_output);
  EXPECT_FALSE(p.parse(R"({"choices":[{"delta":{"tool_calls":[]}}]})").has_output);
}

// The Responses API: events by type, and a whole response object.
TEST(ChunkParser, ResponsesApiEventsAndObjects) {
  ChunkParser p;
  auto c = p.parse(
      R"({"type":"response.created","sequence_number":0,"response":{"id":"resp_9","status":"in_progress","usage":null}})");
  EXPECT_TRUE(c.valid);
  EXPECT_FALSE(c.has_output);
  EXPECT_EQ(c.id, "resp_9");
  EXPECT_EQ(c.finish_reason, "");
  c = p.parse(R"({"type":"response.output_item.added","item":{"type":"message"}})");
  EXPECT_TRUE(c.valid);
  EXPECT_FALSE(c.has_output);
  c = p.parse(R"({"type":"response.reasoning_text.delta","delta":"let me think"})");
  EXPECT_TRUE(c.has_output && c.has_reasoning && !c.has_answer);
  EXPECT_EQ(c.reasoning_bytes, 12u);
  c = p.parse(R"({"type":"response.reasoning_summary_text.delta","delta":"so"})");
  EXPECT_TRUE(c.has_reasoning);
  c = p.parse(R"({"type":"response.output_text.delta","delta":" yes"})");
  EXPECT_TRUE(c.has_output && c.has_answer && !c.has_reasoning);
  EXPECT_EQ(c.text, " yes");
  c = p.parse(R"({"type":"response.output_text.delta","delta":""})");
  EXPECT_FALSE(c.has_output);
  c = p.parse(R"({"type":"response.output_text.done","text":"whole text"})");  // not output again
  EXPECT_FALSE(c.has_output);
  c = p.parse(
      R"({"type":"response.incomplete","response":{"id":"resp_9","status":"incomplete","output":[{"type":"message","content":[{"type":"output_text","text":"x"}]}],)"
      R"("usage":{"input_tokens":11,"input_tokens_details":{"cached_tokens":4},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":2}}}})");
  EXPECT_FALSE(c.has_output);  // the final object repeats the text: not output
  EXPECT_EQ(c.finish_reason, "incomplete");
  ASSERT_TRUE(c.usage);
  EXPECT_EQ(c.usage->prompt_tokens, 11);
  EXPECT_EQ(c.usage->cached_tokens, 4);
  EXPECT_EQ(c.usage->completion_tokens, 7);
  EXPECT_EQ(c.usage->reasoning_tokens, 2);
  c = p.parse(R"({"type":"response.failed","response":{"status":"failed","error":{"message":"boom"}}})");
  EXPECT_TRUE(c.is_error);
  EXPECT_EQ(c.error_message, "boom");
  c = p.parse(R"({"type":"error","code":"x","message":"bad input"})");
  EXPECT_TRUE(c.is_error);
  EXPECT_EQ(c.error_message, "bad input");
  // Whole: reasoning then the message's text.
  c = p.parse(
      R"({"id":"resp_1","object":"response","status":"completed","output":[{"type":"reasoning","content":[{"type":"reasoning_text","text":"think"}]},)"
      R"({"type":"message","content":[{"type":"output_text","text":"answer"}]}],"usage":{"input_tokens":3,"output_tokens":5}})");
  EXPECT_TRUE(c.valid && c.has_output && c.has_reasoning && c.has_answer);
  EXPECT_EQ(c.text, "thinkanswer");
  EXPECT_EQ(c.reasoning_bytes, 5u);
  EXPECT_EQ(c.finish_reason, "completed");
  EXPECT_EQ(c.usage->completion_tokens, 5);
  // A chunk with a "type" of its own that is not the Responses API is read as before.
  c = p.parse(R"({"type":"other","choices":[{"index":0,"text":"t"}]})");
  EXPECT_TRUE(c.has_output);
}

TEST(ChunkParser, UsageInBothForms) {
  ChunkParser p;
  // OpenAI's reasoning count (completion_tokens_details); absent, -1.
  const auto reasoning = p.parse(
      R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9,"completion_tokens_details":{"reasoning_tokens":7}}})");
  ASSERT_TRUE(reasoning.usage);
  EXPECT_EQ(reasoning.usage->reasoning_tokens, 7);
  EXPECT_EQ(p.parse(R"({"choices":[],"usage":{"completion_tokens":9}})").usage->reasoning_tokens, -1);
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
  // The usage's members in any order; the first of duplicate keys wins, as
  // with a lookup; a count that is no integer, or details that are no
  // object, count as absent.
  const auto odd = p.parse(
      R"({"choices":[],"usage":{"completion_tokens_details":{"reasoning_tokens":2},"prompt_tokens":5,)"
      R"("prompt_tokens":6,"completion_tokens":"7","prompt_tokens_details":null,"total_tokens":12}})");
  ASSERT_TRUE(odd.usage);
  EXPECT_EQ(odd.usage->prompt_tokens, 5);
  EXPECT_EQ(odd.usage->completion_tokens, -1);
  EXPECT_EQ(odd.usage->cached_tokens, -1);
  EXPECT_EQ(odd.usage->reasoning_tokens, 2);
  const auto twice =
      p.parse(R"({"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":3},"completion_tokens":4,)"
              R"("completion_tokens":1.5,"prompt_tokens_details":{"cached_tokens":9},"prompt_tokens":8}})");
  ASSERT_TRUE(twice.usage);
  EXPECT_EQ(twice.usage->prompt_tokens, 8);
  EXPECT_EQ(twice.usage->completion_tokens, 4);
  EXPECT_EQ(twice.usage->cached_tokens, 3);
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

// Logprobs as OpenAI's legacy completions API and vLLM send them:
// logprobs.token_logprobs, one per token of the event (null passed over).
TEST(ChunkParser, CompletionsTokenLogprobs) {
  ChunkParser p(true);
  const auto c = p.parse(
      R"({"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" the cat","logprobs":{"text_offset":[0,4],"token_logprobs":[-0.3125,null,-2],"tokens":[" the"," cat"],"top_logprobs":[{" the":-0.3125},{" cat":-2.0}]},"finish_reason":null}]})");
  EXPECT_TRUE(c.valid);
  EXPECT_EQ(c.text, " the cat");
  EXPECT_EQ(std::vector<double>(c.logprobs.begin(), c.logprobs.end()), (std::vector<double>{-0.3125, -2.0}));
  // null logprobs (none asked for) and an event without any: none.
  EXPECT_TRUE(p.parse(R"({"choices":[{"text":"x","logprobs":null}]})").logprobs.empty());
  EXPECT_TRUE(p.parse(R"({"choices":[{"text":"x"}]})").logprobs.empty());
  // Off: not looked at.
  ChunkParser off;
  EXPECT_TRUE(off.parse(R"({"choices":[{"text":"x","logprobs":{"token_logprobs":[-1]}}]})").logprobs.empty());
}

// OpenAI's and vLLM's chat form: logprobs.content[k].logprob.
TEST(ChunkParser, ChatContentLogprobs) {
  ChunkParser p(true);
  const auto c = p.parse(
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" Hi"},"logprobs":{"content":[{"token":" Hi","logprob":-0.5,"bytes":[32,72,105],"top_logprobs":[{"token":" Hi","logprob":-0.5,"bytes":[32,72,105]}]}]},"finish_reason":null}]})");
  EXPECT_TRUE(c.has_output);
  EXPECT_EQ(std::vector<double>(c.logprobs.begin(), c.logprobs.end()), (std::vector<double>{-0.5}));
  // The whole (non-streamed) response: message and logprobs of every token.
  const auto whole = p.parse(
      R"({"choices":[{"index":0,"message":{"role":"assistant","content":"ab"},"logprobs":{"content":[{"token":"a","logprob":-1.25},{"token":"b","logprob":0}]},"finish_reason":"length"}]})");
  EXPECT_EQ(std::vector<double>(whole.logprobs.begin(), whole.logprobs.end()),
            (std::vector<double>{-1.25, 0.0}));
  // llama-server with post_sampling_probs: probabilities, taken as logarithms.
  const auto probs = p.parse(
      R"({"choices":[{"index":0,"delta":{"content":"a"},"logprobs":{"content":[{"id":1,"token":"a","bytes":[97],"prob":0.25,"top_probs":[]}]}}]})");
  ASSERT_EQ(probs.logprobs.size(), 1u);
  EXPECT_DOUBLE_EQ(probs.logprobs[0], -1.3862943611198906);  // python3: math.log(0.25)
}

// llama.cpp's llama-server (commit c392e50, tiny random-weight model from
// scripts/tiny-model.py), recorded with curl: completions with "logprobs": 1
// put the chat form (logprobs.content) in a text_completion chunk.
TEST(ChunkParser, LlamaServerCompletionsAndChatChunks) {
  ChunkParser p(true);
  const auto c = p.parse(
      R"({"choices":[{"text":" DUP","index":0,"logprobs":{"content":[{"id":45556,"token":" DUP","bytes":[32,68,85,80],"logprob":-10.116469383239746,"top_logprobs":[{"id":13200,"token":"space","bytes":[115,112,97,99,101],"logprob":-9.928023338317871}]}]},"finish_reason":null}],"created":1796186280,"model":"gpt-3.5-turbo","system_fingerprint":"b0-unknown","object":"text_completion","id":"chatcmpl-4fanQBJ8qgQQSOunwsEw7aOMn9TvUpOw"})");
  EXPECT_EQ(c.text, " DUP");
  EXPECT_EQ(std::vector<double>(c.logprobs.begin(), c.logprobs.end()),
            (std::vector<double>{-10.116469383239746}));
  const auto chat = p.parse(
      R"({"choices":[{"finish_reason":null,"index":0,"delta":{"content":" plan"},"logprobs":{"content":[{"id":1410,"token":" plan","bytes":[32,112,108,97,110],"logprob":-10.088603973388672,"top_logprobs":[{"id":198,"token":"\n","bytes":[10],"logprob":-9.903851509094238}]}]}}],"created":1796186282,"id":"chatcmpl-M2PeNUcCOkKO1XstACwH0VYSPfus5Pkc","model":"gpt-3.5-turbo","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"})");
  EXPECT_EQ(chat.text, " plan");
  EXPECT_EQ(std::vector<double>(chat.logprobs.begin(), chat.logprobs.end()),
            (std::vector<double>{-10.088603973388672}));
  // The final chunk: "logprobs": null beside the usage.
  EXPECT_TRUE(
      p.parse(
           R"({"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"usage":{"completion_tokens":3,"prompt_tokens":2,"total_tokens":5}})")
          .logprobs.empty());
}

}  // namespace
}  // namespace tokenscope::bench
