// Internal to the Hugging Face tokenizer: pre-tokenizers (tokenizer.json's
// "pre_tokenizer"): Sequence, Split, ByteLevel, Metaspace, Digits,
// Whitespace, WhitespaceSplit. Each cuts pieces into smaller pieces, which
// the model tokenizes one by one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizers/hf_fields.h"

namespace tokenscope::tokenizers::hf {

// Pre-tokenizers. A piece remembers whether it starts the text (at offset 0
// of the original), which Metaspace's prepend_scheme "first" needs.

struct Piece {
  std::string text;
  bool at_start;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void apply(std::vector<Piece>& pieces) const = 0;
  virtual std::string describe() const = 0;
  virtual bool byte_level() const { return false; }
};

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& v, const Fields& f, const std::string& where);

}  // namespace tokenscope::tokenizers::hf
