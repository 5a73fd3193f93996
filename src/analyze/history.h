// The history of runs (docs/check.md "History"): every run directory that
// `bench` and `sim` write is registered in one SQLite database, so that
// `tokenscope history` lists them, `check --baseline auto` finds the latest
// comparable run and `check --trend METRIC` follows a metric across runs.
//
// The database (schema version kHistorySchemaVersion, in PRAGMA
// user_version; older files are migrated on open, newer ones refused):
//   runs(id, path, command, started_unix, finished_unix, partial,
//        workload_hash, target, target_version, settings_hash,
//        tags (JSON array), settings (JSON), summary (JSON), environment (JSON))
//   metrics(run_id, name, value): the summary's headline numbers
//        (kHistoryMetrics), so that a trend is a query, not JSON parsing.
// WAL journal, a busy timeout of 10 s, every write one transaction: several
// processes (two benches at once) may register into one file.
//
// Comparability. Two runs are comparable when they have the same
// workload_hash, target and settings_hash:
//  * settings_hash: FNV-1a 64 of the canonical JSON (keys sorted, no
//    spaces) of {"command", "requested", "rate_rps"}, where "requested" is
//    run.json's settings.requested without the keys that do not change what
//    is measured: every seed (a key "seed", "seed_*" or "*_seed" at any
//    depth: workload.seed, workload.seed_arrival, target.sampling.seed,
//    server.fault_seed, engine.perturb_seed...), target.url (the target is
//    compared on its own), load.max_error_rate (a verdict threshold) and
//    sim's output options (output: out, steps, samples, sample_interval_s);
//    "rate_rps" is bench's effective open-loop rate (a sweep's runs differ
//    only there), null for sim;
//  * workload_hash: the same over {"workload", "workload_file", "rate_rps"}:
//    settings.requested.workload without its seeds, bench's workload file
//    path (its name, not its contents) and the rate as above;
//  * target: bench's --target URL as given, "in-process" for bench's
//    built-in simulator, "sim" for sim.
// The output directory, tags and times are in neither hash, so that two runs
// that differ only in their seed are comparable and two at different rates
// are not.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyze/change_point.h"
#include "analyze/verdict.h"

