// The engine behind the HTTP API, driven in wall-clock time: requests enter
// the engine when they arrive, each step runs when the previous one ends,
// and the tokens a step emits are written to their streams at the step's end
// time (engine time = clock time). Everything engine-side runs on one serial
// Executor; responses go out through each request's net::Responder.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/run_dir.h"
#include "engine/engine.h"
#include "engine/fleet.h"
#include "engine/fleet_setup.h"
#include "net/http.h"
#include "serve/executor.h"
#include "serve/faults.h"
#include "serve/logprobs.h"
#include "serve/metrics.h"
#include "serve/openai.h"
#include "serve/tools.h"
#include "workload/lengths.h"

namespace tokenscope::serve {

// --trace-emissions: one JSON line per token written to a stream:
// {"req": engine request id, "i": token index, "engine_ns": emission time,
//  "write_ns": when it was handed to the socket} (monotonic clock), one
// line per request as the engine admits it: {"req": id, "resp": the
// response's "id" ("cmpl-..."), "arrival_ns": admission time}, and one line
// per injected fault as it takes effect: {"fault": kind, "resp": the id of
// the response it hit, "t_ns"}. Both name the client's X-Request-Id as
// "xrid" when the request carried one.
class EmissionTrace {
 public:
  explicit EmissionTrace(const std::string& path);
  void record(std::uint64_t request, std::uint32_t index, Nanos engine_ns, Nanos write_ns);
  void record_request(std::uint64_t request, const std::string& response_id, Nanos arrival_ns,
                      std::string_view client_request_id = {});
  void record_fault(std::string_view kind, const std::string& response_id, Nanos t_ns,
                    std::string_view client_request_id = {});
  void flush();

 private:
  std::mutex mutex_;
  JsonlWriter writer_;
};

struct CoreSettings {
  // When a request does not set ignore_eos, the simulated model stops on its
  // own after a length drawn from this distribution (seeded by the request),
  // with finish_reason "stop"; max_tokens still caps it ("length").
  std::optional<workload::LengthDistribution> natural_length;
  std::uint64_t seed = 0;  // of the natural lengths and the simulated logprobs
  // The logprobs answered to requests that ask for them (serve/logprobs.h).
  LogprobModel logprobs;
  // A reasoning model (chat only): the first round(share x the choice's
  // length) tokens are reasoning, streamed in delta[reasoning_field] and
  // answered in message[reasoning_field]; the rest is content. 0: none.
  double reasoning_share = 0.0;
  std::string reasoning_field = "reasoning";
  // LoRA adapters served behind the base model: a request whose "model" is
  // adapters[i] runs with engine adapter i + 1 and is answered with that name.
  std::vector<std::string> adapters;
  // How the simulated model calls the tools a chat request declares (serve/tools.h).
  ToolPolicy tools;
  // A fleet keeps every route and KV transfer (bench's in-process server:
  // run.json "fleet" reads them; a run is bounded). Off (serve): each is
  // forgotten once its request ended (engine::Fleet::forget_ended).
  bool fleet_history = false;
};

class ResponseTask;

// A fleet (serve --replicas, --pools, --prefill-replicas; docs/serve.md
// "Fleets"): every replica steps on its own in wall-clock time on the one
// executor; a request is routed on admission (its session key: the body's
// "user", else its own serial); a disaggregated fleet's KV transfers reach
// their decode replica at their arrival times; metrics per replica
// (ServeMetrics' engine label).
class ServingCore final : public engine::EngineObserver {
 public:
  // fleet: null or one engine: the one engine of `cost`; else the fleet it
  // makes (each replica's cost model from its settings; cost is unused).
  ServingCore(Executor& executor, const engine::EffectiveEngine& effective,
              const engine::EngineSettings& settings, std::unique_ptr<engine::CostModel> cost,
              ServeMetrics& metrics, EmissionTrace* trace, CoreSettings core_settings, std::string model_name,
              const engine::FleetSetup* fleet = nullptr);
  ~ServingCore() override;

  // Thread-safe: starts generating for a validated request and answers it
  // through the responder (streamed or whole).
  void submit(GenerationRequest request, std::shared_ptr<net::Responder> responder, Fault fault);
  // Thread-safe: takes no more requests; lets the running ones finish for
  // grace_s, then ends them with an error; calls done() on the executor.
  void shutdown(double grace_s, std::function<void()> done);
  bool accepting() const { return accepting_.load(); }
  // Thread-safe: a fresh response id, "cmpl-<16 hex>" or "chatcmpl-<16 hex>".
  std::string new_response_id(Api api);
  // Thread-safe: counts a fault that takes effect now
  // (tokenscope:faults_injected_total) and writes it to the emission trace
  // with the id of the response it hit.
  void record_fault(FaultKind kind, const std::string& response_id, std::string_view client_request_id = {});
  // Thread-safe: the engine's injected perturbations with what they did so
  // far: {"perturbations": [...], "perturbation_seed": N} (GET
  // /perturbations; the shape of run.json's keys of the same names; an
  // empty list and a null seed without perturbations).
  nlohmann::json perturbations_json() const;
  // Requests in progress (engine context; for tests).
  std::size_t active() const { return tasks_.size(); }
  // The engines (one, or the fleet's replicas); the fleet (null: one engine).
  std::size_t engines() const { return engines_.size(); }
  const engine::Fleet* fleet() const { return fleet_.get(); }
  // The replica a request is on (its decode replica once its KV arrived); 0: one engine or unknown.
  std::size_t replica_of(std::uint64_t engine_id) const;

