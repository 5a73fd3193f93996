#include "bench/chunk_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tokenscope::bench {

namespace dom = simdjson::dom;

namespace {

// An object key against a literal: a length check and a compare of known
// size, inlined (a key walk compares every key of an event with several).
template <std::size_t N>
inline bool is_key(std::string_view k, const char (&literal)[N]) {
  return k.size() == N - 1 && std::memcmp(k.data(), literal, N - 1) == 0;
}

// Appends a string element's value; true when it was a non-empty string.
bool take_string(dom::element v, std::string& out) {
  std::string_view s;
  if (v.get_string().get(s) != simdjson::SUCCESS) return false;
  out.append(s);
  return !s.empty();
}

std::int64_t int_or(dom::object o, std::string_view key) {
  std::int64_t v = -1;
  if (o[key].get_int64().get(v) != simdjson::SUCCESS) return -1;
  return v;
}

// An "error" value's message: {"message": ...} or the string itself; "" otherwise.
std::string error_message_of(dom::element error) {
  std::string_view msg;
  dom::object err;
  if (error.get_object().get(err) == simdjson::SUCCESS &&
      err["message"].get_string().get(msg) == simdjson::SUCCESS)
    return std::string(msg);
  if (error.get_string().get(msg) == simdjson::SUCCESS) return std::string(msg);
  return {};
}

// The entries of a tool_calls array (chunk_parser.h ToolCallPart); entries
// that are not objects are passed over, at most kMaxCalls of them.
void take_tool_calls(dom::array calls, std::vector<ToolCallPart>& out) {
  for (dom::element e : calls) {
    if (out.size() >= ToolCallAssembler::kMaxCalls) return;
    dom::object call;
    if (e.get_object().get(call) != simdjson::SUCCESS) continue;
    ToolCallPart part;
    part.index = int_or(call, "index");
    std::string_view text;
    if (call["id"].get_string().get(text) == simdjson::SUCCESS) part.id = std::string(text);
    dom::object function;
    if (call["function"].get_object().get(function) == simdjson::SUCCESS) {
      if (function["name"].get_string().get(text) == simdjson::SUCCESS) part.name = std::string(text);
      dom::element args;
      if (function["arguments"].get(args) == simdjson::SUCCESS) {
        if (args.get_string().get(text) == simdjson::SUCCESS)
          part.arguments = std::string(text);
        else if (args.is_object())
          part.arguments = simdjson::minify(args);  // a server that sends the object itself
      }
    }
    out.push_back(std::move(part));
  }
}

// A number element as a double (integers too: a logprob of 0 may be written "0").
template <class Element>  // dom::element or a lookup's simdjson_result
bool number_of(Element v, double& out) {
  if (v.get_double().get(out) == simdjson::SUCCESS) return true;
  std::int64_t i = 0;
  if (v.get_int64().get(i) != simdjson::SUCCESS) return false;
  out = static_cast<double>(i);
  return true;
}

// Appends the logprobs of a choice's "logprobs" value (chunk_parser.h lists
// the forms); anything else (null, other shapes) adds none.
void take_logprobs(dom::element v, std::vector<double>& out) {
  dom::object lp;
  if (v.get_object().get(lp) != simdjson::SUCCESS) return;
  dom::array list;
  if (lp["token_logprobs"].get_array().get(list) == simdjson::SUCCESS) {
    for (dom::element e : list) {
      double x = 0;
      if (number_of(e, x)) out.push_back(x);
    }
    return;
  }
  if (lp["content"].get_array().get(list) != simdjson::SUCCESS) return;
  for (dom::element e : list) {
    dom::object token;
    if (e.get_object().get(token) != simdjson::SUCCESS) continue;
    double x = 0;
    if (number_of(token["logprob"], x)) {
      out.push_back(x);
    } else if (number_of(token["prob"], x) && x >= 0) {
      out.push_back(std::log(x));  // log 0 = -inf: the underflow bin
    }
  }
}

// The Responses API's response object (a whole body, or the one inside
// response.completed / incomplete / failed): id, the status as the finish
// reason (once it is no longer in progress), usage, a failure's message, and
// with take_output the text of its output items.
void take_response_object(dom::object resp, ChunkInfo& info, bool take_output) {
  std::string_view s;
  if (resp["id"].get_string().get(s) == simdjson::SUCCESS) info.id = std::string(s);
  if (resp["status"].get_string().get(s) == simdjson::SUCCESS && s != "in_progress" && s != "queued")
    info.finish_reason = std::string(s);
  dom::object u;
  if (resp["usage"].get_object().get(u) == simdjson::SUCCESS) {
    ChunkUsage cu;
    cu.prompt_tokens = int_or(u, "input_tokens");
    cu.completion_tokens = int_or(u, "output_tokens");
    dom::object details;
    if (u["input_tokens_details"].get_object().get(details) == simdjson::SUCCESS)
      cu.cached_tokens = int_or(details, "cached_tokens");
    if (u["output_tokens_details"].get_object().get(details) == simdjson::SUCCESS)
      cu.reasoning_tokens = int_or(details, "reasoning_tokens");
    info.usage = cu;
  }
  dom::object err;
  if (resp["error"].get_object().get(err) == simdjson::SUCCESS) {
    info.is_error = true;
    if (err["message"].get_string().get(s) == simdjson::SUCCESS) info.error_message = std::string(s);
  }
  dom::array output;
  if (!take_output || resp["output"].get_array().get(output) != simdjson::SUCCESS) return;
  for (dom::element item_el : output) {
    dom::object item;
    if (item_el.get_object().get(item) != simdjson::SUCCESS) continue;
    std::string_view type;
    if (item["type"].get_string().get(type) != simdjson::SUCCESS) continue;
    if (type == "function_call") {
      info.has_answer = true;
      continue;
    }
    const bool reasoning = type == "reasoning";
    if (!reasoning && type != "message") continue;
    for (const char* list : {"content", "summary"}) {
      dom::array parts;
      if (item[list].get_array().get(parts) != simdjson::SUCCESS) continue;
      for (dom::element part_el : parts) {
        dom::object part;
        if (part_el.get_object().get(part) != simdjson::SUCCESS) continue;
        dom::element text;
        if (part["text"].get(text) != simdjson::SUCCESS) continue;
        const std::size_t before = info.text.size();
        const bool some = take_string(text, info.text);
        if (reasoning) {
          info.has_reasoning |= some;
          info.reasoning_bytes += static_cast<std::uint32_t>(
              std::min<std::size_t>(info.text.size() - before, UINT32_MAX - info.reasoning_bytes));
        } else {
          info.has_answer |= some;
        }
      }
    }
  }
}

// One streamed event of the Responses API (its "type" is "response.*" or
// "error"): output text deltas are answer, reasoning deltas reasoning; the
// final event's response object ends the stream with its status and usage.
void take_responses_event(std::string_view type, dom::object root, ChunkInfo& info) {
  info.valid = true;
  std::string_view s;
  if (type == "error") {
    info.is_error = true;
    if (root["message"].get_string().get(s) == simdjson::SUCCESS) info.error_message = std::string(s);
    return;
  }
  const bool answer = type == "response.output_text.delta" || type == "response.refusal.delta" ||
                      type == "response.function_call_arguments.delta";
  const bool reasoning = type == "response.reasoning_text.delta" ||
                         type == "response.reasoning_summary_text.delta" ||
                         type == "response.reasoning.delta";
  if (answer || reasoning) {
    dom::element delta;
    if (root["delta"].get(delta) != simdjson::SUCCESS) return;
    const std::size_t before = info.text.size();
    const bool some = take_string(delta, info.text);
    if (reasoning) {
      info.has_reasoning |= some;
      info.reasoning_bytes =
          static_cast<std::uint32_t>(std::min<std::size_t>(info.text.size() - before, UINT32_MAX));
    } else {
      info.has_answer |= some;
    }
    info.has_output = info.has_answer || info.has_reasoning;
    return;
  }
  dom::object resp;
  if (root["response"].get_object().get(resp) != simdjson::SUCCESS) return;
  const bool end = type == "response.completed" || type == "response.incomplete" || type == "response.failed";
  if (end || type == "response.created" || type == "response.in_progress") {
    take_response_object(resp, info, false);
    if (type == "response.failed" && !info.is_error) {
      info.is_error = true;
      info.error_message = "response.failed";
    }
    if (end && info.finish_reason.empty()) info.finish_reason = std::string(type.substr(9));
  }
}

// A transcription's usage: OpenAI's "tokens" type (input_tokens,
// output_tokens), vLLM's prompt_tokens / completion_tokens; a "duration"
// type's seconds.
void take_transcription_usage(dom::object u, std::int64_t& input, std::int64_t& output, double& seconds) {
  input = int_or(u, "input_tokens");
  if (input < 0) input = int_or(u, "prompt_tokens");
  output = int_or(u, "output_tokens");
  if (output < 0) output = int_or(u, "completion_tokens");
  std::string_view type;
  double v = 0;
  if (u["type"].get_string().get(type) == simdjson::SUCCESS && type == "duration" &&
      number_of(u["seconds"], v))
    seconds = v;
}

// OpenAI's streamed transcription events: text deltas are answer; "done" ends the stream with its usage.
void take_transcript_event(std::string_view type, dom::object root, ChunkInfo& info) {
  info.valid = true;
  if (type == "transcript.text.delta") {
    dom::element delta;
    if (root["delta"].get(delta) == simdjson::SUCCESS) info.has_answer = take_string(delta, info.text);
    info.has_output = info.has_answer;
  } else if (type == "transcript.text.done") {
    info.finish_reason = "stop";
    dom::object u;
    if (root["usage"].get_object().get(u) == simdjson::SUCCESS) {
      ChunkUsage cu;
      double seconds = -1;
      take_transcription_usage(u, cu.prompt_tokens, cu.completion_tokens, seconds);
      info.usage = cu;
    }
  }
}

}  // namespace

