// requests.jsonl's reader (rundir/readers.h) on the fields a record gained
// later: a record written by core/record.cpp reads back as it was, and a
// line of an older run (without them) still reads.
#include "rundir/readers.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/error.h"
#include "rundir/run_set.h"

namespace tokenscope::rundir {
namespace {

using namespace observe;

TEST(RequestRecordRoundTrip, LogprobsReadBackAsWritten) {
  RequestRecord r;
  r.id = 11;
  r.tenant = "t";
  r.t_send = 1000;
  r.event_times = {1500, 1700};
  r.event_tokens = {1, 1};
  r.output_tokens = 3;
  r.logprobs.emplace();
  for (double lp : {-0.1, -0.6, -0.65, -25.0}) r.logprobs->add(lp);
  std::string line;
  r.append_json(line);
  RequestLineParser parser;
  RequestRecord e;
  parser.parse(line, e);
  ASSERT_TRUE(e.logprobs.has_value()) << line;
  EXPECT_EQ(e.logprobs->count, 4u);
  EXPECT_NEAR(e.logprobs->sum, -26.35, 1e-9);  // written with 4 decimals
  EXPECT_EQ(e.logprobs->bins, r.logprobs->bins);
  EXPECT_EQ(e.logprobs->bins[2], 2u);
  EXPECT_EQ(e.logprobs->bins[80], 1u);

  // Asked for, none sent: n = 0, still a histogram.
  r.logprobs.emplace();
  line.clear();
  r.append_json(line);
  parser.parse(line, e);
  ASSERT_TRUE(e.logprobs.has_value());
  EXPECT_EQ(e.logprobs->count, 0u);

  // A record without the field (a run without --logprobs, or an older one):
  // nullopt, whatever the line before it held.
  parser.parse(R"({"id":1,"outcome":"ok","t_send_ns":5,"event_offsets_ns":[1]})", e);
  EXPECT_FALSE(e.logprobs.has_value());
}

// Every field append_json writes reads back into the same record type: the
// counts of the client, the tokens and gaps of events past --max-events.
TEST(RequestRecordRoundTrip, EveryWrittenFieldReadsBack) {
  RequestRecord r;
  r.id = 9;
  r.t_sched = 10;
  r.t_send = 20;
  r.t_first_token = 30;
  r.t_last_token = 40;
  r.t_close = 41;
  r.event_times = {30, 35, 40};
  r.event_tokens = {1, 2, 1};
  r.prompt_tokens = 12;
  r.prompt_tokens_planned = 11;
  r.output_tokens = 4;
  r.output_tokens_client = 5;
  r.output_tokens_counted_by_client = true;
  r.server_prompt_ms = 1.25;
  r.server_prompt_evaluated = 7;
  r.server_decode_ms = 3.5;
  r.events_dropped = 2;
  r.dropped_event_tokens = 3;
  r.reasoning_tokens = 2;
  r.t_first_answer = 35;
  r.replica = 3;
  auto gaps = std::make_shared<LogLinearHistogram>();
  gaps->record(1000, 2);
  r.dropped_gaps_ns = gaps;
  std::string line;
  r.append_json(line);
  RequestLineParser parser;
  RequestRecord e;
  parser.parse(line, e);
  EXPECT_EQ(e.prompt_tokens_planned, 11);
  EXPECT_EQ(e.output_tokens_client, 5);
  EXPECT_TRUE(e.output_tokens_counted_by_client);
  EXPECT_DOUBLE_EQ(e.server_decode_ms, 3.5);
  EXPECT_EQ(e.events_dropped, 2u);
  EXPECT_EQ(e.dropped_event_tokens, 3u);
  ASSERT_TRUE(e.dropped_gaps_ns);
  EXPECT_EQ(e.dropped_gaps_ns->count(), 2u);
  EXPECT_EQ(e.event_tokens, r.event_tokens);
  EXPECT_EQ(e.first_token(), 30);
  EXPECT_EQ(e.reasoning_tokens, 2);
  EXPECT_EQ(e.first_answer(), 35);
  EXPECT_EQ(e.answer_tokens(), 2);
  EXPECT_EQ(e.replica, 3);
  EXPECT_EQ(e.start(), 10);
  EXPECT_EQ(e.end(), 41);
  std::string again;
  e.append_json(again);
  EXPECT_EQ(again, line);
  // A histogram of gaps that holds no whole numbers is a bad line, named by field.
  for (
      const char* bad :
      {R"({"id":1,"outcome":"ok","dropped_gaps_ns":[1]})",
       R"({"id":1,"outcome":"ok","dropped_gaps_ns":{"count":1e300,"min":0,"max":0,"sub_bucket_bits":4,"sum":0,"sum_sq":0,"buckets":[]}})",
       R"({"id":1,"outcome":"ok","dropped_gaps_ns":{"count":1,"min":0,"max":0,"sub_bucket_bits":4,"sum":0,"sum_sq":0,"buckets":[[1e300,1]]}})"}) {
    try {
      parser.parse(bad, e);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const LineError& err) {
      EXPECT_EQ(err.field(), "dropped_gaps_ns") << err.what();
    }
  }
}

TEST(RequestRecordRoundTrip, BadLogprobsAreNamedByField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"id":1,"outcome":"ok","logprobs":[1,2]})", "logprobs"},
      {R"({"id":1,"outcome":"ok","logprobs":{"n":2,"sum":-1,"bins":[1]}})", "logprobs.bins"},
      {R"({"id":1,"outcome":"ok","logprobs":{"n":1,"sum":0.5,"bins":[1]}})", "logprobs.sum"},
      {R"({"id":1,"outcome":"ok","logprobs":{"n":1,"bins":[1]}})", "logprobs.sum"},
      {R"({"id":1,"outcome":"ok","logprobs":{"n":1,"sum":-1,"bins":[-1]}})", "logprobs.bins"},
      {R"({"id":1,"outcome":"ok","logprobs":{"n":-1,"sum":-1,"bins":[]}})", "logprobs.n"},
  };
  RequestLineParser parser;
  RequestRecord e;
  for (const auto& [line, field] : cases) {
    try {
      parser.parse(line, e);
      ADD_FAILURE() << "accepted: " << line;
    } catch (const LineError& err) {
      EXPECT_EQ(err.field(), field) << line << ": " << err.what();
    }
  }
  std::string many = R"({"id":1,"outcome":"ok","logprobs":{"n":82,"sum":-1,"bins":[)";
  for (int i = 0; i < 82; ++i) many += i ? ",1" : "1";
  many += "]}}";
  EXPECT_THROW(parser.parse(many, e), LineError);
  // Through the reader: the file, the line and the field.
  const std::string text =
      "{\"id\":1,\"outcome\":\"ok\"}\n{\"id\":2,\"outcome\":\"ok\",\"logprobs\":{\"n\":3,\"sum\":-1,\"bins\":"
      "[1]}}\n";
  RequestsReader reader(text, "requests.jsonl", BadLines::kFail);
  RequestRecord out;
  EXPECT_TRUE(reader.next(out));
  try {
    reader.next(out);
    FAIL() << "a bad line was accepted";
  } catch (const InputError& err) {
    EXPECT_EQ(err.line(), 2u);
    EXPECT_EQ(err.field(), "logprobs.bins");
    EXPECT_NE(std::string(err.what()).find("add up to 1, not n = 3"), std::string::npos) << err.what();
  }
}

