#include "workload/arrivals.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/stats.h"

namespace tokenscope::workload {
namespace {

std::vector<double> gaps_s(const std::vector<Nanos>& t) {
  std::vector<double> g;
  for (std::size_t i = 1; i < t.size(); ++i) g.push_back(nanos_to_s(t[i] - t[i - 1]));
  return g;
}

TEST(Arrivals, PoissonGapsPassKolmogorovSmirnov) {
  ArrivalSettings s;
  s.kind = ArrivalKind::kPoisson;
  s.rate_rps = 20.0;
  Rng rng(2024);
  auto g = gaps_s(generate_arrivals(s, 20001, rng));
  std::sort(g.begin(), g.end());
  const double n = static_cast<double>(g.size());
  double d = 0.0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double cdf = 1.0 - std::exp(-s.rate_rps * g[i]);
    d = std::max({d, cdf - static_cast<double>(i) / n, static_cast<double>(i + 1) / n - cdf});
  }
  // Critical value at alpha = 0.01 is 1.628/sqrt(n).
  EXPECT_LT(d, 1.628 / std::sqrt(n)) << "KS D = " << d;
  // And a deliberately wrong rate is rejected by the same test.
  double d_wrong = 0.0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double cdf = 1.0 - std::exp(-1.1 * s.rate_rps * g[i]);
    d_wrong = std::max(d_wrong, std::abs(cdf - static_cast<double>(i + 1) / n));
  }
  EXPECT_GT(d_wrong, 1.628 / std::sqrt(n));
}

TEST(Arrivals, GammaCoefficientOfVariationMatchesBurstiness) {
  for (double burstiness : {0.25, 1.0, 4.0}) {
    ArrivalSettings s;
    s.kind = ArrivalKind::kGamma;
    s.rate_rps = 10.0;
    s.burstiness = burstiness;
    Rng rng(99);
    RunningStats st;
    for (double x : gaps_s(generate_arrivals(s, 50001, rng))) st.add(x);
    EXPECT_NEAR(st.mean(), 0.1, 0.004) << burstiness;
    EXPECT_NEAR(st.stddev() / st.mean(), 1.0 / std::sqrt(burstiness), 0.04) << burstiness;
  }
}

TEST(Arrivals, ConstantIsExactAndDurationBounded) {
  ArrivalSettings s;
  s.kind = ArrivalKind::kConstant;
  s.rate_rps = 4.0;
  Rng rng(1);
  const auto t = generate_arrivals_until(s, 2 * kNanosPerSecond, rng);
  ASSERT_EQ(t.size(), 8u);
  for (std::size_t i = 0; i < t.size(); ++i) EXPECT_EQ(t[i], static_cast<Nanos>(i) * 250'000'000);
}

TEST(Arrivals, SameSeedSameSchedule) {
  ArrivalSettings s;
  Rng a(5), b(5);
  EXPECT_EQ(generate_arrivals(s, 1000, a), generate_arrivals(s, 1000, b));
}

TEST(Arrivals, TraceReplayScalesAndJittersWithinBuckets) {
  Workload w;
  w.has_timestamps = true;
  for (int i = 0; i < 100; ++i) {
    Request r;
    r.id = static_cast<std::uint64_t>(i);
    r.arrival_ns = (i / 10) * 3'000 * kNanosPerMilli;  // 3 s buckets of 10
    w.requests.push_back(r);
  }
  Workload scaled = w;
  ArrivalSettings s;
  s.kind = ArrivalKind::kTrace;
  s.time_scale = 2.0;
  Rng rng(3);
  apply_arrivals(scaled, s, rng);
  for (std::size_t i = 0; i < 100; ++i)
    EXPECT_EQ(scaled.requests[i].arrival_ns, w.requests[i].arrival_ns / 2);

  Workload jittered = w;
  s.time_scale = 1.0;
  s.jitter_bucket_ms = 3000;
  apply_arrivals(jittered, s, rng);
  std::size_t distinct = 0;
  for (std::size_t i = 0; i < 100; ++i) {
    const auto& r = jittered.requests[i];
    const Nanos original = w.requests[r.id].arrival_ns;
    EXPECT_GE(r.arrival_ns, original);
    EXPECT_LT(r.arrival_ns, original + 3'000 * kNanosPerMilli);
    if (i > 0 && r.arrival_ns != jittered.requests[i - 1].arrival_ns) ++distinct;
    if (i > 0) {
      EXPECT_GE(r.arrival_ns, jittered.requests[i - 1].arrival_ns);
    }
  }
  EXPECT_EQ(distinct, 99u);
}

TEST(Arrivals, BadSettingsAreUsageErrors) {
  ArrivalSettings s;
  s.rate_rps = -1;
  EXPECT_THROW(validate(s), UsageError);
  s.rate_rps = 1;
  s.kind = ArrivalKind::kGamma;
  s.burstiness = 0;
  EXPECT_THROW(validate(s), UsageError);
  EXPECT_THROW(parse_arrival_kind("uniform"), UsageError);
  Workload no_times;
  no_times.requests.resize(3);
  ArrivalSettings trace;
  trace.kind = ArrivalKind::kTrace;
  Rng rng(1);
  EXPECT_THROW(apply_arrivals(no_times, trace, rng), UsageError);
}

// --rate inf (vLLM's --request-rate inf): every request at t = 0, whatever
// the process; a duration cannot bound infinitely many, so it is an error
// that says what to give instead.
TEST(Arrivals, InfiniteRateSendsEveryRequestAtZero) {
  for (const auto kind : {ArrivalKind::kPoisson, ArrivalKind::kGamma, ArrivalKind::kConstant}) {
    ArrivalSettings s;
    s.kind = kind;
    s.rate_rps = std::numeric_limits<double>::infinity();
    s.burstiness = 0.5;
    Rng rng(3);
    EXPECT_NO_THROW(validate(s));
    EXPECT_EQ(generate_arrivals(s, 7, rng), std::vector<Nanos>(7, 0)) << arrival_kind_name(kind);
    try {
      generate_arrivals_until(s, 5 * kNanosPerSecond, rng);
      ADD_FAILURE() << "a duration with an infinite rate was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--num-requests"), std::string::npos) << e.what();
    }
  }
  ArrivalSettings nan;
  nan.rate_rps = std::nan("");
  EXPECT_THROW(validate(nan), UsageError);
}

}  // namespace
}  // namespace tokenscope::workload
