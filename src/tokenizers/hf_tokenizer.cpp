// Hugging Face tokenizer.json with a BPE model (text_tokenizer.h).
//
// The pipeline follows tokenizers (the Rust library behind transformers'
// fast tokenizers), step by step:
//   1. added tokens that are not `normalized` are cut out of the raw text
//      (leftmost-longest; lstrip/rstrip swallow neighbouring whitespace;
//      single_word requires word boundaries);
//   2. each remaining section is normalized, and `normalized` added tokens
//      are cut out of the result;
//   3. the pre-tokenizer splits each remaining part into pre-tokens;
//   4. the BPE model turns each pre-token into ids: characters (or their
//      byte-fallback tokens, or unk) merged by rank, lowest rank first and
//      leftmost first among equal ranks;
//   5. with add_special, the post-processor's tokens go around the result.
// Supported: normalizers Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD,
// Lowercase, Strip; pre-tokenizers Sequence, Split, ByteLevel, Metaspace,
// Digits, Whitespace, WhitespaceSplit; post-processors TemplateProcessing,
// ByteLevel, RobertaProcessing, BertProcessing, Sequence; decoders
// ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence.
// Anything else is refused at load with the field that names it.
// Each stage has its file: hf_normalizers, hf_pre_tokenizers, hf_bpe (the
// model), hf_decoders, hf_added_tokens; hf_split holds what they share for
// cutting text, hf_fields the checked access to tokenizer.json. The
// post-processor, which only decides the special tokens around a sequence,
// is part of the tokenizer below.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/json_depth.h"
#include "tokenizers/hf_added_tokens.h"
#include "tokenizers/hf_bpe.h"
#include "tokenizers/hf_decoders.h"
#include "tokenizers/hf_fields.h"
#include "tokenizers/hf_normalizers.h"
#include "tokenizers/hf_pre_tokenizers.h"
#include "tokenizers/text_tokenizer.h"

namespace tokenscope::tokenizers::hf {
namespace {

class HfTokenizer final : public TextTokenizer {
 public:
  HfTokenizer(const json& root, const Fields& f, const json* config);

  Ids encode(std::string_view text, bool add_special) const override;
  std::string decode(std::span<const std::int32_t> ids, bool skip_special) const override;
  std::span<const std::int32_t> special_prefix() const override { return prefix_; }
  std::span<const std::int32_t> special_suffix() const override { return suffix_; }
  std::optional<std::int32_t> bos_id() const override { return bos_; }
  std::optional<std::int32_t> eos_id() const override { return eos_; }
  std::size_t vocab_size() const override { return pieces_.size(); }
  std::optional<std::string> token_to_piece(std::int32_t id) const override {
    if (id < 0 || static_cast<std::size_t>(id) >= pieces_.size() || !has_piece_[id]) return std::nullopt;
    return pieces_[id];
  }
  std::optional<std::int32_t> piece_to_id(std::string_view piece) const override {
    if (const auto it = added_by_content_.find(piece); it != added_by_content_.end()) return it->second;
    if (const auto it = model_->vocab().find(piece); it != model_->vocab().end()) return it->second;
    return std::nullopt;
  }
  bool is_special(std::int32_t id) const override {
    return id >= 0 && static_cast<std::size_t>(id) < special_.size() && special_[id];
  }
  TokenizerDescription description() const override { return description_; }

