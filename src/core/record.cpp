#include "core/record.h"

#include <fmt/format.h>

#include <array>
#include <iterator>
#include <nlohmann/json.hpp>

namespace tokenscope {

namespace {
constexpr std::array<std::pair<Outcome, std::string_view>, 8> kOutcomeNames = {{
    {Outcome::kOk, "ok"},
    {Outcome::kHttpError, "http_error"},
    {Outcome::kTimeout, "timeout"},
    {Outcome::kConnectError, "connect_error"},
    {Outcome::kProtocolError, "protocol_error"},
    {Outcome::kValidationError, "validation_error"},
    {Outcome::kCancelled, "cancelled"},
    {Outcome::kRejected, "rejected"},
}};

void append_escaped(std::string& out, std::string_view s) {
  // nlohmann's dump() handles escaping (control characters, quotes, UTF-8).
  out += nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}
}  // namespace

std::string_view outcome_name(Outcome o) {
  for (const auto& [value, name] : kOutcomeNames)
    if (value == o) return name;
  return "unknown";
}

bool parse_outcome(std::string_view name, Outcome& out) {
  for (const auto& [value, n] : kOutcomeNames) {
    if (n == name) {
      out = value;
      return true;
    }
  }
  return false;
}

void RequestRecord::append_json(std::string& out) const {
  auto it = std::back_inserter(out);
  fmt::format_to(it, "{{\"id\":{},\"tenant\":", id);
  append_escaped(out, tenant);
  if (!task_class.empty()) {
    out += ",\"class\":";
    append_escaped(out, task_class);
  }
  fmt::format_to(it,
                 ",\"t_sched_ns\":{},\"t_send_ns\":{},\"t_headers_ns\":{},\"t_first_scheduled_ns\":{}"
                 ",\"t_first_token_ns\":{},\"t_last_token_ns\":{},\"t_close_ns\":{}"
                 ",\"prompt_tokens\":{},\"output_tokens\":{},\"output_tokens_client\":{}"
                 ",\"cached_tokens\":{},\"preemptions\":{},\"outcome\":\"{}\"",
                 t_sched, t_send, t_headers, t_first_scheduled, t_first_token, t_last_token,
                 t_close, prompt_tokens, output_tokens, output_tokens_client, cached_tokens,
                 preemptions, outcome_name(outcome));
  if (!detail.empty()) {
    out += ",\"detail\":";
    append_escaped(out, detail);
  }
  out += ",\"event_offsets_ns\":[";
  for (std::size_t i = 0; i < event_times.size(); ++i) {
    if (i) out += ',';
    fmt::format_to(it, "{}", event_times[i] - t_send);
  }
  out += ']';
  bool all_single = true;
  for (auto k : event_tokens) all_single &= (k == 1);
  if (!all_single) {
    out += ",\"event_tokens\":[";
    for (std::size_t i = 0; i < event_tokens.size(); ++i) {
      if (i) out += ',';
      fmt::format_to(it, "{}", event_tokens[i]);
    }
    out += ']';
  }
  out += '}';
}

}  // namespace tokenscope
