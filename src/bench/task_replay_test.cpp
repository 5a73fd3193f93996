// Replaying a recorded tasks.jsonl, as read: the graphs (after given, and
// inferred from the times), the arrivals and the time scale, the token
// counts and tool latencies, warm-up, skipped steps left out; bad
// recordings refused with file, line and field. The round trip through the
// driver is in task_driver_test.cpp.
#include "bench/task_replay.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace tokenscope::bench {
namespace {

const char* kTwoTasks =
    R"({"id":7,"class":"research","outcome":"ok","tenant":"acme","t_sched_ns":5000000000,"warmup":true,"steps":[)"
    R"({"id":"plan","kind":"model","name":"model","t_ready_ns":5000000000,"t_start_ns":5000000000,"t_end_ns":5300000000,"prompt_tokens":64,"output_tokens":20,"cached_tokens":16},)"
    R"({"id":"r1","kind":"retrieval","name":"web_search","after":["plan"],"t_start_ns":5300000000,"t_end_ns":5350000000,"documents":["doc-1","doc-2"]},)"
    R"({"id":"api","kind":"tool","name":"weather","after":["plan"],"attempts":2,"t_start_ns":5300000000,"t_end_ns":5500000000},)"
    R"({"id":"sum","kind":"model","after":["r1","api"],"t_start_ns":5500000000,"t_end_ns":6000000000,"prompt_tokens":900,"output_tokens":150,"judge":{"min_score":4,"outcome":"pass"}},)"
    R"({"id":"late","kind":"tool","name":"weather","after":["sum"],"outcome":"skipped"}]})"
    "\n\n"
    R"({"id":3,"class":"react","outcome":"ok","t_start_ns":4000000000,"steps":[)"
    R"({"id":"model-0","kind":"model","t_ready_ns":4000000000,"t_start_ns":4000000000,"t_end_ns":4100000000,"prompt_tokens":40,"output_tokens":0},)"
    R"({"id":"calc-1","kind":"tool","name":"calc","t_ready_ns":4100000000,"t_start_ns":4100000000,"t_end_ns":4103000000},)"
    R"({"id":"model-2","kind":"model","t_ready_ns":4103000000,"t_start_ns":4103000000,"t_end_ns":4200000000,"prompt_tokens":80,"output_tokens":9,"cached_tokens":32}]})"
    "\n";

const StepSpec& step(const TaskSpec& t, const std::string& id) {
  for (const auto& s : t.steps)
    if (s.id == id) return s;
  throw std::runtime_error("no step " + id);
}

TEST(TaskReplay, ReadsTheGraphsArrivalsCountsAndLatencies) {
  const auto b = parse_task_replay(kTwoTasks, "tasks.jsonl", 2.0);
  ASSERT_TRUE(b.tasks);
  const TaskSet& set = *b.tasks;
  EXPECT_EQ(b.workload.classes, (std::vector<std::string>{"research", "react"}));
  EXPECT_EQ(b.workload.tenants, (std::vector<std::string>{"acme", "default"}));
  EXPECT_TRUE(b.workload.requests.empty());
  ASSERT_EQ(set.arrivals.size(), 2u);
  // In time order (the react task came first), offsets halved by the time scale.
  EXPECT_EQ(set.arrivals[0].t, 0);
  EXPECT_EQ(set.arrivals[1].t, 500'000'000);
  EXPECT_EQ(b.workload.classes[set.arrivals[0].task_class], "react");
  EXPECT_EQ(b.workload.tenants[set.arrivals[1].tenant], "acme");
  EXPECT_EQ(set.warmup_tasks, 0u);  // the warm-up task was not the first
  // The research task: the skipped step left out, the rest as recorded.
  const TaskSpec& r = *set.arrivals[1].spec;
  ASSERT_EQ(r.steps.size(), 4u);
  EXPECT_EQ(r.order.size(), 4u);
  const auto& plan = step(r, "plan");
  ASSERT_TRUE(plan.replay);
  EXPECT_EQ(plan.replay->prompt_tokens, 64u);
  EXPECT_EQ(plan.replay->cached_tokens, 16u);
  EXPECT_EQ(plan.output_len.spec, "fixed:20");
  const auto& sum = step(r, "sum");
  EXPECT_EQ(sum.after.size(), 2u);
  EXPECT_FALSE(sum.judge);  // not replayed: filler words are nothing to grade
  const auto& r1 = step(r, "r1");
  EXPECT_EQ(r1.kind, StepSpec::Kind::kRetrieve);
  EXPECT_EQ(r1.top_k, 2u);
  EXPECT_EQ(r1.replay->latency_ms, 50u);
  EXPECT_EQ(set.catalog.tools[r1.tool].name, "web_search");
  EXPECT_EQ(set.catalog.tools[r1.tool].kind, ToolSpec::Kind::kSearch);
  const auto& api = step(r, "api");
  EXPECT_EQ(api.replay->latency_ms, 100u);  // 200 ms over two attempts
  EXPECT_EQ(set.catalog.tools[api.tool].name, "weather");
  // The react task: no after recorded, so inferred from the times; 0 output tokens asks for 1.
  const TaskSpec& q = *set.arrivals[0].spec;
  ASSERT_EQ(q.steps.size(), 3u);
  EXPECT_TRUE(step(q, "model-0").after.empty());
  EXPECT_EQ(step(q, "model-0").output_len.spec, "fixed:1");
  ASSERT_EQ(step(q, "calc-1").after.size(), 1u);
  EXPECT_EQ(q.steps[step(q, "calc-1").after[0]].id, "model-0");
  EXPECT_EQ(step(q, "model-2").after.size(), 2u);  // both had ended by its start
  // The first call's words the second found cached (32) are shared: the first's 40 hold them.
  EXPECT_EQ(step(q, "model-0").replay->cached_tokens, 32u);
  EXPECT_EQ(step(q, "model-2").replay->cached_tokens, 32u);
  EXPECT_EQ(set.judged_steps(), 0u);
  EXPECT_EQ(b.effective["replay"]["steps_left_out"], 1);
  EXPECT_EQ(b.effective["replay"]["tasks"], 2);
  EXPECT_EQ(b.effective["replay"]["model_calls"], 4);
  EXPECT_EQ(b.effective["replay"]["tool_calls"], 3);
}

// Edge cases a recording may hold: an after list naming a step twice (the
// step waits for it once), zero-length steps at one time without after (no
// cycle: ties go to the earlier in the file), a failed model call without
// the server's counts (left out, with what came after it), a tool's own
// exchange time over its step's time per attempt.
TEST(TaskReplay, RepeatsTiesAndFailedCallsAreReadAsTheyRan) {
  const std::string line =
      R"({"id":1,"class":"c","outcome":"failed","t_sched_ns":0,"steps":[)"
      R"({"id":"a","kind":"tool","name":"t","t_start_ns":100,"t_end_ns":100},)"
      R"({"id":"b","kind":"tool","name":"t","t_start_ns":100,"t_end_ns":100},)"
      R"({"id":"c","kind":"tool","name":"t","after":["a","a","b"],"attempts":3,"t_start_ns":0,"t_end_ns":30000000,)"
      R"("t_sent_ns":20000000,"t_returned_ns":27000000},)"
      R"({"id":"m","kind":"model","outcome":"failed","after":["c"],"t_start_ns":30000000,"t_end_ns":30000010},)"
      R"({"id":"n","kind":"tool","name":"t","after":["m"],"outcome":"skipped"}]})";
  const auto b = parse_task_replay(line + "\n", "t.jsonl");
  const TaskSpec& t = *b.tasks->arrivals[0].spec;
  ASSERT_EQ(t.steps.size(), 3u);
  EXPECT_EQ(step(t, "b").after.size(), 1u);  // a ended at b's start, and came first
  EXPECT_TRUE(step(t, "a").after.empty());
  EXPECT_EQ(step(t, "c").after.size(), 2u);
  EXPECT_EQ(step(t, "c").replay->latency_ms, 7u);
  EXPECT_EQ(b.effective["replay"]["steps_left_out"], 2);
  // A task whose arrival is years after the first: refused, not waited for.
  const std::string far =
      R"({"id":2,"class":"c","outcome":"ok","t_sched_ns":9000000000000000000,"steps":[{"id":"a","kind":"tool","name":"t"}]})";
  try {
    parse_task_replay(line + "\n" + far + "\n", "t.jsonl");
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.line(), 2u);
    EXPECT_NE(std::string(e.what()).find("at most 30 days"), std::string::npos) << e.what();
  }
}

