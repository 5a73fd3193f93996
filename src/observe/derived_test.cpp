#include "observe/derived.h"

#include <cmath>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tokenscope::observe {
namespace {

Observation obs(Nanos t, std::vector<Sample> canonical) {
  Observation o;
  o.t_ns = t;
  o.source = "server";
  o.canonical = std::move(canonical);
  return o;
}

std::optional<double> derived(const Observation& o, std::string_view name) {
  return find_value(o.derived, name);
}

TEST(HistogramQuantile, InterpolatesInsideTheBucketAsPrometheusDoes) {
  // 10 observations <= 1, 10 more <= 2, none above.
  const std::vector<std::pair<double, double>> b = {{1, 10}, {2, 20}, {INFINITY, 20}};
  EXPECT_DOUBLE_EQ(*histogram_quantile(0.5, b), 1.0);   // rank 10: the top of the first bucket
  EXPECT_DOUBLE_EQ(*histogram_quantile(0.75, b), 1.5);  // rank 15: half-way through the second
  EXPECT_DOUBLE_EQ(*histogram_quantile(0.25, b), 0.5);  // the first bucket starts at 0
  // Ranks in the +Inf bucket answer the highest finite bound.
  EXPECT_DOUBLE_EQ(*histogram_quantile(0.99, std::vector<std::pair<double, double>>{{1, 1}, {INFINITY, 10}}),
                   1.0);
  EXPECT_FALSE(histogram_quantile(0.5, std::vector<std::pair<double, double>>{{1, 0}, {INFINITY, 0}}));
  EXPECT_FALSE(histogram_quantile(0.5, {}));
}

TEST(SeriesTracker, CounterRatesAndTheHitRatePerWindow) {
  SeriesTracker t;
  auto a = obs(0, {{"generation_tokens", {}, 100},
                   {"prefix_cache_queries_tokens", {}, 1000},
                   {"prefix_cache_hits_tokens", {}, 200},
                   {"requests_running", {}, 4}});
  t.feed(a);
  EXPECT_TRUE(a.derived.empty());  // no window before the first observation
  auto b = obs(2 * kNanosPerSecond, {{"generation_tokens", {}, 500},
                                     {"prefix_cache_queries_tokens", {}, 1400},
                                     {"prefix_cache_hits_tokens", {}, 500},
                                     {"requests_running", {}, 8}});
  t.feed(b);
  EXPECT_DOUBLE_EQ(*derived(b, "generation_tokens_per_s"), 200.0);
  EXPECT_DOUBLE_EQ(*derived(b, "prefix_cache_hit_rate"), 300.0 / 400.0);
  EXPECT_FALSE(derived(b, "requests_running_per_s"));  // gauges have no rate
  EXPECT_DOUBLE_EQ(*t.increase("generation_tokens"), 400.0);
  EXPECT_DOUBLE_EQ(*t.gauge_max("requests_running"), 8.0);
  const auto j = t.totals();
  EXPECT_DOUBLE_EQ(j["window_s"].get<double>(), 2.0);
  // A gauge over the run: the baseline read (before the first request) apart.
  EXPECT_DOUBLE_EQ(j["gauges"]["requests_running"]["mean"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(j["gauges"]["requests_running"]["before"].get<double>(), 4.0);
}

// What a previous run left (its KV cache still full at this run's baseline
// read) is not this run's peak.
TEST(SeriesTracker, TheBaselineReadIsNotTheRunsPeak) {
  SeriesTracker t;
  auto a = obs(0, {{"kv_cache_usage", {}, 0.1404}});
  t.feed(a);
  auto b = obs(kNanosPerSecond, {{"kv_cache_usage", {}, 0.1234}});
  t.feed(b);
  auto c = obs(2 * kNanosPerSecond, {{"kv_cache_usage", {}, 0.05}});
  t.feed(c);
  EXPECT_DOUBLE_EQ(*t.gauge_max("kv_cache_usage"), 0.1234);
  const auto g = t.totals()["gauges"]["kv_cache_usage"];
  EXPECT_DOUBLE_EQ(g["min"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(g["before"].get<double>(), 0.1404);
  // Only the baseline: no level of the run.
  SeriesTracker only;
  auto d = obs(0, {{"kv_cache_usage", {}, 0.3}});
  only.feed(d);
  EXPECT_FALSE(only.gauge_max("kv_cache_usage"));
}

TEST(SeriesTracker, AGaugesInfinityOrNanIsNoLevel) {
  // The exposition format allows +Inf and NaN; a KV usage of +Inf printed
  // "KV usage peak inf%".
  SeriesTracker t;
  auto before = obs(0, {{"kv_cache_usage", {}, 0.5}});
  t.feed(before);
  auto a = obs(kNanosPerSecond / 2, {{"kv_cache_usage", {}, 0.25}});
  t.feed(a);
  auto b = obs(kNanosPerSecond, {{"kv_cache_usage", {}, INFINITY}});
  t.feed(b);
  auto c = obs(2 * kNanosPerSecond, {{"kv_cache_usage", {}, NAN}, {"requests_running", {}, -INFINITY}});
  t.feed(c);
  EXPECT_DOUBLE_EQ(*t.gauge_max("kv_cache_usage"), 0.25);
  EXPECT_FALSE(t.gauge_max("requests_running"));
  EXPECT_DOUBLE_EQ(t.totals()["gauges"]["kv_cache_usage"]["mean"].get<double>(), 0.25);
}

TEST(SeriesTracker, ACounterResetCountsTheNewValueAsTheIncrease) {
  SeriesTracker t;
  for (auto [ts, v] : {std::pair{0, 100.0}, {1, 150.0}, {2, 30.0}, {3, 50.0}}) {
    auto o = obs(ts * kNanosPerSecond, {{"prompt_tokens", {}, v}});
    t.feed(o);
    if (ts == 2) {
      EXPECT_DOUBLE_EQ(*derived(o, "prompt_tokens_per_s"), 30.0);
    }
  }
  // 50 before the restart, 30 up to the reset read, 20 after.
  EXPECT_DOUBLE_EQ(*t.increase("prompt_tokens"), 100.0);
  EXPECT_EQ(t.resets(), 1u);
}

TEST(SeriesTracker, HistogramQuantilesOverTheWindowOnlyCountTheWindowsObservations) {
  auto hist = [](double le1, double le2, double inf, double sum) {
    return std::vector<Sample>{{"server_ttft_seconds_bucket", {{"le", "0.1"}}, le1},
                               {"server_ttft_seconds_bucket", {{"le", "1"}}, le2},
                               {"server_ttft_seconds_bucket", {{"le", "+Inf"}}, inf},
                               {"server_ttft_seconds_sum", {}, sum},
                               {"server_ttft_seconds_count", {}, inf}};
  };
  SeriesTracker t;
  auto a = obs(0, hist(100, 100, 100, 5.0));  // 100 fast requests before the window
  t.feed(a);
  auto b = obs(kNanosPerSecond, hist(100, 110, 110, 10.0));  // then 10 slow ones, all in (0.1, 1]
  t.feed(b);
  EXPECT_DOUBLE_EQ(*derived(b, "server_ttft_seconds_p50"), 0.1 + 0.9 * 0.5);
  EXPECT_DOUBLE_EQ(*derived(b, "server_ttft_seconds_mean"), 0.5);
  EXPECT_DOUBLE_EQ(*derived(b, "server_ttft_seconds_count_per_s"), 10.0);
  const auto j = t.totals();
  EXPECT_DOUBLE_EQ(j["histograms"]["server_ttft_seconds"]["count"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["histograms"]["server_ttft_seconds"]["p50"].get<double>(), 0.55);
}

TEST(SeriesTracker, ACounterThatAppearsDuringTheRunCountsFromZero) {
  SeriesTracker t;
  auto a = obs(0, {{"prompt_tokens", {}, 10}});
  t.feed(a);
  auto b = obs(kNanosPerSecond, {{"prompt_tokens", {}, 30}, {"requests_finished", {}, 7}});
  t.feed(b);
  EXPECT_DOUBLE_EQ(*derived(b, "requests_finished_per_s"), 7.0);
  auto c = obs(2 * kNanosPerSecond, {{"prompt_tokens", {}, 40}, {"requests_finished", {}, 19}});
  t.feed(c);
  EXPECT_DOUBLE_EQ(*t.increase("requests_finished"), 19.0);
  EXPECT_DOUBLE_EQ(*t.increase("prompt_tokens"), 30.0);
  EXPECT_EQ(t.resets(), 0u);
}

TEST(SeriesTracker, TheHitRateOfEachWindowIsKeptForTheRun) {
  SeriesTracker t;
  for (auto [ts, q, h] :
       {std::tuple{0, 100.0, 10.0}, {1, 200.0, 60.0}, {2, 200.0, 60.0}, {3, 300.0, 160.0}}) {
    auto o = obs(ts * kNanosPerSecond,
                 {{"prefix_cache_queries_tokens", {}, q}, {"prefix_cache_hits_tokens", {}, h}});
    t.feed(o);
  }
  // The window without queries has no rate.
  ASSERT_EQ(t.hit_rate_points().size(), 2u);
  EXPECT_EQ(t.hit_rate_points()[0], (std::pair<Nanos, double>{kNanosPerSecond, 0.5}));
  EXPECT_EQ(t.hit_rate_points()[1], (std::pair<Nanos, double>{3 * kNanosPerSecond, 1.0}));
}

TEST(SeriesTracker, FailedReadsAndSingleReadsGiveNoTotals) {
  SeriesTracker t;
  Observation bad;
  bad.error = "connection refused";
  t.feed(bad);
  auto a = obs(0, {{"prompt_tokens", {}, 1}});
  t.feed(a);
  EXPECT_TRUE(t.totals().is_null());
  EXPECT_EQ(t.observations(), 1u);
}

TEST(SeriesTracker, LabelledSeriesAreFollowedOneByOne) {
  SeriesTracker t;
  auto a = obs(0, {{"gpu_utilization", {{"gpu", "0"}}, 0.5}, {"gpu_utilization", {{"gpu", "1"}}, 0.9}});
  t.feed(a);
  auto b = obs(kNanosPerSecond,
               {{"gpu_utilization", {{"gpu", "0"}}, 0.7}, {"gpu_utilization", {{"gpu", "1"}}, 0.1}});
  t.feed(b);
  const auto j = t.totals();
  EXPECT_DOUBLE_EQ(j["gauges"]["gpu_utilization{gpu=\"0\"}"]["max"].get<double>(), 0.7);
  EXPECT_DOUBLE_EQ(j["gauges"]["gpu_utilization{gpu=\"1\"}"]["min"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(*t.gauge_max("gpu_utilization"), 0.7);  // 0.9 was gpu 1's baseline, before the run
}

}  // namespace
}  // namespace tokenscope::observe
