// libFuzzer target: sim --grid's YAML file (session/sim_grid.h). Any input
// either parses into a grid within its documented bounds, whose points'
// command-line words are well formed, or is refused with an InputError;
// the table of a grid whose runs all failed is built without a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "session/sim_grid.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  try {
    const session::Grid g =
        session::parse_grid(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    if (g.seeds.empty() || g.points.empty() || g.runs() > session::kMaxGridRuns) __builtin_trap();
    for (const auto& p : g.points) {
      if (p.labels.size() != g.axes.size()) __builtin_trap();
      for (const auto& w : p.args())
        if (w.empty()) __builtin_trap();
      for (const auto& o : p.options) {
        if (o.name.empty() || o.name[0] == '-') __builtin_trap();
        if (o.flag && !o.value.empty()) __builtin_trap();
      }
    }
    if (g.runs() <= 64) {
      std::vector<nlohmann::json> figures(g.runs(), nlohmann::json{{"error", "x"}});
      const auto t = session::grid_table(g, figures);
      if (!t["frontier"].empty()) __builtin_trap();
    }
  } catch (const UsageError&) {
  }
  return 0;
}
