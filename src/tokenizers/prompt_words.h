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
#include <string>
#include <string_view>

#include "tokenizers/builtin.h"

namespace tokenscope::tokenizers {

std::span<const std::string_view> prompt_words();

// The id (builtin.h) of " " + prompt_words()[i].
TokenId prompt_word_id(std::size_t i);

// The index in prompt_words() of the word spaced_token_from_key(key) is:
// spaced_token_from_key(key) == prompt_word_id(prompt_word_from_key(key)).
std::size_t prompt_word_from_key(std::uint64_t key);

// The text of the tokens spaced_token_from_key(key + i * step), i in
// [from, to), appended to out (" word" each) in one pass: what a loop of
// append_piece_text over them appends, without the tokens.
void append_spaced_words_from_keys(std::uint64_t key, std::uint64_t step, std::uint32_t from,
                                   std::uint32_t to, std::string& out);

}  // namespace tokenscope::tokenizers
