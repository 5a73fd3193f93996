// SentencePiece models (tokenizer.model) through the sentencepiece library
// (text_tokenizer.h). encode(text, true) puts the model's BOS in front, as
// Llama-style tokenizers built on SentencePiece do; no EOS is added.
#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizers/text_tokenizer.h"
#include "tokenizers/unicode_text.h"

namespace tokenscope::tokenizers {
namespace {

class SpmTokenizer final : public TextTokenizer {
 public:
  SpmTokenizer(std::string_view bytes, const std::string& file) : file_(file) {
    const auto status = processor_.LoadFromSerializedProto(bytes);
    if (!status.ok())
      throw InputError(file, 0, "",
                       fmt::format("not a Hugging Face tokenizer.json (it does not start with '{{') nor a "
                                   "SentencePiece model: {}",
                                   status.ToString()));
    if (processor_.GetPieceSize() <= 0)
      throw InputError(file, 0, "", "SentencePiece model with an empty vocabulary");
    if (processor_.bos_id() >= 0) prefix_.push_back(processor_.bos_id());
  }

  std::vector<std::int32_t> encode(std::string_view text, bool add_special) const override {
    std::string repaired;
    if (!unicode::is_valid_utf8(text)) {
      repaired = unicode::repair_utf8(text);
      text = repaired;
    }
    std::vector<int> ids;
    const auto status = processor_.Encode(text, &ids);
    if (!status.ok())
      throw UsageError(fmt::format("{}: SentencePiece could not encode: {}", file_, status.ToString()));
    std::vector<std::int32_t> out;
    out.reserve(ids.size() + 1);
    if (add_special) out = prefix_;
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  std::string decode(std::span<const std::int32_t> ids, bool skip_special) const override {
    std::vector<int> valid;
    valid.reserve(ids.size());
    for (auto id : ids)
      if (id >= 0 && id < processor_.GetPieceSize() && !(skip_special && is_special(id))) valid.push_back(id);
    std::string text;
    const auto status = processor_.Decode(valid, &text);
    if (!status.ok())
      throw UsageError(fmt::format("{}: SentencePiece could not decode: {}", file_, status.ToString()));
    return text;
  }

  std::span<const std::int32_t> special_prefix() const override { return prefix_; }
  std::span<const std::int32_t> special_suffix() const override { return {}; }
  std::optional<std::int32_t> bos_id() const override { return optional_id(processor_.bos_id()); }
  std::optional<std::int32_t> eos_id() const override { return optional_id(processor_.eos_id()); }
  std::size_t vocab_size() const override { return static_cast<std::size_t>(processor_.GetPieceSize()); }
  std::optional<std::string> token_to_piece(std::int32_t id) const override {
    if (id < 0 || id >= processor_.GetPieceSize()) return std::nullopt;
    return processor_.IdToPiece(id);
  }
  std::optional<std::int32_t> piece_to_id(std::string_view piece) const override {
    const int id = processor_.PieceToId(piece);
    // PieceToId answers unk for unknown pieces.
    if (id < 0 || (processor_.IsUnknown(id) && processor_.IdToPiece(id) != piece)) return std::nullopt;
    return id;
  }
  bool is_special(std::int32_t id) const override {
    return id >= 0 && id < processor_.GetPieceSize() && processor_.IsControl(id);
  }
  TokenizerDescription description() const override {
    TokenizerDescription d;
    d.kind = "sentencepiece";
    d.file = file_;
    d.model = "sentencepiece";
    d.pipeline = "sentencepiece library";
    d.vocab_size = vocab_size();
    d.bos_id = bos_id();
    d.eos_id = eos_id();
    d.special_prefix = prefix_;
    return d;
  }

 private:
  static std::optional<std::int32_t> optional_id(int id) {
    if (id < 0) return std::nullopt;
    return id;
  }

  std::string file_;
  sentencepiece::SentencePieceProcessor processor_;
  std::vector<std::int32_t> prefix_;
};

}  // namespace

std::unique_ptr<TextTokenizer> parse_sentencepiece_model(std::string_view model_bytes,
                                                         const std::string& file) {
  return std::make_unique<SpmTokenizer>(model_bytes, file);
}

}  // namespace tokenscope::tokenizers