  // EngineObserver: events are buffered and delivered at the step's end time,
  // except the cached prompt tokens of a request (known when it is first
  // scheduled), which its usage needs whenever the response ends.
  void on_first_scheduled(std::uint64_t id, Nanos t, std::uint32_t cached_tokens) override;
  void on_token(std::uint64_t id, Nanos t, tokenizers::TokenId token) override;
  void on_finish(const engine::FinishedRequest& r) override;
  void on_reject(std::uint64_t id, Nanos t, std::string_view reason) override;
  void on_step(const engine::StepStats& s) override;

  // Engine-side helpers for ResponseTask (engine context only).
  Executor& executor() { return executor_; }
  ServeMetrics& metrics() { return metrics_; }
  EmissionTrace* trace() { return trace_; }
  const std::string& model_name() const { return model_name_; }
  const CoreSettings& settings() const { return settings_; }
  void abort_request(std::uint64_t engine_id);
  // Writes of ResponseTask: while a step's events are processed (at the
  // step's start, so the formatting is done while the step "runs") they are
  // held and go out together when the clock reaches the step's end.
  void send(const std::shared_ptr<net::Responder>& r, std::string bytes,
            std::function<void(Nanos)> on_written);
  void end_stream(const std::shared_ptr<net::Responder>& r);
  void respond(const std::shared_ptr<net::Responder>& r, net::HttpResponse response);
  void reset(const std::shared_ptr<net::Responder>& r);
  void task_done(const std::shared_ptr<ResponseTask>& task);

 private:
  struct Event {
    enum class Kind { kToken, kFinish, kReject } kind;
    std::uint64_t id;
    Nanos t;
    tokenizers::TokenId token = 0;
    engine::FinishedRequest finished;
    std::string reason;
  };
  struct Outgoing {
    enum class Op { kSend, kEnd, kRespond, kReset } op;
    std::shared_ptr<net::Responder> responder;
    std::string bytes;
    std::function<void(Nanos)> on_written;
    net::HttpResponse response;
  };
  void flush(std::vector<Outgoing>& out);
  void start(std::shared_ptr<ResponseTask> task);
  // Into the engine's queue now; arrival >= 0: when it arrived (a request
  // tail held it since).
  void admit(std::shared_ptr<ResponseTask> task, Nanos arrival = -1);
  void ensure_stepping(std::size_t replica);
  void step(std::size_t replica);
  void set_queue(std::size_t replica);
  // A disaggregated fleet: a timer at the next KV transfer's arrival, and the arrivals due.
  void arm_transfers();
  void deliver_transfers();
  void deliver(std::vector<Event>& events);
  void check_shutdown();
  void update_lora_metrics(std::size_t replica);

  Executor& executor_;
  std::unique_ptr<engine::Engine> engine_;  // one engine
  std::unique_ptr<engine::Fleet> fleet_;    // or a fleet
  std::vector<engine::Engine*> engines_;    // either's
  struct Replica {
    bool stepping = false;
    engine::EngineCounters last_counters;
  };
  std::vector<Replica> replicas_;
  Nanos transfer_timer_at_ = -1;  // the earliest KV-transfer timer set (-1: none)
  ServeMetrics& metrics_;
  EmissionTrace* trace_;
  CoreSettings settings_;
  std::string model_name_;
  std::atomic<bool> accepting_{true};
  std::atomic<std::uint64_t> response_serial_{1};
  bool direct_delivery_ = false;  // events outside a step (rejects in add_request) go out at once
  std::uint64_t next_engine_id_ = 1;
  std::uint64_t requests_received_ = 0;  // keys a request tail's draw
  std::vector<Event> pending_;
  bool deferring_ = false;
  std::vector<Outgoing> outbox_;
  std::unordered_map<std::uint64_t, std::pair<std::shared_ptr<ResponseTask>, std::uint32_t>> by_engine_id_;
  std::vector<std::shared_ptr<ResponseTask>> tasks_;
  std::function<void()> on_drained_;
  bool shutting_down_ = false;
};

}  // namespace tokenscope::serve
