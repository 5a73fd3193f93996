// The line-ownership simulator's inputs: access traces (text and binary) and
// layout maps. Whatever parses must replay without a crash, and a binary
// re-encoding must parse back to the same accesses.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "probe/access_trace.h"
#include "probe/line_sim.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    const auto trace = probe::parse_access_trace(input, "fuzz", 100000);
    const auto again = probe::parse_access_trace(probe::encode_binary_trace(trace), "fuzz.bin", 100000);
    if (again.size() != trace.size()) __builtin_trap();
    for (std::size_t i = 0; i < trace.size(); ++i)
      if (again[i].address != trace[i].address || again[i].thread != trace[i].thread ||
          again[i].size != trace[i].size || again[i].write != trace[i].write)
        __builtin_trap();
    std::vector<probe::LayoutEntry> layout;
    try {
      layout = probe::parse_layout_map(input, "fuzz.layout");
    } catch (const UsageError&) {
    }
    if (trace.size() <= 20000) {
      const auto r = probe::simulate_lines(trace, 64, layout);
      if (r.totals.misses_true + r.totals.misses_false + r.totals.cold_misses > r.totals.line_accesses)
        __builtin_trap();
      (void)probe::pad_layout(trace, layout, 64);
    }
  } catch (const UsageError&) {
  }
  return 0;
}
