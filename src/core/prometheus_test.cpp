#include "core/prometheus.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tokenscope::prometheus {
namespace {

TEST(PrometheusHistogram, BoundsAreInclusiveUpperLimits) {
  Histogram h({0.1, 1.0});
  h.observe(0.1);           // le="0.1"
  h.observe(0.5, 3);        // le="1"
  h.observe(1.0);           // le="1"
  h.observe(7.0);           // +Inf
  h.observe(-0.002);        // clamped to 0: le="0.1"
  h.observe(std::nan(""));  // ignored
  h.observe(2.0, 0);        // nothing
  EXPECT_EQ(h.counts(), (std::vector<std::uint64_t>{2, 4, 1}));
  EXPECT_EQ(h.count(), 7u);
  EXPECT_DOUBLE_EQ(h.sum(), 0.1 + 1.5 + 1.0 + 7.0);
}

TEST(PrometheusText, NumbersInEachLayout) {
  EXPECT_EQ(format_number(3, Layout::kPythonClient), "3.0");
  EXPECT_EQ(format_number(3, Layout::kGoClient), "3");
  EXPECT_EQ(format_number(0.25, Layout::kPythonClient), "0.25");
  EXPECT_EQ(format_number(1e-05, Layout::kPythonClient), "1e-05");
  EXPECT_EQ(format_number(1e20, Layout::kPythonClient), "1e+20");
  for (const Layout l : {Layout::kPythonClient, Layout::kGoClient}) {
    EXPECT_EQ(format_number(INFINITY, l), "+Inf");
    EXPECT_EQ(format_number(-INFINITY, l), "-Inf");
    EXPECT_EQ(format_number(NAN, l), "NaN");
  }
  EXPECT_EQ(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

TEST(PrometheusText, HistogramInPythonClientLayout) {
  Histogram h({0.5, 1});
  h.observe(0.25);
  h.observe(2, 2);
  std::string out;
  TextWriter w(out, Layout::kPythonClient);
  w.histogram("x_seconds", "Help.", "model_name=\"m\"", h);
  w.family("y_total", "counter", "Y.");
  w.sample("y_total", "model_name=\"m\"", std::uint64_t{4});
  EXPECT_EQ(out,
            "# HELP x_seconds Help.\n# TYPE x_seconds histogram\n"
            "x_seconds_bucket{model_name=\"m\",le=\"0.5\"} 1.0\n"
            "x_seconds_bucket{model_name=\"m\",le=\"1.0\"} 1.0\n"
            "x_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 3.0\n"
            "x_seconds_count{model_name=\"m\"} 3.0\n"
            "x_seconds_sum{model_name=\"m\"} 4.25\n"
            "# HELP y_total Y.\n# TYPE y_total counter\n"
            "y_total{model_name=\"m\"} 4.0\n");
}

TEST(PrometheusText, HistogramInGoClientLayout) {
  Histogram h({0.5, 1});
  h.observe(0.25);
  h.observe(2, 2);
  std::string out;
  TextWriter w(out, Layout::kGoClient);
  w.histogram("x_seconds", "Help.", "", h);
  w.sample("z", "", 0.5);
  w.sample("n", "", std::uint64_t{12345678901234567});
  EXPECT_EQ(out,
            "# HELP x_seconds Help.\n# TYPE x_seconds histogram\n"
            "x_seconds_bucket{le=\"0.5\"} 1\n"
            "x_seconds_bucket{le=\"1\"} 1\n"
            "x_seconds_bucket{le=\"+Inf\"} 3\n"
            "x_seconds_sum 4.25\n"
            "x_seconds_count 3\n"
            "z 0.5\n"
            "n 12345678901234567\n");
}

}  // namespace
}  // namespace tokenscope::prometheus
