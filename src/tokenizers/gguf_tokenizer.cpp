// The tokenizer a GGUF model file holds (tokenizer.ggml.* keys), tokenizing
// as llama.cpp's llama-vocab does at the pinned commit, so prompts sized with
// `--tokenizer model.gguf` are the lengths llama-server counts
// (docs/tokenizer.md, "GGUF vocabularies").
//
//  * tokenizer.ggml.model "llama": SentencePiece by scores. The text (after a
//    space put in front where llama.cpp puts one) has its spaces written as
//    U+2581; its characters are merged pairwise, the pair whose concatenation
//    is the vocabulary entry of the highest score first (the leftmost among
//    equal scores); what ends up outside the vocabulary is written as byte
//    tokens <0xXX>.
//  * "gpt2": byte-level BPE. The text is split by the regular expressions of
//    its pre-tokenizer type (tokenizer.ggml.pre: every name llama.cpp knows),
//    each piece's bytes written as GPT-2's byte characters and merged by the
//    rank of tokenizer.ggml.merges, lowest first and leftmost among equal
//    ranks; with ignore_merges (llama3, tekken) a piece that is a token is
//    that token.
//  * Special tokens: control, user-defined and unknown tokens are found in
//    the text first, longest first (llama.cpp's parse_special, which its
//    server uses for prompts and /tokenize); tokens llama.cpp recognises by
//    name (end of turn, fill-in-the-middle) are control tokens as there.
//  * BOS/EOS added as tokenizer.ggml.add_bos_token / add_eos_token say, with
//    llama.cpp's defaults by model and pre-tokenizer type.
// Other models (bert WordPiece, t5 Unigram, rwkv) are refused by name.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>
#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizers/gguf.h"
#include "tokenizers/hf_split.h"
#include "tokenizers/regex.h"
#include "tokenizers/text_tokenizer.h"
#include "tokenizers/unicode_text.h"

