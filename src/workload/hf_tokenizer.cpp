// Hugging Face tokenizer.json with a BPE model (real_tokenizer.h).
//
// The pipeline follows tokenizers (the Rust library behind transformers'
// fast tokenizers), step by step:
//   1. added tokens that are not `normalized` are cut out of the raw text
//      (leftmost-longest; lstrip/rstrip swallow neighbouring whitespace;
//      single_word requires word boundaries);
//   2. each remaining section is normalized, and `normalized` added tokens
//      are cut out of the result;
//   3. the pre-tokenizer splits each remaining part into pre-tokens;
//   4. the BPE model turns each pre-token into ids: characters (or their
//      byte-fallback tokens, or unk) merged by rank, lowest rank first and
//      leftmost first among equal ranks;
//   5. with add_special, the post-processor's tokens go around the result.
// Supported: normalizers Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD,
// Lowercase, Strip; pre-tokenizers Sequence, Split, ByteLevel, Metaspace,
// Digits, Whitespace, WhitespaceSplit; post-processors TemplateProcessing,
// ByteLevel, RobertaProcessing, BertProcessing, Sequence; decoders
// ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence.
// Anything else is refused at load with the field that names it.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "workload/real_tokenizer.h"
#include "workload/tokenizer_regex.h"
#include "workload/unicode_text.h"

namespace tokenscope::workload {
namespace {

using json = nlohmann::json;
using Ids = std::vector<std::int32_t>;

// Ids above this are refused: real vocabularies stay far below, and the
// id-to-token table is sized by the largest id.
constexpr std::int64_t kMaxId = (1 << 22) - 1;
// Pre-tokens up to this size are remembered within one encode call.
constexpr std::size_t kCacheMaxBytes = 64;

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// ---------------------------------------------------------------------------
// JSON access with errors that name the field.

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
std::string type_of(const json& obj, const Fields& f, const std::string& where) {
  constexpr long kMaxNesting = 32;
  if (std::count(where.begin(), where.end(), '[') > kMaxNesting)
    f.fail(where, fmt::format("components nested deeper than {}", kMaxNesting));
  return f.string(obj, "type", where);
}

// ---------------------------------------------------------------------------
// Splitting: spans that cover a string, flagged as matches or not, and the
// five ways tokenizers turns them into pieces.

struct Span {
  std::size_t start;
  std::size_t end;
  bool match;
};

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const std::string& s, const Fields& f, const std::string& where) {
  if (s == "Removed") return Behavior::kRemoved;
  if (s == "Isolated") return Behavior::kIsolated;
  if (s == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::kMergedWithNext;
  if (s == "Contiguous") return Behavior::kContiguous;
  f.fail(where, fmt::format("unknown split behavior {} (expected Removed, Isolated, MergedWithPrevious, "
                            "MergedWithNext or Contiguous)",
                            quote_input(s)));
}

const char* behavior_name(Behavior b) {
  switch (b) {
    case Behavior::kRemoved:
      return "Removed";
    case Behavior::kIsolated:
      return "Isolated";
    case Behavior::kMergedWithPrevious:
      return "MergedWithPrevious";
    case Behavior::kMergedWithNext:
      return "MergedWithNext";
    case Behavior::kContiguous:
      return "Contiguous";
  }
  return "?";
}

// Spans covering [0, size) around the given matches (sorted, disjoint).
std::vector<Span> cover(std::size_t size, const std::vector<Regex::Match>& matches, bool invert) {
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  std::size_t prev = 0;
  for (const auto& m : matches) {
    if (prev < m.start) spans.push_back({prev, m.start, invert});
    spans.push_back({m.start, m.end, !invert});
    prev = m.end;
  }
  if (prev < size) spans.push_back({prev, size, invert});
  return spans;
}

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

std::vector<Span> apply_behavior(const std::vector<Span>& spans, Behavior behavior) {
  std::vector<Span> out;
  out.reserve(spans.size());
  switch (behavior) {
    case Behavior::kRemoved:
      for (const auto& s : spans)
        if (!s.match) out.push_back(s);
      break;
    case Behavior::kIsolated:
      out = spans;
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& s : spans) {
        if (s.match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous_match && !out.empty()) {
          out.back().start = it->start;
        } else {
          out.push_back(*it);
        }
        previous_match = it->match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const auto& s : spans) {
        if (s.match == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.match;
      }
      break;
    }
  }
  std::erase_if(out, [](const Span& s) { return s.start == s.end; });
  return out;
}

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

// ---------------------------------------------------------------------------
// GPT-2's byte-to-character table: printable Latin-1 bytes stand for
// themselves, the other 68 bytes for U+0100 onwards, in byte order.

struct ByteTable {
  std::array<std::string, 256> char_of_byte;
  std::unordered_map<char32_t, unsigned char> byte_of_char;

