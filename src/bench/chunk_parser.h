// Parses the JSON of one OpenAI streaming event (completions or chat) with
// simdjson's DOM parser (validating, and robust to any input), extracting what the client's metrics need
// (shared METRICS.md): whether the event carries output — non-empty `text`,
// `delta.content`, `delta.reasoning` (current vLLM), `delta.reasoning_content`
// (its older name, SGLang, llama-server) or `delta.tool_calls`; role-only and
// empty chunks do not — whether that output is reasoning or answer, the
// output text, finish reasons, the usage block and error events. The same for
// a whole `message`. The Responses API too (/v1/responses): its streamed
// events by "type" (response.output_text.delta is answer,
// response.reasoning_text.delta / reasoning_summary_text.delta reasoning,
// response.completed / incomplete end the stream with the response's status
// as the finish reason and its usage: input_tokens, output_tokens,
// output_tokens_details.reasoning_tokens; response.failed and "error" are
// errors) and a whole response object ("object": "response", its output
// items' text). Transcriptions (/v1/audio/transcriptions) streamed as
// OpenAI does: transcript.text.delta events are answer, transcript.text.done
// ends the stream ("stop") with its usage ({"type": "tokens",
// "input_tokens", "output_tokens"}); vLLM's transcription.chunk objects are
// chat-like chunks (delta.content) read as above. One parser per
// connection; not thread-safe.
//
// With logprobs on (bench --logprobs), also the log-probability of each
// output token the event carries, in any of the forms servers send them:
//  * choices[i].logprobs.token_logprobs[k] (OpenAI and vLLM completions;
//    null entries are passed over);
//  * choices[i].logprobs.content[k].logprob (OpenAI and vLLM chat, and
//    llama.cpp's llama-server for both APIs);
//  * choices[i].logprobs.content[k].prob (llama-server with
//    post_sampling_probs: a probability, taken as its logarithm).
// Off, the logprobs of an event are not looked at (no cost).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

namespace tokenscope::bench {

struct ChunkUsage {
  std::int64_t prompt_tokens = -1;
  std::int64_t completion_tokens = -1;
  std::int64_t cached_tokens = -1;  // prompt_tokens_details.cached_tokens, -1 when absent
  // completion_tokens_details.reasoning_tokens (OpenAI, reasoning models), -1 when absent
  std::int64_t reasoning_tokens = -1;
};

// llama.cpp's per-request "timings" (final chunk or body): the server's own
// prompt-processing and generation times.
struct ChunkTimings {
  double prompt_ms = -1;       // prompt processing (prefill) of the tokens not cached
  std::int64_t prompt_n = -1;  // prompt tokens processed (cached ones not counted)
  double predicted_ms = -1;    // generation of the output tokens after the first
  std::int64_t predicted_n = -1;
};

// One entry of a tool_calls list (OpenAI's shape, which vLLM, SGLang and
// llama-server share): a whole call of a message, or the fragment of one a
// streamed delta carries (a call's arguments arrive in pieces; "index"
// names the call they belong to, its first fragment brings the id and the
// function's name).
struct ToolCallPart {
  std::int64_t index = -1;  // "index"; -1 when absent (whole messages: the position is used)
  std::string id;           // "id", when sent
  std::string name;         // function.name, when sent
  std::string arguments;    // function.arguments (a string; an object is taken as its JSON text)
};

// The tool calls of one answer assembled from their parts, by index (a
// stream's fragments) or by position (a whole message's calls). Bounded:
// past kMaxCalls calls or kMaxArgumentBytes of arguments it stops taking
// parts and says why (problem()).
class ToolCallAssembler {
 public:
  static constexpr std::size_t kMaxCalls = 128;
  static constexpr std::size_t kMaxArgumentBytes = 1 << 20;
  struct Call {
    std::int64_t index = 0;
    std::string id, name, arguments;
  };
  // `position`: the part's place in its list (used when it has no index).
  void add(const ToolCallPart& part, std::size_t position);
  const std::vector<Call>& calls() const { return calls_; }
  const std::string& problem() const { return problem_; }

 private:
  std::vector<Call> calls_;
  std::size_t argument_bytes_ = 0;
  std::string problem_;
};

struct ChunkInfo {
  bool valid = false;     // a JSON object of the expected shape
  bool is_error = false;  // {"error": {...}}
  std::string error_message;
  bool has_output = false;            // carries output (the first such event is the first token)
  bool has_reasoning = false;         // carries reasoning text (`reasoning` or `reasoning_content`)
  bool has_answer = false;            // carries answer output (`text`, `content` or tool calls)
  bool role_only = false;             // a chat delta with a role and no output
  std::string text;                   // output text of all choices, concatenated
  std::uint32_t reasoning_bytes = 0;  // of text, the bytes that are reasoning
  std::uint32_t choices = 0;
  std::string finish_reason;  // the last non-null finish_reason seen in the event
  std::string id;             // the completion id ("cmpl-...", "chatcmpl-..."), when a string
  std::optional<ChunkUsage> usage;
  std::optional<ChunkTimings> timings;
  // The tool_calls entries of every choice's delta or message, in order
  // (ToolCallAssembler puts a stream's fragments together).
  std::vector<ToolCallPart> tool_calls;
  // The output tokens' logprobs of every choice, in order (parser with
  // logprobs on); valid until the parser's next parse().
  std::span<const double> logprobs;

