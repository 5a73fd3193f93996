#include "exporters/otlp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "exporters/test_util.h"
#include "net/http_server.h"

namespace tokenscope::exporters {
namespace {

using namespace rundir;
using namespace observe;

using nlohmann::json;
using testing::TempDir;

// ------------------------------------------------------------ the schema
// The OTLP/JSON encoding of ExportTraceServiceRequest and
// ExportMetricsServiceRequest as the OTLP specification and
// opentelemetry-proto define it: lowerCamelCase keys; traceId 16 and spanId
// 8 bytes as hex, not all zero; times (fixed64) and counts as decimal
// strings; enums as integers; AnyValue with exactly one value field.
// Problems go to `problems` with where they were.

bool hex_id(const json& v, std::size_t chars) {
  if (!v.is_string() || v.get<std::string>().size() != chars) return false;
  const std::string s = v;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }) &&
         s.find_first_not_of('0') != std::string::npos;
}

bool decimal_string(const json& v) {
  if (!v.is_string() || v.get<std::string>().empty()) return false;
  const std::string s = v;
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool proto_double(const json& v) {
  return v.is_number() || v == "NaN" || v == "Infinity" || v == "-Infinity";
}

void check_attributes(const json& parent, const std::string& at, std::vector<std::string>& problems) {
  if (!parent.contains("attributes")) return;
  if (!parent["attributes"].is_array()) return problems.push_back(at + ": attributes is not an array");
  std::set<std::string> keys;
  for (const auto& kv : parent["attributes"]) {
    if (!kv.is_object() || !kv.contains("key") || !kv["key"].is_string() || !kv.contains("value") ||
        !kv["value"].is_object()) {
      problems.push_back(at + ": attribute " + kv.dump() + " is not {key, value}");
      continue;
    }
    if (!keys.insert(kv["key"]).second) problems.push_back(at + ": attribute " + kv["key"].dump() + " twice");
    const json& v = kv["value"];
    if (v.size() != 1) {
      problems.push_back(at + ": AnyValue " + v.dump() + " has not exactly one field");
      continue;
    }
    const auto scalar = [](const json& x) {
      return x.is_object() && x.size() == 1 &&
             ((x.contains("stringValue") && x["stringValue"].is_string()) ||
              (x.contains("intValue") && decimal_string(x["intValue"])) ||
              (x.contains("doubleValue") && proto_double(x["doubleValue"])) ||
              (x.contains("boolValue") && x["boolValue"].is_boolean()));
    };
    // ArrayValue {values: [AnyValue]}: string[], int[] attributes.
    const bool array =
        v.contains("arrayValue") && v["arrayValue"].is_object() && v["arrayValue"].contains("values") &&
        v["arrayValue"]["values"].is_array() &&
        std::all_of(v["arrayValue"]["values"].begin(), v["arrayValue"]["values"].end(), scalar);
    if (!scalar(v) && !array) problems.push_back(at + ": AnyValue " + v.dump());
  }
}

void check_resource_and_scope(const json& r, const json& s, const std::string& at,
                              std::vector<std::string>& problems) {
  if (!r.contains("resource") || !r["resource"].is_object())
    problems.push_back(at + ": no resource");
  else
    check_attributes(r["resource"], at + ".resource", problems);
  if (!s.contains("scope") || !s["scope"].contains("name") || !s["scope"]["name"].is_string())
    problems.push_back(at + ": no scope name");
}

struct Counted {
  std::uint64_t spans = 0, events = 0, points = 0;
};

Counted check_traces(const json& req, std::vector<std::string>& problems) {
  Counted n;
  if (!req.is_object() || !req.contains("resourceSpans") || !req["resourceSpans"].is_array()) {
    problems.push_back("no resourceSpans array");
    return n;
  }
  for (const auto& rs : req["resourceSpans"]) {
    for (const auto& ss : rs.value("scopeSpans", json::array())) {
      check_resource_and_scope(rs, ss, "resourceSpans", problems);
      if (!ss.contains("spans") || !ss["spans"].is_array()) problems.push_back("scopeSpans without spans");
      for (const auto& sp : ss.value("spans", json::array())) {
        const std::string at = "span " + sp.value("spanId", std::string("?"));
        ++n.spans;
        if (!sp.contains("traceId") || !hex_id(sp["traceId"], 32)) problems.push_back(at + ": traceId");
        if (!sp.contains("spanId") || !hex_id(sp["spanId"], 16)) problems.push_back(at + ": spanId");
        if (sp.contains("parentSpanId") && !hex_id(sp["parentSpanId"], 16))
          problems.push_back(at + ": parentSpanId");
        if (!sp.contains("name") || !sp["name"].is_string() || sp["name"].get<std::string>().empty())
          problems.push_back(at + ": name");
        if (!sp.contains("kind") || !sp["kind"].is_number_integer() || sp["kind"] < 0 || sp["kind"] > 5)
          problems.push_back(at + ": kind");
        if (!sp.contains("startTimeUnixNano") || !decimal_string(sp["startTimeUnixNano"]) ||
            !sp.contains("endTimeUnixNano") || !decimal_string(sp["endTimeUnixNano"])) {
          problems.push_back(at + ": start/end times");
        } else if (std::stoull(sp["endTimeUnixNano"].get<std::string>()) <
                   std::stoull(sp["startTimeUnixNano"].get<std::string>())) {
          problems.push_back(at + ": ends before it starts");
        }
        check_attributes(sp, at, problems);
        for (const auto& ev : sp.value("events", json::array())) {
          ++n.events;
          if (!ev.contains("timeUnixNano") || !decimal_string(ev["timeUnixNano"]))
            problems.push_back(at + ": event time");
          if (!ev.contains("name") || !ev["name"].is_string()) problems.push_back(at + ": event name");
          check_attributes(ev, at + " event", problems);
        }
        if (sp.contains("status")) {
          const json& st = sp["status"];
          if (!st.contains("code") || !st["code"].is_number_integer() || st["code"] < 0 || st["code"] > 2)
            problems.push_back(at + ": status code");
        }
      }
    }
  }
  return n;
}

Counted check_metrics(const json& req, std::vector<std::string>& problems) {
  Counted n;
  if (!req.is_object() || !req.contains("resourceMetrics") || !req["resourceMetrics"].is_array()) {
    problems.push_back("no resourceMetrics array");
    return n;
  }
  for (const auto& rm : req["resourceMetrics"]) {
    for (const auto& sm : rm.value("scopeMetrics", json::array())) {
      check_resource_and_scope(rm, sm, "resourceMetrics", problems);
      for (const auto& m : sm.value("metrics", json::array())) {
        const std::string at = "metric " + m.value("name", std::string("?"));
        if (!m.contains("name") || !m["name"].is_string()) problems.push_back(at + ": name");
        const int kinds = m.contains("gauge") + m.contains("sum") + m.contains("histogram");
        if (kinds != 1) {
          problems.push_back(at + ": not exactly one of gauge, sum, histogram");
          continue;
        }
        const json& data = m.contains("gauge") ? m["gauge"] : m.contains("sum") ? m["sum"] : m["histogram"];
        if (!m.contains("gauge")) {
          if (!data.contains("aggregationTemporality") ||
              !data["aggregationTemporality"].is_number_integer() || data["aggregationTemporality"] < 1 ||
              data["aggregationTemporality"] > 2)
            problems.push_back(at + ": aggregationTemporality");
        }
        if (m.contains("sum") && (!data.contains("isMonotonic") || !data["isMonotonic"].is_boolean()))
          problems.push_back(at + ": isMonotonic");
        if (!data.contains("dataPoints") || !data["dataPoints"].is_array() || data["dataPoints"].empty())
          problems.push_back(at + ": dataPoints");
        for (const auto& p : data.value("dataPoints", json::array())) {
          ++n.points;
          check_attributes(p, at, problems);
          if (!p.contains("timeUnixNano") || !decimal_string(p["timeUnixNano"]))
            problems.push_back(at + ": time");
          if (p.contains("startTimeUnixNano") && !decimal_string(p["startTimeUnixNano"]))
            problems.push_back(at + ": start time");
          if (!m.contains("histogram")) {
            const bool one = (p.contains("asDouble") && proto_double(p["asDouble"])) !=
                             (p.contains("asInt") && decimal_string(p["asInt"]));
            if (!one) problems.push_back(at + ": value " + p.dump());
            continue;
          }
          if (!p.contains("count") || !decimal_string(p["count"])) {
            problems.push_back(at + ": histogram count");
            continue;
          }
          const auto counts = p.value("bucketCounts", json::array());
          const auto bounds = p.value("explicitBounds", json::array());
          if (!counts.empty() && counts.size() != bounds.size() + 1)
            problems.push_back(at + ": bucketCounts must be explicitBounds + 1");
          std::uint64_t total = 0;
          for (const auto& c : counts) {
            if (!decimal_string(c))
              problems.push_back(at + ": bucket count");
            else
              total += std::stoull(c.get<std::string>());
          }
          for (std::size_t i = 1; i < bounds.size(); ++i)
            if (!(bounds[i - 1].get<double>() < bounds[i].get<double>()))
              problems.push_back(at + ": bounds not increasing");
          if (!counts.empty() && total != std::stoull(p["count"].get<std::string>()))
            problems.push_back(at + ": bucket counts do not add up to count");
        }
      }
    }
  }
  return n;
}

// ------------------------------------------------------------ helpers

std::string problems_text(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size() && i < 10; ++i) s += v[i] + "\n";
  return s;
}

