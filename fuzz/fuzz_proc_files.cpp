// The /proc and cgroup v2 file parsers of the host, process and cgroup
// collectors (observe/proc_files.h): every parser gets every input. Each
// either returns values that keep the format's promises or throws
// InputError; anything else (another exception, a crash) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "observe/proc_files.h"

namespace {

template <typename F>
void parse(F fn) {
  try {
    fn();
  } catch (const tokenscope::InputError&) {
  }
}

void check_pressure(const tokenscope::observe::Pressure& p) {
  for (const auto* l : {p.some ? &*p.some : nullptr, p.full ? &*p.full : nullptr})
    if (l && !(l->avg10 >= 0 && l->avg10 <= 100 && l->avg60 >= 0 && l->avg60 <= 100 && l->avg300 >= 0 &&
               l->avg300 <= 100))
      __builtin_trap();
  if (!p.some && !p.full) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope::observe;
  const std::string input(reinterpret_cast<const char*>(data), size);
  parse([&] { parse_proc_stat(input, "stat"); });
  parse([&] {
    for (const MeminfoEntry& e : parse_meminfo(input, "meminfo"))
      if (e.name.empty() || (e.bytes && e.value % 1024 != 0)) __builtin_trap();
  });
  parse([&] { check_pressure(parse_pressure(input, "pressure")); });
  parse([&] {
    for (const NetDevice& d : parse_net_dev(input, "net/dev"))
      if (d.name.empty()) __builtin_trap();
  });
  parse([&] { parse_pid_stat(input, "stat"); });
  parse([&] { parse_pid_status(input, "status"); });
  parse([&] {
    const PidCgroup c = parse_pid_cgroup(input, "cgroup");
    if (c.unified_path && (c.unified_path->empty() || c.unified_path->front() != '/')) __builtin_trap();
  });
  parse([&] {
    for (const auto& [key, value] : parse_flat_keyed(input, "cpu.stat"))
      if (key.empty()) __builtin_trap();
  });
  parse([&] { parse_single_value(input, "memory.current"); });
  parse([&] {
    for (const IoStatDevice& d : parse_io_stat(input, "io.stat"))
      if (d.device.find(':') == std::string::npos) __builtin_trap();
  });
  return 0;
}
