// bench --mpi (docs/fleet.md "Under Open MPI") as a user runs it: two ranks
// of a real mpirun against a `tokenscope serve` process. Open MPI refuses
// root without --allow-run-as-root: the tests pass it (and --oversubscribe:
// two ranks on whatever cores there are); users on a cluster do not.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "process.h"
#include "server.h"

namespace tokenscope::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

#ifdef TOKENSCOPE_HAVE_MPI
const std::string kMpirun = TOKENSCOPE_MPIRUN;
#endif

class Mpi : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef TOKENSCOPE_HAVE_MPI
    GTEST_FAIL() << "built without Open MPI: scripts/setup.sh installs libopenmpi-dev and openmpi-bin";
#endif
    dir_ = fs::temp_directory_path() / ("tokenscope_mpi_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
  }

  static std::vector<json> lines(const fs::path& p) {
    std::vector<json> out;
    std::ifstream in(p);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) out.push_back(json::parse(line));
    return out;
  }
  // mpirun with one program spec per rank (Open MPI's MPMD form: a ':'
  // between them), each "-n 1 [-wdir DIR] tokenscope bench ARGS".
  ProcessResult mpirun(const std::vector<std::vector<std::string>>& ranks, double timeout_s = 120) {
    std::vector<std::string> argv;
#ifdef TOKENSCOPE_HAVE_MPI
    argv = {kMpirun, "--allow-run-as-root", "--oversubscribe"};
#endif
    for (std::size_t k = 0; k < ranks.size(); ++k) {
      if (k > 0) argv.push_back(":");
      // Under ASan the ranks run without leak checking: Open MPI unloads its
      // components at MPI_Finalize, and the allocations they leave have
      // stacks no suppression can name (docs/testing.md). Given to each
      // program of the MPMD form: -x holds for its own.
      if (kSanitized) argv.insert(argv.end(), {"-x", "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1"});
      argv.insert(argv.end(), ranks[k].begin(), ranks[k].end());
    }
    return run_process(argv, timeout_s);
  }
  static std::vector<std::string> bench(const std::vector<std::string>& args, const std::string& wdir = "") {
    std::vector<std::string> argv = {"-n", "1"};
    if (!wdir.empty()) argv.insert(argv.end(), {"-wdir", wdir});
    argv.insert(argv.end(), {kBin, "bench", "--mpi", "--progress", "none", "--no-history"});
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  fs::path dir_;
};

