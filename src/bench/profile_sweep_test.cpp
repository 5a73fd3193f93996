#include "bench/profile_sweep.h"

#include <gtest/gtest.h>

#include <atomic>
#include <sstream>

#include "core/error.h"

namespace tokenscope::bench {
namespace {

std::vector<std::string> names(const std::vector<ProfileCell>& cells) {
  std::vector<std::string> out;
  for (const auto& c : cells) out.push_back(c.name);
  return out;
}

TEST(ProfileSweep, CellsRunCheapOnesFirstUpToTheCapAndWhatASlotHolds) {
  ProfileSweepSettings s;
  s.prompt_tokens = {512, 32, 2048};
  s.output_tokens = 16;
  s.waves = 3;
  // Cap 4: batches 1, 2, 4; a slot of 1024 tokens leaves the 2048-token prompt out.
  const auto cells = plan_profile_cells(s, 4, 1024);
  EXPECT_EQ(names(cells),
            (std::vector<std::string>{"b1-p32", "b2-p32", "b4-p32", "b1-p512", "b2-p512", "b4-p512"}));
  EXPECT_EQ(cells[2].requests, 12u);
  EXPECT_EQ(cells[2].output, 16u);
  // The cap unknown: up to 16, so that it shows in behaviour.
  EXPECT_EQ(plan_profile_cells(s, 0, 0).size(), 3u * 5u);
}

TEST(ProfileSweep, MoreOutputLengthsMakeCellsOfTheirOwn) {
  ProfileSweepSettings s;
  s.prompt_tokens = {32, 512};
  s.batch_sizes = {1, 2};
  s.output_tokens = 16;
  s.more_output_tokens = {256, 16};  // a repeat of the first is not a second set
  // A slot of 600 tokens holds 512 + 16 but not 512 + 256.
  const auto cells = plan_profile_cells(s, 4, 600);
  EXPECT_EQ(names(cells), (std::vector<std::string>{"b1-p32", "b2-p32", "b1-p512", "b2-p512", "b1-p32-o256",
                                                    "b2-p32-o256"}));
  EXPECT_EQ(cells.back().output, 256u);
}

TEST(ProfileSweep, BadSettingsAreRefusedBeforeAnythingRuns) {
  std::atomic<bool> stop{false};
  std::ostringstream log;
  ProfileSweepSettings s;
  s.runs_dir = ::testing::TempDir() + "/profile-sweep-bad";
  s.more_output_tokens = {1};
  EXPECT_THROW(run_profile_sweep(s, stop, log), UsageError);
  s.more_output_tokens.clear();
  s.prompt_tokens = {0};
  EXPECT_THROW(run_profile_sweep(s, stop, log), UsageError);
  s.prompt_tokens = {32};
  s.batch_sizes = {0};
  EXPECT_THROW(run_profile_sweep(s, stop, log), UsageError);
}

}  // namespace
}  // namespace tokenscope::bench
