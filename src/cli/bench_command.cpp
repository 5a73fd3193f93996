#include "cli/bench_command.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "bench/bench_workload.h"
#include "bench/prompt_text.h"
#include "bench/runner.h"
#include "bench/schedule.h"
#include "cli/engine_options.h"
#include "cli/summary_table.h"
#include "cli/workload_options.h"
#include "core/error.h"
#include "core/json_out.h"
#include "core/metrics.h"
#include "core/run_dir.h"
#include "core/summary.h"
#include "serve/faults.h"
#include "serve/metrics.h"
#include "serve/server_app.h"

namespace tokenscope::cli {

namespace {

constexpr int kExitSloFailed = 3;

struct BenchOptions {
  WorkloadOptions workload;
  std::string workload_file;
  EngineOptions engine_options;
  // Target.
  std::string target;
  std::string api = "completions";
  std::string endpoint;
  std::string api_key;
  std::vector<std::string> headers;
  double timeout_s = 600.0;
  bool insecure = false;
  std::string ca_file;
  bool no_stream = false;
  bool no_ignore_eos = false;
  // Load.
  std::string stages;
  std::uint32_t max_concurrency = 0;
  std::uint32_t concurrency = 0;  // closed loop users
  std::string user_stages;
  double think_ms = 0.0;
  std::string think_dist = "fixed";
  double warmup_s = 0.0;
  unsigned client_threads = 1;
  std::vector<std::string> slo;
  std::string sweep_rates;
  std::string sweep_search;
  unsigned sweep_steps = 6;
  // In-process server.
  unsigned server_threads = 1;
  std::string faults;
  std::uint64_t fault_seed = 0;
  std::string trace_emissions;
  // Output.
  std::string out;
  std::string compat;
  bool csv = false;
  bool json = false;
  bool quiet = false;
  std::string progress = "auto";
  double grace_s = 5.0;
};

BenchOptions g_opts;
CLI::App* g_app = nullptr;

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

std::string default_out_dir() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "runs/bench-%Y%m%d-%H%M%S", &tm);
  return buf;
}

