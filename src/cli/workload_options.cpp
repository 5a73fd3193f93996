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
  app->add_option("--rate", o.rate_rps,
                  "Arrival rate, requests/s (poisson, gamma, constant); inf: every request at t = 0 (with "
                  "--num-requests)")
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
  app->add_option_function<std::string>(
         "--input-len", [&o](const std::string& text) { o.input_len = workload::parse_input_len(text); },
         "Prompt tokens: fixed:N | uniform:MIN:MAX | lognormal:MEAN:SIGMA | empirical:FILE [:max=N]")
      ->default_str(o.input_len.spec)
      ->group(W);
  app->add_option_function<std::string>(
         "--output-len", [&o](const std::string& text) { o.output_len = workload::parse_output_len(text); },
         "Output tokens, same forms (also for traces without output lengths)")
      ->default_str(o.output_len.spec)
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
  return workload::to_json(o);
}

}  // namespace tokenscope::cli
