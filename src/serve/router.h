// The HTTP routes of `tokenscope serve` (docs/serve.md):
//   POST /v1/completions, POST /v1/chat/completions   generation, streamed or not
//   POST /v1/responses                                 the Responses API, typed events or whole
//   POST /v1/embeddings, POST /v1/rerank (/rerank)     pooling: a prefill per input
//   POST /v1/audio/transcriptions                      a WAV upload (multipart) to its transcript
//   GET  /v1/models                                    the served model
//   POST /tokenize                                     vLLM-style token counts
//   GET  /metrics                                      Prometheus text, vLLM names
//   GET  /perturbations                                the injected perturbations and what they did
//   GET  /health                                       200, no authentication
// With an API key, every route but /health needs "Authorization: Bearer KEY".
// Errors use the OpenAI body {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <memory>
#include <string>

#include "net/http.h"
#include "serve/faults.h"
#include "serve/metrics.h"
#include "serve/openai.h"
#include "serve/serving_core.h"

namespace tokenscope::serve {

struct RouterSettings {
  ParseContext parse;
  std::string api_key;  // empty: no authentication
  std::int64_t created_unix = 0;
  // LoRA adapters ({name, path}; their names are in parse.model_names too):
  // listed by /v1/models with the base model as parent, as vLLM lists them.
  std::vector<std::pair<std::string, std::string>> lora_modules;
};

// Whether an Authorization header carries `key` as its bearer token: the
// scheme "Bearer" in any case (RFC 7235 section 2.1), one or more spaces,
// then the token compared in time that depends on the lengths only, never on
// where the first differing byte is (no timing oracle for guessing the key
// byte by byte).
bool bearer_token_matches(std::string_view authorization, std::string_view key);

class Router final : public net::HttpHandler {
 public:
  Router(ServingCore& core, ServeMetrics& metrics, FaultPlan& faults, RouterSettings settings);
  void handle(net::HttpRequest request, std::shared_ptr<net::Responder> responder) override;
  net::HttpResponse connection_error(int status, std::string_view message) override;

 private:
  void reply(net::Responder& r, int status, std::string body, std::string content_type = "application/json",
             std::vector<net::Header> headers = {});
  void reply_error(net::Responder& r, const ApiError& e, std::vector<net::Header> headers = {});

  ServingCore& core_;
  ServeMetrics& metrics_;
  FaultPlan& faults_;
  RouterSettings settings_;
};

}  // namespace tokenscope::serve
