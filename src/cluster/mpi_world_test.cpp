// The MPI layer as two (or more) ranks of one mpirun (CMake runs it as
// `mpirun -n 2 mpi_world_test`): every test is collective, so every rank
// runs every test in the same order.
#include "cluster/mpi_world.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"

namespace tokenscope::cluster {
namespace {

MpiWorld* g_world = nullptr;

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(MpiWorld, RanksAndTheLibrary) {
  ASSERT_GE(g_world->size(), 2) << "run under mpirun -n 2 (or more)";
  EXPECT_LT(g_world->rank(), g_world->size());
  EXPECT_NE(g_world->library().find("Open MPI"), std::string::npos) << g_world->library();
}

TEST(MpiWorld, OneHostsClocksAgreeWithinTheMeasuredBound) {
  // The ranks share this host's clock: the true offset is 0, so the
  // estimate must be within its own bound of it, whatever the delays were.
  const ClockOffset c = g_world->offset_to_root(16);
  EXPECT_EQ(c.rounds, 16u);
  if (g_world->rank() == 0) {
    EXPECT_EQ(c.offset_ns, 0);
    EXPECT_EQ(c.error_ns, 0);
  } else {
    EXPECT_GE(c.rtt_ns, 0);
    EXPECT_LE(std::abs(c.offset_ns), c.error_ns);
  }
}

TEST(MpiWorld, BroadcastAndGather) {
  const std::int64_t v = g_world->broadcast(g_world->rank() == 0 ? std::int64_t{-1234567890123} : 0);
  EXPECT_EQ(v, -1234567890123);
  const std::string s = g_world->broadcast(g_world->rank() == 0 ? std::string("runs/a\0b", 8) : "x");
  EXPECT_EQ(s, std::string("runs/a\0b", 8));
  const auto all = g_world->gather(100 + g_world->rank());
  if (g_world->rank() == 0) {
    ASSERT_EQ(all.size(), static_cast<std::size_t>(g_world->size()));
    for (int r = 0; r < g_world->size(); ++r) EXPECT_EQ(all[static_cast<std::size_t>(r)], 100 + r);
  } else {
    EXPECT_TRUE(all.empty());
  }
}

TEST(MpiWorld, BytesAndFilesReachRankZeroWhole) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mpi_world_test." + std::to_string(::getpid()) + "." + std::to_string(g_world->rank()));
  std::filesystem::create_directories(dir);
  // Each rank's file: its own bytes, every byte value, a few MiB.
  std::string content(3 << 20, '\0');
  std::mt19937 rng(static_cast<unsigned>(g_world->rank()) + 7);
  for (auto& ch : content) ch = static_cast<char>(rng());
  {
    std::ofstream(dir / "mine.bin", std::ios::binary)
        .write(content.data(), static_cast<std::streamsize>(content.size()));
  }
  if (g_world->rank() == 0) {
    for (int r = 1; r < g_world->size(); ++r) {
      EXPECT_EQ(g_world->receive(r), "rank " + std::to_string(r));
      EXPECT_EQ(g_world->receive(r), "");
      const auto to = dir / ("from-" + std::to_string(r));
      g_world->receive_file(r, to);
      std::string expected(content.size(), '\0');
      std::mt19937 other(static_cast<unsigned>(r) + 7);
      for (auto& ch : expected) ch = static_cast<char>(other());
      EXPECT_EQ(slurp(to), expected);
      EXPECT_FALSE(std::filesystem::exists(to.string() + ".part"));
      // A file the sender could not read: named, and the pairing kept.
      EXPECT_THROW(g_world->receive_file(r, dir / "never"), IoError);
      EXPECT_FALSE(std::filesystem::exists(dir / "never"));
      EXPECT_EQ(g_world->receive(r), "after");
    }
  } else {
    g_world->send(0, "rank " + std::to_string(g_world->rank()));
    g_world->send(0, "");
    g_world->send_file(0, dir / "mine.bin");
    g_world->send_file(0, dir / "no-such-file");
    g_world->send(0, "after");
  }
  g_world->barrier();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tokenscope::cluster

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  auto world = std::make_unique<tokenscope::cluster::MpiWorld>();
  tokenscope::cluster::g_world = world.get();
  const int rc = RUN_ALL_TESTS();
  world.reset();
  return rc;
}
