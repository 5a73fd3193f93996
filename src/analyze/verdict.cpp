#include "analyze/verdict.h"

namespace tokenscope::analyze {

std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kRegressed:
      return "regressed";
    case Verdict::kImproved:
      return "improved";
    case Verdict::kInconclusive:
      return "inconclusive";
    case Verdict::kNoData:
      return "no-data";
  }
  return "no-data";
}

std::optional<Verdict> verdict_from_string(std::string_view s) {
  for (Verdict v :
       {Verdict::kPass, Verdict::kRegressed, Verdict::kImproved, Verdict::kInconclusive, Verdict::kNoData}) {
    if (to_string(v) == s) return v;
  }
  return std::nullopt;
}

Verdict classify_change(const Change& change, double tolerance, Worse worse) {
  // In "worse" units: positive is worse.
  const double sign = worse == Worse::kHigher ? 1.0 : -1.0;
  double est = sign * change.estimate;
  double lo = sign * (worse == Worse::kHigher ? change.ci_low : change.ci_high);
  double hi = sign * (worse == Worse::kHigher ? change.ci_high : change.ci_low);
  if (lo > 0.0) return est > tolerance ? Verdict::kRegressed : Verdict::kPass;
  if (hi < 0.0) return est < -tolerance ? Verdict::kImproved : Verdict::kPass;
  if (lo >= -tolerance && hi <= tolerance) return Verdict::kPass;
  return Verdict::kInconclusive;
}

namespace {
int severity(Verdict v) {
  switch (v) {
    case Verdict::kNoData:
      return 0;
    case Verdict::kPass:
      return 1;
    case Verdict::kImproved:
      return 2;
    case Verdict::kInconclusive:
      return 3;
    case Verdict::kRegressed:
      return 4;
  }
  return 0;
}
}  // namespace

Verdict combine(Verdict a, Verdict b) {
  return severity(a) >= severity(b) ? a : b;
}

int exit_code_for(Verdict overall) {
  return overall == Verdict::kRegressed ? 1 : 0;
}

}  // namespace tokenscope::analyze
