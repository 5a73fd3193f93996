#include "workload/arrivals.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tokenscope::workload {

ArrivalKind parse_arrival_kind(std::string_view name) {
  if (name == "poisson") return ArrivalKind::kPoisson;
  if (name == "gamma") return ArrivalKind::kGamma;
  if (name == "constant") return ArrivalKind::kConstant;
  if (name == "trace") return ArrivalKind::kTrace;
  throw UsageError(
      fmt::format("--arrival: unknown process '{}' (expected poisson, gamma, constant or trace)", name));
}

std::string_view arrival_kind_name(ArrivalKind k) {
  switch (k) {
    case ArrivalKind::kPoisson:
      return "poisson";
    case ArrivalKind::kGamma:
      return "gamma";
    case ArrivalKind::kConstant:
      return "constant";
    case ArrivalKind::kTrace:
      return "trace";
  }
  return "poisson";
}

void validate(const ArrivalSettings& s) {
  if (s.kind != ArrivalKind::kTrace && !(s.rate_rps > 0.0))  // +inf: every request at t = 0
    throw UsageError(fmt::format("--rate: expected requests per second > 0 or inf, got {}", s.rate_rps));
  if (s.kind == ArrivalKind::kGamma && !(s.burstiness > 0.0 && std::isfinite(s.burstiness)))
    throw UsageError(fmt::format("--burstiness: expected a gamma shape > 0, got {}", s.burstiness));
  if (!(s.time_scale > 0.0 && std::isfinite(s.time_scale)))
    throw UsageError(fmt::format("--time-scale: expected a speed-up factor > 0, got {}", s.time_scale));
  if (!(s.jitter_bucket_ms >= 0.0 && std::isfinite(s.jitter_bucket_ms)))
    throw UsageError(
        fmt::format("--jitter-bucket-ms: expected milliseconds >= 0, got {}", s.jitter_bucket_ms));
}

namespace {
double next_gap_s(const ArrivalSettings& s, Rng& rng) {
  if (std::isinf(s.rate_rps)) return 0.0;  // every request at once, as vLLM's --request-rate inf
  switch (s.kind) {
    case ArrivalKind::kPoisson:
      return rng.exponential(s.rate_rps);
    case ArrivalKind::kGamma:
      return rng.gamma(s.burstiness, 1.0 / (s.rate_rps * s.burstiness));
    case ArrivalKind::kConstant:
      return 1.0 / s.rate_rps;
    case ArrivalKind::kTrace:
      break;
  }
  throw UsageError("trace arrivals need a trace");
}
}  // namespace

std::vector<Nanos> generate_arrivals(const ArrivalSettings& s, std::size_t n, Rng& rng) {
  validate(s);
  std::vector<Nanos> out;
  out.reserve(n);
  double t = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) t += next_gap_s(s, rng);
    out.push_back(seconds_to_nanos(t));
  }
  return out;
}

std::vector<Nanos> generate_arrivals_until(const ArrivalSettings& s, Nanos horizon_ns, Rng& rng) {
  validate(s);
  if (std::isinf(s.rate_rps))
    throw UsageError("--rate inf sends every request at t = 0: give their number with --num-requests N");
  std::vector<Nanos> out;
  double t = 0.0;
  while (true) {
    const Nanos ns = seconds_to_nanos(t);
    if (ns >= horizon_ns) break;
    out.push_back(ns);
    t += next_gap_s(s, rng);
  }
  return out;
}

void apply_arrivals(Workload& w, const ArrivalSettings& s, Rng& rng) {
  validate(s);
  if (s.kind == ArrivalKind::kTrace) {
    if (!w.has_timestamps)
      throw UsageError("--arrival trace: this trace has no timestamps; choose poisson, gamma or constant");
    const double bucket_ns = s.jitter_bucket_ms * 1e6;
    for (auto& r : w.requests) {
      double t = static_cast<double>(r.arrival_ns);
      if (bucket_ns > 0) t += rng.uniform01() * bucket_ns;
      r.arrival_ns = static_cast<Nanos>(std::llround(t / s.time_scale));
    }
  } else {
    // File order, fresh timing.
    std::stable_sort(w.requests.begin(), w.requests.end(),
                     [](const Request& a, const Request& b) { return a.id < b.id; });
    const auto times = generate_arrivals(s, w.requests.size(), rng);
    for (std::size_t i = 0; i < times.size(); ++i) w.requests[i].arrival_ns = times[i];
  }
  sort_by_arrival(w);
}

}  // namespace tokenscope::workload
