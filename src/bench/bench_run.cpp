#include "bench/bench_run.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "analyze/coupling.h"
#include "analyze/hidden_queue.h"
#include "analyze/locality.h"
#include "bench/bench_workload.h"
#include "bench/live_metrics.h"
#include "bench/mock_tools.h"
#include "bench/prompt_text.h"
#include "bench/requests_csv.h"
#include "bench/run_observe.h"
#include "bench/runner.h"
#include "bench/schedule.h"
#include "bench/server_prompts.h"
#include "bench/server_sweep.h"
#include "bench/shard.h"
#include "bench/task_driver.h"
#include "bench/task_replay.h"
#include "bench/vllm_compat.h"
#include "core/cpu_set.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "core/process_usage.h"
#include "core/run_dir.h"
#include "core/text_reader.h"
#include "exporters/otlp.h"
#include "exporters/perfetto.h"
#include "net/http_fetch.h"
#include "observe/exposition.h"
#include "rundir/run_json.h"
#include "rundir/run_session.h"
#include "rundir/run_set.h"
#include "rundir/shard_info.h"
#include "serve/faults.h"
#include "serve/metrics.h"
#include "serve/server_app.h"

namespace tokenscope::bench {

namespace {

std::string utc_stamp(const char* format) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

// A Unix time in ns as UTC, to the millisecond (2026-12-05T12:00:00.000Z).
std::string utc_of_unix_ns(std::int64_t ns) {
  const std::time_t t = static_cast<std::time_t>(ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(ns / 1'000'000 % 1000));
}

std::string local_stamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// Transcriptions: the most audio a request may carry (as a workload file's).
constexpr std::uint32_t kMaxTranscriptionAudioMs = 120'000;

// Records pending for the writer at most (about 2 MB of non-streaming
// records; 40 ms of them at 100,000 requests/s): TOKENSCOPE_RECORD_QUEUE_LIMIT
// (a whole number from 1), or 4,096.
std::size_t record_queue_limit() {
  constexpr std::size_t kDefault = 4'096;
  const char* env = std::getenv("TOKENSCOPE_RECORD_QUEUE_LIMIT");
  if (!env || !*env) return kDefault;
  std::size_t v = 0;
  const std::string_view text(env);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 1 || v > 10'000'000)
    throw UsageError(
        fmt::format("TOKENSCOPE_RECORD_QUEUE_LIMIT={}: expected a whole number of records from 1 "
                    "to 10000000",
                    quote_input(text)));
  return v;
}

// Everything one run needs, built from the settings (and a rate override in sweeps).
struct Prepared {
  BenchWorkload bw;
  LoadPlan plan;
  std::map<std::string, Slo> slos;
  nlohmann::json effective_load;
  // The open-loop rate (+inf: all at t = 0; nullopt: a closed loop), and
  // whether it is the schedule's average (trace timestamps, stages).
  std::optional<double> rate_rps;
  bool rate_is_offered_average = false;
  std::uint64_t shard_share = 0;  // a shard's requests (open loop) or most users (closed loop)
};

// Long: the load plan in one place (workload, open or closed loop, stages,
// SLOs, effective load), each check with its message.
Prepared prepare(const BenchSettings& o, std::optional<double> rate) {
  Prepared p;
  workload::WorkloadSpec wo = o.workload;
  if (rate) wo.rate_rps = *rate;
  const bool closed = o.concurrency > 0 || !o.user_stages.empty();
  const std::vector<Stage>& stages = o.stages.stages;
  if (!stages.empty()) {
    if (closed) throw UsageError("--stages is for the open loop; use --user-stages with --concurrency");
    if (rate) throw UsageError("--stages and a sweep cannot be combined");
  }
  if (o.workload_file.empty()) {
    workload::BuiltWorkload built = workload::build_workload(wo);
    p.bw.workload = std::move(built.w);
    p.bw.effective = std::move(built.effective);
  } else {
    if (is_task_recording(o.workload_file)) {  // a recorded tasks.jsonl, replayed (bench/task_replay.h)
      if (rate)
        throw UsageError(
            fmt::format("{}: a replay keeps its recorded arrivals; --rate and sweeps do not apply "
                        "(--time-scale speeds it up)",
                        o.workload_file));
      p.bw = load_task_replay(o.workload_file, wo.time_scale);
    } else {
      p.bw = load_workload_file(o.workload_file, wo.seed, rate);
    }
    if (p.bw.tasks && (o.concurrency > 0 || !o.user_stages.empty()))
      throw UsageError(fmt::format(
          "{}: task classes arrive open loop (their arrival process); drop --concurrency and --users",
          o.workload_file));
    if (p.bw.tasks && !o.only_class.empty())
      throw UsageError(
          "--coupling runs classes of requests; a workload with task classes has no coupling run");
  }
  auto& w = p.bw.workload;
  if (!o.only_class.empty()) {  // --coupling: one class alone, at its own arrival times
    std::vector<workload::Request> kept;
    for (const auto& r : w.requests)
      if (r.task_class < w.classes.size() && w.classes[r.task_class] == o.only_class) kept.push_back(r);
    w.requests = std::move(kept);
    p.bw.turns.clear();
  }
  if (w.requests.empty() && !p.bw.tasks) throw UsageError("the workload has no requests");
  for (const auto& r : w.requests)
    if (r.input_tokens > o.max_prompt_tokens) {
      const std::string origin = workload::prompt_origin(w, r);
      throw UsageError(
          fmt::format("{}{}prompt of {} tokens is over --max-prompt-tokens {} (its text is built in "
                      "memory before it is sent; raise the option for a model with a longer context)",
                      origin, origin.empty() ? "request " + std::to_string(r.id) + ": " : ": ",
                      r.input_tokens, o.max_prompt_tokens));
    }
  p.plan.threads = o.client_threads;
  p.plan.cpus = o.client_cpus;
  p.plan.timeout_s = o.timeout_s;
  p.plan.max_events = o.max_events;
  if (!o.cancel.empty()) p.plan.cancel = parse_cancel_plan(o.cancel, derive_seed(wo.seed, "cancel"));
  if (!o.model_mix.empty())
    apply_model_mix(w, p.bw.turns, parse_model_mix(o.model_mix, "--model-mix"),
                    derive_seed(wo.seed, "models"));
  if (!w.models.empty() && !o.sampling.extra_body.empty() &&
      nlohmann::json::parse(o.sampling.extra_body, nullptr, false).contains("model"))
    throw UsageError(
        "--extra-body sets \"model\" and the workload is a model mix (--model-mix or a class's "
        "model): each request's model would be the extra body's, not the one recorded");
  p.plan.warmup_s = o.warmup_s;
  p.plan.turns = p.bw.turns;
  if (o.api == Api::kTranscriptions) {
    // Each request uploads audio: its class's, else drawn from --audio-duration-ms.
    if (!p.plan.turns.empty())
      throw UsageError(
          "--api transcriptions: multi-turn sessions are for chat (a transcription is one upload)");
    const std::string spec = o.audio_duration_ms.empty() ? kDefaultAudioDurationMs : o.audio_duration_ms;
    const auto dist = workload::parse_length_spec(spec, "--audio-duration-ms", workload::LengthRole::kInput);
    Rng rng(derive_seed(wo.seed, "audio"));
    for (auto& r : w.requests) {
      if (r.images > 0)
        throw UsageError(
            fmt::format("{}: --api transcriptions uploads audio only; the workload's class sends "
                        "images (use --api chat or responses)",
                        r.task_class < w.classes.size() ? "class " + w.classes[r.task_class]
                                                        : "request " + std::to_string(r.id)));
      if (r.audio_ms == 0) r.audio_ms = std::max<std::uint32_t>(1, dist.sample(rng));
      if (r.audio_ms > kMaxTranscriptionAudioMs)
        throw UsageError(
            fmt::format("--audio-duration-ms {}: draws {} ms, over the {} ms a request may carry", spec,
                        r.audio_ms, kMaxTranscriptionAudioMs));
    }
  }
  bool media = false;
  for (const auto& r : w.requests) media |= r.images > 0 || r.audio_ms > 0;
  if (media && !is_chat_like(o.api) && o.api != Api::kTranscriptions)
    throw UsageError(
        fmt::format("the workload sends images or audio: they go in chat messages (--api chat or "
                    "responses), not --api {}",
                    api_name(o.api)));
  if (is_pooling(o.api)) {
    if (!p.plan.turns.empty())
      throw UsageError(fmt::format("--api {}: multi-turn sessions are for generation (completions, chat)",
                                   api_name(o.api)));
    if (p.plan.cancel && p.plan.cancel->when == CancelPlan::When::kAfterTokens)
      throw UsageError(
          fmt::format("--cancel after-tokens: --api {} answers whole, with no tokens to count; "
                      "use before-first-token or after-ms",
                      api_name(o.api)));
  }
  if (closed) {
    p.plan.closed_loop = true;
    p.plan.user_stages = o.user_stages.empty()
                             ? std::vector<Stage>{{static_cast<double>(o.concurrency),
                                                   wo.num_requests > 0 ? 1e9 : wo.duration_s}}
                             : o.user_stages.stages;
    p.plan.max_requests = wo.num_requests;
    p.plan.think_ms = o.think_ms;
    p.plan.think_exponential = o.think_dist == ThinkDist::kExponential;
    p.plan.think_seed = derive_seed(wo.seed, "think");
  } else {
    std::vector<Nanos> times;
    if (!stages.empty()) {
      workload::ArrivalSettings a;
      a.kind = workload::parse_arrival_kind(wo.arrival.empty() ? "poisson" : wo.arrival);
      if (a.kind == workload::ArrivalKind::kTrace) throw UsageError("--stages needs a synthetic --arrival");
      a.burstiness = wo.burstiness;
      Rng rng(derive_seed(wo.seed, "stages"));
      times = stage_arrivals(stages, a, rng);
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
    std::stable_sort(p.plan.schedule.begin(), p.plan.schedule.end(),
                     [](const auto& a, const auto& b) { return a.second < b.second; });
    p.plan.max_concurrency = o.max_concurrency;
  }
  // A shard sends its share of the plan (bench/shard.h): the rest of this
  // function describes that share.
  if (o.shard.sharded()) {
    if (p.bw.tasks) {
      // Tasks stay whole on one shard: the k-th to arrive on shard k mod count (their ids and warm-up
      // marks are the whole run's).
      auto share = std::make_shared<TaskSet>(*p.bw.tasks);
      share->arrivals.clear();
      for (std::size_t k = 0; k < p.bw.tasks->arrivals.size(); ++k)
        if (k % o.shard.count == o.shard.index) share->arrivals.push_back(p.bw.tasks->arrivals[k]);
      p.bw.tasks = std::move(share);
    }
    if (o.target_url.empty())
      throw UsageError(
          "--shard: the shards share one server: give --target (the in-process simulator would be each "
          "process's own)");
    if (!o.start_at_unix_ns && !o.agree_start)
      throw UsageError(
          "--shard: give --start-at, the instant every shard starts its schedule (Unix seconds or UTC, the "
          "same "
          "for all shards; e.g. --start-at $(( $(date +%s) + 30 )))");
    p.shard_share = keep_share(p.plan, o.shard);
  }
  p.plan.max_connections = o.max_connections;
  p.plan.max_connecting = o.max_connecting;
  // SLOs: per class from the workload file; --slo for the rest.
  p.slos = p.bw.slos;
  for (const auto& [text, cls, slo] : o.slo) {
    if (!cls.empty()) {
      p.slos[cls] = slo;
    } else {
      for (const auto& c : w.classes)
        if (!p.slos.contains(c)) p.slos[c] = slo;
    }
  }
  // The rate the arrivals were drawn at: --rate (or the sweep's), the
  // workload file's, or none when a trace's own timestamps (or stages) set
  // the schedule; then the offered rate is what the schedule averages.
  const double last_s = p.plan.schedule.empty() ? 0.0 : nanos_to_s(p.plan.schedule.back().second);
  if (closed) {
    p.rate_rps.reset();
  } else if (!o.workload_file.empty()) {
    p.rate_rps = p.bw.effective.value("rate_rps", wo.rate_rps);
  } else if (!stages.empty() || p.bw.effective.value("arrival", "") == "trace") {
    p.rate_rps = last_s > 0 ? static_cast<double>(p.plan.schedule.size() - 1) / last_s
                            : std::numeric_limits<double>::infinity();
    p.rate_is_offered_average = true;
  } else {
    p.rate_rps = rate.value_or(wo.rate_rps);
  }
  auto rate_json = [](const std::optional<double>& r) {
    if (!r) return nlohmann::json(nullptr);
    return std::isfinite(*r) ? nlohmann::json(*r) : nlohmann::json("inf");
  };
  p.effective_load = {
      {"mode", closed ? "closed" : "open"},
      {"planned_requests", closed ? nlohmann::json(nullptr) : nlohmann::json(p.plan.schedule.size())},
      {"last_offset_s", last_s},
      {"rate_rps", rate_json(p.rate_rps)},
      {"rate_is_offered_average", p.rate_is_offered_average},
      {"max_concurrency", o.max_concurrency},
      {"client_threads", o.client_threads}};
  return p;
}

// The target's answer to GET /v1/models, asked once at the start: the
// model to send when --model is not given, and what the target says it
// serves (run.json settings.effective.target.models; the history's target
// version).
net::FetchResult fetch_model_list(const net::Endpoint& ep, const net::ClientOptions& copt,
                                  const std::string& api_key) {
  net::FetchRequest req;
  req.path = "/v1/models";
  // A model list is a few KB: a target that streams without end (or a
  // proxy's page) costs at most 1 MiB and 5 s here.
  req.timeout_s = 5;
  req.max_body_bytes = 1u << 20;
  if (!api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + api_key);
  return net::fetch(ep, copt, req);
}

// The model the server serves (the first id of its model list). A target
// that cannot be reached is a failed run (exit 1), not a bad option.
std::string discover_model(const net::Endpoint& ep, const net::FetchResult& r) {
  if (!r.error.empty())
    throw TargetError(
        fmt::format("--target {}: cannot ask which model it serves (GET /v1/models): {}", ep.url(), r.error));
  if (r.status != 200)
    throw TargetError(
        fmt::format("--target {}: GET /v1/models answered HTTP {}; give --model", ep.url(), r.status));
  if (json_too_deep_at(r.body) != std::string_view::npos)
    throw TargetError(
        fmt::format("--target {}: GET /v1/models answered JSON nested deeper than {} levels; "
                    "give --model",
                    ep.url(), kMaxJsonDepth));
  try {
    const auto j = nlohmann::json::parse(r.body);
    return j.at("data").at(0).at("id").get<std::string>();
  } catch (const std::exception&) {
    throw TargetError(
        fmt::format("--target {}: cannot read a model id from GET /v1/models; give --model", ep.url()));
  }
}

// What run.json records of the model list: {"available": true, "models":
// [{"id", "owned_by", and "version", "root", "max_model_len" when the
// server sends them}]} (at most 16 models), or {"available": false,
// "reason"}. Best effort: a target without the list only lacks the record.
nlohmann::json model_list_record(const net::FetchResult& r) {
  const auto unavailable = [](std::string reason) {
    return nlohmann::json{{"available", false}, {"reason", std::move(reason)}};
  };
  if (!r.error.empty()) return unavailable(r.error);
  if (r.status != 200) return unavailable(fmt::format("HTTP {}", r.status));
  if (json_too_deep_at(r.body) != std::string_view::npos)
    return unavailable(fmt::format("the answer is nested deeper than {} levels", kMaxJsonDepth));
  const auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array())
    return unavailable("the answer holds no \"data\" list");
  nlohmann::json models = nlohmann::json::array();
  for (const auto& m : j["data"]) {
    if (models.size() == 16) break;
    if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
    nlohmann::json e = {{"id", m["id"]}};
    for (const char* k : {"owned_by", "version", "root", "max_model_len"})
      if (m.contains(k) && (m[k].is_string() || m[k].is_number())) e[k] = m[k];
    models.push_back(std::move(e));
  }
  return {{"available", true}, {"models", models}};
}

}  // namespace

