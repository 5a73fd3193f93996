#include "bench/exchange.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/json_out.h"
#include "core/random.h"
#include "net/multipart.h"

namespace tokenscope::bench {

namespace {

// A string literal appended with its length known at compile time (no
// strlen per append on the request path).
template <std::size_t N>
void append_lit(std::string& s, const char (&text)[N]) {
  s.append(text, N - 1);
}

constexpr std::size_t kScratchKeep = 1u << 20;  // bytes of a request body's scratch kept between requests
constexpr std::size_t kErrorBodyCap = 4096;     // bytes of an error body kept for the detail
constexpr std::size_t kBodyCap = 64u << 20;     // a non-streamed body larger than this is a protocol error

// What a server sent, quoted for a record's detail: control bytes and NULs
// escaped, at most n bytes.
std::string excerpt(std::string_view s, std::size_t n = 200) {
  return quote_input(s, n);
}
}  // namespace

std::string_view api_name(Api a) {
  switch (a) {
    case Api::kChat:
      return "chat";
    case Api::kEmbeddings:
      return "embeddings";
    case Api::kRerank:
      return "rerank";
    case Api::kResponses:
      return "responses";
    case Api::kTranscriptions:
      return "transcriptions";
    default:
      return "completions";
  }
}

std::string_view api_path(Api a) {
  switch (a) {
    case Api::kChat:
      return "/v1/chat/completions";
    case Api::kEmbeddings:
      return "/v1/embeddings";
    case Api::kRerank:
      return "/v1/rerank";
    case Api::kResponses:
      return "/v1/responses";
    case Api::kTranscriptions:
      return "/v1/audio/transcriptions";
    default:
      return "/v1/completions";
  }
}

RequestEncoder::RequestEncoder(RequestSettings s) : s_(std::move(s)) {
  if (is_pooling(s_.api)) s_.stream = false;  // answered whole
  const std::string path = !s_.path.empty() ? s_.path : std::string(api_path(s_.api));
  // A transcription's Content-Type carries its boundary: written per request (finish()).
  head_ = fmt::format("POST {}{} HTTP/1.1\r\nHost: {}\r\n{}", s_.base_path, path, s_.host_header,
                      s_.api == Api::kTranscriptions ? "" : "Content-Type: application/json\r\n");
  head_ += s_.stream ? "Accept: text/event-stream\r\n" : "Accept: application/json\r\n";
  if (!s_.api_key.empty()) head_ += "Authorization: Bearer " + s_.api_key + "\r\n";
  for (const auto& [name, value] : s_.headers) head_ += name + ": " + value + "\r\n";

  const auto& sm = s_.sampling;
  std::vector<std::pair<std::string, std::string>> extra_form;
  if (!sm.extra_body.empty()) {
    nlohmann::json extra;
    if (json_too_deep_at(sm.extra_body) != std::string_view::npos)
      throw UsageError(fmt::format("--extra-body: nested deeper than {} levels", kMaxJsonDepth));
    try {
      extra = nlohmann::json::parse(sm.extra_body);
    } catch (const std::exception& e) {
      throw UsageError(fmt::format("--extra-body: not JSON: {}", e.what()));
    }
    if (!extra.is_object()) throw UsageError("--extra-body: expected a JSON object, e.g. '{\"min_p\": 0.1}'");
    if (const auto it = extra.find("top_n");
        it != extra.end() && it->is_number_unsigned() && it->get<std::uint64_t>() > 0)
      top_n_ = static_cast<std::uint32_t>(std::min<std::uint64_t>(it->get<std::uint64_t>(), UINT32_MAX));
    for (const auto& [name, value] : extra.items()) {
      extra_names_.push_back(name);
      if (!value.is_null())
        extra_form.emplace_back(name, value.is_string() ? value.get<std::string>() : value.dump());
      extra_fields_ += ',';
      jsonout::append_string(extra_fields_, name);
      extra_fields_ += ':';
      extra_fields_ += value.dump();
    }
  }
  auto number = [&](const char* name, std::string value) {
    if (overridden(name)) return;
    sampling_fields_ += fmt::format(",\"{}\":{}", name, value);
  };
  auto field = [&](const char* name, std::string value) {
    if (!overridden(name)) form_fields_.emplace_back(name, std::move(value));
  };
  if (sm.temperature) field("temperature", fmt::format("{}", *sm.temperature));
  if (sm.top_p) field("top_p", fmt::format("{}", *sm.top_p));
  if (sm.top_k) field("top_k", fmt::format("{}", *sm.top_k));
  if (sm.seed) field("seed", fmt::format("{}", *sm.seed));
  for (auto& f : extra_form) form_fields_.push_back(std::move(f));
  if (sm.temperature) number("temperature", fmt::format("{}", *sm.temperature));
  if (sm.top_p) number("top_p", fmt::format("{}", *sm.top_p));
  if (sm.top_k) number("top_k", fmt::format("{}", *sm.top_k));
  if (sm.seed) number("seed", fmt::format("{}", *sm.seed));
  if (sm.logprobs && s_.api != Api::kResponses) {
    if (s_.api == Api::kChat) {
      number("logprobs", "true");
      number("top_logprobs", fmt::format("{}", *sm.logprobs));
    } else {
      number("logprobs", fmt::format("{}", *sm.logprobs));
    }
  }
}

bool RequestEncoder::overridden_by_extra(std::string_view field) const {
  return std::find(extra_names_.begin(), extra_names_.end(), field) != extra_names_.end();
}

std::shared_ptr<const std::string> RequestEncoder::encode(std::string_view prompt, std::uint32_t max_tokens,
                                                          const std::vector<ChatMessage>* history,
                                                          std::optional<std::uint64_t> request_id,
                                                          const std::vector<std::string>* media,
                                                          std::string_view model) const {
  if (model.empty()) model = s_.model;
  // The body is built in this thread's scratch string (finish() copies it
  // after the head): no allocation of its own per request.
  thread_local std::string body;
  body.clear();
  std::size_t media_bytes = 0;
  const bool parts = media && !media->empty();
  if (parts)
    for (const auto& m : *media) media_bytes += m.size() + 1;
  body.reserve(prompt.size() + 256 + extra_fields_.size() + media_bytes);
  // The user message's content: the text, or the text and the media parts.
  auto content = [&](const char* text_type) {
    if (!parts) {
      jsonout::append_string(body, prompt);
      return;
    }
    append_lit(body, "[{\"type\":\"");
    body += text_type;
    append_lit(body, "\",\"text\":");
    jsonout::append_string(body, prompt);
    body += '}';
    for (const auto& m : *media) {
      body += ',';
      body += m;
    }
    body += ']';
  };
  body += '{';
  if (!overridden("model")) {
    append_lit(body, "\"model\":");
    jsonout::append_string(body, model);
    body += ',';
  }
  // The conversation so far, then the user's message.
  auto messages = [&](const char* text_type) {
    body += '[';
    if (history)
      for (const auto& m : *history) {
        append_lit(body, "{\"role\":");
        jsonout::append_string(body, m.role);
        append_lit(body, ",\"content\":");
        jsonout::append_string(body, m.content);
        append_lit(body, "},");
      }
    append_lit(body, "{\"role\":\"user\",\"content\":");
    content(text_type);
    append_lit(body, "}]");
  };
  if (s_.api == Api::kChat) {
    append_lit(body, "\"messages\":");
    messages("text");
  } else if (s_.api == Api::kResponses) {
    // "input": the prompt, or the conversation as messages.
    append_lit(body, "\"input\":");
    if ((history && !history->empty()) || parts) {
      messages("input_text");
    } else {
      jsonout::append_string(body, prompt);
    }
  } else {
    append_lit(body, "\"prompt\":");
    jsonout::append_string(body, prompt);
  }
  const char* max_name = s_.api == Api::kResponses ? "max_output_tokens" : "max_tokens";
  if (!overridden(max_name)) {
    append_lit(body, ",\"");
    body += max_name;
    append_lit(body, "\":");
    jsonout::append_uint(body, max_tokens);
  }
  if (s_.ignore_eos && !overridden("ignore_eos")) append_lit(body, ",\"ignore_eos\":true");
  if (!overridden("stream")) body += s_.stream ? ",\"stream\":true" : ",\"stream\":false";
  if (s_.stream && s_.include_usage && s_.api != Api::kResponses && !overridden("stream_options"))
    append_lit(body, ",\"stream_options\":{\"include_usage\":true}");
  body += sampling_fields_;
  body += extra_fields_;
  body += '}';
  auto out = finish(body, request_id);
  if (body.capacity() > kScratchKeep) std::string().swap(body);  // a media body's megabytes are not kept
  return out;
}

std::shared_ptr<const std::string> RequestEncoder::encode_chat(
    std::string_view messages_json, std::uint32_t max_tokens, bool stream, bool ignore_eos,
    std::string_view extra, std::optional<std::uint64_t> request_id) const {
  std::string body;
  body.reserve(messages_json.size() + extra.size() + 256 + extra_fields_.size());
  body += '{';
  if (!overridden("model")) {
    append_lit(body, "\"model\":");
    jsonout::append_string(body, s_.model);
    body += ',';
  }
  append_lit(body, "\"messages\":");
  body += messages_json;
  if (!overridden("max_tokens")) {
    append_lit(body, ",\"max_tokens\":");
    jsonout::append_uint(body, max_tokens);
  }
  if (ignore_eos && !overridden("ignore_eos")) append_lit(body, ",\"ignore_eos\":true");
  if (!overridden("stream")) body += stream ? ",\"stream\":true" : ",\"stream\":false";
  if (stream && s_.include_usage && !overridden("stream_options"))
    append_lit(body, ",\"stream_options\":{\"include_usage\":true}");
  body += extra;
  body += sampling_fields_;
  body += extra_fields_;
  body += '}';
  return finish(body, request_id);
}

std::shared_ptr<const std::string> RequestEncoder::encode_pooling(const std::vector<std::string>& inputs,
                                                                  std::string_view query,
                                                                  std::optional<std::uint64_t> request_id,
                                                                  std::string_view model) const {
  if (model.empty()) model = s_.model;
  std::size_t size = 128 + query.size() + extra_fields_.size();
  for (const auto& in : inputs) size += in.size() + 8;
  std::string body;
  body.reserve(size);
  body += '{';
  if (!overridden("model")) {
    append_lit(body, "\"model\":");
    jsonout::append_string(body, model);
    body += ',';
  }
  auto list = [&](const char* name) {
    body += '"';
    body += name;
    append_lit(body, "\":[");
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (i) body += ',';
      jsonout::append_string(body, inputs[i]);
    }
    body += ']';
  };
  if (s_.api == Api::kRerank) {
    append_lit(body, "\"query\":");
    jsonout::append_string(body, query);
    body += ',';
    list("documents");
  } else {
    if (inputs.size() == 1) {
      append_lit(body, "\"input\":");
      jsonout::append_string(body, inputs.front());
    } else {
      list("input");
    }
    if (!overridden("encoding_format")) append_lit(body, ",\"encoding_format\":\"float\"");
  }
  body += extra_fields_;
  body += '}';
  return finish(body, request_id);
}

