// Black-box tests of bad and oversized input files (docs/reliability.md, "bad
// input"): the exit code, the message, and the child's peak resident memory
// (getrusage of the child after it ends). Memory bounds are generous: they
// tell streaming (a bounded prefix, memory for the requests kept) from
// loading the whole file (2-4x its size), not one allocator from another.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "process.h"

namespace tokenscope::testing {
namespace {

namespace fs = std::filesystem;
constexpr long kMiB = 1024;  // in KiB, the unit of max_rss_kb
// Peak memory bounds hold for the release build; a sanitizer's shadow memory
// and quarantine make them meaningless there (the tests still check the rest).
#if defined(TOKENSCOPE_SANITIZED)
#define EXPECT_RSS_BELOW(r, bound) (void)(r), (void)(bound)
#else
#define EXPECT_RSS_BELOW(r, bound) EXPECT_LT((r).max_rss_kb, (bound)) << show(r)
#endif

class CliInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tokenscope_input_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const std::string& name, const std::string& content) {
    const auto p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
  // A file of `bytes` NUL bytes that takes no disk space (truncate -s).
  std::string sparse(const std::string& name, std::uint64_t bytes) {
    const auto p = dir_ / name;
    std::ofstream(p).close();
    fs::resize_file(p, bytes);
    return p.string();
  }
  static std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path dir_;
};

std::string show(const ProcessResult& r) {
  return "exit " + std::to_string(r.exit_code) + ", signal " + std::to_string(r.term_signal) + ", peak RSS " +
         std::to_string(r.max_rss_kb / kMiB) + " MiB\nstderr: " + r.err.substr(0, 2000);
}

// A 2 GB file of NUL bytes (what `truncate -s 2G` makes) in every trace
// format and as an access trace: rejected after a bounded prefix, naming the
// file, the line and what was expected, in little memory.
TEST_F(CliInput, SparseTwoGigabyteFileIsRejectedAfterABoundedPrefix) {
  const std::string f = sparse("sparse", 2ull << 30);
  const std::vector<std::vector<std::string>> runs = {
      {kBin, "sim", "--trace", f},
      {kBin, "sim", "--trace", f, "--trace-format", "azure"},
      {kBin, "sim", "--trace", f, "--trace-format", "mooncake"},
      {kBin, "sim", "--trace", f, "--trace-format", "native"},
      {kBin, "sim", "--trace", f, "--trace-format", "sharegpt"},
      {kBin, "probe", "line-sim", f},
  };
  for (const auto& args : runs) {
    const auto r = run_process(args, 60);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << show(r);
    EXPECT_NE(r.err.find(f + ":1: "), std::string::npos) << show(r);
    EXPECT_NE(r.err.find("NUL byte"), std::string::npos) << show(r);
    EXPECT_RSS_BELOW(r, 100 * kMiB);
  }
}

// A 200 MB Azure trace of valid rows whose last row is bad.
TEST_F(CliInput, BigTraceMemoryFollowsTheRequestsKept) {
  const auto path = dir_ / "big.csv";
  std::uint64_t rows = 0;
  {
    std::FILE* out = std::fopen(path.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    std::fputs("TIMESTAMP,ContextTokens,GeneratedTokens\n", out);
    char row[64];
    for (std::uint64_t bytes = 0; bytes < 200'000'000; ++rows) {
      const int n = std::snprintf(row, sizeof row, "2023-11-16 18:%02d:%02d.6805900,%llu,244\n",
                                  static_cast<int>(rows / 60 / 1000 % 60), static_cast<int>(rows / 1000 % 60),
                                  static_cast<unsigned long long>(100 + rows % 4000));
      std::fwrite(row, 1, static_cast<std::size_t>(n), out);
      bytes += static_cast<std::uint64_t>(n);
    }
    std::fputs("2023-11-16 19:00:00.0000000,oops,244\n", out);
    std::fclose(out);
  }
  // Keeping 1,000 requests reads 1,000 rows, whatever the size of the file.
  const auto few =
      run_process({kBin, "sim", "--trace", path.string(), "--max-requests", "1000", "--json"}, 60);
  ASSERT_EQ(few.exit_code, 0) << show(few);
  EXPECT_EQ(nlohmann::json::parse(few.out)["requests_total"], 1000);
  EXPECT_RSS_BELOW(few, 100 * kMiB);

  // Reading to the bad row keeps every request before it: 48 bytes each (at
  // most twice that while the vector grows), not the 200 MB of text.
  const auto all = run_process({kBin, "sim", "--trace", path.string()}, 120);
  EXPECT_EQ(all.exit_code, 2) << show(all);
  EXPECT_NE(all.err.find(path.string() + ":" + std::to_string(rows + 2) +
                         ": field 'ContextTokens': expected a positive integer, got 'oops'"),
            std::string::npos)
      << show(all);
  const long kept_kib = static_cast<long>(rows * 48 / 1024);
  EXPECT_RSS_BELOW(all, 2 * kept_kib + 100 * kMiB);
}

// A 100 MB binary access trace whose last record is bad.
TEST_F(CliInput, BigAccessTraceIsReadInPlace) {
  const auto path = dir_ / "accesses.bin";
  const std::uint64_t records = 100'000'000 / 16;
  {
    std::FILE* out = std::fopen(path.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    const unsigned char header[16] = {'T', 'S', 'A', 'T', 1, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0};
    std::fwrite(header, 1, sizeof header, out);
    std::vector<unsigned char> block(16 * 4096);
    for (std::uint64_t i = 0; i < records; i += 4096) {
      const std::uint64_t n = std::min<std::uint64_t>(4096, records - i);
      for (std::uint64_t k = 0; k < n; ++k) {
        unsigned char* p = block.data() + 16 * k;
        const std::uint64_t address = 0x1000 + 8 * ((i + k) % 64);
        for (int b = 0; b < 8; ++b) p[b] = static_cast<unsigned char>(address >> (8 * b));
        p[8] = static_cast<unsigned char>((i + k) % 4);
        p[9] = p[10] = p[11] = 0;
        p[12] = 8;
        p[13] = 0;
        p[14] = (i + k == records - 1) ? 7 : 1;  // the last record's op is bad
        p[15] = 0;
      }
      std::fwrite(block.data(), 16, n, out);
    }
    std::fclose(out);
  }
  const auto r = run_process({kBin, "probe", "line-sim", path.string()}, 120);
  EXPECT_EQ(r.exit_code, 2) << show(r);
  EXPECT_NE(r.err.find(path.string() + ":" + std::to_string(records) + ": field 'op'"), std::string::npos)
      << show(r);
  // 16 bytes a record kept, read in place: not the file plus copies of it.
  EXPECT_RSS_BELOW(r, static_cast<long>(records * 16 / 1024) + 64 * kMiB);
}

// bench against an external server, whose context it does not know: a
// prompt over --max-prompt-tokens fails the run at the start, naming the
// row, before gigabytes of its text are built.
TEST_F(CliInput, BenchRefusesAPromptOverMaxPromptTokensBeforeBuildingIt) {
  const std::string native = file("max.jsonl",
                                  "{\"t_ms\": 0, \"input_tokens\": 100, \"output_tokens\": 10}\n"
                                  "{\"t_ms\": 1, \"input_tokens\": 1073741824, \"output_tokens\": 5}\n");
  // Nothing listens there: the check comes before any connection.
  const auto r = run_process({kBin, "bench", "--target", "http://127.0.0.1:9", "--model", "m", "--trace",
                              native, "--trace-format", "native", "--out", (dir_ / "run").string()},
                             120);
  EXPECT_EQ(r.exit_code, 2) << show(r);
  EXPECT_NE(
      r.err.find(native + ":2: field 'input_tokens': prompt of 1073741824 tokens is over --max-prompt-tokens "
                          "2097152"),
      std::string::npos)
      << show(r);
  EXPECT_RSS_BELOW(r, 200 * kMiB);
  const auto synthetic = run_process({kBin, "bench", "--input-len", "fixed:3000000", "--num-requests", "1",
                                      "--max-prompt-tokens", "1000000", "--out", (dir_ / "run2").string()},
                                     120);
  EXPECT_EQ(synthetic.exit_code, 2) << show(synthetic);
  EXPECT_NE(synthetic.err.find("request 0: prompt of 3000000 tokens is over --max-prompt-tokens 1000000"),
            std::string::npos)
      << show(synthetic);
}

// Rows with the documented maximum token counts (2^30) are rejected against
// the model's context before a token is made: the record names the file, the
// line, the field and the context, and the run stays small.
TEST_F(CliInput, MaxTokenCountRowsAreRejectedBeforeTheirTokensAreMade) {
  const std::string native =
      file("max.jsonl",
           "{\"t_ms\": 0, \"input_tokens\": 1073741824, \"output_tokens\": 1073741824}\n"
           "{\"t_ms\": 1, \"input_tokens\": 100, \"output_tokens\": 10}\n");
  std::string ids;
  for (std::uint64_t i = 0; i < (1u << 30) / 512; ++i) ids += i ? ",7" : "7";
  const std::string mooncake = file("max_mooncake.jsonl",
                                    "{\"timestamp\": 0, \"input_length\": 1073741824, \"output_length\": 5, "
                                    "\"hash_ids\": [" +
                                        ids + "]}\n");
  struct Case {
    std::vector<std::string> args;
    std::string detail;
  };
  const Case cases[] = {
      {{"--trace", native},
       native + ":1: field 'input_tokens': prompt (1073741824 tokens) + max_tokens "
                "(1073741824) exceeds max_model_len (8192)"},
      {{"--trace", mooncake}, mooncake + ":1: field 'input_length': prompt (1073741824 tokens)"},
      {{"--input-len", "fixed:1000000000", "--num-requests", "1"}, "prompt (1000000000 tokens) + max_tokens"},
  };
  int n = 0;
  for (const auto& c : cases) {
    const auto out = dir_ / ("run" + std::to_string(n++));
    auto args = c.args;
    args.insert(args.begin(), {kBin, "sim", "--quiet", "--out", out.string()});
    const auto r = run_process(args, 120);
    ASSERT_EQ(r.exit_code, 0) << show(r);
    std::istringstream records(slurp(out / "requests.jsonl"));
    std::string line;
    ASSERT_TRUE(std::getline(records, line));
    const auto first = nlohmann::json::parse(line);
    EXPECT_EQ(first["outcome"], "rejected");
    EXPECT_NE(first["detail"].get<std::string>().find(c.detail), std::string::npos) << first.dump();
    EXPECT_RSS_BELOW(r, 200 * kMiB);
  }
}

TEST_F(CliInput, EmptyFileAndDirectoryAreNamedAsSuch) {
  const std::string empty_csv = file("empty.csv", "");
  const std::string empty_jsonl = file("empty.jsonl", "");
  const std::string folder = dir_.string();
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{kBin, "sim", "--trace", empty_csv}, empty_csv + ": empty file, no requests"},
      {{kBin, "sim", "--trace", empty_jsonl}, empty_jsonl + ": empty file, no requests"},
      {{kBin, "sim", "--trace", empty_jsonl, "--trace-format", "native"},
       empty_jsonl + ": empty file, no requests"},
      {{kBin, "sim", "--trace", folder}, folder + ": is a directory"},
      {{kBin, "sim", "--trace", folder, "--trace-format", "azure"}, folder + ": is a directory"},
      {{kBin, "sim", "--input-len", "empirical:" + folder}, folder + ": is a directory"},
      {{kBin, "probe", "line-sim", folder}, folder + ": is a directory"},
      {{kBin, "probe", "line-sim", empty_jsonl}, empty_jsonl + ": empty file, no accesses"},
  };
  for (const auto& c : cases) {
    const auto r = run_process(c.args, 60);
    EXPECT_EQ(r.exit_code, 2) << c.message << "\n" << show(r);
    EXPECT_NE(r.err.find(c.message), std::string::npos) << "expected: " << c.message << "\n" << show(r);
    EXPECT_EQ(r.err.find("cannot tell the trace format"), std::string::npos) << r.err;
  }
}

// Input quoted in a message is escaped and bounded: no raw control bytes
// reach the terminal, and a NUL does not cut the message short.
TEST_F(CliInput, MessagesEscapeBinaryInputAndBoundIt) {
  const std::string hdr = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::string csv_escape = file("escape.csv", hdr + "2023-11-16 18:15:46.1,\x1b[2J\x01,4\n");
  const std::string csv_long =
      file("long.csv", hdr + "2023-11-16 18:15:46.1," + std::string(500, '9') + "x,4\n");
  const std::string csv_nul = file(
      "nul.csv", hdr + std::string("2023-11-16 18:15:46.1,3\0abc,4\n", 30) + "2023-11-16 18:15:47.1,3,4\n");
  const std::string native_key =
      file("key.jsonl", "{\"input_tokens\": 1, \"output_tokens\": 1, \"a\\u0000\\u001b[2Jb\": 1}\n");
  const std::string access = file("access.txt", "0 0x1000 8 \x1b[2J\x01\n");
  const Case cases[] = {
      {{kBin, "sim", "--trace", csv_escape},
       csv_escape + ":2: field 'ContextTokens': expected a positive integer, got '\\x1b[2J\\x01'"},
      {{kBin, "sim", "--trace", csv_long},
       csv_long + ":2: field 'ContextTokens': expected a positive integer, got '" + std::string(80, '9') +
           "'…"},
      {{kBin, "sim", "--trace", csv_nul},
       csv_nul +
           ":2: expected text, found a NUL byte at byte 24 of the line: '2023-11-16 18:15:46.1,3\\0abc,4'"},
      {{kBin, "sim", "--trace", native_key}, native_key + ":1: field 'a\\0\\x1b[2Jb': unknown field"},
      {{kBin, "probe", "line-sim", access}, access + ":1: field 'op': r or w, got '\\x1b[2J\\x01'"},
  };
  for (const auto& c : cases) {
    const auto r = run_process(c.args, 60);
    EXPECT_EQ(r.exit_code, 2) << show(r);
    EXPECT_NE(r.err.find(c.message), std::string::npos) << "expected: " << c.message << "\n" << show(r);
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << show(r);
    EXPECT_EQ(r.err.find('\0'), std::string::npos) << show(r);
  }
  // With --skip-bad-rows the NUL row is skipped, counted and shown escaped.
  const auto skip = run_process({kBin, "sim", "--trace", csv_nul, "--skip-bad-rows"}, 60);
  EXPECT_EQ(skip.exit_code, 0) << show(skip);
  EXPECT_NE(skip.out.find("skipped 1 bad rows (first: " + csv_nul + ":2: expected text, found a NUL byte"),
            std::string::npos)
      << skip.out;
}

// probe cache-line --threads is bounded as kv-layout's is (1..64); 0 and
// negative counts are errors, not the default.
TEST_F(CliInput, ProbeThreadCountsAreBounded) {
  const std::vector<std::string> quick = {
      "--skip", "stride,coherence,ping-pong", "--repetitions", "1", "--increments", "1000"};
  for (const char* probe : {"cache-line", "kv-layout"}) {
    for (const char* threads : {"0", "-1", "65", "3000", "100000"}) {
      std::vector<std::string> args = {kBin, "probe", probe, "--threads", threads};
      if (std::string(probe) == "cache-line")
        args.insert(args.end(), quick.begin(), quick.end());
      else
        args.insert(args.end(), {"--tokens", "8", "--repetitions", "1"});
      const auto r = run_process(args, 60);
      EXPECT_EQ(r.exit_code, 2) << probe << " --threads " << threads << ": " << show(r);
      EXPECT_NE(r.err.find("--threads"), std::string::npos) << show(r);
      EXPECT_NE(r.err.find("1..64"), std::string::npos) << show(r);
      EXPECT_EQ(r.err.find("terminate"), std::string::npos) << show(r);
    }
  }
}

}  // namespace
}  // namespace tokenscope::testing
