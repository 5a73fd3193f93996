#include "serve/openai.h"

#include "core/error.h"
#include "core/json_depth.h"
#include "core/json_out.h"
#include "core/random.h"
#include "net/multipart.h"

#include <fmt/format.h>

#include <openssl/evp.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

namespace tokenscope::serve {

using json = nlohmann::json;

std::string error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string error_body(const ApiError& e) {
  json j = {{"error",
             {{"message", e.message},
              {"type", error_type(e.status)},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.status}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

ApiError bad(std::string param, std::string message) {
  return ApiError{400, std::move(message), std::move(param)};
}

std::string kind_of(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

std::optional<ApiError> tokens_from_ids(const json& arr, const std::string& param,
                                        std::vector<tokenizers::TokenId>& out) {
  for (const auto& v : arr) {
    if (!v.is_number_integer() && !v.is_number_unsigned())
      return bad(param, fmt::format("'{}' must hold integer token ids, got {}", param, kind_of(v)));
    const auto id = v.get<std::int64_t>();
    if (id < 0 || id >= static_cast<std::int64_t>(tokenizers::kVocabSize))
      return bad(param,
                 fmt::format("token id {} is outside the vocabulary [0, {})", id, tokenizers::kVocabSize));
    out.push_back(static_cast<tokenizers::TokenId>(id));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_prompt(const json& body, std::vector<std::vector<tokenizers::TokenId>>& prompts,
                                     const std::string& key = "prompt") {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return bad(key, fmt::format("'{}' is required", key));
  const json& p = *it;
  if (p.is_string()) {
    prompts.push_back(tokenizers::tokenize(p.get_ref<const std::string&>()));
  } else if (p.is_array()) {
    if (p.empty()) return bad(key, fmt::format("'{}' must not be an empty list", key));
    if (p.front().is_string()) {
      for (const auto& s : p) {
        if (!s.is_string())
          return bad(key, fmt::format("a list '{}' must hold only strings or only token ids", key));
        prompts.push_back(tokenizers::tokenize(s.get_ref<const std::string&>()));
      }
    } else if (p.front().is_array()) {
      for (const auto& ids : p) {
        if (!ids.is_array()) return bad(key, "a list of token-id lists must hold only lists");
        prompts.emplace_back();
        if (auto e = tokens_from_ids(ids, key, prompts.back())) return e;
      }
    } else {
      prompts.emplace_back();
      if (auto e = tokens_from_ids(p, key, prompts.back())) return e;
    }
  } else {
    return bad(key,
               fmt::format("'{}' must be a string, a list of strings or token ids, got {}", key, kind_of(p)));
  }
  for (const auto& t : prompts)
    if (t.empty()) return bad(key, fmt::format("'{}' must not be empty", key));
  return std::nullopt;
}

// An "image_url" part ({"image_url": {"url": "data:image/...;base64,..."}}
// or the URL as a string; the Responses API's "input_image" with
// "image_url") or an "input_audio" part ({"input_audio": {"data": base64,
// "format": "wav"}}), read to what the model sees.
std::optional<ApiError> parse_media_part(const json& part, const std::string& where, const ParseContext& ctx,
                                         std::vector<MediaItem>& media) {
  constexpr std::size_t kMaxMedia = 64;
  constexpr std::uint32_t kMaxSide = 8192;
  if (media.size() >= kMaxMedia)
    return bad(where, fmt::format("more than {} images and audio clips in one request", kMaxMedia));
  const std::string type = part["type"].get<std::string>();
  MediaItem m;
  std::optional<std::string> bytes;
  if (type == "input_audio") {
    const auto a = part.find("input_audio");
    if (a == part.end() || !a->is_object() || !a->contains("data") || !(*a)["data"].is_string())
      return bad(where,
                 "an input_audio part needs {\"input_audio\": {\"data\": base64, \"format\": \"wav\"}}");
    if (a->contains("format") && (!(*a)["format"].is_string() || (*a)["format"] != "wav"))
      return bad(where, "input_audio.format: the simulator reads \"wav\" only");
    if (!ctx.model || !ctx.model->has_audio())
      return bad(where,
                 fmt::format("{} takes no audio (it has no audio encoder)",
                             ctx.model ? "the model " + ctx.model->name : std::string("the served model")));
    bytes = base64_decode((*a)["data"].get_ref<const std::string&>());
    if (!bytes) return bad(where, "input_audio.data is not base64");
    const auto seconds = wav_seconds(*bytes);
    if (!seconds)
      return bad(where, "input_audio.data is not a WAV file (RIFF/WAVE with fmt and data chunks)");
    if (*seconds > 600)
      return bad(where, fmt::format("an audio clip of {:.1f} s is over the limit of 600 s", *seconds));
    m.audio = true;
    m.seconds = *seconds;
  } else {
    const auto u = part.find("image_url");
    std::string url;
    if (u != part.end() && u->is_string())
      url = u->get<std::string>();
    else if (u != part.end() && u->is_object() && u->contains("url") && (*u)["url"].is_string())
      url = (*u)["url"].get<std::string>();
    else
      return bad(where, "an image part needs \"image_url\": {\"url\": \"data:image/png;base64,...\"}");
    if (!ctx.model || !ctx.model->has_vision())
      return bad(where,
                 fmt::format("{} takes no images (it has no vision encoder)",
                             ctx.model ? "the model " + ctx.model->name : std::string("the served model")));
    const auto comma = url.find(',');
    if (url.rfind("data:image/", 0) != 0 || comma == std::string::npos || comma < 7 ||
        url.compare(comma - 7, 7, ";base64") != 0)
      return bad(where,
                 "the simulator takes images as data URLs (data:image/png;base64,...); it fetches nothing");
    bytes = base64_decode(std::string_view(url).substr(comma + 1));
    if (!bytes) return bad(where, "the image's data URL is not base64");
    const auto size = image_size(*bytes);
    if (!size) return bad(where, "the image is not a PNG or JPEG file");
    if (size->first > kMaxSide || size->second > kMaxSide)
      return bad(where, fmt::format("an image of {}x{} pixels is over the limit of {} a side", size->first,
                                    size->second, kMaxSide));
    m.width = size->first;
    m.height = size->second;
  }
  std::uint64_t h = 0x6d65646961ULL;
  for (std::size_t i = 0; i < bytes->size(); i += 8) {
    std::uint64_t v = 0;
    std::memcpy(&v, bytes->data() + i, std::min<std::size_t>(8, bytes->size() - i));
    h = hash_combine64(h, v);
  }
  m.hash = h;
  media.push_back(m);
  return std::nullopt;
}

// messages: chat's "messages"; the Responses API's "input" (a string is one
// user message; parts "input_text" / "output_text" too) after its
// "instructions" (a system message). Image and audio parts go to `media`.
// tools_block: the declared tools, rendered first (as chat templates put
// them in the system prompt); tool_rounds: assistant turns with tool calls
// since the last user message.
std::optional<ApiError> parse_messages(const json& body, std::string& text,
                                       const std::string& key = "messages", const ParseContext* ctx = nullptr,
                                       std::vector<MediaItem>* media = nullptr,
                                       const std::string* tools_block = nullptr,
                                       std::uint32_t* tool_rounds = nullptr,
                                       std::vector<std::string>* documents = nullptr) {
  const bool responses = key == "input";
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return bad(key, fmt::format("'{}' is required", key));
  std::vector<std::pair<std::string, std::string>> messages;
  if (tools_block && !tools_block->empty()) messages.emplace_back("tools", *tools_block);
  std::uint32_t rounds = 0;
  if (responses) {
    if (const auto ins = body.find("instructions"); ins != body.end() && !ins->is_null()) {
      if (!ins->is_string()) return bad("instructions", "'instructions' must be a string");
      messages.emplace_back("system", ins->get<std::string>());
    }
    if (it->is_string()) {
      if (it->get_ref<const std::string&>().empty()) return bad(key, "'input' must not be empty");
      messages.emplace_back("user", it->get<std::string>());
      text = apply_chat_template(messages);
      return std::nullopt;
    }
  }
  if (!it->is_array() || it->empty())
    return bad(key, fmt::format("'{}' must be a non-empty list{}", key, responses ? " or a string" : ""));
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string where = fmt::format("{}[{}]", key, i);
    if (!m.is_object()) return bad(where, fmt::format("'{}' must be an object", where));
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string() || role->get_ref<const std::string&>().empty())
      return bad(where + ".role", fmt::format("'{}.role' must be a non-empty string", where));
    std::string content;
    const auto c = m.find("content");
    if (c != m.end() && !c->is_null()) {
      if (c->is_string()) {
        content = c->get<std::string>();
      } else if (c->is_array()) {
        for (const auto& part : *c) {
          const auto type = part.is_object() ? part.find("type") : part.end();
          const bool text_part =
              type != part.end() && type->is_string() &&
              (*type == "text" || (responses && (*type == "input_text" || *type == "output_text")));
          const bool media_part =
              type != part.end() && type->is_string() && media && ctx &&
              (*type == "image_url" || *type == "input_audio" || (responses && *type == "input_image"));
          if (part.is_object() && media_part) {
            if (auto e = parse_media_part(part, where + ".content", *ctx, *media)) return e;
            continue;
          }
          if (!part.is_object() || !text_part || !part.contains("text") || !part["text"].is_string())
            return bad(where + ".content",
                       media && ctx
                           ? "content parts must be text ({\"type\": \"text\", \"text\": ...}), "
                             "image_url or input_audio"
                           : "content parts must be text ({\"type\": \"text\", \"text\": ...}) here");
          content += part["text"].get<std::string>();
        }
      } else {
        return bad(where + ".content",
                   fmt::format("'{}.content' must be a string or a list of parts", where));
      }
    }
    // An assistant's tool calls, as the model wrote them (serve/tools.h).
    if (const auto tc = m.find("tool_calls"); !responses && tc != m.end() && !tc->is_null()) {
      const std::string param = where + ".tool_calls";
      if (*role != "assistant") return bad(param, fmt::format("only assistant messages carry 'tool_calls'"));
      if (!tc->is_array()) return bad(param, fmt::format("'{}' must be a list", param));
      for (std::size_t j = 0; j < tc->size(); ++j) {
        const json& call = (*tc)[j];
        const std::string cw = fmt::format("{}[{}].function", param, j);
        const auto f = call.is_object() ? call.find("function") : call.end();
        if (f == call.end() || !f->is_object())
          return bad(cw, fmt::format("'{}' must be an object with \"name\" and \"arguments\"", cw));
        const auto name = f->find("name");
        if (name == f->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
          return bad(cw + ".name", fmt::format("'{}.name' must be a non-empty string", cw));
        const auto args = f->find("arguments");
        std::string arguments;
        if (args != f->end() && args->is_string())
          arguments = args->get<std::string>();
        else if (args != f->end() && args->is_object())
          arguments = args->dump(-1, ' ', false, json::error_handler_t::replace);
        else
          return bad(cw + ".arguments",
                     fmt::format("'{}.arguments' must be a string (the arguments' JSON)", cw));
        if (!content.empty()) content += '\n';
        content += render_tool_call(name->get_ref<const std::string&>(), arguments);
      }
      if (!tc->empty()) ++rounds;
    }
    if (*role == "user") rounds = 0;
    if (documents) collect_citations(content, *documents);
    messages.emplace_back(role->get<std::string>(), std::move(content));
  }
  if (tool_rounds) *tool_rounds = rounds;
  text = apply_chat_template(messages);
  return std::nullopt;
}

std::optional<ApiError> optional_bool(const json& body, const char* key, bool& out);

// A JSON schema of the request, compiled; nullopt when it is one.
std::optional<ApiError> compile_schema(const json& schema, const std::string& param,
                                       std::shared_ptr<const JsonSchema>& out) {
  if (!schema.is_object() && !schema.is_boolean())
    return bad(param, fmt::format("'{}' must be a JSON schema (an object), got {}", param, kind_of(schema)));
  try {
    out = std::make_shared<const JsonSchema>(schema, param);
  } catch (const UsageError& e) {
    return bad(param, e.what());
  }
  return std::nullopt;
}

// "tools", "tool_choice", "parallel_tool_calls" (chat only) and
// "response_format"; tools_block: the tools as the prompt shows them.
std::optional<ApiError> parse_tools(const json& body, Api api, GenerationRequest& r,
                                    std::string& tools_block) {
  ToolRequest& t = r.tools;
  if (const auto it = body.find("tools");
      it != body.end() && !it->is_null() && !(it->is_array() && it->empty())) {
    if (api != Api::kChat)
      return bad("tools", api == Api::kResponses
                              ? "'tools' on /v1/responses is not simulated; use /v1/chat/completions"
                              : "'tools' belongs to /v1/chat/completions");
    constexpr std::size_t kMaxTools = 128;
    if (!it->is_array()) return bad("tools", fmt::format("'tools' must be a list, got {}", kind_of(*it)));
    if (it->size() > kMaxTools)
      return bad("tools",
                 fmt::format("'tools' holds {} tools, at most {} are allowed", it->size(), kMaxTools));
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& tool = (*it)[i];
      const std::string where = fmt::format("tools[{}]", i);
      if (!tool.is_object()) return bad(where, fmt::format("'{}' must be an object", where));
      if (const auto type = tool.find("type");
          type != tool.end() && !(type->is_string() && *type == "function"))
        return bad(where + ".type", fmt::format("'{}.type' must be \"function\"", where));
      const auto f = tool.find("function");
      if (f == tool.end() || !f->is_object())
        return bad(where + ".function",
                   fmt::format("'{}.function' must be an object with a \"name\"", where));
      const auto name = f->find("name");
      if (name == f->end() || !name->is_string() || !valid_tool_name(name->get<std::string>()))
        return bad(
            where + ".function.name",
            fmt::format("'{}.function.name' must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -", where));
      if (const auto d = f->find("description"); d != f->end() && !d->is_null() && !d->is_string())
        return bad(where + ".function.description",
                   fmt::format("'{}.function.description' must be a string", where));
      ToolDef def;
      def.name = name->get<std::string>();
      for (const auto& other : t.tools)
        if (other.name == def.name)
          return bad(where + ".function.name", fmt::format("two tools are named '{}'", def.name));
      const auto params = f->find("parameters");
      def.parameters = params == f->end() || params->is_null()
                           ? json{{"type", "object"}, {"properties", json::object()}}
                           : *params;
      if (auto e = compile_schema(def.parameters, where + ".function.parameters", def.checker)) return e;
      t.tools.push_back(std::move(def));
    }
    tools_block = it->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  if (const auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    if (api != Api::kChat) return bad("tool_choice", "'tool_choice' belongs to /v1/chat/completions");
    if (it->is_string() && *it == "auto") {
      t.choice = ToolRequest::Choice::kAuto;
    } else if (it->is_string() && *it == "none") {
      t.choice = ToolRequest::Choice::kNone;
    } else if (it->is_string() && *it == "required") {
      t.choice = ToolRequest::Choice::kRequired;
    } else if (it->is_object() && it->contains("function") && (*it)["function"].is_object() &&
               (*it)["function"].contains("name") && (*it)["function"]["name"].is_string()) {
      t.choice = ToolRequest::Choice::kNamed;
      t.named = (*it)["function"]["name"].get<std::string>();
      bool declared = false;
      for (const auto& tool : t.tools) declared |= tool.name == t.named;
      if (!declared)
        return bad("tool_choice", fmt::format("'tool_choice' names '{}', which is not in 'tools'", t.named));
    } else {
      return bad("tool_choice",
                 "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                 "\"function\": {\"name\": ...}}");
    }
    if (t.choice == ToolRequest::Choice::kRequired && t.tools.empty())
      return bad("tool_choice", "'tool_choice': \"required\" needs 'tools'");
  }
  if (auto e = optional_bool(body, "parallel_tool_calls", t.parallel)) return e;
  if (const auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    if (api == Api::kResponses)
      return bad("response_format", "'response_format' is not supported on /v1/responses by the simulator");
    const auto type = it->is_object() ? it->find("type") : it->end();
    if (type == it->end() || !type->is_string())
      return bad("response_format", "'response_format' must be an object with a \"type\"");
    if (*type == "text") {
      r.format.kind = OutputFormat::Kind::kText;
    } else if (*type == "json_object") {
      r.format.kind = OutputFormat::Kind::kJsonObject;
    } else if (*type == "json_schema") {
      const auto js = it->find("json_schema");
      if (js == it->end() || !js->is_object())
        return bad("response_format.json_schema",
                   "'response_format.json_schema' must be an object with \"name\" and \"schema\"");
      if (const auto n = js->find("name"); n != js->end() && !n->is_null() && !n->is_string())
        return bad("response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
      const auto schema = js->find("schema");
      r.format.kind = OutputFormat::Kind::kJsonSchema;
      r.format.schema = schema == js->end() || schema->is_null() ? json::object() : *schema;
      if (auto e = compile_schema(r.format.schema, "response_format.json_schema.schema", r.format.checker))
        return e;
    } else {
      return bad("response_format.type",
                 "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    }
  }
  return std::nullopt;
}

template <typename T>
std::optional<ApiError> optional_uint(const json& body, const char* key, T& out, std::uint64_t min,
                                      std::uint64_t max, bool& present) {
  present = false;
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() && !it->is_number_unsigned())
    return bad(key, fmt::format("'{}' must be an integer, got {}", key, kind_of(*it)));
  const auto v = it->get<std::int64_t>();
  if (v < static_cast<std::int64_t>(min) || static_cast<std::uint64_t>(v) > max)
    return bad(key, fmt::format("'{}' must be in [{}, {}], got {}", key, min, max, v));
  out = static_cast<T>(v);
  present = true;
  return std::nullopt;
}

std::optional<ApiError> optional_bool(const json& body, const char* key, bool& out) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return bad(key, fmt::format("'{}' must be a boolean, got {}", key, kind_of(*it)));
  out = it->get<bool>();
  return std::nullopt;
}

// A request body: a JSON object within the nesting bound.
std::optional<ApiError> parse_body(std::string_view text, json& body) {
  if (json_too_deep_at(text) != std::string_view::npos)
    return bad("", fmt::format("the request body is nested deeper than {} levels", kMaxJsonDepth));
  body = json::parse(text.begin(), text.end(), nullptr, false);
  if (body.is_discarded()) return bad("", "the request body is not valid JSON");
  if (!body.is_object()) return bad("", "the request body must be a JSON object");
  return std::nullopt;
}

std::optional<ApiError> parse_model(const json& body, const ParseContext& ctx, std::string& model) {
  model = ctx.model_names.front();
  if (const auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return bad("model", fmt::format("'model' must be a string, got {}", kind_of(*it)));
    model = it->get<std::string>();
    bool known = false;
    for (const auto& n : ctx.model_names) known |= n == model;
    if (!known) return ApiError{404, fmt::format("The model `{}` does not exist.", model), "model"};
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> base64_decode(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::string padded(text);
  while (padded.size() % 4 != 0) padded += '=';
  std::string out(padded.size() / 4 * 3 + 3, '\0');
  const int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(padded.data()), static_cast<int>(padded.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the padding as zero bytes.
  const std::size_t pad = padded.size() - text.size();
  out.resize(static_cast<std::size_t>(n) - std::min<std::size_t>(pad, static_cast<std::size_t>(n)));
  return out;
}

std::optional<std::pair<std::uint32_t, std::uint32_t>> image_size(std::string_view b) {
  auto be = [&](std::size_t at, int bytes) {
    std::uint32_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
    return v;
  };
  if (b.size() >= 24 && b.substr(0, 8) == std::string_view("\x89PNG\r\n\x1a\n", 8) &&
      b.substr(12, 4) == "IHDR") {
    const std::uint32_t w = be(16, 4), h = be(20, 4);
    if (w == 0 || h == 0) return std::nullopt;
    return std::make_pair(w, h);
  }
  // JPEG: markers after SOI; a start of frame (C0-CF but C4, C8, CC) holds the size.
  if (b.size() >= 4 && static_cast<unsigned char>(b[0]) == 0xFF && static_cast<unsigned char>(b[1]) == 0xD8) {
    std::size_t at = 2;
    while (at + 4 <= b.size()) {
      if (static_cast<unsigned char>(b[at]) != 0xFF) return std::nullopt;
      const unsigned marker = static_cast<unsigned char>(b[at + 1]);
      if (marker == 0xFF) {
        ++at;
        continue;
      }
      const std::uint32_t len = be(at + 2, 2);
      if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
        if (at + 9 > b.size()) return std::nullopt;
        const std::uint32_t h = be(at + 5, 2), w = be(at + 7, 2);
        if (w == 0 || h == 0) return std::nullopt;
        return std::make_pair(w, h);
      }
      if (len < 2) return std::nullopt;
      at += 2 + len;
    }
  }
  return std::nullopt;
}

std::optional<double> wav_seconds(std::string_view b) {
  auto le = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
    return v;
  };
  if (b.size() < 12 || b.substr(0, 4) != "RIFF" || b.substr(8, 4) != "WAVE") return std::nullopt;
  auto le16 = [&](std::size_t at) {
    return static_cast<std::uint32_t>(static_cast<unsigned char>(b[at]) |
                                      (static_cast<unsigned char>(b[at + 1]) << 8));
  };
  std::uint32_t byte_rate = 0;
  std::size_t at = 12;
  while (at + 8 <= b.size()) {
    const std::string_view id = b.substr(at, 4);
    const std::uint32_t size = le(at + 4);
    if (id == "fmt " && at + 24 <= b.size()) {
      // The byte rate must be what the sample rate and the frame size make.
      const std::uint32_t rate = le(at + 12), block_align = le16(at + 20);
      byte_rate = le(at + 16);
      if (rate == 0 || block_align == 0 || std::uint64_t{rate} * block_align != byte_rate)
        return std::nullopt;
    }
    // The clip's length is that of the samples present (a header may claim more).
    if (id == "data")
      return byte_rate > 0
                 ? std::optional<double>(static_cast<double>(std::min<std::size_t>(size, b.size() - at - 8)) /
                                         byte_rate)
                 : std::nullopt;
    at += 8 + std::size_t{size} + (size & 1);
  }
  return std::nullopt;
}

std::string apply_chat_template(const std::vector<std::pair<std::string, std::string>>& messages) {
  std::string out;
  for (const auto& [role, content] : messages) {
    out += "<|";
    out += role;
    out += "|>\n";
    out += content;
    out += '\n';
  }
  out += "<|assistant|>\n";
  return out;
}

std::variant<GenerationRequest, ApiError> parse_generation_request(Api api, std::string_view text,
                                                                   const ParseContext& ctx) {
  json body;
  if (auto e = parse_body(text, body)) return *e;
  GenerationRequest r;
  r.api = api;
  if (auto e = parse_model(body, ctx, r.model)) return *e;
  // prompt or messages
  if (api == Api::kCompletions) {
    if (auto e = parse_prompt(body, r.prompts)) return *e;
    if (body.contains("messages"))
      return bad("messages", "'messages' belongs to /v1/chat/completions; use 'prompt'");
  }
  std::string tools_block;
  if (auto e = parse_tools(body, api, r, tools_block)) return *e;
  if (api != Api::kCompletions) {
    std::string templated;
    if (auto e =
            parse_messages(body, templated, api == Api::kResponses ? "input" : "messages", &ctx, &r.media,
                           &tools_block, &r.tools.rounds, api == Api::kChat ? &r.documents : nullptr))
      return *e;
    r.prompts.push_back(tokenizers::tokenize(templated));
    for (const auto& m : r.media)
      r.media_tokens +=
          m.audio ? ctx.model->audio_tokens(m.seconds) : ctx.model->image_tokens(m.width, m.height);
  }
  // sampling and length
  bool present = false;
  if (const auto it = body.find("n"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<std::int64_t>() != 1)
      return bad("n", "only n = 1 is supported (one completion per prompt)");
  }
  for (const char* unsupported : {"best_of", "logit_bias", "suffix"}) {
    const auto it = body.find(unsupported);
    if (it != body.end() && !it->is_null() && !(it->is_array() && it->empty()) &&
        !(std::string_view(unsupported) == "best_of" && it->is_number_integer() &&
          it->get<std::int64_t>() == 1))
      return bad(unsupported, fmt::format("'{}' is not supported by the simulator", unsupported));
  }
  if (const auto it = body.find("echo");
      it != body.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>()))
    return bad("echo", "'echo' is not supported by the simulator");
  // Log-probabilities: completions "logprobs": N (0-20); chat "logprobs":
  // true with "top_logprobs": N (0-20, 0 when absent), as vLLM takes them.
  constexpr std::uint64_t kMaxTopLogprobs = 20;
  if (api == Api::kResponses) {
    if (const auto it = body.find("top_logprobs"); it != body.end() && !it->is_null())
      return bad("top_logprobs", "'top_logprobs' is not supported on /v1/responses by the simulator");
  } else if (api == Api::kCompletions) {
    if (const auto it = body.find("top_logprobs"); it != body.end() && !it->is_null())
      return bad("top_logprobs", "'top_logprobs' belongs to /v1/chat/completions; use 'logprobs': N");
    std::uint32_t n = 0;
    if (auto e = optional_uint(body, "logprobs", n, 0, kMaxTopLogprobs, present)) return *e;
    if (present) r.logprobs = n;
  } else {
    bool want = false;
    if (auto e = optional_bool(body, "logprobs", want)) return *e;
    std::uint32_t n = 0;
    if (auto e = optional_uint(body, "top_logprobs", n, 0, kMaxTopLogprobs, present)) return *e;
    if (present && !want) return bad("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
    if (want) r.logprobs = n;
  }
  std::uint32_t max_tokens = 0;
  constexpr std::uint64_t kLimit = 1u << 30;  // the context check below gives the useful message
  if (auto e = optional_uint(body, "max_tokens", max_tokens, 1, kLimit, present)) return *e;
  bool have_max = present;
  if (auto e = optional_uint(body, "max_completion_tokens", max_tokens, 1, kLimit, present)) return *e;
  have_max |= present;
  if (api == Api::kResponses) {
    if (auto e = optional_uint(body, "max_output_tokens", max_tokens, 1, kLimit, present)) return *e;
    have_max |= present;
  }
  if (auto e = optional_uint(body, "min_tokens", r.min_tokens, 0, kLimit, present)) return *e;
  if (auto e = optional_bool(body, "ignore_eos", r.ignore_eos)) return *e;
  if (auto e = optional_bool(body, "stream", r.stream)) return *e;
  if (api == Api::kResponses) r.include_usage = true;  // response.completed carries it
  if (const auto it = body.find("stream_options");
      it != body.end() && !it->is_null() && api != Api::kResponses) {
    if (!r.stream) return bad("stream_options", "'stream_options' is only allowed with \"stream\": true");
    if (!it->is_object()) return bad("stream_options", "'stream_options' must be an object");
    if (auto e = optional_bool(*it, "include_usage", r.include_usage)) {
      e->param = "stream_options.include_usage";
      return *e;
    }
  }
  if (const auto it = body.find("temperature"); it != body.end() && !it->is_null()) {
    if (!it->is_number()) return bad("temperature", "'temperature' must be a number");
    r.temperature = it->get<double>();
    if (!(r.temperature >= 0.0 && r.temperature <= 2.0))
      return bad("temperature", fmt::format("'temperature' must be in [0, 2], got {}", r.temperature));
  }
  if (const auto it = body.find("top_p"); it != body.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0.0 && it->get<double>() <= 1.0))
      return bad("top_p", "'top_p' must be a number in (0, 1]");
  }
  if (const auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() && !it->is_number_unsigned())
      return bad("seed", "'seed' must be an integer");
    r.seed = static_cast<std::uint64_t>(it->get<std::int64_t>());
  }
  if (const auto it = body.find("priority"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer()) return bad("priority", "'priority' must be an integer");
    const auto p = it->get<std::int64_t>();
    if (p < std::numeric_limits<std::int32_t>::min() || p > std::numeric_limits<std::int32_t>::max())
      return bad("priority", "'priority' must be a 32-bit integer");
    r.priority = static_cast<std::int32_t>(p);
  }
  if (const auto it = body.find("user"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return bad("user", "'user' must be a string");
    r.user = it->get<std::string>();
  }
  if (const auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      r.stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& s : *it) {
        if (!s.is_string()) return bad("stop", "'stop' must be a string or a list of strings");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      return bad("stop", "'stop' must be a string or a list of strings");
    }
    for (const auto& s : r.stop)
      if (s.empty()) return bad("stop", "'stop' strings must not be empty");
  }
  // Length against the context (images and audio count their tokens).
  std::size_t longest = 0;
  for (const auto& p : r.prompts) longest = std::max(longest, p.size() + r.media_tokens);
  if (longest >= ctx.max_model_len)
    return bad(
        api == Api::kChat        ? "messages"
        : api == Api::kResponses ? "input"
                                 : "prompt",
        fmt::format("This model's maximum context length is {} tokens. However, your request has {} input "
                    "tokens. Please reduce the length of the input.",
                    ctx.max_model_len, longest));
  const std::uint32_t room = ctx.max_model_len - static_cast<std::uint32_t>(longest);
  if (have_max) {
    if (max_tokens > room)
      return bad(
          api == Api::kChat        ? "messages"
          : api == Api::kResponses ? "input"
                                   : "prompt",
          fmt::format(
              "This model's maximum context length is {} tokens. However, you requested {} tokens ({} "
              "in the input, {} in the completion). Please reduce the length of the input or completion.",
              ctx.max_model_len, longest + max_tokens, longest, max_tokens));
    r.max_tokens = max_tokens;
  } else {
    r.max_tokens = api == Api::kCompletions ? std::min(ctx.default_completion_max_tokens, room) : room;
  }
  if (r.min_tokens > r.max_tokens)
    return bad("min_tokens",
               fmt::format("'min_tokens' ({}) must not exceed max_tokens ({})", r.min_tokens, r.max_tokens));
  return r;
}

std::variant<GenerationRequest, ApiError> parse_pooling_request(Api api, std::string_view text,
                                                                const ParseContext& ctx) {
  json body;
  if (auto e = parse_body(text, body)) return *e;
  GenerationRequest r;
  r.api = api;
  r.max_tokens = 1;  // the prefill's token: pooling reads the prompt's states, generates nothing
  r.ignore_eos = true;
  if (auto e = parse_model(body, ctx, r.model)) return *e;
  // At most this many inputs (OpenAI's limit for embeddings; documents alike).
  constexpr std::size_t kMaxInputs = 2048;
  std::string length_param;
  if (api == Api::kEmbeddings) {
    length_param = "input";
    if (auto e = parse_prompt(body, r.prompts, "input")) return *e;
    if (r.prompts.size() > kMaxInputs)
      return bad("input", fmt::format("'input' holds {} inputs, at most {} are allowed", r.prompts.size(),
                                      kMaxInputs));
    if (const auto it = body.find("encoding_format"); it != body.end() && !it->is_null()) {
      if (!it->is_string() || (*it != "float" && *it != "base64"))
        return bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
      r.base64 = *it == "base64";
    }
    bool present = false;
    if (auto e = optional_uint(body, "dimensions", r.dimensions, 1, kEmbeddingDim, present)) return *e;
  } else {
    length_param = "documents";
    const auto q = body.find("query");
    if (q == body.end() || !q->is_string() || q->get_ref<const std::string&>().empty())
      return bad("query", "'query' must be a non-empty string");
    auto d = body.find("documents");
    if (d == body.end() || d->is_null()) d = body.find("texts");  // TEI's name
    if (d == body.end() || !d->is_array() || d->empty())
      return bad("documents", "'documents' must be a non-empty list of strings");
    if (d->size() > kMaxInputs)
      return bad("documents", fmt::format("'documents' holds {} documents, at most {} are allowed", d->size(),
                                          kMaxInputs));
    const auto query = tokenizers::tokenize(q->get_ref<const std::string&>());
    for (const auto& doc : *d) {
      if (!doc.is_string()) return bad("documents", "'documents' must hold only strings");
      auto tokens = query;
      const auto more = tokenizers::tokenize(doc.get_ref<const std::string&>());
      tokens.insert(tokens.end(), more.begin(), more.end());
      r.prompts.push_back(std::move(tokens));
    }
    bool present = false;
    if (auto e = optional_uint(body, "top_n", r.top_n, 1, kMaxInputs, present)) return *e;
  }
  std::size_t longest = 0;
  for (const auto& p : r.prompts) longest = std::max(longest, p.size());
  if (longest >= ctx.max_model_len)
    return bad(
        length_param,
        fmt::format("This model's maximum context length is {} tokens. However, your request has {} input "
                    "tokens. Please reduce the length of the input.",
                    ctx.max_model_len, longest));
  return r;
}

std::uint32_t transcript_tokens(double seconds) {
  const double n = std::ceil(std::max(0.0, seconds) * kTranscriptTokensPerSecond - 1e-9);
  return static_cast<std::uint32_t>(std::clamp(n, 1.0, 1e6));
}

namespace {

// A form field's boolean: true/false (1/0), in any case, as FastAPI reads them.
std::optional<bool> form_bool(std::string_view v) {
  std::string lower;
  for (const char c : v) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (lower == "true" || lower == "1") return true;
  if (lower == "false" || lower == "0") return false;
  return std::nullopt;
}

std::optional<double> form_number(std::string_view v) {
  if (v.empty() || v.size() > 32) return std::nullopt;
  const std::string text(v);
  char* end = nullptr;
  const double d = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(d)) return std::nullopt;
  return d;
}

}  // namespace

// Long: one field after another, each with its own check and message.
std::variant<GenerationRequest, ApiError> parse_transcription_request(std::string_view content_type,
                                                                      std::string_view body,
                                                                      const ParseContext& ctx) {
  net::MultipartLimits limits;
  limits.max_parts = 64;
  limits.max_field_bytes = 1 << 16;
  limits.max_file_bytes = 64u << 20;  // the HTTP body limit is lower by default (serve --max-body-bytes)
  const net::MultipartResult form = net::parse_multipart(content_type, body, limits);
  if (!form.ok()) return bad("", form.error);
  GenerationRequest r;
  r.api = Api::kTranscriptions;
  r.response_format = "json";
  r.ignore_eos = true;  // the transcript's length is the rule's (transcript_tokens)
  const net::ParsedPart* file = nullptr;
  std::string prompt;
  std::vector<std::string> seen;
  for (const auto& part : form.parts) {
    const std::string& name = part.name;
    const std::string_view v = part.data;
    const bool known = name == "file" || name == "model" || name == "language" || name == "prompt" ||
                       name == "response_format" || name == "temperature" || name == "seed" ||
                       name == "stream" || name == "stream_include_usage";
    if (!known) continue;  // vLLM ignores fields it does not know
    if (std::find(seen.begin(), seen.end(), name) != seen.end())
      return bad(name, fmt::format("'{}' is given twice", name));
    seen.push_back(name);
    if (name != "file" && part.has_filename)
      return bad(name, fmt::format("'{}' must be a form field, not a file", name));
    if (name == "file") {
      if (!part.has_filename)
        return bad("file", "'file' must be a file upload (a part with a filename), not a form field");
      file = &part;
    } else if (name == "model") {
      json body_model = {{"model", std::string(v)}};
      if (auto e = parse_model(body_model, ctx, r.model)) return *e;
    } else if (name == "language") {
      if (v.empty() || v.size() > 16 ||
          !std::all_of(v.begin(), v.end(), [](char c) { return (c >= 'a' && c <= 'z') || c == '-'; }))
        return bad("language", "'language' must be an ISO-639-1 code such as \"en\"");
      r.language = std::string(v);
    } else if (name == "prompt") {
      prompt = std::string(v);
    } else if (name == "response_format") {
      if (v != "json" && v != "verbose_json" && v != "text")
        return bad(
            "response_format",
            fmt::format("'response_format' must be \"json\", \"verbose_json\" or \"text\" (the simulator "
                        "writes no srt or vtt), got {}",
                        json(std::string(v)).dump(-1, ' ', false, json::error_handler_t::replace)));
      r.response_format = std::string(v);
    } else if (name == "temperature") {
      const auto t = form_number(v);
      if (!t || *t < 0 || *t > 1) return bad("temperature", "'temperature' must be a number in [0, 1]");
      r.temperature = *t;
    } else if (name == "seed") {
      const auto d = form_number(v);
      if (!d || *d != std::floor(*d) || std::abs(*d) > 9e15) return bad("seed", "'seed' must be an integer");
      r.seed = static_cast<std::uint64_t>(static_cast<std::int64_t>(*d));
    } else {
      const auto b = form_bool(v);
      if (!b) return bad(name, fmt::format("'{}' must be true or false", name));
      (name == "stream" ? r.stream : r.include_usage) = *b;
    }
  }
  if (r.model.empty()) r.model = ctx.model_names.front();
  if (!file) return bad("file", "'file' is required: the audio to transcribe (a WAV file)");
  if (r.include_usage && !r.stream)
    return bad("stream_include_usage", "'stream_include_usage' is only allowed with stream=true");
  if (r.stream && r.response_format != "json")
    return bad("response_format", "streamed transcriptions are json (\"response_format\": \"json\")");
  if (!ctx.model || !ctx.model->has_audio())
    return bad(
        "file",
        fmt::format("{} takes no audio (it has no audio encoder; qwen2-audio-7b and qwen2.5-omni-7b have "
                    "one)",
                    ctx.model ? "the model " + ctx.model->name : std::string("the served model")));
  const auto seconds = wav_seconds(file->data);
  if (!seconds)
    return bad("file",
               "'file' is not a WAV file (RIFF/WAVE with fmt and data chunks); the simulator reads WAV only");
  if (*seconds > 600)
    return bad("file", fmt::format("an audio file of {:.1f} s is over the limit of 600 s", *seconds));
  MediaItem m;
  m.audio = true;
  m.seconds = *seconds;
  std::uint64_t h = 0x7472616e73ULL;  // "trans"
  for (std::size_t i = 0; i < file->data.size(); i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, file->data.data() + i, std::min<std::size_t>(8, file->data.size() - i));
    h = hash_combine64(h, word);
  }
  m.hash = h;
  r.media.push_back(m);
  r.media_tokens = ctx.model->audio_tokens(*seconds);
  r.audio_seconds = *seconds;
  r.prompts.push_back(tokenizers::tokenize(fmt::format("<|startoftranscript|><|{}|><|transcribe|>{}",
                                                       r.language.empty() ? "en" : r.language, prompt)));
  r.max_tokens = transcript_tokens(*seconds);
  const std::size_t input = r.prompts.front().size() + r.media_tokens;
  if (input + r.max_tokens > ctx.max_model_len)
    return bad("file", fmt::format("This model's maximum context length is {} tokens. However, the audio "
                                   "takes {} input tokens ({} of audio) and its transcript {}.",
                                   ctx.max_model_len, input, r.media_tokens, r.max_tokens));
  return r;
}

std::string transcription_response(const GenerationRequest& r, std::string_view text,
                                   std::uint64_t prompt_tokens, std::uint64_t audio_tokens,
                                   std::uint64_t output_tokens) {
  if (r.response_format == "text") return std::string(text);
  const std::string quoted = json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
  if (r.response_format == "verbose_json") {
    // A segment per 30 s of audio (Whisper's window), the text split alike.
    const std::size_t segments =
        std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(r.audio_seconds / 30)));
    std::string list;
    for (std::size_t i = 0; i < segments; ++i) {
      const std::size_t from = text.size() * i / segments, to = text.size() * (i + 1) / segments;
      list += fmt::format(
          "{}{{\"id\":{},\"seek\":{},\"start\":{:.3f},\"end\":{:.3f},\"text\":{},\"tokens\":[],"
          "\"temperature\":{},"
          "\"avg_logprob\":-0.25,\"compression_ratio\":1.5,\"no_speech_prob\":0.01}}",
          i ? "," : "", i, i * 3000, 30.0 * static_cast<double>(i),
          std::min(r.audio_seconds, 30.0 * static_cast<double>(i + 1)),
          json(std::string(text.substr(from, to - from)))
              .dump(-1, ' ', false, json::error_handler_t::replace),
          r.temperature);
    }
    return fmt::format(
        "{{\"task\":\"transcribe\",\"language\":\"{}\",\"duration\":{:.3f},\"text\":{},\"segments\":[{}],"
        "\"usage\":{{\"type\":\"duration\",\"seconds\":{}}}}}",
        r.language.empty() ? "english" : r.language, r.audio_seconds, quoted, list,
        static_cast<std::uint64_t>(std::ceil(r.audio_seconds)));
  }
  return fmt::format(
      "{{\"text\":{},\"usage\":{{\"type\":\"tokens\",\"input_tokens\":{},\"input_token_details\":{{"
      "\"text_tokens\":{},\"audio_tokens\":{}}},\"output_tokens\":{},\"total_tokens\":{}}}}}",
      quoted, prompt_tokens, prompt_tokens - std::min(prompt_tokens, audio_tokens), audio_tokens,
      output_tokens, prompt_tokens + output_tokens);
}

std::variant<std::vector<tokenizers::TokenId>, ApiError> parse_tokenize_request(std::string_view text,
                                                                                const ParseContext& ctx) {
  if (json_too_deep_at(text) != std::string_view::npos)
    return bad("", fmt::format("the request body is nested deeper than {} levels", kMaxJsonDepth));
  json body = json::parse(text.begin(), text.end(), nullptr, false);
  if (body.is_discarded() || !body.is_object()) return bad("", "the request body must be a JSON object");
  if (const auto it = body.find("model"); it != body.end() && !it->is_null()) {
    bool known = false;
    for (const auto& n : ctx.model_names) known |= it->is_string() && n == it->get<std::string>();
    if (!known) return ApiError{404, fmt::format("The model `{}` does not exist.", it->dump()), "model"};
  }
  if (body.contains("messages")) {
    std::string templated;
    if (auto e = parse_messages(body, templated)) return *e;
    return tokenizers::tokenize(templated);
  }
  const auto it = body.find("prompt");
  if (it == body.end() || !it->is_string())
    return bad("prompt", "'prompt' must be a string (or give 'messages')");
  return tokenizers::tokenize(it->get_ref<const std::string&>());
}

std::string usage_json(const Usage& u) {
  std::string details;
  if (u.reasoning_tokens)
    details = fmt::format(",\"completion_tokens_details\":{{\"reasoning_tokens\":{}}}", *u.reasoning_tokens);
  return fmt::format(
      "{{\"prompt_tokens\":{},\"total_tokens\":{},\"completion_tokens\":{},\"prompt_tokens_details\":{{"
      "\"cached_tokens\":{}}}{}}}",
      u.prompt_tokens, u.prompt_tokens + u.completion_tokens, u.completion_tokens, u.cached_tokens, details);
}

namespace {
std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  jsonout::append_string(out, s);
  return out;
}
}  // namespace