 private:
  void parse_post_processor(const json& v, const Fields& f, const std::string& where);
  std::optional<std::int32_t> config_token(const json* config, const char* key) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;
  StringMap<std::int32_t> added_by_content_;
  AddedTokenMatcher raw_matcher_;         // tokens matched in the text as written
  AddedTokenMatcher normalized_matcher_;  // tokens matched after normalization
  Ids prefix_, suffix_;
  std::optional<std::int32_t> bos_, eos_;
  std::vector<std::string> pieces_;
  std::vector<char> has_piece_;
  std::vector<char> special_;
  TokenizerDescription description_;
};

// Long by nature: one branch per part of tokenizer.json (normalizer,
// pre-tokenizer, model, decoder, added tokens).
HfTokenizer::HfTokenizer(const json& root, const Fields& f, const json* config) {
  if (!root.is_object()) f.fail("", "expected a JSON object (a Hugging Face tokenizer.json)");
  if (Fields::find(root, "model") == nullptr)
    f.fail("model", "missing: not a tokenizer.json (tokenizer_config.json and config.json have no model)");
  model_ = std::make_unique<BpeModel>(root["model"], f, "model");
  if (const json* n = Fields::find(root, "normalizer")) normalizer_ = parse_normalizer(*n, f, "normalizer");
  if (const json* p = Fields::find(root, "pre_tokenizer"))
    pre_tokenizer_ = parse_pre_tokenizer(*p, f, "pre_tokenizer");
  if (const json* d = Fields::find(root, "decoder")) decoder_ = parse_decoder(*d, f, "decoder");
  if (const json* p = Fields::find(root, "post_processor")) parse_post_processor(*p, f, "post_processor");

  if (const json* list = Fields::find(root, "added_tokens")) {
    if (!list->is_array()) f.fail("added_tokens", "expected an array");
    added_.reserve(list->size());
    for (std::size_t i = 0; i < list->size(); ++i) {
      const json& t = (*list)[i];
      const std::string where = Fields::index("added_tokens", i);
      AddedToken a;
      a.id = f.id(f.require(t, "id", where), Fields::join(where, "id"));
      a.content = f.string(t, "content", where);
      if (a.content.empty()) f.fail(Fields::join(where, "content"), "empty");
      a.special = f.boolean(t, "special", where, false);
      a.lstrip = f.boolean(t, "lstrip", where, false);
      a.rstrip = f.boolean(t, "rstrip", where, false);
      a.single_word = f.boolean(t, "single_word", where, false);
      a.normalized = f.boolean(t, "normalized", where, !a.special);
      added_.push_back(std::move(a));
    }
  }
  for (const auto& a : added_) {
    added_by_content_[a.content] = a.id;
    if (!a.normalized) {
      raw_matcher_.add(a.content, &a);
    } else {
      std::string pattern = a.content;
      if (normalizer_) normalizer_->apply(pattern);
      normalized_matcher_.add(pattern, &a);
    }
  }

  // The id -> piece table: the model's vocabulary, then added tokens over it.
  std::int64_t max_id = -1;
  for (const auto& [token, id] : model_->vocab()) max_id = std::max<std::int64_t>(max_id, id);
  for (const auto& a : added_) max_id = std::max<std::int64_t>(max_id, a.id);
  pieces_.resize(static_cast<std::size_t>(max_id + 1));
  has_piece_.assign(pieces_.size(), 0);
  special_.assign(pieces_.size(), 0);
  for (const auto& [token, id] : model_->vocab()) {
    pieces_[id] = token;
    has_piece_[id] = 1;
  }
  for (const auto& a : added_) {
    pieces_[a.id] = a.content;
    has_piece_[a.id] = 1;
    if (a.special) special_[a.id] = 1;
  }
  for (const Ids* ids : {&prefix_, &suffix_})
    for (auto id : *ids)
      if (static_cast<std::size_t>(id) >= pieces_.size() || !has_piece_[id])
        f.fail("post_processor", fmt::format("special token id {} is not in the vocabulary", id));

  // BOS and EOS: tokenizer_config.json names them; otherwise the
  // post-processor's first and last tokens, or a conventional name.
  bos_ = config_token(config, "bos_token");
  eos_ = config_token(config, "eos_token");
  const auto first_known = [&](std::initializer_list<const char*> names) -> std::optional<std::int32_t> {
    for (const char* name : names)
      if (const auto id = piece_to_id(name)) return id;
    return std::nullopt;
  };
  const auto configured = [&](const char* key) { return config != nullptr && config->contains(key); };
  if (!configured("bos_token")) {
    if (!prefix_.empty()) {
      bos_ = prefix_.front();
    } else {
      bos_ = first_known({"<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>"});
    }
  }
  if (!configured("eos_token")) {
    if (!suffix_.empty()) {
      eos_ = suffix_.back();
    } else {
      eos_ = first_known({"<|end_of_text|>", "</s>", "<eos>", "<|endoftext|>"});
    }
  }

  description_.kind = "huggingface";
  description_.file = f.file();
  description_.model = pre_tokenizer_ && pre_tokenizer_->byte_level() ? "BPE (byte-level)"
                       : model_->byte_fallback()                      ? "BPE (byte fallback)"
                                                                      : "BPE";
  std::string post = "none";
  if (const json* p = Fields::find(root, "post_processor")) post = type_of(*p, f, "post_processor");
  description_.pipeline = fmt::format("normalizer={} pre_tokenizer={} post_processor={} decoder={}",
                                      normalizer_ ? normalizer_->describe() : "none",
                                      pre_tokenizer_ ? pre_tokenizer_->describe() : "none", post,
                                      decoder_ ? decoder_->describe() : "none");
  description_.vocab_size = pieces_.size();
  description_.bos_id = bos_;
  description_.eos_id = eos_;
  description_.special_prefix = prefix_;
  description_.special_suffix = suffix_;
}

std::optional<std::int32_t> HfTokenizer::config_token(const json* config, const char* key) const {
  if (config == nullptr) return std::nullopt;
  const json* v = Fields::find(*config, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return piece_to_id(v->get<std::string>());
  if (const json* content = Fields::find(*v, "content"); content != nullptr && content->is_string())
    return piece_to_id(content->get<std::string>());
  return std::nullopt;
}

void HfTokenizer::parse_post_processor(const json& v, const Fields& f, const std::string& where) {
  const std::string type = type_of(v, f, where);
  if (type == "Sequence") {
    const json& list = f.array(v, "processors", where);
    for (std::size_t i = 0; i < list.size(); ++i)
      parse_post_processor(list[i], f, Fields::index(Fields::join(where, "processors"), i));
    return;
  }
  if (type == "ByteLevel") return;  // offsets only
  if (type == "TemplateProcessing") {
    const json& single = f.array(v, "single", where);
    const json& specials = f.require(v, "special_tokens", where);
    bool after_sequence = false;
    for (std::size_t i = 0; i < single.size(); ++i) {
      const std::string item_where = Fields::index(Fields::join(where, "single"), i);
      if (const json* s = Fields::find(single[i], "SpecialToken")) {
        const std::string name = f.string(*s, "id", Fields::join(item_where, "SpecialToken"));
        const std::string special_where = Fields::join(Fields::join(where, "special_tokens"), name);
        const json* entry = Fields::find(specials, name.c_str());
        if (entry == nullptr) f.fail(special_where, "missing");
        const json& ids = f.array(*entry, "ids", special_where);
        for (std::size_t k = 0; k < ids.size(); ++k)
          (after_sequence ? suffix_ : prefix_)
              .push_back(f.id(ids[k], Fields::index(Fields::join(special_where, "ids"), k)));
      } else if (Fields::find(single[i], "Sequence") != nullptr) {
        after_sequence = true;
      } else {
        f.fail(item_where, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
      }
    }
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const auto pair_id = [&](const char* key) {
      const json& p = f.require(v, key, where);
      if (!p.is_array() || p.size() != 2) f.fail(Fields::join(where, key), "expected [token, id]");
      return f.id(p[1], Fields::index(Fields::join(where, key), 1));
    };
    prefix_.push_back(pair_id("cls"));
    suffix_.push_back(pair_id("sep"));
    return;
  }
  f.fail(Fields::join(where, "type"),
         fmt::format("post-processor {} is not supported (supported: TemplateProcessing, ByteLevel, "
                     "RobertaProcessing, BertProcessing, Sequence)",
                     quote_input(type)));
}

Ids HfTokenizer::encode(std::string_view text, bool add_special) const {
  std::string repaired;
  if (!unicode::is_valid_utf8(text)) {
    repaired = unicode::repair_utf8(text);
    text = repaired;
  }
  Ids out;
  if (add_special) out = prefix_;
  BpeScratch scratch;
  std::vector<Piece> pieces;
  for (const auto& section : raw_matcher_.split(text)) {
    if (section.id >= 0) {
      out.push_back(section.id);
      continue;
    }
    std::string normalized(text.substr(section.start, section.end - section.start));
    if (normalizer_) normalizer_->apply(normalized);
    if (normalized.empty()) continue;
    for (const auto& part : normalized_matcher_.split(normalized)) {
      if (part.id >= 0) {
        out.push_back(part.id);
        continue;
      }
      pieces.clear();
      pieces.push_back(
          {normalized.substr(part.start, part.end - part.start), section.start == 0 && part.start == 0});
      if (pre_tokenizer_) pre_tokenizer_->apply(pieces);
      for (const auto& p : pieces) model_->tokenize(p.text, out, scratch);
    }
  }
  if (add_special) out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

std::string HfTokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (auto id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= pieces_.size() || !has_piece_[id]) continue;
    if (skip_special && special_[id]) continue;
    tokens.push_back(pieces_[id]);
  }
  if (!decoder_) return fmt::format("{}", fmt::join(tokens, " "));
  decoder_->apply(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

}  // namespace
}  // namespace tokenscope::tokenizers::hf

namespace tokenscope::tokenizers {

std::unique_ptr<TextTokenizer> parse_hf_tokenizer_json(std::string_view json_text, const std::string& file,
                                                       std::string_view config_json) {
  const hf::Fields f(file);
  hf::json root;
  require_json_depth(json_text, file);
  require_json_depth(config_json, file + " (tokenizer_config.json beside it)");
  try {
    root = hf::json::parse(json_text);
  } catch (const hf::json::exception& e) {
    f.fail("", fmt::format("not valid JSON: {}", e.what()));
  }
  hf::json config;
  bool have_config = false;
  if (!config_json.empty()) {
    try {
      config = hf::json::parse(config_json);
      have_config = config.is_object();
    } catch (const hf::json::exception& e) {
      throw InputError(file + " (tokenizer_config.json beside it)", 0, "",
                       fmt::format("not valid JSON: {}", e.what()));
    }
  }
  return std::make_unique<hf::HfTokenizer>(root, f, have_config ? &config : nullptr);
}

}  // namespace tokenscope::tokenizers
