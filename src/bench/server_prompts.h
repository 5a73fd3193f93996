// Exact prompts without the served model's tokenizer (docs/bench.md,
// "Prompt lengths"): what the target's /tokenize says of tokenscope's prompt
// words and of the tokens it adds itself, learned in a few round trips before
// the load starts.
//
// Servers answer /tokenize in two dialects, and tokenscope sends both names
// in one body: llama.cpp's llama-server reads "content" and "add_special" and
// gives each token's text with "with_pieces"; vLLM and tokenscope serve read
// "prompt" and "add_special_tokens" (vLLM gives the vocabulary strings with
// "return_token_strs"). What is learned:
//  * which prompt words are one token after a space: from the pieces of one
//    /tokenize of every word, else, when the server gives counts only, by
//    halving the word list where a count is more than its words (a round
//    trip per step, about 2 log2(1504) per word that is not one token; a
//    single word is checked as "w w", both forms);
//  * which of them are one token at the start of a text, where a prompt's
//    first word stands: 64 of them, each counted alone;
//  * the tokens the server adds to a completions prompt (a BOS): the count
//    of one word with and without add_special;
//  * the tokens a chat template adds around one user message: /tokenize with
//    "messages" (vLLM, tokenscope serve), else llama.cpp's /apply-template
//    and a /tokenize of its prompt as llama-server tokenizes a chat request
//    (add_special, special tokens parsed), less the content's own count;
//    measured at two content lengths, which must agree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "net/http_client.h"

namespace tokenscope::bench {

// One /tokenize client for the target (synchronous; before the load).
class TokenizeClient {
 public:
  TokenizeClient(const net::Endpoint& ep, const net::ClientOptions& copt, std::string api_key,
                 std::string model);
  // The server's count of `text`; nullopt when it gave none (its reason in error()).
  std::optional<std::int64_t> count(const std::string& text, bool add_special);
  // The text of each token of `text` (spaces as spaces), when the server gives
  // them (llama.cpp's pieces, vLLM's token strings); nullopt otherwise.
  std::optional<std::vector<std::string>> pieces(const std::string& text);
  // The count of the whole chat prompt of one user message with this content,
  // template included, as the server tokenizes a chat request; nullopt when
  // the server offers neither way. method() then names the way that worked.
  std::optional<std::int64_t> chat_count(const std::string& content);
  const std::string& chat_method() const { return chat_method_; }
  const std::string& error() const { return error_; }
  std::size_t round_trips() const { return round_trips_; }

 private:
  std::optional<nlohmann::json> post(const std::string& path, const nlohmann::json& body);

  net::Endpoint ep_;
  net::ClientOptions copt_;
  std::string api_key_, model_;
  std::string chat_method_;  // "" until one worked: "/tokenize messages" or "/apply-template"
  bool messages_refused_ = false;
  std::string error_;
  std::size_t round_trips_ = 0;
};

// What the target said, for the prompt builder and run.json
// (settings.effective.prompts.server).
struct ServerPromptFacts {
  bool available = false;
  std::string reason;           // why not, when not available
  std::vector<bool> one_token;  // per prompt word (tokenizers/prompt_words.h); empty: not asked
  // Of those, words that are one token at the start of a text too (checked
  // one by one, up to kFirstWords of them): a prompt's first word is one.
  std::vector<std::uint32_t> first_words;
  static constexpr std::size_t kFirstWords = 64;
  std::size_t words_one_token = 0;
  std::string words_method;            // "pieces" or "counts"
  std::int64_t completion_added = -1;  // tokens added to a completions prompt (-1: not asked)
  std::int64_t chat_added = -1;        // tokens the chat template adds around one message (-1: unknown)
  std::string chat_method;
  std::string chat_note;  // why chat_added is unknown
  std::size_t round_trips = 0;
  nlohmann::json to_json() const;
};

// Learns the facts: the words only when learn_words (without --tokenizer),
// the chat template's tokens only when chat.
ServerPromptFacts learn_server_prompts(TokenizeClient& client, bool learn_words, bool chat);

// The words each piece list covers: for every word of `words` joined by single
// spaces, whether one piece is exactly that word with its space (the first
// word: alone, or with the leading space a SentencePiece vocabulary adds).
// nullopt when the pieces do not spell the text.
std::optional<std::vector<bool>> words_from_pieces(const std::vector<std::string>& words,
                                                   const std::vector<std::string>& pieces);

}  // namespace tokenscope::bench
