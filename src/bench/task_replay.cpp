#include "bench/task_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/text_reader.h"
#include "rundir/readers.h"
#include "serve/tools.h"

namespace tokenscope::bench {

namespace {

// Where a record's problems are reported: the file and its line.
struct LineReader {
  const std::string& file;
  std::size_t line;

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw InputError(file, line, field, what);
  }
};

struct RecordedStep {
  std::string id, kind, name;
  std::vector<std::string> after;
  bool after_given = false;
  std::optional<Nanos> ready, start, end;
  std::optional<Nanos> latency;  // a tool call's time per attempt
  std::uint32_t prompt_tokens = 0, output_tokens = 0, cached_tokens = 0, top_k = 3;
  bool skipped = false;  // never ran, or a model call without its counts: left out
};

RecordedStep read_step(const LineReader& rd, const rundir::TaskStepRecord& s, const std::string& f) {
  RecordedStep r;
  r.id = s.id;
  if (r.id.empty()) rd.fail(f + ".id", "expected a non-empty step id");
  r.kind = s.kind;
  r.name = s.name;
  if (r.kind == "tool" && r.name.empty()) rd.fail(f + ".name", "missing (the tool's name)");
  if (r.kind == "retrieval" && r.name.empty()) r.name = "search";
  if (r.kind != "model" && !serve::valid_tool_name(r.name))
    rd.fail(f + ".name", "expected a tool name of letters, digits, _ and - (at most 64)");
  r.skipped = s.outcome == "skipped" || s.outcome == "waiting";
  r.after = s.after;
  r.after_given = s.has_after;
  if (s.t_ready >= 0) r.ready = s.t_ready;
  if (s.t_start >= 0) r.start = s.t_start;
  if (s.t_end >= 0) r.end = s.t_end;
  // A tool's latency: its last exchange when recorded, else the step's time per attempt (retries' backoff in
  // it).
  if (s.t_sent >= 0 && s.t_returned >= s.t_sent)
    r.latency = s.t_returned - s.t_sent;
  else if (r.start && r.end)
    r.latency = (*r.end - *r.start) / std::clamp<std::uint32_t>(s.attempts, 1, 1000);
  if (r.kind == "model" && !r.skipped) {
    constexpr std::int64_t kMax = 10'000'000;
    // A call that failed (a timeout, an HTTP error, a cancel) has no server counts: left out, as a skipped
    // step.
    if (s.prompt_tokens < 0 && (s.outcome == "failed" || s.outcome == "running")) {
      r.skipped = true;
      return r;
    }
    if (s.prompt_tokens < 1 || s.prompt_tokens > kMax)
      rd.fail(f + ".prompt_tokens", s.prompt_tokens < 0 ? "missing (a model call's prompt tokens, 1 or more)"
                                                        : "expected 1 to 10,000,000 tokens");
    if (s.output_tokens > kMax) rd.fail(f + ".output_tokens", "expected at most 10,000,000 tokens");
    r.prompt_tokens = static_cast<std::uint32_t>(s.prompt_tokens);
    r.output_tokens = static_cast<std::uint32_t>(std::max<std::int64_t>(1, s.output_tokens));
    r.cached_tokens =
        static_cast<std::uint32_t>(std::clamp<std::int64_t>(s.cached_tokens, 0, s.prompt_tokens));
  }
  if (r.kind == "retrieval" && !s.documents.empty())
    r.top_k = static_cast<std::uint32_t>(std::clamp<std::size_t>(s.documents.size(), 1, 50));
  return r;
}

// The replay's tool of this name (a search for retrievals), declared on first use.
std::uint32_t replay_tool(const LineReader& rd, const std::string& field, const std::string& name,
                          bool search, TaskCatalog& catalog) {
  if (const auto found = catalog.find(name)) {
    if ((catalog.tools[*found].kind == ToolSpec::Kind::kSearch) != search)
      rd.fail(field, fmt::format("{} is a tool in one step and a search in another", quote_input(name)));
    return *found;
  }
  if (catalog.tools.size() >= kMaxTools)
    rd.fail(field, fmt::format("more than {} distinct tools", kMaxTools));
  ToolSpec tool;
  tool.name = name;
  tool.description = "replayed";
  tool.kind = search ? ToolSpec::Kind::kSearch : ToolSpec::Kind::kJsonApi;
  tool.parameters =
      search ? nlohmann::json{{"type", "object"},
                              {"properties",
                               {{"query", {{"type", "string"}}}, {"top_k", {{"type", "integer"}}}}},
                              {"required", {"query"}}}
             : nlohmann::json{{"type", "object"}};
  tool.parameters_checker = std::make_shared<const JsonSchema>(tool.parameters, "replayed tool " + name);
  if (!search) {
    tool.response = {
        {"type", "object"}, {"properties", {{"ok", {{"type", "boolean"}}}}}, {"required", {"ok"}}};
    tool.response_checker = std::make_shared<const JsonSchema>(tool.response, "replayed tool " + name);
  }
  catalog.tools.push_back(std::move(tool));
  return static_cast<std::uint32_t>(catalog.tools.size() - 1);
}

// The recorded steps as a scripted task: `after` resolved (each id once) or
// inferred where absent, checked for unknown ids and cycles; skipped steps
// (and every step after one) left out. Linear in the steps and their edges.
TaskSpec build_task(const LineReader& rd, const std::vector<RecordedStep>& steps, TaskCatalog& catalog,
                    std::size_t& left_out) {
  const std::size_t n = steps.size();
  std::map<std::string, std::uint32_t> index;
  for (std::size_t i = 0; i < n; ++i)
    if (!index.emplace(steps[i].id, static_cast<std::uint32_t>(i)).second)
      rd.fail(fmt::format("steps[{}].id", i), fmt::format("{} names two steps", quote_input(steps[i].id)));
  std::vector<std::vector<std::uint32_t>> after(n), next(n);
  std::vector<char> seen(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& s = steps[i];
    std::fill(seen.begin(), seen.end(), 0);
    const auto add = [&](std::uint32_t k) {
      if (seen[k]) return;  // each predecessor once: the driver waits for each once
      seen[k] = 1;
      after[i].push_back(k);
      next[k].push_back(static_cast<std::uint32_t>(i));
    };
    if (s.after_given) {
      for (std::size_t k = 0; k < s.after.size(); ++k) {
        const auto it = index.find(s.after[k]);
        if (it == index.end() || it->second == i)
          rd.fail(fmt::format("steps[{}].after[{}]", i, k),
                  fmt::format("unknown step {} (expected the id of another step of this task)",
                              quote_input(s.after[k])));
        add(it->second);
      }
      continue;
    }
    // No after: the steps that had ended when it became ready (ties: the earlier in the file).
    const auto ready = s.ready ? s.ready : s.start;
    if (!ready) continue;
    for (std::size_t k = 0; k < n; ++k)
      if (k != i && steps[k].end && (*steps[k].end < *ready || (*steps[k].end == *ready && k < i)))
        add(static_cast<std::uint32_t>(k));
  }
  // An order in which each step comes after its after (Kahn's); what is left is a cycle.
  std::vector<std::uint32_t> pending(n), order, ready;
  for (std::size_t i = 0; i < n; ++i)
    if ((pending[i] = static_cast<std::uint32_t>(after[i].size())) == 0)
      ready.push_back(static_cast<std::uint32_t>(i));
  std::reverse(ready.begin(), ready.end());
  while (!ready.empty()) {
    const auto i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (const auto k : next[i])
      if (--pending[k] == 0) ready.push_back(k);
  }
  if (order.size() != n)
    rd.fail("steps", "the steps' after lists form a cycle (a task's steps must form a graph without one)");
  // Left out, in that order: skipped steps and the steps after them.
  std::vector<char> out(n);
  for (const auto i : order) {
    out[i] = steps[i].skipped;
    for (const auto a : after[i]) out[i] |= out[a];
    left_out += out[i] ? 1 : 0;
  }
  std::vector<std::uint32_t> kept(n, 0);
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (!out[i]) kept[i] = m++;
  // A model call's prompt words shared with the task's later calls: as many
  // as any of them found cached (at most its own), and its own cache hit.
  std::vector<std::uint32_t> shared(n, 0);
  std::uint32_t later = 0;  // the largest cached count of the calls after it in the file
  for (std::size_t i = n; i-- > 0;) {
    if (out[i] || steps[i].kind != "model") continue;
    shared[i] = std::max(steps[i].cached_tokens, std::min(later, steps[i].prompt_tokens));
    later = std::max(later, steps[i].cached_tokens);
  }
  TaskSpec t;
  t.mode = TaskSpec::Mode::kScripted;
  t.input_len = workload::parse_length_spec("fixed:1", "replay", workload::LengthRole::kInput);
  for (std::size_t i = 0; i < n; ++i) {
    if (out[i]) continue;
    const auto& r = steps[i];
    StepSpec s;
    s.id = r.id;
    s.line = rd.line;
    std::string deps;  // the outputs of the steps it waited for: a replayed retrieval's query
    for (const auto a : after[i]) {
      s.after.push_back(kept[a]);
      deps += (deps.empty() ? "{{" : " {{") + steps[a].id + "}}";
    }
    s.replay = StepReplay{};
    if (r.kind == "model") {
      s.kind = StepSpec::Kind::kModel;
      s.replay->prompt_tokens = r.prompt_tokens;
      s.replay->cached_tokens = shared[i];
      s.output_len = workload::parse_length_spec(fmt::format("fixed:{}", r.output_tokens), "replay",
                                                 workload::LengthRole::kOutput);
    } else {
      const bool search = r.kind == "retrieval";
      s.kind = search ? StepSpec::Kind::kRetrieve : StepSpec::Kind::kTool;
      s.tool = replay_tool(rd, fmt::format("steps[{}].name", i), r.name, search, catalog);
      if (search) {
        s.query = deps.empty() ? std::string("replay") : deps;
        s.top_k = r.top_k;
      } else {
        s.arguments = nlohmann::json::object();
      }
      if (r.latency)
        s.replay->latency_ms = static_cast<std::uint32_t>(
            std::min<Nanos>(600'000, (*r.latency + kNanosPerMilli / 2) / kNanosPerMilli));
    }
    t.steps.push_back(std::move(s));
  }
  for (const auto i : order)
    if (!out[i]) t.order.push_back(kept[i]);
  return t;
}

}  // namespace

bool is_task_recording(const std::string& path) {
  try {
    TextReader r = TextReader::open_regular(path, "workload file");
    // Its first line is a task record: an object with "id" and "steps" (a
    // workload written as JSON, which YAML reads too, has "classes").
    const std::string_view head = r.peek(std::size_t{1} << 20);
    const auto at = head.find_first_not_of(" \t\r\n");
    if (at == std::string_view::npos || head[at] != '{') return false;
    const std::string_view line = head.substr(at, head.find('\n', at) - at);
    if (json_too_deep_at(line) != std::string_view::npos) return false;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    return j.is_object() && j.contains("steps") && j.contains("id");
  } catch (const std::exception&) {
    return false;  // the YAML reader says what is wrong with the file
  }
}

BenchWorkload parse_task_replay(std::string_view text, const std::string& file, double time_scale) {
  if (!(time_scale > 0) || !std::isfinite(time_scale))
    throw UsageError("--time-scale: expected a number > 0");
  struct Recorded {
    Nanos t;
    std::uint16_t cls;
    std::uint32_t tenant;
    bool warmup;
    std::shared_ptr<const TaskSpec> spec;
  };
  std::vector<Recorded> tasks;
  BenchWorkload out;
  auto& w = out.workload;
  w.tenants.clear();
  w.classes.clear();
  auto set = std::make_shared<TaskSet>();
  std::map<std::string, std::uint16_t> classes;
  std::map<std::string, std::uint32_t> tenants;
  std::set<std::uint64_t> ids;
  std::size_t left_out = 0, total_steps = 0;
  std::optional<Nanos> first_seen;
  rundir::TasksReader reader(text, file, rundir::BadLines::kFail);
  rundir::TaskRecord rec;
  while (reader.next(rec)) {
    const LineReader rd{file, static_cast<std::size_t>(reader.stats().lines)};
    if (tasks.size() >= kMaxReplayTasks) rd.fail("", fmt::format("more than {} tasks", kMaxReplayTasks));
    if (!ids.insert(rec.id).second) rd.fail("id", fmt::format("task {} is recorded twice", rec.id));
    if (rec.task_class.size() > 128) rd.fail("class", "longer than 128 bytes");
    const std::string tenant = rec.tenant.empty() ? std::string("default") : rec.tenant;
    if (tenant.size() > 128) rd.fail("tenant", "longer than 128 bytes");
    const Nanos t = rec.t_sched >= 0 ? rec.t_sched : rec.t_start;
    if (t < 0) rd.fail("t_sched_ns", "missing (the task's arrival on the run's clock; or t_start_ns)");
    if (rec.steps.empty() || rec.steps.size() > kMaxTaskSteps)
      rd.fail("steps", fmt::format("expected a list of 1 to {} steps", kMaxTaskSteps));
    std::vector<RecordedStep> steps;
    for (std::size_t k = 0; k < rec.steps.size(); ++k)
      steps.push_back(read_step(rd, rec.steps[k], fmt::format("steps[{}]", k)));
    auto spec = std::make_shared<const TaskSpec>(build_task(rd, steps, set->catalog, left_out));
    if (spec->steps.empty()) continue;  // nothing of it ran
    total_steps += spec->steps.size();
    if (total_steps > kMaxReplaySteps)
      rd.fail("steps", fmt::format("more than {} steps in all the tasks", kMaxReplaySteps));
    if (t - (first_seen ? *first_seen : t) > kMaxReplaySpan ||
        (first_seen && *first_seen - t > kMaxReplaySpan))
      rd.fail(rec.t_sched >= 0 ? "t_sched_ns" : "t_start_ns",
              fmt::format("{} ns from the first task's arrival: a recording spans at most 30 days",
                          t - *first_seen));
    if (!first_seen) first_seen = t;
    const std::string& cls = rec.task_class;
    if (!classes.count(cls)) {
      if (classes.size() >= 65'535) rd.fail("class", "more than 65,535 classes");
      classes.emplace(cls, static_cast<std::uint16_t>(w.classes.size()));
      w.classes.push_back(cls);
      set->by_class.push_back(spec);  // a class's first task stands for it (the summary's classes)
      set->slo_by_class.emplace_back();
    }
    if (!tenants.count(tenant)) {
      tenants.emplace(tenant, static_cast<std::uint32_t>(w.tenants.size()));
      w.tenants.push_back(tenant);
    }
    tasks.push_back({t, classes.at(cls), tenants.at(tenant), rec.warmup, std::move(spec)});
  }
  if (tasks.empty())
    throw InputError(file, 1, "", "no task to replay (expected lines of tasks.jsonl with steps that ran)");
  std::stable_sort(tasks.begin(), tasks.end(),
                   [](const Recorded& a, const Recorded& b) { return a.t < b.t; });
  const Nanos first = tasks.front().t;
  for (const auto& r : tasks) {
    TaskArrival a;
    a.t = static_cast<Nanos>(std::llround(static_cast<double>(r.t - first) / time_scale));
    a.id = set->arrivals.size();
    a.task_class = r.cls;
    a.tenant = r.tenant;
    a.input_tokens = 1;
    a.spec = r.spec;
    set->arrivals.push_back(std::move(a));
  }
  // The recording's warm-up tasks were its first: as many are warm-up again.
  while (set->warmup_tasks < tasks.size() && tasks[set->warmup_tasks].warmup) ++set->warmup_tasks;
  std::size_t model_calls = 0, tool_calls = 0;
  for (const auto& a : set->arrivals)
    for (const auto& s : a.spec->steps) (s.kind == StepSpec::Kind::kModel ? model_calls : tool_calls) += 1;
  w.description = fmt::format(
      "{}: a replay of {} recorded tasks ({} model calls, {} tool calls and retrievals) "
      "in {} classes, {} tenants, time scale {}",
      file, tasks.size(), model_calls, tool_calls, w.classes.size(), w.tenants.size(), time_scale);
  out.tasks = set;
  out.effective = {{"file", file},
                   {"description", w.description},
                   {"replay",
                    {{"tasks", tasks.size()},
                     {"steps_left_out", left_out},
                     {"model_calls", model_calls},
                     {"tool_calls", tool_calls},
                     {"time_scale", time_scale},
                     {"span_s", static_cast<double>(tasks.back().t - first) / 1e9 / time_scale}}},
                   {"requests", 0},
                   {"rate_rps", tasks.back().t > first
                                    ? static_cast<double>(tasks.size() - 1) /
                                          (static_cast<double>(tasks.back().t - first) / 1e9 / time_scale)
                                    : 0.0},
                   {"tenants", w.tenants},
                   {"classes", w.classes}};
  return out;
}

BenchWorkload load_task_replay(const std::string& path, double time_scale) {
  return parse_task_replay(read_regular_file(path, "tasks.jsonl to replay", kMaxReplayBytes), path,
                           time_scale);
}

}  // namespace tokenscope::bench
