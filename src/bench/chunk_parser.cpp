#include "bench/chunk_parser.h"

namespace tokenscope::bench {

namespace dom = simdjson::dom;

namespace {

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

}  // namespace

ChunkInfo ChunkParser::parse(std::string_view data) {
  ChunkInfo info;
  buffer_.assign(data);
  buffer_.append(simdjson::SIMDJSON_PADDING, '\0');
  dom::element doc;
  if (parser_.parse(buffer_.data(), data.size(), false).get(doc) != simdjson::SUCCESS) return info;
  dom::object root;
  if (doc.get_object().get(root) != simdjson::SUCCESS) return info;

  dom::element error;
  if (root["error"].get(error) == simdjson::SUCCESS) {
    info.is_error = true;
    std::string_view msg;
    dom::object err;
    if (error.get_object().get(err) == simdjson::SUCCESS) {
      if (err["message"].get_string().get(msg) == simdjson::SUCCESS) info.error_message = std::string(msg);
    } else if (error.get_string().get(msg) == simdjson::SUCCESS) {
      info.error_message = std::string(msg);
    }
  }

  std::string_view id;
  if (root["id"].get_string().get(id) == simdjson::SUCCESS) info.id = std::string(id);

  dom::object u;
  if (root["usage"].get_object().get(u) == simdjson::SUCCESS) {  // "usage": null is no usage
    ChunkUsage usage;
    usage.prompt_tokens = int_or(u, "prompt_tokens");
    usage.completion_tokens = int_or(u, "completion_tokens");
    dom::object details;
    if (u["prompt_tokens_details"].get_object().get(details) == simdjson::SUCCESS)
      usage.cached_tokens = int_or(details, "cached_tokens");
    info.usage = usage;
  }

  dom::object tm;
  if (root["timings"].get_object().get(tm) == simdjson::SUCCESS) {
    ChunkTimings t;
    double v = 0;
    if (tm["prompt_ms"].get_double().get(v) == simdjson::SUCCESS) t.prompt_ms = v;
    if (tm["predicted_ms"].get_double().get(v) == simdjson::SUCCESS) t.predicted_ms = v;
    t.prompt_n = int_or(tm, "prompt_n");
    t.predicted_n = int_or(tm, "predicted_n");
    info.timings = t;
  }

  dom::array choices;
  const bool saw_choices = root["choices"].get_array().get(choices) == simdjson::SUCCESS;
  if (saw_choices) {
    for (dom::element element : choices) {
      dom::object choice;
      if (element.get_object().get(choice) != simdjson::SUCCESS) return ChunkInfo{};
      ++info.choices;
      dom::element v;
      if (choice["text"].get(v) == simdjson::SUCCESS) info.has_output |= take_string(v, info.text);
      std::string_view finish;
      if (choice["finish_reason"].get_string().get(finish) == simdjson::SUCCESS)
        info.finish_reason = std::string(finish);
      bool role = false;
      for (const char* key : {"delta", "message"}) {
        dom::object delta;
        if (choice[key].get_object().get(delta) != simdjson::SUCCESS) continue;
        for (const char* field : {"content", "reasoning_content"})
          if (delta[field].get(v) == simdjson::SUCCESS) info.has_output |= take_string(v, info.text);
        role |= delta["role"].error() == simdjson::SUCCESS;
        dom::array calls;
        if (delta["tool_calls"].get_array().get(calls) == simdjson::SUCCESS)
          info.has_output |= calls.size() > 0;
      }
      info.role_only |= role;
    }
  }
  info.valid = saw_choices || info.usage.has_value() || info.is_error;
  if (info.has_output) info.role_only = false;
  return info;
}

}  // namespace tokenscope::bench
