// Arrival processes. The whole schedule is computed before a run from a seeded
// generator (one seed per dimension), never during it.
//  * poisson:  exponential gaps with mean 1/rate;
//  * gamma:    gamma gaps with shape = burstiness and mean 1/rate, so the
//              coefficient of variation is 1/sqrt(burstiness) (1 = Poisson,
//              below 1 burstier), as in vLLM's benchmark;
//  * constant: gaps of exactly 1/rate;
//  * trace:    the trace's own offsets divided by time_scale (2 = twice as
//              fast); with jitter_bucket_ms > 0 each request moves by a
//              uniform amount in [0, bucket) first, to undo quantised
//              timestamps (the Mooncake trace uses 3,000 ms buckets).
// The first request arrives at t = 0.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/random.h"
#include "workload/workload.h"

namespace tokenscope::workload {

enum class ArrivalKind { kPoisson, kGamma, kConstant, kTrace };

ArrivalKind parse_arrival_kind(std::string_view name);  // throws UsageError
std::string_view arrival_kind_name(ArrivalKind k);

struct ArrivalSettings {
  ArrivalKind kind = ArrivalKind::kPoisson;
  double rate_rps = 1.0;          // poisson, gamma, constant; +inf: every request at t = 0
  double burstiness = 1.0;        // gamma shape
  double time_scale = 1.0;        // trace: speed-up factor
  double jitter_bucket_ms = 0.0;  // trace: de-quantisation bucket
};

// Throws UsageError naming the bad setting (rate <= 0, burstiness <= 0, ...).
void validate(const ArrivalSettings& s);

// n arrival times for a synthetic process (not kTrace), starting at 0.
std::vector<Nanos> generate_arrivals(const ArrivalSettings& s, std::size_t n, Rng& rng);
// Arrival times of a synthetic process up to (excluding) horizon_ns.
std::vector<Nanos> generate_arrivals_until(const ArrivalSettings& s, Nanos horizon_ns, Rng& rng);

// Sets the workload's arrival times: kTrace rescales (and jitters) the trace's
// own offsets, which must exist; the others replace them with a fresh
// schedule in file order. Re-sorts by arrival.
void apply_arrivals(Workload& w, const ArrivalSettings& s, Rng& rng);

}  // namespace tokenscope::workload