  ByteTable() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      unicode::append_utf8(char_of_byte[b], cp);
      byte_of_char[cp] = static_cast<unsigned char>(b);
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

// ---------------------------------------------------------------------------
// Normalizers.

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(std::string& s) const = 0;
  virtual std::string describe() const = 0;
};

class NormalizerSequence final : public Normalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void apply(std::string& s) const override {
    for (const auto& n : steps_) n->apply(s);
  }
  std::string describe() const override {
    std::vector<std::string> names;
    for (const auto& n : steps_) names.push_back(n->describe());
    return fmt::format("Sequence[{}]", fmt::join(names, ", "));
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void apply(std::string& s) const override {
    if (!s.empty()) s.insert(0, prefix_);
  }
  std::string describe() const override { return "Prepend"; }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void apply(std::string& s) const override { s = pattern_.replace(s, content_); }
  std::string describe() const override { return "Replace"; }

 private:
  Pattern pattern_;
  std::string content_;
};

class UnicodeNormalizer final : public Normalizer {
 public:
  UnicodeNormalizer(unicode::NormalForm form, std::string name) : form_(form), name_(std::move(name)) {}
  void apply(std::string& s) const override { s = unicode::normalize(s, form_); }
  std::string describe() const override { return name_; }

 private:
  unicode::NormalForm form_;
  std::string name_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void apply(std::string& s) const override { s = unicode::to_lower(s); }
  std::string describe() const override { return "Lowercase"; }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void apply(std::string& s) const override {
    std::size_t begin = 0, end = s.size();
    if (left_) {
      while (begin < end) {
        std::size_t len = 0;
        if (!unicode::is_whitespace(unicode::decode_at(s, begin, &len))) break;
        begin += len;
      }
    }
    if (right_) {
      while (end > begin) {
        std::size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        std::size_t len = 0;
        if (!unicode::is_whitespace(unicode::decode_at(s, start, &len))) break;
        end = start;
      }
    }
    s = s.substr(begin, end - begin);
  }
  std::string describe() const override { return "Strip"; }

 private:
  bool left_, right_;
};

std::unique_ptr<Normalizer> parse_normalizer(const json& v, const Fields& f, const std::string& where) {
  const std::string type = type_of(v, f, where);
  if (type == "Sequence") {
    const json& list = f.array(v, "normalizers", where);
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (std::size_t i = 0; i < list.size(); ++i)
      steps.push_back(parse_normalizer(list[i], f, Fields::index(Fields::join(where, "normalizers"), i)));
    return std::make_unique<NormalizerSequence>(std::move(steps));
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(f.string(v, "prepend", where));
  if (type == "Replace")
    return std::make_unique<ReplaceNormalizer>(
        Pattern::parse(f.require(v, "pattern", where), f, Fields::join(where, "pattern")),
        f.string(v, "content", where));
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNfc, type);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNfd, type);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNfkc, type);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNfkd, type);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(f.boolean(v, "strip_left", where, true),
                                             f.boolean(v, "strip_right", where, true));
  f.fail(Fields::join(where, "type"),
         fmt::format("normalizer {} is not supported (supported: Sequence, Prepend, Replace, NFC, NFD, NFKC, "
                     "NFKD, Lowercase, Strip)",
                     quote_input(type)));
}

// ---------------------------------------------------------------------------
// Pre-tokenizers. A piece remembers whether it starts the text (at offset 0
// of the original), which Metaspace's prepend_scheme "first" needs.

struct Piece {
  std::string text;
  bool at_start;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void apply(std::vector<Piece>& pieces) const = 0;
  virtual std::string describe() const = 0;
  virtual bool byte_level() const { return false; }
};

// Replaces each piece by its parts.
template <typename SpansOf>
void split_pieces(std::vector<Piece>& pieces, Behavior behavior, SpansOf spans_of) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (const auto& p : pieces) {
    for (const auto& s : apply_behavior(spans_of(p.text), behavior))
      out.push_back({p.text.substr(s.start, s.end - s.start), p.at_start && s.start == 0});
  }
  pieces.swap(out);
}

