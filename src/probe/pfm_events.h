// libpfm4 behind plain types (its perf_event.h cannot share a translation
// unit with <linux/perf_event.h>). Built only with TOKENSCOPE_HAVE_LIBPFM;
// perf_counters.cpp is the one caller.
#pragma once

#include <string>
#include <vector>

#include "probe/perf_counters.h"

namespace tokenscope::probe::pfm {

// Encodes `name` for perf_event_open at user level; on failure returns false
// with libpfm4's reason in *error.
bool encode(const std::string& name, EventSpec* out, std::string* error);
std::vector<PmuEvents> pmus(bool with_events, const std::string& only_pmu);

}  // namespace tokenscope::probe::pfm
