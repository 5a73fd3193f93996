// Internal to the Hugging Face tokenizer: normalizers (tokenizer.json's
// "normalizer"): Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase,
// Strip. Each rewrites a section of text before pre-tokenization.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizers/hf_fields.h"

namespace tokenscope::tokenizers::hf {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(std::string& s) const = 0;
  virtual std::string describe() const = 0;
};

std::unique_ptr<Normalizer> parse_normalizer(const json& v, const Fields& f, const std::string& where);

}  // namespace tokenscope::tokenizers::hf
