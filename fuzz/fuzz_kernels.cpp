// libFuzzer target: check item 9's CUPTI kernel records in JSON lines
// (rundir/kernels.h), the probe's lines and a run's samples.jsonl lines
// mixed. Any input either reads into an inventory that keeps its contract
// (kernels sorted by unique non-empty name, each launched at least once, its
// median between its shortest and longest launch, the totals adding up, the
// diff against itself empty with every first-launch excess equal), or is
// refused with an InputError.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "analyze/kernel_diff.h"
#include "core/error.h"
#include "rundir/kernels.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  try {
    const auto k =
        rundir::parse_kernel_lines(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.jsonl");
    if (k.kernels.empty() || k.launches == 0) __builtin_trap();
    std::uint64_t launches = 0;
    std::int64_t total = 0;
    for (std::size_t i = 0; i < k.kernels.size(); ++i) {
      const auto& s = k.kernels[i];
      if (s.name.empty() || (i > 0 && !(k.kernels[i - 1].name < s.name))) __builtin_trap();
      if (s.launches == 0 || s.total_ns < 0 || s.first_duration_ns < 0 || s.first_start_ns < 0)
        __builtin_trap();
      if (!(s.median_ns >= 0) || s.median_ns > static_cast<double>(s.total_ns)) __builtin_trap();
      if (s.first_duration_ns > s.total_ns) __builtin_trap();
      if (const auto e = s.first_excess(); e && (!std::isfinite(*e) || *e < -1)) __builtin_trap();
      if (k.find(s.name) != &s) __builtin_trap();
      launches += s.launches;
      total += s.total_ns;
    }
    if (launches != k.launches || total != k.total_ns) __builtin_trap();
    const auto d = analyze::diff_kernels(k, k);
    if (!d.new_kernels.empty() || !d.gone_kernels.empty() || d.common != k.kernels.size()) __builtin_trap();
    if (d.new_time_share != 0 || d.base_excess != d.cand_excess) __builtin_trap();
  } catch (const InputError&) {
  }
  return 0;
}
