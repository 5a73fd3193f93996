// Another host's clock against this one's, from message round trips
// (Cristian's method, as NTP's on-wire exchange): this host reads its clock
// when it sends (t_send) and when the answer comes back (t_recv); the peer
// reads its own between the two (t_peer). The round with the shortest round
// trip bounds the offset best: the peer's reading lies somewhere in it, so
// the offset (peer - local) is t_peer - (t_send + t_recv) / 2 within half the
// round trip, whatever the two directions' delays were.
#pragma once

#include <cstdint>
#include <span>

#include <nlohmann/json.hpp>

namespace tokenscope::cluster {

struct PingRound {
  std::int64_t t_send_ns = 0;  // this host's clock when it sent
  std::int64_t t_peer_ns = 0;  // the peer's clock when it answered
  std::int64_t t_recv_ns = 0;  // this host's clock when the answer came
};

struct ClockOffset {
  std::int64_t offset_ns = 0;  // the peer's clock minus this host's
  std::int64_t error_ns = 0;   // |true offset - offset_ns| <= error_ns (half the best round trip)
  std::int64_t rtt_ns = 0;     // the best round trip
  std::uint32_t rounds = 0;    // rounds measured
};

// The estimate from the round with the shortest round trip (the first of
// equals). Throws std::invalid_argument when there is no round or a round's
// answer came before its send.
ClockOffset estimate_offset(std::span<const PingRound> rounds);

// {"offset_ns", "error_ns", "rtt_ns", "rounds"}.
nlohmann::json to_json(const ClockOffset& c);

}  // namespace tokenscope::cluster
