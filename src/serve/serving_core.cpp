#include "serve/serving_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "core/error.h"
#include "core/json_out.h"
#include "core/random.h"

namespace tokenscope::serve {

// ---- EmissionTrace ----------------------------------------------------------

EmissionTrace::EmissionTrace(const std::string& path) : writer_(path, false) {}

void EmissionTrace::record(std::uint64_t request, std::uint32_t index, Nanos engine_ns, Nanos write_ns) {
  std::lock_guard lock(mutex_);
  std::string& o = writer_.begin_line();
  o += "{\"req\":";
  jsonout::append_uint(o, request);
  o += ",\"i\":";
  jsonout::append_uint(o, index);
  o += ",\"engine_ns\":";
  jsonout::append_int(o, engine_ns);
  o += ",\"write_ns\":";
  jsonout::append_int(o, write_ns);
  o += '}';
  writer_.end_line();
}

void EmissionTrace::record_request(std::uint64_t request, const std::string& response_id, Nanos arrival_ns,
                                   std::string_view client_request_id) {
  std::lock_guard lock(mutex_);
  std::string& o = writer_.begin_line();
  o += "{\"req\":";
  jsonout::append_uint(o, request);
  o += ",\"resp\":";
  jsonout::append_string(o, response_id);
  o += ",\"arrival_ns\":";
  jsonout::append_int(o, arrival_ns);
  if (!client_request_id.empty()) {
    o += ",\"xrid\":";
    jsonout::append_string(o, client_request_id);
  }
  o += '}';
  writer_.end_line();
}

void EmissionTrace::record_fault(std::string_view kind, const std::string& response_id, Nanos t_ns,
                                 std::string_view client_request_id) {
  std::lock_guard lock(mutex_);
  std::string& o = writer_.begin_line();
  o += "{\"fault\":";
  jsonout::append_string(o, kind);
  o += ",\"resp\":";
  jsonout::append_string(o, response_id);
  o += ",\"t_ns\":";
  jsonout::append_int(o, t_ns);
  if (!client_request_id.empty()) {
    o += ",\"xrid\":";
    jsonout::append_string(o, client_request_id);
  }
  o += '}';
  writer_.end_line();
}

void EmissionTrace::flush() {
  std::lock_guard lock(mutex_);
  writer_.flush();
}

// ---- ResponseTask -------------------------------------------------------------

// One HTTP generation request: its choices (one per prompt), the stream or
// the whole response, stop strings, injected faults. Engine context only.
class ResponseTask : public std::enable_shared_from_this<ResponseTask> {
 public:
  struct Choice {
    std::uint64_t engine_id = 0;
    std::size_t replica = 0;  // a fleet's replica that runs it (its decode replica once there)
    std::vector<tokenizers::TokenId> prompt;
    std::uint32_t target = 0;  // tokens it will generate unless a stop string ends it
    bool natural_end = false;  // target < max_tokens: the model stopped on its own
    std::string text;          // everything generated (after a stop string: cut there)
    std::size_t sent = 0;      // bytes of text already streamed
    std::uint32_t tokens = 0;
    Nanos last_token_t = -1;
    bool done = false;
    std::string finish_reason;
    std::optional<std::string> stop_reason;
    std::uint32_t prompt_tokens = 0;
    std::uint32_t cached_tokens = 0;
    // Logprobs asked for: every token's (serve/logprobs.h), and how many of
    // them a stream chunk already carried.
    std::uint64_t logprob_key = 0;
    std::vector<TokenLogprob> logprobs;
    std::size_t logprobs_sent = 0;
    // A reasoning model's first tokens (CoreSettings::reasoning_share), and
    // the bytes of text they made.
    std::uint32_t reasoning_tokens = 0;
    std::size_t reasoning_bytes = 0;
    // Images and audio: their encoders' FLOPs (their tokens are in `prompt`).
    double image_flops = 0, audio_flops = 0;
    // An output decided in advance (tool calls, a JSON answer; serve/tools.h):
    // its tokens replace the engine's, and how many of its calls were opened
    // on the stream.
    std::shared_ptr<const OutputPlan> plan;
    std::uint32_t calls_opened = 0;
    bool calls() const { return plan && !plan->calls.empty(); }
  };

  ResponseTask(ServingCore& core, GenerationRequest req, std::shared_ptr<net::Responder> responder,
               Fault fault)
      : core_(core), req_(std::move(req)), responder_(std::move(responder)), fault_(fault) {
    id_ = core.new_response_id(req_.api);
    created_ = static_cast<std::int64_t>(std::time(nullptr));
    // Answered with the adapter's name when it runs on one (as vLLM), else the served model's.
    const auto& adapters = core.settings().adapters;
    model_ = std::find(adapters.begin(), adapters.end(), req_.model) != adapters.end() ? req_.model
                                                                                       : core.model_name();
  }

  GenerationRequest& request() { return req_; }
  const std::string& id() const { return id_; }
  std::vector<Choice>& choices() { return choices_; }
  const Fault& fault() const { return fault_; }
  // Its place among the requests the server received (a fleet's session key without a "user").
  std::uint64_t serial = 0;
  bool finished() const { return finished_; }
  std::shared_ptr<net::Responder>& responder() { return responder_; }

  // Headers (and the chat role chunks) go out when generation starts.
  void begin() {
    begun_ = true;
    if (!req_.stream) return;
    responder_->start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    core_.metrics().on_http_response(200);
    if (req_.api == Api::kResponses) {
      const std::string obj = response_object(id_, created_, model_, "in_progress", "", "", nullptr);
      core_.send(responder_, responses_event("response.created", seq_++, ",\"response\":" + obj), nullptr);
      core_.send(responder_, responses_event("response.in_progress", seq_++, ",\"response\":" + obj),
                 nullptr);
    }
    if (req_.api == Api::kChat)
      for (std::uint32_t i = 0; i < choices_.size(); ++i)
        core_.send(responder_, sse_event(stream_chunk(req_.api, id_, created_, model_, i, "", true, "")),
                   nullptr);
  }

