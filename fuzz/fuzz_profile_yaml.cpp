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
    for (const auto& c : p.decode_curve)
      if (!(c.seconds >= 0 && c.seconds <= 60.0) || !std::isfinite(c.stderr_)) __builtin_trap();
    for (std::size_t i = 1; i < p.decode_curve.size(); ++i)
      if (p.decode_curve[i].seqs <= p.decode_curve[i - 1].seqs) __builtin_trap();
    if (!p.decode_curve.empty() && (p.coef[0] != 0 || p.coef[3] != 0)) __builtin_trap();
    // The curve's extrapolation is bounded as decode_seq_us is: a million
    // decoding sequences cost at most 60 s plus a second each.
    if (!p.decode_curve.empty() && !(engine::curve_seconds(p.decode_curve, 1e6) <= 60.0 + 1e6 * 1.0))
      __builtin_trap();
    // What it writes reads back (a throw here is a failure: it escapes to libFuzzer as a crash).
    const engine::Profile q = engine::parse_profile(engine::profile_yaml(p), "again.yaml");
    for (std::size_t i = 0; i < engine::kProfileTerms; ++i)
      if (std::abs(q.coef[i] - p.coef[i]) > 1e-12 * p.coef[i] + 1e-300) __builtin_trap();
    if (q.decode_curve.size() != p.decode_curve.size()) __builtin_trap();
    for (std::size_t i = 0; i < p.decode_curve.size(); ++i)
      if (q.decode_curve[i].seqs != p.decode_curve[i].seqs ||
          std::abs(q.decode_curve[i].seconds - p.decode_curve[i].seconds) >
              1e-12 * p.decode_curve[i].seconds + 1e-300 ||
          std::abs(q.decode_curve[i].stderr_ - p.decode_curve[i].stderr_) >
              1e-12 * p.decode_curve[i].stderr_ + 1e-300)
        __builtin_trap();
    if (q.max_num_seqs != p.max_num_seqs || q.kv_capacity_tokens != p.kv_capacity_tokens ||
        q.attention != p.attention || q.notes.size() != p.notes.size())
      __builtin_trap();
  } catch (const InputError&) {
  } catch (const UsageError&) {
  }
  return 0;
}
