// Prometheus histograms and the text exposition format 0.0.4, as tokenscope
// writes them: the built-in server's /metrics (serve/metrics.h, laid out as
// vLLM's Python prometheus_client writes), bench's live endpoint
// (bench/live_metrics.h, laid out as Go's client_golang writes) and the
// simulator's histogram series (observe/sim_samples.h). One histogram and
// one writer for all three (docs/architecture.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tokenscope::prometheus {

// A histogram of fixed upper bounds (ascending, finite; "le" semantics: v
// counts in the first bucket whose bound is >= v), a count per bucket (not
// cumulative; the last is +Inf), the sum and the count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  // n observations of v. NaN is not counted; a negative value counts as 0
  // (the histograms hold durations and sizes: a clock step cannot make
  // their sum fall).
  void observe(double v, std::uint64_t n = 1);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<std::uint64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  std::uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  double sum_ = 0.0;
  std::uint64_t count_ = 0;
};

// How numbers and histogram lines are laid out. Both are valid 0.0.4 text;
// each matches the client library of the servers it stands beside.
enum class Layout {
  // Python's prometheus_client (vLLM): every number a float ("3.0",
  // "0.25", "1e-05"), a histogram's _count before its _sum.
  kPythonClient,
  // Go's client_golang: the shortest text that reads back as the same
  // double ("3", "0.25"), counts as integers, _sum before _count.
  kGoClient,
};

// A number as the layout writes it: +Inf, -Inf and NaN in either.
std::string format_number(double v, Layout layout);

// The exposition format's escaping of a label value (backslash, double
// quote, line feed). The value must already be UTF-8.
std::string escape_label_value(std::string_view v);

// Appends families to a text page. labels: `name="value",...` (escaped),
// or empty for none.
class TextWriter {
 public:
  TextWriter(std::string& out, Layout layout) : out_(out), layout_(layout) {}
  // # HELP and # TYPE lines of a family.
  void family(std::string_view name, std::string_view type, std::string_view help);
  void sample(std::string_view name, std::string_view labels, double v);
  // A count: an integer in the Go layout, a float in the Python one.
  void sample(std::string_view name, std::string_view labels, std::uint64_t v);
  // A whole histogram family: its # lines, its cumulative buckets (+Inf
  // last), its _count and _sum in the layout's order.
  void histogram(std::string_view name, std::string_view help, std::string_view labels, const Histogram& h);
  // Its buckets, _count and _sum alone (one label set of a family whose # lines were written).
  void histogram_samples(std::string_view name, std::string_view labels, const Histogram& h);

 private:
  void line(std::string_view name, std::string_view labels, std::string_view extra_label,
            const std::string& value);
  std::string count_text(std::uint64_t v) const;

  std::string& out_;
  Layout layout_;
};

}  // namespace tokenscope::prometheus