namespace tokenscope::analyze {

// The schema version this code writes (PRAGMA user_version).
inline constexpr int kHistorySchemaVersion = 1;

// A headline metric kept per run: its name (the path in run.json's summary,
// "ttft_ms.p99"; "error_rate" is requests_failed / requests_total), its unit
// and which direction is worse.
struct HistoryMetric {
  std::string_view name;
  std::string_view unit;
  Worse worse;
};

inline constexpr HistoryMetric kHistoryMetrics[] = {
    {"ttft_ms.mean", "ms", Worse::kHigher},
    {"ttft_ms.p50", "ms", Worse::kHigher},
    {"ttft_ms.p90", "ms", Worse::kHigher},
    {"ttft_ms.p99", "ms", Worse::kHigher},
    {"tpot_ms.mean", "ms", Worse::kHigher},
    {"tpot_ms.p50", "ms", Worse::kHigher},
    {"tpot_ms.p90", "ms", Worse::kHigher},
    {"tpot_ms.p99", "ms", Worse::kHigher},
    {"itl_ms.mean", "ms", Worse::kHigher},
    {"itl_ms.p50", "ms", Worse::kHigher},
    {"itl_ms.p90", "ms", Worse::kHigher},
    {"itl_ms.p99", "ms", Worse::kHigher},
    {"e2e_ms.mean", "ms", Worse::kHigher},
    {"e2e_ms.p50", "ms", Worse::kHigher},
    {"e2e_ms.p90", "ms", Worse::kHigher},
    {"e2e_ms.p99", "ms", Worse::kHigher},
    {"ttfo_ms.p50", "ms", Worse::kHigher},  // the ttfo_ms and tpot_answer_ms rows: runs with reasoning
    {"ttfo_ms.p90", "ms", Worse::kHigher},
    {"ttfo_ms.p99", "ms", Worse::kHigher},
    {"tpot_answer_ms.p50", "ms", Worse::kHigher},
    {"tpot_answer_ms.p99", "ms", Worse::kHigher},
    {"request_throughput_rps", "req/s", Worse::kLower},
    {"output_token_throughput_tps", "tok/s", Worse::kLower},
    {"goodput_rps", "req/s", Worse::kLower},
    {"prefix_cache_hit_rate", "ratio", Worse::kLower},
    {"error_rate", "ratio", Worse::kHigher},
};

// The metric of that name; nullptr when there is none.
const HistoryMetric* find_history_metric(std::string_view name);

// The headline metrics of a run.json summary, in kHistoryMetrics order:
// those present as finite numbers (null, missing and non-finite values are
// left out; error_rate needs requests_total > 0; TTFO and the answer's TPOT
// only with requests_with_reasoning > 0, else they repeat TTFT and TPOT). A summary that is not an
// object (a partial run's null) gives none.
std::vector<std::pair<std::string, double>> headline_metrics(const nlohmann::json& summary);

// FNV-1a, 64 bits, of the bytes (offset basis 0xcbf29ce484222325, prime
// 0x100000001b3), as 16 lower-case hex digits: the hashes' function.
std::string fnv1a64_hex(std::string_view bytes);

// The JSON settings_hash and workload_hash are taken over (see the top of
// this file), from a whole run.json. Throws InputError when it has no
// settings.requested object or no tool.command.
nlohmann::json comparable_settings(const nlohmann::json& run);
nlohmann::json comparable_workload(const nlohmann::json& run);
// fnv1a64_hex of their dump() (nlohmann sorts keys: the canonical form).
std::string settings_hash(const nlohmann::json& run);
std::string workload_hash(const nlohmann::json& run);

// One run of the history.
struct HistoryRun {
  std::int64_t id = 0;                 // 0: not registered
  std::string path;                    // the run directory, absolute
  std::string command;                 // "bench" or "sim"
  std::optional<double> started_unix;  // s since the epoch; nullopt when unknown
  double finished_unix = 0;
  bool partial = false;  // interrupted (run.json "partial")
  std::string workload_hash, target, target_version, settings_hash;
  std::vector<std::string> tags;
  // The documents; left null by list() unless asked for.
  nlohmann::json settings, summary, environment;
  std::vector<std::pair<std::string, double>> metrics;  // headline_metrics(summary)
  // The metric of that name; nullopt when the run has none.
  std::optional<double> metric(std::string_view name) const;
};

// What registration adds to run.json.
struct RegisterOptions {
  std::vector<std::string> tags;  // beside run.json's own "tags"
  // When the run started and ended (s since the epoch). Defaults: run.json's
  // clock.unix_ns (bench) or unknown (sim runs on virtual time); the
  // modification time of run.json.
  std::optional<double> started_unix, finished_unix;
};

// The entry of a run from its run.json (pure): command, target, target
// version, hashes, tags (run.json's "tags", then options.tags, duplicates
// dropped), settings, summary, environment, headline metrics.
// target_version: the value of a tag "version=TEXT" when there is one; else
// bench's record of the target's GET /v1/models (settings.effective.target.
// models: the first model's id, its "version" and "(owned_by X)" when
// present), else its model name; sim: "tokenscope VERSION". finished_unix
// is options.finished_unix or 0. Throws InputError for a run.json that is
// not a bench or sim run.
HistoryRun history_run_from_json(const nlohmann::json& run, std::string path, const RegisterOptions& options);

// The same from a run directory (reads DIR/run.json; the path is made
// absolute; finished_unix defaults to run.json's modification time).
// Throws InputError / UsageError when there is no readable run.json.
HistoryRun history_run_from_directory(const std::filesystem::path& dir, const RegisterOptions& options = {});

// Which runs: every field set narrows the set.
struct HistoryFilter {
  std::optional<std::string> command, target, tag, workload_hash, settings_hash;
  std::optional<double> since_unix;  // finished at or after
  bool include_partial = true;
  std::size_t limit = 0;  // list(): at most this many (newest); 0: all
};

// One point of a metric across runs, oldest first.
struct MetricPoint {
  std::int64_t run_id = 0;
  double finished_unix = 0;
  std::string path;
  double value = 0;
};

// The default database: $XDG_DATA_HOME/tokenscope/history.db, with
// XDG_DATA_HOME defaulting to $HOME/.local/share (XDG Base Directory
// Specification); an unset or relative XDG_DATA_HOME is ignored, as the
// specification says. Pure: the two variables are arguments (nullptr:
// unset). Throws UsageError when neither gives an absolute directory.
std::filesystem::path history_path_for(const char* xdg_data_home, const char* home);
// history_path_for(getenv("XDG_DATA_HOME"), getenv("HOME")).
std::filesystem::path default_history_path();

// "7d", "12h", "30m" before now, or a UTC date "YYYY-MM-DD" or time
// "YYYY-MM-DDTHH:MM[:SS]" (a trailing Z allowed), or seconds since the epoch:
// as seconds since the epoch. Throws UsageError naming `option` otherwise.
double parse_since(std::string_view text, double now_unix, std::string_view option = "--since");

// The registry. Not thread-safe: one object per thread (processes may share
// the file).
class History {
 public:
  // Opens the database, creating it (and its directories) when `create`;
  // migrates an older schema. Throws UsageError when the file is not a
  // SQLite database, is corrupt, is another program's database, or has a
  // newer schema than kHistorySchemaVersion; when it does not exist and not
  // `create`; IoError when it cannot be created or written.
  explicit History(const std::filesystem::path& path, bool create = true);
  ~History();
  History(const History&) = delete;
  History& operator=(const History&) = delete;

