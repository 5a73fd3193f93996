#include "engine/kv_cache.h"

#include <gtest/gtest.h>

#include <unordered_map>

#include "core/random.h"

namespace tokenscope::engine {
namespace {

TEST(BlockHashMap, AgreesWithStdMapUnderRandomOperations) {
  BlockHashMap m;
  std::unordered_map<std::uint64_t, BlockId> ref;
  Rng rng(12);
  for (int i = 0; i < 200000; ++i) {
    // Few distinct keys with colliding low bits, to exercise probing and deletion.
    const std::uint64_t key = (rng.uniform_int(1, 3000) << 20) | 5;
    const auto value = static_cast<BlockId>(rng.uniform_int(0, 10));
    if (rng.uniform01() < 0.6) {
      const bool inserted = m.insert(key, value);
      EXPECT_EQ(inserted, ref.emplace(key, value).second);
    } else {
      auto it = ref.find(key);
      const BlockId v = it != ref.end() && rng.uniform01() < 0.8 ? it->second : value;
      m.erase(key, v);
      if (it != ref.end() && it->second == v) ref.erase(it);
    }
    if (i % 997 == 0) {
      ASSERT_EQ(m.size(), ref.size());
      for (const auto& [k, v] : ref) ASSERT_EQ(m.find(k), std::optional<BlockId>(v));
    }
  }
}

TEST(KvBlockPool, UsageCountsFreeCachedBlocksAsFree) {
  KvBlockPool pool(10, true);
  std::vector<BlockId> blocks;
  pool.allocate(4, blocks);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.4);
  pool.cache(blocks[0], 111);
  pool.cache(blocks[1], 222);
  pool.release(blocks);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
  EXPECT_EQ(pool.num_free(), 10u);
  const std::uint64_t hashes[] = {111, 222, 333};
  EXPECT_EQ(pool.cached_prefix_length(hashes), 2u);
  EXPECT_TRUE(pool.check_invariants());
}

TEST(KvBlockPool, EvictsLeastRecentlyFreedAndRequestTailFirst) {
  KvBlockPool pool(4, true);
  std::vector<BlockId> a;
  pool.allocate(4, a);
  for (std::size_t i = 0; i < 4; ++i) pool.cache(a[i], 100 + i);
  pool.release(a);  // queue: a3 a2 a1 a0 (the request's tail first)
  std::vector<BlockId> b;
  pool.allocate(1, b);
  EXPECT_EQ(b[0], a[3]);
  const std::uint64_t prefix[] = {100, 101, 102, 103};
  EXPECT_EQ(pool.cached_prefix_length(prefix), 3u);  // block 103 evicted, 100..102 survive
  std::vector<BlockId> touched;
  pool.touch(std::span<const std::uint64_t>(prefix, 2), touched);
  EXPECT_EQ(touched, (std::vector<BlockId>{a[0], a[1]}));
  EXPECT_EQ(pool.num_free(), 1u);  // a2 is the only free block left
  EXPECT_EQ(pool.num_in_use(), 3u);
  EXPECT_TRUE(pool.check_invariants());
}

TEST(KvBlockPool, DuplicateHashesKeepOneCachedCopy) {
  KvBlockPool pool(4, true);
  std::vector<BlockId> a;
  pool.allocate(2, a);
  pool.cache(a[0], 7);
  pool.cache(a[1], 7);
  pool.release(a);
  EXPECT_TRUE(pool.check_invariants());
  std::vector<BlockId> t;
  const std::uint64_t h[] = {7};
  pool.touch(h, t);
  EXPECT_EQ(t[0], a[0]);
}

TEST(KvBlockPool, UnlimitedGrowsAndCachingOffNeverHits) {
  KvBlockPool unlimited(std::nullopt, true);
  std::vector<BlockId> blocks;
  unlimited.allocate(100000, blocks);
  EXPECT_EQ(unlimited.num_in_use(), 100000u);
  EXPECT_TRUE(unlimited.unlimited());
  KvBlockPool off(4, false);
  std::vector<BlockId> b;
  off.allocate(1, b);
  off.cache(b[0], 9);
  const std::uint64_t h[] = {9};
  EXPECT_EQ(off.cached_prefix_length(h), 0u);
}

TEST(KvBlockPool, DropAndListByTag) {
  KvBlockPool pool(6, true);
  std::vector<BlockId> a;
  pool.allocate(4, a);
  pool.cache(a[0], 1, 0);
  pool.cache(a[1], 2, 1);
  pool.cache(a[2], 3, 1);
  pool.release(a);
  EXPECT_EQ(pool.cached_hashes_with_tag(1).size(), 2u);
  EXPECT_EQ(pool.drop_cached_with_tag(1), 2u);
  const std::uint64_t h[] = {2};
  EXPECT_EQ(pool.cached_prefix_length(h), 0u);
  const std::uint64_t h0[] = {1};
  EXPECT_EQ(pool.cached_prefix_length(h0), 1u);
  EXPECT_TRUE(pool.check_invariants());
}

TEST(HostKvPool, EvictsTheLeastRecentlyUsedAndRemembersWhatItEvicted) {
  HostKvPool pool(3);
  EXPECT_TRUE(pool.store(11));
  EXPECT_TRUE(pool.store(12));
  EXPECT_TRUE(pool.store(13));
  EXPECT_EQ(pool.lru_order(), (std::vector<std::uint64_t>{11, 12, 13}));
  pool.touch(11);                // a hit
  EXPECT_FALSE(pool.store(12));  // already held: no copy, most recent now
  EXPECT_EQ(pool.lru_order(), (std::vector<std::uint64_t>{13, 11, 12}));
  EXPECT_EQ(pool.evictions(), 0u);
  EXPECT_TRUE(pool.store(14));  // full: 13 goes
  EXPECT_EQ(pool.lru_order(), (std::vector<std::uint64_t>{11, 12, 14}));
  EXPECT_EQ(pool.evictions(), 1u);
  EXPECT_FALSE(pool.contains(13));
  EXPECT_TRUE(pool.evicted(13));
  EXPECT_TRUE(pool.store(13));  // back: 11 goes, 13 is no longer "evicted"
  EXPECT_FALSE(pool.evicted(13));
  EXPECT_TRUE(pool.evicted(11));
  EXPECT_EQ(pool.lru_order(), (std::vector<std::uint64_t>{12, 14, 13}));
  EXPECT_EQ(pool.evictions(), 2u);
  pool.forget_evicted(11);
  EXPECT_FALSE(pool.evicted(11));
  // At most `capacity` evicted hashes are remembered, the oldest forgotten first.
  for (std::uint64_t h = 20; h < 26; ++h) pool.store(h);  // evicts 12, 14, 13, 20, 21, 22
  EXPECT_EQ(pool.evictions(), 8u);
  EXPECT_EQ(pool.size(), 3u);
  EXPECT_FALSE(pool.evicted(12));
  EXPECT_FALSE(pool.evicted(13));
  EXPECT_TRUE(pool.evicted(20));
  EXPECT_TRUE(pool.evicted(22));
}

TEST(HostKvPool, CapacityZeroStoresNothing) {
  HostKvPool pool(0);
  EXPECT_FALSE(pool.store(5));
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_EQ(pool.evictions(), 0u);
  EXPECT_FALSE(pool.evicted(5));
}

}  // namespace
}  // namespace tokenscope::engine
