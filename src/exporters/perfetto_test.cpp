#include "exporters/perfetto.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "exporters/test_util.h"

namespace tokenscope::exporters {
namespace {

using namespace rundir;
using namespace observe;

using nlohmann::json;
using testing::TempDir;

// The Trace Event Format's requirements per phase ("Trace Event Format",
// Google): the JSON Object Format has "traceEvents"; every event has "ph",
// "pid", "name" and "ts" (µs, a number); "X" adds "dur" (>= 0) and "tid";
// "i" adds "s" (g, p or t) and, thread-scoped, "tid"; "C" carries "args", an
// object of numbers; "M" is named process_name / thread_name (args.name, a
// string) or process_sort_index / thread_sort_index (args.sort_index, an
// integer). Returns what is wrong with the first bad event ("" when none).
std::string schema_problem(const json& trace) {
  if (!trace.is_object()) return "the trace is not an object";
  if (!trace.contains("traceEvents") || !trace["traceEvents"].is_array()) return "no traceEvents array";
  if (trace.contains("displayTimeUnit") && trace["displayTimeUnit"] != "ms" &&
      trace["displayTimeUnit"] != "ns")
    return "displayTimeUnit is neither ms nor ns";
  std::size_t i = 0;
  for (const auto& e : trace["traceEvents"]) {
    const std::string at = "event " + std::to_string(i++) + " " + e.dump() + ": ";
    if (!e.is_object()) return at + "not an object";
    if (!e.contains("ph") || !e["ph"].is_string() || e["ph"].get<std::string>().size() != 1) return at + "ph";
    if (!e.contains("pid") || !e["pid"].is_number_integer()) return at + "pid";
    if (!e.contains("name") || !e["name"].is_string() || e["name"].get<std::string>().empty())
      return at + "name";
    if (!e.contains("ts") || !e["ts"].is_number() || e["ts"].get<double>() < 0) return at + "ts";
    if (e.contains("args") && !e["args"].is_object()) return at + "args is not an object";
    const char ph = e["ph"].get<std::string>()[0];
    switch (ph) {
      case 'X':
        if (!e.contains("dur") || !e["dur"].is_number() || e["dur"].get<double>() < 0)
          return at + "X without dur";
        if (!e.contains("tid") || !e["tid"].is_number_integer()) return at + "X without tid";
        break;
      case 'i': {
        const std::string s = e.value("s", "t");
        if (s != "g" && s != "p" && s != "t") return at + "instant scope";
        if (s == "t" && (!e.contains("tid") || !e["tid"].is_number_integer()))
          return at + "thread instant without tid";
        break;
      }
      case 'C':
        if (!e.contains("args") || e["args"].empty()) return at + "counter without args";
        for (const auto& [k, v] : e["args"].items())
          if (!v.is_number()) return at + "counter value " + k + " is not a number";
        break;
      case 'M': {
        const std::string n = e["name"];
        if (n == "process_name" || n == "thread_name") {
          if (!e.contains("args") || !e["args"].contains("name") || !e["args"]["name"].is_string())
            return at + "name metadata without args.name";
        } else if (n == "process_sort_index" || n == "thread_sort_index") {
          if (!e.contains("args") || !e["args"].contains("sort_index") ||
              !e["args"]["sort_index"].is_number_integer())
            return at + "sort metadata without args.sort_index";
        } else {
          return at + "unknown metadata " + n;
        }
        if (n.starts_with("thread") && !e.contains("tid")) return at + "thread metadata without tid";
        break;
      }
      default:
        return at + "a phase this exporter does not write";
    }
  }
  return "";
}

// Nanoseconds after the origin, from a µs number written with three decimals.
Nanos ns(const json& us) {
  return std::llround(us.get<double>() * 1000.0);
}

struct Exported {
  json trace;
  PerfettoStats stats;
};

Exported export_text(const std::string& requests, std::optional<std::string> samples,
                     const PerfettoOptions& o = {}) {
  RunSource src;
  src.requests_text = requests;
  if (samples) src.samples_text = *samples;
  src.no_samples = !samples;
  std::string out;
  Exported e;
  e.stats = write_perfetto(src, out, o);
  e.trace = json::parse(out);
  return e;
}

std::vector<json> events_of(const json& trace, char ph) {
  std::vector<json> v;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == std::string(1, ph)) v.push_back(e);
  return v;
}

TEST(ExportPerfetto, SlicesAndTokenMarksMatchTheRecordsExactly) {
  const Nanos base = 5'000'000'000;  // the run's monotonic clock does not start at 0
  std::vector<RequestRecord> records = {
      testing::streamed(7, base + 1'000'123, 250'001, 30'000'007, 4, 9'999'999),
      testing::streamed(8, base + 2'000'000, 0, 12'345, 0, 0),  // no token came
  };
  records[0].event_tokens = {1, 3, 1, 2};  // usage spread over events
  records[1].outcome = Outcome::kTimeout;
  records[1].detail = "no first token within 1 s";
  const Exported e = export_text(testing::requests_jsonl(records), std::nullopt);
  ASSERT_EQ(schema_problem(e.trace), "");
  EXPECT_EQ(e.stats.origin_ns, base + 1'000'123);
  EXPECT_EQ(e.trace["otherData"]["origin_ns"], base + 1'000'123);
  EXPECT_EQ(e.stats.requests, 2u);
  EXPECT_FALSE(e.stats.samples_found);
  EXPECT_TRUE(events_of(e.trace, 'C').empty());

  // Slices by (tid, name) and instants by tid, each checked against the record.
  std::map<std::pair<std::int64_t, std::string>, json> slices;
  std::map<std::int64_t, std::vector<json>> tokens, headers;
  for (const auto& x : events_of(e.trace, 'X')) {
    EXPECT_EQ(x["pid"], 1);
    ASSERT_TRUE(
        slices.emplace(std::make_pair(x["tid"].get<std::int64_t>(), x["name"].get<std::string>()), x).second)
        << "two slices of one name on one lane: " << x;
  }
  for (const auto& x : events_of(e.trace, 'i')) {
    EXPECT_EQ(x["s"], "t");
    (x["name"] == "token" ? tokens : headers)[x["tid"].get<std::int64_t>()].push_back(x);
  }
  const Nanos origin = e.stats.origin_ns;
  std::set<std::int64_t> tids;
  for (const auto& r : records) {
    std::int64_t tid = -1;
    for (const auto& [key, x] : slices)
      if (key.second == "request " + std::to_string(r.id)) tid = key.first;
    ASSERT_GE(tid, 1) << "no slice for request " << r.id;
    tids.insert(tid);
    const json& whole = slices.at({tid, "request " + std::to_string(r.id)});
    EXPECT_EQ(ns(whole["ts"]), r.t_sched - origin);
    EXPECT_EQ(ns(whole["dur"]), r.t_close - r.t_sched);
    EXPECT_EQ(whole["args"]["outcome"], outcome_name(r.outcome));
    EXPECT_EQ(whole["args"]["events"], r.event_times.size());
    const json& queued = slices.at({tid, "queued"});
    EXPECT_EQ(ns(queued["ts"]), r.t_sched - origin);
    EXPECT_EQ(ns(queued["dur"]), r.t_send - r.t_sched);
    const json& waiting = slices.at({tid, "waiting"});
    EXPECT_EQ(ns(waiting["ts"]), r.t_send - origin);
    const Nanos waited_until = r.event_times.empty() ? r.t_close : r.event_times.front();
    EXPECT_EQ(ns(waiting["dur"]), waited_until - r.t_send);
    if (r.event_times.size() > 1) {
      const json& decoding = slices.at({tid, "decoding"});
      EXPECT_EQ(ns(decoding["ts"]), r.event_times.front() - origin);
      EXPECT_EQ(ns(decoding["dur"]), r.event_times.back() - r.event_times.front());
    } else {
      EXPECT_FALSE(slices.contains({tid, "decoding"}));
    }
    ASSERT_EQ(headers[tid].size(), 1u);
    EXPECT_EQ(ns(headers[tid][0]["ts"]), r.t_headers - origin);
    ASSERT_EQ(tokens[tid].size(), r.event_times.size());
    for (std::size_t i = 0; i < r.event_times.size(); ++i) {
      EXPECT_EQ(ns(tokens[tid][i]["ts"]), r.event_times[i] - origin);
      if (r.event_tokens[i] == 1)
        EXPECT_FALSE(tokens[tid][i].contains("args"));
      else
        EXPECT_EQ(tokens[tid][i]["args"]["tokens"], r.event_tokens[i]);
    }
  }
  // The two overlap: two lanes, each named.
  EXPECT_EQ(tids.size(), 2u);
  EXPECT_EQ(e.stats.lanes, 2u);
  EXPECT_EQ(e.stats.token_marks, 4u);
  std::set<std::int64_t> named;
  for (const auto& m : events_of(e.trace, 'M'))
    if (m["name"] == "thread_name") named.insert(m["tid"].get<std::int64_t>());
  EXPECT_EQ(named, tids);
  // Counts agree with the events written.
  EXPECT_EQ(e.stats.events, e.trace["traceEvents"].size());
  EXPECT_EQ(e.stats.slices, events_of(e.trace, 'X').size());
  EXPECT_EQ(e.stats.instants, events_of(e.trace, 'i').size());
  EXPECT_EQ(e.stats.metadata_events, events_of(e.trace, 'M').size());
}

TEST(ExportPerfetto, ALaneIsReusedOnceItsRequestHasEnded) {
  // A [0, 100 µs], B [50, 150] overlaps it, C [100, 200] starts when A ends,
  // D [160, 170] when B has ended: two lanes; C takes A's, D takes B's.
  auto rec = [](std::uint64_t id, Nanos from, Nanos to) {
    RequestRecord r;
    r.id = id;
    r.t_sched = from;
    r.t_send = from;
    r.t_close = to;
    return r;
  };
  // requests.jsonl is in order of completion, not of start.
  const std::vector<RequestRecord> records = {rec(1, 0, 100'000), rec(2, 50'000, 150'000),
                                              rec(4, 160'000, 170'000), rec(3, 100'000, 200'000)};
  const Exported e = export_text(testing::requests_jsonl(records), std::nullopt);
  ASSERT_EQ(schema_problem(e.trace), "");
  std::map<std::string, std::int64_t> lane;
  for (const auto& x : events_of(e.trace, 'X'))
    if (x["name"].get<std::string>().starts_with("request ")) lane[x["name"]] = x["tid"];
  EXPECT_EQ(e.stats.lanes, 2u);
  EXPECT_EQ(lane["request 1"], 1);
  EXPECT_EQ(lane["request 2"], 2);
  EXPECT_EQ(lane["request 3"], 1);
  EXPECT_EQ(lane["request 4"], 2);

  // One thread per request instead: each its own, named after it.
  PerfettoOptions o;
  o.lanes = false;
  const Exported each = export_text(testing::requests_jsonl(records), std::nullopt, o);
  ASSERT_EQ(schema_problem(each.trace), "");
  std::map<std::int64_t, std::string> names;
  for (const auto& m : events_of(each.trace, 'M'))
    if (m["name"] == "thread_name") names[m["tid"]] = m["args"]["name"];
  EXPECT_EQ(names, (std::map<std::int64_t, std::string>{
                       {1, "request 1"}, {2, "request 2"}, {3, "request 4"}, {4, "request 3"}}));
}

TEST(ExportPerfetto, CanonicalSeriesBecomeCounterTracks) {
  const Nanos s = kNanosPerSecond;
  auto obs = [](Nanos t, std::string source, std::vector<Sample> canonical) {
    Observation o;
    o.t_ns = t;
    o.source = std::move(source);
    o.canonical = std::move(canonical);
    return o;
  };
  std::vector<Observation> samples = {
      // Before the first request: the origin moves back to it.
      obs(1 * s, "server",
          {{"requests_running", {}, 2},
           {"prompt_tokens", {}, 100},
           {"server_ttft_seconds_bucket", {{"le", "0.1"}}, 1},
           {"server_ttft_seconds_sum", {}, 0.5},
           {"server_ttft_seconds_count", {}, 4}}),
      obs(3 * s, "server",
          {{"requests_running", {}, 5},
           {"prompt_tokens", {}, 500},
           {"server_ttft_seconds_sum", {}, 2.5},
           {"server_ttft_seconds_count", {}, 8}}),
      obs(4 * s, "server", {{"prompt_tokens", {}, 50}}),  // a reset: 50 counted since
      obs(2 * s, "gpu",
          {{"gpu_utilization", {{"gpu", "0"}}, 0.75}, {"gpu_power_watts", {{"gpu", "0"}}, NAN}}),
  };
  Observation failed;
  failed.t_ns = 2 * s;
  failed.source = "gpu";
  failed.error = "NVML: GPU is lost";
  samples.push_back(failed);
  const auto requests = testing::requests_jsonl({testing::streamed(1, 10 * s, 0, 1000, 2, 1000)});
  const Exported e = export_text(requests, testing::samples_jsonl(samples));
  ASSERT_EQ(schema_problem(e.trace), "");
  EXPECT_EQ(e.stats.origin_ns, 1 * s);
  EXPECT_TRUE(e.stats.samples_found);
  EXPECT_EQ(e.stats.observations, 4u);
  EXPECT_EQ(e.stats.observations_without_series, 1u);
  EXPECT_EQ(e.stats.non_finite_values, 1u);

  std::map<int, std::string> process;
  for (const auto& m : events_of(e.trace, 'M'))
    if (m["name"] == "process_name") process[m["pid"]] = m["args"]["name"];
  EXPECT_EQ(process, (std::map<int, std::string>{{1, "requests"}, {2, "server"}, {3, "gpu"}}));

  // (pid, track "NAME KEY") -> [(ns after origin, value)]
  std::map<std::pair<int, std::string>, std::vector<std::pair<Nanos, double>>> tracks;
  for (const auto& c : events_of(e.trace, 'C'))
    for (const auto& [k, v] : c["args"].items())
      tracks[{c["pid"].get<int>(), c["name"].get<std::string>() + " " + k}].emplace_back(ns(c["ts"]),
                                                                                         v.get<double>());
  using Points = std::vector<std::pair<Nanos, double>>;
  EXPECT_EQ((tracks[{2, "requests_running requests"}]), (Points{{0, 2}, {2 * s, 5}}));
  // Rates over each interval, drawn from its start: (500-100)/2 s, then 50/1 s after the reset.
  EXPECT_EQ((tracks[{2, "prompt_tokens tokens/s"}]), (Points{{0, 200}, {2 * s, 50}}));
  EXPECT_EQ((tracks[{2, "server_ttft_seconds_count /s"}]), (Points{{0, 2}}));
  EXPECT_EQ((tracks[{2, "server_ttft_seconds mean s"}]), (Points{{0, 0.5}}));  // (2.5-0.5)/(8-4)
  EXPECT_EQ((tracks[{3, "gpu_utilization{gpu=\"0\"} ratio"}]), (Points{{1 * s, 0.75}}));
  EXPECT_FALSE(tracks.contains({3, "gpu_power_watts{gpu=\"0\"} W"}));  // NaN: left out
  EXPECT_EQ(tracks.size(), 5u);
  EXPECT_EQ(e.stats.counter_tracks, 5u);
  EXPECT_EQ(e.stats.counter_events, 7u);
}

TEST(ExportPerfetto, ABadLineIsNamedByFileAndLineOrSkippedAndCounted) {
  std::string requests = testing::requests_jsonl({testing::streamed(1, 1000, 0, 1000, 1, 0)});
  requests += "{\"id\":2,\"outcome\":\"ok\",\"t_sched_ns\":\"soon\"}\n";
  requests += testing::requests_jsonl({testing::streamed(3, 2000, 0, 1000, 1, 0)});
  requests += "{\"id\":4,\"outcome\":\"fine\"}\n";
  try {
    export_text(requests, std::nullopt);
    FAIL() << "a bad line was accepted";
  } catch (const InputError& err) {
    EXPECT_EQ(err.file(), "requests.jsonl");
    EXPECT_EQ(err.line(), 2u);
    EXPECT_EQ(err.field(), "t_sched_ns");
    EXPECT_NE(std::string(err.what()).find("should be an integer, not a string"), std::string::npos)
        << err.what();
  }
  PerfettoOptions skip;
  skip.bad_lines = BadLines::kSkip;
  const Exported e = export_text(requests, std::nullopt, skip);
  ASSERT_EQ(schema_problem(e.trace), "");
  EXPECT_EQ(e.stats.requests, 2u);
  EXPECT_EQ(e.stats.requests_read.skipped, 2u);
  EXPECT_NE(e.stats.requests_read.first_skipped.find("requests.jsonl:2: field 't_sched_ns'"),
            std::string::npos)
      << e.stats.requests_read.first_skipped;

  // samples.jsonl too.
  const std::string samples = "{\"t_ns\":5,\"source\":\"host\",\"canonical\":[]}\n[1,2]\n";
  try {
    export_text(testing::requests_jsonl({testing::streamed(1, 1000, 0, 1000, 1, 0)}), samples);
    FAIL();
  } catch (const InputError& err) {
    EXPECT_EQ(err.file(), "samples.jsonl");
    EXPECT_EQ(err.line(), 2u);
  }
}

TEST(ExportPerfetto, RecordsThatContradictThemselvesAreRefused) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"id":1,"outcome":"ok","t_send_ns":-1,"event_offsets_ns":[5]})", "event_offsets_ns"},
      {R"({"id":1,"outcome":"ok","t_send_ns":10,"event_offsets_ns":[5,6],"event_tokens":[1]})",
       "event_tokens"},
      {R"({"id":1,"outcome":"ok","t_send_ns":10,"event_offsets_ns":[-5]})", "event_offsets_ns"},
      {R"({"id":1,"outcome":"ok","t_send_ns":9223372036854775000,"event_offsets_ns":[10000]})",
       "event_offsets_ns"},
      {R"({"id":1,"outcome":"ok","t_close_ns":-7})", "t_close_ns"},
      {R"({"outcome":"ok"})", "id"},
      {R"({"id":1})", "outcome"},
      {R"("a string")", ""},
      {R"({"id":1,)", ""},
  };
  for (const auto& [line, field] : cases) {
    try {
      export_text(std::string(line) + "\n", std::nullopt);
      ADD_FAILURE() << "accepted: " << line;
    } catch (const InputError& err) {
      EXPECT_EQ(err.field(), field) << line << " -> " << err.what();
      EXPECT_EQ(err.line(), 1u);
    }
  }
}

