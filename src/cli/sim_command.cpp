#include "cli/sim_command.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "analyze/run_cache.h"
#include "analyze/run_data.h"
#include "cli/engine_options.h"
#include "cli/history_command.h"
#include "cli/report_command.h"
#include "cli/summary_table.h"
#include "cli/workload_options.h"
#include "core/error.h"
#include "core/metrics.h"
#include "core/run_dir.h"
#include "engine/simulator.h"
#include "observe/sim_samples.h"
#include "workload/arrivals.h"
#include "workload/synthetic.h"
#include "workload/trace_readers.h"

namespace tokenscope::cli {

namespace {

struct SimOptions {
  WorkloadOptions workload;
  // Engine.
  EngineOptions engine_options;
  // Output.
  std::string out;
  bool overwrite = false;
  bool no_steps = false;
  double sample_interval_s = 1.0;  // samples.jsonl: virtual seconds between two samples
  bool no_samples = false;
  bool json = false;
  bool quiet = false;
  bool report = false;            // --report: report.html in --out at the end
  bool no_cache = false;          // --no-cache: no run cache written at the end
  std::vector<std::string> tags;  // --tag: run.json "tags"
  HistoryOptions history;
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
  return {
      {"workload", workload_options_json(o.workload)},
      {"engine", engine_options_json(o.engine_options)},
      {"output",
       {{"out", o.out},
        {"steps", !o.no_steps},
        {"samples", !o.no_samples},
        {"sample_interval_s", o.sample_interval_s}}},
  };
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
          {"host_kv_evictions", c.host_kv_evictions},
          {"host_kv_recomputed_blocks", c.host_kv_recomputed_blocks},
          {"max_host_kv_blocks", c.max_host_kv_blocks},
          {"requests_finished", c.requests_finished},
          {"requests_rejected", c.requests_rejected},
          {"prompt_tokens", c.prompt_tokens},
          {"generation_tokens", c.generation_tokens},
          {"max_batched_tokens_seen", c.max_batched_tokens_seen},
          {"max_blocks_in_use", c.max_blocks_in_use}};
}

}  // namespace

std::string describe_perturbation(const nlohmann::json& p) {
  std::string line = "perturbation " + p.value("kind", std::string("?"));
  if (p.contains("target")) line += " (" + p["target"].get<std::string>() + ")";
  line += ":";
  if (const auto it = p.find("injected"); it != p.end())
    for (const auto& [key, value] : it->items())
      line += value.is_number_float() ? fmt::format(" {}={:.1f}", key, value.get<double>())
                                      : fmt::format(" {}={}", key, value.dump());
  return line;
}

