#include "tokenizers/hf_decoders.h"

#include "tokenizers/hf_split.h"

namespace tokenscope::tokenizers::hf {

namespace {

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

}  // namespace

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

}  // namespace tokenscope::tokenizers::hf