// "ttft_ms=500,tpot_ms=50,e2e_ms=2000,p=99" (class:... prefix selects a class).
std::pair<std::string, Slo> parse_slo(std::string_view spec) {
  std::string cls;
  std::string_view rest = spec;
  if (const auto colon = rest.find(':'); colon != std::string_view::npos) {
    cls = std::string(rest.substr(0, colon));
    rest.remove_prefix(colon + 1);
  }
  Slo slo;
  std::size_t start = 0;
  while (start <= rest.size()) {
    const std::size_t comma = rest.find(',', start);
    const std::string_view part = rest.substr(start, comma - start);
    const std::size_t eq = part.find('=');
    if (eq == std::string_view::npos)
      throw UsageError(
          fmt::format("--slo '{}': '{}' should be NAME=VALUE (ttft_ms, tpot_ms, e2e_ms, p)", spec, part));
    const std::string name(part.substr(0, eq));
    double v = 0;
    try {
      std::size_t used = 0;
      v = std::stod(std::string(part.substr(eq + 1)), &used);
      if (used != part.size() - eq - 1) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw UsageError(fmt::format("--slo '{}': '{}' is not a number", spec, part.substr(eq + 1)));
    }
    if (!(v > 0) || !std::isfinite(v))
      throw UsageError(fmt::format("--slo '{}': {} must be > 0", spec, name));
    if (name == "ttft_ms" || name == "ttft")
      slo.ttft_ms = v;
    else if (name == "tpot_ms" || name == "tpot")
      slo.tpot_ms = v;
    else if (name == "e2e_ms" || name == "e2e")
      slo.e2e_ms = v;
    else if (name == "p" || name == "percentile") {
      if (v > 100) throw UsageError(fmt::format("--slo '{}': p must be in (0, 100]", spec));
      slo.percentile = v;
    } else
      throw UsageError(
          fmt::format("--slo '{}': unknown metric '{}' (ttft_ms, tpot_ms, e2e_ms, p)", spec, name));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return {cls, slo};
}

// Everything one run needs, built from the options (and a rate override in sweeps).
struct Prepared {
  bench::BenchWorkload bw;
  bench::LoadPlan plan;
  std::map<std::string, Slo> slos;
  nlohmann::json effective_load;
};

Prepared prepare(const BenchOptions& o, std::optional<double> rate) {
  Prepared p;
  WorkloadOptions wo = o.workload;
  if (rate) wo.rate_rps = *rate;
  const bool closed = o.concurrency > 0 || !o.user_stages.empty();
  std::vector<bench::Stage> stages;
  if (!o.stages.empty()) {
    if (closed) throw UsageError("--stages is for the open loop; use --user-stages with --concurrency");
    stages = bench::parse_stages(o.stages, "--stages");
    if (rate) throw UsageError("--stages and a sweep cannot be combined");
  }
  if (o.workload_file.empty()) {
    BuiltWorkload built = build_workload(wo);
    p.bw.workload = std::move(built.w);
    p.bw.effective = std::move(built.effective);
  } else {
    p.bw = bench::load_workload_file(o.workload_file, wo.seed, rate);
  }
  auto& w = p.bw.workload;
  if (w.requests.empty()) throw UsageError("the workload has no requests");
  p.plan.threads = o.client_threads;
  p.plan.timeout_s = o.timeout_s;
  p.plan.warmup_s = o.warmup_s;
  p.plan.turns = p.bw.turns;
  if (closed) {
    p.plan.closed_loop = true;
    p.plan.user_stages = o.user_stages.empty()
                             ? std::vector<bench::Stage>{{static_cast<double>(o.concurrency),
                                                          wo.num_requests > 0 ? 1e9 : wo.duration_s}}
                             : bench::parse_stages(o.user_stages, "--user-stages");
    p.plan.max_requests = wo.num_requests;
    p.plan.think_ms = o.think_ms;
    if (o.think_dist != "fixed" && o.think_dist != "exponential")
      throw UsageError("--think-dist: expected fixed or exponential");
    p.plan.think_exponential = o.think_dist == "exponential";
    p.plan.think_seed = derive_seed(wo.seed, "think");
  } else {
    std::vector<Nanos> times;
    if (!stages.empty()) {
      workload::ArrivalSettings a;
      a.kind = workload::parse_arrival_kind(wo.arrival.empty() ? "poisson" : wo.arrival);
      if (a.kind == workload::ArrivalKind::kTrace) throw UsageError("--stages needs a synthetic --arrival");
      a.burstiness = wo.burstiness;
      Rng rng(derive_seed(wo.seed, "stages"));
      times = bench::stage_arrivals(stages, a, rng);
    }
    std::size_t n = 0;
    for (std::size_t i = 0; i < w.requests.size(); ++i) {
      if (!p.bw.turns.empty() && p.bw.turns[i].turn > 0) continue;  // follow-ups come after their turn
      if (stages.empty()) {
        p.plan.schedule.emplace_back(static_cast<std::uint32_t>(i), w.requests[i].arrival_ns);
      } else {
        if (n >= times.size()) break;
        p.plan.schedule.emplace_back(static_cast<std::uint32_t>(i), times[n]);
      }
      ++n;
    }
    if (!stages.empty() && n < times.size())
      throw UsageError(
          fmt::format("--stages plan {} requests but the workload has {}; raise --num-requests or use "
                      "a longer trace",
                      times.size(), n));
    std::sort(p.plan.schedule.begin(), p.plan.schedule.end(),
              [](const auto& a, const auto& b) { return a.second < b.second; });
    p.plan.max_concurrency = o.max_concurrency;
  }
  // SLOs: per class from the workload file; --slo for the rest.
  p.slos = p.bw.slos;
  for (const auto& spec : o.slo) {
    auto [cls, slo] = parse_slo(spec);
    if (!cls.empty()) {
      p.slos[cls] = slo;
    } else {
      for (const auto& c : w.classes)
        if (!p.slos.contains(c)) p.slos[c] = slo;
    }
  }
  p.effective_load = {
      {"mode", closed ? "closed" : "open"},
      {"planned_requests", closed ? nlohmann::json(nullptr) : nlohmann::json(p.plan.schedule.size())},
      {"last_offset_s", p.plan.schedule.empty() ? 0.0 : nanos_to_s(p.plan.schedule.back().second)},
      {"rate_rps", rate ? nlohmann::json(*rate) : nlohmann::json(wo.rate_rps)},
      {"max_concurrency", o.max_concurrency},
      {"client_threads", o.client_threads}};
  return p;
}

// Asks the server which model it serves (GET /v1/models), for requests
// that name none.
std::string discover_model(const net::Endpoint& ep, const net::ClientOptions& copt,
                           const std::string& api_key) {
  boost::asio::io_context ioc;
  SteadyClock clock;
  net::HttpClient client(ioc, ep, copt, clock);
  struct Handler : net::ExchangeHandler {
    int status = 0;
    std::string body, error;
    void on_sent(Nanos) override {}
    void on_headers(int s, Nanos) override { status = s; }
    void on_body(std::string_view d, Nanos) override { body += d; }
    void on_complete(net::ExchangeError e, std::string_view m, Nanos) override {
      if (e != net::ExchangeError::kNone) error = std::string(m);
    }
  } h;
  std::string req = fmt::format("GET {}/v1/models HTTP/1.1\r\nHost: {}\r\n", ep.base_path, ep.host_header());
  if (!api_key.empty()) req += "Authorization: Bearer " + api_key + "\r\n";
  req += "\r\n";
  client.start(std::make_shared<const std::string>(std::move(req)), &h,
               clock.now_ns() + 30 * kNanosPerSecond);
  ioc.run();
  if (!h.error.empty()) throw UsageError(fmt::format("--target {}: {}", ep.url(), h.error));
  if (h.status != 200)
    throw UsageError(
        fmt::format("--target {}: GET /v1/models answered HTTP {}; give --model", ep.url(), h.status));
  try {
    const auto j = nlohmann::json::parse(h.body);
    return j.at("data").at(0).at("id").get<std::string>();
  } catch (const std::exception&) {
    throw UsageError(
        fmt::format("--target {}: cannot read a model id from /v1/models; give --model", ep.url()));
  }
}

// The vLLM benchmark's result keys, for dashboards built on them.
struct VllmCompat {
  std::vector<std::int64_t> input_lens, output_lens;
  std::vector<double> ttfts;
  std::vector<std::vector<double>> itls;
  std::vector<std::string> errors;
  void add(const RequestRecord& r) {
    if (r.warmup) return;
    const bool ok = r.outcome == Outcome::kOk;
    input_lens.push_back(r.prompt_tokens);
    output_lens.push_back(ok ? r.output_tokens : 0);
    ttfts.push_back(ok && r.t_first_token >= 0 ? nanos_to_s(r.t_first_token - r.t_send) : 0.0);
    std::vector<double> gaps;
    for (std::size_t i = 1; ok && i < r.event_times.size(); ++i)
      gaps.push_back(nanos_to_s(r.event_times[i] - r.event_times[i - 1]));
    itls.push_back(std::move(gaps));
    errors.push_back(ok ? "" : std::string(outcome_name(r.outcome)) + ": " + r.detail);
  }
  nlohmann::json build(const nlohmann::json& s, const BenchOptions& o, const std::string& model, double rate,
                       bool chat) const {
    nlohmann::json j;
    char date[32];
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    std::strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tm);
    j["date"] = date;
    j["backend"] = chat ? "openai-chat" : "vllm";
    j["model_id"] = model;
    j["tokenizer_id"] = model;
    j["num_prompts"] = s["requests_total"];
    j["request_rate"] = o.concurrency > 0 ? nlohmann::json("inf") : nlohmann::json(rate);
    j["burstiness"] = o.workload.burstiness;
    j["max_concurrency"] = o.max_concurrency > 0 ? nlohmann::json(o.max_concurrency)
                           : o.concurrency > 0   ? nlohmann::json(o.concurrency)
                                                 : nlohmann::json(nullptr);
    j["duration"] = s["duration_s"];
    j["completed"] = s["requests_completed"];
    j["total_input_tokens"] = s["prompt_tokens_total"];
    j["total_output_tokens"] = s["output_tokens_total"];
    j["request_throughput"] = s["request_throughput_rps"];
    j["request_goodput"] = s["goodput_rps"];
    j["output_throughput"] = s["output_token_throughput_tps"];
    const double dur = s["duration_s"].get<double>();
    j["total_token_throughput"] =
        dur > 0 ? (s["prompt_tokens_total"].get<double>() + s["output_tokens_total"].get<double>()) / dur
                : 0.0;
    // vLLM's "itl" is the raw gap between events: tokenscope's ICL.
    for (const auto& [ours, theirs] :
         {std::pair{"ttft_ms", "ttft"}, {"tpot_ms", "tpot"}, {"icl_ms", "itl"}, {"e2e_ms", "e2el"}}) {
      const auto& d = s[ours];
      j[fmt::format("mean_{}_ms", theirs)] = d["mean"].is_null() ? nlohmann::json(0.0) : d["mean"];
      j[fmt::format("median_{}_ms", theirs)] = d["p50"].is_null() ? nlohmann::json(0.0) : d["p50"];
      j[fmt::format("std_{}_ms", theirs)] = d["std"].is_null() ? nlohmann::json(0.0) : d["std"];
      for (const char* p : {"p90", "p95", "p99"})
        j[fmt::format("{}_{}_ms", p, theirs)] = d[p].is_null() ? nlohmann::json(0.0) : d[p];
    }
    j["input_lens"] = input_lens;
    j["output_lens"] = output_lens;
    j["ttfts"] = ttfts;
    j["itls"] = itls;
    j["generated_texts"] = std::vector<std::string>(input_lens.size());
    j["errors"] = errors;
    return j;
  }
};

