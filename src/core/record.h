// The request record (shared ARCHITECTURE.md, "Data model"): one per request,
// written to requests.jsonl as the request finishes. All times are monotonic
// nanoseconds on the run's clock (virtual time for `sim`); -1 means "did not
// happen". Output events are stored as offsets from t_send so that a line
// stays short; event_tokens holds the token count of each output event (all
// ones for the simulator, which emits a token per event).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/boxed.h"
#include "core/clock.h"
#include "core/histogram.h"
#include "core/logprob.h"

namespace tokenscope {

enum class Outcome {
  kOk,
  kHttpError,
  kTimeout,
  kConnectError,
  kProtocolError,
  kValidationError,
  kCancelled,
  kRejected,  // the engine refused the request (too long for the context or the KV cache)
};

std::string_view outcome_name(Outcome o);
// Inverse of outcome_name; returns false when the name is unknown.
bool parse_outcome(std::string_view name, Outcome& out);

struct RequestRecord {
  std::uint64_t id = 0;
  std::string tenant;
  std::string task_class;
  std::string model;          // in a model mix: the model (or adapter) it was sent to; else empty
  std::int64_t session = -1;  // multi-turn session id (-1: none) and the turn in it
  std::uint32_t turn = 0;
  // In a simulated fleet (engine/fleet.h): the replica the router sent it
  // to (-1: none, one engine).
  std::int64_t replica = -1;
  // A model call of an agentic task (tasks.jsonl): the task's id and the
  // step's (-1 and "": a request of its own).
  std::int64_t task = -1;
  std::string step;
  bool warmup = false;  // scheduled in the warm-up window: kept on disk, not in the summary
  Nanos t_sched = -1;
  Nanos t_dispatch = -1;  // with a concurrency cap: when the request got a slot (queue time ends)
  Nanos t_send = -1;
  Nanos t_headers = -1;
  Nanos t_first_scheduled = -1;  // engine: first step that processed the request
  Nanos t_first_token = -1;
  Nanos t_last_token = -1;
  Nanos t_close = -1;
  // Arrival times of output-carrying events, and the tokens each carried.
  std::vector<Nanos> event_times;
  std::vector<std::uint32_t> event_tokens;
  // Output events past the per-request cap (bench --max-events): counted but
  // not kept, so that a server streaming without end cannot grow the client
  // without bound. Their gaps from the event before each (nanoseconds) are in
  // dropped_gaps_ns, the tokens they carried in dropped_event_tokens; the
  // summary's inter-token latency includes them. Null when nothing was dropped.
  std::uint64_t events_dropped = 0;
  std::uint64_t dropped_event_tokens = 0;
  std::shared_ptr<const LogLinearHistogram> dropped_gaps_ns;
  std::int64_t prompt_tokens = -1;          // as reported by the server
  std::int64_t prompt_tokens_planned = -1;  // what the workload planned (-1: not planned, e.g. later turns)
  std::int64_t output_tokens_planned = -1;  // max_tokens asked for
  std::int64_t output_tokens = -1;          // as reported by the server (engine: exact)
  std::int64_t output_tokens_client = -1;   // the client's own count, a cross-check
  // output_tokens was counted on the client (tokenizer) because the server sent no usage.
  bool output_tokens_counted_by_client = false;
  std::int64_t cached_tokens = -1;  // prompt tokens served from the prefix cache
  // Reasoning models, which stream reasoning text before the answer: the
  // output tokens that were reasoning (the server's usage
  // completion_tokens_details.reasoning_tokens, else the client's count of
  // the reasoning events' tokens) and when the first answer token arrived
  // (content, text or tool calls; -1: none arrived). reasoning_tokens -1: the
  // response carried no reasoning and the server reported none; the first
  // answer token is then the first token.
  std::int64_t reasoning_tokens = -1;
  Nanos t_first_answer = -1;
  // A pooling request (bench --api embeddings | rerank): the inputs it sent
  // (embeddings) or the documents (rerank); -1 for generation.
  std::int64_t inputs = -1;
  // The audio the request carried, in milliseconds (bench --api
  // transcriptions: the uploaded file; chat's input_audio part); -1: none.
  std::int64_t audio_ms = -1;
  std::uint32_t preemptions = 0;
  // The server's own timings of this request, when it sends them (llama.cpp's
  // "timings"): prefill of the uncached prompt tokens, and generation.
  double server_prompt_ms = -1;
  std::int64_t server_prompt_evaluated = -1;
  double server_decode_ms = -1;
  int http_status = -1;
  std::string response_id;  // the server's completion id ("cmpl-..."), when it sent one
  // bench --logprobs: the log-probabilities the server gave the output
  // tokens (core/logprob.h); nullopt when they were not asked for (written
  // as `logprobs` then, even when the server sent none: n = 0).
  Boxed<LogprobHistogram> logprobs;  // on the heap: a record moves four times per request
  Outcome outcome = Outcome::kOk;
  std::string detail;
  // Cancelled on purpose by the client (bench --cancel), as a user closing
  // the tab: outcome kCancelled, left out of failures, SLOs and goodput.
  bool cancel_planned = false;

  // Appends one JSON object (no newline) to out. Deterministic formatting.
  // Readers of requests.jsonl (rundir/readers.h RequestLineParser) fill
  // the same type back: every field written here is read there.
  void append_json(std::string& out) const;

  // The earliest and the latest time the record holds (-1 when it holds none).
  Nanos start() const;
  Nanos end() const;
  // The first and the last output event: t_first_token / t_last_token, else
  // the event list (-1 when there is none).
  Nanos first_token() const;
  Nanos last_token() const;
  // The first answer token: t_first_answer when the record has reasoning,
  // else first_token() (-1 when there is none).
  Nanos first_answer() const { return reasoning_tokens >= 0 ? t_first_answer : first_token(); }
  // Output tokens that were the answer: output_tokens less the reasoning
  // tokens (at least 0); -1 when output_tokens is unknown.
  std::int64_t answer_tokens() const {
    if (output_tokens < 0) return -1;
    return reasoning_tokens > 0 ? std::max<std::int64_t>(0, output_tokens - reasoning_tokens) : output_tokens;
  }
};

}  // namespace tokenscope
