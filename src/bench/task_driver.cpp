#include "bench/task_driver.h"

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <fmt/format.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <optional>
#include <thread>
#include <unordered_map>

#include <boost/math/distributions/binomial.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "core/random.h"
#include "rundir/readers.h"
#include "tokenizers/prompt_words.h"

namespace tokenscope::bench {

namespace asio = boost::asio;

void TaskRecordQueue::push(nlohmann::json&& task) {
  std::lock_guard lock(mutex_);
  pending_.push_back(std::move(task));
}

void TaskRecordQueue::drain(std::vector<nlohmann::json>& out) {
  std::lock_guard lock(mutex_);
  for (auto& t : pending_) out.push_back(std::move(t));
  pending_.clear();
}

namespace {
// JSON from outside (a model's answer or arguments, a tool's body), parsed
// only within the nesting bound: nlohmann's parser recurses per level.
nlohmann::json parse_shallow(std::string_view text) {
  if (json_too_deep_at(text) != std::string_view::npos) return nlohmann::json::value_t::discarded;
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
}
}  // namespace

namespace {

asio::steady_timer::time_point task_clock_point(Nanos t) {
  return asio::steady_timer::time_point(std::chrono::nanoseconds(t));
}

std::string task_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// `n` words of the prompt vocabulary drawn from key.
std::string filler_words(std::uint64_t key, std::uint32_t n) {
  const auto vocab = tokenizers::prompt_words();
  std::string out;
  out.reserve(n * 6);
  for (std::uint32_t k = 0; k < n; ++k) {
    if (k) out += ' ';
    out += vocab[mix64(hash_combine64(key, k)) % vocab.size()];
  }
  return out;
}

// The response of a tool call over HTTP, bounded.
struct ToolExchange final : net::ExchangeHandler {
  static constexpr std::size_t kMaxBody = 4u << 20;
  Nanos t_sent = -1, t_headers = -1;
  int status = 0;
  std::string body;
  bool over = false;
  std::function<void(ToolExchange&, net::ExchangeError, std::string_view, Nanos)> done;
  void on_sent(Nanos t) override {
    if (t_sent < 0) t_sent = t;
  }
  void on_headers(int s, Nanos t) override {
    status = s;
    t_headers = t;
  }
  void on_body(std::string_view data, Nanos) override {
    if (body.size() + data.size() > kMaxBody) {
      over = true;
      return;
    }
    body.append(data);
  }
  void on_complete(net::ExchangeError error, std::string_view message, Nanos t) override {
    auto d = std::move(done);
    if (d) d(*this, error, message, t);
  }
};

// "[doc-N]" citations in a text.
std::vector<std::string> citations(std::string_view text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while ((at = text.find("[doc-", at)) != std::string_view::npos) {
    std::size_t end = at + 5;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    if (end > at + 5 && end < text.size() && text[end] == ']')
      out.emplace_back(text.substr(at + 1, end - at - 1));
    at = end;
  }
  return out;
}

}  // namespace

struct TaskDriver::Impl {
  struct StepRun {
    std::string id, kind, name;      // kind: model | tool | retrieval
    const StepSpec* spec = nullptr;  // scripted
    std::vector<std::string> after;  // the steps it waited for (tasks.jsonl "after": a replay's graph)
    std::uint32_t pending = 0;       // predecessors not done
    enum class State { kWaiting, kRunning, kDone, kFailed, kSkipped } state = State::kWaiting;
    Nanos t_ready = -1, t_start = -1, t_end = -1;
    Nanos t_sent = -1, t_returned = -1;  // a tool call's last attempt: its request sent, its answer read
    Nanos exchange_ns = 0, backoff_ns = 0;
    std::uint32_t attempts = 0;
    std::vector<std::string> retried;
    std::string failure, detail, output;
    std::vector<std::uint64_t> requests;
    std::int64_t prompt_tokens = -1, cached_tokens = -1, output_tokens = -1;
    std::vector<std::string> documents;  // a retrieval's
    // A tool step: the tool, its arguments, the model's call id (model-driven).
    std::uint32_t tool = std::numeric_limits<std::uint32_t>::max();
    std::string arguments, call_id;
    std::shared_ptr<ToolExchange> exchange;
    ResponseCollector* collector = nullptr;
    // A judged answer: the request the model answered, the judge's call, its verdict.
    std::string question;
    std::shared_ptr<ToolExchange> judge_exchange;
    nlohmann::json judge;
    std::shared_ptr<asio::steady_timer> backoff;  // waiting to retry
    int critical = -1;                            // the predecessor that ended last
  };
  struct TaskRun {
    TaskArrival arrival;
    const TaskSpec* spec = nullptr;
    std::string class_name, tenant, input;
    Nanos t_sched = 0, t_start = 0, t_end = -1;
    bool warmup = false;
    std::vector<StepRun> steps;
    std::uint32_t running = 0;
    bool failed = false, ended = false;
    std::string failure, failed_step;
    // Model-driven.
    nlohmann::json messages;
    std::string tools_json;
    std::uint32_t model_calls = 0, tool_rounds = 0;
    std::uint32_t tools_pending = 0;
    int last_model = -1;
    // The task's own work is over (t_end), its record waits for the judge.
    bool work_ended = false;
    std::uint32_t judges_pending = 0;
  };

  Impl(TaskDriver& d, const TaskSet& ts, const workload::Workload& wl, TaskDriverSettings s, RecordQueue& rq,
       TaskRecordQueue& tq)
      : driver(d),
        set(ts),
        w(wl),
        settings(std::move(s)),
        encoder(settings.request),
        requests(rq),
        out(tq),
        model_client(ioc, settings.target, settings.client, clock),
        tool_client(ioc, settings.tools, settings.client, clock),
        parser(false),
        next_request_id(settings.first_request_id) {
    if (settings.judge)
      judge_client = std::make_unique<net::HttpClient>(ioc, *settings.judge, settings.client, clock);
    // Tools at a URL: their clients (and the name lookups) before the run, not on its thread.
    for (const auto& tool : set.catalog.tools)
      if (tool.kind == ToolSpec::Kind::kUrl && !url_clients.count(tool.url))
        url_clients[tool.url] = std::make_unique<net::HttpClient>(ioc, net::Endpoint::parse_url(tool.url),
                                                                  settings.client, clock);
  }

  TaskDriver& driver;
  const TaskSet& set;
  const workload::Workload& w;
  TaskDriverSettings settings;
  RequestEncoder encoder;
  RecordQueue& requests;
  TaskRecordQueue& out;
  SteadyClock clock;
  asio::io_context ioc{1};
  net::HttpClient model_client;
  net::HttpClient tool_client;
  std::unordered_map<std::string, std::unique_ptr<net::HttpClient>> url_clients;
  std::unique_ptr<net::HttpClient> judge_client;
  JsonSchema verdict_checker{judge_verdict_schema(), "the judge's verdict"};
  ChunkParser parser;
  std::thread thread;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  Nanos epoch = 0;
  std::size_t next_arrival = 0;
  asio::steady_timer arrival_timer{ioc};
  std::uint64_t next_request_id;
  std::unordered_map<std::uint64_t, std::unique_ptr<TaskRun>> tasks;
  std::vector<std::unique_ptr<ResponseCollector>> owned;
  std::vector<ResponseCollector*> free_collectors;
  bool stopping = false;
  std::mutex done_mutex;
  std::condition_variable done_cv;
  bool finished = false;

  Nanos now() const { return clock.now_ns(); }

