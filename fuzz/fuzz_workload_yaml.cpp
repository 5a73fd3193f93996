// libFuzzer target: bench's YAML workload files. Bad input must end in a
// UsageError (InputError naming file, line and field), never a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "bench/bench_workload.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto b = tokenscope::bench::parse_workload_yaml(text, "fuzz.yaml", 1, std::nullopt, 20000);
    const auto& w = b.workload;
    if (!b.turns.empty() && b.turns.size() != w.requests.size()) __builtin_trap();
    for (std::size_t i = 0; i < b.turns.size(); ++i) {
      const auto next = b.turns[i].next;
      if (next >= 0 && (static_cast<std::size_t>(next) != i + 1 || b.turns[next].turn != b.turns[i].turn + 1))
        __builtin_trap();
    }
    for (const auto& r : w.requests)
      if (r.task_class >= w.classes.size() || r.tenant >= w.tenants.size() || r.input_tokens == 0)
        __builtin_trap();
  } catch (const tokenscope::UsageError&) {
  }
  return 0;
}