// A recording is told from a YAML workload by its first line: a task record,
// not a workload written as JSON (which YAML reads too).
TEST(TaskReplay, ARecordingIsToldFromAWorkloadFile) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("tokenscope_replay_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto write = [&](const char* name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  EXPECT_TRUE(is_task_recording(write("rec.jsonl", std::string("\n") + kTwoTasks)));
  EXPECT_FALSE(is_task_recording(write("json.yaml", R"({"num_requests": 3, "classes": [{"name": "c"}]})")));
  EXPECT_FALSE(is_task_recording(write("plain.yaml", "num_requests: 3\n")));
  EXPECT_FALSE(is_task_recording((dir / "missing").string()));
  std::filesystem::remove_all(dir);
}

TEST(TaskReplay, WarmUpTasksThatCameFirstAreWarmUpAgain) {
  const std::string two =
      R"({"id":0,"class":"c","outcome":"ok","t_sched_ns":0,"warmup":true,"steps":[{"id":"a","kind":"model","prompt_tokens":5,"output_tokens":5}]}
{"id":1,"class":"c","outcome":"ok","t_sched_ns":10,"steps":[{"id":"a","kind":"model","prompt_tokens":5,"output_tokens":5}]}
)";
  EXPECT_EQ(parse_task_replay(two, "t.jsonl").tasks->warmup_tasks, 1u);
}

