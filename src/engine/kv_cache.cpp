#include "engine/kv_cache.h"

#include <cassert>
#include <limits>

namespace tokenscope::engine {

// ---- BlockHashMap ------------------------------------------------------------

std::optional<BlockId> BlockHashMap::find(std::uint64_t hash) const {
  if (size_ == 0) return std::nullopt;
  for (std::size_t i = slot_of(hash);; i = (i + 1) & mask_) {
    if (slots_[i].key == hash) return slots_[i].value;
    if (slots_[i].key == 0) return std::nullopt;
  }
}

bool BlockHashMap::insert(std::uint64_t hash, BlockId block) {
  if ((size_ + 1) * 4 > slots_.size() * 3 || slots_.empty()) grow();
  for (std::size_t i = slot_of(hash);; i = (i + 1) & mask_) {
    if (slots_[i].key == hash) return false;
    if (slots_[i].key == 0) {
      slots_[i] = {hash, block};
      ++size_;
      return true;
    }
  }
}

void BlockHashMap::erase(std::uint64_t hash, BlockId block) {
  if (size_ == 0) return;
  std::size_t i = slot_of(hash);
  while (slots_[i].key != hash) {
    if (slots_[i].key == 0) return;
    i = (i + 1) & mask_;
  }
  if (slots_[i].value != block) return;
  // Backward-shift deletion keeps probe chains intact without tombstones.
  std::size_t hole = i;
  for (std::size_t j = (i + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
    const std::size_t home = slot_of(slots_[j].key);
    // Move j into the hole if its home is not cyclically in (hole, j].
    const bool in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!in_range) {
      slots_[hole] = slots_[j];
      hole = j;
    }
  }
  slots_[hole].key = 0;
  --size_;
}

void BlockHashMap::grow() {
  const std::size_t new_cap = slots_.empty() ? 1024 : slots_.size() * 2;
  std::vector<Slot> old(new_cap);
  old.swap(slots_);
  mask_ = new_cap - 1;
  size_ = 0;
  for (const Slot& s : old)
    if (s.key != 0) insert(s.key, s.value);
}

// ---- KvBlockPool ---------------------------------------------------------------

KvBlockPool::KvBlockPool(std::optional<std::uint32_t> num_blocks, bool prefix_caching)
    : capacity_(num_blocks), prefix_caching_(prefix_caching) {
  if (capacity_) {
    blocks_.reserve(*capacity_);
    for (std::uint32_t i = 0; i < *capacity_; ++i) queue_push_back(new_block());
  }
}

BlockId KvBlockPool::new_block() {
  const auto id = static_cast<BlockId>(blocks_.size());
  blocks_.emplace_back();
  return id;
}

void KvBlockPool::queue_push_back(BlockId b) {
  Block& k = blocks_[static_cast<std::size_t>(b)];
  k.prev = tail_;
  k.next = kNone;
  if (tail_ != kNone)
    blocks_[static_cast<std::size_t>(tail_)].next = b;
  else
    head_ = b;
  tail_ = b;
  ++free_count_;
}

void KvBlockPool::queue_remove(BlockId b) {
  Block& k = blocks_[static_cast<std::size_t>(b)];
  if (k.prev != kNone)
    blocks_[static_cast<std::size_t>(k.prev)].next = k.next;
  else
    head_ = k.next;
  if (k.next != kNone)
    blocks_[static_cast<std::size_t>(k.next)].prev = k.prev;
  else
    tail_ = k.prev;
  k.prev = k.next = kNone;
  --free_count_;
}

BlockId KvBlockPool::queue_pop_front() {
  const BlockId b = head_;
  queue_remove(b);
  return b;
}

void KvBlockPool::forget_hash(BlockId b) {
  auto& h = blocks_[static_cast<std::size_t>(b)].hash;
  if (h != 0) {
    index_.erase(h, b);
    h = 0;
  }
}

std::uint64_t KvBlockPool::num_free() const {
  if (!capacity_) return std::numeric_limits<std::uint32_t>::max();
  return free_count_;
}

double KvBlockPool::usage() const {
  if (!capacity_)
    return blocks_.empty() ? 0.0 : static_cast<double>(in_use_) / static_cast<double>(blocks_.size());
  if (*capacity_ == 0) return 0.0;
  return 1.0 - static_cast<double>(free_count_) / static_cast<double>(*capacity_);
}

std::size_t KvBlockPool::cached_prefix_length(std::span<const std::uint64_t> hashes) const {
  if (!prefix_caching_) return 0;
  std::size_t n = 0;
  while (n < hashes.size() && index_.find(hashes[n])) ++n;
  return n;
}

std::size_t KvBlockPool::free_among_cached(std::span<const std::uint64_t> hashes) const {
  std::size_t n = 0;
  for (std::uint64_t h : hashes) {
    const auto b = index_.find(h);
    if (b && blocks_[static_cast<std::size_t>(*b)].ref == 0) ++n;
  }
  return n;
}

void KvBlockPool::touch(std::span<const std::uint64_t> hashes, std::vector<BlockId>& out) {
  for (std::uint64_t h : hashes) {
    const auto b = index_.find(h);
    assert(b);
    Block& k = blocks_[static_cast<std::size_t>(*b)];
    if (k.ref == 0) {
      queue_remove(*b);
      ++in_use_;
    }
    ++k.ref;
    out.push_back(*b);
  }
}

void KvBlockPool::allocate(std::size_t n, std::vector<BlockId>& out) {
  for (std::size_t k = 0; k < n; ++k) {
    BlockId b;
    if (!capacity_) {
      // Unlimited: never evict cached content; reuse blocks that hold none.
      if (!spare_.empty()) {
        b = spare_.back();
        spare_.pop_back();
      } else {
        b = new_block();
      }
    } else {
      assert(head_ != kNone);
      b = queue_pop_front();
      forget_hash(b);
    }
    blocks_[static_cast<std::size_t>(b)].ref = 1;
    ++in_use_;
    out.push_back(b);
  }
}

void KvBlockPool::cache(BlockId block, std::uint64_t hash, std::uint32_t tag) {
  if (!prefix_caching_ || hash == 0) return;
  Block& k = blocks_[static_cast<std::size_t>(block)];
  if (k.hash != 0) return;  // already holds cached content
  if (index_.insert(hash, block)) {
    k.hash = hash;
    k.tag = tag;
  }
}

std::size_t KvBlockPool::drop_cached_with_tag(std::uint32_t tag) {
  std::size_t dropped = 0;
  for (BlockId b = head_; b != kNone; b = blocks_[static_cast<std::size_t>(b)].next) {
    const Block& k = blocks_[static_cast<std::size_t>(b)];
    if (k.hash != 0 && k.tag == tag) {
      forget_hash(b);
      ++dropped;
    }
  }
  return dropped;
}

std::vector<std::uint64_t> KvBlockPool::cached_hashes_with_tag(std::uint32_t tag) const {
  std::vector<std::uint64_t> out;
  for (BlockId b = head_; b != kNone; b = blocks_[static_cast<std::size_t>(b)].next) {
    const Block& k = blocks_[static_cast<std::size_t>(b)];
    if (k.hash != 0 && k.tag == tag) out.push_back(k.hash);
  }
  return out;
}

void KvBlockPool::release(std::span<const BlockId> blocks) {
  for (std::size_t k = blocks.size(); k-- > 0;) {
    const BlockId b = blocks[k];
    Block& blk = blocks_[static_cast<std::size_t>(b)];
    assert(blk.ref > 0);
    if (--blk.ref == 0) {
      --in_use_;
      if (!capacity_ && blk.hash == 0)
        spare_.push_back(b);
      else
        queue_push_back(b);
    }
  }
}

bool KvBlockPool::check_invariants() const {
  std::size_t queued = 0;
  for (BlockId b = head_; b != kNone; b = blocks_[static_cast<std::size_t>(b)].next) {
    if (blocks_[static_cast<std::size_t>(b)].ref != 0) return false;
    if (++queued > blocks_.size()) return false;
  }
  if (queued != free_count_) return false;
  for (BlockId b : spare_)
    if (blocks_[static_cast<std::size_t>(b)].ref != 0 || blocks_[static_cast<std::size_t>(b)].hash != 0)
      return false;
  if (!capacity_ && queued + spare_.size() + in_use_ != blocks_.size()) return false;
  std::size_t in_use = 0, hashed = 0;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const Block& k = blocks_[i];
    if (k.ref < 0) return false;
    if (k.ref > 0) ++in_use;
    if (k.hash != 0) {
      ++hashed;
      const auto found = index_.find(k.hash);
      if (!found || *found != static_cast<BlockId>(i)) return false;
    }
  }
  if (in_use != in_use_ || hashed != index_.size()) return false;
  if (capacity_ && in_use + free_count_ != *capacity_) return false;
  return true;
}

// ---- HostKvPool -----------------------------------------------------------------

bool HostKvPool::store(std::uint64_t hash) {
  if (const auto it = held_.find(hash); it != held_.end()) {
    lru_.splice(lru_.end(), lru_, it->second);
    return false;
  }
  if (capacity_ == 0) return false;
  forget_evicted(hash);
  if (lru_.size() >= capacity_) {
    const std::uint64_t victim = lru_.front();
    lru_.pop_front();
    held_.erase(victim);
    ++evictions_;
    ghost_index_[victim] = ghosts_.insert(ghosts_.end(), victim);
    if (ghosts_.size() > capacity_) {
      ghost_index_.erase(ghosts_.front());
      ghosts_.pop_front();
    }
  }
  held_[hash] = lru_.insert(lru_.end(), hash);
  return true;
}

void HostKvPool::touch(std::uint64_t hash) {
  if (const auto it = held_.find(hash); it != held_.end()) lru_.splice(lru_.end(), lru_, it->second);
}

void HostKvPool::forget_evicted(std::uint64_t hash) {
  const auto it = ghost_index_.find(hash);
  if (it == ghost_index_.end()) return;
  ghosts_.erase(it->second);
  ghost_index_.erase(it);
}

}  // namespace tokenscope::engine
