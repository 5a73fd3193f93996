#include "engine/pools.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace tokenscope::engine {
namespace {

TEST(Pools, APoolsFileIsReadWithItsDefaults) {
  const auto pools = parse_pools(
      "pools:\n"
      "  - name: fast\n"
      "    gpu: h100\n"
      "    tensor-parallel: 2\n"
      "    count: 2\n"
      "    gpu-cost-per-hour: 4.5\n"
      "  - gpu: a100\n"
      "    count: 3\n",
      "p.yaml");
  ASSERT_EQ(pools.size(), 2u);
  EXPECT_EQ(pools[0].name, "fast");
  EXPECT_EQ(pools[0].gpu, "h100");
  EXPECT_EQ(pools[0].tensor_parallel, 2u);
  EXPECT_EQ(pools[0].count, 2u);
  EXPECT_DOUBLE_EQ(*pools[0].gpu_cost_per_hour, 4.5);
  EXPECT_EQ(pools[0].line, 2u);
  EXPECT_EQ(pools[1].name, "a100x1");
  EXPECT_EQ(pools[1].tensor_parallel, 1u);
  EXPECT_FALSE(pools[1].gpu_cost_per_hour);
  EXPECT_EQ(pools[1].line, 7u);
}

std::string refusal(const std::string& text) {
  try {
    parse_pools(text, "p.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Pools, BadFilesAreNamedByLineAndField) {
  EXPECT_NE(refusal("[]").find("expected a mapping"), std::string::npos);
  EXPECT_NE(refusal("pools: []\n").find("at least one pool"), std::string::npos);
  EXPECT_NE(refusal("pools:\n  - count: 2\n").find("p.yaml:2: field 'pools[0].gpu': missing"),
            std::string::npos)
      << refusal("pools:\n  - count: 2\n");
  EXPECT_NE(refusal("pools:\n  - gpu: h100\n").find("pools[0].count"), std::string::npos);
  EXPECT_NE(refusal("pools:\n  - {gpu: h100, count: 0}\n").find("pools[0].count"), std::string::npos);
  EXPECT_NE(refusal("pools:\n  - {gpu: h100, count: 1, tensor-parallel: 65}\n").find("tensor-parallel"),
            std::string::npos);
  EXPECT_NE(refusal("pools:\n  - {gpu: h100, count: 1, gpu-cost-per-hour: -1}\n").find("gpu-cost-per-hour"),
            std::string::npos);
  EXPECT_NE(refusal("pools:\n  - {gpu: h100, count: 1, colour: red}\n").find("colour"), std::string::npos);
  EXPECT_NE(refusal("pools:\n  - {gpu: h100, count: 1}\n  - {gpu: h100, count: 2}\n").find("pools[1].name"),
            std::string::npos);
  EXPECT_NE(refusal("pools:\n  - {gpu: h100, count: 4000}\n  - {gpu: a100, count: 97}\n").find("4096"),
            std::string::npos);
  EXPECT_NE(refusal("pools: [").find("p.yaml"), std::string::npos);
  // A key that is not a scalar (found by fuzz_pools_yaml): named, not thrown through.
  EXPECT_NE(refusal("? [a, b]\n: 1\n").find("p.yaml"), std::string::npos);
}

}  // namespace
}  // namespace tokenscope::engine