  // Back to an empty event, keeping the strings' and lists' storage.
  void reset();
};

// A pooling answer (/v1/embeddings, /v1/rerank), checked item by item.
struct PoolingInfo {
  bool valid = false;  // the expected shape; else `problem` says what is wrong
  std::string problem;
  bool is_error = false;  // {"error": ...}
  std::string error_message;
  std::string id;
  std::int64_t items = -1;          // embeddings in "data", or results in "results"
  std::int64_t dimension = -1;      // embeddings: the vectors' size (floats; base64: bytes / 4)
  std::int64_t prompt_tokens = -1;  // usage.prompt_tokens, else usage.total_tokens (vLLM's rerank)
};

// A whole transcription answer (json or verbose_json).
struct TranscriptionInfo {
  bool valid = false;  // a JSON object; else `problem` says what it is
  std::string problem;
  bool is_error = false;  // {"error": ...}
  std::string error_message;
  bool has_text = false;  // a "text" string (it may be empty: silence)
  std::string text;
  std::string id;  // when the server sends one
  // usage: OpenAI's {"type": "tokens", "input_tokens", "output_tokens"} or
  // vLLM's {"prompt_tokens", "completion_tokens"}; -1 when absent.
  std::int64_t input_tokens = -1;
  std::int64_t output_tokens = -1;
  // The audio's length as the server tells it: verbose_json's "duration"
  // (a number, or vLLM's string), else a {"type": "duration", "seconds"}
  // usage; -1 when absent.
  double audio_seconds = -1;
};

class ChunkParser;

// A stream's repeated frame. The events of one stream differ mostly in
// their text: vLLM's and SGLang's chat chunks repeat the id, the creation
// time, the model and every other field byte for byte. When an event's
// text stands in it as a plain string (nothing JSON escapes) found once,
// the bytes before and after it are kept as the frame, checked once: the
// frame with a marker in place of the text reads, on the DOM path, as the
// same event with the marker as its text. A later event that is the frame
// around a JSON string body (no unescaped quote or control character,
// valid UTF-8, the simple escapes) is answered from the frame, that string
// as its text, without parsing the rest again: the answer the DOM path
// gives (tests and the fuzz target compare them). Any other event takes
// the DOM path, and may become the frame. A stream whose frame changes
// twice before it reads anything (a server with per-event timings) stops
// learning. One per stream (ResponseCollector keeps it); reset() between
// requests.
class ChunkFrame {
 public:
  void reset() {
    active_ = hit_since_learned_ = false;
    wasted_ = 0;
    hits_ = learned_ = 0;
  }
  std::uint64_t hits() const { return hits_; }        // events read from the frame
  std::uint64_t learned() const { return learned_; }  // frames taken

 private:
  friend class ChunkParser;
  std::string prefix_, suffix_;  // the bytes before the text's string body, after it
  ChunkInfo base_;               // the answer of the frame (its text replaced by each event's)
  std::string scratch_;
  bool active_ = false;
  bool hit_since_learned_ = false;
  std::uint32_t wasted_ = 0;
  std::uint64_t hits_ = 0, learned_ = 0;
};

class ChunkParser {
 public:
  explicit ChunkParser(bool logprobs = false) : logprobs_on_(logprobs) {}
  bool logprobs_on() const { return logprobs_on_; }
  // data: the event's data field (not "[DONE]"). padding: how many bytes
  // after the end of data are allocated (of any value); with at least
  // simdjson's padding there (SseDecoder::kDataPadding) the data is parsed
  // where it lies, else copied first. The answer is the parser's own, valid
  // until its next parse() (no allocation per event).
  // frame: the stream's (ChunkFrame), or none.
  const ChunkInfo& parse(std::string_view data, std::size_t padding = 0, ChunkFrame* frame = nullptr);
  // A whole pooling answer. Embeddings: {"data": [{"embedding": [numbers]
  // or a base64 string, "index"}...]}, every vector of one size. Rerank:
  // {"results": [{"index", "relevance_score" (or "score")}...]}, each index
  // below `inputs` and seen once. llama-server's, vLLM's and OpenAI's shapes.
  PoolingInfo parse_pooling(std::string_view body, bool rerank, std::uint32_t inputs);
  TranscriptionInfo parse_transcription(std::string_view body);

 private:
  bool logprobs_on_ = false;
  simdjson::dom::parser parser_;
  std::string buffer_;  // data plus simdjson's padding
  std::vector<double> logprobs_;
  ChunkInfo info_;  // parse()'s answer
  void parse_dom(std::string_view data, std::size_t padding, ChunkInfo& info);
  bool read_framed(std::string_view data, const ChunkFrame& frame, ChunkInfo& info, bool& framed);
  void learn_frame(std::string_view data, ChunkFrame& frame, const ChunkInfo& info);
};

}  // namespace tokenscope::bench