TEST(ExportPerfetto, WritesTheFileWholeOrNotAtAll) {
  TempDir dir;
  testing::write_text(dir.path() / "requests.jsonl",
                      testing::requests_jsonl({testing::streamed(1, 1000, 10, 1000, 3, 100)}));
  const auto out = dir.path() / "trace.json";
  const PerfettoStats stats = export_perfetto(dir.path(), out);
  EXPECT_EQ(schema_problem(json::parse(testing::read_text(out))), "");
  EXPECT_EQ(stats.bytes, std::filesystem::file_size(out));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "trace.json.tmp"));
  EXPECT_FALSE(stats.samples_found);  // no samples.jsonl: requests only

  // A bad line: no trace.json is left behind (the earlier one is kept).
  testing::write_text(dir.path() / "requests.jsonl", "{\"id\":1}\n");
  const auto other = dir.path() / "other.json";
  EXPECT_THROW(export_perfetto(dir.path(), other), InputError);
  EXPECT_FALSE(std::filesystem::exists(other));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "other.json.tmp"));
  // No requests.jsonl at all.
  std::filesystem::remove(dir.path() / "requests.jsonl");
  EXPECT_THROW(export_perfetto(dir.path(), other), UsageError);
}

TEST(ExportPerfetto, WarmUpRequestsCanBeLeftOut) {
  auto warm = testing::streamed(1, 1000, 0, 1000, 2, 10);
  warm.warmup = true;
  const auto requests = testing::requests_jsonl({warm, testing::streamed(2, 5000, 0, 1000, 2, 10)});
  PerfettoOptions o;
  o.include_warmup = false;
  o.token_marks = false;
  const Exported e = export_text(requests, std::nullopt, o);
  ASSERT_EQ(schema_problem(e.trace), "");
  EXPECT_EQ(e.stats.requests, 1u);
  EXPECT_EQ(e.stats.warmup_left_out, 1u);
  EXPECT_EQ(e.stats.origin_ns, 5000);
  EXPECT_EQ(e.stats.token_marks, 0u);
  for (const auto& x : events_of(e.trace, 'i')) EXPECT_NE(x["name"], "token");
}

