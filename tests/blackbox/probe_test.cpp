// Black-box tests of `tokenscope probe`: output files, bad input, and GPU
// probes that run on a GPU or say why they cannot.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "process.h"

namespace tokenscope::testing {
namespace {

namespace fs = std::filesystem;

class Probe : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tokenscope_probe_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name, const std::string& content) {
    const auto p = dir_ / name;
    std::ofstream(p) << content;
    return p.string();
  }
  static nlohmann::json read_json(const fs::path& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in);
  }
  fs::path dir_;
};

TEST_F(Probe, HelpListsEveryProbe) {
  const auto r = run_process({kBin, "probe", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* p :
       {"cache-line", "kv-layout", "line-sim", "numa", "events", "gpu-context", "kv-swap", "collectives"})
    EXPECT_NE(r.out.find(p), std::string::npos) << p;
}

TEST_F(Probe, CacheLineWritesJsonWithEnvironmentAndRepetitions) {
  const auto r = run_process({kBin, "probe", "cache-line", "--increments", "20000", "--repetitions", "6",
                              "--stride-mib", "4", "--ping-pong-round-trips", "200", "--out", dir_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("false sharing"), std::string::npos);
  EXPECT_NE(r.out.find("verdict"), std::string::npos);
  const auto j = read_json(dir_ / "cache-line.json");
  EXPECT_EQ(j["format_version"], 1);
  EXPECT_EQ(j["probe"], "cache-line");
  EXPECT_FALSE(j["environment"]["cpu"]["online_cpus"].empty());
  EXPECT_TRUE(j["environment"].contains("kernel"));
  EXPECT_EQ(j["settings"]["repetitions"], 6);
  EXPECT_EQ(j["false_sharing"]["variants"][0]["seconds"]["n"], 6);
  EXPECT_EQ(j["false_sharing"]["variants"][0]["seconds"]["values"].size(), 6u);  // every repetition
  EXPECT_EQ(j["false_sharing"]["ratios"][0]["ratio"]["values"].size(), 6u);
}

TEST_F(Probe, KvLayoutJson) {
  const auto r = run_process({kBin, "probe", "kv-layout", "--threads", "2", "--tokens", "32", "--repetitions",
                              "3", "--layout", "head-contiguous", "--split", "head", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["variants"].size(), 2u);  // packed and padded
  EXPECT_EQ(j["variants"][0]["layout"], "head-contiguous");
  EXPECT_EQ(j["variants"][0]["split"], "by-head");
}

TEST_F(Probe, EventsListsTheDefaultSetAndWhetherItCounts) {
  const auto r = run_process({kBin, "probe", "events", "--out", dir_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("counting here:"), std::string::npos) << r.out;
  const auto j = read_json(dir_ / "events.json");
  EXPECT_EQ(j["probe"], "events");
  ASSERT_GE(j["events"].size(), 4u);
  EXPECT_EQ(j["events"][0]["name"], "cycles");
  if (!j["counting"].get<bool>()) {
    EXPECT_NE(j["unsupported"].get<std::string>().find("perf_event_open"), std::string::npos);
  }
  if (j["libpfm4"].get<bool>()) {
    EXPECT_FALSE(j["pmus"].empty());
  }
}

// libpfm4 detects the PMU once per process: one process per CPU model.
TEST_F(Probe, EventsPickTheHitmEventOfEachCpuModel) {
  const auto probe = run_process({kBin, "probe", "events", "--json"});
  ASSERT_EQ(probe.exit_code, 0) << probe.err;
  if (!nlohmann::json::parse(probe.out)["libpfm4"].get<bool>()) GTEST_SKIP() << "built without libpfm4";
  const std::pair<const char*, const char*> cases[] = {
      {"spr", "spr::MEM_LOAD_L3_HIT_RETIRED:XSNP_FWD"},
      {"icx", "icx::MEM_LOAD_L3_HIT_RETIRED:XSNP_HITM"},
      {"skx", "skx::MEM_LOAD_L3_HIT_RETIRED:XSNP_HITM"},
      {"hsw", "hsw::MEM_LOAD_UOPS_L3_HIT_RETIRED:XSNP_HITM"},
      {"snb", "snb::MEM_LOAD_UOPS_LLC_HIT_RETIRED:XSNP_HITM"},
      {"amd64_fam19h_zen4", "amd64_fam19h_zen4::ANY_DATA_CACHE_FILLS_FROM_SYSTEM:LOCAL_CCX"},
      {"amd64_fam19h_zen3", "amd64_fam19h_zen3::ANY_DATA_CACHE_FILLS_FROM_SYSTEM:INT_CACHE"},
      {"amd64_fam17h_zen2", "amd64_fam17h_zen2::DATA_CACHE_REFILLS_FROM_SYSTEM:LS_MABRESP_LCL_CACHE"},
      {"core", nullptr},  // Core 2: no such event in libpfm4's tables
  };
  for (const auto& [pmu, expected] : cases) {
    const auto r = run_process(
        {"/usr/bin/env", std::string("LIBPFM_FORCE_PMU=") + pmu, kBin, "probe", "events", "--json"});
    ASSERT_EQ(r.exit_code, 0) << pmu << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    std::string sharing;
    for (const auto& e : j["events"])
      if (e["role"] == "sharing") sharing = e["encoding"];
    if (!expected) {
      EXPECT_EQ(sharing, "") << pmu;
      EXPECT_EQ(j["events"].size(), 4u) << pmu;
      continue;
    }
    EXPECT_EQ(sharing.rfind(expected, 0), 0u) << pmu << ": '" << sharing << "'";
  }
  // A PMU's own events, listed and named as --events takes them.
  const auto skx = run_process({"/usr/bin/env", "LIBPFM_FORCE_PMU=skx", kBin, "probe", "events", "--pmu",
                                "skx", "--events", "skx::L2_RQSTS:ALL_RFO,instructions"});
  ASSERT_EQ(skx.exit_code, 0) << skx.err;
  EXPECT_NE(skx.out.find("skx::MEM_LOAD_L3_HIT_RETIRED:XSNP_HITM\n"), std::string::npos);
  EXPECT_NE(skx.out.find("skx::L2_RQSTS:ALL_RFO:"), std::string::npos) << skx.out;
}

TEST_F(Probe, UnknownEventsAndPmusAreUsageErrors) {
  const auto r = run_process({kBin, "probe", "cache-line", "--events", "cycles,no_such_event", "--skip",
                              "stride,coherence,ping-pong"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'no_such_event'"), std::string::npos) << r.err;
  const auto k = run_process({kBin, "probe", "kv-layout", "--events", "cycles,rZZ"});
  EXPECT_EQ(k.exit_code, 2);
  EXPECT_NE(k.err.find("'rZZ'"), std::string::npos) << k.err;
  const auto p = run_process({kBin, "probe", "events", "--pmu", "no_such_pmu"});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_NE(p.err.find("'no_such_pmu'"), std::string::npos) << p.err;
}

TEST_F(Probe, CountersOfTheFalseSharingVariantsOrWhyNot) {
  const auto r =
      run_process({kBin, "probe", "cache-line", "--increments", "20000", "--repetitions", "3", "--skip",
                   "stride,coherence,ping-pong", "--events", "cycles,instructions", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto c = nlohmann::json::parse(r.out)["false_sharing"]["perf_counters"];
  ASSERT_EQ(c["events"].size(), 2u);
  EXPECT_EQ(c["events"][1]["name"], "instructions");
  if (c.contains("unsupported")) {
    EXPECT_NE(c["unsupported"].get<std::string>().find("perf_event_open(cycles)"), std::string::npos);
  } else {
    ASSERT_EQ(c["variants"].size(), 3u);  // packed, padded64, padded128
    EXPECT_GT(c["variants"][0]["per_unit"]["instructions"].get<double>(), 1.0);
  }
}

TEST_F(Probe, LineSimOnAGeneratedCaseAndItsWrittenTrace) {
  const std::string trace = (dir_ / "seq.trace").string();
  auto r = run_process({kBin, "probe", "line-sim", "--generate", "sequence-structs", "--write-trace", trace});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("seq[0]"), std::string::npos);
  EXPECT_NE(r.out.find("objects padded to 64 B"), std::string::npos);
  r = run_process({kBin, "probe", "line-sim", trace, "--layout", trace + ".layout", "--out", dir_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = read_json(dir_ / "line-sim.json");
  EXPECT_EQ(j["simulation"]["lines"][0]["classification"], "false");
  EXPECT_EQ(j["simulation"]["lines"][1]["classification"], "true");
  EXPECT_EQ(j["predictions"].back()["totals"]["false_sharing_misses"], 0);
}

TEST_F(Probe, LineSimBadInputNamesFileLineAndField) {
  const auto bad = file("bad.trace", "0 0x10 8 w\n1 0x18 8 q\n");
  auto r = run_process({kBin, "probe", "line-sim", bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.trace:2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("op"), std::string::npos) << r.err;
  r = run_process({kBin, "probe", "line-sim", (dir_ / "missing").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;
  r = run_process({kBin, "probe", "line-sim", "--generate", "nope"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("packed-counters"), std::string::npos) << r.err;
  r = run_process({kBin, "probe", "line-sim", bad, "--line-size", "48"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST_F(Probe, CollectivesParsesNcclTestsOutput) {
  const auto f = file("alltoall_perf.txt",
                      "# nThread 1 nGpus 4 minBytes 1024 maxBytes 1048576 step: 4(factor)\n"
                      "#       size         count      type   redop    root     time   algbw   busbw #wrong  "
                      "   time   algbw   busbw #wrong\n"
                      "        1024           256     float    none      -1    10.24    0.10    0.08      0  "
                      "  10.24    0.10    0.08    N/A\n"
                      "     1048576        262144     float    none      -1   104.86   10.00    7.50      0  "
                      " 104.86   10.00    7.50    N/A\n");
  const auto r = run_process({kBin, "probe", "collectives", "--parse", f, "--out", dir_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("alltoall over 4 ranks"), std::string::npos) << r.out;
  const auto j = read_json(dir_ / "collectives.json");
  EXPECT_DOUBLE_EQ(j["analysis"]["busbw_factor"].get<double>(), 0.75);
  EXPECT_EQ(j["parsed"]["rows"].size(), 2u);
  const auto bad =
      file("bad.txt", "#  size count type redop root time algbw busbw #wrong\n8 2 float sum -1 x 1 1 0\n");
  const auto b = run_process({kBin, "probe", "collectives", "--parse", bad});
  EXPECT_EQ(b.exit_code, 2);
  EXPECT_NE(b.err.find("bad.txt:2"), std::string::npos) << b.err;
}

// Whether the NVIDIA kernel driver lists a GPU on this machine, asked of the
// kernel and not of the binary under test: a binary that fails to see a GPU
// that is there must fail the GPU test, not skip it.
bool nvidia_gpu_on_this_machine() {
  std::error_code ec;
  if (fs::exists("/dev/nvidia0", ec)) return true;
  const fs::path gpus = "/proc/driver/nvidia/gpus";
  return fs::is_directory(gpus, ec) && fs::directory_iterator(gpus, ec) != fs::directory_iterator();
}

// Short settings: each probe runs in seconds on a GPU.
const std::vector<std::vector<std::string>> kGpuProbeRuns{
    {"gpu-context", "--repetitions", "3"},
    {"kv-swap", "--tenants", "2", "--kv-mib", "64", "--chunk-kib", "0,1024", "--switches", "4",
     "--repetitions", "3"},
    {"collectives", "--max-bytes", "1048576", "--iterations", "5", "--warmup", "2"}};

// Without a GPU (this machine), each GPU probe says why, exits 4 and still
// writes its JSON.
TEST_F(Probe, GpuProbesSayWhyNotWithoutAGpu) {
  if (nvidia_gpu_on_this_machine())
    GTEST_SKIP() << "a GPU is present: Probe.GpuProbesRunOnAGpu runs the probes";
  for (const auto& args : kGpuProbeRuns) {
    std::vector<std::string> argv{kBin, "probe"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--out", dir_.string()});
    const auto r = run_process(argv, 60);
    EXPECT_EQ(r.exit_code, 4) << args[0] << ": " << r.err;
    EXPECT_NE(r.out.find("not run"), std::string::npos) << r.out;
    const auto j = read_json(dir_ / (args[0] + ".json"));
    EXPECT_EQ(j["ran"], false);
    EXPECT_FALSE(j["reason"].get<std::string>().empty());
    EXPECT_EQ(j["gpu"]["available"], false);
  }
}

// With a GPU, each GPU probe runs (exit 0, ran = true) and what it measured
// is physically possible: a context creation between 1 us and 1 s, a 64 MiB
// host<->device copy between 1 GB/s and 1000 GB/s (above every host link;
// GpuProbes.OnAGpuKvSwapBandwidthIsWithinTheHostLink bounds it by the link
// NVML reports). Wide bounds: they catch a probe that times nothing or the
// wrong thing, not a slow machine.
TEST_F(Probe, GpuProbesRunOnAGpu) {
  if (!nvidia_gpu_on_this_machine())
    GTEST_SKIP() << "no GPU on this machine (no /dev/nvidia0, nothing in /proc/driver/nvidia/gpus)";
  for (const auto& args : kGpuProbeRuns) {
    std::vector<std::string> argv{kBin, "probe"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--out", dir_.string()});
    const auto r = run_process(argv, 300);
    const auto j = read_json(dir_ / (args[0] + ".json"));
    ASSERT_EQ(r.exit_code, 0) << args[0] << ": " << j["reason"] << "\n" << r.out << r.err;
    ASSERT_EQ(j["ran"], true) << args[0];
    EXPECT_EQ(j["gpu"]["available"], true) << args[0];
  }

  const auto ctx = read_json(dir_ / "gpu-context.json");
  int creations = 0;
  for (const auto& row : ctx["latencies"]) {
    const std::string op = row["operation"];
    if (op != "cuCtxCreate" && op != "cuDevicePrimaryCtxRetain (first)") continue;
    EXPECT_EQ(row["error"], "") << op;
    EXPECT_EQ(row["us"]["n"], 3) << op;
    EXPECT_GE(row["us"]["min"].get<double>(), 1.0) << op << " " << row["variant"];
    EXPECT_LE(row["us"]["p50"].get<double>(), 1e6) << op << " " << row["variant"];
    ++creations;
  }
  EXPECT_EQ(creations, 4);  // three scheduling flags and the primary context

  const auto kv = read_json(dir_ / "kv-swap.json");
  ASSERT_EQ(kv["rows"].size(), 4u);  // 2 transfer sizes x with and without the decode kernel
  for (const auto& row : kv["rows"]) {
    EXPECT_EQ(row["skipped"], "") << row.dump();
    for (const char* dir : {"d2h_gbps", "h2d_gbps"}) {
      EXPECT_EQ(row[dir]["n"], 3) << dir;
      EXPECT_GE(row[dir]["median"].get<double>(), 1.0) << dir << " " << row.dump();
      EXPECT_LE(row[dir]["max"].get<double>(), 1000.0) << dir << " " << row.dump();
    }
  }
  EXPECT_TRUE(fs::exists(dir_ / "samples.jsonl")) << "no NVML samples or CUPTI records written";

  const auto nccl = read_json(dir_ / "collectives.json");
  EXPECT_GE(nccl["ranks"].get<int>(), 1);
  EXPECT_FALSE(nccl["nccl_version"].get<std::string>().empty());
  ASSERT_FALSE(nccl["all_reduce"]["rows"].empty());
  for (const auto& row : nccl["all_reduce"]["rows"]) {
    EXPECT_GT(row["time_us"].get<double>(), 0.0);
    EXPECT_LE(row["time_us"].get<double>(), 1e6);
  }
}

}  // namespace
}  // namespace tokenscope::testing
