// Internal to the Hugging Face tokenizer: splitting. Spans that cover a
// string, flagged as matches or not; the five ways tokenizers turns them into
// pieces (a split `behavior`); `pattern` fields (a literal or a regex); and
// GPT-2's byte-to-character table, which byte-level pre-tokenizers and
// decoders share.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizers/hf_fields.h"
#include "tokenizers/regex.h"
#include "tokenizers/unicode_text.h"

namespace tokenscope::tokenizers::hf {

struct Span {
  std::size_t start;
  std::size_t end;
  bool match;
};

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const std::string& s, const Fields& f, const std::string& where);
const char* behavior_name(Behavior b);

// Spans covering [0, size) around the given matches (sorted, disjoint).
std::vector<Span> cover(std::size_t size, const std::vector<Regex::Match>& matches, bool invert);

// Each character for which pred holds is a match of its own.
template <typename Pred>
std::vector<Span> cover_chars(std::string_view s, Pred pred) {
  std::vector<Span> spans;
  std::size_t last = 0;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 0;
    const char32_t cp = unicode::decode_at(s, i, &len);
    if (pred(cp)) {
      if (last < i) spans.push_back({last, i, false});
      spans.push_back({i, i + len, true});
      last = i + len;
    }
    i += len;
  }
  if (last < s.size()) spans.push_back({last, s.size(), false});
  return spans;
}

std::vector<Span> apply_behavior(const std::vector<Span>& spans, Behavior behavior);

// A `pattern` field: {"String": "..."} or {"Regex": "..."}.
class Pattern {
 public:
  static Pattern parse(const json& v, const Fields& f, const std::string& where) {
    Pattern p;
    if (const json* s = Fields::find(v, "String")) {
      if (!s->is_string()) f.fail(Fields::join(where, "String"), "expected a string");
      p.literal_ = s->get<std::string>();
    } else if (const json* r = Fields::find(v, "Regex")) {
      if (!r->is_string()) f.fail(Fields::join(where, "Regex"), "expected a string");
      try {
        p.regex_.emplace(r->get<std::string>());
      } catch (const UsageError& e) {
        f.fail(Fields::join(where, "Regex"), e.what());
      }
    } else {
      f.fail(where, "expected {\"String\": ...} or {\"Regex\": ...}");
    }
    return p;
  }
  static Pattern literal(std::string s) {
    Pattern p;
    p.literal_ = std::move(s);
    return p;
  }

  std::vector<Regex::Match> find(std::string_view text) const {
    if (regex_) return regex_->find_all(text);
    std::vector<Regex::Match> matches;
    if (literal_.empty()) return matches;
    for (std::size_t at = text.find(literal_); at != std::string_view::npos;
         at = text.find(literal_, at + literal_.size()))
      matches.push_back({at, at + literal_.size()});
    return matches;
  }

  // Every match replaced by content.
  std::string replace(std::string_view text, std::string_view content) const {
    const auto matches = find(text);
    if (matches.empty()) return std::string(text);
    std::string out;
    std::size_t prev = 0;
    for (const auto& m : matches) {
      out.append(text.substr(prev, m.start - prev));
      out.append(content);
      prev = m.end;
    }
    out.append(text.substr(prev));
    return out;
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
};

// GPT-2's byte-to-character table: printable Latin-1 bytes stand for
// themselves, the other 68 bytes for U+0100 onwards, in byte order.
struct ByteTable {
  std::array<std::string, 256> char_of_byte;
  std::unordered_map<char32_t, unsigned char> byte_of_char;

  ByteTable();
};
const ByteTable& byte_table();

}  // namespace tokenscope::tokenizers::hf
