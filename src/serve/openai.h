// The OpenAI API surface as vLLM serves it: parsing and validating request
// bodies, the chat template, and the JSON of responses, stream chunks and
// errors. Pure functions: no I/O, no engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/catalog.h"
#include "serve/tools.h"
#include "tokenizers/builtin.h"

namespace tokenscope::serve {

// An error answered to the client: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the offending field, "" when none
};
std::string error_type(int status);
std::string error_body(const ApiError& e);

// Generation (completions, chat), pooling (embeddings, rerank: one
// prefill per input, no token generated for the client), and
// transcriptions (/v1/audio/transcriptions: a multipart upload of a WAV
// file; the prompt is its audio, the output its transcript).
enum class Api { kCompletions, kChat, kEmbeddings, kRerank, kResponses, kTranscriptions };
inline bool is_pooling(Api a) {
  return a == Api::kEmbeddings || a == Api::kRerank;
}

// The simulated embedding model's vector size (`dimensions` may ask fewer).
inline constexpr std::uint32_t kEmbeddingDim = 1024;

// An image or an audio clip of a chat message (content parts "image_url",
// "input_audio"), as the model will see it.
struct MediaItem {
  bool audio = false;
  std::uint32_t width = 0, height = 0;  // an image's pixels
  double seconds = 0;                   // an audio clip's length
  std::uint64_t hash = 0;               // of its bytes: equal inputs, equal placeholder tokens
};

struct GenerationRequest {
  Api api = Api::kCompletions;
  // Images and audio of the messages (chat, responses), their placeholder
  // tokens not yet in `prompts` (the engine appends them: engine/engine.h).
  std::vector<MediaItem> media;
  std::uint32_t media_tokens = 0;
  std::string model;
  std::vector<std::vector<tokenizers::TokenId>> prompts;  // one per choice
  std::uint32_t max_tokens = 16;                          // resolved: given, or the default for the API
  bool stream = false;
  bool include_usage = false;
  bool ignore_eos = false;
  std::uint32_t min_tokens = 0;
  double temperature = 1.0;
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;
  std::int32_t priority = 0;
  // "user": a stable id of the end user (OpenAI's API); a fleet's session
  // key (serve --router session-affinity). Empty: none given.
  std::string user;
  // Log-probabilities asked for, with this many top alternatives per token
  // (completions: "logprobs": N; chat: "logprobs": true, "top_logprobs": N);
  // nullopt: none.
  std::optional<std::uint32_t> logprobs;
  // The client's X-Request-Id header, when it sent one: named in the
  // emission trace beside the response id, so outcomes match by request.
  std::string client_request_id;
  // Pooling (Api::kEmbeddings, kRerank): prompts are the inputs (rerank: the
  // query's tokens then each document's); the answer's vector size and
  // encoding; rerank's top_n (0: every document).
  std::uint32_t dimensions = kEmbeddingDim;
  bool base64 = false;
  std::uint32_t top_n = 0;
  // Transcriptions: "json", "verbose_json" or "text"; the language given
  // ("" : none), the audio's length.
  std::string response_format;
  std::string language;
  double audio_seconds = 0;
  // Chat: the tools declared and how they may be called (serve/tools.h);
  // chat and completions: the answer's format ("response_format").
  ToolRequest tools;
  OutputFormat format;
  // Chat: the "[doc-N]" ids the messages mention (documents a text answer may cite).
  std::vector<std::string> documents;
};

struct ParseContext {
  std::vector<std::string> model_names;  // the first is the default
  std::uint32_t max_model_len = 8192;
  std::uint32_t default_completion_max_tokens = 16;  // /v1/completions without max_tokens (OpenAI's default)
  // The served model (its encoders: which media it takes and their tokens); null: text only.
  const engine::ModelSpec* model = nullptr;
};

// An image's size from its bytes (PNG or JPEG); nullopt when it is neither.
std::optional<std::pair<std::uint32_t, std::uint32_t>> image_size(std::string_view bytes);
// A WAV file's length in seconds from its header; nullopt when it is not one.
std::optional<double> wav_seconds(std::string_view bytes);
// Base64 (standard alphabet, padding optional) to bytes; nullopt when malformed.
std::optional<std::string> base64_decode(std::string_view text);