  // ---- arrivals ----
  void arm() {
    if (stopping || next_arrival >= set.arrivals.size()) return check_finished();
    arrival_timer.expires_at(task_clock_point(epoch + set.arrivals[next_arrival].t));
    arrival_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      while (!stopping && next_arrival < set.arrivals.size() && epoch + set.arrivals[next_arrival].t <= now())
        begin_task(set.arrivals[next_arrival++]);
      arm();
    });
  }

  void begin_task(const TaskArrival& a) {
    const TaskSpec* spec = a.spec ? a.spec.get() : set.by_class[a.task_class].get();
    if (!spec) return;
    auto run = std::make_unique<TaskRun>();
    TaskRun& t = *run;
    t.arrival = a;
    t.spec = spec;
    t.class_name = a.task_class < w.classes.size() ? w.classes[a.task_class] : "";
    t.tenant = a.tenant < w.tenants.size() ? w.tenants[a.tenant] : "default";
    t.t_sched = epoch + a.t;
    t.t_start = now();
    t.warmup =
        (settings.warmup_s > 0 && a.t < seconds_to_nanos(settings.warmup_s)) || a.id < set.warmup_tasks;
    t.input = filler_words(hash_combine64(settings.seed ^ 0x7461736b73ULL, a.id), a.input_tokens);
    ++driver.counters_.started;
    ++driver.counters_.in_flight;
    tasks.emplace(a.id, std::move(run));
    if (spec->mode == TaskSpec::Mode::kModelDriven) {
      nlohmann::json tools = nlohmann::json::array();
      for (const auto i : spec->tools) {
        const ToolSpec& tool = set.catalog.tools[i];
        // A description always: llama-server's tool parser requires one.
        nlohmann::json f = {{"name", tool.name},
                            {"description", tool.description.empty() ? tool.name : tool.description},
                            {"parameters", tool.parameters}};
        tools.push_back({{"type", "function"}, {"function", std::move(f)}});
      }
      t.tools_json = ",\"tools\":" + task_json(tools) + ",\"tool_choice\":\"" + spec->tool_choice + "\"";
      if (!spec->parallel_tool_calls) t.tools_json += ",\"parallel_tool_calls\":false";
      t.messages = nlohmann::json::array();
      if (!spec->system.empty())
        t.messages.push_back({{"role", "system"}, {"content", render(t, spec->system)}});
      t.messages.push_back({{"role", "user"}, {"content", render(t, spec->prompt)}});
      next_model_turn(t);
      return;
    }
    t.steps.resize(spec->steps.size());
    for (std::size_t i = 0; i < spec->steps.size(); ++i) {
      const StepSpec& s = spec->steps[i];
      StepRun& r = t.steps[i];
      r.spec = &s;
      r.id = s.id;
      r.pending = static_cast<std::uint32_t>(s.after.size());
      for (const auto k : s.after) r.after.push_back(spec->steps[k].id);
      r.kind = s.kind == StepSpec::Kind::kModel  ? "model"
               : s.kind == StepSpec::Kind::kTool ? "tool"
                                                 : "retrieval";
      r.tool = s.tool;
      r.name = s.kind == StepSpec::Kind::kModel    ? "model"
               : r.tool < set.catalog.tools.size() ? set.catalog.tools[r.tool].name
                                                   : "search";
    }
    for (std::uint32_t i = 0; i < t.steps.size(); ++i)
      if (t.steps[i].pending == 0) ready(t, i, t.t_start);
    maybe_end(t);
  }

  // ---- templates ----
  // {{input}} and {{STEP}} (a step's output; a retrieval's documents, one
  // "[doc-N] text" line each).
  std::string render(const TaskRun& t, const std::string& text) const {
    std::string outs;
    std::size_t at = 0;
    while (true) {
      const std::size_t open = text.find("{{", at);
      if (open == std::string::npos) break;
      const std::size_t close = text.find("}}", open + 2);
      if (close == std::string::npos) break;
      outs.append(text, at, open - at);
      std::string name = text.substr(open + 2, close - open - 2);
      while (!name.empty() && name.front() == ' ') name.erase(0, 1);
      while (!name.empty() && name.back() == ' ') name.pop_back();
      if (name == "input") {
        outs += t.input;
      } else {
        for (const auto& s : t.steps)
          if (s.id == name) outs += s.output;
      }
      at = close + 2;
    }
    outs.append(text, at, std::string::npos);
    return outs;
  }

  // ---- scripted steps ----
  void ready(TaskRun& t, std::uint32_t i, Nanos when) {
    StepRun& s = t.steps[i];
    s.t_ready = when;
    if (t.failed || stopping) {
      s.state = StepRun::State::kSkipped;
      return;
    }
    s.state = StepRun::State::kRunning;
    s.t_start = now();
    ++t.running;
    attempt(t, i);
  }

  void attempt(TaskRun& t, std::uint32_t i) {
    StepRun& s = t.steps[i];
    ++s.attempts;
    if (s.kind == "model") {
      start_model(t, i);
    } else if (!s.spec) {  // a model-driven task's call: the model's arguments again
      start_tool(t, i, s.arguments);
    } else if (s.kind == "retrieval") {
      const StepSpec& spec = *s.spec;
      const nlohmann::json args = {{"query", render(t, spec.query)}, {"top_k", spec.top_k}};
      start_tool(t, i, task_json(args));
    } else {
      std::string args = s.arguments;
      if (args.empty()) {
        if (s.spec && s.spec->arguments) {
          args = render_json(t, *s.spec->arguments);
        } else {
          Rng rng(hash_combine64(hash_combine64(settings.seed, t.arrival.id), i * 131 + s.attempts));
          const ToolSpec& tool = set.catalog.tools[s.tool];
          try {
            args =
                task_json(draw_instance(tool.parameters, *tool.parameters_checker, rng, "tool " + tool.name));
          } catch (const std::exception& e) {
            return step_failed(t, i, "invalid_arguments", e.what(), false);
          }
        }
      }
      start_tool(t, i, args);
    }
  }

  std::string render_json(const TaskRun& t, const nlohmann::json& v) const {
    struct Walk {
      const Impl& self;
      const TaskRun& t;
      nlohmann::json operator()(const nlohmann::json& x) const {
        if (x.is_string()) return self.render(t, x.get<std::string>());
        if (x.is_object()) {
          nlohmann::json o = nlohmann::json::object();
          for (auto it = x.begin(); it != x.end(); ++it) o[it.key()] = (*this)(*it);
          return o;
        }
        if (x.is_array()) {
          nlohmann::json a = nlohmann::json::array();
          for (const auto& e : x) a.push_back((*this)(e));
          return a;
        }
        return x;
      }
    };
    return task_json(Walk{*this, t}(v));
  }

  // ---- model calls ----
  ResponseCollector* collector() {
    if (free_collectors.empty()) {
      owned.push_back(std::make_unique<ResponseCollector>());
      owned.back()->set_max_events(settings.max_events);
      return owned.back().get();
    }
    auto* c = free_collectors.back();
    free_collectors.pop_back();
    return c;
  }

  void start_model(TaskRun& t, std::uint32_t i) {
    StepRun& s = t.steps[i];
    const bool driven = t.spec->mode == TaskSpec::Mode::kModelDriven;
    std::string messages;
    std::uint32_t max_tokens = 1;
    const std::uint64_t key =
        hash_combine64(hash_combine64(settings.seed ^ 0x6d6f64656cULL, t.arrival.id), i);
    Rng rng(key);
    if (driven) {
      messages = task_json(t.messages);
      max_tokens = std::max<std::uint32_t>(1, t.spec->output_len.sample(rng));
    } else {
      const StepSpec& spec = *s.spec;
      std::string prompt;
      if (spec.replay) {
        // The recorded count, less the template's tokens; the task's words first (its calls' shared prefix).
        const auto total = static_cast<std::uint32_t>(
            std::max<std::int64_t>(1, static_cast<std::int64_t>(spec.replay->prompt_tokens) -
                                          std::max<std::int64_t>(0, settings.chat_added)));
        const std::uint32_t shared = std::min(total, spec.replay->cached_tokens);
        prompt = filler_words(hash_combine64(settings.seed ^ 0x7265706cULL, t.arrival.id), shared);
        if (total > shared) prompt += (shared ? " " : "") + filler_words(key, total - shared);
      } else {
        prompt = render(t, spec.prompt);
      }
      if (spec.input_len && !spec.replay) {
        const std::uint32_t want = std::max<std::uint32_t>(1, spec.input_len->sample(rng));
        const auto have = static_cast<std::uint32_t>(std::count(prompt.begin(), prompt.end(), ' ') + 1);
        if (want > have) prompt += " " + filler_words(key, want - have);
      }
      nlohmann::json m = nlohmann::json::array();
      if (!spec.system.empty()) m.push_back({{"role", "system"}, {"content", render(t, spec.system)}});
      if (spec.judge && judge_client) s.question = prompt;
      m.push_back({{"role", "user"}, {"content", std::move(prompt)}});
      messages = task_json(m);
      max_tokens = std::max<std::uint32_t>(1, spec.output_len.sample(rng));
    }
    const bool stream = t.spec->stream.value_or(settings.request.stream);
    const bool ignore_eos = !driven && settings.request.ignore_eos && !(s.spec && s.spec->output_checker);
    const std::uint64_t id = next_request_id++;
    auto bytes =
        encoder.encode_chat(messages, max_tokens, stream, ignore_eos, driven ? t.tools_json : "", id);
    RequestRecord rec;
    rec.id = id;
    rec.tenant = t.tenant;
    rec.task_class = t.class_name;
    rec.task = static_cast<std::int64_t>(t.arrival.id);
    rec.step = s.id;
    rec.t_sched = now();
    rec.output_tokens_planned = max_tokens;
    rec.warmup = t.warmup;
    ResponseCollector* c = collector();
    s.collector = c;
    s.requests.push_back(id);
    const std::uint64_t task_id = t.arrival.id;
    c->init(std::move(rec), stream, true, &parser,
            [this, task_id, i](ResponseCollector& done) { model_done(task_id, i, done); });
    if (driven) c->collect_tool_calls();
    ++driver.counters_.model_calls;
    const double timeout_ms = s.spec ? s.spec->timeout_ms : t.spec->timeout_ms;
    model_client.start(std::move(bytes), c, now() + static_cast<Nanos>(timeout_ms * 1e6));
  }

  static std::string failure_of(const RequestRecord& r) {
    switch (r.outcome) {
      case Outcome::kOk:
        return "";
      case Outcome::kTimeout:
        return "timeout";
      case Outcome::kCancelled:
        return "cancelled";
      case Outcome::kHttpError:
        return r.http_status == 429 || r.http_status == 503 ? "overload" : "http";
      case Outcome::kProtocolError:
      case Outcome::kValidationError:
        return "format";
      default:
        return "http";
    }
  }

  void model_done(std::uint64_t task_id, std::uint32_t i, ResponseCollector& c) {
    RequestRecord rec = std::move(c.record());
    std::string text = c.text();
    std::vector<ToolCallAssembler::Call> calls = c.tool_calls().calls();
    const std::string finish = c.finish_reason();
    const std::string calls_problem = c.tool_calls().problem();
    free_collectors.push_back(&c);
    const std::string failure = failure_of(rec);
    const std::string detail = rec.detail;
    const Nanos exchange = rec.t_close >= 0 && rec.t_send >= 0 ? rec.t_close - rec.t_send : 0;
    const std::int64_t prompt = rec.prompt_tokens, cached = rec.cached_tokens, output = rec.output_tokens;
    requests.push(std::move(rec));
    const auto it = tasks.find(task_id);
    if (it == tasks.end()) return;
    TaskRun& t = *it->second;
    StepRun& s = t.steps[i];
    s.collector = nullptr;
    s.exchange_ns += exchange;
    s.prompt_tokens = prompt;
    s.cached_tokens = cached;
    s.output_tokens = output;
    if (!failure.empty()) return step_failed(t, i, failure, detail, failure != "cancelled");
    s.output = text;
    if (t.spec->mode == TaskSpec::Mode::kModelDriven) {
      if (!calls_problem.empty()) return step_failed(t, i, "format", "tool calls: " + calls_problem, true);
      if (finish == "length" && !calls.empty())
        return step_failed(t, i, "format", "the tool calls were cut at max_tokens (finish_reason length)",
                           true);
      return model_turn_done(t, i, std::move(calls));
    }
    const StepSpec& spec = *s.spec;
    if (spec.output_checker) {
      const auto j = parse_shallow(text);
      if (j.is_discarded()) return step_failed(t, i, "format", "the answer is not JSON", true);
      if (const auto why = spec.output_checker->violations(j, 1); !why.empty())
        return step_failed(t, i, "format", "the answer violates its schema: " + why.front(), true);
    }
    if (!spec.cite.empty()) {
      std::vector<std::string> retrieved;
      for (const auto k : spec.cite)
        for (const auto& d : t.steps[k].documents) retrieved.push_back(d);
      const auto cited = citations(text);
      if (cited.empty()) return step_failed(t, i, "unsupported_claim", "the answer cites no document", true);
      for (const auto& d : cited)
        if (std::find(retrieved.begin(), retrieved.end(), d) == retrieved.end())
          return step_failed(t, i, "unsupported_claim", "the answer cites " + d + ", which was not retrieved",
                             true);
    }
    if (spec.judge && !t.failed) start_judge(t, i, *spec.judge, s.question, text);
    step_done(t, i);
  }

  // ---- the judge ----
  void start_judge(TaskRun& t, std::uint32_t i, const JudgeSpec& js, const std::string& question,
                   const std::string& answer) {
    if (!judge_client) return;
    StepRun& s = t.steps[i];
    const std::string rubric = js.rubric.empty() ? std::string(default_judge_rubric()) : js.rubric;
    nlohmann::json body = {
        {"model", settings.judge_model},
        {"messages",
         {{{"role", "system"}, {"content", rubric}},
          {{"role", "user"}, {"content", "Request:\n" + question + "\n\nAnswer:\n" + answer}}}},
        {"max_tokens", 512},
        {"temperature", 0},
        {"stream", false},
        {"response_format",
         {{"type", "json_schema"},
          {"json_schema", {{"name", "verdict"}, {"strict", true}, {"schema", judge_verdict_schema()}}}}}};
    if (settings.judge_extra_body.is_object())
      for (const auto& [k, v] : settings.judge_extra_body.items()) body[k] = v;
    const std::string text = task_json(body);
    const net::Endpoint& e = *settings.judge;
    auto bytes = std::make_shared<std::string>(fmt::format(
        "POST {}/v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n"
        "Accept: application/json\r\n{}Content-Length: {}\r\n\r\n",
        e.base_path, e.host_header(),
        settings.judge_api_key.empty() ? std::string()
                                       : "Authorization: Bearer " + settings.judge_api_key + "\r\n",
        text.size()));
    *bytes += text;
    auto x = std::make_shared<ToolExchange>();
    s.judge_exchange = x;
    s.judge = {{"min_score", js.min_score}, {"t_start_ns", now()}};
    ++t.judges_pending;
    const std::uint64_t task_id = t.arrival.id;
    x->done = [this, task_id, i, x](ToolExchange& ex, net::ExchangeError err, std::string_view msg,
                                    Nanos tc) { judge_done(task_id, i, ex, err, msg, tc); };
    judge_client->start(std::move(bytes), x.get(), now() + static_cast<Nanos>(js.timeout_ms * 1e6));
  }

  // The verdict in a judge's answer, or why there is none.
  std::string read_verdict(const ToolExchange& x, nlohmann::json& verdict) const {
    if (x.status < 200 || x.status >= 300) return fmt::format("HTTP {}: {}", x.status, x.body.substr(0, 200));
    if (x.over) return "the answer is over 4 MiB";
    const auto j = parse_shallow(x.body);
    const nlohmann::json* content = nullptr;
    if (j.is_object() && j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      const auto& c = j["choices"][0];
      if (c.is_object() && c.contains("message") && c["message"].is_object() &&
          c["message"].contains("content") && c["message"]["content"].is_string())
        content = &c["message"]["content"];
    }
    if (!content) return "the answer has no choices[0].message.content";
    const bool cut = j["choices"][0].value("finish_reason", nlohmann::json()) == "length";
    std::string_view text = content->get_ref<const std::string&>();
    // A verdict in a code fence (models that ignore response_format) is read inside it.
    if (const auto open = text.find("```"); open != std::string_view::npos) {
      const auto start = text.find('\n', open);
      const auto close = start == std::string_view::npos ? start : text.find("```", start);
      if (close != std::string_view::npos) text = text.substr(start + 1, close - start - 1);
    }
    verdict = parse_shallow(text);
    if (verdict.is_discarded())
      return std::string(cut ? "the verdict was cut at max_tokens (512): " : "the verdict is not JSON: ") +
             std::string(text.substr(0, 120));
    if (const auto why = verdict_checker.violations(verdict, 1); !why.empty())
      return "the verdict violates its schema: " + why.front();
    return "";
  }

  void judge_done(std::uint64_t task_id, std::uint32_t i, ToolExchange& x, net::ExchangeError err,
                  std::string_view message, Nanos t_close) {
    const auto it = tasks.find(task_id);
    if (it == tasks.end()) return;
    TaskRun& t = *it->second;
    StepRun& s = t.steps[i];
    auto keep = s.judge_exchange;
    s.judge_exchange.reset();
    --t.judges_pending;
    if (x.t_sent >= 0) s.judge["latency_ms"] = static_cast<double>(t_close - x.t_sent) / 1e6;
    s.judge["t_end_ns"] = t_close;
    using E = net::ExchangeError;
    nlohmann::json verdict;
    const std::string problem = err == E::kTimeout     ? "timeout: " + std::string(message)
                                : err == E::kCancelled ? "cancelled: " + std::string(message)
                                : err != E::kNone      ? std::string(message)
                                                       : read_verdict(x, verdict);
    if (!problem.empty()) {
      s.judge["outcome"] = "error";
      s.judge["detail"] = problem.substr(0, 300);
      return maybe_end(t);
    }
    const int score = verdict["score"].get<int>();
    const bool pass = score >= s.judge["min_score"].get<int>();
    s.judge["score"] = score;
    s.judge["reason"] = verdict["reason"].get<std::string>().substr(0, 300);
    s.judge["outcome"] = pass ? "pass" : "reject";
    if (!pass) {
      s.state = StepRun::State::kFailed;
      s.failure = "judge_rejected";
      s.detail = fmt::format("score {} under {}", score, s.judge["min_score"].get<int>());
      if (!t.failed) {
        t.failed = true;
        t.failure = "judge_rejected";
        t.failed_step = s.id;
      }
      if (t.spec->mode == TaskSpec::Mode::kScripted)
        for (auto& n : t.steps)
          if (n.state == StepRun::State::kWaiting) n.state = StepRun::State::kSkipped;
    }
    maybe_end(t);
  }

  // ---- tool calls ----
  net::HttpClient& client_for(const ToolSpec* tool, std::string& path) {
    if (!tool || tool->kind != ToolSpec::Kind::kUrl) {
      // No tool: a retrieval from the mock's built-in search of the document store.
      path = settings.tools.base_path + (tool ? "/tools/" + tool->name : std::string("/builtin/search"));
      return tool_client;
    }
    const auto e = net::Endpoint::parse_url(tool->url);
    path = e.base_path.empty() ? "/" : e.base_path;
    const auto it = url_clients.find(tool->url);
    if (it == url_clients.end() || !it->second)
      throw UsageError(fmt::format("tool {}: no client for {}", tool->name, tool->url));
    return *it->second;
  }

  void start_tool(TaskRun& t, std::uint32_t i, const std::string& args) {
    StepRun& s = t.steps[i];
    const ToolSpec* tool = s.tool < set.catalog.tools.size() ? &set.catalog.tools[s.tool] : nullptr;
    std::string path;
    net::HttpClient* client = nullptr;
    try {
      client = &client_for(tool, path);
    } catch (const std::exception& e) {
      return step_failed(t, i, "http", e.what(), false);
    }
    const net::Endpoint& e =
        tool && tool->kind == ToolSpec::Kind::kUrl ? net::Endpoint::parse_url(tool->url) : settings.tools;
    const bool replayed = s.spec && s.spec->replay && s.spec->replay->latency_ms &&
                          (!tool || tool->kind != ToolSpec::Kind::kUrl);
    auto bytes = std::make_shared<std::string>(fmt::format(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json\r\n"
        "{}Content-Length: {}\r\n\r\n",
        path, e.host_header(),
        replayed ? fmt::format("X-Tokenscope-Replay-Ms: {}\r\n", *s.spec->replay->latency_ms) : std::string(),
        args.size()));
    *bytes += args;
    s.arguments = args;
    auto x = std::make_shared<ToolExchange>();
    s.exchange = x;
    const std::uint64_t task_id = t.arrival.id;
    x->done = [this, task_id, i, x](ToolExchange& ex, net::ExchangeError err, std::string_view msg,
                                    Nanos tc) { tool_done(task_id, i, ex, err, msg, tc); };
    ++driver.counters_.tool_calls;
    const double timeout_ms = s.spec ? s.spec->timeout_ms : t.spec->timeout_ms;
    client->start(std::move(bytes), x.get(), now() + static_cast<Nanos>(timeout_ms * 1e6));
  }

  void tool_done(std::uint64_t task_id, std::uint32_t i, ToolExchange& x, net::ExchangeError err,
                 std::string_view message, Nanos t_close) {
    const auto it = tasks.find(task_id);
    if (it == tasks.end()) return;
    TaskRun& t = *it->second;
    StepRun& s = t.steps[i];
    auto keep = s.exchange;  // x lives until this returns
    s.exchange.reset();
    if (x.t_sent >= 0) s.exchange_ns += t_close - x.t_sent;
    s.t_sent = x.t_sent;
    s.t_returned = t_close;
    using E = net::ExchangeError;
    if (err == E::kTimeout) return step_failed(t, i, "timeout", std::string(message), true);
    if (err == E::kCancelled) return step_failed(t, i, "cancelled", std::string(message), false);
    if (err != E::kNone) return step_failed(t, i, "http", std::string(message), true);
    if (x.status == 400) return step_failed(t, i, "invalid_arguments", x.body.substr(0, 300), true);
    if (x.status == 429 || x.status == 503)
      return step_failed(t, i, "overload", fmt::format("HTTP {}", x.status), true);
    if (x.status < 200 || x.status >= 300)
      return step_failed(t, i, "http", fmt::format("HTTP {}: {}", x.status, x.body.substr(0, 200)), true);
    if (x.over) return step_failed(t, i, "format", "the answer is over 4 MiB", true);
    const auto j = parse_shallow(x.body);
    if (j.is_discarded()) return step_failed(t, i, "format", "the tool's answer is not JSON", true);
    if (s.kind == "retrieval") {
      const auto docs = j.find("documents");
      if (docs == j.end() || !docs->is_array())
        return step_failed(t, i, "format", "a search answer without \"documents\"", true);
      s.documents.clear();
      std::string text;
      for (const auto& d : *docs) {
        if (!d.is_object() || !d.contains("id") || !d["id"].is_string()) continue;
        s.documents.push_back(d["id"].get<std::string>());
        text += "[" + d["id"].get<std::string>() + "] ";
        if (d.contains("text") && d["text"].is_string()) text += d["text"].get<std::string>();
        text += '\n';
      }
      s.output = std::move(text);
    } else {
      s.output = x.body;
    }
    if (t.spec->mode == TaskSpec::Mode::kModelDriven) return driven_tool_done(t, i);
    step_done(t, i);
  }

  // ---- step ends ----
  void step_done(TaskRun& t, std::uint32_t i) {
    StepRun& s = t.steps[i];
    s.state = StepRun::State::kDone;
    s.t_end = now();
    --t.running;
    if (t.spec->mode == TaskSpec::Mode::kScripted && s.spec) {
      for (std::uint32_t k = 0; k < t.steps.size(); ++k) {
        StepRun& n = t.steps[k];
        if (std::find(n.spec->after.begin(), n.spec->after.end(), i) == n.spec->after.end()) continue;
        if (n.critical < 0 || t.steps[n.critical].t_end <= s.t_end) n.critical = static_cast<int>(i);
        if (--n.pending == 0) ready(t, k, s.t_end);
      }
    }
    maybe_end(t);
  }

  void step_failed(TaskRun& t, std::uint32_t i, const std::string& failure, const std::string& detail,
                   bool retryable) {
    StepRun& s = t.steps[i];
    const std::uint32_t retries = s.spec ? s.spec->retries : t.spec->retries;
    const double backoff_ms = s.spec ? s.spec->backoff_ms : t.spec->backoff_ms;
    // Retried while the task can still pass: once a step has failed it, the others' failures are final.
    if (retryable && s.attempts <= retries && !stopping && !t.failed) {
      s.retried.push_back(failure);
      const Nanos wait =
          static_cast<Nanos>(backoff_ms * 1e6 * static_cast<double>(1u << std::min(s.attempts - 1, 20u)));
      s.backoff_ns += wait;
      auto timer = std::make_shared<asio::steady_timer>(ioc, task_clock_point(now() + wait));
      s.backoff = timer;
      const std::uint64_t task_id = t.arrival.id;
      timer->async_wait([this, timer, task_id, i](const boost::system::error_code& ec) {
        const auto it = tasks.find(task_id);
        if (it == tasks.end()) return;
        TaskRun& task = *it->second;
        task.steps[i].backoff.reset();
        if (ec || stopping) return step_failed(task, i, "cancelled", "the run was stopped", false);
        if (task.failed)
          return step_failed(task, i, task.steps[i].retried.back(), "another step failed the task", false);
        attempt(task, i);
      });
      return;
    }
    s.state = StepRun::State::kFailed;
    s.t_end = now();
    s.failure = failure;
    s.detail = detail;
    --t.running;
    if (!t.failed) {
      t.failed = true;
      t.failure = failure;
      t.failed_step = s.id;
    }
    // Steps waiting on it (and on them) will not run.
    if (t.spec->mode == TaskSpec::Mode::kScripted)
      for (auto& n : t.steps)
        if (n.state == StepRun::State::kWaiting) n.state = StepRun::State::kSkipped;
    maybe_end(t);
  }

  // ---- model-driven ----
  void next_model_turn(TaskRun& t) {
    if (t.model_calls >= t.spec->max_steps) {
      t.failed = true;
      t.failure = "budget";
      t.failed_step = t.last_model >= 0 ? t.steps[t.last_model].id : "";
      return maybe_end(t);
    }
    if (stopping) {
      t.failed = true;
      t.failure = "cancelled";
      return maybe_end(t);
    }
    StepRun s;
    s.id = fmt::format("model-{}", t.model_calls);
    s.kind = "model";
    s.name = "model";
    s.t_ready = now();
    s.t_start = s.t_ready;
    s.state = StepRun::State::kRunning;
    // It waited for the tool calls of the round before it (after the model step that made them).
    for (std::size_t k = t.last_model >= 0 ? static_cast<std::size_t>(t.last_model) + 1 : 0;
         k < t.steps.size(); ++k)
      s.after.push_back(t.steps[k].id);
    // The step that ended last (the slowest tool of the round) is what this turn waited for.
    for (std::size_t k = 0; k < t.steps.size(); ++k)
      if (t.steps[k].t_end >= 0 && (s.critical < 0 || t.steps[k].t_end > t.steps[s.critical].t_end))
        s.critical = static_cast<int>(k);
    t.steps.push_back(std::move(s));
    ++t.model_calls;
    ++t.running;
    const auto i = static_cast<std::uint32_t>(t.steps.size() - 1);
    t.last_model = static_cast<int>(i);
    t.steps[i].attempts = 1;
    start_model(t, i);
  }

  void model_turn_done(TaskRun& t, std::uint32_t i, std::vector<ToolCallAssembler::Call> calls) {
    if (calls.empty()) {
      // An answer in text: the end, unless no tool was ever called.
      if (t.tool_rounds == 0 && t.spec->tool_choice != "none")
        return step_failed(t, i, "tool_selection", "the model answered without calling a tool", true);
      if (t.spec->judge && judge_client && !t.failed) {
        const auto& first_user = t.messages[t.spec->system.empty() ? 0 : 1];
        start_judge(t, i, *t.spec->judge, first_user.value("content", ""), t.steps[i].output);
      }
      return step_done(t, i);
    }
    // Every call must name a declared tool with arguments its schema takes.
    for (const auto& c : calls) {
      std::optional<std::uint32_t> tool;
      for (const auto k : t.spec->tools)
        if (set.catalog.tools[k].name == c.name) tool = k;
      if (!tool)
        return step_failed(t, i, "tool_selection",
                           "the model called " + quote_input(c.name) + ", which was not offered", true);
      const auto args = parse_shallow(c.arguments);
      if (args.is_discarded())
        return step_failed(t, i, "format",
                           "the arguments of " + c.name + " are not JSON: " + c.arguments.substr(0, 120),
                           true);
      if (const auto why = set.catalog.tools[*tool].parameters_checker->violations(args, 1); !why.empty())
        return step_failed(t, i, "invalid_arguments", c.name + ": " + why.front(), true);
    }
    // The assistant's turn goes into the conversation, then each call runs as a step.
    nlohmann::json tc = nlohmann::json::array();
    for (const auto& c : calls)
      tc.push_back(
          {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    t.messages.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", std::move(tc)}});
    if (stopping) {  // no step starts after Ctrl-C; cancelled before step_done, which may end the task
      t.failed = true;
      t.failure = "cancelled";
      return step_done(t, i);
    }
    // A task's record holds at most kMaxTaskRecordSteps steps (what rundir reads back).
    if (t.steps.size() + calls.size() > rundir::kMaxTaskRecordSteps)
      return step_failed(t, i, "budget",
                         fmt::format("the task would have more than {} steps", rundir::kMaxTaskRecordSteps),
                         false);
    ++t.tool_rounds;
    t.tools_pending = static_cast<std::uint32_t>(calls.size());  // before step_done: the task goes on
    step_done(t, i);
    for (const auto& c : calls) {
      StepRun s;
      s.kind = "tool";
      s.name = c.name;
      for (const auto k : t.spec->tools)
        if (set.catalog.tools[k].name == c.name) s.tool = k;
      if (set.catalog.tools[s.tool].kind == ToolSpec::Kind::kSearch) s.kind = "retrieval";
      s.id = fmt::format("{}-{}", c.name, t.steps.size());
      s.arguments = c.arguments;
      s.call_id = c.id;
      s.after = {t.steps[i].id};
      s.t_ready = now();
      s.t_start = s.t_ready;
      s.state = StepRun::State::kRunning;
      s.critical = static_cast<int>(i);
      t.steps.push_back(std::move(s));
      ++t.running;
      const auto k = static_cast<std::uint32_t>(t.steps.size() - 1);
      t.steps[k].attempts = 1;
      start_tool(t, k, c.arguments);
    }
  }

  void driven_tool_done(TaskRun& t, std::uint32_t i) {
    StepRun& s = t.steps[i];
    t.messages.push_back({{"role", "tool"}, {"tool_call_id", s.call_id}, {"content", s.output}});
    step_done(t, i);
    if (--t.tools_pending == 0 && !t.failed) next_model_turn(t);
  }

  // ---- task ends ----
  void maybe_end(TaskRun& t) {
    if (t.ended || t.running > 0) return;
    if (!t.work_ended && !work_over(t)) return;
    if (t.judges_pending > 0) return;  // the verdicts come into the record
    t.ended = true;
    out.push(to_json(t));
    --driver.counters_.in_flight;
    ++driver.counters_.finished;
    if (t.failed) ++driver.counters_.failed;
    const std::uint64_t id = t.arrival.id;
    asio::post(ioc, [this, id] {
      tasks.erase(id);
      check_finished();
    });
  }

  // Whether the task's own work is over; if so, its end (the judge's verdicts may still be out).
  bool work_over(TaskRun& t) {
    if (t.spec->mode == TaskSpec::Mode::kScripted) {
      for (const auto& s : t.steps)
        if (s.state == StepRun::State::kWaiting && !t.failed && !stopping) return false;
    } else if (!t.failed && t.tools_pending > 0) {
      return false;
    } else if (!t.failed && (t.steps.empty() || t.steps.back().kind != "model" ||
                             t.steps.back().state != StepRun::State::kDone)) {
      return false;
    }
    t.work_ended = true;
    t.t_end = now();
    for (auto& s : t.steps)
      if (s.state == StepRun::State::kWaiting) s.state = StepRun::State::kSkipped;
    if (!t.failed && stopping) {
      bool all = true;
      for (const auto& s : t.steps) all &= s.state == StepRun::State::kDone;
      if (!all) {
        t.failed = true;
        t.failure = "cancelled";
      }
    }
    return true;
  }

  static const char* state_name(StepRun::State s) {
    switch (s) {
      case StepRun::State::kDone:
        return "ok";
      case StepRun::State::kFailed:
        return "failed";
      case StepRun::State::kSkipped:
        return "skipped";
      case StepRun::State::kRunning:
        return "running";
      default:
        return "waiting";
    }
  }

  nlohmann::json to_json(const TaskRun& t) const {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : t.steps) {
      nlohmann::json j = {{"id", s.id},
                          {"kind", s.kind},
                          {"name", s.name},
                          {"outcome", state_name(s.state)},
                          {"attempts", s.attempts}};
      if (s.t_ready >= 0) j["t_ready_ns"] = s.t_ready;
      if (s.t_start >= 0) j["t_start_ns"] = s.t_start;
      if (s.t_end >= 0) j["t_end_ns"] = s.t_end;
      if (s.t_sent >= 0) j["t_sent_ns"] = s.t_sent;
      if (s.t_returned >= 0 && s.t_sent >= 0) j["t_returned_ns"] = s.t_returned;
      if (!s.failure.empty()) j["failure"] = s.failure;
      if (!s.detail.empty()) j["detail"] = s.detail.substr(0, 300);
      if (!s.retried.empty()) j["retried"] = s.retried;
      if (!s.requests.empty()) j["requests"] = s.requests;
      if (s.cached_tokens >= 0) j["cached_tokens"] = s.cached_tokens;
      if (s.prompt_tokens >= 0) j["prompt_tokens"] = s.prompt_tokens;
      if (s.output_tokens >= 0) j["output_tokens"] = s.output_tokens;
      if (!s.documents.empty()) j["documents"] = s.documents;
      if (!s.judge.is_null()) j["judge"] = s.judge;
      if (!s.after.empty()) j["after"] = s.after;
      steps.push_back(std::move(j));
    }
    nlohmann::json task = {{"id", t.arrival.id},
                           {"class", t.class_name},
                           {"tenant", t.tenant},
                           {"mode", t.spec->mode == TaskSpec::Mode::kScripted ? "scripted" : "model-driven"},
                           {"t_sched_ns", t.t_sched},
                           {"t_start_ns", t.t_start},
                           {"t_end_ns", t.t_end},
                           {"duration_ms", static_cast<double>(t.t_end - t.t_start) / 1e6},
                           {"outcome", t.failed ? (t.failure == "cancelled" ? "cancelled" : "failed") : "ok"},
                           {"steps", std::move(steps)},
                           {"critical_path", critical_path(t)}};
    if (t.warmup) task["warmup"] = true;
    if (t.failed) {
      task["failure"] = t.failure;
      task["failed_step"] = t.failed_step;
    }
    return task;
  }

  // The chain of steps that ended last, back to the task's start, and
  // where its time went: inside model exchanges, inside tool exchanges,
  // waiting (between steps, and retry backoff), and the client's own time
  // (building, parsing, checking) — the rest of each step.
  nlohmann::json critical_path(const TaskRun& t) const {
    const Nanos total = t.t_end - t.t_start;
    int last = -1;
    for (std::size_t i = 0; i < t.steps.size(); ++i)
      if (t.steps[i].t_end >= 0 && (last < 0 || t.steps[i].t_end > t.steps[last].t_end))
        last = static_cast<int>(i);
    Nanos model = 0, tool = 0, queue = 0;
    std::vector<std::string> path;
    Nanos cursor = t.t_end;
    for (int i = last; i >= 0;) {
      const StepRun& s = t.steps[static_cast<std::size_t>(i)];
      path.push_back(s.id);
      const Nanos start = s.t_start >= 0 ? s.t_start : s.t_ready;
      queue += std::max<Nanos>(0, cursor - s.t_end);  // after it, before the next on the path
      (s.kind == "model" ? model : tool) += s.exchange_ns;
      queue += s.backoff_ns;
      queue += std::max<Nanos>(0, start - s.t_ready);
      cursor = s.t_ready;
      i = s.critical;
    }
    queue += std::max<Nanos>(0, cursor - t.t_start);
    std::reverse(path.begin(), path.end());
    const Nanos client = std::max<Nanos>(0, total - model - tool - queue);
    return {{"steps", path},         {"total_ms", total / 1e6},   {"model_ms", model / 1e6},
            {"tool_ms", tool / 1e6}, {"client_ms", client / 1e6}, {"queue_ms", queue / 1e6}};
  }

  // After a stop: a task with nothing in flight (every step waiting) ends
  // now, as no step will start; the others end as their exchanges do.
  void end_idle_tasks() {
    std::vector<TaskRun*> idle;
    for (auto& [id, t] : tasks)
      if (!t->ended && t->running == 0) idle.push_back(t.get());
    for (auto* t : idle) maybe_end(*t);
  }

  void check_finished() {
    if (!tasks.empty()) return;
    if (!stopping && next_arrival < set.arrivals.size()) return;
    {
      std::lock_guard lock(done_mutex);
      finished = true;
    }
    done_cv.notify_all();
    guard.reset();
  }
};

