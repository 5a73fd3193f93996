#include "bench/chunk_parser.h"

namespace tokenscope::bench {

namespace od = simdjson::ondemand;

namespace {

// Appends a string field's value; true when it was a non-empty string.
bool take_string(od::value v, std::string& out) {
  std::string_view s;
  if (v.get_string().get(s) != simdjson::SUCCESS) return false;
  out.append(s);
  return !s.empty();
}

std::int64_t int_or(od::object o, std::string_view key) {
  std::int64_t v = -1;
  if (o.find_field_unordered(key).get_int64().get(v) != simdjson::SUCCESS) return -1;
  return v;
}

}  // namespace

ChunkInfo ChunkParser::parse(std::string_view data) {
  ChunkInfo info;
  buffer_.assign(data);
  buffer_.append(simdjson::SIMDJSON_PADDING, '\0');
  od::document doc;
  if (parser_.iterate(buffer_.data(), data.size(), buffer_.size()).get(doc) != simdjson::SUCCESS) return info;
  od::object root;
  if (doc.get_object().get(root) != simdjson::SUCCESS) return info;
  bool saw_choices = false;
  for (auto field : root) {
    std::string_view key;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) return info;
    od::value value;
    if (field.value().get(value) != simdjson::SUCCESS) return info;
    if (key == "error") {
      info.is_error = true;
      od::object err;
      if (value.get_object().get(err) == simdjson::SUCCESS) {
        std::string_view msg;
        if (err.find_field_unordered("message").get_string().get(msg) == simdjson::SUCCESS)
          info.error_message = std::string(msg);
      } else {
        std::string_view msg;
        if (value.get_string().get(msg) == simdjson::SUCCESS) info.error_message = std::string(msg);
      }
    } else if (key == "usage") {
      od::object u;
      if (value.get_object().get(u) != simdjson::SUCCESS) continue;  // "usage": null
      ChunkUsage usage;
      usage.prompt_tokens = int_or(u, "prompt_tokens");
      usage.completion_tokens = int_or(u, "completion_tokens");
      od::object details;
      if (u.find_field_unordered("prompt_tokens_details").get_object().get(details) == simdjson::SUCCESS)
        usage.cached_tokens = int_or(details, "cached_tokens");
      info.usage = usage;
    } else if (key == "choices") {
      od::array choices;
      if (value.get_array().get(choices) != simdjson::SUCCESS) return info;
      saw_choices = true;
      for (auto element : choices) {
        od::object choice;
        if (element.get_object().get(choice) != simdjson::SUCCESS) return info;
        ++info.choices;
        bool role = false;
        for (auto cf : choice) {
          std::string_view ck;
          if (cf.unescaped_key().get(ck) != simdjson::SUCCESS) return info;
          od::value cv;
          if (cf.value().get(cv) != simdjson::SUCCESS) return info;
          if (ck == "text") {
            info.has_output |= take_string(cv, info.text);
          } else if (ck == "finish_reason") {
            std::string_view fr;
            if (cv.get_string().get(fr) == simdjson::SUCCESS) info.finish_reason = std::string(fr);
          } else if (ck == "delta" || ck == "message") {
            od::object delta;
            if (cv.get_object().get(delta) != simdjson::SUCCESS) continue;
            for (auto df : delta) {
              std::string_view dk;
              if (df.unescaped_key().get(dk) != simdjson::SUCCESS) return info;
              od::value dv;
              if (df.value().get(dv) != simdjson::SUCCESS) return info;
              if (dk == "content" || dk == "reasoning_content") {
                info.has_output |= take_string(dv, info.text);
              } else if (dk == "role") {
                role = true;
              } else if (dk == "tool_calls") {
                od::array calls;
                std::size_t n = 0;
                if (dv.get_array().get(calls) == simdjson::SUCCESS) {
                  for (auto call : calls) {
                    (void)call;
                    ++n;
                  }
                }
                info.has_output |= n > 0;
              }
            }
          }
        }
        info.role_only |= role && !info.has_output;
      }
    }
  }
  info.valid = saw_choices || info.usage.has_value() || info.is_error;
  if (info.has_output) info.role_only = false;
  return info;
}

}  // namespace tokenscope::bench