class PreTokenizerSequence final : public PreTokenizer {
 public:
  explicit PreTokenizerSequence(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void apply(std::vector<Piece>& pieces) const override {
    for (const auto& p : steps_) p->apply(pieces);
  }
  std::string describe() const override {
    std::vector<std::string> names;
    for (const auto& p : steps_) names.push_back(p->describe());
    return fmt::format("Sequence[{}]", fmt::join(names, ", "));
  }
  bool byte_level() const override {
    return std::any_of(steps_.begin(), steps_.end(), [](const auto& p) { return p->byte_level(); });
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void apply(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, behavior_,
                 [&](const std::string& s) { return cover(s.size(), pattern_.find(s), invert_); });
  }
  std::string describe() const override { return fmt::format("Split({})", behavior_name(behavior_)); }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

// GPT-2's pattern, which ByteLevel splits with when use_regex is set.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = gpt2_regex();
  }
  void apply(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_)
      for (auto& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, " ");
    if (regex_)
      split_pieces(pieces, Behavior::kIsolated,
                   [&](const std::string& s) { return cover(s.size(), regex_->find_all(s), false); });
    const auto& table = byte_table();
    for (auto& p : pieces) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (char c : p.text) mapped += table.char_of_byte[static_cast<unsigned char>(c)];
      p.text = std::move(mapped);
    }
  }
  std::string describe() const override { return "ByteLevel"; }
  bool byte_level() const override { return true; }

 private:
  // Compiled once per process: a Regex is immutable and shared.
  static const Regex& gpt2_regex() {
    static const Regex regex(kGpt2Pattern);
    return regex;
  }

  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void apply(std::vector<Piece>& pieces) const override {
    const Pattern space = Pattern::literal(" ");
    for (auto& p : pieces) {
      p.text = space.replace(p.text, replacement_);
      const bool prepend =
          scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start);
      if (prepend && !p.text.starts_with(replacement_)) p.text.insert(0, replacement_);
    }
    if (split_) {
      const Pattern delimiter = Pattern::literal(replacement_);
      split_pieces(pieces, Behavior::kMergedWithNext,
                   [&](const std::string& s) { return cover(s.size(), delimiter.find(s), false); });
    }
  }
  std::string describe() const override { return "Metaspace"; }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void apply(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, individual_ ? Behavior::kIsolated : Behavior::kContiguous,
                 [](const std::string& s) { return cover_chars(s, unicode::is_numeric); });
  }
  std::string describe() const override { return "Digits"; }

 private:
  bool individual_;
};

class WhitespaceSplitPreTokenizer final : public PreTokenizer {
 public:
  void apply(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, Behavior::kRemoved,
                 [](const std::string& s) { return cover_chars(s, unicode::is_whitespace); });
  }
  std::string describe() const override { return "WhitespaceSplit"; }
};

class WhitespacePreTokenizer final : public PreTokenizer {
 public:
  WhitespacePreTokenizer() : regex_(word_regex()) {}
  void apply(std::vector<Piece>& pieces) const override {
    // Keeps the matches, drops what lies between them.
    split_pieces(pieces, Behavior::kRemoved,
                 [&](const std::string& s) { return cover(s.size(), regex_.find_all(s), true); });
  }
  std::string describe() const override { return "Whitespace"; }

 private:
  static const Regex& word_regex() {
    static const Regex regex(R"(\w+|[^\w\s]+)");
    return regex;
  }

  Regex regex_;
};

std::string single_char(const json& v, const char* key, const Fields& f, const std::string& where) {
  const std::string s = f.string(v, key, where);
  std::size_t len = 0;
  if (s.empty() || !unicode::is_valid_utf8(s) || (unicode::decode_at(s, 0, &len), len != s.size()))
    f.fail(Fields::join(where, key), "expected a single character");
  return s;
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& v, const Fields& f, const std::string& where) {
  const std::string type = type_of(v, f, where);
  if (type == "Sequence") {
    const json& list = f.array(v, "pretokenizers", where);
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (std::size_t i = 0; i < list.size(); ++i)
      steps.push_back(
          parse_pre_tokenizer(list[i], f, Fields::index(Fields::join(where, "pretokenizers"), i)));
    return std::make_unique<PreTokenizerSequence>(std::move(steps));
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(
        Pattern::parse(f.require(v, "pattern", where), f, Fields::join(where, "pattern")),
        parse_behavior(f.string(v, "behavior", where), f, Fields::join(where, "behavior")),
        f.boolean(v, "invert", where, false));
  }
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(f.boolean(v, "add_prefix_space", where, true),
                                                   f.boolean(v, "use_regex", where, true));
  if (type == "Metaspace") {
    PrependScheme scheme =
        f.boolean(v, "add_prefix_space", where, true) ? PrependScheme::kAlways : PrependScheme::kNever;
    if (const auto s = f.optional_string(v, "prepend_scheme", where)) {
      if (*s == "always") {
        scheme = PrependScheme::kAlways;
      } else if (*s == "first") {
        scheme = PrependScheme::kFirst;
      } else if (*s == "never") {
        scheme = PrependScheme::kNever;
      } else {
        f.fail(Fields::join(where, "prepend_scheme"),
               fmt::format("{} (expected always, first or never)", quote_input(*s)));
      }
    }
    return std::make_unique<MetaspacePreTokenizer>(single_char(v, "replacement", f, where), scheme,
                                                   f.boolean(v, "split", where, true));
  }
  if (type == "Digits")
    return std::make_unique<DigitsPreTokenizer>(f.boolean(v, "individual_digits", where, false));
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
  if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
  f.fail(Fields::join(where, "type"),
         fmt::format("pre-tokenizer {} is not supported (supported: Sequence, Split, ByteLevel, Metaspace, "
                     "Digits, Whitespace, WhitespaceSplit)",
                     quote_input(type)));
}

// ---------------------------------------------------------------------------
// Decoders: each rewrites the list of token strings (tokenizers' decode_chain).

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void apply(std::vector<std::string>& tokens) const = 0;
  virtual std::string describe() const = 0;
};

