// libFuzzer target: the GGUF metadata reader and the tokenizer built from it
// (src/tokenizers/gguf.h, gguf_tokenizer.cpp). The input's first byte is the
// length of the text to encode, which follows it; the rest is the GGUF file.
// Checks the contract: bad files are InputErrors (never crashes, never an
// allocation the file cannot back); every id encode returns is inside the
// vocabulary; add_special puts exactly special_prefix() and special_suffix()
// around the plain ids; decode accepts any ids.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "tokenizers/text_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t text_len = std::min<std::size_t>(static_cast<unsigned char>(input[0]), size - 1);
  const std::string_view text = input.substr(1, text_len);
  const std::string_view file = input.substr(1 + text_len);
  std::unique_ptr<tokenizers::TextTokenizer> t;
  try {
    t = tokenizers::parse_gguf_tokenizer(file, "fuzz.gguf");
  } catch (const UsageError&) {
    return 0;
  }
  std::vector<std::int32_t> plain, special;
  try {
    plain = t->encode(text, false);
    special = t->encode(text, true);
  } catch (const UsageError&) {
    return 0;  // a byte without a token: llama.cpp stops there too
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
  (void)t->decode(special, false);
  (void)t->decode(special, true);
  const std::vector<std::int32_t> odd{-1, 0, static_cast<std::int32_t>(t->vocab_size()), 1 << 30};
  (void)t->decode(odd, false);
  (void)t->description();
  return 0;
}