// A task's model call names its task and step; the next record, a request
// of its own, must not keep them (the parser reuses one record).
TEST(RequestRecordRoundTrip, TaskAndStepDoNotOutliveTheirLine) {
  RequestRecord r;
  r.id = 1099511627776;
  r.task = 7;
  r.step = "plan";
  std::string line;
  r.append_json(line);
  RequestLineParser parser;
  RequestRecord e;
  parser.parse(line, e);
  EXPECT_EQ(e.task, 7);
  EXPECT_EQ(e.step, "plan");
  parser.parse(R"({"id":2,"outcome":"ok"})", e);
  EXPECT_EQ(e.task, -1);
  EXPECT_EQ(e.step, "");
}

// A line as bench/task_driver.cpp writes it (docs/tasks.md "Output") reads
// back field by field; the next line starts from nothing.
// The plain form tokenscope writes is read by a fast path; any other form by
// simdjson's DOM. Both give the same record: each plain line is read again
// in a form the fast path passes to the DOM (a key spelled with a \u escape,
// which names the same key), and every field compared.
std::string fields_of(const RequestRecord& r) {
  std::string out;
  r.append_json(out);
  return out;
}

TEST(RequestLineFastPath, GivesTheDomsRecordForEveryPlainLine) {
  const std::vector<std::string> lines = {
      R"({"id":0,"tenant":"default","t_sched_ns":0,"t_send_ns":0,"t_headers_ns":-1,"t_first_scheduled_ns":0,)"
      R"("t_first_token_ns":13924538,"t_last_token_ns":1063108513,"t_close_ns":1063108513,"prompt_tokens":566,)"
      R"("output_tokens":3,"output_tokens_client":3,"cached_tokens":0,"preemptions":0,"outcome":"ok",)"
      R"("event_offsets_ns":[13924538,19948956,1063108513]})",
      R"({ "id" : 7 , "class":"chat","model":"m","session":3,"turn":2,"replica":2,"warmup":true,"cancel_planned":false,)"
      R"("t_send_ns":100,"http_status":200,"detail":"fine","outcome":"cancelled","event_offsets_ns":[ 0 , 5 ],)"
      R"("event_tokens":[1,4],"output_tokens_from":"client","reasoning_tokens":-1,"events_dropped":2} )",
      R"({"id":9,"outcome":"http_error","t_send_ns":-1,"event_offsets_ns":[],"prompt_tokens":-1})",
      // A repeated key: the DOM appends a repeated array, and keeps the last scalar.
      R"({"id":1,"id":2,"outcome":"ok","t_send_ns":10,"event_offsets_ns":[1,2],"event_offsets_ns":[3]})",
      // Numbers at their edges: 19 digits, an id at 2^63 - 1.
      R"({"id":9223372036854775807,"outcome":"ok","t_send_ns":1,"event_offsets_ns":[1234567890123456789]})",
  };
  RequestLineParser parser;
  for (const auto& line : lines) {
    RequestRecord fast, dom;
    parser.parse(line, fast);
    std::string escaped = line;
    const auto at = escaped.find("\"outcome\"");
    ASSERT_NE(at, std::string::npos);
    escaped.replace(at, 9, "\"\\u006futcome\"");  // the same key, not in the plain form
    parser.parse(escaped, dom);
    EXPECT_EQ(fields_of(fast), fields_of(dom)) << line;
    EXPECT_EQ(fast.event_tokens, dom.event_tokens) << line;
    EXPECT_EQ(fast.warmup, dom.warmup) << line;
    EXPECT_EQ(fast.cancel_planned, dom.cancel_planned) << line;
  }
  RequestRecord r;
  parser.parse(lines[3], r);
  EXPECT_EQ(r.id, 2u);
  EXPECT_EQ(r.event_times, (std::vector<Nanos>{11, 12, 13}));
  // A repeated key spelled two ways: the DOM reads the line, the plain one
  // read ahead is appended to the other, as the DOM alone appends them.
  parser.parse(R"({"id":1,"outcome":"ok","t_send_ns":0,"event_offsets_ns" :[5],"event_offsets_ns":[7,9],)"
               R"("server_prompt_ms":1.5})",
               r);
  EXPECT_EQ(r.event_times, (std::vector<Nanos>{5, 7, 9}));
}