const json* attribute(const json& parent, const std::string& key) {
  for (const auto& kv : parent["attributes"])
    if (kv["key"] == key) return &kv["value"];
  return nullptr;
}

constexpr Nanos kAnchorMono = 2'000'000'000;
constexpr std::int64_t kAnchorUnix = 1'767'225'600'000'000'000;  // 2026-01-01T00:00:00Z
std::string unix_of(Nanos mono) {
  return std::to_string(kAnchorUnix + (mono - kAnchorMono));
}

struct Run {
  TempDir dir;
  std::vector<RequestRecord> records;
  std::vector<Observation> samples;
};

// Five requests (one failed, one warm-up, one with usage spread over its
// events) and samples of a gauge, a counter with a reset, and a histogram.
std::unique_ptr<Run> make_run(bool with_clock = true, bool with_samples = true) {
  auto run = std::make_unique<Run>();
  const Nanos s = kNanosPerSecond;
  for (std::uint64_t i = 0; i < 5; ++i)
    run->records.push_back(testing::streamed(i, 3 * s + static_cast<Nanos>(i) * 100'000'000, 1'000'000,
                                             20'000'000, static_cast<int>(i) + 1, 5'000'000));
  run->records[1].event_tokens = {2, 1};
  run->records[2].outcome = Outcome::kHttpError;
  run->records[2].http_status = 503;
  run->records[2].detail = "HTTP 503: overloaded";
  run->records[3].warmup = true;
  run->records[4].session = 9;
  run->records[4].turn = 2;
  auto obs = [](Nanos t, std::vector<Sample> canonical) {
    Observation o;
    o.t_ns = t;
    o.source = "server";
    o.canonical = std::move(canonical);
    return o;
  };
  run->samples = {
      obs(3 * s, {{"requests_running", {}, 1},
                  {"generation_tokens", {}, 10},
                  {"server_ttft_seconds_bucket", {{"le", "0.1"}}, 1},
                  {"server_ttft_seconds_bucket", {{"le", "1"}}, 3},
                  {"server_ttft_seconds_bucket", {{"le", "+Inf"}}, 4},
                  {"server_ttft_seconds_sum", {}, 2.5},
                  {"server_ttft_seconds_count", {}, 4}}),
      obs(4 * s, {{"requests_running", {}, 3}, {"generation_tokens", {}, 40}}),
      obs(5 * s, {{"requests_running", {}, 2}, {"generation_tokens", {}, 5}, {"kv_cache_usage", {}, NAN}}),
  };
  testing::write_text(run->dir.path() / "requests.jsonl", testing::requests_jsonl(run->records));
  if (with_samples)
    testing::write_text(run->dir.path() / "samples.jsonl", testing::samples_jsonl(run->samples));
  json rj = testing::run_json(kAnchorMono, kAnchorUnix);
  if (!with_clock) rj.erase("clock");
  testing::write_text(run->dir.path() / "run.json", rj.dump(2));
  return run;
}

