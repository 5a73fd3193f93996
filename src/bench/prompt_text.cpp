#include "bench/prompt_text.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/random.h"
#include "tokenizers/prompt_words.h"

namespace tokenscope::bench {

std::string prompt_text(const workload::Workload& w, const workload::Request& r) {
  if (r.source == workload::PromptSource::kText) return w.prompts[r.source_begin];
  std::vector<tokenizers::TokenId> tokens;
  workload::append_prompt_tokens(w, r, tokens);
  std::string text;
  text.reserve(tokens.size() * 5);
  for (const auto t : tokens) {
    if (auto piece = tokenizers::piece_text(t)) text += *piece;
  }
  return text;
}

PromptBuilder::PromptBuilder(const workload::Workload& w, const tokenizers::TextTokenizer* tokenizer,
                             bool specials_counted)
    : w_(w), tokenizer_(tokenizer) {
  if (!tokenizer_) return;
  specials_ = specials_counted ? tokenizer_->num_special_added() : 0;
  const auto words = tokenizers::prompt_words();
  std::vector<std::string> candidates(words.begin(), words.end());
  const auto single = tokenizers::single_token_words(*tokenizer_, candidates);
  if (single.size() < 64)
    throw UsageError(
        fmt::format("--tokenizer {}: only {} of the {} prompt words are one token in it; "
                    "prompts of exact length cannot be built",
                    tokenizer_->description().file, single.size(), words.size()));
  std::vector<bool> ok(words.size(), false);
  {
    std::size_t j = 0;
    for (std::size_t i = 0; i < words.size() && j < single.size(); ++i)
      if (words[i] == single[j].word) ok[i] = true, ++j;
  }
  word_for_.resize(words.size());
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (ok[i]) {
      word_for_[i] = std::string(words[i]);
      ++kept_;
    } else {  // a fixed stand-in: the same word wherever this one stands
      word_for_[i] = single[mix64(i) % single.size()].word;
      ++replaced_;
    }
  }
  // Trace texts are sent as written; their planned length is their count.
  text_tokens_.assign(w.prompts.size(), -1);
  for (const auto& r : w.requests)
    if (r.source == workload::PromptSource::kText && text_tokens_[r.source_begin] < 0)
      text_tokens_[r.source_begin] =
          static_cast<std::int64_t>(tokenizer_->count(w.prompts[r.source_begin], specials_ > 0));
}

std::string PromptBuilder::text(const workload::Request& r) const {
  if (!tokenizer_) return prompt_text(w_, r);
  if (r.source == workload::PromptSource::kText) return w_.prompts[r.source_begin];
  std::vector<tokenizers::TokenId> tokens;
  workload::append_prompt_tokens(w_, r, tokens);
  // One word per token, less one per special token the server counts (the
  // last ones go, so that shared prefixes stay shared); at least one word.
  const std::size_t n = std::max<std::size_t>(1, tokens.size() > specials_ ? tokens.size() - specials_ : 1);
  const auto words = tokenizers::prompt_words();
  std::string text;
  text.reserve(n * 5);
  for (std::size_t k = 0; k < n; ++k) {
    // The token is a prompt word, spaced or not: find its index by its letters.
    const auto piece = tokenizers::piece_text(tokens[k]);
    std::string_view letters = piece ? std::string_view(*piece) : std::string_view("the");
    if (!letters.empty() && letters.front() == ' ') letters.remove_prefix(1);
    const auto it = std::lower_bound(words.begin(), words.end(), letters);
    const std::size_t index =
        it != words.end() && *it == letters ? static_cast<std::size_t>(it - words.begin()) : 0;
    if (k) text += ' ';
    text += word_for_[index];
  }
  return text;
}

std::int64_t PromptBuilder::planned_tokens(const workload::Request& r) const {
  if (!tokenizer_) return r.input_tokens;
  if (r.source == workload::PromptSource::kText) return text_tokens_[r.source_begin];
  return std::max<std::int64_t>(static_cast<std::int64_t>(r.input_tokens),
                                static_cast<std::int64_t>(1 + specials_));
}

std::string PromptBuilder::describe() const {
  if (!tokenizer_)
    return "one prompt word per planned token (one token each in Llama 2, GPT-2, Llama 3 and Qwen3 "
           "vocabularies; the server adds its BOS or chat template); trace texts as written";
  return fmt::format(
      "exact for {} ({} of {} prompt words kept, {} replaced by one-token words){}; trace texts as written, "
      "their length counted with it",
      tokenizer_->description().file, kept_, kept_ + replaced_, replaced_,
      specials_ ? fmt::format(", its {} added token(s) counted", specials_) : "");
}

}  // namespace tokenscope::bench
