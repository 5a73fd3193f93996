// libFuzzer target: bench's YAML workload files. Bad input must end in a
// UsageError (InputError naming file, line and field), never a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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
    // Task classes (bench/task_graph.h): every step after what it names, every arrival a task class's.
    if (const auto& tasks = b.tasks) {
      if (tasks->by_class.size() != w.classes.size()) __builtin_trap();
      for (const auto& spec : tasks->by_class) {
        if (!spec) continue;
        if (spec->order.size() != spec->steps.size()) __builtin_trap();
        std::vector<std::size_t> position(spec->steps.size(), SIZE_MAX);
        for (std::size_t k = 0; k < spec->order.size(); ++k) position.at(spec->order[k]) = k;
        for (std::size_t i = 0; i < spec->steps.size(); ++i)
          for (const auto a : spec->steps[i].after)
            if (position.at(a) >= position[i]) __builtin_trap();
        for (const auto t : spec->tools)
          if (t >= tasks->catalog.tools.size()) __builtin_trap();
      }
      for (const auto& a : tasks->arrivals)
        if (a.task_class >= tasks->by_class.size() || !tasks->by_class[a.task_class] || a.input_tokens == 0)
          __builtin_trap();
    }
  } catch (const tokenscope::UsageError&) {
  }
  return 0;
}
