// The request encoder and the response collector, fed by hand: the rules of
// shared METRICS.md (first token, usage counts, k-token events) and the
// outcome of every kind of failure.
#include "bench/exchange.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <span>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "net/multipart.h"

namespace tokenscope::bench {
namespace {

using nlohmann::json;

json body_of(const std::string& http) {
  return json::parse(http.substr(http.find("\r\n\r\n") + 4));
}

TEST(RequestEncoder, CompletionsWithUsageAndIgnoreEos) {
  RequestSettings s;
  s.model = "m";
  s.host_header = "h:1";
  s.base_path = "/p";
  s.api_key = "k";
  s.headers = {{"X-A", "b"}};
  const RequestEncoder e(s);
  const auto msg = *e.encode("say \"hi\"\n", 7);
  EXPECT_EQ(msg.rfind("POST /p/v1/completions HTTP/1.1\r\nHost: h:1\r\n", 0), 0u) << msg;
  EXPECT_NE(msg.find("Authorization: Bearer k\r\n"), std::string::npos);
  EXPECT_NE(msg.find("X-A: b\r\n"), std::string::npos);
  const json b = body_of(msg);
  EXPECT_EQ(b["model"], "m");
  EXPECT_EQ(b["prompt"], "say \"hi\"\n");
  EXPECT_EQ(b["max_tokens"], 7);
  EXPECT_EQ(b["ignore_eos"], true);
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
  const std::size_t len = std::stoul(msg.substr(msg.find("Content-Length: ") + 16));
  EXPECT_EQ(len, msg.size() - msg.find("\r\n\r\n") - 4);
}

TEST(RequestEncoder, ChatWithHistory) {
  RequestSettings s;
  s.api = Api::kChat;
  s.model = "m";
  s.stream = false;
  const RequestEncoder e(s);
  const std::vector<ChatMessage> history = {{"user", "a"}, {"assistant", "b"}};
  const json b = body_of(*e.encode("c", 3, &history));
  ASSERT_EQ(b["messages"].size(), 3u);
  EXPECT_EQ(b["messages"][1]["role"], "assistant");
  EXPECT_EQ(b["messages"][2]["content"], "c");
  EXPECT_EQ(b["stream"], false);
  EXPECT_FALSE(b.contains("stream_options"));
}

TEST(RequestEncoder, SamplingParametersAndExtraBody) {
  RequestSettings s;
  s.model = "m";
  s.sampling.temperature = 0.0;
  s.sampling.top_p = 0.9;
  s.sampling.top_k = 40;
  s.sampling.seed = 7;
  s.sampling.logprobs = 2;
  s.sampling.extra_body = R"({"min_p": 0.05, "top_k": 5, "nested": {"a": [1, 2]}})";
  const json b = body_of(*RequestEncoder(s).encode("x", 3));
  EXPECT_EQ(b["temperature"], 0.0);
  EXPECT_EQ(b["top_p"], 0.9);
  EXPECT_EQ(b["top_k"], 5);  // the extra body wins over --top-k
  EXPECT_EQ(b["seed"], 7);
  EXPECT_EQ(b["logprobs"], 2);
  EXPECT_EQ(b["min_p"], 0.05);
  EXPECT_EQ(b["nested"]["a"][1], 2);
  EXPECT_EQ(b["max_tokens"], 3);
  s.api = Api::kChat;
  const json c = body_of(*RequestEncoder(s).encode("x", 3));
  EXPECT_EQ(c["logprobs"], true);
  EXPECT_EQ(c["top_logprobs"], 2);
  RequestSettings plain;
  const json p = body_of(*RequestEncoder(plain).encode("x", 3));
  EXPECT_FALSE(p.contains("temperature"));  // nothing sent unless asked: the server's defaults apply
  EXPECT_FALSE(p.contains("seed"));
}

TEST(RequestEncoder, RequestIdHeader) {
  RequestSettings s;
  s.model = "m";
  const RequestEncoder e(s);
  EXPECT_NE(e.encode("x", 1, nullptr, 1234)->find("\r\nX-Request-Id: 1234\r\n"), std::string::npos);
  EXPECT_EQ(e.encode("x", 1)->find("X-Request-Id"), std::string::npos);
  s.send_request_id = false;
  EXPECT_EQ(RequestEncoder(s).encode("x", 1, nullptr, 1234)->find("X-Request-Id"), std::string::npos);
}

TEST(RequestEncoder, ExtraBodyMustBeAnObject) {
  RequestSettings s;
  s.sampling.extra_body = "[1]";
  EXPECT_THROW(RequestEncoder{s}, UsageError);
  s.sampling.extra_body = "{nope";
  EXPECT_THROW(RequestEncoder{s}, UsageError);
}

class Collector : public ::testing::Test {
 protected:
  void start(bool stream = true) {
    RequestRecord r;
    r.id = 9;
    r.t_sched = 100;
    c.init(std::move(r), stream, true, &parser, [this](ResponseCollector& done) {
      ++calls;
      record = done.record();
    });
    c.on_sent(110);
  }
  void chunk(std::string_view data, Nanos t) { c.on_body(data, t); }

