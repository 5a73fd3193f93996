// The observe module's data model (shared ARCHITECTURE.md "Sample"): every
// collector (a /metrics scrape, a /proc or cgroup read, an NVML poll, the
// simulator's steps) produces Observations, each stamped on the client's
// monotonic clock at receipt with the read's round-trip time as its
// uncertainty. An Observation holds the series as read (raw, always kept) and
// the canonical series mapped from them (canonical.h). samples.jsonl holds
// one Observation per line, appended as they arrive:
//
//   {"t_ns":123,"source":"server","rtt_ns":456,"server_t_ns":null,
//    "canonical":[["requests_running",{},3],...],
//    "raw":[["vllm:num_requests_running",{"model_name":"m"},3],...],
//    "derived":[["generation_tokens_per_s",{},812.5],...]}
//
// A collector that could not read writes one line with "error" instead of
// series ({"t_ns":..,"source":..,"error":"connection refused"}); a
// collector that cannot work at all (no NVML) writes one line with
// "unavailable" and stops.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/clock.h"

namespace tokenscope::observe {

struct Label {
  std::string name;
  std::string value;
  bool operator==(const Label&) const = default;
};
using Labels = std::vector<Label>;

// One value of one series.
struct Sample {
  std::string name;
  Labels labels;
  double value = 0.0;
};

struct Observation {
  Nanos t_ns = 0;      // client monotonic time at receipt (virtual time for sim)
  Nanos rtt_ns = 0;    // how long the read took: the uncertainty of t_ns
  std::string source;  // "server", "scrape:<url>", "gpu", "host", "process", "cgroup", "sim"
  // The server's own time for this exposition (epoch ns), when it carried timestamps.
  std::optional<std::int64_t> server_t_ns;
  std::vector<Sample> canonical;
  std::vector<Sample> raw;
  // Per-window series computed against the previous observation of the
  // same source (derived.h): counter rates, hit rates, histogram quantiles.
  std::vector<Sample> derived;
  std::string error;        // non-empty: the read failed (no series)
  std::string unavailable;  // non-empty: the collector cannot work here, and why
};

// A source of Observations, read on its own thread at its own interval by
// the Observer (observer.h).
class Collector {
 public:
  virtual ~Collector() = default;
  // "server", "gpu", "host", ... (Observation::source).
  virtual std::string source() const = 0;
  // One read. Never throws: a failed read comes back with Observation::error,
  // a collector that cannot work here with Observation::unavailable (the
  // Observer then stops calling it). Sets t_ns (clock at receipt) and rtt_ns.
  virtual Observation collect(const Clock& clock) = 0;
};

// One samples.jsonl line (no newline), appended to out.
void append_observation_json(std::string& out, const Observation& o);
// Parses one samples.jsonl line; throws std::runtime_error with the reason.
// Labels come back sorted by name, one per name (the last one given); of a
// key given twice the last one counts.
Observation parse_observation_json(std::string_view line);
// The same into out, reusing its vectors and strings (a reader of many
// lines: no allocation per line once they have grown). simdjson, one parser
// per thread; out is unspecified after a throw.
void parse_observation_json(std::string_view line, Observation& out);
namespace detail {
// The reference reader (nlohmann) that parse_observation_json follows and
// falls back to for the few lines simdjson does not take; for tests.
Observation parse_observation_json_nlohmann(std::string_view line);
}  // namespace detail

// The value of the first sample named name (any labels) in v; nullopt when none.
std::optional<double> find_value(const std::vector<Sample>& v, std::string_view name);
// The sum over every sample named name.
std::optional<double> sum_values(const std::vector<Sample>& v, std::string_view name);

}  // namespace tokenscope::observe