  void on_token(std::uint32_t index, tokenizers::TokenId token, Nanos t) {
    if (finished_) return;
    Choice& c = choices_[index];
    if (c.done) return;
    if (c.tokens == 0 && core_.fleet() != nullptr) c.replica = core_.replica_of(c.engine_id);
    if (c.last_token_t >= 0) core_.metrics().on_inter_token(nanos_to_s(t - c.last_token_t), c.replica);
    c.last_token_t = t;
    const std::uint32_t token_index = c.tokens++;
    const std::size_t before = c.text.size();
    if (c.plan && token_index < c.plan->tokens.size()) {
      token = c.plan->tokens[token_index];
      const std::size_t from = token_index ? c.plan->ends[token_index - 1] : 0;
      c.text.append(c.plan->text, from, c.plan->ends[token_index] - from);
    } else {
      tokenizers::append_piece_text(token, c.text);
    }
    if (token_index < c.reasoning_tokens) c.reasoning_bytes = c.text.size();
    if (req_.logprobs)
      c.logprobs.push_back(
          {token, simulated_logprob(core_.settings().logprobs, c.logprob_key, token_index, token)});
    // Stop strings (not before min_tokens).
    bool stopped = false;
    if (!req_.stop.empty() && c.tokens >= req_.min_tokens) {
      std::size_t longest = 0;
      for (const auto& s : req_.stop) longest = std::max(longest, s.size());
      const std::size_t from = before >= longest ? before - longest + 1 : 0;
      std::size_t best = std::string::npos;
      for (const auto& s : req_.stop) {
        const std::size_t p = c.text.find(s, from);
        if (p != std::string::npos && p < best) {
          best = p;
          c.stop_reason = s;
        }
      }
      if (best != std::string::npos) {
        c.text.resize(best);
        c.reasoning_bytes = std::min(c.reasoning_bytes, c.text.size());
        stopped = true;
      }
    }
    std::string finish;
    if (stopped)
      finish = "stop";
    else if (c.tokens >= c.target)
      finish = !c.natural_end ? "length" : c.calls() ? "tool_calls" : "stop";
    // Faults fire halfway through the first choice.
    const bool fault_now = index == 0 && fault_.kind != FaultKind::kNone && token_index + 1 == fault_point();
    fault_time_ = t;
    if (fault_now && apply_midstream_fault()) return;
    const std::uint64_t engine_id = c.engine_id;
    if (req_.stream) stream_text(index, c, t, token_index, finish);
    if (!finish.empty()) complete_choice(index, finish);
    if (stopped) core_.abort_request(engine_id);  // the engine hears last: the stream is already complete
  }

  // The engine finished a choice (its last token came just before).
  // The engine finished a choice: normally after its last token, or aborted
  // by us (a stop string, a fault, the client leaving).
  void on_engine_finish(std::uint32_t index, const engine::FinishedRequest& f) {
    Choice& c = choices_[index];
    c.prompt_tokens = f.prompt_tokens;
    c.cached_tokens = f.cached_tokens;
    if (core_.fleet() != nullptr) c.replica = core_.replica_of(f.id);
    if (f.aborted && !c.stop_reason) return;  // counted as "abort" by cancel(), or a fault
    FinishedTimes t;
    t.ttft_s = nanos_to_s(f.first_token - f.arrival);
    t.e2e_s = nanos_to_s(f.finished - f.arrival);
    t.queue_s = nanos_to_s(f.first_scheduled - f.arrival);
    t.prefill_s = nanos_to_s(f.first_token - f.first_scheduled);
    t.decode_s = nanos_to_s(f.finished - f.first_token);
    t.inference_s = nanos_to_s(f.finished - f.first_scheduled);
    if (f.output_tokens > 1) t.tpot_s = t.decode_s / (f.output_tokens - 1);
    t.prompt_tokens = f.prompt_tokens;
    t.generation_tokens = f.output_tokens;
    t.finish_reason = c.natural_end || c.stop_reason ? "stop" : "length";
    if (is_pooling(req_.api)) {  // the prefill's token is not an output: a pooling request ends by itself
      t.generation_tokens = 0;
      t.tpot_s = -1.0;
      t.finish_reason = "stop";
    }
    core_.metrics().on_finished(t, c.replica);
    if (!c.done && !finished_) complete_choice(index, t.finish_reason);
  }

  void on_reject(std::uint32_t, std::string_view reason) {
    if (finished_) return;
    const char* param = req_.api == Api::kChat             ? "messages"
                        : req_.api == Api::kResponses      ? "input"
                        : req_.api == Api::kEmbeddings     ? "input"
                        : req_.api == Api::kRerank         ? "documents"
                        : req_.api == Api::kTranscriptions ? "file"
                                                           : "prompt";
    fail(ApiError{400, std::string(reason), param});
  }

  // Ends the request at once: an error event on a stream, or an error response.
  void fail(const ApiError& e) {
    if (finished_) return;
    for (auto& c : choices_)
      if (!c.done) core_.abort_request(c.engine_id);
    if (req_.stream && begun_) {
      if (req_.api == Api::kResponses)
        core_.send(responder_,
                   responses_event("error", seq_++,
                                   fmt::format(",\"code\":\"{}\",\"message\":{},\"param\":null",
                                               error_type(e.status), nlohmann::json(e.message).dump())),
                   nullptr);
      else
        core_.send(responder_, sse_event(error_body(e)), nullptr);
      core_.end_stream(responder_);
    } else {
      net::HttpResponse r;
      r.status = e.status;
      r.body = error_body(e);
      core_.respond(responder_, std::move(r));
      core_.metrics().on_http_response(e.status);
    }
    finish_task();
  }