// What the target says about itself (run.json settings.effective.target.server_info).
nlohmann::json server_info_record(const net::FetchResult& props, const net::FetchResult& version,
                                  const net::FetchResult& sglang) {
  const auto body = [](const net::FetchResult& r) {
    if (!r.error.empty() || r.status != 200 || json_too_deep_at(r.body) != std::string_view::npos)
      return nlohmann::json(nlohmann::json::value_t::discarded);
    return nlohmann::json::parse(r.body, nullptr, false);
  };
  const auto text = [](const nlohmann::json& o, const char* k) {
    return o.contains(k) && o[k].is_string() ? o[k].get<std::string>().substr(0, 200) : std::string();
  };
  // llama.cpp's llama-server: GET /props (total_slots: its --parallel; build_info).
  if (const auto j = body(props);
      j.is_object() && j.contains("total_slots") && j["total_slots"].is_number_unsigned()) {
    nlohmann::json out = {{"available", true},
                          {"engine", "llama.cpp"},
                          {"route", "/props"},
                          {"max_batch", j["total_slots"]},
                          {"total_slots", j["total_slots"]}};
    if (const auto b = text(j, "build_info"); !b.empty()) out["version"] = b;
    if (const auto* n = rundir::json_path(j, {"default_generation_settings", "n_ctx"});
        n && n->is_number_unsigned())
      out["n_ctx"] = *n;
    return out;
  }
  // SGLang: GET /get_server_info (its version, max_running_requests: the batch cap).
  if (const auto j = body(sglang);
      j.is_object() && (j.contains("version") || j.contains("max_running_requests"))) {
    nlohmann::json out = {{"available", true}, {"engine", "sglang"}, {"route", "/get_server_info"}};
    if (const auto v = text(j, "version"); !v.empty()) out["version"] = v;
    if (j.contains("max_running_requests") && j["max_running_requests"].is_number_unsigned())
      out["max_batch"] = j["max_running_requests"];
    // Its KV pool in tokens (the scheduler's word), and its prefill chunk.
    if (j.contains("max_total_num_tokens") && j["max_total_num_tokens"].is_number_unsigned())
      out["kv_capacity_tokens"] = j["max_total_num_tokens"];
    if (j.contains("chunked_prefill_size") && j["chunked_prefill_size"].is_number_unsigned())
      out["chunked_prefill_size"] = j["chunked_prefill_size"];
    return out;
  }
  // vLLM: GET /version ({"version": "0.6.3"}).
  if (const auto j = body(version); j.is_object() && !text(j, "version").empty())
    return {{"available", true}, {"engine", "vllm"}, {"route", "/version"}, {"version", text(j, "version")}};
  std::string why;
  for (const auto& [route, r] :
       {std::pair{"/props", &props}, std::pair{"/get_server_info", &sglang}, std::pair{"/version", &version}})
    why += fmt::format("{}{}: {}", why.empty() ? "" : "; ", route,
                       !r->error.empty() ? r->error : fmt::format("HTTP {}", r->status));
  return {{"available", false}, {"reason", why}};
}

