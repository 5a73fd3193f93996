// libFuzzer target: the /metrics exposition parser (Prometheus text 0.0.4 and
// OpenMetrics 1.0). The first byte picks the format (auto, 0.0.4,
// OpenMetrics); the rest is the body. Beyond not crashing, the result must
// hold together: counts agree, every kept name is a valid name, every
// sample belongs to its family by name, and the samples.jsonl line made of
// them is valid JSON that reads back.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "observe/exposition.h"
#include "observe/observation.h"

namespace {
using namespace tokenscope::observe;

bool is_metric_name(std::string_view s) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool is_label_name(std::string_view s) {
  return is_metric_name(s) && s.find(':') == std::string_view::npos;
}

// A sample is named as its family, or as its family with one of the type's suffixes.
bool belongs(const MetricFamily& f, std::string_view sample) {
  if (sample == f.name) return true;
  if (!sample.starts_with(f.name)) return false;
  const std::string_view suffix = sample.substr(f.name.size());
  for (std::string_view s : {"_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info"})
    if (suffix == s) return true;
  return false;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const auto format = static_cast<ExpositionFormat>(data[0] % 3);
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Exposition e = parse_exposition(text, format);
  std::size_t samples = 0;
  for (const auto& f : e.families) {
    if (!is_metric_name(f.name)) __builtin_trap();
    for (const auto& s : f.samples) {
      if (!is_metric_name(s.name) || !belongs(f, s.name)) __builtin_trap();
      for (const auto& l : s.labels)
        if (!is_label_name(l.name)) __builtin_trap();
    }
    samples += f.samples.size();
  }
  if (samples != e.samples) __builtin_trap();
  if (e.rejected.size() != std::min(e.rejected_lines, kMaxRejectedKept)) __builtin_trap();
  if (e.samples + e.rejected_lines > e.lines + 1) __builtin_trap();
  for (const auto& r : e.rejected)
    if (r.line == 0 || r.line > e.lines + 1 || r.reason.empty()) __builtin_trap();
  if (e.format == ExpositionFormat::kAuto) __builtin_trap();
  const auto flat = flatten(e);
  if (flat.size() != e.samples) __builtin_trap();
  Observation o;
  o.source = "server";
  o.raw = flat;
  std::string line;
  append_observation_json(line, o);
  try {
    if (parse_observation_json(line).raw.size() != flat.size()) __builtin_trap();
  } catch (...) {
    __builtin_trap();  // invalid UTF-8 reached samples.jsonl
  }
  return 0;
}