class DecoderSequence final : public Decoder {
 public:
  explicit DecoderSequence(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (const auto& d : steps_) d->apply(tokens);
  }
  std::string describe() const override {
    std::vector<std::string> names;
    for (const auto& d : steps_) names.push_back(d->describe());
    return fmt::format("Sequence[{}]", fmt::join(names, ", "));
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

class ByteLevelDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    const auto& table = byte_table();
    std::string bytes;
    for (const auto& t : tokens) {
      std::string mapped;
      bool all_mapped = true;
      for (std::size_t i = 0; i < t.size();) {
        std::size_t len = 0;
        const auto it = table.byte_of_char.find(unicode::decode_at(t, i, &len));
        if (it == table.byte_of_char.end()) {
          all_mapped = false;
          break;
        }
        mapped += static_cast<char>(it->second);
        i += len;
      }
      bytes += all_mapped ? mapped : t;
    }
    tokens.assign(1, unicode::repair_utf8(bytes));
  }
  std::string describe() const override { return "ByteLevel"; }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = Pattern::literal(replacement_).replace(tokens[i], i == 0 && strip_first_ ? "" : " ");
  }
  std::string describe() const override { return "Metaspace"; }

 private:
  std::string replacement_;
  bool strip_first_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) t = pattern_.replace(t, content_);
  }
  std::string describe() const override { return "Replace"; }

 private:
  Pattern pattern_;
  std::string content_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    const auto flush = [&] {
      if (pending.empty()) return;
      if (unicode::is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (std::size_t k = 0; k < pending.size(); ++k) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (auto& t : tokens) {
      if (const auto byte = byte_token(t)) {
        pending += static_cast<char>(*byte);
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }
  std::string describe() const override { return "ByteFallback"; }

  // The byte of a "<0xAB>" token.
  static std::optional<unsigned char> byte_token(std::string_view t) {
    if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return std::nullopt;
    const auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = hex(t[3]), lo = hex(t[4]);
    if (hi < 0 || lo < 0) return std::nullopt;
    return static_cast<unsigned char>(hi * 16 + lo);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
  std::string describe() const override { return "Fuse"; }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, std::size_t start, std::size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::size_t begin = 0, end = t.size();
      for (std::size_t k = 0; k < start_ && std::string_view(t).substr(begin).starts_with(content_); ++k)
        begin += content_.size();
      for (std::size_t k = 0; k < stop_ && end - begin >= content_.size() &&
                              std::string_view(t).substr(begin, end - begin).ends_with(content_);
           ++k)
        end -= content_.size();
      t = t.substr(begin, end - begin);
    }
  }
  std::string describe() const override { return "Strip"; }

 private:
  std::string content_;
  std::size_t start_, stop_;
};

std::size_t count_field(const json& v, const char* key, const Fields& f, const std::string& where) {
  const json* n = Fields::find(v, key);
  if (n == nullptr) return 0;
  if (!n->is_number_unsigned() || n->get<std::uint64_t>() > 1'000'000)
    f.fail(Fields::join(where, key), "expected a small non-negative integer");
  return static_cast<std::size_t>(n->get<std::uint64_t>());
}

std::unique_ptr<Decoder> parse_decoder(const json& v, const Fields& f, const std::string& where) {
  const std::string type = type_of(v, f, where);
  if (type == "Sequence") {
    const json& list = f.array(v, "decoders", where);
    std::vector<std::unique_ptr<Decoder>> steps;
    for (std::size_t i = 0; i < list.size(); ++i)
      steps.push_back(parse_decoder(list[i], f, Fields::index(Fields::join(where, "decoders"), i)));
    return std::make_unique<DecoderSequence>(std::move(steps));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    bool strip_first = f.boolean(v, "add_prefix_space", where, true);
    if (const auto s = f.optional_string(v, "prepend_scheme", where)) strip_first = *s != "never";
    return std::make_unique<MetaspaceDecoder>(single_char(v, "replacement", f, where), strip_first);
  }
  if (type == "Replace")
    return std::make_unique<ReplaceDecoder>(
        Pattern::parse(f.require(v, "pattern", where), f, Fields::join(where, "pattern")),
        f.string(v, "content", where));
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(single_char(v, "content", f, where),
                                          count_field(v, "start", f, where),
                                          count_field(v, "stop", f, where));
  f.fail(Fields::join(where, "type"),
         fmt::format("decoder {} is not supported (supported: Sequence, ByteLevel, Metaspace, Replace, "
                     "ByteFallback, Fuse, Strip)",
                     quote_input(type)));
}

// ---------------------------------------------------------------------------
// The BPE model.

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

BpeModel::BpeModel(const json& model, const Fields& f, const std::string& where) : file_(f.file()) {
  if (const json* t = Fields::find(model, "type")) {
    if (!t->is_string() || t->get<std::string>() != "BPE")
      f.fail(Fields::join(where, "type"),
             fmt::format("model {} is not supported: only BPE models are (for a SentencePiece unigram model, "
                         "pass its tokenizer.model file)",
                         quote_input(t->is_string() ? t->get<std::string>() : t->dump())));
  } else if (Fields::find(model, "merges") == nullptr) {
    f.fail(where, "no model type and no merges: only BPE models are supported");
  }
  if (const json* d = Fields::find(model, "dropout");
      d != nullptr && (!d->is_number() || d->get<double>() > 0))
    f.fail(Fields::join(where, "dropout"), "BPE dropout is not supported (it makes encoding random)");

  const json& vocab = f.require(model, "vocab", where);
  if (!vocab.is_object()) f.fail(Fields::join(where, "vocab"), "expected an object of token -> id");
  vocab_.reserve(vocab.size());
  bmp_ids_.assign(0x10000, -1);
  for (const auto& [token, id_json] : vocab.items()) {
    const auto id = f.id(id_json, Fields::join(Fields::join(where, "vocab"), token));
    vocab_[token] = id;
    std::size_t len = 0;
    if (!token.empty()) {
      const char32_t cp = unicode::decode_at(token, 0, &len);
      if (len == token.size() && cp < 0x10000) bmp_ids_[cp] = id;
    }
  }

  unk_token_ = f.optional_string(model, "unk_token", where);
  prefix_ = f.optional_string(model, "continuing_subword_prefix", where).value_or("");
  suffix_ = f.optional_string(model, "end_of_word_suffix", where).value_or("");
  fuse_unk_ = f.boolean(model, "fuse_unk", where, false);
  byte_fallback_ = f.boolean(model, "byte_fallback", where, false);
  ignore_merges_ = f.boolean(model, "ignore_merges", where, false);
  for (int b = 0; b < 256; ++b) byte_ids_[b] = lookup(fmt::format("<0x{:02X}>", b)).value_or(-1);

  const json& merges = f.array(model, "merges", where);
  merges_.reserve(merges.size());
  const std::string merges_where = Fields::join(where, "merges");
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string a, b;
    if (m.is_string()) {  // "a b", split at the first space
      const std::string s = m.get<std::string>();
      const auto space = s.find(' ');
      if (space == std::string::npos) f.fail(Fields::index(merges_where, rank), "expected \"left right\"");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      f.fail(Fields::index(merges_where, rank), "expected \"left right\" or [\"left\", \"right\"]");
    }
    const auto ia = lookup(a), ib = lookup(b);
    if (!ia)
      f.fail(Fields::index(merges_where, rank), fmt::format("{} is not in the vocabulary", quote_input(a)));
    if (!ib)
      f.fail(Fields::index(merges_where, rank), fmt::format("{} is not in the vocabulary", quote_input(b)));
    const std::string merged =
        a + (!prefix_.empty() && b.starts_with(prefix_) ? b.substr(prefix_.size()) : b);
    const auto im = lookup(merged);
    if (!im)
      f.fail(Fields::index(merges_where, rank),
             fmt::format("the merge {} is not in the vocabulary", quote_input(merged)));
    merges_.insert(*ia, *ib, static_cast<std::uint32_t>(rank), *im);
  }
}

