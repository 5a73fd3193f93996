// The API end to end in memory: router, serving core, engine, on a manual
// clock (no sockets, no sleeping).
#include "serve/router.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/json_schema.h"
#include "net/multipart.h"

#include <fmt/format.h>

#include <map>

namespace tokenscope::serve {
namespace {

using nlohmann::json;

struct FakeResponder : net::Responder {
  explicit FakeResponder(const Clock& c) : clock(c) {}
  const Clock& clock;
  int status = 0;
  std::string content_type;
  bool streaming = false, ended = false, was_reset = false;
  std::vector<std::string> chunks;
  std::vector<std::pair<Nanos, Nanos>> written;  // (write time, engine time) not known here: write times only
  std::vector<Nanos> write_times;
  std::optional<net::HttpResponse> response;
  std::function<void()> disconnect;

  void respond(net::HttpResponse r) override {
    status = r.status;
    response = std::move(r);
  }
  void start_stream(int s, std::string ct, std::vector<net::Header>) override {
    status = s;
    content_type = std::move(ct);
    streaming = true;
  }
  void send(std::string data, std::function<void(Nanos)> cb) override {
    if (ended || was_reset) return;
    chunks.push_back(std::move(data));
    write_times.push_back(clock.now_ns());
    if (cb) cb(clock.now_ns());
  }
  void end_stream() override { ended = true; }
  void reset() override { was_reset = true; }
  void on_disconnect(std::function<void()> cb) override { disconnect = std::move(cb); }

  // The JSON payloads of the SSE events ("[DONE]" kept as a string).
  std::vector<json> events() const {
    std::vector<json> out;
    for (std::string c : chunks) {
      // A named event (the Responses API): "event: TYPE\n" before its data.
      if (c.rfind("event: ", 0) == 0) c = c.substr(c.find('\n') + 1);
      EXPECT_EQ(c.rfind("data: ", 0), 0u) << c;
      EXPECT_EQ(c.substr(c.size() - 2), "\n\n");
      const std::string payload = c.substr(6, c.size() - 8);
      out.push_back(payload == "[DONE]" ? json("[DONE]") : json::parse(payload, nullptr, false));
    }
    return out;
  }
};

class Api : public ::testing::Test {
 protected:
  void build(std::string api_key = "", std::string fault_spec = "", std::optional<std::string> natural = {},
             double reasoning_share = 0.0, std::string reasoning_field = "reasoning",
             std::string model = "llama-3-8b") {
    engine::EngineSettings s;
    s.model = model;
    eff_ = std::make_unique<engine::EffectiveEngine>(engine::resolve_engine(s, engine::Catalog::builtin()));
    const auto& eff = *eff_;
    const engine::FleetSetup fleet =
        engine::resolve_fleet(fleet_options, s, eff, engine::Catalog::builtin(), /*router_seed=*/7);
    metrics = std::make_unique<ServeMetrics>(model, eff.max_model_len, fleet.fleet() ? fleet.replicas : 1);
    faults = std::make_unique<FaultPlan>(parse_fault_spec(fault_spec), 5);
    CoreSettings cs;
    cs.reasoning_share = reasoning_share;
    cs.reasoning_field = std::move(reasoning_field);
    cs.tools = tool_policy;
    cs.fleet_history = fleet_history;
    if (natural)
      cs.natural_length =
          workload::parse_length_spec(*natural, "--natural-output-len", workload::LengthRole::kOutput);
    core = std::make_unique<ServingCore>(
        exec, eff, s, std::make_unique<engine::RooflineCostModel>(eff.model, eff.gpu, 1, s.cost), *metrics,
        nullptr, cs, model, &fleet);
    RouterSettings rs;
    rs.parse.model_names = {model};
    rs.parse.model = &eff.model;
    rs.parse.max_model_len = eff.max_model_len;
    rs.api_key = std::move(api_key);
    router = std::make_unique<Router>(*core, *metrics, *faults, rs);
  }
  void SetUp() override { build(); }

  std::shared_ptr<FakeResponder> call(std::string method, std::string target, std::string body = "",
                                      std::vector<net::Header> headers = {}) {
    auto r = std::make_shared<FakeResponder>(exec.clock());
    net::HttpRequest req;
    req.method = std::move(method);
    req.target = std::move(target);
    req.body = std::move(body);
    req.headers = std::move(headers);
    router->handle(std::move(req), r);
    exec.run_until_idle();
    return r;
  }
  json body_of(const FakeResponder& r) { return json::parse(r.response->body); }
  // Starts a long stream and runs only `tasks` executor tasks of it.
  std::shared_ptr<FakeResponder> start_stream(int max_tokens, std::size_t tasks) {
    auto r = std::make_shared<FakeResponder>(exec.clock());
    net::HttpRequest req;
    req.method = "POST";
    req.target = "/v1/completions";
    req.body =
        json{{"prompt", "x"}, {"max_tokens", max_tokens}, {"ignore_eos", true}, {"stream", true}}.dump();
    router->handle(std::move(req), r);
    exec.run_until_idle(tasks);
    return r;
  }

  // Sends a request without running the executor (several then run together).
  std::shared_ptr<FakeResponder> send(const json& body, std::string target = "/v1/completions") {
    auto r = std::make_shared<FakeResponder>(exec.clock());
    net::HttpRequest req;
    req.method = "POST";
    req.target = std::move(target);
    req.body = body.dump();
    router->handle(std::move(req), r);
    return r;
  }

  ToolPolicy tool_policy;
  engine::FleetOptions fleet_options;  // a fleet behind the server (build())
  bool fleet_history = false;          // its routes and transfers kept (bench's in-process server)
  ManualExecutor exec{1'000'000'000};
  std::unique_ptr<engine::EffectiveEngine> eff_;
  std::unique_ptr<ServeMetrics> metrics;
  std::unique_ptr<FaultPlan> faults;
  std::unique_ptr<ServingCore> core;
  std::unique_ptr<Router> router;
};

TEST_F(Api, NonStreamingCompletion) {
  const auto r = call("POST", "/v1/completions",
                      R"({"prompt": "Once upon a time", "max_tokens": 5, "ignore_eos": true})");
  ASSERT_EQ(r->status, 200);
  const auto j = body_of(*r);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  const std::string text = j["choices"][0]["text"];
  EXPECT_EQ(tokenizers::tokenize(text).size(), 5u);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["prompt_tokens"], tokenizers::tokenize("Once upon a time").size());
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int>() + 5);
  EXPECT_EQ(core->active(), 0u);
}

// A simulated reasoning model (serve --reasoning-share 0.5): the first half
// of each chat answer's tokens streams in delta.reasoning, the rest in
// delta.content with the finish reason; whole, message.reasoning_content (the
// field chosen) before message.content. Completions have no reasoning.
TEST_F(Api, AReasoningModelStreamsItsReasoningFirst) {
  build("", "", {}, 0.5, "reasoning");
  const auto r =
      call("POST", "/v1/chat/completions",
           R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "ignore_eos": true,
                          "stream": true})");
  const auto ev = r->events();
  ASSERT_EQ(ev.size(), 1u + 4u + 1u);  // role, 4 tokens, [DONE]
  for (int i = 1; i <= 2; ++i) {
    EXPECT_FALSE(ev[i]["choices"][0]["delta"]["reasoning"].get<std::string>().empty()) << ev[i];
    EXPECT_FALSE(ev[i]["choices"][0]["delta"].contains("content")) << ev[i];
  }
  for (int i = 3; i <= 4; ++i) {
    EXPECT_FALSE(ev[i]["choices"][0]["delta"]["content"].get<std::string>().empty()) << ev[i];
    EXPECT_FALSE(ev[i]["choices"][0]["delta"].contains("reasoning")) << ev[i];
  }
  EXPECT_EQ(ev[4]["choices"][0]["finish_reason"], "length");
  build("", "", {}, 0.5, "reasoning_content");
  const auto whole = body_of(*call("POST", "/v1/chat/completions",
                                   R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                                       "ignore_eos": true})"));
  const auto& m = whole["choices"][0]["message"];
  EXPECT_FALSE(m["reasoning_content"].get<std::string>().empty()) << m;
  EXPECT_FALSE(m["content"].get<std::string>().empty()) << m;
  EXPECT_EQ(whole["usage"]["completion_tokens"], 4);
  const auto text =
      body_of(*call("POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 4, "ignore_eos": true})"));
  EXPECT_EQ(text["choices"][0]["text"].get<std::string>().empty(), false);
  EXPECT_FALSE(text["choices"][0].contains("reasoning"));
}

