// Helpers of the collectors' tests: a sample's value by name and labels.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "observe/observation.h"

namespace tokenscope::observe::testing {

// The value of the sample named `name` with exactly these labels.
inline std::optional<double> value(const std::vector<Sample>& v, std::string_view name,
                                   const Labels& labels = {}) {
  for (const Sample& s : v)
    if (s.name == name && s.labels == labels) return s.value;
  return std::nullopt;
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace tokenscope::observe::testing
