#include "rundir/run_json.h"

#include <fmt/format.h>

namespace tokenscope::rundir {

nlohmann::json run_json_head(const RunHead& head) {
  nlohmann::json run;
  run["tool"] = {{"name", "tokenscope"}, {"version", TOKENSCOPE_VERSION}, {"command", head.command}};
  run["clock"] = head.clock;
  run["partial"] = head.partial;
  run["tags"] = head.tags;
  run["settings"] = {{"requested", head.requested}, {"effective", head.effective}};
  run["summary"] = nullptr;
  return run;
}

nlohmann::json virtual_clock() {
  return {{"monotonic_ns", 0},
          {"unix_ns", nullptr},
          {"virtual", true},
          {"definition", "virtual time from 0: no wall-clock anchor"}};
}

std::string error_rate_failure(const nlohmann::json& s, double max_error_rate, const std::string& url,
                               const std::string& first_error) {
  const auto total = s["requests_total"].get<std::uint64_t>();
  const auto failed = s["requests_failed"].get<std::uint64_t>();
  if (total == 0 || !(static_cast<double>(failed) > max_error_rate * static_cast<double>(total))) return "";
  std::string top;
  for (const auto& [name, n] : s["requests_by_outcome"].items())
    if (name != "ok" && n.get<std::uint64_t>() > 0)
      top += fmt::format("{}{} {}", top.empty() ? "" : ", ", n.get<std::uint64_t>(), name);
  std::string failure = fmt::format(
      "{} of {} requests to {} failed ({:.1f}%, over --max-error-rate {:g}%): {}", failed, total, url,
      100.0 * static_cast<double>(failed) / static_cast<double>(total), 100.0 * max_error_rate, top);
  if (!first_error.empty()) failure += "; the first: " + first_error;
  return failure;
}

}  // namespace tokenscope::rundir
