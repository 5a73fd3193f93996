// Generated text: the simulated model writes real English words. Every word
// here has 1-4 lowercase letters, so " word" is exactly one token of the
// tokenizer (tokenizers/builtin.h), and the text of generated tokens re-tokenizes to
// the same ids — a later turn that quotes an earlier answer shares its KV.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "tokenizers/builtin.h"

namespace tokenscope::workload {

// The vocabulary of generated text.
std::span<const std::string_view> generated_words();

// Token `index` of the output stream keyed by `key` (a request's seed):
// " " + a word, chosen deterministically from key and index.
tokenizers::TokenId generated_token(std::uint64_t key, std::uint32_t index);

}  // namespace tokenscope::workload
