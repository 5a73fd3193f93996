#include "bench/task_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "core/error.h"
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
  std::uint32_t attempts = 1;
  std::uint32_t prompt_tokens = 0, output_tokens = 0, cached_tokens = 0, top_k = 3;
  std::optional<int> judge_min_score;
  bool skipped = false;
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
  r.attempts = std::clamp<std::uint32_t>(s.attempts, 1, 1000);
  if (r.kind == "model" && !r.skipped) {
    // A replayed call needs both counts; a prompt of 0 tokens is a recording's mistake.
    constexpr std::int64_t kMax = 10'000'000;
    if (s.prompt_tokens < 1 || s.prompt_tokens > kMax)
      rd.fail(f + ".prompt_tokens", s.prompt_tokens < 0 ? "missing (a model call's prompt tokens, 1 or more)"
                                                        : "expected 1 to 10,000,000 tokens");
    if (s.output_tokens < 0 || s.output_tokens > kMax)
      rd.fail(f + ".output_tokens", s.output_tokens < 0 ? "missing (a model call's output tokens)"
                                                        : "expected at most 10,000,000 tokens");
    r.prompt_tokens = static_cast<std::uint32_t>(s.prompt_tokens);
    r.output_tokens = static_cast<std::uint32_t>(s.output_tokens);
    r.cached_tokens = static_cast<std::uint32_t>(std::clamp<std::int64_t>(s.cached_tokens, 0, kMax));
    if (s.judge_min_score > 0) r.judge_min_score = s.judge_min_score;
  }
  if (r.kind == "retrieval" && !s.documents.empty())
    r.top_k = static_cast<std::uint32_t>(std::clamp<std::size_t>(s.documents.size(), 1, 50));
  return r;
}