std::shared_ptr<const std::string> RequestEncoder::encode_transcription(
    std::string_view wav, std::optional<std::uint64_t> request_id, std::string_view model) const {
  if (model.empty()) model = s_.model;
  std::vector<net::FormPart> parts;
  parts.reserve(8 + form_fields_.size());
  parts.push_back({"file", wav, "audio.wav", "audio/wav"});
  if (!overridden("model")) parts.push_back({"model", model});
  if (!overridden("response_format")) parts.push_back({"response_format", s_.response_format});
  if (!overridden("stream")) parts.push_back({"stream", s_.stream ? "true" : "false"});
  if (s_.stream && s_.include_usage && !overridden("stream_include_usage"))
    parts.push_back({"stream_include_usage", "true"});
  if (!s_.language.empty() && !overridden("language")) parts.push_back({"language", s_.language});
  for (const auto& [name, value] : form_fields_) parts.push_back({name, value});
  const std::string boundary =
      net::multipart_boundary(parts, hash_combine64(0x7472616e73637269ULL, request_id.value_or(0)));
  std::string body = net::multipart_body(parts, boundary);
  return finish(body, request_id, net::multipart_content_type(boundary));
}

std::shared_ptr<const std::string> RequestEncoder::finish(std::string& body,
                                                          std::optional<std::uint64_t> request_id,
                                                          std::string_view content_type) const {
  auto out = std::make_shared<std::string>();
  // The head, the lines added here (each name, its value, CRLF) and the body.
  out->reserve(head_.size() + content_type.size() + body.size() + 96);
  *out += head_;
  if (!content_type.empty()) {
    append_lit(*out, "Content-Type: ");
    *out += content_type;
    append_lit(*out, "\r\n");
  }
  if (request_id && s_.send_request_id) {
    append_lit(*out, "X-Request-Id: ");
    jsonout::append_uint(*out, *request_id);
    append_lit(*out, "\r\n");
  }
  append_lit(*out, "Content-Length: ");
  jsonout::append_uint(*out, body.size());
  append_lit(*out, "\r\n\r\n");
  *out += body;
  return out;
}