nlohmann::json summarize_task_records(const nlohmann::json& first_tasks,
                                      const std::vector<nlohmann::json>& tasks) {
  TaskSet set;
  std::vector<std::string> classes;
  if (const auto it = first_tasks.find("by_class"); it != first_tasks.end() && it->is_object())
    for (const auto& [name, c] : it->items()) {
      classes.push_back(name);
      set.by_class.push_back(std::make_shared<TaskSpec>());  // a task class; its graph is not needed
      TaskSlo slo;
      if (const auto s = c.find("slo"); s != c.end() && s->is_object()) {
        if (s->contains("percentile")) {
          const auto& p = (*s)["percentile"];
          if (!p.is_number() || !(p.get<double>() > 0 && p.get<double>() <= 100))
            throw std::invalid_argument(
                fmt::format("tasks.by_class.{}.slo.percentile: expected a number in (0, 100]", name));
          slo.percentile = p.get<double>();
        }
        if (s->contains("task_ms") && (*s)["task_ms"].is_number())
          slo.task_ms = (*s)["task_ms"].get<double>();
        if (s->contains("pass_rate") && (*s)["pass_rate"].is_number())
          slo.pass_rate = (*s)["pass_rate"].get<double>();
      }
      set.slo_by_class.push_back(slo);
    }
  TaskSummary summary(set, classes);
  for (const auto& t : tasks) summary.add(t);
  return summary.build();
}

