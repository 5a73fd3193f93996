#include "analyze/coupling.h"

#include <gtest/gtest.h>

#include <random>

namespace tokenscope::analyze {
namespace {

// The ratio of quantiles and its bootstrap interval: equal samples give 1 with
// an interval around it; a sample scaled by 1.5 gives 1.5 exactly, inside
// its interval; the same inputs give the same interval; too few values none.
TEST(Coupling, QuantileRatioWithABootstrapInterval) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> d(std::log(100.0), 0.4);
  std::vector<double> a, b;
  for (int i = 0; i < 400; ++i) a.push_back(d(rng));
  for (int i = 0; i < 400; ++i) b.push_back(d(rng));
  const auto same = quantile_ratio(a, b, 0.5, 0.95, 1);
  ASSERT_TRUE(same);
  EXPECT_LT(same->ci_low, 1.0);
  EXPECT_GT(same->ci_high, 1.0);
  EXPECT_NEAR(same->kappa, 1.0, 0.1);
  EXPECT_EQ(same->n_mix, 400u);
  std::vector<double> scaled = a;
  for (auto& x : scaled) x *= 1.5;
  const auto slow = quantile_ratio(scaled, a, 0.99, 0.95, 1);
  ASSERT_TRUE(slow);
  EXPECT_DOUBLE_EQ(slow->kappa, 1.5);
  EXPECT_LE(slow->ci_low, 1.5);
  EXPECT_GE(slow->ci_high, 1.5);
  EXPECT_GT(slow->ci_low, 1.0);
  const auto again = quantile_ratio(scaled, a, 0.99, 0.95, 1);
  EXPECT_EQ(again->ci_low, slow->ci_low);
  EXPECT_EQ(again->ci_high, slow->ci_high);
  EXPECT_FALSE(quantile_ratio({1, 2, 3}, a, 0.5, 0.95, 1));
  EXPECT_FALSE(quantile_ratio(a, std::vector<double>(10, 0.0), 0.5, 0.95, 1));
}

TEST(Coupling, RunDirectoriesAreSafeNames) {
  EXPECT_EQ(coupling_run_dir("vision"), "coupling/vision");
  EXPECT_EQ(coupling_run_dir("../a b"), "coupling/___a_b");
  EXPECT_EQ(coupling_run_dir(""), "coupling/default");
  EXPECT_EQ(
      coupling_run_dirs({"a b", "a_b", "", "default"}),
      (std::vector<std::string>{"coupling/a_b", "coupling/a_b-2", "coupling/default", "coupling/default-2"}));
}

}  // namespace
}  // namespace tokenscope::analyze
