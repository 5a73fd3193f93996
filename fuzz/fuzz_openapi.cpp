// libFuzzer target: OpenAPI 3 documents read as tools (bench/openapi.h).
// Every input gives tools whose schemas compile, or an InputError naming
// the document; never a crash, a hang, or an expansion without bound.
#include <cstddef>
#include <cstdint>
#include <string>

#include "bench/openapi.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto tools = tokenscope::bench::read_openapi_tools(text, "fuzz.yaml");
    if (tools.empty() || tools.size() > tokenscope::bench::kMaxTools) __builtin_trap();
    for (const auto& t : tools) {
      if (t.name.empty() || t.name.size() > 64 || !t.parameters_checker || !t.response_checker)
        __builtin_trap();
      for (const auto& o : tools)
        if (&o != &t && o.name == t.name) __builtin_trap();
    }
  } catch (const tokenscope::UsageError&) {
  }
  return 0;
}