void ChunkInfo::reset() {
  valid = is_error = false;
  error_message.clear();
  has_output = has_reasoning = has_answer = role_only = false;
  text.clear();
  reasoning_bytes = 0;
  choices = 0;
  finish_reason.clear();
  id.clear();
  usage.reset();
  timings.reset();
  tool_calls.clear();
  logprobs = {};
}

const ChunkInfo& ChunkParser::parse(std::string_view data, std::size_t padding, ChunkFrame* frame) {
  ChunkInfo& info = info_;
  info.reset();
  logprobs_.clear();
  bool framed = false;  // the event is the frame around a text the DOM path must read
  if (frame && frame->active_) {
    if (read_framed(data, *frame, info, framed)) {
      ++frame->hits_;
      frame->hit_since_learned_ = true;
      return info;
    }
    info.reset();
  }
  parse_dom(data, padding, info);
  if (frame && !framed) learn_frame(data, *frame, info);
  return info;
}

namespace {

// A JSON string's body (between its quotes) unescaped into out, exactly as
// the DOM parser reads it: false for what it would refuse (an unescaped
// quote or control character, an unknown escape, invalid UTF-8) and for
// \u escapes (left to it).
bool unescape_plain(std::string_view raw, std::string& out) {
  bool ascii = true;
  std::size_t from = 0;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const auto c = static_cast<unsigned char>(raw[i]);
    if (c == '"' || c < 0x20) return false;
    if (c >= 0x80) ascii = false;
    if (c != '\\') continue;
    out.append(raw.substr(from, i - from));
    if (++i == raw.size()) return false;
    switch (raw[i]) {
      case '"':
      case '\\':
      case '/':
        out += raw[i];
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      default:
        return false;
    }
    from = i + 1;
  }
  out.append(raw.substr(from));
  return ascii || simdjson::validate_utf8(raw.data(), raw.size());
}

