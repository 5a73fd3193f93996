#include "cli/sim_command.h"

#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/engine_options.h"
#include "cli/history_command.h"
#include "cli/summary_table.h"
#include "cli/workload_options.h"
#include "core/error.h"
#include "core/metrics.h"
#include "core/process_usage.h"
#include "session/sim_run.h"

namespace tokenscope::cli {

namespace {

// What the command line fills: the run's settings, and how to print.
struct SimOptions {
  session::SimRunSettings run;
  bool no_steps = false, no_samples = false, no_cache = false;  // into run's steps, samples, cache
  bool json = false;
  bool quiet = false;
};

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

namespace {
int run_sim(const SimOptions& o, const std::atomic<bool>& interrupted);
}  // namespace

Command add_sim_command(CLI::App& app, Interrupts interrupts) {
  const auto options = std::make_shared<SimOptions>();
  auto& o = *options;
  CLI::App* sim = app.add_subcommand(
      "sim",
      "Replay a trace or a synthetic workload through the serving simulator in virtual time\n"
      "(capacity planning, what-if). Prints a summary; --out DIR writes run.json, requests.jsonl\n"
      "and steps.jsonl. Deterministic for a given seed.");
  sim->get_formatter()->column_width(44);

  add_workload_options(sim, o.run.workload);

  add_engine_options(sim, o.run.engine);

  const char* O = "Output";
  CLI::Option* out_option =
      sim->add_option("--out", o.run.out, "Run directory for run.json, requests.jsonl, steps.jsonl")
          ->group(O);
  sim->add_flag("--overwrite", o.run.overwrite,
                "Replace the run already in --out (without it, a directory holding a run is refused)")
      ->group(O);
  sim->add_flag("--no-steps", o.no_steps, "Do not write steps.jsonl")->group(O);
  sim->add_flag("--coupling", o.run.coupling,
                "After the mix, run each task class alone at its own arrival times (OUT/coupling/CLASS/) and "
                "report kappa = its latency in the mix / alone (run.json \"coupling\"; needs --out)")
      ->group(O);
  sim->add_option("--workload", o.run.workload_file,
                  "YAML workload file (bench's format: classes, lengths, images and audio, tenants, SLOs; "
                  "no sessions), instead of the workload options")
      ->group(O);
  sim->add_option("--sample-interval", o.run.sample_interval_s,
                  "Virtual seconds between two samples of the server's series in samples.jsonl")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0))
      ->group(O);
  sim->add_flag("--no-samples", o.no_samples, "Do not write samples.jsonl")->group(O);
  sim->add_flag("--report", o.run.finish.report,
                "At the end, write report.html in --out: the page of tokenscope report (docs/report.md)")
      ->needs(out_option)
      ->group(O);
  sim->add_flag("--no-cache", o.no_cache,
                "Write no run cache (.tokenscope-cache) in --out at the end: the first check or report of "
                "the run then reads its JSON Lines (docs/check.md)")
      ->group(O);
  add_run_history_options(sim, o.run.finish.history, o.run.tags, O);
  sim->add_flag("--json", o.json, "Print the summary as JSON instead of a table")->group(O);
  sim->add_flag("--quiet", o.quiet, "Print nothing on success")->group(O);

  std::string footer = "\nSummary metrics (run.json \"summary\"):\n";
  for (const auto& k : metrics::kScalarKeys)
    footer += fmt::format("  {:<30} {:<8} {}\n", k.key, k.unit, k.definition);
  for (const auto& k : metrics::kDistributionKeys)
    footer += fmt::format("  {:<30} {:<8} {}\n", k.key, k.unit, k.definition);
  footer += "\nExit codes: 0 ok, 1 I/O failure, 2 bad input or options, 130 interrupted (results kept).\n";
  sim->footer(footer);
  return {sim, [options, interrupts] { return run_sim(*options, *interrupts.interrupted); }};
}

namespace {

int run_sim(const SimOptions& o, const std::atomic<bool>& interrupted) {
  session::SimRunSettings run = o.run;
  run.steps = !o.no_steps;
  run.samples = !o.no_samples;
  run.cache = !o.no_cache;
  const session::SimRunResult r = session::run_sim(run, interrupted, std::cerr);
  const engine::EffectiveEngine& eff = r.engine;
  const engine::SimReport& report = r.report;
  const std::string& out = o.run.out;
  if (o.json) {
    std::cout << r.summary.dump(2) << "\n";
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
    h.lines.push_back("workload: " + r.workload_description);
    if (r.read_report.rows_skipped > 0)
      h.lines.push_back(fmt::format("skipped {} bad rows (first: {})", r.read_report.rows_skipped,
                                    r.read_report.skipped_examples.front()));
    for (const auto& n : eff.notes) h.lines.push_back("note: " + n);
    for (const auto& j : r.perturbations) h.lines.push_back(describe_perturbation(j));
    print_summary_table(std::cout, h, r.summary);
    print_coupling(std::cout, r.coupling);
    const double virt = nanos_to_s(report.virtual_end_ns);
    std::cout << fmt::format(
        "simulated {:.1f} s in {:.2f} CPU s ({:.0f}x real time), {} steps, peak RSS {:.0f} MiB\n", virt,
        r.cpu_s, r.cpu_s > 0 ? virt / r.cpu_s : 0.0, report.counters.steps, process_peak_rss_mib());
    if (r.settings.tenant_kv_policy == engine::TenantKvPolicy::kDynamicReuse) {
      const auto& c = report.counters;
      std::cout << fmt::format(
          "host KV pool: {} blocks ({} GiB), peak {} held, {} evicted, {} recomputed after eviction, {:.1f} "
          "GiB "
          "out, {:.1f} GiB back in\n",
          eff.num_host_kv_blocks, r.settings.host_kv_gib, c.max_host_kv_blocks, c.host_kv_evictions,
          c.host_kv_recomputed_blocks, static_cast<double>(c.swap_out_bytes) / (1u << 30),
          static_cast<double>(c.swap_in_bytes) / (1u << 30));
    }
    if (!out.empty()) std::cout << "run directory: " << out << "\n";
    if (r.report_written)
      std::cout << "report: " << (std::filesystem::path(out) / "report.html").string() << "\n";
  }
  if (report.interrupted) {
    std::cerr << "interrupted: results so far are kept" << (out.empty() ? "" : " in " + out) << "\n";
    return kExitInterrupted;
  }
  return kExitOk;
}

}  // namespace

}  // namespace tokenscope::cli
