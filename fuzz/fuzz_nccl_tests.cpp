// nccl-tests output and Linux cpu lists (sysfs), both read from outside.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "probe/collectives.h"
#include "probe/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    const auto o = probe::parse_nccl_tests(input, "fuzz.txt");
    for (const auto& r : o.rows)
      if (!(r.time_us > 0) || r.bytes < 0) __builtin_trap();
    const auto a = probe::analyze_collective(o.collective, o.ranks, o.rows);
    if (std::isnan(a.peak_busbw_gbps)) __builtin_trap();
  } catch (const UsageError&) {
  }
  try {
    const auto cpus = probe::parse_cpu_list(input.substr(0, 256));
    for (std::size_t i = 1; i < cpus.size(); ++i)
      if (cpus[i] <= cpus[i - 1]) __builtin_trap();
  } catch (const UsageError&) {
  }
  return 0;
}
