// libFuzzer target: the Hugging Face tokenizer.json loader and encode/decode
// (src/tokenizers/text_tokenizer.h). The input is a tokenizer.json, then a NUL
// byte, then the text to encode (a fixed sample text when there is no NUL).
// Checks the contract: bad files are UsageErrors (never crashes); every id
// encode returns is inside the vocabulary and has a piece; add_special puts
// exactly special_prefix() and special_suffix() around the plain ids; count
// agrees with encode; decode accepts any ids.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "tokenizers/text_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto nul = input.find('\0');
  const std::string_view file = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos
                                    ? std::string_view("Hello world, 123 <s> caf\xc3\xa9  \n\tend")
                                    : input.substr(nul + 1);
  std::unique_ptr<tokenizers::TextTokenizer> t;
  try {
    t = tokenizers::parse_hf_tokenizer_json(file, "fuzz.json");
  } catch (const UsageError&) {
    return 0;
  }
  std::vector<std::int32_t> plain, special;
  try {
    plain = t->encode(text, false);
    special = t->encode(text, true);
  } catch (const UsageError&) {
    return 0;  // a regular expression over its backtracking limits
  }
  for (auto id : special) {
    if (id < 0 || static_cast<std::size_t>(id) >= t->vocab_size()) __builtin_trap();
    if (!t->token_to_piece(id).has_value()) __builtin_trap();
  }
  const auto prefix = t->special_prefix();
  const auto suffix = t->special_suffix();
  if (special.size() != prefix.size() + plain.size() + suffix.size()) __builtin_trap();
  for (std::size_t k = 0; k < prefix.size(); ++k)
    if (special[k] != prefix[k]) __builtin_trap();
  for (std::size_t k = 0; k < plain.size(); ++k)
    if (special[prefix.size() + k] != plain[k]) __builtin_trap();
  if (t->count(text, false) != plain.size()) __builtin_trap();
  (void)t->decode(special, false);
  (void)t->decode(special, true);
  const std::vector<std::int32_t> odd{-1, 0, static_cast<std::int32_t>(t->vocab_size()), 1 << 30};
  (void)t->decode(odd, false);
  (void)t->description();
  return 0;
}