std::string completion_response(Api api, std::string_view id, std::int64_t created, std::string_view model,
                                const std::vector<ChoiceResult>& choices, const Usage& usage) {
  std::string out =
      fmt::format("{{\"id\":{},\"object\":\"{}\",\"created\":{},\"model\":{},\"choices\":[", json_quote(id),
                  api == Api::kChat ? "chat.completion" : "text_completion", created, json_quote(model));
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const auto& c = choices[i];
    if (i) out += ',';
    const std::string stop_reason = c.stop_reason ? json_quote(*c.stop_reason) : "null";
    const std::string_view logprobs = c.logprobs.empty() ? std::string_view("null") : c.logprobs;
    const std::string reasoning =
        c.reasoning.empty() ? "" : fmt::format("\"{}\":{},", c.reasoning_field, json_quote(c.reasoning));
    std::string tool_calls;
    if (!c.tool_calls.empty()) {
      tool_calls = ",\"tool_calls\":[";
      for (std::size_t j = 0; j < c.tool_calls.size(); ++j) {
        const auto& call = c.tool_calls[j];
        if (j) tool_calls += ',';
        tool_calls +=
            fmt::format("{{\"id\":{},\"type\":\"function\",\"function\":{{\"name\":{},\"arguments\":{}}}}}",
                        json_quote(call.id), json_quote(call.name), json_quote(call.arguments));
      }
      tool_calls += ']';
    }
    const std::string content = c.text.empty() && !c.tool_calls.empty() ? "null" : json_quote(c.text);
    if (api == Api::kChat)
      out += fmt::format(
          "{{\"index\":{},\"message\":{{\"role\":\"assistant\",{}\"content\":{}{}}},\"logprobs\":{},"
          "\"finish_reason\":\"{}\",\"stop_reason\":{}}}",
          i, reasoning, content, tool_calls, logprobs, c.finish_reason, stop_reason);
    else
      out += fmt::format(
          "{{\"index\":{},\"text\":{},\"logprobs\":{},\"finish_reason\":\"{}\",\"stop_reason\":{}}}", i,
          json_quote(c.text), logprobs, c.finish_reason, stop_reason);
  }
  out += "],\"usage\":" + usage_json(usage) + "}";
  return out;
}