// Whether the text can stand in an event as it is (no byte JSON must escape).
bool plain_text(std::string_view text) {
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\' || c < 0x20) return false;
  }
  return true;
}

constexpr std::string_view kFrameMarkers[2] = {"tokenscope frame probe", "a second marker"};

}  // namespace

bool ChunkParser::read_framed(std::string_view data, const ChunkFrame& frame, ChunkInfo& info, bool& framed) {
  const std::string& prefix = frame.prefix_;
  const std::string& suffix = frame.suffix_;
  if (data.size() < prefix.size() + suffix.size()) return false;
  if (std::memcmp(data.data(), prefix.data(), prefix.size()) != 0 ||
      std::memcmp(data.data() + data.size() - suffix.size(), suffix.data(), suffix.size()) != 0)
    return false;
  if (data.size() == prefix.size() + suffix.size()) {  // an empty text: no output, the DOM path's answer
    framed = true;
    return false;
  }
  const std::string_view raw = data.substr(prefix.size(), data.size() - prefix.size() - suffix.size());
  info = frame.base_;
  info.text.clear();
  if (!unescape_plain(raw, info.text)) {  // the frame stays: the next event may fit it
    framed = true;
    return false;
  }
  if (info.has_reasoning)  // a frame of reasoning: all its text is
    info.reasoning_bytes = static_cast<std::uint32_t>(std::min<std::size_t>(info.text.size(), UINT32_MAX));
  info.logprobs = logprobs_;
  return true;
}

