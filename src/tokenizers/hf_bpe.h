// Internal to the Hugging Face tokenizer: the BPE model (tokenizer.json's
// "model"). A pre-token becomes characters (or their byte-fallback tokens,
// or unk), merged by rank, lowest rank first and leftmost first among equal
// ranks.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizers/hf_fields.h"

namespace tokenscope::tokenizers::hf {

// (left id, right id) -> (rank, merged id), open addressing. Sized once for
// the number of merges.
class MergeTable {
 public:
  struct Entry {
    std::uint64_t key = kEmpty;
    std::uint32_t rank = 0;
    std::int32_t merged = 0;
  };

  void reserve(std::size_t n) {
    std::size_t capacity = 16;
    bits_ = 4;
    while (capacity < 2 * n) {
      capacity *= 2;
      ++bits_;
    }
    slots_.assign(capacity, Entry{});
  }
  // A later merge of the same pair replaces the earlier one, as in tokenizers.
  void insert(std::int32_t a, std::int32_t b, std::uint32_t rank, std::int32_t merged) {
    Entry* e = slot(key(a, b));
    *e = Entry{key(a, b), rank, merged};
  }
  const Entry* find(std::int32_t a, std::int32_t b) const {
    const Entry* e = const_cast<MergeTable*>(this)->slot(key(a, b));
    return e->key == kEmpty ? nullptr : e;
  }

 private:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  static std::uint64_t key(std::int32_t a, std::int32_t b) {
    return (std::uint64_t{static_cast<std::uint32_t>(a)} << 32) | static_cast<std::uint32_t>(b);
  }
  Entry* slot(std::uint64_t k) {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = static_cast<std::size_t>((k * 0x9E3779B97F4A7C15ull) >> (64 - bits_));
    while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask;
    return &slots_[i];
  }

  std::vector<Entry> slots_;
  int bits_ = 0;
};

// State reused across the pre-tokens of one encode call.
struct BpeScratch {
  Ids symbols;
  std::vector<std::int32_t> prev, next;
  std::vector<std::uint64_t> heap;
  StringMap<std::pair<std::uint32_t, std::uint32_t>> cache;  // pre-token -> range in cached
  Ids cached;
};

class BpeModel {
 public:
  BpeModel(const json& model, const Fields& f, const std::string& where);

  // Appends the ids of one pre-token.
  void tokenize(std::string_view word, Ids& out, BpeScratch& s) const;

  const StringMap<std::int32_t>& vocab() const { return vocab_; }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  std::optional<std::int32_t> lookup(std::string_view s) const {
    const auto it = vocab_.find(s);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  void build_symbols(std::string_view word, Ids& symbols) const;
  void merge(BpeScratch& s) const;

  std::string file_;
  StringMap<std::int32_t> vocab_;
  std::vector<std::int32_t> bmp_ids_;  // single-character tokens below U+10000, -1 where none
  MergeTable merges_;
  std::optional<std::string> unk_token_;
  std::string prefix_, suffix_;  // continuing_subword_prefix, end_of_word_suffix
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<std::int32_t, 256> byte_ids_{};  // "<0xAB>" tokens, -1 where none
};

}  // namespace tokenscope::tokenizers::hf
