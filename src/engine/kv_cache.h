// The paged KV cache with prefix caching, after vLLM V1's block pool:
//  * fixed-size blocks (block_size tokens), a pool of num_blocks, or an
//    unlimited pool that grows on demand (what-if studies);
//  * a full block is identified by a chained hash (the hash of its tokens and
//    of the previous block's hash), so equal hashes mean equal prefixes;
//  * a block is either in use (ref_count > 0) or free; free blocks that still
//    hold a cached prefix stay findable until the allocator reuses them;
//  * an unlimited pool never evicts: it reuses blocks without cached
//    content and creates new ones otherwise;
//  * free blocks queue in LRU order: freed blocks go to the tail (a request's
//    blocks in reverse order, so its tail is evicted first) and allocation
//    takes the head, evicting the cached hash it held;
//  * usage = 1 - free / total, with free cached blocks counted as free (as
//    vllm:kv_cache_usage_perc).
// Single-threaded: the engine owns it.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace tokenscope::engine {

using BlockId = std::int32_t;

// Open-addressing map from non-zero 64-bit hashes to block ids (linear
// probing, backward-shift deletion): the prefix cache's index. A slot holds
// its key and value side by side: a lookup is one cache line, which is what
// a fleet of replicas, whose indexes do not all fit in the core's cache,
// pays for (docs/performance.md "Fleets").
class BlockHashMap {
 public:
  std::optional<BlockId> find(std::uint64_t hash) const;
  // Inserts if absent; returns false (and changes nothing) if present.
  bool insert(std::uint64_t hash, BlockId block);
  // Erases hash if it maps to block.
  void erase(std::uint64_t hash, BlockId block);
  std::size_t size() const { return size_; }

 private:
  void grow();
  std::size_t slot_of(std::uint64_t hash) const { return static_cast<std::size_t>(hash) & mask_; }
  struct Slot {
    std::uint64_t key = 0;  // 0 = empty
    BlockId value = 0;
  };
  std::vector<Slot> slots_;
  std::size_t size_ = 0;
  std::size_t mask_ = 0;
};

class KvBlockPool {
 public:
  // num_blocks: nullopt for an unlimited pool.
  KvBlockPool(std::optional<std::uint32_t> num_blocks, bool prefix_caching);

  bool unlimited() const { return !capacity_; }
  std::optional<std::uint32_t> capacity() const { return capacity_; }
  bool prefix_caching() const { return prefix_caching_; }

  // Free blocks (cached or not) available to allocate; unlimited: effectively infinite.
  std::uint64_t num_free() const;
  std::uint32_t num_in_use() const { return in_use_; }
  std::uint32_t num_allocated_ever() const { return static_cast<std::uint32_t>(blocks_.size()); }
  // 1 - free/total; for an unlimited pool: in use / blocks created.
  double usage() const;

  // Number of leading hashes whose blocks are cached (in use or free).
  std::size_t cached_prefix_length(std::span<const std::uint64_t> hashes) const;
  // How many of the first n hashes' cached blocks sit in the free queue
  // (touching them takes them out of it).
  std::size_t free_among_cached(std::span<const std::uint64_t> hashes) const;
  // Takes a reference on the cached blocks of the first n hashes (which must
  // be cached) and appends their ids to out.
  void touch(std::span<const std::uint64_t> hashes, std::vector<BlockId>& out);
  // Allocates n fresh blocks (evicting cached content from the LRU head) and
  // appends them to out. The caller checks num_free() first.
  void allocate(std::size_t n, std::vector<BlockId>& out);
  // Registers a full block's hash (and an owner tag); no-op when caching is
  // off or the hash is already cached in another block. hash must not be 0.
  void cache(BlockId block, std::uint64_t hash, std::uint32_t tag = 0);
  // Drops a reference on each block, last block first; blocks reaching zero
  // go to the free queue's tail.
  void release(std::span<const BlockId> blocks);
  // Forgets the cached content of every free block cached with this tag
  // (the engine tags blocks by tenant); returns how many were dropped.
  std::size_t drop_cached_with_tag(std::uint32_t tag);
  // Hashes of the free cached blocks with this tag (for offload to host).
  std::vector<std::uint64_t> cached_hashes_with_tag(std::uint32_t tag) const;

  // Invariant check for tests: the free queue, ref counts and index agree.
  bool check_invariants() const;

 private:
  static constexpr BlockId kNone = -1;
  BlockId new_block();
  void queue_push_back(BlockId b);
  void queue_remove(BlockId b);
  BlockId queue_pop_front();
  void forget_hash(BlockId b);

  std::optional<std::uint32_t> capacity_;
  bool prefix_caching_;
  // A block's state in one place (24 bytes): allocating, freeing or
  // evicting a block touches one cache line of it, not one per field.
  struct Block {
    std::uint64_t hash = 0;  // 0 = no cached content
    std::int32_t ref = 0;
    std::uint32_t tag = 0;
    BlockId prev = kNone, next = kNone;  // the free queue
  };
  std::vector<Block> blocks_;
  BlockId head_ = kNone, tail_ = kNone;
  std::uint32_t free_count_ = 0;
  std::vector<BlockId> spare_;  // unlimited pools: free blocks without cached content
  std::uint32_t in_use_ = 0;
  BlockHashMap index_;
};

// The host-memory tier of the prefix cache (dynamic tenant reuse): KV blocks
// copied out of GPU memory, found by their chained hash, at most
// capacity_blocks of them. A block is used when it is stored (or stored
// again) and when a prefix hits it; a full pool evicts its least recently
// used block to store another. The hashes of evicted blocks are remembered
// (as many as the capacity, the oldest forgotten first) until they are
// stored again or forget_evicted() is called, so that a request that needs
// one can be counted as recomputing what the eviction lost. Single-threaded.
class HostKvPool {
 public:
  explicit HostKvPool(std::uint64_t capacity_blocks) : capacity_(capacity_blocks) {}

  std::uint64_t capacity() const { return capacity_; }
  std::uint64_t size() const { return lru_.size(); }
  bool contains(std::uint64_t hash) const { return held_.count(hash) != 0; }
  // Makes the block the most recently used, evicting the least recently used
  // one if the pool is full. Returns true when the block had to be copied in
  // (it was not held); a pool of capacity 0 stores nothing.
  bool store(std::uint64_t hash);
  // Makes a held block the most recently used (a prefix hit).
  void touch(std::uint64_t hash);
  // Whether the block was evicted (and not stored again since).
  bool evicted(std::uint64_t hash) const { return ghost_index_.count(hash) != 0; }
  void forget_evicted(std::uint64_t hash);
  std::uint64_t evictions() const { return evictions_; }
  // The held hashes, least recently used first (tests).
  std::vector<std::uint64_t> lru_order() const { return {lru_.begin(), lru_.end()}; }

 private:
  std::uint64_t capacity_;
  std::uint64_t evictions_ = 0;
  std::list<std::uint64_t> lru_;  // front: least recently used
  std::unordered_map<std::uint64_t, std::list<std::uint64_t>::iterator> held_;
  std::list<std::uint64_t> ghosts_;  // evicted, oldest first
  std::unordered_map<std::uint64_t, std::list<std::uint64_t>::iterator> ghost_index_;
};

}  // namespace tokenscope::engine