void ChunkParser::learn_frame(std::string_view data, ChunkFrame& frame, const ChunkInfo& info) {
  // A frame that read nothing before the stream changed it: after two,
  // this stream's events differ in more than their text (a server that
  // sends per-event timings or counters): no more learning.
  if (frame.active_ && !frame.hit_since_learned_) ++frame.wasted_;
  if (frame.wasted_ >= 2) return;
  frame.active_ = false;
  if (!info.valid || info.is_error || !info.has_output || !info.tool_calls.empty() || !logprobs_.empty() ||
      info.text.empty() || info.has_answer == info.has_reasoning ||
      info.reasoning_bytes != (info.has_reasoning ? info.text.size() : 0) || !plain_text(info.text))
    return;
  // The text, in quotes, once in the event: the bytes around it are the frame.
  std::string& needle = frame.scratch_;
  needle.assign(1, '"');
  needle += info.text;
  needle += '"';
  const std::size_t at = data.find(needle);
  if (at == std::string_view::npos || data.find(needle, at + 1) != std::string_view::npos) return;
  const std::string_view prefix = data.substr(0, at + 1);
  const std::string_view suffix = data.substr(at + 1 + info.text.size());
  // The frame with a marker for a text must read as the event with the
  // marker as its text, for two markers (so that the text is where it was
  // found, and only there: an event may hold one marker already, escaped,
  // or the place found may be a key whose renaming brings another value).
  // The answer of the second probe is the frame's.
  ChunkInfo& probe = frame.base_;
  for (const std::string_view marker : kFrameMarkers) {
    std::string& probe_text = frame.scratch_;
    probe_text.assign(prefix);
    probe_text += marker;
    probe_text += suffix;
    const std::size_t probe_size = probe_text.size();
    probe_text.append(simdjson::SIMDJSON_PADDING, '\0');
    probe.reset();
    parse_dom(std::string_view(probe_text.data(), probe_size), simdjson::SIMDJSON_PADDING, probe);
    const bool same = probe.valid && probe.text == marker && !probe.is_error &&
                      probe.has_output == info.has_output && probe.has_answer == info.has_answer &&
                      probe.has_reasoning == info.has_reasoning && probe.role_only == info.role_only &&
                      probe.choices == info.choices && probe.finish_reason == info.finish_reason &&
                      probe.id == info.id && probe.usage.has_value() == info.usage.has_value() &&
                      probe.timings.has_value() == info.timings.has_value() && probe.tool_calls.empty() &&
                      probe.reasoning_bytes == (probe.has_reasoning ? marker.size() : 0) && logprobs_.empty();
    if (!same) return;
    if (probe.usage) {
      const ChunkUsage &a = *probe.usage, &b = *info.usage;
      if (a.prompt_tokens != b.prompt_tokens || a.completion_tokens != b.completion_tokens ||
          a.cached_tokens != b.cached_tokens || a.reasoning_tokens != b.reasoning_tokens)
        return;
    }
    if (probe.timings) {
      const ChunkTimings &a = *probe.timings, &b = *info.timings;
      if (a.prompt_ms != b.prompt_ms || a.prompt_n != b.prompt_n || a.predicted_ms != b.predicted_ms ||
          a.predicted_n != b.predicted_n)
        return;
    }
  }
  frame.prefix_.assign(prefix);
  frame.suffix_.assign(suffix);
  frame.active_ = true;
  frame.hit_since_learned_ = false;
  ++frame.learned_;
}

