#include "cli/serve_command.h"

#include <fmt/format.h>

#include <pthread.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "cli/engine_options.h"
#include "core/error.h"
#include "core/run_dir.h"
#include "net/http_server.h"
#include "serve/server_app.h"

namespace tokenscope::cli {

namespace {

struct ServeOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8000;
  std::string port_file;
  std::vector<std::string> served_model_names;
  std::string api_key;
  net::ServerLimits limits;
  double shutdown_grace_s = 10.0;
  serve::SimServerOptions server;  // threads, faults, fault seed, emission trace, logprob shift
  std::string natural_output_len = "lognormal:211:0.8:max=4096";
  std::uint32_t default_completion_max_tokens = 16;
  std::uint64_t seed = 0;
  EngineOptions engine_options;
  engine::FleetOptions fleet;
};

int run_serve(ServeOptions& o);

}  // namespace

// Long by nature: every option of serve, in --help order.
Command add_serve_command(CLI::App& app) {
  const auto options = std::make_shared<ServeOptions>();
  auto& o = *options;
  CLI::App* serve = app.add_subcommand(
      "serve",
      "Serve the simulator over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions,\n"
      "/v1/models, /tokenize, /health) with vLLM's Prometheus /metrics. Tokens stream at the times the\n"
      "engine computes, in real time. Stops gracefully on SIGINT/SIGTERM.");
  serve->get_formatter()->column_width(44);
  const char* S = "Server";
  serve->add_option("--host", o.host, "Address to bind (loopback by default)")
      ->capture_default_str()
      ->group(S);
  serve->add_option("--port", o.port, "TCP port; 0 picks a free one (see --port-file)")
      ->capture_default_str()
      ->group(S);
  serve->add_option("--port-file", o.port_file, "Write the bound port to this file once listening")->group(S);
  serve->add_option("--threads", o.server.threads, "I/O threads")
      ->capture_default_str()
      ->check(CLI::Range(1u, 256u))
      ->group(S);
  serve
      ->add_option("--served-model-name", o.served_model_names,
                   "Model name(s) clients use [default: the --model name]")
      ->group(S);
  serve
      ->add_option(
          "--api-key", o.api_key,
          "Require 'Authorization: Bearer KEY' on every route but /health (or env TOKENSCOPE_API_KEY)")
      ->group(S);
  serve->add_option("--max-body-bytes", o.limits.max_body_bytes, "Largest request body, bytes (413 beyond)")
      ->capture_default_str()
      ->group(S);
  serve
      ->add_option("--max-header-bytes", o.limits.max_header_bytes,
                   "Largest request head, bytes (431 beyond)")
      ->capture_default_str()
      ->group(S);
  serve
      ->add_option("--header-timeout-s", o.limits.header_timeout_s,
                   "A request must arrive whole within this from its first byte, s (408 and close: slow "
                   "clients are dropped)")
      ->capture_default_str()
      ->group(S);
  serve
      ->add_option("--idle-timeout-s", o.limits.idle_timeout_s,
                   "Close keep-alive connections idle this long, s")
      ->capture_default_str()
      ->group(S);
  serve
      ->add_option("--write-timeout-s", o.limits.write_timeout_s,
                   "Close a connection whose write makes no progress this long (the client stopped "
                   "reading), s; its request is aborted")
      ->capture_default_str()
      ->group(S);
  serve
      ->add_option("--max-send-queue-bytes", o.limits.max_send_queue_bytes,
                   "Response bytes queued on a connection but not yet written, at most; beyond, the "
                   "connection is closed and its request aborted")
      ->capture_default_str()
      ->group(S);
  serve
      ->add_option("--max-connections", o.limits.max_connections,
                   "Open connections at most (503 with Retry-After beyond); lowered to what the "
                   "descriptor limit (ulimit -Hn) allows")
      ->capture_default_str()
      ->group(S);
  serve
      ->add_option(
          "--shutdown-grace-s", o.shutdown_grace_s,
          "On SIGINT/SIGTERM, let running streams finish this long, s, then end them with an error event")
      ->capture_default_str()
      ->group(S);
  const char* G = "Generation";
  serve
      ->add_option("--natural-output-len", o.natural_output_len,
                   "Where the simulated model stops by itself when a request does not set ignore_eos "
                   "(length spec as in sim --output-len, or 'none' to always run to max_tokens)")
      ->capture_default_str()
      ->group(G);
  serve
      ->add_option("--default-max-tokens", o.default_completion_max_tokens,
                   "max_tokens of /v1/completions requests that give none (chat: the rest of the context)")
      ->capture_default_str()
      ->group(G);
  serve
      ->add_option("--seed", o.seed,
                   "Seed of the natural output lengths and the simulated logprobs (and of --perturb's draws "
                   "by default)")
      ->capture_default_str()
      ->group(G);
  serve
      ->add_option("--lora-modules", o.server.lora_modules,
                   "LoRA adapters served behind the model, NAME or NAME=PATH each: a request whose model is "
                   "NAME runs with it (docs/serve.md \"LoRA adapters\"; --max-loras, --lora-load-ms)")
      ->group(G);
  serve
      ->add_option("--reasoning-share", o.server.reasoning_share,
                   "Simulate a reasoning model: this share of each chat answer's tokens comes first as "
                   "reasoning (0: none), docs/serve.md \"Reasoning models\"")
      ->capture_default_str()
      ->group(G);
  serve
      ->add_option("--reasoning-field", o.server.reasoning_field,
                   "The field of the reasoning: reasoning (current vLLM) or reasoning_content (SGLang, "
                   "llama-server, older vLLM)")
      ->capture_default_str()
      ->group(G);
  serve
      ->add_option("--tool-call-prob", o.server.tool_call_prob,
                   "The chance that a chat turn with tools (tool_choice auto) calls them, docs/serve.md "
                   "\"Tool calls and structured outputs\"")
      ->capture_default_str()
      ->group(G);
  serve
      ->add_option("--tool-rounds", o.server.tool_rounds,
                   "After this many tool rounds since the last user message, the simulated model answers in "
                   "text (tool_choice auto)")
      ->capture_default_str()
      ->group(G);
  serve
      ->add_option("--parallel-tool-calls", o.server.parallel_tool_calls,
                   "At most this many tool calls in one turn (1 to 16, drawn uniformly; one when the request "
                   "sets parallel_tool_calls false)")
      ->capture_default_str()
      ->group(G);
  serve
      ->add_option("--cite-prob", o.server.cite_prob,
                   "A text answer to a conversation holding documents ([doc-N], as retrieval results bring "
                   "them) cites each with this chance")
      ->capture_default_str()
      ->group(G);
  serve
      ->add_option("--logprob-shift", o.server.logprob_shift,
                   "Simulate a less accurate (e.g. quantised) model: added to the mean of -logprob of every "
                   "token (nats; the model's own is 0.5), docs/serve.md \"Log-probabilities\"")
      ->capture_default_str()
      ->group(G);
  const char* T = "Testing";
  serve
      ->add_option_function<std::string>(
          "--faults", [&o](const std::string& text) { o.server.faults = serve::parse_faults(text); },
          "Inject faults: comma-separated KIND=RATE[@MS] with KIND in http_5xx, http_429, reset, "
          "stall (needs @MS), malformed, slow_first_byte (needs @MS), wrong_tool, invalid_arguments, "
          "malformed_json; see docs/serve.md")
      ->group(T);
  serve->add_option("--fault-seed", o.server.fault_seed, "Seed of the fault draws")
      ->capture_default_str()
      ->group(T);
  serve
      ->add_option("--trace-emissions", o.server.trace_emissions,
                   "Write one JSON line per streamed token: engine time and socket write time (ns)")
      ->group(T);
  add_engine_options(serve, o.engine_options);
  add_fleet_options(serve, o.fleet);
  serve->footer(
      "\nExit codes: 0 after a graceful shutdown, 1 I/O failure, 2 bad options (or the port is taken).\n");
  return {serve, [options] { return run_serve(*options); }};
}