  ChunkParser parser;
  ResponseCollector c;
  RequestRecord record;
  int calls = 0;
};

TEST_F(Collector, FirstTokenSkipsRoleOnlyAndEmptyChunks) {
  start();
  c.on_headers(200, 120);
  chunk(
      "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
      130);
  chunk("data: {\"choices\":[{\"delta\":{\"content\":\"\"}}]}\n\n", 140);
  chunk("data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"con",
        150);
  chunk("tent\":\"lo\"},\"finish_reason\":\"length\"}]}\n\n", 170);
  chunk("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n",
        180);
  c.on_complete(net::ExchangeError::kNone, "", 190);
  ASSERT_EQ(calls, 1);
  EXPECT_EQ(record.outcome, Outcome::kOk) << record.detail;
  EXPECT_EQ(record.response_id, "chatcmpl-1");
  EXPECT_EQ(record.t_send, 110);
  EXPECT_EQ(record.t_headers, 120);
  EXPECT_EQ(record.t_first_token, 150);
  EXPECT_EQ(record.t_last_token, 150);  // the second event's first byte came with the read at 150
  EXPECT_EQ(record.t_close, 190);
  EXPECT_EQ(record.event_times, (std::vector<Nanos>{150, 150}));
  EXPECT_EQ(record.output_tokens, 2);
  EXPECT_EQ(record.output_tokens_client, 2);
  EXPECT_EQ(record.prompt_tokens, 5);
  EXPECT_EQ(c.text(), "Hello");
}

TEST_F(Collector, MultiTokenEventsShareTheUsageCountByTextLength) {
  start();
  c.on_headers(200, 120);
  chunk("data: {\"choices\":[{\"text\":\"ab\"}]}\n\n", 200);
  chunk("data: {\"choices\":[{\"text\":\"cdefgh\"}]}\n\n", 300);  // three times the text
  chunk("data: {\"choices\":[{\"text\":\"ij\",\"finish_reason\":\"length\"}]}\n\n", 400);
  chunk("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":8}}\n\ndata: [DONE]\n\n",
        410);
  c.on_complete(net::ExchangeError::kNone, "", 420);
  EXPECT_EQ(record.outcome, Outcome::kOk);
  EXPECT_EQ(record.output_tokens, 8);
  EXPECT_EQ(record.output_tokens_client, 3);
  // 5 extra tokens over 2:6:2 characters = 1, 3, 1 (exact), plus one each.
  EXPECT_EQ(record.event_tokens, (std::vector<std::uint32_t>{2, 4, 2}));
}

// A server that streams without end must not grow the client without bound:
// past the cap, events are counted and their gaps histogrammed.
TEST_F(Collector, EventsPastTheCapAreCountedAndTheirGapsHistogrammed) {
  c.set_max_events(3);
  start();
  c.on_headers(200, 120);
  for (int i = 0; i < 10; ++i) chunk("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", 200 + 100 * i);
  chunk(
      "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}],"
      "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":10}}\n\ndata: [DONE]\n\n",
      1200);
  c.on_complete(net::ExchangeError::kNone, "", 1210);
  EXPECT_EQ(record.outcome, Outcome::kOk) << record.detail;
  EXPECT_EQ(record.event_times, (std::vector<Nanos>{200, 300, 400}));
  EXPECT_EQ(record.event_tokens, (std::vector<std::uint32_t>{1, 1, 1}));
  EXPECT_EQ(record.events_dropped, 7u);
  EXPECT_EQ(record.dropped_event_tokens, 7u);
  ASSERT_NE(record.dropped_gaps_ns, nullptr);
  EXPECT_EQ(record.dropped_gaps_ns->count(), 7u);  // the gap 400 -> 500 and the six after it
  EXPECT_EQ(record.dropped_gaps_ns->min(), 100u);
  EXPECT_EQ(record.dropped_gaps_ns->max(), 100u);
  EXPECT_EQ(record.t_last_token, 1100);
  EXPECT_EQ(record.output_tokens_client, 10);  // every event counted
  std::string line;
  record.append_json(line);
  const auto j = json::parse(line);
  EXPECT_EQ(j["event_offsets_ns"].size(), 3u);
  EXPECT_EQ(j["events_dropped"], 7);
  EXPECT_EQ(j["dropped_gaps_ns"]["count"], 7);

  // The collector is reused: the next response starts with nothing dropped.
  start();
  c.on_headers(200, 120);
  chunk("data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n", 200);
  c.on_complete(net::ExchangeError::kNone, "", 300);
  EXPECT_EQ(record.events_dropped, 0u);
  EXPECT_EQ(record.dropped_gaps_ns, nullptr);
}

TEST_F(Collector, UsageBeyondTheEventsIsSpreadOverKeptAndDroppedEventsByText) {
  c.set_max_events(3);
  start();
  c.on_headers(200, 120);
  for (int i = 0; i < 10; ++i) chunk("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", 200 + 100 * i);
  chunk(
      "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}],"
      "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":24}}\n\ndata: [DONE]\n\n",
      1200);
  c.on_complete(net::ExchangeError::kNone, "", 1210);
  // 14 extra tokens over 1:1:1 characters and 7 dropped: 1.4, 1.4, 1.4, 9.8;
  // the largest remainders (.8, then the first .4) get one more.
  EXPECT_EQ(record.event_tokens, (std::vector<std::uint32_t>{3, 2, 2}));
  EXPECT_EQ(record.dropped_event_tokens, 17u);
  EXPECT_EQ(record.output_tokens, 24);
}

// A server that ignores "stream" and answers with one JSON object: the
// message names the Content-Type and quotes what came.
TEST_F(Collector, AJsonAnswerToAStreamingRequestNamesItsContentType) {
  start();
  c.on_content_type("application/json");
  c.on_headers(200, 120);
  chunk("{\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"hi\",\"finish_reason\":\"length\"}]}", 200);
  c.on_complete(net::ExchangeError::kNone, "", 300);
  EXPECT_EQ(record.outcome, Outcome::kProtocolError);
  EXPECT_NE(record.detail.find("not an SSE stream (Content-Type: 'application/json'): '{\"id\":\"cmpl-1\""),
            std::string::npos)
      << record.detail;
  // An SSE stream cut inside an event keeps its own message.
  start();
  c.on_content_type("text/event-stream; charset=utf-8");
  c.on_headers(200, 120);
  chunk("data: {\"choices\":[{\"text\":\"a\"}]}", 200);
  c.on_complete(net::ExchangeError::kNone, "", 300);
  EXPECT_EQ(record.detail, "stream ended inside an SSE event");
}

