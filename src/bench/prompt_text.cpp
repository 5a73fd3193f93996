#include "bench/prompt_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>

#include "core/error.h"
#include "core/random.h"
#include "tokenizers/prompt_words.h"

namespace tokenscope::bench {

static_assert(std::endian::native == std::endian::little, "spaced_for_ holds its characters little-endian");

std::string prompt_text(const workload::Workload& w, const workload::Request& r) {
  if (r.source == workload::PromptSource::kText) return w.prompts[r.source_begin];
  // The words of the prompt's tokens, written from their keys (the tokens
  // are not made), then the first word's space taken off, as
  // append_prompt_tokens takes it off the first token.
  std::string text;
  workload::for_each_token_run(w, r, [&](std::uint64_t key, std::uint32_t from, std::uint32_t to) {
    tokenizers::append_spaced_words_from_keys(key, workload::kTokenKeyStep, from, to, text);
  });
  if (!text.empty()) text.erase(0, 1);
  return text;
}

PromptBuilder::PromptBuilder(const workload::Workload& w, const tokenizers::TextTokenizer* tokenizer,
                             bool specials_counted, const ServerPromptFacts* server)
    : w_(w), tokenizer_(tokenizer) {
  const bool from_server = !tokenizer_ && server && server->available && !server->one_token.empty();
  // The chat template's tokens, when the server said them (chat only).
  const bool chat_added = !specials_counted && server && server->available && server->chat_added >= 0;
  if (!tokenizer_ && !from_server) return;
  exact_ = true;
  const auto words = tokenizers::prompt_words();
  std::vector<bool> ok(words.size(), false);
  std::vector<std::string> single;  // the one-token words, in order
  if (tokenizer_) {
    specials_ = specials_counted ? tokenizer_->num_special_added() : 0;
    std::vector<std::string> candidates(words.begin(), words.end());
    for (auto& s : tokenizers::single_token_words(*tokenizer_, candidates))
      single.push_back(std::move(s.word));
    std::size_t j = 0;
    for (std::size_t i = 0; i < words.size() && j < single.size(); ++i)
      if (words[i] == single[j]) ok[i] = true, ++j;
  } else {
    server_method_ = server->words_method;
    specials_ = specials_counted ? static_cast<std::size_t>(server->completion_added) : 0;
    for (std::size_t i = 0; i < words.size() && i < server->one_token.size(); ++i)
      if (server->one_token[i]) ok[i] = true, single.emplace_back(words[i]);
  }
  if (chat_added) {
    specials_ = static_cast<std::size_t>(server->chat_added);
    chat_from_server_ = true;
  }
  if (single.size() < 64)
    throw UsageError(
        tokenizer_ ? fmt::format("--tokenizer {}: only {} of the {} prompt words are one token in it; "
                                 "prompts of exact length cannot be built",
                                 tokenizer_->description().file, single.size(), words.size())
                   : fmt::format("the target's /tokenize: only {} of the {} prompt words are one token "
                                 "there; prompts of exact length cannot be built (--exact-prompts off sends "
                                 "them as they are)",
                                 single.size(), words.size()));
  word_for_.resize(words.size());
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (ok[i]) {
      word_for_[i] = std::string(words[i]);
      ++kept_;
    } else {  // a fixed stand-in: the same word wherever this one stands
      word_for_[i] = single[mix64(i) % single.size()];
      ++replaced_;
    }
  }
  // The server checked some words at the start of a text: a first word not
  // among them stands in for itself there by one of them, the same everywhere.
  if (from_server && !server->first_words.empty()) {
    std::vector<bool> at_start(words.size(), false);
    for (const auto i : server->first_words) at_start[i] = true;
    first_word_for_.resize(words.size());
    for (std::size_t i = 0; i < words.size(); ++i) {
      const auto it = std::find(words.begin(), words.end(), word_for_[i]);
      const auto mapped = static_cast<std::size_t>(it - words.begin());
      first_word_for_[i] =
          mapped < words.size() && at_start[mapped]
              ? word_for_[i]
              : std::string(words[server->first_words[mix64(i) % server->first_words.size()]]);
    }
  }
  // text() stores each word as eight bytes in a slot of seven (the first
  // word, copied on its own, in seven too): prompt words have 1 to 4
  // letters (prompt_words.cpp), every stand-in is one of them.
  for (const auto& words_for : {&word_for_, &first_word_for_})
    for (const auto& word : *words_for)
      if (word.empty() || word.size() > 6)
        throw std::logic_error("a prompt word of 0 or more than 6 letters");
  for (const auto& word : word_for_) {
    std::uint64_t v = ' ';
    for (std::size_t k = 0; k < word.size(); ++k)
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(word[k])) << (8 * (k + 1));
    spaced_for_.push_back(v | static_cast<std::uint64_t>(word.size() + 1) << 56);
  }
  // Trace texts are sent as written; their planned length is their count
  // (with a tokenizer; else the workload's).
  if (!tokenizer_) return;
  text_tokens_.assign(w.prompts.size(), -1);
  for (const auto& r : w.requests)
    if (r.source == workload::PromptSource::kText && text_tokens_[r.source_begin] < 0)
      text_tokens_[r.source_begin] =
          static_cast<std::int64_t>(tokenizer_->count(w.prompts[r.source_begin], specials_counted) +
                                    (chat_from_server_ ? specials_ : 0));
}

