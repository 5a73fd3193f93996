#include "core/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/stats.h"

namespace tokenscope {

namespace {
constexpr std::uint64_t kSubCount = 1ULL << LogLinearHistogram::kSubBucketBits;
constexpr std::uint64_t kHalf = kSubCount / 2;
}  // namespace

std::uint64_t LogLinearHistogram::bucket_lower(std::size_t index) {
  if (index < kSubCount) return index;
  const std::uint64_t rel = index - kSubCount;
  const std::uint64_t shift = rel / kHalf + 1;
  const std::uint64_t top = rel % kHalf + kHalf;
  return top << shift;
}

std::uint64_t LogLinearHistogram::bucket_upper(std::size_t index) {
  if (index < kSubCount) return index;
  const std::uint64_t rel = index - kSubCount;
  const std::uint64_t shift = rel / kHalf + 1;
  const std::uint64_t top = rel % kHalf + kHalf;
  return ((top + 1) << shift) - 1;
}

void LogLinearHistogram::record(std::uint64_t value, std::uint64_t count) {
  if (count == 0) return;
  const std::size_t idx = bucket_index(value);
  if (idx >= counts_.size()) counts_.resize(idx + 1, 0);
  counts_[idx] += count;
  if (count_ == 0) {
    min_ = max_ = value;
  } else {
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
  }
  count_ += count;
  const unsigned __int128 v = value;
  if (count == 1) {  // the common case, without the multiplies by count
    sum_ += v;
    sum_sq_ += v * v;
    return;
  }
  sum_ += v * count;
  sum_sq_ += v * v * count;
}

void LogLinearHistogram::merge(const LogLinearHistogram& o) {
  if (o.count_ == 0) return;
  if (o.counts_.size() > counts_.size()) counts_.resize(o.counts_.size(), 0);
  for (std::size_t i = 0; i < o.counts_.size(); ++i) counts_[i] += o.counts_[i];
  if (count_ == 0) {
    min_ = o.min_;
    max_ = o.max_;
  } else {
    min_ = std::min(min_, o.min_);
    max_ = std::max(max_, o.max_);
  }
  count_ += o.count_;
  sum_ += o.sum_;
  sum_sq_ += o.sum_sq_;
}

void LogLinearHistogram::clear() {
  *this = LogLinearHistogram();
}

double LogLinearHistogram::mean() const {
  return count_ == 0 ? 0.0 : static_cast<double>(static_cast<long double>(sum_) / count_);
}

double LogLinearHistogram::stddev() const {
  if (count_ < 2) return 0.0;
  const long double n = count_;
  const long double sum = static_cast<long double>(sum_);
  const long double var = (static_cast<long double>(sum_sq_) - sum * sum / n) / (n - 1);
  return var <= 0 ? 0.0 : std::sqrt(static_cast<double>(var));
}

double LogLinearHistogram::quantile(double p) const {
  if (count_ == 0) return 0.0;
  const std::uint64_t rank = nearest_rank_index(count_, p) + 1;  // 1-based
  std::uint64_t acc = 0;
  for (std::size_t i = 0; i < counts_.size(); ++i) {
    acc += counts_[i];
    if (acc >= rank) {
      const double mid = (static_cast<double>(bucket_lower(i)) + static_cast<double>(bucket_upper(i))) / 2.0;
      return std::clamp(mid, static_cast<double>(min_), static_cast<double>(max_));
    }
  }
  return static_cast<double>(max_);
}

nlohmann::json LogLinearHistogram::to_json() const {
  nlohmann::json buckets = nlohmann::json::array();
  for (std::size_t i = 0; i < counts_.size(); ++i)
    if (counts_[i] != 0) buckets.push_back({i, counts_[i]});
  return {{"sub_bucket_bits", kSubBucketBits},
          {"count", count_},
          {"min", min_},
          {"max", max_},
          {"sum", static_cast<double>(sum_)},
          {"sum_sq", static_cast<double>(sum_sq_)},  // rounded to double in the export
          {"buckets", buckets}};
}

LogLinearHistogram LogLinearHistogram::from_json(const nlohmann::json& j) {
  if (j.at("sub_bucket_bits").get<int>() != kSubBucketBits)
    throw std::invalid_argument("histogram: sub_bucket_bits differs from this build's");
  LogLinearHistogram h;
  for (const auto& b : j.at("buckets")) {
    const auto idx = b.at(0).get<std::size_t>();
    const auto c = b.at(1).get<std::uint64_t>();
    if (idx > 100000) throw std::invalid_argument("histogram: bucket index out of range");
    if (idx >= h.counts_.size()) h.counts_.resize(idx + 1, 0);
    h.counts_[idx] += c;
    h.count_ += c;
  }
  if (h.count_ != j.at("count").get<std::uint64_t>())
    throw std::invalid_argument("histogram: bucket counts do not add up to count");
  h.min_ = j.at("min").get<std::uint64_t>();
  h.max_ = j.at("max").get<std::uint64_t>();
  const double sum = j.at("sum").get<double>();
  const double sum_sq = j.at("sum_sq").get<double>();
  if (!(sum >= 0) || !(sum_sq >= 0) || sum > 1e36 || sum_sq > 1e36)
    throw std::invalid_argument("histogram: sums out of range");
  h.sum_ = static_cast<unsigned __int128>(sum);
  h.sum_sq_ = static_cast<unsigned __int128>(sum_sq);
  return h;
}

}  // namespace tokenscope
