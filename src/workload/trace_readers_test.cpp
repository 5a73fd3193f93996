#include "workload/trace_readers.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/text_reader.h"

namespace tokenscope::workload {
namespace {

const std::string kShared = TOKENSCOPE_SHARED_DIR "/traces/";

using namespace std::string_literals;

std::string error_of(std::string_view text, TraceFormat f, const TraceReadOptions& o = {}) {
  try {
    parse_trace_text(text, "t.txt", f, o);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

std::string repeat(std::string_view s, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += s;
  return out;
}

std::string temp_file(const std::string& name, const std::string& content) {
  const auto p = std::filesystem::path(::testing::TempDir()) / (std::to_string(::getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary) << content;
  return p.string();
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
  // A row with a prompt and its count: the count is the planned length (the
  // served model's, as a production trace logs it; the built-in tokenizer
  // reads "the cat" as 2).
  const auto counted =
      parse_trace_text(R"({"t_ms": 0, "prompt": "the cat", "input_tokens": 3, "output_tokens": 2})",
                       "n.jsonl", TraceFormat::kNative, {});
  EXPECT_EQ(counted.requests[0].input_tokens, 3u);
  EXPECT_EQ(counted.requests[0].source, PromptSource::kText);
  EXPECT_EQ(
      error_of(R"({"input_tokens": 1, "output_tokens": 1, "colour": 1})", TraceFormat::kNative).substr(0, 25),
      "t.txt:1: field 'colour': ");
  EXPECT_EQ(error_of(R"({"input_tokens": 1})", TraceFormat::kNative),
            "t.txt:1: field 'output_tokens': missing (expected a positive integer)");
}

TEST(Traces, EmptyInputIsAnError) {
  for (const auto f : {TraceFormat::kAuto, TraceFormat::kAzure, TraceFormat::kNative, TraceFormat::kShareGpt})
    EXPECT_EQ(error_of("", f), "t.txt: empty file, no requests");
  EXPECT_EQ(error_of(" \n\r\n", TraceFormat::kAuto), "t.txt: no requests (the file holds only blank lines)");
  EXPECT_EQ(error_of("\n\n", TraceFormat::kNative), "t.txt: no requests in the trace");
  EXPECT_THROW(read_trace("/nonexistent/trace.csv", {}), UsageError);
  const std::string dir = std::filesystem::temp_directory_path().string();
  try {
    read_trace(dir, {});
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), dir + ": is a directory");
  }
}

// Binary data (a sparse file reads as NUL bytes) is rejected at its first
// NUL, in every format, with the line and the byte.
TEST(Traces, NulBytesAreRejectedWhereTheyAre) {
  const std::string zeros(1 << 20, '\0');
  EXPECT_EQ(error_of(zeros, TraceFormat::kAuto),
            "t.txt:1: expected text, found a NUL byte at byte 1 of the line: '" + repeat("\\0", 40) +
                "'… (a binary or sparse file?)");
  for (const auto f : {TraceFormat::kAzure, TraceFormat::kMooncake, TraceFormat::kNative}) {
    const std::string e = error_of(zeros, f);
    EXPECT_EQ(e.substr(0, 57), "t.txt:1: expected text, found a NUL byte at byte 1 of the") << e;
  }
  EXPECT_EQ(error_of(zeros, TraceFormat::kShareGpt),
            "t.txt:1: expected JSON text, found a NUL byte (a binary or sparse file?)");
  EXPECT_EQ(error_of("[\n\n {\"a\"\0"s, TraceFormat::kShareGpt),
            "t.txt:3: expected JSON text, found a NUL byte (a binary or sparse file?)");
  // Found by detection in the first 64 KiB, on its line.
  EXPECT_EQ(
      error_of("{\"input_tokens\": 1, \"output_tokens\": 1}\nab\0c\n"s, TraceFormat::kAuto),
      "t.txt:2: expected text, found a NUL byte at byte 3 of the line: 'ab\\0c' (a binary or sparse file?)");
  // A row with a NUL is a bad row like any other.
  const std::string native = "{\"input_tokens\": 1, \"output_tokens\": 1}\n{\"input_tokens\": 2,\0}\n"s +
                             std::string(100000, 'x') + "\0\n{\"input_tokens\": 3, \"output_tokens\": 1}\n"s;
  EXPECT_EQ(error_of(native, TraceFormat::kNative),
            "t.txt:2: expected text, found a NUL byte at byte 20 of the line: '{\"input_tokens\": 2,\\0}' (a "
            "binary or sparse file?)");
  TraceReadOptions skip;
  skip.skip_bad_rows = true;
  const auto w = parse_trace_text(native, "t.txt", TraceFormat::kNative, skip);
  ASSERT_EQ(w.requests.size(), 2u);
  EXPECT_EQ(w.requests[1].input_tokens, 3u);
  EXPECT_EQ(w.read_report.rows_skipped, 2u);
}

TEST(Traces, QuotedValuesAreEscapedAndBounded) {
  const std::string hdr = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  EXPECT_EQ(error_of(hdr + "2023-11-16 18:15:46.1,\x1b[2J\x01,4\n", TraceFormat::kAzure),
            "t.txt:2: field 'ContextTokens': expected a positive integer, got '\\x1b[2J\\x01'");
  EXPECT_EQ(
      error_of(hdr + "2023-11-16 18:15:46.1," + std::string(300, '7') + ",4\n", TraceFormat::kAzure),
      "t.txt:2: field 'ContextTokens': expected a positive integer, got '" + std::string(80, '7') + "'…");
  EXPECT_EQ(
      error_of("{\"input_tokens\": 1, \"output_tokens\": 1, \"a\\u0000\\u001bb\": 1}", TraceFormat::kNative)
          .find("t.txt:1: field 'a\\0\\x1bb': unknown field"),
      0u);
}

TEST(Traces, ALineLongerThanAnyRowIsABadRow) {
  const std::string native = "{\"input_tokens\": 1, \"output_tokens\": 1}\n{" +
                             std::string(TextReader::kDefaultMaxLineBytes + 10, ' ') + "}\n";
  EXPECT_EQ(error_of(native, TraceFormat::kNative),
            "t.txt:2: expected a row of at most 64 MiB, got a longer line starting '{" +
                std::string(39, ' ') + "'…");
  TraceReadOptions skip;
  skip.skip_bad_rows = true;
  EXPECT_EQ(parse_trace_text(native, "t.txt", TraceFormat::kNative, skip).requests.size(), 1u);
}

// A file and the same text in memory read alike, and --max-requests stops
// reading at the last request kept (the rest of the file is not read).
TEST(Traces, FilesReadAsTheirTextAndMaxRowsStopsEarly) {
  const std::string share =
      "[\n{\"conversations\": [{\"from\": \"human\", \"value\": \"hello there\"}]},\n"
      "{\"conversations\": [{\"from\": \"human\", \"value\": \"why\"}]},\n"
      "{\"conversations\": 3},\n"
      "{\"conversations\": [{\"from\": \"human\", \"value\": \"ok\"}]}] trailing garbage";
  const std::string path = temp_file("share.json", share);
  TraceReadOptions two;
  two.max_rows = 2;
  two.format = TraceFormat::kShareGpt;
  const auto from_file = read_trace(path, two);
  const auto from_text = parse_trace_text(share, path, TraceFormat::kShareGpt, two);
  ASSERT_EQ(from_file.requests.size(), 2u);
  EXPECT_EQ(from_file.prompts, (std::vector<std::string>{"hello there", "why"}));
  EXPECT_EQ(from_text.prompts, from_file.prompts);
  // Elements name their line now that the array is read element by element.
  EXPECT_EQ(error_of(share, TraceFormat::kShareGpt),
            "t.txt:4: field '[2].conversations': expected an array of turns");
  TraceReadOptions skip;
  skip.skip_bad_rows = true;
  EXPECT_EQ(error_of(share, TraceFormat::kShareGpt, skip),
            "t.txt:5: malformed JSON (expected an array of conversations)");
  EXPECT_EQ(error_of("{\"conversations\": []}", TraceFormat::kShareGpt),
            "t.txt:1: expected a JSON array of conversations");
  std::filesystem::remove(path);
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
