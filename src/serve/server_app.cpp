#include "serve/server_app.h"

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cmath>
#include <ctime>
#include <future>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "net/http_server.h"
#include "serve/executor.h"
#include "serve/metrics.h"
#include "serve/router.h"

namespace tokenscope::serve {

namespace asio = boost::asio;

void check(const SimServerOptions& o) {
  const double mean = LogprobModel{}.mean_nats;
  if (!std::isfinite(o.logprob_shift) || !(mean + o.logprob_shift > 0))
    throw UsageError(
        fmt::format("--logprob-shift {}: expected a number of nats above -{}", o.logprob_shift, mean));
  if (!(o.reasoning_share >= 0 && o.reasoning_share <= 1))
    throw UsageError(fmt::format("--reasoning-share {}: expected a share in [0, 1]", o.reasoning_share));
  if (o.reasoning_field != "reasoning" && o.reasoning_field != "reasoning_content")
    throw UsageError(
        fmt::format("--reasoning-field {}: expected reasoning (current vLLM) or reasoning_content "
                    "(SGLang, llama-server, older vLLM)",
                    quote_input(o.reasoning_field)));
  if (!(o.tool_call_prob >= 0 && o.tool_call_prob <= 1))
    throw UsageError(fmt::format("--tool-call-prob {}: expected a probability in [0, 1]", o.tool_call_prob));
  if (!(o.cite_prob >= 0 && o.cite_prob <= 1))
    throw UsageError(fmt::format("--cite-prob {}: expected a probability in [0, 1]", o.cite_prob));
  if (o.tool_rounds > 1000)
    throw UsageError(fmt::format("--tool-rounds {}: expected at most 1000", o.tool_rounds));
  if (o.parallel_tool_calls < 1 || o.parallel_tool_calls > 16)
    throw UsageError(
        fmt::format("--parallel-tool-calls {}: expected 1 to 16 calls a turn", o.parallel_tool_calls));
}

void apply(const SimServerOptions& o, ServerAppSettings& s) {
  check(o);
  s.lora_modules.clear();
  for (const auto& m : o.lora_modules) {
    const auto eq = m.find('=');
    std::string name = m.substr(0, eq), path = eq == std::string::npos ? m : m.substr(eq + 1);
    if (name.empty() || name.size() > 256 ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:/") !=
            std::string::npos)
      throw UsageError(
          fmt::format("--lora-modules {}: expected NAME or NAME=PATH, NAME of letters, digits and "
                      "._-:/ (at most 256)",
                      quote_input(m)));
    for (const auto& [n, p] : s.lora_modules)
      if (n == name) throw UsageError(fmt::format("--lora-modules: {} is named twice", quote_input(name)));
    s.lora_modules.emplace_back(std::move(name), std::move(path));
  }
  if (s.lora_modules.size() > 4096) throw UsageError("--lora-modules: at most 4,096 adapters");
  s.threads = o.threads;
  s.faults = o.faults.rules;
  s.fault_seed = o.fault_seed;
  s.trace_emissions = o.trace_emissions;
  s.core.logprobs.shift_nats = o.logprob_shift;
  s.core.reasoning_share = o.reasoning_share;
  s.core.reasoning_field = o.reasoning_field;
  s.core.tools = {o.tool_call_prob, o.tool_rounds, o.parallel_tool_calls, o.cite_prob};
}

void apply(const SimServerOptions& o, engine::EngineSettings& s) {
  if (!o.lora_modules.empty() && s.max_loras == 0) s.max_loras = 1;  // vLLM's default --max-loras
}

struct ServerApp::Impl {
  Impl(const engine::EffectiveEngine& eff, const engine::EngineSettings& settings_in,
       std::unique_ptr<engine::CostModel> cost, ServerAppSettings s)
      : settings(std::move(s)),
        effective(eff),
        engine_settings(settings_in),
        ioc(static_cast<int>(settings.threads)),
        executor(ioc),
        metrics(settings.model_names.front(), eff.max_model_len,
                settings.fleet.fleet() ? settings.fleet.replicas : 1),
        trace(settings.trace_emissions.empty() ? nullptr
                                               : std::make_unique<EmissionTrace>(settings.trace_emissions)),
        core(executor, effective, engine_settings, std::move(cost), metrics, trace.get(), settings.core,
             settings.model_names.front(), &settings.fleet),
        faults(settings.faults, settings.fault_seed),
        router(core, metrics, faults, router_settings(effective)),  // its own copy: the pointer lives as long
        server(ioc, server_options(), settings.limits, router, executor.clock()) {
    metrics.set_connection_source([this] { return server.stats(); });
  }

  RouterSettings router_settings(const engine::EffectiveEngine& eff) const {
    RouterSettings rs;
    rs.parse.model_names = settings.model_names;
    for (const auto& [name, path] : settings.lora_modules) rs.parse.model_names.push_back(name);
    rs.lora_modules = settings.lora_modules;
    rs.parse.max_model_len = eff.max_model_len;
    rs.parse.model = &eff.model;
    rs.parse.default_completion_max_tokens = settings.default_completion_max_tokens;
    rs.api_key = settings.api_key;
    rs.created_unix = static_cast<std::int64_t>(std::time(nullptr));
    return rs;
  }
  net::ServerOptions server_options() const {
    net::ServerOptions so;
    so.host = settings.host;
    so.port = settings.port;
    so.single_thread = settings.threads == 1;
    so.warn = settings.warn;
    return so;
  }

