// tokenscope's deterministic, prefix-stable tokenizer (docs/tokenizer.md).
//
// Text is cut greedily, left to right, into pieces:
//   1. a space followed by a letter: the space and up to 4 ASCII letters;
//   2. a run of up to 4 ASCII letters;
//   3. a single digit;
//   4. one UTF-8 sequence (any other character, a lone space, punctuation,
//      newline): the lead byte and the continuation bytes that follow it, up
//      to the announced length; a stray continuation byte stands alone.
// Each decision looks at most one character ahead, so the tokens of a prefix
// of a text are a prefix of the text's tokens, except that the last token of
// the prefix may be cut short where the prefix ends inside a piece. Prompts
// that share leading text therefore share leading tokens and KV blocks, as
// with a real BPE tokenizer. English text gives about 1.5 tokens per word.
//
// Ids: lowercase pieces (with or without the leading space) are numbered in
// base 26 and can be turned back into text (piece_text); every other piece
// gets a hashed id above kInvertibleIds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/random.h"

namespace tokenscope::tokenizers {

using TokenId = std::uint32_t;

// Lowercase pieces of 1..4 letters: 26 + 26^2 + 26^3 + 26^4.
inline constexpr TokenId kLetterPieces = 475254;
// Ids [0, kLetterPieces): letters only; [kLetterPieces, kInvertibleIds): " " + letters.
inline constexpr TokenId kInvertibleIds = 2 * kLetterPieces;
inline constexpr TokenId kHashedIds = 1u << 20;
inline constexpr TokenId kVocabSize = kInvertibleIds + kHashedIds;

// Appends the tokens of text to out; piece_ends (when given) gets each
// token's end offset in text.
void tokenize(std::string_view text, std::vector<TokenId>& out,
              std::vector<std::uint32_t>* piece_ends = nullptr);
std::vector<TokenId> tokenize(std::string_view text);
std::size_t count_tokens(std::string_view text);

// The text of a token, for ids below kInvertibleIds; nullopt for hashed ids.
std::optional<std::string> piece_text(TokenId id);
// The same appended to out (no string made per token: the prompt builder's
// and the server's hot loops); false, and nothing appended, when the id
// has no text.
bool append_piece_text(TokenId id, std::string& out);
// The id of " " + word for a lowercase word of 1..4 letters.
TokenId spaced_word_id(std::string_view lowercase_word);
// A token whose text is " " + one of the prompt words (prompt_words.h),
// chosen by a 64-bit key: concatenations of such tokens re-tokenize to
// exactly the same ids, here and, one token per word, on real servers.
TokenId spaced_token_from_key(std::uint64_t key);

}  // namespace tokenscope::tokenizers