TEST_F(Mpi, TwoRanksSendOneScheduleAndRankZeroMergesItWithTheServersCounters) {
  Server server(dir_, {});
  const std::vector<std::string> load = {"--target",       server.url(""),
                                         "--num-requests", "40",
                                         "--rate",         "40",
                                         "--seed",         "11",
                                         "--input-len",    "uniform:50:400",
                                         "--output-len",   "uniform:8:32",
                                         "--out",          (dir_ / "merged").string(),
                                         "--report"};
  const auto r = mpirun({bench(load), bench(load)});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // One voice: rank 0's table, once.
  EXPECT_NE(r.out.find("tokenscope bench --mpi: 2 ranks merged"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("tokenscope bench --mpi", r.out.find("tokenscope bench --mpi") + 1), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("shards: 2 of 2 whole"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "merged" / "report.html"));

  // Each rank's own run, beside the merged one.
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE(k);
    const auto run = json::parse(slurp(dir_ / "merged.shards" / std::to_string(k) / "run.json"));
    EXPECT_EQ(run["shard"]["index"], k);
    EXPECT_EQ(run["shard"]["count"], 2);
    EXPECT_EQ(run["shard"]["source"], "mpi");
    EXPECT_EQ(run["shard"]["planned_requests"], 20);
    EXPECT_EQ(run["shard"]["ready_late_ns"], 0) << "the ranks had 3 s from the agreed start's choice";
    // One host: the true offset is 0, so the measured one is within its bound.
    const auto& c = run["shard"]["clock_offset"];
    EXPECT_LE(std::abs(c["offset_ns"].get<std::int64_t>()), c["error_ns"].get<std::int64_t>()) << c;
    EXPECT_EQ(c["rounds"], 32);
    // Rank 0's last scrape waited for rank 1's last response.
    EXPECT_EQ(run["shard"].value("counters_span_all_shards", false), k == 0);
  }
  const auto run = json::parse(slurp(dir_ / "merged" / "run.json"));
  EXPECT_EQ(run["partial"], false);
  EXPECT_EQ(run["summary"]["requests_total"], 40);
  EXPECT_EQ(run["summary"]["requests_completed"], 40);
  const auto& launcher = run["shards"]["launcher"];
  EXPECT_EQ(launcher["by"], "mpi");
  EXPECT_EQ(launcher["ranks"], 2);
  EXPECT_NE(launcher["library"].get<std::string>().find("Open MPI"), std::string::npos) << launcher;
  ASSERT_EQ(launcher["rank_runs"].size(), 2u);
  // A shared file system: rank 0 read rank 1's directory in place.
  EXPECT_EQ(launcher["rank_runs"][1]["sent_over_mpi"], false);
  EXPECT_TRUE(launcher["not_ready"].empty());

  // Every planned request once, in id order.
  const auto recs = lines(dir_ / "merged" / "requests.jsonl");
  ASSERT_EQ(recs.size(), 40u);
  std::uint64_t prompt_tokens = 0;
  for (std::size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(recs[i]["id"], i);
    prompt_tokens += recs[i]["prompt_tokens"].get<std::uint64_t>();
  }
  // Rank 0's last scrape of the server came after the last response of
  // either rank (the merged clock is rank 0's).
  std::int64_t last_close = 0, last_scrape = 0;
  for (const auto& rec : recs) last_close = std::max(last_close, rec["t_close_ns"].get<std::int64_t>());
  for (const auto& sample : lines(dir_ / "merged" / "samples.jsonl"))
    if (sample["source"] == "server") last_scrape = std::max(last_scrape, sample["t_ns"].get<std::int64_t>());
  EXPECT_GT(last_scrape, last_close);
  // The server's prefix-cache queries are every prompt token it was sent:
  // rank 0's counters cover rank 1's requests too (the barrier before its
  // last scrape), as one process's would.
  ASSERT_TRUE(run["summary"]["prefix_cache_queries_tokens"].is_number()) << run["summary"].dump();
  EXPECT_EQ(run["summary"]["prefix_cache_queries_tokens"].get<std::uint64_t>(), prompt_tokens);
  EXPECT_NE(run["shards"]["server_counters"].get<std::string>().find("every shard"), std::string::npos);
}

TEST_F(Mpi, RanksOnHostsThatDoNotShareFilesSendTheirRecordsToRankZero) {
  Server server(dir_, {});
  // Each rank in its own working directory, with a relative --mpi-shards:
  // rank 1's directory is not where rank 0 looks, as on another host.
  fs::create_directories(dir_ / "host0");
  fs::create_directories(dir_ / "host1");
  const std::vector<std::string> load = {
      "--target", server.url(""), "--num-requests",           "30",           "--rate", "30", "--seed",
      "5",        "--out",        (dir_ / "merged").string(), "--mpi-shards", "local"};
  const auto r = mpirun({bench(load, (dir_ / "host0").string()), bench(load, (dir_ / "host1").string())});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto run = json::parse(slurp(dir_ / "merged" / "run.json"));
  EXPECT_EQ(run["summary"]["requests_completed"], 30);
  const auto& rank1 = run["shards"]["launcher"]["rank_runs"][1];
  EXPECT_EQ(rank1["sent_over_mpi"], true) << rank1;
  // Rank 1's records, as rank 1 wrote them, now on rank 0's side too.
  EXPECT_EQ(slurp(dir_ / "host0" / "local" / "1" / "requests.jsonl"),
            slurp(dir_ / "host1" / "local" / "1" / "requests.jsonl"));
  EXPECT_EQ(slurp(dir_ / "host0" / "local" / "1" / "run.json"),
            slurp(dir_ / "host1" / "local" / "1" / "run.json"));
  EXPECT_FALSE(fs::exists(dir_ / "host0" / "local" / "1" / "requests.jsonl.part"));
  std::set<std::uint64_t> ids;
  for (const auto& rec : lines(dir_ / "merged" / "requests.jsonl"))
    ids.insert(rec["id"].get<std::uint64_t>());
  EXPECT_EQ(ids.size(), 30u);
  EXPECT_EQ(*ids.rbegin(), 29u);
}

