// The JSON-lines readers of the run directory (kernels.cpp) and of analyze
// (quantization.cpp): a number element as a double. Not a public interface.
#pragma once

#include <cstdint>

#include <simdjson.h>

namespace tokenscope::rundir::detail {

// A number element as a double (simdjson keeps integers apart); false when
// the element is not a number.
inline bool number_of(simdjson::dom::element v, double& out) {
  if (v.get_double().get(out) == simdjson::SUCCESS) return true;
  std::int64_t i = 0;
  if (v.get_int64().get(i) == simdjson::SUCCESS) return out = static_cast<double>(i), true;
  std::uint64_t u = 0;
  if (v.get_uint64().get(u) == simdjson::SUCCESS) return out = static_cast<double>(u), true;
  return false;
}

}  // namespace tokenscope::rundir::detail
