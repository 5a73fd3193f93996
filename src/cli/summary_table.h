// The terminal summary shared by sim (and later bench).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tokenscope::cli {

struct SummaryHeader {
  std::string title;
  std::vector<std::string> lines;
  bool client_rows = false;  // bench: schedule-based latencies, send lag, ICL, outcomes, SLOs
};

// A millisecond value in a right-aligned table cell of `width` characters:
// milliseconds while they fit with a space before them, then seconds
// ("123.4s"), minutes ("m") or hours ("h"), so that no value runs into its
// neighbour.
std::string format_ms_cell(double ms, std::size_t width);

void print_summary_table(std::ostream& os, const SummaryHeader& header, const nlohmann::json& summary);
// run.json's "coupling" (bench/sim --coupling): kappa per class at p50 and
// p99 of TTFT, TPOT and E2E with their intervals. Nothing when null.
void print_coupling(std::ostream& os, const nlohmann::json& coupling);
// A fleet run's replicas (run.json "fleet"): requests, latency, throughput, prefix hits each.
void print_fleet(std::ostream& os, const nlohmann::json& fleet);
// sim --plan (run.json "plan"): a row per fleet tried, and the choice.
void print_plan(std::ostream& os, const nlohmann::json& plan);

// The between-run statistics of repeats (rundir/run_set.h
// repeat_statistics), one line per metric in repeat_metrics() order: the
// mean and its interval.
void print_repeat_statistics(std::ostream& os, const nlohmann::json& statistics);

}  // namespace tokenscope::cli
