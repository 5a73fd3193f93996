// Internal to the Hugging Face tokenizer: decoders (tokenizer.json's
// "decoder"): Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse,
// Strip. Each rewrites the list of token strings (tokenizers' decode_chain).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizers/hf_fields.h"

namespace tokenscope::tokenizers::hf {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void apply(std::vector<std::string>& tokens) const = 0;
  virtual std::string describe() const = 0;
};

std::unique_ptr<Decoder> parse_decoder(const json& v, const Fields& f, const std::string& where);

}  // namespace tokenscope::tokenizers::hf