std::uint64_t expected_events(const std::vector<RequestRecord>& records) {
  std::uint64_t n = 0;
  for (const auto& r : records) n += 2 + r.event_times.size();  // sent, headers, tokens
  return n;
}

// ------------------------------------------------------------ files

TEST(ExportOtlp, FilesHoldBoundedRequestsThatFollowTheEncoding) {
  auto run = make_run();
  OtlpOptions o;
  o.spans_per_request = 2;
  o.points_per_request = 3;
  const auto out = run->dir.path() / "otlp";
  const OtlpStats stats = export_otlp(run->dir.path(), out, o);
  const auto trace_lines = testing::read_lines(out / "otlp_traces.json");
  const auto metric_lines = testing::read_lines(out / "otlp_metrics.json");
  EXPECT_EQ(trace_lines.size(), 3u);  // 5 spans, 2 a request
  EXPECT_EQ(stats.trace_requests, 3u);
  EXPECT_EQ(stats.metric_requests, metric_lines.size());
  std::vector<std::string> problems;
  Counted traces, metrics;
  for (const auto& line : trace_lines) {
    const Counted c = check_traces(json::parse(line), problems);
    EXPECT_LE(c.spans, 2u);
    traces.spans += c.spans;
    traces.events += c.events;
  }
  for (const auto& line : metric_lines) metrics.points += check_metrics(json::parse(line), problems).points;
  EXPECT_TRUE(problems.empty()) << problems_text(problems);
  EXPECT_EQ(traces.spans, 5u);
  EXPECT_EQ(stats.spans, 5u);
  EXPECT_EQ(traces.events, expected_events(run->records));
  EXPECT_EQ(stats.span_events, traces.events);
  // 3 + 3 gauge points (NaN included), 3 sum points, 1 histogram point.
  EXPECT_EQ(metrics.points, 8u);
  EXPECT_EQ(stats.metric_points, 8u);
  EXPECT_FALSE(std::filesystem::exists(out / "otlp_traces.json.tmp"));
}

TEST(ExportOtlp, SpansCarryTheRecordAndTheGenAiAttributes) {
  auto run = make_run();
  std::vector<json> spans;
  RunSource src;
  src.dir = run->dir.path();
  write_otlp(
      src, read_run_info(run->dir.path()), {},
      [&](std::string_view body, std::uint64_t n) {
        const json req = json::parse(body);
        EXPECT_EQ(req["resourceSpans"][0]["resource"]["attributes"][0]["key"], "service.name");
        for (const auto& sp : req["resourceSpans"][0]["scopeSpans"][0]["spans"]) spans.push_back(sp);
        EXPECT_EQ(n, req["resourceSpans"][0]["scopeSpans"][0]["spans"].size());
      },
      [](std::string_view, std::uint64_t) {});
  ASSERT_EQ(spans.size(), run->records.size());
  std::set<std::string> trace_ids;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const json& sp = spans[i];
    const RequestRecord& r = run->records[i];
    trace_ids.insert(sp["traceId"]);
    EXPECT_EQ(sp["name"], "chat llama-3-8b");
    EXPECT_EQ(sp["kind"], 3);  // CLIENT
    EXPECT_EQ(sp["startTimeUnixNano"], unix_of(r.t_sched));
    EXPECT_EQ(sp["endTimeUnixNano"], unix_of(r.t_close));
    EXPECT_EQ(*attribute(sp, "gen_ai.operation.name"), json({{"stringValue", "chat"}}));
    EXPECT_EQ(*attribute(sp, "gen_ai.provider.name"), json({{"stringValue", "openai"}}));
    EXPECT_EQ(*attribute(sp, "gen_ai.request.model"), json({{"stringValue", "llama-3-8b"}}));
    EXPECT_EQ(*attribute(sp, "gen_ai.usage.input_tokens"),
              json({{"intValue", std::to_string(r.prompt_tokens)}}));
    EXPECT_EQ(*attribute(sp, "gen_ai.usage.output_tokens"),
              json({{"intValue", std::to_string(r.output_tokens)}}));
    EXPECT_EQ(*attribute(sp, "gen_ai.request.max_tokens"),
              json({{"intValue", std::to_string(r.output_tokens_planned)}}));
    EXPECT_EQ(*attribute(sp, "gen_ai.response.id"), json({{"stringValue", r.response_id}}));
    EXPECT_EQ(*attribute(sp, "server.address"), json({{"stringValue", "127.0.0.1"}}));
    EXPECT_EQ(*attribute(sp, "server.port"), json({{"intValue", "8123"}}));
    EXPECT_EQ(*attribute(sp, "http.response.status_code"),
              json({{"intValue", std::to_string(r.http_status)}}));
    EXPECT_DOUBLE_EQ((*attribute(sp, "tokenscope.time_to_first_token_s"))["doubleValue"].get<double>(),
                     nanos_to_s(r.t_first_token - r.t_send));
    EXPECT_DOUBLE_EQ((*attribute(sp, "tokenscope.queue_s"))["doubleValue"].get<double>(),
                     nanos_to_s(r.t_send - r.t_sched));
    // Events: sent, headers, then one per output event, at their times.
    const json& ev = sp["events"];
    ASSERT_EQ(ev.size(), 2 + r.event_times.size());
    EXPECT_EQ(ev[0]["name"], "tokenscope.sent");
    EXPECT_EQ(ev[0]["timeUnixNano"], unix_of(r.t_send));
    EXPECT_EQ(ev[1]["name"], "tokenscope.headers");
    EXPECT_EQ(ev[1]["timeUnixNano"], unix_of(r.t_headers));
    for (std::size_t k = 0; k < r.event_times.size(); ++k) {
      EXPECT_EQ(ev[2 + k]["name"], "tokenscope.token");
      EXPECT_EQ(ev[2 + k]["timeUnixNano"], unix_of(r.event_times[k]));
      EXPECT_EQ(*attribute(ev[2 + k], "tokenscope.tokens"),
                json({{"intValue", std::to_string(r.event_tokens[k])}}));
    }
    if (r.outcome == Outcome::kOk) {
      EXPECT_FALSE(sp.contains("status"));  // unset on success (Recording Errors)
      EXPECT_EQ(attribute(sp, "error.type"), nullptr);
    } else {
      EXPECT_EQ(sp["status"]["code"], 2);
      EXPECT_EQ(sp["status"]["message"], r.detail);
      EXPECT_EQ(*attribute(sp, "error.type"), json({{"stringValue", "http_error"}}));
    }
    if (r.warmup) {
      EXPECT_EQ(*attribute(sp, "tokenscope.warmup"), json({{"boolValue", true}}));
    }
    if (r.session >= 0) {
      EXPECT_EQ(*attribute(sp, "gen_ai.conversation.id"), json({{"stringValue", "9"}}));
    }
  }
  EXPECT_EQ(trace_ids.size(), spans.size());  // a trace each

  // The same run exports the same ids.
  std::string again;
  write_otlp(
      src, read_run_info(run->dir.path()), {}, [&](std::string_view b, std::uint64_t) { again += b; },
      [](std::string_view, std::uint64_t) {});
  EXPECT_NE(again.find(spans[0]["traceId"].get<std::string>()), std::string::npos);
}

