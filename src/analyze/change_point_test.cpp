#include "analyze/change_point.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/random.h"

namespace tokenscope::analyze {
namespace {

std::vector<std::size_t> indexes_of(const std::vector<ChangePoint>& cps) {
  std::vector<std::size_t> out;
  for (const auto& c : cps) out.push_back(c.index);
  return out;
}

// Apache Otava, tests/analysis_test.py (test_single_series): a drop by half
// at index 10.
const std::vector<double> kOtavaSingleSeries = {1.02, 0.95, 0.99, 1.00, 1.12, 1.00, 1.01, 0.98, 1.01, 0.96,
                                                0.50, 0.51, 0.48, 0.48, 0.55, 0.50, 0.49, 0.51, 0.50, 0.49};

// Apache Otava, tests/change_point_divisive_test.py (SEQUENCE, with change
// points at 5 and 8).
const std::vector<double> kOtavaSequence = {0.3,  2.4,   1.5,   -0.9,  -0.5,  99.7,  98.3,
                                            99.1, 149.0, 149.7, 149.5, 149.1, 148.8, 150.0};

// Apache Otava, tests/tigerbeetle_test.py: "the Tigerbeetle dataset used for
// demo purposes at Nyrkiö" (365 benchmark results), also the example of
// Otava's docs/MATH.md.
const std::vector<double> kTigerBeetle = {
    26705, 26475, 26641, 26806, 26835, 26911, 26564, 26812, 26874, 26682, 15672, 26745, 26460, 26977, 26851,
    23412, 23547, 23674, 23519, 23670, 23662, 23462, 23750, 23717, 23524, 23588, 23687, 23793, 23937, 23715,
    23570, 23730, 23690, 23699, 23670, 23860, 23988, 23652, 23681, 23798, 23728, 23604, 23523, 23412, 23685,
    23773, 23771, 23718, 23409, 23739, 23674, 23597, 23682, 23680, 23711, 23660, 23990, 23938, 23742, 23703,
    23536, 24363, 24414, 24483, 24509, 24944, 24235, 24560, 24236, 24667, 24730, 28346, 28437, 28436, 28057,
    28217, 28456, 28427, 28398, 28250, 28331, 28222, 28726, 28578, 28345, 28274, 28514, 28590, 28449, 28305,
    28411, 28788, 28404, 28821, 28580, 27483, 26805, 27487, 27124, 26898, 27295, 26951, 27312, 27660, 27154,
    27050, 26989, 27193, 27503, 27326, 27375, 27513, 27057, 27421, 27574, 27609, 27123, 27824, 27644, 27394,
    27836, 27949, 27702, 27457, 27272, 28207, 27802, 27516, 27586, 28005, 27768, 28543, 28237, 27915, 28437,
    28342, 27733, 28296, 28524, 28687, 28258, 28611, 29360, 28590, 29641, 28965, 29474, 29256, 28611, 28205,
    28539, 27962, 28398, 28509, 28240, 28592, 28102, 28461, 28578, 28669, 28507, 28535, 28226, 28536, 28561,
    28087, 27953, 28398, 28007, 28518, 28337, 28242, 28607, 28545, 28514, 28377, 28010, 28412, 28633, 28576,
    28195, 28637, 28724, 28466, 28287, 28719, 28425, 28860, 28842, 28604, 28327, 28216, 28946, 28918, 29287,
    28725, 29148, 29541, 29137, 29628, 29087, 28612, 29154, 29108, 28884, 29234, 28695, 28969, 28809, 28695,
    28634, 28916, 29852, 29389, 29757, 29531, 29363, 29251, 29552, 29561, 29046, 29795, 29022, 29395, 28921,
    29739, 29257, 29455, 29376, 29528, 28909, 29492, 28984, 29621, 29026, 29457, 29102, 29114, 28924, 29162,
    29259, 29554, 29616, 29211, 29367, 29460, 28836, 29645, 29586, 28848, 29324, 28969, 29150, 29243, 29081,
    29312, 28923, 29272, 29117, 29072, 29529, 29737, 29652, 29612, 29856, 29012, 30402, 29969, 29309, 29439,
    29285, 29421, 29023, 28772, 29692, 29416, 29267, 29542, 29904, 30045, 29739, 29945, 29141, 29163, 29765,
    29197, 29441, 28910, 29504, 29614, 29643, 29506, 29420, 29672, 29432, 29784, 29888, 29309, 29247, 29816,
    29254, 29813, 29451, 29382, 29618, 28558, 29845, 29499, 29283, 29184, 29246, 28790, 29952, 29145, 29415,
    30437, 29227, 29605, 29859, 29156, 29807, 29406, 29734, 29861, 29140, 29983, 29832, 29919, 29896, 29991,
    29266, 29001, 29459, 29548, 29310, 29042, 29303, 29894, 29091, 29018, 29537, 29614, 29180, 29736, 29500,
    29218, 29581, 28906, 28542, 29306, 28987, 29878, 28865, 30272, 29707, 29662, 29815, 30492, 29347, 30096,
    29054, 30238, 28813, 31895, 28915,
};

TEST(EnergyDivergence, MatchesTheDefinition) {
  // X = {1}, Y = {2, 4}: (2 (|1-2| + |1-4|) - 2*1/(2-1) |2-4|) / 3 = 4/3.
  const std::vector<double> x = {1.0, 2.0, 4.0};
  EXPECT_DOUBLE_EQ(energy_divergence(x, 1, 3), 4.0 / 3.0);
  // X = {0, 0}, Y = {1, 1}: 2 * 4 / 4 = 2.
  const std::vector<double> step = {0.0, 0.0, 1.0, 1.0};
  EXPECT_DOUBLE_EQ(energy_divergence(step, 2, 4), 2.0);
  // change_point_reference.py: energy_divergence(SEQUENCE, 5, 8) = 364.29999999999995
  EXPECT_NEAR(energy_divergence(kOtavaSequence, 5, 8), 364.29999999999995, 1e-10);
  EXPECT_THROW(energy_divergence(x, 0, 2), UsageError);
  EXPECT_THROW(energy_divergence(x, 2, 4), UsageError);
}

TEST(BestEnergySplit, IsTheArgmaxOfTheDirectDefinition) {
  // change_point_reference.py: best_split(SEQUENCE) = (761.282142857143, 5, 14),
  // best_split(SINGLE) = (4.682222222222223, 10, 20).
  EnergySplit s = best_energy_split(kOtavaSequence);
  EXPECT_EQ(s.index, 5u);
  EXPECT_EQ(s.end, 14u);
  EXPECT_NEAR(s.q, 761.282142857143, 1e-9);
  s = best_energy_split(kOtavaSingleSeries);
  EXPECT_EQ(s.index, 10u);
  EXPECT_EQ(s.end, 20u);
  EXPECT_NEAR(s.q, 4.682222222222223, 1e-12);
  // The O(1) updates against the O(n^2)-per-pair definition on random data.
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    Rng rng(seed);
    std::vector<double> x(2 + seed % 17);
    for (double& v : x) v = rng.normal() + (rng.uniform01() < 0.3 ? 3.0 : 0.0);
    double best = -std::numeric_limits<double>::infinity();
    std::size_t best_tau = 0, best_kappa = 0;
    for (std::size_t tau = 1; tau < x.size(); ++tau) {
      for (std::size_t kappa = tau + 1; kappa <= x.size(); ++kappa) {
        const double q = energy_divergence(x, tau, kappa);
        if (q > best) best = q, best_tau = tau, best_kappa = kappa;
      }
    }
    s = best_energy_split(x);
    EXPECT_EQ(s.index, best_tau) << "seed " << seed;
    EXPECT_EQ(s.end, best_kappa) << "seed " << seed;
    EXPECT_NEAR(s.q, best, 1e-9 * std::max(1.0, std::abs(best))) << "seed " << seed;
  }
  // Two points: the only split.
  s = best_energy_split(std::vector<double>{3.0, 5.0});
  EXPECT_EQ(s.index, 1u);
  EXPECT_DOUBLE_EQ(s.q, 2.0);
  EXPECT_THROW(best_energy_split(std::vector<double>{1.0}), UsageError);
}

TEST(PooledTTest, MatchesScipy) {
  // scipy.stats.ttest_ind_from_stats(1.0, 0.5, 10, 1.3, 0.7, 12)
  //   = (-1.1336235407853665, 0.27035891021314606)
  TTest t = pooled_t_test(1.0, 0.5, 10, 1.3, 0.7, 12);
  EXPECT_NEAR(t.t, -1.1336235407853665, 1e-13);
  EXPECT_NEAR(t.p_value, 0.27035891021314606, 1e-13);
  EXPECT_DOUBLE_EQ(t.df, 20.0);
  // ttest_ind_from_stats(5.0, 2.0, 3, 1.0, 1.0, 2) = (2.5298221281347035, 0.08543743614799885)
  t = pooled_t_test(5.0, 2.0, 3, 1.0, 1.0, 2);
  EXPECT_NEAR(t.t, 2.5298221281347035, 1e-13);
  EXPECT_NEAR(t.p_value, 0.08543743614799885, 1e-13);
  // ttest_ind_from_stats(0.0, 1.0, 100, 0.1, 1.2, 80) = (-0.6097808077792882, 0.5427846419593729)
  t = pooled_t_test(0.0, 1.0, 100, 0.1, 1.2, 80);
  EXPECT_NEAR(t.t, -0.6097808077792882, 1e-13);
  EXPECT_NEAR(t.p_value, 0.5427846419593729, 1e-13);
  // No degrees of freedom, or no variance: defined answers, not nan.
  EXPECT_DOUBLE_EQ(pooled_t_test(1.0, 0.0, 1, 2.0, 0.0, 1).p_value, 1.0);
  EXPECT_DOUBLE_EQ(pooled_t_test(1.0, 0.0, 3, 1.0, 0.0, 4).p_value, 1.0);
  t = pooled_t_test(1.0, 0.0, 3, 2.0, 0.0, 4);
  EXPECT_DOUBLE_EQ(t.p_value, 0.0);
  EXPECT_TRUE(std::isinf(t.t) && t.t < 0);
}

TEST(ChangePoints, FirstPassThresholdIsOtavas) {
  EXPECT_DOUBLE_EQ(first_pass_pvalue(0.001), 0.01);
  EXPECT_DOUBLE_EQ(first_pass_pvalue(0.1), 0.2);
  EXPECT_DOUBLE_EQ(first_pass_pvalue(0.6), 0.6);
}

TEST(ChangePoints, OtavaSingleSeries) {
  // Otava's test_single_series: compute_change_points(series, window_len=10,
  // max_pvalue=0.0001) gives the indexes [10].
  const auto cps = find_change_points(kOtavaSingleSeries,
                                      {.window_len = 10, .max_pvalue = 0.0001, .otava_compatible = true});
  ASSERT_EQ(indexes_of(cps), std::vector<std::size_t>{10});
  // change_point_reference.py: mean_before 1.004, mean_after 0.501,
  // t 33.073500925474406, p 1.4271728389900107e-17, rel -0.500996015936255,
  // magnitude 1.003992015968064.
  const ChangePoint& c = cps[0];
  EXPECT_EQ(c.count_before, 10u);
  EXPECT_EQ(c.count_after, 10u);
  EXPECT_NEAR(c.mean_before, 1.004, 1e-12);
  EXPECT_NEAR(c.mean_after, 0.501, 1e-12);
  EXPECT_NEAR(c.t_statistic, 33.073500925474406, 1e-9);
  EXPECT_NEAR(c.p_value, 1.4271728389900107e-17, 1e-26);
  EXPECT_NEAR(c.relative_change, -0.500996015936255, 1e-12);
  EXPECT_NEAR(c.magnitude, 1.003992015968064, 1e-12);
  // numpy.std(series[:10], ddof=1) = 0.046475800154489044
  EXPECT_NEAR(c.stddev_before, 0.046475800154489044, 1e-12);
}

TEST(ChangePoints, OtavaSequence) {
  // Otava's test_ttest: E-divisive with the t-test at 0.01 over the whole
  // series finds [5, 8]; here one window covers it.
  EXPECT_EQ(weak_change_points(kOtavaSequence, {.window_len = 14, .max_pvalue = 0.001}),
            (std::vector<std::size_t>{5, 8}));
  const auto cps =
      find_change_points(kOtavaSequence, {.window_len = 14, .max_pvalue = 0.001, .otava_compatible = true});
  ASSERT_EQ(indexes_of(cps), (std::vector<std::size_t>{5, 8}));
  // change_point_reference.py: index 5: t -127.30425449431016, p 1.5842520452384315e-11;
  // index 8: mean_before 99.03333333333335, mean_after 149.35, p 1.4165684937109648e-13.
  EXPECT_NEAR(cps[0].t_statistic, -127.30425449431016, 1e-8);
  EXPECT_NEAR(cps[0].p_value, 1.5842520452384315e-11, 1e-20);
  EXPECT_NEAR(cps[1].mean_before, 99.03333333333335, 1e-10);
  EXPECT_NEAR(cps[1].mean_after, 149.35, 1e-10);
  EXPECT_NEAR(cps[1].p_value, 1.4165684937109648e-13, 1e-22);
  // The textbook t-test (sample deviations): index 5 has t -112.76777297135962,
  // p 3.2783550200990086e-11.
  const auto textbook =
      find_change_points(kOtavaSequence, {.window_len = 14, .max_pvalue = 0.001, .otava_compatible = false});
  ASSERT_EQ(indexes_of(textbook), (std::vector<std::size_t>{5, 8}));
  EXPECT_NEAR(textbook[0].t_statistic, -112.76777297135962, 1e-8);
  EXPECT_NEAR(textbook[0].p_value, 3.2783550200990086e-11, 1e-20);
}

struct TigerBeetleCase {
  double max_pvalue;
  double min_magnitude;
  std::vector<std::size_t> expected;
};

TEST(ChangePoints, OtavaTigerBeetleExample) {
  // Every case of Otava's tests/tigerbeetle_test.py, compute_change_points(
  // series, window_len=30, max_pvalue=P, min_magnitude=M), with the indexes
  // that test asserts.
  const TigerBeetleCase cases[] = {
      {0.01, 0.05, {15, 71}},
      {0.05, 0.05, {15, 71}},
      {0.1, 0.05, {10, 11, 15, 71, 363}},
      {0.2, 0.05, {10, 11, 15, 71}},
      {0.1, 0.01, {10,  11,  15,  28,  29,  35,  37,  48,  49,  61,  71,  95,  117, 131,
                   142, 148, 165, 169, 192, 206, 212, 260, 265, 268, 278, 282, 363}},
      {0.2, 0.0, {3,   6,   7,   10,  11,  13,  15,  16,  28,  29,  35,  37,  39,  41,  44,  48,  49,  56,
                  58,  61,  65,  66,  69,  71,  74,  76,  82,  95,  108, 117, 125, 126, 129, 131, 136, 137,
                  142, 148, 165, 169, 187, 190, 192, 197, 200, 212, 220, 241, 243, 246, 247, 249, 250, 260,
                  265, 266, 268, 278, 282, 288, 305, 306, 325, 330, 337, 338, 340, 347, 349, 363}},
      {0.1, 0.0, {3,   6,   10,  11,  15,  16,  28,  29,  35,  37,  39,  41,  44,  48,  49,  61,  71, 95,
                  117, 131, 142, 148, 165, 169, 192, 206, 212, 260, 265, 268, 278, 282, 288, 305, 363}},
      {0.01, 0.0, {15, 26, 61, 71, 95, 117, 131, 142, 148, 165, 169, 192, 212, 260}},
      {0.001, 0.0, {15, 61, 71, 95, 117, 131, 142, 148, 192, 212, 260}},
      {0.0001, 0.0, {71, 95, 117, 131, 142, 148, 192, 212}},
      {0.00001, 0.0, {71, 95, 131, 192, 212}},
  };
  for (const auto& c : cases) {
    const auto cps = find_change_points(kTigerBeetle, {.window_len = 30,
                                                       .max_pvalue = c.max_pvalue,
                                                       .min_magnitude = c.min_magnitude,
                                                       .otava_compatible = true});
    EXPECT_EQ(indexes_of(cps), c.expected)
        << "max_pvalue " << c.max_pvalue << " min_magnitude " << c.min_magnitude;
  }
}

TEST(ChangePoints, OtavaCompatibleModeKeepsWhatOtavaKeeps) {
  // Otava keeps 265 at max_pvalue 0.1, min_magnitude 0.01 (above), though on
  // the final segmentation its p is 0.66 (change_point_reference.py's
  // stats_at): its left neighbour 260 is never tested again after the point
  // between them goes. The statistics returned are those of the final
  // segmentation, so they show it.
  const auto cps = find_change_points(
      kTigerBeetle, {.window_len = 30, .max_pvalue = 0.1, .min_magnitude = 0.01, .otava_compatible = true});
  const auto it = std::find_if(cps.begin(), cps.end(), [](const ChangePoint& c) { return c.index == 265; });
  ASSERT_NE(it, cps.end());
  EXPECT_NEAR(it->p_value, 0.660640930717979, 1e-9);
}

TEST(ChangePoints, TextbookVariantDiffersWhereOtavasConventionsMatter) {
  // change_point_reference.py with otava=False: window 30, p 0.001, magnitude
  // 0 loses Otava's 260 (its p is above 0.001 with sample deviations).
  const auto cps =
      find_change_points(kTigerBeetle, {.window_len = 30, .max_pvalue = 0.001, .otava_compatible = false});
  EXPECT_EQ(indexes_of(cps), (std::vector<std::size_t>{15, 61, 71, 95, 117, 131, 142, 148, 192, 212}));
  const auto wide = find_change_points(
      kTigerBeetle, {.window_len = 30, .max_pvalue = 0.1, .min_magnitude = 0.0, .otava_compatible = false});
  EXPECT_EQ(indexes_of(wide), (std::vector<std::size_t>{3,   10,  11,  15,  28,  29,  35,  37,  41,  44,
                                                        48,  49,  61,  71,  95,  117, 131, 142, 148, 165,
                                                        169, 192, 206, 212, 236, 260, 268, 278, 282, 363}));
}

// n normal values of mean `mean` (+ `step` from index `at` on) and sd `sd`.
std::vector<double> noisy_step(std::uint64_t seed, std::size_t n, double mean, double sd, std::size_t at,
                               double step) {
  Rng rng(seed);
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = mean + (i >= at ? step : 0.0) + sd * rng.normal();
  return x;
}

TEST(ChangePoints, FindsASyntheticStepAtItsIndex) {
  // 200 points N(100, 5^2) with a step of +10 (2 sd, 10%) at index 120.
  const ChangePointSettings settings{.max_pvalue = 1e-4};
  const auto cps = find_change_points(noisy_step(42, 200, 100.0, 5.0, 120, 10.0), settings);
  ASSERT_EQ(indexes_of(cps), std::vector<std::size_t>{120});
  EXPECT_NEAR(cps[0].mean_before, 100.0, 1.5);
  EXPECT_NEAR(cps[0].mean_after, 110.0, 1.5);
  EXPECT_NEAR(cps[0].relative_change, 0.10, 0.02);
  EXPECT_LT(cps[0].p_value, 1e-10);
  // Over many seeds: how often exactly one change point is found within 3 of
  // the step (measured: 468 of 500).
  int hits = 0;
  for (std::uint64_t seed = 1; seed <= 500; ++seed) {
    const auto found = find_change_points(noisy_step(5000 + seed, 200, 100.0, 5.0, 120, 10.0), settings);
    hits += found.size() == 1 && found[0].index >= 117 && found[0].index <= 123;
  }
  EXPECT_GE(hits, 460) << "exactly one change point within 3 of the step in " << hits << " of 500 series";
}

TEST(ChangePoints, PureNoiseRarelyGivesAny) {
  // 500 series of 200 points N(100, 5^2). The t-test's p is that of the
  // split E-divisive chose as the most different, so the rate of series with
  // a false change point is above the nominal level: measured 3 of 500 at
  // max_pvalue 1e-4, 46 of 500 at Otava's default 1e-3 (textbook t-test).
  int at_1e4 = 0, at_1e3 = 0;
  for (std::uint64_t seed = 1; seed <= 500; ++seed) {
    const auto x = noisy_step(1000 + seed, 200, 100.0, 5.0, 0, 0.0);
    at_1e4 += !find_change_points(x, {.max_pvalue = 1e-4}).empty();
    at_1e3 += !find_change_points(x, {.max_pvalue = 1e-3}).empty();
  }
  EXPECT_LE(at_1e4, 5) << "series with a false change point at p 1e-4: " << at_1e4 << " of 500";
  EXPECT_LE(at_1e3, 60) << "series with a false change point at p 1e-3: " << at_1e3 << " of 500";
}

TEST(ChangePoints, AGradualDriftIsAStaircaseAcrossIt) {
  // 100 points at 100, a ramp to 130 over the next 100, then 100 at 130,
  // noise sd 3. The drift shows as several upward steps inside it, from the
  // level before to the level after (measured over 100 seeds: all have >= 3
  // steps, 100 all upward, 99 all within [75, 225]).
  int upward = 0, inside = 0;
  for (std::uint64_t seed = 1; seed <= 100; ++seed) {
    Rng rng(7000 + seed);
    std::vector<double> x(300);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double level = i < 100 ? 100.0 : (i < 200 ? 100.0 + 0.3 * static_cast<double>(i - 100) : 130.0);
      x[i] = level + 3.0 * rng.normal();
    }
    const auto cps = find_change_points(x, {.max_pvalue = 1e-4});
    ASSERT_GE(cps.size(), 3u) << "seed " << seed;
    EXPECT_NEAR(cps.front().mean_before, 100.0, 2.0) << "seed " << seed;
    EXPECT_NEAR(cps.back().mean_after, 130.0, 2.0) << "seed " << seed;
    upward += std::all_of(cps.begin(), cps.end(),
                          [](const ChangePoint& c) { return c.mean_after > c.mean_before; });
    inside += std::all_of(cps.begin(), cps.end(),
                          [](const ChangePoint& c) { return c.index >= 75 && c.index <= 225; });
  }
  EXPECT_GE(upward, 97) << "all steps upward in " << upward << " of 100 series";
  EXPECT_GE(inside, 95) << "all steps within [75, 225] in " << inside << " of 100 series";
}

