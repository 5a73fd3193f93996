// Everything one `tokenscope bench` invocation needs, as a plain struct with
// units in field names: the workload, the target and the request format, the
// load (open or closed loop, stages, sweeps, SLOs), the in-process server
// used when there is no target, and the outputs. The CLI only fills it
// (src/cli/bench_command.cpp); bench::run() does the rest.
//
// The load's small languages (stages, SLOs, sweeps, think-time distribution,
// progress, compatibility output) arrive as text on the command line and are
// parsed once, where they arrive, by the parsers below (each throws a
// UsageError naming its option); the settings hold the parsed values, and
// the text where run.json's "requested" settings record it as given.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/exchange.h"
#include "bench/runner.h"
#include "bench/schedule.h"
#include "core/summary.h"
#include "engine/engine_options.h"
#include "engine/fleet_setup.h"
#include "rundir/shard_info.h"
#include "serve/sim_server_options.h"
#include "workload/workload_spec.h"

namespace tokenscope::bench {

// Stages of rate (open loop) or of users (closed loop): "V@S[,V@S...]".
struct StageList {
  std::string text;  // as given ("" : none)
  std::vector<Stage> stages;
  bool empty() const { return stages.empty(); }
};
StageList parse_stage_list(std::string_view text, std::string_view option);

// One --slo: "[CLASS:]ttft_ms=X,tpot_ms=Y,e2e_ms=Z,ttfo_ms=W,p=99".
struct SloSpec {
  std::string text;        // as given
  std::string task_class;  // "" : every class without an SLO of its own
  Slo slo;
};
SloSpec parse_slo_spec(std::string_view text);

// A load curve: one run per rate (--sweep-rates A,B,C), or the highest rate
// meeting every SLO searched between two (--sweep-search LOW:HIGH, `steps`
// bisections).
struct Sweep {
  std::vector<double> rates;
  std::optional<std::pair<double, double>> search;
  unsigned steps = 6;
  bool empty() const { return rates.empty() && !search; }
};
std::vector<double> parse_sweep_rates(std::string_view text);
std::pair<double, double> parse_sweep_search(std::string_view text);

enum class ThinkDist : std::uint8_t { kFixed, kExponential };
ThinkDist parse_think_dist(std::string_view text);  // fixed | exponential
std::string_view think_dist_name(ThinkDist d);

// The progress line on standard error: on a terminal (auto), always redrawn
// (tty), a line every few seconds (plain), or none.
enum class Progress : std::uint8_t { kAuto, kTty, kPlain, kNone };
Progress parse_progress(std::string_view text);  // auto | tty | plain | none

// Output in a peer's format beside the run's own: none, or vLLM's
// benchmark_serving result (vllm_result.json).
enum class Compat : std::uint8_t { kNone, kVllm };
Compat parse_compat(std::string_view text);  // "" | vllm

// --api transcriptions: the audio per request when the workload's class has none.
inline constexpr const char* kDefaultAudioDurationMs = "uniform:5000:30000";

// One shard of a run spread over processes or hosts (bench/shard.h):
// shard `index` of `count`; source "" when the run is not sharded.
struct ShardSpec {
  std::uint32_t index = 0;
  std::uint32_t count = 1;
  std::string source;  // "--shard", or the variable the index came from
  bool sharded() const { return !source.empty(); }
};

struct BenchSettings {
  // ---- workload: the options shared with sim, or a YAML workload file
  workload::WorkloadSpec workload;
  std::string workload_file;