// Long: the one pass over a streamed chunk, field by field, that keeps the
// client fast (no DOM); splitting it would add calls on the hot path.
void ChunkParser::parse_dom(std::string_view data, std::size_t padding, ChunkInfo& info) {
  const char* json = data.data();
  if (padding < simdjson::SIMDJSON_PADDING) {
    buffer_.assign(data);
    buffer_.append(simdjson::SIMDJSON_PADDING, '\0');
    json = buffer_.data();
  }
  dom::element doc;
  if (parser_.parse(json, data.size(), false).get(doc) != simdjson::SUCCESS) return;
  dom::object root;
  if (doc.get_object().get(root) != simdjson::SUCCESS) return;

  // One pass over each object (a lookup by key is a linear scan, and an
  // event is looked up for a dozen keys); the first of duplicate keys wins,
  // as with a lookup.
  dom::element error, id, usage, timings, choices_el, type_el, object_el;
  bool has_error = false, has_id = false, has_usage = false, has_timings = false, has_choices = false,
       has_type = false, has_object = false;
  for (dom::key_value_pair kv : root) {
    const std::string_view k = kv.key;
    if (is_key(k, "type")) {
      if (!has_type) type_el = kv.value, has_type = true;
    } else if (is_key(k, "object")) {
      if (!has_object) object_el = kv.value, has_object = true;
    } else if (is_key(k, "choices")) {
      if (!has_choices) choices_el = kv.value, has_choices = true;
    } else if (is_key(k, "id")) {
      if (!has_id) id = kv.value, has_id = true;
    } else if (is_key(k, "usage")) {
      if (!has_usage) usage = kv.value, has_usage = true;
    } else if (is_key(k, "error")) {
      if (!has_error) error = kv.value, has_error = true;
    } else if (is_key(k, "timings")) {
      if (!has_timings) timings = kv.value, has_timings = true;
    }
  }

  // The Responses API: a streamed event, or a whole response object.
  std::string_view type;
  if (has_type && type_el.get_string().get(type) == simdjson::SUCCESS &&
      (type.starts_with("response.") || type == "error")) {
    take_responses_event(type, root, info);
    info.logprobs = logprobs_;
    return;
  }
  if (has_type && type_el.get_string().get(type) == simdjson::SUCCESS && type.starts_with("transcript.")) {
    take_transcript_event(type, root, info);
    info.logprobs = logprobs_;
    return;
  }
  if (has_object && object_el.get_string().get(type) == simdjson::SUCCESS && type == "response") {
    take_response_object(root, info, true);
    info.has_output = info.has_reasoning || info.has_answer;
    info.valid = true;
    info.logprobs = logprobs_;
    return;
  }

  if (has_error) {
    info.is_error = true;
    std::string_view msg;
    dom::object err;
    if (error.get_object().get(err) == simdjson::SUCCESS) {
      if (err["message"].get_string().get(msg) == simdjson::SUCCESS) info.error_message = std::string(msg);
    } else if (error.get_string().get(msg) == simdjson::SUCCESS) {
      info.error_message = std::string(msg);
    }
  }

  std::string_view id_text;
  if (has_id && id.get_string().get(id_text) == simdjson::SUCCESS) info.id = std::string(id_text);

  dom::object u;
  if (has_usage && usage.get_object().get(u) == simdjson::SUCCESS) {  // "usage": null is no usage
    // One pass over its members; the first of duplicate keys wins, as with a lookup.
    dom::element prompt, completion, prompt_details, completion_details;
    bool has_prompt = false, has_completion = false, has_prompt_details = false,
         has_completion_details = false;
    for (dom::key_value_pair kv : u) {
      const std::string_view k = kv.key;
      if (is_key(k, "prompt_tokens")) {
        if (!has_prompt) prompt = kv.value, has_prompt = true;
      } else if (is_key(k, "completion_tokens")) {
        if (!has_completion) completion = kv.value, has_completion = true;
      } else if (is_key(k, "prompt_tokens_details")) {
        if (!has_prompt_details) prompt_details = kv.value, has_prompt_details = true;
      } else if (is_key(k, "completion_tokens_details")) {
        if (!has_completion_details) completion_details = kv.value, has_completion_details = true;
      }
    }
    ChunkUsage cu;
    std::int64_t v = 0;
    if (has_prompt && prompt.get_int64().get(v) == simdjson::SUCCESS) cu.prompt_tokens = v;
    if (has_completion && completion.get_int64().get(v) == simdjson::SUCCESS) cu.completion_tokens = v;
    dom::object details;
    if (has_prompt_details && prompt_details.get_object().get(details) == simdjson::SUCCESS)
      cu.cached_tokens = int_or(details, "cached_tokens");
    if (has_completion_details && completion_details.get_object().get(details) == simdjson::SUCCESS)
      cu.reasoning_tokens = int_or(details, "reasoning_tokens");
    info.usage = cu;
  }

  dom::object tm;
  if (has_timings && timings.get_object().get(tm) == simdjson::SUCCESS) {
    ChunkTimings t;
    double v = 0;
    if (tm["prompt_ms"].get_double().get(v) == simdjson::SUCCESS) t.prompt_ms = v;
    if (tm["predicted_ms"].get_double().get(v) == simdjson::SUCCESS) t.predicted_ms = v;
    t.prompt_n = int_or(tm, "prompt_n");
    t.predicted_n = int_or(tm, "predicted_n");
    info.timings = t;
  }

  dom::array choices;
  const bool saw_choices = has_choices && choices_el.get_array().get(choices) == simdjson::SUCCESS;
  if (saw_choices) {
    for (dom::element element : choices) {
      dom::object choice;
      if (element.get_object().get(choice) != simdjson::SUCCESS) {
        info.reset();
        return;
      }
      ++info.choices;
      dom::element text, finish, delta_el[2], logprobs;
      bool has_text = false, has_finish = false, has_delta[2] = {false, false}, has_logprobs = false;
      for (dom::key_value_pair kv : choice) {
        const std::string_view k = kv.key;
        if (is_key(k, "delta")) {
          if (!has_delta[0]) delta_el[0] = kv.value, has_delta[0] = true;
        } else if (is_key(k, "text")) {
          if (!has_text) text = kv.value, has_text = true;
        } else if (is_key(k, "finish_reason")) {
          if (!has_finish) finish = kv.value, has_finish = true;
        } else if (is_key(k, "message")) {
          if (!has_delta[1]) delta_el[1] = kv.value, has_delta[1] = true;
        } else if (is_key(k, "logprobs") && logprobs_on_) {
          if (!has_logprobs) logprobs = kv.value, has_logprobs = true;
        }
      }
      if (has_logprobs) take_logprobs(logprobs, logprobs_);
      if (has_text) info.has_answer |= take_string(text, info.text);
      std::string_view finish_text;
      if (has_finish && finish.get_string().get(finish_text) == simdjson::SUCCESS)
        info.finish_reason = std::string(finish_text);
      bool role = false;
      for (int d = 0; d < 2; ++d) {  // "delta", then "message"
        dom::object delta;
        if (!has_delta[d] || delta_el[d].get_object().get(delta) != simdjson::SUCCESS) continue;
        dom::element content, reasoning, calls_el;
        bool has_content = false, has_reasoning = false, has_calls = false;
        for (dom::key_value_pair kv : delta) {
          const std::string_view k = kv.key;
          if (is_key(k, "content")) {
            if (!has_content) content = kv.value, has_content = true;
          } else if (is_key(k, "role")) {
            role = true;
          } else if (is_key(k, "reasoning") || is_key(k, "reasoning_content")) {
            // vLLM renamed reasoning_content to reasoning (and dropped the
            // old name); a server that sends both carries one text twice.
            if (!has_reasoning) reasoning = kv.value, has_reasoning = true;
          } else if (is_key(k, "tool_calls")) {
            if (!has_calls) calls_el = kv.value, has_calls = true;
          }
        }
        if (has_reasoning) {
          const std::size_t before = info.text.size();
          info.has_reasoning |= take_string(reasoning, info.text);
          info.reasoning_bytes += static_cast<std::uint32_t>(
              std::min<std::size_t>(info.text.size() - before, UINT32_MAX - info.reasoning_bytes));
        }
        if (has_content) info.has_answer |= take_string(content, info.text);
        dom::array calls;
        if (has_calls && calls_el.get_array().get(calls) == simdjson::SUCCESS) {
          info.has_answer |= calls.size() > 0;
          take_tool_calls(calls, info.tool_calls);
        }
      }
      info.role_only |= role;
    }
  }
  info.has_output = info.has_reasoning || info.has_answer;
  info.valid = saw_choices || info.usage.has_value() || info.is_error;
  info.logprobs = logprobs_;
  if (info.has_output) info.role_only = false;
  return;
}