// What a server sends is quoted in a detail with its control bytes and NULs
// escaped (a raw NUL cut the message short), and bounded.
TEST_F(Collector, ServerBytesInADetailAreEscapedAndBounded) {
  start();
  c.on_headers(500, 120);
  chunk(std::string("bad\0gate\x01\x1b[2J", 13) + std::string(1000, 'x'), 200);
  c.on_complete(net::ExchangeError::kNone, "", 300);
  EXPECT_EQ(record.outcome, Outcome::kHttpError);
  EXPECT_EQ(record.detail.find('\0'), std::string::npos);
  EXPECT_EQ(record.detail.find('\x1b'), std::string::npos);
  EXPECT_NE(record.detail.find("HTTP 500: 'bad\\0gate\\x01\\x1b[2J"), std::string::npos) << record.detail;
  EXPECT_LT(record.detail.size(), 300u);
}

// A tokenizer of one token per byte, to count output text on the client.
struct ByteTokenizer final : tokenizers::TextTokenizer {
  std::vector<std::int32_t> encode(std::string_view text, bool) const override {
    return std::vector<std::int32_t>(text.size(), 1);
  }
  std::string decode(std::span<const std::int32_t>, bool) const override { return ""; }
  std::span<const std::int32_t> special_prefix() const override { return {}; }
  std::span<const std::int32_t> special_suffix() const override { return {}; }
  std::optional<std::int32_t> bos_id() const override { return std::nullopt; }
  std::optional<std::int32_t> eos_id() const override { return std::nullopt; }
  std::size_t vocab_size() const override { return 256; }
  std::optional<std::string> token_to_piece(std::int32_t) const override { return std::nullopt; }
  std::optional<std::int32_t> piece_to_id(std::string_view) const override { return std::nullopt; }
  bool is_special(std::int32_t) const override { return false; }
  tokenizers::TokenizerDescription description() const override { return {}; }
};

// Output text kept for a later turn stops at 4 MiB; text counted on the
// client (no usage from the server) is counted whole, 4 MiB at a time.
TEST_F(Collector, TextPastTheCapIsCountedWholeAndTheHistoryBounded) {
  ByteTokenizer bytes;
  c.set_output_counter(&bytes);
  start(/*stream=*/false);
  c.on_headers(200, 120);
  const std::string text(5'000'000, 'a');
  chunk("{\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"" + text + "\",\"finish_reason\":\"length\"}]}", 200);
  c.on_complete(net::ExchangeError::kNone, "", 300);
  EXPECT_EQ(record.outcome, Outcome::kOk) << record.detail;
  EXPECT_EQ(record.output_tokens, 5'000'000);
  EXPECT_TRUE(record.output_tokens_counted_by_client);
  EXPECT_EQ(c.text().size(), ResponseCollector::kTextCap);
  c.set_output_counter(nullptr);
}

TEST_F(Collector, MissingUsageLeavesTheCountUnknown) {
  start();
  c.on_headers(200, 120);
  chunk("data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n", 200);
  c.on_complete(net::ExchangeError::kNone, "", 300);
  EXPECT_EQ(record.outcome, Outcome::kOk);
  EXPECT_EQ(record.output_tokens, -1);  // never replaced by the client's count
  EXPECT_EQ(record.output_tokens_client, 1);
}

TEST_F(Collector, HttpErrorKeepsTheBodyAsDetail) {
  start();
  c.on_headers(429, 120);
  chunk("{\"error\":{\"message\":\"slow down\"}}", 130);
  c.on_complete(net::ExchangeError::kNone, "", 140);
  EXPECT_EQ(record.outcome, Outcome::kHttpError);
  EXPECT_EQ(record.http_status, 429);
  EXPECT_NE(record.detail.find("HTTP 429"), std::string::npos) << record.detail;
  EXPECT_NE(record.detail.find("slow down"), std::string::npos);
}

TEST_F(Collector, MalformedEventIsAProtocolError) {
  start();
  c.on_headers(200, 120);
  chunk("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"id\": \"x\", \"choices\": [\n\n", 130);
  chunk("data: {\"choices\":[{\"text\":\"b\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n", 140);
  c.on_complete(net::ExchangeError::kNone, "", 150);
  EXPECT_EQ(record.outcome, Outcome::kProtocolError);
  EXPECT_NE(record.detail.find("malformed stream event"), std::string::npos) << record.detail;
}

TEST_F(Collector, ErrorEventIsAnHttpError) {
  start();
  c.on_headers(200, 120);
  chunk("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"error\":{\"message\":\"shutting down\"}}\n\n",
        130);
  c.on_complete(net::ExchangeError::kNone, "", 150);
  EXPECT_EQ(record.outcome, Outcome::kHttpError);
  EXPECT_NE(record.detail.find("shutting down"), std::string::npos);
  EXPECT_EQ(record.event_times.size(), 1u);  // what arrived before is kept
}

