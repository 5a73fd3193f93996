// Output-token log-probabilities (bench --logprobs; docs/metrics.md
// "Request record", field `logprobs`): the log-probability the server gave
// each generated token, kept per request as a fixed histogram with the count
// and the sum beside it, so that a record stays short however long the
// output and histograms of requests add up exactly (check item 11 pools
// them per run).
//
// The bins are fixed: bin i (0 <= i < 80) holds logprobs in
// (-(i + 1) / 4, -i / 4] nats, that is -logprob in [i / 4, (i + 1) / 4);
// bin 80 (the underflow bin) holds logprobs <= -20. A positive logprob (a
// server's rounding) counts in bin 0. In the sum each value is clamped to
// [-100, 0]: servers send a stand-in for log 0 (vLLM -9999.0, llama.cpp the
// lowest float), which would otherwise swamp the mean.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tokenscope {

struct LogprobHistogram {
  static constexpr double kBinWidth = 0.25;             // nats
  static constexpr std::size_t kRangeBins = 80;         // 0 to -20 nats
  static constexpr std::size_t kBins = kRangeBins + 1;  // and the underflow bin
  static constexpr double kSumFloor = -100.0;           // each value's floor in the sum

  std::uint64_t count = 0;  // logprobs added (every bin together)
  double sum = 0.0;         // their sum, each clamped to [kSumFloor, 0]
  std::array<std::uint64_t, kBins> bins{};

  // The bin of a logprob as above; NaN has none (kBins).
  static std::size_t bin_of(double logprob);
  // The lower and upper edge of bin i in nats (bin 80: -infinity to -20).
  static double bin_lower(std::size_t i);
  static double bin_upper(std::size_t i);

  // Adds one logprob; NaN is passed over (false).
  bool add(double logprob);
  void merge(const LogprobHistogram& other);
  // sum / count; NaN when empty.
  double mean() const;
  // The number of bins up to the last non-empty one (0 when empty): what
  // append_json writes of `bins`.
  std::size_t used_bins() const;
  // {"n":COUNT,"sum":SUM,"bins":[...]}: the sum with 4 decimals, the bins up
  // to the last non-empty one (trailing empty bins left out).
  void append_json(std::string& out) const;
};

}  // namespace tokenscope