TEST(RequestLineFastPath, WhatThePlainFormDoesNotCoverStillGetsTheDomsMessages) {
  RequestLineParser parser;
  RequestRecord r;
  const auto error_of = [&](const std::string& line) {
    try {
      parser.parse(line, r);
    } catch (const LineError& e) {
      return e.field() + ": " + e.what();
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(R"({"id":1,"outcome":"ok","t_send_ns":-2})"),
            "t_send_ns: should be -1 (did not happen) or >= 0, not -2");
  EXPECT_EQ(error_of(R"({"id":-1,"outcome":"ok"})"), "id: should be a non-negative integer, not an integer");
  EXPECT_EQ(error_of(R"({"id":1,"outcome":"ok","prompt_tokens":1.5})"),
            "prompt_tokens: should be an integer, not a fractional number");
  EXPECT_EQ(error_of(R"({"id":1,"outcome":"fine"})").substr(0, 25), "outcome: 'fine' is not an");
  EXPECT_EQ(error_of(R"({"id":1,"outcome":"ok","t_send_ns":0,"event_offsets_ns":[1,-2]})"),
            "event_offsets_ns: should hold integers >= 0 (ns after t_send_ns)");
  EXPECT_EQ(error_of(R"({"id":01,"outcome":"ok"})").substr(0, 10), ": not JSON");
  EXPECT_EQ(error_of(R"({"id":1,"outcome":"ok"} x)").substr(0, 10), ": not JSON");
  EXPECT_EQ(error_of(R"({"id":1})"), "outcome: missing (every request record has one)");
  // A nested "event_offsets_ns" is not the record's.
  EXPECT_EQ(error_of(R"({"id":1,"outcome":"ok","t_send_ns":0,"x":{"event_offsets_ns":[5]}})"), "no error");
  EXPECT_TRUE(r.event_times.empty());
  // Text beyond ASCII: the DOM reads it (and checks its UTF-8).
  EXPECT_EQ(error_of("{\"id\":1,\"outcome\":\"ok\",\"tenant\":\"caf\xc3\xa9\"}"), "no error");
  EXPECT_EQ(r.tenant, "caf\xc3\xa9");
  EXPECT_EQ(error_of("{\"id\":1,\"outcome\":\"ok\",\"tenant\":\"caf\xc3\"}").substr(0, 10), ": not JSON");
}

TEST(TaskRecords, ALineOfTheTaskDriverReadsBack) {
  const std::string line =
      R"({"id":7,"class":"research","tenant":"default","mode":"scripted","t_sched_ns":100,"t_start_ns":110,)"
      R"("t_end_ns":900,"duration_ms":0.00079,"outcome":"failed","failure":"unsupported_claim",)"
      R"("failed_step":"summary","warmup":true,"steps":[)"
      R"({"id":"plan","kind":"model","name":"model","outcome":"ok","attempts":1,"t_ready_ns":110,)"
      R"("t_start_ns":120,"t_end_ns":300,"requests":[1099511627783],"prompt_tokens":64,"cached_tokens":16,)"
      R"("output_tokens":63},)"
      R"({"id":"r1","kind":"retrieval","name":"web_search","outcome":"ok","attempts":2,"t_ready_ns":300,)"
      R"("t_start_ns":301,"t_end_ns":400,"retried":["http"],"documents":["doc-58","doc-285"]},)"
      R"({"id":"summary","kind":"model","name":"model","outcome":"failed","attempts":1,"t_ready_ns":400,)"
      R"("t_start_ns":401,"t_end_ns":890,"failure":"unsupported_claim","detail":"cites doc-9"},)"
      R"({"id":"late","kind":"tool","name":"weather","outcome":"skipped","attempts":0}],)"
      R"("critical_path":{"steps":["plan","r1","summary"],"total_ms":0.00079,"model_ms":0.0006,)"
      R"("tool_ms":0.0001,"client_ms":0.00002,"queue_ms":0.00007}})";
  TaskLineParser parser;
  TaskRecord t;
  parser.parse(line, t);
  EXPECT_EQ(t.id, 7u);
  EXPECT_EQ(t.task_class, "research");
  EXPECT_EQ(t.tenant, "default");
  EXPECT_EQ(t.mode, "scripted");
  EXPECT_EQ(t.outcome, "failed");
  EXPECT_EQ(t.failure, "unsupported_claim");
  EXPECT_EQ(t.failed_step, "summary");
  EXPECT_EQ(t.t_sched, 100);
  EXPECT_EQ(t.t_start, 110);
  EXPECT_EQ(t.t_end, 900);
  EXPECT_TRUE(t.warmup);
  ASSERT_EQ(t.steps.size(), 4u);
  EXPECT_EQ(t.steps[0].requests, (std::vector<std::uint64_t>{1099511627783}));
  EXPECT_EQ(t.steps[0].prompt_tokens, 64);
  EXPECT_EQ(t.steps[0].cached_tokens, 16);
  EXPECT_EQ(t.steps[0].output_tokens, 63);
  EXPECT_EQ(t.steps[0].t_ready, 110);
  EXPECT_EQ(t.steps[1].kind, "retrieval");
  EXPECT_EQ(t.steps[1].name, "web_search");
  EXPECT_EQ(t.steps[1].attempts, 2u);
  EXPECT_EQ(t.steps[1].retried, (std::vector<std::string>{"http"}));
  EXPECT_EQ(t.steps[1].documents, (std::vector<std::string>{"doc-58", "doc-285"}));
  EXPECT_EQ(t.steps[2].failure, "unsupported_claim");
  EXPECT_EQ(t.steps[2].detail, "cites doc-9");
  EXPECT_EQ(t.steps[3].outcome, "skipped");
  EXPECT_EQ(t.steps[3].t_start, -1);
  ASSERT_TRUE(t.critical_path.has_value());
  EXPECT_EQ(t.critical_path->steps, (std::vector<std::string>{"plan", "r1", "summary"}));
  EXPECT_DOUBLE_EQ(t.critical_path->model_ms, 0.0006);

  parser.parse(R"({"id":8,"outcome":"ok","steps":[{"id":"a","kind":"tool"}]})", t);
  EXPECT_EQ(t.id, 8u);
  EXPECT_EQ(t.task_class, "");
  EXPECT_EQ(t.failure, "");
  EXPECT_EQ(t.t_start, -1);
  EXPECT_FALSE(t.warmup);
  EXPECT_FALSE(t.critical_path.has_value());
  ASSERT_EQ(t.steps.size(), 1u);
  EXPECT_EQ(t.steps[0].name, "");
  EXPECT_TRUE(t.steps[0].requests.empty());
  EXPECT_TRUE(t.steps[0].documents.empty());
  EXPECT_EQ(t.steps[0].prompt_tokens, -1);
}

TEST(TaskRecords, AFileOfTasksIsReadLineByLineWithItsErrorsNamed) {
  const std::string text =
      "{\"id\":1,\"outcome\":\"ok\",\"steps\":[]}\n"
      "\n"
      "{\"id\":2,\"outcome\":\"ok\",\"steps\":[{\"id\":\"a\",\"kind\":\"tool\",\"attempts\":-1}]}\n"
      "{\"id\":3,\"outcome\":\"cancelled\",\"steps\":[]}\n";
  TasksReader fail(text, "run/tasks.jsonl", BadLines::kFail);
  TaskRecord t;
  ASSERT_TRUE(fail.next(t));
  EXPECT_EQ(t.id, 1u);
  try {
    fail.next(t);
    FAIL() << "a bad line was read";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "run/tasks.jsonl");
    EXPECT_EQ(e.line(), 3u);
    EXPECT_EQ(e.field(), "steps[0].attempts");
    EXPECT_NE(std::string(e.what()).find("should be a non-negative integer"), std::string::npos) << e.what();
  }
  TasksReader skip(text, "run/tasks.jsonl", BadLines::kSkip);
  std::vector<std::uint64_t> ids;
  while (skip.next(t)) ids.push_back(t.id);
  EXPECT_EQ(ids, (std::vector<std::uint64_t>{1, 3}));
  EXPECT_EQ(skip.stats().lines, 4u);
  EXPECT_EQ(skip.stats().records, 2u);
  EXPECT_EQ(skip.stats().skipped, 1u);
  EXPECT_EQ(skip.stats().first_skipped_line, 3u);
}

