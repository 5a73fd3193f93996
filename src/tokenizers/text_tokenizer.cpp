#include "tokenizers/text_tokenizer.h"

#include "tokenizers/gguf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

#include "core/error.h"

namespace tokenscope::tokenizers {
namespace {

std::string read_whole_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw InputError(file, 0, "", fmt::format("cannot open the tokenizer file: {}", std::strerror(errno)));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw InputError(file, 0, "", "cannot read the tokenizer file");
  return std::move(buffer).str();
}

// The first byte that is not blank (nor a UTF-8 byte order mark).
int first_meaningful_byte(std::string_view bytes) {
  std::size_t i = 0;
  if (bytes.starts_with("\xEF\xBB\xBF")) i = 3;
  while (i < bytes.size() && (bytes[i] == ' ' || bytes[i] == '\t' || bytes[i] == '\n' || bytes[i] == '\r'))
    ++i;
  return i < bytes.size() ? static_cast<unsigned char>(bytes[i]) : -1;
}

}  // namespace

void to_json(nlohmann::json& out, const TokenizerDescription& d) {
  out = nlohmann::json{{"kind", d.kind},
                       {"file", d.file},
                       {"model", d.model},
                       {"pipeline", d.pipeline},
                       {"vocab_size", d.vocab_size},
                       {"bos_id", d.bos_id ? nlohmann::json(*d.bos_id) : nlohmann::json()},
                       {"eos_id", d.eos_id ? nlohmann::json(*d.eos_id) : nlohmann::json()},
                       {"special_prefix", d.special_prefix},
                       {"special_suffix", d.special_suffix}};
}

std::size_t TextTokenizer::count(std::string_view text, bool add_special) const {
  return encode(text, add_special).size();
}

bool TextTokenizer::adds_bos() const {
  const auto prefix = special_prefix();
  const auto bos = bos_id();
  return bos.has_value() && !prefix.empty() && prefix.front() == *bos;
}

std::unique_ptr<TextTokenizer> load_text_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::string file = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / "tokenizer.json", ec)) {
      file = (dir / "tokenizer.json").string();
    } else if (fs::exists(dir / "tokenizer.model", ec)) {
      file = (dir / "tokenizer.model").string();
    } else {
      throw InputError(path, 0, "", "a directory without tokenizer.json or tokenizer.model");
    }
  }
  {
    // A GGUF model is read up to its metadata only (its tensors are gigabytes).
    std::ifstream in(file, std::ios::binary);
    char magic[4] = {};
    if (in && in.read(magic, 4) && gguf::is_gguf(std::string_view(magic, 4)))
      return load_gguf_tokenizer(file);
  }
  const std::string bytes = read_whole_file(file);
  const int first = first_meaningful_byte(bytes);
  if (first < 0) throw InputError(file, 0, "", "empty tokenizer file");
  if (first != '{') return parse_sentencepiece_model(bytes, file);

  // tokenizer_config.json beside a tokenizer.json names BOS and EOS.
  std::string config;
  const auto config_path = fs::path(file).parent_path() / "tokenizer_config.json";
  if (fs::exists(config_path, ec) && fs::path(file).filename() != "tokenizer_config.json")
    config = read_whole_file(config_path.string());
  return parse_hf_tokenizer_json(bytes, file, config);
}

std::vector<SingleTokenWord> single_token_words(const TextTokenizer& tokenizer,
                                                std::span<const std::string> candidates) {
  const auto prefix = tokenizer.special_prefix();
  const auto suffix = tokenizer.special_suffix();
  std::vector<SingleTokenWord> words;
  std::unordered_set<std::string> seen;
  for (const auto& word : candidates) {
    if (word.empty() || !std::all_of(word.begin(), word.end(), [](char c) { return c >= 'a' && c <= 'z'; }))
      throw UsageError(fmt::format("single_token_words: '{}' is not a lowercase ASCII word", word));
    if (!seen.insert(word).second) continue;
    const auto alone = tokenizer.encode(word, true);
    if (alone.size() != prefix.size() + 1 + suffix.size() ||
        !std::equal(prefix.begin(), prefix.end(), alone.begin()) ||
        !std::equal(suffix.begin(), suffix.end(), alone.end() - static_cast<std::ptrdiff_t>(suffix.size())))
      continue;
    const std::int32_t first_id = alone[prefix.size()];
    const auto twice = tokenizer.encode(word + " " + word, false);
    if (twice.size() != 2 || twice[0] != first_id) continue;
    words.push_back({word, first_id, twice[1]});
  }
  return words;
}

}  // namespace tokenscope::tokenizers
