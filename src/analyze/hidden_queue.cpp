#include "analyze/hidden_queue.h"

#include <algorithm>

namespace tokenscope::analyze {

HiddenQueue hidden_queue(std::vector<Nanos> sends, std::vector<Nanos> closes,
                         const std::vector<Nanos>& running_t, const std::vector<double>& running_v,
                         const std::vector<Nanos>& waiting_t, const std::vector<double>& waiting_v) {
  HiddenQueue h;
  if (running_t.empty() || sends.empty()) return h;
  std::sort(sends.begin(), sends.end());
  std::sort(closes.begin(), closes.end());
  const Nanos last = closes.empty() ? sends.back() : std::max(sends.back(), closes.back());
  std::size_t w = 0;
  double sum = 0;
  for (std::size_t k = 0; k < running_t.size() && k < running_v.size(); ++k) {
    const Nanos t = running_t[k];
    if (t < sends.front() || t > last) continue;
    while (w + 1 < waiting_t.size() && waiting_t[w + 1] <= t) ++w;
    const auto in_flight =
        static_cast<double>(std::upper_bound(sends.begin(), sends.end(), t) - sends.begin()) -
        static_cast<double>(std::upper_bound(closes.begin(), closes.end(), t) - closes.begin());
    const bool waiting_seen = w < waiting_t.size() && w < waiting_v.size() && waiting_t[w] <= t;
    const double seen = running_v[k] + (waiting_seen ? waiting_v[w] : 0.0);
    const double hidden = std::max(0.0, in_flight - seen);
    sum += hidden;
    h.max = std::max(h.max, hidden);
    h.in_flight_max = std::max(h.in_flight_max, in_flight);
    h.t.push_back(t);
    h.value.push_back(hidden);
    ++h.samples;
  }
  if (h.samples > 0) h.mean = sum / static_cast<double>(h.samples);
  return h;
}

nlohmann::json hidden_queue_json(const HiddenQueue& h) {
  return {{"mean", h.mean}, {"max", h.max}, {"in_flight_max", h.in_flight_max}, {"samples", h.samples}};
}

}  // namespace tokenscope::analyze
