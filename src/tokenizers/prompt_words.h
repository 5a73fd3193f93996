// The words synthetic prompts are made of: 1,504 lowercase words of 1 to 4
// letters, each exactly one token as the first word of a text and after a
// space in Llama 2's SentencePiece vocabulary, GPT-2's byte-level BPE, Llama
// 3's and Qwen3's tokenizers (scripts/prompt-words.py derives the list; the
// black-box tests check it against llama-server). A prompt of N planned
// tokens is N of them joined by spaces, so real servers count N tokens (plus
// what they add: BOS, a chat template), and tokenscope's own tokenizer reads
// each " word" as one token too.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "tokenizers/builtin.h"

namespace tokenscope::tokenizers {

std::span<const std::string_view> prompt_words();

// The id (builtin.h) of " " + prompt_words()[i].
TokenId prompt_word_id(std::size_t i);

}  // namespace tokenscope::tokenizers