void ResponseCollector::init(RequestRecord&& record, bool stream, bool keep_text, ChunkParser* parser,
                             Done done) {
  record_ = std::move(record);
  stream_ = stream;
  keep_text_ = keep_text;
  collect_calls_ = false;
  calls_ = ToolCallAssembler();
  parser_ = parser;
  done_ = std::move(done);
  if (parser_ && parser_->logprobs_on()) record_.logprobs.emplace();  // n = 0 until some arrive
  decoder_.reset();
  frame_.reset();
  event_chars_.clear();
  event_reasoning_chars_.clear();
  usage_reasoning_ = -1;
  saw_reasoning_ = false;
  cancel_on_send_ = false;
  cancel_after_events_ = 0;
  cancel_fired_ = false;
  pooling_api_ = Api::kCompletions;
  pooling_inputs_ = pooling_results_ = 0;
  transcription_ = false;
  audio_seconds_ = 0;
  response_format_.clear();
  dropped_reasoning_chars_ = 0;
  body_.clear();
  text_.clear();
  finish_reason_.clear();
  saw_done_ = false;
  failed_ = false;
  usage_completion_ = -1;
  dropped_chars_ = 0;
  dropped_gaps_.reset();
  content_type_.clear();
  stream_head_.clear();
  counted_tokens_ = 0;
  spilled_ = false;
  spill_.clear();
}