  // The client went away.
  void cancel() {
    if (finished_) return;
    for (auto& c : choices_) {
      if (c.done) continue;
      core_.abort_request(c.engine_id);
      FinishedTimes t;
      t.finish_reason = "abort";
      core_.metrics().on_finished(t, c.replica);
    }
    finish_task();
  }

 private:
  std::uint32_t fault_point() const { return std::max<std::uint32_t>(1, (choices_.front().target + 1) / 2); }

  // Returns true when the fault ended the request.
  bool apply_midstream_fault() {
    switch (fault_.kind) {
      case FaultKind::kReset:
        core_.record_fault(fault_.kind, id_, req_.client_request_id);
        for (auto& c : choices_)
          if (!c.done) core_.abort_request(c.engine_id);
        core_.reset(responder_);
        finish_task();
        return true;
      case FaultKind::kStall:
        core_.record_fault(fault_.kind, id_, req_.client_request_id);
        stall_until_ = fault_time_ + static_cast<Nanos>(fault_.duration_ms * 1e6);
        core_.executor().post_at(stall_until_, [self = shared_from_this()] { self->release_stall(); });
        return false;
      case FaultKind::kMalformed:
        core_.record_fault(fault_.kind, id_, req_.client_request_id);
        if (req_.stream)
          write("data: {\"id\": \"malformed-event\", \"choices\": [\n\n", -1, 0, 0);
        else
          malformed_body_ = true;
        return false;
      default:
        return false;
    }
  }

  void release_stall() {
    stall_until_ = 0;
    auto held = std::move(held_);
    held_.clear();
    for (auto& h : held) core_.send(responder_, std::move(h.bytes), std::move(h.on_written));
    if (finished_after_stall_) end();
  }

  void write(std::string bytes, Nanos engine_t, std::uint64_t engine_id, std::uint32_t index) {
    std::function<void(Nanos)> on_written;
    if (engine_t >= 0) {
      on_written = [metrics = &core_.metrics(), trace = core_.trace(), engine_t, engine_id, index](Nanos w) {
        metrics->on_emission_lag(nanos_to_s(w - engine_t));
        if (trace) trace->record(engine_id, index, engine_t, w);
      };
    }
    if (stall_until_ > 0) {
      held_.push_back({std::move(bytes), std::move(on_written)});
      return;
    }
    core_.send(responder_, std::move(bytes), std::move(on_written));
  }

  // The logprobs of the tokens generated since the last chunk.
  std::string fresh_logprobs(Choice& c, std::size_t offset) {
    if (!req_.logprobs || c.logprobs_sent >= c.logprobs.size()) return {};
    const std::vector<TokenLogprob> fresh(c.logprobs.begin() + static_cast<std::ptrdiff_t>(c.logprobs_sent),
                                          c.logprobs.end());
    c.logprobs_sent = c.logprobs.size();
    return logprobs_json(req_.api, fresh, *req_.logprobs, offset);
  }

  // A turn that calls tools: the markup's new bytes become tool-call deltas
  // (a call opens once its name is written; its arguments follow as they
  // are generated; the markup around them sends nothing).
  void stream_tool_calls(std::uint32_t index, Choice& c, Nanos t, std::uint32_t token_index,
                         const std::string& finish) {
    const OutputPlan& plan = *c.plan;
    const std::size_t from = c.sent, upto = c.text.size();
    std::vector<ToolCallDelta> parts;
    for (std::uint32_t j = 0; j < plan.calls.size(); ++j) {
      const PlannedCall& call = plan.calls[j];
      if (upto < call.name_end) break;
      const std::size_t a0 = std::max(from, call.args_begin), a1 = std::min(upto, call.args_end);
      const std::string_view fragment =
          a1 > a0 ? std::string_view(c.text).substr(a0, a1 - a0) : std::string_view();
      if (c.calls_opened <= j) {
        c.calls_opened = j + 1;
        parts.push_back({j, &call, fragment});
      } else if (!fragment.empty()) {
        parts.push_back({j, nullptr, fragment});
      }
    }
    if (parts.empty() && finish.empty()) return;
    const std::size_t offset = c.sent;
    c.sent = upto;
    write(sse_event(tool_call_chunk(id_, created_, model_, index, parts, finish, fresh_logprobs(c, offset))),
          t, c.engine_id, token_index);
  }

  void stream_text(std::uint32_t index, Choice& c, Nanos t, std::uint32_t token_index,
                   const std::string& finish) {
    if (c.calls() && req_.api == Api::kChat) return stream_tool_calls(index, c, t, token_index, finish);
    // Hold back text that could still turn into a stop string.
    std::size_t hold = 0;
    if (finish.empty())
      for (const auto& s : req_.stop)
        for (std::size_t k = std::min(s.size() - 1, c.text.size()); k > hold; --k)
          if (c.text.compare(c.text.size() - k, k, s, 0, k) == 0) {
            hold = k;
            break;
          }
    const std::size_t upto = c.text.size() - hold;
    const std::string delta = upto > c.sent ? c.text.substr(c.sent, upto - c.sent) : std::string();
    const std::size_t offset = c.sent;
    c.sent = std::max(c.sent, upto);
    if (delta.empty() && finish.empty()) return;
    // The logprobs of the tokens generated since the last chunk (held-back
    // text keeps its tokens' logprobs for the chunk that carries it).
    std::string logprobs = fresh_logprobs(c, offset);
    // A reasoning model: the part of the delta before the reasoning's end in
    // its own chunk, the rest (and the finish reason) as content.
    const std::size_t reasoning_end = std::clamp(c.reasoning_bytes, offset, offset + delta.size());
    if (req_.api == Api::kResponses) {
      const std::string_view d(delta);
      const bool rest = reasoning_end < offset + delta.size() || reasoning_end == offset;
      if (reasoning_end > offset)
        responses_delta(true, d.substr(0, reasoning_end - offset), rest ? -1 : t, c, token_index);
      if (rest) responses_delta(false, d.substr(reasoning_end - offset), t, c, token_index);
      return;
    }
    if (reasoning_end > offset) {
      const std::string& field = core_.settings().reasoning_field;
      const bool rest = reasoning_end < offset + delta.size() || !finish.empty();
      write(sse_event(stream_chunk(req_.api, id_, created_, model_, index,
                                   std::string_view(delta).substr(0, reasoning_end - offset), false,
                                   rest ? "" : finish, rest ? "" : logprobs, field)),
            rest ? -1 : t, c.engine_id, token_index);
      if (!rest) return;
      write(sse_event(stream_chunk(req_.api, id_, created_, model_, index,
                                   std::string_view(delta).substr(reasoning_end - offset), false, finish,
                                   logprobs)),
            t, c.engine_id, token_index);
      return;
    }
    write(sse_event(stream_chunk(req_.api, id_, created_, model_, index, delta, false, finish, logprobs)), t,
          c.engine_id, token_index);
  }