TEST(ExportOtlp, MetricsAreGaugesCumulativeSumsAndHistograms) {
  auto run = make_run();
  std::map<std::string, std::vector<json>> points;
  std::map<std::string, json> metric;
  RunSource src;
  src.dir = run->dir.path();
  write_otlp(
      src, read_run_info(run->dir.path()), {}, [](std::string_view, std::uint64_t) {},
      [&](std::string_view body, std::uint64_t) {
        const json req = json::parse(body);
        for (const auto& m : req["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]) {
          const std::string name = m["name"].get<std::string>();
          metric[name] = m;
          const json& data = m.contains("gauge") ? m["gauge"] : m.contains("sum") ? m["sum"] : m["histogram"];
          for (const auto& p : data["dataPoints"]) points[name].push_back(p);
        }
      });
  const Nanos s = kNanosPerSecond;
  ASSERT_EQ(points["requests_running"].size(), 3u);
  EXPECT_TRUE(metric["requests_running"].contains("gauge"));
  EXPECT_EQ(metric["requests_running"]["unit"], "{request}");
  EXPECT_EQ(points["requests_running"][1]["timeUnixNano"], unix_of(4 * s));
  EXPECT_EQ(points["requests_running"][1]["asDouble"], 3);
  EXPECT_EQ(*attribute(points["requests_running"][1], "tokenscope.source"),
            json({{"stringValue", "server"}}));
  EXPECT_EQ(points["kv_cache_usage"].at(0)["asDouble"], "NaN");

  const json& sum = metric["generation_tokens"]["sum"];
  EXPECT_EQ(sum["aggregationTemporality"], 2);
  EXPECT_EQ(sum["isMonotonic"], true);
  ASSERT_EQ(points["generation_tokens"].size(), 3u);
  EXPECT_EQ(points["generation_tokens"][0]["startTimeUnixNano"], unix_of(3 * s));
  EXPECT_EQ(points["generation_tokens"][1]["startTimeUnixNano"], unix_of(3 * s));
  EXPECT_EQ(points["generation_tokens"][1]["asDouble"], 40);
  // After the reset (40 -> 5) the series starts again.
  EXPECT_EQ(points["generation_tokens"][2]["startTimeUnixNano"], unix_of(4 * s));

  ASSERT_EQ(points["server_ttft_seconds"].size(), 1u);
  const json& h = points["server_ttft_seconds"][0];
  EXPECT_EQ(h["count"], "4");
  EXPECT_EQ(h["sum"], 2.5);
  EXPECT_EQ(h["explicitBounds"], json({0.1, 1.0}));
  EXPECT_EQ(h["bucketCounts"], json({"1", "2", "1"}));  // cumulative 1, 3, 4 per bucket
  EXPECT_EQ(metric["server_ttft_seconds"]["unit"], "s");
}

TEST(ExportOtlp, ARunWithoutAClockAnchorIsRefusedUnlessOneIsGiven) {
  auto run = make_run(/*with_clock=*/false);
  try {
    export_otlp(run->dir.path(), run->dir.path());
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("\"clock\""), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(run->dir.path() / "otlp_traces.json"));
  OtlpOptions o;
  o.clock = ClockAnchor{kAnchorMono, kAnchorUnix};
  EXPECT_EQ(export_otlp(run->dir.path(), run->dir.path(), o).spans, 5u);

  // A clock of the wrong shape is named.
  testing::write_text(run->dir.path() / "run.json", R"({"clock": {"monotonic_ns": "now"}})");
  try {
    read_run_info(run->dir.path());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "clock");
  }
}

TEST(ExportOtlp, WithoutSamplesThereAreNoMetrics) {
  auto run = make_run(true, /*with_samples=*/false);
  const OtlpStats stats = export_otlp(run->dir.path(), run->dir.path());
  EXPECT_FALSE(stats.samples_found);
  EXPECT_EQ(stats.metric_points, 0u);
  EXPECT_TRUE(std::filesystem::exists(run->dir.path() / "otlp_traces.json"));
  EXPECT_FALSE(std::filesystem::exists(run->dir.path() / "otlp_metrics.json"));
}