nlohmann::json metrics_info_record(const net::FetchResult& metrics) {
  if (!metrics.ok()) return nullptr;
  // At most 200 bytes, never half a UTF-8 character (run.json is strict UTF-8).
  const auto cut = [](const std::string& s) {
    std::size_t n = 0;
    while (n < s.size()) {
      const std::size_t len = utf8_sequence_length(s, n);
      if (len == 0 || n + len > 200) break;
      n += len;
    }
    return s.substr(0, n);
  };
  const auto e = observe::parse_exposition(metrics.body, observe::ExpositionFormat::kAuto, 100'000);
  nlohmann::json out = nlohmann::json::object();
  for (const auto& f : e.families) {
    if (out.size() == 8) break;
    if (f.samples.empty() || f.name.size() < 5 || f.name.compare(f.name.size() - 5, 5, "_info") != 0)
      continue;
    nlohmann::json labels = nlohmann::json::object();
    for (const auto& l : f.samples.front().labels) {
      if (labels.size() == 32) break;
      labels[cut(l.name)] = cut(l.value);
    }
    out[cut(f.name)] = std::move(labels);
  }
  return out.empty() ? nlohmann::json(nullptr) : out;
}

namespace {

// Asks the target's self-description routes (best effort: 2 s and 256 KiB each).
nlohmann::json fetch_server_info(const net::Endpoint& ep, const net::ClientOptions& copt,
                                 const std::string& api_key, bool metrics) {
  const auto get = [&](const char* path) {
    net::FetchRequest req;
    req.path = path;
    req.timeout_s = 2;
    req.max_body_bytes = 256u << 10;
    if (!api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + api_key);
    return net::fetch(ep, copt, req);
  };
  // The info series of /metrics (1 MiB at most), beside what the routes say;
  // a build_info's version where no route gave one.
  const auto with_metrics = [&](nlohmann::json info) {
    if (!metrics) return info;  // --no-scrape: not even one GET /metrics
    net::FetchRequest req;
    req.path = "/metrics";
    req.timeout_s = 2;
    req.max_body_bytes = 1u << 20;
    req.abandon_over_cap = true;
    if (!api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + api_key);
    const nlohmann::json m = metrics_info_record(net::fetch(ep, copt, req));
    if (m.is_null()) return info;
    info["metrics_info"] = m;
    if (!info.contains("version"))
      for (const auto& [name, labels] : m.items())
        if (name.size() > 11 && name.compare(name.size() - 11, 11, "_build_info") == 0 &&
            labels.contains("version") && labels["version"].is_string()) {
          info["version"] = labels["version"];
          info["version_from"] = name;
          break;
        }
    return info;
  };
  const auto props = get("/props");
  if (auto llama = server_info_record(props, {}, {}); llama.value("available", false))
    return with_metrics(std::move(llama));
  const auto sglang = get("/get_server_info");
  return with_metrics(server_info_record(props, get("/version"), sglang));
}

struct ServerSide {
  std::unique_ptr<serve::ServerApp> server;
  std::optional<engine::EffectiveEngine> eff;
};

// Asks the target's /tokenize (llama.cpp, vLLM, tokenscope serve) how long a
// sample of the prompts really is, as the server counts a request: a
// completions prompt with what the server adds (BOS), a chat prompt with its
// template when the server can count one (else its content alone); a JSON
// object for run.json.
nlohmann::json check_prompt_lengths(TokenizeClient& tokenize, const workload::Workload& w,
                                    const LoadPlan& plan, const PromptBuilder& prompts, bool chat,
                                    std::size_t sample) {
  nlohmann::json out = {{"endpoint", "/tokenize"}};
  std::int64_t planned = 0, counted = 0, max_diff = 0;
  std::size_t n = 0, exact = 0;
  std::vector<std::uint32_t> picks;
  if (!plan.schedule.empty()) {
    const std::size_t step = std::max<std::size_t>(1, plan.schedule.size() / sample);
    for (std::size_t i = 0; i < plan.schedule.size() && picks.size() < sample; i += step)
      picks.push_back(plan.schedule[i].first);
  } else {
    for (std::uint32_t i = 0; i < w.requests.size() && picks.size() < sample; ++i) picks.push_back(i);
  }
  bool whole_chat = chat;  // the chat prompt counted with its template
  for (const std::uint32_t i : picks) {
    const auto& req = w.requests[i];
    if (!plan.turns.empty() && plan.turns[i].turn > 0) continue;
    const std::string text = prompts.text(req);
    std::optional<std::int64_t> count;
    if (whole_chat) {
      count = tokenize.chat_count(text);
      if (!count) whole_chat = false;  // the server cannot: the content alone, for every sample
    }
    if (!count) count = tokenize.count(text, !chat);
    if (!count) {
      out["available"] = false;
      out["reason"] = tokenize.error();
      return out;
    }
    // Without the template the content is compared with the content planned.
    const std::int64_t p = prompts.planned_tokens(req) -
                           (chat && !whole_chat ? static_cast<std::int64_t>(prompts.specials()) : 0);
    planned += p;
    counted += *count;
    exact += *count == p;
    max_diff = std::max<std::int64_t>(max_diff, std::abs(*count - p));
    ++n;
  }
  out["available"] = true;
  out["sampled"] = n;
  out["what"] = !chat ? "the whole prompt, special tokens included"
                : whole_chat
                    ? "the whole chat prompt, template included (" + tokenize.chat_method() + ")"
                    : "the messages' content, without the chat template (the server cannot count it)";
  out["planned_tokens"] = planned;
  out["server_tokens"] = counted;
  out["ratio"] = planned > 0 ? static_cast<double>(counted) / static_cast<double>(planned) : 0.0;
  out["exact"] = exact;
  out["max_abs_diff"] = max_diff;
  return out;
}

// Takes the records the client threads finish, in batches: appends them to
// the run session (requests.jsonl, the run cache, the summary), writes
// requests.csv and hands them to what bench builds from them (the live
// metrics, the KV-cache locality fit, vLLM-compatible output). One thread
// at a time (bench's writer).
class RecordDrain {
 public:
  RecordDrain(const workload::Workload& w, bool closed_loop, rundir::RunSession& session, JsonlWriter* csv,
              LiveMetrics* live, VllmCompat* compat)
      : session_(session), csv_(csv), live_(live), compat_(compat) {
    // For the locality fit: which workload request each record is (closed
    // loops wrap around the workload with ids shifted by its size).
    for (std::uint32_t i = 0; i < w.requests.size(); ++i) index_of_id_.emplace(w.requests[i].id, i);
    if (closed_loop && !w.requests.empty()) id_modulus_ = w.requests.size();
  }

  void drain(RecordQueue& queue) {
    batch_.clear();
    queue.drain(batch_);
    std::size_t n = 0;
    for (const auto& r : batch_) {
      // The client threads come first, wherever they share a core with this
      // thread: a batch is milliseconds of work, and a scheduler that lets a
      // running thread finish its slice (Linux's EEVDF) would keep a woken
      // client thread waiting that long, whatever the priorities.
      if (++n % kYieldEvery == 0) std::this_thread::yield();
      session_.add_request(r);
      if (csv_) {
        append_csv_row(csv_->begin_line(), r);
        csv_->end_line();
      }
      if (r.outcome == Outcome::kOk && !r.warmup && r.turn == 0) {
        const auto idx = index_of_id_.find(r.id % id_modulus_);
        if (idx != index_of_id_.end()) locality.push_back({idx->second, r.t_send, r.cached_tokens});
      }
      if (r.t_send >= 0) {  // the hidden queue's client side
        sends.push_back(r.t_send);
        const Nanos end = r.t_close >= 0 ? r.t_close : r.t_last_token;
        if (end >= 0) closes.push_back(end);
      }
      if (first_error.empty() && r.outcome != Outcome::kOk)
        first_error = fmt::format("{}: {}", outcome_name(r.outcome), r.detail);
      if (compat_) compat_->add(r, r.prompt_tokens_planned);
    }
    if (live_) live_->add(batch_);
    if (!batch_.empty()) {
      session_.flush_requests();
      if (csv_) csv_->flush();
    }
  }

  std::vector<analyze::LocalityRequest> locality;
  std::vector<Nanos> sends, closes;  // of every request sent (the hidden queue)
  std::string first_error;           // "outcome: detail" of the first failed request written

 private:
  rundir::RunSession& session_;
  JsonlWriter* csv_;
  LiveMetrics* live_;
  VllmCompat* compat_;
  std::unordered_map<std::uint64_t, std::uint32_t> index_of_id_;
  std::uint64_t id_modulus_ = std::numeric_limits<std::uint64_t>::max();
  std::vector<RequestRecord> batch_;
  static constexpr std::size_t kYieldEvery = 32;  // records, about 50 us of work
};

// What ends a run early: the first Ctrl-C (no new requests, --grace-s for
// those in flight), the second (cancel them now), a writer that failed (a
// full disk: stop at once, keep what is written).
struct RunStops {
  const std::atomic<bool>& interrupted;
  const std::atomic<bool>* hurry;
  const std::atomic<bool>& writer_failed;
};
// The progress line: on or off, redrawn on a terminal or a line every 10 s.
struct ProgressLine {
  bool on = false;
  bool tty = false;
  double planned_s = 0.0;  // for the ETA
};

// Waits for the runner to finish its load, acting on the stops and drawing
// the progress line; returns whether the run was cut short.
bool wait_for_run(Runner& runner, TaskDriver* tasks, const BenchSettings& o, const RunStops& stops,
                  const ProgressLine& show, std::ostream& log) {
  bool was_interrupted = false;
  const std::atomic<bool>* hurry = stops.hurry;
  Nanos grace_end = 0;
  SteadyClock clock;
  Nanos last_progress = 0;
  for (;;) {
    // Each waits its turn: a runner with nothing left returns at once, and the loop must not spin on it.
    const bool requests_done = runner.wait_for(tasks ? 50 : 100);
    const bool finished = requests_done && (!tasks || tasks->wait_for(50));
    const Nanos t = clock.now_ns();
    if (stops.writer_failed.load() &&
        !was_interrupted) {  // e.g. a full disk: stop at once, keep what is written
      was_interrupted = true;
      runner.stop_sending();
      runner.cancel_in_flight();
      if (tasks) {
        tasks->stop_sending();
        tasks->cancel_in_flight();
      }
    }
    if (stops.interrupted.load() && !was_interrupted) {
      was_interrupted = true;
      runner.stop_sending();
      if (tasks) tasks->stop_sending();
      grace_end = t + seconds_to_nanos(o.grace_s);
      log << fmt::format(
                 "\ntokenscope bench: interrupted: no new requests; waiting up to {} s for {} in flight "
                 "(interrupt again to stop them now)",
                 o.grace_s, runner.counters().in_flight.load())
          << std::endl;
    }
    if (hurry && hurry->load() && grace_end > 0) {
      log << "tokenscope bench: interrupted again: cancelling what is in flight" << std::endl;
      grace_end = t;
    }
    if (was_interrupted && grace_end > 0 && t >= grace_end) {
      runner.cancel_in_flight();
      if (tasks) tasks->cancel_in_flight();
      grace_end = 0;
    }
    if (finished) break;
    const Nanos every = show.tty ? kNanosPerSecond / 2 : 10 * kNanosPerSecond;
    if (show.on && t - last_progress >= every) {
      last_progress = t;
      const auto& c = runner.counters();
      const double elapsed = std::max(0.0, nanos_to_s(t - runner.epoch()));
      std::string line =
          fmt::format("[{:6.1f}s] sent {}, done {}, in flight {}, errors {}{}, {:.1f} req/s, ETA {:.0f} s",
                      elapsed, c.sent.load(), c.completed.load() + c.failed.load(), c.in_flight.load(),
                      c.failed.load(), c.queued.load() > 0 ? fmt::format(", queued {}", c.queued.load()) : "",
                      elapsed > 0 ? static_cast<double>(c.completed.load() + c.failed.load()) / elapsed : 0.0,
                      std::max(0.0, show.planned_s - elapsed));
      if (tasks) {
        const auto& tc = tasks->counters();
        line += fmt::format("; tasks done {}, failed {}, running {}", tc.finished.load(), tc.failed.load(),
                            tc.in_flight.load());
      }
      if (show.tty)
        log << "\r" << line << "\x1b[K" << std::flush;
      else
        log << line << "\n";
    }
  }
  return was_interrupted;
}

// The target of one run: a remote server, or the simulator started
// in-process on a loopback port; how requests are made to it.
struct Target {
  ServerSide side;
  net::Endpoint endpoint;
  nlohmann::json models;  // the target's GET /v1/models, as recorded
  nlohmann::json server_info = {{"available", false}, {"reason", "the in-process simulator"}};
  net::ClientOptions copt;
  RequestSettings rs;
};

Target open_target(const BenchSettings& o, const workload::Workload& w) {
  Target t;
  ServerSide& side = t.side;
  net::Endpoint& endpoint = t.endpoint;
  nlohmann::json& models = t.models;
  net::ClientOptions& copt = t.copt;
  RequestSettings& rs = t.rs;
  copt.verify_tls = !o.insecure;
  copt.ca_file = o.ca_file;
  rs.api = o.api;
  rs.stream = o.stream && !is_pooling(o.api);
  rs.inputs_per_request = o.inputs_per_request > 0 ? o.inputs_per_request : o.api == Api::kRerank ? 8 : 1;
  rs.query_tokens = o.query_tokens;
  rs.response_format = o.response_format;
  rs.language = o.language;
  rs.ignore_eos = o.ignore_eos;
  rs.api_key = o.api_key;
  rs.sampling = o.sampling;
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
  if (!o.target_url.empty() && !o.engine.profile_file.empty())
    throw UsageError(
        "--profile prices the built-in server's steps; with --target the server is real (leave one out)");
  if (o.target_url.empty()) {
    engine::EngineSettings s2 = engine::engine_settings(o.engine, o.workload.seed);
    if (!o.model.empty()) s2.model = o.model;
    const auto catalog = engine::load_catalog(o.engine);
    s2.num_tenants = static_cast<std::uint32_t>(w.tenants.size());
    serve::apply(o.server, s2);
    side.eff = engine::resolve_engine(s2, catalog);
    serve::ServerAppSettings ss;
    serve::apply(o.server, ss);
    ss.fleet = engine::resolve_fleet(o.fleet, s2, *side.eff, catalog, derive_seed(o.workload.seed, "router"));
    ss.core.fleet_history = true;  // run.json "fleet" has the KV transfers
    ss.api_key = o.api_key;
    ss.core.natural_length.reset();  // ignore_eos decides; without it the model runs to max_tokens
    // The simulated logprobs (bench --logprobs): drawn per token from the
    // workload's seed, so that runs with other seeds draw others.
    ss.core.seed = derive_seed(o.workload.seed, "server");
    ss.limits.max_connections = 100000;
    // Bodies with images and audio: the largest a workload file allows (8
    // images of 4,096 px, 120 s of audio) is about 33 MB.
    ss.limits.max_body_bytes = std::max<std::size_t>(ss.limits.max_body_bytes, 64u << 20);
    side.server =
        std::make_unique<serve::ServerApp>(*side.eff, s2, engine::make_cost_model(s2, *side.eff), ss);
    side.server->start();
    endpoint = net::Endpoint::parse_url(fmt::format("http://127.0.0.1:{}", side.server->port()));
    rs.model = side.eff->model.name;
    models = model_list_record(fetch_model_list(endpoint, copt, o.api_key));
  } else {
    const serve::SimServerOptions defaults;
    if (!o.server.faults.text.empty() || !o.server.trace_emissions.empty() || o.server.logprob_shift != 0 ||
        o.server.reasoning_share != 0 || o.server.tool_call_prob != defaults.tool_call_prob ||
        o.server.tool_rounds != defaults.tool_rounds ||
        o.server.parallel_tool_calls != defaults.parallel_tool_calls ||
        o.server.cite_prob != defaults.cite_prob)
      throw UsageError(
          "--faults, --trace-emissions, --logprob-shift, --reasoning-share and the --tool-* options apply to "
          "the in-process server (no --target)");
    if (!o.engine.perturb.text.empty())
      throw UsageError(
          "--perturb applies to the in-process server (no --target); give it to `tokenscope serve --perturb` "
          "and read the ground truth from its GET /perturbations");
    if (o.fleet.fleet())
      throw UsageError(
          "--replicas, --pools and --prefill-replicas make the in-process server a fleet (no --target); "
          "give them to `tokenscope serve` to put a fleet behind a URL");
    endpoint = net::Endpoint::parse_url(o.target_url);
    const net::FetchResult model_list = fetch_model_list(endpoint, copt, o.api_key);
    rs.model = !o.model.empty() ? o.model : discover_model(endpoint, model_list);
    models = model_list_record(model_list);
    t.server_info = fetch_server_info(endpoint, copt, o.api_key, !o.no_scrape);
  }
  return t;
}

// run.json's "requested" settings: the options as given.
// The values of a server sweep's point as an object (null outside a sweep).
nlohmann::json server_point_json(const std::vector<std::pair<std::string, std::string>>& point) {
  if (point.empty()) return nullptr;
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : point) out[name] = value;
  return out;
}

nlohmann::json requested_settings(const BenchSettings& o) {
  nlohmann::json sampling = {
      {"temperature",
       o.sampling.temperature ? nlohmann::json(*o.sampling.temperature) : nlohmann::json(nullptr)},
      {"top_p", o.sampling.top_p ? nlohmann::json(*o.sampling.top_p) : nlohmann::json(nullptr)},
      {"top_k", o.sampling.top_k ? nlohmann::json(*o.sampling.top_k) : nlohmann::json(nullptr)},
      {"seed", o.sampling.seed ? nlohmann::json(*o.sampling.seed) : nlohmann::json(nullptr)},
      {"logprobs", o.sampling.logprobs ? nlohmann::json(*o.sampling.logprobs) : nlohmann::json(nullptr)},
      {"extra_body", o.sampling.extra_body.empty() ? nlohmann::json(nullptr)
                                                   : nlohmann::json::parse(o.sampling.extra_body)}};
  std::vector<std::string> slo_texts;
  for (const auto& spec : o.slo) slo_texts.push_back(spec.text);
  nlohmann::json requested = {
      {"workload", workload::to_json(o.workload)},
      {"workload_file", o.workload_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.workload_file)},
      {"target",
       {{"url", o.target_url.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.target_url)},
        {"api", api_name(o.api)},
        {"inputs_per_request",
         is_pooling(o.api) ? nlohmann::json(o.inputs_per_request) : nlohmann::json(nullptr)},
        {"query_tokens", o.api == Api::kRerank ? nlohmann::json(o.query_tokens) : nlohmann::json(nullptr)},
        {"transcription",
         o.api == Api::kTranscriptions
             ? nlohmann::json{{"audio_duration_ms", o.audio_duration_ms.empty()
                                                        ? nlohmann::json(nullptr)
                                                        : nlohmann::json(o.audio_duration_ms)},
                              {"response_format", o.response_format},
                              {"language",
                               o.language.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.language)}}
             : nlohmann::json(nullptr)},
        {"server_command", o.server_cmd.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.server_cmd)},
        {"server_settings", server_point_json(o.server_point)},
        {"endpoint", o.endpoint},
        {"model", o.model.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.model)},
        {"stream", o.stream},
        {"ignore_eos", o.ignore_eos},
        {"sampling", sampling},
        {"tokenizer", o.tokenizer_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.tokenizer_file)},
        {"timeout_s", o.timeout_s},
        {"max_events", o.max_events},
        {"max_prompt_tokens", o.max_prompt_tokens},
        {"cancel", o.cancel.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.cancel)},
        {"insecure", o.insecure},
        {"headers", o.headers.size()}}},
      {"load",
       {{"stages", o.stages.text},
        {"max_concurrency", o.max_concurrency},
        {"max_connections", o.max_connections},
        {"max_connecting", o.max_connecting},
        {"concurrency", o.concurrency},
        {"user_stages", o.user_stages.text},
        {"think_ms", o.think_ms},
        {"think_dist", think_dist_name(o.think_dist)},
        {"warmup_s", o.warmup_s},
        {"client_threads", o.client_threads},
        {"slo", slo_texts},
        {"max_error_rate", o.max_error_rate}}},
  };
  if (o.target_url.empty())
    requested["server"] = {{"engine", engine::to_json(o.engine)},
                           {"threads", o.server.threads},
                           {"faults", o.server.faults.text},
                           {"fault_seed", o.server.fault_seed},
                           {"logprob_shift", o.server.logprob_shift}};
  // Only when set: the settings (and their hash) of runs without it stay as they were.
  if (o.target_url.empty() && o.server.reasoning_share > 0)
    requested["server"]["reasoning"] = {{"share", o.server.reasoning_share},
                                        {"field", o.server.reasoning_field}};
  const serve::SimServerOptions defaults;
  if (o.target_url.empty() &&
      (o.server.tool_call_prob != defaults.tool_call_prob || o.server.tool_rounds != defaults.tool_rounds ||
       o.server.parallel_tool_calls != defaults.parallel_tool_calls ||
       o.server.cite_prob != defaults.cite_prob))
    requested["server"]["tools"] = {{"call_prob", o.server.tool_call_prob},
                                    {"rounds", o.server.tool_rounds},
                                    {"parallel", o.server.parallel_tool_calls},
                                    {"cite_prob", o.server.cite_prob}};
  if (!o.model_mix.empty()) requested["model_mix"] = o.model_mix;
  if (o.target_url.empty() && o.fleet.fleet()) requested["server"]["fleet"] = engine::requested_json(o.fleet);
  if (o.target_url.empty() && !o.server.lora_modules.empty())
    requested["server"]["lora_modules"] = o.server.lora_modules;
  return requested;
}