  // Responses API: an output item opens with its first text (the reasoning
  // item, then the message with its output_text part); each delta is an event.
  void responses_delta(bool reasoning, std::string_view text, Nanos t, const Choice& c,
                       std::uint32_t token_index) {
    const std::string rid = id_.substr(std::min<std::size_t>(id_.size(), 5));
    const int output_index = (reasoning || !reasoning_open_) ? 0 : 1;
    if (reasoning && !reasoning_open_) {
      reasoning_open_ = true;
      write(responses_event(
                "response.output_item.added", seq_++,
                fmt::format(",\"output_index\":0,\"item\":{{\"type\":\"reasoning\",\"id\":\"rs_{}\","
                            "\"summary\":[],\"content\":[],\"status\":\"in_progress\"}}",
                            rid)),
            -1, 0, 0);
    }
    if (!reasoning && !message_open_) {
      close_reasoning();
      message_open_ = true;
      write(responses_event(
                "response.output_item.added", seq_++,
                fmt::format(",\"output_index\":{},\"item\":{{\"type\":\"message\",\"id\":\"msg_{}\","
                            "\"role\":\"assistant\",\"status\":\"in_progress\",\"content\":[]}}",
                            output_index, rid)),
            -1, 0, 0);
      write(responses_event(
                "response.content_part.added", seq_++,
                fmt::format(",\"item_id\":\"msg_{}\",\"output_index\":{},\"content_index\":0,\"part\":{{"
                            "\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}}",
                            rid, output_index)),
            -1, 0, 0);
    }
    if (text.empty()) return;
    write(responses_event(
              reasoning ? "response.reasoning_text.delta" : "response.output_text.delta", seq_++,
              fmt::format(",\"item_id\":\"{}_{}\",\"output_index\":{},\"content_index\":0,\"delta\":{}",
                          reasoning ? "rs" : "msg", rid, reasoning ? 0 : output_index,
                          nlohmann::json(std::string(text))
                              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))),
          t, c.engine_id, token_index);
  }
  void close_reasoning() {
    if (!reasoning_open_ || reasoning_done_) return;
    reasoning_done_ = true;
    const Choice& c = choices_.front();
    const std::string rid = id_.substr(std::min<std::size_t>(id_.size(), 5));
    const std::string text = c.text.substr(0, std::min(c.reasoning_bytes, c.text.size()));
    write(
        responses_event(
            "response.reasoning_text.done", seq_++,
            fmt::format(",\"item_id\":\"rs_{}\",\"output_index\":0,\"content_index\":0,\"text\":{}", rid,
                        nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))),
        -1, 0, 0);
    write(responses_event(
              "response.output_item.done", seq_++,
              fmt::format(
                  ",\"output_index\":0,\"item\":{{\"type\":\"reasoning\",\"id\":\"rs_{}\",\"summary\":[],"
                  "\"content\":[{{\"type\":\"reasoning_text\",\"text\":{}}}],\"status\":\"completed\"}}",
                  rid, nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))),
          -1, 0, 0);
  }

  void complete_choice(std::uint32_t index, const std::string& finish) {
    Choice& c = choices_[index];
    if (c.done) return;
    c.done = true;
    c.finish_reason = finish;
    for (const auto& other : choices_)
      if (!other.done) return;
    if (stall_until_ > 0) {
      finished_after_stall_ = true;
      return;
    }
    end();
  }

  Usage usage() const {
    Usage u;
    for (const auto& c : choices_) {
      u.prompt_tokens += c.prompt.size();
      u.completion_tokens += c.tokens;
      u.cached_tokens += c.cached_tokens;
    }
    if ((req_.api == Api::kChat || req_.api == Api::kResponses) &&
        core_.settings().reasoning_share > 0) {  // a reasoning model
      std::uint64_t reasoning = 0;
      for (const auto& c : choices_) reasoning += std::min<std::uint64_t>(c.reasoning_tokens, c.tokens);
      u.reasoning_tokens = reasoning;
    }
    return u;
  }

  void end() {
    if (finished_) return;
    const Usage u = usage();
    if (req_.api == Api::kResponses) {
      const Choice& c = choices_.front();
      const std::size_t rb = std::min(c.reasoning_bytes, c.text.size());
      const std::string status = c.finish_reason == "length" ? "incomplete" : "completed";
      const std::string obj =
          response_object(id_, created_, model_, status, std::string_view(c.text).substr(0, rb),
                          std::string_view(c.text).substr(rb), &u);
      if (req_.stream) {
        if (!message_open_) responses_delta(false, "", -1, c, 0);
        const std::string rid = id_.substr(std::min<std::size_t>(id_.size(), 5));
        const int oi = reasoning_open_ ? 1 : 0;
        const std::string text =
            nlohmann::json(c.text.substr(rb)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        core_.send(
            responder_,
            responses_event(
                "response.output_text.done", seq_++,
                fmt::format(",\"item_id\":\"msg_{}\",\"output_index\":{},\"content_index\":0,\"text\":{}",
                            rid, oi, text)),
            nullptr);
        core_.send(responder_,
                   responses_event(
                       "response.content_part.done", seq_++,
                       fmt::format(",\"item_id\":\"msg_{}\",\"output_index\":{},\"content_index\":0,"
                                   "\"part\":{{\"type\":\"output_text\",\"text\":{},\"annotations\":[]}}",
                                   rid, oi, text)),
                   nullptr);
        core_.send(responder_,
                   responses_event(
                       "response.output_item.done", seq_++,
                       fmt::format(",\"output_index\":{},\"item\":{{\"type\":\"message\",\"id\":\"msg_{}\","
                                   "\"role\":\"assistant\",\"status\":\"{}\",\"content\":[{{\"type\":"
                                   "\"output_text\",\"text\":{},\"annotations\":[]}}]}}",
                                   oi, rid, status, text)),
                   nullptr);
        core_.send(responder_,
                   responses_event(status == "completed" ? "response.completed" : "response.incomplete",
                                   seq_++, ",\"response\":" + obj),
                   nullptr);
        core_.end_stream(responder_);
      } else {
        net::HttpResponse r;
        r.body = obj;
        if (malformed_body_) r.body.resize(r.body.size() / 2);
        core_.respond(responder_, std::move(r));
        core_.metrics().on_http_response(200);
      }
    } else if (req_.api == Api::kTranscriptions && !req_.stream) {
      const Choice& c = choices_.front();
      net::HttpResponse r;
      r.body = transcription_response(req_, c.text, u.prompt_tokens, req_.media_tokens, u.completion_tokens);
      if (req_.response_format == "text") r.content_type = "text/plain; charset=utf-8";
      if (malformed_body_) r.body.resize(r.body.size() / 2);
      core_.respond(responder_, std::move(r));
      core_.metrics().on_http_response(200);
    } else if (is_pooling(req_.api)) {
      net::HttpResponse r;
      std::vector<std::uint64_t> hashes;
      for (const auto& c : choices_) hashes.push_back(pooling_input_hash(c.prompt));
      r.body = pooling_response(req_, hashes, id_, created_, model_, u.prompt_tokens);
      if (malformed_body_) r.body.resize(r.body.size() / 2);
      core_.respond(responder_, std::move(r));
      core_.metrics().on_http_response(200);
    } else if (req_.stream) {
      if (req_.include_usage)
        core_.send(responder_, sse_event(usage_chunk(req_.api, id_, created_, model_, u)), nullptr);
      core_.send(responder_, std::string(kSseDone), nullptr);
      core_.end_stream(responder_);
    } else {
      std::vector<ChoiceResult> results;
      for (const auto& c : choices_) {
        const std::size_t rb = std::min(c.reasoning_bytes, c.text.size());
        results.push_back({c.text.substr(rb),
                           c.finish_reason,
                           c.stop_reason,
                           req_.logprobs ? logprobs_json(req_.api, c.logprobs, *req_.logprobs, 0) : "",
                           c.text.substr(0, rb),
                           core_.settings().reasoning_field,
                           {}});
        // The calls, when all of them were written (a cut one leaves its markup as content, as vLLM's
        // parsers do).
        if (c.calls() && c.finish_reason == "tool_calls") {
          results.back().text.clear();
          results.back().tool_calls = c.plan->calls;
        }
      }
      net::HttpResponse r;
      r.body = completion_response(req_.api, id_, created_, model_, results, u);
      if (malformed_body_) r.body.resize(r.body.size() / 2);
      core_.respond(responder_, std::move(r));
      core_.metrics().on_http_response(200);
    }
    finish_task();
  }

  void finish_task() {
    if (finished_) return;
    finished_ = true;
    core_.task_done(shared_from_this());
  }

  struct Held {
    std::string bytes;
    std::function<void(Nanos)> on_written;
  };

  ServingCore& core_;
  GenerationRequest req_;
  std::shared_ptr<net::Responder> responder_;
  Fault fault_;
  std::string id_;
  std::int64_t created_ = 0;
  std::string model_;  // the "model" of the answer
  std::vector<Choice> choices_;
  bool finished_ = false;
  bool begun_ = false;
  Nanos stall_until_ = 0;
  std::vector<Held> held_;
  bool finished_after_stall_ = false;
  bool malformed_body_ = false;
  // Responses API stream: the next sequence_number, and the output items opened.
  std::uint64_t seq_ = 0;
  bool reasoning_open_ = false, reasoning_done_ = false, message_open_ = false;
  Nanos fault_time_ = 0;  // the engine time of the token that triggers a fault
};