void ResponseCollector::keep_text(std::string_view piece) {
  const std::size_t room = kTextCap - std::min(kTextCap, text_.size());
  if (!spilled_ && piece.size() <= room) {
    text_ += piece;
    return;
  }
  // Past the cap: text for a later turn stops growing; text kept for counting
  // is counted kTextCap bytes at a time (text_ once, then spill_).
  if (counter_) {
    if (!spilled_) {
      counted_tokens_ += counter_->count(text_, false);
      spilled_ = true;
    }
    spill_ += piece;
    while (spill_.size() >= kTextCap) {
      counted_tokens_ += counter_->count(std::string_view(spill_).substr(0, kTextCap), false);
      spill_.erase(0, kTextCap);
    }
  }
  if (keep_text_)
    text_.append(piece.substr(0, room));
  else
    text_.clear();
}

void ResponseCollector::on_sent(Nanos t) {
  record_.t_send = t;
  if (cancel_on_send_) cancel_now();
}

void ResponseCollector::cancel_now() {
  if (cancel_fired_ || !canceller_) return;
  cancel_fired_ = true;
  canceller_(canceller_ctx_, this);
}

void ResponseCollector::on_headers(int status, Nanos t) {
  record_.http_status = status;
  record_.t_headers = t;
}

void ResponseCollector::fail(Outcome o, std::string detail) {
  if (failed_) return;
  failed_ = true;
  record_.outcome = o;
  record_.detail = std::move(detail);
}