std::uint64_t pooling_input_hash(const std::vector<tokenizers::TokenId>& tokens) {
  std::uint64_t h = 0x9e3779b97f4a7c15ull;
  for (const auto t : tokens) h = hash_combine64(h, t);
  return h;
}

std::string pooling_response(const GenerationRequest& r, const std::vector<std::uint64_t>& input_hashes,
                             std::string_view id, std::int64_t created, std::string_view model,
                             std::uint64_t prompt_tokens) {
  const std::string usage =
      fmt::format("{{\"prompt_tokens\":{},\"total_tokens\":{}}}", prompt_tokens, prompt_tokens);
  std::string out;
  if (r.api == Api::kEmbeddings) {
    out.reserve(64 + input_hashes.size() * (r.base64 ? r.dimensions * 4 / 3 + 80 : r.dimensions * 11 + 64));
    out += fmt::format("{{\"id\":{},\"object\":\"list\",\"created\":{},\"model\":{},\"data\":[",
                       json_quote(id), created, json_quote(model));
    std::vector<float> v(r.dimensions);
    for (std::size_t i = 0; i < input_hashes.size(); ++i) {
      // A unit vector drawn from the input's tokens.
      Rng rng(input_hashes[i]);
      double norm = 0;
      for (auto& x : v) {
        x = static_cast<float>(rng.uniform01() * 2.0 - 1.0);
        norm += static_cast<double>(x) * x;
      }
      const double scale = norm > 0 ? 1.0 / std::sqrt(norm) : 0.0;
      for (auto& x : v) x = static_cast<float>(x * scale);
      if (i) out += ',';
      out += fmt::format("{{\"index\":{},\"object\":\"embedding\",\"embedding\":", i);
      if (r.base64) {
        std::string bytes(v.size() * 4, '\0');
        for (std::size_t k = 0; k < v.size(); ++k) {
          std::uint32_t b;
          std::memcpy(&b, &v[k], 4);
          for (int j = 0; j < 4; ++j) bytes[k * 4 + j] = static_cast<char>((b >> (8 * j)) & 0xff);
        }
        // OpenSSL's encoder: 4 characters per 3 bytes, padded, no line breaks.
        std::string encoded(4 * ((bytes.size() + 2) / 3) + 1, '\0');
        const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(encoded.data()),
                                      reinterpret_cast<const unsigned char*>(bytes.data()),
                                      static_cast<int>(bytes.size()));
        encoded.resize(static_cast<std::size_t>(std::max(0, n)));
        out += '"';
        out += encoded;
        out += '"';
      } else {
        out += '[';
        for (std::size_t k = 0; k < v.size(); ++k) {
          if (k) out += ',';
          fmt::format_to(std::back_inserter(out), "{:.6g}", v[k]);
        }
        out += ']';
      }
      out += '}';
    }
    out += "],\"usage\":" + usage + "}";
    return out;
  }
  // Rerank: a score per document, highest first.
  std::vector<std::pair<double, std::size_t>> scores;
  for (std::size_t i = 0; i < input_hashes.size(); ++i)
    scores.emplace_back(Rng(input_hashes[i]).uniform01() * 0.998 + 0.001, i);
  std::stable_sort(scores.begin(), scores.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  if (r.top_n > 0 && r.top_n < scores.size()) scores.resize(r.top_n);
  out = fmt::format("{{\"id\":{},\"model\":{},\"usage\":{},\"results\":[", json_quote(id), json_quote(model),
                    usage);
  for (std::size_t k = 0; k < scores.size(); ++k)
    out += fmt::format("{}{{\"index\":{},\"relevance_score\":{:.6g}}}", k ? "," : "", scores[k].second,
                       scores[k].first);
  out += "]}";
  return out;
}