void ToolCallAssembler::add(const ToolCallPart& part, std::size_t position) {
  if (!problem_.empty()) return;
  const std::int64_t index = part.index >= 0 ? part.index : static_cast<std::int64_t>(position);
  Call* call = nullptr;
  for (auto& c : calls_)
    if (c.index == index) call = &c;
  if (!call) {
    if (calls_.size() >= kMaxCalls) {
      problem_ = "more than " + std::to_string(kMaxCalls) + " tool calls";
      return;
    }
    calls_.push_back(Call{index, {}, {}, {}});
    call = &calls_.back();
  }
  if (argument_bytes_ + part.arguments.size() > kMaxArgumentBytes) {
    problem_ = "tool call arguments over " + std::to_string(kMaxArgumentBytes) + " bytes";
    return;
  }
  if (!part.id.empty()) call->id = part.id;
  // The name comes with the first fragment; a server that repeats it is not
  // read twice, one that streams it in pieces is put together.
  if (!part.name.empty() && part.name != call->name) call->name += part.name;
  call->arguments += part.arguments;
  argument_bytes_ += part.arguments.size();
}

PoolingInfo ChunkParser::parse_pooling(std::string_view body, bool rerank, std::uint32_t inputs) {
  PoolingInfo info;
  buffer_.assign(body);
  buffer_.append(simdjson::SIMDJSON_PADDING, '\0');
  dom::element doc;
  dom::object root;
  if (parser_.parse(buffer_.data(), body.size(), false).get(doc) != simdjson::SUCCESS ||
      doc.get_object().get(root) != simdjson::SUCCESS) {
    info.problem = "not a JSON object";
    return info;
  }
  dom::element error;
  if (root["error"].get(error) == simdjson::SUCCESS) {
    info.is_error = info.valid = true;
    info.error_message = error_message_of(error);
    return info;
  }
  std::string_view id;
  if (root["id"].get_string().get(id) == simdjson::SUCCESS) info.id = std::string(id);
  dom::object usage;
  if (root["usage"].get_object().get(usage) == simdjson::SUCCESS) {
    info.prompt_tokens = int_or(usage, "prompt_tokens");
    if (info.prompt_tokens < 0) info.prompt_tokens = int_or(usage, "total_tokens");
  }
  dom::array list;
  if (root[rerank ? "results" : "data"].get_array().get(list) != simdjson::SUCCESS) {
    info.problem = rerank ? "no \"results\" list" : "no \"data\" list";
    return info;
  }
  std::vector<bool> seen(inputs, false);
  std::int64_t n = 0;
  for (dom::element e : list) {
    dom::object item;
    if (e.get_object().get(item) != simdjson::SUCCESS) {
      info.problem = fmt::format("{}[{}] is not an object", rerank ? "results" : "data", n);
      return info;
    }
    if (rerank) {
      std::int64_t index = -1;
      double score = 0;
      if (item["index"].get_int64().get(index) != simdjson::SUCCESS || index < 0 || index >= inputs ||
          seen[static_cast<std::size_t>(index)]) {
        info.problem = fmt::format("results[{}]: \"index\" must be a document's index (0 to {}), each once",
                                   n, inputs > 0 ? inputs - 1 : 0);
        return info;
      }
      seen[static_cast<std::size_t>(index)] = true;
      if (!number_of(item["relevance_score"], score) && !number_of(item["score"], score)) {
        info.problem = fmt::format("results[{}]: no \"relevance_score\" number", n);
        return info;
      }
    } else {
      dom::element v;
      std::int64_t size = -1;
      dom::array floats;
      std::string_view b64;
      if (item["embedding"].get(v) == simdjson::SUCCESS && v.get_array().get(floats) == simdjson::SUCCESS) {
        size = static_cast<std::int64_t>(floats.size());
        for (dom::element x : floats)
          if (!x.is_number()) size = -1;
      } else if (item["embedding"].get_string().get(b64) == simdjson::SUCCESS) {
        size = static_cast<std::int64_t>(b64.size() / 4 * 3) / 4;
      }
      if (size <= 0) {
        info.problem =
            fmt::format("data[{}]: \"embedding\" must be a non-empty list of numbers or base64", n);
        return info;
      }
      if (info.dimension >= 0 && size != info.dimension) {
        info.problem =
            fmt::format("data[{}]: a vector of {} values where data[0] had {}", n, size, info.dimension);
        return info;
      }
      info.dimension = size;
    }
    ++n;
  }
  info.items = n;
  info.valid = true;
  return info;
}

