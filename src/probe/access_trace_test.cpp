#include "probe/access_trace.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tokenscope::probe
