// One benchmark request on the wire: the HTTP/1.1 message the client sends
// (OpenAI completions or chat, streamed with usage), and the collector that
// turns the response into a request record by the rules of shared
// METRICS.md:
//  * t_first_token is the first event carrying output (role-only, empty and
//    usage chunks do not count), t_last_token the last such event;
//  * output tokens come from the server's usage block; the client's own count
//    of output events is kept beside it as a cross-check, never as a silent
//    replacement, and the requested length is never used;
//  * when the usage count exceeds the number of output events (servers that
//    put several tokens in one event), the tokens are spread over the events
//    in proportion to their text length (largest remainder), so per-token
//    ITL splits each event gap k ways;
//  * reasoning models: the events carrying reasoning text are told from the
//    answer; the record gets the first answer token's time and the reasoning
//    tokens (the usage's completion_tokens_details.reasoning_tokens when
//    above 0, else each event's tokens in proportion to its reasoning text;
//    none when no reasoning was seen and the usage says 0 or nothing);
//  * failures get an outcome and a detail, and the run goes on;
//  * with a parser that reads logprobs (bench --logprobs), the record's
//    `logprobs` histogram holds those of every event (core/logprob.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/chunk_parser.h"
#include "core/record.h"
#include "net/http_client.h"
#include "net/sse.h"
#include "tokenizers/text_tokenizer.h"

namespace tokenscope::bench {

// Generation (completions, chat), or pooling: embeddings (/v1/embeddings,
// a batch of inputs per request) and rerank (/v1/rerank: a query and
// documents), answered whole with no output tokens.
// The Responses API (/v1/responses) is generation: "input" (the prompt,
// or the conversation as messages), "max_output_tokens", streamed events.
// Transcriptions (/v1/audio/transcriptions) upload a WAV file as
// multipart/form-data and get its transcript: whole (json, verbose_json,
// text) or streamed (OpenAI's transcript.text.delta events or vLLM's
// transcription.chunk objects).
enum class Api { kCompletions, kChat, kEmbeddings, kRerank, kResponses, kTranscriptions };
inline bool is_pooling(Api a) {
  return a == Api::kEmbeddings || a == Api::kRerank;
}
std::string_view api_name(Api a);  // completions | chat | embeddings | rerank | responses | transcriptions
// Whether the server applies a chat template (chat, responses).
inline bool is_chat_like(Api a) {
  return a == Api::kChat || a == Api::kResponses;
}
// The request path of an API: /v1/completions, /v1/chat/completions,
// /v1/embeddings, /v1/rerank, /v1/responses, /v1/audio/transcriptions.
std::string_view api_path(Api a);

// Sampling parameters sent with every request (absent fields are not sent, so
// the server's defaults apply). vLLM's benchmark client sends temperature 0.
struct Sampling {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<std::int64_t> top_k;
  std::optional<std::int64_t> seed;
  std::optional<std::uint32_t>
      logprobs;  // completions: "logprobs": N; chat: "logprobs": true, "top_logprobs": N
  // A JSON object whose members are merged into every request body (they
  // replace tokenscope's own fields of the same name).
  std::string extra_body;
};

struct RequestSettings {
  Api api = Api::kCompletions;
  std::string model;
  bool stream = true;
  bool include_usage = true;  // stream_options.include_usage
  bool ignore_eos = true;     // so output lengths follow the workload on servers that allow it
  std::string host_header;
  std::string base_path;  // prepended to the path
  std::string path;       // "" : /v1/completions or /v1/chat/completions by api
  std::string api_key;    // Authorization: Bearer
  // X-Request-Id: the record's id with every request, so that a server's logs
  // (and tokenscope serve's emission trace) can be matched to the records.
  bool send_request_id = true;
  std::vector<std::pair<std::string, std::string>> headers;
  Sampling sampling;
  // Pooling: inputs per embeddings request, documents per rerank request,
  // and the rerank query's length in tokens.
  std::uint32_t inputs_per_request = 1;
  std::uint32_t query_tokens = 32;
  // Transcriptions: "response_format" (json | verbose_json | text) and the
  // "language" field ("" : not sent).
  std::string response_format = "json";
  std::string language;
};

struct ChatMessage {
  std::string role;
  std::string content;
};

class RequestEncoder {
 public:
  // Throws UsageError when sampling.extra_body is not a JSON object.
  explicit RequestEncoder(RequestSettings s);
  const RequestSettings& settings() const { return s_; }
  // The extra body's "top_n" (rerank), when it has a positive integer one.
  std::optional<std::uint32_t> top_n() const { return top_n_; }
  // The whole HTTP message. Completions send `prompt`; chat sends one user
  // message, or `history` followed by it.
  // media: content parts (JSON objects, bench/media.h) sent after the text
  // of the user message (chat: "content" becomes a list of parts; responses:
  // "input" a message with input_text and the parts).
  // `model`, when given, replaces the settings' model (model mixes).
  std::shared_ptr<const std::string> encode(std::string_view prompt, std::uint32_t max_tokens,
                                            const std::vector<ChatMessage>* history = nullptr,
                                            std::optional<std::uint64_t> request_id = std::nullopt,
                                            const std::vector<std::string>* media = nullptr,
                                            std::string_view model = {}) const;
  // A chat request of an agentic task's step (bench/task_driver.h):
  // `messages_json` the messages (a JSON array), `extra` further members,
  // each with its leading comma (",\"tools\":[...]"); stream and
  // ignore_eos as given (a tool-calling turn must end where the model
  // ends it); the sampling fields and the extra body as in encode().
  std::shared_ptr<const std::string> encode_chat(std::string_view messages_json, std::uint32_t max_tokens,
                                                 bool stream, bool ignore_eos, std::string_view extra,
                                                 std::optional<std::uint64_t> request_id) const;
  // A pooling request: embeddings send {"model", "input": the one input or
  // the list, "encoding_format": "float"}; rerank {"model", "query",
  // "documents": inputs}. Sampling fields are not sent; the extra body is.
  std::shared_ptr<const std::string> encode_pooling(const std::vector<std::string>& inputs,
                                                    std::string_view query,
                                                    std::optional<std::uint64_t> request_id = std::nullopt,
                                                    std::string_view model = {}) const;
  // A transcription request: multipart/form-data (net/multipart.h) with the
  // parts "file" (the WAV, filename audio.wav, audio/wav), "model",
  // "response_format", "stream" ("true" | "false"), "stream_include_usage"
  // ("true" when streaming with usage: vLLM sends usage only then),
  // "language" when set, the sampling fields set (temperature, top_p, top_k,
  // seed) and the extra body's members (strings as they are, other values
  // as JSON text; a null member leaves tokenscope's field of that name out).
  // The boundary is drawn per request and checked against the file's bytes.
  std::shared_ptr<const std::string> encode_transcription(
      std::string_view wav, std::optional<std::uint64_t> request_id = std::nullopt,
      std::string_view model = {}) const;