// ---- ServingCore --------------------------------------------------------------

ServingCore::ServingCore(Executor& executor, const engine::EffectiveEngine& effective,
                         const engine::EngineSettings& settings, std::unique_ptr<engine::CostModel> cost,
                         ServeMetrics& metrics, EmissionTrace* trace, CoreSettings core_settings,
                         std::string model_name, const engine::FleetSetup* fleet)
    : executor_(executor),
      metrics_(metrics),
      trace_(trace),
      settings_(std::move(core_settings)),
      model_name_(std::move(model_name)) {
  if (fleet != nullptr && fleet->fleet()) {
    fleet_ = fleet->make(effective, settings, this);
    for (std::size_t i = 0; i < fleet_->size(); ++i) engines_.push_back(&fleet_->engine(i));
    // A server runs for long: a request's route and transfer go once it ended (bench keeps them).
    fleet_->forget_ended(!settings_.fleet_history);
  } else {
    engine_ = std::make_unique<engine::Engine>(effective, settings, std::move(cost), this);
    engines_.push_back(engine_.get());
  }
  replicas_.resize(engines_.size());
  if (const auto* p = engines_[0]->perturber(); p != nullptr && !fleet_)
    metrics_.set_perturbation_source([p] { return p->counts_by_kind(); });
}

std::size_t ServingCore::replica_of(std::uint64_t engine_id) const {
  if (!fleet_) return 0;
  const int r = fleet_->replica_of(engine_id);
  return r >= 0 ? static_cast<std::size_t>(r) : 0;
}