std::string stream_chunk(Api api, std::string_view id, std::int64_t created, std::string_view model,
                         std::uint32_t index, std::string_view text, bool first_chat_delta,
                         std::string_view finish_reason, std::string_view logprobs,
                         std::string_view chat_field) {
  const std::string finish = finish_reason.empty() ? "null" : fmt::format("\"{}\"", finish_reason);
  if (logprobs.empty()) logprobs = "null";
  if (api == Api::kTranscriptions)
    return fmt::format(
        "{{\"id\":{},\"object\":\"transcription.chunk\",\"created\":{},\"model\":{},\"choices\":[{{"
        "\"delta\":{{\"content\":{}}},\"finish_reason\":{},\"stop_reason\":null}}]}}",
        json_quote(id), created, json_quote(model), json_quote(text), finish);
  if (api == Api::kChat) {
    const std::string delta =
        first_chat_delta ? fmt::format("{{\"role\":\"assistant\",\"{}\":{}}}", chat_field, json_quote(text))
                         : fmt::format("{{\"{}\":{}}}", chat_field, json_quote(text));
    return fmt::format(
        "{{\"id\":{},\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[{{"
        "\"index\":{},"
        "\"delta\":{},\"logprobs\":{},\"finish_reason\":{}}}]}}",
        json_quote(id), created, json_quote(model), index, delta, logprobs, finish);
  }
  return fmt::format(
      "{{\"id\":{},\"object\":\"text_completion\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":{},"
      "\"text\":{},"
      "\"logprobs\":{},\"finish_reason\":{}}}]}}",
      json_quote(id), created, json_quote(model), index, json_quote(text), logprobs, finish);
}