TaskSummary::TaskSummary(const TaskSet& set, std::vector<std::string> classes)
    : set_(set), classes_(std::move(classes)) {}

void TaskSummary::add(const nlohmann::json& t) {
  const std::string outcome = t.value("outcome", "");
  const double ms = t.value("duration_ms", 0.0);
  if (t.value("warmup", false)) {
    ++warmup_;
    if (outcome == "ok") warmup_ms_.push_back(ms);
    return;
  }
  const std::string cls = t.value("class", "");
  if (outcome == "ok") {
    std::optional<double> limit;
    for (std::size_t c = 0; c < classes_.size() && c < set_.slo_by_class.size(); ++c)
      if (classes_[c] == cls) limit = set_.slo_by_class[c].task_ms;
    if (!limit || ms <= *limit) ++good_;
  }
  const Nanos sched = t.value("t_sched_ns", Nanos{-1}), end = t.value("t_end_ns", Nanos{-1});
  if (sched >= 0 && (first_sched_ < 0 || sched < first_sched_)) first_sched_ = sched;
  if (end > last_end_) last_end_ = end;
  for (Group* g : {&all_, &by_class_[cls]}) {
    ++g->tasks;
    if (outcome == "ok") {
      ++g->ok;
      g->completion_ms.push_back(ms);
    } else if (outcome == "cancelled") {
      ++g->cancelled;
    } else {
      ++g->failed;
    }
  }
  if (outcome == "failed") {
    ++tasks_failed_by_class_[t.value("failure", "")];
    ++failures_by_step_[t.value("failed_step", "")];
  }
  static const nlohmann::json kNoSteps = nlohmann::json::array();
  const auto steps_it = t.find("steps");
  const nlohmann::json& steps = steps_it != t.end() && steps_it->is_array() ? *steps_it : kNoSteps;
  for (const auto& s : steps) {
    steps_ += 1;
    const std::string kind = s.value("kind", "");
    if (kind == "model") {
      model_calls_ += static_cast<double>(s.contains("requests") ? s["requests"].size() : 0);
      prompt_tokens_ +=
          static_cast<double>(std::max<std::int64_t>(0, s.value("prompt_tokens", std::int64_t{0})));
      output_tokens_ +=
          static_cast<double>(std::max<std::int64_t>(0, s.value("output_tokens", std::int64_t{0})));
    } else {
      tool_calls_ += s.value("attempts", 0);
      if (s.value("outcome", "") == "ok" && s.contains("t_start_ns") && s.contains("t_end_ns"))
        tool_ms_[s.value("name", "")].push_back(
            static_cast<double>(s["t_end_ns"].get<Nanos>() - s["t_start_ns"].get<Nanos>()) / 1e6);
    }
    if (s.contains("retried"))
      for (const auto& c : s["retried"]) ++retried_by_class_[c.get<std::string>()];
    if (const auto jt = s.find("judge"); jt != s.end() && jt->is_object()) {
      ++judged_;
      const std::string v = jt->value("outcome", "");
      (v == "pass" ? judge_pass_ : v == "reject" ? judge_reject_ : judge_errors_) += 1;
      // The judge's latency: of its verdicts (its failures' time is a timeout's, or nothing).
      if (jt->contains("latency_ms") && (v == "pass" || v == "reject"))
        judge_ms_.push_back(jt->value("latency_ms", 0.0));
    }
    // Failures per step's final outcome (a task may have more than one failed step).
    if (s.value("outcome", "") == "failed" && s.value("failure", "") != "cancelled")
      ++failures_by_class_[s.value("failure", "")];
  }
  // A record without one (a merge of hand-made or cut records) adds nothing to it.
  if (const auto cp = t.find("critical_path"); cp != t.end() && cp->is_object()) {
    cp_model_ += cp->value("model_ms", 0.0);
    cp_tool_ += cp->value("tool_ms", 0.0);
    cp_client_ += cp->value("client_ms", 0.0);
    cp_queue_ += cp->value("queue_ms", 0.0);
  }
}