void ServingCore::set_queue(std::size_t i) {
  metrics_.set_queue(static_cast<std::uint32_t>(engines_[i]->num_running()),
                     static_cast<std::uint32_t>(engines_[i]->num_waiting()), i);
}

ServingCore::~ServingCore() = default;

nlohmann::json ServingCore::perturbations_json() const {
  const engine::Perturber* p = fleet_ ? nullptr : engines_[0]->perturber();
  return {{"perturbations", p != nullptr ? p->to_json() : nlohmann::json::array()},
          {"perturbation_seed", p != nullptr ? nlohmann::json(p->seed()) : nlohmann::json(nullptr)}};
}

void ServingCore::submit(GenerationRequest request, std::shared_ptr<net::Responder> responder, Fault fault) {
  auto task = std::make_shared<ResponseTask>(*this, std::move(request), std::move(responder), fault);
  std::weak_ptr<ResponseTask> weak = task;
  task->responder()->on_disconnect([this, weak] {
    executor_.post([weak] {
      if (auto t = weak.lock()) t->cancel();
    });
  });
  executor_.post([this, task] { start(task); });
}

void ServingCore::start(std::shared_ptr<ResponseTask> task) {
  if (!accepting_.load()) {
    task->fail(ApiError{503, "the server is shutting down", ""});
    return;
  }
  auto& req = task->request();
  // Lengths: max_tokens, or where the simulated model would stop by itself.
  Rng rng(hash_combine64(settings_.seed, next_engine_id_));
  for (std::uint32_t i = 0; i < req.prompts.size(); ++i) {
    ResponseTask::Choice c;
    c.prompt = std::move(req.prompts[i]);
    if (!req.media.empty()) {  // placeholder tokens after the text, as the model sees them
      engine::EngineRequest media;
      media.prompt = std::move(c.prompt);
      for (const auto& m : req.media) {
        if (m.audio && i == 0) metrics_.on_audio(m.seconds);
        if (m.audio)
          engine::append_audio(engines_[0]->effective().model, m.seconds, m.hash, media);
        else
          engine::append_image(engines_[0]->effective().model, m.width, m.height, m.hash, media);
      }
      c.prompt = std::move(media.prompt);
      c.image_flops = media.image_encoder_flops;
      c.audio_flops = media.audio_encoder_flops;
    }
    c.target = req.max_tokens;
    c.natural_end = req.api == Api::kTranscriptions;  // a transcript ends by itself: "stop"
    if (!req.ignore_eos && settings_.natural_length) {
      const std::uint32_t natural = std::max(req.min_tokens, settings_.natural_length->sample(rng));
      if (natural < c.target) {
        c.target = std::max<std::uint32_t>(1, natural);
        c.natural_end = true;
      }
    }
    if ((req.api == Api::kChat || req.api == Api::kResponses) && settings_.reasoning_share > 0)
      c.reasoning_tokens = static_cast<std::uint32_t>(std::llround(settings_.reasoning_share * c.target));
    // Tool calls or a JSON answer, decided now (the fault, if any, shapes the first choice).
    if (!req.tools.tools.empty() || req.format.kind != OutputFormat::Kind::kText || !req.documents.empty()) {
      std::uint64_t prompt_hash = hash_combine64(settings_.seed, i);
      for (const auto tok : c.prompt) prompt_hash = hash_combine64(prompt_hash, tok);
      if (req.seed) prompt_hash = hash_combine64(prompt_hash, *req.seed);
      std::optional<OutputPlan> plan;
      try {
        plan = plan_output(req.tools, req.format, settings_.tools, prompt_hash,
                           hash_combine64(hash_string64(task->id()), i),
                           i == 0 ? task->fault().kind : FaultKind::kNone);
      } catch (const std::exception& e) {  // a schema no value satisfies, or one too large to draw
        task->fail(ApiError{400, e.what(), req.tools.tools.empty() ? "response_format" : "tools"});
        return;
      }
      if (!plan && !req.documents.empty() && settings_.tools.cite_prob > 0) {
        // A text answer citing the documents in its context: its length as planned.
        plan = plan_citations(req.documents, c.target, settings_.tools.cite_prob, prompt_hash);
        if (plan) {
          c.reasoning_tokens = 0;
          c.plan = std::make_shared<const OutputPlan>(std::move(*plan));
          plan.reset();
        }
      }
      if (plan) {
        if (plan->fault != FaultKind::kNone) record_fault(plan->fault, task->id(), req.client_request_id);
        const auto n = static_cast<std::uint32_t>(plan->tokens.size());
        c.natural_end = n <= req.max_tokens;
        c.target = std::max<std::uint32_t>(1, std::min(n, req.max_tokens));
        c.reasoning_tokens = 0;
        c.plan = std::make_shared<const OutputPlan>(std::move(*plan));
      }
    }
    task->choices().push_back(std::move(c));
  }
  tasks_.push_back(task);
  // A request tail holds the request before it enters the queue, as slow
  // pre-processing would; it arrived now.
  Nanos hold = 0;
  if (auto* p = fleet_ ? nullptr : engine_->perturber(); p != nullptr && p->holds_requests())
    hold = p->request_hold(requests_received_);
  task->serial = requests_received_++;
  Nanos delay = hold;
  if (task->fault().kind == FaultKind::kSlowFirstByte) {
    record_fault(FaultKind::kSlowFirstByte, task->id(), task->request().client_request_id);
    delay += static_cast<Nanos>(task->fault().duration_ms * 1e6);
  }
  if (delay > 0) {
    const Nanos now = executor_.clock().now_ns();
    // The engine's arrival leaves out a slow first byte's delay (a fault of the response) and keeps a hold.
    const Nanos arrival = hold > 0 ? now + (delay - hold) : -1;
    executor_.post_at(now + delay, [this, task, arrival] {
      if (!task->finished()) admit(task, arrival);
    });
    return;
  }
  admit(task);
}

