#include "cluster/clock_offset.h"

#include <stdexcept>

namespace tokenscope::cluster {

ClockOffset estimate_offset(std::span<const PingRound> rounds) {
  if (rounds.empty()) throw std::invalid_argument("clock offset: no round trip measured");
  const PingRound* best = nullptr;
  for (const auto& r : rounds) {
    if (r.t_recv_ns < r.t_send_ns)
      throw std::invalid_argument("clock offset: a round trip's answer came before its send");
    if (!best || r.t_recv_ns - r.t_send_ns < best->t_recv_ns - best->t_send_ns) best = &r;
  }
  const std::int64_t rtt = best->t_recv_ns - best->t_send_ns;
  // The midpoint without overflow: t_send + rtt / 2 (rtt >= 0).
  const std::int64_t mid = best->t_send_ns + rtt / 2;
  return {.offset_ns = best->t_peer_ns - mid,
          .error_ns = rtt - rtt / 2,  // the half rounded up: the bound holds for odd round trips
          .rtt_ns = rtt,
          .rounds = static_cast<std::uint32_t>(rounds.size())};
}

nlohmann::json to_json(const ClockOffset& c) {
  return {{"offset_ns", c.offset_ns}, {"error_ns", c.error_ns}, {"rtt_ns", c.rtt_ns}, {"rounds", c.rounds}};
}

}  // namespace tokenscope::cluster
