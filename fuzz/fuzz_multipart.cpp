// libFuzzer target: multipart/form-data uploads (net/multipart.h) and the
// /v1/audio/transcriptions request read from them (serve/openai.h). The
// input's first line is the Content-Type, the rest the body. Every input is
// parsed into parts that lie inside the body and obey the limits, or refused
// with a message; a transcription request is consistent or an error with a
// status. The parts of a parse are built again and parse back to themselves.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/catalog.h"
#include "net/multipart.h"
#include "serve/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t eol = input.find('\n');
  const std::string_view content_type = input.substr(0, eol);
  const std::string_view body = eol == std::string_view::npos ? std::string_view() : input.substr(eol + 1);
  net::MultipartLimits limits;
  limits.max_parts = 16;
  limits.max_header_bytes = 512;
  limits.max_field_bytes = 256;
  limits.max_file_bytes = 4096;
  const net::MultipartResult r = net::parse_multipart(content_type, body, limits);
  if (r.ok()) {
    if (r.parts.size() > limits.max_parts) __builtin_trap();
    std::vector<net::FormPart> parts;
    for (const auto& p : r.parts) {
      if (p.name.empty()) __builtin_trap();
      if (p.data.data() < body.data() || p.data.data() + p.data.size() > body.data() + body.size())
        __builtin_trap();
      if (p.data.size() > (p.has_filename ? limits.max_file_bytes : limits.max_field_bytes)) __builtin_trap();
      parts.push_back({p.name, p.data, p.filename, p.content_type});
    }
    // Built again (names without '"', CR, LF survive as they are): the same parts.
    const std::string b = net::multipart_boundary(parts, size);
    const std::string again = net::multipart_body(parts, b);
    const net::MultipartResult back = net::parse_multipart(net::multipart_content_type(b), again);
    if (!back.ok() || back.parts.size() != r.parts.size()) __builtin_trap();
    for (std::size_t i = 0; i < parts.size(); ++i)
      if (back.parts[i].data != r.parts[i].data) __builtin_trap();
  } else if (r.error.empty() || !r.parts.empty()) {
    __builtin_trap();
  }
  static const engine::Catalog catalog = engine::Catalog::builtin();
  static const engine::ModelSpec audio_model = catalog.model("qwen2-audio-7b");
  serve::ParseContext ctx{{"m", "alias"}, 8192, 16};
  ctx.model = &audio_model;
  const auto t = serve::parse_transcription_request(content_type, body, ctx);
  if (const auto* req = std::get_if<serve::GenerationRequest>(&t)) {
    if (req->prompts.size() != 1 || req->prompts.front().empty() || req->media.size() != 1 ||
        !req->media.front().audio || req->max_tokens < 1 ||
        req->prompts.front().size() + req->media_tokens + req->max_tokens > ctx.max_model_len ||
        req->audio_seconds > 600)
      __builtin_trap();
    (void)serve::transcription_response(*req, "text", 10, req->media_tokens, req->max_tokens);
  } else {
    const auto& e = std::get<serve::ApiError>(t);
    if (e.status < 400 || e.status > 599 || e.message.empty()) __builtin_trap();
  }
  return 0;
}