void BpeModel::build_symbols(std::string_view word, Ids& symbols) const {
  symbols.clear();
  std::optional<std::int32_t> pending_unk;
  const bool affixes = !prefix_.empty() || !suffix_.empty();
  std::string symbol;
  for (std::size_t i = 0; i < word.size();) {
    std::size_t len = 0;
    const char32_t cp = unicode::decode_at(word, i, &len);
    const std::string_view ch = word.substr(i, len);
    std::optional<std::int32_t> id;
    if (!affixes) {
      if (cp < 0x10000) {
        if (bmp_ids_[cp] >= 0) id = bmp_ids_[cp];
      } else {
        id = lookup(ch);
      }
      symbol.assign(ch);
    } else {
      symbol.clear();
      if (i > 0) symbol += prefix_;
      symbol += ch;
      if (i + len == word.size()) symbol += suffix_;
      id = lookup(symbol);
    }
    i += len;
    if (id) {
      if (pending_unk) symbols.push_back(*std::exchange(pending_unk, std::nullopt));
      symbols.push_back(*id);
      continue;
    }
    if (byte_fallback_ && std::all_of(symbol.begin(), symbol.end(), [&](char c) {
          return byte_ids_[static_cast<unsigned char>(c)] >= 0;
        })) {
      for (char c : symbol) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
      continue;
    }
    if (unk_token_) {
      const auto unk = lookup(*unk_token_);
      if (!unk)
        throw InputError(file_, 0, "model.unk_token",
                         fmt::format("{} is not in the vocabulary, and the text has a character outside it",
                                     quote_input(*unk_token_)));
      if (pending_unk && !fuse_unk_) symbols.push_back(*pending_unk);
      if (!pending_unk || !fuse_unk_) pending_unk = *unk;
    }
    // Without an unk token an unknown character is dropped, as in tokenizers.
  }
  if (pending_unk) symbols.push_back(*pending_unk);
}

