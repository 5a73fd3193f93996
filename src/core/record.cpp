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

// Long by nature: one field after another of the requests.jsonl line.
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
  if (!model.empty()) {
    key(out, "model");
    append_escaped(out, model);
  }
  if (session >= 0) {
    key(out, "session");
    append_int(out, session);
    key(out, "turn");
    append_uint(out, turn);
  }
  if (replica >= 0) {
    key(out, "replica");
    append_int(out, replica);
  }
  if (task >= 0) {
    key(out, "task");
    append_int(out, task);
    key(out, "step");
    append_escaped(out, step);
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
  {
    // The fields every record has, written in one go (the keys are 210
    // bytes, each integer at most 20).
    BoundedWriter w(out, 210 + 12 * 20);
    w.lit(",\"t_sched_ns\":").i(t_sched);
    w.lit(",\"t_send_ns\":").i(t_send);
    w.lit(",\"t_headers_ns\":").i(t_headers);
    w.lit(",\"t_first_scheduled_ns\":").i(t_first_scheduled);
    w.lit(",\"t_first_token_ns\":").i(t_first_token);
    w.lit(",\"t_last_token_ns\":").i(t_last_token);
    w.lit(",\"t_close_ns\":").i(t_close);
    w.lit(",\"prompt_tokens\":").i(prompt_tokens);
    w.lit(",\"output_tokens\":").i(output_tokens);
    w.lit(",\"output_tokens_client\":").i(output_tokens_client);
    w.lit(",\"cached_tokens\":").i(cached_tokens);
    w.lit(",\"preemptions\":").i(preemptions);
  }
  if (server_prompt_ms >= 0) {
    key(out, "server_prompt_ms");
    append_fixed(out, server_prompt_ms, 3);
    key(out, "server_prompt_evaluated");
    append_int(out, server_prompt_evaluated);
    key(out, "server_decode_ms");
    append_fixed(out, server_decode_ms, 3);
  }
  if (inputs >= 0) {
    key(out, "inputs");
    append_int(out, inputs);
  }
  if (audio_ms >= 0) {
    key(out, "audio_ms");
    append_int(out, audio_ms);
  }
  if (reasoning_tokens >= 0) {
    key(out, "reasoning_tokens");
    append_int(out, reasoning_tokens);
    key(out, "t_first_answer_ns");
    append_int(out, t_first_answer);
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
  if (cancel_planned) {
    key(out, "cancel_planned");
    out += "true";
  }
  key(out, "event_offsets_ns");
  {
    // The longest part of the line (a request's every output event): written
    // in place, 21 bytes at most per number and its comma.
    jsonout::BoundedWriter w(out, 2 + 21 * event_times.size());
    w.ch('[');
    for (std::size_t i = 0; i < event_times.size(); ++i) {
      if (i) w.ch(',');
      w.i(event_times[i] - t_send);
    }
    w.ch(']');
  }
  bool all_single = true;
  for (auto k : event_tokens) all_single &= (k == 1);
  if (!all_single) {
    key(out, "event_tokens");
    jsonout::BoundedWriter w(out, 2 + 21 * event_tokens.size());
    w.ch('[');
    for (std::size_t i = 0; i < event_tokens.size(); ++i) {
      if (i) w.ch(',');
      w.u(event_tokens[i]);
    }
    w.ch(']');
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
  // Field names are documented in docs/metrics.md ("Step record"). At most
  // 21 integers of 20 bytes, a fixed number of 26 and 360 bytes of names:
  // 1024 bound the line.
  jsonout::BoundedWriter w(o, 1024);
  w.lit("{\"step\":").u(index);
  w.lit(",\"t_ns\":").u(static_cast<std::uint64_t>(t));
  w.lit(",\"dur_ns\":").u(static_cast<std::uint64_t>(dur));
  w.lit(",\"seqs\":").u(seqs);
  w.lit(",\"prefill_tokens\":").u(prefill_tokens);
  w.lit(",\"decode_tokens\":").u(decode_tokens);
  w.lit(",\"running\":").u(running);
  w.lit(",\"waiting\":").u(waiting);
  w.lit(",\"kv_usage\":").fixed(kv_usage, 6);
  w.lit(",\"kv_blocks\":").u(kv_blocks);
  w.lit(",\"query_tokens\":").u(query_tokens);
  w.lit(",\"hit_tokens\":").u(hit_tokens);
  w.lit(",\"preemptions\":").u(preemptions);
  w.lit(",\"tenant_switches\":").u(tenant_switches);
  w.lit(",\"swap_out_bytes\":").u(swap_out_bytes);
  w.lit(",\"swap_in_bytes\":").u(swap_in_bytes);
  w.lit(",\"host_kv_blocks\":").u(host_kv_blocks);
  w.lit(",\"host_kv_evictions\":").u(host_kv_evictions);
  w.lit(",\"host_kv_recomputed_blocks\":").u(host_kv_recomputed_blocks);
  if (has_perturbations) {
    w.lit(",\"perturbation_ns\":").u(static_cast<std::uint64_t>(perturbation_ns));
    w.lit(",\"stolen_ns\":").u(static_cast<std::uint64_t>(stolen_ns));
  }
  w.ch('}');
}

}  // namespace tokenscope
