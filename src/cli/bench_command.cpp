#include "cli/bench_command.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <iostream>

#include "bench/bench_run.h"
#include "bench/bench_workload.h"
#include "bench/runner.h"
#include "bench/shard.h"
#include "cli/bench_mpi.h"
#include "cli/engine_options.h"
#include "cli/history_command.h"
#include "cli/report_command.h"
#include "cli/summary_table.h"
#include "cli/workload_options.h"
#include "core/clock.h"
#include "core/cpu_set.h"
#include "core/error.h"
#include "core/metrics.h"
#include "rundir/readers.h"
#include "rundir/run_cache.h"
#include "rundir/run_set.h"

namespace tokenscope::cli {

namespace {

// What the command line fills; bench::BenchSettings plus the options whose
// presence matters (--model) and the sampling options as given.
struct BenchOptions {
  bench::BenchSettings s;
  std::string api = "completions";
  bool no_stream = false;
  bool no_ignore_eos = false;
  std::optional<double> temperature, top_p;
  std::optional<std::int64_t> top_k, request_seed;
  std::optional<std::uint32_t> logprobs;
  // The load's small languages as given, parsed into `s` once the command
  // line is read (bench/bench_settings.h).
  std::string stages, user_stages, think_dist = "fixed", sweep_rates, sweep_search, progress = "auto", compat;
  std::string client_cpus;
  std::vector<std::string> slo;
  bool no_cache = false;        // --no-cache: no run cache written at the end
  std::string shard, start_at;  // --shard I/N | env, --start-at (bench/shard.h)
  bool mpi = false;             // --mpi: the ranks of an mpirun as the shards (cli/bench_mpi.h)
  std::string mpi_shards;       // --mpi-shards ROOT: each rank's run directory ROOT/RANK
  session::Finishers finish;    // --report, the history
  bool json = false;
  bool model_given = false;  // --model on the command line (else the server's first model)
};

int run_bench(BenchOptions& o, const std::atomic<bool>& interrupted, const std::atomic<bool>* hurry);
int run_bench_process(BenchOptions& o, const std::atomic<bool>& interrupted, const std::atomic<bool>* hurry,
                      MpiBench* mpi);

// A sweep's table: one line per rate.
void print_curve(const nlohmann::json& curve) {
  std::cout << fmt::format("{:>10}{:>12}{:>12}{:>12}{:>12}{:>12}  {}\n", "rate", "achieved", "goodput",
                           "TTFT p99", "TPOT p99", "failed", "SLO");
  auto cell = [](const nlohmann::json& v) {
    return v.is_null() ? std::string("-") : format_ms_cell(v.get<double>(), 12);
  };
  for (const auto& c : curve)
    std::cout << fmt::format(
        "{:>10.2f}{:>12}{:>12}{:>12}{:>12}{:>12}  {}\n", c["rate_rps"].get<double>(),
        c["achieved_rps"].is_number() ? fmt::format("{:.2f}", c["achieved_rps"].get<double>()) : "-",
        c["goodput_rps"].is_null() ? "-" : fmt::format("{:.2f}", c["goodput_rps"].get<double>()),
        cell(c["ttft_p99_ms"]), cell(c["tpot_p99_ms"]), c["failed"].get<std::uint64_t>(),
        c["slo_pass"].is_null() ? "-" : (c["slo_pass"].get<bool>() ? "pass" : "FAIL"));
}

// A server sweep's table: one line per point of the grid (its values, then
// the run's or the repeats' mean throughput and latencies).
void print_server_curve(const nlohmann::json& sweep) {
  std::cout << fmt::format("{:<24}{:>10}{:>12}{:>12}{:>12}{:>12}{:>12}{:>8}  {}\n", "server setting", "req/s",
                           "output/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "failed", "SLO");
  auto cell = [](const nlohmann::json& v) {
    return v.is_number() ? format_ms_cell(v.get<double>(), 12) : std::string("-");
  };
  auto num = [](const nlohmann::json& v, int digits) {
    return v.is_number() ? fmt::format("{:.{}f}", v.get<double>(), digits) : std::string("-");
  };
  for (const auto& c : sweep["curve"]) {
    std::string setting;
    if (c["settings"].is_object())
      for (const auto& [k, v] : c["settings"].items())
        setting += (setting.empty() ? "" : " ") + k + "=" + v.get<std::string>();
    std::cout << fmt::format(
        "{:<24}{:>10}{:>12}{:>12}{:>12}{:>12}{:>12}{:>8}  {}\n", display_text(setting),
        num(c["achieved_rps"], 3), num(c["output_tps"], 1), cell(c["ttft_p50_ms"]), cell(c["ttft_p99_ms"]),
        cell(c["tpot_p50_ms"]), cell(c["tpot_p99_ms"]), num(c["failed"], 0),
        c["slo_pass"].is_boolean() ? (c["slo_pass"].get<bool>() ? "pass" : "FAIL") : "-");
  }
  for (const auto& r : sweep["runs"])
    if (const auto* e = rundir::json_path(r, {"server", "error"}); e && e->is_string())
      std::cout << fmt::format("{}: the server did not come up (its log: {}/server.log)\n",
                               display_text(r.value("dir", std::string())),
                               display_text(r.value("dir", std::string())));
}

void print_run(const bench::BenchSettings& o, const bench::RunReport& r) {
  SummaryHeader h;
  h.client_rows = true;
  // The model id is the target's (GET /v1/models) and the descriptions name
  // files: outside text, shown through display_text (never a terminal
  // command or a forged line).
  h.title = fmt::format("tokenscope bench: {} at {}{}", display_text(r.model), display_text(r.url),
                        r.in_process ? " (built-in simulator, in-process)" : "");
  h.lines.push_back("workload: " + display_text(r.workload_description));
  h.lines.push_back("load: " + display_text(r.load_description));
  if (o.api == bench::Api::kTranscriptions)  // the prompt is the audio
    h.lines.push_back(fmt::format(
        "transcriptions: a WAV upload per request (16 kHz mono 16-bit), {} ms unless its class sets audio; "
        "response_format {}",
        display_text(o.audio_duration_ms.empty() ? bench::kDefaultAudioDurationMs : o.audio_duration_ms),
        o.response_format));
  else
    h.lines.push_back("prompts: " + display_text(r.prompts_description));
  const auto& pc = r.prompt_check;
  if (pc.value("available", false) && pc["sampled"].get<std::size_t>() > 0)
    h.lines.push_back(
        fmt::format("prompt check: the server's /tokenize counts {} tokens in {} sampled prompts planned at "
                    "{} ({:+.2f}%), "
                    "{} exact",
                    pc["server_tokens"].get<std::int64_t>(), pc["sampled"].get<std::size_t>(),
                    pc["planned_tokens"].get<std::int64_t>(), 100.0 * (pc["ratio"].get<double>() - 1.0),
                    pc["exact"].get<std::size_t>()));
  else if (pc.contains("reason"))
    h.lines.push_back("prompt check: not done (" + display_text(pc["reason"].get<std::string>()) + ")");
  if (pc.value("available", false) && pc["sampled"].get<std::size_t>() > 0 &&
      std::abs(pc["ratio"].get<double>() - 1.0) > 0.01)
    h.lines.push_back(fmt::format(
        "WARNING: the prompt check is off by {:+.2f}% (more than 1%): prompts do not reach the server at "
        "their planned length; give --tokenizer with the served model's tokenizer",
        100.0 * (pc["ratio"].get<double>() - 1.0)));
  print_summary_table(std::cout, h, r.summary);
  const auto& c = r.client;
  std::cout << fmt::format(
      "client: {} connections for {} requests ({} reused, {} resent), {:.2f} CPU s{}{}\n", r.connections,
      r.sent, c["requests_on_reused_connections"].get<std::uint64_t>(),
      c["resent_after_stale_connection"].get<std::uint64_t>(), r.cpu_s,
      r.in_process ? " (with the in-process server)" : "",
      r.not_sent ? fmt::format(", {} planned requests not sent", r.not_sent) : "");
  if (c.contains("waited_for_connection") && c["waited_for_connection"].get<std::uint64_t>() > 0)
    std::cout << fmt::format(
        "client: {} requests waited for a free connection (--max-connections {}): their wait is send lag\n",
        c["waited_for_connection"].get<std::uint64_t>(), c["max_connections"].get<std::uint64_t>());
  if (c.contains("records_waited_for_writer") && c["records_waited_for_writer"].get<std::uint64_t>() > 0)
    std::cout << fmt::format(
        "client: {} record pushes waited for the writer to catch up (a core shared with it, or slow "
        "storage); a waiting client thread neither sends nor reads: its waits are in the send lag and the "
        "latencies\n",
        c["records_waited_for_writer"].get<std::uint64_t>());
  // What was sampled beside the requests (samples.jsonl), one line.
  if (r.observe.is_object() && r.observe.contains("sources")) {
    std::string line;
    for (const auto& src : r.observe["sources"]) {
      std::string part = src["source"].get<std::string>() + " ";
      if (!src["unavailable"].is_null())
        part += "unavailable";
      else if (!src.value("collected", false))
        part += "not collected";
      else
        part += fmt::format("{} reads", src["reads"].get<std::uint64_t>());
      if (src.contains("engine") && src["engine"].is_string() && src.value("collected", false))
        part += fmt::format(" ({}, {} series)", display_text(src["engine"].get<std::string>()),
                            src.value("series", 0));
      if (src.value("errors", 0) > 0 && src.value("collected", false))
        part += fmt::format(", {} failed", src["errors"].get<std::uint64_t>());
      line += (line.empty() ? "" : "; ") + part;
    }
    if (!line.empty()) std::cout << "samples: " << line << "\n";
  }
  if (r.hidden_queue.is_object())
    std::cout << fmt::format(
        "hidden queue: mean {:.2f}, max {:.0f} of {:.0f} in flight (requests the server's running and "
        "waiting "
        "gauges do not show)\n",
        r.hidden_queue.value("mean", 0.0), r.hidden_queue.value("max", 0.0),
        r.hidden_queue.value("in_flight_max", 0.0));
  // Agentic tasks (docs/tasks.md): outcomes, completion time, failures by class.
  if (r.tasks.is_object()) {
    const auto& t = r.tasks;
    auto ms = [&](const char* q) {
      const auto& v = t["completion_ms"][q];
      return v.is_null() ? std::string("-") : fmt::format("{:.0f}", v["value"].get<double>());
    };
    std::cout << fmt::format(
        "tasks             {} total, {} ok, {} failed, {} cancelled{}; completion p50 {} ms, "
        "p90 {} ms, p99 {} ms\n",
        t["tasks"].get<std::uint64_t>(), t["ok"].get<std::uint64_t>(), t["failed"].get<std::uint64_t>(),
        t["cancelled"].get<std::uint64_t>(),
        t["pass_rate"].is_null() ? std::string()
                                 : fmt::format(" (pass rate {:.1f}%)", 100.0 * t["pass_rate"].get<double>()),
        ms("p50"), ms("p90"), ms("p99"));
    std::string failures;
    for (const auto& [k, v] : t["failures_by_class"].items())
      failures += fmt::format("{}{} {}", failures.empty() ? "" : ", ", k, v.get<std::uint64_t>());
    if (!failures.empty())
      std::cout << "task failures     " << failures << " (tasks.jsonl has each one's step)\n";
    if (const auto& j = t["judge"]; j.is_object() && j.value("judged", 0) > 0)
      std::cout << fmt::format(
          "judge             {} judged: {} passed, {} rejected, {} not graded (judge "
          "errors); judge p50 {} ms\n",
          j["judged"].get<std::uint64_t>(), j["passed"].get<std::uint64_t>(),
          j["rejected"].get<std::uint64_t>(), j["errors"].get<std::uint64_t>(),
          j["latency_p50_ms"].is_null() ? std::string("-")
                                        : fmt::format("{:.0f}", j["latency_p50_ms"].get<double>()));
    else if (j.is_object() && j.value("configured", true) == false && j.value("steps", 0) > 0)
      std::cout << "judge             not run: the workload's judged steps need --judge-target and "
                   "--judge-model\n";
  }
  if (!r.failure.empty()) std::cout << "FAILED: " << display_text(r.failure) << "\n";
  (void)o;
  std::cout << "run directory: " << display_text(r.out_dir) << "\n";
}

}  // namespace

// Long by nature: every option of bench, one after another in the order --help
// groups them (a list, not logic to split).
Command add_bench_command(CLI::App& app, Interrupts interrupts) {
  const auto options = std::make_shared<BenchOptions>();
  auto& o = *options;
  auto& s = o.s;
  s.workload.duration_s = 60.0;
  CLI::App* bench = app.add_subcommand(
      "bench",
      "Benchmark an OpenAI-compatible server with an open-loop (or closed-loop) load and measure TTFT,\n"
      "TPOT, ITL, E2E, throughput and goodput as shared METRICS.md defines them. Without --target it\n"
      "starts the built-in simulator in-process on a loopback port and drives it over real HTTP.");
  bench->get_formatter()->column_width(44);
  const char* T = "Target";
  bench
      ->add_option("--target", s.target_url,
                   "Server URL, http://HOST:PORT or https://... (default: in-process simulator)")
      ->group(T);
  bench
      ->add_option(
          "--api", o.api,
          "completions|chat|responses|embeddings|rerank|transcriptions (responses: /v1/responses, "
          "streamed events; embeddings and rerank: pooling requests answered whole, no output tokens; "
          "transcriptions: /v1/audio/transcriptions, a WAV upload per request)")
      ->capture_default_str()
      ->check(CLI::IsMember({"completions", "chat", "responses", "embeddings", "rerank", "transcriptions"}))
      ->group(T);
  bench
      ->add_option("--endpoint", s.endpoint,
                   "Request path after the target's own path [default: /v1/completions, "
                   "/v1/chat/completions, /v1/responses, /v1/embeddings, /v1/rerank or "
                   "/v1/audio/transcriptions by --api]")
      ->group(T);
  bench
      ->add_option("--audio-duration-ms", s.audio_duration_ms,
                   "--api transcriptions: the audio's length per request, a distribution (fixed:N, "
                   "uniform:A:B, ...; at most 120000), for requests whose workload class has no audio "
                   "[default: uniform:5000:30000]")
      ->group(T);
  bench
      ->add_option("--response-format", s.response_format,
                   "--api transcriptions: json (text and token usage), verbose_json (duration, segments; "
                   "not streamed) or text")
      ->capture_default_str()
      ->check(CLI::IsMember({"json", "verbose_json", "text"}))
      ->group(T);
  bench
      ->add_option("--language", s.language,
                   "--api transcriptions: the audio's language (ISO-639-1, e.g. en)")
      ->group(T);
  bench
      ->add_option("--inputs-per-request", s.inputs_per_request,
                   "--api embeddings: inputs per request (the batch); rerank: documents per request, each of "
                   "the workload's prompt length [default: 1, rerank 8]")
      ->check(CLI::Range(1u, 2048u))
      ->group(T);
  bench->add_option("--query-tokens", s.query_tokens, "--api rerank: the query's length in tokens")
      ->capture_default_str()
      ->group(T);
  bench->add_option("--api-key", s.api_key, "Bearer token (or env TOKENSCOPE_API_KEY, OPENAI_API_KEY)")
      ->group(T);
  bench->add_option("--header", s.headers, "Extra request header 'Name: value' (repeatable)")->group(T);
  bench
      ->add_option("--judge-target", s.judge_target,
                   "Agentic tasks: an OpenAI-compatible server (base URL) that grades the answers of steps "
                   "with `judge` (docs/tasks.md)")
      ->group(T);
  bench->add_option("--judge-model", s.judge_model, "The judge's model (with --judge-target)")->group(T);
  bench
      ->add_option("--judge-extra-body", s.judge_extra_body,
                   "JSON object merged into every judge request, e.g. the verdict's schema as llama.cpp's "
                   "top-level json_schema (docs/tasks.md)")
      ->group(T);
  bench
      ->add_option("--judge-api-key", s.judge_api_key,
                   "The judge's Bearer token (or env TOKENSCOPE_JUDGE_API_KEY)")
      ->group(T);
  bench->add_option("--timeout-s", s.timeout_s, "Per-request timeout from the send, s (0: none)")
      ->capture_default_str()
      ->group(T);
  bench
      ->add_option("--max-events", s.max_events,
                   "Output events kept per request record; later ones are counted and their gaps "
                   "histogrammed (events_dropped), so a server that streams without end cannot grow "
                   "the client's memory without bound")
      ->capture_default_str()
      ->group(T);
  bench
      ->add_option("--max-prompt-tokens", s.max_prompt_tokens,
                   "A request planned with a longer prompt fails the run at the start (exit 2): its text is "
                   "built in memory before it is sent")
      ->capture_default_str()
      ->group(T);
  bench->add_flag("--insecure", s.insecure, "https: do not verify the server's certificate and name")
      ->group(T);
  bench->add_option("--ca-file", s.ca_file, "https: extra CA certificates (PEM)")->group(T);
  bench->add_flag("--no-stream", o.no_stream, "Non-streaming requests (TTFT = E2E; for comparisons with wrk)")
      ->group(T);
  bench->add_flag("--no-ignore-eos", o.no_ignore_eos, "Do not send ignore_eos (the model may stop early)")
      ->group(T);
  bench
      ->add_option("--tokenizer", s.tokenizer_file,
                   "The served model's tokenizer (tokenizer.json or SentencePiece .model): prompts of "
                   "exactly the planned length, output counted on the client when the server sends no usage")
      ->group(T);
  bench
      ->add_option_function<std::string>(
          "--model-mix",
          [&s](const std::string& v) {
            (void)bench::parse_model_mix(v, "--model-mix");  // a bad spec is exit 2 before anything starts
            s.model_mix = v;
          },
          "Send each request (each session) to one of several models or LoRA adapters behind the endpoint, "
          "NAME=WEIGHT,... (e.g. base=0.6,sql-lora=0.3,chat-lora=0.1); results per model in the summary's "
          "by_model. A workload class's model takes precedence")
      ->group(T);
  bench
      ->add_option_function<std::string>(
          "--cancel",
          [&s](const std::string& v) {
            (void)bench::parse_cancel_plan(v, 0);  // a bad spec is exit 2 before anything starts
            s.cancel = v;
          },
          "Cancel a share of requests on purpose, as users closing the tab: SHARE:before-first-token, "
          "SHARE:after-tokens=N or SHARE:after-ms=SPEC (e.g. 0.1:after-tokens=20, "
          "0.05:after-ms=uniform:100:2000); "
          "recorded as cancelled with cancel_planned, left out of failures, SLOs and goodput")
      ->group(T);
  bench
      ->add_option_function<std::string>(
          "--exact-prompts",
          [&s](const std::string& v) {
            if (v != "auto" && v != "off")
              throw CLI::ValidationError("--exact-prompts", "expected auto or off, not '" + v + "'");
            s.exact_prompts = v == "auto";
          },
          "auto: before the run, learn from the target's /tokenize which prompt words are one token there "
          "and "
          "the tokens it adds (BOS, the chat template), so that it counts exactly the planned prompt length; "
          "off: send prompt words as they are [default: auto]")
      ->group(T);
  bench
      ->add_option("--prompt-check", s.prompt_check_sample,
                   "Before the run, ask the target's /tokenize how long this many prompts are (0: skip); "
                   "run.json settings.effective.prompts.server_check")
      ->capture_default_str()
      ->group(T);
  const char* P = "Request parameters";
  bench
      ->add_option("--temperature", o.temperature,
                   "Sampling temperature (vLLM's benchmark sends 0) [default: not sent]")
      ->group(P);
  bench->add_option("--top-p", o.top_p, "Nucleus sampling share [default: not sent]")->group(P);
  bench->add_option("--top-k", o.top_k, "Top-k sampling [default: not sent]")->group(P);
  bench
      ->add_option(
          "--request-seed", o.request_seed,
          "Sampling seed sent with every request (--seed is the workload's seed) [default: not sent]")
      ->group(P);
  bench
      ->add_option("--logprobs", o.logprobs,
                   "Ask for the output tokens' log-probabilities, with N top alternatives each (completions: "
                   "logprobs N; chat: logprobs true, top_logprobs N; N defaults to 1, which every server "
                   "answers: llama.cpp sends none for 0), and keep a histogram of them per request "
                   "(requests.jsonl `logprobs`; check item 11) [default: not asked]")
      ->expected(0, 1)
      ->default_str("1")
      ->group(P);
  bench
      ->add_option("--extra-body", s.sampling.extra_body,
                   "JSON object merged into every request body, e.g. '{\"min_p\":0.05}'")
      ->group(P);

  const char* L = "Load";
  bench
      ->add_flag(
          "--coupling", s.coupling,
          "After the mix, run each task class alone at its own arrival times (coupling/CLASS/) and report "
          "kappa = its latency in the mix / alone (TTFT, TPOT, E2E at p50 and p99, with bootstrap "
          "intervals; run.json \"coupling\", check item 3)")
      ->group(L);
  bench
      ->add_option("--workload", s.workload_file,
                   "YAML workload: tenants, task classes with shares, lengths, "
                   "sessions and SLOs (docs/bench.md)")
      ->group(L);
  bench->add_option("--stages", o.stages, "Open-loop rate stages RATE@SECONDS,... (e.g. 5@30,10@30)")
      ->group(L);
  bench
      ->add_option("--max-concurrency", s.max_concurrency,
                   "Open loop: at most N requests in flight (all client threads); the rest "
                   "queue (queue_ms)")
      ->group(L);
  bench->add_option("--concurrency", s.concurrency, "Closed loop with N users (instead of an arrival rate)")
      ->group(L);
  bench->add_option("--user-stages", o.user_stages, "Closed-loop user stages USERS@SECONDS,...")->group(L);
  bench->add_option("--think-ms", s.think_ms, "Closed loop: think time between a user's requests, ms")
      ->capture_default_str()
      ->group(L);
  bench->add_option("--think-dist", o.think_dist, "fixed|exponential")->capture_default_str()->group(L);
  bench
      ->add_option("--warmup-s", s.warmup_s,
                   "Requests scheduled in the first S seconds are excluded from the summary")
      ->capture_default_str()
      ->group(L);
  bench->add_option("--client-threads", s.client_threads, "Client I/O threads")
      ->capture_default_str()
      ->check(CLI::Range(1u, 64u))
      ->group(L);
  bench
      ->add_option(
          "--client-cpus", o.client_cpus,
          "Pin client thread i to the i-th CPU of this list, in ascending order (0-3,8 as taskset reads it; "
          "round robin when threads outnumber them); every other thread of the process (the "
          "record writer, the samplers, the in-process simulator) runs on the CPUs left")
      ->group(L);
  bench
      ->add_option("--max-connections", s.max_connections,
                   fmt::format("Connections open at most (all client threads); requests beyond wait for one, "
                               "as send lag [default: {}, or fewer if the descriptor limit is lower]",
                               tokenscope::bench::kDefaultMaxConnections))
      ->group(L);
  bench
      ->add_option("--max-connecting", s.max_connecting,
                   "TCP handshakes in progress at most per client thread (0: no limit); more at once "
                   "overflow small listen backlogs (llama-server's is 5)")
      ->capture_default_str()
      ->group(L);
  bench
      ->add_option("--slo", o.slo,
                   "SLO [CLASS:]ttft_ms=X,tpot_ms=Y,e2e_ms=Z,ttfo_ms=W,p=99 (repeatable; goodput)")
      ->group(L);
  bench->add_option("--sweep-rates", o.sweep_rates, "Run once per rate (req/s), e.g. 2,4,8: the load curve")
      ->group(L);
  bench
      ->add_option("--sweep-search", o.sweep_search,
                   "LOW:HIGH: bisect for the highest rate at which every SLO holds (needs --slo)")
      ->group(L);
  bench
      ->add_option(
          "--repeat", s.repeat,
          "Run the same settings N times with fresh seeds (--seed, --seed + 1, ...) into OUT/repeat-K/, "
          "and write OUT/sweep.json with each headline metric's between-run interval (check compares "
          "two such directories run by run)")
      ->check(CLI::Range(1u, 1000u))
      ->group(L);
  bench
      ->add_option("--server-cmd", s.server_cmd,
                   "Start the server for each run with this shell command (and stop it after, by its process "
                   "group), waiting until GET /health answers 200; {NAME} takes a value of --server-sweep. "
                   "Needs --target (where it listens)")
      ->group(T);
  bench
      ->add_option(
          "--server-sweep", s.server_sweep,
          "NAME=V1,V2,...: one run per value with --server-cmd's {NAME} replaced (repeatable: a grid), "
          "into OUT/NAME-V/ and OUT/sweep.json, e.g. np=1,2,4")
      ->group(T);
  bench
      ->add_option("--server-start-timeout", s.server_start_timeout_s,
                   "Seconds --server-cmd's server may take to answer GET /health")
      ->capture_default_str()
      ->group(T);
  bench->add_option("--sweep-steps", s.sweep.steps, "Runs of --sweep-search after LOW and HIGH")
      ->capture_default_str()
      ->group(L);
  bench
      ->add_option("--max-error-rate", s.max_error_rate,
                   "The run fails (exit 1) when more than this share of its requests failed")
      ->capture_default_str()
      ->group(L);

  add_workload_options(bench, s.workload);
  add_engine_options(bench, s.engine);
  add_fleet_options(bench, s.fleet);
  // --model names the model in every request: the target's when given,
  // else its GET /v1/models; in-process, the simulated model.
  if (CLI::Option* m = bench->get_option_no_throw("--model")) {
    m->description(
         "Model name sent in every request [default: the target's first GET /v1/models id; in-process: "
         "llama-3-8b] (in-process: also the simulated model, see sim --help)")
        ->default_str("")
        ->group(T);
  }
  const char* S = "In-process server";
  bench->add_option("--server-threads", s.server.threads, "I/O threads of the in-process simulator")
      ->capture_default_str()
      ->group(S);
  bench
      ->add_option_function<std::string>(
          "--faults", [&s](const std::string& text) { s.server.faults = serve::parse_faults(text); },
          "Inject faults in the in-process server (as serve --faults)")
      ->group(S);
  bench->add_option("--fault-seed", s.server.fault_seed, "Seed of the fault draws")
      ->capture_default_str()
      ->group(S);
  bench
      ->add_option("--lora-modules", s.server.lora_modules,
                   "LoRA adapters of the in-process server, NAME or NAME=PATH (as serve --lora-modules); "
                   "send to them with --model-mix or a workload class's model")
      ->group(S);
  bench
      ->add_option(
          "--reasoning-share", s.server.reasoning_share,
          "The in-process server as a reasoning model: this share of each chat answer comes first as "
          "reasoning (as serve --reasoning-share)")
      ->capture_default_str()
      ->group(S);
  bench
      ->add_option("--tool-call-prob", s.server.tool_call_prob,
                   "The in-process server's chance that a chat turn with tools calls them (as serve "
                   "--tool-call-prob)")
      ->capture_default_str()
      ->group(S);
  bench
      ->add_option(
          "--tool-rounds", s.server.tool_rounds,
          "The in-process server answers in text after this many tool rounds (as serve --tool-rounds)")
      ->capture_default_str()
      ->group(S);
  bench
      ->add_option("--parallel-tool-calls", s.server.parallel_tool_calls,
                   "At most this many tool calls in one turn of the in-process server (as serve "
                   "--parallel-tool-calls)")
      ->capture_default_str()
      ->group(S);
  bench
      ->add_option("--cite-prob", s.server.cite_prob,
                   "The in-process server's chance of citing each document in a conversation (as serve "
                   "--cite-prob)")
      ->capture_default_str()
      ->group(S);
  bench
      ->add_option("--reasoning-field", s.server.reasoning_field,
                   "The in-process server's reasoning field: reasoning or reasoning_content")
      ->capture_default_str()
      ->group(S);
  bench
      ->add_option("--logprob-shift", s.server.logprob_shift,
                   "The in-process server's simulated logprobs: added to the mean of -logprob of every token "
                   "(nats), to simulate a less accurate model (as serve --logprob-shift)")
      ->capture_default_str()
      ->group(S);
  bench
      ->add_option("--trace-emissions", s.server.trace_emissions,
                   "The in-process server writes every emitted token here")
      ->group(S);

  const char* OB = "Observe (samples.jsonl: every layer on the client's clock; docs/observe.md)";
  bench
      ->add_option(
          "--scrape", s.scrape_urls,
          "Scrape this Prometheus /metrics URL during the run (repeatable) [default: the target's own "
          "/metrics, when it answers]")
      ->group(OB);
  bench->add_flag("--no-scrape", s.no_scrape, "Scrape no /metrics")->group(OB);
  bench
      ->add_option("--scrape-interval", s.scrape_interval_s,
                   "Seconds between two reads of each source (scrapes, GPU, host, process, cgroup)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 3600.0))
      ->group(OB);
  bench
      ->add_option("--scrape-max-series", s.scrape_max_series,
                   "Series kept of one scrape (as Prometheus's sample_limit): the first, in the order "
                   "written; the rest are counted in run.json and noted")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{10'000'000}))
      ->group(OB);
  bench
      ->add_option("--scrape-max-label-sets", s.scrape_max_label_sets,
                   "Label sets kept of one canonical series (one per GPU, per model...)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}))
      ->group(OB);
  bench
      ->add_option("--scrape-max-bucket-bounds", s.scrape_max_bucket_bounds,
                   "Distinct bucket bounds of one canonical histogram, its label sets merged (one with more "
                   "is left out of the canonical series)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{2}, std::size_t{1'000'000}))
      ->group(OB);
  bench
      ->add_option("--samples-max-mib-per-hour", s.samples_max_mib_per_hour,
                   "Growth of samples.jsonl at most (a minute's worth at once): a read over it is written "
                   "without its raw series, or not at all, and counted (0: no bound)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9))
      ->group(OB);
  bench
      ->add_option("--gpu-sampler", s.gpu_sampler_urls,
                   "A DCGM exporter's /metrics URL: the GPUs of a remote server (repeatable)")
      ->group(OB);
  bench->add_flag("--no-gpu", s.no_gpu, "Do not sample this machine's GPUs through NVML")->group(OB);
  bench
      ->add_flag("--no-host", s.no_host,
                 "Do not sample this machine's /proc (CPU, memory, pressure, network)")
      ->group(OB);
  bench
      ->add_option(
          "--server-pid", s.server_pid,
          "The server's process on this machine: sample its CPU, memory, threads, context switches and "
          "its cgroup v2")
      ->check(CLI::PositiveNumber)
      ->group(OB);
  bench
      ->add_option(
          "--cgroup", s.cgroup,
          "The server's cgroup v2 directory (default: the one of --server-pid, from /proc/PID/cgroup)")
      ->group(OB);

  bench
      ->add_option("--trace-out", s.trace_out,
                   "Write a Perfetto trace (Chrome JSON: a track per request lane, counter tracks for every "
                   "sampled series); a relative path is inside the run directory, e.g. trace.json")
      ->group(OB);
  bench
      ->add_flag("--otlp-out", s.otlp_out,
                 "Write otlp_traces.json and otlp_metrics.json (OTLP/JSON) in the run directory")
      ->group(OB);
  bench
      ->add_option(
          "--otlp-endpoint", s.otlp_endpoint,
          "Push the run to this OTLP/HTTP endpoint (base URL; /v1/traces and /v1/metrics are appended)")
      ->group(OB);

  const char* O = "Output";
  bench
      ->add_option("--out", s.out_dir,
                   "Run directory [default: runs/bench-UTCDATE-TIME]; {shard} is the shard's index")
      ->group(O);
  bench
      ->add_option(
          "--shard", options->shard,
          "Send shard I of N of the schedule (I/N, from 0), or env: the index and count from "
          "TOKENSCOPE_SHARD_INDEX/_COUNT, JOB_COMPLETION_INDEX (Kubernetes), SLURM_PROCID/SLURM_NTASKS "
          "or OMPI_COMM_WORLD_RANK/_SIZE; every shard builds the same schedule from the seed, shard 0 "
          "alone observes the server and host; `tokenscope merge` joins the run directories "
          "(docs/fleet.md)")
      ->group(O);
  bench
      ->add_flag("--mpi", options->mpi,
                 "Run as one rank of mpirun -n K: the ranks are the K shards, measure their clocks against "
                 "rank 0's, agree on the start, and rank 0 merges every rank's run into --out (the ranks' "
                 "own in OUT.shards/RANK); docs/fleet.md \"Under Open MPI\"")
      ->group(O);
  bench
      ->add_option("--mpi-shards", options->mpi_shards,
                   "With --mpi: each rank's run directory is ROOT/RANK [default: OUT.shards]; a path local "
                   "to each host makes the ranks send their records to rank 0 over MPI")
      ->group(O);
  bench
      ->add_option("--start-at", options->start_at,
                   "With --shard: when every shard starts its schedule, Unix seconds or UTC "
                   "(2026-12-05T12:00:00Z), the same for all")
      ->group(O);
  bench
      ->add_flag("--overwrite", s.overwrite,
                 "Replace the run already in --out (without it, a directory holding a run is refused)")
      ->group(O);
  bench
      ->add_option("--compat", o.compat,
                   "Also write vllm_result.json with vLLM's benchmark keys and definitions")
      ->check(CLI::IsMember({"vllm"}))
      ->group(O);
  bench->add_flag("--csv", s.csv, "Also write requests.csv")->group(O);
  bench
      ->add_flag(
          "--report", o.finish.report,
          "At the end, write report.html in the run directory (a sweep's: in the sweep directory): the "
          "page of tokenscope report (docs/report.md)")
      ->group(O);
  bench
      ->add_flag("--no-cache", o.no_cache,
                 "Write no run cache (.tokenscope-cache) at the end: the first check or report of the run "
                 "then reads its JSON Lines (docs/check.md)")
      ->group(O);
  add_run_history_options(bench, o.finish.history, s.tags, O);
  bench->add_flag("--json", o.json, "Print the summary as JSON")->group(O);
  bench->add_flag("--quiet", s.quiet, "Print nothing on success")->group(O);
  bench->add_option("--progress", o.progress, "auto|tty|plain|none")->capture_default_str()->group(O);
  bench->add_option("--grace-s", s.grace_s, "On Ctrl-C, wait this long for requests in flight, s")
      ->capture_default_str()
      ->group(O);
  CLI::Option* metrics_port =
      bench
          ->add_option(
              "--metrics-port", s.metrics_port,
              "Serve the benchmark's own Prometheus metrics on GET /metrics at this port while it runs "
              "(0: a free port, named on standard error); the endpoint closes when bench exits")
          ->check(CLI::Range(0, 65535))
          ->group(O);
  bench->add_option("--metrics-host", s.metrics_host, "Address of the --metrics-port endpoint")
      ->capture_default_str()
      ->needs(metrics_port)
      ->group(O);
  bench
      ->add_option("--metrics-linger-s", s.metrics_linger_s,
                   "Keep serving --metrics-port this long after the run, so that a scraper takes its last "
                   "scrape of the final counts (an interrupt ends the wait)")
      ->capture_default_str()
      ->needs(metrics_port)
      ->group(O);

  std::string footer = "\nSummary metrics (run.json \"summary\"):\n";
  for (const auto& k : metrics::kScalarKeys)
    footer += fmt::format("  {:<30} {:<8} {}\n", k.key, k.unit, k.definition);
  for (const auto& k : metrics::kDistributionKeys)
    footer += fmt::format("  {:<30} {:<8} {}\n", k.key, k.unit, k.definition);
  for (const auto& k : metrics::kObjectKeys)
    footer += fmt::format("  {:<30} {:<8} {}\n", k.key, k.unit, k.definition);
  footer +=
      "\nExit codes: 0 ok; 1 the run failed (target unreachable, more than --max-error-rate of the requests\n"
      "failed, or an I/O error); 2 bad input or options; 3 an SLO failed; 130 interrupted (results kept).\n";
  bench->footer(footer);
  return {bench, [options, interrupts, bench] {
            options->model_given = bench->count("--model") > 0;
            return run_bench(*options, *interrupts.interrupted, interrupts.hurry);
          }};
}

namespace {

int run_bench(BenchOptions& o, const std::atomic<bool>& interrupted, const std::atomic<bool>* hurry) {
  if (!o.mpi) {
    if (!o.mpi_shards.empty()) throw UsageError("--mpi-shards goes with --mpi");
    return run_bench_process(o, interrupted, hurry, nullptr);
  }
  if (!o.shard.empty() || !o.start_at.empty())
    throw UsageError("--mpi: the ranks are the shards and agree on the start: drop --shard and --start-at");
  if (o.s.out_dir.find("{shard}") != std::string::npos)
    throw UsageError(
        "--mpi: --out names the merged run (each rank's own is in OUT.shards/RANK): drop {shard}");
  MpiBench mpi(o.s.out_dir, o.mpi_shards, o.s.overwrite);
  // The merged run gets the page and the history (run_bench_process skips
  // them for a rank's own run), and rank 0 alone prints.
  const bool json = o.json, quiet = o.s.quiet;
  if (mpi.rank() > 0) o.s.quiet = true;
  std::string error;
  std::exception_ptr failure;
  try {
    run_bench_process(o, interrupted, hurry, &mpi);
  } catch (const std::exception& e) {
    failure = std::current_exception();
    error = e.what();
  }
  // The tags are in every rank's run.json already (the merged run's come from rank 0's).
  const int merged = mpi.finish(error, o.s.overwrite, o.finish, {}, json, quiet, std::cout, std::cerr);
  // mpirun's exit is the first non-zero rank's: the other ranks exit 0
  // (rank 0 has named their failures and counted their shares), and rank
  // 0's exit is the merged run's, or its own failure when nothing was merged.
  if (mpi.rank() > 0) return kExitOk;
  if (failure && !mpi.merged()) std::rethrow_exception(failure);
  return interrupted.load() ? kExitInterrupted : merged;
}

int run_bench_process(BenchOptions& o, const std::atomic<bool>& interrupted, const std::atomic<bool>* hurry,
                      MpiBench* mpi) {
  auto& s = o.s;
  // One descriptor per connection: raise the soft limit to the hard one.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  if (s.judge_api_key.empty())
    if (const char* env = std::getenv("TOKENSCOPE_JUDGE_API_KEY")) s.judge_api_key = env;
  if (!s.judge_target.empty() && s.judge_model.empty())
    throw UsageError("--judge-target needs --judge-model (the judge's model name)");
  if (s.judge_target.empty() && !s.judge_model.empty())
    throw UsageError("--judge-model needs --judge-target (the judge's base URL)");
  if (s.api_key.empty()) {
    if (const char* env = std::getenv("TOKENSCOPE_API_KEY"))
      s.api_key = env;
    else if (const char* env2 = std::getenv("OPENAI_API_KEY"))
      s.api_key = env2;
  }
  s.api = o.api == "chat"             ? bench::Api::kChat
          : o.api == "responses"      ? bench::Api::kResponses
          : o.api == "embeddings"     ? bench::Api::kEmbeddings
          : o.api == "rerank"         ? bench::Api::kRerank
          : o.api == "transcriptions" ? bench::Api::kTranscriptions
                                      : bench::Api::kCompletions;
  s.stream = !o.no_stream;
  s.ignore_eos = !o.no_ignore_eos;
  if (o.model_given) s.model = s.engine.engine.model;
  s.sampling.temperature = o.temperature;
  s.sampling.top_p = o.top_p;
  s.sampling.top_k = o.top_k;
  s.sampling.seed = o.request_seed;
  s.sampling.logprobs = o.logprobs;
  s.stages = bench::parse_stage_list(o.stages, "--stages");
  s.user_stages = bench::parse_stage_list(o.user_stages, "--user-stages");
  s.think_dist = bench::parse_think_dist(o.think_dist);
  s.client_cpus = parse_cpu_list(o.client_cpus, "--client-cpus");
  check_cpus_allowed(s.client_cpus, "--client-cpus");
  s.slo.clear();
  for (const auto& spec : o.slo) s.slo.push_back(bench::parse_slo_spec(spec));
  if (!o.sweep_rates.empty()) s.sweep.rates = bench::parse_sweep_rates(o.sweep_rates);
  if (!o.sweep_search.empty()) s.sweep.search = bench::parse_sweep_search(o.sweep_search);
  s.progress = bench::parse_progress(o.progress);
  s.compat = bench::parse_compat(o.compat);
  if (!o.start_at.empty() && o.shard.empty())
    throw UsageError("--start-at goes with --shard (the instant every shard starts at)");
  if (mpi) {
    s.shard = {.index = static_cast<std::uint32_t>(mpi->rank()),
               .count = static_cast<std::uint32_t>(mpi->size()),
               .source = "mpi"};
    s.agree_start = [mpi] { return mpi->agree_start(); };
    s.all_done = [mpi] { mpi->all_done(); };
    s.clock_offset = mpi->clock_offset();
  } else if (!o.shard.empty()) {
    s.shard = bench::parse_shard(o.shard, [](const char* name) { return std::getenv(name); });
  }
  if (s.shard.sharded()) {
    if (!s.sweep.empty() || s.repeat > 1 || !s.server_cmd.empty() || !s.server_sweep.empty() || s.coupling)
      throw UsageError(
          fmt::format("{}: one run per shard; sweeps, repeats, --coupling and --server-cmd are not sharded",
                      mpi ? "--mpi" : "--shard"));
    if (!o.start_at.empty()) {
      s.start_at_unix_ns = bench::parse_start_at(o.start_at);
      // A start long past (a stale manifest, a rerun pod) would send the
      // share's past-due requests as one burst: refused; a shard a little
      // late (scheduling, an image pull) runs, marked late.
      const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
      if (now_ns - *s.start_at_unix_ns > 10 * kNanosPerSecond)
        throw UsageError(fmt::format("--start-at {}: {:.0f} s ago; a shard may start at most 10 s late",
                                     o.start_at, nanos_to_s(now_ns - *s.start_at_unix_ns)));
    }
    // Shard 0 alone scrapes the server and samples the host (one, not all).
    if (s.shard.index > 0) {
      s.no_scrape = s.no_gpu = s.no_host = true;
      s.gpu_sampler_urls.clear();
      s.server_pid = -1;
      s.cgroup.clear();
    }
    s.out_dir = mpi ? mpi->shard_dir() : bench::shard_out_dir(s.out_dir, s.shard);
  }

  // The run cache, for the check that comes next: built from each run's
  // lines as they are written, saved when the run reaches its end.
  bench::RunListenerFactory cache;
  if (!o.no_cache) cache = [] { return rundir::run_cache_writer(); };
  if (s.insecure)
    std::cerr << "tokenscope bench: warning: --insecure: the server's certificate and name are not verified; "
                 "whoever sits between this machine and the target can read and change the requests, the "
                 "answers and the API key\n";
  const bench::BenchResult result = bench::run(s, interrupted, std::cerr, hurry, cache);
  // --mpi: a rank's own run has no page, history entry or printout; rank 0
  // gives the merged run those once the ranks have gathered.
  if (mpi) return result.exit_code;
  // Every run directory in the history (a sweep's each), interrupted ones
  // too; the page of the run or of the sweep.
  std::vector<std::string> runs;
  for (const auto& run : result.runs) runs.push_back(run.out_dir);
  const bool report_written = session::finish_run(o.finish, result.out_dir, runs, std::nullopt, std::cerr);
  const auto report_line = [&] {
    if (report_written)
      std::cout << "report: " << (std::filesystem::path(result.out_dir) / "report.html").string() << "\n";
  };
  if (!result.sweep.is_null() && result.sweep.value("kind", "") == "server") {
    if (!s.quiet) {
      print_server_curve(result.sweep);
      for (const auto& v : result.verdicts) std::cout << "FAILED: " << display_lines(v) << "\n";
      std::cout << "server sweep directory: " << display_text(result.out_dir) << "\n";
      report_line();
    }
    if (result.exit_code == kExitInterrupted)
      std::cerr << "interrupted: the runs that finished are kept in " << display_text(result.out_dir)
                << "; the server was stopped\n";
    return result.exit_code;
  }
  if (!result.sweep.is_null() && result.sweep.value("kind", "") == "repeats") {
    if (!s.quiet) {
      for (std::size_t k = 0; k < result.runs.size(); ++k) {
        const auto& sm = result.runs[k].summary;
        std::cout << fmt::format("repeat {}: TTFT p50 {:.2f} ms, TPOT p50 {:.3f} ms, {:.3f} req/s\n", k + 1,
                                 rundir::summary_value(sm, "ttft_ms.p50").value_or(NAN),
                                 rundir::summary_value(sm, "tpot_ms.p50").value_or(NAN),
                                 rundir::summary_value(sm, "request_throughput_rps").value_or(NAN));
      }
      std::cout << fmt::format("{} repeats; between-run mean and 95% interval:\n", result.runs.size());
      print_repeat_statistics(std::cout, result.sweep["statistics"]);
      for (const auto& v : result.verdicts) std::cout << "FAILED: " << display_text(v) << "\n";
      std::cout << "repeats directory: " << display_text(result.out_dir) << "\n";
      report_line();
    }
    if (!result.runs.empty() && result.runs.back().interrupted)
      std::cerr << "interrupted: the repeats that finished are kept in " << display_text(result.out_dir)
                << "\n";
    return result.exit_code;
  }
  if (!result.sweep.is_null()) {
    if (!s.quiet) {
      print_curve(result.sweep["curve"]);
      if (s.sweep.search) {
        const auto& best = result.sweep["max_rate_meeting_slo"];
        std::cout << (best.is_null() ? std::string("no rate met every SLO\n")
                                     : fmt::format("highest rate meeting every SLO: {:.3g} req/s\n",
                                                   best.get<double>()));
      }
      for (const auto& v : result.verdicts) std::cout << "FAILED: " << display_text(v) << "\n";
      std::cout << "sweep directory: " << display_text(result.out_dir) << "\n";
      report_line();
    }
    return result.exit_code;
  }
  if (result.runs.empty()) {  // --server-cmd: the server did not come up, or Ctrl-C came first
    if (result.exit_code == kExitInterrupted)
      std::cerr << "interrupted before the run started; the server was stopped\n";
    return result.exit_code;
  }
  const bench::RunReport& r = result.runs.front();
  if (o.json) {
    std::cout << r.summary.dump(2) << "\n";
  } else if (!s.quiet || result.exit_code == kExitFailure) {
    print_run(s, r);
    print_coupling(std::cout, result.coupling);
    report_line();
  }
  if (r.interrupted)
    std::cerr << "interrupted: results so far are kept in " << display_text(result.out_dir) << "\n";
  if (!r.failure.empty())
    std::cerr << "tokenscope bench: the run failed: " << display_text(r.failure) << "\n";
  return result.exit_code;
}

}  // namespace

}  // namespace tokenscope::cli
