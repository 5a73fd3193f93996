#include "core/prometheus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tokenscope::prometheus {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v, std::uint64_t n) {
  if (n == 0 || std::isnan(v)) return;
  v = std::max(v, 0.0);
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);  // first bound >= v: le semantics
  counts_[static_cast<std::size_t>(it - bounds_.begin())] += n;
  sum_ += v * static_cast<double>(n);
  count_ += n;
}

std::string format_number(double v, Layout layout) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (layout == Layout::kPythonClient && v == std::floor(v) && std::abs(v) < 1e15)
    return fmt::format("{:.1f}", v);
  return fmt::format("{}", v);
}

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void TextWriter::family(std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void TextWriter::line(std::string_view name, std::string_view labels, std::string_view extra_label,
                      const std::string& value) {
  out_ += name;
  if (!labels.empty() || !extra_label.empty()) {
    out_ += '{';
    out_ += labels;
    if (!labels.empty() && !extra_label.empty()) out_ += ',';
    out_ += extra_label;
    out_ += '}';
  }
  out_ += ' ';
  out_ += value;
  out_ += '\n';
}

void TextWriter::sample(std::string_view name, std::string_view labels, double v) {
  line(name, labels, {}, format_number(v, layout_));
}

std::string TextWriter::count_text(std::uint64_t v) const {
  return layout_ == Layout::kGoClient ? std::to_string(v) : format_number(static_cast<double>(v), layout_);
}

void TextWriter::sample(std::string_view name, std::string_view labels, std::uint64_t v) {
  line(name, labels, {}, count_text(v));
}

void TextWriter::histogram(std::string_view name, std::string_view help, std::string_view labels,
                           const Histogram& h) {
  family(name, "histogram", help);
  histogram_samples(name, labels, h);
}

void TextWriter::histogram_samples(std::string_view name, std::string_view labels, const Histogram& h) {
  const std::string base(name);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.bounds().size(); ++i) {
    cumulative += h.counts()[i];
    line(base + "_bucket", labels, "le=\"" + format_number(h.bounds()[i], layout_) + "\"",
         count_text(cumulative));
  }
  cumulative += h.counts().back();
  line(base + "_bucket", labels, "le=\"+Inf\"", count_text(cumulative));
  if (layout_ == Layout::kGoClient) {
    line(base + "_sum", labels, {}, format_number(h.sum(), layout_));
    line(base + "_count", labels, {}, count_text(h.count()));
  } else {
    line(base + "_count", labels, {}, count_text(h.count()));
    line(base + "_sum", labels, {}, format_number(h.sum(), layout_));
  }
}

}  // namespace tokenscope::prometheus
