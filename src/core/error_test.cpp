#include "core/error.h"

#include <gtest/gtest.h>

#include <string>

namespace tokenscope {
namespace {

using namespace std::string_literals;

TEST(Error, QuoteInputKeepsPrintableTextAsItIs) {
  EXPECT_EQ(quote_input("thirty"), "'thirty'");
  EXPECT_EQ(quote_input(""), "''");
  EXPECT_EQ(quote_input("it's C:\\x"), "'it's C:\\x'");
  EXPECT_EQ(quote_input("héllo ✓"), "'héllo ✓'");  // valid UTF-8 stays readable
}

TEST(Error, QuoteInputEscapesWhatIsNotPrintable) {
  EXPECT_EQ(quote_input("a\0b"s), "'a\\0b'");  // a NUL no longer ends the message
  EXPECT_EQ(quote_input("\t\r\n\x1b[31m\x7f"), "'\\t\\r\\n\\x1b[31m\\x7f'");
  EXPECT_EQ(quote_input("\xff\xfe"), "'\\xff\\xfe'");           // not UTF-8
  EXPECT_EQ(quote_input("\xc3"), "'\\xc3'");                    // a sequence cut short
  EXPECT_EQ(quote_input("\xe2\x9c"), "'\\xe2\\x9c'");           // likewise
  EXPECT_EQ(quote_input("\xed\xa0\x80"), "'\\xed\\xa0\\x80'");  // a UTF-16 surrogate
  EXPECT_EQ(quote_input("\xc0\xaf"), "'\\xc0\\xaf'");           // overlong
}

TEST(Error, QuoteInputBoundsTheInputShown) {
  const std::string long_text(1000, 'x');
  EXPECT_EQ(quote_input(long_text), "'" + std::string(80, 'x') + "'…");
  EXPECT_EQ(quote_input(long_text, 3), "'xxx'…");
  EXPECT_EQ(quote_input("xxx", 3), "'xxx'");
  // The bound counts input bytes, and never splits a UTF-8 character.
  EXPECT_EQ(quote_input("ab✓", 4), "'ab'…");
  // Escapes are longer than the bytes they stand for: 80 NULs show as 80 \0s.
  EXPECT_EQ(quote_input(std::string(2'000'000'000 / 1000, '\0')).size(), 2 + 80 * 2 + 3);
}

TEST(Error, InputErrorEscapesTheFieldName) {
  const InputError e("f.yaml", 3, "a\0b\nc"s, "unknown key");
  EXPECT_EQ(std::string(e.what()), "f.yaml:3: field 'a\\0b\\nc': unknown key");
  EXPECT_EQ(e.field(), "a\0b\nc"s);  // the field as given, for programs
  const InputError no_line("f.csv", 0, "", "empty file, no requests");
  EXPECT_EQ(std::string(no_line.what()), "f.csv: empty file, no requests");
}

}  // namespace
}  // namespace tokenscope

namespace tokenscope {
namespace {

TEST(Utf8SequenceLength, WellFormedSequencesAndTheIllFormedOnes) {
  EXPECT_EQ(utf8_sequence_length("a", 0), 1u);
  EXPECT_EQ(utf8_sequence_length("\xc3\xa9", 0), 2u);          // é
  EXPECT_EQ(utf8_sequence_length("\xe2\x82\xac", 0), 3u);      // €
  EXPECT_EQ(utf8_sequence_length("\xf0\x9f\x98\x80", 0), 4u);  // U+1F600
  EXPECT_EQ(utf8_sequence_length("\xc0\xaf", 0), 0u);          // overlong
  EXPECT_EQ(utf8_sequence_length("\xed\xa0\x80", 0), 0u);      // a surrogate
  EXPECT_EQ(utf8_sequence_length("\xf4\x90\x80\x80", 0), 0u);  // past U+10FFFF
  EXPECT_EQ(utf8_sequence_length("\xe2\x82", 0), 0u);          // cut short
  EXPECT_EQ(utf8_sequence_length("ab", 2), 0u);                // past the end
}

TEST(DisplayText, EscapesTerminalControlAndBidiButCutsNothing) {
  // Escape sequences (screen clear, window title, OSC 52 clipboard write) and
  // a newline that would forge a line of output.
  const std::string hostile = "m\x1b[2J\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\nFAILED: none\r";
  const std::string shown = display_text(hostile);
  EXPECT_EQ(shown, "m\\x1b[2J\\x1b]0;pwned\\x07\\x1b]52;c;ZXZpbA==\\x07\\nFAILED: none\\r");
  for (const char c : shown) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << int(c);
  // Right-to-left override, isolates and the line separator; C1 controls.
  EXPECT_EQ(display_text("a\u202Etxt.exe"), "a\\u{202e}txt.exe");
  EXPECT_EQ(display_text("\u2066x\u2069\u200F\u2028"), "\\u{2066}x\\u{2069}\\u{200f}\\u{2028}");
  EXPECT_EQ(display_text("\xc2\x9b"
                         "31m"),
            "\\xc2\\x9b31m");
  // Other text as it is, whole: no quotes, no cut at 80 bytes.
  const std::string long_name(500, 'x');
  EXPECT_EQ(display_text(long_name), long_name);
  EXPECT_EQ(display_text("Llama-3 \u00e9\u4e2d \\ 'q'"), "Llama-3 \u00e9\u4e2d \\ 'q'");
  // quote_input escapes the bidirectional characters too.
  EXPECT_EQ(quote_input("a\u202Eb"), "'a\\u{202e}b'");
  // display_lines keeps line breaks, nothing else.
  EXPECT_EQ(display_lines("one\ntwo\x1b[K"), "one\ntwo\\x1b[K");
}

TEST(DisplayText, AFileNameInAnInputErrorIsEscaped) {
  const InputError e("run\nFAILED: forged/run.json", 3, "", "not a JSON object");
  EXPECT_EQ(std::string(e.what()), "run\\nFAILED: forged/run.json:3: not a JSON object");
}

TEST(MarkdownText, NamesStayTextInAPullRequestComment) {
  EXPECT_EQ(markdown_text("run|1"), "run\\|1");
  EXPECT_EQ(markdown_text("[click](http://evil)"), "\\[click\\](http://evil)");
  EXPECT_EQ(markdown_text("![x](y)"), "!\\[x\\](y)");
  EXPECT_EQ(markdown_text("<img src=x onerror=alert(1)>"), "&lt;img src=x onerror=alert(1)&gt;");
  EXPECT_EQ(markdown_text("a & b"), "a &amp; b");
  EXPECT_EQ(markdown_text("*bold* _it_ `code` ~~s~~ \\"),
            "\\*bold\\* \\_it\\_ \\`code\\` \\~\\~s\\~\\~ \\\\");
  EXPECT_EQ(markdown_text("line\n# heading"), "line\\\\n# heading");
  EXPECT_EQ(markdown_text("llama-3.1-8b"), "llama-3.1-8b");
}

}  // namespace
}  // namespace tokenscope