TEST(ExportPerfetto, MicrosecondsAreWrittenExactly) {
  const std::pair<Nanos, const char*> cases[] = {{0, "0"},       {1, "0.001"},          {10, "0.01"},
                                                 {1000, "1"},    {1234567, "1234.567"}, {1234500, "1234.5"},
                                                 {-1500, "-1.5"}};
  for (const auto& [v, text] : cases) {
    std::string out;
    append_micros(out, v);
    EXPECT_EQ(out, text);
  }
}

TEST(ExportPerfetto, LongDetailsAreCutBetweenCharacters) {
  EXPECT_EQ(utf8_prefix("abc", 5), "abc");
  EXPECT_EQ(utf8_prefix("abcdef", 3), "abc");
  EXPECT_EQ(utf8_prefix("ab\xc3\xa9", 3), "ab");                          // é is two bytes: not cut in two
  EXPECT_EQ(utf8_prefix("\xe2\x82\xac\xe2\x82\xac", 4), "\xe2\x82\xac");  // €
  auto r = testing::streamed(1, 1000, 0, 1000, 0, 0);
  r.outcome = Outcome::kProtocolError;
  r.detail = std::string(199, 'x') + "\xc3\xa9 and more";
  const Exported e = export_text(testing::requests_jsonl({r}), std::nullopt);
  int found = 0;
  for (const auto& x : events_of(e.trace, 'X')) {
    if (x["name"] != "request 1") continue;
    EXPECT_EQ(x["args"]["detail"], std::string(199, 'x'));
    ++found;
  }
  EXPECT_EQ(found, 1);
}