TEST(TaskReplay, BadRecordingsAreRefusedWithLineAndField) {
  const std::string ok_line =
      R"({"id":0,"class":"c","outcome":"ok","t_sched_ns":0,"steps":[{"id":"a","kind":"model","prompt_tokens":5,"output_tokens":5}]})";
  struct Case {
    std::string text, field, needle;
    std::size_t line;
  };
  const Case cases[] = {
      {"", "", "no task to replay", 1},
      {"not json\n", "", "not JSON", 1},
      {ok_line + "\n" + ok_line + "\n", "id", "recorded twice", 2},
      {R"({"id":1,"class":"c","outcome":"ok","steps":[{"id":"a","kind":"model","prompt_tokens":5,"output_tokens":5}]})",
       "t_sched_ns", "missing", 1},
      {R"({"id":1,"class":"c","outcome":"ok","t_sched_ns":0,"steps":[]})", "steps", "expected a list of 1 to",
       1},
      {R"({"id":1,"class":"c","outcome":"ok","t_sched_ns":0,"steps":[{"id":"a","kind":"model","output_tokens":5}]})",
       "steps[0].prompt_tokens", "missing", 1},
      {R"({"id":1,"class":"c","outcome":"ok","t_sched_ns":0,"steps":[{"id":"a","kind":"think","prompt_tokens":5}]})",
       "steps[0].kind", "is not one of model, tool, retrieval", 1},
      {R"({"id":1,"class":"c","outcome":"ok","t_sched_ns":0,"steps":[{"id":"a","kind":"tool","name":"x","after":["b"]}]})",
       "steps[0].after[0]", "unknown step 'b'", 1},
      {R"({"id":1,"class":"c","outcome":"ok","t_sched_ns":0,"steps":[{"id":"a","kind":"tool","name":"x","after":["b"]},{"id":"b","kind":"tool","name":"x","after":["a"]}]})",
       "steps", "form a cycle", 1},
      {R"({"id":1,"class":"c","outcome":"ok","t_sched_ns":0,"steps":[{"id":"a","kind":"tool","name":"x"},{"id":"a","kind":"tool","name":"x"}]})",
       "steps[1].id", "is the id of an earlier step", 1},
      {R"({"id":1,"class":"c","outcome":"ok","t_sched_ns":0,"steps":[{"id":"a","kind":"tool","name":"x"},{"id":"b","kind":"retrieval","name":"x"}]})",
       "steps[1].name", "a tool in one step and a search in another", 1},
      {R"({"id":1,"class":"c","outcome":"ok","t_sched_ns":0,"steps":[{"id":"a","kind":"tool","name":"no spaces"}]})",
       "steps[0].name", "expected a tool name", 1},
      {R"({"id":1,"class":"c","outcome":"ok","t_sched_ns":0,"steps":[{"id":"a","kind":"tool","name":"x","t_start_ns":9,"t_end_ns":3}]})",
       "steps[0].t_end_ns", "is before t_start_ns", 1},
  };
  for (const auto& c : cases) {
    try {
      parse_task_replay(c.text, "rec.jsonl");
      ADD_FAILURE() << "accepted " << c.text;
    } catch (const InputError& e) {
      EXPECT_EQ(e.file(), "rec.jsonl");
      EXPECT_EQ(e.line(), c.line) << e.what();
      EXPECT_EQ(e.field(), c.field) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_task_replay(ok_line, "t.jsonl", 0), UsageError);
}

}  // namespace
}  // namespace tokenscope::bench