void BpeModel::merge(BpeScratch& s) const {
  Ids& ids = s.symbols;
  const auto n = static_cast<std::int32_t>(ids.size());
  if (n < 2) return;
  s.prev.resize(ids.size());
  s.next.resize(ids.size());
  for (std::int32_t i = 0; i < n; ++i) {
    s.prev[i] = i - 1;
    s.next[i] = i + 1 < n ? i + 1 : -1;
  }
  // Min-heap of (rank << 32 | left position): lowest rank, then leftmost.
  auto& heap = s.heap;
  heap.clear();
  const auto candidate = [&](std::int32_t i) {
    const std::int32_t j = s.next[i];
    if (j < 0) return;
    if (const auto* m = merges_.find(ids[i], ids[j]))
      heap.push_back((std::uint64_t{m->rank} << 32) | static_cast<std::uint32_t>(i));
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) candidate(i);
  std::make_heap(heap.begin(), heap.end(), std::greater<>{});
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const std::uint64_t top = heap.back();
    heap.pop_back();
    const auto rank = static_cast<std::uint32_t>(top >> 32);
    const auto i = static_cast<std::int32_t>(top & 0xFFFFFFFFu);
    if (ids[i] < 0) continue;
    const std::int32_t j = s.next[i];
    if (j < 0) continue;
    const auto* m = merges_.find(ids[i], ids[j]);
    if (m == nullptr || m->rank != rank) continue;  // stale: a neighbour changed since
    ids[i] = m->merged;
    ids[j] = -1;
    s.next[i] = s.next[j];
    if (s.next[j] >= 0) s.prev[s.next[j]] = i;
    const auto push = [&](std::int32_t left) {
      const std::size_t before = heap.size();
      candidate(left);
      if (heap.size() > before) std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    };
    if (s.prev[i] >= 0) push(s.prev[i]);
    push(i);
  }
  std::erase(ids, -1);
}

void BpeModel::tokenize(std::string_view word, Ids& out, BpeScratch& s) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = lookup(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxBytes;
  if (cacheable) {
    if (const auto it = s.cache.find(word); it != s.cache.end()) {
      out.insert(out.end(), s.cached.begin() + it->second.first, s.cached.begin() + it->second.second);
      return;
    }
  }
  build_symbols(word, s.symbols);
  merge(s);
  out.insert(out.end(), s.symbols.begin(), s.symbols.end());
  if (cacheable) {
    const auto begin = static_cast<std::uint32_t>(s.cached.size());
    s.cached.insert(s.cached.end(), s.symbols.begin(), s.symbols.end());
    s.cache.emplace(std::string(word), std::pair{begin, static_cast<std::uint32_t>(s.cached.size())});
  }
}

// ---------------------------------------------------------------------------
// Added tokens: a byte trie for leftmost-longest matching.

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

// ---------------------------------------------------------------------------
// The tokenizer.

class HfTokenizer final : public TextTokenizer {
 public:
  HfTokenizer(const json& root, const Fields& f, const json* config);

  Ids encode(std::string_view text, bool add_special) const override;
  std::string decode(std::span<const std::int32_t> ids, bool skip_special) const override;
  std::span<const std::int32_t> special_prefix() const override { return prefix_; }
  std::span<const std::int32_t> special_suffix() const override { return suffix_; }
  std::optional<std::int32_t> bos_id() const override { return bos_; }
  std::optional<std::int32_t> eos_id() const override { return eos_; }
  std::size_t vocab_size() const override { return pieces_.size(); }
  std::optional<std::string> token_to_piece(std::int32_t id) const override {
    if (id < 0 || static_cast<std::size_t>(id) >= pieces_.size() || !has_piece_[id]) return std::nullopt;
    return pieces_[id];
  }
  std::optional<std::int32_t> piece_to_id(std::string_view piece) const override {
    if (const auto it = added_by_content_.find(piece); it != added_by_content_.end()) return it->second;
    if (const auto it = model_->vocab().find(piece); it != model_->vocab().end()) return it->second;
    return std::nullopt;
  }
  bool is_special(std::int32_t id) const override {
    return id >= 0 && static_cast<std::size_t>(id) < special_.size() && special_[id];
  }
  TokenizerDescription description() const override { return description_; }

 private:
  void parse_post_processor(const json& v, const Fields& f, const std::string& where);
  std::optional<std::int32_t> config_token(const json* config, const char* key) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;
  StringMap<std::int32_t> added_by_content_;
  AddedTokenMatcher raw_matcher_;         // tokens matched in the text as written
  AddedTokenMatcher normalized_matcher_;  // tokens matched after normalization
  Ids prefix_, suffix_;
  std::optional<std::int32_t> bos_, eos_;
  std::vector<std::string> pieces_;
  std::vector<char> has_piece_;
  std::vector<char> special_;
  TokenizerDescription description_;
};