// The recorded steps as a scripted task: skipped ones (and those after them)
// left out, `after` inferred where absent, checked for unknown ids and cycles.
TaskSpec build_task(const LineReader& rd, std::vector<RecordedStep> steps, TaskCatalog& catalog) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (!index.emplace(steps[i].id, i).second)
      rd.fail(fmt::format("steps[{}].id", i), fmt::format("{} names two steps", quote_input(steps[i].id)));
  for (std::size_t i = 0; i < steps.size(); ++i) {
    auto& s = steps[i];
    if (s.after_given) {
      for (std::size_t k = 0; k < s.after.size(); ++k)
        if (!index.count(s.after[k]) || s.after[k] == s.id)
          rd.fail(fmt::format("steps[{}].after[{}]", i, k),
                  fmt::format("unknown step {} (expected the id of another step of this task)",
                              quote_input(s.after[k])));
      continue;
    }
    // No after: the steps that had ended when it became ready.
    const auto ready = s.ready ? s.ready : s.start;
    if (!ready) continue;
    for (const auto& o : steps)
      if (&o != &s && o.end && *o.end <= *ready) s.after.push_back(o.id);
  }
  // Left out: skipped steps, and every step after one left out.
  std::set<std::string> out;
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& s : steps) {
      if (out.count(s.id)) continue;
      bool drop = s.skipped;
      for (const auto& a : s.after) drop |= out.count(a) > 0;
      if (drop) changed |= out.insert(s.id).second;
    }
  }
  TaskSpec t;
  t.mode = TaskSpec::Mode::kScripted;
  t.input_len = workload::parse_length_spec("fixed:1", "replay", workload::LengthRole::kInput);
  std::map<std::string, std::uint32_t> kept;
  for (const auto& s : steps)
    if (!out.count(s.id)) kept.emplace(s.id, static_cast<std::uint32_t>(kept.size()));
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& r = steps[i];
    if (out.count(r.id)) continue;
    StepSpec s;
    s.id = r.id;
    s.line = rd.line;
    std::string deps;  // the outputs of the steps it waited for: a replayed retrieval's query
    for (const auto& a : r.after) {
      s.after.push_back(kept.at(a));
      deps += (deps.empty() ? "{{" : " {{") + a + "}}";
    }
    if (r.kind == "model") {
      s.kind = StepSpec::Kind::kModel;
      s.replay = StepReplay{
          .prompt_tokens = r.prompt_tokens, .cached_tokens = r.cached_tokens, .latency_ms = {}};
      s.output_len =
          workload::parse_length_spec(fmt::format("fixed:{}", std::max<std::uint32_t>(1, r.output_tokens)),
                                      "replay", workload::LengthRole::kOutput);
      if (r.judge_min_score) s.judge = JudgeSpec{.rubric = {}, .min_score = *r.judge_min_score};
    } else {
      const bool search = r.kind == "retrieval";
      auto found = catalog.find(r.name);
      if (found && (catalog.tools[*found].kind == ToolSpec::Kind::kSearch) != search)
        rd.fail(fmt::format("steps[{}].name", i),
                fmt::format("{} is a tool in one step and a search in another", quote_input(r.name)));
      if (!found) {
        if (catalog.tools.size() >= kMaxTools)
          rd.fail(fmt::format("steps[{}].name", i), fmt::format("more than {} distinct tools", kMaxTools));
        ToolSpec tool;
        tool.name = r.name;
        tool.description = "replayed";
        tool.kind = search ? ToolSpec::Kind::kSearch : ToolSpec::Kind::kJsonApi;
        tool.parameters =
            search ? nlohmann::json{{"type", "object"},
                                    {"properties",
                                     {{"query", {{"type", "string"}}}, {"top_k", {{"type", "integer"}}}}},
                                    {"required", {"query"}}}
                   : nlohmann::json{{"type", "object"}};
        tool.parameters_checker =
            std::make_shared<const JsonSchema>(tool.parameters, "replayed tool " + r.name);
        if (!search) {
          tool.response = {
              {"type", "object"}, {"properties", {{"ok", {{"type", "boolean"}}}}}, {"required", {"ok"}}};
          tool.response_checker =
              std::make_shared<const JsonSchema>(tool.response, "replayed tool " + r.name);
        }
        catalog.tools.push_back(std::move(tool));
        found = static_cast<std::uint32_t>(catalog.tools.size() - 1);
      }
      s.kind = search ? StepSpec::Kind::kRetrieve : StepSpec::Kind::kTool;
      s.tool = *found;
      if (search) {
        s.query = deps.empty() ? std::string("replay") : deps;
        s.top_k = r.top_k;
      } else {
        s.arguments = nlohmann::json::object();
      }
      s.replay = StepReplay{};
      if (r.start && r.end)
        s.replay->latency_ms = static_cast<std::uint32_t>(std::min<double>(
            600'000, std::llround(static_cast<double>(*r.end - *r.start) / 1e6 / r.attempts)));
    }
    t.steps.push_back(std::move(s));
  }
  if (t.steps.empty()) return t;
  // An order in which each step comes after its after (Kahn's); what is left is a cycle.
  std::vector<std::uint32_t> pending(t.steps.size());
  for (std::size_t i = 0; i < t.steps.size(); ++i)
    pending[i] = static_cast<std::uint32_t>(t.steps[i].after.size());
  std::vector<std::uint32_t> ready;
  for (std::uint32_t i = 0; i < pending.size(); ++i)
    if (pending[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    const auto i = ready.back();
    ready.pop_back();
    t.order.push_back(i);
    for (std::uint32_t k = 0; k < t.steps.size(); ++k)
      for (const auto a : t.steps[k].after)
        if (a == i && --pending[k] == 0) ready.push_back(k);
  }
  if (t.order.size() != t.steps.size())
    rd.fail("steps", "the steps' after lists form a cycle (a task's steps must form a graph without one)");
  return t;
}

}  // namespace

bool is_task_recording(const std::string& path) {
  try {
    TextReader r = TextReader::open_regular(path, "workload file");
    const std::string_view head = r.peek(4096);
    const auto at = head.find_first_not_of(" \t\r\n");
    return at != std::string_view::npos && head[at] == '{';
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
    auto spec = std::make_shared<const TaskSpec>(build_task(rd, std::move(steps), set->catalog));
    if (spec->steps.empty()) continue;  // nothing of it ran
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
