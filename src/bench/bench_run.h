// `tokenscope bench` as a library call: bench::run(settings) prepares the
// load plan, starts the in-process simulator when there is no target, asks
// the target which model it serves, drives the load (Runner), writes the run
// directory as requests finish (requests.jsonl, optional requests.csv and
// vllm_result.json, then run.json), and for sweeps repeats this per rate.
// Nothing is printed but progress and notes on `log`; the caller prints the
// results (src/cli/bench_command.cpp).
//
// Exit codes (docs/errors.md): 0 ok; 1 the run failed — the target cannot be
// reached, more than max_error_rate of the requests failed, or an I/O error;
// 2 bad options or input (UsageError, thrown); 3 an SLO failed; 130
// interrupted (results kept).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_settings.h"
#include "core/summary.h"
#include "net/http_fetch.h"
#include "observe/run_listener.h"

namespace tokenscope::bench {

// One run (a whole bench, or one rate of a sweep).
struct RunReport {
  std::string out_dir;
  nlohmann::json summary;       // run.json "summary"
  nlohmann::json client;        // run.json "client"
  nlohmann::json observe;       // run.json "observe" (the sampled sources)
  nlohmann::json hidden_queue;  // run.json "server"."hidden_queue"; null without the server's gauges
  nlohmann::json tasks;  // run.json "tasks" (bench/task_driver.h TaskSummary); null without task classes
  std::string model;
  std::string url;
  bool in_process = false;
  bool interrupted = false;
  std::string workload_description;
  std::string load_description;
  std::string prompts_description;  // how prompt lengths were obtained
  nlohmann::json prompt_check;      // the target's /tokenize on a sample of prompts
  std::uint64_t sent = 0;
  std::uint64_t not_sent = 0;
  std::uint64_t connections = 0;
  double cpu_s = 0.0;
  double rate_rps = 0.0;  // the open-loop rate of this run (sweeps)
  // Why the run failed, when it did (the error-rate check); empty otherwise.
  std::string failure;
};

struct BenchResult {
  int exit_code = 0;
  std::string out_dir;
  std::vector<RunReport> runs;  // one, or one per sweep rate in the order they ran
  // Sweeps: {"curve": [...], "max_rate_meeting_slo": rate|null, "partial": bool}; null otherwise.
  nlohmann::json sweep;
  // Lines that explain a non-zero exit code.
  std::vector<std::string> verdicts;
  // --coupling: run.json's "coupling" (analyze/coupling.h); null otherwise.
  nlohmann::json coupling;
};

// A sweep point of sweep.json from one run's summary.
nlohmann::json curve_point(double rate, const nlohmann::json& summary);

// Makes the listener of one run (a sweep makes one per rate): it is given
// every record and observation as it is written, and the run's directory
// when the run reached its end (the run cache: rundir::run_cache_writer).
using RunListenerFactory = std::function<std::unique_ptr<observe::RunListener>()>;

// Runs the benchmark; throws UsageError for bad settings or input and
// IoError when the run directory cannot be written. interrupted (Ctrl-C):
// no new requests, those in flight get --grace-s; hurry (a second Ctrl-C):
// those in flight are cancelled at once; in both cases the results are
// written and the run reports interrupted.
BenchResult run(const BenchSettings& settings, const std::atomic<bool>& interrupted, std::ostream& log,
                const std::atomic<bool>* hurry = nullptr, const RunListenerFactory& listeners = {});

// What a remote target says about itself, from its answers to GET /props
// (llama.cpp's llama-server: total_slots, build_info, n_ctx), GET
// /get_server_info (SGLang: version, max_running_requests) and GET
// /version (vLLM): run.json settings.effective.target.server_info,
// {"available": true, "engine", "route", "version", "max_batch" (the batch
// cap, where the server says it), ...} or {"available": false, "reason"}.
// A failed fetch is a default FetchResult with its error.
nlohmann::json server_info_record(const net::FetchResult& props, const net::FetchResult& version,
                                  const net::FetchResult& sglang);

// The info series of the target's GET /metrics (Prometheus's convention: a
// gauge named *_info, value 1, whose labels say what the server is — vLLM's
// vllm:cache_config_info, a *_build_info with its version): {name: {label:
// value}} for at most 8 families (the first sample of each, 32 labels, values
// cut at 200 bytes); null when the answer has none (or is not an exposition).
nlohmann::json metrics_info_record(const net::FetchResult& metrics);

}  // namespace tokenscope::bench