TEST_F(Api, StreamingChatWithUsage) {
  const auto r =
      call("POST", "/v1/chat/completions",
           R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "ignore_eos": true,
                          "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(r->streaming);
  EXPECT_EQ(r->content_type, "text/event-stream");
  EXPECT_TRUE(r->ended);
  const auto ev = r->events();
  ASSERT_EQ(ev.size(), 1u + 4u + 1u + 1u);  // role, 4 tokens, usage, [DONE]
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["content"], "");
  for (int i = 1; i <= 4; ++i) {
    EXPECT_FALSE(ev[i]["choices"][0]["delta"].contains("role"));
    EXPECT_FALSE(ev[i]["choices"][0]["delta"]["content"].get<std::string>().empty());
  }
  EXPECT_TRUE(ev[3]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(ev[4]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(ev[5]["choices"].empty());
  EXPECT_EQ(ev[5]["usage"]["completion_tokens"], 4);
  EXPECT_EQ(ev[6], "[DONE]");
  // Tokens leave at the engine's step ends: strictly increasing times, the
  // first one after a prefill step and each later one a decode step later.
  for (int i = 2; i <= 4; ++i) EXPECT_GT(r->write_times[i], r->write_times[i - 1]);
  EXPECT_GT(r->write_times[1] - 1'000'000'000, 5'000'000);  // at least one 6 ms step
}

// A request that shares a long prefix with one that finished before it
// reports the prefix tokens it found cached: whole blocks of the common
// prefix (as vLLM), the same count the engine adds to its prefix-cache hits.
// Completions and chat, streamed (include_usage) and whole.
TEST_F(Api, UsageReportsTheCachedPrefixTokens) {
  std::string shared = "Once upon a time";
  for (int i = 0; i < 30; ++i) shared += " the old king of the north had seven sons and a dog";
  for (const bool chat : {false, true}) {
    for (const bool stream : {false, true}) {
      build();  // an empty cache for each case
      auto body_with = [&](const std::string& text) {
        json j = {{"max_tokens", 3}, {"ignore_eos", true}, {"stream", stream}};
        if (chat)
          j["messages"] = json::array({{{"role", "user"}, {"content", text}}});
        else
          j["prompt"] = text;
        if (stream) j["stream_options"] = {{"include_usage", true}};
        return j;
      };
      auto usage_of = [&](const std::string& text) {
        const auto r =
            call("POST", chat ? "/v1/chat/completions" : "/v1/completions", body_with(text).dump());
        EXPECT_EQ(r->status, 200);
        if (!stream) return body_of(*r)["usage"];
        const auto ev = r->events();
        EXPECT_GE(ev.size(), 2u);
        return ev[ev.size() - 2]["usage"];  // the usage chunk before [DONE]
      };
      auto tokens_of = [&](const std::string& text) {
        json j = body_with(text);
        j.erase("max_tokens");
        j.erase("ignore_eos");
        j.erase("stream");
        j.erase("stream_options");
        return body_of(*call("POST", "/tokenize", j.dump()))["tokens"].get<std::vector<int>>();
      };
      const std::string first = shared + " who ran away", second = shared + " who stayed home";
      const auto a = tokens_of(first), b = tokens_of(second);
      std::size_t common = 0;
      while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
      ASSERT_GT(common, 64u);
      const std::uint64_t expected = common / 16 * 16;  // whole 16-token blocks

      const auto u1 = usage_of(first);
      EXPECT_EQ(u1["prompt_tokens_details"]["cached_tokens"], 0) << chat << stream;
      const double hits_before = metrics->value("vllm:prefix_cache_hits_total");
      const auto u2 = usage_of(second);
      EXPECT_EQ(u2["prompt_tokens"], b.size());
      EXPECT_EQ(u2["prompt_tokens_details"]["cached_tokens"], expected)
          << "chat " << chat << " stream " << stream;
      EXPECT_EQ(metrics->value("vllm:prefix_cache_hits_total") - hits_before, static_cast<double>(expected));
      const std::string m = call("GET", "/metrics")->response->body;  // the first request hit nothing
      EXPECT_NE(m.find("vllm:prefix_cache_hits_total{model_name=\"llama-3-8b\",engine=\"0\"} " +
                       std::to_string(expected) + ".0\n"),
                std::string::npos);
    }
  }
}

// Pooling over the simulator: each input is a prefill, answered whole when
// the last one ends; vectors are unit length and a function of the input;
// rerank scores come sorted, top_n of them; the metrics count the requests
// and their prompt tokens, no generation token.
TEST_F(Api, EmbeddingsAndRerankArePrefillsAnsweredWhole) {
  const auto e = call("POST", "/v1/embeddings",
                      R"({"input": ["one two three", "four five", "one two three"], "dimensions": 64})");
  ASSERT_EQ(e->status, 200) << e->response->body;
  const auto j = body_of(*e);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 3u);
  const std::uint64_t tokens =
      tokenizers::tokenize("one two three").size() * 2 + tokenizers::tokenize("four five").size();
  EXPECT_EQ(j["usage"]["prompt_tokens"], tokens);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(j["data"][i]["index"], i);
    const auto v = j["data"][i]["embedding"].get<std::vector<double>>();
    ASSERT_EQ(v.size(), 64u);
    double norm = 0;
    for (const double x : v) norm += x * x;
    EXPECT_NEAR(norm, 1.0, 1e-4);
  }
  EXPECT_EQ(j["data"][0]["embedding"], j["data"][2]["embedding"]);
  EXPECT_NE(j["data"][0]["embedding"], j["data"][1]["embedding"]);
  EXPECT_EQ(e->response->body.find("completion_tokens"), std::string::npos);

  // base64: 4 little-endian bytes per float, the same vector.
  const auto b =
      body_of(*call("POST", "/v1/embeddings",
                    R"({"input": "one two three", "dimensions": 64, "encoding_format": "base64"})"));
  EXPECT_EQ(b["data"][0]["embedding"].get<std::string>().size(), 4u * ((64u * 4 + 2) / 3));

  const auto r =
      call("POST", "/v1/rerank", R"({"query": "q w", "documents": ["a", "b c", "d e f"], "top_n": 2})");
  ASSERT_EQ(r->status, 200) << r->response->body;
  const auto k = body_of(*r);
  ASSERT_EQ(k["results"].size(), 2u);
  EXPECT_GE(k["results"][0]["relevance_score"].get<double>(),
            k["results"][1]["relevance_score"].get<double>());
  EXPECT_EQ(k["usage"]["prompt_tokens"],
            3 * tokenizers::tokenize("q w").size() + tokenizers::tokenize("a").size() +
                tokenizers::tokenize("b c").size() + tokenizers::tokenize("d e f").size());
  EXPECT_EQ(core->active(), 0u);
  const std::string m = metrics->render();
  // 3 + 1 embeddings, 3 documents.
  EXPECT_NE(
      m.find(
          "vllm:request_success_total{model_name=\"llama-3-8b\",engine=\"0\",finished_reason=\"stop\"} 7.0"),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("vllm:generation_tokens_total{model_name=\"llama-3-8b\",engine=\"0\"} 0.0"),
            std::string::npos);

  // Bad input: named fields.
  EXPECT_EQ(call("POST", "/v1/embeddings", R"({"input": []})")->status, 400);
  EXPECT_EQ(call("POST", "/v1/embeddings", R"({"input": "x", "dimensions": 5000})")->status, 400);
  EXPECT_EQ(call("POST", "/v1/embeddings", R"({"input": "x", "encoding_format": "int8"})")->status, 400);
  EXPECT_EQ(call("POST", "/v1/rerank", R"({"query": "q"})")->status, 400);
  EXPECT_EQ(call("POST", "/v1/rerank", R"({"query": "q", "documents": [1]})")->status, 400);
  const auto missing = call("POST", "/v1/rerank", R"({"documents": ["a"]})");
  EXPECT_EQ(body_of(*missing)["error"]["param"], "query");
}

// A 16 kHz mono 16-bit WAV of `ms` milliseconds of silence.
std::string test_wav(std::uint32_t ms) {
  const std::uint32_t bytes = ms * 32;
  auto le = [](std::string& out, std::uint32_t v, int n) {
    for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  std::string w = "RIFF";
  le(w, 36 + bytes, 4);
  w += "WAVEfmt ";
  le(w, 16, 4);
  le(w, 1, 2);
  le(w, 1, 2);
  le(w, 16000, 4);
  le(w, 32000, 4);
  le(w, 2, 2);
  le(w, 16, 2);
  w += "data";
  le(w, bytes, 4);
  w.append(bytes, '\0');
  return w;
}

// A transcription upload: the file and the fields, as multipart/form-data.
net::HttpRequest transcription_request(const std::string& file,
                                       std::vector<std::pair<std::string, std::string>> fields,
                                       bool file_part = true) {
  std::vector<net::FormPart> parts;
  if (file_part) parts.push_back({"file", file, "a.wav", "audio/wav"});
  for (const auto& [k, v] : fields) parts.push_back({k, v});
  const std::string b = net::multipart_boundary(parts, 1);
  net::HttpRequest req;
  req.method = "POST";
  req.target = "/v1/audio/transcriptions";
  req.body = net::multipart_body(parts, b);
  req.headers = {{"content-type", net::multipart_content_type(b)}};
  return req;
}

// /v1/audio/transcriptions over an audio model: the prompt is the audio's
// tokens (25 a second) and the decoder prompt, the transcript
// ceil(3.25 x seconds) tokens; json with token usage, verbose_json with the
// duration and a segment per 30 s, text, or a vLLM-style stream; the audio
// is counted in tokenscope:audio_input_seconds_total. Bad uploads are 400s
// that name the field; a model without an audio encoder refuses them.
TEST_F(Api, TranscriptionsTurnAWavUploadIntoItsTranscript) {
  build("", "", std::nullopt, 0.0, "reasoning", "qwen2-audio-7b");
  auto send = [&](net::HttpRequest req) {
    auto r = std::make_shared<FakeResponder>(exec.clock());
    router->handle(std::move(req), r);
    exec.run_until_idle();
    return r;
  };
  const std::string wav = test_wav(4000);
  const std::uint64_t audio_tokens = eff_->model.audio_tokens(4.0);
  EXPECT_EQ(audio_tokens, 100u);  // 25 a second
  EXPECT_EQ(transcript_tokens(4.0), 13u);
  auto r = send(transcription_request(wav, {{"model", "qwen2-audio-7b"}, {"language", "de"}}));
  ASSERT_EQ(r->status, 200) << r->response->body;
  auto j = body_of(*r);
  const std::uint64_t decoder = tokenizers::tokenize("<|startoftranscript|><|de|><|transcribe|>").size();
  EXPECT_EQ(j["usage"]["type"], "tokens");
  EXPECT_EQ(j["usage"]["output_tokens"], 13);
  EXPECT_EQ(j["usage"]["input_tokens"], decoder + audio_tokens);
  EXPECT_EQ(j["usage"]["input_token_details"]["audio_tokens"], audio_tokens);
  EXPECT_FALSE(j["text"].get<std::string>().empty());

  r = send(transcription_request(test_wav(45'000), {{"response_format", "verbose_json"}}));
  ASSERT_EQ(r->status, 200) << r->response->body;
  j = body_of(*r);
  EXPECT_DOUBLE_EQ(j["duration"].get<double>(), 45.0);
  EXPECT_EQ(j["segments"].size(), 2u);
  EXPECT_EQ(j["usage"]["type"], "duration");
  EXPECT_EQ(j["usage"]["seconds"], 45);
  EXPECT_EQ(j["segments"][0]["text"].get<std::string>() + j["segments"][1]["text"].get<std::string>(),
            j["text"]);

  r = send(transcription_request(wav, {{"response_format", "text"}}));
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->response->content_type, "text/plain; charset=utf-8");
  EXPECT_FALSE(r->response->body.empty());

  r = send(transcription_request(wav, {{"stream", "true"}, {"stream_include_usage", "true"}}));
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->content_type, "text/event-stream");
  std::string text;
  int deltas = 0;
  json usage;
  bool done = false;
  for (const auto& e : r->events()) {
    if (e == "[DONE]") {
      done = true;
      continue;
    }
    ASSERT_TRUE(e.is_object());
    EXPECT_EQ(e["object"], "transcription.chunk");
    EXPECT_EQ(e["id"].get<std::string>().rfind("trsc-", 0), 0u);
    if (e.contains("usage")) usage = e["usage"];
    for (const auto& c : e["choices"]) {
      const std::string piece = c["delta"]["content"];
      deltas += !piece.empty();
      text += piece;
    }
  }
  EXPECT_TRUE(done);
  EXPECT_GE(deltas, 2);
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(usage["completion_tokens"], 13);
  EXPECT_EQ(usage["prompt_tokens"],
            tokenizers::tokenize("<|startoftranscript|><|en|><|transcribe|>").size() + audio_tokens);
  EXPECT_EQ(core->active(), 0u);
  EXPECT_DOUBLE_EQ(metrics->value("tokenscope:audio_input_seconds_total"), 4 + 45 + 4 + 4);
  EXPECT_NE(
      metrics->render().find("tokenscope:audio_input_seconds_total{model_name=\"qwen2-audio-7b\",engine="
                             "\"0\"} 57.0"),
      std::string::npos);
  EXPECT_EQ(metrics->value("vllm:generation_tokens_total"), 13 + transcript_tokens(45) + 13 + 13);

  // Bad uploads: 400 with the field named.
  struct Bad {
    net::HttpRequest req;
    std::string param, message;
  };
  net::HttpRequest no_type = transcription_request(wav, {});
  no_type.headers.clear();
  net::HttpRequest cut = transcription_request(wav, {});
  cut.body.resize(cut.body.size() - 10);
  const std::vector<Bad> bad = {
      {std::move(no_type), "", "expected Content-Type multipart/form-data, got none"},
      {std::move(cut), "", "the body ends before the next boundary"},
      {transcription_request(wav, {{"model", "qwen2-audio-7b"}}, false), "file", "'file' is required"},
      {transcription_request("not a wav", {}), "file", "is not a WAV file"},
      {transcription_request(test_wav(601'000), {}), "file", "over the limit of 600 s"},
      {transcription_request(wav, {{"response_format", "srt"}}), "response_format", "no srt or vtt"},
      {transcription_request(wav, {{"stream", "maybe"}}), "stream", "must be true or false"},
      {transcription_request(wav, {{"temperature", "1.5"}}), "temperature", "[0, 1]"},
      {transcription_request(wav, {{"language", "EN!"}}), "language", "ISO-639-1"},
      {transcription_request(wav, {{"language", "en"}, {"language", "de"}}), "language", "given twice"},
      {transcription_request(wav, {{"stream_include_usage", "true"}}), "stream_include_usage",
       "only allowed"},
      {transcription_request(wav, {{"stream", "true"}, {"response_format", "verbose_json"}}),
       "response_format", "streamed transcriptions are json"},
  };
  for (const auto& b : bad) {
    const auto e = send(b.req);
    ASSERT_EQ(e->status, 400) << b.message;
    const auto err = body_of(*e)["error"];
    EXPECT_NE(err["message"].get<std::string>().find(b.message), std::string::npos) << err.dump();
    EXPECT_EQ(err["param"].is_null() ? "" : err["param"].get<std::string>(), b.param) << err.dump();
  }
  EXPECT_EQ(send(transcription_request(wav, {{"model", "whisper-9"}}))->status, 404);
  // The file as a field (no filename) is refused too.
  auto field = transcription_request(wav, {{"file", "abc"}}, false);
  EXPECT_NE(body_of(*send(std::move(field)))["error"]["message"].get<std::string>().find("a file upload"),
            std::string::npos);

  // A text model has no audio encoder.
  build();
  const auto text_model = send(transcription_request(wav, {}));
  ASSERT_EQ(text_model->status, 400);
  EXPECT_NE(body_of(*text_model)["error"]["message"].get<std::string>().find("takes no audio"),
            std::string::npos);
}

// The Responses API: "input" as a string or messages (input_text parts,
// instructions first), through the chat template; streamed as typed events
// ending with response.incomplete (max_output_tokens reached) and its usage,
// or whole as the response object.
TEST_F(Api, TheResponsesApiStreamsTypedEventsAndAnswersWhole) {
  auto r =
      call("POST", "/v1/responses", R"({"input": "hello there", "max_output_tokens": 4, "stream": true})");
  ASSERT_EQ(r->status, 200);
  std::vector<std::string> types;
  std::string text;
  json last;
  for (const auto& e : r->events()) {
    ASSERT_TRUE(e.is_object()) << e.dump();
    types.push_back(e["type"]);
    if (e["type"] == "response.output_text.delta") text += e["delta"].get<std::string>();
    last = e;
  }
  ASSERT_GE(types.size(), 8u);
  EXPECT_EQ(types.front(), "response.created");
  EXPECT_EQ(std::count(types.begin(), types.end(), "response.output_text.delta"), 4);
  EXPECT_EQ(types.back(), "response.incomplete");
  EXPECT_EQ(last["sequence_number"], types.size() - 1);
  const auto& resp = last["response"];
  EXPECT_EQ(resp["status"], "incomplete");
  EXPECT_EQ(resp["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(resp["usage"]["output_tokens"], 4);
  EXPECT_EQ(resp["usage"]["input_tokens"],
            tokenizers::tokenize(apply_chat_template({{"user", "hello there"}})).size());
  EXPECT_EQ(resp["output"][0]["content"][0]["text"], text);

  const auto whole =
      call("POST", "/v1/responses",
           R"({"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],)"
           R"( "instructions": "be brief", "max_output_tokens": 3})");
  ASSERT_EQ(whole->status, 200) << whole->response->body;
  const auto j = body_of(*whole);
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_EQ(j["usage"]["input_tokens"],
            tokenizers::tokenize(apply_chat_template({{"system", "be brief"}, {"user", "hi"}})).size());
  EXPECT_EQ(j["usage"]["output_tokens"], 3);
  EXPECT_EQ(call("POST", "/v1/responses", R"({"input": ""})")->status, 400);
  EXPECT_EQ(
      call("POST", "/v1/responses", R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})")
          ->status,
      400);
}

TEST_F(Api, SeveralPromptsAreSeveralChoices) {
  const auto r = call("POST", "/v1/completions",
                      R"({"prompt": ["a b", "c d"], "max_tokens": 3, "ignore_eos": true, "stream": true})");
  std::set<int> indexes;
  for (const auto& e : r->events())
    if (e.is_object()) indexes.insert(e["choices"][0]["index"].get<int>());
  EXPECT_EQ(indexes, (std::set<int>{0, 1}));
}

TEST_F(Api, StopStringsEndTheTextBeforeTheMatch) {
  const auto free_run = body_of(*call("POST", "/v1/completions",
                                      R"({"prompt": "x", "max_tokens": 30, "seed": 3, "ignore_eos": true})"));
  const std::string text = free_run["choices"][0]["text"];
  const auto words = tokenizers::tokenize(text);
  const std::string stop = *tokenizers::piece_text(words[10]);  // " word" of the 11th token
  const std::size_t cut = text.find(stop);
  json req = {{"prompt", "x"}, {"max_tokens", 30}, {"seed", 3}, {"ignore_eos", true}, {"stop", stop}};
  const auto stopped = body_of(*call("POST", "/v1/completions", req.dump()));
  EXPECT_EQ(stopped["choices"][0]["text"], text.substr(0, cut));
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(stopped["choices"][0]["stop_reason"], stop);
  // Streamed, the same text arrives, with no part of the stop string.
  req["stream"] = true;
  std::string streamed;
  for (const auto& e : call("POST", "/v1/completions", req.dump())->events())
    if (e.is_object()) streamed += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, text.substr(0, cut));
  EXPECT_EQ(metrics->value("vllm:request_success_total", "stop"), 2.0);
}

TEST_F(Api, TheModelStopsOnItsOwnWithoutIgnoreEos) {
  build("", "", "fixed:3");
  const auto j = body_of(*call("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 10})"));
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  const auto k =
      body_of(*call("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 10, "ignore_eos": true})"));
  EXPECT_EQ(k["usage"]["completion_tokens"], 10);
}

TEST_F(Api, ErrorsAndRoutes) {
  EXPECT_EQ(call("GET", "/nope")->status, 404);
  EXPECT_EQ(call("GET", "/v1/completions")->status, 405);
  const auto bad = call("POST", "/v1/completions", R"({"prompt": 3})");
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(body_of(*bad)["error"]["param"], "prompt");
  EXPECT_EQ(call("POST", "/v1/chat/completions",
                 R"({"model": "x", "messages": [{"role": "user", "content": "a"}]})")
                ->status,
            404);
  EXPECT_EQ(call("GET", "/health")->status, 200);
  const auto models = body_of(*call("GET", "/v1/models"));
  EXPECT_EQ(models["data"][0]["id"], "llama-3-8b");
  EXPECT_EQ(models["data"][0]["max_model_len"], 8192);
  const auto tok = body_of(*call("POST", "/tokenize", R"({"prompt": "hello world"})"));
  EXPECT_EQ(tok["count"], 4);
}

TEST_F(Api, ApiKeyGuardsEverythingButHealth) {
  build("sekret");
  EXPECT_EQ(call("GET", "/health")->status, 200);
  EXPECT_EQ(call("GET", "/v1/models")->status, 401);
  EXPECT_EQ(call("GET", "/metrics", "", {{"authorization", "Bearer wrong"}})->status, 401);
  EXPECT_EQ(call("GET", "/v1/models", "", {{"authorization", "Bearer sekret"}})->status, 200);
  const auto denied = call("POST", "/v1/completions", R"({"prompt": "x"})");
  EXPECT_EQ(body_of(*denied)["error"]["type"], "authentication_error");
  // The scheme in any case (RFC 7235), spaces before the token.
  EXPECT_EQ(call("GET", "/v1/models", "", {{"authorization", "bearer sekret"}})->status, 200);
  EXPECT_EQ(call("GET", "/v1/models", "", {{"authorization", "BEARER  sekret"}})->status, 200);
}

TEST_F(Api, ARequestBodyNestedDeeperThanTheBoundIs400) {
  const std::string deep =
      R"({"prompt": "a", "max_tokens": 2, "x": )" + std::string(300, '[') + std::string(300, ']') + "}";
  const auto r = call("POST", "/v1/completions", deep);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(body_of(*r)["error"]["message"].get<std::string>().find("nested deeper than 256 levels"),
            std::string::npos);
  EXPECT_EQ(call("POST", "/tokenize", R"({"prompt": )" + std::string(100000, '[') + "}")->status, 400);
  // At the bound, it parses (and is then refused for what it is, not for its depth).
  const std::string ok =
      R"({"prompt": "a", "max_tokens": 2, "x": )" + std::string(200, '[') + std::string(200, ']') + "}";
  EXPECT_EQ(call("POST", "/v1/completions", ok)->status, 200);
}

TEST(BearerToken, MatchesTheWholeKeyOnly) {
  EXPECT_TRUE(bearer_token_matches("Bearer sekret", "sekret"));
  EXPECT_TRUE(bearer_token_matches("bEaReR sekret", "sekret"));
  EXPECT_FALSE(bearer_token_matches("Bearer sekre", "sekret"));
  EXPECT_FALSE(bearer_token_matches("Bearer sekrets", "sekret"));
  EXPECT_FALSE(bearer_token_matches("Bearer sekreT", "sekret"));
  EXPECT_FALSE(bearer_token_matches("Bearersekret", "sekret"));
  EXPECT_FALSE(bearer_token_matches("Basic sekret", "sekret"));
  EXPECT_FALSE(bearer_token_matches("Bearer ", "sekret"));
  EXPECT_FALSE(bearer_token_matches("", "sekret"));
  EXPECT_FALSE(bearer_token_matches("Bearer sekret ", "sekret"));
}

TEST_F(Api, MetricsUseVllmNamesLabelsAndBuckets) {
  call("POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 4, "ignore_eos": true})");
  call("POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 6, "ignore_eos": true})");
  const std::string m = call("GET", "/metrics")->response->body;
  const std::string labels = "model_name=\"llama-3-8b\",engine=\"0\"";
  for (const std::string& needle :
       std::vector<std::string>{"# TYPE vllm:num_requests_running gauge",
                                "# TYPE vllm:prefix_cache_queries_total counter",
                                "vllm:generation_tokens_total{" + labels + "} 10.0",
                                "vllm:request_success_total{" + labels + ",finished_reason=\"length\"} 2.0",
                                "vllm:time_to_first_token_seconds_bucket{" + labels + ",le=\"0.001\"}",
                                "vllm:time_to_first_token_seconds_bucket{" + labels + ",le=\"2560.0\"} 2.0",
                                "vllm:inter_token_latency_seconds_count{" + labels + "} 8.0",
                                "vllm:request_time_per_output_token_seconds_count{" + labels + "} 2.0",
                                "vllm:e2e_request_latency_seconds_bucket{" + labels + ",le=\"7680.0\"} 2.0",
                                "vllm:iteration_tokens_total_bucket{" + labels + ",le=\"16384.0\"}",
                                "vllm:request_prompt_tokens_bucket{" + labels + ",le=\"5000.0\"}",
                                "vllm:request_queue_time_seconds_sum",
                                "vllm:request_prefill_time_seconds_count",
                                "vllm:request_decode_time_seconds_count",
                                "vllm:kv_cache_usage_perc{",
                                "vllm:num_preemptions_total{",
                                "vllm:prompt_tokens_total{",
                                "tokenscope:faults_injected_total{" + labels + ",kind=\"reset\"} 0.0",
                                "tokenscope:steps_total{",
                                "# TYPE tokenscope:host_kv_usage_perc gauge",
                                "tokenscope:host_kv_blocks{" + labels + "} 0.0",
                                "tokenscope:host_kv_evictions_total{" + labels + "} 0.0",
                                "tokenscope:host_kv_recomputed_blocks_total{" + labels + "} 0.0",
                                "tokenscope:emission_lag_seconds_count{" + labels + "} 0.0"})
    EXPECT_NE(m.find(needle), std::string::npos) << needle;
}

TEST_F(Api, InjectedHttpFaultsAreCounted) {
  build("", "http_5xx=1");
  const auto r = call("POST", "/v1/completions", R"({"prompt": "x"})");
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(metrics->value("tokenscope:faults_injected_total", "http_5xx"), 1.0);
  // The message names the response id the request would have had (and the
  // emission trace the same id), so a client's outcome can be matched to it.
  const std::string message = body_of(*r)["error"]["message"];
  EXPECT_EQ(message.rfind("injected fault: internal server error (cmpl-", 0), 0u) << message;
  build("", "http_429=1");
  const auto t = call("POST", "/v1/completions", R"({"prompt": "x"})");
  EXPECT_EQ(t->status, 429);
  ASSERT_EQ(t->response->headers.size(), 1u);
  EXPECT_EQ(t->response->headers[0].name, "Retry-After");
}

TEST_F(Api, MidStreamFaults) {
  const std::string req = R"({"prompt": "x", "max_tokens": 10, "ignore_eos": true, "stream": true})";
  build("", "reset=1");
  const auto reset = call("POST", "/v1/completions", req);
  EXPECT_TRUE(reset->was_reset);
  EXPECT_EQ(reset->chunks.size(), 4u);  // tokens 1-4, then the reset at the 5th
  EXPECT_EQ(metrics->value("tokenscope:faults_injected_total", "reset"), 1.0);
  EXPECT_EQ(core->active(), 0u);

  build("", "malformed=1");
  const auto bad = call("POST", "/v1/completions", req);
  int malformed = 0;
  for (const auto& e : bad->events()) malformed += e.is_discarded();
  EXPECT_EQ(malformed, 1);
  EXPECT_TRUE(bad->ended);

  build("", "stall=1@250");
  const auto stall = call("POST", "/v1/completions", req);
  EXPECT_TRUE(stall->ended);
  // The 5th token waits 250 ms more than the 4th would suggest.
  EXPECT_GE(stall->write_times[4] - stall->write_times[3], 250'000'000);
  EXPECT_EQ(metrics->value("tokenscope:faults_injected_total", "stall"), 1.0);

  build("", "slow_first_byte=1@400");
  const auto t0 = exec.clock().now_ns();
  const auto slow = call("POST", "/v1/completions", req);
  EXPECT_GE(slow->write_times[0] - t0, 400'000'000);
}

const json kWeatherTool = {
    {"type", "function"},
    {"function",
     {{"name", "get_weather"},
      {"description", "The weather in a city"},
      {"parameters",
       {{"type", "object"},
        {"properties", {{"city", {{"type", "string"}}}, {"unit", {{"enum", {"c", "f"}}}}}},
        {"required", {"city", "unit"}},
        {"additionalProperties", false}}}}}};
const json kSearchTool = {
    {"type", "function"},
    {"function",
     {{"name", "search"},
      {"parameters",
       {{"type", "object"}, {"properties", {{"query", {{"type", "string"}}}}}, {"required", {"query"}}}}}}};

// The calls of a stream, assembled from their deltas as a client does: by
// index; the first delta of a call has its id, type and name.
struct StreamedCalls {
  std::map<int, json> calls;
  std::string finish_reason;
  int chunks_with_calls = 0;
};
StreamedCalls assemble(const std::vector<json>& events) {
  StreamedCalls out;
  for (const auto& e : events) {
    if (!e.is_object() || !e.contains("choices") || e["choices"].empty()) continue;
    const auto& ch = e["choices"][0];
    if (!ch["finish_reason"].is_null()) out.finish_reason = ch["finish_reason"];
    if (!ch["delta"].contains("tool_calls")) continue;
    EXPECT_FALSE(ch["delta"].contains("content")) << e;
    ++out.chunks_with_calls;
    for (const auto& part : ch["delta"]["tool_calls"]) {
      const int i = part["index"];
      auto& c = out.calls[i];
      if (part.contains("id")) {
        EXPECT_FALSE(c.contains("id")) << "call " << i << " opened twice";
        c["id"] = part["id"];
        EXPECT_EQ(part["type"], "function");
        c["name"] = part["function"]["name"];
        c["arguments"] = "";
      }
      EXPECT_TRUE(c.contains("id")) << "a fragment before its call opened: " << e;
      c["arguments"] = c["arguments"].get<std::string>() + part["function"]["arguments"].get<std::string>();
    }
  }
  return out;
}

// serve speaks tools as vLLM does: message.tool_calls (content null,
// finish_reason "tool_calls") whole; streamed, a first delta with the
// call's id and name, then argument fragments; the arguments valid for the
// tool's schema; completion tokens are the markup's.
TEST_F(Api, ToolCallsAnswerWholeAndStreamAsVllmDoes) {
  json req = {{"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
              {"tools", {kWeatherTool, kSearchTool}},
              {"tool_choice", "required"},
              {"max_tokens", 200}};
  const auto whole = call("POST", "/v1/chat/completions", req.dump());
  ASSERT_EQ(whole->status, 200) << whole->response->body;
  const auto j = body_of(*whole);
  const auto& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const auto& tc = choice["message"]["tool_calls"][0];
  EXPECT_EQ(tc["type"], "function");
  EXPECT_EQ(tc["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u);
  const std::string name = tc["function"]["name"], arguments = tc["function"]["arguments"];
  const json& tool = name == "get_weather" ? kWeatherTool : kSearchTool;
  ASSERT_TRUE(name == "get_weather" || name == "search") << name;
  const JsonSchema schema(tool["function"]["parameters"], "test");
  EXPECT_TRUE(schema.valid(json::parse(arguments))) << arguments;
  EXPECT_EQ(j["usage"]["completion_tokens"], tokenizers::count_tokens(render_tool_call(name, arguments)));

  req["stream"] = true;
  const auto streamed = call("POST", "/v1/chat/completions", req.dump());
  const auto ev = streamed->events();
  const StreamedCalls calls = assemble(ev);
  EXPECT_EQ(calls.finish_reason, "tool_calls");
  ASSERT_EQ(calls.calls.size(), 1u);
  // The same conversation, the same decision and arguments (the ids differ: another response).
  EXPECT_EQ(calls.calls.at(0)["name"], name);
  EXPECT_EQ(calls.calls.at(0)["arguments"], arguments);
  EXPECT_NE(calls.calls.at(0)["id"], tc["id"]);
  EXPECT_GT(calls.chunks_with_calls, 2);  // the arguments came in fragments
  EXPECT_EQ(ev.back(), "[DONE]");

  // Completions and the Responses API do not take tools.
  EXPECT_EQ(call("POST", "/v1/completions", json{{"prompt", "x"}, {"tools", {kWeatherTool}}}.dump())->status,
            400);
}

// A conversation: the assistant's tool call and the tool's answer go back
// in; its prompt starts with the first turn's (cached), and after the
// policy's rounds the model answers in text.
TEST_F(Api, ToolResultsGoBackInAndTheModelAnswersAfterItsRounds) {
  tool_policy.call_prob = 1.0;
  tool_policy.max_rounds = 1;
  build();
  json messages = {{{"role", "user"}, {"content", std::string(400, 'a') + " what is the weather in Oslo?"}}};
  json req = {{"messages", messages}, {"tools", {kWeatherTool}}, {"max_tokens", 100}};
  const auto first = body_of(*call("POST", "/v1/chat/completions", req.dump()));
  ASSERT_EQ(first["choices"][0]["finish_reason"], "tool_calls") << first;
  const json tc = first["choices"][0]["message"]["tool_calls"][0];
  messages.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {tc}}});
  messages.push_back({{"role", "tool"}, {"tool_call_id", tc["id"]}, {"content", "{\"temp\": 4}"}});
  req["messages"] = messages;
  const auto second = body_of(*call("POST", "/v1/chat/completions", req.dump()));
  const auto& c2 = second["choices"][0];
  EXPECT_NE(c2["finish_reason"], "tool_calls") << second;
  EXPECT_FALSE(c2["message"].contains("tool_calls"));
  EXPECT_TRUE(c2["message"]["content"].is_string());
  const int first_prompt = first["usage"]["prompt_tokens"];
  EXPECT_GT(second["usage"]["prompt_tokens"].get<int>(),
            first_prompt + static_cast<int>(tokenizers::count_tokens(
                               render_tool_call(tc["function"]["name"].get<std::string>(),
                                                tc["function"]["arguments"].get<std::string>()))));
  EXPECT_GE(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), first_prompt - 16);
  // tool_choice none: never a call.
  req["messages"] = json::array({messages[0]});
  req["tool_choice"] = "none";
  EXPECT_FALSE(body_of(*call("POST", "/v1/chat/completions", req.dump()))["choices"][0]["message"].contains(
      "tool_calls"));
  // An assistant message's tool call without arguments is refused, naming it.
  json broken = messages;
  broken[1]["tool_calls"][0]["function"].erase("arguments");
  req["messages"] = broken;
  const auto e = call("POST", "/v1/chat/completions", req.dump());
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(body_of(*e)["error"]["param"], "messages[1].tool_calls[0].function.arguments");
}

TEST_F(Api, ParallelToolCallsStreamByIndex) {
  tool_policy.max_parallel = 3;
  build();
  int parallel = 0;
  for (int k = 0; k < 12; ++k) {
    const json req = {{"messages", {{{"role", "user"}, {"content", fmt::format("question {}", k)}}}},
                      {"tools", {kWeatherTool, kSearchTool}},
                      {"tool_choice", "required"},
                      {"max_tokens", 400},
                      {"stream", true}};
    const auto calls = assemble(call("POST", "/v1/chat/completions", req.dump())->events());
    EXPECT_EQ(calls.finish_reason, "tool_calls");
    ASSERT_GE(calls.calls.size(), 1u);
    ASSERT_LE(calls.calls.size(), 3u);
    for (const auto& [i, c] : calls.calls) {
      EXPECT_TRUE(json::accept(c["arguments"].get<std::string>())) << c;
      EXPECT_EQ(c["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u);
    }
    parallel += calls.calls.size() > 1;
  }
  EXPECT_GT(parallel, 0);
}

// The tool faults change the first call and are counted where they take
// effect: a request without tools is not hit.
TEST_F(Api, ToolFaultsAreInjectedAndCounted) {
  const json req = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                    {"tools", {kWeatherTool}},
                    {"tool_choice", "required"},
                    {"max_tokens", 200}};
  const JsonSchema schema(kWeatherTool["function"]["parameters"], "test");
  build("", "wrong_tool=1");
  auto j = body_of(*call("POST", "/v1/chat/completions", req.dump()));
  EXPECT_NE(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  call("POST", "/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}.dump());
  EXPECT_EQ(metrics->value("tokenscope:faults_injected_total", "wrong_tool"), 1.0);
  build("", "invalid_arguments=1");
  j = body_of(*call("POST", "/v1/chat/completions", req.dump()));
  EXPECT_FALSE(schema.valid(
      json::parse(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>())));
  EXPECT_EQ(metrics->value("tokenscope:faults_injected_total", "invalid_arguments"), 1.0);
  build("", "malformed_json=1");
  j = body_of(*call("POST", "/v1/chat/completions", req.dump()));
  EXPECT_FALSE(
      json::accept(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()));
  EXPECT_EQ(metrics->value("tokenscope:faults_injected_total", "malformed_json"), 1.0);
}

TEST_F(Api, ResponseFormatAnswersJson) {
  const json schema = {
      {"type", "object"},
      {"properties", {{"name", {{"type", "string"}}}, {"age", {{"type", "integer"}, {"minimum", 0}}}}},
      {"required", {"name", "age"}}};
  json req = {{"messages", {{{"role", "user"}, {"content", "a person"}}}},
              {"response_format",
               {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", schema}}}}},
              {"max_tokens", 100}};
  const auto j = body_of(*call("POST", "/v1/chat/completions", req.dump()));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  const JsonSchema checker(schema, "test");
  EXPECT_TRUE(checker.valid(json::parse(j["choices"][0]["message"]["content"].get<std::string>()))) << j;
  req["stream"] = true;
  std::string content;
  for (const auto& e : call("POST", "/v1/chat/completions", req.dump())->events())
    if (e.is_object() && !e["choices"].empty() && e["choices"][0]["delta"].contains("content"))
      content += e["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(content, j["choices"][0]["message"]["content"]);
  // Completions take it too; a max_tokens too short cuts the JSON ("length").
  const auto cut = body_of(
      *call("POST", "/v1/completions",
            json{{"prompt", "x"}, {"response_format", {{"type", "json_object"}}}, {"max_tokens", 2}}.dump()));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(json::accept(cut["choices"][0]["text"].get<std::string>()));
  // A pattern that is no regular expression, and a schema asking for a value too large to draw: 400, the
  // server goes on (the first took serve down: valijson threw from inside its validation).
  req["response_format"]["json_schema"]["schema"] = {{"type", "string"}, {"pattern", "("}};
  EXPECT_EQ(call("POST", "/v1/chat/completions", req.dump())->status, 400);
  req["response_format"]["json_schema"]["schema"] =
      json::parse(R"({"type": "array", "minItems": 256, "items": {"type": "array", "minItems": 256,
                      "items": {"type": "array", "minItems": 256}}})");
  EXPECT_EQ(call("POST", "/v1/chat/completions", req.dump())->status, 400);
  // A schema valijson cannot read is refused, naming it.
  req["response_format"]["json_schema"]["schema"] = {{"type", 5}};
  const auto e = call("POST", "/v1/chat/completions", req.dump());
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(body_of(*e)["error"]["param"], "response_format.json_schema.schema");
}

// A conversation that holds documents gets an answer citing them, of the
// length it would have had (serve --cite-prob).
TEST_F(Api, AnswersCiteTheDocumentsInTheirContext) {
  const json req = {
      {"messages",
       {{{"role", "user"}, {"content", "[doc-3] about rivers\n[doc-17] about hills\nSummarize."}}}},
      {"max_tokens", 30},
      {"ignore_eos", true}};
  auto j = body_of(*call("POST", "/v1/chat/completions", req.dump()));
  const std::string text = j["choices"][0]["message"]["content"];
  EXPECT_NE(text.find("[doc-3]"), std::string::npos) << text;
  EXPECT_NE(text.find("[doc-17]"), std::string::npos) << text;
  EXPECT_EQ(j["usage"]["completion_tokens"], 30);
  EXPECT_EQ(tokenizers::count_tokens(text), 30u);
  tool_policy.cite_prob = 0;
  build();
  j = body_of(*call("POST", "/v1/chat/completions", req.dump()));
  EXPECT_EQ(j["choices"][0]["message"]["content"].get<std::string>().find("[doc-"), std::string::npos);
}

TEST_F(Api, ClientLeavingAbortsTheRequest) {
  auto r = start_stream(1000, 40);
  ASSERT_TRUE(r->disconnect);
  r->disconnect();
  exec.run_until_idle();
  EXPECT_LT(r->chunks.size(), 1000u);
  EXPECT_EQ(core->active(), 0u);
  EXPECT_EQ(metrics->value("vllm:request_success_total", "abort"), 1.0);
  EXPECT_EQ(metrics->value("vllm:num_requests_running"), 0.0);
}

TEST_F(Api, ShutdownEndsStreamsAfterTheGracePeriod) {
  auto r = start_stream(5000, 20);
  bool done = false;
  core->shutdown(0.5, [&] { done = true; });
  exec.run_until_idle();
  EXPECT_TRUE(done);
  EXPECT_TRUE(r->ended);
  const auto ev = r->events();
  EXPECT_TRUE(ev.back().contains("error"));
  EXPECT_EQ(call("POST", "/v1/completions", R"({"prompt": "x"})")->status, 503);
}

// ---- Fleets (serve --replicas, --router, --prefill-replicas) -------------------

// Round-robin over two replicas: requests alternate, each replica's engine
// series carry engine="N" (vLLM's data-parallel label) and count its own
// requests alone, the server-wide series carry model_name alone, and the
// sums over the engines are what one engine would have counted.
TEST_F(Api, AFleetsMetricsAreLabelledPerReplica) {
  fleet_options.replicas = 2;
  build();
  ASSERT_NE(core->fleet(), nullptr);
  EXPECT_EQ(core->engines(), 2u);
  std::vector<std::shared_ptr<FakeResponder>> rs;
  for (int i = 0; i < 4; ++i)
    rs.push_back(send({{"prompt", "a b c"}, {"max_tokens", 3 + i}, {"ignore_eos", true}}));
  exec.run_until_idle();
  for (const auto& r : rs) EXPECT_EQ(r->status, 200);
  // Requests 0 and 2 (3 + 5 tokens) on replica 0, 1 and 3 (4 + 6) on replica 1.
  EXPECT_EQ(metrics->value("vllm:request_success_total", "length", 0), 2.0);
  EXPECT_EQ(metrics->value("vllm:request_success_total", "length", 1), 2.0);
  EXPECT_EQ(metrics->value("vllm:generation_tokens_total", "", 0), 8.0);
  EXPECT_EQ(metrics->value("vllm:generation_tokens_total", "", 1), 10.0);
  EXPECT_EQ(metrics->value("vllm:generation_tokens_total"), 18.0);
  EXPECT_EQ(metrics->value("vllm:request_success_total", "length"), 4.0);
  const std::string m = call("GET", "/metrics")->response->body;
  for (const char* needle :
       {"vllm:generation_tokens_total{model_name=\"llama-3-8b\",engine=\"0\"} 8.0",
        "vllm:generation_tokens_total{model_name=\"llama-3-8b\",engine=\"1\"} 10.0",
        "vllm:time_to_first_token_seconds_count{model_name=\"llama-3-8b\",engine=\"1\"} 2.0",
        "vllm:inter_token_latency_seconds_count{model_name=\"llama-3-8b\",engine=\"0\"} 6.0",
        "tokenscope:steps_total{model_name=\"llama-3-8b\",engine=\"1\"}",
        "tokenscope:http_responses_total{model_name=\"llama-3-8b\",code=\"200\"} 4.0"})
    EXPECT_NE(m.find(needle), std::string::npos) << needle;
  // One # TYPE line per family, however many engines.
  std::size_t types = 0;
  for (std::size_t at = m.find("# TYPE vllm:time_to_first_token_seconds "); at != std::string::npos;
       at = m.find("# TYPE vllm:time_to_first_token_seconds ", at + 1))
    ++types;
  EXPECT_EQ(types, 1u);
}

// Session affinity on the body's "user": a user's requests all reach one
// replica; requests without one are spread.
TEST_F(Api, SessionAffinityKeepsAUsersRequestsOnOneReplica) {
  fleet_options.replicas = 4;
  fleet_options.router = "session-affinity";
  build();
  for (int i = 0; i < 6; ++i)
    send({{"prompt", "hello"}, {"max_tokens", 2}, {"ignore_eos", true}, {"user", "alice"}});
  exec.run_until_idle();
  std::vector<double> per;
  for (std::size_t e = 0; e < 4; ++e)
    per.push_back(metrics->value("vllm:request_success_total", "length", e));
  EXPECT_EQ(std::count(per.begin(), per.end(), 6.0), 1) << per[0] << per[1] << per[2] << per[3];
  for (int i = 0; i < 16; ++i) send({{"prompt", "hello"}, {"max_tokens", 2}, {"ignore_eos", true}});
  exec.run_until_idle();
  std::size_t used = 0;
  for (std::size_t e = 0; e < 4; ++e)
    used += metrics->value("vllm:request_success_total", "length", e) > per[e];
  EXPECT_GE(used, 2u);
  EXPECT_EQ(call("POST", "/v1/completions", R"({"prompt": "a", "user": 5})")->status, 400);
}

// Disaggregated prefill on wall-clock time: the prompt's KV crosses a 1 MB/s
// link before the decode replica's first token, so the stream's first token
// comes the transfer's time later than on a colocated fleet; prompt tokens
// are counted where they were computed, outputs and the finish where the
// request decoded.
TEST_F(Api, ADisaggregatedFleetsFirstTokenWaitsForTheKvTransfer) {
  const auto first_token_after = [&](bool split) {
    fleet_options = {};
    if (split) {
      fleet_options.prefill_replicas = 1;
      fleet_options.decode_replicas = 1;
      fleet_options.kv_link_gb_s = 0.001;  // 1 MB/s
      fleet_options.kv_link_latency_us = 500;
      fleet_history = true;  // the transfers kept, as bench's in-process server keeps them
    } else {
      fleet_options.replicas = 2;
    }
    build();
    const Nanos t0 = exec.clock().now_ns();
    auto r = send({{"prompt", "a b c d"},
                   {"max_tokens", 4},
                   {"ignore_eos", true},
                   {"stream", true},
                   {"stream_options", {{"include_usage", true}}}});
    exec.run_until_idle();
    EXPECT_TRUE(r->ended);
    const auto ev = r->events();
    EXPECT_EQ(ev.back(), "[DONE]");
    const std::uint32_t prompt_tokens = ev[ev.size() - 2]["usage"]["prompt_tokens"].get<std::uint32_t>();
    return std::pair{r->write_times.front() - t0, prompt_tokens};
  };
  const auto [colocated, n] = first_token_after(false);
  const auto [split, n2] = first_token_after(true);
  ASSERT_EQ(n, n2);
  const double bytes = static_cast<double>(n) * eff_->kv_bytes_per_token;
  const Nanos transfer = static_cast<Nanos>(bytes / 1e6 * 1e9) + 500'000;
  ASSERT_EQ(core->fleet()->transfers().size(), 1u);
  EXPECT_EQ(core->fleet()->transfers()[0].decode_replica, 1);
  EXPECT_NEAR(core->fleet()->transfers()[0].bytes, bytes, 1.0);
  // The split pays the transfer, and one decode step for the last prompt token at most more.
  EXPECT_GE(split - colocated, transfer - 1'000);
  EXPECT_LE(split - colocated, transfer + (colocated > 0 ? colocated : 0) + 1'000'000);
  EXPECT_EQ(metrics->value("vllm:prompt_tokens_total", "", 0), n);
  EXPECT_EQ(metrics->value("vllm:generation_tokens_total", "", 1), 4.0);
  EXPECT_EQ(metrics->value("vllm:request_success_total", "length", 0), 0.0);
  EXPECT_EQ(metrics->value("vllm:request_success_total", "length", 1), 1.0);
}

// A client leaving while its KV is on the link: the transfer delivers
// nothing, the request ends once (aborted), nothing is left running.
TEST_F(Api, AClientLeavingDuringItsKvTransferEndsItOnce) {
  fleet_options.prefill_replicas = 1;
  fleet_options.decode_replicas = 1;
  fleet_options.kv_link_gb_s = 0.001;
  build();
  auto r = send({{"prompt", "a b c d"}, {"max_tokens", 50}, {"ignore_eos", true}, {"stream", true}});
  // Until the prefill's step was computed (the manual clock at its start: its end, and the
  // transfer, are still ahead).
  for (int i = 0; i < 10'000 && !core->fleet()->next_transfer(); ++i) exec.run_until_idle(1);
  ASSERT_TRUE(core->fleet()->next_transfer().has_value());
  ASSERT_TRUE(r->disconnect);
  r->disconnect();
  exec.run_until_idle();
  EXPECT_EQ(core->active(), 0u);
  EXPECT_TRUE(core->fleet()->transfers().empty());  // serve keeps no history
  EXPECT_FALSE(core->fleet()->next_transfer().has_value());
  // Its prefill's load comes off the replica once its end is reached (the next routing
  // decision settles it), though the client left before it: the next request alike finds
  // the prefill replica carrying its own load alone.
  send({{"prompt", "a b c d"}, {"max_tokens", 50}, {"ignore_eos", true}});
  exec.run_until_idle(1);                     // admitted and routed, nothing run
  EXPECT_EQ(core->fleet()->loads()[0], 5.0);  // its 4 prompt tokens and the prefill's 1 token
  EXPECT_EQ(metrics->value("vllm:request_success_total", "abort"), 1.0);
  // The prefill replica's one token (as vLLM's prefill instance counts it), none decoded.
  EXPECT_EQ(metrics->value("vllm:generation_tokens_total", "", 0), 1.0);
  EXPECT_EQ(metrics->value("vllm:generation_tokens_total", "", 1), 0.0);
  EXPECT_EQ(metrics->value("vllm:num_requests_running"), 0.0);
  EXPECT_EQ(core->fleet()->replica_of(1), -1);  // its route is forgotten
}

}  // namespace
}  // namespace tokenscope::serve