std::string tool_call_chunk(std::string_view id, std::int64_t created, std::string_view model,
                            std::uint32_t choice_index, const std::vector<ToolCallDelta>& parts,
                            std::string_view finish_reason, std::string_view logprobs) {
  std::string delta = "{";
  if (!parts.empty()) {
    delta += "\"tool_calls\":[";
    for (std::size_t k = 0; k < parts.size(); ++k) {
      const auto& p = parts[k];
      if (k) delta += ',';
      if (p.header)
        delta += fmt::format(
            "{{\"index\":{},\"id\":{},\"type\":\"function\",\"function\":{{\"name\":{},\"arguments\":{}}}}}",
            p.index, json_quote(p.header->id), json_quote(p.header->name), json_quote(p.arguments));
      else
        delta += fmt::format("{{\"index\":{},\"function\":{{\"arguments\":{}}}}}", p.index,
                             json_quote(p.arguments));
    }
    delta += ']';
  }
  delta += '}';
  if (logprobs.empty()) logprobs = "null";
  const std::string finish = finish_reason.empty() ? "null" : fmt::format("\"{}\"", finish_reason);
  return fmt::format(
      "{{\"id\":{},\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[{{"
      "\"index\":{},\"delta\":{},\"logprobs\":{},\"finish_reason\":{}}}]}}",
      json_quote(id), created, json_quote(model), choice_index, delta, logprobs, finish);
}

