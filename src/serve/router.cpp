#include "serve/router.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace tokenscope::serve {

bool bearer_token_matches(std::string_view authorization, std::string_view key) {
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size()) return false;
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    char c = authorization[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != kScheme[i]) return false;
  }
  std::size_t at = kScheme.size();
  if (authorization[at] != ' ') return false;
  while (at < authorization.size() && authorization[at] == ' ') ++at;
  const std::string_view token = authorization.substr(at);
  // Every byte of the key is compared whatever the token holds.
  unsigned diff = token.size() == key.size() ? 0u : 1u;
  for (std::size_t i = 0; i < key.size(); ++i) {
    const auto t = i < token.size() ? static_cast<unsigned char>(token[i]) : 0u;
    diff |= t ^ static_cast<unsigned char>(key[i]);
  }
  return diff == 0;
}

Router::Router(ServingCore& core, ServeMetrics& metrics, FaultPlan& faults, RouterSettings settings)
    : core_(core), metrics_(metrics), faults_(faults), settings_(std::move(settings)) {}

net::HttpResponse Router::connection_error(int status, std::string_view message) {
  metrics_.on_http_response(status);
  net::HttpResponse r;
  r.status = status;
  r.body = error_body(ApiError{status, std::string(message), ""});
  return r;
}

void Router::reply(net::Responder& r, int status, std::string body, std::string content_type,
                   std::vector<net::Header> headers) {
  metrics_.on_http_response(status);
  net::HttpResponse resp;
  resp.status = status;
  resp.content_type = std::move(content_type);
  resp.body = std::move(body);
  resp.headers = std::move(headers);
  r.respond(std::move(resp));
}

void Router::reply_error(net::Responder& r, const ApiError& e, std::vector<net::Header> headers) {
  reply(r, e.status, error_body(e), "application/json", std::move(headers));
}

void Router::handle(net::HttpRequest req, std::shared_ptr<net::Responder> responder) {
  const std::string_view path = req.path();
  const bool get = req.method == "GET";
  const bool post = req.method == "POST";
  auto method_not_allowed = [&](std::string_view allowed) {
    reply_error(
        *responder,
        ApiError{405, fmt::format("method {} not allowed on {} (use {})", req.method, path, allowed), ""},
        {{"Allow", std::string(allowed)}});
  };

  if (path == "/health") {
    if (!get) return method_not_allowed("GET");
    return reply(*responder, 200, "", "");
  }
  if (!settings_.api_key.empty()) {
    if (!bearer_token_matches(req.header("authorization"), settings_.api_key))
      return reply_error(*responder,
                         ApiError{401, "missing or wrong API key (Authorization: Bearer ...)", ""},
                         {{"WWW-Authenticate", "Bearer"}});
  }
  if (path == "/metrics") {
    if (!get) return method_not_allowed("GET");
    return reply(*responder, 200, metrics_.render(), "text/plain; version=0.0.4; charset=utf-8");
  }
  if (path == "/perturbations") {
    if (!get) return method_not_allowed("GET");
    return reply(*responder, 200, core_.perturbations_json().dump());
  }
  if (path == "/v1/models") {
    if (!get) return method_not_allowed("GET");
    nlohmann::json data = nlohmann::json::array();
    const std::size_t served = settings_.parse.model_names.size() - settings_.lora_modules.size();
    for (std::size_t i = 0; i < served; ++i)
      data.push_back({{"id", settings_.parse.model_names[i]},
                      {"object", "model"},
                      {"created", settings_.created_unix},
                      {"owned_by", "tokenscope"},
                      {"root", settings_.parse.model_names.front()},
                      {"parent", nullptr},
                      {"max_model_len", settings_.parse.max_model_len}});
    for (const auto& [name, path] : settings_.lora_modules)
      data.push_back({{"id", name},
                      {"object", "model"},
                      {"created", settings_.created_unix},
                      {"owned_by", "tokenscope"},
                      {"root", path},
                      {"parent", settings_.parse.model_names.front()},
                      {"max_model_len", settings_.parse.max_model_len}});
    return reply(*responder, 200, nlohmann::json{{"object", "list"}, {"data", data}}.dump());
  }
  if (path == "/tokenize") {
    if (!post) return method_not_allowed("POST");
    auto parsed = parse_tokenize_request(req.body, settings_.parse);
    if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(*responder, *e);
    const auto& tokens = std::get<std::vector<tokenizers::TokenId>>(parsed);
    return reply(
        *responder, 200,
        nlohmann::json{
            {"count", tokens.size()}, {"max_model_len", settings_.parse.max_model_len}, {"tokens", tokens}}
            .dump());
  }
  Api api;
  if (path == "/v1/completions")
    api = Api::kCompletions;
  else if (path == "/v1/chat/completions")
    api = Api::kChat;
  else if (path == "/v1/responses")
    api = Api::kResponses;
  else if (path == "/v1/embeddings")
    api = Api::kEmbeddings;
  else if (path == "/v1/rerank" || path == "/rerank")
    api = Api::kRerank;
  else if (path == "/v1/audio/transcriptions")
    api = Api::kTranscriptions;
  else
    return reply_error(*responder, ApiError{404, fmt::format("no route for {} {}", req.method, path), ""});
  if (!post) return method_not_allowed("POST");
  if (!core_.accepting())
    return reply_error(*responder, ApiError{503, "the server is shutting down", ""}, {{"Retry-After", "1"}});
  auto parsed = api == Api::kTranscriptions
                    ? parse_transcription_request(req.header("content-type"), req.body, settings_.parse)
                : is_pooling(api) ? parse_pooling_request(api, req.body, settings_.parse)
                                  : parse_generation_request(api, req.body, settings_.parse);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(*responder, *e);
  auto& request = std::get<GenerationRequest>(parsed);
  request.client_request_id = std::string(req.header("x-request-id").substr(0, 128));
  const Fault fault = faults_.enabled() ? faults_.next() : Fault{};
  // An injected HTTP error names the response id the request would have had,
  // as the emission trace does, so a client's outcome can be matched to it.
  if (fault.kind == FaultKind::kHttp5xx) {
    const std::string id = core_.new_response_id(api);
    core_.record_fault(fault.kind, id, request.client_request_id);
    return reply_error(*responder, ApiError{500, "injected fault: internal server error (" + id + ")", ""});
  }
  if (fault.kind == FaultKind::kHttp429) {
    const std::string id = core_.new_response_id(api);
    core_.record_fault(fault.kind, id, request.client_request_id);
    return reply_error(*responder, ApiError{429, "injected fault: too many requests (" + id + ")", ""},
                       {{"Retry-After", "1"}});
  }
  core_.submit(std::move(request), std::move(responder), fault);
}

}  // namespace tokenscope::serve
