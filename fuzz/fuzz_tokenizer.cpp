// libFuzzer target: the tokenizer on arbitrary bytes. Checks the documented
// contract: ids inside the vocabulary, and prefix stability (all tokens of a
// prefix but its last are tokens of the whole text).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenizers/builtin.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope::tokenizers;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto full = tokenize(text);
  for (auto id : full) {
    if (id >= kVocabSize) __builtin_trap();
    if (const auto piece = piece_text(id)) {
      const auto back = tokenize(*piece);
      if (back.size() != 1 || back[0] != id) __builtin_trap();
    }
  }
  const std::size_t cut = size == 0 ? 0 : data[0] % (size + 1);
  const auto part = tokenize(text.substr(0, cut));
  for (std::size_t k = 0; k + 1 < part.size(); ++k)
    if (k >= full.size() || part[k] != full[k]) __builtin_trap();
  return 0;
}