void ServingCore::admit(std::shared_ptr<ResponseTask> task, Nanos arrival) {
  task->begin();
  auto& req = task->request();
  const Nanos now = executor_.clock().now_ns();
  for (std::uint32_t i = 0; i < task->choices().size() && !task->finished(); ++i) {
    auto& c = task->choices()[i];
    c.engine_id = next_engine_id_++;
    c.logprob_key = logprob_key(settings_.seed, req.seed, i, c.engine_id);
    by_engine_id_[c.engine_id] = {task, i};
    engine::EngineRequest er;
    er.id = c.engine_id;
    er.prompt = c.prompt;
    er.max_output_tokens = c.target;
    er.pooling = is_pooling(req.api);
    er.image_encoder_flops = c.image_flops;
    er.audio_encoder_flops = c.audio_flops;
    if (trace_) trace_->record_request(c.engine_id, task->id(), now, req.client_request_id);
    er.priority = req.priority;
    er.arrival = arrival;
    for (std::size_t a = 0; a < settings_.adapters.size(); ++a)
      if (settings_.adapters[a] == req.model) er.adapter = static_cast<std::uint32_t>(a + 1);
    if (req.seed) er.output_seed = hash_combine64(*req.seed, i);
    direct_delivery_ = true;
    if (fleet_) {
      // The session key: the body's "user" (a stable end-user id, as OpenAI's API defines it), else
      // the request's own serial (no two requests alike).
      const std::uint64_t session = req.user.empty() ? mix64(task->serial) : hash_string64(req.user);
      fleet_->add_request(std::move(er), now, session);
      c.replica = replica_of(c.engine_id);
    } else {
      engine_->add_request(std::move(er), now);
    }
    direct_delivery_ = false;
    set_queue(c.replica);
    ensure_stepping(c.replica);
  }
}

std::string ServingCore::new_response_id(Api api) {
  if (api == Api::kResponses) return fmt::format("resp_{:016x}", mix64(response_serial_.fetch_add(1)));
  const char* prefix = api == Api::kChat             ? "chatcmpl"
                       : api == Api::kEmbeddings     ? "embd"
                       : api == Api::kRerank         ? "rerank"
                       : api == Api::kTranscriptions ? "trsc"
                                                     : "cmpl";
  return fmt::format("{}-{:016x}", prefix, mix64(response_serial_.fetch_add(1)));
}

void ServingCore::record_fault(FaultKind kind, const std::string& response_id,
                               std::string_view client_request_id) {
  metrics_.on_fault(std::string(fault_name(kind)));
  if (trace_)
    trace_->record_fault(fault_name(kind), response_id, executor_.clock().now_ns(), client_request_id);
}

void ServingCore::ensure_stepping(std::size_t i) {
  if (replicas_[i].stepping) return;
  replicas_[i].stepping = true;
  executor_.post([this, i] { step(i); });
}

void ServingCore::step(std::size_t i) {
  engine::Engine& engine = *engines_[i];
  const Nanos t0 = executor_.clock().now_ns();
  const std::uint64_t steps_before = engine.counters().steps;
  const Nanos d = engine.step(t0);
  if (engine.counters().steps == steps_before) {
    replicas_[i].stepping = false;
    return;
  }
  if (fleet_ && fleet_->is_prefill(i)) arm_transfers();  // the prefills that ended send their KV
  // Process the step's events now, while it "runs"; their bytes leave at t0 + d.
  std::vector<Event> events = std::move(pending_);
  pending_.clear();
  deferring_ = true;
  deliver(events);
  deferring_ = false;
  auto out = std::make_shared<std::vector<Outgoing>>(std::move(outbox_));
  outbox_.clear();
  executor_.post_at(t0 + d, [this, out, i] {
    flush(*out);
    if (engines_[i]->has_work())
      step(i);
    else
      replicas_[i].stepping = false;
  });
}

void ServingCore::arm_transfers() {
  const auto next = fleet_->next_transfer();
  if (!next || (transfer_timer_at_ >= 0 && transfer_timer_at_ <= *next)) return;
  transfer_timer_at_ = *next;
  executor_.post_at(*next, [this, at = *next] {
    if (transfer_timer_at_ == at) transfer_timer_at_ = -1;
    deliver_transfers();
  });
}

void ServingCore::deliver_transfers() {
  const Nanos now = executor_.clock().now_ns();
  for (auto t = fleet_->next_transfer(); t && *t <= now; t = fleet_->next_transfer()) {
    direct_delivery_ = true;  // a rejection by the decode replica is answered at once
    const int r = fleet_->deliver_next_transfer();
    direct_delivery_ = false;
    if (r < 0) continue;  // its request ended meanwhile (the client left)
    set_queue(static_cast<std::size_t>(r));
    ensure_stepping(static_cast<std::size_t>(r));
  }
  arm_transfers();
}

void ServingCore::send(const std::shared_ptr<net::Responder>& r, std::string bytes,
                       std::function<void(Nanos)> on_written) {
  if (!deferring_) return r->send(std::move(bytes), std::move(on_written));
  outbox_.push_back({Outgoing::Op::kSend, r, std::move(bytes), std::move(on_written), {}});
}

void ServingCore::end_stream(const std::shared_ptr<net::Responder>& r) {
  if (!deferring_) return r->end_stream();
  outbox_.push_back({Outgoing::Op::kEnd, r, {}, nullptr, {}});
}

void ServingCore::respond(const std::shared_ptr<net::Responder>& r, net::HttpResponse response) {
  if (!deferring_) return r->respond(std::move(response));
  outbox_.push_back({Outgoing::Op::kRespond, r, {}, nullptr, std::move(response)});
}

void ServingCore::reset(const std::shared_ptr<net::Responder>& r) {
  if (!deferring_) return r->reset();
  outbox_.push_back({Outgoing::Op::kReset, r, {}, nullptr, {}});
}