namespace {

int run_serve(ServeOptions& o) {
  if (o.api_key.empty())
    if (const char* env = std::getenv("TOKENSCOPE_API_KEY")) o.api_key = env;
  engine::EngineSettings settings = engine_settings(o.engine_options, o.seed);
  serve::apply(o.server, settings);
  const auto catalog = load_catalog(o.engine_options);
  const auto eff = engine::resolve_engine(settings, catalog);
  if (!(o.shutdown_grace_s >= 0)) throw UsageError("--shutdown-grace-s: expected seconds >= 0");
  if (!(o.limits.header_timeout_s > 0) || !(o.limits.idle_timeout_s > 0) || !(o.limits.write_timeout_s > 0))
    throw UsageError("--header-timeout-s, --idle-timeout-s and --write-timeout-s: expected seconds > 0");
  if (o.limits.max_send_queue_bytes == 0) throw UsageError("--max-send-queue-bytes: expected bytes > 0");
  if (o.limits.max_connections == 0) throw UsageError("--max-connections: expected at least 1");

  serve::ServerAppSettings ss;
  ss.fleet = engine::resolve_fleet(o.fleet, settings, eff, catalog, o.seed);
  ss.host = o.host;
  ss.port = o.port;
  ss.api_key = o.api_key;
  ss.model_names = o.served_model_names;
  if (ss.model_names.empty()) ss.model_names.push_back(o.engine_options.engine.model);
  ss.default_completion_max_tokens = o.default_completion_max_tokens;
  ss.core.seed = o.seed;
  serve::apply(o.server, ss);
  if (o.natural_output_len != "none")
    ss.core.natural_length = workload::parse_length_spec(o.natural_output_len, "--natural-output-len",
                                                         workload::LengthRole::kOutput);
  ss.warn = [](std::string_view message) { std::cerr << "tokenscope serve: " << message << std::endl; };
  // Enough descriptors for --max-connections, or fewer connections: beyond
  // the limit accept() fails (EMFILE) where a 503 should have been sent.
  ss.limits = o.limits;
  const net::DescriptorBudget fds = net::fit_descriptor_limit(o.limits.max_connections);
  ss.limits.max_connections = fds.max_connections;
  if (fds.max_connections < o.limits.max_connections)
    std::cerr << fmt::format(
                     "tokenscope serve: --max-connections {} needs {} descriptors, but the hard limit "
                     "(ulimit -Hn) is {}: serving at most {} connections (more get 503); raise the hard "
                     "limit to serve more",
                     o.limits.max_connections, o.limits.max_connections + 1 + fds.reserved, fds.hard,
                     fds.max_connections)
              << std::endl;

  // SIGINT and SIGTERM are waited for on this thread: blocked here before
  // the server's threads start, so that they inherit the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  serve::ServerApp app(eff, settings, make_cost_model(settings, eff), ss);
  app.start();
  if (!o.port_file.empty()) {
    write_file_atomic(o.port_file, fmt::format("{}\n", app.port()));
  }
  std::cout << fmt::format(
                   "tokenscope serve: listening on http://{}:{} (model {} as '{}', {} on {}x {}{})", o.host,
                   app.port(), eff.model.name, ss.model_names.front(),
                   eff.num_gpu_blocks ? fmt::format("{} KV blocks", *eff.num_gpu_blocks) : "unlimited KV",
                   eff.tensor_parallel, eff.gpu.name, o.api_key.empty() ? "" : ", API key required")
            << std::endl;
  if (ss.fleet.fleet())
    std::cout << fmt::format(
                     "tokenscope serve: a fleet of {} replicas ({} GPUs) behind {}{}{}; /metrics per "
                     "replica, engine=\"N\"",
                     ss.fleet.replicas, ss.fleet.gpus, engine::name_of(ss.fleet.router.policy),
                     ss.fleet.pools.empty() ? "" : fmt::format(", {} pools", ss.fleet.pools.size()),
                     !ss.fleet.pd ? std::string()
                     : ss.fleet.pd->prefill_replicas == 1
                         ? std::string(", replica 0 prefills, the rest decode")
                         : fmt::format(", replicas 0-{} prefill, the rest decode",
                                       ss.fleet.pd->prefill_replicas - 1))
              << std::endl;
  if (o.api_key.empty() && !net::is_loopback_host(o.host))
    std::cerr << fmt::format(
                     "tokenscope serve: warning: --host {} is not the loopback interface and no API key is "
                     "set: anyone who can reach this address can send requests and read /metrics "
                     "(set --api-key or TOKENSCOPE_API_KEY)",
                     display_text(o.host))
              << std::endl;
  for (const auto& p : settings.perturbations)
    std::cout << "tokenscope serve: perturbation " << p.to_json().dump() << " (GET /perturbations)"
              << std::endl;

  int signal = 0;
  while (sigwait(&stop_signals, &signal) != 0) {
  }
  std::cerr << fmt::format("tokenscope serve: signal {}: draining (grace {} s)", signal, o.shutdown_grace_s)
            << std::endl;
  // Streams finish within the grace, the last bytes reach the clients for
  // at most 2 s, then the threads are joined and the emission trace flushed.
  app.stop(o.shutdown_grace_s, 2.0);
  std::cerr << "tokenscope serve: stopped" << std::endl;
  return kExitOk;
}

}  // namespace

}  // namespace tokenscope::cli
