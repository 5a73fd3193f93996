#include "cli/sim_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/engine_options.h"
#include "cli/history_command.h"
#include "cli/summary_table.h"
#include "cli/workload_options.h"
#include "cluster/mpi_world.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "core/metrics.h"
#include "core/process_usage.h"
#include "core/run_dir.h"
#include "rundir/run_set.h"
#include "session/sim_grid.h"
#include "session/sim_plan.h"
#include "session/sim_run.h"

namespace tokenscope::cli {

namespace {

// What the command line fills: the run's settings, and how to print.
struct SimOptions {
  session::SimRunSettings run;
  bool no_steps = false, no_samples = false, no_cache = false;  // into run's steps, samples, cache
  bool json = false;
  bool quiet = false;
  std::vector<std::string> slo;  // --slo, parsed into run.slo
  bool plan = false;             // --plan (session/sim_plan.h)
  session::PlanSettings plan_settings;
  unsigned repeat = 1;  // > 1: OUT/repeat-K/ with seeds seed, seed + 1, ... and OUT/sweep.json
  std::string grid;     // --grid FILE (session/sim_grid.h)
  bool mpi = false;     // --mpi: the grid's runs spread over mpirun's ranks
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
int run_sim_grid(const SimOptions& o, const CLI::App* sim, const std::atomic<bool>& interrupted);
}  // namespace

namespace {

// Every option of one simulator run (sim's own, and each point of a grid's).
void add_sim_options(CLI::App* sim, SimOptions& o) {
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
  sim->add_option(
         "--repeat", o.repeat,
         "Run the same settings N times with fresh seeds (--seed, --seed + 1, ...) into OUT/repeat-K/, "
         "and write OUT/sweep.json with each headline metric's between-run interval (needs --out)")
      ->check(CLI::Range(1u, 1000u))
      ->group(O);
  const char* F = "Fleet";
  CLI::Option* pools_opt = add_fleet_options(sim, o.run.fleet);
  sim->add_option(
         "--slo", o.slo,
         "SLO as in bench: [CLASS:]ttft_ms=X,tpot_ms=Y,e2e_ms=Z,ttfo_ms=W,p=P (repeatable; default p "
         "99): the summary's goodput and attainment, and what --plan must meet")
      ->group(F);
  CLI::Option* plan_flag =
      sim->add_flag(
             "--plan", o.plan,
             "Find the fewest replicas (behind --router) that meet every SLO on this workload: the "
             "replicas doubled, then bisected; prints each fleet tried (GPUs, goodput, p99s) and, with "
             "--out, runs the smallest into it with run.json \"plan\" (docs/engine.md \"Planning a "
             "fleet\")")
          ->group(F);
  sim->add_option("--plan-max-replicas", o.plan_settings.max_replicas,
                  "--plan: the most replicas tried (with --pools, each pool's count is its most)")
      ->capture_default_str()
      ->needs(plan_flag)
      ->excludes(pools_opt)
      ->group(F);
  sim->add_option("--gpu-cost-per-hour", o.plan_settings.gpu_cost_per_hour,
                  "--plan: a GPU's price per hour, for a cost column")
      ->needs(plan_flag)
      ->group(F);
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
  sim->add_flag(
         "--json", o.json,
         "Print the summary as JSON instead of a table (--plan: {\"plan\", \"summary\"} of the fleet it "
         "chose, the plan alone when it ran none)")
      ->group(O);
  sim->add_flag("--quiet", o.quiet, "Print nothing on success")->group(O);
}

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
  add_sim_options(sim, o);
  sim->add_option(
         "--grid", o.grid,
         "A what-if grid from a YAML file: a base of sim options, axes whose product are the points, "
         "and seeds; every point runs with every seed, one table of the seeds' means and the "
         "frontier (GPUs vs goodput) is printed, and --out DIR gets grid.json. Under mpirun the "
         "runs are spread over the ranks (docs/engine.md \"What-if grids\")")
      ->group("Fleet");
  sim->add_flag("--mpi", o.mpi,
                "With --grid: spread the runs over the ranks of mpirun (the default when mpirun started "
                "this process)")
      ->group("Fleet");

