#include "workload/lengths.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "core/error.h"
#include "workload/trace_readers.h"

namespace tokenscope::workload {

namespace {
std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t next = s.find(sep, pos);
    out.push_back(s.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
    if (next == std::string_view::npos) return out;
    pos = next + 1;
  }
}

double number(std::string_view s, std::string_view option, std::string_view what, std::string_view spec) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v))
    throw UsageError(fmt::format("{}: expected a number for {} in {}, got {}", option, what,
                                 quote_input(spec), quote_input(s)));
  return v;
}

[[noreturn]] void bad_spec(std::string_view option, std::string_view spec) {
  throw UsageError(
      fmt::format("{}: expected fixed:N, uniform:MIN:MAX, lognormal:MEAN:SIGMA or empirical:FILE (optionally "
                  ":max=N), got {}",
                  option, quote_input(spec)));
}
}  // namespace

std::uint32_t LengthDistribution::sample(Rng& rng) const {
  double v = 1.0;
  switch (kind) {
    case LengthKind::kFixed:
      v = a;
      break;
    case LengthKind::kUniform:
      v = static_cast<double>(rng.uniform_int(static_cast<std::uint64_t>(a), static_cast<std::uint64_t>(b)));
      break;
    case LengthKind::kLognormal:
      v = std::round(rng.lognormal(std::log(a) - b * b / 2.0, b));
      break;
    case LengthKind::kEmpirical:
      v = values[rng.uniform_int(0, values.size() - 1)];
      break;
  }
  if (v < 1.0) v = 1.0;
  if (max != 0 && v > max) v = max;
  if (v > 1e9) v = 1e9;
  return static_cast<std::uint32_t>(v);
}

double LengthDistribution::mean() const {
  switch (kind) {
    case LengthKind::kFixed:
      return a;
    case LengthKind::kUniform:
      return (a + b) / 2.0;
    case LengthKind::kLognormal:
      return a;
    case LengthKind::kEmpirical: {
      double s = 0;
      for (auto v : values) s += v;
      return values.empty() ? 0.0 : s / static_cast<double>(values.size());
    }
  }
  return 0.0;
}

LengthDistribution parse_length_spec(std::string_view spec, std::string_view option, LengthRole role) {
  LengthDistribution d;
  d.spec = std::string(spec);
  auto parts = split(spec, ':');
  if (parts.size() >= 2 && parts.back().rfind("max=", 0) == 0) {
    const double m = number(parts.back().substr(4), option, "max", spec);
    if (m < 1 || m > 1e9) throw UsageError(fmt::format("{}: max must be in [1, 1e9], got {}", option, m));
    d.max = static_cast<std::uint32_t>(m);
    parts.pop_back();
  }
  const std::string_view kind = parts[0];
  if (kind == "fixed" && parts.size() == 2) {
    d.kind = LengthKind::kFixed;
    d.a = number(parts[1], option, "N", spec);
    if (d.a < 1 || d.a > 1e9 || d.a != std::floor(d.a))
      throw UsageError(fmt::format("{}: fixed length must be an integer in [1, 1e9], got {}", option, d.a));
  } else if (kind == "uniform" && parts.size() == 3) {
    d.kind = LengthKind::kUniform;
    d.a = number(parts[1], option, "MIN", spec);
    d.b = number(parts[2], option, "MAX", spec);
    if (d.a < 1 || d.b < d.a || d.b > 1e9 || d.a != std::floor(d.a) || d.b != std::floor(d.b))
      throw UsageError(fmt::format("{}: uniform needs integers 1 <= MIN <= MAX <= 1e9, got {}", option,
                                   quote_input(spec)));
  } else if (kind == "lognormal" && parts.size() == 3) {
    d.kind = LengthKind::kLognormal;
    d.a = number(parts[1], option, "MEAN", spec);
    d.b = number(parts[2], option, "SIGMA", spec);
    if (d.a < 1 || d.a > 1e9 || d.b < 0 || d.b > 5)
      throw UsageError(fmt::format("{}: lognormal needs MEAN in [1, 1e9] and SIGMA in [0, 5], got {}", option,
                                   quote_input(spec)));
  } else if (kind == "empirical" && parts.size() >= 2) {
    d.kind = LengthKind::kEmpirical;
    // The file name may itself contain ':'.
    const std::size_t at = spec.find(':');
    std::string file(spec.substr(at + 1));
    if (d.max != 0) file = file.substr(0, file.rfind(':'));
    TraceReadOptions opts;
    const Workload w = read_trace(file, opts);
    for (const auto& r : w.requests) {
      const std::uint32_t v = role == LengthRole::kInput ? r.input_tokens : r.output_tokens;
      if (v > 0) d.values.push_back(v);
    }
    if (d.values.empty())
      throw UsageError(fmt::format("{}: {} has no {} lengths", option, file,
                                   role == LengthRole::kInput ? "input" : "output"));
  } else {
    bad_spec(option, spec);
  }
  return d;
}

}  // namespace tokenscope::workload
