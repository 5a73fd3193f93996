// The vocabulary of the regression checklist (../shared/design/CHECKLIST.md,
// docs/check.md): an item's verdict, and the tolerance band that turns a
// change with its confidence interval into one.
#pragma once

#include <optional>
#include <string_view>

namespace tokenscope::analyze {

enum class Verdict { kPass, kRegressed, kImproved, kInconclusive, kNoData };

std::string_view to_string(Verdict v);
std::optional<Verdict> verdict_from_string(std::string_view s);

// Which direction of a change is worse for a metric (latency: higher;
// throughput, hit rate: lower).
enum class Worse { kHigher, kLower };

// A change of a metric from the base run to the candidate (candidate minus
// base, or a log ratio), with its confidence interval.
struct Change {
  double estimate = 0.0;
  double ci_low = 0.0;
  double ci_high = 0.0;
};

// The tolerance band: a change is only a regression (improvement) when it is
// significant in the worse (better) direction, that is its interval excludes
// zero, and its estimate is beyond the tolerance. A significant change within
// the tolerance is a pass, as is a non-significant one whose whole interval
// lies within the band (the runs are equivalent within the tolerance). A
// non-significant change whose interval reaches beyond the band is
// inconclusive: the data cannot tell. tolerance >= 0, in the change's units.
Verdict classify_change(const Change& change, double tolerance, Worse worse);

// How items combine: the most severe verdict of the two (regressed >
// inconclusive > improved > pass > no-data when at least one is not no-data).
Verdict combine(Verdict a, Verdict b);

// The exit code of `tokenscope check`: 1 when a verdict is regressed, else 0.
int exit_code_for(Verdict overall);

}  // namespace tokenscope::analyze
