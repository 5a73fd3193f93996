// Internals of the checklist (checklist.cpp and the item files): the
// samples and series the items take from a run, and the finding builders
// shared by the items. Not a public interface.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analyze/checklist.h"
#include "analyze/statistics.h"

namespace tokenscope::analyze::detail {

enum class Metric { kTtft, kTtftSched, kTpot, kE2e, kItlMean, kItlMax, kTtfo, kTpotAnswer };
std::string_view metric_name(Metric m);                            // "TTFT", ...
double metric_value(const RunData& run, Metric m, std::size_t i);  // NaN when the request has none

// The metric over the counted requests of a run (optionally one task class,
// optionally those sent in [t0, t1)), NaN and non-positive values left out.
std::vector<double> metric_sample(const RunData& run, Metric m, std::optional<std::uint16_t> task_class = {},
                                  Nanos t0 = INT64_MIN, Nanos t1 = INT64_MAX);
std::size_t counted_requests(const RunData& run);

// The series of a run with this canonical name (any source; every label set
// pooled in time order). Empty when the run has none.
struct Series {
  std::vector<Nanos> t;
  std::vector<double> v;
  bool empty() const { return t.empty(); }
};
Series find_series(const RunData& run, std::string_view name);
// A counter's rate per second between consecutive points (resets skipped),
// stamped at the later point.
Series counter_rate(const Series& counter);
// Values averaged in consecutive blocks of `block` points (the last partial
// block dropped when it has fewer than block / 2 points): roughly independent
// values from an autocorrelated series.
std::vector<double> block_means(const std::vector<double>& v, std::size_t block);

// Batch means: a run's requests (their send times given) in contiguous blocks
// by send time, as indexes into the given vector: min(10, n / 100) blocks of
// equal count (none when n < 500). Ten blocks of a long run are minutes
// apart, nearly independent; their t interval has 9 degrees of freedom.
std::vector<std::vector<std::size_t>> time_blocks(const std::vector<Nanos>& send);

struct BlockEstimate {
  double mean = 0, se = 0;  // of the block values; se = sd / sqrt(blocks)
  std::size_t blocks = 0;
};
BlockEstimate block_estimate(const std::vector<double>& block_values);

// The send-time midpoint of a run's counted requests (for the halves of a
// single-run item).
Nanos send_midpoint(const RunData& run);

// A finding on a relative shift of a higher-is-worse (or lower-is-worse)
// metric between two samples: the Hodges-Lehmann shift of logs (quantile:
// nullopt) or the shift of the nearest-rank p-quantile, judged with the
// tolerance band.
// With a quantile, each run's design effect (statistics.h tail_design_effect) widens
// its order-statistic interval to the run's effective size; 1: independent
// requests.
Finding relative_shift_finding(const std::string& metric, const SortedSample& base, const SortedSample& cand,
                               std::optional<double> quantile, double tolerance, Worse worse,
                               double confidence, double base_deff = 1.0, double cand_deff = 1.0);

// The metric's values of the counted requests sent in [t0, t1), in the
// run's send order (send_order: computed once per run, no sort here), NaN
// and non-positive values left out.
std::vector<double> metric_in_send_order(const RunData& run, Metric m,
                                         const std::vector<std::uint32_t>& order, Nanos t0 = INT64_MIN,
                                         Nanos t1 = INT64_MAX);
// The run's request indexes by send time (ties in index order).
std::vector<std::uint32_t> send_order(const RunData& run);
// A finding on a change with a normal interval (estimate, standard error).
Finding normal_change_finding(const std::string& metric, const std::string& unit, double base, double cand,
                              double se, double tolerance, Worse worse, double confidence,
                              const std::string& change_unit);

// Sets the item's verdict from its findings (the most severe) and its decisive finding.
void conclude(ItemResult& item);
ItemResult no_data(int number, const std::string& why);

// A run's engine setting (sim: settings.requested.engine.KEY; bench against
// the built-in server: settings.requested.server.engine.KEY).
std::optional<double> engine_setting(const RunData& run, const char* key);

// Why bench's samples of a run hold nothing from `source` ("gpu", "host",
// "cgroup", "server": run.json observe.sources[]): its `unavailable` reason,
// or "not collected: REASON" (its first error) when every read failed, or
// "not sampled" when bench had no such source; empty when the source was
// collected, or the run has no such record (sim, older runs).
std::string source_missing(const RunData& run, std::string_view source);
// Whether the run's server is this engine (run.json observe.sources[].engine
// or server.engines: "llama.cpp", "vllm-v1", ...).
bool server_engine_is(const RunData& run, std::string_view engine);

double z_of(double confidence);  // the two-sided normal quantile
std::string pct(double ratio);   // "12.3%"

}  // namespace tokenscope::analyze::detail
