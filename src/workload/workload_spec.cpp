#include "workload/workload_spec.h"

#include <cmath>

#include "core/error.h"
#include "core/random.h"
#include "workload/arrivals.h"
#include "workload/lengths.h"
#include "workload/trace_readers.h"

namespace tokenscope::workload {

LengthDistribution parse_input_len(std::string_view text) {
  return parse_length_spec(text, "--input-len", LengthRole::kInput);
}
LengthDistribution parse_output_len(std::string_view text) {
  return parse_length_spec(text, "--output-len", LengthRole::kOutput);
}

nlohmann::json to_json(const WorkloadSpec& o) {
  auto opt = [](const std::optional<std::uint64_t>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  return nlohmann::json{
      {"trace", o.trace.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.trace)},
      {"trace_format", o.trace_format},
      {"skip_bad_rows", o.skip_bad_rows},
      {"max_requests", o.max_requests},
      {"arrival", o.arrival.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.arrival)},
      {"rate_rps", std::isfinite(o.rate_rps) ? nlohmann::json(o.rate_rps) : nlohmann::json("inf")},
      {"burstiness", o.burstiness},
      {"time_scale", o.time_scale},
      {"jitter_bucket_ms", o.jitter_bucket_ms},
      {"num_requests", o.num_requests},
      {"duration_s", o.duration_s},
      {"input_len", o.input_len.spec},
      {"output_len", o.output_len.spec},
      {"prefix_groups", o.prefix_groups},
      {"prefix_tokens", o.prefix_tokens},
      {"tenants", o.tenants},
      {"seed", o.seed},
      {"seed_arrival", opt(o.seed_arrival)},
      {"seed_input_len", opt(o.seed_input_len)},
      {"seed_output_len", opt(o.seed_output_len)},
      {"seed_prefix", opt(o.seed_prefix)},
      {"seed_tenant", opt(o.seed_tenant)},
      {"seed_tokens", opt(o.seed_tokens)}};
}

BuiltWorkload build_workload(const WorkloadSpec& o) {
  BuiltWorkload b;
  b.seeds = WorkloadSeeds::from_master(o.seed);
  if (o.seed_arrival) b.seeds.arrival = *o.seed_arrival;
  if (o.seed_input_len) b.seeds.input_len = *o.seed_input_len;
  if (o.seed_output_len) b.seeds.output_len = *o.seed_output_len;
  if (o.seed_prefix) b.seeds.prefix = *o.seed_prefix;
  if (o.seed_tenant) b.seeds.tenant = *o.seed_tenant;
  if (o.seed_tokens) b.seeds.tokens = *o.seed_tokens;

  ArrivalSettings arrival;
  arrival.rate_rps = o.rate_rps;
  arrival.burstiness = o.burstiness;
  arrival.time_scale = o.time_scale;
  arrival.jitter_bucket_ms = o.jitter_bucket_ms;
  const LengthDistribution& output_len = o.output_len;

  if (o.trace.empty()) {
    SyntheticSettings s;
    arrival.kind = parse_arrival_kind(o.arrival.empty() ? "poisson" : o.arrival);
    if (arrival.kind == ArrivalKind::kTrace) throw UsageError("--arrival trace needs --trace FILE");
    s.arrival = arrival;
    s.num_requests = o.num_requests;
    s.duration_s = o.num_requests > 0 ? 0.0 : o.duration_s;
    s.input = o.input_len;
    s.output = output_len;
    s.prefix_groups = o.prefix_groups;
    s.prefix_tokens = o.prefix_tokens;
    s.tenants = o.tenants;
    b.w = make_synthetic(s, b.seeds);
  } else {
    TraceReadOptions r;
    r.format = parse_trace_format(o.trace_format);
    r.skip_bad_rows = o.skip_bad_rows;
    r.max_rows = o.max_requests;
    b.w = read_trace(o.trace, r);
    b.w.token_seed = b.seeds.tokens;
    arrival.kind =
        parse_arrival_kind(o.arrival.empty() ? (b.w.has_timestamps ? "trace" : "poisson") : o.arrival);
    Rng rng(b.seeds.arrival);
    apply_arrivals(b.w, arrival, rng);
    fill_output_lengths(b.w, output_len, b.seeds.output_len);
    if (o.tenants > 1) assign_tenants(b.w, o.tenants, b.seeds.tenant);
  }
  if (o.max_requests > 0 && b.w.requests.size() > o.max_requests) b.w.requests.resize(o.max_requests);
  b.effective = {{"description", b.w.description},
                 {"requests", b.w.requests.size()},
                 {"arrival", arrival_kind_name(arrival.kind)},
                 {"tenants", b.w.tenants},
                 {"rows_read", b.w.read_report.rows_read},
                 {"rows_skipped", b.w.read_report.rows_skipped},
                 {"skipped_examples", b.w.read_report.skipped_examples},
                 {"seeds",
                  {{"arrival", b.seeds.arrival},
                   {"input_len", b.seeds.input_len},
                   {"output_len", b.seeds.output_len},
                   {"prefix", b.seeds.prefix},
                   {"tenant", b.seeds.tenant},
                   {"tokens", b.seeds.tokens}}}};
  return b;
}

}  // namespace tokenscope::workload