void append_csv_field(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    if (c == '"') out += '"';
    out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  out += '"';
}

constexpr std::string_view kCsvHeader =
    "id,tenant,class,session,turn,warmup,outcome,http_status,t_sched_ns,t_send_ns,t_first_token_ns,"
    "t_last_token_ns,t_close_ns,prompt_tokens,output_tokens,output_tokens_client,cached_tokens,ttft_ms,"
    "ttft_sched_ms,tpot_ms,e2e_ms,send_lag_ms,detail";

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
  append_csv_field(out, r.detail);
}

struct RunResult {
  nlohmann::json summary;
  bool interrupted = false;
  std::string model;
};

RunResult run_one(const BenchOptions& o, std::optional<double> rate, const std::string& out_dir,
                  const std::atomic<bool>& interrupted, bool print) {
  const double cpu_start = cpu_seconds();
  Prepared p = prepare(o, rate);
  const auto& w = p.bw.workload;

  // The target: a remote server, or the simulator in-process.
  std::unique_ptr<serve::ServerApp> server;
  std::optional<engine::EffectiveEngine> eff;
  net::Endpoint endpoint;
  net::ClientOptions copt;
  copt.verify_tls = !o.insecure;
  copt.ca_file = o.ca_file;
  bench::RequestSettings rs;
  rs.api = o.api == "chat" ? bench::Api::kChat : bench::Api::kCompletions;
  rs.stream = !o.no_stream;
  rs.ignore_eos = !o.no_ignore_eos;
  rs.api_key = o.api_key;
  if (!o.endpoint.empty() && o.endpoint.front() != '/')
    throw UsageError(fmt::format("--endpoint '{}': expected a path starting with '/'", o.endpoint));
  rs.path = o.endpoint;
  for (const auto& h : o.headers) {
    const auto colon = h.find(':');
    if (colon == std::string::npos || colon == 0)
      throw UsageError(fmt::format("--header '{}': expected 'Name: value'", h));
    std::string value = h.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    if (value.find_first_of("\r\n") != std::string::npos)
      throw UsageError(fmt::format("--header '{}': line breaks are not allowed", h));
    rs.headers.emplace_back(h.substr(0, colon), value);
  }
  if (o.target.empty()) {
    const engine::EngineSettings settings = engine_settings(o.engine_options);
    const auto catalog = load_catalog(o.engine_options);
    engine::EngineSettings s2 = settings;
    s2.num_tenants = static_cast<std::uint32_t>(w.tenants.size());
    eff = engine::resolve_engine(s2, catalog);
    serve::ServerAppSettings ss;
    ss.threads = o.server_threads;
    ss.api_key = o.api_key;
    ss.faults = serve::parse_fault_spec(o.faults);
    ss.fault_seed = o.fault_seed;
    ss.trace_emissions = o.trace_emissions;
    ss.core.natural_length.reset();  // ignore_eos decides; without it the model runs to max_tokens
    ss.limits.max_connections = 100000;
    server = std::make_unique<serve::ServerApp>(*eff, s2, make_cost_model(s2, *eff), ss);
    server->start();
    endpoint = net::Endpoint::parse_url(fmt::format("http://127.0.0.1:{}", server->port()));
    rs.model = eff->model.name;
  } else {
    if (!o.faults.empty() || !o.trace_emissions.empty())
      throw UsageError("--faults and --trace-emissions apply to the in-process server (no --target)");
    endpoint = net::Endpoint::parse_url(o.target);
    rs.model = g_app->count("--model") > 0 ? o.engine_options.engine.model
                                           : discover_model(endpoint, copt, o.api_key);
  }

  // Records are written in batches (one write per drain, every 100 ms), so
  // that the writing thread takes little time from the client threads.
  RunDirectory dir(out_dir, /*requests_line_durable=*/false);
  dir.requests();  // opened now: before the client's connections take the descriptors
  std::unique_ptr<JsonlWriter> csv;
  if (o.csv) {
    csv = std::make_unique<JsonlWriter>(std::filesystem::path(out_dir) / "requests.csv", false);
    csv->append_line(kCsvHeader);
  }
  SummaryBuilder summary;
  summary.set_slos(p.slos);
  VllmCompat compat;

  bench::RecordQueue queue;
  bench::Runner runner(w, p.plan, endpoint, copt, rs, queue);
  const bool tty = o.progress == "auto" ? isatty(STDERR_FILENO) != 0 : o.progress == "tty";
  const bool progress = !o.quiet && o.progress != "none";
  const double planned_s = p.plan.closed_loop
                               ? bench::total_duration_s(p.plan.user_stages)
                               : (p.plan.schedule.empty() ? 0.0 : nanos_to_s(p.plan.schedule.back().second));
  runner.start();

  std::vector<RequestRecord> batch;
  auto drain = [&] {
    batch.clear();
    queue.drain(batch);
    for (const auto& r : batch) {
      r.append_json(dir.requests().begin_line());
      dir.requests().end_line();
      if (csv) {
        append_csv_row(csv->begin_line(), r);
        csv->end_line();
      }
      summary.add(r);
      if (o.compat == "vllm") compat.add(r);
    }
    if (!batch.empty()) {
      dir.requests().flush();
      if (csv) csv->flush();
    }
  };
  // The writer thread drains records every 50 ms at a lower priority than
  // the client threads, so that its bursts of work never delay a send.
  std::atomic<bool> writer_stop{false}, writer_failed{false};
  std::exception_ptr writer_error;
  std::thread writer([&] {
    setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
    try {
      while (!writer_stop.load()) {
        drain();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    } catch (...) {
      writer_error = std::current_exception();
      writer_failed = true;
    }
  });
  bool was_interrupted = false;
  Nanos grace_end = 0;
  SteadyClock clock;
  Nanos last_progress = 0;
  for (;;) {
    const bool finished = runner.wait_for(100);
    const Nanos t = clock.now_ns();
    if (writer_failed.load() && !was_interrupted) {  // e.g. a full disk: stop at once, keep what is written
      was_interrupted = true;
      runner.stop_sending();
      runner.cancel_in_flight();
    }
    if (interrupted.load() && !was_interrupted) {
      was_interrupted = true;
      runner.stop_sending();
      grace_end = t + seconds_to_nanos(o.grace_s);
      std::cerr
          << fmt::format(
                 "\ntokenscope bench: interrupted: no new requests; waiting up to {} s for {} in flight",
                 o.grace_s, runner.counters().in_flight.load())
          << std::endl;
    }
    if (was_interrupted && grace_end > 0 && t >= grace_end) {
      runner.cancel_in_flight();
      grace_end = 0;
    }
    if (finished) break;
    const Nanos every = tty ? kNanosPerSecond / 2 : 10 * kNanosPerSecond;
    if (progress && t - last_progress >= every) {
      last_progress = t;
      const auto& c = runner.counters();
      const double elapsed = std::max(0.0, nanos_to_s(t - runner.epoch()));
      const std::string line =
          fmt::format("[{:6.1f}s] sent {}, done {}, in flight {}, errors {}{}, {:.1f} req/s, ETA {:.0f} s",
                      elapsed, c.sent.load(), c.completed.load() + c.failed.load(), c.in_flight.load(),
                      c.failed.load(), c.queued.load() > 0 ? fmt::format(", queued {}", c.queued.load()) : "",
                      elapsed > 0 ? static_cast<double>(c.completed.load() + c.failed.load()) / elapsed : 0.0,
                      std::max(0.0, planned_s - elapsed));
      if (tty)
        std::cerr << "\r" << line << "\x1b[K" << std::flush;
      else
        std::cerr << line << "\n";
    }
  }
  runner.join();
  writer_stop = true;
  writer.join();
  if (writer_error) std::rethrow_exception(writer_error);
  drain();
  if (progress && tty) std::cerr << "\r\x1b[K" << std::flush;

  if (server) {
    server->stop(0.0);
    const auto& m = server->metrics();
    ServerCounters sc;
    sc.prefix_cache_queries_tokens = static_cast<std::uint64_t>(m.value("vllm:prefix_cache_queries_total"));
    sc.prefix_cache_hits_tokens = static_cast<std::uint64_t>(m.value("vllm:prefix_cache_hits_total"));
    sc.preemptions_total = static_cast<std::uint64_t>(m.value("vllm:num_preemptions_total"));
    if (eff && eff->num_gpu_blocks) sc.kv_cache_usage_peak = m.value("tokenscope:kv_cache_usage_peak");
    summary.set_server_counters(sc);
  }
  const nlohmann::json s = summary.build();
  const auto cc = runner.client_counters();
  const double cpu = cpu_seconds() - cpu_start;

  nlohmann::json run;
  run["tool"] = {{"name", "tokenscope"}, {"version", TOKENSCOPE_VERSION}, {"command", "bench"}};
  run["partial"] = was_interrupted;
  nlohmann::json requested = {
      {"workload", workload_options_json(o.workload)},
      {"workload_file", o.workload_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.workload_file)},
      {"target",
       {{"url", o.target.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.target)},
        {"api", o.api},
        {"endpoint", o.endpoint},
        {"stream", !o.no_stream},
        {"ignore_eos", !o.no_ignore_eos},
        {"timeout_s", o.timeout_s},
        {"insecure", o.insecure},
        {"headers", o.headers.size()}}},
      {"load",
       {{"stages", o.stages},
        {"max_concurrency", o.max_concurrency},
        {"concurrency", o.concurrency},
        {"user_stages", o.user_stages},
        {"think_ms", o.think_ms},
        {"think_dist", o.think_dist},
        {"warmup_s", o.warmup_s},
        {"client_threads", o.client_threads},
        {"slo", o.slo}}},
  };
  if (o.target.empty())
    requested["server"] = {{"engine", engine_options_json(o.engine_options)},
                           {"threads", o.server_threads},
                           {"faults", o.faults},
                           {"fault_seed", o.fault_seed}};
  nlohmann::json effective = {
      {"workload", p.bw.effective},
      {"load", p.effective_load},
      {"target", {{"url", endpoint.url()}, {"model", rs.model}, {"in_process", !server ? false : true}}}};
  if (eff) effective["engine"] = eff->to_json();
  run["settings"] = {{"requested", requested}, {"effective", effective}};
  run["summary"] = s;
  run["client"] = {{"connections_opened", cc.connects},
                   {"connect_failures", cc.connect_failures},
                   {"requests_on_reused_connections", cc.reused},
                   {"resent_after_stale_connection", cc.resent},
                   {"requests_not_sent", runner.not_sent()},
                   {"process_cpu_s", cpu}};  // with the in-process server, when there is one
  if (server) {
    nlohmann::json faults = nlohmann::json::object();
    for (const char* k : {"http_5xx", "http_429", "reset", "stall", "malformed", "slow_first_byte"})
      faults[k] = server->metrics().value("tokenscope:faults_injected_total", k);
    run["server"] = {{"faults_injected", faults}};
  }
  dir.flush();
  dir.write_run_json(run);
  dir.close();
  if (csv) csv->close();
  if (o.compat == "vllm")
    write_file_atomic(
        std::filesystem::path(out_dir) / "vllm_result.json",
        compat.build(s, o, rs.model, rate.value_or(o.workload.rate_rps), rs.api == bench::Api::kChat)
            .dump(1));

  if (print) {
    if (o.json) {
      std::cout << s.dump(2) << "\n";
    } else if (!o.quiet) {
      SummaryHeader h;
      h.client_rows = true;
      h.title = fmt::format("tokenscope bench: {} at {}{}", rs.model, endpoint.url(),
                            server ? " (built-in simulator, in-process)" : "");
      h.lines.push_back("workload: " + w.description);
      h.lines.push_back(
          p.plan.closed_loop
              ? fmt::format("load: closed loop, {} users, think {} ms ({})", o.concurrency, o.think_ms,
                            o.think_dist)
              : fmt::format(
                    "load: open loop, {} requests planned over {:.1f} s{}", p.plan.schedule.size(), planned_s,
                    o.max_concurrency ? fmt::format(", at most {} in flight", o.max_concurrency) : ""));
      print_summary_table(std::cout, h, s);
      std::cout << fmt::format(
          "client: {} connections for {} requests, {:.2f} CPU s{}{}\n", cc.connects,
          runner.counters().sent.load(), cpu, server ? " (with the in-process server)" : "",
          runner.not_sent() ? fmt::format(", {} planned requests not sent", runner.not_sent()) : "");
      std::cout << "run directory: " << out_dir << "\n";
    }
  }
  return {s, was_interrupted, rs.model};
}