std::string PromptBuilder::text(const workload::Request& r) const {
  if (!exact_) return prompt_text(w_, r);
  if (r.source == workload::PromptSource::kText) return w_.prompts[r.source_begin];
  // One word per token of the prompt (append_prompt_tokens' tokens, each a
  // prompt word, picked here by its index from its key: no token is made),
  // less one per special token the server counts (the last ones go, so
  // that shared prefixes stay shared); at least one word.
  const std::size_t n = r.input_tokens > specials_ ? r.input_tokens - specials_ : 1;
  // Each word takes seven bytes at most (a space, six letters) and is
  // stored as eight: one more at the end.
  std::string text(7 * n + 1, '\0');
  char* p = text.data();
  std::size_t k = 0;
  auto add = [&](std::size_t index) {
    if (k++ == 0) {  // the first word: no space, and the server's word for a text's start
      const std::string& word = first_word_for_.empty() ? word_for_[index] : first_word_for_[index];
      std::memcpy(p, word.data(), word.size());
      p += word.size();
      return;
    }
    const std::uint64_t v = spaced_for_[index];
    std::memcpy(p, &v, sizeof v);
    p += v >> 56;
  };
  workload::for_each_token_run(w_, r, [&](std::uint64_t key, std::uint32_t from, std::uint32_t to) {
    for (std::uint32_t i = from; i < to && k < n; ++i)
      add(tokenizers::prompt_word_from_key(key + i * workload::kTokenKeyStep));
  });
  if (k == 0) add(0);  // a prompt of no tokens: one word
  text.resize(static_cast<std::size_t>(p - text.data()));
  return text;
}

std::int64_t PromptBuilder::planned_tokens(const workload::Request& r) const {
  if (!exact_) return r.input_tokens;
  if (r.source == workload::PromptSource::kText)
    return tokenizer_ ? text_tokens_[r.source_begin] : static_cast<std::int64_t>(r.input_tokens);
  return std::max<std::int64_t>(static_cast<std::int64_t>(r.input_tokens),
                                static_cast<std::int64_t>(1 + specials_));
}

namespace {
workload::Request input_request(const workload::Workload& w, std::size_t index, std::uint32_t j) {
  const workload::Request& r = w.requests[index];
  if (j == 0) return r;
  if (r.source == workload::PromptSource::kText) return w.requests[(index + j) % w.requests.size()];
  workload::Request v = r;
  v.id = hash_combine64(r.id, 0x706f6f6c00000000ULL + j);  // "pool"
  return v;
}
}  // namespace

std::vector<std::string> PromptBuilder::inputs(std::size_t index, std::uint32_t n) const {
  std::vector<std::string> out;
  out.reserve(n);
  for (std::uint32_t j = 0; j < n; ++j) out.push_back(text(input_request(w_, index, j)));
  return out;
}

std::int64_t PromptBuilder::inputs_planned_tokens(std::size_t index, std::uint32_t n) const {
  std::int64_t total = 0;
  for (std::uint32_t j = 0; j < n; ++j) {
    const std::int64_t t = planned_tokens(input_request(w_, index, j));
    if (t < 0) return -1;
    total += t;
  }
  return total;
}

std::string PromptBuilder::query(std::size_t index, std::uint32_t tokens) const {
  workload::Request q = w_.requests[index];
  q.source = workload::PromptSource::kUnique;
  q.input_tokens = std::max<std::uint32_t>(1, tokens);
  q.id = hash_combine64(q.id, 0x7175657279ULL);  // "query"
  return text(q);
}

std::int64_t PromptBuilder::media_tokens(const workload::Request& r) const {
  if (r.images == 0 && r.audio_ms == 0) return 0;
  if (!media_model_) return -1;
  std::int64_t n = 0;
  if (r.images > 0) {
    if (!media_model_->has_vision()) return -1;
    n += std::int64_t{r.images} * media_model_->image_tokens(r.image_width, r.image_height);
  }
  if (r.audio_ms > 0) {
    if (!media_model_->has_audio()) return -1;
    n += media_model_->audio_tokens(r.audio_ms / 1000.0);
  }
  return n;
}

std::string PromptBuilder::describe() const {
  if (!exact_)
    return "one prompt word per planned token (one token each in Llama 2, GPT-2, Llama 3 and Qwen3 "
           "vocabularies; the server adds its BOS or chat template); trace texts as written";
  const std::string added =
      !specials_ ? std::string()
      : chat_from_server_
          ? fmt::format(", the chat template's {} token(s) counted (the server's /tokenize)", specials_)
          : fmt::format(", {} added token(s) counted", specials_);
  if (!tokenizer_)
    return fmt::format(
        "exact for the target's vocabulary (its /tokenize, by {}: {} of {} prompt words kept, {} replaced by "
        "one-token words){}; trace texts as written, the workload's length",
        server_method_, kept_, kept_ + replaced_, replaced_, added);
  return fmt::format(
      "exact for {} ({} of {} prompt words kept, {} replaced by one-token words){}; trace texts as written, "
      "their length counted with it",
      tokenizer_->description().file, kept_, kept_ + replaced_, replaced_, added);
}

}  // namespace tokenscope::bench
