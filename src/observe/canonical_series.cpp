#include <string_view>

#include "observe/canonical.h"

namespace tokenscope::observe {

const CanonicalDefinition* find_canonical(std::string_view name) {
  for (const auto& d : kCanonicalSeries)
    if (d.name == name) return &d;
  for (std::string_view suffix : {"_bucket", "_sum", "_count"})
    if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix) {
      const auto family = name.substr(0, name.size() - suffix.size());
      for (const auto& d : kCanonicalSeries)
        if (d.name == family && d.kind == SeriesKind::kHistogram) return &d;
    }
  return nullptr;
}

}  // namespace tokenscope::observe
