// libFuzzer target: what a sharded bench reads from outside (bench/shard.h,
// rundir/shard_info.h). The first byte picks the parser: run.json's "shard"
// object (merge reads it from each shard's directory), --start-at, or
// --shard with its environment ("NAME=VALUE" lines). Any input either parses
// into a shard within its documented ranges or is refused with a UsageError.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "bench/shard.h"
#include "core/error.h"
#include "rundir/shard_info.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0: {
        const auto j = nlohmann::json::parse(text, nullptr, false);
        if (j.is_discarded()) return 0;
        const auto s = rundir::shard_info_from_json(j, "run.json");
        if (s.count < 1 || s.index >= s.count || s.start_at_unix_ns < 0 || s.ready_late_ns < 0)
          __builtin_trap();
        for (const auto& [cls, slo] : s.slos)
          if (!(slo.percentile > 0 && slo.percentile <= 100)) __builtin_trap();
        // What bench writes, merge reads back the same.
        const auto again = rundir::shard_info_from_json(rundir::to_json(s), "run.json");
        if (rundir::to_json(again) != rundir::to_json(s)) __builtin_trap();
        break;
      }
      case 1: {
        const std::int64_t ns = bench::parse_start_at(text);
        if (ns < 0) __builtin_trap();
        break;
      }
      default: {
        std::map<std::string, std::string> env;
        std::size_t at = 0;
        std::string_view option = text;
        if (const auto nl = text.find('\n'); nl != std::string_view::npos) {
          option = text.substr(0, nl);
          at = nl + 1;
          while (at < text.size()) {
            auto end = text.find('\n', at);
            if (end == std::string_view::npos) end = text.size();
            const auto line = text.substr(at, end - at);
            if (const auto eq = line.find('='); eq != std::string_view::npos)
              env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
            at = end + 1;
          }
        }
        const auto s = bench::parse_shard(option, [&](const char* name) -> const char* {
          const auto it = env.find(name);
          return it == env.end() ? nullptr : it->second.c_str();
        });
        if (s.count < 1 || s.index >= s.count || s.source.empty()) __builtin_trap();
      }
    }
  } catch (const UsageError&) {
  }
  return 0;
}