// ---------------------------------------------------------------- tasks

Exported export_tasks(const testing::TaskRun& run, const std::string& tasks,
                      std::optional<std::string> samples = std::nullopt, const PerfettoOptions& o = {}) {
  const std::string requests = testing::requests_jsonl(run.requests);
  RunSource src;
  src.requests_text = requests;
  src.tasks_text = tasks;
  if (samples) src.samples_text = *samples;
  src.no_samples = !samples;
  std::string out;
  Exported e;
  e.stats = write_perfetto(src, out, o);
  e.trace = json::parse(out);
  return e;
}

// Slices of one thread nest: sorted by start (the longer first at one
// start), each starts at or after the end of the one before it at its
// depth, or ends within it. "" when they do, else the first that does not.
std::string nesting_problem(std::vector<json> slices) {
  std::sort(slices.begin(), slices.end(), [](const json& a, const json& b) {
    return ns(a["ts"]) != ns(b["ts"]) ? ns(a["ts"]) < ns(b["ts"]) : ns(a["dur"]) > ns(b["dur"]);
  });
  std::vector<Nanos> open;  // ends of the enclosing slices
  for (const auto& x : slices) {
    const Nanos from = ns(x["ts"]), to = from + ns(x["dur"]);
    while (!open.empty() && open.back() <= from) open.pop_back();
    if (!open.empty() && to > open.back()) return x.dump();
    open.push_back(to);
  }
  return "";
}