 private:
  // Whether the extra body sets this field (tokenscope's own is left out).
  bool overridden(std::string_view field) const {
    return !extra_names_.empty() && overridden_by_extra(field);
  }
  bool overridden_by_extra(std::string_view field) const;
  std::shared_ptr<const std::string> finish(std::string& body, std::optional<std::uint64_t> request_id,
                                            std::string_view content_type = {}) const;

  RequestSettings s_;
  std::string head_;             // request line and fixed headers, up to Content-Length
  std::string sampling_fields_;  // ",\"temperature\":0,..." (fields not in extra_body)
  std::string extra_fields_;     // the extra body's members, ",\"name\":value,..."
  std::vector<std::string> extra_names_;
  std::optional<std::uint32_t> top_n_;
  // Transcriptions: the form fields after the fixed ones (sampling, then
  // the extra body's members; a null member is none).
  std::vector<std::pair<std::string, std::string>> form_fields_;
};

// Collects one response into a RequestRecord. Reusable: init() before each use.
class ResponseCollector final : public net::ExchangeHandler {
 public:
  using Done = std::function<void(ResponseCollector&)>;

  // record: ids and t_sched already set. keep_text: keep the output text
  // (multi-turn sessions send it back in the next turn).
  void init(RequestRecord&& record, bool stream, bool keep_text, ChunkParser* parser, Done done);
  // Called after each piece of body and after completion: the runner checks
  // there whether a scheduled send is due, so that a long run of read
  // completions cannot delay it (set once; survives init()).
  void set_tick(void (*fn)(void*), void* ctx) {
    tick_ = fn;
    tick_ctx_ = ctx;
  }
  // With the served model's tokenizer: a response without a usage count
  // gets its output tokens counted from its text (set once; survives init()).
  void set_output_counter(const tokenizers::TextTokenizer* tokenizer) { counter_ = tokenizer; }
  // At most this many output events of one response are kept in the record
  // (event_times); later ones are counted and their gaps histogrammed
  // (RequestRecord::events_dropped), so that memory per request is bounded
  // whatever the server sends. Set once; survives init(). At least 1.
  void set_max_events(std::size_t n) { max_events_ = n > 0 ? n : 1; }
  // Planned cancellation (bench --cancel): how the collector ends its own
  // exchange (the runner's client.cancel(this); set once, survives init()),
  // and per request, after init(): cancel once sent (before any token),
  // after this many output events, or when cancel_now() is called (a timer).
  void set_canceller(void (*fn)(void*, ResponseCollector*), void* ctx) {
    canceller_ = fn;
    canceller_ctx_ = ctx;
  }
  void plan_cancel(bool on_send, std::uint32_t after_events) {
    cancel_on_send_ = on_send;
    cancel_after_events_ = after_events;
  }
  // A pooling request (after init(), with stream off): the answer must hold
  // one item per input (embeddings: a vector each, of one size; rerank: a
  // result per document, each index once, or `results` of them when a
  // top_n was sent); the record gets the usage's prompt tokens, 0 output
  // tokens, and its one event (first and last token) when the whole answer
  // has arrived.
  void expect_pooling(Api api, std::uint32_t inputs, std::uint32_t results = 0) {
    pooling_api_ = api;
    pooling_inputs_ = inputs;
    pooling_results_ = results > 0 ? results : inputs;
  }
  // A transcription request (after init()): `audio_seconds` of audio were
  // sent, the answer comes in `response_format`. Whole: the text, usage
  // (OpenAI's "tokens" or "duration" type, vLLM's prompt/completion tokens)
  // and the duration the server heard (verbose_json's "duration", a
  // "duration" usage's seconds) are read; an answer without "text" is a
  // validation error, and so is a duration more than 1 s (or 1%) off the
  // audio sent. The record gets one event when the answer has arrived.
  // Streamed: the text deltas are the output events (parse()).
  void expect_transcription(double audio_seconds, std::string_view response_format) {
    transcription_ = true;
    audio_seconds_ = audio_seconds;
    response_format_.assign(response_format);
  }
  void cancel_now();
  // Assemble the answer's tool calls (streamed deltas or a whole message's),
  // after init(); tool_calls() has them once the exchange is done.
  void collect_tool_calls() { collect_calls_ = true; }
  const ToolCallAssembler& tool_calls() const { return calls_; }
  // The finish reason the answer gave ("" when none).
  const std::string& finish_reason() const { return finish_reason_; }
  static constexpr std::size_t kDefaultMaxEvents = 65536;
  // Output text kept for a later turn or for counting tokens on the client is
  // bounded too: past this many bytes, text kept for counting is counted and
  // dropped (piece by piece), text kept for a later turn stops growing.
  static constexpr std::size_t kTextCap = 4u << 20;
  RequestRecord& record() { return record_; }
  const std::string& text() const { return text_; }