  const std::filesystem::path& path() const { return path_; }
  int schema_version() const;

  // Registers a run (one transaction); returns its id. Each call adds a row:
  // a directory run again (--overwrite) is a new run.
  std::int64_t add(const HistoryRun& run);
  // history_run_from_directory, then add.
  std::int64_t register_run(const std::filesystem::path& dir, const RegisterOptions& options = {});

  // Runs matching the filter, newest first (finished_unix, then id). The
  // documents (settings, summary, environment) only when with_documents.
  std::vector<HistoryRun> list(const HistoryFilter& filter, bool with_documents = false) const;
  // The run of that id, documents included.
  std::optional<HistoryRun> get(std::int64_t id) const;
  // The latest registration of this directory (absolute path).
  std::optional<HistoryRun> find_by_path(const std::string& path) const;
  // The latest complete run comparable with `run` (same workload_hash,
  // target and settings_hash) that finished before it and is neither it
  // (id) nor in its directory; documents included. The filter narrows the
  // choice (check --baseline auto --tag np=4: a run of that server setting);
  // its target, when given, replaces the run's own (a baseline measured on
  // another target).
  std::optional<HistoryRun> latest_comparable(const HistoryRun& run, const HistoryFilter& filter = {}) const;
  // The metric of the complete runs matching the filter that have it, oldest
  // first (finished_unix, then id); filter.limit keeps the newest that many.
  std::vector<MetricPoint> metric_series(std::string_view metric, const HistoryFilter& filter) const;

  // PRAGMA integrity_check's answer ("ok" when sound).
  std::string integrity_check() const;

 private:
  struct Db;
  std::filesystem::path path_;
  std::unique_ptr<Db> db_;
};

// A change in a metric's history: the change point and the run it starts at.
struct TrendChange {
  ChangePoint change;
  MetricPoint at;           // the first run after the change
  bool regression = false;  // the metric moved in its worse direction
};

struct Trend {
  std::string metric;
  std::vector<MetricPoint> points;
  std::vector<TrendChange> changes;  // in time order
  // Whether the last change is a regression (`check --trend`'s exit 1).
  bool last_is_regression() const { return !changes.empty() && changes.back().regression; }
};

// Change points (find_change_points) of the metric's series, each marked a
// regression when the mean after it is worse than before it (higher for
// latency and the error rate, lower for throughput, goodput and hit rate).
// Throws UsageError for an unknown metric; fewer than 3 points give none.
Trend find_trend(std::string_view metric, std::vector<MetricPoint> points,
                 const ChangePointSettings& settings = {});

}  // namespace tokenscope::analyze
