// One-off HTTP requests outside the measured load: model discovery
// (GET /v1/models), prompt-length checks (POST /tokenize), scrapes. Blocking,
// on a private io_context, with the same client (and TLS settings) as the load.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "net/http_client.h"

namespace tokenscope::net {

struct FetchResult {
  int status = 0;     // 0 when no response came
  std::string body;   // up to max_body_bytes
  std::string error;  // empty on success (any status), else why no response came
  bool ok() const { return error.empty() && status >= 200 && status < 300; }
};

struct FetchRequest {
  std::string method = "GET";
  std::string path;  // appended to the endpoint's base path, e.g. "/v1/models"
  std::string body;  // sent with Content-Type: application/json when not empty
  std::vector<std::pair<std::string, std::string>> headers;
  double timeout_s = 30.0;
  std::size_t max_body_bytes = 16u << 20;
  // Past max_body_bytes, end the exchange at once with the error "the answer
  // is over N bytes" (a server that streams without end then costs neither
  // the timeout nor the reading); otherwise the body is cut and the rest read.
  bool abandon_over_cap = false;
};

FetchResult fetch(const Endpoint& endpoint, const ClientOptions& options, const FetchRequest& request);

}  // namespace tokenscope::net