TEST_F(Mpi, ARankThatFailsIsNamedAndItsShareMarkedMissing) {
  Server server(dir_, {});
  std::vector<std::string> load = {"--num-requests", "20", "--rate", "40",
                                   "--seed",         "3",  "--out",  (dir_ / "merged").string()};
  auto good = load, bad = load;
  good.insert(good.end(), {"--target", server.url("")});
  // Rank 1's target does not answer: its run fails before the start.
  bad.insert(bad.end(), {"--target", "http://127.0.0.1:" + std::to_string(unused_loopback_port())});
  const auto r = mpirun({bench(good), bench(bad)});
  // mpirun's exit is rank 0's, the merged run's: partial.
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ranks not ready at the start: 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("shards missing: 1"), std::string::npos) << r.err;
  const auto run = json::parse(slurp(dir_ / "merged" / "run.json"));
  EXPECT_EQ(run["partial"], true);
  EXPECT_EQ(run["shards"]["missing"], json::array({1}));
  EXPECT_EQ(run["summary"]["requests_total"], 10) << "rank 0's share alone";
  const auto& rank1 = run["shards"]["launcher"]["rank_runs"][1];
  EXPECT_TRUE(rank1["error"].is_string()) << rank1;
  EXPECT_TRUE(rank1["read_from"].is_null()) << rank1;
}

TEST_F(Mpi, OptionsThatDoNotGoWithMpiAreRefused) {
  const auto both =
      run_process({kBin, "bench", "--mpi", "--shard", "0/2", "--target", "http://127.0.0.1:1"}, 30);
  EXPECT_EQ(both.exit_code, 2) << both.err;
  EXPECT_NE(both.err.find("drop --shard and --start-at"), std::string::npos) << both.err;
  const auto shards = run_process({kBin, "bench", "--mpi-shards", "x", "--target", "http://127.0.0.1:1"}, 30);
  EXPECT_EQ(shards.exit_code, 2) << shards.err;
  EXPECT_NE(shards.err.find("--mpi-shards goes with --mpi"), std::string::npos) << shards.err;
  const auto out =
      run_process({kBin, "bench", "--mpi", "--out", "x-{shard}", "--target", "http://127.0.0.1:1"}, 30);
  EXPECT_EQ(out.exit_code, 2) << out.err;
  EXPECT_NE(out.err.find("drop {shard}"), std::string::npos) << out.err;
}

