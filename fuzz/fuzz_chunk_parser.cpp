// libFuzzer target: the streaming chunk parser on arbitrary event data.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "bench/chunk_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static tokenscope::bench::ChunkParser parser;  // reused, as one connection reuses it
  const auto info = parser.parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (info.role_only && info.has_output) __builtin_trap();
  if (!info.valid && (info.has_output && info.choices == 0)) __builtin_trap();
  return 0;
}
