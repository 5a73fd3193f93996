// libFuzzer target: a server's profile (engine/profile.h), the YAML that
// --profile reads. Whatever it accepts must write back and read back alike,
// with coefficients inside the bounds the simulator's clock needs.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "engine/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  try {
    const engine::Profile p =
        engine::parse_profile(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    for (std::size_t i = 0; i < engine::kProfileTerms; ++i)
      if (!(p.coef[i] >= 0 && p.coef[i] <= 60.0) || !std::isfinite(p.stderr_[i])) __builtin_trap();
    // What it writes reads back (a throw here is a failure: it escapes to libFuzzer as a crash).
    const engine::Profile q = engine::parse_profile(engine::profile_yaml(p), "again.yaml");
    for (std::size_t i = 0; i < engine::kProfileTerms; ++i)
      if (std::abs(q.coef[i] - p.coef[i]) > 1e-12 * p.coef[i] + 1e-300) __builtin_trap();
    if (q.max_num_seqs != p.max_num_seqs || q.kv_capacity_tokens != p.kv_capacity_tokens ||
        q.attention != p.attention || q.notes.size() != p.notes.size())
      __builtin_trap();
  } catch (const InputError&) {
  } catch (const UsageError&) {
  }
  return 0;
}