// llama.cpp's server reports a failure inside a 200 stream as an "error:"
// field (not "data:"), then sends [DONE]; it was counted ok.
TEST_F(Collector, LlamaCppErrorFieldThenDoneIsAnHttpError) {
  start();
  c.on_headers(200, 120);
  chunk(
      "error: {\"code\":400,\"message\":\"the request exceeds the available context size, try increasing "
      "it\",\"type\":\"exceed_context_size_error\"}\n\ndata: [DONE]\n\n",
      130);
  c.on_complete(net::ExchangeError::kNone, "", 150);
  EXPECT_EQ(record.outcome, Outcome::kHttpError);
  EXPECT_NE(record.detail.find("exceeds the available context size"), std::string::npos) << record.detail;
  EXPECT_NE(record.detail.find("code 400"), std::string::npos) << record.detail;
  EXPECT_EQ(record.http_status, 200);
}

TEST_F(Collector, EventTypeErrorIsAnHttpError) {
  start();
  c.on_headers(200, 120);
  chunk("data: {\"choices\":[{\"text\":\"a\"}]}\n\nevent: error\ndata: overloaded\n\ndata: [DONE]\n\n", 130);
  c.on_complete(net::ExchangeError::kNone, "", 150);
  EXPECT_EQ(record.outcome, Outcome::kHttpError);
  EXPECT_NE(record.detail.find("overloaded"), std::string::npos) << record.detail;
}

TEST_F(Collector, StreamWithoutAnEndIsAProtocolError) {
  start();
  c.on_headers(200, 120);
  chunk("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", 130);
  c.on_complete(net::ExchangeError::kNone, "", 150);
  EXPECT_EQ(record.outcome, Outcome::kProtocolError);
}

TEST_F(Collector, TransportFailuresMapToOutcomes) {
  const std::pair<net::ExchangeError, Outcome> cases[] = {
      {net::ExchangeError::kConnect, Outcome::kConnectError},
      {net::ExchangeError::kClosed, Outcome::kConnectError},
      {net::ExchangeError::kTimeout, Outcome::kTimeout},
      {net::ExchangeError::kProtocol, Outcome::kProtocolError},
      {net::ExchangeError::kCancelled, Outcome::kCancelled},
  };
  for (const auto& [error, outcome] : cases) {
    start();
    c.on_complete(error, "why", 500);
    EXPECT_EQ(record.outcome, outcome) << net::exchange_error_name(error);
    EXPECT_EQ(record.t_close, 500);
  }
}

TEST_F(Collector, NonStreamedBodyIsOneEventAtTheEnd) {
  start(false);
  c.on_headers(200, 120);
  chunk("{\"id\":\"cmpl-2\",\"choices\":[{\"text\":\"hello world\",\"finish_reason\":\"length\"}],", 130);
  chunk("\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}", 140);
  c.on_complete(net::ExchangeError::kNone, "", 150);
  EXPECT_EQ(record.outcome, Outcome::kOk) << record.detail;
  EXPECT_EQ(record.t_first_token, 150);
  EXPECT_EQ(record.t_last_token, 150);
  EXPECT_EQ(record.output_tokens, 4);
  EXPECT_EQ(record.output_tokens_client, -1);
  EXPECT_EQ(record.event_tokens, (std::vector<std::uint32_t>{4}));
  EXPECT_EQ(record.response_id, "cmpl-2");
}

TEST(RequestEncoder, PoolingBodies) {
  RequestSettings s;
  s.api = Api::kEmbeddings;
  s.model = "e5";
  s.stream = true;  // pooling answers whole whatever is asked
  s.sampling.temperature = 0.5;
  const RequestEncoder one(s);
  const std::string http = *one.encode_pooling({"hello world"}, "", 7);
  EXPECT_NE(http.find("POST /v1/embeddings HTTP/1.1"), std::string::npos);
  EXPECT_NE(http.find("Accept: application/json"), std::string::npos);
  EXPECT_EQ(body_of(http), (json{{"model", "e5"}, {"input", "hello world"}, {"encoding_format", "float"}}));
  EXPECT_EQ(body_of(*one.encode_pooling({"a", "b"}, "", 7))["input"], (json{"a", "b"}));
  s.api = Api::kRerank;
  s.sampling.extra_body = R"({"top_n": 2})";
  const RequestEncoder rerank(s);
  const std::string r = *rerank.encode_pooling({"d1", "d2", "d3"}, "the query", 8);
  EXPECT_NE(r.find("POST /v1/rerank HTTP/1.1"), std::string::npos);
  EXPECT_EQ(body_of(r),
            (json{{"model", "e5"}, {"query", "the query"}, {"documents", {"d1", "d2", "d3"}}, {"top_n", 2}}));
}

