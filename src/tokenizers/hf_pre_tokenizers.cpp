#include "tokenizers/hf_pre_tokenizers.h"

#include "tokenizers/hf_split.h"

namespace tokenscope::tokenizers::hf {

namespace {

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

}  // namespace

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

}  // namespace tokenscope::tokenizers::hf
