// merge (rundir/merge.h): shards made here, each on a clock of its own, are
// merged into the records and the summary one process computes on their
// union; shards of different runs, overlapping shares, missing and cut
// short shards are said, never averaged in.
#include "rundir/merge.h"

#include <gtest/gtest.h>

#include <tuple>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "core/summary.h"
#include "core/temp_dir.h"
#include "rundir/readers.h"
#include "rundir/shard_info.h"

namespace tokenscope::rundir {
namespace {

namespace fs = std::filesystem;

constexpr Nanos kEpoch0 = 5'000'000'000;  // shard 0's agreed start on its clock

// Request id's record as shard `shard` saw it, on its own clock (epoch its
// agreed start): a schedule the same on every shard, a server's answer
// drawn from the id.
RequestRecord record_of(std::uint64_t id, Nanos epoch) {
  Rng rng(id * 7919 + 1);
  RequestRecord r;
  r.id = id;
  r.tenant = id % 3 == 0 ? "a" : "b";
  r.task_class = id % 2 == 0 ? "chat" : "code";
  r.t_sched = epoch + static_cast<Nanos>(id) * 10'000'000;
  r.t_send = r.t_sched + static_cast<Nanos>(rng.uniform01() * 200'000);
  r.t_headers = r.t_send + 1'000'000;
  Nanos t = r.t_send + 20'000'000 + static_cast<Nanos>(rng.uniform01() * 80'000'000);
  r.t_first_token = t;
  for (int k = 0; k < 8; ++k) {
    r.event_times.push_back(t);
    r.event_tokens.push_back(1);
    t += 5'000'000 + static_cast<Nanos>(rng.uniform01() * 10'000'000);
  }
  r.t_last_token = r.event_times.back();
  r.t_close = r.t_last_token + 100'000;
  r.prompt_tokens = 100 + static_cast<std::int64_t>(id % 50);
  r.prompt_tokens_planned = r.prompt_tokens;
  r.output_tokens = 8;
  r.output_tokens_planned = 8;
  r.output_tokens_client = 8;
  r.http_status = 200;
  if (id % 17 == 5) {
    r.outcome = Outcome::kHttpError;
    r.http_status = 503;
    r.event_times.clear();
    r.event_tokens.clear();
    r.t_first_token = r.t_last_token = -1;
    r.output_tokens = r.output_tokens_client = -1;
  }
  return r;
}

std::map<std::string, Slo> slos() {
  Slo s;
  s.ttft_ms = 60;
  s.tpot_ms = 9;
  s.percentile = 90;
  return {{"chat", s}, {"code", s}};
}

nlohmann::json run_json(const ShardInfo& info, bool partial, std::uint64_t seed = 7) {
  return {{"tool", {{"name", "tokenscope"}, {"command", "bench"}}},
          {"partial", partial},
          {"settings",
           {{"requested", {{"workload", {{"seed", seed}}}, {"load", {{"max_error_rate", 0.5}}}}},
            {"effective", nlohmann::json::object()}}},
          {"client", {{"connections_opened", 3 + info.index}, {"process_cpu_s", 0.25}}},
          {"kv_locality", {{"fit", 1}}},
          {"shard", to_json(info)},
          {"summary", nullptr}};
}

ShardInfo info_of(std::uint32_t index, std::uint32_t count, Nanos epoch) {
  ShardInfo s;
  s.index = index;
  s.count = count;
  s.source = "--shard";
  s.start_at_unix_ns = 1'767'225'600'000'000'000;
  s.epoch_monotonic_ns = epoch;
  s.clock_sync = {
      .available = true, .synchronized = true, .max_error_us = 400, .est_error_us = 20, .source = "t"};
  s.slo_from_schedule = true;
  s.slos = slos();
  return s;
}

// A shard's directory: its share (ids with id % count == index) in the
// order they finished (not by id), on a clock whose epoch is `epoch`.
fs::path write_shard(const fs::path& root, std::uint32_t index, std::uint32_t count, Nanos epoch,
                     std::uint64_t n, bool partial = false, const std::string& tail = "") {
  const fs::path dir = root / ("shard-" + std::to_string(index));
  fs::create_directories(dir);
  std::vector<RequestRecord> recs;
  for (std::uint64_t id = index; id < n; id += count) recs.push_back(record_of(id, epoch));
  std::sort(recs.begin(), recs.end(), [](const auto& a, const auto& b) { return a.t_close < b.t_close; });
  std::ofstream f(dir / "requests.jsonl");
  for (const auto& r : recs) {
    std::string line;
    r.append_json(line);
    f << line << "\n";
  }
  f << tail;
  ShardInfo info = info_of(index, count, epoch);
  info.planned_requests = recs.size();
  std::ofstream(dir / "run.json") << run_json(info, partial).dump(1);
  return dir;
}

std::vector<RequestRecord> read_all(const fs::path& file) {
  std::vector<RequestRecord> out;
  RequestsReader reader(file, BadLines::kFail);
  for (RequestRecord r; reader.next(r);) out.push_back(r);
  return out;
}

nlohmann::json read_json(const fs::path& file) {
  std::ifstream f(file);
  return nlohmann::json::parse(f);
}

TEST(Merge, TheUnionOnOneClockHasTheSummaryOneProcessComputes) {
  TempDir tmp("merge");
  constexpr std::uint64_t n = 301;
  // Three hosts, three monotonic clocks: the same agreed start reads differently on each.
  const Nanos epochs[] = {kEpoch0, 123'456'789'012, 42};
  std::vector<fs::path> dirs;
  for (std::uint32_t k = 0; k < 3; ++k) dirs.push_back(write_shard(tmp.path(), k, 3, epochs[k], n));
  std::ofstream(dirs[0] / "samples.jsonl") << "{\"source\":\"server\",\"t_ns\":1}\n";
  std::ostringstream log;
  // Named in any order.
  const auto outcome = merge_shards({dirs[2], dirs[0], dirs[1]}, tmp.path() / "merged", false, log);
  EXPECT_TRUE(outcome.complete()) << log.str();
  EXPECT_EQ(outcome.records, n);
  EXPECT_TRUE(outcome.late.empty());

  // One process's view: every record on shard 0's clock, in id order.
  SummaryBuilder one;
  one.set_slos(slos());
  one.set_slo_from_schedule(true);
  std::vector<RequestRecord> expected;
  for (std::uint64_t id = 0; id < n; ++id) {
    expected.push_back(record_of(id, kEpoch0));
    one.add(expected.back());
  }
  const auto merged = read_all(tmp.path() / "merged" / "requests.jsonl");
  ASSERT_EQ(merged.size(), n);
  for (std::size_t i = 0; i < n; ++i) {
    SCOPED_TRACE(i);
    std::string a, b;
    merged[i].append_json(a);
    expected[i].append_json(b);
    EXPECT_EQ(a, b);  // the same record, times and all, byte for byte
  }
  const auto run = read_json(tmp.path() / "merged" / "run.json");
  EXPECT_EQ(run["summary"], one.build());  // summary, percentiles, histograms, SLO verdicts: exact
  EXPECT_EQ(run["summary"]["requests_total"], n);
  EXPECT_FALSE(run["summary"]["slo_attainment"].empty());
  EXPECT_EQ(run["partial"], false);
  EXPECT_FALSE(run.contains("shard"));
  EXPECT_FALSE(run.contains("kv_locality"));  // one shard's fit is not the run's
  EXPECT_EQ(run["shards"]["count"], 3);
  EXPECT_EQ(run["shards"]["merged"].size(), 3u);
  EXPECT_EQ(run["shards"]["merged"][1]["shift_ns"], kEpoch0 - epochs[1]);
  EXPECT_EQ(run["shards"]["observed_by"], 0);
  EXPECT_DOUBLE_EQ(run["shards"]["start_alignment_error_us"].get<double>(), 800.0);
  EXPECT_EQ(run["client"]["connections_opened"], 3 + 4 + 5);
  EXPECT_DOUBLE_EQ(run["client"]["process_cpu_s"].get<double>(), 0.75);
  EXPECT_EQ(run["verdict"]["failed"], false);
  std::ifstream samples(tmp.path() / "merged" / "samples.jsonl");
  std::string line;
  std::getline(samples, line);
  EXPECT_EQ(line, "{\"source\":\"server\",\"t_ns\":1}");

  // The merged directory is a run directory: it is not merged over.
  EXPECT_THROW(merge_shards(dirs, tmp.path() / "merged", false, log), UsageError);
}

TEST(Merge, AMissingOrCutShortShardMakesThePartialRunItNames) {
  TempDir tmp("merge");
  const auto d0 = write_shard(tmp.path(), 0, 3, kEpoch0, 90);
  // Shard 2 was cut short while writing a line: the line is left out.
  const auto d2 = write_shard(tmp.path(), 2, 3, 77, 60, true, "{\"id\": 5, \"tenant\"");
  std::ostringstream log;
  const auto outcome = merge_shards({d0, d2}, tmp.path() / "merged", false, log);
  EXPECT_FALSE(outcome.complete());
  EXPECT_EQ(outcome.missing, std::vector<std::uint32_t>{1});
  EXPECT_EQ(outcome.partial, std::vector<std::uint32_t>{2});
  EXPECT_EQ(outcome.records, 30u + 20u);
  const auto run = read_json(tmp.path() / "merged" / "run.json");
  EXPECT_EQ(run["partial"], true);
  EXPECT_EQ(run["shards"]["missing"], nlohmann::json::array({1}));
  EXPECT_EQ(run["shards"]["merged"][1]["lines_skipped"], 1);
  EXPECT_NE(log.str().find("shards missing: 1"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("cut short: 2"), std::string::npos) << log.str();
}

// A task record as bench writes it: due at `sched` on its shard's clock.
std::string task_line(std::uint64_t id, Nanos sched, const std::string& outcome = "ok") {
  nlohmann::json t = {{"class", "agent"},
                      {"id", id},
                      {"mode", "scripted"},
                      {"outcome", outcome},
                      {"duration_ms", 5.0},
                      {"tenant", "default"},
                      {"t_sched_ns", sched},
                      {"t_start_ns", sched},
                      {"t_end_ns", sched + 5'000'000},
                      {"steps",
                       {{{"id", "think"},
                         {"kind", "model"},
                         {"name", "model"},
                         {"outcome", outcome},
                         {"attempts", 1},
                         {"requests", {id + 1000}},
                         {"t_ready_ns", sched},
                         {"t_start_ns", sched},
                         {"t_end_ns", sched + 5'000'000}}}}};
  return t.dump();
}

// Task classes: every shard's tasks.jsonl on the merged clock (every t_*_ns,
// the steps' too), by id; the summary rebuilt by the summarizer from the
// union with shard 0's classes; a bad line names its file and line; a task
// in two shards is refused.
TEST(Merge, TheTasksOfEveryShardJoinOnOneClock) {
  TempDir tmp("merge");
  const Nanos e1 = kEpoch0 + 777;
  const auto d0 = write_shard(tmp.path(), 0, 2, kEpoch0, 10);
  const auto d1 = write_shard(tmp.path(), 1, 2, e1, 10);
  for (const auto& [dir, epoch, ids] : {std::tuple{d0, kEpoch0, std::vector<std::uint64_t>{2, 0}},
                                        std::tuple{d1, e1, std::vector<std::uint64_t>{3, 1}}}) {
    std::ofstream f(dir / "tasks.jsonl");
    for (const auto id : ids) f << task_line(id, epoch + static_cast<Nanos>(id) * 1'000'000) << "\n";
    auto run = read_json(dir / "run.json");
    run["tasks"] = {{"by_class", {{"agent", {{"slo", {{"task_ms", 10.0}, {"percentile", 90.0}}}}}}},
                    {"judge", {{"configured", false}, {"steps", 0}}},
                    {"tools_injected", {{"lookup", {{"calls", 2}}}}}};
    std::ofstream(dir / "run.json") << run.dump();
  }
  std::vector<std::uint64_t> seen;
  const TaskSummarizer summarize = [&](const nlohmann::json& first,
                                       const std::vector<nlohmann::json>& tasks) {
    for (const auto& t : tasks) seen.push_back(t["id"]);
    return nlohmann::json{{"tasks", tasks.size()}, {"classes", first["by_class"].size()}};
  };
  std::ostringstream log;
  merge_shards({d1, d0}, tmp.path() / "merged", false, log, {}, nullptr, summarize);
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{0, 1, 2, 3}));
  std::ifstream in(tmp.path() / "merged" / "tasks.jsonl");
  std::vector<nlohmann::json> merged;
  for (std::string line; std::getline(in, line);) merged.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(merged.size(), 4u);
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(merged[k]["id"], k);
    // On shard 0's clock: due k ms after its epoch, whichever shard ran it.
    EXPECT_EQ(merged[k]["t_sched_ns"], kEpoch0 + static_cast<Nanos>(k) * 1'000'000);
    EXPECT_EQ(merged[k]["steps"][0]["t_end_ns"], kEpoch0 + static_cast<Nanos>(k) * 1'000'000 + 5'000'000);
  }
  const auto run = read_json(tmp.path() / "merged" / "run.json");
  EXPECT_EQ(run["tasks"]["tasks"], 4);
  EXPECT_EQ(run["tasks"]["classes"], 1);
  EXPECT_EQ(run["tasks"]["tools_injected"]["lookup"]["calls"], 4);  // the shards' sum
  EXPECT_EQ(run["tasks"]["judge"]["configured"], false);

  // A bad line of a whole shard: its file and line.
  std::ofstream(d1 / "tasks.jsonl", std::ios::app) << "{\"id\": \"x\"}\n";
  try {
    merge_shards({d0, d1}, tmp.path() / "merged2", false, log, {}, nullptr, summarize);
    ADD_FAILURE() << "a bad task line was merged";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tasks.jsonl"), std::string::npos) << e.what();
    EXPECT_EQ(e.line(), 3u) << e.what();
  }
  // The same task in two shards.
  std::ofstream(d1 / "tasks.jsonl") << task_line(2, e1) << "\n";
  EXPECT_THROW(merge_shards({d0, d1}, tmp.path() / "merged3", false, log, {}, nullptr, summarize),
               InputError);
}

TEST(Merge, AShardThatNeverBeganIsMissingAndNoShardIsOverwritten) {
  TempDir tmp("merge");
  const auto d0 = write_shard(tmp.path(), 0, 2, kEpoch0, 20);
  const auto d1 = tmp.path() / "shard-1";
  fs::create_directories(d1);  // its bench failed before run.json
  std::ofstream(d1 / "requests.jsonl") << "";
  std::ostringstream log;
  EXPECT_THROW(merge_shards({d0, d1}, d0, true, log), UsageError);  // --out one of the shards
  EXPECT_TRUE(fs::exists(d0 / "requests.jsonl"));
  const auto outcome = merge_shards({d0, d1}, tmp.path() / "merged", false, log);
  EXPECT_EQ(outcome.missing, std::vector<std::uint32_t>{1});
  EXPECT_EQ(outcome.records, 10u);
  EXPECT_NE(log.str().find("shard-1: no run.json"), std::string::npos) << log.str();
}

TEST(Merge, ALateShardIsMarked) {
  TempDir tmp("merge");
  const auto d0 = write_shard(tmp.path(), 0, 2, kEpoch0, 20);
  const auto d1 = write_shard(tmp.path(), 1, 2, 9, 20);
  auto run1 = read_json(d1 / "run.json");
  run1["shard"]["ready_late_ns"] = 250'000'000;
  std::ofstream(d1 / "run.json") << run1.dump();
  std::ostringstream log;
  const auto outcome = merge_shards({d0, d1}, tmp.path() / "merged", false, log);
  EXPECT_TRUE(outcome.complete());
  EXPECT_EQ(outcome.late, std::vector<std::uint32_t>{1});
  const auto run = read_json(tmp.path() / "merged" / "run.json");
  EXPECT_EQ(run["shards"]["late"], nlohmann::json::array({1}));
  EXPECT_DOUBLE_EQ(run["shards"]["merged"][1]["ready_late_ms"].get<double>(), 250.0);
  EXPECT_NE(log.str().find("shard 1 was ready 250.0 ms after the agreed start"), std::string::npos)
      << log.str();
}

std::string refusal(const std::vector<fs::path>& dirs, const fs::path& out);

TEST(Merge, ShardZerosCountersAreKeptOnlyWhenTheySpanEveryShard) {
  for (const bool span : {false, true}) {
    SCOPED_TRACE(span);
    TempDir tmp("merge");
    const auto d0 = write_shard(tmp.path(), 0, 2, kEpoch0, 20);
    const auto d1 = write_shard(tmp.path(), 1, 2, 9, 20);
    auto run0 = read_json(d0 / "run.json");
    run0["summary"] = {{"prefix_cache_queries_tokens", 4000},
                       {"prefix_cache_hits_tokens", 1000},
                       {"preemptions_total", 2},
                       {"kv_cache_usage_peak", 0.5}};
    run0["shard"]["counters_span_all_shards"] = span;
    run0["shard"]["clock_offset"] = {{"offset_ns", -1200}, {"error_ns", 40}, {"rtt_ns", 80},
                                     {"rounds", 32},       {"to", "rank 0"}, {"by", "mpi"}};
    std::ofstream(d0 / "run.json") << run0.dump();
    if (span) {  // both measured: the starts' alignment is the two bounds'
      auto run1 = read_json(d1 / "run.json");
      run1["shard"]["clock_offset"] = {{"offset_ns", 900}, {"error_ns", 25}, {"rtt_ns", 50}, {"rounds", 32}};
      std::ofstream(d1 / "run.json") << run1.dump();
    }
    std::ostringstream log;
    const nlohmann::json launcher = {{"by", "mpi"}, {"ranks", 2}};
    merge_shards({d0, d1}, tmp.path() / "merged", false, log, {}, launcher);
    const auto run = read_json(tmp.path() / "merged" / "run.json");
    const auto& sm = run["summary"];
    if (span) {
      EXPECT_EQ(sm["prefix_cache_queries_tokens"], 4000);
      EXPECT_EQ(sm["prefix_cache_hits_tokens"], 1000);
      EXPECT_DOUBLE_EQ(sm["prefix_cache_hit_rate"].get<double>(), 0.25);
      EXPECT_EQ(sm["preemptions_total"], 2);
      EXPECT_DOUBLE_EQ(sm["kv_cache_usage_peak"].get<double>(), 0.5);
      EXPECT_NE(run["shards"]["server_counters"].get<std::string>().find("every shard"), std::string::npos);
    } else {
      EXPECT_TRUE(sm["prefix_cache_queries_tokens"].is_null());
      EXPECT_TRUE(sm["preemptions_total"].is_null());
      EXPECT_NE(run["shards"]["server_counters"].get<std::string>().find("not merged"), std::string::npos);
    }
    EXPECT_EQ(run["shards"]["launcher"], launcher);
    // The measured offset travels with the shard's entry in the merged run.
    EXPECT_EQ(run["shards"]["merged"][0]["clock_offset"]["offset_ns"], -1200);
    if (span) {
      EXPECT_EQ(run["shards"]["merged"][1]["clock_offset"]["error_ns"], 25);
      EXPECT_DOUBLE_EQ(run["shards"]["start_alignment_error_us"].get<double>(), 0.065);
    } else {
      EXPECT_TRUE(run["shards"]["merged"][1]["clock_offset"].is_null());
      EXPECT_DOUBLE_EQ(run["shards"]["start_alignment_error_us"].get<double>(), 800.0) << "adjtimex's bound";
    }
    const auto info = shard_info_from_json(run0["shard"], "run.json");
    ASSERT_TRUE(info.clock_offset);
    EXPECT_EQ(info.clock_offset->offset_ns, -1200);
    EXPECT_EQ(info.clock_offset->error_ns, 40);
    EXPECT_EQ(to_json(info)["clock_offset"], run0["shard"]["clock_offset"]);
  }
}

TEST(Merge, ABadClockOffsetOrCounterIsNamed) {
  auto j = to_json(info_of(0, 2, kEpoch0));
  j["clock_offset"] = {{"offset_ns", 18446744073709551615ULL}, {"error_ns", 1}, {"rtt_ns", 2}, {"rounds", 1}};
  try {
    shard_info_from_json(j, "r.json");
    FAIL() << "an offset past int64";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "shard.clock_offset.offset_ns");
  }
  j["clock_offset"] = {{"offset_ns", 1}, {"error_ns", -1}, {"rtt_ns", 2}, {"rounds", 1}};
  EXPECT_THROW(shard_info_from_json(j, "r.json"), InputError);
  j["clock_offset"] = "soon";
  EXPECT_THROW(shard_info_from_json(j, "r.json"), InputError);
  j.erase("clock_offset");
  j["counters_span_all_shards"] = "yes";
  EXPECT_THROW(shard_info_from_json(j, "r.json"), InputError);