// A sweep's table: one line per rate.
void print_curve(const nlohmann::json& curve) {
  std::cout << fmt::format("{:>10}{:>12}{:>12}{:>12}{:>12}{:>12}  {}\n", "rate", "achieved", "goodput",
                           "TTFT p99", "TPOT p99", "failed", "SLO");
  for (const auto& c : curve)
    std::cout << fmt::format(
        "{:>10.2f}{:>12.2f}{:>12}{:>12.2f}{:>12.2f}{:>12}  {}\n", c["rate_rps"].get<double>(),
        c["achieved_rps"].get<double>(),
        c["goodput_rps"].is_null() ? "-" : fmt::format("{:.2f}", c["goodput_rps"].get<double>()),
        c["ttft_p99_ms"].is_null() ? 0.0 : c["ttft_p99_ms"].get<double>(),
        c["tpot_p99_ms"].is_null() ? 0.0 : c["tpot_p99_ms"].get<double>(), c["failed"].get<std::uint64_t>(),
        c["slo_pass"].is_null() ? "-" : (c["slo_pass"].get<bool>() ? "pass" : "FAIL"));
}

nlohmann::json curve_point(double rate, const nlohmann::json& s) {
  nlohmann::json slo_pass = nullptr;
  if (!s["slo_attainment"].empty()) {
    bool pass = true;
    for (const auto& [k, v] : s["slo_attainment"].items()) pass = pass && v["pass"].get<bool>();
    slo_pass = pass;
  }
  return {{"rate_rps", rate},
          {"achieved_rps", s["request_throughput_rps"]},
          {"goodput_rps", s["goodput_rps"]},
          {"ttft_p99_ms", s["ttft_ms"]["p99"]},
          {"tpot_p99_ms", s["tpot_ms"]["p99"]},
          {"failed", s["requests_failed"]},
          {"slo_pass", slo_pass}};
}

}  // namespace

