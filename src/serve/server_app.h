// The whole `tokenscope serve` stack in one object — engine, serving core,
// fault plan, router and HTTP server on its own io_context and threads:
// `tokenscope serve` is a ServerApp and a wait for SIGINT/SIGTERM, and
// `tokenscope bench` without --target starts one in-process on an ephemeral
// loopback port and drives it over real HTTP. Both fill its settings from
// the same SimServerOptions.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/cost_model.h"
#include "engine/engine.h"
#include "engine/fleet_setup.h"
#include "net/http.h"
#include "serve/faults.h"
#include "serve/serving_core.h"
#include "serve/sim_server_options.h"

namespace tokenscope::serve {

struct ServerAppSettings {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: ephemeral
  unsigned threads = 1;
  std::vector<std::string> model_names;  // the first is reported in responses
  // LoRA adapters: {name, path}; a request naming one runs with adapter i + 1.
  std::vector<std::pair<std::string, std::string>> lora_modules;
  std::string api_key;
  net::ServerLimits limits;
  CoreSettings core;
  // A fleet behind the server (serve --replicas, --pools, --prefill-replicas):
  // its replicas in place of the one engine (ServingCore); one engine by default.
  engine::FleetSetup fleet;
  std::vector<FaultRule> faults;
  std::uint64_t fault_seed = 0;
  std::string trace_emissions;  // path, or empty
  std::uint32_t default_completion_max_tokens = 16;
  // One-line warnings of the HTTP server (a failed accept); null: standard error.
  std::function<void(std::string_view)> warn;
};

class ServerApp {
 public:
  ServerApp(const engine::EffectiveEngine& effective, const engine::EngineSettings& settings,
            std::unique_ptr<engine::CostModel> cost, ServerAppSettings s);
  ~ServerApp();  // stops the server if still running
  ServerApp(const ServerApp&) = delete;
  ServerApp& operator=(const ServerApp&) = delete;

  // Binds and starts the I/O threads; throws UsageError when the port is taken.
  void start();
  std::uint16_t port() const;
  // Lets streams finish for grace_s, then ends them, lets the last bytes
  // reach the clients for at most linger_s while connections stay open,
  // closes them and joins the threads. Idempotent.
  void stop(double grace_s = 0.0, double linger_s = 2.0);
  const ServeMetrics& metrics() const;
  // The engine's injected perturbations and what they did (ServingCore::perturbations_json).
  nlohmann::json perturbations() const;
  // The fleet (null: one engine); read it after stop().
  const engine::Fleet* fleet() const;
  // run.json "fleet" of a run on this server (null: one engine), after
  // stop(): the fleet's shape and router, and each replica's series of
  // /metrics (requests finished and aborted, tokens, prefix hits,
  // preemptions, the KV peak, steps).
  nlohmann::json fleet_json() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenscope::serve