  TempDir tmp("merge");
  const auto d0 = write_shard(tmp.path(), 0, 1, kEpoch0, 4);
  auto run0 = read_json(d0 / "run.json");
  run0["shard"]["counters_span_all_shards"] = true;
  run0["summary"] = {{"prefix_cache_queries_tokens", -5}};
  std::ofstream(d0 / "run.json") << run0.dump();
  EXPECT_NE(refusal({d0}, tmp.path() / "merged").find("summary.prefix_cache_queries_tokens"),
            std::string::npos);
}

// The message of what merge_shards throws, "" when it does not.
std::string refusal(const std::vector<fs::path>& dirs, const fs::path& out) {
  std::ostringstream log;
  try {
    merge_shards(dirs, out, false, log);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Merge, ShardsOfDifferentRunsAreRefusedNamingWhatDiffers) {
  TempDir tmp("merge");
  const auto d0 = write_shard(tmp.path(), 0, 2, kEpoch0, 20);
  const auto d1 = write_shard(tmp.path(), 1, 2, 9, 20);
  const auto out = tmp.path() / "merged";
  {
    auto run = read_json(d1 / "run.json");
    run["settings"]["requested"]["workload"]["seed"] = 8;
    std::ofstream(d1 / "run.json") << run.dump();
    const auto why = refusal({d0, d1}, out);
    EXPECT_NE(why.find("settings.requested/workload/seed"), std::string::npos) << why;
    EXPECT_NE(why.find("shard-1/run.json"), std::string::npos) << why;
  }
  {
    auto run = read_json(d1 / "run.json");
    run["settings"]["requested"]["workload"]["seed"] = 7;
    run["shard"]["count"] = 3;
    std::ofstream(d1 / "run.json") << run.dump();
    EXPECT_NE(refusal({d0, d1}, out).find("shard.count"), std::string::npos);
    run["shard"]["count"] = 2;
    run["shard"]["start_at_unix_ns"] = 5;
    std::ofstream(d1 / "run.json") << run.dump();
    EXPECT_NE(refusal({d0, d1}, out).find("shard.start_at_unix_ns"), std::string::npos);
    run["shard"]["start_at_unix_ns"] = info_of(0, 2, 0).start_at_unix_ns;
    run["shard"]["index"] = 0;
    std::ofstream(d1 / "run.json") << run.dump();
    EXPECT_NE(refusal({d0, d1}, out).find("shard 0 is also"), std::string::npos);
    run["shard"]["index"] = "one";
    std::ofstream(d1 / "run.json") << run.dump();
    EXPECT_NE(refusal({d0, d1}, out).find("field 'shard.index': expected an integer"), std::string::npos)
        << refusal({d0, d1}, out);
    run.erase("shard");
    std::ofstream(d1 / "run.json") << run.dump();
    EXPECT_NE(refusal({d0, d1}, out).find("not a shard of a sharded bench run"), std::string::npos);
  }
  // Overlapping shares: the same request on two shards.
  const auto e0 = write_shard(tmp.path() / "x", 0, 2, kEpoch0, 20);
  const auto e1 = write_shard(tmp.path() / "x", 1, 2, 9, 20);
  {
    std::ofstream f(e1 / "requests.jsonl", std::ios::app);
    std::string line;
    record_of(4, 9).append_json(line);
    f << line << "\n";
  }
  const auto why = refusal({e0, e1}, out);
  EXPECT_NE(why.find("request 4 is also in"), std::string::npos) << why;
  // One shard with one id twice.
  const auto f0 = write_shard(tmp.path() / "y", 0, 1, kEpoch0, 6);
  {
    std::ofstream f(f0 / "requests.jsonl", std::ios::app);
    std::string line;
    record_of(2, kEpoch0).append_json(line);
    f << line << "\n";
  }
  EXPECT_NE(refusal({f0}, out).find("request 2 is there twice"), std::string::npos) << refusal({f0}, out);
  // A bad line in a shard that reached its end: named by file and line.
  {
    std::ofstream f(e0 / "requests.jsonl", std::ios::app);
    f << "{\"id\": \"x\"}\n";
  }
  const auto bad = refusal({e0, e1}, out);
  EXPECT_NE(bad.find("shard-0/requests.jsonl:11:"), std::string::npos) << bad;
  EXPECT_FALSE(fs::exists(out / "run.json"));
}

}  // namespace
}  // namespace tokenscope::rundir