TEST_F(Collector, PoolingAnswersAreCheckedItemByItem) {
  auto answer = [&](Api api, std::uint32_t inputs, std::string_view body, int status = 200) {
    start(false);
    c.expect_pooling(api, inputs);
    c.on_headers(status, 120);
    chunk(body, 130);
    c.on_complete(net::ExchangeError::kNone, "", 150);
    return record;
  };
  // vLLM / OpenAI embeddings; a base64 vector counts its floats.
  auto r = answer(
      Api::kEmbeddings, 2,
      R"({"id":"embd-1","object":"list","data":[{"index":0,"object":"embedding","embedding":[0.1,-2,3e-3]},)"
      R"({"index":1,"embedding":[1,2,3]}],"usage":{"prompt_tokens":17,"total_tokens":17}})");
  EXPECT_EQ(r.outcome, Outcome::kOk) << r.detail;
  EXPECT_EQ(r.prompt_tokens, 17);
  EXPECT_EQ(r.output_tokens, 0);
  EXPECT_EQ(r.t_first_token, 150);
  EXPECT_EQ(r.t_last_token, 150);
  EXPECT_EQ(r.response_id, "embd-1");
  EXPECT_EQ(
      answer(Api::kEmbeddings, 1, R"({"data":[{"embedding":"AACAPwAAAEA="}],"usage":{"prompt_tokens":3}})")
          .outcome,
      Outcome::kOk);
  // llama-server's rerank (Jina shape) and vLLM's (usage total_tokens only).
  r = answer(
      Api::kRerank, 3,
      R"({"model":"m","object":"list","usage":{"prompt_tokens":40,"total_tokens":40},"results":[)"
      R"({"index":2,"relevance_score":0.9},{"index":0,"relevance_score":-1.5},{"index":1,"relevance_score":0}]})");
  EXPECT_EQ(r.outcome, Outcome::kOk) << r.detail;
  EXPECT_EQ(r.prompt_tokens, 40);
  r = answer(Api::kRerank, 1,
             R"({"id":"rerank-1","usage":{"total_tokens":9},"results":[{"index":0,"relevance_score":0.5}]})");
  EXPECT_EQ(r.prompt_tokens, 9);
  // Fewer answers than inputs, a vector of another size, an index twice, no list, an error object.
  r = answer(Api::kEmbeddings, 3, R"({"data":[{"embedding":[1]},{"embedding":[2]}]})");
  EXPECT_EQ(r.outcome, Outcome::kValidationError);
  EXPECT_NE(r.detail.find("2 embeddings for 3 inputs"), std::string::npos) << r.detail;
  r = answer(Api::kEmbeddings, 2, R"({"data":[{"embedding":[1,2]},{"embedding":[2]}]})");
  EXPECT_EQ(r.outcome, Outcome::kProtocolError);
  EXPECT_NE(r.detail.find("data[1]: a vector of 1 values where data[0] had 2"), std::string::npos)
      << r.detail;
  r = answer(Api::kRerank, 2,
             R"({"results":[{"index":0,"relevance_score":1},{"index":0,"relevance_score":1}]})");
  EXPECT_EQ(r.outcome, Outcome::kProtocolError);
  EXPECT_NE(r.detail.find("results[1]"), std::string::npos) << r.detail;
  EXPECT_EQ(answer(Api::kRerank, 2, R"({"data":[]})").outcome, Outcome::kProtocolError);
  // top_n 1 of 3 documents: one result, any document's index.
  start(false);
  c.expect_pooling(Api::kRerank, 3, 1);
  c.on_headers(200, 120);
  chunk(R"({"results":[{"index":2,"relevance_score":0.9}],"usage":{"total_tokens":30}})", 130);
  c.on_complete(net::ExchangeError::kNone, "", 150);
  EXPECT_EQ(record.outcome, Outcome::kOk) << record.detail;
  EXPECT_EQ(answer(Api::kEmbeddings, 1, R"({"data":[{"embedding":["x"]}]})").outcome,
            Outcome::kProtocolError);
  r = answer(Api::kEmbeddings, 1, R"({"error":{"message":"input too long"}})");
  EXPECT_EQ(r.outcome, Outcome::kHttpError);
  EXPECT_NE(r.detail.find("input too long"), std::string::npos);
  EXPECT_EQ(answer(Api::kEmbeddings, 1, R"({"error":"x"})", 500).outcome, Outcome::kHttpError);
}