// sim --grid: the same grid run by one process and spread over two ranks
// gives the same table (the simulator is deterministic for a seed); the
// frontier is the points no other beats on GPUs and goodput.
TEST_F(Mpi, AGridSpreadOverTwoRanksIsTheGridOfOneProcess) {
  const auto grid = dir_ / "grid.yaml";
  std::ofstream(grid) << "base:\n"
                         "  num-requests: 120\n"
                         "  rate: 24\n"
                         "  input-len: fixed:1500\n"
                         "  output-len: fixed:32\n"
                         "  slo: ttft_ms=400,p=90\n"
                         "  no-samples: true\n"
                         "seeds: [4, 5]\n"
                         "axes:\n"
                         "  replicas: [1, 2, 3]\n"
                         "  router: [round-robin, least-loaded]\n";
  const auto one = run_process({kBin, "sim", "--grid", grid.string(), "--out", (dir_ / "one").string()}, 120);
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  EXPECT_NE(one.out.find("6 points x 2 seeds"), std::string::npos) << one.out;
  const auto spread =
      mpirun({{"-n", "2", kBin, "sim", "--grid", grid.string(), "--out", (dir_ / "two").string()}});
  ASSERT_EQ(spread.exit_code, 0) << spread.out << spread.err;
  // One table, from rank 0.
  EXPECT_EQ(spread.out.find("6 points x 2 seeds"), spread.out.rfind("6 points x 2 seeds")) << spread.out;
  EXPECT_NE(spread.err.find("grid rank 1: run 2/12"), std::string::npos) << spread.err;
  auto a = json::parse(slurp(dir_ / "one" / "grid.json"));
  auto b = json::parse(slurp(dir_ / "two" / "grid.json"));
  EXPECT_EQ(a["ranks"], 1);
  EXPECT_EQ(b["ranks"], 2);
  a.erase("ranks");
  b.erase("ranks");
  a.erase("file");
  b.erase("file");
  EXPECT_EQ(a, b);
  // The points in the file's order, the first axis slowest.
  ASSERT_EQ(a["points"].size(), 6u);
  EXPECT_EQ(a["points"][1]["labels"], json::array({"1", "least-loaded"}));
  EXPECT_EQ(a["points"][4]["labels"], json::array({"3", "round-robin"}));
  for (const auto& p : a["points"]) {
    EXPECT_EQ(p["runs"], 2);
    EXPECT_EQ(p["gpus"], std::stoi(p["labels"][0].get<std::string>()));
  }
  // The frontier: nothing with as few GPUs has as much goodput.
  const auto& pts = a["points"];
  ASSERT_FALSE(a["frontier"].empty());
  for (const auto& f : a["frontier"]) {
    const auto& fp = pts[f.get<std::size_t>()];
    EXPECT_EQ(fp["frontier"], true);
    for (const auto& q : pts)
      EXPECT_FALSE(q["gpus"] <= fp["gpus"] && q["goodput_rps"] > fp["goodput_rps"]) << q << " beats " << fp;
  }
  // More replicas serve this load better: one replica misses the SLO.
  EXPECT_EQ(pts[0]["slo_met"], false) << pts[0];
  EXPECT_EQ(pts[4]["slo_met"], true) << pts[4];
}

// A taken --out is rank 0's to find, and every rank stops with its message
// (none is left waiting for a gather that will not come).
TEST_F(Mpi, ATakenOutStopsEveryRankAtOnce) {
  const auto grid = dir_ / "grid.yaml";
  std::ofstream(grid) << "base: {num-requests: 20, rate: 10}\nseeds: 2\n";
  const auto first = run_process({kBin, "sim", "--grid", grid.string(), "--out", (dir_ / "g").string()}, 60);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto again =
      mpirun({{"-n", "2", kBin, "sim", "--grid", grid.string(), "--out", (dir_ / "g").string()}}, 60);
  EXPECT_EQ(again.exit_code, 2) << again.err;
  EXPECT_NE(again.err.find("--out"), std::string::npos) << again.err;
  EXPECT_EQ(again.err.find("grid rank"), std::string::npos) << "nothing ran: " << again.err;

  Server server(dir_, {});
  const auto taken = dir_ / "taken";
  fs::create_directories(taken);
  std::ofstream(taken / "run.json") << "{}";
  const std::vector<std::string> load = {"--target", server.url(""), "--num-requests", "10",
                                         "--rate",   "20",           "--out",          taken.string()};
  const auto b = mpirun({bench(load), bench(load)}, 60);
  EXPECT_EQ(b.exit_code, 2) << b.err;
  EXPECT_NE(b.err.find("--out"), std::string::npos) << b.err;
  EXPECT_FALSE(fs::exists(dir_ / "taken.shards")) << "no rank ran";
}