// Parses and validates a /v1/completions or /v1/chat/completions body. Every
// error names the field (param) and what was expected. Chat takes "tools"
// ([{"type": "function", "function": {"name", "description",
// "parameters": a JSON schema}}], at most 128, names of [A-Za-z0-9_-]{1,64},
// unique), "tool_choice" ("auto", "none", "required" or {"type":
// "function", "function": {"name"}}), "parallel_tool_calls", assistant
// messages with "tool_calls" and "tool" messages; chat and completions take
// "response_format" ({"type": "text"}, {"type": "json_object"} or {"type":
// "json_schema", "json_schema": {"name", "schema", "strict"}}). Schemas that
// valijson cannot read are refused naming their field.
std::variant<GenerationRequest, ApiError> parse_generation_request(Api api, std::string_view body,
                                                                   const ParseContext& ctx);

// Parses and validates a /v1/embeddings body ({"input": a string, strings,
// token ids or lists of them; "encoding_format": "float" | "base64";
// "dimensions"}) or a /v1/rerank body ({"query": string, "documents":
// [string] (or TEI's "texts"), "top_n"}), as vLLM and llama.cpp take them.
// The result has max_tokens 1 (the prefill's token, not sent), no stream.
std::variant<GenerationRequest, ApiError> parse_pooling_request(Api api, std::string_view body,
                                                                const ParseContext& ctx);

// The transcript's length in tokens for `seconds` of audio: speech at 2.5
// words a second, 1.3 tokens a word (3.25 tokens a second), rounded up, at
// least 1.
std::uint32_t transcript_tokens(double seconds);
inline constexpr double kTranscriptTokensPerSecond = 3.25;

// Parses and validates a /v1/audio/transcriptions body (multipart/form-data,
// net/multipart.h): "file" (a WAV upload, the only format the simulator
// reads, at most 600 s), "model", "language", "prompt", "response_format"
// ("json", "verbose_json" or "text"), "temperature" ([0, 1]), "seed",
// "stream" and vLLM's "stream_include_usage"; other fields are ignored, as
// vLLM does. The model must have an audio encoder. The result's prompt is
// the decoder prompt ("<|startoftranscript|><|LANG|><|transcribe|>" and the
// prompt's text; LANG "en" unless given), its media the audio clip, its
// max_tokens transcript_tokens(seconds) with ignore_eos (the transcript has
// that length). Every error names the field.
std::variant<GenerationRequest, ApiError> parse_transcription_request(std::string_view content_type,
                                                                      std::string_view body,
                                                                      const ParseContext& ctx);
// A whole transcription answer: json {"text", "usage": {"type": "tokens",
// "input_tokens", "input_token_details": {"text_tokens", "audio_tokens"},
// "output_tokens", "total_tokens"}}; verbose_json {"task": "transcribe",
// "language", "duration", "text", "segments": one per 30 s of audio,
// "usage": {"type": "duration", "seconds"}} (as OpenAI's whisper-1); text:
// the transcript itself.
std::string transcription_response(const GenerationRequest& r, std::string_view text,
                                   std::uint64_t prompt_tokens, std::uint64_t audio_tokens,
                                   std::uint64_t output_tokens);

// The JSON of a pooling answer. Embeddings: {"id", "object": "list",
// "created", "model", "data": [{"index", "object": "embedding", "embedding":
// [floats] or base64 of little-endian float32}], "usage"}; the vector of an
// input is a function of its tokens (equal inputs, equal vectors), unit
// length. Rerank: {"id", "model", "usage", "results": [{"index",
// "relevance_score"}]} by score, highest first, top_n of them; a score is a
// function of the query's and the document's tokens, in (0, 1).
// input_hashes: pooling_input_hash of each input's tokens, in order.
std::string pooling_response(const GenerationRequest& r, const std::vector<std::uint64_t>& input_hashes,
                             std::string_view id, std::int64_t created, std::string_view model,
                             std::uint64_t prompt_tokens);
std::uint64_t pooling_input_hash(const std::vector<tokenizers::TokenId>& tokens);

// The chat template: "<|ROLE|>\n" + content + "\n" per message, then
// "<|assistant|>\n". Each message's text is a prefix of the next turn's.
std::string apply_chat_template(const std::vector<std::pair<std::string, std::string>>& messages);