namespace {

double nearest_rank(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const auto k = static_cast<std::size_t>(std::ceil(q / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, k > 0 ? k - 1 : 0)];
}

// A percentile and its 95% percentile-bootstrap interval (200 resamples, seeded).
nlohmann::json percentile_with_interval(std::vector<double> v, double q) {
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  const double value = nearest_rank(v, q);
  Rng rng(0x7461736b6369ULL ^ v.size());
  std::vector<double> stats, sample(v.size());
  constexpr int kResamples = 200;
  for (int b = 0; b < kResamples; ++b) {
    for (auto& x : sample) x = v[rng.uniform_int(0, v.size() - 1)];
    std::sort(sample.begin(), sample.end());
    stats.push_back(nearest_rank(sample, q));
  }
  std::sort(stats.begin(), stats.end());
  return {{"value", value}, {"ci95", {stats[kResamples * 25 / 1000], stats[kResamples * 975 / 1000 - 1]}}};
}

nlohmann::json completion(const std::vector<double>& ms) {
  return {{"p50", percentile_with_interval(ms, 50)},
          {"p90", percentile_with_interval(ms, 90)},
          {"p99", percentile_with_interval(ms, 99)}};
}

}  // namespace

nlohmann::json TaskSummary::build() const {
  const double n = static_cast<double>(std::max<std::uint64_t>(1, all_.tasks));
  auto pass_rate = [](const Group& g) {
    return g.ok + g.failed > 0
               ? nlohmann::json(static_cast<double>(g.ok) / static_cast<double>(g.ok + g.failed))
               : nlohmann::json(nullptr);
  };
  // The pass rate's exact 95% (Clopper-Pearson) interval.
  auto pass_ci = [](const Group& g) {
    // In double throughout: the default policy's long double would bring in
    // a static initializer that valgrind (which runs long double as double)
    // cannot run, and the profiles in benchmarks/ run under valgrind.
    using B = boost::math::binomial_distribution<
        double, boost::math::policies::policy<boost::math::policies::promote_double<false>>>;
    const auto n = static_cast<double>(g.ok + g.failed), k = static_cast<double>(g.ok);
    if (n == 0) return nlohmann::json(nullptr);
    return nlohmann::json::array(
        {B::find_lower_bound_on_p(n, k, 0.025), B::find_upper_bound_on_p(n, k, 0.025)});
  };
  nlohmann::json tools = nlohmann::json::object();
  for (auto [name, v] : tool_ms_) {
    std::sort(v.begin(), v.end());
    tools[name] = {{"calls", v.size()}, {"p50_ms", nearest_rank(v, 50)}, {"p99_ms", nearest_rank(v, 99)}};
  }
  nlohmann::json by_class = nlohmann::json::object();
  for (std::size_t c = 0; c < classes_.size() && c < set_.by_class.size(); ++c) {
    if (!set_.by_class[c]) continue;
    const auto it = by_class_.find(classes_[c]);
    const Group g = it == by_class_.end() ? Group{} : it->second;
    nlohmann::json j = {{"tasks", g.tasks},
                        {"ok", g.ok},
                        {"failed", g.failed},
                        {"cancelled", g.cancelled},
                        {"pass_rate", pass_rate(g)},
                        {"pass_rate_ci95", pass_ci(g)},
                        {"completion_ms", completion(g.completion_ms)}};
    const TaskSlo& slo = set_.slo_by_class[c];
    if (slo.task_ms || slo.pass_rate) {
      nlohmann::json v = {{"percentile", slo.percentile}};
      bool met = true;
      if (slo.task_ms) {
        // Failed tasks miss the completion SLO: the percentile is over every finished task.
        std::vector<double> all = g.completion_ms;
        for (std::uint64_t k = 0; k < g.failed; ++k) all.push_back(std::numeric_limits<double>::infinity());
        std::sort(all.begin(), all.end());
        const double at =
            all.empty() ? std::numeric_limits<double>::infinity() : nearest_rank(all, slo.percentile);
        v["task_ms"] = *slo.task_ms;
        v["task_ms_at_percentile"] = std::isfinite(at) ? nlohmann::json(at) : nlohmann::json(nullptr);
        met &= at <= *slo.task_ms;
      }
      if (slo.pass_rate) {
        v["pass_rate"] = *slo.pass_rate;
        const auto pr = pass_rate(g);
        met &= !pr.is_null() && pr.get<double>() >= *slo.pass_rate;
      }
      v["met"] = met;
      j["slo"] = std::move(v);
    }
    by_class[classes_[c]] = std::move(j);
  }
  std::vector<double> warm = warmup_ms_;
  std::sort(warm.begin(), warm.end());
  std::vector<double> judge_ms = judge_ms_;
  std::sort(judge_ms.begin(), judge_ms.end());
  const double span_s = last_end_ > first_sched_ && first_sched_ >= 0
                            ? static_cast<double>(last_end_ - first_sched_) / 1e9
                            : 0.0;
  return {
      {"tasks", all_.tasks},
      {"goodput",
       {{"tasks", good_},
        {"per_s", span_s > 0 ? nlohmann::json(static_cast<double>(good_) / span_s) : nlohmann::json(nullptr)},
        {"span_s", span_s}}},
      {"judge",
       {{"judged", judged_},
        {"passed", judge_pass_},
        {"rejected", judge_reject_},
        {"errors", judge_errors_},
        {"latency_p50_ms",
         judge_ms.empty() ? nlohmann::json(nullptr) : nlohmann::json(nearest_rank(judge_ms, 50))},
        {"latency_p99_ms",
         judge_ms.empty() ? nlohmann::json(nullptr) : nlohmann::json(nearest_rank(judge_ms, 99))}}},
      {"ok", all_.ok},
      {"failed", all_.failed},
      {"cancelled", all_.cancelled},
      {"pass_rate", pass_rate(all_)},
      {"pass_rate_ci95", pass_ci(all_)},
      {"completion_ms", completion(all_.completion_ms)},
      {"failures_by_class", failures_by_class_},
      {"tasks_failed_by_class", tasks_failed_by_class_},
      {"failures_by_step", failures_by_step_},
      {"retried_by_class", retried_by_class_},
      {"per_task",
       {{"steps", steps_ / n},
        {"model_calls", model_calls_ / n},
        {"tool_calls", tool_calls_ / n},
        {"prompt_tokens", prompt_tokens_ / n},
        {"output_tokens", output_tokens_ / n}}},
      {"critical_path_ms",
       {{"model", cp_model_ / n},
        {"tool", cp_tool_ / n},
        {"client", cp_client_ / n},
        {"queue", cp_queue_ / n}}},
      {"tool_latency", tools},
      {"by_class", by_class},
      {"warmup",
       {{"tasks", warmup_},
        {"completion_p50_ms",
         warm.empty() ? nlohmann::json(nullptr) : nlohmann::json(nearest_rank(warm, 50))}}}};
}