namespace tokenscope::tokenizers {
namespace {

// llama.cpp's token types (tokenizer.ggml.token_type) and attributes.
enum TokenType {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};
enum Attr : unsigned { kAttrLstrip = 1u << 8, kAttrRstrip = 1u << 9 };

struct PreType {
  const char* name;                  // llama.cpp's pre-tokenizer type
  std::vector<const char*> aliases;  // tokenizer.ggml.pre values that select it
  std::vector<const char*> regexes;  // applied in order, each splitting what the previous left
  bool ignore_merges = false;
  bool add_bos = false;
  bool no_bos_id = false;  // chatglm-bpe: no BOS token
};

// The regular expressions of each pre-tokenizer type, as llama-vocab.cpp
// (llm_tokenizer_bpe) lists them.
const char* const kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char* const kLlama3Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// DeepSeek LLM's letters, written with escapes: the characters are llama.cpp's
// exactly (several have canonical equivalents that tools normalizing to NFC
// would change, and a range's end with them).
const char* const kDeepseekLetters =
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF"
    "\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5"
    "\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA"
    "\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45"
    "\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-"
    "\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107"
    "\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F"
    "\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D"
    "\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17"
    "\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB"
    "\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943]+";
const char* const kBloomRegex = " ?[^(\\s|.,!?…。，、।۔،)]+";

const std::vector<PreType>& pre_types() {
  static const std::vector<PreType> types = {
      {"default", {"default", ""}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2Regex, "\\p{N}+", "[0-9][0-9][0-9]"}},
      {"llama3", {"llama3", "llama-v3", "llama-bpe", "falcon3"}, {kLlama3Regex}, true, true},
      {"dbrx", {"dbrx", "smaug-bpe"}, {kLlama3Regex}},
      {"deepseek-llm",
       {"deepseek-llm"},
       {"[\r\n]", kDeepseekLetters, "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+",
        "\\p{N}+"}},
      {"deepseek-v3",
       {"deepseek-v3"},
       {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
        "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}},
      {"deepseek-coder",
       {"deepseek-coder"},
       {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"}},
      {"falcon", {"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2Regex, "[0-9][0-9][0-9]"}},
      {"starcoder",
       {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       {"\\p{N}", kGpt2Regex}},
      {"gpt2",
       {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de",
        "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais"},
       {kGpt2Regex}},
      {"qwen2", {"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"}, {kQwen2Regex}},
      {"bloom", {"poro-chat", "bloom", "gpt3-finnish"}, {kBloomRegex}},
      {"chatglm4", {"chatglm-bpe"}, {kLlama3Regex}, false, false, true},
      {"viking", {"viking"}, {kBloomRegex, "\\p{N}"}},
      {"tekken",
       {"tekken"},
       {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{"
        "L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
       true,
       true},
      {"chameleon",
       {"chameleon"},
       {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
        "[\\p{P}!-/:-@\\[-`{-~]", kGpt2Regex},
       false,
       true},
  };
  return types;
}

const PreType* find_pre_type(std::string_view name) {
  for (const auto& t : pre_types())
    for (const char* alias : t.aliases)
      if (name == alias) return &t;
  return nullptr;
}

std::string known_pre_names() {
  std::vector<std::string> names;
  for (const auto& t : pre_types())
    for (const char* alias : t.aliases)
      if (*alias) names.emplace_back(alias);
  std::sort(names.begin(), names.end());
  return fmt::format("{}", fmt::join(names, ", "));
}

// Only the keys the tokenizer reads are stored (a file's other arrays are
// checked and skipped, never held in memory).
bool keep_tokenizer_key(std::string_view key) {
  static const std::unordered_set<std::string_view> keys = {
      "general.name",
      "tokenizer.chat_template",
      "tokenizer.ggml.model",
      "tokenizer.ggml.pre",
      "tokenizer.ggml.tokens",
      "tokenizer.ggml.scores",
      "tokenizer.ggml.token_type",
      "tokenizer.ggml.merges",
      "tokenizer.ggml.bos_token_id",
      "tokenizer.ggml.eos_token_id",
      "tokenizer.ggml.unknown_token_id",
      "tokenizer.ggml.eot_token_id",
      "tokenizer.ggml.fim_pre_token_id",
      "tokenizer.ggml.fim_suf_token_id",
      "tokenizer.ggml.fim_mid_token_id",
      "tokenizer.ggml.fim_pad_token_id",
      "tokenizer.ggml.fim_rep_token_id",
      "tokenizer.ggml.fim_sep_token_id",
      "tokenizer.ggml.prefix_token_id",
      "tokenizer.ggml.suffix_token_id",
      "tokenizer.ggml.middle_token_id",
      "tokenizer.ggml.add_bos_token",
      "tokenizer.ggml.add_eos_token",
      "tokenizer.ggml.add_space_prefix",
  };
  return keys.contains(key);
}

// A piece of the text: raw text (a range of the repaired input) or a token.
struct Fragment {
  std::size_t offset = 0, length = 0;
  std::int32_t token = -1;  // >= 0: a special token
};

struct Symbol {
  int prev = -1, next = -1;
  std::size_t start = 0, n = 0;
};

// The text's UTF-8 characters as a linked list of symbols (the start of
// both of llama.cpp's merge loops).
std::vector<Symbol> utf8_symbols(std::string_view text) {
  std::vector<Symbol> sym;
  for (std::size_t off = 0; off < text.size();) {
    const std::size_t len =
        std::min(unicode::sequence_length(static_cast<unsigned char>(text[off])), text.size() - off);
    Symbol s;
    s.start = off;
    s.n = len;
    s.prev = static_cast<int>(sym.size()) - 1;
    off += len;
    s.next = off == text.size() ? -1 : static_cast<int>(sym.size()) + 1;
    sym.push_back(s);
  }
  return sym;
}

class GgufTokenizer final : public TextTokenizer {
 public:
  GgufTokenizer(const gguf::Metadata& m, const std::string& file) : file_(file) {
    auto fail = [&](const std::string& key, const std::string& problem) -> void {
      throw InputError(file, 0, key, problem);
    };
    const auto model = m.string("tokenizer.ggml.model");
    if (!model) fail("tokenizer.ggml.model", "a GGUF file without a tokenizer (no tokenizer.ggml.model key)");
    model_ = *model;
    if (model_ == "llama") {
      spm_ = true;
    } else if (model_ == "gpt2") {
      spm_ = false;
    } else {
      const char* what = model_ == "bert"   ? "WordPiece (BERT)"
                         : model_ == "t5"   ? "Unigram (T5)"
                         : model_ == "rwkv" ? "RWKV's trie tokenizer"
                                            : nullptr;
      fail(
          "tokenizer.ggml.model",
          fmt::format(
              "tokenizer model \"{}\"{}: tokenscope reads \"llama\" (SentencePiece) and \"gpt2\" (byte-level "
              "BPE) vocabularies; give the model's tokenizer.json instead, or no --tokenizer (the "
              "server's /tokenize then sizes prompts)",
              model_, what ? fmt::format(" ({})", what) : std::string()));
    }

    const auto* tokens = m.strings("tokenizer.ggml.tokens");
    if (!tokens || tokens->empty())
      fail("tokenizer.ggml.tokens", "no vocabulary (an array of strings expected)");
    if (tokens->size() > (std::size_t{1} << 24))
      fail("tokenizer.ggml.tokens", fmt::format("{} tokens: at most 16,777,216 are read", tokens->size()));
    const auto* scores = m.numbers("tokenizer.ggml.scores");
    if (scores && scores->size() != tokens->size())
      fail("tokenizer.ggml.scores", fmt::format("{} scores for {} tokens", scores->size(), tokens->size()));
    const auto* types = m.numbers("tokenizer.ggml.token_type");
    if (types && types->size() != tokens->size())
      fail("tokenizer.ggml.token_type", fmt::format("{} types for {} tokens", types->size(), tokens->size()));

    const std::size_t n = tokens->size();
    text_.resize(n);
    score_.assign(n, 0.0f);
    attr_.assign(n, kNormal);
    for (std::size_t i = 0; i < n; ++i) {
      std::string word = (*tokens)[i];
      if (word.empty()) word = fmt::format("[EMPTY_{}]", i);  // as llama.cpp names empty entries
      text_[i] = word;
      to_id_[word] = static_cast<std::int32_t>(i);  // a later duplicate wins, as in llama.cpp's map
      if (scores) score_[i] = static_cast<float>((*scores)[i]);
      if (types) {
        const double t = (*types)[i];
        attr_[i] =
            (t >= 1 && t <= 6 && t == static_cast<int>(t)) ? static_cast<unsigned>(t) : unsigned{kUndefined};
      }
    }

    // Defaults by model, then the keys (llama_vocab::impl::load).
    std::optional<std::int32_t> bos, eos, unk;
    const PreType* pre = nullptr;
    if (spm_) {
      bos = 1, eos = 2, unk = 0;
      add_space_prefix_ = true;
      add_bos_ = true;
      pipeline_ = "SentencePiece by scores (llama.cpp's SPM)";
    } else {
      bos = 11, eos = 11;
      const auto pre_name = m.string("tokenizer.ggml.pre").value_or("");
      pre = find_pre_type(pre_name);
      if (!pre)
        fail(
            "tokenizer.ggml.pre",
            fmt::format(
                "pre-tokenizer type \"{}\" is not one llama.cpp (at the commit tokenscope follows) knows: {}",
                pre_name, known_pre_names()));
      pre_name_ = pre_name.empty() ? "default (none given)" : pre_name;
      ignore_merges_ = pre->ignore_merges;
      add_bos_ = pre->add_bos;
      if (pre->no_bos_id) bos.reset();
      for (const char* re : pre->regexes) regexes_.emplace_back(re);
      const auto* merges = m.strings("tokenizer.ggml.merges");
      if (!merges) fail("tokenizer.ggml.merges", "a gpt2 (BPE) vocabulary without merges");
      ranks_.reserve(merges->size());
      for (std::size_t r = 0; r < merges->size(); ++r) {
        const std::string& w = (*merges)[r];
        const auto space = w.size() > 1 ? w.find(' ', 1) : std::string::npos;
        // llama.cpp keeps a merge without a space as the pair ("", ""): it can never apply.
        if (space == std::string::npos) continue;
        ranks_.emplace(pair_key(std::string_view(w).substr(0, space), std::string_view(w).substr(space + 1)),
                       static_cast<int>(r));
      }
      pipeline_ = fmt::format("byte-level BPE, pre-tokenizer {} ({} regular expression{}){}", pre->name,
                              regexes_.size(), regexes_.size() == 1 ? "" : "s",
                              ignore_merges_ ? ", merges ignored for whole tokens" : "");
    }
    if (auto v = m.boolean("tokenizer.ggml.add_space_prefix")) add_space_prefix_ = *v;
    // Whether the key names an id inside the vocabulary (llama.cpp ignores
    // one past it, and then finds the token by its text as without the key).
    auto id_key = [&](const char* key, std::optional<std::int32_t>& id) {
      if (const auto v = m.uint(key); v && *v < n) {
        id = static_cast<std::int32_t>(*v);
        return true;
      }
      return false;
    };
    id_key("tokenizer.ggml.bos_token_id", bos);
    id_key("tokenizer.ggml.eos_token_id", eos);
    id_key("tokenizer.ggml.unknown_token_id", unk);
    if (auto v = m.boolean("tokenizer.ggml.add_bos_token")) add_bos_ = *v;
    if (auto v = m.boolean("tokenizer.ggml.add_eos_token")) add_eos_ = *v;
    if (bos && static_cast<std::size_t>(*bos) >= n) bos.reset();
    if (eos && static_cast<std::size_t>(*eos) >= n) eos.reset();
    bos_ = bos;
    eos_ = eos;
    if (add_bos_ && !bos_)
      fail("tokenizer.ggml.add_bos_token", "a BOS is to be added but there is no BOS token");
    if (add_eos_ && !eos_)
      fail("tokenizer.ggml.add_eos_token", "an EOS is to be added but there is no EOS token");

    // Tokens llama.cpp makes control tokens by their text (end of turn, end of
    // generation, fill-in-the-middle), unless a key names the id.
    std::optional<std::int32_t> ignored;
    auto force_control = [&](std::initializer_list<const char*> names) {
      for (const char* name : names)
        if (auto it = to_id_.find(name); it != to_id_.end())
          attr_[static_cast<std::size_t>(it->second)] = kControl;
    };
    if (!id_key("tokenizer.ggml.eot_token_id", ignored)) force_control({"<｜end▁of▁sentence｜>"});
    if (!id_key("tokenizer.ggml.fim_pre_token_id", ignored) &&
        !id_key("tokenizer.ggml.prefix_token_id", ignored))
      force_control({"<|fim_prefix|>", "<fim-prefix>", "<｜fim▁begin｜>", "<PRE>"});
    if (!id_key("tokenizer.ggml.fim_suf_token_id", ignored) &&
        !id_key("tokenizer.ggml.suffix_token_id", ignored))
      force_control({"<|fim_suffix|>", "<fim-suffix>", "<｜fim▁hole｜>", "<SUF>"});
    if (!id_key("tokenizer.ggml.fim_mid_token_id", ignored) &&
        !id_key("tokenizer.ggml.middle_token_id", ignored))
      force_control({"<|fim_middle|>", "<fim-middle>", "<｜fim▁end｜>", "<MID>"});
    if (!id_key("tokenizer.ggml.fim_pad_token_id", ignored))
      force_control({"<|fim_pad|>", "<fim-pad>", "<PAD>"});
    if (!id_key("tokenizer.ggml.fim_rep_token_id", ignored))
      force_control({"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"});
    if (!id_key("tokenizer.ggml.fim_sep_token_id", ignored)) force_control({"<|file_sep|>"});
    force_control(
        {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>"});

    for (std::size_t i = 0; i < n; ++i)
      if (is_partitioned(attr_[i] & 0xff)) specials_.push_back(static_cast<std::int32_t>(i));
    std::stable_sort(specials_.begin(), specials_.end(), [&](std::int32_t a, std::int32_t b) {
      return text_[static_cast<std::size_t>(a)].size() > text_[static_cast<std::size_t>(b)].size();
    });

    // Strip attributes llama.cpp sets by model name.
    const std::string pre_raw = m.string("tokenizer.ggml.pre").value_or("");
    std::string name = m.string("general.name").value_or("");
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    auto set_attr = [&](const char* token, unsigned attr, bool on) {
      if (auto it = to_id_.find(token); it != to_id_.end()) {
        auto& a = attr_[static_cast<std::size_t>(it->second)];
        a = on ? (a | attr) : (a & ~attr);
      }
    };
    if (pre_raw.find("jina-v2-de") != std::string::npos || pre_raw.find("jina-v2-es") != std::string::npos ||
        pre_raw.find("jina-v2-code") != std::string::npos) {
      set_attr("<mask>", kAttrLstrip, true);
    } else if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
      for (auto id : specials_) attr_[static_cast<std::size_t>(id)] |= kAttrRstrip;
      set_attr("</s>", kAttrRstrip, true);
      for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(t, kAttrRstrip, false);
    }

    if (add_bos_) prefix_.push_back(*bos_);
    if (add_eos_) suffix_.push_back(*eos_);
    if (spm_) {
      for (int b = 0; b < 256; ++b) {
        const auto hex = fmt::format("<0x{:02X}>", b);
        auto it = to_id_.find(hex);
        if (it == to_id_.end()) it = to_id_.find(std::string(1, static_cast<char>(b)));
        byte_token_[static_cast<std::size_t>(b)] = it == to_id_.end() ? -1 : it->second;
      }
    }
    if (const auto t = m.string("tokenizer.chat_template")) chat_template_ = *t;
  }

  std::vector<std::int32_t> encode(std::string_view text, bool add_special) const override {
    std::string repaired;
    if (!unicode::is_valid_utf8(text)) {
      repaired = unicode::repair_utf8(text);
      text = repaired;
    }
    std::vector<std::int32_t> out;
    const auto fragments = partition(text);
    if (add_special && add_bos_) out.push_back(*bos_);
    bool prev_special = true;  // SPM: a space in front of the first text, and of text after a special token
    for (const auto& f : fragments) {
      if (f.token >= 0) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      const auto piece = text.substr(f.offset, f.length);
      if (spm_) {
        std::string s;
        s.reserve(piece.size() + 3);
        if (add_space_prefix_ && prev_special) s = "\xe2\x96\x81";
        for (char c : piece) {
          if (c == ' ')
            s += "\xe2\x96\x81";
          else
            s += c;
        }
        spm_tokenize(s, out);
      } else {
        bpe_tokenize(piece, out);
      }
      prev_special = false;
    }
    if (add_special && add_eos_) out.push_back(*eos_);
    return out;
  }

  std::string decode(std::span<const std::int32_t> ids, bool skip_special) const override {
    std::string out;
    const auto& table = hf::byte_table();
    for (const auto id : ids) {
      if (id < 0 || static_cast<std::size_t>(id) >= text_.size()) continue;
      const auto attr = attr_[static_cast<std::size_t>(id)] & 0xff;
      const std::string& t = text_[static_cast<std::size_t>(id)];
      if (attr == kControl || attr == kUnknown) {
        if (!skip_special) out += t;
        continue;
      }
      if (attr == kUserDefined) {
        out += t;
      } else if (spm_) {
        if (attr == kByte && t.size() == 6 && t.starts_with("<0x")) {
          auto hex = [](char c) {
            return c >= '0' && c <= '9'   ? c - '0'
                   : c >= 'A' && c <= 'F' ? c - 'A' + 10
                   : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                          : -1;
          };
          const int hi = hex(t[3]), lo = hex(t[4]);
          if (hi >= 0 && lo >= 0 && t[5] == '>') {
            out += static_cast<char>(hi * 16 + lo);
            continue;
          }
        }
        for (std::size_t i = 0; i < t.size();) {
          if (t.compare(i, 3, "\xe2\x96\x81") == 0) {
            out += ' ';
            i += 3;
          } else {
            out += t[i++];
          }
        }
      } else {
        for (std::size_t i = 0; i < t.size();) {
          std::size_t len = 1;
          const char32_t cp = unicode::decode_at(t, i, &len);
          const auto it = table.byte_of_char.find(cp);
          if (it != table.byte_of_char.end())
            out += static_cast<char>(it->second);
          else
            out.append(t, i, len);
          i += len;
        }
      }
    }
    // llama.cpp's detokenize drops the space the SPM tokenizer put in front.
    if (spm_ && add_space_prefix_ && !out.empty() && out.front() == ' ') out.erase(0, 1);
    return out;
  }

  std::span<const std::int32_t> special_prefix() const override { return prefix_; }
  std::span<const std::int32_t> special_suffix() const override { return suffix_; }
  std::optional<std::int32_t> bos_id() const override { return bos_; }
  std::optional<std::int32_t> eos_id() const override { return eos_; }
  std::size_t vocab_size() const override { return text_.size(); }
  std::optional<std::string> token_to_piece(std::int32_t id) const override {
    if (id < 0 || static_cast<std::size_t>(id) >= text_.size()) return std::nullopt;
    return text_[static_cast<std::size_t>(id)];
  }
  std::optional<std::int32_t> piece_to_id(std::string_view piece) const override {
    const auto it = to_id_.find(std::string(piece));
    if (it == to_id_.end()) return std::nullopt;
    return it->second;
  }
  bool is_special(std::int32_t id) const override {
    if (id < 0 || static_cast<std::size_t>(id) >= text_.size()) return false;
    const auto a = attr_[static_cast<std::size_t>(id)] & 0xff;
    return a == kControl || a == kUserDefined || a == kUnknown;
  }
  TokenizerDescription description() const override {
    TokenizerDescription d;
    d.kind = "gguf";
    d.file = file_;
    d.model =
        spm_ ? "sentencepiece (GGUF \"llama\")" : fmt::format("BPE (GGUF \"gpt2\", pre \"{}\")", pre_name_);
    d.pipeline = fmt::format("{}; {} special tokens parsed in text{}", pipeline_, specials_.size(),
                             spm_ && add_space_prefix_ ? "; a space in front of the text" : "");
    d.vocab_size = vocab_size();
    d.bos_id = bos_;
    d.eos_id = eos_;
    d.special_prefix = prefix_;
    d.special_suffix = suffix_;
    return d;
  }

 private:
  static bool is_partitioned(unsigned type) {
    return type == kControl || type == kUserDefined || type == kUnknown;
  }

  static std::string pair_key(std::string_view a, std::string_view b) {
    std::string k = std::to_string(a.size());
    k += ':';
    k += a;
    k += b;
    return k;
  }

  std::int32_t lookup(std::string_view s) const {
    const auto it = to_id_.find(std::string(s));
    return it == to_id_.end() ? -1 : it->second;
  }

  // llama.cpp's tokenizer_st_partition: each special token, longest first,
  // cut out of every raw fragment, left to right.
  std::vector<Fragment> partition(std::string_view text) const {
    std::vector<Fragment> frags;
    if (text.empty()) return frags;
    frags.push_back({0, text.size(), -1});
    for (const auto id : specials_) {
      const std::string& tok = text_[static_cast<std::size_t>(id)];
      const unsigned attr = attr_[static_cast<std::size_t>(id)];
      std::vector<Fragment> next;
      next.reserve(frags.size());
      bool changed = false;
      for (const auto& f : frags) {
        if (f.token >= 0) {
          next.push_back(f);
          continue;
        }
        std::size_t base = f.offset, len = f.length;
        while (true) {
          const auto match = text.substr(0, base + len).find(tok, base);
          if (match == std::string_view::npos) break;
          changed = true;
          std::size_t left_len = match - base;
          if (attr & kAttrLstrip)
            while (left_len > 0 && std::isspace(static_cast<unsigned char>(text[base + left_len - 1])))
              --left_len;
          if (left_len > 0) next.push_back({base, left_len, -1});
          next.push_back({0, 0, id});
          std::size_t right = match + tok.size();
          std::size_t right_len = base + len - right;
          if (attr & kAttrRstrip)
            while (right_len > 0 && std::isspace(static_cast<unsigned char>(text[right])))
              ++right, --right_len;
          base = right;
          len = right_len;
          if (len == 0) break;
        }
        if (len > 0) next.push_back({base, len, -1});
      }
      if (changed) frags.swap(next);
    }
    return frags;
  }

  // llm_tokenizer_spm_session.
  void spm_tokenize(const std::string& text, std::vector<std::int32_t>& out) const {
    struct Bigram {
      int left, right;
      float score;
      std::size_t size;
    };
    auto less = [](const Bigram& l, const Bigram& r) {
      return l.score < r.score || (l.score == r.score && l.left > r.left);
    };
    std::vector<Symbol> sym = utf8_symbols(text);
    if (sym.empty()) return;
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(less)> queue(less);
    std::map<std::string, std::pair<int, int>> rev_merge;
    auto try_add = [&](int left, int right) {
      if (left == -1 || right == -1) return;
      const std::string_view s(
          text.data() + sym[static_cast<std::size_t>(left)].start,
          sym[static_cast<std::size_t>(left)].n + sym[static_cast<std::size_t>(right)].n);
      const auto id = lookup(s);
      if (id < 0) return;
      queue.push({left, right, score_[static_cast<std::size_t>(id)], s.size()});
      rev_merge[std::string(s)] = {left, right};
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      auto& l = sym[static_cast<std::size_t>(b.left)];
      auto& r = sym[static_cast<std::size_t>(b.right)];
      if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) sym[static_cast<std::size_t>(r.next)].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    for (int i = 0; i != -1; i = sym[static_cast<std::size_t>(i)].next)
      spm_resegment(text, sym, sym[static_cast<std::size_t>(i)], rev_merge, out, 0);
  }

  void spm_resegment(const std::string& text, const std::vector<Symbol>& sym, const Symbol& s,
                     const std::map<std::string, std::pair<int, int>>& rev_merge,
                     std::vector<std::int32_t>& out, int depth) const {
    const std::string_view piece(text.data() + s.start, s.n);
    if (const auto id = lookup(piece); id >= 0) {
      out.push_back(id);
      return;
    }
    const auto p = depth < 64 ? rev_merge.find(std::string(piece)) : rev_merge.end();
    if (p == rev_merge.end()) {
      for (const char c : piece) {
        const auto id = byte_token_[static_cast<unsigned char>(c)];
        if (id < 0)
          throw UsageError(
              fmt::format("{}: the vocabulary has no token for byte 0x{:02X} (neither <0x{:02X}> "
                          "nor the byte itself); llama.cpp stops on this text too",
                          file_, static_cast<unsigned char>(c), static_cast<unsigned char>(c)));
        out.push_back(id);
      }
      return;
    }
    spm_resegment(text, sym, sym[static_cast<std::size_t>(p->second.first)], rev_merge, out, depth + 1);
    spm_resegment(text, sym, sym[static_cast<std::size_t>(p->second.second)], rev_merge, out, depth + 1);
  }

  // unicode_regex_split: each expression splits the pieces the previous ones
  // left, keeping the text between matches as pieces too.
  std::vector<std::string_view> split_words(std::string_view text) const {
    std::vector<std::string_view> pieces{text};
    for (const auto& re : regexes_) {
      std::vector<std::string_view> next;
      for (const auto piece : pieces) {
        std::size_t at = 0;
        for (const auto& m : re.find_all(piece)) {
          if (m.end == m.start) continue;
          if (m.start > at) next.push_back(piece.substr(at, m.start - at));
          next.push_back(piece.substr(m.start, m.end - m.start));
          at = m.end;
        }
        if (at < piece.size()) next.push_back(piece.substr(at));
      }
      pieces.swap(next);
    }
    return pieces;
  }

  // llm_tokenizer_bpe_session.
  void bpe_tokenize(std::string_view text, std::vector<std::int32_t>& out) const {
    const auto& table = hf::byte_table();
    std::string word;
    for (const auto raw : split_words(text)) {
      word.clear();
      for (const char c : raw) word += table.char_of_byte[static_cast<unsigned char>(c)];
      if (ignore_merges_) {
        if (const auto id = lookup(word); id >= 0) {
          out.push_back(id);
          continue;
        }
      }
      bpe_word(word, out);
    }
  }

  void bpe_word(const std::string& word, std::vector<std::int32_t>& out) const {
    struct Bigram {
      int left, right, rank;
      std::string text;
    };
    auto less = [](const Bigram& l, const Bigram& r) {
      return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
    };
    std::vector<Symbol> sym = utf8_symbols(word);
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(less)> queue(less);
    auto view = [&](const Symbol& s) { return std::string_view(word).substr(s.start, s.n); };
    auto try_add = [&](int left, int right) {
      if (left == -1 || right == -1) return;
      const auto a = view(sym[static_cast<std::size_t>(left)]);
      const auto b = view(sym[static_cast<std::size_t>(right)]);
      const auto it = ranks_.find(pair_key(a, b));
      if (it == ranks_.end()) return;
      std::string t(a);
      t += b;
      queue.push({left, right, it->second, std::move(t)});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      auto& l = sym[static_cast<std::size_t>(b.left)];
      auto& r = sym[static_cast<std::size_t>(b.right)];
      if (l.n == 0 || r.n == 0) continue;
      if (l.n + r.n != b.text.size() || word.compare(l.start, b.text.size(), b.text) != 0) continue;
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) sym[static_cast<std::size_t>(r.next)].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    for (const auto& s : sym) {
      if (s.n == 0) continue;
      const auto piece = view(s);
      if (const auto id = lookup(piece); id >= 0) {
        out.push_back(id);
        continue;
      }
      // As llama.cpp: each byte of the piece that is a token on its own.
      for (const char c : piece)
        if (const auto id = lookup(std::string_view(&c, 1)); id >= 0) out.push_back(id);
    }
  }

  std::string file_, model_, pre_name_, pipeline_, chat_template_;
  bool spm_ = true;
  bool add_space_prefix_ = false, add_bos_ = false, add_eos_ = false, ignore_merges_ = false;
  std::vector<std::string> text_;
  std::vector<float> score_;
  std::vector<unsigned> attr_;  // token type in the low byte, strip attributes above
  std::unordered_map<std::string, std::int32_t> to_id_;
  std::unordered_map<std::string, int> ranks_;
  std::vector<Regex> regexes_;
  std::vector<std::int32_t> specials_;
  std::array<std::int32_t, 256> byte_token_{};
  std::optional<std::int32_t> bos_, eos_;
  std::vector<std::int32_t> prefix_, suffix_;
};

}  // namespace

std::unique_ptr<TextTokenizer> parse_gguf_tokenizer(std::string_view bytes, const std::string& file) {
  return std::make_unique<GgufTokenizer>(gguf::parse_metadata(bytes, file, keep_tokenizer_key), file);
}

std::unique_ptr<TextTokenizer> load_gguf_tokenizer(const std::string& file) {
  return std::make_unique<GgufTokenizer>(gguf::read_metadata(file, keep_tokenizer_key), file);
}

}  // namespace tokenscope::tokenizers
