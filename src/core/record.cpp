#include "core/record.h"
#include "core/step_record.h"

#include <algorithm>

#include "core/json_out.h"

#include <array>
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
  // Plain ASCII (tenant and class names, ids): escaped in place. Anything
  // else (server text in a detail) goes through nlohmann's dump(), which
  // replaces invalid UTF-8.
  bool ascii = true;
  for (char c : s) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) return jsonout::append_string(out, s);
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
  using namespace jsonout;
  out += "{\"id\":";
  append_uint(out, id);
  key(out, "tenant");
  append_escaped(out, tenant);
  if (!task_class.empty()) {
    key(out, "class");
    append_escaped(out, task_class);
  }
  if (session >= 0) {
    key(out, "session");
    append_int(out, session);
    key(out, "turn");
    append_uint(out, turn);
  }
  if (warmup) {
    key(out, "warmup");
    out += "true";
  }
  if (prompt_tokens_planned >= 0) {
    key(out, "prompt_tokens_planned");
    append_int(out, prompt_tokens_planned);
  }
  if (output_tokens_planned >= 0) {
    key(out, "output_tokens_planned");
    append_int(out, output_tokens_planned);
  }
  if (t_dispatch >= 0) {
    key(out, "t_dispatch_ns");
    append_int(out, t_dispatch);
  }
  if (http_status >= 0) {
    key(out, "http_status");
    append_int(out, http_status);
  }
  if (!response_id.empty()) {
    key(out, "response_id");
    append_escaped(out, response_id);
  }
  const std::pair<std::string_view, std::int64_t> fields[] = {
      {"t_sched_ns", t_sched},
      {"t_send_ns", t_send},
      {"t_headers_ns", t_headers},
      {"t_first_scheduled_ns", t_first_scheduled},
      {"t_first_token_ns", t_first_token},
      {"t_last_token_ns", t_last_token},
      {"t_close_ns", t_close},
      {"prompt_tokens", prompt_tokens},
      {"output_tokens", output_tokens},
      {"output_tokens_client", output_tokens_client},
      {"cached_tokens", cached_tokens},
      {"preemptions", preemptions},
  };
  for (const auto& [name, value] : fields) {
    key(out, name);
    append_int(out, value);
  }
  if (server_prompt_ms >= 0) {
    key(out, "server_prompt_ms");
    append_fixed(out, server_prompt_ms, 3);
    key(out, "server_prompt_evaluated");
    append_int(out, server_prompt_evaluated);
    key(out, "server_decode_ms");
    append_fixed(out, server_decode_ms, 3);
  }
  if (logprobs) {
    key(out, "logprobs");
    logprobs->append_json(out);
  }
  if (output_tokens_counted_by_client) {
    key(out, "output_tokens_from");
    out += "\"client\"";
  }
  key(out, "outcome");
  out += '"';
  out += outcome_name(outcome);
  out += '"';
  if (!detail.empty()) {
    key(out, "detail");
    append_escaped(out, detail);
  }
  key(out, "event_offsets_ns");
  out += '[';
  for (std::size_t i = 0; i < event_times.size(); ++i) {
    if (i) out += ',';
    append_int(out, event_times[i] - t_send);
  }
  out += ']';
  bool all_single = true;
  for (auto k : event_tokens) all_single &= (k == 1);
  if (!all_single) {
    key(out, "event_tokens");
    out += '[';
    for (std::size_t i = 0; i < event_tokens.size(); ++i) {
      if (i) out += ',';
      append_uint(out, event_tokens[i]);
    }
    out += ']';
  }
  if (events_dropped > 0) {
    key(out, "events_dropped");
    append_uint(out, events_dropped);
    key(out, "dropped_event_tokens");
    append_uint(out, dropped_event_tokens);
    if (dropped_gaps_ns) {
      key(out, "dropped_gaps_ns");
      out += dropped_gaps_ns->to_json().dump();
    }
  }
  out += '}';
}

Nanos RequestRecord::start() const {
  Nanos t = -1;
  for (Nanos v : {t_sched, t_dispatch, t_send, t_headers, t_first_token, t_last_token, t_close})
    if (v >= 0 && (t < 0 || v < t)) t = v;
  if (!event_times.empty() && (t < 0 || event_times.front() < t)) t = event_times.front();
  return t;
}

Nanos RequestRecord::end() const {
  Nanos t = -1;
  for (Nanos v : {t_sched, t_dispatch, t_send, t_headers, t_first_token, t_last_token, t_close})
    t = std::max(t, v);
  for (Nanos v : event_times) t = std::max(t, v);
  return t;
}

Nanos RequestRecord::first_token() const {
  if (t_first_token >= 0) return t_first_token;
  return event_times.empty() ? -1 : *std::min_element(event_times.begin(), event_times.end());
}

Nanos RequestRecord::last_token() const {
  if (t_last_token >= 0) return t_last_token;
  return event_times.empty() ? -1 : *std::max_element(event_times.begin(), event_times.end());
}

void StepRecord::append_json(std::string& o) const {
  using jsonout::append_uint;
  // Field names are documented in docs/metrics.md ("Step record").
  o += "{\"step\":";
  append_uint(o, index);
  o += ",\"t_ns\":";
  append_uint(o, static_cast<std::uint64_t>(t));
  o += ",\"dur_ns\":";
  append_uint(o, static_cast<std::uint64_t>(dur));
  o += ",\"seqs\":";
  append_uint(o, seqs);
  o += ",\"prefill_tokens\":";
  append_uint(o, prefill_tokens);
  o += ",\"decode_tokens\":";
  append_uint(o, decode_tokens);
  o += ",\"running\":";
  append_uint(o, running);
  o += ",\"waiting\":";
  append_uint(o, waiting);
  o += ",\"kv_usage\":";
  jsonout::append_fixed(o, kv_usage, 6);
  o += ",\"kv_blocks\":";
  append_uint(o, kv_blocks);
  o += ",\"query_tokens\":";
  append_uint(o, query_tokens);
  o += ",\"hit_tokens\":";
  append_uint(o, hit_tokens);
  o += ",\"preemptions\":";
  append_uint(o, preemptions);
  o += ",\"tenant_switches\":";
  append_uint(o, tenant_switches);
  o += ",\"swap_out_bytes\":";
  append_uint(o, swap_out_bytes);
  o += ",\"swap_in_bytes\":";
  append_uint(o, swap_in_bytes);
  o += ",\"host_kv_blocks\":";
  append_uint(o, host_kv_blocks);
  o += ",\"host_kv_evictions\":";
  append_uint(o, host_kv_evictions);
  o += ",\"host_kv_recomputed_blocks\":";
  append_uint(o, host_kv_recomputed_blocks);
  if (has_perturbations) {
    o += ",\"perturbation_ns\":";
    append_uint(o, static_cast<std::uint64_t>(perturbation_ns));
    o += ",\"stolen_ns\":";
    append_uint(o, static_cast<std::uint64_t>(stolen_ns));
  }
  o += '}';
}

}  // namespace tokenscope
