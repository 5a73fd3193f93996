#include "cli/sim_command.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/engine_options.h"
#include "cli/summary_table.h"
#include "core/error.h"
#include "core/metrics.h"
#include "core/run_dir.h"
#include "engine/simulator.h"
#include "workload/arrivals.h"
#include "workload/synthetic.h"
#include "workload/trace_readers.h"

namespace tokenscope::cli {

namespace {

struct SimOptions {
  // Workload.
  std::string trace;
  std::string trace_format = "auto";
  bool skip_bad_rows = false;
  std::uint64_t max_requests = 0;
  std::string arrival;  // default: trace when the trace has timestamps, else poisson
  double rate_rps = 8.0;
  double burstiness = 1.0;
  double time_scale = 1.0;
  double jitter_bucket_ms = 0.0;
  std::uint64_t num_requests = 0;
  double duration_s = 300.0;
  std::string input_len = "lognormal:1155:0.9:max=7000";
  std::string output_len = "lognormal:211:0.8:max=1000";
  std::uint32_t prefix_groups = 0;
  std::uint32_t prefix_tokens = 0;
  std::uint32_t tenants = 1;
  std::uint64_t seed = 0;
  std::optional<std::uint64_t> seed_arrival, seed_input_len, seed_output_len, seed_prefix, seed_tenant,
      seed_tokens;
  // Engine.
  EngineOptions engine_options;
  // Output.
  std::string out;
  bool no_steps = false;
  bool json = false;
  bool quiet = false;
};

SimOptions g_opts;

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

nlohmann::json requested_settings(const SimOptions& o) {
  auto opt = [](const std::optional<std::uint64_t>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  return {
      {"workload",
       {{"trace", o.trace.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.trace)},
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
        {"seed_tokens", opt(o.seed_tokens)}}},
      {"engine", engine_options_json(o.engine_options)},
      {"output", {{"out", o.out}, {"steps", !o.no_steps}}},
  };
}

struct BuiltWorkload {
  workload::Workload w;
  workload::WorkloadSeeds seeds;
  nlohmann::json effective;
};

BuiltWorkload build_workload(const SimOptions& o) {
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

nlohmann::json counters_json(const engine::EngineCounters& c) {
  return {{"steps", c.steps},
          {"prefix_queries_tokens", c.prefix_queries_tokens},
          {"prefix_hits_tokens", c.prefix_hits_tokens},
          {"preempted_queries_tokens", c.preempted_queries_tokens},
          {"preempted_hits_tokens", c.preempted_hits_tokens},
          {"preemptions", c.preemptions},
          {"tenant_switches", c.tenant_switches},
          {"swap_out_bytes", c.swap_out_bytes},
          {"swap_in_bytes", c.swap_in_bytes},
          {"requests_finished", c.requests_finished},
          {"requests_rejected", c.requests_rejected},
          {"prompt_tokens", c.prompt_tokens},
          {"generation_tokens", c.generation_tokens},
          {"max_batched_tokens_seen", c.max_batched_tokens_seen},
          {"max_blocks_in_use", c.max_blocks_in_use}};
}

}  // namespace

CLI::App* add_sim_command(CLI::App& app) {
  auto& o = g_opts;
  CLI::App* sim = app.add_subcommand(
      "sim",
      "Replay a trace or a synthetic workload through the serving simulator in virtual time\n"
      "(capacity planning, what-if). Prints a summary; --out DIR writes run.json, requests.jsonl\n"
      "and steps.jsonl. Deterministic for a given seed.");
  sim->get_formatter()->column_width(44);

  const char* W = "Workload";
  sim->add_option("--trace", o.trace,
                  "Trace file to replay (Azure CSV, Mooncake JSONL, ShareGPT JSON, native JSONL); "
                  "without it the workload is synthetic")
      ->group(W);
  sim->add_option("--trace-format", o.trace_format, "auto|azure|mooncake|sharegpt|native")
      ->capture_default_str()
      ->group(W);
  sim->add_flag("--skip-bad-rows", o.skip_bad_rows, "Skip and count malformed trace rows instead of failing")
      ->group(W);
  sim->add_option("--max-requests", o.max_requests, "Use at most N requests of the trace (0: all)")
      ->capture_default_str()
      ->group(W);
  sim->add_option(
         "--arrival", o.arrival,
         "poisson|gamma|constant|trace [default: trace when the trace has timestamps, else poisson]; "
         "anything but trace replays the trace in file order with fresh timing")
      ->group(W);
  sim->add_option("--rate", o.rate_rps, "Arrival rate, requests/s (poisson, gamma, constant)")
      ->capture_default_str()
      ->group(W);
  sim->add_option("--burstiness", o.burstiness, "Gamma shape: 1 = Poisson, < 1 burstier (CV = 1/sqrt(B))")
      ->capture_default_str()
      ->group(W);
  sim->add_option("--time-scale", o.time_scale, "Trace replay speed-up: 2 = twice as fast")
      ->capture_default_str()
      ->group(W);
  sim->add_option("--jitter-bucket-ms", o.jitter_bucket_ms,
                  "Trace replay: spread each request uniformly within this bucket, ms (Mooncake: 3000)")
      ->capture_default_str()
      ->group(W);
  sim->add_option("--num-requests", o.num_requests, "Synthetic: number of requests (overrides --duration-s)")
      ->group(W);
  sim->add_option("--duration-s", o.duration_s, "Synthetic: schedule length, s")
      ->capture_default_str()
      ->group(W);
  sim->add_option("--input-len", o.input_len,
                  "Prompt tokens: fixed:N | uniform:MIN:MAX | lognormal:MEAN:SIGMA | empirical:FILE [:max=N]")
      ->capture_default_str()
      ->group(W);
  sim->add_option("--output-len", o.output_len,
                  "Output tokens, same forms (also for traces without output lengths)")
      ->capture_default_str()
      ->group(W);
  sim->add_option("--prefix-groups", o.prefix_groups, "Synthetic: shared-prefix groups (0: none)")
      ->capture_default_str()
      ->group(W);
  sim->add_option("--prefix-tokens", o.prefix_tokens, "Synthetic: shared prefix length per group, tokens")
      ->capture_default_str()
      ->group(W);
  sim->add_option("--tenants", o.tenants,
                  "Spread requests uniformly over N tenants (unless the trace names them)")
      ->capture_default_str()
      ->group(W);
  sim->add_option("--seed", o.seed, "Master seed; each random dimension derives its own")
      ->capture_default_str()
      ->group(W);
  sim->add_option("--seed-arrival", o.seed_arrival, "Override the arrival-time seed")->group(W);
  sim->add_option("--seed-input-len", o.seed_input_len, "Override the input-length seed")->group(W);
  sim->add_option("--seed-output-len", o.seed_output_len, "Override the output-length seed")->group(W);
  sim->add_option("--seed-prefix", o.seed_prefix, "Override the prefix-group seed")->group(W);
  sim->add_option("--seed-tenant", o.seed_tenant, "Override the tenant-assignment seed")->group(W);
  sim->add_option("--seed-tokens", o.seed_tokens, "Override the prompt-token seed")->group(W);

  add_engine_options(sim, o.engine_options);

  const char* O = "Output";
  sim->add_option("--out", o.out, "Run directory for run.json, requests.jsonl, steps.jsonl")->group(O);
  sim->add_flag("--no-steps", o.no_steps, "Do not write steps.jsonl")->group(O);
  sim->add_flag("--json", o.json, "Print the summary as JSON instead of a table")->group(O);
  sim->add_flag("--quiet", o.quiet, "Print nothing on success")->group(O);

  std::string footer = "\nSummary metrics (run.json \"summary\"):\n";
  for (const auto& k : metrics::kScalarKeys)
    footer += fmt::format("  {:<30} {:<8} {}\n", k.key, k.unit, k.definition);
  for (const auto& k : metrics::kDistributionKeys)
    footer += fmt::format("  {:<30} {:<8} {}\n", k.key, k.unit, k.definition);
  footer += "\nExit codes: 0 ok, 1 I/O failure, 2 bad input or options, 130 interrupted (results kept).\n";
  sim->footer(footer);
  return sim;
}

int run_sim(const std::atomic<bool>& interrupted) {
  auto& o = g_opts;
  const double cpu_start = cpu_seconds();
  engine::EngineSettings settings = engine_settings(o.engine_options);
  if (o.rate_rps <= 0 || !std::isfinite(o.rate_rps))
    throw UsageError(fmt::format("--rate: expected requests per second > 0, got {}", o.rate_rps));
  const auto catalog = load_catalog(o.engine_options);
  BuiltWorkload bw = build_workload(o);
  settings.num_tenants = static_cast<std::uint32_t>(bw.w.tenants.size());
  const auto eff = engine::resolve_engine(settings, catalog);

  std::unique_ptr<RunDirectory> out;
  if (!o.out.empty()) out = std::make_unique<RunDirectory>(o.out);
  engine::RecordingObserver observer(bw.w, out.get(), !o.no_steps);
  auto cost = make_cost_model(settings, eff);
  engine::Engine eng(eff, settings, std::move(cost), &observer);

  const auto report = engine::run_simulation(bw.w, eng, &interrupted);
  observer.summary().set_server_counters(engine::server_counters(report.counters));
  const nlohmann::json summary = observer.summary().build();
  const double cpu = cpu_seconds() - cpu_start;

  if (out) {
    nlohmann::json run;
    run["tool"] = {{"name", "tokenscope"}, {"version", TOKENSCOPE_VERSION}, {"command", "sim"}};
    run["partial"] = report.interrupted;
    run["settings"] = {{"requested", requested_settings(o)},
                       {"effective", {{"engine", eff.to_json()}, {"workload", bw.effective}}}};
    run["summary"] = summary;
    run["engine_counters"] = counters_json(report.counters);
    run["virtual_end_s"] = nanos_to_s(report.virtual_end_ns);
    out->flush();
    out->write_run_json(run);
    out->close();
  }

  if (o.json) {
    std::cout << summary.dump(2) << "\n";
  } else if (!o.quiet) {
    SummaryHeader h;
    h.title = fmt::format("tokenscope sim: {} on {}x {} (TP={})", eff.model.name, eff.tensor_parallel,
                          eff.gpu.name, eff.tensor_parallel);
    h.lines.push_back(
        eff.num_gpu_blocks
            ? fmt::format("KV cache: {} blocks x {} tokens = {} tokens ({:.1f} GiB/GPU), max_model_len {}",
                          *eff.num_gpu_blocks, eff.block_size_tokens,
                          static_cast<std::uint64_t>(*eff.num_gpu_blocks) * eff.block_size_tokens,
                          eff.kv_cache_gib_per_gpu, eff.max_model_len)
            : fmt::format("KV cache: unlimited ({}-token blocks), max_model_len {}", eff.block_size_tokens,
                          eff.max_model_len));
    h.lines.push_back("workload: " + bw.w.description);
    if (bw.w.read_report.rows_skipped > 0)
      h.lines.push_back(fmt::format("skipped {} bad rows (first: {})", bw.w.read_report.rows_skipped,
                                    bw.w.read_report.skipped_examples.front()));
    for (const auto& n : eff.notes) h.lines.push_back("note: " + n);
    print_summary_table(std::cout, h, summary);
    const double virt = nanos_to_s(report.virtual_end_ns);
    std::cout << fmt::format(
        "simulated {:.1f} s in {:.2f} CPU s ({:.0f}x real time), {} steps, peak RSS {:.0f} MiB\n", virt, cpu,
        cpu > 0 ? virt / cpu : 0.0, report.counters.steps, peak_rss_mib());
    if (out) std::cout << "run directory: " << o.out << "\n";
  }
  if (report.interrupted) {
    std::cerr << "interrupted: results so far are kept" << (out ? " in " + o.out : "") << "\n";
    return kExitInterrupted;
  }
  return kExitOk;
}

}  // namespace tokenscope::cli
