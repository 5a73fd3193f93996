// YAML workload files: the mix they generate, sessions, SLOs, and the
// messages for bad input (file, line, field).
#include "bench/bench_workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include <cmath>
#include <fstream>

#include "core/error.h"

namespace tokenscope::bench {
namespace {

const char* kMix = R"(
num_requests: 4000
seed: 3
arrival: {process: gamma, rate_rps: 50, burstiness: 0.5}
tenants:
  - {name: acme, share: 3}
  - {name: beta, share: 1}
classes:
  - name: chat
    share: 3
    input_len: fixed:100
    output_len: fixed:20
    turns: {count: 3, think_ms: 500, input_len: fixed:10}
    slo: {ttft_ms: 200, tpot_ms: 20, percentile: 90}
  - name: batch
    share: 1
    input_len: uniform:1000:2000
    output_len: fixed:5
    prefix: {groups: 2, tokens: 512}
    tenants: [beta]
)";

TEST(WorkloadFile, GeneratesTheMixWithSessionsAndSlos) {
  const auto b = parse_workload_yaml(kMix, "mix.yaml", 0);
  const auto& w = b.workload;
  EXPECT_EQ(w.classes, (std::vector<std::string>{"chat", "batch"}));
  EXPECT_EQ(w.tenants, (std::vector<std::string>{"acme", "beta"}));
  ASSERT_EQ(b.turns.size(), w.requests.size());
  std::size_t starts[2] = {0, 0}, batch_acme = 0;
  for (std::size_t i = 0; i < w.requests.size(); ++i) {
    const auto& r = w.requests[i];
    const auto& l = b.turns[i];
    if (l.turn == 0) ++starts[r.task_class];
    if (r.task_class == 1) {
      EXPECT_EQ(l.next, -1);
      EXPECT_GE(r.input_tokens, 1000u);
      EXPECT_EQ(r.source, workload::PromptSource::kPrefixGroup);
      EXPECT_LT(r.source_begin, 2u);
      batch_acme += r.tenant == 0 ? 1 : 0;
    } else {
      // Sessions of three turns, linked in order, the same tenant throughout.
      EXPECT_EQ(r.input_tokens, l.turn == 0 ? 100u : 10u);
      if (l.turn < 2) {
        ASSERT_EQ(l.next, static_cast<std::int32_t>(i + 1));
        EXPECT_EQ(b.turns[i + 1].turn, l.turn + 1);
        EXPECT_EQ(b.turns[i + 1].session, l.session);
        EXPECT_EQ(w.requests[i + 1].tenant, r.tenant);
        EXPECT_EQ(l.think_ns, 500'000'000);
      } else {
        EXPECT_EQ(l.next, -1);
      }
    }
    if (i > 0) {
      EXPECT_GE(r.arrival_ns, w.requests[i - 1].arrival_ns);
    }
  }
  EXPECT_EQ(starts[0] + starts[1], 4000u);
  // Shares 3:1, within four standard deviations of a binomial draw.
  EXPECT_NEAR(static_cast<double>(starts[0]), 3000, 4 * std::sqrt(4000 * 0.75 * 0.25));
  EXPECT_EQ(batch_acme, 0u);  // batch is restricted to beta
  ASSERT_EQ(b.slos.size(), 1u);
  EXPECT_EQ(*b.slos.at("chat").ttft_ms, 200);
  EXPECT_EQ(b.slos.at("chat").percentile, 90);
  EXPECT_FALSE(b.slos.at("chat").e2e_ms);
  // Deterministic for a seed; the rate override rescales time.
  const auto again = parse_workload_yaml(kMix, "mix.yaml", 0);
  EXPECT_EQ(again.workload.requests.back().arrival_ns, w.requests.back().arrival_ns);
  const auto faster = parse_workload_yaml(kMix, "mix.yaml", 0, 100.0);
  EXPECT_LT(faster.workload.requests.back().arrival_ns, w.requests.back().arrival_ns);
}

std::string error_of(const std::string& yaml) {
  try {
    parse_workload_yaml(yaml, "w.yaml", 0);
  } catch (const InputError& e) {
    return e.what();
  } catch (const UsageError& e) {
    return std::string("UsageError: ") + e.what();
  }
  return "no error";
}

TEST(WorkloadFile, BadInputNamesFileLineAndField) {
  const std::string head = "duration_s: 10\nclasses:\n";
  struct Case {
    std::string yaml;
    std::string field;
    std::string line;
  } cases[] = {
      {"duration_s: 10\n", "classes", "w.yaml:1"},
      {"classes: []\nduration_s: 1\n", "classes", "w.yaml:1"},
      {head + "  - name: a\n    input_len: fixed:1\n", "classes[0].output_len", "w.yaml:3"},
      {head + "  - name: a\n    input_len: bogus:1\n    output_len: fixed:1\n", "classes[0].input_len",
       "w.yaml:4"},
      {head + "  - name: a\n    input_len: fixed:1\n    output_len: fixed:1\n    share: -1\n",
       "classes[0].share", "w.yaml:6"},
      {head + "  - name: a\n    input_len: fixed:1\n    output_len: fixed:1\n    colour: red\n",
       "classes[0].colour", "w.yaml:6"},
      {head + "  - name: a\n    input_len: fixed:1\n    output_len: fixed:1\n    tenants: [nobody]\n",
       "classes[0].tenants[0]", "w.yaml:6"},
      {head + "  - name: a\n    input_len: fixed:1\n    output_len: fixed:1\n    slo: {}\n", "classes[0].slo",
       "w.yaml:6"},
      {head + "  - name: a\n    input_len: fixed:1\n    output_len: fixed:1\n  - name: a\n    input_len: "
              "fixed:1\n"
              "    output_len: fixed:1\n",
       "classes[1].name", "w.yaml:6"},
      {"classes: [\n", "", "w.yaml:"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of(c.yaml);
    EXPECT_NE(msg.find(c.line), std::string::npos) << c.yaml << " -> " << msg;
    EXPECT_NE(msg.find(c.field), std::string::npos) << c.yaml << " -> " << msg;
    EXPECT_EQ(msg.find("UsageError"), std::string::npos) << msg;
  }
}

// Input quoted in a message is escaped (quote_input): control bytes and NULs
// (YAML's "\e" and "\0") neither reach the terminal nor cut the message.
TEST(WorkloadFile, QuotedInputIsEscaped) {
  const std::string head = "duration_s: 10\nclasses:\n";
  const std::string spec =
      error_of(head + "  - name: a\n    input_len: \"fixed:\\e[2J\\0x\"\n    output_len: fixed:1\n");
  EXPECT_NE(spec.find("got '\\x1b[2J\\0x'"), std::string::npos) << spec;
  const std::string tenant = error_of(
      head +
      "  - name: a\n    input_len: fixed:1\n    output_len: fixed:1\n    tenants: [\"no\\ebody\\0!\"]\n");
  EXPECT_NE(tenant.find("unknown tenant 'no\\x1bbody\\0!' (not in 'tenants')"), std::string::npos) << tenant;
  const std::string key = error_of(head + "  - name: a\n    \"col\\eour\": 1\n");
  EXPECT_NE(key.find("field 'classes[0].col\\x1bour'"), std::string::npos) << key;
  for (const auto& m : {spec, tenant, key}) {
    EXPECT_EQ(m.find('\x1b'), std::string::npos) << m;
    EXPECT_EQ(m.find('\0'), std::string::npos) << m;
  }
}

// Images and audio per class: drawn within their distributions, on the
// first turn only; the example mix has the design's 55/30/15 split.
TEST(WorkloadFile, ImagesAndAudioPerClass) {
  const auto b = parse_workload_yaml(
      "num_requests: 400\nseed: 3\nclasses:\n"
      "  - {name: v, share: 1, input_len: fixed:10, output_len: fixed:5,\n"
      "     images: {count: 2, width: uniform:100:900, height: fixed:300}}\n"
      "  - {name: a, share: 1, input_len: fixed:10, output_len: fixed:5, audio: {duration_ms: "
      "uniform:1000:5000}}\n"
      "  - {name: t, share: 1, input_len: fixed:10, output_len: fixed:5}\n",
      "w.yaml", 1);
  int v = 0, a = 0;
  for (const auto& r : b.workload.requests) {
    const std::string& cls = b.workload.classes[r.task_class];
    if (cls == "v") {
      ++v;
      EXPECT_EQ(r.images, 2);
      EXPECT_GE(r.image_width, 100);
      EXPECT_LE(r.image_width, 900);
      EXPECT_EQ(r.image_height, 300);
      EXPECT_EQ(r.audio_ms, 0u);
    } else if (cls == "a") {
      ++a;
      EXPECT_EQ(r.images, 0);
      EXPECT_GE(r.audio_ms, 1000u);
      EXPECT_LE(r.audio_ms, 5000u);
    } else {
      EXPECT_EQ(r.images + r.audio_ms, 0u);
    }
  }
  EXPECT_GT(v, 100);
  EXPECT_GT(a, 100);
  EXPECT_EQ(b.effective["classes"][0]["images"]["width"], "uniform:100:900");

  const auto mix =
      load_workload_file(std::string(TOKENSCOPE_SOURCE_DIR) + "/examples/workloads/multimodal-mix.yaml", 0);
  std::map<std::string, int> n;
  for (const auto& r : mix.workload.requests) ++n[mix.workload.classes[r.task_class]];
  const double total = static_cast<double>(mix.workload.requests.size());
  EXPECT_NEAR(n["vision"] / total, 0.55, 0.07);
  EXPECT_NEAR(n["text"] / total, 0.30, 0.07);
  EXPECT_NEAR(n["audio"] / total, 0.15, 0.05);

  // Bad input: named, before anything runs.
  const std::string head =
      "duration_s: 10\nclasses:\n  - name: x\n    input_len: fixed:1\n    output_len: fixed:1\n";
  struct Case {
    std::string yaml, needle;
  } cases[] = {
      {head + "    images: {width: fixed:9000, height: fixed:10}\n",
       "draws up to 9000 pixels, over the limit of 4096"},
      {head + "    images: {width: lognormal:500:0.5, height: fixed:10}\n",
       "'classes[0].images.width': unbounded: give a largest value"},
      {head + "    images: {count: 9, width: fixed:10, height: fixed:10}\n", "classes[0].images.count"},
      {head + "    images: {width: fixed:10}\n", "'classes[0].images.height': missing"},
      {head + "    audio: {duration_ms: fixed:700000}\n", "over the limit of 120000"},
      {head + "    video: {seconds: 3}\n", "classes[0].video"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of(c.yaml);
    EXPECT_NE(msg.find(c.needle), std::string::npos) << c.yaml << " -> " << msg;
    EXPECT_NE(msg.find("w.yaml:"), std::string::npos) << msg;
  }
}

// Model mixes: a class's `model` (one name, or names with weights) and
// --model-mix for the requests without one; the turns of a session go to
// one model; shares follow the weights; bad specs name the entry.
TEST(WorkloadFile, ModelsPerClassAndByWeight) {
  const auto b = parse_workload_yaml(R"(
num_requests: 3000
seed: 5
arrival: {process: poisson, rate_rps: 100}
classes:
  - {name: sql, share: 1, input_len: fixed:50, output_len: fixed:5, model: sql-lora}
  - name: chat
    share: 2
    input_len: fixed:50
    output_len: fixed:5
    model: {base: 3, chat-lora: 1}
    turns: {count: 2, think_ms: 10}
  - {name: other, share: 1, input_len: fixed:50, output_len: fixed:5}
)",
                                     "models.yaml", 0);
  auto w = b.workload;
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  ASSERT_EQ(sorted(w.models), (std::vector<std::string>{"base", "chat-lora", "sql-lora"}));
  std::map<std::string, std::map<std::string, int>> by_class;
  for (const auto& r : w.requests)
    by_class[w.classes[r.task_class]][r.model == 0 ? "" : w.models[r.model - 1]]++;
  EXPECT_EQ(by_class["sql"].size(), 1u);
  EXPECT_GT(by_class["sql"]["sql-lora"], 0);
  EXPECT_EQ(by_class["other"].size(), 1u);  // no model: the run's
  EXPECT_GT(by_class["other"][""], 0);
  const double base = by_class["chat"]["base"], lora = by_class["chat"]["chat-lora"];
  EXPECT_NEAR(base / (base + lora), 0.75, 0.04);
  // A session's turns share its model.
  for (std::size_t i = 0; i < w.requests.size(); ++i)
    if (b.turns[i].next >= 0) {
      EXPECT_EQ(w.requests[i].model, w.requests[b.turns[i].next].model) << i;
    }
  // --model-mix sends the rest ("other") by weight.
  apply_model_mix(w, b.turns, parse_model_mix("base=1,x-lora=1", "--model-mix"), 9);
  ASSERT_EQ(sorted(w.models), (std::vector<std::string>{"base", "chat-lora", "sql-lora", "x-lora"}));
  int other = 0, x = 0;
  for (const auto& r : w.requests) {
    EXPECT_GT(r.model, 0);
    if (w.classes[r.task_class] == "other") {
      ++other;
      x += w.models[r.model - 1] == "x-lora";
    }
    if (w.classes[r.task_class] == "sql") {
      EXPECT_EQ(w.models[r.model - 1], "sql-lora");
    }
  }
  EXPECT_NEAR(static_cast<double>(x) / other, 0.5, 0.07);
  EXPECT_EQ(parse_model_mix("a=0.5,b=1e-3", "--model-mix").size(), 2u);
  for (const char* bad : {"", "a", "a=0", "a=-1", "a=x", "=1", "a=1,a=2", "a=1,,b=1", "a=inf"})
    EXPECT_THROW(parse_model_mix(bad, "--model-mix"), UsageError) << bad;
  try {
    parse_model_mix("a=1,b", "--model-mix");
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("'b': expected NAME=WEIGHT"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_workload_yaml(R"(
classes:
  - {name: a, input_len: fixed:5, output_len: fixed:5, model: [x, y]}
)",
                                   "m.yaml", 0),
               InputError);
}

TEST(WorkloadFile, ExampleFilesInDocsLoad) {
  for (const char* f :
       {"/examples/workloads/chat-and-batch.yaml", "/examples/workloads/agentic-sessions.yaml",
        "/examples/workloads/multimodal-mix.yaml", "/examples/workloads/research-agent.yaml",
        "/examples/workloads/react-agent.yaml", "/examples/workloads/chat-with-tools.yaml"}) {
    const auto b = load_workload_file(std::string(TOKENSCOPE_SOURCE_DIR) + f, 0);
    EXPECT_GT(b.workload.requests.size() + (b.tasks ? b.tasks->arrivals.size() : 0), 0u) << f;
  }
  EXPECT_THROW(load_workload_file("/nonexistent.yaml", 0), UsageError);
}

}  // namespace
}  // namespace tokenscope::bench
