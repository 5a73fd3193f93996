// libFuzzer target: the YAML catalog of GPUs and models.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "engine/catalog.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  auto catalog = engine::Catalog::builtin();
  try {
    catalog.load_yaml_text(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    for (const auto& m : catalog.models())
      if (m.layers == 0 || m.heads == 0 || m.kv_heads == 0 || m.heads % m.kv_heads != 0) __builtin_trap();
  } catch (const UsageError&) {
  }
  return 0;
}
