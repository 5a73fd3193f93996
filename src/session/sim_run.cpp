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
nlohmann::json observe_json(const SimRunSettings& o, const observe::SimSampler& sampler, bool steal) {
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

// run.json fleet.disaggregation: the split, the link, and what the transfers took.
nlohmann::json disaggregation_json(const engine::Fleet& fleet, const SimRunSettings& o) {
  std::vector<double> total_ms, wait_ms;
  double bytes = 0;
  std::uint64_t delivered = 0;
  for (const auto& x : fleet.transfers()) {
    bytes += x.bytes;
    total_ms.push_back(nanos_to_ms(x.arrive - x.ready));
    wait_ms.push_back(nanos_to_ms(x.start - x.ready));
    delivered += x.decode_replica >= 0;
  }
  const auto quantiles = [](std::vector<double>& v) {
    if (v.empty()) return nlohmann::json(nullptr);
    nlohmann::json q;
    q["mean"] = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    for (const auto& [name, p] : {std::pair{"p50", 0.5}, {"p99", 0.99}, {"max", 1.0}})
      q[name] = nearest_rank_select(v, p);
    return q;
  };
  nlohmann::json links = nlohmann::json::array();
  for (const double b : fleet.link_bytes()) links.push_back(b);
  return {{"prefill_replicas", o.prefill_replicas},
          {"decode_replicas", o.decode_replicas},
          {"decode_router", o.decode_router},
          {"kv_link_gb_s", o.kv_link_gb_s},
          {"kv_link_latency_us", o.kv_link_latency_us},
          {"transfers", fleet.transfers().size()},
          {"transfers_delivered", delivered},
          {"transfer_bytes", bytes},
          {"link_bytes", links},
          {"transfer_ms", quantiles(total_ms)},
          {"link_wait_ms", quantiles(wait_ms)}};
}

}  // namespace

