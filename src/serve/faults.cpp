#include "serve/faults.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "core/error.h"

namespace tokenscope::serve {

std::string_view fault_name(FaultKind k) {
  switch (k) {
    case FaultKind::kNone:
      return "none";
    case FaultKind::kHttp5xx:
      return "http_5xx";
    case FaultKind::kHttp429:
      return "http_429";
    case FaultKind::kReset:
      return "reset";
    case FaultKind::kStall:
      return "stall";
    case FaultKind::kMalformed:
      return "malformed";
    case FaultKind::kSlowFirstByte:
      return "slow_first_byte";
    case FaultKind::kWrongTool:
      return "wrong_tool";
    case FaultKind::kInvalidArguments:
      return "invalid_arguments";
    case FaultKind::kMalformedJson:
      return "malformed_json";
  }
  return "none";
}

namespace {
double parse_number(std::string_view s, std::string_view part) {
  double v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v))
    throw UsageError(fmt::format("--faults: expected a number in '{}', got '{}'", part, s));
  return v;
}
}  // namespace

FaultSpec parse_faults(std::string_view text) {
  return {std::string(text), parse_fault_spec(text)};
}

std::vector<FaultRule> parse_fault_spec(std::string_view spec) {
  std::vector<FaultRule> rules;
  double total = 0;
  std::size_t pos = 0;
  while (pos < spec.size()) {
    std::size_t end = spec.find(',', pos);
    if (end == std::string_view::npos) end = spec.size();
    const std::string_view part = spec.substr(pos, end - pos);
    pos = end + 1;
    if (part.empty()) continue;
    const std::size_t eq = part.find('=');
    if (eq == std::string_view::npos)
      throw UsageError(fmt::format("--faults: expected KIND=RATE[@MS], got '{}'", part));
    const std::string_view kind = part.substr(0, eq);
    std::string_view value = part.substr(eq + 1);
    FaultRule r;
    const std::size_t at = value.find('@');
    if (at != std::string_view::npos) {
      std::string_view ms = value.substr(at + 1);
      if (ms.size() > 2 && ms.substr(ms.size() - 2) == "ms") ms.remove_suffix(2);
      r.duration_ms = parse_number(ms, part);
      value = value.substr(0, at);
      if (r.duration_ms < 0 || r.duration_ms > 3.6e6)
        throw UsageError(fmt::format("--faults: duration in '{}' must be in [0, 3600000] ms", part));
    }
    r.rate = parse_number(value, part);
    if (r.rate < 0 || r.rate > 1)
      throw UsageError(fmt::format("--faults: rate in '{}' must be in [0, 1]", part));
    if (kind == "http_5xx")
      r.kind = FaultKind::kHttp5xx;
    else if (kind == "http_429")
      r.kind = FaultKind::kHttp429;
    else if (kind == "reset")
      r.kind = FaultKind::kReset;
    else if (kind == "stall")
      r.kind = FaultKind::kStall;
    else if (kind == "malformed")
      r.kind = FaultKind::kMalformed;
    else if (kind == "slow_first_byte")
      r.kind = FaultKind::kSlowFirstByte;
    else if (kind == "wrong_tool")
      r.kind = FaultKind::kWrongTool;
    else if (kind == "invalid_arguments")
      r.kind = FaultKind::kInvalidArguments;
    else if (kind == "malformed_json")
      r.kind = FaultKind::kMalformedJson;
    else
      throw UsageError(
          fmt::format("--faults: unknown kind '{}' (expected http_5xx, http_429, reset, stall, malformed, "
                      "slow_first_byte, wrong_tool, invalid_arguments, malformed_json)",
                      kind));
    if ((r.kind == FaultKind::kStall || r.kind == FaultKind::kSlowFirstByte) && at == std::string_view::npos)
      throw UsageError(fmt::format("--faults: '{}' needs a duration, e.g. {}=0.01@500ms", kind, kind));
    total += r.rate;
    rules.push_back(r);
  }
  if (total > 1.0 + 1e-12) throw UsageError(fmt::format("--faults: rates add up to {} (at most 1)", total));
  return rules;
}

Fault FaultPlan::next() {
  std::lock_guard lock(mutex_);
  const double u = rng_.uniform01();
  double acc = 0;
  for (const auto& r : rules_) {
    acc += r.rate;
    if (u < acc) return Fault{r.kind, r.duration_ms};
  }
  return {};
}

}  // namespace tokenscope::serve
