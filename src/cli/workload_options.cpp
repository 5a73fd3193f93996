#include "cli/workload_options.h"

#include "core/error.h"
#include "workload/arrivals.h"
#include "workload/trace_readers.h"

namespace tokenscope::cli {

void add_workload_options(CLI::App* app, WorkloadOptions& o) {
  const char* W = "Workload";
  app->add_option("--trace", o.trace,
                  "Trace file to replay (Azure CSV, Mooncake JSONL, ShareGPT JSON, native JSONL); "
                  "without it the workload is synthetic")
      ->group(W);
  app->add_option("--trace-format", o.trace_format, "auto|azure|mooncake|sharegpt|native")
      ->capture_default_str()
      ->group(W);
  app->add_flag("--skip-bad-rows", o.skip_bad_rows, "Skip and count malformed trace rows instead of failing")
      ->group(W);
  app->add_option("--max-requests", o.max_requests, "Use at most N requests of the trace (0: all)")
      ->capture_default_str()
      ->group(W);
  app->add_option(
         "--arrival", o.arrival,
         "poisson|gamma|constant|trace [default: trace when the trace has timestamps, else poisson]; "
         "anything but trace replays the trace in file order with fresh timing")
      ->group(W);
  app->add_option("--rate", o.rate_rps, "Arrival rate, requests/s (poisson, gamma, constant)")
      ->capture_default_str()
      ->group(W);
  app->add_option("--burstiness", o.burstiness, "Gamma shape: 1 = Poisson, < 1 burstier (CV = 1/sqrt(B))")
      ->capture_default_str()
      ->group(W);
  app->add_option("--time-scale", o.time_scale, "Trace replay speed-up: 2 = twice as fast")
      ->capture_default_str()
      ->group(W);
  app->add_option("--jitter-bucket-ms", o.jitter_bucket_ms,
                  "Trace replay: spread each request uniformly within this bucket, ms (Mooncake: 3000)")
      ->capture_default_str()
      ->group(W);
  app->add_option("--num-requests", o.num_requests, "Synthetic: number of requests (overrides --duration-s)")
      ->group(W);
  app->add_option("--duration-s", o.duration_s, "Synthetic: schedule length, s")
      ->capture_default_str()
      ->group(W);
  app->add_option("--input-len", o.input_len,
                  "Prompt tokens: fixed:N | uniform:MIN:MAX | lognormal:MEAN:SIGMA | empirical:FILE [:max=N]")
      ->capture_default_str()
      ->group(W);
  app->add_option("--output-len", o.output_len,
                  "Output tokens, same forms (also for traces without output lengths)")
      ->capture_default_str()
      ->group(W);
  app->add_option("--prefix-groups", o.prefix_groups, "Synthetic: shared-prefix groups (0: none)")
      ->capture_default_str()
      ->group(W);
  app->add_option("--prefix-tokens", o.prefix_tokens, "Synthetic: shared prefix length per group, tokens")
      ->capture_default_str()
      ->group(W);
  app->add_option("--tenants", o.tenants,
                  "Spread requests uniformly over N tenants (unless the trace names them)")
      ->capture_default_str()
      ->group(W);
  app->add_option("--seed", o.seed, "Master seed; each random dimension derives its own")
      ->capture_default_str()
      ->group(W);
  app->add_option("--seed-arrival", o.seed_arrival, "Override the arrival-time seed")->group(W);
  app->add_option("--seed-input-len", o.seed_input_len, "Override the input-length seed")->group(W);
  app->add_option("--seed-output-len", o.seed_output_len, "Override the output-length seed")->group(W);
  app->add_option("--seed-prefix", o.seed_prefix, "Override the prefix-group seed")->group(W);
  app->add_option("--seed-tenant", o.seed_tenant, "Override the tenant-assignment seed")->group(W);
  app->add_option("--seed-tokens", o.seed_tokens, "Override the prompt-token seed")->group(W);
}

nlohmann::json workload_options_json(const WorkloadOptions& o) {
  auto opt = [](const std::optional<std::uint64_t>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  return nlohmann::json{{"trace", o.trace.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.trace)},
                        {"trace_format", o.trace_format},
                        {"skip_bad_rows", o.skip_bad_rows},
                        {"max_requests", o.max_requests},
                        {"arrival", o.arrival.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.arrival)},
                        {"rate_rps", o.rate_rps},
                        {"burstiness", o.burstiness},
                        {"time_scale", o.time_scale},
                        {"jitter_bucket_ms", o.jitter_bucket_ms},
                        {"num_requests", o.num_requests},
                        {"duration_s", o.duration_s},
                        {"input_len", o.input_len},
                        {"output_len", o.output_len},
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

BuiltWorkload build_workload(const WorkloadOptions& o) {
  BuiltWorkload b;
  b.seeds = workload::WorkloadSeeds::from_master(o.seed);
  if (o.seed_arrival) b.seeds.arrival = *o.seed_arrival;
  if (o.seed_input_len) b.seeds.input_len = *o.seed_input_len;
  if (o.seed_output_len) b.seeds.output_len = *o.seed_output_len;
  if (o.seed_prefix) b.seeds.prefix = *o.seed_prefix;
  if (o.seed_tenant) b.seeds.tenant = *o.seed_tenant;
  if (o.seed_tokens) b.seeds.tokens = *o.seed_tokens;

  workload::ArrivalSettings arrival;
  arrival.rate_rps = o.rate_rps;
  arrival.burstiness = o.burstiness;
  arrival.time_scale = o.time_scale;
  arrival.jitter_bucket_ms = o.jitter_bucket_ms;
  const auto output_len =
      workload::parse_length_spec(o.output_len, "--output-len", workload::LengthRole::kOutput);

  if (o.trace.empty()) {
    workload::SyntheticSettings s;
    arrival.kind = workload::parse_arrival_kind(o.arrival.empty() ? "poisson" : o.arrival);
    if (arrival.kind == workload::ArrivalKind::kTrace) throw UsageError("--arrival trace needs --trace FILE");
    s.arrival = arrival;
    s.num_requests = o.num_requests;
    s.duration_s = o.num_requests > 0 ? 0.0 : o.duration_s;
    s.input = workload::parse_length_spec(o.input_len, "--input-len", workload::LengthRole::kInput);
    s.output = output_len;
    s.prefix_groups = o.prefix_groups;
    s.prefix_tokens = o.prefix_tokens;
    s.tenants = o.tenants;
    b.w = workload::make_synthetic(s, b.seeds);
  } else {
    workload::TraceReadOptions r;
    r.format = workload::parse_trace_format(o.trace_format);
    r.skip_bad_rows = o.skip_bad_rows;
    r.max_rows = o.max_requests;
    b.w = workload::read_trace(o.trace, r);
    b.w.token_seed = b.seeds.tokens;
    arrival.kind = workload::parse_arrival_kind(o.arrival.empty() ? (b.w.has_timestamps ? "trace" : "poisson")
                                                                  : o.arrival);
    Rng rng(b.seeds.arrival);
    workload::apply_arrivals(b.w, arrival, rng);
    workload::fill_output_lengths(b.w, output_len, b.seeds.output_len);
    if (o.tenants > 1) workload::assign_tenants(b.w, o.tenants, b.seeds.tenant);
  }
  if (o.max_requests > 0 && b.w.requests.size() > o.max_requests) b.w.requests.resize(o.max_requests);
  b.effective = {{"description", b.w.description},
                 {"requests", b.w.requests.size()},
                 {"arrival", workload::arrival_kind_name(arrival.kind)},
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

}  // namespace tokenscope::cli