  ServerAppSettings settings;
  engine::EffectiveEngine effective;
  engine::EngineSettings engine_settings;
  asio::io_context ioc;
  AsioExecutor executor;
  ServeMetrics metrics;
  std::unique_ptr<EmissionTrace> trace;
  ServingCore core;
  FaultPlan faults;
  Router router;
  net::HttpServer server;
  std::vector<std::thread> threads;
  bool stopped = false;
};

ServerApp::ServerApp(const engine::EffectiveEngine& effective, const engine::EngineSettings& settings,
                     std::unique_ptr<engine::CostModel> cost, ServerAppSettings s) {
  if (s.model_names.empty()) s.model_names.push_back(effective.model.name);
  if (s.fleet.fleet() && !settings.perturbations.empty())
    throw UsageError("--perturb and --replicas cannot be combined yet (the perturbations act on one engine)");
  if (!s.lora_modules.empty() && settings.max_loras == 0)
    throw UsageError("LoRA modules need adapters on in the engine (--max-loras)");
  s.core.adapters.clear();
  for (const auto& [name, path] : s.lora_modules) {
    if (std::find(s.model_names.begin(), s.model_names.end(), name) != s.model_names.end())
      throw UsageError(fmt::format("--lora-modules: {} is also a served model name", quote_input(name)));
    s.core.adapters.push_back(name);
  }
  impl_ = std::make_unique<Impl>(effective, settings, std::move(cost), std::move(s));
}

ServerApp::~ServerApp() {
  stop(0.0);
}

void ServerApp::start() {
  impl_->server.start();
  for (unsigned i = 0; i < impl_->settings.threads; ++i)
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
}

std::uint16_t ServerApp::port() const {
  return impl_->server.port();
}

const ServeMetrics& ServerApp::metrics() const {
  return impl_->metrics;
}

nlohmann::json ServerApp::perturbations() const {
  return impl_->core.perturbations_json();
}

const engine::Fleet* ServerApp::fleet() const {
  return impl_->core.fleet();
}

nlohmann::json ServerApp::fleet_json() const {
  const engine::Fleet* f = fleet();
  if (f == nullptr) return nullptr;
  const engine::FleetSetup& fs = impl_->settings.fleet;
  const ServeMetrics& m = impl_->metrics;
  nlohmann::json per = nlohmann::json::array();
  for (std::size_t i = 0; i < f->size(); ++i) {
    const auto v = [&](const char* name, const char* label = "") { return m.value(name, label, i); };
    const double queries = v("vllm:prefix_cache_queries_total");
    per.push_back(
        {{"replica", i},
         {"pool", fs.pools.empty() ? nlohmann::json(nullptr) : nlohmann::json(fs.pools[f->pool_of(i)].name)},
         {"role", f->disaggregation() ? nlohmann::json(f->is_prefill(i) ? "prefill" : "decode")
                                      : nlohmann::json(nullptr)},
         {"speed_tokens_per_s",
          f->speeds().empty() ? nlohmann::json(nullptr) : nlohmann::json(f->speeds()[i])},
         {"requests_finished",
          v("vllm:request_success_total", "stop") + v("vllm:request_success_total", "length")},
         {"requests_aborted", v("vllm:request_success_total", "abort")},
         {"prompt_tokens", v("vllm:prompt_tokens_total")},
         {"generation_tokens", v("vllm:generation_tokens_total")},
         {"prefix_cache_hit_rate", queries > 0 ? nlohmann::json(v("vllm:prefix_cache_hits_total") / queries)
                                               : nlohmann::json(nullptr)},
         {"preemptions", v("vllm:num_preemptions_total")},
         {"kv_cache_usage_peak", v("tokenscope:kv_cache_usage_peak")},
         {"steps", v("tokenscope:steps_total")}});
  }
  return {{"replicas", fs.replicas},
          {"gpus", fs.gpus},
          {"pools", fs.pools_json()},
          {"cost_per_hour", fs.cost_per_hour()},
          {"router", engine::name_of(fs.router.policy)},
          {"load_bound", fs.router.policy == engine::RouterPolicy::kPrefixAffinity
                             ? nlohmann::json(fs.router.load_bound)
                             : nlohmann::json(nullptr)},
          {"session_key", "user"},
          {"per_replica", per}};
}

void ServerApp::stop(double grace_s, double linger_s) {
  if (impl_->stopped) return;
  impl_->stopped = true;
  if (impl_->threads.empty()) return;
  auto& ioc = impl_->ioc;
  auto linger = std::make_shared<asio::steady_timer>(ioc);
  auto deadline = std::make_shared<std::chrono::steady_clock::time_point>();
  auto wait = std::make_shared<std::function<void()>>();
  *wait = [this, linger, deadline, wait_weak = std::weak_ptr<std::function<void()>>(wait)] {
    // Let the last bytes reach the clients, for at most linger_s.
    if (impl_->server.connections() == 0 || std::chrono::steady_clock::now() > *deadline)
      return impl_->ioc.stop();
    linger->expires_after(std::chrono::milliseconds(5));
    linger->async_wait([wait_weak](const boost::system::error_code&) {
      if (auto w = wait_weak.lock()) (*w)();
    });
  };
  asio::post(ioc, [this, grace_s, linger_s, deadline, wait] {
    impl_->server.drain();
    impl_->core.shutdown(grace_s, [this, linger_s, deadline, wait] {
      asio::post(impl_->ioc, [this, linger_s, deadline, wait] {
        *deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(linger_s));
        impl_->server.drain();
        (*wait)();
      });
    });
  });
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  // Engine timers still pending (a stall or a slow first byte that outlasts
  // the linger) hold responses and their connections: cancel them and run
  // their handlers now, so the connections go while the server they count
  // in still exists (io_context's destructor would release them after it).
  impl_->executor.shutdown();
  impl_->ioc.restart();
  impl_->ioc.poll();
  if (impl_->trace) impl_->trace->flush();
}

}  // namespace tokenscope::serve