nlohmann::json requested_settings(const SimRunSettings& o) {
  nlohmann::json requested = {
      {"workload", workload::to_json(o.workload)},
      {"fleet", o.replicas > 1 || !o.pools_file.empty() || o.prefill_replicas > 0
                    ? nlohmann::json{{"replicas", o.replicas},
                                     {"pools", o.pools_file.empty() ? nlohmann::json(nullptr)
                                                                    : nlohmann::json(o.pools_file)},
                                     {"router", o.router},
                                     {"router_load_bound", o.router_load_bound}}
                    : nlohmann::json(nullptr)},
      {"workload_file", o.workload_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.workload_file)},
      {"engine", engine::to_json(o.engine)},
      {"output",
       {{"out", o.out},
        {"steps", o.steps},
        {"samples", o.samples},
        {"sample_interval_s", o.sample_interval_s}}},
  };
  if (!o.pools_file.empty()) requested["fleet"]["router_weights"] = o.router_weights;
  if (!o.pool_counts.empty()) requested["fleet"]["pool_counts"] = o.pool_counts;  // a plan's choice
  // Only when given, as the SLOs below: the settings of fleets without it stay as they were.
  if (o.prefill_replicas > 0)
    requested["fleet"]["disaggregation"] = {{"prefill_replicas", o.prefill_replicas},
                                            {"decode_replicas", o.decode_replicas},
                                            {"decode_router", o.decode_router},
                                            {"kv_link_gb_s", o.kv_link_gb_s},
                                            {"kv_link_latency_us", o.kv_link_latency_us}};
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
  // A fleet: its router, checked before anything is written.
  if (o.replicas == 0 || o.replicas > 4096) throw UsageError("--replicas: expected 1 to 4096");
  // Heterogeneous pools: each resolved on its GPU and TP degree.
  std::vector<engine::PoolSpec> pools;
  std::vector<engine::EffectiveEngine> pool_engines;
  if (!o.pools_file.empty()) {
    if (o.replicas != 1) throw UsageError("--pools gives the replicas (each pool's count): drop --replicas");
    if (settings.profile)
      throw UsageError("--pools and --profile cannot be combined (a profile is measured on one GPU)");
    pools = engine::load_pools(o.pools_file);
    if (!o.pool_counts.empty()) {
      if (o.pool_counts.size() != pools.size())
        throw UsageError(fmt::format("{}: {} pools, but {} counts were given", o.pools_file, pools.size(),
                                     o.pool_counts.size()));
      std::vector<engine::PoolSpec> kept;
      for (std::size_t k = 0; k < pools.size(); ++k)
        if (o.pool_counts[k] > 0) {
          kept.push_back(pools[k]);
          kept.back().count = o.pool_counts[k];
        }
      if (kept.empty()) throw UsageError(fmt::format("{}: every pool's count is 0", o.pools_file));
      pools = std::move(kept);
    }
    for (std::size_t k = 0; k < pools.size(); ++k) {
      engine::EngineSettings ps = settings;
      ps.gpu = pools[k].gpu;
      ps.tensor_parallel = pools[k].tensor_parallel;
      try {
        pool_engines.push_back(engine::resolve_engine(ps, catalog));
      } catch (const UsageError& e) {
        throw InputError(o.pools_file, pools[k].line, fmt::format("pools[{}]", k), e.what());
      }
    }
  }
  std::uint32_t n_replicas = o.replicas;
  if (!pools.empty()) {
    n_replicas = 0;
    for (const auto& p : pools) n_replicas += p.count;
  }
  std::optional<engine::Disaggregation> pd;
  if (o.prefill_replicas > 0 || o.decode_replicas > 0) {
    if (o.prefill_replicas == 0 || o.decode_replicas == 0)
      throw UsageError("--prefill-replicas and --decode-replicas go together (each at least 1)");
    if (o.replicas != 1)
      throw UsageError("--prefill-replicas and --decode-replicas make the fleet: drop --replicas");
    if (!pools.empty()) throw UsageError("--prefill-replicas and --pools cannot be combined yet");
    if (o.prefill_replicas > 4096 || o.decode_replicas > 4096)
      throw UsageError("--prefill-replicas, --decode-replicas: at most 4096 each");
    if (!(o.kv_link_gb_s >= 1e-3 && o.kv_link_gb_s <= 1e6))
      throw UsageError(
          fmt::format("--kv-link-gb-s: expected a bandwidth in [0.001, 1e6] GB/s, got {}", o.kv_link_gb_s));
    if (!(o.kv_link_latency_us >= 0 && o.kv_link_latency_us <= 1e9))
      throw UsageError(fmt::format("--kv-link-latency-us: expected a latency in [0, 1e9] us, got {}",
                                   o.kv_link_latency_us));
    pd.emplace();
    pd->prefill_replicas = o.prefill_replicas;
    pd->link_bytes_per_s = o.kv_link_gb_s * 1e9;
    pd->link_latency_ns = seconds_to_nanos(o.kv_link_latency_us * 1e-6);
    pd->decode_policy = engine::parse_router_policy(o.decode_router);
    n_replicas = o.prefill_replicas + o.decode_replicas;
  }
  const bool fleet_run = n_replicas > 1 || !pools.empty();
  result.gpus = n_replicas * eff.tensor_parallel;
  if (!pools.empty()) {
    result.gpus = 0;
    for (const auto& p : pools) result.gpus += p.count * p.tensor_parallel;
  }
  engine::RouterSettings router;
  if (fleet_run) {
    router.policy = engine::parse_router_policy(o.router);
    router.seed = o.workload.seed;
    if (!(o.router_load_bound >= 1.0 && o.router_load_bound <= 1000.0))
      throw UsageError(
          fmt::format("--router-load-bound: expected a number in [1, 1000], got {}", o.router_load_bound));
    router.load_bound = o.router_load_bound;
    if (o.router_weights != "speed" && o.router_weights != "equal")
      throw UsageError(fmt::format("--router-weights: expected speed or equal, got '{}'", o.router_weights));
    router.speed_weighted = o.router_weights == "speed";
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
  if (out && o.samples && !fleet_run) session.open_samples();
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
  settings.track_coupling = o.coupling;  // the design's kappa terms per class (docs/metrics.md "Coupling")
  std::unique_ptr<engine::Engine> engine_one;
  std::unique_ptr<engine::Fleet> fleet;
  engine::FleetReport fleet_report;
  if (fleet_run) {
    if (pools.empty()) {
      fleet = std::make_unique<engine::Fleet>(
          n_replicas, eff, settings, [&] { return engine::make_cost_model(settings, eff); }, &observer,
          router);
    } else {
      std::vector<engine::ReplicaSpec> specs;
      for (std::size_t k = 0; k < pools.size(); ++k)
        for (std::uint32_t c = 0; c < pools[k].count; ++c) {
          engine::ReplicaSpec r{.eff = pool_engines[k], .settings = settings, .pool = k};
          r.settings.gpu = pools[k].gpu;
          r.settings.tensor_parallel = pools[k].tensor_parallel;
          specs.push_back(std::move(r));
        }
      fleet = std::make_unique<engine::Fleet>(
          std::move(specs),
          [](const engine::ReplicaSpec& r) { return engine::make_cost_model(r.settings, r.eff); }, &observer,
          router);
    }
    if (pd) {
      fleet->disaggregate(*pd);
      by_replica.prefill_of = [f = fleet.get()](std::uint64_t id) { return f->prefill_replica_of(id); };
    }
    observer.set_replica_of([f = fleet.get()](std::uint64_t id) { return f->replica_of(id); });
    fleet_report = engine::run_fleet_simulation(bw.w, *fleet, &interrupted);
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
    nlohmann::json pool_list = nullptr;
    double cost = 0.0;
    bool cost_known = !pools.empty();  // every pool has a price
    if (!pools.empty()) {
      pool_list = nlohmann::json::array();
      for (std::size_t k = 0; k < pools.size(); ++k) {
        const auto& p = pools[k];
        const std::uint32_t gpus = p.count * p.tensor_parallel;
        if (p.gpu_cost_per_hour)
          cost += *p.gpu_cost_per_hour * gpus;
        else
          cost_known = false;
        pool_list.push_back({{"name", p.name},
                             {"gpu", pool_engines[k].gpu.name},
                             {"tensor_parallel", p.tensor_parallel},
                             {"count", p.count},
                             {"gpus", gpus},
                             {"gpu_cost_per_hour", p.gpu_cost_per_hour ? nlohmann::json(*p.gpu_cost_per_hour)
                                                                       : nlohmann::json(nullptr)},
                             {"kv_cache_blocks_per_replica",
                              pool_engines[k].num_gpu_blocks ? nlohmann::json(*pool_engines[k].num_gpu_blocks)
                                                             : nlohmann::json(nullptr)}});
      }
    }
    result.fleet = {{"replicas", n_replicas},
                    {"gpus", result.gpus},
                    {"pools", pool_list},
                    {"cost_per_hour", cost_known ? nlohmann::json(cost) : nlohmann::json(nullptr)},
                    {"router", engine::name_of(router.policy)},
                    {"load_bound", router.policy == engine::RouterPolicy::kPrefixAffinity
                                       ? nlohmann::json(router.load_bound)
                                       : nlohmann::json(nullptr)},
                    {"session_key", "tenant"},
                    {"disaggregation", pd ? disaggregation_json(*fleet, o) : nlohmann::json(nullptr)},
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
    run["observe"] = {{"samples_file", nullptr},
                      {"sources", nlohmann::json::array()},
                      {"note", "a fleet run writes no samples or steps yet (docs/engine.md \"Fleets\")"}};
  } else {
    run["observe"] = observe_json(o, sampler, steal);
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