  // ---- target
  std::string target_url;  // "" : the built-in simulator, in-process on a loopback port
  Api api = Api::kCompletions;
  // Pooling APIs: inputs per embeddings request, documents per rerank
  // request (0: 1 for embeddings, 8 for rerank), and the rerank query's tokens.
  std::uint32_t inputs_per_request = 0;
  std::uint32_t query_tokens = 32;
  // Transcriptions: the audio's length for requests whose workload class
  // has no `audio` (a length spec; "" : uniform:5000:30000), the answer's
  // format (json | verbose_json | text) and the language sent ("" : none).
  std::string audio_duration_ms;
  std::string response_format = "json";
  std::string language;
  std::string endpoint;  // request path after the target's path ("" : by api)
  std::string model;     // "" : the target's GET /v1/models (in-process: the engine's model)
  std::string api_key;
  // The judge of agentic tasks' answers (docs/tasks.md "The judge"): an
  // OpenAI-compatible base URL, its model, its key ("" : none).
  std::string judge_target, judge_model, judge_api_key;
  std::string judge_extra_body;      // a JSON object merged into the judge's requests
  std::vector<std::string> headers;  // "Name: value"
  double timeout_s = 600.0;          // per request, from the send (0: none)
  // Output events kept per request; later ones are counted and their gaps
  // histogrammed (records' events_dropped), so memory per request is bounded.
  std::size_t max_events = 65536;
  // Requests cancelled on purpose: SHARE:WHEN (bench/runner.h CancelPlan); "" none.
  std::string cancel;
  // --model-mix NAME=WEIGHT,...: each request (each session) goes to one of
  // these models or LoRA adapters, drawn by weight; "" none.
  std::string model_mix;
  // --coupling: after the mix, each task class alone at its own arrival
  // times (coupling/CLASS/), and run.json "coupling" (analyze/coupling.h).
  bool coupling = false;
  // > 1: the same settings this many times with fresh seeds (workload.seed,
  // + 1, ...) into OUT/repeat-K/, with OUT/sweep.json (rundir/run_set.h).
  unsigned repeat = 1;
  // A server tokenscope starts for each run and stops after it
  // (bench/server_sweep.h): the shell command, with {NAME} for each swept
  // value; the sweep's NAME=V1,V2,... (repeatable: a grid); how long it may
  // take to answer GET /health. A run of the sweep carries its own command
  // (with the values in) and its point's values.
  std::string server_cmd;
  std::vector<std::string> server_sweep;
  double server_start_timeout_s = 600.0;
  std::vector<std::pair<std::string, std::string>> server_point;
  std::string only_class;  // the workload's requests of this class only ("" : all)
  // A request planned with a longer prompt fails the run at the start (bad
  // input), before its text is built: its text alone would take gigabytes.
  std::uint64_t max_prompt_tokens = 2'097'152;
  bool insecure = false;
  std::string ca_file;
  bool stream = true;
  bool ignore_eos = true;
  Sampling sampling;           // temperature, top_p, top_k, seed, logprobs, extra body
  std::string tokenizer_file;  // a tokenizer.json or SentencePiece model: exact prompt lengths
  // Prompts whose length the target's /tokenize is asked before the run (0: none).
  std::size_t prompt_check_sample = 16;
  // Size prompts to the target's vocabulary and added tokens through its
  // /tokenize (bench/server_prompts.h; the in-process server's too): without
  // --tokenizer the prompt words, with the chat API the template's tokens.
  bool exact_prompts = true;