// A transcription upload: multipart/form-data with the file and the fields,
// its boundary in the Content-Type, absent from the file's bytes.
TEST(RequestEncoder, TranscriptionUploadsTheFileAsMultipart) {
  RequestSettings s;
  s.api = Api::kTranscriptions;
  s.model = "whisper-large-v3";
  s.stream = true;
  s.language = "en";
  s.sampling.temperature = 0;
  s.sampling.extra_body =
      R"({"prompt": "names: Ada", "timestamp_granularities[]": "segment", "stream_include_usage": null})";
  const RequestEncoder enc(s);
  std::string wav = "RIFF....WAVE\r\n--\r\n" + std::string(1000, '\0');
  const std::string http = *enc.encode_transcription(wav, 5);
  EXPECT_EQ(http.rfind("POST /v1/audio/transcriptions HTTP/1.1\r\n", 0), 0u);
  EXPECT_EQ(http.find("application/json\r\nContent-Length"), std::string::npos);  // no JSON body type
  EXPECT_NE(http.find("X-Request-Id: 5\r\n"), std::string::npos);
  const std::size_t ct = http.find("Content-Type: multipart/form-data; boundary=");
  ASSERT_NE(ct, std::string::npos);
  const std::string content_type = http.substr(ct + 14, http.find("\r\n", ct) - ct - 14);
  const std::string body = http.substr(http.find("\r\n\r\n") + 4);
  EXPECT_NE(http.find("Content-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos);
  const auto form = net::parse_multipart(content_type, body);
  ASSERT_TRUE(form.ok()) << form.error;
  std::map<std::string, std::string> fields;
  for (const auto& p : form.parts) fields[p.name] = std::string(p.data);
  EXPECT_EQ(form.parts.at(0).name, "file");
  EXPECT_EQ(form.parts.at(0).filename, "audio.wav");
  EXPECT_EQ(form.parts.at(0).content_type, "audio/wav");
  EXPECT_EQ(fields["file"], wav);
  EXPECT_EQ(fields["model"], "whisper-large-v3");
  EXPECT_EQ(fields["response_format"], "json");
  EXPECT_EQ(fields["stream"], "true");
  EXPECT_EQ(fields.count("stream_include_usage"), 0u);  // the extra body's null leaves it out
  EXPECT_EQ(fields["language"], "en");
  EXPECT_EQ(fields["temperature"], "0");
  EXPECT_EQ(fields["prompt"], "names: Ada");
  EXPECT_EQ(fields["timestamp_granularities[]"], "segment");
  EXPECT_EQ(form.parts.size(), 8u);
  // Without the extra body: usage asked for a stream (vLLM sends it only then); none whole.
  s.sampling.extra_body.clear();
  s.language.clear();
  const auto plain = [&](bool stream) {
    s.stream = stream;
    const std::string h = *RequestEncoder(s).encode_transcription("RIFF", 1);
    return h;
  };
  EXPECT_NE(plain(true).find("name=\"stream_include_usage\"\r\n\r\ntrue\r\n"), std::string::npos);
  EXPECT_EQ(plain(false).find("stream_include_usage"), std::string::npos);
  EXPECT_NE(plain(false).find("name=\"stream\"\r\n\r\nfalse\r\n"), std::string::npos);
  EXPECT_EQ(plain(false).find("language"), std::string::npos);
}

// Transcription answers: json (OpenAI's token usage), verbose_json (the
// duration heard, as a number or vLLM's string; duration usage), text; an
// answer without text, a duration that is not the audio sent, an error
// body and a non-JSON body each get their outcome.
TEST_F(Collector, TranscriptionAnswersAreReadAndChecked) {
  auto answer = [&](std::string_view body, std::string_view format = "json", int status = 200) {
    start(false);
    c.expect_transcription(12.5, format);
    c.on_headers(status, 120);
    chunk(body, 130);
    c.on_complete(net::ExchangeError::kNone, "", 150);
    return record;
  };
  auto r = answer(
      R"({"text":"hello there","usage":{"type":"tokens","input_tokens":320,)"
      R"("input_token_details":{"text_tokens":8,"audio_tokens":312},"output_tokens":3,"total_tokens":323}})");
  EXPECT_EQ(r.outcome, Outcome::kOk) << r.detail;
  EXPECT_EQ(r.prompt_tokens, 320);
  EXPECT_EQ(r.output_tokens, 3);
  EXPECT_EQ(r.t_first_token, 150);
  EXPECT_EQ(r.t_last_token, 150);
  EXPECT_EQ(c.text(), "hello there");
  // vLLM's json: duration usage (whole seconds), no token counts.
  r = answer(R"({"text":"hi","usage":{"type":"duration","seconds":13}})");
  EXPECT_EQ(r.outcome, Outcome::kOk) << r.detail;
  EXPECT_EQ(r.output_tokens, -1);
  r = answer(
      R"({"task":"transcribe","language":"english","duration":12.5,"text":" a b",)"
      R"("segments":[{"id":0,"start":0,"end":12.5,"text":" a b"}],"usage":{"type":"duration","seconds":13}})",
      "verbose_json");
  EXPECT_EQ(r.outcome, Outcome::kOk) << r.detail;
  EXPECT_EQ(
      answer(R"({"duration":"12.50","language":"en","text":"x","segments":null})", "verbose_json").outcome,
      Outcome::kOk);
  r = answer(R"({"duration":"3.0","text":"x"})", "verbose_json");
  EXPECT_EQ(r.outcome, Outcome::kValidationError);
  EXPECT_NE(r.detail.find("the server reports 3.000 s of audio where 12.500 s were sent"), std::string::npos)
      << r.detail;
  r = answer(R"({"text":"","usage":{"type":"tokens","input_tokens":9,"output_tokens":0}})");
  EXPECT_EQ(r.outcome, Outcome::kOk) << r.detail;  // silence: an empty transcript is an answer
  r = answer(R"({"usage":{"type":"tokens","input_tokens":9,"output_tokens":1}})");
  EXPECT_EQ(r.outcome, Outcome::kValidationError);
  EXPECT_NE(r.detail.find("has no \"text\" string"), std::string::npos) << r.detail;
  EXPECT_EQ(answer(R"({"text":7})").outcome, Outcome::kValidationError);
  r = answer("not json");
  EXPECT_EQ(r.outcome, Outcome::kProtocolError);
  EXPECT_NE(r.detail.find("response is not a transcription answer (not a JSON object)"), std::string::npos)
      << r.detail;
  r = answer(R"({"error":{"message":"Invalid file format."}})");
  EXPECT_EQ(r.outcome, Outcome::kHttpError);
  EXPECT_NE(r.detail.find("Invalid file format."), std::string::npos);
  r = answer(R"({"error":{"message":"bad audio"}})", "json", 400);
  EXPECT_EQ(r.outcome, Outcome::kHttpError);
  EXPECT_NE(r.detail.find("HTTP 400"), std::string::npos) << r.detail;
  r = answer("  the transcript itself\n", "text");
  EXPECT_EQ(r.outcome, Outcome::kOk) << r.detail;
  EXPECT_EQ(c.text(), "  the transcript itself\n");
}

// Streamed transcriptions: OpenAI's typed events (the first delta is the
// first token; transcript.text.done ends the stream with the usage) and
// vLLM's transcription.chunk objects with a usage chunk and [DONE].
TEST_F(Collector, StreamedTranscriptionsInOpenAisAndVllmsForm) {
  start();
  c.expect_transcription(3, "json");
  c.on_headers(200, 120);
  chunk("event: transcript.text.delta\ndata: {\"type\":\"transcript.text.delta\",\"delta\":\"The\"}\n\n",
        200);
  chunk("data: {\"type\":\"transcript.text.delta\",\"delta\":\" quick fox\"}\n\n", 300);
  chunk(
      "data: {\"type\":\"transcript.text.done\",\"text\":\"The quick fox\",\"usage\":{\"type\":\"tokens\","
      "\"input_tokens\":80,\"output_tokens\":4,\"total_tokens\":84}}\n\n",
      310);
  c.on_complete(net::ExchangeError::kNone, "", 320);
  EXPECT_EQ(record.outcome, Outcome::kOk) << record.detail;
  EXPECT_EQ(record.t_first_token, 200);
  EXPECT_EQ(record.t_last_token, 300);
  EXPECT_EQ(record.output_tokens, 4);
  EXPECT_EQ(record.prompt_tokens, 80);
  EXPECT_EQ(record.event_times.size(), 2u);
  EXPECT_EQ(c.text(), "The quick fox");  // the done event's whole text is no further output

  start();
  c.expect_transcription(3, "json");
  c.on_headers(200, 120);
  const std::string head =
      R"(data: {"id":"trsc-1","object":"transcription.chunk","created":1,"model":"w","choices":[)";
  chunk(head + R"({"delta":{"content":" Hi"},"finish_reason":null,"stop_reason":null}]})" + "\n\n", 200);
  chunk(head + R"({"delta":{"content":" there"},"finish_reason":"stop","stop_reason":null}]})" + "\n\n", 260);
  chunk(R"(data: {"id":"trsc-1","object":"transcription.chunk","created":1,"model":"w","choices":[],)"
        R"("usage":{"prompt_tokens":90,"total_tokens":93,"completion_tokens":3}})"
        "\n\ndata: [DONE]\n\n",
        270);
  c.on_complete(net::ExchangeError::kNone, "", 280);
  EXPECT_EQ(record.outcome, Outcome::kOk) << record.detail;
  EXPECT_EQ(record.response_id, "trsc-1");
  EXPECT_EQ(record.t_first_token, 200);
  EXPECT_EQ(record.t_last_token, 260);
  EXPECT_EQ(record.output_tokens, 3);
  EXPECT_EQ(record.prompt_tokens, 90);

  // An error event inside the stream.
  start();
  c.expect_transcription(3, "json");
  c.on_headers(200, 120);
  chunk("data: {\"type\":\"error\",\"message\":\"audio too short\"}\n\n", 200);
  c.on_complete(net::ExchangeError::kNone, "", 210);
  EXPECT_EQ(record.outcome, Outcome::kHttpError);
  EXPECT_NE(record.detail.find("audio too short"), std::string::npos) << record.detail;
}

// bench --logprobs against llama.cpp's llama-server: its stream as recorded
// (commit c392e50, the tiny model of scripts/tiny-model.py, "logprobs": 1,
// curl -N), whole. Every output token's logprob lands in the record.
TEST(CollectorLogprobs, LlamaServerCompletionsStream) {
  ChunkParser parser(true);
  ResponseCollector c;
  RequestRecord record;
  RequestRecord r;
  r.id = 1;
  c.init(std::move(r), true, false, &parser, [&](ResponseCollector& done) { record = done.record(); });
  c.on_sent(10);
  c.on_headers(200, 20);
  c.on_content_type("text/event-stream");
  c.on_body(
      R"(data: {"choices":[{"text":" DUP","index":0,"logprobs":{"content":[{"id":45556,"token":" DUP","bytes":[32,68,85,80],"logprob":-10.116469383239746,"top_logprobs":[{"id":13200,"token":"space","bytes":[115,112,97,99,101],"logprob":-9.928023338317871}]}]},"finish_reason":null}],"created":1796186280,"model":"gpt-3.5-turbo","system_fingerprint":"b0-unknown","object":"text_completion","id":"chatcmpl-4fanQBJ8qgQQSOunwsEw7aOMn9TvUpOw"}

data: {"choices":[{"text":" systematically","index":0,"logprobs":{"content":[{"id":25735,"token":" systematically","bytes":[32,115,121,115,116,101,109,97,116,105,99,97,108,108,121],"logprob":-10.094024658203125,"top_logprobs":[{"id":45556,"token":" DUP","bytes":[32,68,85,80],"logprob":-9.510994911193848}]}]},"finish_reason":null}],"created":1796186280,"model":"gpt-3.5-turbo","system_fingerprint":"b0-unknown","object":"text_completion","id":"chatcmpl-4fanQBJ8qgQQSOunwsEw7aOMn9TvUpOw"}

)",
      30);
  c.on_body(
      R"(data: {"choices":[{"text":"`,","index":0,"logprobs":{"content":[{"id":47671,"token":"`,","bytes":[96,44],"logprob":-10.048523902893066,"top_logprobs":[{"id":25735,"token":" systematically","bytes":[32,115,121,115,116,101,109,97,116,105,99,97,108,108,121],"logprob":-9.528867721557617}]}]},"finish_reason":null}],"created":1796186280,"model":"gpt-3.5-turbo","system_fingerprint":"b0-unknown","object":"text_completion","id":"chatcmpl-4fanQBJ8qgQQSOunwsEw7aOMn9TvUpOw"}

data: {"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"created":1796186280,"model":"gpt-3.5-turbo","system_fingerprint":"b0-unknown","object":"text_completion","usage":{"completion_tokens":3,"prompt_tokens":2,"total_tokens":5},"id":"chatcmpl-4fanQBJ8qgQQSOunwsEw7aOMn9TvUpOw","timings":{"prompt_n":2,"prompt_ms":5.005,"prompt_per_token_ms":2.5025,"prompt_per_second":399.6003996003996,"predicted_n":3,"predicted_ms":82.917,"predicted_per_token_ms":27.639,"predicted_per_second":36.18075907232534}}

data: [DONE]

)",
      40);
  c.on_complete(net::ExchangeError::kNone, "", 50);
  EXPECT_EQ(record.outcome, Outcome::kOk) << record.detail;
  EXPECT_EQ(record.output_tokens, 3);
  ASSERT_TRUE(record.logprobs.has_value());
  EXPECT_EQ(record.logprobs->count, 3u);
  EXPECT_DOUBLE_EQ(record.logprobs->sum, -30.259017944335938);  // python3: the three values summed
  EXPECT_EQ(record.logprobs->bins[40], 3u);                     // -logprob in [10, 10.25)
  std::string line;
  record.append_json(line);
  EXPECT_NE(line.find(R"("logprobs":{"n":3,"sum":-30.2590,"bins":[)"), std::string::npos) << line;
}

// The chat stream of llama-server (recorded as above) and a whole chat body;
// without --logprobs the record has no logprobs field at all.
TEST(CollectorLogprobs, LlamaServerChatStreamAndBody) {
  ChunkParser parser(true);
  ResponseCollector c;
  RequestRecord record;
  c.init(RequestRecord{}, true, false, &parser, [&](ResponseCollector& done) { record = done.record(); });
  c.on_sent(10);
  c.on_headers(200, 20);
  c.on_content_type("text/event-stream");
  c.on_body(
      R"(data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" plan"},"logprobs":{"content":[{"id":1410,"token":" plan","bytes":[32,112,108,97,110],"logprob":-10.088603973388672,"top_logprobs":[{"id":198,"token":"\n","bytes":[10],"logprob":-9.903851509094238}]}]}}],"created":1796186282,"id":"chatcmpl-M2PeNUcCOkKO1XstACwH0VYSPfus5Pkc","model":"gpt-3.5-turbo","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}

data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"ws"},"logprobs":{"content":[{"id":18504,"token":"ws","bytes":[119,115],"logprob":-10.08158016204834,"top_logprobs":[{"id":1410,"token":" plan","bytes":[32,112,108,97,110],"logprob":-9.320116996765137}]}]}}],"created":1796186282,"id":"chatcmpl-M2PeNUcCOkKO1XstACwH0VYSPfus5Pkc","model":"gpt-3.5-turbo","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}