// Long by nature: one branch per part of tokenizer.json (normalizer,
// pre-tokenizer, model, decoder, added tokens).
HfTokenizer::HfTokenizer(const json& root, const Fields& f, const json* config) {
  if (!root.is_object()) f.fail("", "expected a JSON object (a Hugging Face tokenizer.json)");
  if (Fields::find(root, "model") == nullptr)
    f.fail("model", "missing: not a tokenizer.json (tokenizer_config.json and config.json have no model)");
  model_ = std::make_unique<BpeModel>(root["model"], f, "model");
  if (const json* n = Fields::find(root, "normalizer")) normalizer_ = parse_normalizer(*n, f, "normalizer");
  if (const json* p = Fields::find(root, "pre_tokenizer"))
    pre_tokenizer_ = parse_pre_tokenizer(*p, f, "pre_tokenizer");
  if (const json* d = Fields::find(root, "decoder")) decoder_ = parse_decoder(*d, f, "decoder");
  if (const json* p = Fields::find(root, "post_processor")) parse_post_processor(*p, f, "post_processor");

  if (const json* list = Fields::find(root, "added_tokens")) {
    if (!list->is_array()) f.fail("added_tokens", "expected an array");
    added_.reserve(list->size());
    for (std::size_t i = 0; i < list->size(); ++i) {
      const json& t = (*list)[i];
      const std::string where = Fields::index("added_tokens", i);
      AddedToken a;
      a.id = f.id(f.require(t, "id", where), Fields::join(where, "id"));
      a.content = f.string(t, "content", where);
      if (a.content.empty()) f.fail(Fields::join(where, "content"), "empty");
      a.special = f.boolean(t, "special", where, false);
      a.lstrip = f.boolean(t, "lstrip", where, false);
      a.rstrip = f.boolean(t, "rstrip", where, false);
      a.single_word = f.boolean(t, "single_word", where, false);
      a.normalized = f.boolean(t, "normalized", where, !a.special);
      added_.push_back(std::move(a));
    }
  }
  for (const auto& a : added_) {
    added_by_content_[a.content] = a.id;
    if (!a.normalized) {
      raw_matcher_.add(a.content, &a);
    } else {
      std::string pattern = a.content;
      if (normalizer_) normalizer_->apply(pattern);
      normalized_matcher_.add(pattern, &a);
    }
  }

  // The id -> piece table: the model's vocabulary, then added tokens over it.
  std::int64_t max_id = -1;
  for (const auto& [token, id] : model_->vocab()) max_id = std::max<std::int64_t>(max_id, id);
  for (const auto& a : added_) max_id = std::max<std::int64_t>(max_id, a.id);
  pieces_.resize(static_cast<std::size_t>(max_id + 1));
  has_piece_.assign(pieces_.size(), 0);
  special_.assign(pieces_.size(), 0);
  for (const auto& [token, id] : model_->vocab()) {
    pieces_[id] = token;
    has_piece_[id] = 1;
  }
  for (const auto& a : added_) {
    pieces_[a.id] = a.content;
    has_piece_[a.id] = 1;
    if (a.special) special_[a.id] = 1;
  }
  for (const Ids* ids : {&prefix_, &suffix_})
    for (auto id : *ids)
      if (static_cast<std::size_t>(id) >= pieces_.size() || !has_piece_[id])
        f.fail("post_processor", fmt::format("special token id {} is not in the vocabulary", id));

  // BOS and EOS: tokenizer_config.json names them; otherwise the
  // post-processor's first and last tokens, or a conventional name.
  bos_ = config_token(config, "bos_token");
  eos_ = config_token(config, "eos_token");
  const auto first_known = [&](std::initializer_list<const char*> names) -> std::optional<std::int32_t> {
    for (const char* name : names)
      if (const auto id = piece_to_id(name)) return id;
    return std::nullopt;
  };
  const auto configured = [&](const char* key) { return config != nullptr && config->contains(key); };
  if (!configured("bos_token")) {
    if (!prefix_.empty()) {
      bos_ = prefix_.front();
    } else {
      bos_ = first_known({"<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>"});
    }
  }
  if (!configured("eos_token")) {
    if (!suffix_.empty()) {
      eos_ = suffix_.back();
    } else {
      eos_ = first_known({"<|end_of_text|>", "</s>", "<eos>", "<|endoftext|>"});
    }
  }

  description_.kind = "huggingface";
  description_.file = f.file();
  description_.model = pre_tokenizer_ && pre_tokenizer_->byte_level() ? "BPE (byte-level)"
                       : model_->byte_fallback()                      ? "BPE (byte fallback)"
                                                                      : "BPE";
  std::string post = "none";
  if (const json* p = Fields::find(root, "post_processor")) post = type_of(*p, f, "post_processor");
  description_.pipeline = fmt::format("normalizer={} pre_tokenizer={} post_processor={} decoder={}",
                                      normalizer_ ? normalizer_->describe() : "none",
                                      pre_tokenizer_ ? pre_tokenizer_->describe() : "none", post,
                                      decoder_ ? decoder_->describe() : "none");
  description_.vocab_size = pieces_.size();
  description_.bos_id = bos_;
  description_.eos_id = eos_;
  description_.special_prefix = prefix_;
  description_.special_suffix = suffix_;
}

