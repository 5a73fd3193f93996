// libFuzzer target: a recorded tasks.jsonl read as a workload to replay
// (bench/task_replay.h). Bad input must end in a UsageError (InputError
// naming file, line and field), never a crash; what is accepted is a valid
// workload: every step after steps of its task, in an order that respects
// them, every arrival in time order with its class and tenant.
#include <cstddef>
#include <cstdint>
#include <string>

#include "bench/task_replay.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto b = tokenscope::bench::parse_task_replay(text, "fuzz.jsonl", 1.5);
    const auto& w = b.workload;
    if (!b.tasks || b.tasks->arrivals.empty()) __builtin_trap();
    tokenscope::Nanos last = 0;
    for (const auto& a : b.tasks->arrivals) {
      if (!a.spec || a.t < last || a.task_class >= w.classes.size() || a.tenant >= w.tenants.size())
        __builtin_trap();
      last = a.t;
      const auto& spec = *a.spec;
      if (spec.steps.empty() || spec.order.size() != spec.steps.size()) __builtin_trap();
      std::vector<bool> seen(spec.steps.size(), false);
      for (const auto i : spec.order) {
        const auto& after = spec.steps[i].after;
        for (std::size_t j = 0; j < after.size(); ++j) {
          if (after[j] >= spec.steps.size() || !seen[after[j]]) __builtin_trap();
          for (std::size_t k = 0; k < j; ++k)
            if (after[k] == after[j]) __builtin_trap();  // the driver waits for each once
        }
        seen[i] = true;
      }
      for (const auto& s : spec.steps)
        if (s.kind != tokenscope::bench::StepSpec::Kind::kModel && s.tool >= b.tasks->catalog.tools.size())
          __builtin_trap();
    }
  } catch (const tokenscope::UsageError&) {
  }
  return 0;
}
