#include "bench/bench_settings.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "core/error.h"

namespace tokenscope::bench {

StageList parse_stage_list(std::string_view text, std::string_view option) {
  if (text.empty()) return {};
  return {std::string(text), parse_stages(text, option)};
}

SloSpec parse_slo_spec(std::string_view spec) {
  std::string cls;
  std::string_view rest = spec;
  if (const auto colon = rest.find(':'); colon != std::string_view::npos) {
    cls = std::string(rest.substr(0, colon));
    rest.remove_prefix(colon + 1);
  }
  Slo slo;
  std::size_t start = 0;
  while (start <= rest.size()) {
    const std::size_t comma = rest.find(',', start);
    const std::string_view part = rest.substr(start, comma - start);
    const std::size_t eq = part.find('=');
    if (eq == std::string_view::npos)
      throw UsageError(fmt::format(
          "--slo '{}': '{}' should be NAME=VALUE (ttft_ms, tpot_ms, e2e_ms, ttfo_ms, p)", spec, part));
    const std::string name(part.substr(0, eq));
    double v = 0;
    try {
      std::size_t used = 0;
      v = std::stod(std::string(part.substr(eq + 1)), &used);
      if (used != part.size() - eq - 1) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw UsageError(fmt::format("--slo '{}': '{}' is not a number", spec, part.substr(eq + 1)));
    }
    if (!(v > 0) || !std::isfinite(v))
      throw UsageError(fmt::format("--slo '{}': {} must be > 0", spec, name));
    if (name == "ttft_ms" || name == "ttft")
      slo.ttft_ms = v;
    else if (name == "tpot_ms" || name == "tpot")
      slo.tpot_ms = v;
    else if (name == "e2e_ms" || name == "e2e")
      slo.e2e_ms = v;
    else if (name == "ttfo_ms" || name == "ttfo")
      slo.ttfo_ms = v;
    else if (name == "p" || name == "percentile") {
      if (v > 100) throw UsageError(fmt::format("--slo '{}': p must be in (0, 100]", spec));
      slo.percentile = v;
    } else
      throw UsageError(
          fmt::format("--slo '{}': unknown metric '{}' (ttft_ms, tpot_ms, e2e_ms, ttfo_ms, p)", spec, name));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return {std::string(spec), cls, slo};
}

std::vector<double> parse_sweep_rates(std::string_view text) {
  return parse_number_list(text, "--sweep-rates");
}

std::pair<double, double> parse_sweep_search(std::string_view text) {
  std::string spec(text);
  std::replace(spec.begin(), spec.end(), ':', ',');
  const auto bounds = parse_number_list(spec, "--sweep-search");
  if (bounds.size() != 2 || bounds[0] >= bounds[1])
    throw UsageError("--sweep-search: expected LOW:HIGH with LOW < HIGH");
  return {bounds[0], bounds[1]};
}

ThinkDist parse_think_dist(std::string_view text) {
  if (text == "fixed") return ThinkDist::kFixed;
  if (text == "exponential") return ThinkDist::kExponential;
  throw UsageError("--think-dist: expected fixed or exponential");
}

std::string_view think_dist_name(ThinkDist d) {
  return d == ThinkDist::kExponential ? "exponential" : "fixed";
}

Progress parse_progress(std::string_view text) {
  if (text == "auto") return Progress::kAuto;
  if (text == "tty") return Progress::kTty;
  if (text == "plain") return Progress::kPlain;
  if (text == "none") return Progress::kNone;
  throw UsageError("--progress: expected auto, tty, plain or none");
}

Compat parse_compat(std::string_view text) {
  if (text.empty()) return Compat::kNone;
  if (text == "vllm") return Compat::kVllm;
  throw UsageError("--compat: expected vllm");
}

}  // namespace tokenscope::bench