  // ---- load
  StageList stages;                   // open loop: RATE@SECONDS,...
  std::uint32_t max_concurrency = 0;  // open loop: requests in flight at most (0: no cap)
  std::uint32_t concurrency = 0;      // closed loop: users (0: open loop)
  StageList user_stages;              // closed loop: USERS@SECONDS,...
  double think_ms = 0.0;
  ThinkDist think_dist = ThinkDist::kFixed;
  double warmup_s = 0.0;
  unsigned client_threads = 1;
  // --client-cpus: client thread i on client_cpus[i % size], every other
  // thread of the process on the CPUs it may use but these (empty: no pinning).
  std::vector<int> client_cpus;
  std::uint32_t max_connections = 0;  // connections open at most, all client threads together (0: default)
  std::uint32_t max_connecting =
      kDefaultMaxConnecting;  // TCP handshakes in progress at most, per client thread (0: no limit)
  std::vector<SloSpec> slo;   // --slo (repeatable)
  Sweep sweep;
  // The run fails (exit 1) when more than this share of its requests failed.
  double max_error_rate = 0.1;
  // --shard and --start-at (bench/shard.h): this process's share of the
  // schedule, and the Unix time (ns) every shard starts it at.
  ShardSpec shard;
  std::optional<std::int64_t> start_at_unix_ns;
  // bench --mpi (docs/fleet.md "Under Open MPI"): the ranks agree on the
  // start and wait for each other themselves. agree_start is called once
  // this shard's plan is built and returns the start (Unix ns on rank 0's
  // clock) in place of start_at_unix_ns; clock_offset is rank 0's clock
  // against this host's; all_done is called after this shard's last
  // response, before its final reads, and returns once every shard has had
  // its last (shard 0's last scrape then spans every shard's requests).
  std::function<std::int64_t()> agree_start;
  std::function<void()> all_done;
  std::optional<rundir::ClockOffsetInfo> clock_offset;

  // ---- in-process server (no target_url)
  engine::EngineOptions engine;
  // --server-threads, --faults, --fault-seed, --trace-emissions,
  // --logprob-shift: as serve's (serve/server_app.h).
  serve::SimServerOptions server;
  // --replicas, --router, --pools, --prefill-replicas, ...: a fleet behind
  // the in-process server (engine/fleet_setup.h; run.json "fleet").
  engine::FleetOptions fleet;

  // ---- observe: the server's /metrics, GPUs, host and the server's process
  // and cgroup, sampled on the client's clock into samples.jsonl
  std::vector<std::string> scrape_urls;  // --scrape (none: the target's own /metrics, when it answers)
  bool no_scrape = false;
  double scrape_interval_s = 1.0;  // every collector's interval
  // Bounds on a scrape and on samples.jsonl (docs/reliability.md "Scrape
  // bounds"): --scrape-max-series, --scrape-max-label-sets,
  // --scrape-max-bucket-bounds, --samples-max-mib-per-hour (0: no bound).
  std::size_t scrape_max_series = 20'000;
  std::size_t scrape_max_label_sets = 1024;
  std::size_t scrape_max_bucket_bounds = 512;
  double samples_max_mib_per_hour = 2048;
  std::vector<std::string> gpu_sampler_urls;  // DCGM exporters' /metrics (source "gpu")
  bool no_gpu = false;                        // no NVML sampling
  bool no_host = false;                       // no /proc sampling
  int server_pid = -1;  // the server's process (-1: none): its CPU, memory, threads and cgroup
  std::string cgroup;   // the server's cgroup v2 directory (default: from /proc/PID/cgroup)
  // Exports after the run (docs/observe.md): a relative path is inside the run directory.
  std::string trace_out;      // Perfetto (Chrome JSON) trace
  bool otlp_out = false;      // otlp_traces.json and otlp_metrics.json in the run directory
  std::string otlp_endpoint;  // OTLP/HTTP base URL to push the run to

  // ---- output
  // --tag (repeatable): run.json "tags", for the history of runs.
  std::vector<std::string> tags;
  std::string out_dir;     // "" : runs/bench-UTCDATE-TIME
  bool overwrite = false;  // --out may hold an earlier run: its files are removed first
  Compat compat = Compat::kNone;
  bool csv = false;
  bool quiet = false;
  Progress progress = Progress::kAuto;
  double grace_s = 5.0;  // after Ctrl-C, how long requests in flight may finish
  // The benchmark's own Prometheus metrics on GET /metrics while it runs
  // (bench/live_metrics.h): -1 none, 0 a free port (named on the log).
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
  double metrics_linger_s = 0.0;  // keep serving this long after the last run
};

}  // namespace tokenscope::bench
