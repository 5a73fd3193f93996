// Unit tests of the real tokenizers on small hand-written tokenizer.json
// files, where every expected id can be worked out by hand. The comparison
// with real vocabularies is in reference_test.cpp.
#include "tokenizers/text_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include <unistd.h>

#include "core/error.h"
#include "core/temp_dir.h"
#include "tokenizers/regex.h"
#include "tokenizers/unicode_text.h"

namespace tokenscope::tokenizers {
namespace {

using json = nlohmann::json;
using Ids = std::vector<std::int32_t>;
using ::testing::HasSubstr;

// A BPE tokenizer.json over the given tokens (ids in order) and merges.
json bpe_file(const std::vector<std::string>& tokens, const json& merges) {
  json vocab = json::object();
  for (std::size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  return json{{"version", "1.0"},
              {"added_tokens", json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", nullptr},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

std::unique_ptr<TextTokenizer> load(const json& file, const json& config = nullptr) {
  return parse_hf_tokenizer_json(file.dump(), "test.json", config.is_null() ? "" : config.dump());
}

json added(std::int32_t id, const std::string& content, bool special = true) {
  return json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
              {"rstrip", false}, {"normalized", false}, {"special", special}};
}

// A byte-level tokenizer in the style of GPT-2 / Llama 3: "Ġ" is a space.
json byte_level_file() {
  json f =
      bpe_file({"h",    "e",     "l",  "o",   "w",  "r",    "d",      "Ġ",  "he", "ll",
                "hell", "hello", "Ġw", "Ġwo", "or", "Ġwor", "Ġworld", "rl", "ld", "!"},
               {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "r l", "l d", "Ġworl d"});
  // "Ġworl" is reached through "Ġwor l": add it and fix the last merge's target.
  f["model"]["vocab"]["Ġworl"] = 20;
  f["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  f["decoder"] = {{"type", "ByteLevel"}};
  return f;
}

TEST(RealTokenizer, ByteLevelBpeAppliesMergesByRank) {
  const auto t = load(byte_level_file());
  EXPECT_EQ(t->encode("hello", false), Ids{11});
  EXPECT_EQ(t->encode("hello world", false), (Ids{11, 16}));  // "hello" "Ġworld"
  EXPECT_EQ(t->encode("hello world!", false), (Ids{11, 16, 19}));
  EXPECT_EQ(t->encode("hell", false), Ids{10});
  // Equal ranks: the leftmost pair first ("l l" at 0, leaving the last "l").
  EXPECT_EQ(t->encode("lll", false), (Ids{9, 2}));
  EXPECT_EQ(t->encode("", false), Ids{});
  EXPECT_EQ(t->decode(t->encode("hello world!", false)), "hello world!");
  EXPECT_EQ(t->count("hello world", true), 2u);
  EXPECT_EQ(t->vocab_size(), 21u);
  EXPECT_EQ(t->token_to_piece(16), std::optional<std::string>("Ġworld"));
  EXPECT_EQ(t->token_to_piece(21), std::nullopt);
  EXPECT_EQ(t->token_to_piece(-1), std::nullopt);
  EXPECT_EQ(t->piece_to_id("Ġw"), std::optional<std::int32_t>(12));
  EXPECT_EQ(t->piece_to_id("zz"), std::nullopt);
}

TEST(RealTokenizer, LowerRankWinsOverPosition) {
  // "abc": "b c" (rank 0) goes before "a b" (rank 1), so "ab" never forms.
  const auto t = load(bpe_file({"a", "b", "c", "ab", "bc", "abc"}, {"b c", "a b", "a bc"}));
  EXPECT_EQ(t->encode("abc", false), Ids{5});
  const auto u = load(bpe_file({"a", "b", "c", "ab", "bc", "abc"}, {"b c", "a b"}));
  EXPECT_EQ(u->encode("abc", false), (Ids{0, 4}));
  // A stale candidate is skipped: after "b c", the pair (a, b) no longer exists.
  EXPECT_EQ(u->encode("abcab", false), (Ids{0, 4, 3}));
}

TEST(RealTokenizer, MergesAsPairsEqualMergesAsStrings) {
  const std::vector<std::string> vocab{"a", "b", "c", "ab", "abc"};
  const auto strings = load(bpe_file(vocab, {"a b", "ab c"}));
  const auto pairs = load(bpe_file(vocab, json::array({json::array({"a", "b"}), json::array({"ab", "c"})})));
  for (const char* text : {"abc", "cab", "abcabc", "ba"})
    EXPECT_EQ(strings->encode(text, false), pairs->encode(text, false)) << text;
  EXPECT_EQ(pairs->encode("abcab", false), (Ids{4, 3}));
}

TEST(RealTokenizer, IgnoreMergesTakesWholeVocabularyWords) {
  json f = bpe_file({"a", "b", "c", "d", "ab", "abcd"}, {"a b"});
  EXPECT_EQ(load(f)->encode("abcd", false), (Ids{4, 2, 3}));
  f["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(f)->encode("abcd", false), Ids{5});
  EXPECT_EQ(load(f)->encode("abc", false), (Ids{4, 2}));
}

// Llama 2 style: SentencePiece-like BPE with "▁" for spaces, byte fallback.
json llama2_style_file() {
  std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.push_back(name);
  }
  // 259.. : pieces
  for (const char* p : {"▁", "a", "b", "▁a", "▁b", "ab", "▁ab", "▁▁", "é"}) tokens.push_back(p);
  json f = bpe_file(tokens, {"▁ a", "▁ b", "a b", "▁a b", "▁ ▁"});
  f["model"]["unk_token"] = "<unk>";
  f["model"]["byte_fallback"] = true;
  f["model"]["fuse_unk"] = true;
  f["added_tokens"] = json::array({added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")});
  f["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       json::array({{{"type", "Prepend"}, {"prepend", "▁"}},
                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}})}};
  f["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                         {"pair", json::array()},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  f["decoder"] = {
      {"type", "Sequence"},
      {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                                {{"type", "ByteFallback"}},
                                {{"type", "Fuse"}},
                                {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  return f;
}

constexpr std::int32_t kSpace = 259, kA = 260, kSpaceA = 262, kSpaceB = 263, kSpaceAb = 265,
                       kSpaceSpace = 266, kEAcute = 267;
std::int32_t byte_id(int b) {
  return 3 + b;
}

TEST(RealTokenizer, SentencePieceStyleBpeWithByteFallback) {
  const auto t = load(llama2_style_file());
  EXPECT_EQ(t->encode("ab", false), Ids{kSpaceAb});
  EXPECT_EQ(t->encode("ab", true), (Ids{1, kSpaceAb}));
  EXPECT_EQ(t->encode("a b", false), (Ids{kSpaceA, kSpaceB}));
  // "▁▁a": "▁ a" (rank 0) before "▁ ▁" (rank 4).
  EXPECT_EQ(t->encode(" a", false), (Ids{kSpace, kSpaceA}));
  EXPECT_EQ(t->encode("a  a", false), (Ids{kSpaceA, kSpace, kSpaceA}));
  EXPECT_EQ(t->encode("   ", false), (Ids{kSpaceSpace, kSpaceSpace}));
  // Characters outside the vocabulary become their UTF-8 bytes.
  EXPECT_EQ(t->encode("a€", false), (Ids{kSpaceA, byte_id(0xE2), byte_id(0x82), byte_id(0xAC)}));
  EXPECT_EQ(t->encode("é", false), (Ids{kSpace, kEAcute}));
  EXPECT_TRUE(t->adds_bos());
  EXPECT_EQ(t->num_special_added(), 1u);
  EXPECT_EQ(t->bos_id(), std::optional<std::int32_t>(1));
  EXPECT_EQ(t->eos_id(), std::optional<std::int32_t>(2));
  EXPECT_EQ(t->decode(t->encode("a b€ ab", true)), "<s> a b€ ab");
  EXPECT_EQ(t->decode(t->encode("a b€ ab", true), true), "a b€ ab");
  EXPECT_EQ(t->decode(Ids{byte_id(0xE2), byte_id(0x82)}),
            "\xEF\xBF\xBD\xEF\xBF\xBD");  // cut short: U+FFFD each
  EXPECT_TRUE(t->is_special(1));
  EXPECT_FALSE(t->is_special(kSpaceA));
  EXPECT_EQ(t->description().model, "BPE (byte fallback)");
}

TEST(RealTokenizer, UnknownCharactersFuseIntoOneUnkWhenAsked) {
  json f = llama2_style_file();
  f["model"]["byte_fallback"] = false;
  EXPECT_EQ(load(f)->encode("a€€b", false), (Ids{kSpaceA, 0, 259 + 2}));  // "▁a" <unk> "b"
  f["model"]["fuse_unk"] = false;
  EXPECT_EQ(load(f)->encode("a€€b", false), (Ids{kSpaceA, 0, 0, 259 + 2}));
  // Without an unk token an unknown character is dropped (and what is left merges).
  f["model"]["unk_token"] = nullptr;
  EXPECT_EQ(load(f)->encode("a€€b", false), Ids{kSpaceAb});
}

TEST(RealTokenizer, SpecialTokensInTextAreMatchedBeforeTheModel) {
  const auto t = load(llama2_style_file());
  // The normalizer runs on each section between special tokens: each gets its "▁".
  EXPECT_EQ(t->encode("a<s>b", false), (Ids{kSpaceA, 1, kSpaceB}));
  EXPECT_EQ(t->encode("<s>", false), Ids{1});
  EXPECT_EQ(t->encode("</s></s>", true), (Ids{1, 2, 2}));
  EXPECT_EQ(t->encode("<s", false), (Ids{kSpace, byte_id('<'), byte_id('s')}));
}

TEST(RealTokenizer, AddedTokenOptionsStripAndSingleWord) {
  json f = byte_level_file();
  json strip = added(30, "<x>");
  strip["lstrip"] = true;
  strip["rstrip"] = true;
  json word = added(31, "ll", false);
  word["single_word"] = true;
  f["added_tokens"] = json::array({strip, word});
  const auto t = load(f);
  // lstrip/rstrip swallow the spaces around "<x>".
  EXPECT_EQ(t->encode("hello  <x>  hello", false), (Ids{11, 30, 11}));
  // "ll" only where it stands alone as a word.
  EXPECT_EQ(t->encode("hello", false), Ids{11});
  EXPECT_EQ(t->encode("ll", false), Ids{31});
  EXPECT_EQ(t->encode("he ll", false), (Ids{8, 7, 31}));
  EXPECT_EQ(t->piece_to_id("<x>"), std::optional<std::int32_t>(30));
  EXPECT_EQ(t->vocab_size(), 32u);
  EXPECT_EQ(t->token_to_piece(30), std::optional<std::string>("<x>"));
}

TEST(RealTokenizer, NormalizedAddedTokensMatchAfterNormalization) {
  json f = bpe_file({"a", "b", "A", "B"}, json::array());
  f["normalizer"] = {{"type", "Lowercase"}};
  json t = added(9, "ab", false);
  t["normalized"] = true;
  f["added_tokens"] = json::array({t});
  EXPECT_EQ(load(f)->encode("xABb", false), (Ids{9, 1}));  // "x" is unknown and dropped
  t["normalized"] = false;
  f["added_tokens"] = json::array({t});
  EXPECT_EQ(load(f)->encode("ABab", false), (Ids{0, 1, 9}));
}

TEST(RealTokenizer, TemplateAndRobertaPostProcessors) {
  json f = bpe_file({"a", "<bos>", "<eos>"}, json::array());
  f["added_tokens"] = json::array({added(1, "<bos>"), added(2, "<eos>")});
  f["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       json::array({{{"type", "ByteLevel"}, {"add_prefix_space", false}},
                    {{"type", "TemplateProcessing"},
                     {"single", json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                             {{"SpecialToken", {{"id", "<eos>"}, {"type_id", 0}}}}})},
                     {"special_tokens",
                      {{"<bos>", {{"id", "<bos>"}, {"ids", {1}}, {"tokens", {"<bos>"}}}},
                       {"<eos>", {{"id", "<eos>"}, {"ids", {2}}, {"tokens", {"<eos>"}}}}}}}})}};
  auto t = load(f);
  EXPECT_EQ(t->encode("aa", true), (Ids{1, 0, 0, 2}));
  EXPECT_EQ(t->encode("aa", false), (Ids{0, 0}));
  EXPECT_EQ(t->encode("", true), (Ids{1, 2}));
  EXPECT_EQ(t->num_special_added(), 2u);
  EXPECT_TRUE(t->adds_bos());
  EXPECT_EQ(t->eos_id(), std::optional<std::int32_t>(2));

  f["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"<eos>", 2}}, {"cls", {"<bos>", 1}}};
  t = load(f);
  EXPECT_EQ(t->encode("a", true), (Ids{1, 0, 2}));
  EXPECT_EQ(t->special_prefix().size(), 1u);
  EXPECT_EQ(t->special_suffix().size(), 1u);
}

TEST(RealTokenizer, BosAndEosComeFromTokenizerConfigWhenGiven) {
  json f = bpe_file({"a", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"}, json::array());
  f["added_tokens"] =
      json::array({added(1, "<|begin_of_text|>"), added(2, "<|end_of_text|>"), added(3, "<|eot_id|>")});
  auto t = load(f);
  EXPECT_EQ(t->bos_id(), std::optional<std::int32_t>(1));  // conventional names
  EXPECT_EQ(t->eos_id(), std::optional<std::int32_t>(2));
  EXPECT_FALSE(t->adds_bos());  // no post-processor: encode adds nothing
  EXPECT_EQ(t->encode("a", true), Ids{0});
  t = load(f, json{{"bos_token", {{"__type", "AddedToken"}, {"content", "<|begin_of_text|>"}}},
                   {"eos_token", "<|eot_id|>"}});
  EXPECT_EQ(t->eos_id(), std::optional<std::int32_t>(3));
  t = load(f, json{{"bos_token", nullptr}, {"eos_token", nullptr}});
  EXPECT_EQ(t->bos_id(), std::nullopt);
  EXPECT_EQ(t->eos_id(), std::nullopt);
}

// Split behaviors, made visible by merges that would cross the split.
json split_file(const std::string& behavior, bool invert = false) {
  json f = bpe_file({"a", "-", "b", "a-", "-b", "--"}, {"a -", "- b", "- -"});
  f["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
  return f;
}

TEST(RealTokenizer, SplitBehaviorsCutAsTokenizersDoes) {
  EXPECT_EQ(load(bpe_file({"a", "-", "b", "a-", "-b"}, {"a -", "- b"}))->encode("a-b", false), (Ids{3, 2}));
  EXPECT_EQ(load(split_file("Isolated"))->encode("a-b", false), (Ids{0, 1, 2}));
  EXPECT_EQ(load(split_file("Removed"))->encode("a-b", false), (Ids{0, 2}));
  EXPECT_EQ(load(split_file("MergedWithPrevious"))->encode("a-b", false), (Ids{3, 2}));
  EXPECT_EQ(load(split_file("MergedWithNext"))->encode("a-b", false), (Ids{0, 4}));
  EXPECT_EQ(load(split_file("Isolated"))->encode("a--b", false), (Ids{0, 1, 1, 2}));
  EXPECT_EQ(load(split_file("Contiguous"))->encode("a--b", false), (Ids{0, 5, 2}));
  // Inverted: the dashes are what lies between matches.
  EXPECT_EQ(load(split_file("Removed", true))->encode("a-b", false), Ids{1});
}

TEST(RealTokenizer, RegexSplitUsesUnicodeClassesAndCaseInsensitiveGroups) {
  json f = bpe_file({"'", "s", "S", "'s", "'S", "x", "é", "1", "2", "12"}, {"' s", "' S", "1 2"});
  f["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"Regex", R"((?i:'s)|\p{L}+|\p{N})"}}},
                        {"behavior", "Isolated"},
                        {"invert", false}};
  const auto t = load(f);
  EXPECT_EQ(t->encode("x'S", false), (Ids{5, 4}));
  EXPECT_EQ(t->encode("xé's", false), (Ids{5, 6, 3}));  // "xé" is one \p{L}+ piece, no merge
  EXPECT_EQ(t->encode("12", false), (Ids{7, 8}));       // \p{N}: one digit per piece
}

TEST(RealTokenizer, DigitsPreTokenizer) {
  json f = bpe_file({"1", "2", "3", "12", "123", "a", "a1"}, {"1 2", "12 3", "a 1"});
  f["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_EQ(load(f)->encode("a123", false), (Ids{5, 4}));
  f["pre_tokenizer"]["individual_digits"] = true;
  EXPECT_EQ(load(f)->encode("a123", false), (Ids{5, 0, 1, 2}));
}

TEST(RealTokenizer, MetaspacePrependsAndSplits) {
  json f = bpe_file({"▁", "a", "b", "▁a", "▁b", "▁▁", "a▁", "<s>"}, {"a ▁", "▁ a", "▁ b", "▁ ▁"});
  f["added_tokens"] = json::array({added(7, "<s>")});
  f["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  f["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  auto t = load(f);
  EXPECT_EQ(t->encode("a b", false), (Ids{3, 4}));
  EXPECT_EQ(t->encode("a  b", false), (Ids{3, 0, 4}));  // split: "▁a" "▁" "▁b"
  EXPECT_EQ(t->encode("a<s>b", false), (Ids{3, 7, 4}));
  EXPECT_EQ(t->decode(Ids{3, 0, 4}), "a  b");
  // Without split, merges may cross the "▁": "a▁" forms.
  f["pre_tokenizer"]["split"] = false;
  EXPECT_EQ(load(f)->encode("a a", false), (Ids{0, 6, 1}));  // "▁a▁a": "a ▁" goes first
  // "first": only the section at the start of the text gets a "▁".
  f["pre_tokenizer"]["split"] = true;
  f["pre_tokenizer"]["prepend_scheme"] = "first";
  t = load(f);
  EXPECT_EQ(t->encode("a<s>b", false), (Ids{3, 7, 2}));
  EXPECT_EQ(t->encode("<s>b", false), (Ids{7, 2}));
  f["pre_tokenizer"]["prepend_scheme"] = "never";
  EXPECT_EQ(load(f)->encode("a b", false), (Ids{1, 4}));
  // The older form: add_prefix_space.
  f["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"add_prefix_space", true}};
  EXPECT_EQ(load(f)->encode("b", false), Ids{4});
}

TEST(RealTokenizer, UnicodeNormalizers) {
  json f = bpe_file({"é", "e", "\u0301", "ﬁ", "f", "i"}, json::array());
  EXPECT_EQ(load(f)->encode("e\u0301", false), (Ids{1, 2}));
  f["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(load(f)->encode("e\u0301", false), Ids{0});
  f["normalizer"] = {{"type", "NFD"}};
  EXPECT_EQ(load(f)->encode("é", false), (Ids{1, 2}));
  f["normalizer"] = {{"type", "NFKC"}};
  EXPECT_EQ(load(f)->encode("ﬁ", false), (Ids{4, 5}));
  f["normalizer"] = {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}};
  EXPECT_EQ(load(f)->encode(" \t e \n", false), Ids{1});
}

TEST(RealTokenizer, InvalidUtf8IsRepairedBeforeTokenizing) {
  const auto t = load(byte_level_file());
  EXPECT_EQ(t->encode("he\xFFllo", false), t->encode("he\xEF\xBF\xBDllo", false));
  EXPECT_EQ(unicode::repair_utf8("a\xE2\x82"), "a\xEF\xBF\xBD");            // truncated: one U+FFFD
  EXPECT_EQ(unicode::repair_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: one per byte
  EXPECT_EQ(unicode::repair_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_TRUE(unicode::is_valid_utf8("日本 😀"));
  EXPECT_FALSE(unicode::is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
}

TEST(RealTokenizer, RegexFindAllReportsEveryMatchAndStopsPathologicalPatterns) {
  const Regex words(R"(\p{L}+)");
  const auto m = words.find_all("ab, cd");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[1].start, 4u);
  EXPECT_EQ(m[1].end, 6u);
  EXPECT_EQ(Regex("x*").find_all("ab").size(), 3u);  // empty matches at 0, 1, 2
  EXPECT_THROW(Regex("(unclosed"), UsageError);
  const Regex catastrophic("(a+)+$");
  EXPECT_THROW(catastrophic.find_all(std::string(40, 'a') + "b"), UsageError);
}

TEST(RealTokenizer, ConcurrentEncodesAgreeWithASerialOne) {
  json f = llama2_style_file();
  f["normalizer"]["normalizers"].push_back({{"type", "NFC"}});
  const auto t = load(f);
  const std::string text = "a b€ ab <s> e\u0301 ab  a";
  const Ids want = t->encode(text, true);
  std::vector<std::thread> threads;
  std::vector<int> agreed(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 200; ++i) agreed[k] += t->encode(text, true) == want;
    });
  for (auto& th : threads) th.join();
  EXPECT_THAT(agreed, ::testing::Each(200));
}

TEST(RealTokenizer, DescriptionNamesThePipeline) {
  const auto t = load(byte_level_file());
  const auto d = t->description();
  EXPECT_EQ(d.kind, "huggingface");
  EXPECT_EQ(d.file, "test.json");
  EXPECT_EQ(d.model, "BPE (byte-level)");
  EXPECT_EQ(d.pipeline, "normalizer=none pre_tokenizer=ByteLevel post_processor=none decoder=ByteLevel");
  EXPECT_EQ(d.vocab_size, 21u);
  const json j = d;
  EXPECT_EQ(j["vocab_size"], 21);
  EXPECT_TRUE(j["bos_id"].is_null());
  EXPECT_EQ(j["special_prefix"], json::array());
}

void expect_input_error(const json& file, const std::string& field, const std::string& problem) {
  try {
    load(file);
    ADD_FAILURE() << "accepted: " << field;
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "test.json");
    EXPECT_EQ(e.field(), field);
    EXPECT_THAT(e.problem(), HasSubstr(problem));
  }
}

TEST(RealTokenizer, BadFilesAreInputErrorsNamingTheField) {
  EXPECT_THROW(parse_hf_tokenizer_json("{\"model\": ", "test.json"), InputError);
  expect_input_error(json{{"version", "1.0"}}, "model", "not a tokenizer.json");
  json f = bpe_file({"a"}, json::array());
  f["model"]["type"] = "WordPiece";
  expect_input_error(f, "model.type", "only BPE");
  f = bpe_file({"a", "b"}, {"a c"});
  expect_input_error(f, "model.merges[0]", "'c' is not in the vocabulary");
  f = bpe_file({"a", "b"}, {"a b"});
  expect_input_error(f, "model.merges[0]", "the merge 'ab' is not in the vocabulary");
  f = bpe_file({"a", "b"}, {"ab"});
  expect_input_error(f, "model.merges[0]", "expected");
  f = bpe_file({"a"}, json::array());
  f["model"]["vocab"]["b"] = -3;
  expect_input_error(f, "model.vocab.b", "outside");
  f = bpe_file({"a"}, json::array());
  f["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}};
  expect_input_error(f, "pre_tokenizer.pattern.Regex", "invalid regular expression");
  f["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  expect_input_error(f, "pre_tokenizer.type", "not supported");
  f["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({{{"type", "Punctuation"}}})}};
  expect_input_error(f, "pre_tokenizer.pretokenizers[0].type", "'Punctuation' is not supported");
  f["pre_tokenizer"] = nullptr;
  f["normalizer"] = {{"type", "Precompiled"}};
  expect_input_error(f, "normalizer.type", "not supported");
  f["normalizer"] = nullptr;
  f["model"]["dropout"] = 0.1;
  expect_input_error(f, "model.dropout", "not supported");
  f["model"]["dropout"] = nullptr;
  f["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<s>"}}}}})},
                         {"special_tokens", json::object()}};
  expect_input_error(f, "post_processor.special_tokens.<s>", "missing");
  f["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"a", 0}}, {"cls", {"<s>", 7}}};
  expect_input_error(f, "post_processor", "special token id 7 is not in the vocabulary");
}

TEST(RealTokenizer, LoaderDetectsTheFormatAndReportsBadFiles) {
  const TempDir dir;
  const std::string file = dir.write("tokenizer.json", "\n  " + byte_level_file().dump());
  dir.write("tokenizer_config.json", json{{"eos_token", "Ġw"}}.dump());
  const auto t = load_text_tokenizer(file);
  EXPECT_EQ(t->encode("hello", false), Ids{11});
  EXPECT_EQ(t->eos_id(), std::optional<std::int32_t>(12));  // from tokenizer_config.json
  EXPECT_EQ(t->description().file, file);
  EXPECT_EQ(load_text_tokenizer(dir.path().string())->encode("hello", false), Ids{11});  // a directory

  const auto message = [](const std::string& path) -> std::string {
    try {
      load_text_tokenizer(path);
    } catch (const InputError& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_THAT(message(dir.path().string() + "/missing.json"), HasSubstr("cannot open the tokenizer file"));
  EXPECT_THAT(message(dir.write("empty.json", " \n")), HasSubstr("empty tokenizer file"));
  EXPECT_THAT(message(dir.write("garbage.model", "\x01\x02garbage")), HasSubstr("nor a SentencePiece model"));
  EXPECT_THAT(message(dir.write("bad.json", "{\"model\": 1")), HasSubstr("not valid JSON"));
  std::filesystem::create_directories(dir.path().string() + "/emptydir");
  EXPECT_THAT(message(dir.path().string() + "/emptydir"),
              HasSubstr("without tokenizer.json or tokenizer.model"));
}

TEST(RealTokenizer, SingleTokenWordsNeedOneTokenAloneAndAfterASpace) {
  const auto t = load(byte_level_file());
  const std::vector<std::string> candidates{"hello", "world", "hell", "lo", "hello", "he"};
  const auto words = single_token_words(*t, candidates);
  // "world" is "w" "or" "ld" at the start of a text; "lo" is two tokens;
  // the others have no one-token spaced form ("Ġhello", "Ġhe" are not in the
  // vocabulary).
  ASSERT_EQ(words.size(), 0u);

  json f = byte_level_file();
  for (const char* extra : {"Ġhello", "Ġhe", "world"})
    f["model"]["vocab"][extra] = f["model"]["vocab"].size();
  f["model"]["merges"] = json::array();
  f["model"]["ignore_merges"] = true;  // whole pre-tokens straight from the vocabulary
  const auto u = load(f);
  const auto found = single_token_words(*u, candidates);
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].word, "hello");
  EXPECT_EQ(found[0].first_id, 11);
  EXPECT_EQ(found[0].spaced_id, 21);
  EXPECT_EQ(found[1].word, "world");
  EXPECT_EQ(found[1].first_id, 23);
  EXPECT_EQ(found[1].spaced_id, 16);
  EXPECT_EQ(found[2].word, "he");
  EXPECT_EQ(found[2].first_id, 8);
  EXPECT_EQ(found[2].spaced_id, 22);
  EXPECT_EQ(u->encode("hello he world hello", false), (Ids{11, 22, 16, 21}));
  const std::vector<std::string> bad{"Hello"};
  EXPECT_THROW(single_token_words(*u, bad), UsageError);
}

}  // namespace
}  // namespace tokenscope::tokenizers
