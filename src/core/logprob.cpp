#include "core/logprob.h"

#include <cmath>
#include <limits>

#include "core/json_out.h"

namespace tokenscope {

std::size_t LogprobHistogram::bin_of(double logprob) {
  if (std::isnan(logprob)) return kBins;
  if (logprob >= 0) return 0;
  const double scaled = -logprob / kBinWidth;  // exact: the width is a power of two
  if (scaled >= static_cast<double>(kRangeBins)) return kRangeBins;
  return static_cast<std::size_t>(scaled);
}

double LogprobHistogram::bin_lower(std::size_t i) {
  if (i >= kRangeBins) return -std::numeric_limits<double>::infinity();
  return -static_cast<double>(i + 1) * kBinWidth;
}

double LogprobHistogram::bin_upper(std::size_t i) {
  return 0.0 - static_cast<double>(i < kRangeBins ? i : kRangeBins) * kBinWidth;  // +0 for bin 0
}

bool LogprobHistogram::add(double logprob) {
  const std::size_t b = bin_of(logprob);
  if (b >= kBins) return false;
  ++bins[b];
  ++count;
  sum += std::fmin(0.0, std::fmax(kSumFloor, logprob));
  return true;
}

void LogprobHistogram::merge(const LogprobHistogram& other) {
  for (std::size_t i = 0; i < kBins; ++i) bins[i] += other.bins[i];
  count += other.count;
  sum += other.sum;
}

double LogprobHistogram::mean() const {
  return count ? sum / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN();
}

std::size_t LogprobHistogram::used_bins() const {
  std::size_t n = kBins;
  while (n > 0 && bins[n - 1] == 0) --n;
  return n;
}

void LogprobHistogram::append_json(std::string& out) const {
  using namespace jsonout;
  out += "{\"n\":";
  append_uint(out, count);
  out += ",\"sum\":";
  append_fixed(out, sum, 4);
  out += ",\"bins\":[";
  const std::size_t n = used_bins();
  for (std::size_t i = 0; i < n; ++i) {
    if (i) out += ',';
    append_uint(out, bins[i]);
  }
  out += "]}";
}

}  // namespace tokenscope
