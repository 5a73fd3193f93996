// Hardware event names as --events takes them (perf generic names, rNNN raw
// codes, libpfm4's PMU::EVENT:UMASK), comma-separated as on the command line.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "core/error.h"
#include "probe/perf_counters.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  std::stringstream in(std::string(reinterpret_cast<const char*>(data), size));
  std::string name;
  while (std::getline(in, name, ',')) {
    try {
      const auto e = probe::resolve_event(name);
      if (e.name != name || e.encoding.empty() || e.source.empty()) __builtin_trap();
    } catch (const UsageError&) {
    }
  }
  return 0;
}