// The machine the client ran on, as `check` compares two runs' environments
// (docs/check.md "Environment"): its name, CPUs, kernel and clock source.
nlohmann::json host_identity() {
  nlohmann::json h;
  char name[256] = {};
  h["hostname"] = ::gethostname(name, sizeof(name) - 1) == 0 ? nlohmann::json(std::string(name))
                                                             : nlohmann::json(nullptr);
  h["cpus"] = std::thread::hardware_concurrency();
  struct utsname u {};
  h["kernel"] = ::uname(&u) == 0 ? nlohmann::json(std::string(u.release)) : nlohmann::json(nullptr);
  std::ifstream cs("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string source;
  h["clocksource"] =
      cs && std::getline(cs, source) && !source.empty() ? nlohmann::json(source) : nlohmann::json(nullptr);
  return h;
}

// The wall-clock anchor: the monotonic clock of every t_* and t_ns read at
// (about) the same instant as the Unix clock, to export them as UTC.
nlohmann::json clock_anchor() {
  const Nanos mono0 = SteadyClock().now_ns();
  const auto unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  const Nanos mono1 = SteadyClock().now_ns();
  return {{"monotonic_ns", mono0 + (mono1 - mono0) / 2},
          {"unix_ns", unix_ns},
          {"uncertainty_ns", mono1 - mono0},
          {"definition", "unix_ns = monotonic_ns + (unix_ns - monotonic_ns) for every t_* and t_ns"}};
}

// The in-process server's ground truth in run.json: the faults it injected
// and the perturbations it applied (docs/engine.md); a remote target's
// perturbations are its GET /perturbations (null here).
void add_in_process_truth(nlohmann::json& run, const ServerSide& side) {
  if (!side.server) {
    run["perturbations"] = nullptr;
    return;
  }
  nlohmann::json faults = nlohmann::json::object();
  for (const char* k : serve::kFaultNames)
    faults[k] = side.server->metrics().value("tokenscope:faults_injected_total", k);
  if (run["server"].is_null()) run["server"] = nlohmann::json::object();
  run["server"]["faults_injected"] = faults;
  const nlohmann::json p = side.server->perturbations();
  run["perturbations"] = p["perturbations"];
  if (!p["perturbation_seed"].is_null()) run["perturbation_seed"] = p["perturbation_seed"];
}

// run.json "fleet" of a fleet behind the in-process server (null otherwise):
// its shape, its router, each replica's series, the KV transfers.
nlohmann::json in_process_fleet(const BenchSettings& o, const ServerSide& side) {
  if (!side.server || side.server->fleet() == nullptr) return nullptr;
  nlohmann::json f = side.server->fleet_json();
  f["disaggregation"] = side.server->fleet()->disaggregation()
                            ? engine::disaggregation_json(*side.server->fleet(), o.fleet)
                            : nlohmann::json(nullptr);
  return f;
}

// --compat vllm: vllm_result.json with vLLM's benchmark keys and definitions.
void write_vllm_result(const BenchSettings& o, const Prepared& p, const RequestSettings& rs,
                       const nlohmann::json& s, const VllmCompat& compat, const std::string& out_dir) {
  VllmCompatInfo info;
  info.backend = rs.api == Api::kChat ? "openai-chat" : "vllm";
  info.model_id = rs.model;
  info.tokenizer_id = o.tokenizer_file.empty() ? rs.model : o.tokenizer_file;
  if (p.rate_rps && std::isfinite(*p.rate_rps)) info.request_rate = *p.rate_rps;
  info.burstiness = o.workload.burstiness;
  if (o.max_concurrency > 0) info.max_concurrency = o.max_concurrency;
  if (o.concurrency > 0) info.max_concurrency = o.concurrency;
  info.duration_s = s["duration_s"].get<double>();
  if (p.slos.size() == 1) info.goodput_slo = p.slos.begin()->second;
  info.date = local_stamp();
  write_file_atomic(std::filesystem::path(out_dir) / "vllm_result.json", compat.build(info).dump(1));
}

void export_run(const BenchSettings& o, rundir::FinishedRun& r);

// --client-cpus for the length of a run: the client threads pin themselves
// (Runner), and this thread, with every thread it starts from here on (the
// in-process simulator, the samplers, the record writer), keeps to the
// CPUs it may use but theirs. Where the list leaves none, they share the
// client threads' CPUs, as without the option. Restored at the end, for the
// next run of a sweep.
class ClientCpuSplit {
 public:
  ClientCpuSplit(const std::vector<int>& client, std::ostream& log) {
    if (client.empty()) return;
    check_cpus_allowed(client, "--client-cpus");  // checked when parsed too; a library caller may not have
    before_ = thread_cpus();
    if (before_.empty()) {
      log << "note: --client-cpus: the kernel does not say which CPUs this process may use; only the client "
             "threads are pinned\n";
      return;
    }
    std::vector<int> rest;
    for (const int c : before_)
      if (!std::binary_search(client.begin(), client.end(), c)) rest.push_back(c);
    if (rest.empty()) {
      log << fmt::format(
          "note: --client-cpus {} leaves no other CPU to this process ({}): the record writer and the "
          "samplers share the client threads' CPUs\n",
          format_cpu_list(client), format_cpu_list(before_));
      return;
    }
    if (set_thread_cpus(rest)) restore_ = true;
  }
  // Whether this thread, and the threads it starts from now on (the record
  // writer, the samplers), run on CPUs no client thread runs on.
  bool apart() const { return restore_; }
  ~ClientCpuSplit() {
    if (restore_) set_thread_cpus(before_);
  }
  ClientCpuSplit(const ClientCpuSplit&) = delete;
  ClientCpuSplit& operator=(const ClientCpuSplit&) = delete;

 private:
  std::vector<int> before_;
  bool restore_ = false;
};

// Long: one run in the order it happens (plan, target, directory, run.json
// at the start, load, final reads, results, run.json at the end, exports);
// its pieces are the functions above (open_target, requested_settings,
// RecordDrain, wait_for_run, error_rate_failure, add_in_process_truth,
// write_vllm_result).
RunReport run_one(const BenchSettings& o, std::optional<double> rate, const std::string& out_dir,
                  const tokenizers::TextTokenizer* tokenizer, const std::atomic<bool>& interrupted,
                  const std::atomic<bool>* hurry, std::ostream& log, LiveMetrics* live,
                  const RunListenerFactory& listeners) {
  const double cpu_start = process_cpu_seconds();
  const std::size_t queue_limit = record_queue_limit();
  const ClientCpuSplit cpu_split(o.client_cpus, log);
  Prepared p = prepare(o, rate);
  const auto& w = p.bw.workload;

  // The target: a remote server, or the simulator in-process.
  Target target = open_target(o, w);
  const ServerSide& side = target.side;
  const net::Endpoint& endpoint = target.endpoint;
  const nlohmann::json& models = target.models;
  const net::ClientOptions& copt = target.copt;
  const RequestSettings& rs = target.rs;

  // The run's one path (rundir/run_session.h). Records are written in
  // batches (one write per drain, every 50 ms), so that the writing thread
  // takes little time from the client threads. The run cache (when asked
  // for) sees every line as it is written.
  rundir::RunSession session(
      {.dir = out_dir, .requests_line_durable = false, .cache = listeners ? listeners() : nullptr});
  session.open_requests();  // now: before the client's connections take the descriptors
  std::unique_ptr<JsonlWriter> csv;
  if (o.csv) {
    csv = std::make_unique<JsonlWriter>(std::filesystem::path(out_dir) / "requests.csv", false);
    csv->append_line(kRequestsCsvHeader);
  }
  SummaryBuilder& summary = session.summary();
  summary.set_slos(p.slos);
  summary.set_slo_from_schedule(!p.plan.closed_loop);
  VllmCompat compat;

  // The target's vocabulary and added tokens, from its /tokenize (the
  // in-process server's too: its chat template adds tokens).
  const bool chat = is_chat_like(rs.api);
  TokenizeClient tokenize(endpoint, copt, o.api_key, rs.model);
  std::optional<ServerPromptFacts> server_prompts;
  if (o.exact_prompts && (!tokenizer || chat) && rs.api != Api::kTranscriptions) {
    // Once per remote target in a sweep (the in-process server is new each run, and quick to ask).
    static std::mutex learned_mutex;
    static std::map<std::string, ServerPromptFacts> learned;
    const std::string key = fmt::format("{}\n{}\n{}{}", endpoint.url(), rs.model, tokenizer == nullptr, chat);
    std::lock_guard lock(learned_mutex);
    if (auto it = learned.find(key); it != learned.end() && !side.server) {
      server_prompts = it->second;
    } else {
      server_prompts = learn_server_prompts(tokenize, tokenizer == nullptr, chat);
      if (!side.server) learned[key] = *server_prompts;
    }
  }
  // The tokens a server adds to each prompt (a BOS) are counted for
  // completions and embeddings; chat's come from its template; a rerank
  // pair's from the model's format (not planned).
  PromptBuilder prompts(w, tokenizer, rs.api == Api::kCompletions || rs.api == Api::kEmbeddings,
                        server_prompts ? &*server_prompts : nullptr);
  // Images and audio count their tokens as the served model does: the
  // in-process engine's model, or the catalog's entry of the target's model.
  std::optional<engine::ModelSpec> media_model;
  if (side.eff) {
    media_model = side.eff->model;
  } else {
    try {
      media_model = engine::load_catalog(o.engine).model(rs.model);
    } catch (const UsageError&) {  // not in the catalog: media requests are not planned
    }
  }
  if (media_model) prompts.set_media_model(&*media_model);
  if (side.eff) {  // the in-process model must take what the workload sends
    bool images = false, audio = false;
    for (const auto& r : w.requests)
      if ((r.images > 0 && !images) || (r.audio_ms > 0 && !audio)) {
        engine::EngineRequest probe;
        engine::append_media(side.eff->model, r, 0, probe);
        images |= r.images > 0;
        audio |= r.audio_ms > 0;
      }
  }
  // The server's own count of a sample of prompts, before the load starts.
  nlohmann::json prompt_check =
      rs.api == Api::kRerank
          ? nlohmann::json{{"available", false},
                           {"reason", "rerank: a pair's tokens depend on the model's format"}}
      : rs.api == Api::kTranscriptions
          ? nlohmann::json{{"available", false}, {"reason", "transcriptions: the prompt is the audio"}}
      : o.prompt_check_sample > 0
          ? check_prompt_lengths(tokenize, w, p.plan, prompts, chat, o.prompt_check_sample)
          : nlohmann::json{{"available", false}, {"reason", "not asked (--prompt-check 0)"}};

  nlohmann::json effective = {{"workload", p.bw.effective},
                              {"load", p.effective_load},
                              {"target",
                               {{"url", endpoint.url()},
                                {"model", rs.model},
                                {"in_process", side.server != nullptr},
                                {"models", models},
                                {"server_info", target.server_info}}}};
  if (is_pooling(rs.api)) {  // the batch each request carries, defaulted or given
    effective["target"]["inputs_per_request"] = rs.inputs_per_request;
    if (rs.api == Api::kRerank) effective["target"]["query_tokens"] = rs.query_tokens;
  }
  if (rs.api == Api::kTranscriptions)
    effective["target"]["transcription"] = {
        {"audio_duration_ms", o.audio_duration_ms.empty() ? kDefaultAudioDurationMs : o.audio_duration_ms},
        {"response_format", rs.response_format},
        {"language", rs.language.empty() ? nlohmann::json(nullptr) : nlohmann::json(rs.language)}};
  if (side.eff) effective["engine"] = side.eff->to_json();
  effective["host"] = host_identity();
  effective["prompts"] = {
      {"method", prompts.describe()},
      {"tokenizer", tokenizer ? nlohmann::json(tokenizer->description()) : nlohmann::json(nullptr)},
      {"words_replaced", prompts.words_replaced()},
      {"special_tokens_counted", prompts.specials()},
      {"server", server_prompts
                     ? server_prompts->to_json()
                     : nlohmann::json{{"available", false},
                                      {"reason", !o.exact_prompts ? "not asked (--exact-prompts off)"
                                                                  : "--tokenizer given"}}},
      {"server_check", prompt_check}};
  // Under --mpi the ranks agree on the start now, every plan built.
  const std::optional<std::int64_t> start_at =
      o.shard.sharded() && o.agree_start ? std::optional<std::int64_t>(o.agree_start()) : o.start_at_unix_ns;
  const std::int64_t start_shift = o.clock_offset ? o.clock_offset->offset_ns : 0;
  // Written now, partial and without a summary, so that the settings and
  // seeds survive whatever ends the run (SIGKILL, a full disk); rewritten
  // with the results at the end.
  const nlohmann::json anchor = clock_anchor();
  std::optional<rundir::ShardInfo> shard;
  if (o.shard.sharded()) {
    shard.emplace();
    shard->index = o.shard.index;
    shard->count = o.shard.count;
    shard->source = o.shard.source;
    shard->start_at_unix_ns = *start_at;
    shard->clock_offset = o.clock_offset;
    // The agreed start on this host's monotonic clock (under --mpi the start
    // is on rank 0's clock: moved by the offset measured to it).
    shard->epoch_monotonic_ns = epoch_of_start(*start_at, start_shift, anchor["monotonic_ns"].get<Nanos>(),
                                               anchor["unix_ns"].get<std::int64_t>());
    p.plan.epoch_at = shard->epoch_monotonic_ns;
    if (p.plan.closed_loop)
      shard->users = p.shard_share;
    else
      shard->planned_requests = p.shard_share;
    shard->clock_sync = read_clock_sync();
    shard->slos = p.slos;
    shard->slo_from_schedule = !p.plan.closed_loop;
  }
  nlohmann::json run = rundir::run_json_head({.command = "bench",
                                              .clock = anchor,
                                              .tags = o.tags,
                                              .requested = requested_settings(o),
                                              .effective = std::move(effective)});
  if (shard) run["shard"] = rundir::to_json(*shard);
  session.start(run);

  RecordQueue queue;
  // Bounded: a client thread that outruns the writer (a saturated closed
  // loop on the core they share) waits for it rather than holding every
  // record in memory (client.records_waited_for_writer counts the waits).
  queue.set_limit(queue_limit);
  // Where the client threads have CPUs to themselves, their request bodies
  // are written on the others (a thread per client thread, started here).
  p.plan.bodies_apart = cpu_split.apart() && !p.plan.closed_loop;
  Runner runner(w, p.plan, endpoint, copt, rs, queue, &prompts);
  // Agentic tasks (bench/task_driver.h): beside the requests, on the same
  // epoch, their model calls into the same records, their own to tasks.jsonl.
  TaskRecordQueue task_queue;  // before the driver: it outlives the driver's thread
  std::unique_ptr<MockToolServer> mock_tools;
  std::unique_ptr<TaskDriver> task_driver;
  std::unique_ptr<JsonlWriter> tasks_out;
  std::optional<TaskSummary> task_summary;
  if (p.bw.tasks) {
    mock_tools = std::make_unique<MockToolServer>(p.bw.tasks->catalog, derive_seed(o.workload.seed, "tools"));
    TaskDriverSettings ts;
    ts.request = rs;
    ts.request.api = Api::kChat;
    ts.request.path.clear();  // --endpoint names the requests' path; tasks speak chat
    ts.target = endpoint;
    ts.client = copt;
    ts.tools = net::Endpoint::parse_url(fmt::format("http://127.0.0.1:{}", mock_tools->port()));
    ts.seed = derive_seed(o.workload.seed, "tasks");
    // A shard's model calls get ids of their own (2^32 per shard): the merged records stay unique.
    ts.first_request_id = kTaskRequestIdBase + (o.shard.sharded() ? std::uint64_t{o.shard.index} << 32 : 0);
    ts.warmup_s = o.warmup_s;
    ts.max_events = o.max_events;
    // A replay sizes its prompts without the chat template's tokens: learned from the target's /tokenize.
    if (!p.bw.tasks->arrivals.empty() && p.bw.tasks->arrivals.front().spec && o.exact_prompts) {
      if (server_prompts && server_prompts->chat_added >= 0) {
        ts.chat_added = server_prompts->chat_added;
      } else {
        const auto facts = learn_server_prompts(tokenize, false, true);
        ts.chat_added = facts.chat_added;
        if (facts.chat_added < 0)
          log << "warning: replayed prompts keep the chat template's tokens in their counts: "
              << facts.chat_note << "\n";
      }
    }
    if (!o.judge_target.empty()) {
      ts.judge = net::Endpoint::parse_url(o.judge_target);
      ts.judge_model = o.judge_model;
      ts.judge_api_key = o.judge_api_key;
      if (!o.judge_extra_body.empty()) ts.judge_extra_body = nlohmann::json::parse(o.judge_extra_body);
    }
    task_driver = std::make_unique<TaskDriver>(*p.bw.tasks, w, ts, queue, task_queue);
    tasks_out = std::make_unique<JsonlWriter>(std::filesystem::path(out_dir) / "tasks.jsonl", false);
    task_summary.emplace(*p.bw.tasks, w.classes);
  }
  // Whatever ends this function, the queue is closed before the driver and
  // the runner go (destroyed after this guard): their cancelled requests'
  // records never wait for a writer that an exception left unstarted.
  struct CloseQueue {
    RecordQueue& queue;
    ~CloseQueue() { queue.close(); }
  } const close_queue{queue};
  const bool tty = o.progress == Progress::kAuto ? isatty(STDERR_FILENO) != 0 : o.progress == Progress::kTty;
  const bool progress = !o.quiet && o.progress != Progress::kNone;
  const double planned_s = p.plan.closed_loop
                               ? total_duration_s(p.plan.user_stages)
                               : (p.plan.schedule.empty() ? 0.0 : nanos_to_s(p.plan.schedule.back().second));
  // Every layer on the client's clock: the baseline reads happen now,
  // right before the first request.
  static const SteadyClock observe_clock;
  // The collectors write samples.jsonl themselves (line by line durable);
  // the session hands each line to the run cache.
  if (shard) {
    // Until two seconds before the agreed start (the pool's connections
    // then open and wait for it), Ctrl-C still stops the run.
    const Nanos until = shard->epoch_monotonic_ns - 2 * kNanosPerSecond;
    if (!o.quiet && observe_clock.now_ns() < until)
      log << fmt::format("bench: shard {} of {}: starting at {} ({:.1f} s from now)\n", shard->index,
                         shard->count, utc_of_unix_ns(shard->start_at_unix_ns),
                         nanos_to_s(shard->epoch_monotonic_ns - observe_clock.now_ns()));
    while (observe_clock.now_ns() < until && !interrupted.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(
          std::clamp<Nanos>((until - observe_clock.now_ns()) / kNanosPerMilli, 1, 50)));
    // The wall clock read again: NTP may have stepped it during the wait.
    const nlohmann::json now_anchor = clock_anchor();
    shard->epoch_monotonic_ns =
        epoch_of_start(*start_at, start_shift, now_anchor["monotonic_ns"].get<Nanos>(),
                       now_anchor["unix_ns"].get<std::int64_t>());
    shard->clock_sync = read_clock_sync();
    runner.set_epoch_at(shard->epoch_monotonic_ns);
    run["clock"] = now_anchor;
  }
  RunObserver observer(o, endpoint, copt, side.server != nullptr, out_dir, observe_clock, log,
                       [&session](const observe::Observation& ob) { session.observed(ob); });
  runner.start();
  if (shard) {
    shard->ready_late_ns = runner.ready_late();
    if (shard->ready_late_ns > 0)
      log << fmt::format(
          "warning: shard {} was ready {:.1f} ms after the agreed start; the requests due before "
          "then are sent late (their send lag shows it), and merge marks the shard\n",
          shard->index, nanos_to_ms(shard->ready_late_ns));
  }
  if (task_driver) task_driver->start(runner.epoch());
  const LiveRun live_run(live, {out_dir, rs.model, endpoint.url()}, runner);  // --metrics-port

  RecordDrain sink(w, p.plan.closed_loop, session, csv.get(), live,
                   o.compat == Compat::kVllm ? &compat : nullptr);
  std::vector<nlohmann::json> task_batch;
  const auto drain = [&] {
    sink.drain(queue);
    if (!tasks_out) return;
    task_batch.clear();
    task_queue.drain(task_batch);
    for (const auto& t : task_batch) {
      tasks_out->append_line(t.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      task_summary->add(t);
    }
    if (!task_batch.empty()) tasks_out->flush();
  };
  // The writer thread drains records every 50 ms, at a lower priority than
  // the client threads where it shares their CPUs, so that its bursts of
  // work never delay a send.
  std::atomic<bool> writer_stop{false}, writer_failed{false};
  std::string io_error;  // what stopped the writer (a full disk), read after it is joined
  std::thread writer([&] {
    pthread_setname_np(pthread_self(), "ts-writer");
    // Below the client threads where it shares their CPUs; beside them
    // (--client-cpus left it others) at the process's own priority, so that
    // whatever else runs there (a server on the same host) cannot starve it
    // until the bounded queue makes a client thread wait.
    if (!cpu_split.apart()) setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
    try {
      while (!writer_stop.load()) {
        drain();
        queue.wait_half_full(std::chrono::milliseconds(50));  // sooner when the queue fills
      }
    } catch (const std::exception& e) {
      io_error = e.what();
      writer_failed = true;
    }
    queue.close();  // no client thread may wait for a writer that is gone
  });
  const bool was_interrupted = wait_for_run(runner, task_driver.get(), o, {interrupted, hurry, writer_failed},
                                            {progress, tty, planned_s}, log);
  runner.join();
  if (!o.client_cpus.empty()) {  // a client thread the kernel would not pin runs beside the others
    const auto ran_on = runner.thread_cpus();
    for (std::size_t i = 0; i < ran_on.size(); ++i) {
      const std::string wanted = std::to_string(o.client_cpus[i % o.client_cpus.size()]);
      if (ran_on[i] != wanted)
        log << fmt::format("warning: --client-cpus: client thread {} ran on CPUs {}, not on CPU {} alone\n",
                           i, ran_on[i], wanted);
    }
  }
  if (task_driver) task_driver->join();
  writer_stop = true;
  writer.join();
  if (io_error.empty()) {
    try {
      drain();
    } catch (const std::exception& e) {
      io_error = e.what();
    }
  }
  if (progress && tty) log << "\r\x1b[K" << std::flush;
  // The final reads, after the last response and before the in-process
  // server stops (skipped after a second Ctrl-C: stop now).
  if (shard && o.all_done) o.all_done();  // --mpi: every shard's last response before shard 0's last scrape
  const bool final_reads = !(hurry && hurry->load());
  // The counters span every shard only when that last scrape is taken.
  if (shard && o.all_done) shard->counters_span_all_shards = shard->index == 0 && final_reads;
  observer.stop(final_reads);

  if (side.server) {
    side.server->stop(0.0);
    const auto& m = side.server->metrics();
    ServerCounters sc;
    sc.prefix_cache_queries_tokens = static_cast<std::uint64_t>(m.value("vllm:prefix_cache_queries_total"));
    sc.prefix_cache_hits_tokens = static_cast<std::uint64_t>(m.value("vllm:prefix_cache_hits_total"));
    sc.preemptions_total = static_cast<std::uint64_t>(m.value("vllm:num_preemptions_total"));
    if (side.eff && side.eff->num_gpu_blocks)
      sc.kv_cache_usage_peak = m.value("tokenscope:kv_cache_usage_peak");
    summary.set_server_counters(sc);
  } else if (const auto sc = observer.server_counters()) {
    summary.set_server_counters(*sc);  // a remote target: from its scraped counters
  }
  const nlohmann::json s = summary.build();
  const auto cc = runner.client_counters();
  const double cpu = process_cpu_seconds() - cpu_start;

  RunReport report;
  report.out_dir = out_dir;
  report.summary = s;
  report.model = rs.model;
  report.url = endpoint.url();
  report.in_process = side.server != nullptr;
  report.interrupted = was_interrupted;
  report.workload_description = w.description;
  report.rate_rps = p.rate_rps.value_or(0.0);
  report.sent = runner.counters().sent.load();
  report.not_sent = runner.not_sent();
  report.connections = cc.connects;
  report.cpu_s = cpu;
  report.prompts_description = prompts.describe();
  report.prompt_check = prompt_check;
  report.load_description =
      p.plan.closed_loop
          ? fmt::format("closed loop, {} users, think {} ms ({})", o.concurrency, o.think_ms,
                        think_dist_name(o.think_dist))
          : fmt::format("open loop, {} requests planned over {:.1f} s{}", p.plan.schedule.size(), planned_s,
                        o.max_concurrency ? fmt::format(", at most {} in flight", o.max_concurrency) : "");
  report.client = {{"connections_opened", cc.connects},
                   {"connect_failures", cc.connect_failures},
                   {"connect_retries", cc.connect_retries},
                   {"max_connections", runner.max_connections()},
                   {"peak_open_connections", cc.peak_open},
                   {"requests_on_reused_connections", cc.reused},
                   {"resent_after_stale_connection", cc.resent},
                   {"stale_idle_connections_dropped", cc.stale_dropped},
                   {"idle_connections_closed", cc.idle_closed},
                   {"waited_for_connection", cc.waited},
                   {"requests_not_sent", runner.not_sent()},
                   {"records_waited_for_writer", queue.waits()},
                   {"request_bodies_written_apart", runner.bodies_written_apart()},
                   {"request_bodies_written_by_client_threads", runner.bodies_written_by_client_threads()},
                   {"thread_cpus", runner.thread_cpus()},
                   {"other_cpus", format_cpu_list(thread_cpus())},
                   {"process_cpu_s", cpu}};  // with the in-process server, when there is one

  // The error-rate verdict: more than max_error_rate of the requests failed.
  if (!was_interrupted)
    report.failure = rundir::error_rate_failure(s, o.max_error_rate, report.url, sink.first_error);

  run["partial"] = was_interrupted || !io_error.empty();
  if (shard) run["shard"] = rundir::to_json(*shard);
  run["summary"] = s;
  run["client"] = report.client;
  run["verdict"] = {
      {"failed", !report.failure.empty()},
      {"reason", report.failure.empty() ? nlohmann::json(nullptr) : nlohmann::json(report.failure)}};
  run["observe"] = observer.report();
  report.observe = run["observe"];
  run["server"] = observer.server();
  // The hidden queue: requests in flight that the server's gauges do not show.
  if (const auto* qt = observer.queue_tracker(); qt && run["server"].is_object()) {
    std::vector<Nanos> rt, wt;
    std::vector<double> rv, wv;
    for (const auto& [t, v] : qt->running_points()) rt.push_back(t), rv.push_back(v);
    for (const auto& [t, v] : qt->waiting_points()) wt.push_back(t), wv.push_back(v);
    if (const auto h = analyze::hidden_queue(std::move(sink.sends), std::move(sink.closes), rt, rv, wt, wv);
        h.samples > 0)
      report.hidden_queue = run["server"]["hidden_queue"] = analyze::hidden_queue_json(h);
  }
  run["kv_locality"] = analyze::kv_locality(w, std::move(sink.locality));
  run["kv_locality"]["prefix_cache_hit_rate_over_time"] = observer.hit_rate_over_time(runner.epoch());
  add_in_process_truth(run, side);
  if (const nlohmann::json f = in_process_fleet(o, side); !f.is_null()) run["fleet"] = f;
  if (task_summary) {
    run["tasks"] = task_summary->build();
    run["tasks"]["judge"]["configured"] = !o.judge_target.empty();
    run["tasks"]["judge"]["steps"] = p.bw.tasks->judged_steps();
    if (!o.judge_target.empty()) {
      run["tasks"]["judge"]["target"] = o.judge_target;
      run["tasks"]["judge"]["model"] = o.judge_model;
    }
    if (mock_tools) {  // the mock tools' ground truth, as the in-process server's faults
      nlohmann::json injected = nlohmann::json::object();
      for (const auto& [name, e] : mock_tools->injected())
        injected[name] = {{"calls", e.calls},
                          {"http_5xx", e.http_5xx},
                          {"timeout", e.timeout},
                          {"malformed", e.malformed},
                          {"invalid_arguments", e.invalid_arguments}};
      run["tasks"]["tools_injected"] = std::move(injected);
    }
    if (tasks_out) tasks_out->close();
    report.tasks = run["tasks"];
  }
  if (!io_error.empty()) {
    // The disk failed: every whole line already written stays, and run.json
    // gets the summary of what reached the writer if it still fits (else the
    // one written at the start stays).
    run["error"] = io_error;
    session.abandon(run);
    throw IoError(fmt::format("{}; the requests written before it are kept in {}", io_error, out_dir));
  }
  // The finishers that add to the run, after run.json is written with the
  // results: requests.csv closed, vLLM-compatible output, the exports
  // (recorded in run.json); then the run cache, unless interrupted.
  if (csv)
    session.add_finisher(rundir::FinisherKind::kAddsToRunJson, [&](rundir::FinishedRun&) { csv->close(); });
  if (o.compat == Compat::kVllm)
    session.add_finisher(rundir::FinisherKind::kAddsToRunJson,
                         [&](rundir::FinishedRun&) { write_vllm_result(o, p, rs, s, compat, out_dir); });
  session.add_finisher(rundir::FinisherKind::kAddsToRunJson,
                       [&](rundir::FinishedRun& r) { export_run(o, r); });
  session.finish(run, !was_interrupted, log);
  return report;
}

}  // namespace

namespace {

// The exports of a finished run directory (docs/observe.md): a Perfetto
// trace, OTLP/JSON files, a push to an OTLP endpoint. A failed export is
// reported and recorded in run.json ("exports"); the run's results stand.
void export_run(const BenchSettings& o, rundir::FinishedRun& r) {
  if (o.trace_out.empty() && !o.otlp_out && o.otlp_endpoint.empty()) return;
  const std::filesystem::path& dir = r.dir;
  std::ostream& log = r.log;
  nlohmann::json exports = nlohmann::json::object();
  if (!o.trace_out.empty()) {
    const std::filesystem::path path =
        dir / std::filesystem::path(o.trace_out);  // an absolute path replaces dir
    try {
      if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
      const auto st = exporters::export_perfetto(dir, path);
      exports["perfetto"] = {{"file", path.string()}, {"events", st.events}, {"bytes", st.bytes}};
    } catch (const std::exception& e) {
      exports["perfetto"] = {{"file", path.string()}, {"error", e.what()}};
      log << fmt::format("tokenscope bench: the Perfetto trace was not written: {}", e.what()) << std::endl;
    }
  }
  if (o.otlp_out) {
    try {
      const auto st = exporters::export_otlp(dir, dir);
      exports["otlp_files"] = {{"spans", st.spans}, {"points", st.metric_points}, {"bytes", st.bytes}};
    } catch (const std::exception& e) {
      exports["otlp_files"] = {{"error", e.what()}};
      log << fmt::format("tokenscope bench: the OTLP files were not written: {}", e.what()) << std::endl;
    }
  }
  if (!o.otlp_endpoint.empty()) {
    try {
      exporters::PushOptions po;
      po.client.verify_tls = !o.insecure;
      po.client.ca_file = o.ca_file;
      const auto r = exporters::push_otlp(dir, o.otlp_endpoint, po);
      exports["otlp_push"] = {{"endpoint", o.otlp_endpoint},
                              {"ok", r.ok()},
                              {"requests_sent", r.requests_sent},
                              {"requests_failed", r.requests_failed},
                              {"requests_not_sent", r.requests_not_sent},
                              {"rejected_spans", r.rejected_spans},
                              {"rejected_points", r.rejected_points},
                              {"description", r.describe()}};
      if (!r.ok() || !o.quiet) log << "tokenscope bench: " << r.describe() << std::endl;
    } catch (const std::exception& e) {
      exports["otlp_push"] = {{"endpoint", o.otlp_endpoint}, {"ok", false}, {"error", e.what()}};
      log << fmt::format("tokenscope bench: the run was not pushed to {}: {}", o.otlp_endpoint, e.what())
          << std::endl;
    }
  }
  r.run["exports"] = exports;
  r.run_json_changed = true;
}

}  // namespace

// A point of a server sweep's curve: its values, and the run's (or the
// repeats' mean) throughput and latencies; failures and the SLO from the
// run's summary when there is one run.
static nlohmann::json server_curve_point(
    const ServerPoint& point, const std::function<std::optional<double>(const std::string&)>& value,
    const nlohmann::json* summary = nullptr) {
  const auto num = [&](const char* key) {
    const auto v = value(key);
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  nlohmann::json out = {{"settings", server_point_json(point)},
                        {"achieved_rps", num("request_throughput_rps")},
                        {"output_tps", num("output_token_throughput_tps")},
                        {"goodput_rps", num("goodput_rps")},
                        {"ttft_p50_ms", num("ttft_ms.p50")},
                        {"ttft_p99_ms", num("ttft_ms.p99")},
                        {"tpot_p50_ms", num("tpot_ms.p50")},
                        {"tpot_p99_ms", num("tpot_ms.p99")},
                        {"e2e_p50_ms", num("e2e_ms.p50")},
                        {"failed", nullptr},
                        {"slo_pass", nullptr}};
  if (summary && summary->is_object()) {
    out["failed"] = summary->value("requests_failed", nlohmann::json(nullptr));
    if (summary->contains("slo_attainment") && !(*summary)["slo_attainment"].empty()) {
      bool pass = true;
      for (const auto& [k, v] : (*summary)["slo_attainment"].items()) pass = pass && v.value("pass", false);
      out["slo_pass"] = pass;
    }
  }
  return out;
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

BenchResult run(const BenchSettings& o, const std::atomic<bool>& interrupted, std::ostream& log,
                const std::atomic<bool>* hurry, const RunListenerFactory& listeners) {
  if (!(o.timeout_s >= 0)) throw UsageError("--timeout-s: expected seconds >= 0");
  if (o.max_events < 1) throw UsageError("--max-events: expected at least 1");
  if (!(o.grace_s >= 0)) throw UsageError("--grace-s: expected seconds >= 0");
  if (!(o.warmup_s >= 0)) throw UsageError("--warmup-s: expected seconds >= 0");
  if (!(o.think_ms >= 0)) throw UsageError("--think-ms: expected ms >= 0");
  if (o.inputs_per_request > 2048)
    throw UsageError(fmt::format("--inputs-per-request {}: expected 1 to 2048", o.inputs_per_request));
  if (o.query_tokens < 1 || o.query_tokens > 1'000'000)
    throw UsageError(fmt::format("--query-tokens {}: expected 1 to 1000000", o.query_tokens));
  if (o.api == Api::kResponses && o.sampling.logprobs)
    throw UsageError("--logprobs: not with --api responses (its logprobs come as output_text annotations)");
  if (o.api == Api::kTranscriptions && o.sampling.logprobs)
    throw UsageError("--logprobs: not with --api transcriptions (its logprobs are not read)");
  if (!is_pooling(o.api) && o.inputs_per_request > 0)
    throw UsageError("--inputs-per-request goes with --api embeddings or rerank");
  if (o.api != Api::kTranscriptions &&
      (!o.audio_duration_ms.empty() || o.response_format != "json" || !o.language.empty()))
    throw UsageError("--audio-duration-ms, --response-format and --language go with --api transcriptions");
  if (o.api == Api::kTranscriptions && o.stream && o.response_format != "json")
    throw UsageError(
        fmt::format("--response-format {} is answered whole: add --no-stream (streamed "
                    "transcriptions are json)",
                    o.response_format));
  if (!(o.max_error_rate >= 0 && o.max_error_rate <= 1))
    throw UsageError("--max-error-rate: expected a share in [0, 1]");
  serve::check(o.server);
  if (!(o.scrape_interval_s >= 0.01 && o.scrape_interval_s <= 3600))
    throw UsageError("--scrape-interval: expected seconds in [0.01, 3600]");
  if (json_too_deep_at(o.sampling.extra_body) != std::string_view::npos)
    throw UsageError(fmt::format("--extra-body: nested deeper than {} levels", kMaxJsonDepth));
  // URL errors read "--target 'URL': why": named here by their own option.
  auto check_url = [](const char* option, const std::string& u) {
    try {
      net::Endpoint::parse_url(u);
    } catch (const UsageError& e) {
      std::string why = e.what();
      if (const auto colon = why.find("': "); why.rfind("--target '", 0) == 0 && colon != std::string::npos)
        why = why.substr(colon + 3);
      throw UsageError(fmt::format("{} {}: {}", option, quote_input(u), why));
    }
  };
  for (const auto& u : o.scrape_urls) check_url("--scrape", u);
  for (const auto& u : o.gpu_sampler_urls) check_url("--gpu-sampler", u);
  if (!o.otlp_endpoint.empty()) check_url("--otlp-endpoint", o.otlp_endpoint);
  if (!o.judge_target.empty()) check_url("--judge-target", o.judge_target);
  if (!o.judge_extra_body.empty()) {
    if (o.judge_target.empty()) throw UsageError("--judge-extra-body needs --judge-target");
    if (json_too_deep_at(o.judge_extra_body) != std::string_view::npos)
      throw UsageError(fmt::format("--judge-extra-body: nested deeper than {} levels", kMaxJsonDepth));
    const auto j = nlohmann::json::parse(o.judge_extra_body, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      throw UsageError("--judge-extra-body: expected a JSON object, e.g. '{\"json_schema\": {...}}'");
  }
  if (o.server_pid == 0 || o.server_pid < -1)
    throw UsageError("--server-pid: expected a process id (a positive integer)");
  if (o.server_pid > 0 && !std::filesystem::exists(fmt::format("/proc/{}", o.server_pid)))
    throw UsageError(fmt::format("--server-pid {}: no such process on this machine", o.server_pid));
  if (!o.cgroup.empty() && !std::filesystem::is_directory(o.cgroup))
    throw UsageError(
        fmt::format("--cgroup {}: not a directory (a cgroup v2 directory, e.g. "
                    "/sys/fs/cgroup/system.slice/vllm.service)",
                    quote_input(o.cgroup)));
  if (!o.trace_out.empty() && std::filesystem::is_directory(o.trace_out))
    throw UsageError(fmt::format("--trace-out {}: is a directory (name the trace file, e.g. trace.json)",
                                 quote_input(o.trace_out)));
  if (o.no_scrape && !o.scrape_urls.empty()) throw UsageError("--no-scrape and --scrape cannot be combined");
  const auto& sm = o.sampling;
  if (sm.temperature && !(*sm.temperature >= 0 && std::isfinite(*sm.temperature)))
    throw UsageError("--temperature: expected a number >= 0");
  if (sm.top_p && !(*sm.top_p > 0 && *sm.top_p <= 1))
    throw UsageError("--top-p: expected a number in (0, 1]");
  std::unique_ptr<tokenizers::TextTokenizer> tokenizer;
  if (!o.tokenizer_file.empty()) tokenizer = tokenizers::load_text_tokenizer(o.tokenizer_file);
  // A server started for each run (bench/server_sweep.h): its command, its
  // sweep and where it listens, checked before anything starts.
  const std::vector<ServerParam> server_params = parse_server_sweep(o.server_sweep, o.server_cmd);
  net::Endpoint server_endpoint;
  net::ClientOptions server_client;
  if (!o.server_cmd.empty()) {
    if (o.target_url.empty())
      throw UsageError("--server-cmd needs --target URL (where the server it starts will listen)");
    if (!o.sweep.empty())
      throw UsageError(
          "--server-cmd and a rate sweep (--sweep-rates, --sweep-search) cannot be combined yet");
    if (o.coupling) throw UsageError("--server-cmd and --coupling cannot be combined");
    if (o.server_pid > 0)
      throw UsageError("--server-cmd starts the server: drop --server-pid (its PID is used)");
    if (!(o.server_start_timeout_s > 0 && o.server_start_timeout_s <= 86400))
      throw UsageError("--server-start-timeout: expected seconds in (0, 86400]");
    check_point_dirs(server_grid(server_params));
    server_endpoint = net::Endpoint::parse_url(o.target_url);
    server_client.verify_tls = !o.insecure;
    server_client.ca_file = o.ca_file;
    require_port_free(server_endpoint, server_client);
  }
  BenchResult result;
  result.out_dir = !o.out_dir.empty() ? o.out_dir
                   : o.shard.sharded()
                       ? utc_stamp("runs/bench-%Y%m%d-%H%M%S") + fmt::format("-shard{}", o.shard.index)
                       : utc_stamp("runs/bench-%Y%m%d-%H%M%S");
  const std::string& out = result.out_dir;
  const std::unique_ptr<LiveMetrics> live =
      start_live_metrics(o, log);  // before the directory: a busy port is exit 2
  claim_run_directory(out, o.overwrite, "--out");

  auto verdicts_of = [&](const RunReport& r) {
    if (!r.failure.empty()) result.verdicts.push_back(r.failure);
  };

  // One run at `dir`; with --server-cmd, its own server is started before
  // (and answered GET /health) and stopped after (by its process group).
  // `server` describes it in sweep.json; no report when the server did not
  // come up (or Ctrl-C came first: `stopped`).
  struct Outcome {
    std::optional<RunReport> report;
    nlohmann::json server;
    bool stopped = false;
  };
  const auto run_at = [&](BenchSettings one, const std::filesystem::path& dir,
                          std::optional<double> rate = std::nullopt) -> Outcome {
    Outcome oc;
    if (o.server_cmd.empty()) {
      oc.report =
          run_one(one, rate, dir.string(), tokenizer.get(), interrupted, hurry, log, live.get(), listeners);
      oc.stopped = oc.report->interrupted;
      return oc;
    }
    std::filesystem::create_directories(dir);
    // The point's directory itself, never a link planted in its place.
    if (std::error_code ec; !std::filesystem::is_directory(std::filesystem::symlink_status(dir, ec)))
      throw IoError(fmt::format("{}: is not a directory (a link?): not written through", dir.string()));
    const std::string cmd = server_command_for(o.server_cmd, one.server_point);
    // Nothing may answer at the target before the server starts: the last
    // point's server (a container or a worker that outlived its stop) would
    // be measured instead.
    try {
      require_port_free(server_endpoint, server_client);
    } catch (const UsageError& e) {
      oc.server = {{"command", cmd}, {"error", e.what()}};
      log << "tokenscope bench: " << display_lines(e.what()) << std::endl;
      return oc;
    }
    if (!o.quiet) log << "server: " << display_text(cmd) << std::endl;
    const auto started = std::chrono::steady_clock::now();
    ManagedServer server(cmd, dir / "server.log");
    oc.server = {{"command", cmd}, {"pid", server.pid()}, {"log", "server.log"}};
    try {
      if (!server.wait_ready(server_endpoint, server_client, o.api_key, o.server_start_timeout_s,
                             interrupted)) {
        oc.server["exit"] = server.stop();
        oc.stopped = true;
        return oc;
      }
    } catch (const TargetError& e) {
      oc.server["exit"] = server.stop();
      oc.server["error"] = e.what();
      log << "tokenscope bench: " << display_lines(e.what()) << std::endl;
      return oc;
    }
    oc.server["ready_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    one.server_cmd = cmd;
    one.server_pid = server.pid();
    try {
      oc.report =
          run_one(one, rate, dir.string(), tokenizer.get(), interrupted, hurry, log, live.get(), listeners);
    } catch (const TargetError& e) {  // it answered /health, then not as a server must: this point fails
      oc.server["exit"] = server.stop();
      oc.server["error"] = e.what();
      log << "tokenscope bench: " << display_lines(e.what()) << std::endl;
      return oc;
    }
    oc.server["exit"] = server.stop();
    if (!o.quiet) log << "server stopped: " << oc.server["exit"].get<std::string>() << std::endl;
    oc.stopped = oc.report->interrupted;
    return oc;
  };
  bool stopped = false, failed_run = false;
  // Keeps a run's report; a server that did not come up fails the sweep.
  const auto keep = [&](Outcome& oc) -> const RunReport* {
    if (oc.stopped) stopped = true;
    if (!oc.report) {
      failed_run |= !oc.stopped;
      if (oc.server.contains("error")) result.verdicts.push_back(oc.server["error"].get<std::string>());
      return nullptr;
    }
    result.runs.push_back(std::move(*oc.report));
    const RunReport& r = result.runs.back();
    verdicts_of(r);
    failed_run |= !r.failure.empty();
    return &r;
  };
  // --repeat N: the same settings N times with the next seeds into
  // dir/repeat-K/, and dir/sweep.json with the between-run statistics.
  const auto repeats_at = [&](const BenchSettings& base, const std::filesystem::path& dir,
                              std::optional<double> rate = std::nullopt) {
    nlohmann::json runs = nlohmann::json::array();
    std::vector<nlohmann::json> summaries;
    for (unsigned k = 1; k <= o.repeat; ++k) {
      BenchSettings one = base;
      one.repeat = 1;
      one.workload.seed = base.workload.seed + (k - 1);
      if (!o.quiet) log << fmt::format("repeat {}/{} (seed {})", k, o.repeat, one.workload.seed) << std::endl;
      Outcome oc = run_at(one, dir / fmt::format("repeat-{}", k), rate);
      nlohmann::json entry = {
          {"dir", fmt::format("repeat-{}", k)}, {"repeat", k}, {"seed", one.workload.seed}};
      if (!oc.server.is_null()) entry["server"] = oc.server;
      if (const RunReport* r = keep(oc); r && r->summary.is_object()) {
        summaries.push_back(r->summary);
        if (!r->interrupted) {  // what a rate sweep's curve reads
          const nlohmann::json c = curve_point(rate.value_or(0), r->summary);
          entry["slo_pass"] = c["slo_pass"];
          entry["requests_failed"] = c["failed"];
        }
      }
      runs.push_back(std::move(entry));
      if (stopped) break;
    }
    nlohmann::json sw = {{"kind", "repeats"},
                         {"repeats", o.repeat},
                         {"runs", runs},
                         {"partial", stopped},
                         {"statistics", rundir::repeat_statistics(summaries)}};
    if (!o.server_cmd.empty()) sw["server_command"] = server_command_for(o.server_cmd, base.server_point);
    write_file_atomic(dir / rundir::kRunSetFile, sw.dump(2));
    return sw;
  };
  const auto finish = [&]() {
    result.exit_code = stopped ? kExitInterrupted : failed_run ? kExitFailure : kExitOk;
    linger_live_metrics(live.get(), o, interrupted, hurry, log);
    return result;
  };

  if (!server_params.empty()) {
    // A server sweep: one run (or one directory of repeats) per point of the
    // grid, each with its own server; sweep.json rewritten after each point.
    const auto grid = server_grid(server_params);
    nlohmann::json parameters = nlohmann::json::object();
    for (const auto& p : server_params) parameters[p.name] = p.values;
    nlohmann::json runs = nlohmann::json::array(), curve = nlohmann::json::array();
    const auto write_sweep = [&](bool partial) {
      result.sweep = {
          {"kind", "server"}, {"command", o.server_cmd}, {"parameters", parameters}, {"repeats", o.repeat},
          {"runs", runs},     {"curve", curve},          {"partial", partial}};
      write_file_atomic(std::filesystem::path(out) / rundir::kRunSetFile, result.sweep.dump(2));
    };
    for (std::size_t i = 0; i < grid.size() && !stopped; ++i) {
      BenchSettings one = o;
      one.server_point = grid[i];
      const std::string rel = server_point_dir(grid[i]);
      if (!o.quiet) log << fmt::format("server sweep {}/{}: {}", i + 1, grid.size(), rel) << std::endl;
      nlohmann::json entry = {{"dir", rel},
                              {"settings", server_point_json(grid[i])},
                              {"command", server_command_for(o.server_cmd, grid[i])}};
      std::optional<nlohmann::json> point;
      if (o.repeat > 1) {
        const nlohmann::json sw = repeats_at(one, std::filesystem::path(out) / rel);
        entry["repeats"] = sw["runs"].size();
        point = server_curve_point(grid[i], [&](const std::string& key) -> std::optional<double> {
          const auto* v = rundir::json_path(sw, {"statistics", key.c_str(), "mean"});
          return v && v->is_number() ? std::optional<double>(v->get<double>()) : std::nullopt;
        });
      } else {
        Outcome oc = run_at(one, std::filesystem::path(out) / rel);
        entry["server"] = oc.server;
        if (const RunReport* r = keep(oc))
          point = server_curve_point(
              grid[i], [&](const std::string& key) { return rundir::summary_value(r->summary, key); },
              &r->summary);
      }
      runs.push_back(std::move(entry));
      if (point) curve.push_back(std::move(*point));
      write_sweep(true);
    }
    write_sweep(stopped);
    return finish();
  }

  if (o.repeat > 1 && o.sweep.empty()) {
    if (o.coupling) throw UsageError("--repeat and --coupling cannot be combined");
    result.sweep = repeats_at(o, out);
    return finish();
  }

  if (!o.sweep.empty()) {
    if (o.concurrency > 0) throw UsageError("sweeps vary the open-loop rate; drop --concurrency");
    nlohmann::json runs = nlohmann::json::array();
    nlohmann::json curve = nlohmann::json::array();
    nlohmann::json best = nullptr;
    const auto write_rate_sweep = [&](bool partial) {
      nlohmann::json sorted = curve;
      std::sort(sorted.begin(), sorted.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
        return a["rate_rps"].get<double>() < b["rate_rps"].get<double>();
      });
      result.sweep = {{"kind", o.sweep.rates.empty() ? "search" : "rates"},
                      {"runs", runs},
                      {"curve", sorted},
                      {"max_rate_meeting_slo", best},
                      {"repeats", o.repeat},
                      {"partial", partial}};
      std::filesystem::create_directories(out);
      write_file_atomic(std::filesystem::path(out) / "sweep.json", result.sweep.dump(2));
    };
    auto probe = [&](double rate) -> std::optional<nlohmann::json> {
      if (!o.quiet) log << fmt::format("sweep: rate {:.3g} req/s", rate) << std::endl;
      const std::string rel = fmt::format("rate-{:g}", rate);
      if (o.repeat > 1) {
        // Repeats at each rate (rate-R/repeat-K/): the curve has their means;
        // the rate meets the SLO when every repeat does.
        write_rate_sweep(true);
        const nlohmann::json sw = repeats_at(o, std::filesystem::path(out) / rel, rate);
        runs.push_back({{"dir", rel}, {"rate_rps", rate}, {"repeats", sw["runs"].size()}});
        if (stopped) return std::nullopt;
        const auto mean = [&](const char* key) {
          const auto* v = rundir::json_path(sw, {"statistics", key, "mean"});
          return v && v->is_number() ? *v : nlohmann::json(nullptr);
        };
        nlohmann::json slo_pass = nullptr;
        std::uint64_t failed = 0;
        for (const auto& e : sw["runs"]) {
          if (e.contains("slo_pass") && e["slo_pass"].is_boolean())
            slo_pass = (slo_pass.is_null() || slo_pass.get<bool>()) && e["slo_pass"].get<bool>();
          if (e.contains("requests_failed") && e["requests_failed"].is_number_unsigned())
            failed += e["requests_failed"].get<std::uint64_t>();
        }
        curve.push_back({{"rate_rps", rate},
                         {"achieved_rps", mean("request_throughput_rps")},
                         {"goodput_rps", mean("goodput_rps")},
                         {"ttft_p99_ms", mean("ttft_ms.p99")},
                         {"tpot_p99_ms", mean("tpot_ms.p99")},
                         {"failed", failed},
                         {"slo_pass", slo_pass},
                         {"repeats", sw["runs"].size()}});
        return curve.back();
      }
      write_rate_sweep(true);  // what ran so far, should the process end before the sweep does
      result.runs.push_back(run_one(o, rate, fmt::format("{}/{}", out, rel), tokenizer.get(), interrupted,
                                    hurry, log, live.get(), listeners));
      runs.push_back({{"dir", rel}, {"rate_rps", rate}});
      const RunReport& r = result.runs.back();
      verdicts_of(r);
      failed_run |= !r.failure.empty();
      if (r.interrupted) return std::nullopt;
      curve.push_back(curve_point(rate, r.summary));
      return curve.back();
    };
    if (!o.sweep.rates.empty()) {
      for (double rate : o.sweep.rates)
        if (!probe(rate)) {
          stopped = true;
          break;
        }
    } else {
      if (o.slo.empty()) throw UsageError("--sweep-search needs --slo (the criterion)");
      double lo = o.sweep.search->first, hi = o.sweep.search->second;
      auto passes = [](const nlohmann::json& c) {
        return !c["slo_pass"].is_null() && c["slo_pass"].get<bool>();
      };
      auto a = probe(lo);
      if (!a) {
        stopped = true;
      } else if (!passes(*a)) {
        if (!o.quiet) log << "sweep: the SLO fails already at the lowest rate\n";
      } else {
        best = lo;
        auto b = probe(hi);
        if (!b)
          stopped = true;
        else if (passes(*b))
          best = hi;
        else
          for (unsigned i = 0; i < o.sweep.steps; ++i) {
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
    write_rate_sweep(stopped);
    return finish();
  }

  std::vector<std::string> coupling_classes;
  if (o.coupling) {
    // A class alone must get the load it had in the mix: its own requests at their own times.
    if (o.concurrency > 0 || !o.user_stages.empty())
      throw UsageError("--coupling: the closed loop gives a class alone all the users; use the open loop");
    if (!o.stages.empty()) throw UsageError("--coupling and --stages cannot be combined");
    if (!o.sweep.empty()) throw UsageError("--coupling and a sweep cannot be combined");
    const Prepared probe = prepare(o, std::nullopt);
    for (const auto& t : probe.bw.turns)
      if (t.session >= 0)
        throw UsageError(
            "--coupling: a workload with sessions (turns) cannot run a class alone at its arrival times");
    coupling_classes = analyze::classes_in_use(probe.bw.workload);
    if (coupling_classes.size() < 2)
      throw UsageError("--coupling needs a workload with two or more task classes (--workload FILE)");
  }
  if (o.server_cmd.empty()) {
    result.runs.push_back(
        run_one(o, std::nullopt, out, tokenizer.get(), interrupted, hurry, log, live.get(), listeners));
  } else {  // one run, with the server started for it
    Outcome oc = run_at(o, out);
    if (!oc.report) {
      if (oc.stopped) {  // Ctrl-C while the server started: nothing ran
        stopped = true;
        return finish();
      }
      result.verdicts.push_back(
          oc.server.value("error", std::string("--server-cmd: the server did not start")));
      result.exit_code = kExitFailure;  // its error is printed already
      linger_live_metrics(live.get(), o, interrupted, hurry, log);
      return result;
    }
    result.runs.push_back(std::move(*oc.report));
  }
  const RunReport& r = result.runs.back();
  verdicts_of(r);
  if (o.coupling && !r.interrupted && !interrupted.load()) {
    // Each class alone at its own arrival times, then kappa per class.
    std::map<std::string, analyze::ClassLatencies> alone;
    std::map<std::string, std::string> alone_runs;
    const auto dirs = analyze::coupling_run_dirs(coupling_classes);
    for (std::size_t ci = 0; ci < coupling_classes.size(); ++ci) {
      const std::string& cls = coupling_classes[ci];
      if (interrupted.load()) break;
      const std::string& rel = dirs[ci];
      BenchSettings oc = o;
      oc.coupling = false;
      oc.only_class = cls;
      if (!o.quiet) log << fmt::format("coupling: class {} alone", cls) << std::endl;
      const RunReport a = run_one(oc, std::nullopt, fmt::format("{}/{}", out, rel), tokenizer.get(),
                                  interrupted, hurry, log, live.get(), listeners);
      if (a.interrupted) break;
      auto lat = analyze::class_latencies(std::filesystem::path(out) / rel / "requests.jsonl");
      if (auto it = lat.find(cls); it != lat.end()) alone[cls] = std::move(it->second);
      alone_runs[cls] = rel;
    }
    const nlohmann::json coupling = analyze::coupling_json(
        analyze::class_latencies(std::filesystem::path(out) / "requests.jsonl"), alone, alone_runs);
    const auto run_path = std::filesystem::path(out) / "run.json";
    nlohmann::json run_json =
        nlohmann::json::parse(read_regular_file(run_path.string(), "run.json", 1u << 30));
    run_json["coupling"] = coupling;
    write_file_atomic(run_path, run_json.dump(2) + "\n");
    result.coupling = coupling;
  }
  if (r.interrupted) {
    result.exit_code = kExitInterrupted;
  } else if (!r.failure.empty()) {
    result.exit_code = kExitFailure;
  } else {
    for (const auto& [cls, a] : r.summary["slo_attainment"].items())
      if (!a["pass"].get<bool>()) {
        result.exit_code = kExitSloFailed;
        result.verdicts.push_back(fmt::format("SLO of class '{}' failed", cls));
      }
  }
  linger_live_metrics(live.get(), o, interrupted, hurry, log);
  return result;
}

}  // namespace tokenscope::bench