TranscriptionInfo ChunkParser::parse_transcription(std::string_view body) {
  TranscriptionInfo info;
  buffer_.assign(body);
  buffer_.append(simdjson::SIMDJSON_PADDING, '\0');
  dom::element doc;
  dom::object root;
  if (parser_.parse(buffer_.data(), body.size(), false).get(doc) != simdjson::SUCCESS ||
      doc.get_object().get(root) != simdjson::SUCCESS) {
    info.problem = "not a JSON object";
    return info;
  }
  info.valid = true;
  dom::element error;
  if (root["error"].get(error) == simdjson::SUCCESS && !error.is_null()) {
    info.is_error = true;
    info.error_message = error_message_of(error);
    return info;
  }
  std::string_view s;
  if (root["text"].get_string().get(s) == simdjson::SUCCESS) {
    info.has_text = true;
    info.text = std::string(s);
  }
  if (root["id"].get_string().get(s) == simdjson::SUCCESS) info.id = std::string(s);
  dom::object u;
  if (root["usage"].get_object().get(u) == simdjson::SUCCESS)
    take_transcription_usage(u, info.input_tokens, info.output_tokens, info.audio_seconds);
  double d = 0;
  if (number_of(root["duration"], d)) {
    info.audio_seconds = d;
  } else if (root["duration"].get_string().get(s) == simdjson::SUCCESS && !s.empty() && s.size() < 32) {
    const std::string text(s);
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end == text.c_str() + text.size() && std::isfinite(v)) info.audio_seconds = v;
  }
  return info;
}

}  // namespace tokenscope::bench