// ------------------------------------------------------------ tasks

struct TaskExport {
  TempDir dir;
  testing::TaskRun run = testing::task_run(3 * kNanosPerSecond);
  std::vector<json> spans;
  std::map<std::string, const json*> by_id;  // spanId -> span
  OtlpStats stats;
};

// The task run as a run directory (run.json with its clock, requests.jsonl,
// tasks.jsonl), exported to otlp_traces.json, every request checked. The run
// spoke the completions API: its tasks' model calls are chat all the same.
std::unique_ptr<TaskExport> export_task_run(std::vector<std::string>& problems,
                                            const std::string* tasks_text = nullptr) {
  auto e = std::make_unique<TaskExport>();
  testing::write_text(e->dir.path() / "requests.jsonl", testing::requests_jsonl(e->run.requests));
  testing::write_text(e->dir.path() / "tasks.jsonl", tasks_text ? *tasks_text : e->run.tasks_jsonl());
  testing::write_text(e->dir.path() / "run.json",
                      testing::run_json(kAnchorMono, kAnchorUnix, "llama-3-8b", "completions").dump());
  OtlpOptions o;
  o.spans_per_request = 4;  // a task's spans across export requests
  e->stats = export_otlp(e->dir.path(), e->dir.path() / "out", o);
  for (const auto& line : testing::read_lines(e->dir.path() / "out" / "otlp_traces.json")) {
    const json req = json::parse(line);
    check_traces(req, problems);
    for (const auto& sp : req["resourceSpans"][0]["scopeSpans"][0]["spans"]) e->spans.push_back(sp);
  }
  for (const auto& sp : e->spans) e->by_id[sp["spanId"]] = &sp;
  return e;
}

std::string string_of(const json* v) {
  return v && v->contains("stringValue") ? (*v)["stringValue"].get<std::string>() : "";
}

// The span of the step `id` (a step span has tokenscope.step.kind; the
// request spans of its model calls name the step too). nullptr unless one.
const json* step_span(const std::vector<json>& spans, const std::string& id) {
  const json* found = nullptr;
  for (const auto& sp : spans)
    if (attribute(sp, "tokenscope.step.kind") && string_of(attribute(sp, "tokenscope.step.id")) == id) {
      if (found) return nullptr;
      found = &sp;
    }
  return found;
}