CLI::App* add_bench_command(CLI::App& app) {
  auto& o = g_opts;
  o.workload.duration_s = 60.0;
  CLI::App* bench = app.add_subcommand(
      "bench",
      "Benchmark an OpenAI-compatible server with an open-loop (or closed-loop) load and measure TTFT,\n"
      "TPOT, ITL, E2E, throughput and goodput as shared METRICS.md defines them. Without --target it\n"
      "starts the built-in simulator in-process on a loopback port and drives it over real HTTP.");
  g_app = bench;
  bench->get_formatter()->column_width(44);
  const char* T = "Target";
  bench
      ->add_option("--target", o.target,
                   "Server URL, http://HOST:PORT or https://... (default: in-process simulator)")
      ->group(T);
  bench->add_option("--api", o.api, "completions|chat")
      ->capture_default_str()
      ->check(CLI::IsMember({"completions", "chat"}))
      ->group(T);
  bench
      ->add_option(
          "--endpoint", o.endpoint,
          "Request path after the target's own path [default: /v1/completions or /v1/chat/completions]")
      ->group(T);
  bench->add_option("--api-key", o.api_key, "Bearer token (or env TOKENSCOPE_API_KEY, OPENAI_API_KEY)")
      ->group(T);
  bench->add_option("--header", o.headers, "Extra request header 'Name: value' (repeatable)")->group(T);
  bench->add_option("--timeout-s", o.timeout_s, "Per-request timeout from the send, s (0: none)")
      ->capture_default_str()
      ->group(T);
  bench->add_flag("--insecure", o.insecure, "https: do not verify the server's certificate and name")
      ->group(T);
  bench->add_option("--ca-file", o.ca_file, "https: extra CA certificates (PEM)")->group(T);
  bench->add_flag("--no-stream", o.no_stream, "Non-streaming requests (TTFT = E2E; for comparisons with wrk)")
      ->group(T);
  bench->add_flag("--no-ignore-eos", o.no_ignore_eos, "Do not send ignore_eos (the model may stop early)")
      ->group(T);

  const char* L = "Load";
  bench
      ->add_option("--workload", o.workload_file,
                   "YAML workload: tenants, task classes with shares, lengths, "
                   "sessions and SLOs (docs/bench.md)")
      ->group(L);
  bench->add_option("--stages", o.stages, "Open-loop rate stages RATE@SECONDS,... (e.g. 5@30,10@30)")
      ->group(L);
  bench
      ->add_option("--max-concurrency", o.max_concurrency,
                   "Open loop: at most N requests in flight; the rest "
                   "queue (queue_ms)")
      ->group(L);
  bench->add_option("--concurrency", o.concurrency, "Closed loop with N users (instead of an arrival rate)")
      ->group(L);
  bench->add_option("--user-stages", o.user_stages, "Closed-loop user stages USERS@SECONDS,...")->group(L);
  bench->add_option("--think-ms", o.think_ms, "Closed loop: think time between a user's requests, ms")
      ->capture_default_str()
      ->group(L);
  bench->add_option("--think-dist", o.think_dist, "fixed|exponential")->capture_default_str()->group(L);
  bench
      ->add_option("--warmup-s", o.warmup_s,
                   "Requests scheduled in the first S seconds are excluded from the summary")
      ->capture_default_str()
      ->group(L);
  bench->add_option("--client-threads", o.client_threads, "Client I/O threads")
      ->capture_default_str()
      ->check(CLI::Range(1u, 64u))
      ->group(L);
  bench->add_option("--slo", o.slo, "SLO [CLASS:]ttft_ms=X,tpot_ms=Y,e2e_ms=Z,p=99 (repeatable; goodput)")
      ->group(L);
  bench->add_option("--sweep-rates", o.sweep_rates, "Run once per rate (req/s), e.g. 2,4,8: the load curve")
      ->group(L);
  bench
      ->add_option("--sweep-search", o.sweep_search,
                   "LOW:HIGH: bisect for the highest rate at which every SLO holds (needs --slo)")
      ->group(L);
  bench->add_option("--sweep-steps", o.sweep_steps, "Runs of --sweep-search after LOW and HIGH")
      ->capture_default_str()
      ->group(L);

  add_workload_options(bench, o.workload);
  add_engine_options(bench, o.engine_options);
  const char* S = "In-process server";
  bench->add_option("--server-threads", o.server_threads, "I/O threads of the in-process simulator")
      ->capture_default_str()
      ->group(S);
  bench->add_option("--faults", o.faults, "Inject faults in the in-process server (as serve --faults)")
      ->group(S);
  bench->add_option("--fault-seed", o.fault_seed, "Seed of the fault draws")->capture_default_str()->group(S);
  bench
      ->add_option("--trace-emissions", o.trace_emissions,
                   "The in-process server writes every emitted token here")
      ->group(S);

  const char* O = "Output";
  bench->add_option("--out", o.out, "Run directory [default: runs/bench-UTCDATE-TIME]")->group(O);
  bench->add_option("--compat", o.compat, "Also write vllm_result.json with vLLM's benchmark keys")
      ->check(CLI::IsMember({"vllm"}))
      ->group(O);
  bench->add_flag("--csv", o.csv, "Also write requests.csv")->group(O);
  bench->add_flag("--json", o.json, "Print the summary as JSON")->group(O);
  bench->add_flag("--quiet", o.quiet, "Print nothing on success")->group(O);
  bench->add_option("--progress", o.progress, "auto|tty|plain|none")->capture_default_str()->group(O);
  bench->add_option("--grace-s", o.grace_s, "On Ctrl-C, wait this long for requests in flight, s")
      ->capture_default_str()
      ->group(O);

  std::string footer = "\nSummary metrics (run.json \"summary\"):\n";
  for (const auto& k : metrics::kScalarKeys)
    footer += fmt::format("  {:<30} {:<8} {}\n", k.key, k.unit, k.definition);
  for (const auto& k : metrics::kDistributionKeys)
    footer += fmt::format("  {:<30} {:<8} {}\n", k.key, k.unit, k.definition);
  for (const auto& k : metrics::kObjectKeys)
    footer += fmt::format("  {:<30} {:<8} {}\n", k.key, k.unit, k.definition);
  footer +=
      "\nExit codes: 0 ok, 1 I/O failure, 2 bad input or options, 3 an SLO failed, 130 interrupted (results "
      "kept).\n";
  bench->footer(footer);
  return bench;
}