data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"�"},"logprobs":{"content":[{"id":94,"token":"�","bytes":[161],"logprob":-10.126490592956543,"top_logprobs":[{"id":18504,"token":"ws","bytes":[119,115],"logprob":-9.191463470458984}]}]}}],"created":1796186283,"id":"chatcmpl-M2PeNUcCOkKO1XstACwH0VYSPfus5Pkc","model":"gpt-3.5-turbo","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}

data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1796186283,"id":"chatcmpl-M2PeNUcCOkKO1XstACwH0VYSPfus5Pkc","model":"gpt-3.5-turbo","system_fingerprint":"b0-unknown","object":"chat.completion.chunk","usage":{"completion_tokens":3,"prompt_tokens":28,"total_tokens":31},"timings":{"prompt_n":28,"prompt_ms":1246.212,"prompt_per_token_ms":44.50757142857143,"prompt_per_second":22.468087291728857,"predicted_n":3,"predicted_ms":1240.637,"predicted_per_token_ms":413.54566666666665,"predicted_per_second":2.41811263085012}}

data: [DONE]

)",
      30);
  c.on_complete(net::ExchangeError::kNone, "", 40);
  EXPECT_EQ(record.outcome, Outcome::kOk) << record.detail;
  ASSERT_TRUE(record.logprobs.has_value());
  EXPECT_EQ(record.logprobs->count, 3u);
  EXPECT_DOUBLE_EQ(record.logprobs->sum, -30.296674728393555);  // python3: the three values summed

  // A whole chat body (recorded likewise, without "stream").
  c.init(RequestRecord{}, false, false, &parser, [&](ResponseCollector& done) { record = done.record(); });
  c.on_sent(10);
  c.on_headers(200, 20);
  c.on_body(
      R"({"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant","content":" rabbitassy"},"logprobs":{"content":[{"id":22746,"token":" rabbit","bytes":[32,114,97,98,98,105,116],"logprob":-10.109845161437988,"top_logprobs":[{"id":198,"token":"\n","bytes":[10],"logprob":-9.903851509094238}]},{"id":11720,"token":"assy","bytes":[97,115,115,121],"logprob":-10.097713470458984,"top_logprobs":[{"id":22746,"token":" rabbit","bytes":[32,114,97,98,98,105,116],"logprob":-9.430587768554688}]}]}}],"created":1796186288,"model":"gpt-3.5-turbo","system_fingerprint":"b0-unknown","object":"chat.completion","usage":{"completion_tokens":2,"prompt_tokens":28,"total_tokens":30},"id":"chatcmpl-BPsYPJ6EIQ0w5iI3BD77hbYC9BaUOOCI"})",
      30);
  c.on_complete(net::ExchangeError::kNone, "", 40);
  EXPECT_EQ(record.outcome, Outcome::kOk) << record.detail;
  ASSERT_TRUE(record.logprobs.has_value());
  EXPECT_EQ(record.logprobs->count, 2u);
  EXPECT_EQ(record.logprobs->bins[40], 2u);

  ChunkParser off;
  c.init(RequestRecord{}, false, false, &off, [&](ResponseCollector& done) { record = done.record(); });
  c.on_headers(200, 20);
  c.on_body(
      R"({"choices":[{"text":"a","logprobs":{"token_logprobs":[-1]}}],"usage":{"completion_tokens":1}})", 30);
  c.on_complete(net::ExchangeError::kNone, "", 40);
  EXPECT_FALSE(record.logprobs.has_value());
  std::string line;
  record.append_json(line);
  EXPECT_EQ(line.find("logprobs"), std::string::npos) << line;
}

}  // namespace
}  // namespace tokenscope::bench
