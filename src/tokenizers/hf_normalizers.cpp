#include "tokenizers/hf_normalizers.h"

#include "tokenizers/hf_split.h"

namespace tokenscope::tokenizers::hf {

namespace {

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

}  // namespace

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

}  // namespace tokenscope::tokenizers::hf
