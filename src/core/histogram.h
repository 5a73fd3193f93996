// A mergeable log-linear histogram of non-negative integers (e.g. latencies in
// nanoseconds), for metrics with too many samples to keep (per-token gaps of a
// long run). Values below 2^kSubBucketBits are exact; above, each power of two
// is split into 2^(kSubBucketBits-1) equal buckets, so a bucket's width is at
// most 1/128 of its lower bound and the midpoint reported for a quantile is
// within 0.4% of every value in the bucket. Counts add on merge, so histograms
// of shards, ranks or runs combine exactly.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tokenscope {

class LogLinearHistogram {
 public:
  static constexpr int kSubBucketBits = 8;

  void record(std::uint64_t value, std::uint64_t count = 1);
  // record(value, 1), inline: for loops over every token gap of a run.
  void record_one(std::uint64_t value) {
    const std::size_t idx = bucket_index(value);
    if (idx >= counts_.size()) [[unlikely]]
      counts_.resize(idx + 1, 0);
    ++counts_[idx];
    if (count_ == 0) {
      min_ = max_ = value;
    } else {
      min_ = value < min_ ? value : min_;
      max_ = value > max_ ? value : max_;
    }
    ++count_;
    const unsigned __int128 v = value;
    sum_ += v;
    sum_sq_ += v * v;
  }
  void merge(const LogLinearHistogram& other);
  void clear();

  std::uint64_t count() const { return count_; }
  std::uint64_t min() const { return min_; }  // exact; 0 when empty
  std::uint64_t max() const { return max_; }  // exact; 0 when empty
  double mean() const;                        // exact (from the running sum)
  double stddev() const;                      // sample standard deviation, exact to rounding
  // Nearest-rank quantile: the midpoint of the bucket holding rank ceil(p*n),
  // clamped to [min, max]. 0 when empty.
  double quantile(double p) const;

  // Calls f(bucket_index, count) for each non-empty bucket, lowest first.
  template <class F>
  void for_each_bucket(F&& f) const {
    for (std::size_t i = 0; i < counts_.size(); ++i)
      if (counts_[i] != 0) f(i, counts_[i]);
  }

  // Bucket arithmetic, public for tests and for readers of exported data.
  static std::size_t bucket_index(std::uint64_t value) {
    constexpr std::uint64_t kSubCount = 1ULL << kSubBucketBits;
    constexpr std::uint64_t kHalf = kSubCount / 2;
    if (value < kSubCount) return static_cast<std::size_t>(value);
    const int magnitude = 63 - std::countl_zero(value);  // >= kSubBucketBits
    const int shift = magnitude - kSubBucketBits + 1;    // >= 1
    const std::uint64_t top = value >> shift;            // in [kHalf, kSubCount)
    return static_cast<std::size_t>(kSubCount + (static_cast<std::uint64_t>(shift) - 1) * kHalf +
                                    (top - kHalf));
  }
  static std::uint64_t bucket_lower(std::size_t index);
  static std::uint64_t bucket_upper(std::size_t index);  // inclusive

  // Sparse export: {"sub_bucket_bits", "count", "min", "max", "sum", "sum_sq",
  // "buckets": [[index, count], ...]}; from_json() reads it back.
  nlohmann::json to_json() const;
  static LogLinearHistogram from_json(const nlohmann::json& j);

 private:
  std::vector<std::uint64_t> counts_;
  std::uint64_t count_ = 0;
  std::uint64_t min_ = 0;
  std::uint64_t max_ = 0;
  unsigned __int128 sum_ = 0;     // exact
  unsigned __int128 sum_sq_ = 0;  // exact
};

}  // namespace tokenscope
