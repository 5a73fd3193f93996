#include "bench/schedule.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "core/error.h"

namespace tokenscope::bench {

namespace {
double parse_number(std::string_view s, std::string_view option, std::string_view spec) {
  double v = 0.0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v) || v < 0)
    throw UsageError(fmt::format("{} '{}': '{}' is not a number >= 0", option, spec, s));
  return v;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return out;
}
}  // namespace

std::vector<Stage> parse_stages(std::string_view spec, std::string_view option) {
  std::vector<Stage> out;
  for (std::string_view part : split(spec, ',')) {
    const std::size_t at = part.find('@');
    if (at == std::string_view::npos)
      throw UsageError(fmt::format("{} '{}': stage '{}' should be VALUE@SECONDS", option, spec, part));
    Stage st;
    st.value = parse_number(part.substr(0, at), option, spec);
    std::string_view dur = part.substr(at + 1);
    if (dur.ends_with("s")) dur.remove_suffix(1);
    st.duration_s = parse_number(dur, option, spec);
    if (st.duration_s <= 0)
      throw UsageError(fmt::format("{} '{}': stage '{}' needs a duration > 0 s", option, spec, part));
    out.push_back(st);
  }
  if (out.empty()) throw UsageError(fmt::format("{}: no stages", option));
  return out;
}

std::vector<double> parse_number_list(std::string_view spec, std::string_view option) {
  std::vector<double> out;
  for (std::string_view part : split(spec, ',')) {
    const double v = parse_number(part, option, spec);
    if (v <= 0) throw UsageError(fmt::format("{} '{}': values must be > 0", option, spec));
    out.push_back(v);
  }
  return out;
}

double total_duration_s(const std::vector<Stage>& stages) {
  double t = 0;
  for (const auto& s : stages) t += s.duration_s;
  return t;
}

std::vector<Nanos> stage_arrivals(const std::vector<Stage>& stages, const workload::ArrivalSettings& base,
                                  Rng& rng) {
  std::vector<Nanos> out;
  Nanos start = 0;
  for (const Stage& st : stages) {
    const Nanos len = seconds_to_nanos(st.duration_s);
    if (st.value > 0) {
      workload::ArrivalSettings a = base;
      a.rate_rps = st.value;
      workload::validate(a);
      for (Nanos t : workload::generate_arrivals_until(a, len, rng)) out.push_back(start + t);
    }
    start += len;
  }
  return out;
}

}  // namespace tokenscope::bench