TEST(ExportOtlpTasks, ATaskIsATraceOfAnAgentSpanAndItsStepSpans) {
  std::vector<std::string> problems;
  const auto e = export_task_run(problems);
  EXPECT_TRUE(problems.empty()) << problems_text(problems);
  const testing::TaskRun& run = e->run;
  // 2 tasks, 7 steps that ran, 5 requests.
  EXPECT_EQ(e->spans.size(), 14u);
  EXPECT_EQ(e->stats.spans, 14u);
  EXPECT_EQ(e->stats.tasks, 2u);
  EXPECT_EQ(e->stats.task_steps, 7u);
  EXPECT_EQ(e->stats.requests_in_tasks, 3u);
  EXPECT_EQ(std::set<std::string>(
                {e->spans[0]["traceId"].get<std::string>(), e->spans[7]["traceId"].get<std::string>()})
                .size(),
            2u);

  for (const auto& t : run.tasks) {
    const std::string id = t["id"].dump();
    const json* root = nullptr;
    for (const auto& sp : e->spans)
      if (string_of(attribute(sp, "gen_ai.operation.name")) == "invoke_agent" &&
          string_of(attribute(sp, "gen_ai.conversation.id")) == id)
        root = &sp;
    ASSERT_NE(root, nullptr) << id;
    EXPECT_EQ((*root)["name"], "invoke_agent " + t["class"].get<std::string>());
    EXPECT_EQ((*root)["kind"], 1);  // INTERNAL: the agent runs in bench's process
    EXPECT_FALSE(root->contains("parentSpanId"));
    EXPECT_EQ((*root)["startTimeUnixNano"], unix_of(t["t_start_ns"].get<Nanos>()));
    EXPECT_EQ((*root)["endTimeUnixNano"], unix_of(t["t_end_ns"].get<Nanos>()));
    EXPECT_EQ(string_of(attribute(*root, "gen_ai.agent.name")), t["class"]);
    EXPECT_EQ(string_of(attribute(*root, "gen_ai.provider.name")), "openai");
    EXPECT_EQ(string_of(attribute(*root, "gen_ai.request.model")), "llama-3-8b");
    EXPECT_EQ(string_of(attribute(*root, "tokenscope.task.mode")), t["mode"]);
    EXPECT_EQ(*attribute(*root, "tokenscope.task.id"), json({{"intValue", id}}));
    json path = json::array();
    for (const auto& step : t["critical_path"]["steps"]) path.push_back({{"stringValue", step}});
    EXPECT_EQ(*attribute(*root, "tokenscope.critical_path.steps"),
              json({{"arrayValue", {{"values", path}}}}));
    EXPECT_EQ((*attribute(*root, "tokenscope.critical_path.model_ms"))["doubleValue"],
              t["critical_path"]["model_ms"]);
    // The task's tokens: its model steps' together.
    std::int64_t input = 0;
    for (const auto& s : t["steps"]) input += s.value("prompt_tokens", 0);
    EXPECT_EQ(*attribute(*root, "gen_ai.usage.input_tokens"), json({{"intValue", std::to_string(input)}}));

    // Its steps: children of the root in its trace, one per step that ran.
    std::size_t children = 0;
    for (const auto& sp : e->spans)
      if (sp.value("parentSpanId", "") == (*root)["spanId"]) {
        ++children;
        EXPECT_EQ(sp["traceId"], (*root)["traceId"]);
      }
    std::size_t ran = 0;
    for (const auto& s : t["steps"]) {
      const json* sp = nullptr;
      for (const auto& x : e->spans)
        if (string_of(attribute(x, "tokenscope.step.id")) == s["id"] &&
            x.value("parentSpanId", "") == (*root)["spanId"])
          sp = &x;
      if (!s.contains("t_start_ns")) {
        EXPECT_EQ(sp, nullptr) << s;  // never ran: no span
        continue;
      }
      ++ran;
      ASSERT_NE(sp, nullptr) << s;
      EXPECT_EQ((*sp)["kind"], 1);
      EXPECT_EQ((*sp)["startTimeUnixNano"], unix_of(s["t_start_ns"].get<Nanos>()));
      EXPECT_EQ((*sp)["endTimeUnixNano"], unix_of(s["t_end_ns"].get<Nanos>()));
      EXPECT_EQ(*attribute(*sp, "tokenscope.step.attempts"), json({{"intValue", s["attempts"].dump()}}));
      EXPECT_EQ(string_of(attribute(*sp, "tokenscope.step.outcome")), s["outcome"]);
      if (s["kind"] == "model") {
        EXPECT_EQ((*sp)["name"], "chat llama-3-8b");
        EXPECT_EQ(string_of(attribute(*sp, "gen_ai.operation.name")), "chat");
        EXPECT_EQ(string_of(attribute(*sp, "gen_ai.conversation.id")), id);
        EXPECT_EQ(*attribute(*sp, "gen_ai.usage.output_tokens"),
                  json({{"intValue", s["output_tokens"].dump()}}));
      } else {
        EXPECT_EQ((*sp)["name"], "execute_tool " + s["name"].get<std::string>());
        EXPECT_EQ(string_of(attribute(*sp, "gen_ai.operation.name")), "execute_tool");
        EXPECT_EQ(string_of(attribute(*sp, "gen_ai.tool.name")), s["name"]);
        EXPECT_EQ(string_of(attribute(*sp, "gen_ai.tool.type")),
                  s["kind"] == "retrieval" ? "datastore" : "function");
      }
      if (s["outcome"] == "failed") {
        EXPECT_EQ((*sp)["status"]["code"], 2);
        EXPECT_EQ((*sp)["status"]["message"], s["detail"]);
        EXPECT_EQ(string_of(attribute(*sp, "error.type")), s["failure"]);
      } else {
        EXPECT_FALSE(sp->contains("status"));
        EXPECT_EQ(attribute(*sp, "error.type"), nullptr);
      }
    }
    EXPECT_EQ(children, ran);
    if (t["outcome"] == "ok") {
      EXPECT_FALSE(root->contains("status"));
    } else {
      EXPECT_EQ((*root)["status"]["code"], 2);
      EXPECT_EQ((*root)["status"]["message"], "timeout at step lookup-1: no answer within 200 ms");
      EXPECT_EQ(string_of(attribute(*root, "error.type")), "timeout");
      EXPECT_EQ(*attribute(*root, "tokenscope.task.steps_not_run"),
                json({{"arrayValue", {{"values", {{{"stringValue", "reply"}}}}}}}));
    }
  }
  const json* weather = step_span(e->spans, "weather");
  const json* plan = step_span(e->spans, "plan");
  const json* r1 = step_span(e->spans, "r1");
  ASSERT_TRUE(weather && plan && r1);
  EXPECT_EQ(*attribute(*weather, "tokenscope.step.retried"),
            json({{"arrayValue", {{"values", {{{"stringValue", "http"}}}}}}}));
  EXPECT_EQ(
      *attribute(*plan, "tokenscope.step.requests"),
      json({{"arrayValue", {{"values", {{{"intValue", std::to_string(testing::kFirstTaskRequest)}}}}}}}));
  EXPECT_EQ(*attribute(*plan, "tokenscope.step.critical"), json({{"boolValue", true}}));
  EXPECT_EQ(attribute(*r1, "tokenscope.step.critical"), nullptr);
  EXPECT_EQ(
      *attribute(*r1, "tokenscope.step.documents"),
      json(
          {{"arrayValue",
            {{"values",
              {{{"stringValue", "doc-58"}}, {{"stringValue", "doc-285"}}, {{"stringValue", "doc-446"}}}}}}}));
}

TEST(ExportOtlpTasks, AModelCallsRequestSpanIsAChildOfItsStepSpan) {
  std::vector<std::string> problems;
  const auto e = export_task_run(problems);
  EXPECT_TRUE(problems.empty()) << problems_text(problems);
  std::set<std::string> own_traces;
  for (const auto& r : e->run.requests) {
    const json* sp = nullptr;
    for (const auto& x : e->spans)
      if (attribute(x, "tokenscope.request.id") &&
          *attribute(x, "tokenscope.request.id") == json({{"intValue", std::to_string(r.id)}}))
        sp = &x;
    ASSERT_NE(sp, nullptr) << r.id;
    EXPECT_EQ((*sp)["kind"], 3);  // the request stays the CLIENT span it was
    EXPECT_EQ((*sp)["name"], r.task >= 0 ? "chat llama-3-8b" : "text_completion llama-3-8b") << r.id;
    EXPECT_EQ(string_of(attribute(*sp, "gen_ai.operation.name")), r.task >= 0 ? "chat" : "text_completion");
    if (r.task < 0 || r.task == 99) {
      // Its own trace: a plain request (5, right after a task's call in the
      // file), or a call whose task is not in tasks.jsonl (6).
      EXPECT_FALSE(sp->contains("parentSpanId")) << r.id;
      EXPECT_TRUE(own_traces.insert((*sp)["traceId"]).second);
      for (const auto& x : e->spans)
        if (&x != sp) {
          EXPECT_NE(x["traceId"], (*sp)["traceId"]) << r.id;
        }
      EXPECT_EQ(attribute(*sp, "gen_ai.conversation.id") != nullptr, r.task == 99);
      continue;
    }
    ASSERT_TRUE(sp->contains("parentSpanId")) << r.id;
    const auto parent = e->by_id.find((*sp)["parentSpanId"]);
    ASSERT_NE(parent, e->by_id.end()) << r.id;
    const json& step = *parent->second;
    EXPECT_EQ(string_of(attribute(step, "tokenscope.step.id")), r.step);
    EXPECT_EQ(*attribute(step, "tokenscope.task.id"), json({{"intValue", std::to_string(r.task)}}));
    EXPECT_EQ(step["traceId"], (*sp)["traceId"]);
    EXPECT_EQ(string_of(attribute(*sp, "gen_ai.conversation.id")), std::to_string(r.task));
    EXPECT_EQ(string_of(attribute(*sp, "tokenscope.step.id")), r.step);
    // Inside its step in time too: one clock.
    EXPECT_GE(std::stoull((*sp)["startTimeUnixNano"].get<std::string>()),
              std::stoull(step["startTimeUnixNano"].get<std::string>()));
    EXPECT_LE(std::stoull((*sp)["endTimeUnixNano"].get<std::string>()),
              std::stoull(step["endTimeUnixNano"].get<std::string>()));
  }

  // The same run exports the same ids.
  std::vector<std::string> again_problems;
  const auto again = export_task_run(again_problems);
  std::set<std::string> a, b;
  for (const auto& sp : e->spans)
    a.insert(sp["traceId"].get<std::string>() + sp["spanId"].get<std::string>());
  for (const auto& sp : again->spans)
    b.insert(sp["traceId"].get<std::string>() + sp["spanId"].get<std::string>());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), e->spans.size());  // no two spans share an id
}