std::optional<std::int32_t> HfTokenizer::config_token(const json* config, const char* key) const {
  if (config == nullptr) return std::nullopt;
  const json* v = Fields::find(*config, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return piece_to_id(v->get<std::string>());
  if (const json* content = Fields::find(*v, "content"); content != nullptr && content->is_string())
    return piece_to_id(content->get<std::string>());
  return std::nullopt;
}

void HfTokenizer::parse_post_processor(const json& v, const Fields& f, const std::string& where) {
  const std::string type = type_of(v, f, where);
  if (type == "Sequence") {
    const json& list = f.array(v, "processors", where);
    for (std::size_t i = 0; i < list.size(); ++i)
      parse_post_processor(list[i], f, Fields::index(Fields::join(where, "processors"), i));
    return;
  }
  if (type == "ByteLevel") return;  // offsets only
  if (type == "TemplateProcessing") {
    const json& single = f.array(v, "single", where);
    const json& specials = f.require(v, "special_tokens", where);
    bool after_sequence = false;
    for (std::size_t i = 0; i < single.size(); ++i) {
      const std::string item_where = Fields::index(Fields::join(where, "single"), i);
      if (const json* s = Fields::find(single[i], "SpecialToken")) {
        const std::string name = f.string(*s, "id", Fields::join(item_where, "SpecialToken"));
        const std::string special_where = Fields::join(Fields::join(where, "special_tokens"), name);
        const json* entry = Fields::find(specials, name.c_str());
        if (entry == nullptr) f.fail(special_where, "missing");
        const json& ids = f.array(*entry, "ids", special_where);
        for (std::size_t k = 0; k < ids.size(); ++k)
          (after_sequence ? suffix_ : prefix_)
              .push_back(f.id(ids[k], Fields::index(Fields::join(special_where, "ids"), k)));
      } else if (Fields::find(single[i], "Sequence") != nullptr) {
        after_sequence = true;
      } else {
        f.fail(item_where, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
      }
    }
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const auto pair_id = [&](const char* key) {
      const json& p = f.require(v, key, where);
      if (!p.is_array() || p.size() != 2) f.fail(Fields::join(where, key), "expected [token, id]");
      return f.id(p[1], Fields::index(Fields::join(where, key), 1));
    };
    prefix_.push_back(pair_id("cls"));
    suffix_.push_back(pair_id("sep"));
    return;
  }
  f.fail(Fields::join(where, "type"),
         fmt::format("post-processor {} is not supported (supported: TemplateProcessing, ByteLevel, "
                     "RobertaProcessing, BertProcessing, Sequence)",
                     quote_input(type)));
}

Ids HfTokenizer::encode(std::string_view text, bool add_special) const {
  std::string repaired;
  if (!unicode::is_valid_utf8(text)) {
    repaired = unicode::repair_utf8(text);
    text = repaired;
  }
  Ids out;
  if (add_special) out = prefix_;
  BpeScratch scratch;
  std::vector<Piece> pieces;
  for (const auto& section : raw_matcher_.split(text)) {
    if (section.id >= 0) {
      out.push_back(section.id);
      continue;
    }
    std::string normalized(text.substr(section.start, section.end - section.start));
    if (normalizer_) normalizer_->apply(normalized);
    if (normalized.empty()) continue;
    for (const auto& part : normalized_matcher_.split(normalized)) {
      if (part.id >= 0) {
        out.push_back(part.id);
        continue;
      }
      pieces.clear();
      pieces.push_back(
          {normalized.substr(part.start, part.end - part.start), section.start == 0 && part.start == 0});
      if (pre_tokenizer_) pre_tokenizer_->apply(pieces);
      for (const auto& p : pieces) model_->tokenize(p.text, out, scratch);
    }
  }
  if (add_special) out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

std::string HfTokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (auto id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= pieces_.size() || !has_piece_[id]) continue;
    if (skip_special && special_[id]) continue;
    tokens.push_back(pieces_[id]);
  }
  if (!decoder_) return fmt::format("{}", fmt::join(tokens, " "));
  decoder_->apply(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

}  // namespace

std::unique_ptr<TextTokenizer> parse_hf_tokenizer_json(std::string_view json_text, const std::string& file,
                                                       std::string_view config_json) {
  const Fields f(file);
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    f.fail("", fmt::format("not valid JSON: {}", e.what()));
  }
  json config;
  bool have_config = false;
  if (!config_json.empty()) {
    try {
      config = json::parse(config_json);
      have_config = config.is_object();
    } catch (const json::exception& e) {
      throw InputError(file + " (tokenizer_config.json beside it)", 0, "",
                       fmt::format("not valid JSON: {}", e.what()));
    }
  }
  return std::make_unique<HfTokenizer>(root, f, have_config ? &config : nullptr);
}

}  // namespace tokenscope::workload