const json* slice_named(const std::vector<json>& slices, const std::string& name) {
  const json* found = nullptr;
  for (const auto& x : slices)
    if (x["name"] == name) {
      if (found) return nullptr;  // two of one name: the test names each once
      found = &x;
    }
  return found;
}

TEST(ExportPerfettoTasks, TasksAndTheirStepsAreNestedSlicesOnTheRunsClock) {
  constexpr Nanos base = 7'000'000'000;
  const testing::TaskRun run = testing::task_run(base);
  Observation obs;
  obs.t_ns = base + 500'000'000;
  obs.source = "server";
  obs.canonical = {{"requests_running", {}, 2}};
  const Exported e = export_tasks(run, run.tasks_jsonl(), testing::samples_jsonl({obs}));
  ASSERT_EQ(schema_problem(e.trace), "");

  // Task 3 starts first: it is the time origin, before any request.
  const Nanos origin = base + 100'000;
  EXPECT_EQ(e.stats.origin_ns, origin);
  EXPECT_TRUE(e.stats.tasks_found);
  EXPECT_EQ(e.stats.tasks, 2u);
  EXPECT_EQ(e.stats.task_steps, 7u);  // reply never ran
  EXPECT_EQ(e.stats.task_threads, 4u);

  // Processes: requests (sort 0), tasks (pid 2, sort 1), then the samples' one.
  std::map<int, std::string> process;
  std::map<int, std::int64_t> sort_index;
  std::map<std::int64_t, std::string> task_threads;
  for (const auto& m : events_of(e.trace, 'M')) {
    if (m["name"] == "process_name") process[m["pid"]] = m["args"]["name"];
    if (m["name"] == "process_sort_index") sort_index[m["pid"]] = m["args"]["sort_index"];
    if (m["name"] == "thread_name" && m["pid"] == 2) task_threads[m["tid"]] = m["args"]["name"];
  }
  EXPECT_EQ(process, (std::map<int, std::string>{{1, "requests"}, {2, "tasks"}, {3, "server"}}));
  EXPECT_LT(sort_index[1], sort_index[2]);
  EXPECT_LT(sort_index[2], sort_index[3]);
  // Two lanes (the tasks overlap); task 3 runs three steps at once.
  EXPECT_EQ(task_threads, (std::map<std::int64_t, std::string>{
                              {1, "lane 1"}, {2, "lane 1 #2"}, {3, "lane 1 #3"}, {4, "lane 2"}}));

  std::vector<json> tasks, steps, requests;
  std::map<std::int64_t, std::vector<json>> by_tid;
  for (const auto& x : events_of(e.trace, 'X')) {
    if (x["pid"] == 1) {
      if (x["name"].get<std::string>().starts_with("request ")) requests.push_back(x);
      continue;
    }
    ASSERT_EQ(x["pid"], 2) << x;
    (x["cat"] == "task" ? tasks : steps).push_back(x);
    by_tid[x["tid"].get<std::int64_t>()].push_back(x);
  }
  ASSERT_EQ(tasks.size(), 2u);
  ASSERT_EQ(steps.size(), 7u);
  // No thread holds slices that overlap without nesting.
  for (const auto& [tid, slices] : by_tid) EXPECT_EQ(nesting_problem(slices), "") << "thread " << tid;

  const json* research = slice_named(tasks, "research");
  const json* support = slice_named(tasks, "support");
  ASSERT_TRUE(research && support);
  EXPECT_EQ(ns((*research)["ts"]), 0);
  EXPECT_EQ(ns((*research)["dur"]), 900'000'000 - 100'000);
  EXPECT_EQ((*research)["tid"], 1);
  EXPECT_EQ((*research)["args"]["id"], 3);
  EXPECT_EQ((*research)["args"]["outcome"], "ok");
  EXPECT_EQ((*research)["args"]["mode"], "scripted");
  EXPECT_EQ((*research)["args"]["steps"], 5);
  EXPECT_EQ((*research)["args"]["critical_path"]["steps"], json({"plan", "r2", "summary"}));
  EXPECT_EQ((*research)["args"]["critical_path"]["model_ms"], 790.5);
  EXPECT_FALSE((*research).contains("cname"));
  EXPECT_EQ(ns((*support)["ts"]), base + 200'000'000 - origin);
  EXPECT_EQ((*support)["tid"], 4);
  EXPECT_EQ((*support)["cname"], "terrible");
  EXPECT_EQ((*support)["args"]["failure"], "timeout");
  EXPECT_EQ((*support)["args"]["failed_step"], "lookup-1");
  EXPECT_EQ((*support)["args"]["not_run"], json({"reply"}));

  // Every step against its record: times, and args.
  const std::map<std::string, std::int64_t> task_tid = {{"3", 1}, {"4", 4}};
  for (const auto& t : run.tasks) {
    for (const auto& s : t["steps"]) {
      if (!s.contains("t_start_ns")) {
        EXPECT_EQ(slice_named(steps, s["id"]), nullptr) << s;
        continue;
      }
      const json* x = slice_named(steps, s["id"]);
      ASSERT_NE(x, nullptr) << s;
      EXPECT_EQ(ns((*x)["ts"]), s["t_start_ns"].get<Nanos>() - origin) << s;
      EXPECT_EQ(ns((*x)["dur"]), s["t_end_ns"].get<Nanos>() - s["t_start_ns"].get<Nanos>()) << s;
      EXPECT_EQ((*x)["cat"], s["kind"]);
      EXPECT_EQ((*x)["args"]["task"], t["id"]);
      EXPECT_EQ((*x)["args"]["kind"], s["kind"]);
      EXPECT_EQ((*x)["args"]["name"], s["name"]);
      EXPECT_EQ((*x)["args"]["attempts"], s["attempts"]);
      EXPECT_EQ((*x)["args"]["outcome"], s["outcome"]);
      EXPECT_EQ((*x)["args"].value("requests", json::array()), s.value("requests", json::array()));
      // On the task's threads, right below it.
      const std::int64_t first = task_tid.at(t["id"].dump());
      EXPECT_GE((*x)["tid"], first);
      EXPECT_LT((*x)["tid"], first + (t["id"] == 3 ? 3 : 1));
    }
  }
  // The critical path nests in the task's slice on its thread; the steps
  // that ran beside it go below, one thread each as they overlap.
  for (const char* id : {"plan", "r2", "summary"}) {
    EXPECT_EQ((*slice_named(steps, id))["tid"], 1) << id;
    EXPECT_EQ((*slice_named(steps, id))["args"]["critical"], true) << id;
  }
  EXPECT_EQ((*slice_named(steps, "r1"))["tid"], 2);
  EXPECT_EQ((*slice_named(steps, "weather"))["tid"], 3);
  EXPECT_FALSE((*slice_named(steps, "r1"))["args"].contains("critical"));
  const json& weather = *slice_named(steps, "weather");
  EXPECT_EQ(weather["args"]["retried"], json({"http"}));
  EXPECT_EQ((*slice_named(steps, "r1"))["args"]["documents"], json({"doc-58", "doc-285", "doc-446"}));
  const json& plan = *slice_named(steps, "plan");
  EXPECT_EQ(plan["args"]["prompt_tokens"], 64);
  EXPECT_EQ(plan["args"]["cached_tokens"], 16);
  EXPECT_EQ(plan["args"]["ready_to_start_us"], 100);
  const json& lookup = *slice_named(steps, "lookup-1");
  EXPECT_EQ(lookup["cname"], "terrible");
  EXPECT_EQ(lookup["args"]["failure"], "timeout");
  EXPECT_EQ(lookup["args"]["detail"], "no answer within 200 ms");
  EXPECT_EQ(lookup["tid"], 4);

  // One time base: each model call's request slice lies within its step's,
  // and names the task and the step; a plain request names neither.
  for (const auto& r : run.requests) {
    const json* x = slice_named(requests, "request " + std::to_string(r.id));
    ASSERT_NE(x, nullptr) << r.id;
    EXPECT_EQ(ns((*x)["ts"]), r.t_sched - origin);
    if (r.task < 0) {
      EXPECT_FALSE((*x)["args"].contains("task")) << r.id;
      continue;
    }
    EXPECT_EQ((*x)["args"]["task"], r.task);
    EXPECT_EQ((*x)["args"]["step"], r.step);
    if (r.task == 99) continue;  // no such task in tasks.jsonl
    const json& step = *slice_named(steps, r.step);
    EXPECT_GE(ns((*x)["ts"]), ns(step["ts"])) << r.id;
    EXPECT_LE(ns((*x)["ts"]) + ns((*x)["dur"]), ns(step["ts"]) + ns(step["dur"])) << r.id;
  }
  EXPECT_EQ(e.stats.slices, events_of(e.trace, 'X').size());
  EXPECT_EQ(e.stats.events, e.trace["traceEvents"].size());
}

TEST(ExportPerfettoTasks, WithoutLanesEachTaskHasItsOwnThreads) {
  const testing::TaskRun run = testing::task_run(1'000'000'000);
  PerfettoOptions o;
  o.lanes = false;
  const Exported e = export_tasks(run, run.tasks_jsonl(), std::nullopt, o);
  ASSERT_EQ(schema_problem(e.trace), "");
  std::map<std::int64_t, std::string> names;
  for (const auto& m : events_of(e.trace, 'M'))
    if (m["name"] == "thread_name" && m["pid"] == 2) names[m["tid"]] = m["args"]["name"];
  EXPECT_EQ(names, (std::map<std::int64_t, std::string>{
                       {1, "task 3"}, {2, "task 3 #2"}, {3, "task 3 #3"}, {4, "task 4"}}));
}

TEST(ExportPerfettoTasks, ABadTaskLineIsNamedByFileLineAndFieldOrSkipped) {
  const testing::TaskRun run = testing::task_run(1'000'000'000);
  json bad = run.tasks[0];
  bad["steps"][1]["kind"] = "thinking";
  const std::string tasks = run.tasks[1].dump() + "\n" + bad.dump() + "\n";
  try {
    export_tasks(run, tasks);
    FAIL() << "a bad task line was accepted";
  } catch (const InputError& err) {
    EXPECT_EQ(err.file(), "tasks.jsonl");
    EXPECT_EQ(err.line(), 2u);
    EXPECT_EQ(err.field(), "steps[1].kind");
    EXPECT_NE(std::string(err.what()).find("'thinking' is not one of model, tool, retrieval"),
              std::string::npos)
        << err.what();
  }
  PerfettoOptions skip;
  skip.bad_lines = BadLines::kSkip;
  const Exported e = export_tasks(run, tasks + "not json\n", std::nullopt, skip);
  ASSERT_EQ(schema_problem(e.trace), "");
  EXPECT_EQ(e.stats.tasks, 1u);
  EXPECT_EQ(e.stats.tasks_read.skipped, 2u);
  EXPECT_NE(e.stats.tasks_read.first_skipped.find("tasks.jsonl:2: field 'steps[1].kind'"), std::string::npos)
      << e.stats.tasks_read.first_skipped;
}

TEST(ExportPerfettoTasks, TasksThatContradictThemselvesAreRefused) {
  const testing::TaskRun run = testing::task_run(1'000'000'000);
  const auto with = [&](const std::function<void(json&)>& change) {
    json t = run.tasks[0];
    change(t);
    return t.dump() + "\n";
  };
  const std::pair<std::string, const char*> cases[] = {
      {with([](json& t) { t["steps"][4]["t_end_ns"] = t["t_end_ns"].get<Nanos>() + 1; }),
       "steps[4].t_end_ns"},
      {with([](json& t) { t["steps"][0]["t_start_ns"] = t["t_start_ns"].get<Nanos>() - 1; }),
       "steps[0].t_start_ns"},
      {with([](json& t) { t["steps"][1].erase("t_end_ns"); }), "steps[1].t_end_ns"},
      {with([](json& t) { t["steps"][3]["id"] = "r1"; }), "steps[3].id"},
      {with([](json& t) { t["steps"][2].erase("kind"); }), "steps[2].kind"},
      {with([](json& t) { t["steps"][0]["requests"] = {"one"}; }), "steps[0].requests"},
      {with([](json& t) { t["t_end_ns"] = 5; }), "t_end_ns"},
      {with([](json& t) { t["outcome"] = "fine"; }), "outcome"},
      {with([](json& t) { t.erase("steps"); }), "steps"},
      {with([](json& t) { t["steps"] = json::array({1}); }), "steps[0]"},
      {with([](json& t) { t["critical_path"]["model_ms"] = "long"; }), "critical_path.model_ms"},
      {with([](json& t) { t.erase("id"); }), "id"},
      {"[1]\n", ""},
  };
  for (const auto& [line, field] : cases) {
    try {
      export_tasks(run, line);
      ADD_FAILURE() << "accepted: " << line;
    } catch (const InputError& err) {
      EXPECT_EQ(err.field(), field) << err.what();
      EXPECT_EQ(err.line(), 1u);
    }
  }
}

TEST(ExportPerfettoTasks, AnEmptyTasksFileChangesNothing) {
  const testing::TaskRun run = testing::task_run(1'000'000'000);
  const std::string requests = testing::requests_jsonl(run.requests);
  RunSource without;
  without.requests_text = requests;
  without.no_samples = true;
  RunSource empty = without;
  empty.tasks_text = "";
  std::string a, b;
  write_perfetto(without, a);
  const PerfettoStats stats = write_perfetto(empty, b);
  EXPECT_EQ(a, b);
  EXPECT_TRUE(stats.tasks_found);
  EXPECT_EQ(stats.tasks, 0u);
}

}  // namespace
}  // namespace tokenscope::exporters
