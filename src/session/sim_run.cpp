#include "session/sim_run.h"

#include "bench/bench_workload.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "core/process_usage.h"
#include "core/run_dir.h"
#include "core/stats.h"
#include "engine/fleet.h"
#include "engine/fleet_setup.h"
#include "engine/pools.h"
#include "engine/profile.h"
#include "observe/sim_samples.h"
#include "rundir/run_cache.h"
#include "rundir/run_json.h"
#include "rundir/run_session.h"

namespace tokenscope::session {

namespace {

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

// run.json "observe": the samples file and its sources, on virtual time.
nlohmann::json observe_json(const SimRunSettings& o, std::uint64_t reads, std::uint64_t contention_reads,
                            bool steal) {
  nlohmann::json sources = {
      {{"source", "sim"}, {"interval_s", o.sample_interval_s}, {"reads", reads}, {"clock", "virtual"}}};
  // A steal perturbation's stolen time as a host and a cgroup would show it.
  if (steal)
    for (const char* source : {"host", "cgroup"})
      sources.push_back({{"source", source},
                         {"interval_s", o.sample_interval_s},
                         {"reads", contention_reads},
                         {"clock", "virtual"},
                         {"simulated", "steal perturbation"}});
  return {{"samples_file", o.samples ? nlohmann::json("samples.jsonl") : nlohmann::json(nullptr)},
          {"sources", sources}};
}

// Each record to the run's sink, and to its replica's summary.
struct ReplicaSink final : RecordSink {
  RecordSink& down;
  std::vector<SummaryBuilder> per;
  // A disaggregated fleet: a request's prefill replica, whose summary has it
  // too (its record's replica is its decode replica).
  std::function<int(std::uint64_t)> prefill_of;
  ReplicaSink(RecordSink& d, std::size_t replicas) : down(d), per(replicas) {}
  void add_request(const RequestRecord& r) override {
    if (r.replica >= 0 && static_cast<std::size_t>(r.replica) < per.size())
      per[static_cast<std::size_t>(r.replica)].add(r);
    if (prefill_of) {
      const int p = prefill_of(r.id);
      if (p >= 0 && p != r.replica && static_cast<std::size_t>(p) < per.size())
        per[static_cast<std::size_t>(p)].add(r);
    }
    down.add_request(r);
  }
  void add_step(const StepRecord& s) override { down.add_step(s); }
};

}  // namespace

nlohmann::json requested_settings(const SimRunSettings& o) {
  nlohmann::json requested = {
      {"workload", workload::to_json(o.workload)},
      {"fleet", engine::requested_json(o.fleet)},
      {"workload_file", o.workload_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.workload_file)},
      {"engine", engine::to_json(o.engine)},
      {"output",
       {{"out", o.out},
        {"steps", o.steps},
        {"samples", o.samples},
        {"sample_interval_s", o.sample_interval_s}}},
  };
  // Only when given: the settings (and their hash) of runs without SLOs stay as they were.
  if (!o.slo.empty()) {
    std::vector<std::string> texts;
    for (const auto& s : o.slo) texts.push_back(s.text);
    requested["slo"] = texts;
  }
  return requested;
}