  std::string footer = "\nSummary metrics (run.json \"summary\"):\n";
  for (const auto& k : metrics::kScalarKeys)
    footer += fmt::format("  {:<30} {:<8} {}\n", k.key, k.unit, k.definition);
  for (const auto& k : metrics::kDistributionKeys)
    footer += fmt::format("  {:<30} {:<8} {}\n", k.key, k.unit, k.definition);
  footer +=
      "\nExit codes: 0 ok, 1 I/O failure or --plan found no fleet meeting the SLOs, 2 bad input or options, "
      "130 "
      "interrupted (results kept).\n";
  sim->footer(footer);
  return {sim, [options, interrupts, sim] {
            if (!options->grid.empty()) return run_sim_grid(*options, sim, *interrupts.interrupted);
            if (options->mpi) throw UsageError("--mpi goes with --grid (bench --mpi shards a bench run)");
            return run_sim(*options, *interrupts.interrupted);
          }};
}

namespace {

int run_one_sim(const SimOptions& o, const std::atomic<bool>& interrupted);

// --repeat N: the same settings N times, each with the next seed, into
// OUT/repeat-K/; OUT/sweep.json lists them with the between-run statistics
// (rundir/run_set.h). Ctrl-C keeps the repeats that finished.
int run_sim_repeats(const SimOptions& o, const std::atomic<bool>& interrupted) {
  if (o.run.out.empty()) throw UsageError("--repeat: needs --out (the directory of the repeats)");
  if (o.run.coupling) throw UsageError("--repeat and --coupling cannot be combined");
  if (o.plan) throw UsageError("--repeat and --plan cannot be combined (plan once, then repeat its fleet)");
  const std::filesystem::path out = o.run.out;
  claim_run_directory(out, o.run.overwrite, "--out");
  std::filesystem::create_directories(out);
  nlohmann::json runs = nlohmann::json::array();
  std::vector<nlohmann::json> summaries;
  bool stopped = false;
  for (unsigned k = 1; k <= o.repeat; ++k) {
    SimOptions one = o;
    one.repeat = 1;
    one.quiet = true;
    one.json = false;
    one.run.out = (out / fmt::format("repeat-{}", k)).string();
    one.run.workload.seed = o.run.workload.seed + (k - 1);
    const int rc = run_one_sim(one, interrupted);
    std::ifstream in(std::filesystem::path(one.run.out) / "run.json");
    std::stringstream text;
    text << in.rdbuf();
    const auto run = json_too_deep_at(text.str()) != std::string_view::npos
                         ? nlohmann::json()
                         : nlohmann::json::parse(text.str(), nullptr, false);
    const auto* summary = run.is_object() && run.contains("summary") ? &run["summary"] : nullptr;
    runs.push_back({{"dir", fmt::format("repeat-{}", k)}, {"repeat", k}, {"seed", one.run.workload.seed}});
    if (summary && summary->is_object()) summaries.push_back(*summary);
    if (!o.quiet && !o.json)
      std::cout << fmt::format(
          "repeat {}/{} (seed {}): {}\n", k, o.repeat, one.run.workload.seed,
          summary && summary->is_object()
              ? fmt::format("TTFT p50 {:.2f} ms, TPOT p50 {:.3f} ms, {:.3f} req/s",
                            rundir::summary_value(*summary, "ttft_ms.p50").value_or(NAN),
                            rundir::summary_value(*summary, "tpot_ms.p50").value_or(NAN),
                            rundir::summary_value(*summary, "request_throughput_rps").value_or(NAN))
              : std::string("no summary"));
    if (rc == kExitInterrupted || interrupted) {
      stopped = true;
      break;
    }
    if (rc != kExitOk) return rc;
  }
  const nlohmann::json set = {{"kind", "repeats"},
                              {"repeats", o.repeat},
                              {"runs", runs},
                              {"partial", stopped},
                              {"statistics", rundir::repeat_statistics(summaries)}};
  write_file_atomic(out / rundir::kRunSetFile, set.dump(2) + "\n");
  if (o.json) {
    std::cout << set.dump(2) << "\n";
  } else if (!o.quiet) {
    std::cout << fmt::format("{} repeats; between-run mean and 95% interval:\n", summaries.size());
    print_repeat_statistics(std::cout, set["statistics"]);
    std::cout << fmt::format("wrote {}\n", (out / rundir::kRunSetFile).string());
  }
  if (stopped) {
    std::cerr << "interrupted: the repeats that finished are kept in " << out.string() << "\n";
    return kExitInterrupted;
  }
  return kExitOk;
}

int run_sim(const SimOptions& o, const std::atomic<bool>& interrupted) {
  if (o.repeat > 1) return run_sim_repeats(o, interrupted);
  return run_one_sim(o, interrupted);
}

// The run's settings from the options.
session::SimRunSettings settings_of(const SimOptions& o) {
  session::SimRunSettings run = o.run;
  run.steps = !o.no_steps;
  run.samples = !o.no_samples;
  run.cache = !o.no_cache;
  for (const auto& text : o.slo) run.slo.push_back(bench::parse_slo_spec(text));
  return run;
}

int run_one_sim(const SimOptions& o, const std::atomic<bool>& interrupted) {
  session::SimRunSettings run = settings_of(o);
  if (o.plan) {
    if (o.run.fleet.replicas != 1) throw UsageError("--plan chooses the replicas: drop --replicas");
    if (o.run.fleet.prefill_replicas > 0 || o.run.fleet.decode_replicas > 0)
      throw UsageError("--plan chooses colocated replicas: drop --prefill-replicas and --decode-replicas");
    if (o.run.coupling) throw UsageError("--plan and --coupling cannot be combined");
    // A directory that holds a run is refused now, not after the search.
    if (!o.run.out.empty() && !o.run.overwrite) claim_run_directory(o.run.out, false, "--out");
    std::ostringstream quiet_log;
    const session::PlanResult plan =
        session::plan_fleet(run, o.plan_settings, interrupted, o.quiet ? quiet_log : std::cerr);
    const nlohmann::json plan_json = plan.to_json(o.plan_settings, run);
    const bool final_run = !o.run.out.empty() && (plan.smallest || plan.cheapest) && !interrupted.load();
    if (o.json && !final_run) std::cout << nlohmann::json{{"plan", plan_json}}.dump(2) << "\n";
    if (!o.json && !o.quiet) print_plan(std::cout, plan_json);
    if (plan.interrupted || interrupted.load()) {
      std::cerr << "interrupted: the search stopped, and chose no fleet\n";
      return kExitInterrupted;
    }
    if (!plan.smallest && !plan.cheapest) return kExitFailure;
    if (!final_run) return kExitOk;
    // The smallest (or cheapest) fleet, run into --out, with the plan that chose it.
    if (plan.cheapest)
      run.fleet.pool_counts = *plan.cheapest;
    else
      run.fleet.replicas = *plan.smallest;
    run.plan = plan_json;
  }
  const session::SimRunResult r = session::run_sim(run, interrupted, std::cerr);
  const engine::EffectiveEngine& eff = r.engine;
  const engine::SimReport& report = r.report;
  const std::string& out = o.run.out;
  if (o.json) {
    // --plan: the plan, and the summary of the fleet it chose.
    std::cout << (o.plan ? nlohmann::json{{"plan", run.plan}, {"summary", r.summary}} : r.summary).dump(2)
              << "\n";
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
    print_fleet(std::cout, r.fleet);
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

// ---- sim --grid (session/sim_grid.h)

void parse_sim_args(const std::vector<std::string>& args, SimOptions& o) {
  CLI::App app;
  CLI::App* sim = app.add_subcommand("sim");
  add_sim_options(sim, o);
  std::vector<std::string> argv(args.rbegin(), args.rend());  // CLI11 takes them last first
  argv.push_back("sim");
  app.parse(argv);
}

// A point's options as sim reads its command line; a bad one is named by
// the grid file's line and field (the first option whose addition fails).
// The first option of a point whose addition makes the parse fail, named
// by the grid file's line and field (`whole`: the whole point's message,
// when no prefix fails alone).
[[noreturn]] void name_bad_option(const session::Grid& g, const session::GridPoint& point,
                                  const char* whole) {
  for (std::size_t k = 1; k <= point.options.size(); ++k) {
    session::GridPoint prefix;
    prefix.options.assign(point.options.begin(), point.options.begin() + static_cast<std::ptrdiff_t>(k));
    SimOptions scratch;
    try {
      parse_sim_args(prefix.args(), scratch);
    } catch (const CLI::ParseError& first) {
      const auto& bad = point.options[k - 1];
      throw InputError(g.file, bad.line, bad.field, first.what());
    } catch (const UsageError& first) {
      const auto& bad = point.options[k - 1];
      throw InputError(g.file, bad.line, bad.field, first.what());
    }
  }
  throw InputError(g.file, 0, "", whole);
}

SimOptions parse_point(const session::Grid& g, const session::GridPoint& point) {
  SimOptions o;
  try {
    parse_sim_args(point.args(), o);
  } catch (const CLI::ParseError& e) {
    name_bad_option(g, point, e.what());
  } catch (const UsageError& e) {
    name_bad_option(g, point, e.what());
  }
  // The values read only when the run starts (the SLOs' grammar), read now.
  for (const auto& opt : point.options)
    if (opt.name == "slo") try {
        bench::parse_slo_spec(opt.value);
      } catch (const UsageError& e) {
        throw InputError(g.file, opt.line, opt.field, e.what());
      }
  return o;
}

void print_grid(std::ostream& os, const nlohmann::json& table) {
  std::vector<std::size_t> widths;
  for (const auto& a : table["axes"]) widths.push_back(std::max<std::size_t>(a.get<std::string>().size(), 4));
  for (const auto& p : table["points"])
    for (std::size_t a = 0; a < widths.size(); ++a)
      widths[a] = std::max(widths[a], display_text(p["labels"][a].get<std::string>()).size());
  const auto cell = [](const nlohmann::json& v, int width, int digits) {
    return v.is_number() ? fmt::format("{:>{}.{}f}", v.get<double>(), width, digits)
                         : fmt::format("{:>{}}", "-", width);
  };
  std::string head;
  for (std::size_t a = 0; a < widths.size(); ++a)
    head += fmt::format("{:<{}}  ", display_text(table["axes"][a].get<std::string>()), widths[a]);
  os << head
     << fmt::format("{:>5}{:>10}{:>10}{:>11}{:>11}{:>11}{:>6}{:>6}  {}\n", "GPUs", "goodput", "req/s",
                    "TTFT p99", "TPOT p99", "E2E p99", "runs", "SLO", "frontier");
  for (const auto& p : table["points"]) {
    std::string line;
    for (std::size_t a = 0; a < widths.size(); ++a)
      line += fmt::format("{:<{}}  ", display_text(p["labels"][a].get<std::string>()), widths[a]);
    const std::string slo = p["slo_met"].is_null() ? "-" : (p["slo_met"].get<bool>() ? "met" : "miss");
    os << line
       << fmt::format("{:>5}{}{}{}{}{}{:>6}{:>6}  {}\n",
                      p["gpus"].is_null() ? std::string("-") : std::to_string(p["gpus"].get<std::uint32_t>()),
                      cell(p["goodput_rps"], 10, 2), cell(p["throughput_rps"], 10, 2),
                      cell(p["ttft_p99_ms"], 11, 1), cell(p["tpot_p99_ms"], 11, 2),
                      cell(p["e2e_p99_ms"], 11, 1),
                      fmt::format("{}/{}", p["runs"].get<std::size_t>(), table["seeds"].size()), slo,
                      p["frontier"].get<bool>() ? "*" : "");
  }
  os << fmt::format(
      "{} points x {} seeds; frontier (* : no point has as few GPUs and as much {}): {} points\n",
      table["points"].size(), table["seeds"].size(), table["frontier_metric"].get<std::string>(),
      table["frontier"].size());
}

int finish_grid(const SimOptions& top, const session::Grid& grid, const std::vector<nlohmann::json>& figures,
                int size, const std::atomic<bool>& interrupted);

int run_sim_grid(const SimOptions& top, const CLI::App* sim, const std::atomic<bool>& interrupted) {
  // The points' options come from the file alone.
  for (const CLI::Option* opt : sim->get_options()) {
    if (opt->count() == 0) continue;
    const std::string name = opt->get_name();
    if (name != "--grid" && name != "--mpi" && name != "--out" && name != "--overwrite" && name != "--json" &&
        name != "--quiet")
      throw UsageError(fmt::format(
          "--grid: {} goes in the grid file (base: for every point, axes: for some); on the command line "
          "only --out, --overwrite, --json, --quiet and --mpi",
          name));
  }
  const session::Grid grid = session::load_grid(top.grid);
  // Every point read before anything runs: a bad value fails now, not hours in.
  std::vector<SimOptions> points;
  for (const auto& point : grid.points) points.push_back(parse_point(grid, point));

  const char* world_size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const bool spread = top.mpi || (world_size && std::atoi(world_size) > 1);
  std::unique_ptr<cluster::MpiWorld> world;
  if (spread) world = std::make_unique<cluster::MpiWorld>();
  const int rank = world ? world->rank() : 0, size = world ? world->size() : 1;
  // --out claimed by rank 0, its verdict given to every rank (a rank that
  // left alone would leave the others waiting at the gather).
  std::string problem;
  if (rank == 0 && !top.run.out.empty()) {
    try {
      claim_run_directory(top.run.out, top.run.overwrite, "--out");
    } catch (const std::exception& e) {
      problem = std::string(e.what()).empty() ? "--out: cannot be claimed" : e.what();
    }
  }
  if (world) problem = world->broadcast(problem);
  if (!problem.empty()) throw UsageError(problem);

  std::vector<nlohmann::json> figures(grid.runs());
  const bool talk = !top.quiet && !top.json;
  for (std::size_t j = static_cast<std::size_t>(rank); j < grid.runs() && !interrupted.load();
       j += static_cast<std::size_t>(size)) {
    const std::size_t p = j / grid.seeds.size();
    const std::uint64_t seed = grid.seeds[j % grid.seeds.size()];
    SimOptions one = points[p];
    one.run.workload.seed = seed;
    one.run.out.clear();
    one.run.finish = session::Finishers{};
    one.run.finish.history.disabled = true;
    std::ostringstream quiet_log;
    try {
      const session::SimRunResult r = session::run_sim(settings_of(one), interrupted, quiet_log);
      if (r.report.interrupted) break;
      figures[j] = session::grid_figures(r.summary, r.gpus);
    } catch (const std::exception& e) {
      figures[j] = {{"error", e.what()}};
    }
    if (talk)
      std::cerr << fmt::format(
          "grid{}: run {}/{} ({}; seed {}): {}\n", size > 1 ? fmt::format(" rank {}", rank) : std::string(),
          j + 1, grid.runs(), display_text(fmt::format("{}", fmt::join(grid.points[p].labels, ", "))), seed,
          figures[j].contains("error")
              ? "failed: " + display_text(figures[j]["error"].get<std::string>())
              : fmt::format("{:.2f} req/s", figures[j]["throughput_rps"].is_number()
                                                ? figures[j]["throughput_rps"].get<double>()
                                                : 0.0));
  }
  // The ranks' figures to rank 0, which alone prints and writes.
  if (world) {
    if (rank != 0) {
      nlohmann::json mine = nlohmann::json::array();
      for (std::size_t j = 0; j < figures.size(); ++j)
        if (!figures[j].is_null()) mine.push_back({j, figures[j]});
      world->send(0, mine.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      world->barrier();
      return kExitOk;  // mpirun's exit is rank 0's, as bench --mpi's
    }
  }
  // Rank 0's gather, table and files; the ranks wait at the barrier for
  // them, and an error is rethrown after it.
  std::exception_ptr error;
  int rc = kExitOk;
  std::vector<std::string> messages;
  if (world)  // every rank's message taken first, whatever comes of one
    for (int r = 1; r < size; ++r) messages.push_back(world->receive(r));
  try {
    for (const auto& text : messages)
      for (const auto& pair : nlohmann::json::parse(text)) {
        const auto j = pair.at(0).get<std::size_t>();
        if (j < figures.size()) figures[j] = pair.at(1);
      }
    rc = finish_grid(top, grid, figures, size, interrupted);
  } catch (...) {
    error = std::current_exception();
  }
  if (world) world->barrier();
  if (error) std::rethrow_exception(error);
  return rc;
}

int finish_grid(const SimOptions& top, const session::Grid& grid, const std::vector<nlohmann::json>& figures,
                int size, const std::atomic<bool>& interrupted) {
  const nlohmann::json table = session::grid_table(grid, figures);
  std::size_t failed = 0, missing = 0;
  for (const auto& f : figures) {
    if (f.is_null())
      ++missing;
    else if (f.contains("error"))
      ++failed;
  }
  nlohmann::json out = table;
  out["ranks"] = size;
  out["runs_not_run"] = missing;
  out["runs_failed"] = failed;
  if (!top.run.out.empty()) {
    std::filesystem::create_directories(top.run.out);
    write_file_atomic(std::filesystem::path(top.run.out) / "grid.json", out.dump(2) + "\n");
  }
  if (top.json) {
    std::cout << out.dump(2) << "\n";
  } else if (!top.quiet) {
    print_grid(std::cout, table);
    if (!top.run.out.empty())
      std::cout << "wrote " << display_text((std::filesystem::path(top.run.out) / "grid.json").string())
                << "\n";
  }
  if (missing > 0 && interrupted.load()) {
    std::cerr << fmt::format("interrupted: {} of {} runs not run; the table is of those that ran\n", missing,
                             grid.runs());
    return kExitInterrupted;
  }
  if (failed > 0) {
    std::cerr << fmt::format("{} of {} runs failed (grid.json's points name their errors)\n", failed,
                             grid.runs());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

}  // namespace tokenscope::cli