TEST(ChangePoints, EdgeCases) {
  // Too short to test anything.
  EXPECT_TRUE(find_change_points(std::vector<double>{1.0}).empty());
  EXPECT_TRUE(find_change_points(std::vector<double>{1.0, 100.0}).empty());
  // A constant series: every split has equal means and no variance.
  EXPECT_TRUE(find_change_points(std::vector<double>(100, 7.0)).empty());
  EXPECT_TRUE(weak_change_points(std::vector<double>(100, 7.0)).empty());
  // Two constant levels: no variance on either side, so p = 0.
  const auto levels = find_change_points(std::vector<double>{5, 5, 5, 9, 9, 9});
  ASSERT_EQ(indexes_of(levels), std::vector<std::size_t>{3});
  EXPECT_DOUBLE_EQ(levels[0].p_value, 0.0);
  EXPECT_DOUBLE_EQ(levels[0].stddev_before, 0.0);
  EXPECT_DOUBLE_EQ(levels[0].relative_change, 0.8);
  // A window longer than the series is one window.
  EXPECT_EQ(indexes_of(find_change_points(kOtavaSequence, {.window_len = 1000})),
            (std::vector<std::size_t>{5, 8}));
  // Bad input.
  EXPECT_THROW(find_change_points(std::vector<double>{}), InputError);
  try {
    find_change_points(std::vector<double>{1.0, 2.0, 3.0, std::nan(""), 5.0});
    FAIL() << "nan accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("series[3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(find_change_points(std::vector<double>{1.0, std::numeric_limits<double>::infinity()}),
               InputError);
  EXPECT_THROW(find_change_points(kOtavaSequence, {.window_len = 1}), UsageError);
  EXPECT_THROW(find_change_points(kOtavaSequence, {.max_pvalue = 0.0}), UsageError);
  EXPECT_THROW(find_change_points(kOtavaSequence, {.max_pvalue = 1.5}), UsageError);
  EXPECT_THROW(find_change_points(kOtavaSequence, {.max_pvalue = std::nan("")}), UsageError);
  EXPECT_THROW(find_change_points(kOtavaSequence, {.min_magnitude = -0.1}), UsageError);
}

}  // namespace
}  // namespace tokenscope::analyze