void ServingCore::flush(std::vector<Outgoing>& out) {
  for (auto& o : out) {
    switch (o.op) {
      case Outgoing::Op::kSend:
        o.responder->send(std::move(o.bytes), std::move(o.on_written));
        break;
      case Outgoing::Op::kEnd:
        o.responder->end_stream();
        break;
      case Outgoing::Op::kRespond:
        o.responder->respond(std::move(o.response));
        break;
      case Outgoing::Op::kReset:
        o.responder->reset();
        break;
    }
  }
}

void ServingCore::deliver(std::vector<Event>& events) {
  for (auto& e : events) {
    const auto it = by_engine_id_.find(e.id);
    if (it == by_engine_id_.end()) continue;
    auto task = it->second.first;
    const std::uint32_t index = it->second.second;
    switch (e.kind) {
      case Event::Kind::kToken:
        task->on_token(index, e.token, e.t);
        break;
      case Event::Kind::kFinish:
        by_engine_id_.erase(e.id);
        task->on_engine_finish(index, e.finished);
        break;
      case Event::Kind::kReject:
        by_engine_id_.erase(e.id);
        task->on_reject(index, e.reason);
        break;
    }
  }
}

void ServingCore::on_first_scheduled(std::uint64_t id, Nanos, std::uint32_t cached_tokens) {
  // The response's usage is built when its last token is delivered, before
  // the engine's finish event: record the cached tokens now.
  const auto it = by_engine_id_.find(id);
  if (it != by_engine_id_.end()) it->second.first->choices()[it->second.second].cached_tokens = cached_tokens;
}

void ServingCore::on_token(std::uint64_t id, Nanos t, tokenizers::TokenId token) {
  pending_.push_back({Event::Kind::kToken, id, t, token, {}, {}});
}

void ServingCore::on_finish(const engine::FinishedRequest& r) {
  if (r.aborted) {
    // Called from inside engine_->abort(): settle it now.
    const auto it = by_engine_id_.find(r.id);
    if (it == by_engine_id_.end()) return;
    auto [task, index] = it->second;
    by_engine_id_.erase(it);
    task->on_engine_finish(index, r);
    return;
  }
  pending_.push_back({Event::Kind::kFinish, r.id, r.finished, 0, r, {}});
}

void ServingCore::on_reject(std::uint64_t id, Nanos t, std::string_view reason) {
  Event e{Event::Kind::kReject, id, t, 0, {}, std::string(reason)};
  if (direct_delivery_) {
    std::vector<Event> one{std::move(e)};
    deliver(one);
  } else {
    pending_.push_back(std::move(e));
  }
}

void ServingCore::on_step(const engine::StepStats& s) {
  const std::size_t i = s.replica < engines_.size() ? s.replica : 0;
  const engine::Engine& engine = *engines_[i];
  const auto& c = engine.counters();
  const engine::EngineCounters& last = replicas_[i].last_counters;
  metrics_.on_step(s.num_running, s.num_waiting, s.kv_usage, s.prefill_tokens + s.decode_tokens, s.num_seqs,
                   c.prompt_tokens - last.prompt_tokens, c.generation_tokens - last.generation_tokens,
                   c.prefix_queries_tokens - last.prefix_queries_tokens,
                   c.prefix_hits_tokens - last.prefix_hits_tokens, c.preemptions - last.preemptions,
                   c.tenant_switches - last.tenant_switches, c.swap_out_bytes - last.swap_out_bytes,
                   c.swap_in_bytes - last.swap_in_bytes, i);
  metrics_.set_host_kv(s.host_kv_blocks, engine.effective().num_host_kv_blocks, c.host_kv_evictions,
                       c.host_kv_recomputed_blocks, i);
  update_lora_metrics(i);
  replicas_[i].last_counters = c;
}

void ServingCore::update_lora_metrics(std::size_t i) {
  const engine::Engine& engine = *engines_[i];
  if (engine.effective().lora_adapter_bytes <= 0) return;
  auto names = [this](const std::vector<std::uint32_t>& ids) {
    std::string out;
    for (const auto id : ids) {
      if (id == 0 || id > settings_.adapters.size()) continue;
      if (!out.empty()) out += ',';
      out += settings_.adapters[id - 1];
    }
    return out;
  };
  metrics_.set_lora(names(engine.running_adapters()), names(engine.waiting_adapters()),
                    engine.settings_max_loras(), engine.counters().lora_loads, i);
}

void ServingCore::abort_request(std::uint64_t engine_id) {
  if (engine_id == 0) return;
  const Nanos now = executor_.clock().now_ns();
  const std::size_t i = replica_of(engine_id);
  if (!(fleet_ ? fleet_->abort(engine_id, now) : engine_->abort(engine_id, now)))
    by_engine_id_.erase(engine_id);
  set_queue(i);
}

void ServingCore::task_done(const std::shared_ptr<ResponseTask>& task) {
  tasks_.erase(std::remove(tasks_.begin(), tasks_.end(), task), tasks_.end());
  if (trace_ && tasks_.empty()) trace_->flush();
  check_shutdown();
}

void ServingCore::shutdown(double grace_s, std::function<void()> done) {
  accepting_.store(false);
  executor_.post([this, grace_s, done = std::move(done)]() mutable {
    shutting_down_ = true;
    on_drained_ = std::move(done);
    executor_.post_at(executor_.clock().now_ns() + static_cast<Nanos>(grace_s * 1e9), [this] {
      auto remaining = tasks_;
      for (auto& t : remaining) t->fail(ApiError{503, "the server is shutting down", ""});
      check_shutdown();
    });
    check_shutdown();
  });
}

void ServingCore::check_shutdown() {
  if (!shutting_down_ || !tasks_.empty() || !on_drained_) return;
  if (trace_) trace_->flush();
  auto done = std::move(on_drained_);
  on_drained_ = nullptr;
  done();
}

}  // namespace tokenscope::serve