void ResponseCollector::on_body(std::string_view data, Nanos t) {
  if (record_.http_status != 200 || !stream_) {
    const std::size_t cap = record_.http_status == 200 ? kBodyCap : kErrorBodyCap;
    if (body_.size() < cap) body_.append(data.substr(0, cap - body_.size()));
  } else if (!failed_ || record_.outcome != Outcome::kProtocolError) {  // else the stream is already broken
    if (stream_head_.size() < 256) stream_head_.append(data.substr(0, 256 - stream_head_.size()));
    const bool ok = decoder_.feed(
        data, t,
        [](void* self, const net::SseEvent& e) { static_cast<ResponseCollector*>(self)->on_event(e); }, this);
    if (!ok) fail(Outcome::kProtocolError, "SSE: " + decoder_.error());
  }
  if (tick_) tick_(tick_ctx_);
}

// The message of an error event's JSON ({"message": ...}, {"error": {"message":
// ...}} or {"error": "..."}), else the text itself.
static std::string error_message(std::string_view text) {
  if (json_too_deep_at(text) != std::string_view::npos) return std::string(text);
  try {
    const auto j = nlohmann::json::parse(text);
    const nlohmann::json* e = &j;
    if (j.is_object() && j.contains("error")) e = &j["error"];
    if (e->is_string()) return e->get<std::string>();
    if (e->is_object() && e->contains("message") && (*e)["message"].is_string()) {
      std::string m = (*e)["message"].get<std::string>();
      if (e->contains("code") && (*e)["code"].is_number_integer())
        m = fmt::format("{} (code {})", m, (*e)["code"].get<std::int64_t>());
      return m;
    }
  } catch (const std::exception&) {
  }
  return std::string(text);
}

static_assert(net::SseDecoder::kDataPadding >= simdjson::SIMDJSON_PADDING,
              "events are parsed where the decoder keeps them");

void ResponseCollector::on_event(const net::SseEvent& e) {
  // An error inside a 200 stream: llama.cpp's "error: {...}" field, or an
  // "event: error" event; the request failed whatever follows ([DONE]).
  if (!e.error.empty())
    return fail(Outcome::kHttpError, "error event in the stream: " + excerpt(error_message(e.error)));
  if (e.event == "error")
    return fail(Outcome::kHttpError, "error event in the stream: " + excerpt(error_message(e.data)));
  if (e.data == "[DONE]") {
    saw_done_ = true;
    return;
  }
  if (saw_done_) return fail(Outcome::kProtocolError, "SSE: event after [DONE]");
  const ChunkInfo& c = parser_->parse(e.data, e.data.capacity() - e.data.size(), &frame_);
  if (!c.valid) return fail(Outcome::kProtocolError, "malformed stream event: " + excerpt(e.data));
  if (record_.response_id.empty() && !c.id.empty()) record_.response_id = c.id;
  if (c.is_error) return fail(Outcome::kHttpError, "error event in the stream: " + excerpt(c.error_message));
  if (record_.logprobs)
    for (const double lp : c.logprobs) record_.logprobs->add(lp);
  if (c.has_output) {
    if (record_.t_first_token < 0) record_.t_first_token = e.t_first_byte;
    if (c.has_answer && record_.t_first_answer < 0) record_.t_first_answer = e.t_first_byte;
    saw_reasoning_ |= c.has_reasoning;
    const auto chars = static_cast<std::uint32_t>(std::max<std::size_t>(1, c.text.size()));
    // An event of reasoning alone whose text is empty still counts whole.
    const std::uint32_t reasoning_chars = c.has_answer ? c.reasoning_bytes : chars;
    if (record_.event_times.size() < max_events_) {
      record_.event_times.push_back(e.t_first_byte);
      event_chars_.push_back(chars);
      event_reasoning_chars_.push_back(c.has_reasoning ? reasoning_chars : 0);
    } else {  // past the cap: counted, its gap histogrammed
      dropped_reasoning_chars_ += c.has_reasoning ? reasoning_chars : 0;
      if (!dropped_gaps_) dropped_gaps_ = std::make_shared<LogLinearHistogram>();
      dropped_gaps_->record(
          static_cast<std::uint64_t>(std::max<Nanos>(0, e.t_first_byte - record_.t_last_token)));
      ++record_.events_dropped;
      dropped_chars_ += chars;
    }
    record_.t_last_token = e.t_first_byte;
    if (keep_text_ || counter_) keep_text(c.text);
    if (cancel_after_events_ > 0 && output_events() >= cancel_after_events_) cancel_now();
  }
  if (!c.finish_reason.empty()) finish_reason_ = c.finish_reason;
  if (collect_calls_)
    for (std::size_t k = 0; k < c.tool_calls.size(); ++k) calls_.add(c.tool_calls[k], k);
  if (c.usage) take_usage(*c.usage);
  if (c.timings) take_timings(*c.timings);
}

