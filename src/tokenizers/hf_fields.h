// Internal to the Hugging Face tokenizer (hf_tokenizer.cpp and its stages):
// checked access to tokenizer.json's fields, with errors that name the field
// path, and the small types every stage shares.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "tokenizers/unicode_text.h"

namespace tokenscope::tokenizers::hf {

using json = nlohmann::json;
using Ids = std::vector<std::int32_t>;

// Ids above this are refused: real vocabularies stay far below, and the
// id-to-token table is sized by the largest id.
inline constexpr std::int64_t kMaxId = (1 << 22) - 1;

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class Fields {
 public:
  explicit Fields(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw InputError(file_, 0, field, problem);
  }
  const std::string& file() const { return file_; }

  // The member, or nullptr when absent or null.
  static const json* find(const json& obj, const char* key) {
    if (!obj.is_object()) return nullptr;
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }
  const json& require(const json& obj, const char* key, const std::string& where) const {
    if (!obj.is_object()) fail(where, "expected an object");
    const json* v = find(obj, key);
    if (v == nullptr) fail(join(where, key), "missing");
    return *v;
  }
  std::string string(const json& obj, const char* key, const std::string& where) const {
    const json& v = require(obj, key, where);
    if (!v.is_string()) fail(join(where, key), "expected a string");
    return v.get<std::string>();
  }
  std::optional<std::string> optional_string(const json& obj, const char* key,
                                             const std::string& where) const {
    const json* v = find(obj, key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail(join(where, key), "expected a string or null");
    return v->get<std::string>();
  }
  bool boolean(const json& obj, const char* key, const std::string& where, bool fallback) const {
    const json* v = find(obj, key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail(join(where, key), "expected true or false");
    return v->get<bool>();
  }
  std::int32_t id(const json& v, const std::string& where) const {
    if (!v.is_number_integer()) fail(where, "expected a token id (an integer)");
    const auto n = v.get<std::int64_t>();
    if (n < 0 || n > kMaxId) fail(where, fmt::format("token id {} is outside 0..{}", n, kMaxId));
    return static_cast<std::int32_t>(n);
  }
  const json& array(const json& obj, const char* key, const std::string& where) const {
    const json& v = require(obj, key, where);
    if (!v.is_array()) fail(join(where, key), "expected an array");
    return v;
  }

  static std::string join(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }
  static std::string index(const std::string& where, std::size_t i) {
    return fmt::format("{}[{}]", where, i);
  }

 private:
  std::string file_;
};

// The "type" of a pipeline component. Sequences nest; their depth (the
// number of indexes in the field path) is bounded so that a hostile file
// cannot exhaust the stack.
inline std::string type_of(const json& obj, const Fields& f, const std::string& where) {
  constexpr long kMaxNesting = 32;
  if (std::count(where.begin(), where.end(), '[') > kMaxNesting)
    f.fail(where, fmt::format("components nested deeper than {}", kMaxNesting));
  return f.string(obj, "type", where);
}

// A field holding exactly one character (Metaspace's replacement, Strip's content).
inline std::string single_char(const json& v, const char* key, const Fields& f, const std::string& where) {
  const std::string s = f.string(v, key, where);
  std::size_t len = 0;
  if (s.empty() || !unicode::is_valid_utf8(s) || (unicode::decode_at(s, 0, &len), len != s.size()))
    f.fail(Fields::join(where, key), "expected a single character");
  return s;
}

}  // namespace tokenscope::tokenizers::hf