TEST(ExportOtlpTasks, ABadTaskLineIsNamedOrSkipped) {
  const testing::TaskRun run = testing::task_run(3 * kNanosPerSecond);
  json bad = run.tasks[1];
  bad["steps"][0]["t_start_ns"] = "soon";
  const std::string tasks = run.tasks[0].dump() + "\n" + bad.dump() + "\n";
  std::vector<std::string> problems;
  try {
    export_task_run(problems, &tasks);
    FAIL() << "a bad task line was accepted";
  } catch (const InputError& err) {
    EXPECT_NE(err.file().find("tasks.jsonl"), std::string::npos) << err.file();
    EXPECT_EQ(err.line(), 2u);
    EXPECT_EQ(err.field(), "steps[0].t_start_ns");
    EXPECT_NE(std::string(err.what()).find("should be an integer, not a string"), std::string::npos)
        << err.what();
  }
  TempDir dir;
  testing::write_text(dir.path() / "requests.jsonl", testing::requests_jsonl(run.requests));
  testing::write_text(dir.path() / "tasks.jsonl", tasks);
  RunSource src;
  src.dir = dir.path();
  OtlpOptions o;
  o.bad_lines = BadLines::kSkip;
  o.clock = ClockAnchor{kAnchorMono, kAnchorUnix};
  std::vector<json> spans;
  const OtlpStats stats = write_otlp(
      src, {}, o,
      [&](std::string_view body, std::uint64_t) {
        const json req = json::parse(body);
        check_traces(req, problems);
        for (const auto& sp : req["resourceSpans"][0]["scopeSpans"][0]["spans"]) spans.push_back(sp);
      },
      [](std::string_view, std::uint64_t) {});
  EXPECT_TRUE(problems.empty()) << problems_text(problems);
  EXPECT_EQ(stats.tasks, 1u);
  EXPECT_EQ(stats.tasks_read.skipped, 1u);
  // Task 4's model call has no task span to hang from: a trace of its own.
  EXPECT_EQ(stats.requests_in_tasks, 2u);
  EXPECT_EQ(spans.size(), 1u + 5u + 5u);
}

// ------------------------------------------------------------ push

// An OTLP/HTTP receiver on a loopback port: checks every request against the
// schema above, counts what it holds, and answers as scripted (200 once the
// script runs out).
class Receiver final : public net::HttpHandler {
 public:
  struct Answer {
    int status;
    std::string body;
  };

  void handle(net::HttpRequest req, std::shared_ptr<net::Responder> responder) override {
    net::HttpResponse resp;
    {
      std::lock_guard lock(mu_);
      ++posts;
      if (req.method != "POST") problems.push_back("method " + req.method);
      if (req.header("content-type") != "application/json")
        problems.push_back("content-type " + std::string(req.header("content-type")));
      const json body = json::parse(req.body, nullptr, false);
      if (body.is_discarded()) {
        problems.push_back("not JSON");
      } else if (req.path() == "/otlp/v1/traces") {
        const Counted c = check_traces(body, problems);
        if (!script.empty() && script.front().status != 200) {
          // refused: not counted
        } else {
          counted.spans += c.spans;
          counted.events += c.events;
        }
      } else if (req.path() == "/otlp/v1/metrics") {
        const Counted c = check_metrics(body, problems);
        if (script.empty() || script.front().status == 200) counted.points += c.points;
      } else {
        problems.push_back("path " + std::string(req.path()));
      }
      if (!script.empty()) {
        resp.status = script.front().status;
        resp.body = script.front().body;
        script.pop_front();
      } else {
        resp.body = "{}";
      }
    }
    responder->respond(std::move(resp));
  }
  net::HttpResponse connection_error(int status, std::string_view message) override {
    return {status, "application/json", {}, std::string(message)};
  }

  std::mutex mu_;
  std::deque<Answer> script;
  std::vector<std::string> problems;
  Counted counted;
  int posts = 0;
};

class Loopback {
 public:
  Loopback() : server_(ioc_, options(), {}, receiver, clock_) {
    server_.start();
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~Loopback() {
    boost::asio::post(ioc_, [this] { server_.drain(); });
    // Teardown only: the client closed its connections, the server notices.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (server_.connections() > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ioc_.stop();
    thread_.join();
    ioc_.restart();
    ioc_.poll();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_.port()) + "/otlp"; }
  Receiver receiver;

