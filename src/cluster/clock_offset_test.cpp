#include "cluster/clock_offset.h"

#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "cluster/mpi_world.h"
#include "core/error.h"

namespace tokenscope::cluster {
namespace {

TEST(ClockOffset, TheShortestRoundTripBoundsTheOffset) {
  // The peer's clock is 5,000 ns ahead; the rounds' delays differ, the
  // second is the shortest (and asymmetric: 100 out, 300 back).
  const std::vector<PingRound> rounds = {
      {.t_send_ns = 1'000, .t_peer_ns = 1'000 + 2'000 + 5'000, .t_recv_ns = 1'000 + 2'000 + 2'000},
      {.t_send_ns = 10'000, .t_peer_ns = 10'000 + 100 + 5'000, .t_recv_ns = 10'000 + 100 + 300},
      {.t_send_ns = 20'000, .t_peer_ns = 20'000 + 900 + 5'000, .t_recv_ns = 20'000 + 900 + 100},
  };
  const ClockOffset c = estimate_offset(rounds);
  EXPECT_EQ(c.rtt_ns, 400);
  EXPECT_EQ(c.error_ns, 200);
  EXPECT_EQ(c.rounds, 3u);
  // 15,100 - 10,200 = 4,900: off by the delays' asymmetry, within the bound.
  EXPECT_EQ(c.offset_ns, 4'900);
  EXPECT_LE(std::abs(c.offset_ns - 5'000), c.error_ns);
}

TEST(ClockOffset, TheBoundHoldsForEveryDelaySplitAndOddRoundTrips) {
  for (const std::int64_t true_offset : {-7'777'777'777LL, -3LL, 0LL, 1LL, 123'456'789LL})
    for (std::int64_t out = 0; out <= 5; ++out)
      for (std::int64_t back = 0; back <= 5; ++back) {
        const std::int64_t t0 = 1'700'000'000'000'000'000LL;
        const std::vector<PingRound> r = {
            {.t_send_ns = t0, .t_peer_ns = t0 + out + true_offset, .t_recv_ns = t0 + out + back}};
        const ClockOffset c = estimate_offset(r);
        EXPECT_LE(std::abs(c.offset_ns - true_offset), c.error_ns) << out << " " << back;
        EXPECT_EQ(c.rtt_ns, out + back);
      }
}

TEST(ClockOffset, NoRoundOrABackwardRoundIsRefused) {
  EXPECT_THROW(estimate_offset({}), std::invalid_argument);
  const std::vector<PingRound> backward = {{.t_send_ns = 10, .t_peer_ns = 5, .t_recv_ns = 9}};
  EXPECT_THROW(estimate_offset(backward), std::invalid_argument);
}

TEST(ClockOffset, AsJson) {
  const auto j = to_json(ClockOffset{.offset_ns = -12, .error_ns = 3, .rtt_ns = 6, .rounds = 32});
  EXPECT_EQ(j.at("offset_ns"), -12);
  EXPECT_EQ(j.at("error_ns"), 3);
  EXPECT_EQ(j.at("rtt_ns"), 6);
  EXPECT_EQ(j.at("rounds"), 32);
}

TEST(MpiWorld, ABuildWithoutMpiSaysSo) {
  if (mpi_built()) GTEST_SKIP() << "built with Open MPI: mpi_world_test runs it under mpirun";
  try {
    MpiWorld w;
    FAIL() << "a world without MPI";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("built without Open MPI"), std::string::npos);
  }
}

}  // namespace
}  // namespace tokenscope::cluster
