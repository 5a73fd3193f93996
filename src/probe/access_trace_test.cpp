#include "probe/access_trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace tokenscope::probe {
namespace {

TEST(AccessTrace, TextFormat) {
  const auto t =
      parse_access_trace("# comment\n0 0x1000 8 w\n1 4096 4 r  # trailing\n\n2 0XfF 1 W\n", "t.txt");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].thread, 0u);
  EXPECT_EQ(t[0].address, 0x1000u);
  EXPECT_EQ(t[0].size, 8u);
  EXPECT_TRUE(t[0].write);
  EXPECT_EQ(t[1].address, 4096u);
  EXPECT_FALSE(t[1].write);
  EXPECT_EQ(t[2].address, 0xffu);
}

TEST(AccessTrace, TextErrorsNameLineAndField) {
  auto expect_error = [](const std::string& text, std::size_t line, const std::string& field) {
    try {
      parse_access_trace(text, "bad.txt");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_EQ(e.file(), "bad.txt");
      EXPECT_EQ(e.line(), line) << text;
      EXPECT_EQ(e.field(), field) << text;
    }
  };
  expect_error("0 0x10 8 w\nx 0x10 8 w\n", 2, "thread");
  expect_error("0 0xzz 8 w\n", 1, "address");
  expect_error("0 0x10 0 w\n", 1, "size");
  expect_error("0 0x10 5000 w\n", 1, "size");
  expect_error("0 0x10 8 x\n", 1, "op");
  expect_error("0 0x10 8\n", 1, "op");
  expect_error("0 0x10 8 w extra\n", 1, "line");
  expect_error("0 0xffffffffffffffff 8 w\n", 1, "address");
  EXPECT_THROW(parse_access_trace("0 1 1 r\n0 2 1 r\n", "x", 1), InputError);
}

TEST(AccessTrace, BinaryRoundTrip) {
  const std::vector<Access> in{{0x7f00, 3, 8, true}, {0x7f08, 1, 4096, false}, {0, 0xffffffffu, 1, true}};
  const auto bytes = encode_binary_trace(in);
  EXPECT_EQ(bytes.size(), 16u + 3 * 16);
  const auto out = parse_access_trace(bytes, "t.tsat");
  ASSERT_EQ(out.size(), 3u);
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].address, in[i].address);
    EXPECT_EQ(out[i].thread, in[i].thread);
    EXPECT_EQ(out[i].size, in[i].size);
    EXPECT_EQ(out[i].write, in[i].write);
  }
  // Text round trip too.
  const auto text = parse_access_trace(encode_text_trace(in), "t.txt");
  ASSERT_EQ(text.size(), 3u);
  EXPECT_EQ(text[2].thread, 0xffffffffu);
}

TEST(AccessTrace, BinaryErrors) {
  const std::vector<Access> in{{0x10, 0, 8, true}};
  std::string b = encode_binary_trace(in);
  EXPECT_THROW(parse_access_trace(b.substr(0, b.size() - 3), "t"), InputError);  // truncated record
  std::string v = b;
  v[4] = 2;  // version 2
  EXPECT_THROW(parse_access_trace(v, "t"), InputError);
  std::string op = b;
  op[16 + 14] = 7;
  try {
    parse_access_trace(op, "t");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.line(), 1u);  // record 1
    EXPECT_EQ(e.field(), "op");
  }
  EXPECT_THROW(parse_access_trace(std::string("TSAT", 4), "t"), InputError);
}

TEST(LayoutMap, ParsesNamesWithSpaces) {
  const auto m = parse_layout_map("# header\n0x1000 8 lens[0]\n4104 16 struct seq meta\n", "m");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].name, "lens[0]");
  EXPECT_EQ(m[1].address, 4104u);
  EXPECT_EQ(m[1].name, "struct seq meta");
  EXPECT_THROW(parse_layout_map("0x10 0 x\n", "m"), InputError);
  EXPECT_THROW(parse_layout_map("0x10 8\n", "m"), InputError);
  const auto round = parse_layout_map(encode_layout_map(m), "m2");
  ASSERT_EQ(round.size(), 2u);
  EXPECT_EQ(round[1].name, "struct seq meta");
}

std::string error_of(const std::string& text) {
  try {
    parse_access_trace(text, "t.txt");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(AccessTrace, BinaryInputIsQuotedEscapedAndANulSaysSo) {
  using namespace std::string_literals;
  EXPECT_EQ(error_of("0 0x1000 8 \x1b[2J\x01\n"), "t.txt:1: field 'op': r or w, got '\\x1b[2J\\x01'");
  EXPECT_EQ(error_of("0 0x1000 8 r " + std::string(200, 'z') + "\n"),
            "t.txt:1: field 'line': four fields (THREAD ADDRESS SIZE OP), got more: '" +
                std::string(80, 'z') + "'…");
  EXPECT_EQ(error_of("0 0x1000 8 r\n1 0x10\0 8 w\n"s),
            "t.txt:2: expected text (THREAD ADDRESS SIZE OP), found a NUL byte at byte 7 of the line: "
            "'1 0x10\\0 8 w' (a binary or sparse file?)");
  EXPECT_EQ(error_of(std::string(1 << 20, '\0')).substr(0, 90),
            "t.txt:1: expected text (THREAD ADDRESS SIZE OP), found a NUL byte at byte 1 of the line: '");
}

// A file reads as its bytes in memory would, without being held whole.
TEST(AccessTrace, FilesReadAsTheirBytes) {
  const auto dir = std::filesystem::path(::testing::TempDir());
  const auto path = dir / ("access_" + std::to_string(::getpid()));
  std::vector<Access> many;
  for (std::uint32_t i = 0; i < 20000; ++i) many.push_back({0x1000 + 8ull * (i % 64), i % 3, 8, i % 2 == 0});
  for (const std::string& bytes : {encode_binary_trace(many), encode_text_trace(many)}) {
    std::ofstream(path, std::ios::binary) << bytes;
    const auto read = read_access_trace(path);
    ASSERT_EQ(read.size(), many.size());
    EXPECT_EQ(read.back().address, many.back().address);
    EXPECT_EQ(read.back().thread, many.back().thread);
    EXPECT_THROW(read_access_trace(path, 100), InputError);
  }
  std::string truncated = encode_binary_trace(many);
  truncated.resize(truncated.size() - 5);
  std::ofstream(path, std::ios::binary) << truncated;
  try {
    read_access_trace(path);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.line(), many.size());
    EXPECT_EQ(e.field(), "record");
  }
  std::ofstream(path, std::ios::binary).close();
  try {
    read_access_trace(path);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), path.string() + ": empty file, no accesses");
  }
  std::filesystem::remove(path);
  try {
    read_access_trace(dir);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), dir.string() + ": is a directory");
  }
}

}  // namespace
}  // namespace tokenscope::probe