// SIGUSR1 to mpirun (which passes it on to every rank) stops the schedule,
// and the ranks still gather and merge what they sent.
TEST_F(Mpi, SigUsr1StopsEveryRankAndTheyStillMerge) {
  Server server(dir_, {});
  const auto out = dir_ / "merged";
  std::vector<std::string> argv;
#ifdef TOKENSCOPE_HAVE_MPI
  argv = {kMpirun, "--allow-run-as-root", "--oversubscribe"};
#endif
  if (kSanitized) argv.insert(argv.end(), {"-x", "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1"});
  argv.insert(argv.end(),
              {"-n", "2", kBin, "bench", "--mpi", "--progress", "none", "--no-history", "--target",
               server.url(""), "--num-requests", "600", "--rate", "20", "--out", out.string()});
  Child mpirun_child(argv, (dir_ / "mpirun.out").string(), (dir_ / "mpirun.err").string());
  // Once rank 1 has records on disk, the run is under way on both ranks.
  const auto rank1 = dir_ / "merged.shards" / "1" / "requests.jsonl";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && (!fs::exists(rank1) || fs::file_size(rank1) == 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(fs::exists(rank1) && fs::file_size(rank1) > 0) << slurp(dir_ / "mpirun.err");
  mpirun_child.signal(SIGUSR1);
  const auto r = mpirun_child.wait(90);
  EXPECT_EQ(r.exit_code, 130) << slurp(dir_ / "mpirun.err");
  const auto run = json::parse(slurp(out / "run.json"));
  EXPECT_EQ(run["partial"], true);
  EXPECT_EQ(run["shards"]["partial"], json::array({0, 1}));
  const auto total = run["summary"]["requests_total"].get<std::uint64_t>();
  EXPECT_GT(total, 0u);
  EXPECT_LT(total, 600u) << "stopped early";
  EXPECT_EQ(lines(out / "requests.jsonl").size(), total);
}

TEST_F(Mpi, ABadGridIsNamedByLineAndFieldBeforeAnythingRuns) {
  const auto grid = dir_ / "grid.yaml";
  std::ofstream(grid) << "base:\n  num-requests: 10\naxes:\n  router: [round-robin, fastest]\n";
  const auto r = run_process({kBin, "sim", "--grid", grid.string()}, 30);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(grid.string() + ":4: field 'axes.router[1]'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fastest"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("grid: run"), std::string::npos) << "nothing ran: " << r.err;
  std::ofstream(grid) << "base:\n  num-requests: 10\n  out: x\n";
  const auto owned = run_process({kBin, "sim", "--grid", grid.string()}, 30);
  EXPECT_EQ(owned.exit_code, 2) << owned.err;
  EXPECT_NE(owned.err.find(":3: field 'base.out'"), std::string::npos) << owned.err;
  const auto cli = run_process({kBin, "sim", "--grid", grid.string(), "--rate", "3"}, 30);
  EXPECT_EQ(cli.exit_code, 2) << cli.err;
  EXPECT_NE(cli.err.find("--rate goes in the grid file"), std::string::npos) << cli.err;
  std::ofstream(grid) << "base:\n  num-requests: 10\n  slo: ttft_ms=fast\n";
  const auto slo = run_process({kBin, "sim", "--grid", grid.string()}, 30);
  EXPECT_EQ(slo.exit_code, 2) << slo.err;
  EXPECT_NE(slo.err.find(":3: field 'base.slo'"), std::string::npos) << slo.err;
  const auto mpi = run_process({kBin, "sim", "--mpi"}, 30);
  EXPECT_EQ(mpi.exit_code, 2) << mpi.err;
  EXPECT_NE(mpi.err.find("--mpi goes with --grid"), std::string::npos) << mpi.err;
}

}  // namespace
}  // namespace tokenscope::testing