  void on_sent(Nanos t) override;
  void on_headers(int status, Nanos t) override;
  void on_content_type(std::string_view type) override { content_type_.assign(type.substr(0, 200)); }
  void on_body(std::string_view data, Nanos t) override;
  void on_complete(net::ExchangeError error, std::string_view message, Nanos t) override;

 private:
  void on_event(const net::SseEvent& e);
  std::uint64_t output_events() const { return record_.event_times.size() + record_.events_dropped; }
  void fail(Outcome o, std::string detail);
  void finish_stream();
  void finish_body(Nanos t);
  void finish_pooling(Nanos t);
  void finish_transcription(Nanos t);
  void split_tokens();
  void count_reasoning();
  void take_usage(const ChunkUsage& u);
  void take_timings(const ChunkTimings& t);
  void keep_text(std::string_view piece);

  RequestRecord record_;
  bool stream_ = true;
  bool keep_text_ = false;
  ChunkParser* parser_ = nullptr;
  Done done_;
  void (*tick_)(void*) = nullptr;
  void* tick_ctx_ = nullptr;
  const tokenizers::TextTokenizer* counter_ = nullptr;
  net::SseDecoder decoder_;
  ChunkFrame frame_;  // the stream's repeated frame
  std::vector<std::uint32_t> event_chars_;
  std::vector<std::uint32_t> event_reasoning_chars_;  // of event_chars_, the reasoning text's
  std::string body_;                                  // non-streamed body or an error body (capped)
  std::string text_;
  std::string finish_reason_;
  bool saw_done_ = false;
  bool failed_ = false;
  std::int64_t usage_completion_ = -1;
  std::int64_t usage_reasoning_ = -1;  // usage completion_tokens_details.reasoning_tokens
  bool saw_reasoning_ = false;
  std::uint64_t dropped_reasoning_chars_ = 0;
  void (*canceller_)(void*, ResponseCollector*) = nullptr;
  void* canceller_ctx_ = nullptr;
  bool cancel_on_send_ = false;
  std::uint32_t cancel_after_events_ = 0;  // 0: none
  bool cancel_fired_ = false;
  Api pooling_api_ = Api::kCompletions;
  std::uint32_t pooling_inputs_ = 0;  // 0: a generation request
  std::uint32_t pooling_results_ = 0;
  bool transcription_ = false;
  double audio_seconds_ = 0;
  std::string response_format_;
  std::size_t max_events_ = kDefaultMaxEvents;
  std::string content_type_;
  std::string stream_head_;          // the first bytes of a streamed body, quoted when it is not a stream
  std::uint64_t dropped_chars_ = 0;  // text bytes of the dropped events
  std::shared_ptr<LogLinearHistogram> dropped_gaps_;
  std::uint64_t counted_tokens_ = 0;  // tokens of text already counted (past kTextCap)
  bool spilled_ = false;              // the text passed kTextCap: counting goes on in spill_
  std::string spill_;                 // text not yet counted, once spilled
  bool collect_calls_ = false;
  ToolCallAssembler calls_;
};

}  // namespace tokenscope::bench
