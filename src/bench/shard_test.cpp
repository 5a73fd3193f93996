// A shard's place and share (bench/shard.h): --shard and the schedulers'
// environments, --start-at, and shares that cover the plan once between them.
#include "bench/shard.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "core/error.h"

namespace tokenscope::bench {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string refusal(const std::string& text, const EnvLookup& env) {
  try {
    parse_shard(text, env);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Shard, TheIndexComesFromTheOptionOrTheSchedulersEnvironment) {
  const auto none = env_of({});
  const auto a = parse_shard("2/5", none);
  EXPECT_EQ(a.index, 2u);
  EXPECT_EQ(a.count, 5u);
  EXPECT_EQ(a.source, "--shard");
  const auto k8s =
      parse_shard("env", env_of({{"JOB_COMPLETION_INDEX", "3"}, {"TOKENSCOPE_SHARD_COUNT", "4"}}));
  EXPECT_EQ(k8s.index, 3u);
  EXPECT_EQ(k8s.count, 4u);
  EXPECT_EQ(k8s.source, "JOB_COMPLETION_INDEX");
  const auto slurm = parse_shard("env", env_of({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}));
  EXPECT_EQ(slurm.index, 1u);
  EXPECT_EQ(slurm.source, "SLURM_PROCID");
  const auto mpi = parse_shard("env", env_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}));
  EXPECT_EQ(mpi.source, "OMPI_COMM_WORLD_RANK");
  // tokenscope's own variables come first.
  EXPECT_EQ(parse_shard("env", env_of({{"TOKENSCOPE_SHARD_INDEX", "0"},
                                       {"TOKENSCOPE_SHARD_COUNT", "2"},
                                       {"SLURM_PROCID", "1"},
                                       {"SLURM_NTASKS", "2"}}))
                .source,
            "TOKENSCOPE_SHARD_INDEX");
  EXPECT_NE(refusal("2/2", none).find("shard index 2 of 2 shards: expected 0 to 1"), std::string::npos);
  EXPECT_NE(refusal("0/0", none).find("0 shards"), std::string::npos);
  EXPECT_NE(refusal("1", none).find("expected I/N"), std::string::npos);
  EXPECT_NE(refusal("a/2", none).find("expected I/N"), std::string::npos);
  EXPECT_NE(refusal("env", none).find("none of TOKENSCOPE_SHARD_INDEX"), std::string::npos);
  EXPECT_NE(refusal("env", env_of({{"JOB_COMPLETION_INDEX", "1"}})).find("TOKENSCOPE_SHARD_COUNT is not"),
            std::string::npos);
  EXPECT_NE(refusal("env", env_of({{"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "2"}})).find("SLURM_PROCID='x'"),
            std::string::npos);
  EXPECT_NE(refusal("env", env_of({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "2"}})).find("expected 0 to 1"),
            std::string::npos);
}

TEST(Shard, StartAtIsUnixSecondsOrUtc) {
  EXPECT_EQ(parse_start_at("1767225600"), 1'767'225'600'000'000'000);
  EXPECT_EQ(parse_start_at("1767225600.25"), 1'767'225'600'250'000'000);
  EXPECT_EQ(parse_start_at("1767225600.000000001"), 1'767'225'600'000'000'001);
  EXPECT_EQ(parse_start_at("2026-01-01T00:00:00Z"), 1'767'225'600'000'000'000);
  EXPECT_EQ(parse_start_at("2026-01-01T00:00:01.5Z"), 1'767'225'601'500'000'000);
  for (const char* bad : {"", "soon", "-5", "1.", "1.2.3", "1.0000000001", "2026-01-01T00:00:00",
                          "2026-13-01T00:00:00Z", "2026-01-01T00:00:00+01:00", "99999999999999",
                          "17672256010.5", "9999-01-01T00:00:00Z", "2026-02-30T00:00:00Z"})
    EXPECT_THROW(parse_start_at(bad), UsageError) << bad;
}

TEST(Shard, TheStartOnThisHostsClockIsMovedByTheMeasuredOffset) {
  // This host: wall 1,000,000 at monotonic 50. The start was set for wall
  // 1,003,000 on rank 0's clock, which runs 700 ns ahead of this one: on
  // this host's wall clock it is 1,002,300, which is monotonic 2,350.
  EXPECT_EQ(epoch_of_start(1'003'000, 700, 50, 1'000'000), 2'350);
  // Rank 0 behind: later here.
  EXPECT_EQ(epoch_of_start(1'003'000, -700, 50, 1'000'000), 3'750);
  // Its own start (no offset): the anchor's distance.
  EXPECT_EQ(epoch_of_start(1'003'000, 0, 50, 1'000'000), 3'050);
}

TEST(Shard, OutDirNamesTheShard) {
  ShardSpec s{3, 4, "--shard"};
  EXPECT_EQ(shard_out_dir("runs/{shard}/x-{shard}", s), "runs/3/x-3");
  EXPECT_EQ(shard_out_dir("runs/plain", s), "runs/plain");
}

TEST(Shard, OpenLoopSharesCoverTheScheduleOnceInItsOrder) {
  LoadPlan plan;
  for (std::uint32_t i = 0; i < 103; ++i) plan.schedule.emplace_back(i * 2, static_cast<Nanos>(i) * 1000);
  std::multiset<std::uint32_t> seen;
  std::uint64_t total = 0;
  for (std::uint32_t k = 0; k < 4; ++k) {
    LoadPlan share = plan;
    const auto n = keep_share(share, {k, 4, "--shard"});
    EXPECT_EQ(n, share.schedule.size());
    EXPECT_EQ(n, 103u / 4 + (k < 103u % 4 ? 1 : 0));  // balanced: at most one apart
    total += n;
    for (std::size_t j = 1; j < share.schedule.size(); ++j)
      EXPECT_LT(share.schedule[j - 1].second, share.schedule[j].second);  // in time order, times kept
    for (const auto& [index, t] : share.schedule) {
      seen.insert(index);
      EXPECT_EQ(t, static_cast<Nanos>(index / 2) * 1000);
    }
  }
  EXPECT_EQ(total, 103u);
  // The run's cap on requests in flight, split between the shards.
  plan.max_concurrency = 10;
  std::uint32_t cap = 0;
  for (std::uint32_t k = 0; k < 4; ++k) {
    LoadPlan share = plan;
    keep_share(share, {k, 4, "--shard"});
    EXPECT_GE(share.max_concurrency, 2u);
    cap += share.max_concurrency;
  }
  EXPECT_EQ(cap, 10u);
  plan.max_concurrency = 3;
  EXPECT_THROW(keep_share(plan, {0, 4, "--shard"}), UsageError);
  EXPECT_EQ(seen.size(), 103u);
  EXPECT_EQ(std::set<std::uint32_t>(seen.begin(), seen.end()).size(), 103u);
}

TEST(Shard, ClosedLoopSharesSplitTheUsers) {
  LoadPlan plan;
  plan.closed_loop = true;
  plan.user_stages = {{10, 30}, {3, 30}};
  std::uint64_t users[2] = {0, 0};
  for (std::uint32_t k = 0; k < 4; ++k) {
    LoadPlan share = plan;
    const auto most = keep_share(share, {k, 4, "--shard"});
    EXPECT_EQ(share.shard_index, k);
    EXPECT_EQ(share.shard_count, 4u);
    users[0] += static_cast<std::uint64_t>(share.user_stages[0].value);
    users[1] += static_cast<std::uint64_t>(share.user_stages[1].value);
    EXPECT_EQ(most, static_cast<std::uint64_t>(share.user_stages[0].value));
    EXPECT_EQ(share.user_stages[0].duration_s, 30);
  }
  EXPECT_EQ(users[0], 10u);
  EXPECT_EQ(users[1], 3u);
  // A shard without a user would have nothing to send.
  plan.user_stages = {{1, 1e9}};
  EXPECT_THROW(keep_share(plan, {1, 2, "--shard"}), UsageError);
}

}  // namespace
}  // namespace tokenscope::bench