// /tokenize body: {"prompt": "..."} or {"messages": [...]}; returns the tokens.
std::variant<std::vector<tokenizers::TokenId>, ApiError> parse_tokenize_request(std::string_view body,
                                                                                const ParseContext& ctx);

struct Usage {
  std::uint64_t prompt_tokens = 0;
  std::uint64_t completion_tokens = 0;
  std::uint64_t cached_tokens = 0;
  // Output tokens streamed as reasoning (serve --reasoning-share); nullopt:
  // not a reasoning model, no completion_tokens_details sent.
  std::optional<std::uint64_t> reasoning_tokens;
};
// OpenAI's usage object; completion_tokens_details.reasoning_tokens only
// for a reasoning model.
std::string usage_json(const Usage& u);

// One choice of a finished non-streaming response.
struct ChoiceResult {
  std::string text;                        // the answer (chat: message.content)
  std::string finish_reason;               // "length" or "stop"
  std::optional<std::string> stop_reason;  // the stop string that matched
  std::string logprobs;                    // the choice's logprobs object (serve/logprobs.h); "": null
  // A simulated reasoning model's reasoning (chat only; serve --reasoning-share):
  // message[reasoning_field] before content, left out when empty.
  std::string reasoning;
  std::string reasoning_field = "reasoning";
  // Chat: the tool calls of the answer (message.tool_calls, content null
  // when the text is empty; finish_reason "tool_calls").
  std::vector<PlannedCall> tool_calls;
};

std::string completion_response(Api api, std::string_view id, std::int64_t created, std::string_view model,
                                const std::vector<ChoiceResult>& choices, const Usage& usage);

// Stream chunks, without the "data: " framing. Transcriptions stream as
// vLLM does: {"object": "transcription.chunk", "choices": [{"delta":
// {"content"}, "finish_reason", "stop_reason"}]}, the usage chunk with
// "choices": [] when stream_include_usage was asked. finish_reason may be empty;
// logprobs is the chunk's logprobs object (serve/logprobs.h), "" for null.
// chat_field: the delta's field of the text ("content", or a reasoning
// model's "reasoning" / "reasoning_content").
std::string stream_chunk(Api api, std::string_view id, std::int64_t created, std::string_view model,
                         std::uint32_t index, std::string_view text, bool first_chat_delta,
                         std::string_view finish_reason, std::string_view logprobs = {},
                         std::string_view chat_field = "content");
// A chat stream chunk of tool calls, as vLLM streams them: the first delta
// of a call carries its index, id, type and name with "arguments": "", the
// later ones the index and a fragment of the arguments; one chunk may carry
// several calls' deltas. No parts: "delta": {} (the finishing chunk).
struct ToolCallDelta {
  std::uint32_t index = 0;
  const PlannedCall* header = nullptr;  // set: the call's first delta
  std::string_view arguments;
};
std::string tool_call_chunk(std::string_view id, std::int64_t created, std::string_view model,
                            std::uint32_t choice_index, const std::vector<ToolCallDelta>& parts,
                            std::string_view finish_reason, std::string_view logprobs = {});
std::string usage_chunk(Api api, std::string_view id, std::int64_t created, std::string_view model,
                        const Usage& usage);
// "data: <json>\n\n"
std::string sse_event(std::string_view json);

// The Responses API (/v1/responses) as OpenAI and vLLM answer it. The
// response object: {"id": "resp_…", "object": "response", "created_at",
// "model", "status" ("in_progress", "completed", or "incomplete" with
// incomplete_details.reason "max_output_tokens"), "output": [a "reasoning"
// item with reasoning_text content when there is reasoning, then a
// "message" item with output_text content], "usage": {"input_tokens",
// "input_tokens_details": {"cached_tokens"}, "output_tokens",
// "output_tokens_details": {"reasoning_tokens"}, "total_tokens"} (null
// without usage)}.
std::string response_object(std::string_view id, std::int64_t created, std::string_view model,
                            std::string_view status, std::string_view reasoning, std::string_view text,
                            const Usage* usage);
// One streamed event: "event: TYPE\ndata: {"type": TYPE, "sequence_number":
// N<fields>}\n\n"; fields: further members, each with its leading comma.
std::string responses_event(std::string_view type, std::uint64_t sequence, std::string_view fields);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace tokenscope::serve
