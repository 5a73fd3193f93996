#include "analyze/locality.h"

#include <cmath>
#include <list>
#include <unordered_set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/random.h"

namespace tokenscope::analyze {
namespace {

TEST(StackDistances, CountDistinctItemsSinceTheLastReference) {
  //                      a  b  c  a  b  b  c  d  a
  const std::vector<std::uint64_t> refs = {1, 2, 3, 1, 2, 2, 3, 4, 1};
  EXPECT_EQ(stack_distances(refs), (std::vector<std::int64_t>{-1, -1, -1, 2, 2, 0, 2, -1, 3}));
  EXPECT_TRUE(stack_distances({}).empty());
}

TEST(DecayFit, RecoversTheParametersOfExactPoints) {
  std::vector<double> d, r, w;
  for (double x : {1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0}) {
    d.push_back(x);
    r.push_back(0.8 * std::exp(-x / 120.0));
    w.push_back(10);
  }
  const auto f = fit_exponential_decay(d, r, w);
  EXPECT_NEAR(f.a, 0.8, 1e-4);
  EXPECT_NEAR(f.scale, 120.0, 0.1);
  // A flat rate has no decay.
  const auto flat = fit_exponential_decay(d, std::vector<double>(d.size(), 0.5), w);
  EXPECT_NEAR(flat.a, 0.5, 1e-9);
  EXPECT_TRUE(std::isinf(flat.scale) || flat.scale > 1e5);
}

// Requests of Mooncake-style hash-id prompts served by an LRU cache of
// `capacity` blocks: the cached tokens each would report, simulated here.
struct LruRun {
  workload::Workload w;
  std::vector<LocalityRequest> reqs;
  std::uint64_t reuses = 0, reuse_hits = 0;
};

LruRun lru_run(std::size_t capacity, std::uint32_t n) {
  LruRun run;
  auto& w = run.w;
  w.hash_block_tokens = 512;
  Rng rng(5);
  std::list<std::uint64_t> lru;  // front: most recent
  std::unordered_set<std::uint64_t> seen;
  for (std::uint32_t i = 0; i < n; ++i) {
    workload::Request r;
    r.id = i;
    r.source = workload::PromptSource::kHashIds;
    r.source_begin = static_cast<std::uint32_t>(w.hash_pool.size());
    // A popular prefix from 50 chains of 4 blocks, then 2 unique blocks.
    const std::uint64_t chain = rng.uniform_int(0, 49);
    for (std::uint64_t j = 0; j < 4; ++j) w.hash_pool.push_back(chain * 100 + j);
    for (std::uint64_t j = 0; j < 2; ++j) w.hash_pool.push_back(1'000'000 + i * 10 + j);
    r.source_count = 6;
    r.input_tokens = 6 * 512;
    // The LRU cache: a leading run of hits.
    std::int64_t hits = 0;
    bool run_on = true;
    for (std::uint32_t j = 0; j < 6; ++j) {
      const auto b = w.hash_pool[r.source_begin + j];
      auto it = std::find(lru.begin(), lru.end(), b);
      const bool hit = it != lru.end();
      if (run_on && hit)
        ++hits;
      else
        run_on = false;
      if (seen.count(b)) {
        ++run.reuses;
        run.reuse_hits += run_on && hit;
      }
      seen.insert(b);
      if (hit) lru.erase(it);
      lru.push_front(b);
      if (lru.size() > capacity) lru.pop_back();
    }
    w.requests.push_back(r);
    run.reqs.push_back({i, static_cast<Nanos>(i) * 1000, hits * 512});
  }
  return run;
}

TEST(KvLocality, HitsFallWithDistanceAndTheFitSaysHowFast) {
  const auto run = lru_run(60, 2000);
  const auto j = kv_locality(run.w, run.reqs);
  ASSERT_TRUE(j["available"].get<bool>()) << j.dump();
  EXPECT_EQ(j["requests"], 2000);
  EXPECT_EQ(j["references"], 12000);
  EXPECT_EQ(j["reuses"].get<std::uint64_t>(), run.reuses);
  EXPECT_EQ(j["reuse_hits"].get<std::uint64_t>(), run.reuse_hits);
  EXPECT_EQ(j["first_reference_hits"], 0);
  // Short distances hit (the cache holds 60 blocks), long ones miss.
  const auto& curve = j["curve"];
  ASSERT_GE(curve.size(), 3u);
  EXPECT_GT(curve.front()["hit_rate"].get<double>(), 0.95);
  EXPECT_LT(curve.back()["hit_rate"].get<double>(), 0.05);
  const auto& fit = j["fit"];
  ASSERT_FALSE(fit.is_null());
  EXPECT_GT(fit["scale_blocks"].get<double>(), 10);
  EXPECT_LT(fit["scale_blocks"].get<double>(), 500);
  EXPECT_EQ(fit["bootstrap"], 200);
  EXPECT_LE(fit["scale_blocks_ci95"][0].get<double>(), fit["scale_blocks"].get<double>());
  EXPECT_GE(fit["scale_blocks_ci95"][1].get<double>(), fit["scale_blocks"].get<double>());
  // A bigger cache: hits reach further.
  const auto big = kv_locality(lru_run(150, 2000).w, lru_run(150, 2000).reqs);
  EXPECT_GT(big["fit"]["scale_blocks"].get<double>(), fit["scale_blocks"].get<double>());
}

TEST(KvLocality, WithoutCachedTokensFromTheServerItSaysSo) {
  auto run = lru_run(60, 50);
  for (auto& r : run.reqs) r.cached_tokens = -1;
  const auto j = kv_locality(run.w, run.reqs);
  EXPECT_FALSE(j["available"].get<bool>());
  EXPECT_NE(j["reason"].get<std::string>().find("cached"), std::string::npos);
  workload::Workload text;
  text.requests.resize(3);
  for (auto& r : text.requests) r.source = workload::PromptSource::kText;
  const auto t = kv_locality(text, {{0, 0, 10}, {1, 1, 10}, {2, 2, 10}});
  EXPECT_FALSE(t["available"].get<bool>());
  EXPECT_EQ(t["requests_left_out_prompt_unknown"], 3);
}

TEST(KvLocality, SharedPrefixGroupsUseSixteenTokenBlocks) {
  workload::Workload w;
  for (std::uint32_t i = 0; i < 40; ++i) {
    workload::Request r;
    r.source = workload::PromptSource::kPrefixGroup;
    r.source_begin = i % 2;  // two groups
    r.source_count = 64;     // 4 shared blocks
    r.input_tokens = 100;    // + 2 unique full blocks
    w.requests.push_back(r);
  }
  std::vector<LocalityRequest> reqs;
  for (std::uint32_t i = 0; i < 40; ++i) reqs.push_back({i, i, i < 2 ? 0 : 64});  // every reuse hits
  const auto j = kv_locality(w, reqs);
  EXPECT_EQ(j["block_tokens"]["prefix_and_unique"], 16);
  EXPECT_EQ(j["references"], 240);
  EXPECT_EQ(j["reuses"], 38 * 4);
  EXPECT_EQ(j["reuse_hits"], 38 * 4);
  EXPECT_DOUBLE_EQ(j["reuse_hit_rate"].get<double>(), 1.0);
}

}  // namespace
}  // namespace tokenscope::analyze
