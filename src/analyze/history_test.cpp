#include "analyze/history.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/temp_dir.h"

namespace tokenscope::analyze {
namespace {

namespace fs = std::filesystem;

// The parts of a sim run.json the history reads.
nlohmann::json sim_run(std::uint64_t seed, double rate, double ttft_p99 = 100.0) {
  return {{"tool", {{"name", "tokenscope"}, {"version", "0.1.0"}, {"command", "sim"}}},
          {"partial", false},
          {"settings",
           {{"requested",
             {{"workload",
               {{"rate_rps", rate}, {"num_requests", 100}, {"seed", seed}, {"seed_arrival", nullptr}}},
              {"engine", {{"model", "llama-3-8b"}, {"max_num_seqs", 256}}},
              {"output", {{"out", "/tmp/x" + std::to_string(seed)}, {"steps", true}}}}},
            {"effective",
             {{"engine",
               {{"model", {{"name", "llama-3-8b"}}},
                {"gpu", {{"name", "h100-sxm"}}},
                {"tensor_parallel", 1}}}}}}},
          {"summary",
           {{"requests_total", 100},
            {"requests_failed", 4},
            {"ttft_ms", {{"mean", 50.0}, {"p50", 40.0}, {"p90", 80.0}, {"p99", ttft_p99}}},
            {"tpot_ms", {{"p50", 7.5}, {"p99", nullptr}}},
            {"request_throughput_rps", 4.5},
            {"goodput_rps", nullptr}}}};
}

// The parts of a bench run.json the history reads.
nlohmann::json bench_run(const std::string& url, std::uint64_t seed, double effective_rate) {
  return {{"tool", {{"name", "tokenscope"}, {"version", "0.1.0"}, {"command", "bench"}}},
          {"clock", {{"unix_ns", 1796083200123456789LL}}},
          {"partial", false},
          {"settings",
           {{"requested",
             {{"workload", {{"rate_rps", 2.0}, {"seed", seed}}},
              {"workload_file", nullptr},
              {"target",
               {{"url", url.empty() ? nlohmann::json(nullptr) : nlohmann::json(url)},
                {"api", "completions"},
                {"sampling", {{"temperature", 0.0}, {"seed", seed}}}}},
              {"load", {{"max_error_rate", 0.1 * static_cast<double>(seed)}, {"client_threads", 1}}},
              {"server", {{"faults", ""}, {"fault_seed", seed}}}}},
            {"effective",
             {{"load", {{"rate_rps", effective_rate}}},
              {"target",
               {{"url", "http://127.0.0.1:4242"},
                {"model", "llama-3-8b"},
                {"in_process", url.empty()},
                {"models",
                 {{"available", true},
                  {"models", {{{"id", "meta-llama/Llama-3-8B"}, {"owned_by", "vllm"}}}}}}}}}}}},
          {"summary", nullptr}};
}

void write_run(const fs::path& dir, const nlohmann::json& run) {
  fs::create_directories(dir);
  std::ofstream(dir / "run.json") << run.dump(1);
}

RegisterOptions at_time(double finished_unix) {
  RegisterOptions o;
  o.finished_unix = finished_unix;
  return o;
}

// ---- pure parts ----

TEST(HistoryHash, Fnv1a64MatchesThePublishedTestVectors) {
  // The FNV test suite (Fowler, Noll, Vo; draft-eastlake-fnv): FNV-1a 64.
  EXPECT_EQ(fnv1a64_hex(""), "cbf29ce484222325");
  EXPECT_EQ(fnv1a64_hex("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(fnv1a64_hex("foobar"), "85944171f73967e8");
}

TEST(HistoryHash, SettingsAreCanonicalJsonWithoutSeedsAndOutput) {
  const auto run = sim_run(1, 5.0);
  EXPECT_EQ(
      comparable_settings(run).dump(),
      R"({"command":"sim","rate_rps":null,"requested":{"engine":{"max_num_seqs":256,"model":"llama-3-8b"},)"
      R"("workload":{"num_requests":100,"rate_rps":5.0}}})");
  // Python: json.dumps(that, sort_keys=True, separators=(',',':')), then
  // FNV-1a 64 of its bytes (h ^= byte; h = h * 0x100000001b3 mod 2**64).
  EXPECT_EQ(settings_hash(run), "1c12df89d3ec0296");
  EXPECT_EQ(comparable_workload(run).dump(),
            R"({"rate_rps":null,"workload":{"num_requests":100,"rate_rps":5.0},"workload_file":null})");
  EXPECT_EQ(workload_hash(run), "56697eef72162d53");
}

TEST(HistoryHash, ADifferentSeedIsComparableADifferentRateIsNot) {
  EXPECT_EQ(settings_hash(sim_run(1, 5.0)), settings_hash(sim_run(2, 5.0)));
  EXPECT_EQ(workload_hash(sim_run(1, 5.0)), workload_hash(sim_run(2, 5.0)));
  EXPECT_NE(settings_hash(sim_run(1, 5.0)), settings_hash(sim_run(1, 6.0)));
  EXPECT_NE(workload_hash(sim_run(1, 5.0)), workload_hash(sim_run(1, 6.0)));
  // A seed anywhere in the settings ("*_seed") is left out too.
  auto perturbed = sim_run(1, 5.0);
  perturbed["settings"]["requested"]["engine"]["perturb"] = {"leak:0.01"};
  perturbed["settings"]["requested"]["engine"]["perturb_seed"] = 7;
  auto perturbed_again = perturbed;
  perturbed_again["settings"]["requested"]["engine"]["perturb_seed"] = 8;
  EXPECT_EQ(settings_hash(perturbed), settings_hash(perturbed_again));
  EXPECT_NE(settings_hash(perturbed), settings_hash(sim_run(1, 5.0)));  // perturbations are a setting
  auto engine = sim_run(1, 5.0);
  engine["settings"]["requested"]["engine"]["max_num_seqs"] = 24;
  EXPECT_NE(settings_hash(engine), settings_hash(sim_run(1, 5.0)));
  EXPECT_EQ(workload_hash(engine), workload_hash(sim_run(1, 5.0)));  // the same workload
}

TEST(HistoryHash, BenchLeavesOutSeedsUrlAndErrorThresholdButNotTheEffectiveRate) {
  // Seeds of the workload, the sampling and the faults differ, as do the
  // URL and --max-error-rate: still comparable.
  EXPECT_EQ(settings_hash(bench_run("http://a:8000", 1, 2.0)),
            settings_hash(bench_run("http://b:8000", 2, 2.0)));
  // A sweep's runs differ in the effective rate only.
  EXPECT_NE(settings_hash(bench_run("", 1, 2.0)), settings_hash(bench_run("", 1, 4.0)));
  EXPECT_NE(workload_hash(bench_run("", 1, 2.0)), workload_hash(bench_run("", 1, 4.0)));
  auto api = bench_run("", 1, 2.0);
  api["settings"]["requested"]["target"]["api"] = "chat";
  EXPECT_NE(settings_hash(api), settings_hash(bench_run("", 1, 2.0)));
}

TEST(HistoryHash, NotABenchOrSimRunIsAnInputError) {
  auto run = sim_run(1, 5.0);
  run["tool"]["command"] = "probe";
  EXPECT_THROW(settings_hash(run), InputError);
  run["tool"]["command"] = "sim";
  run["settings"].erase("requested");
  EXPECT_THROW(workload_hash(run), InputError);
}

TEST(HistoryMetrics, HeadlineNumbersOfASummary) {
  const auto m = headline_metrics(sim_run(1, 5.0)["summary"]);
  const std::vector<std::pair<std::string, double>> expected = {
      {"ttft_ms.mean", 50.0},
      {"ttft_ms.p50", 40.0},
      {"ttft_ms.p90", 80.0},
      {"ttft_ms.p99", 100.0},
      {"tpot_ms.p50", 7.5},             // tpot p99 null: left out
      {"request_throughput_rps", 4.5},  // goodput null: left out
      {"error_rate", 0.04},             // 4 / 100
  };
  EXPECT_EQ(m, expected);
  EXPECT_TRUE(headline_metrics(nullptr).empty());  // a partial run without a summary
  EXPECT_EQ(find_history_metric("ttft_ms.p99")->worse, Worse::kHigher);
  EXPECT_EQ(find_history_metric("output_token_throughput_tps")->worse, Worse::kLower);
  EXPECT_EQ(find_history_metric("ttft_p99"), nullptr);
}

TEST(HistoryEntry, TargetVersionAndEnvironmentOfBenchAndSim) {
  const auto remote = history_run_from_json(bench_run("http://gpu1:8000", 1, 2.0), "/runs/a", {});
  EXPECT_EQ(remote.command, "bench");
  EXPECT_EQ(remote.target, "http://gpu1:8000");
  EXPECT_EQ(remote.target_version, "meta-llama/Llama-3-8B (owned_by vllm)");
  ASSERT_TRUE(remote.started_unix);
  EXPECT_DOUBLE_EQ(*remote.started_unix, 1796083200.123456789);
  EXPECT_TRUE(remote.metrics.empty());  // no summary
  EXPECT_EQ(remote.environment["models"]["models"][0]["owned_by"], "vllm");
  // What the server says of its build comes before the model list.
  auto said = bench_run("http://gpu1:8080", 1, 2.0);
  said["settings"]["effective"]["target"]["server_info"] = {
      {"available", true}, {"engine", "llama.cpp"}, {"version", "b5002-c392e509"}, {"max_batch", 4}};
  EXPECT_EQ(history_run_from_json(said, "/runs/s", {}).target_version, "llama.cpp b5002-c392e509");

  auto in_process_run = bench_run("", 1, 2.0);
  in_process_run["tags"] = {"nightly", "version=v0.6.3"};
  RegisterOptions o;
  o.tags = {"ci", "nightly"};
  o.finished_unix = 1796083300.5;
  const auto in_process = history_run_from_json(in_process_run, "/runs/b", o);
  EXPECT_EQ(in_process.target, "in-process");
  EXPECT_EQ(in_process.target_version, "v0.6.3");  // the version= tag wins
  EXPECT_EQ(in_process.tags, (std::vector<std::string>{"nightly", "version=v0.6.3", "ci"}));
  EXPECT_DOUBLE_EQ(in_process.finished_unix, 1796083300.5);

  const auto sim = history_run_from_json(sim_run(1, 5.0), "/runs/c", {});
  EXPECT_EQ(sim.target, "sim");
  EXPECT_EQ(sim.target_version, "tokenscope 0.1.0");
  EXPECT_FALSE(sim.started_unix);  // virtual time: unknown unless given
  EXPECT_EQ(sim.environment["simulated_engine"]["gpu"], "h100-sxm");
}

TEST(HistoryPath, XdgDataHomeThenHome) {
  EXPECT_EQ(history_path_for("/data", "/home/u"), fs::path("/data/tokenscope/history.db"));
  // A relative XDG_DATA_HOME is ignored (XDG Base Directory Specification).
  EXPECT_EQ(history_path_for("rel", "/home/u"), fs::path("/home/u/.local/share/tokenscope/history.db"));
  EXPECT_EQ(history_path_for(nullptr, "/home/u"), fs::path("/home/u/.local/share/tokenscope/history.db"));
  EXPECT_THROW(history_path_for(nullptr, nullptr), UsageError);
  EXPECT_THROW(history_path_for("", ""), UsageError);
}

TEST(HistorySince, DurationsDatesAndSeconds) {
  EXPECT_DOUBLE_EQ(parse_since("7d", 1e9), 1e9 - 7 * 86400);
  EXPECT_DOUBLE_EQ(parse_since("12h", 1e9), 1e9 - 12 * 3600);
  EXPECT_DOUBLE_EQ(parse_since("1.5m", 1e9), 1e9 - 90);
  // Python: calendar.timegm((2026, 12, 1, 0, 0, 0)) and (2026, 12, 1, 10, 30, 15).
  EXPECT_DOUBLE_EQ(parse_since("2026-12-01", 0), 1796083200.0);
  EXPECT_DOUBLE_EQ(parse_since("2026-12-01T10:30:15Z", 0), 1796121015.0);
  EXPECT_DOUBLE_EQ(parse_since("2026-12-01T10:30", 0), 1796121000.0);
  EXPECT_DOUBLE_EQ(parse_since("1796083200", 0), 1796083200.0);
  for (const char* bad : {"", "yesterday", "7x", "-3d", "2026-13-01", "2026-12-01T25:00", "2026-12-01 junk"})
    EXPECT_THROW(parse_since(bad, 1e9), UsageError) << bad;
}

// ---- the database ----

TEST(HistoryDb, CreatesTheFileAndItsDirectoriesWithTheSchema) {
  TempDir tmp;
  const fs::path db = tmp.path() / "a" / "b" / "history.db";
  {
    History h(db);
    EXPECT_EQ(h.schema_version(), kHistorySchemaVersion);
    EXPECT_EQ(h.integrity_check(), "ok");
  }
  EXPECT_TRUE(fs::exists(db));
  // The tables and the journal mode, read with SQLite itself.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  std::vector<std::string> tables;
  sqlite3_exec(
      raw, "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name",
      [](void* out, int, char** v, char**) {
        static_cast<std::vector<std::string>*>(out)->push_back(v[0]);
        return 0;
      },
      &tables, nullptr);
  std::string mode;
  sqlite3_exec(
      raw, "PRAGMA journal_mode",
      [](void* out, int, char** v, char**) {
        *static_cast<std::string*>(out) = v[0];
        return 0;
      },
      &mode, nullptr);
  sqlite3_close(raw);
  EXPECT_EQ(tables, (std::vector<std::string>{"metrics", "runs"}));
  EXPECT_EQ(mode, "wal");
  // Opened again (no migration to run), the schema stays.
  History again(db, /*create=*/false);
  EXPECT_EQ(again.schema_version(), kHistorySchemaVersion);
}

TEST(HistoryDb, WithoutCreateAMissingFileIsAUsageError) {
  TempDir tmp;
  EXPECT_THROW(History(tmp.path() / "none.db", false), UsageError);
  EXPECT_FALSE(fs::exists(tmp.path() / "none.db"));
}

// An existing empty file is a SQLite database of version 0: the migrations
// bring it to the current schema, as they will bring older histories.
TEST(HistoryDb, AnEmptyFileIsMigratedToTheSchema) {
  TempDir tmp;
  const fs::path db = tmp.path() / "empty.db";
  std::ofstream{db};
  ASSERT_EQ(fs::file_size(db), 0u);
  History h(db, /*create=*/false);
  EXPECT_EQ(h.schema_version(), kHistorySchemaVersion);
  write_run(tmp.path() / "r", sim_run(1, 5.0));
  EXPECT_EQ(h.register_run(tmp.path() / "r"), 1);
  EXPECT_EQ(h.integrity_check(), "ok");
}

TEST(HistoryDb, BadFilesGiveClearErrors) {
  TempDir tmp;
  const auto message_of = [](const fs::path& p) {
    try {
      History h(p);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Not a database at all.
  const fs::path text = tmp.path() / "text.db";
  std::ofstream(text) << std::string(4096, 'x');
  EXPECT_NE(message_of(text).find("not a readable tokenscope history database"), std::string::npos)
      << message_of(text);
  // A history whose pages were overwritten after the header.
  const fs::path corrupt = tmp.path() / "corrupt.db";
  { History h(corrupt); }
  {
    std::fstream f(corrupt, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    const std::string junk(8000, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  EXPECT_NE(message_of(corrupt).find("not a readable tokenscope history database"), std::string::npos)
      << message_of(corrupt);
  // A newer schema than this code knows.
  const fs::path newer = tmp.path() / "newer.db";
  { History h(newer); }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(newer.c_str(), &raw), SQLITE_OK);
  sqlite3_exec(raw, "PRAGMA user_version = 99", nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  EXPECT_NE(message_of(newer).find("schema version 99 is newer than this tokenscope's (1)"),
            std::string::npos)
      << message_of(newer);
  // Another program's SQLite database.
  const fs::path other = tmp.path() / "other.db";
  ASSERT_EQ(sqlite3_open(other.c_str(), &raw), SQLITE_OK);
  sqlite3_exec(raw, "CREATE TABLE t (x)", nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  EXPECT_NE(message_of(other).find("a SQLite database of another program"), std::string::npos)
      << message_of(other);
  // A directory.
  EXPECT_NE(message_of(tmp.path()).find("is a directory"), std::string::npos);
}

class HistoryRuns : public ::testing::Test {
 protected:
  // Registers a run directory made from `run` at the given time.
  std::int64_t add(const std::string& name, const nlohmann::json& run, double finished,
                   RegisterOptions o = {}) {
    write_run(tmp_.path() / name, run);
    o.finished_unix = finished;
    return history_.register_run(tmp_.path() / name, o);
  }
  TempDir tmp_;
  History history_{tmp_.path() / "history.db"};
};

TEST_F(HistoryRuns, RegisterAndListNewestFirstWithFilters) {
  RegisterOptions ci;
  ci.tags = {"ci"};
  const auto a = add("a", sim_run(1, 5.0), 1000);
  const auto b = add("b", bench_run("http://gpu1:8000", 1, 2.0), 2000, ci);
  const auto c = add("c", sim_run(2, 5.0, 120.0), 3000, ci);
  auto partial = sim_run(3, 5.0);
  partial["partial"] = true;
  partial["summary"] = nullptr;
  const auto d = add("d", partial, 4000);

  const auto ids = [](const std::vector<HistoryRun>& runs) {
    std::vector<std::int64_t> out;
    for (const auto& r : runs) out.push_back(r.id);
    return out;
  };
  const auto all = history_.list({});
  EXPECT_EQ(ids(all), (std::vector<std::int64_t>{d, c, b, a}));
  EXPECT_EQ(all[3].path, fs::weakly_canonical(tmp_.path() / "a").string());
  EXPECT_EQ(all[3].command, "sim");
  EXPECT_DOUBLE_EQ(all[3].finished_unix, 1000);
  EXPECT_TRUE(all[0].partial);
  EXPECT_TRUE(all[0].metrics.empty());
  EXPECT_EQ(all[1].metric("ttft_ms.p99"), 120.0);
  EXPECT_EQ(all[1].metric("error_rate"), 0.04);
  EXPECT_EQ(all[1].tags, std::vector<std::string>{"ci"});
  EXPECT_TRUE(all[1].summary.is_null());  // documents only when asked for

  HistoryFilter f;
  f.command = "sim";
  EXPECT_EQ(ids(history_.list(f)), (std::vector<std::int64_t>{d, c, a}));
  f = {};
  f.target = "http://gpu1:8000";
  EXPECT_EQ(ids(history_.list(f)), (std::vector<std::int64_t>{b}));
  f = {};
  f.tag = "ci";
  EXPECT_EQ(ids(history_.list(f)), (std::vector<std::int64_t>{c, b}));
  f = {};
  f.workload_hash = workload_hash(sim_run(7, 5.0));
  EXPECT_EQ(ids(history_.list(f)), (std::vector<std::int64_t>{d, c, a}));
  f = {};
  f.since_unix = 2000;
  EXPECT_EQ(ids(history_.list(f)), (std::vector<std::int64_t>{d, c, b}));
  f = {};
  f.limit = 2;
  EXPECT_EQ(ids(history_.list(f)), (std::vector<std::int64_t>{d, c}));
  f = {};
  f.include_partial = false;
  EXPECT_EQ(ids(history_.list(f)), (std::vector<std::int64_t>{c, b, a}));

  const auto full = history_.get(c);
  ASSERT_TRUE(full);
  EXPECT_EQ(full->summary["ttft_ms"]["p99"], 120.0);
  EXPECT_EQ(full->settings["requested"]["workload"]["seed"], 2);
  EXPECT_EQ(full->environment["tool"]["command"], "sim");
  EXPECT_FALSE(history_.get(999));
  EXPECT_EQ(history_.integrity_check(), "ok");
}

TEST_F(HistoryRuns, LatestComparableRunPicksAnotherSeedNeverAnotherRate) {
  const auto old_seed = add("s1", sim_run(1, 5.0), 1000);
  const auto other_rate = add("r6", sim_run(1, 6.0), 1500);
  const auto seed2 = add("s2", sim_run(2, 5.0), 2000);
  auto partial = sim_run(3, 5.0);
  partial["partial"] = true;
  add("s3", partial, 2500);  // interrupted: never a baseline
  const auto cand = add("s4", sim_run(4, 5.0), 3000);
  const auto s5 = add("s5", sim_run(5, 5.0), 4000);  // after the candidate

  const auto c = history_.get(cand);
  ASSERT_TRUE(c);
  const auto base = history_.latest_comparable(*c);
  ASSERT_TRUE(base);
  EXPECT_EQ(base->id, seed2);
  EXPECT_EQ(base->summary["ttft_ms"]["p99"], 100.0);
  // The first run has nothing before it; a run at another rate has no peer.
  EXPECT_FALSE(history_.latest_comparable(*history_.get(old_seed)));
  EXPECT_FALSE(history_.latest_comparable(*history_.get(other_rate)));
  // An unregistered directory (its own path never matches): by its time.
  HistoryRun loose = history_run_from_json(sim_run(9, 5.0), "/elsewhere", at_time(1800));
  ASSERT_TRUE(history_.latest_comparable(loose));
  EXPECT_EQ(history_.latest_comparable(loose)->id, old_seed);
  // The same directory run again is not its own baseline.
  const auto again = add("s4", sim_run(6, 5.0), 5000);
  const auto base_again = history_.latest_comparable(*history_.get(again));
  ASSERT_TRUE(base_again);
  EXPECT_NE(base_again->path, history_.get(again)->path);
  EXPECT_EQ(history_.find_by_path(history_.get(cand)->path)->id, again);
  // --tag narrows the choice (a server setting bench cannot see): the latest run so tagged.
  auto tagged = sim_run(7, 5.0);
  tagged["tags"] = {"np=4"};
  const auto np4 = add("t7", tagged, 1200);
  HistoryFilter f;
  f.tag = "np=4";
  ASSERT_TRUE(history_.latest_comparable(*history_.get(again), f));
  EXPECT_EQ(history_.latest_comparable(*history_.get(again), f)->id, np4);
  EXPECT_EQ(history_.latest_comparable(*history_.get(again))->id, s5);  // no tag asked: the latest
  f.tag = "np=8";
  EXPECT_FALSE(history_.latest_comparable(*history_.get(again), f));
  // --target replaces the run's own: none was measured on another target here.
  HistoryFilter other;
  other.target = "http://10.0.0.1:8000";
  EXPECT_FALSE(history_.latest_comparable(*history_.get(again), other));
}

TEST_F(HistoryRuns, MetricSeriesInTimeOrder) {
  // Registered out of time order; partial runs and runs without the metric
  // are left out.
  add("c", sim_run(3, 5.0, 130.0), 3000);
  add("a", sim_run(1, 5.0, 110.0), 1000);
  add("b", sim_run(2, 5.0, 120.0), 2000);
  auto partial = sim_run(4, 5.0, 999.0);
  partial["partial"] = true;
  add("p", partial, 2500);
  auto none = sim_run(5, 5.0);
  none["summary"]["ttft_ms"].erase("p99");
  add("n", none, 2600);
  const auto s = history_.metric_series("ttft_ms.p99", {});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].value, 110.0);
  EXPECT_EQ(s[1].value, 120.0);
  EXPECT_EQ(s[2].value, 130.0);
  EXPECT_DOUBLE_EQ(s[2].finished_unix, 3000);
  HistoryFilter last_two;
  last_two.limit = 2;
  const auto t = history_.metric_series("ttft_ms.p99", last_two);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].value, 120.0);
  EXPECT_EQ(t[1].value, 130.0);
  EXPECT_TRUE(history_.metric_series("goodput_rps", {}).empty());
}

TEST(HistoryDb, TwoProcessesRegisteringAtOnceLoseNothing) {
  TempDir tmp;
  const fs::path db = tmp.path() / "history.db";
  write_run(tmp.path() / "run-a", sim_run(1, 5.0));
  write_run(tmp.path() / "run-b", bench_run("", 1, 2.0));
  // Both children wait on the pipe, so that they start writing together
  // (and both create the database: neither exists before).
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> children;
  for (const char* dir : {"run-a", "run-b"}) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(go[1]);
      char c;
      [[maybe_unused]] const auto n = ::read(go[0], &c, 1);
      int status = 0;
      try {
        History h(db);
        for (int i = 0; i < 100; ++i) {
          RegisterOptions o;
          o.tags = {std::to_string(i)};
          h.register_run(tmp.path() / dir, o);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
        status = 1;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);  // both read end-of-file: go
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  History h(db, false);
  EXPECT_EQ(h.list({}).size(), 200u);
  HistoryFilter sims;
  sims.command = "sim";
  EXPECT_EQ(h.list(sims).size(), 100u);
  HistoryFilter tag;
  tag.tag = "99";
  EXPECT_EQ(h.list(tag).size(), 2u);
  EXPECT_EQ(h.metric_series("ttft_ms.p99", {}).size(), 100u);
  EXPECT_EQ(h.integrity_check(), "ok");
}

// ---- the trend ----

std::vector<MetricPoint> points_of(const std::vector<double>& values) {
  std::vector<MetricPoint> out;
  for (std::size_t i = 0; i < values.size(); ++i)
    out.push_back({static_cast<std::int64_t>(i + 1), 1000.0 * static_cast<double>(i),
                   "/r" + std::to_string(i), values[i]});
  return out;
}

// Ten runs near 100, then ten near 150.
const std::vector<double> kStep = {100, 101, 99,  100, 102, 98,  100, 101, 99,  100,
                                   150, 151, 149, 150, 152, 148, 150, 151, 149, 150};

TEST(HistoryTrend, ALatencyStepUpIsARegression) {
  const Trend t = find_trend("ttft_ms.p99", points_of(kStep));
  ASSERT_EQ(t.changes.size(), 1u);
  const auto& c = t.changes[0];
  EXPECT_EQ(c.change.index, 10u);
  EXPECT_EQ(c.at.run_id, 11);
  EXPECT_DOUBLE_EQ(c.change.mean_before, 100.0);
  EXPECT_DOUBLE_EQ(c.change.mean_after, 150.0);
  EXPECT_DOUBLE_EQ(c.change.relative_change, 0.5);
  EXPECT_TRUE(c.regression);
  EXPECT_TRUE(t.last_is_regression());
}

TEST(HistoryTrend, AThroughputStepUpIsAnImprovement) {
  const Trend t = find_trend("output_token_throughput_tps", points_of(kStep));
  ASSERT_EQ(t.changes.size(), 1u);
  EXPECT_FALSE(t.changes[0].regression);
  EXPECT_FALSE(t.last_is_regression());
  // Down is a regression for throughput.
  std::vector<double> down(kStep.rbegin(), kStep.rend());
  EXPECT_TRUE(find_trend("output_token_throughput_tps", points_of(down)).last_is_regression());
}

TEST(HistoryTrend, FlatShortAndUnknown) {
  const std::vector<double> flat = {100, 101, 99, 100, 102, 98, 100, 101, 99, 100};
  EXPECT_TRUE(find_trend("e2e_ms.p99", points_of(flat)).changes.empty());
  EXPECT_TRUE(find_trend("e2e_ms.p99", points_of({1, 100})).changes.empty());  // fewer than 3 points
  EXPECT_THROW(find_trend("ttft_p99", points_of(flat)), UsageError);
}

}  // namespace
}  // namespace tokenscope::analyze