TaskDriver::TaskDriver(const TaskSet& tasks, const workload::Workload& w, TaskDriverSettings settings,
                       RecordQueue& requests, TaskRecordQueue& out)
    : impl_(std::make_unique<Impl>(*this, tasks, w, std::move(settings), requests, out)) {}

TaskDriver::~TaskDriver() {
  if (impl_->thread.joinable()) {
    stop_sending();
    cancel_in_flight();
    join();
  }
}

void TaskDriver::start(Nanos epoch) {
  impl_->epoch = epoch;
  impl_->guard.emplace(impl_->ioc.get_executor());
  asio::post(impl_->ioc, [this] { impl_->arm(); });
  impl_->thread = std::thread([this] { impl_->ioc.run(); });
}

bool TaskDriver::wait_for(int timeout_ms) {
  std::unique_lock lock(impl_->done_mutex);
  return impl_->done_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                 [this] { return impl_->finished; });
}

void TaskDriver::stop_sending() {
  asio::post(impl_->ioc, [this] {
    impl_->stopping = true;
    impl_->arrival_timer.cancel();
    not_started_ += impl_->set.arrivals.size() - impl_->next_arrival;
    impl_->end_idle_tasks();
    impl_->check_finished();
  });
}

void TaskDriver::cancel_in_flight() {
  asio::post(impl_->ioc, [this] {
    impl_->stopping = true;
    impl_->model_client.cancel_all();
    impl_->tool_client.cancel_all();
    if (impl_->judge_client) impl_->judge_client->cancel_all();
    for (auto& [id, t] : impl_->tasks)
      for (auto& st : t->steps)
        if (st.backoff) st.backoff->cancel();
    for (auto& [u, c] : impl_->url_clients) c->cancel_all();
    impl_->end_idle_tasks();
  });
}

void TaskDriver::join() {
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace tokenscope::bench
