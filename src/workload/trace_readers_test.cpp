#include "workload/trace_readers.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"

namespace tokenscope::workload {
namespace {

const std::string kShared = TOKENSCOPE_SHARED_DIR "/traces/";

std::string error_of(std::string_view text, TraceFormat f) {
  try {
    parse_trace_text(text, "t.txt", f, {});
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(AzureCsv, ParsesRowsAndOffsets) {
  const auto w = parse_trace_text(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2023-11-16 18:15:46.6805900,374,44\r\n"
      "2023-11-16 18:15:50.9951690,396,109\n",
      "a.csv", TraceFormat::kAzure, {});
  ASSERT_EQ(w.requests.size(), 2u);
  EXPECT_EQ(w.requests[0].arrival_ns, 0);
  EXPECT_EQ(w.requests[1].arrival_ns, 4'314'579'000);
  EXPECT_EQ(w.requests[1].input_tokens, 396u);
  EXPECT_EQ(w.requests[1].output_tokens, 109u);
  EXPECT_TRUE(w.has_timestamps);
}

TEST(AzureCsv, ErrorsNameFileLineAndField) {
  const std::string hdr = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  EXPECT_EQ(error_of(hdr + "2023-11-16 18:15:46.1,abc,4\n", TraceFormat::kAzure),
            "t.txt:2: field 'ContextTokens': expected a positive integer, got 'abc'");
  EXPECT_EQ(error_of(hdr + "2023-11-16 18:15:46.1,3,0\n", TraceFormat::kAzure),
            "t.txt:2: field 'GeneratedTokens': expected a token count in [1, 1073741824], got 0");
  EXPECT_EQ(error_of(hdr + "yesterday,3,4\n", TraceFormat::kAzure),
            "t.txt:2: field 'TIMESTAMP': expected 'YYYY-MM-DD HH:MM:SS[.fraction]', got 'yesterday'");
  EXPECT_EQ(error_of(hdr + "2023-11-16 18:15:46.1,3\n", TraceFormat::kAzure),
            "t.txt:2: expected 3 columns, got 2");
  EXPECT_NE(error_of("time,in,out\n", TraceFormat::kAzure).find("field 'header'"), std::string::npos);
}

TEST(AzureCsv, SkipBadRowsCountsThem) {
  TraceReadOptions o;
  o.skip_bad_rows = true;
  const auto w = parse_trace_text(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3,4\nbad\n2023-11-16 18:15:47.1,-3,4\n"
      "2023-11-16 18:15:48.1,5,6\n",
      "a.csv", TraceFormat::kAzure, o);
  EXPECT_EQ(w.requests.size(), 2u);
  EXPECT_EQ(w.read_report.rows_read, 2u);
  EXPECT_EQ(w.read_report.rows_skipped, 2u);
  ASSERT_EQ(w.read_report.skipped_examples.size(), 2u);
  EXPECT_NE(w.read_report.skipped_examples[0].find("a.csv:3"), std::string::npos);
}

TEST(Mooncake, ParsesHashIdsAndChecksTheirCount) {
  const auto w =
      parse_trace_text(R"({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]})"
                       "\n"
                       R"({"timestamp": 3000, "input_length": 512, "output_length": 7, "hash_ids": [0]})",
                       "m.jsonl", TraceFormat::kMooncake, {});
  ASSERT_EQ(w.requests.size(), 2u);
  EXPECT_EQ(w.requests[1].arrival_ns, 3 * kNanosPerSecond);
  EXPECT_EQ(w.requests[0].source, PromptSource::kHashIds);
  EXPECT_EQ(w.hash_pool, (std::vector<std::uint64_t>{0, 1, 0}));
  EXPECT_EQ(error_of(R"({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0]})",
                     TraceFormat::kMooncake),
            "t.txt:1: field 'hash_ids': expected ceil(input_length/512) = 2 ids, got 1");
  EXPECT_EQ(error_of("{\"timestamp\": 0, \"input_length\": 6", TraceFormat::kMooncake),
            "t.txt:1: expected one JSON object per line (malformed JSON)");
  EXPECT_EQ(error_of(R"({"timestamp": -5, "input_length": 6, "output_length": 5, "hash_ids": [0]})",
                     TraceFormat::kMooncake),
            "t.txt:1: field 'timestamp': expected milliseconds in [0, 1e15], got -5");
}

TEST(ShareGpt, FirstHumanTurnIsThePrompt) {
  const auto w = parse_trace_text(
      R"([{"id": "a", "conversations": [{"from": "human", "value": "hello there"}]},
          {"id": "b", "conversations": [{"from": "gpt", "value": "x"}, {"from": "human", "value": "why"}]}])",
      "s.json", TraceFormat::kShareGpt, {});
  ASSERT_EQ(w.requests.size(), 2u);
  EXPECT_EQ(w.requests[0].input_tokens, 4u);  // "hell" "o" " ther" "e"
  EXPECT_EQ(w.requests[1].input_tokens, 1u);
  EXPECT_EQ(w.requests[0].output_tokens, 0u);
  EXPECT_FALSE(w.has_timestamps);
  EXPECT_NE(error_of(R"([{"conversations": 3}])", TraceFormat::kShareGpt).find("[0].conversations"),
            std::string::npos);
  EXPECT_NE(error_of("[{\"id\": 4E444}]", TraceFormat::kShareGpt).find("number overflow"), std::string::npos);
  EXPECT_EQ(error_of("[{\n\"a\": }", TraceFormat::kShareGpt),
            "t.txt:2: malformed JSON (expected an array of conversations)");
}

TEST(Native, ReadsEveryField) {
  const auto w = parse_trace_text(
      "# comment\n"
      R"({"t_ms": 10, "input_tokens": 100, "output_tokens": 5, "tenant": "acme", "priority": -1})"
      "\n"
      R"({"t_ms": 20, "prompt": "the cat", "output_tokens": 2, "tenant": "beta"})"
      "\n"
      R"({"t_ms": 30, "input_tokens": 40, "output_tokens": 2, "hash_ids": [7], "hash_block_tokens": 32})",
      "n.jsonl", TraceFormat::kNative, {});
  ASSERT_EQ(w.requests.size(), 3u);
  EXPECT_EQ(w.requests[0].arrival_ns, 0);
  EXPECT_EQ(w.requests[1].arrival_ns, 10 * kNanosPerMilli);
  EXPECT_EQ(w.tenants, (std::vector<std::string>{"default", "acme", "beta"}));
  EXPECT_EQ(w.requests[0].priority, -1);
  EXPECT_EQ(w.requests[1].input_tokens, 2u);
  EXPECT_EQ(w.hash_block_tokens, 32u);
  EXPECT_EQ(
      error_of(R"({"input_tokens": 1, "output_tokens": 1, "colour": 1})", TraceFormat::kNative).substr(0, 25),
      "t.txt:1: field 'colour': ");
  EXPECT_EQ(error_of(R"({"input_tokens": 1})", TraceFormat::kNative),
            "t.txt:1: field 'output_tokens': missing (expected a positive integer)");
}

TEST(Traces, EmptyInputIsAnError) {
  EXPECT_EQ(error_of("", TraceFormat::kNative), "t.txt: no requests in the trace");
  EXPECT_THROW(read_trace("/nonexistent/trace.csv", {}), UsageError);
}

TEST(CivilTimestamp, MatchesKnownEpochValues) {
  std::int64_t ns;
  ASSERT_TRUE(parse_civil_timestamp("1970-01-01 00:00:00", ns));
  EXPECT_EQ(ns, 0);
  ASSERT_TRUE(parse_civil_timestamp("2023-11-16 18:15:46.6805900", ns));
  EXPECT_EQ(ns, 1700158546680590000LL);
  ASSERT_TRUE(parse_civil_timestamp("2000-03-01T00:00:00.5", ns));
  EXPECT_EQ(ns, 951868800500000000LL);
  EXPECT_FALSE(parse_civil_timestamp("2023-13-01 00:00:00", ns));
  EXPECT_FALSE(parse_civil_timestamp("2023-11-16 18:15:46.", ns));
}

// The real public traces in ../shared/traces (see their README).
TEST(SharedTraces, ReadWithTheDocumentedRowCounts) {
  if (!std::filesystem::exists(kShared)) GTEST_SKIP() << "shared traces not present";
  const auto azure = read_trace(kShared + "AzureLLMInferenceTrace_conv.csv", {});
  EXPECT_EQ(azure.requests.size(), 19366u);
  EXPECT_NEAR(nanos_to_s(azure.requests.back().arrival_ns), 3502.0, 1.0);
  const auto moon = read_trace(kShared + "conversation_trace.jsonl", {});
  EXPECT_EQ(moon.requests.size(), 12031u);
  const auto share = read_trace(kShared + "ShareGPT_V3_filtered_500.json", {});
  EXPECT_EQ(share.requests.size(), 500u);
}

}  // namespace
}  // namespace tokenscope::workload
