#include "bench/requests_csv.h"

#include "core/json_out.h"

namespace tokenscope::bench {

namespace {
void append_csv_field(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    if (c == '"') out += '"';
    out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  out += '"';
}

}  // namespace

const std::string_view kRequestsCsvHeader =
    "id,tenant,class,session,turn,warmup,outcome,http_status,t_sched_ns,t_send_ns,t_first_token_ns,"
    "t_last_token_ns,t_close_ns,prompt_tokens,output_tokens,output_tokens_client,cached_tokens,ttft_ms,"
    "ttft_sched_ms,tpot_ms,e2e_ms,send_lag_ms,reasoning_tokens,ttfo_ms,task,step,detail";

void append_csv_row(std::string& out, const RequestRecord& r) {
  using namespace jsonout;
  auto ms = [&](Nanos a, Nanos b) {
    if (a < 0 || b < 0) return;
    append_fixed(out, nanos_to_ms(a - b), 4);
  };
  append_uint(out, r.id);
  out += ',';
  append_csv_field(out, r.tenant);
  out += ',';
  append_csv_field(out, r.task_class);
  out += ',';
  if (r.session >= 0) append_int(out, r.session);
  out += ',';
  append_uint(out, r.turn);
  out += r.warmup ? ",1," : ",0,";
  out += outcome_name(r.outcome);
  out += ',';
  append_int(out, r.http_status);
  for (Nanos t : {r.t_sched, r.t_send, r.t_first_token, r.t_last_token, r.t_close}) {
    out += ',';
    append_int(out, t);
  }
  for (std::int64_t v : {r.prompt_tokens, r.output_tokens, r.output_tokens_client, r.cached_tokens}) {
    out += ',';
    append_int(out, v);
  }
  out += ',';
  ms(r.t_first_token, r.t_send);
  out += ',';
  ms(r.t_first_token, r.t_sched);
  out += ',';
  if (r.output_tokens > 1 && r.t_first_token >= 0)
    append_fixed(out,
                 nanos_to_ms(r.t_last_token - r.t_first_token) / static_cast<double>(r.output_tokens - 1), 4);
  out += ',';
  ms(r.t_last_token, r.t_send);
  out += ',';
  ms(r.t_send, r.t_sched);
  out += ',';
  append_int(out, r.reasoning_tokens);
  out += ',';
  ms(r.first_answer(), r.t_send);
  out += ',';
  if (r.task >= 0) append_int(out, r.task);  // an agentic task's model call: its task and step
  out += ',';
  if (r.task >= 0) append_csv_field(out, r.step);
  out += ',';
  append_csv_field(out, r.detail);
}

}  // namespace tokenscope::bench