void ResponseCollector::take_usage(const ChunkUsage& u) {
  usage_completion_ = u.completion_tokens;
  usage_reasoning_ = u.reasoning_tokens;
  record_.prompt_tokens = u.prompt_tokens;
  record_.cached_tokens = u.cached_tokens;
}

void ResponseCollector::take_timings(const ChunkTimings& t) {
  record_.server_prompt_ms = t.prompt_ms;
  record_.server_prompt_evaluated = t.prompt_n;
  record_.server_decode_ms = t.predicted_ms;
}

void ResponseCollector::split_tokens() {
  const std::size_t kept = record_.event_times.size();
  const std::uint64_t dropped = record_.events_dropped;
  record_.event_tokens.assign(kept, 1);
  record_.dropped_event_tokens = dropped;
  record_.dropped_gaps_ns = dropped_gaps_;
  const std::uint64_t events = kept + dropped;
  if (events == 0 || usage_completion_ <= static_cast<std::int64_t>(events)) return;
  // Spread N tokens over E events by text length: each event at least one,
  // the rest in proportion, remainders to the largest fractions. The events
  // past the cap share one slot (the last), by their text length together.
  const std::uint64_t extra = static_cast<std::uint64_t>(usage_completion_) - events;
  const std::size_t slots = kept + (dropped > 0 ? 1 : 0);
  auto chars_of = [&](std::size_t i) {
    return i < kept ? static_cast<double>(event_chars_[i]) : static_cast<double>(dropped_chars_);
  };
  double total_chars = 0;
  for (std::size_t i = 0; i < slots; ++i) total_chars += chars_of(i);
  auto add = [&](std::size_t i, std::uint64_t n) {
    if (i < kept)
      record_.event_tokens[i] += static_cast<std::uint32_t>(n);
    else
      record_.dropped_event_tokens += n;
  };
  std::vector<std::pair<double, std::size_t>> fractions(slots);
  std::uint64_t given = 0;
  for (std::size_t i = 0; i < slots; ++i) {
    const double share = static_cast<double>(extra) * chars_of(i) / total_chars;
    const auto whole = static_cast<std::uint64_t>(share);
    add(i, whole);
    given += whole;
    fractions[i] = {share - static_cast<double>(whole), i};
  }
  std::sort(fractions.begin(), fractions.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (std::size_t j = 0; given < extra && j < slots; ++j, ++given) add(fractions[j].second, 1);
}

void ResponseCollector::count_reasoning() {
  // The server's count when it is one; OpenAI reports 0 for every model
  // without reasoning, which is no reasoning model (a 0 beside reasoning text
  // seen is not believed: the client's count replaces it).
  if (usage_reasoning_ > 0) {
    record_.reasoning_tokens = usage_reasoning_;
    return;
  }
  if (!saw_reasoning_) return;
  // Each event's tokens in proportion to its reasoning text: the events of
  // reasoning alone count whole.
  double tokens = 0;
  for (std::size_t i = 0; i < event_reasoning_chars_.size() && i < record_.event_tokens.size(); ++i)
    if (event_reasoning_chars_[i] > 0)
      tokens += static_cast<double>(record_.event_tokens[i]) * event_reasoning_chars_[i] / event_chars_[i];
  if (record_.events_dropped > 0 && dropped_chars_ > 0)
    tokens += static_cast<double>(record_.dropped_event_tokens) *
              static_cast<double>(dropped_reasoning_chars_) / static_cast<double>(dropped_chars_);
  record_.reasoning_tokens = std::llround(tokens);
}

void ResponseCollector::finish_stream() {
  if (failed_) return;
  // A server that answers a streaming request with something else (a JSON
  // object: it ignored "stream"): say what it sent.
  const bool event_stream = content_type_.find("text/event-stream") != std::string::npos;
  if (!event_stream && (decoder_.pending_bytes() > 0 || (!saw_done_ && finish_reason_.empty())))
    return fail(Outcome::kProtocolError,
                fmt::format("the response to a streaming request is not an SSE stream (Content-Type: {}): {}",
                            content_type_.empty() ? "none" : excerpt(content_type_), excerpt(stream_head_)));
  if (decoder_.pending_bytes() > 0) return fail(Outcome::kProtocolError, "stream ended inside an SSE event");
  if (!saw_done_ && finish_reason_.empty())
    return fail(Outcome::kProtocolError, "stream ended without a finish_reason or [DONE]");
  if (record_.event_times.empty() && usage_completion_ > 0)
    return fail(Outcome::kValidationError,
                fmt::format("usage reports {} output tokens but no event carried output", usage_completion_));
}

void ResponseCollector::finish_pooling(Nanos t) {
  const bool rerank = pooling_api_ == Api::kRerank;
  const PoolingInfo p = parser_->parse_pooling(body_, rerank, pooling_inputs_);
  if (!p.valid)
    return fail(Outcome::kProtocolError,
                fmt::format("response is not {} answer ({}): {}", rerank ? "a rerank" : "an embeddings",
                            p.problem, excerpt(body_)));
  if (p.is_error) return fail(Outcome::kHttpError, "error object: " + excerpt(p.error_message));
  record_.response_id = p.id;
  record_.prompt_tokens = p.prompt_tokens;
  usage_completion_ = 0;
  // Every input answered (rerank: top_n of the documents when a top_n was sent).
  if (p.items != static_cast<std::int64_t>(pooling_results_))
    return fail(
        Outcome::kValidationError,
        fmt::format("{} {} for {} {}{}", p.items, rerank ? "results" : "embeddings", pooling_inputs_,
                    rerank ? "documents" : "inputs",
                    pooling_results_ != pooling_inputs_ ? fmt::format(" (top_n {})", pooling_results_) : ""));
  record_.t_first_token = record_.t_last_token = t;
  record_.event_times.push_back(t);
  event_chars_.push_back(1);
  event_reasoning_chars_.push_back(0);
}

void ResponseCollector::finish_transcription(Nanos t) {
  TranscriptionInfo info;
  if (response_format_ == "text") {  // the body is the transcript
    info.valid = info.has_text = true;
    info.text = body_;
  } else {
    info = parser_->parse_transcription(body_);
  }
  if (!info.valid)
    return fail(Outcome::kProtocolError,
                fmt::format("response is not a transcription answer ({}): {}", info.problem, excerpt(body_)));
  if (info.is_error) return fail(Outcome::kHttpError, "error object: " + excerpt(info.error_message));
  if (!info.has_text)
    return fail(Outcome::kValidationError,
                "the transcription answer has no \"text\" string: " + excerpt(body_));
  record_.response_id = info.id;
  if (info.input_tokens >= 0) record_.prompt_tokens = info.input_tokens;
  if (info.output_tokens >= 0) usage_completion_ = info.output_tokens;
  if (keep_text_ || counter_) keep_text(info.text);
  if (info.audio_seconds >= 0 &&
      std::abs(info.audio_seconds - audio_seconds_) > std::max(1.0, 0.01 * audio_seconds_))
    return fail(Outcome::kValidationError,
                fmt::format("the server reports {:.3f} s of audio where {:.3f} s were sent",
                            info.audio_seconds, audio_seconds_));
  // The whole transcript arrives at once: one event at the end.
  record_.t_first_token = record_.t_last_token = t;
  record_.event_times.push_back(t);
  event_chars_.push_back(
      static_cast<std::uint32_t>(std::clamp<std::size_t>(info.text.size(), 1, UINT32_MAX)));
  event_reasoning_chars_.push_back(0);
}

void ResponseCollector::finish_body(Nanos t) {
  if (body_.size() >= kBodyCap) return fail(Outcome::kProtocolError, "response body over 64 MiB");
  if (pooling_inputs_ > 0) return finish_pooling(t);
  if (transcription_) return finish_transcription(t);
  const ChunkInfo& c = parser_->parse(body_, body_.capacity() - body_.size());
  if (!c.valid)
    return fail(Outcome::kProtocolError, "response is not a completion object: " + excerpt(body_));
  if (c.is_error) return fail(Outcome::kHttpError, "error object: " + excerpt(c.error_message));
  record_.response_id = c.id;
  if (record_.logprobs)
    for (const double lp : c.logprobs) record_.logprobs->add(lp);
  if (!c.finish_reason.empty()) finish_reason_ = c.finish_reason;
  if (collect_calls_)
    for (std::size_t k = 0; k < c.tool_calls.size(); ++k) calls_.add(c.tool_calls[k], k);
  if (c.usage) take_usage(*c.usage);
  if (keep_text_ || counter_) keep_text(c.text);
  if (c.timings) take_timings(*c.timings);
  // Without a stream the whole output arrives at once: one event at the end.
  saw_reasoning_ |= c.has_reasoning;
  if (c.has_output || usage_completion_ > 0) {
    record_.t_first_token = record_.t_last_token = t;
    if (c.has_answer) record_.t_first_answer = t;
    record_.event_times.push_back(t);
    const auto chars = static_cast<std::uint32_t>(std::max<std::size_t>(1, c.text.size()));
    event_chars_.push_back(chars);
    event_reasoning_chars_.push_back(c.has_answer ? c.reasoning_bytes : (c.has_reasoning ? chars : 0));
  }
}

void ResponseCollector::on_complete(net::ExchangeError error, std::string_view message, Nanos t) {
  record_.t_close = t;
  using E = net::ExchangeError;
  switch (error) {
    case E::kNone:
      break;
    case E::kConnect:
    case E::kClosed:
      fail(Outcome::kConnectError, std::string(message));
      break;
    case E::kTimeout:
      fail(Outcome::kTimeout, std::string(message));
      break;
    case E::kProtocol:
      fail(Outcome::kProtocolError, std::string(message));
      break;
    case E::kCancelled:
      if (cancel_fired_) {  // on purpose (--cancel): what arrived is kept
        record_.cancel_planned = true;
        fail(Outcome::kCancelled,
             fmt::format("cancelled on purpose (--cancel) after {} output events", output_events()));
      } else {
        fail(Outcome::kCancelled, "stopped by the user before the response ended");
      }
      break;
  }
  if (!failed_ && record_.http_status != 200)
    fail(Outcome::kHttpError, fmt::format("HTTP {}: {}", record_.http_status, excerpt(body_)));
  if (!failed_) {
    if (stream_)
      finish_stream();
    else
      finish_body(t);
  }
  // Counts are recorded whatever the outcome: a broken stream still shows
  // what arrived before it broke.
  record_.output_tokens = usage_completion_;
  if (usage_completion_ < 0 && counter_ && !failed_) {  // no usage from the server: count the text
    record_.output_tokens =
        static_cast<std::int64_t>(counted_tokens_ + counter_->count(spilled_ ? spill_ : text_, false));
    record_.output_tokens_counted_by_client = true;
    usage_completion_ = record_.output_tokens;
  }
  record_.output_tokens_client =
      stream_ ? static_cast<std::int64_t>(record_.event_times.size() + record_.events_dropped) : -1;
  split_tokens();
  count_reasoning();
  // Moved out first: the callback may hand this collector to the next request
  // (init() replaces done_) before it returns.
  void (*tick)(void*) = tick_;
  void* tick_ctx = tick_ctx_;
  if (Done done = std::move(done_)) done(*this);
  if (tick) tick(tick_ctx);  // copied first: the callback may have handed this collector on
}

}  // namespace tokenscope::bench