 private:
  static net::ServerOptions options() {
    net::ServerOptions o;
    o.port = 0;
    o.single_thread = true;
    o.warn = [](std::string_view) {};
    return o;
  }
  boost::asio::io_context ioc_;
  SteadyClock clock_;
  net::HttpServer server_;
  std::thread thread_;
};

PushOptions small_batches() {
  PushOptions o;
  o.otlp.spans_per_request = 2;
  o.otlp.points_per_request = 3;
  o.timeout_s = 10;
  return o;
}

TEST(PushOtlp, TheReceiverGetsEverySpanEventAndPointInValidRequests) {
  auto run = make_run();
  Loopback rx;
  std::vector<double> slept;
  const PushResult r =
      push_otlp(run->dir.path(), rx.url(), small_batches(), [&](double s) { slept.push_back(s); });
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_TRUE(rx.receiver.problems.empty()) << problems_text(rx.receiver.problems);
  EXPECT_EQ(rx.receiver.counted.spans, run->records.size());
  EXPECT_EQ(rx.receiver.counted.events, expected_events(run->records));
  EXPECT_EQ(rx.receiver.counted.points, 8u);
  EXPECT_EQ(r.requests_sent, r.stats.trace_requests + r.stats.metric_requests);
  EXPECT_EQ(static_cast<std::uint64_t>(rx.receiver.posts), r.requests_sent);
  EXPECT_TRUE(slept.empty());
}

TEST(PushOtlp, TaskSpansArePushedToo) {
  std::vector<std::string> problems;
  const auto e = export_task_run(problems);  // the run directory, and what the files hold
  Loopback rx;
  const PushResult r = push_otlp(e->dir.path(), rx.url(), small_batches(), [](double) {});
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_TRUE(rx.receiver.problems.empty()) << problems_text(rx.receiver.problems);
  EXPECT_EQ(rx.receiver.counted.spans, e->spans.size());
  EXPECT_EQ(r.stats.tasks, 2u);
  EXPECT_EQ(r.stats.requests_in_tasks, 3u);
}

TEST(PushOtlp, RetryableAnswersAreRetriedWithBackoff) {
  auto run = make_run();
  Loopback rx;
  rx.receiver.script = {{503, "busy"}, {429, "slow down"}};
  std::vector<double> slept;
  PushOptions o = small_batches();
  o.retry_delay_s = 0.25;
  const PushResult r = push_otlp(run->dir.path(), rx.url(), o, [&](double s) { slept.push_back(s); });
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.retries, 2u);
  EXPECT_EQ(slept, (std::vector<double>{0.25, 0.5}));
  EXPECT_EQ(rx.receiver.counted.spans, run->records.size());  // nothing lost
}

TEST(PushOtlp, AFinalRefusalIsReportedWithItsBodyAndTheRestIsSent) {
  auto run = make_run();
  Loopback rx;
  rx.receiver.script = {{400, R"({"message":"bad span at index 1"})"}};
  const PushResult r = push_otlp(run->dir.path(), rx.url(), small_batches(), [](double) {});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.retries, 0u);  // 400 is final
  EXPECT_EQ(r.requests_failed, 1u);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].signal, "traces");
  EXPECT_EQ(r.failures[0].batch, 0u);
  EXPECT_EQ(r.failures[0].status, 400);
  EXPECT_NE(r.failures[0].body.find("bad span at index 1"), std::string::npos);
  EXPECT_EQ(r.requests_sent, r.stats.trace_requests + r.stats.metric_requests - 1);
  EXPECT_EQ(rx.receiver.counted.spans, run->records.size() - 2);  // the first batch's two
  const std::string text = r.describe();
  EXPECT_NE(text.find("traces batch 0: HTTP 400"), std::string::npos) << text;
}

TEST(PushOtlp, PartialSuccessIsCounted) {
  auto run = make_run();
  Loopback rx;
  rx.receiver.script = {{200, R"({"partialSuccess":{"rejectedSpans":"1","errorMessage":"span too old"}})"}};
  const PushResult r = push_otlp(run->dir.path(), rx.url(), small_batches(), [](double) {});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.requests_failed, 0u);
  EXPECT_EQ(r.rejected_spans, 1u);
  ASSERT_EQ(r.partial_success_messages.size(), 1u);
  EXPECT_NE(r.partial_success_messages[0].find("span too old"), std::string::npos);
}

TEST(PushOtlp, AnEndpointThatIsDownCostsAFewTriesNotTheRun) {
  auto run = make_run();
  int port;
  {
    Loopback rx;  // a port that nothing listens on once it is gone
    port = std::stoi(rx.url().substr(17, rx.url().find("/otlp") - 17));
  }
  int sleeps = 0;
  PushOptions o = small_batches();
  o.client.connect_timeout_s = 5;
  const PushResult r =
      push_otlp(run->dir.path(), "http://127.0.0.1:" + std::to_string(port), o, [&](double) { ++sleeps; });
  EXPECT_TRUE(r.gave_up);
  EXPECT_EQ(r.requests_sent, 0u);
  EXPECT_EQ(r.requests_failed, 3u);  // max_consecutive_failures
  EXPECT_EQ(r.requests_not_sent, r.stats.trace_requests + r.stats.metric_requests - 3);
  EXPECT_EQ(sleeps, 3 * o.max_retries);
  ASSERT_FALSE(r.failures.empty());
  EXPECT_EQ(r.failures[0].status, 0);
  EXPECT_FALSE(r.failures[0].error.empty());
  EXPECT_EQ(r.failures[0].attempts, 1 + o.max_retries);
  EXPECT_THROW(push_otlp(run->dir.path(), "ftp://x", o), UsageError);
}

TEST(PushOtlp, RetryableStatuses) {
  for (int s : {0, 429, 502, 503, 504}) EXPECT_TRUE(otlp_retryable(s)) << s;
  for (int s : {200, 400, 401, 404, 413, 500}) EXPECT_FALSE(otlp_retryable(s)) << s;
}

}  // namespace
}  // namespace tokenscope::exporters