CLI::App* add_sim_command(CLI::App& app) {
  auto& o = g_opts;
  CLI::App* sim = app.add_subcommand(
      "sim",
      "Replay a trace or a synthetic workload through the serving simulator in virtual time\n"
      "(capacity planning, what-if). Prints a summary; --out DIR writes run.json, requests.jsonl\n"
      "and steps.jsonl. Deterministic for a given seed.");
  sim->get_formatter()->column_width(44);

  add_workload_options(sim, o.workload);

  add_engine_options(sim, o.engine_options);

  const char* O = "Output";
  CLI::Option* out_option =
      sim->add_option("--out", o.out, "Run directory for run.json, requests.jsonl, steps.jsonl")->group(O);
  sim->add_flag("--overwrite", o.overwrite,
                "Replace the run already in --out (without it, a directory holding a run is refused)")
      ->group(O);
  sim->add_flag("--no-steps", o.no_steps, "Do not write steps.jsonl")->group(O);
  sim->add_option("--sample-interval", o.sample_interval_s,
                  "Virtual seconds between two samples of the server's series in samples.jsonl")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0))
      ->group(O);
  sim->add_flag("--no-samples", o.no_samples, "Do not write samples.jsonl")->group(O);
  sim->add_flag("--report", o.report,
                "At the end, write report.html in --out: the page of tokenscope report (docs/report.md)")
      ->needs(out_option)
      ->group(O);
  sim->add_flag("--no-cache", o.no_cache,
                "Write no run cache (.tokenscope-cache) in --out at the end: the first check or report of "
                "the run then reads its JSON Lines (docs/check.md)")
      ->group(O);
  add_run_history_options(sim, o.history, o.tags, O);
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
  const double started_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  engine::EngineSettings settings = engine_settings(o.engine_options, o.workload.seed);
  if (o.workload.rate_rps <= 0 || !std::isfinite(o.workload.rate_rps))
    throw UsageError(fmt::format("--rate: expected requests per second > 0, got {}", o.workload.rate_rps));
  const auto catalog = load_catalog(o.engine_options);
  BuiltWorkload bw = build_workload(o.workload);
  settings.num_tenants = static_cast<std::uint32_t>(bw.w.tenants.size());
  const auto eff = engine::resolve_engine(settings, catalog);

  std::unique_ptr<RunDirectory> out;
  bool report_written = false;
  if (!o.out.empty()) {
    claim_run_directory(o.out, o.overwrite, "--out");
    out = std::make_unique<RunDirectory>(o.out);
  }
  engine::RecordingObserver observer(bw.w, out.get(), !o.no_steps);
  observer.write_perturbations(!settings.perturbations.empty());
  auto cost = make_cost_model(settings, eff);
  // The server's canonical series on virtual time, as bench's scrapes give them (docs/observe.md).
  observe::SimSampler sampler(observer, out && !o.no_samples ? &out->samples() : nullptr,
                              seconds_to_nanos(o.sample_interval_s));
  // The run cache, built from the records as they are written (not read
  // back from the files at the end: docs/architecture.md).
  std::unique_ptr<observe::RunListener> files;
  if (out && !o.no_cache) {
    files = analyze::run_cache_writer();
    observer.set_record_listener([&files](const RequestRecord& r) { files->add_request(r); });
    observer.set_step_listener([&files](const StepRecord& r) { files->add_step(r); });
    sampler.set_listener([&files](const observe::Observation& ob) { files->add_observation(ob); });
  }
  const bool steal = std::any_of(settings.perturbations.begin(), settings.perturbations.end(),
                                 [](const auto& p) { return p.kind() == engine::PerturbationKind::kSteal; });
  if (steal) sampler.enable_contention_series();
  engine::Engine eng(eff, settings, std::move(cost), &sampler);
  sampler.attach(&eng);

  const auto report = engine::run_simulation(bw.w, eng, &interrupted);
  sampler.finish(report.virtual_end_ns);
  observer.summary().set_server_counters(engine::server_counters(report.counters));
  const nlohmann::json summary = observer.summary().build();
  const double cpu = cpu_seconds() - cpu_start;

  if (out) {
    nlohmann::json run;
    run["tool"] = {{"name", "tokenscope"}, {"version", TOKENSCOPE_VERSION}, {"command", "sim"}};
    // Virtual time has no wall clock: the anchor says so (a run directory
    // stays byte-identical for a seed); exports to UTC take one of their own.
    run["clock"] = {{"monotonic_ns", 0},
                    {"unix_ns", nullptr},
                    {"virtual", true},
                    {"definition", "virtual time from 0: no wall-clock anchor"}};
    run["partial"] = report.interrupted;
    run["tags"] = o.tags;
    run["settings"] = {{"requested", requested_settings(o)},
                       {"effective", {{"engine", eff.to_json()}, {"workload", bw.effective}}}};
    run["summary"] = summary;
    run["engine_counters"] = counters_json(report.counters);
    // The ground truth for tokenscope check: what was injected (docs/engine.md "Perturbations").
    run["perturbations"] = eng.perturber() ? eng.perturber()->to_json() : nlohmann::json::array();
    if (eng.perturber()) run["perturbation_seed"] = settings.perturbation_seed;
    run["virtual_end_s"] = nanos_to_s(report.virtual_end_ns);
    nlohmann::json sources = {{{"source", "sim"},
                               {"interval_s", o.sample_interval_s},
                               {"reads", sampler.observations()},
                               {"clock", "virtual"}}};
    // A steal perturbation's stolen time as a host and a cgroup would show it.
    if (steal)
      for (const char* source : {"host", "cgroup"})
        sources.push_back({{"source", source},
                           {"interval_s", o.sample_interval_s},
                           {"reads", sampler.contention_observations()},
                           {"clock", "virtual"},
                           {"simulated", "steal perturbation"}});
    run["observe"] = {
        {"samples_file", o.no_samples ? nlohmann::json(nullptr) : nlohmann::json("samples.jsonl")},
        {"sources", sources}};
    out->flush();
    out->write_run_json(run);
    out->close();
    // The run cache, for the check or report that comes next (an
    // interrupted run ends at once). Best effort, as a reader's write is.
    if (files && !report.interrupted) files->finish(o.out);
    files.reset();
    report_written = o.report && write_run_report(o.out, std::cerr);
    // Virtual time has no wall clock: the history takes the start from here.
    register_run_in_history(o.history, o.out, started_unix, std::cerr);
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
    if (const auto* p = eng.perturber())
      for (const auto& j : p->to_json()) h.lines.push_back(describe_perturbation(j));
    print_summary_table(std::cout, h, summary);
    const double virt = nanos_to_s(report.virtual_end_ns);
    std::cout << fmt::format(
        "simulated {:.1f} s in {:.2f} CPU s ({:.0f}x real time), {} steps, peak RSS {:.0f} MiB\n", virt, cpu,
        cpu > 0 ? virt / cpu : 0.0, report.counters.steps, peak_rss_mib());
    if (settings.tenant_kv_policy == engine::TenantKvPolicy::kDynamicReuse) {
      const auto& c = report.counters;
      std::cout << fmt::format(
          "host KV pool: {} blocks ({} GiB), peak {} held, {} evicted, {} recomputed after eviction, {:.1f} "
          "GiB "
          "out, {:.1f} GiB back in\n",
          eff.num_host_kv_blocks, settings.host_kv_gib, c.max_host_kv_blocks, c.host_kv_evictions,
          c.host_kv_recomputed_blocks, static_cast<double>(c.swap_out_bytes) / (1u << 30),
          static_cast<double>(c.swap_in_bytes) / (1u << 30));
    }
    if (out) std::cout << "run directory: " << o.out << "\n";
    if (report_written)
      std::cout << "report: " << (std::filesystem::path(o.out) / "report.html").string() << "\n";
  }
  if (report.interrupted) {
    std::cerr << "interrupted: results so far are kept" << (out ? " in " + o.out : "") << "\n";
    return kExitInterrupted;
  }
  return kExitOk;
}

}  // namespace tokenscope::cli
