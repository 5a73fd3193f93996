// Internal to the Hugging Face tokenizer: added tokens (tokenizer.json's
// "added_tokens"), found in a text by a byte trie, leftmost-longest;
// lstrip/rstrip swallow neighbouring whitespace, single_word requires word
// boundaries.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizers/hf_fields.h"

namespace tokenscope::tokenizers::hf {

struct AddedToken {
  std::string content;
  std::int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

struct Section {
  std::size_t start;
  std::size_t end;
  std::int32_t id;  // -1: text to tokenize
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() { nodes_.emplace_back(); }

  void add(std::string_view pattern, const AddedToken* token) {
    if (pattern.empty()) return;
    std::int32_t node = 0;
    for (char c : pattern) {
      const auto byte = static_cast<unsigned char>(c);
      std::int32_t child = -1;
      for (const auto& [b, n] : nodes_[node].children)
        if (b == byte) child = n;
      if (child < 0) {
        child = static_cast<std::int32_t>(nodes_.size());
        nodes_[node].children.emplace_back(byte, child);
        nodes_.emplace_back();
      }
      node = child;
    }
    nodes_[node].token = token;
    root_[static_cast<unsigned char>(pattern[0])] = true;
    empty_ = false;
  }

  // The text cut into sections: added tokens and the text between them.
  std::vector<Section> split(std::string_view text) const {
    std::vector<Section> out;
    if (empty_) {
      if (!text.empty()) out.push_back({0, text.size(), -1});
      return out;
    }
    std::size_t done = 0;  // end of the last section emitted
    std::size_t i = 0;
    while (i < text.size()) {
      if (!root_[static_cast<unsigned char>(text[i])]) {
        ++i;
        continue;
      }
      const auto [length, token] = longest_at(text, i);
      if (token == nullptr) {
        ++i;
        continue;
      }
      std::size_t start = i, stop = i + length;
      if (token->single_word) {
        const bool start_ok = start == 0 || !ends_with_word(text.substr(0, start));
        const bool stop_ok = stop == text.size() || !starts_with_word(text.substr(stop));
        if (!start_ok || !stop_ok) {
          i = stop;
          continue;
        }
      }
      if (token->lstrip) start = std::max(whitespace_start(text.substr(0, start)), done);
      if (token->rstrip) stop += whitespace_length(text.substr(stop));
      if (done < start) out.push_back({done, start, -1});
      out.push_back({start, stop, token->id});
      done = stop;
      i = stop;
    }
    if (done < text.size()) out.push_back({done, text.size(), -1});
    return out;
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, std::int32_t>> children;
    const AddedToken* token = nullptr;
  };

  std::pair<std::size_t, const AddedToken*> longest_at(std::string_view text, std::size_t at) const {
    std::size_t best_length = 0;
    const AddedToken* best = nullptr;
    std::int32_t node = 0;
    for (std::size_t k = at; k < text.size(); ++k) {
      const auto byte = static_cast<unsigned char>(text[k]);
      std::int32_t child = -1;
      for (const auto& [b, n] : nodes_[node].children)
        if (b == byte) child = n;
      if (child < 0) break;
      node = child;
      if (nodes_[node].token != nullptr) {
        best = nodes_[node].token;
        best_length = k + 1 - at;
      }
    }
    return {best_length, best};
  }

  static char32_t last_char(std::string_view s) {
    std::size_t start = s.size() - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    std::size_t len = 0;
    return unicode::decode_at(s, start, &len);
  }
  static bool ends_with_word(std::string_view s) { return !s.empty() && unicode::is_word_char(last_char(s)); }
  static bool starts_with_word(std::string_view s) {
    std::size_t len = 0;
    return !s.empty() && unicode::is_word_char(unicode::decode_at(s, 0, &len));
  }
  // Start of the whitespace run that ends s.
  static std::size_t whitespace_start(std::string_view s) {
    std::size_t end = s.size();
    while (end > 0) {
      std::size_t start = end - 1;
      while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      std::size_t len = 0;
      if (!unicode::is_whitespace(unicode::decode_at(s, start, &len))) break;
      end = start;
    }
    return end;
  }
  static std::size_t whitespace_length(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size()) {
      std::size_t len = 0;
      if (!unicode::is_whitespace(unicode::decode_at(s, i, &len))) break;
      i += len;
    }
    return i;
  }

  std::vector<Node> nodes_;
  std::array<bool, 256> root_{};
  bool empty_ = true;
};

}  // namespace tokenscope::tokenizers::hf
