#include "core/text_reader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/temp_dir.h"

namespace tokenscope {
namespace {

using namespace std::string_literals;
namespace fs = std::filesystem;

struct Line {
  std::string text;
  std::uint64_t number;
  TextReader::Flaw flaw;
  std::size_t nul_column;
  bool operator==(const Line&) const = default;
};

std::vector<Line> lines_of(TextReader& r) {
  std::vector<Line> out;
  std::string_view line;
  while (r.next_line(line)) out.push_back({std::string(line), r.line_number(), r.flaw(), r.nul_column()});
  return out;
}

class TextReaderFile : public ::testing::Test {
 protected:
  std::string write(const std::string& content) {
    const auto p =
        fs::path(::testing::TempDir()) / ("text_reader_" + std::to_string(::getpid()) + "_" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::ofstream(p, std::ios::binary) << content;
    paths_.push_back(p);
    return p.string();
  }
  void TearDown() override {
    for (const auto& p : paths_) fs::remove(p);
  }
  std::vector<fs::path> paths_;
};

constexpr auto kNone = TextReader::Flaw::kNone;
constexpr auto kTooLong = TextReader::Flaw::kTooLong;
constexpr auto kNul = TextReader::Flaw::kNulByte;

TEST(TextReader, LinesWithCrlfBlanksAndNoFinalNewline) {
  TextReader r("a\r\n\nb c\nlast\r");
  EXPECT_EQ(lines_of(r),
            (std::vector<Line>{
                {"a", 1, kNone, 0}, {"", 2, kNone, 0}, {"b c", 3, kNone, 0}, {"last", 4, kNone, 0}}));
  TextReader empty("");
  EXPECT_TRUE(lines_of(empty).empty());
}

TEST(TextReader, TooLongLinesAreCutFlaggedAndSkipped) {
  const std::string text = "short\n" + std::string(25, 'x') + "\nafter";
  TextReader r(text, 10);
  EXPECT_EQ(lines_of(r),
            (std::vector<Line>{
                {"short", 1, kNone, 0}, {std::string(10, 'x'), 2, kTooLong, 0}, {"after", 3, kNone, 0}}));
}

TEST(TextReader, NulBytesFlagTheLine) {
  const std::string text = "ab\0cd\nnext\n\0"s;
  TextReader r(text);
  EXPECT_EQ(lines_of(r),
            (std::vector<Line>{{"ab\0cd"s, 1, kNul, 3}, {"next", 2, kNone, 0}, {"\0"s, 3, kNul, 1}}));
}

// What the readers of JSON lines say of a flawed line.
TEST(TextReader, FlawMessagesSayWhatIsWrongWithTheLine) {
  const std::string text = "ok\nab\0cd\n"s + std::string((2u << 20) + 5, 'x') + "\n";
  TextReader r(text, 2u << 20);
  std::string_view line;
  ASSERT_TRUE(r.next_line(line));
  EXPECT_EQ(r.flaw_message(), std::nullopt);
  ASSERT_TRUE(r.next_line(line));
  EXPECT_EQ(r.flaw_message(), "NUL byte at column 3: binary data, not JSON lines");
  ASSERT_TRUE(r.next_line(line));
  EXPECT_EQ(r.flaw_message(), "line longer than 2 MiB");
}

TEST(TextReader, BytesKeepTheLineNumber) {
  TextReader r("ab\ncd");
  std::string seen;
  std::vector<std::uint64_t> lines;
  for (int c; (c = r.next_byte()) >= 0;) {
    seen += static_cast<char>(c);
    lines.push_back(r.line_number());
  }
  EXPECT_EQ(seen, "ab\ncd");
  EXPECT_EQ(lines, (std::vector<std::uint64_t>{1, 1, 1, 2, 2}));
  EXPECT_EQ(r.offset(), 5u);
}

TEST_F(TextReaderFile, AFileReadsAsTheSameTextInMemory) {
  // Lines across chunk boundaries, one longer than a chunk, one too long.
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "line " + std::to_string(i) + (i % 3 ? "\n" : "\r\n");
  text += std::string(3 * TextReader::kChunkBytes + 7, 'y') + "\n";
  text += std::string(5 * TextReader::kChunkBytes, 'z') + "\nend";
  const std::size_t max_line = 4 * TextReader::kChunkBytes;
  TextReader memory(text, max_line);
  TextReader file = TextReader::open(write(text), "file", max_line);
  EXPECT_EQ(file.size(), text.size());
  const auto expected = lines_of(memory);
  ASSERT_EQ(expected.size(), 5003u);
  EXPECT_EQ(expected[5001].flaw, kTooLong);
  EXPECT_EQ(expected[5001].text.size(), max_line);
  EXPECT_EQ(expected[5002], (Line{"end", 5003, kNone, 0}));
  EXPECT_EQ(lines_of(file), expected);
}

TEST_F(TextReaderFile, AFileOfNulBytesIsFlaggedFromItsFirstChunk) {
  const std::string path = write(std::string(std::size_t{4} << 20, '\0'));
  TextReader r = TextReader::open(path);
  std::string_view line;
  ASSERT_TRUE(r.next_line(line));
  EXPECT_EQ(r.flaw(), kNul);
  EXPECT_EQ(r.nul_column(), 1u);
  EXPECT_LE(line.size(), TextReader::kChunkBytes);
  EXPECT_LE(r.offset(), TextReader::kChunkBytes);  // read no further than one chunk
  EXPECT_FALSE(r.next_line(line));                 // the rest is skipped, not stored
  EXPECT_EQ(r.offset(), std::size_t{4} << 20);
}

TEST_F(TextReaderFile, PeekReadsABoundedPrefixAndConsumesNothing) {
  const std::string path = write("0123456789\nabc");
  TextReader r = TextReader::open(path);
  EXPECT_EQ(r.peek(4), "0123");
  EXPECT_EQ(r.peek(100), "0123456789\nabc");
  EXPECT_EQ(r.offset(), 0u);
  EXPECT_EQ(r.take(3), "012");
  std::string_view line;
  ASSERT_TRUE(r.next_line(line));
  EXPECT_EQ(line, "3456789");
}

TEST_F(TextReaderFile, StartsAtAnOffsetAndSaysWhereEachLineStarts) {
  const std::string text = "first\r\nsecond\n\nfourth";
  const std::string path = write(text);
  TextReader whole = TextReader::open(path);
  std::vector<std::uint64_t> starts;
  std::string_view line;
  while (whole.next_line(line)) starts.push_back(whole.line_offset());
  EXPECT_EQ(starts, (std::vector<std::uint64_t>{0, 7, 14, 15}));

  TextReader mid = TextReader::open(path, "file", TextReader::kDefaultMaxLineBytes, 9);  // in "second"
  EXPECT_EQ(mid.size(), text.size());                                                    // the file's
  EXPECT_EQ(mid.offset(), 9u);
  ASSERT_TRUE(mid.next_line(line));
  EXPECT_EQ(line, "cond");
  EXPECT_EQ(mid.line_number(), 1u);  // lines count from where reading started
  EXPECT_EQ(mid.line_offset(), 9u);  // offsets from the file's first byte
  EXPECT_EQ(lines_of(mid), (std::vector<Line>{{"", 2, kNone, 0}, {"fourth", 3, kNone, 0}}));
  EXPECT_EQ(mid.line_offset(), 15u);
  EXPECT_EQ(mid.offset(), text.size());

  TextReader at_end = TextReader::open(path, "file", TextReader::kDefaultMaxLineBytes, text.size());
  EXPECT_TRUE(lines_of(at_end).empty());
  TextReader past_end = TextReader::open(path, "file", TextReader::kDefaultMaxLineBytes, text.size() + 100);
  EXPECT_TRUE(lines_of(past_end).empty());
}

TEST_F(TextReaderFile, AnOffsetPastAChunkReadsAsTheSameLines) {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i) + "\n";
  const std::string path = write(text);
  const std::uint64_t start = text.find("line 15000\n");
  TextReader r = TextReader::open(path, "file", TextReader::kDefaultMaxLineBytes, start);
  const auto lines = lines_of(r);
  ASSERT_EQ(lines.size(), 5000u);
  EXPECT_EQ(lines.front(), (Line{"line 15000", 1, kNone, 0}));
  EXPECT_EQ(lines.back(), (Line{"line 19999", 5000, kNone, 0}));
}

TEST_F(TextReaderFile, DirectoriesAndMissingFilesAreNamed) {
  const std::string dir = ::testing::TempDir();
  try {
    TextReader::open(dir);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), dir + ": is a directory");
  }
  try {
    TextReader::open("/nonexistent/file", "trace file");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/file: cannot open trace file: No such file or directory");
  }
}

// Files of a run directory are regular files (or links to one): a FIFO
// with no writer is refused at once instead of blocking, a device too; a
// file read whole has a bound.
TEST(TextReader, RunFilesMustBeRegularFilesAndWholeReadsAreBounded) {
  TempDir t("regular");
  const std::string fifo = (t / "requests.jsonl").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    (void)TextReader::open_regular(fifo, "requests file");
    ADD_FAILURE() << "a FIFO was opened";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a regular file (a FIFO)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_regular_file("/dev/zero", "check.json", 1u << 20), InputError);
  const std::string file = t.write("phases.json", std::string(3u << 20, 'x'));
  std::filesystem::create_symlink(file, t / "linked.json");  // a link to a regular file is read
  EXPECT_EQ(read_regular_file((t / "linked.json").string(), "phases.json", 4u << 20).size(), 3u << 20);
  try {
    (void)read_regular_file(file, "phases.json", 2u << 20);
    ADD_FAILURE() << "read past the bound";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("larger than the 2 MiB a phases.json can be"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tokenscope