int run_bench(const std::atomic<bool>& interrupted) {
  auto& o = g_opts;
  // One descriptor per connection: raise the soft limit to the hard one.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  if (o.api_key.empty()) {
    if (const char* env = std::getenv("TOKENSCOPE_API_KEY"))
      o.api_key = env;
    else if (const char* env2 = std::getenv("OPENAI_API_KEY"))
      o.api_key = env2;
  }
  if (!(o.timeout_s >= 0)) throw UsageError("--timeout-s: expected seconds >= 0");
  if (!(o.grace_s >= 0)) throw UsageError("--grace-s: expected seconds >= 0");
  if (!(o.warmup_s >= 0)) throw UsageError("--warmup-s: expected seconds >= 0");
  if (!(o.think_ms >= 0)) throw UsageError("--think-ms: expected ms >= 0");
  if (o.progress != "auto" && o.progress != "tty" && o.progress != "plain" && o.progress != "none")
    throw UsageError("--progress: expected auto, tty, plain or none");
  const std::string out = o.out.empty() ? default_out_dir() : o.out;

  if (!o.sweep_rates.empty() || !o.sweep_search.empty()) {
    if (o.concurrency > 0) throw UsageError("sweeps vary the open-loop rate; drop --concurrency");
    nlohmann::json curve = nlohmann::json::array();
    auto probe = [&](double rate) -> std::optional<nlohmann::json> {
      if (!o.quiet) std::cerr << fmt::format("sweep: rate {:.3g} req/s", rate) << std::endl;
      const auto r = run_one(o, rate, fmt::format("{}/rate-{:g}", out, rate), interrupted, false);
      if (r.interrupted) return std::nullopt;
      curve.push_back(curve_point(rate, r.summary));
      return curve.back();
    };
    bool stopped = false;
    nlohmann::json best = nullptr;
    if (!o.sweep_rates.empty()) {
      for (double rate : bench::parse_number_list(o.sweep_rates, "--sweep-rates"))
        if (!probe(rate)) {
          stopped = true;
          break;
        }
    } else {
      if (o.slo.empty()) throw UsageError("--sweep-search needs --slo (the criterion)");
      const auto bounds = bench::parse_number_list(
          [&] {
            std::string s = o.sweep_search;
            std::replace(s.begin(), s.end(), ':', ',');
            return s;
          }(),
          "--sweep-search");
      if (bounds.size() != 2 || bounds[0] >= bounds[1])
        throw UsageError("--sweep-search: expected LOW:HIGH with LOW < HIGH");
      double lo = bounds[0], hi = bounds[1];
      auto passes = [](const nlohmann::json& c) {
        return !c["slo_pass"].is_null() && c["slo_pass"].get<bool>();
      };
      auto a = probe(lo);
      if (!a)
        stopped = true;
      else if (!passes(*a)) {
        if (!o.quiet) std::cerr << "sweep: the SLO fails already at the lowest rate\n";
      } else {
        best = lo;
        auto b = probe(hi);
        if (!b)
          stopped = true;
        else if (passes(*b))
          best = hi;
        else
          for (unsigned i = 0; i < o.sweep_steps; ++i) {
            const double mid = (lo + hi) / 2;
            auto m = probe(mid);
            if (!m) {
              stopped = true;
              break;
            }
            if (passes(*m))
              lo = mid, best = mid;
            else
              hi = mid;
          }
      }
    }
    std::sort(curve.begin(), curve.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
      return a["rate_rps"].get<double>() < b["rate_rps"].get<double>();
    });
    write_file_atomic(
        std::filesystem::path(out) / "sweep.json",
        nlohmann::json{{"curve", curve}, {"max_rate_meeting_slo", best}, {"partial", stopped}}.dump(2));
    if (!o.quiet) {
      print_curve(curve);
      if (!o.sweep_search.empty())
        std::cout << (best.is_null() ? std::string("no rate met every SLO\n")
                                     : fmt::format("highest rate meeting every SLO: {:.3g} req/s\n",
                                                   best.get<double>()));
      std::cout << "sweep directory: " << out << "\n";
    }
    return stopped ? kExitInterrupted : kExitOk;
  }

  const auto r = run_one(o, std::nullopt, out, interrupted, true);
  if (r.interrupted) {
    std::cerr << "interrupted: results so far are kept in " << out << "\n";
    return kExitInterrupted;
  }
  for (const auto& [cls, a] : r.summary["slo_attainment"].items())
    if (!a["pass"].get<bool>()) return kExitSloFailed;
  return kExitOk;
}

}  // namespace tokenscope::cli