SimRunResult run_sim(const SimRunSettings& o, const std::atomic<bool>& interrupted, std::ostream& log) {
  const double cpu_start = process_cpu_seconds();
  const double started_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  SimRunResult result;
  result.settings = engine::engine_settings(o.engine, o.workload.seed);
  engine::EngineSettings& settings = result.settings;
  if (o.workload.rate_rps <= 0 || !std::isfinite(o.workload.rate_rps))
    throw UsageError(fmt::format("--rate: expected requests per second > 0, got {}", o.workload.rate_rps));
  const auto catalog = engine::load_catalog(o.engine);
  workload::BuiltWorkload bw;
  std::map<std::string, Slo> slos;
  if (o.workload_file.empty()) {
    bw = workload::build_workload(o.workload);
  } else {
    bench::BenchWorkload file = bench::load_workload_file(o.workload_file, o.workload.seed);
    if (!file.turns.empty())
      for (const auto& t : file.turns)
        if (t.session >= 0)
          throw UsageError(
              fmt::format("--workload {}: sessions (turns) need bench's closed loop; sim replays "
                          "requests at their arrival",
                          o.workload_file));
    bw.w = std::move(file.workload);
    bw.effective = std::move(file.effective);
    slos = std::move(file.slos);
  }
  // --slo: per class, or for every class the workload file gave none (as bench's).
  for (const auto& spec : o.slo) {
    if (spec.slo.empty())
      throw UsageError(
          fmt::format("--slo '{}': no target: give ttft_ms, tpot_ms, e2e_ms or ttfo_ms", spec.text));
    if (!spec.task_class.empty()) {
      // The class as the summary names it: "default" is the class of requests that name none.
      const std::string cls = spec.task_class == "default" ? "" : spec.task_class;
      if (std::find(bw.w.classes.begin(), bw.w.classes.end(), cls) == bw.w.classes.end()) {
        std::string names;
        for (const auto& c : bw.w.classes) names += (names.empty() ? "" : ", ") + (c.empty() ? "default" : c);
        throw UsageError(fmt::format("--slo '{}': the workload has no class '{}' (its classes: {})",
                                     spec.text, spec.task_class, names));
      }
      slos[cls] = spec.slo;
    } else if (bw.w.classes.empty()) {
      if (!slos.contains("")) slos[""] = spec.slo;
    } else {
      for (const auto& c : bw.w.classes)
        if (!slos.contains(c)) slos[c] = spec.slo;
    }
  }
  if (!o.only_class.empty()) {  // --coupling: one class alone, at its own arrival times
    std::vector<workload::Request> kept;
    for (const auto& r : bw.w.requests)
      if (r.task_class < bw.w.classes.size() && bw.w.classes[r.task_class] == o.only_class) kept.push_back(r);
    bw.w.requests = std::move(kept);
  }
  std::vector<std::string> coupling_classes;
  if (o.coupling) {
    if (o.out.empty())
      throw UsageError("--coupling needs --out (each class alone goes to OUT/coupling/CLASS)");
    coupling_classes = analyze::classes_in_use(bw.w);
    if (coupling_classes.size() < 2)
      throw UsageError("--coupling needs a workload with two or more task classes (--workload FILE)");
  }
  settings.num_tenants = static_cast<std::uint32_t>(bw.w.tenants.size());
  result.engine = engine::resolve_engine(settings, catalog);
  if (settings.profile) {
    // A profile is measured over ranges: beyond them its costs are extrapolated.
    const engine::ProfileRanges& measured = settings.profile->ranges;
    std::uint32_t longest = 0;
    for (const auto& r : bw.w.requests) longest = std::max(longest, r.input_tokens);
    if (measured.max_prompt_tokens > 0 && longest > measured.max_prompt_tokens)
      result.engine.notes.push_back(
          fmt::format("--profile: prompts of up to {} tokens, the profile measured up to {}: longer ones are "
                      "priced by extrapolation",
                      longest, measured.max_prompt_tokens));
    if (measured.max_batch > 0 && result.engine.max_num_seqs > measured.max_batch)
      result.engine.notes.push_back(fmt::format(
          "--profile: batches may reach {} sequences (max_num_seqs), the profile measured up to {}: "
          "larger ones are priced by extrapolation",
          result.engine.max_num_seqs, measured.max_batch));
  }
  const engine::EffectiveEngine& eff = result.engine;
  // A fleet: its pools, split and router, checked before anything is written.
  const engine::FleetSetup fs = engine::resolve_fleet(o.fleet, settings, eff, catalog, o.workload.seed);
  const std::vector<engine::PoolSpec>& pools = fs.pools;
  const std::optional<engine::Disaggregation>& pd = fs.pd;
  const engine::RouterSettings& router = fs.router;
  const std::uint32_t n_replicas = fs.replicas;
  const bool fleet_run = fs.fleet();
  result.gpus = fs.gpus;
  if (fleet_run) {
    if (o.coupling) throw UsageError("--coupling and --replicas cannot be combined yet");
    if (!settings.perturbations.empty())
      throw UsageError(
          "--perturb and --replicas cannot be combined yet (the perturbations act on one engine)");
  }
  result.workload_description = bw.w.description;
  result.read_report = bw.w.read_report;

  if (!o.out.empty()) claim_run_directory(o.out, o.overwrite, "--out");
  // The run's one path: every record, step and sample a line of its file,
  // the run cache built from them as they are written (not read back from
  // the files at the end: docs/architecture.md), the summary. Lines are
  // written in 64 KiB blocks, as steps and samples are: a run on virtual
  // time has no one watching its files as it goes, and Ctrl-C, an error or
  // a full disk end it through finish() or the files' close (whole lines
  // kept); a SIGKILL loses at most the last block of each file.
  rundir::RunSession session({.dir = o.out,
                              .requests_line_durable = false,
                              .cache = !o.out.empty() && o.cache ? rundir::run_cache_writer() : nullptr});
  const bool out = session.has_dir();
  session.summary().set_slos(slos);
  result.slos = slos;
  if (out && o.samples) session.open_samples();
  analyze::LatencyTap tap(session);  // the latencies by class, for --coupling
  const bool tapped = o.coupling || !o.only_class.empty();
  RecordSink& records = tapped ? static_cast<RecordSink&>(tap) : session;
  ReplicaSink by_replica(records, fleet_run ? n_replicas : 0);
  for (auto& b : by_replica.per) b.set_slos(slos);  // each replica's goodput and attainment
  // A fleet writes no steps.jsonl: each replica's steps would share one file (docs/engine.md "Fleets").
  engine::RecordingObserver observer(bw.w, fleet_run ? static_cast<RecordSink&>(by_replica) : records,
                                     out && o.steps && !fleet_run);
  observer.write_perturbations(!settings.perturbations.empty());
  // The server's canonical series on virtual time, as bench's scrapes give them (docs/observe.md).
  observe::SimSampler sampler(
      observer,
      out && o.samples && !fleet_run
          ? [&session](const observe::Observation& ob) { session.add_observation(ob); }
          : std::function<void(const observe::Observation&)>(),
      seconds_to_nanos(o.sample_interval_s));
  const bool steal = std::any_of(settings.perturbations.begin(), settings.perturbations.end(),
                                 [](const auto& p) { return p.kind() == engine::PerturbationKind::kSteal; });
  if (steal) sampler.enable_contention_series();
  // A fleet's: its replicas' series summed, and each replica's labelled engine="N".
  observe::FleetSampler fleet_sampler(
      observer,
      out && o.samples && fleet_run
          ? [&session](const observe::Observation& ob) { session.add_observation(ob); }
          : std::function<void(const observe::Observation&)>(),
      seconds_to_nanos(o.sample_interval_s));
  settings.track_coupling = o.coupling;  // the design's kappa terms per class (docs/metrics.md "Coupling")
  std::unique_ptr<engine::Engine> engine_one;
  std::unique_ptr<engine::Fleet> fleet;
  engine::FleetReport fleet_report;
  if (fleet_run) {
    const bool sampled = out && o.samples;  // else no sampler between the fleet and the records
    fleet =
        fs.make(eff, settings, sampled ? static_cast<engine::EngineObserver*>(&fleet_sampler) : &observer);
    if (sampled) fleet_sampler.attach(fleet.get());
    if (pd) {
      by_replica.prefill_of = [f = fleet.get()](std::uint64_t id) { return f->prefill_replica_of(id); };
    }
    observer.set_replica_of([f = fleet.get()](std::uint64_t id) { return f->replica_of(id); });
    fleet_report = engine::run_fleet_simulation(
        bw.w, *fleet, &interrupted,
        sampled ? std::function<void(Nanos)>([&fleet_sampler](Nanos t) { fleet_sampler.advance(t); })
                : nullptr);
    if (sampled) fleet_sampler.finish(fleet_report.total.virtual_end_ns);
    result.report = fleet_report.total;
  } else {
    engine_one =
        std::make_unique<engine::Engine>(eff, settings, engine::make_cost_model(settings, eff), &sampler);
    sampler.attach(engine_one.get());
    result.report = engine::run_simulation(bw.w, *engine_one, &interrupted);
    sampler.finish(result.report.virtual_end_ns);
  }
  const engine::SimReport& report = result.report;
  session.summary().set_server_counters(engine::server_counters(report.counters));
  result.summary = session.summary().build();
  if (engine_one && engine_one->perturber()) result.perturbations = engine_one->perturber()->to_json();
  if (fleet_run) {
    nlohmann::json replicas = nlohmann::json::array();
    for (std::size_t i = 0; i < fleet->size(); ++i) {
      const auto& c = fleet_report.replicas[i].counters;
      nlohmann::json sum = by_replica.per[i].build();
      replicas.push_back(
          {{"replica", i},
           {"pool", pools.empty() ? nlohmann::json(nullptr) : nlohmann::json(pools[fleet->pool_of(i)].name)},
           {"role",
            pd ? nlohmann::json(fleet->is_prefill(i) ? "prefill" : "decode") : nlohmann::json(nullptr)},
           {"speed_tokens_per_s",
            fleet->speeds().empty() ? nlohmann::json(nullptr) : nlohmann::json(fleet->speeds()[i])},
           {"router_weight", fleet->router().weights().empty()
                                 ? nlohmann::json(nullptr)
                                 : nlohmann::json(fleet->router().weights()[i])},
           {"routed", fleet_report.routed[i]},
           {"virtual_end_s", nanos_to_s(fleet_report.replicas[i].virtual_end_ns)},
           {"summary", sum},
           {"prefix_cache_hit_rate", c.prefix_queries_tokens > 0
                                         ? nlohmann::json(static_cast<double>(c.prefix_hits_tokens) /
                                                          static_cast<double>(c.prefix_queries_tokens))
                                         : nlohmann::json(nullptr)},
           {"engine_counters", counters_json(c)}});
    }
    result.fleet = {
        {"replicas", n_replicas},
        {"gpus", result.gpus},
        {"pools", fs.pools_json()},
        {"cost_per_hour", fs.cost_per_hour()},
        {"router", engine::name_of(router.policy)},
        {"load_bound", router.policy == engine::RouterPolicy::kPrefixAffinity
                           ? nlohmann::json(router.load_bound)
                           : nlohmann::json(nullptr)},
        {"session_key", "tenant"},
        {"disaggregation", pd ? engine::disaggregation_json(*fleet, o.fleet) : nlohmann::json(nullptr)},
        {"per_replica", replicas}};
  }
  result.cpu_s = process_cpu_seconds() - cpu_start;
  if (!out) return result;

  // Written once, at the end (virtual time has no wall clock to anchor).
  nlohmann::json run =
      rundir::run_json_head({.command = "sim",
                             .clock = rundir::virtual_clock(),
                             .partial = report.interrupted,
                             .tags = o.tags,
                             .requested = requested_settings(o),
                             .effective = {{"engine", eff.to_json()}, {"workload", bw.effective}}});
  run["summary"] = result.summary;
  run["engine_counters"] = counters_json(report.counters);
  // The ground truth for tokenscope check: what was injected (docs/engine.md "Perturbations").
  run["perturbations"] = result.perturbations;
  if (engine_one && engine_one->perturber()) run["perturbation_seed"] = settings.perturbation_seed;
  run["virtual_end_s"] = nanos_to_s(report.virtual_end_ns);
  if (!o.plan.is_null()) run["plan"] = o.plan;
  if (fleet_run) {
    run["fleet"] = result.fleet;
    run["observe"] = observe_json(o, fleet_sampler.observations(), 0, false);
    run["observe"]["note"] = "a fleet run writes no steps.jsonl yet (docs/engine.md \"Fleets\")";
  } else {
    run["observe"] = observe_json(o, sampler.observations(), sampler.contention_observations(), steal);
  }
  if (tapped) result.latencies = tap.latencies;
  if (o.coupling && !report.interrupted) {
    // Each class alone at its own arrival times (virtual time: deterministic), then kappa per class.
    std::map<std::string, analyze::ClassLatencies> alone;
    std::map<std::string, std::string> alone_runs;
    const auto dirs = analyze::coupling_run_dirs(coupling_classes);
    for (std::size_t ci = 0; ci < coupling_classes.size(); ++ci) {
      const std::string& cls = coupling_classes[ci];
      if (interrupted.load()) break;
      const std::string& rel = dirs[ci];
      SimRunSettings oc = o;
      oc.coupling = false;
      oc.only_class = cls;
      oc.out = (std::filesystem::path(o.out) / rel).string();
      oc.overwrite = true;
      oc.finish = Finishers{};
      std::ostringstream quiet;
      SimRunResult a = run_sim(oc, interrupted, quiet);
      if (auto it = a.latencies.find(cls); it != a.latencies.end()) alone[cls] = std::move(it->second);
      alone_runs[cls] = rel;
    }
    result.coupling = analyze::coupling_json(result.latencies, alone, alone_runs);
    // The design's kappa = rho_shared x dt_align / tau_base, from the engine's traffic by class.
    nlohmann::json design = nlohmann::json::object();
    for (const auto& [g, t] : engine_one->coupling_terms()) {
      if (g >= bw.w.classes.size()) continue;
      design[bw.w.classes[g].empty() ? "default" : bw.w.classes[g]] = {{"rho_shared", t.rho_shared},
                                                                       {"dt_align_ms", t.dt_align_s * 1e3},
                                                                       {"tau_base_ms", t.tau_base_s * 1e3},
                                                                       {"kappa", t.kappa()},
                                                                       {"steps", t.steps}};
    }
    result.coupling["design"] = design;
    run["coupling"] = result.coupling;
  }
  // Virtual time has no wall clock: the history takes the start from here.
  session.add_finisher(rundir::FinisherKind::kReadsFinishedRun, [&](rundir::FinishedRun& r) {
    result.report_written = finish_run(o.finish, o.out, {o.out}, started_unix, r.log);
  });
  // The run cache, for the check or report that comes next: not for an
  // interrupted run (it ends at once).
  session.finish(run, !report.interrupted, log);
  return result;
}

}  // namespace tokenscope::session