std::string usage_chunk(Api api, std::string_view id, std::int64_t created, std::string_view model,
                        const Usage& usage) {
  return fmt::format(
      "{{\"id\":{},\"object\":\"{}\",\"created\":{},\"model\":{},\"choices\":[],\"usage\":{}}}",
      json_quote(id),
      api == Api::kChat             ? "chat.completion.chunk"
      : api == Api::kTranscriptions ? "transcription.chunk"
                                    : "text_completion",
      created, json_quote(model), usage_json(usage));
}

std::string response_object(std::string_view id, std::int64_t created, std::string_view model,
                            std::string_view status, std::string_view reasoning, std::string_view text,
                            const Usage* usage) {
  std::string output;
  const std::string rid(id.substr(std::min<std::size_t>(id.size(), 5)));  // after "resp_"
  if (!reasoning.empty())
    output += fmt::format(
        "{{\"type\":\"reasoning\",\"id\":\"rs_{}\",\"summary\":[],\"content\":[{{\"type\":\"reasoning_text\","
        "\"text\":{}}}],\"status\":\"completed\"}}",
        rid, json_quote(reasoning));
  if (status != "in_progress") {
    if (!output.empty()) output += ',';
    output += fmt::format(
        "{{\"type\":\"message\",\"id\":\"msg_{}\",\"role\":\"assistant\",\"status\":\"{}\","
        "\"content\":[{{"
        "\"type\":\"output_text\",\"text\":{},\"annotations\":[]}}]}}",
        rid, status == "incomplete" ? "incomplete" : "completed", json_quote(text));
  }
  std::string u = "null";
  if (usage)
    u = fmt::format(
        "{{\"input_tokens\":{},\"input_tokens_details\":{{\"cached_tokens\":{}}},\"output_tokens\":{},"
        "\"output_tokens_details\":{{\"reasoning_tokens\":{}}},\"total_tokens\":{}}}",
        usage->prompt_tokens, usage->cached_tokens, usage->completion_tokens,
        usage->reasoning_tokens.value_or(0), usage->prompt_tokens + usage->completion_tokens);
  return fmt::format(
      "{{\"id\":{},\"object\":\"response\",\"created_at\":{},\"model\":{},\"status\":\"{}\",\"incomplete_"
      "details\":{},"
      "\"output\":[{}],\"usage\":{}}}",
      json_quote(id), created, json_quote(model), status,
      status == "incomplete" ? "{\"reason\":\"max_output_tokens\"}" : "null", output, u);
}

std::string responses_event(std::string_view type, std::uint64_t sequence, std::string_view fields) {
  return fmt::format("event: {}\ndata: {{\"type\":\"{}\",\"sequence_number\":{}{}}}\n\n", type, type,
                     sequence, fields);
}

std::string sse_event(std::string_view json_text) {
  std::string out;
  out.reserve(json_text.size() + 8);
  out += "data: ";
  out += json_text;
  out += "\n\n";
  return out;
}

}  // namespace tokenscope::serve
