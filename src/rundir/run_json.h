// run.json's common part, as every command that makes a run directory writes
// it (docs/architecture.md "The run-directory contract"; its readers are in
// readers.h: RunInfo). bench and sim both start from run_json_head() and add
// what is theirs (results, counters, observations) before writing it with
// RunDirectory::write_run_json.
//
//   {"tool": {"name": "tokenscope", "version": V, "command": C},
//    "clock": the wall-clock anchor (readers.h ClockAnchor; sim: virtual),
//    "partial": true until the run reached its end,
//    "tags": [...],                    // --tag, for the history of runs
//    "settings": {"requested": as given, "effective": as run},
//    "summary": null until there is one}
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tokenscope::rundir {

struct RunHead {
  std::string command;   // "bench", "sim"
  nlohmann::json clock;  // bench: clock_anchor(); sim: virtual_clock()
  bool partial = true;   // false for a run that is written once, at its end, whole
  std::vector<std::string> tags;
  nlohmann::json requested;  // the settings as given
  nlohmann::json effective;  // the settings as run (defaults and derivations resolved)
};

// The common part of run.json (above), summary null.
nlohmann::json run_json_head(const RunHead& head);

// The clock of a run in virtual time (sim): no wall-clock anchor, so that a
// run directory stays byte-identical for a seed; exports to UTC take one of
// their own.
nlohmann::json virtual_clock();

// Why a run failed when more than max_error_rate of its requests failed
// (the counts by outcome from its summary, and the first failure's detail
// when given); "" otherwise. bench's verdict, and merge's over the shards.
std::string error_rate_failure(const nlohmann::json& summary, double max_error_rate, const std::string& url,
                               const std::string& first_error);

}  // namespace tokenscope::rundir