// A directory of runs as sweep.json lists it: the runs inside it that are
// there, in the listed order; a listed path out of it ("../x", "/abs") is
// not followed; a sweep.json nested past the JSON depth, or without a runs
// list, is no directory of runs.
TEST(RunSet, ListsTheRunsInsideItAndRefusesPathsOutOfIt) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tokenscope_run_set_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  for (const char* r : {"repeat-1", "repeat-2"}) {
    fs::create_directories(dir / r);
    std::ofstream(dir / r / "run.json") << "{}";
  }
  std::ofstream(dir / "sweep.json")
      << R"({"kind": "repeats", "runs": [{"dir": "repeat-2"}, {"dir": "../repeat-1"}, {"dir": "/etc"},)"
      << R"( {"dir": 3}, {"dir": "repeat-1"}, {"dir": "repeat-9"}]})";
  const auto set = read_run_set(dir);
  ASSERT_TRUE(set);
  EXPECT_EQ(set->kind, "repeats");
  ASSERT_EQ(set->runs.size(), 2u);
  EXPECT_EQ(set->runs[0], dir / "repeat-2");
  EXPECT_EQ(set->runs[1], dir / "repeat-1");
  std::ofstream(dir / "sweep.json") << std::string(5000, '[') << std::string(5000, ']');
  EXPECT_FALSE(read_run_set(dir));
  std::ofstream(dir / "sweep.json") << R"({"curve": []})";
  EXPECT_FALSE(read_run_set(dir));
  fs::remove_all(dir);
  // The statistics of repeats: the mean and Student's t interval of the runs' values.
  const auto st = repeat_statistics({nlohmann::json::parse(R"({"ttft_ms": {"p50": 10}})"),
                                     nlohmann::json::parse(R"({"ttft_ms": {"p50": 20}})"),
                                     nlohmann::json::parse(R"({"ttft_ms": {"p50": 30}})")});
  ASSERT_TRUE(st.contains("ttft_ms.p50"));
  EXPECT_DOUBLE_EQ(st["ttft_ms.p50"]["mean"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(st["ttft_ms.p50"]["sd"].get<double>(), 10.0);
  // t(0.975, 2) = 4.302653: 20 -+ 4.302653 x 10 / sqrt(3).
  EXPECT_NEAR(st["ttft_ms.p50"]["ci"][0].get<double>(), 20 - 4.302653 * 10 / std::sqrt(3.0), 1e-4);
  EXPECT_FALSE(st.contains("tpot_ms.p50"));  // a metric no run has
}

}  // namespace
}  // namespace tokenscope::rundir
