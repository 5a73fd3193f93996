// Prompt text for HTTP requests built from a workload: what a client sends
// so that the server sees the workload's tokens.
//  * Trace prompts (ShareGPT, native "prompt") are sent as written.
//  * Synthetic and Mooncake prompts are sequences of prompt words
//    (tokenizers/prompt_words.h): one word per planned token, joined by
//    spaces, starting without one. tokenscope serve re-tokenizes them to
//    exactly the workload's tokens (so prefix reuse in the trace — shared
//    hash ids, shared-prefix groups — is prefix reuse on the server), and
//    real tokenizers read each word as one token: Llama 2, GPT-2, Llama 3 and
//    Qwen3 vocabularies count the planned length plus what they add (a BOS).
//  * With the served model's tokenizer (bench --tokenizer), the prompt is
//    exactly the planned length as that tokenizer counts it, the tokens it
//    adds itself (BOS) included for the completions API: words that are not
//    one token there are replaced, the same way everywhere (shared prefixes
//    stay shared), and one word fewer is sent per token the tokenizer adds.
//    Text prompts keep their text; their planned length becomes its real
//    token count.
//  * Without it, against a server with /tokenize (bench/server_prompts.h),
//    the same from what the server said: the prompt words that are not one
//    token there are replaced, and one word fewer is sent per token the
//    server adds (a BOS for completions; the chat template's tokens for
//    chat), so that the server counts the planned length. Text prompts keep
//    their text and the workload's length.
//  * With a tokenizer and the chat API, the chat template's tokens come from
//    the server too when it said them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/server_prompts.h"
#include "engine/catalog.h"
#include "tokenizers/text_tokenizer.h"
#include "workload/workload.h"

namespace tokenscope::bench {

// The text of a request's prompt, without a tokenizer (tokenscope's own).
std::string prompt_text(const workload::Workload& w, const workload::Request& r);

class PromptBuilder {
 public:
  // tokenizer: the served model's, or null. specials_counted: whether the
  // server counts the tokens the tokenizer adds (BOS) in the prompt — true
  // for the completions API, false for chat, whose template adds its own.
  // server: what the target's /tokenize said (null or unavailable: nothing).
  // Throws UsageError when the tokenizer has fewer than 64 one-token words.
  PromptBuilder(const workload::Workload& w, const tokenizers::TextTokenizer* tokenizer,
                bool specials_counted, const ServerPromptFacts* server = nullptr);

  // The prompt of a workload request (thread-safe).
  std::string text(const workload::Request& r) const;
  // Its planned length in tokens: the workload's input_tokens, or with a
  // tokenizer the length the server will count (text prompts: their count).
  std::int64_t planned_tokens(const workload::Request& r) const;
  // Tokens added to a prompt that the server counts and the prompt leaves
  // room for: the tokenizer's (BOS) for completions, the chat template's when
  // the server said them (0 when neither is known).
  std::size_t specials() const { return specials_; }
  // Whether prompts are sized to the served vocabulary (a tokenizer, or the
  // server's /tokenize).
  bool exact() const { return exact_; }
  const tokenizers::TextTokenizer* tokenizer() const { return tokenizer_; }
  // Prompt words kept as they are, and replaced (with a tokenizer).
  std::size_t words_kept() const { return kept_; }
  std::size_t words_replaced() const { return replaced_; }
  // How prompt lengths are obtained, for the summary and run.json.
  std::string describe() const;

  // Pooling (bench --api embeddings | rerank). The n inputs of workload
  // request `index`: its own prompt, then n - 1 more of its length (unique
  // prompts draw fresh tokens, a shared-prefix group's keep the prefix,
  // block-hash prompts are the same blocks), or, for a trace's texts, the
  // texts of the requests after it. Their planned tokens together (-1 when
  // one has no plan). A rerank query of `tokens` tokens, unique to the request.
  std::vector<std::string> inputs(std::size_t index, std::uint32_t n) const;
  std::int64_t inputs_planned_tokens(std::size_t index, std::uint32_t n) const;
  std::string query(std::size_t index, std::uint32_t tokens) const;

  // Images and audio (workload classes' `images`, `audio`): the model that
  // tells their tokens (its encoders, engine/catalog.h), when the target's
  // model is one the catalog knows; null: not known.
  void set_media_model(const engine::ModelSpec* m) { media_model_ = m; }
  // The prompt tokens a request's images and audio add on the server: 0
  // without media, -1 when the model is not known.
  std::int64_t media_tokens(const workload::Request& r) const;

 private:
  const workload::Workload& w_;
  const tokenizers::TextTokenizer* tokenizer_;
  const engine::ModelSpec* media_model_ = nullptr;
  bool exact_ = false;
  std::string server_method_;  // how the server's /tokenize was read ("" without it)
  bool chat_from_server_ = false;
  std::size_t specials_ = 0;
  std::size_t kept_ = 0, replaced_ = 0;
  // Prompt word index -> the word sent for it (one token in the tokenizer).
  std::vector<std::string> word_for_;
  // The same for a prompt's first word, where it must be one token at the
  // start of a text too (from the server; empty: word_for_ serves).
  std::vector<std::string> first_word_for_;
  // " " + word_for_[i] in the low bytes of a word (byte k is character k),
  // its length in the top byte: stored whole, one per prompt word.
  std::vector<std::uint64_t> spaced_for_;
  std::vector<std::int64_t> text_tokens_;  // per workload prompt: its count (with a tokenizer)
};

}  // namespace tokenscope::bench
