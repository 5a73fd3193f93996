// The kernel records read (rundir/kernels.h), compared (kernel_diff.h) and
// judged by check item 9.
#include "analyze/kernel_diff.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "analyze/checklist.h"
#include "analyze/run_data.h"
#include "core/error.h"
#include "core/temp_dir.h"
#include "probe/gpu_probes.h"

namespace tokenscope::analyze {
namespace {

namespace fs = std::filesystem;
using rundir::KernelCollector;
using rundir::load_nsys_sqlite;
using ::testing::HasSubstr;

// What `probe gpu-context --out DIR` writes into DIR/samples.jsonl (the
// probe's own writer): an NVML reading, a memcpy, two kernels. decode's
// first launch (the earliest start) is the fourth line read.
std::string probe_lines() {
  probe::CuptiCapture c;
  c.enabled = true;
  c.activities.push_back({"memcpy", "HtoD", 500, 900, 0, 1, 7, 4096});
  c.activities.push_back({"kernel", "_Z6decodePf", 2000, 5000, 0, 1, 7, 0});    // 3000 ns
  c.activities.push_back({"kernel", "_Z6decodePf", 3000, 8000, 0, 1, 7, 0});    // 5000
  c.activities.push_back({"kernel", "_Z6decodePf", 1000, 8000, 0, 1, 7, 0});    // 7000, the first
  c.activities.push_back({"kernel", "_Z6decodePf", 4000, 8000, 0, 1, 7, 0});    // 4000
  c.activities.push_back({"kernel", "gemm_128x64", 10000, 30000, 0, 1, 8, 0});  // 20000
  c.activities.push_back({"kernel", "gemm_128x64", 40000, 50000, 0, 1, 8, 0});  // 10000
  const std::vector<probe::NvmlReading> nvml{{0.5, 0, "power_w", 312.5}};
  return probe::samples_jsonl(nvml, c);
}

TEST(Kernels, ProbeLinesSumUpPerKernel) {
  const KernelInventory k = parse_kernel_lines(probe_lines(), "samples.jsonl");
  EXPECT_EQ(k.format, "cupti-jsonl");
  EXPECT_EQ(k.source, "samples.jsonl");
  EXPECT_EQ(k.launches, 6u);
  EXPECT_EQ(k.total_ns, 19000 + 30000);
  EXPECT_EQ(k.passed_over, 2u);  // the NVML reading and the memcpy
  ASSERT_EQ(k.kernels.size(), 2u);
  const KernelStats& d = k.kernels[0];  // by name: "_Z..." before "gemm..."
  EXPECT_EQ(d.name, "_Z6decodePf");
  EXPECT_EQ(d.label, "_Z6decodePf");
  EXPECT_EQ(d.launches, 4u);
  EXPECT_EQ(d.total_ns, 19000);
  EXPECT_EQ(d.median_ns, 4000);  // nearest rank of 3000, 4000, 5000, 7000
  EXPECT_EQ(d.first_start_ns, 1000);
  EXPECT_EQ(d.first_duration_ns, 7000);
  ASSERT_TRUE(d.first_excess());
  EXPECT_DOUBLE_EQ(*d.first_excess(), 7000.0 / 4000 - 1);
  const KernelStats* g = k.find("gemm_128x64");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->launches, 2u);
  EXPECT_EQ(g->median_ns, 10000);
  EXPECT_EQ(g->first_duration_ns, 20000);
  EXPECT_FALSE(g->first_excess());  // two launches: no median to stand against
  EXPECT_EQ(k.find("gemm"), nullptr);
}

TEST(Kernels, EpochTimestampsKeepTheOrderOfLaunchesAMicrosecondApart) {
  probe::CuptiCapture c;
  const std::uint64_t t0 = 1'760'000'000'123'456'789;
  c.activities.push_back({"kernel", "k", t0 + 1000, t0 + 3000, 0, 1, 7, 0});
  c.activities.push_back({"kernel", "k", t0, t0 + 9000, 0, 1, 7, 0});  // the first
  c.activities.push_back({"kernel", "k", t0 + 2000, t0 + 4000, 0, 1, 7, 0});
  const KernelInventory k = parse_kernel_lines(probe::samples_jsonl({}, c), "s.jsonl");
  ASSERT_EQ(k.kernels.size(), 1u);
  EXPECT_EQ(k.kernels[0].first_duration_ns, 9000);
  EXPECT_NEAR(static_cast<double>(k.kernels[0].first_start_ns), static_cast<double>(t0), 500);
}

// A run's samples.jsonl with the probe's lines in it: as a --kernels file,
// and as the run directory's own samples (load_run keeps the kernels aside
// and reads its series as before).
TEST(Kernels, ProbeLinesInsideARunsSamples) {
  const std::string observation = R"({"t_ns":1000000,"source":"gpu","rtt_ns":10,"server_t_ns":null,)"
                                  R"("canonical":[["gpu_utilization",{"gpu":"0"},0.5]],"raw":[]})"
                                  "\n";
  const std::string bad_kernel =
      R"({"t":1.0,"source":"cupti","name":"kernel_duration_ns","labels":{"gpu":"0"},"value":5})"
      "\n";
  const std::string text = observation + probe_lines() + observation;
  const KernelInventory k = parse_kernel_lines(text, "samples.jsonl");
  EXPECT_EQ(k.launches, 6u);
  EXPECT_EQ(k.passed_over, 4u);  // two observations, the NVML reading, the memcpy

  TempDir dir("run");
  dir.write("run.json", R"({"tool": {"command": "bench"}})");
  dir.write("samples.jsonl", text + bad_kernel);
  const RunData run = load_run(dir.path(), {.request_ranges = 1, .concurrent = false});
  EXPECT_EQ(run.kernels.launches, 6u);
  EXPECT_EQ(run.kernels.kernels.size(), 2u);
  EXPECT_EQ(run.kernels.find("_Z6decodePf")->median_ns, 4000);
  EXPECT_EQ(run.kernels.passed_over,
            1u);                    // the memcpy (the NVML reading is not a run's line: bad, as before)
  EXPECT_EQ(run.sample_lines, 2u);  // the observations
  EXPECT_EQ(run.sample_lines_skipped, 2u);  // the NVML reading and the kernel record without a name
  bool noted = false;
  for (const auto& n : run.notes)
    noted = noted || n.find("samples.jsonl: 2 bad lines skipped") != std::string::npos;
  EXPECT_TRUE(noted) << ::testing::PrintToString(run.notes);
  ASSERT_FALSE(run.series.empty());
  EXPECT_EQ(run.series[0].name, "gpu_utilization");
  EXPECT_EQ(run.series[0].t.size(), 2u);
}

TEST(Kernels, BadLinesNameTheLineTheFieldAndWhatWasExpected) {
  const std::string good =
      R"({"t":1.0,"source":"cupti","name":"kernel_duration_ns","labels":{"what":"k"},"value":5})"
      "\n";
  const auto error = [&](const std::string& second_line) -> InputError {
    try {
      parse_kernel_lines(good + second_line + "\n", "k.jsonl");
    } catch (const InputError& e) {
      return e;
    }
    ADD_FAILURE() << "no error for " << second_line;
    return InputError("", 0, "", "");
  };
  struct Case {
    std::string line, field, problem;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"t":1,"source":"cupti","name":"kernel_duration_ns","labels":{"gpu":"0"},"value":5})",
            "labels.what", "the kernel's name"},
           {R"({"t":1,"source":"cupti","name":"kernel_duration_ns","labels":{"what":""},"value":5})",
            "labels.what", "non-empty"},
           {R"({"t":1,"source":"cupti","name":"kernel_duration_ns","value":5})", "labels", "\"what\""},
           {R"({"t":1,"source":"cupti","name":"kernel_duration_ns","labels":{"what":"k"},"value":-1})",
            "value", "duration in ns"},
           {R"({"t":1,"source":"cupti","name":"kernel_duration_ns","labels":{"what":"k"},"value":"5"})",
            "value", "duration in ns"},
           {R"({"t":"1","source":"cupti","name":"kernel_duration_ns","labels":{"what":"k"},"value":5})", "t",
            "start in seconds"},
           {R"({"t":1e10,"source":"cupti","name":"kernel_duration_ns","labels":{"what":"k"},"value":5})", "t",
            "9.2e9"},
           {R"({"t":1,"source":"cupti","name":7,"labels":{"what":"k"},"value":5})", "name", "a string"},
           {R"({"t":1,"source":"cupti")", "", "not JSON"},
           {R"([1, 2])", "", "not a JSON object"},
           {R"({"what":"k"})", "", "without a \"source\""},
           {R"({"source":"nvml"})", "", "neither \"t\" nor \"t_ns\""},
       }) {
    const InputError e = error(c.line);
    EXPECT_EQ(e.file(), "k.jsonl") << c.line;
    EXPECT_EQ(e.line(), 2u) << c.line;
    EXPECT_EQ(e.field(), c.field) << c.line;
    EXPECT_THAT(e.problem(), HasSubstr(c.problem)) << c.line;
  }
  // Nothing to read: no kernel record at all.
  for (const std::string& text : {std::string(), std::string("\n  \n"),
                                  std::string(R"({"t":0.5,"source":"nvml","name":"power_w","value":3})")}) {
    try {
      parse_kernel_lines(text, "k.jsonl");
      ADD_FAILURE() << "no error for '" << text << "'";
    } catch (const InputError& e) {
      EXPECT_EQ(e.line(), 0u);
      EXPECT_THAT(e.problem(), HasSubstr("holds no CUPTI kernel record"));
    }
  }
  // Durations at the limit (1e15 ns) add up past 2^63 ns on the 9,224th.
  std::string huge;
  for (int i = 0; i < 9300; ++i)
    huge += R"({"t":1,"source":"cupti","name":"kernel_duration_ns","labels":{"what":"k"},"value":1e15})"
            "\n";
  try {
    parse_kernel_lines(huge, "k.jsonl");
    ADD_FAILURE() << "no error for a sum past 2^63 ns";
  } catch (const InputError& e) {
    EXPECT_EQ(e.line(), 9224u);
    EXPECT_EQ(e.field(), "value");
    EXPECT_EQ(e.problem(), "the launches' durations add up past 2^63 ns");
  }
  try {
    parse_kernel_lines(good + std::string("{\"t\":1,\0}", 9), "k.jsonl");
    ADD_FAILURE() << "no error for a NUL byte";
  } catch (const InputError& e) {
    EXPECT_EQ(e.line(), 2u);
    EXPECT_THAT(e.problem(), HasSubstr("NUL byte"));
  }
}

// ---------------------------------------------------------------- SQLite

// An Nsight Systems export as `nsys export --type sqlite` lays it out (the
// columns item 9 reads, and a few it does not), built with SQLite's C API.
class NsysExport {
 public:
  explicit NsysExport(const fs::path& file, bool with_mangled = true) {
    fs::remove(file);
    EXPECT_EQ(sqlite3_open(file.c_str(), &db_), SQLITE_OK);
    exec("PRAGMA synchronous = OFF");
    exec("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)");
    exec(std::string("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                     "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, "
                     "correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, "
                     "shortName INTEGER NOT NULL") +
         (with_mangled ? ", mangledName INTEGER" : "") +
         ", gridX INTEGER NOT NULL, blockX INTEGER NOT NULL)");
    with_mangled_ = with_mangled;
  }
  ~NsysExport() { sqlite3_close(db_); }
  void exec(const std::string& sql) {
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "") << sql;
    sqlite3_free(err);
  }
  void add_string(int id, const std::string& value) {
    exec("INSERT INTO StringIds VALUES (" + std::to_string(id) + ", '" + value + "')");
  }
  // mangled 0: NULL.
  void launch(std::int64_t start, std::int64_t end, int demangled, int short_name, int mangled) {
    exec("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (" + std::to_string(start) + ", " +
         std::to_string(end) + ", 0, 1, 7, 100, 200, " + std::to_string(demangled) + ", " +
         std::to_string(short_name) +
         (with_mangled_ ? ", " + (mangled ? std::to_string(mangled) : std::string("NULL")) : "") +
         ", 128, 256)");
  }

 private:
  sqlite3* db_ = nullptr;
  bool with_mangled_ = true;
};

TEST(Kernels, NsysExportSumsUpPerKernelByItsMangledName) {
  TempDir dir("nsys");
  const fs::path file = dir.path() / "run.sqlite";
  {
    NsysExport e(file);
    e.add_string(1, "decode(float *)");
    e.add_string(2, "decode");
    e.add_string(3, "_Z6decodePf");
    e.add_string(4, "void gemm<128, 64>(const float *)");
    e.add_string(5, "gemm");
    e.launch(5000, 9000, 1, 2, 3);    // 4000
    e.launch(1000, 8000, 1, 2, 3);    // 7000, the first
    e.launch(12000, 15000, 1, 2, 3);  // 3000
    e.launch(20000, 25000, 1, 2, 3);  // 5000
    e.launch(30000, 31000, 1, 2, 3);  // 1000
    e.launch(40000, 60000, 4, 5, 0);  // 20000; no mangled name: matched by the demangled one
    e.launch(70000, 80000, 4, 5, 0);  // 10000
  }
  const KernelInventory k = load_kernels(file);
  EXPECT_EQ(k.format, "nsys-sqlite");
  EXPECT_EQ(k.source, file.string());
  EXPECT_EQ(k.launches, 7u);
  EXPECT_EQ(k.total_ns, 20000 + 30000);
  ASSERT_EQ(k.kernels.size(), 2u);
  const KernelStats* d = k.find("_Z6decodePf");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->label, "decode(float *)");
  EXPECT_EQ(d->launches, 5u);
  EXPECT_EQ(d->median_ns, 4000);  // of 1000, 3000, 4000, 5000, 7000
  EXPECT_EQ(d->first_start_ns, 1000);
  EXPECT_EQ(d->first_duration_ns, 7000);
  EXPECT_DOUBLE_EQ(*d->first_excess(), 0.75);
  const KernelStats* g = k.find("void gemm<128, 64>(const float *)");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->launches, 2u);
  EXPECT_EQ(g->median_ns, 10000);
  // The probe's lines and the export name decode alike: one kernel in both.
  const KernelDiff diff = diff_kernels(parse_kernel_lines(probe_lines(), "samples.jsonl"), k);
  EXPECT_EQ(diff.common, 1u);
  ASSERT_EQ(diff.compared, std::vector<std::string>{"_Z6decodePf"});
  EXPECT_DOUBLE_EQ(diff.base_excess[0], 0.75);
  EXPECT_DOUBLE_EQ(diff.cand_excess[0], 0.75);

  // An older export without mangledName: matched by demangledName.
  const fs::path old = dir.path() / "old.sqlite";
  {
    NsysExport e(old, false);
    e.add_string(1, "decode(float *)");
    e.add_string(2, "decode");
    e.launch(0, 10, 1, 2, 0);
  }
  const KernelInventory o = load_kernels(old);
  ASSERT_EQ(o.kernels.size(), 1u);
  EXPECT_EQ(o.kernels[0].name, "decode(float *)");
  EXPECT_EQ(o.kernels[0].total_ns, 10);
}

TEST(Kernels, BadNsysExportsSayWhatIsMissing) {
  TempDir dir("nsys-bad");
  const auto problem = [](const fs::path& f) -> std::pair<std::string, std::string> {
    try {
      load_kernels(f);
    } catch (const InputError& e) {
      return {e.field(), e.problem()};
    }
    ADD_FAILURE() << "no error for " << f;
    return {};
  };
  {  // No kernel table: a profile without CUDA.
    const fs::path f = dir.path() / "no-cuda.sqlite";
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(f.c_str(), &db), SQLITE_OK);
    sqlite3_exec(db, "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)", nullptr, nullptr,
                 nullptr);
    sqlite3_close(db);
    const auto [field, why] = problem(f);
    EXPECT_EQ(field, "CUPTI_ACTIVITY_KIND_KERNEL");
    EXPECT_THAT(why, HasSubstr("no such table"));
  }
  {  // A launch that ends before it starts.
    const fs::path f = dir.path() / "backwards.sqlite";
    {
      NsysExport e(f);
      e.add_string(1, "k");
      e.launch(0, 10, 1, 1, 1);
      e.launch(100, 50, 1, 1, 1);
    }
    const auto [field, why] = problem(f);
    EXPECT_EQ(field, "CUPTI_ACTIVITY_KIND_KERNEL.end");
    EXPECT_EQ(why, "row 2: 50 is before the start 100");
  }
  {  // A name that is not in StringIds.
    const fs::path f = dir.path() / "no-name.sqlite";
    {
      NsysExport e(f);
      e.launch(0, 10, 9, 9, 9);
    }
    const auto [field, why] = problem(f);
    EXPECT_EQ(field, "CUPTI_ACTIVITY_KIND_KERNEL.mangledName");
    EXPECT_EQ(why, "row 1: the kernel's name is not in StringIds");
  }
  {  // The table, empty.
    const fs::path f = dir.path() / "empty.sqlite";
    { NsysExport e(f); }
    EXPECT_THAT(problem(f).second, HasSubstr("holds no kernel launch"));
  }
  {  // SQLite's first bytes, then garbage.
    const fs::path f = dir.path() / "garbage.sqlite";
    std::ofstream(f, std::ios::binary) << std::string("SQLite format 3\0", 16) << std::string(200, 'x');
    EXPECT_THAT(problem(f).second, HasSubstr("not a readable SQLite export"));
  }
  EXPECT_THROW(load_kernels(dir.path() / "nowhere.sqlite"), UsageError);
}

// ------------------------------------------------------------------ diff

// Eight kernels launched 20 times each; kernel i takes 1000 (i + 1) ns a
// launch, its first launch (1 + first_extra) times that, the first launches
// spread a little (i / 100) so that the excesses are not all equal.
KernelInventory inventory(double first_extra, const std::string& extra_kernel = "", double extra_share = 0) {
  KernelCollector c;
  std::int64_t total = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string name = "kernel_" + std::to_string(i);
    const std::int64_t d = 1000 * (i + 1);
    for (int j = 0; j < 20; ++j) {
      const std::int64_t dur =
          j == 0 ? static_cast<std::int64_t>(static_cast<double>(d) * (1 + first_extra + i / 100.0)) : d;
      EXPECT_TRUE(c.add(name, "", 1'000'000 * j + i, dur));
      total += dur;
    }
  }
  if (!extra_kernel.empty()) {
    // extra / (total + extra) = share.
    const auto extra =
        static_cast<std::int64_t>(static_cast<double>(total) * extra_share / (1 - extra_share));
    for (int j = 0; j < 10; ++j) EXPECT_TRUE(c.add(extra_kernel, "", 1'000'000 * j + 50, extra / 10));
  }
  return c.finish("mem", "cupti-jsonl");
}

TEST(Kernels, DiffFindsNewAndGoneKernelsAndTheirShare) {
  const KernelInventory base = inventory(0, "old_kernel", 0.2), cand = inventory(0, "fused_attention", 0.3);
  const KernelDiff d = diff_kernels(base, cand);
  EXPECT_EQ(d.common, 8u);
  ASSERT_EQ(d.new_kernels.size(), 1u);
  EXPECT_EQ(d.new_kernels[0].name, "fused_attention");
  ASSERT_EQ(d.gone_kernels.size(), 1u);
  EXPECT_EQ(d.gone_kernels[0].name, "old_kernel");
  EXPECT_NEAR(d.new_time_share, 0.3, 1e-4);
  EXPECT_NEAR(d.gone_time_share, 0.2, 1e-4);
  EXPECT_EQ(d.compared.size(), 10u - 2u);  // the new and gone kernels are not compared
  EXPECT_EQ(d.base_excess, d.cand_excess);
  EXPECT_NEAR(d.base_excess[3], 0.03, 1e-12);
  const KernelDiff same = diff_kernels(base, base);
  EXPECT_TRUE(same.new_kernels.empty());
  EXPECT_TRUE(same.gone_kernels.empty());
  EXPECT_EQ(same.new_time_share, 0.0);
  EXPECT_EQ(same.common, 9u);
}

const ItemResult& item9(const CheckResult& r) {
  for (const auto& it : r.items)
    if (it.number == 9) return it;
  throw std::runtime_error("no item 9");
}

// Item 9 on runs with kernel records and no requests (the kernels need none).
CheckResult check(const KernelInventory& base, const KernelInventory& cand, const Thresholds& t = {}) {
  RunData b, c;
  b.name = "base";
  c.name = "cand";
  b.kernels = base;
  c.kernels = cand;
  return run_checklist(&b, c, t);
}

TEST(Kernels, ANewKernelWithAThirdOfTheTimeIsARegression) {
  const CheckResult r = check(inventory(0), inventory(0, "fused_attention", 0.3));
  const ItemResult& it = item9(r);
  EXPECT_EQ(it.verdict, Verdict::kRegressed) << to_json(r)["items"][9].dump(1);
  ASSERT_TRUE(it.decisive);
  const Finding& f = it.findings[*it.decisive];
  EXPECT_EQ(f.metric, "candidate GPU time in kernels the base did not launch");
  EXPECT_NEAR(*f.change, 0.3, 1e-4);
  EXPECT_EQ(f.threshold, "at most 10.0%");
  EXPECT_EQ(f.note, "1 new kernel, 0 gone (0.0% of the base's kernel time), 8 in both");
  EXPECT_EQ(it.findings.size(), 2u);  // the share and the first launches; no requests, no shapes
  EXPECT_EQ(it.findings[1].verdict, Verdict::kPass);
  const auto& ev = it.evidence["kernels"];
  EXPECT_EQ(ev["new"], 1);
  EXPECT_EQ(ev["gone"], 0);
  EXPECT_EQ(ev["common"], 8);
  EXPECT_EQ(ev["top_new"][0]["name"], "fused_attention");
  EXPECT_EQ(ev["top_new"][0]["launches"], 10);
  EXPECT_NEAR(ev["top_new"][0]["share"].get<double>(), 0.3, 1e-4);
  EXPECT_EQ(ev["candidate"]["launches"], 170);
  EXPECT_EQ(r.overall, Verdict::kRegressed);
  // A looser threshold lets it pass.
  Thresholds loose;
  loose.new_kernel_share_max = 0.35;
  EXPECT_EQ(item9(check(inventory(0), inventory(0, "fused_attention", 0.3), loose)).verdict, Verdict::kPass);
}

TEST(Kernels, IdenticalInventoriesPass) {
  const CheckResult r = check(inventory(0.02), inventory(0.02));
  const ItemResult& it = item9(r);
  EXPECT_EQ(it.verdict, Verdict::kPass) << to_json(r)["items"][9].dump(1);
  ASSERT_EQ(it.findings.size(), 2u);
  EXPECT_EQ(*it.findings[0].change, 0.0);
  EXPECT_EQ(it.findings[1].metric, "first launch of a kernel over its median (CUPTI)");
  EXPECT_EQ(*it.findings[1].change, 0.0);
  EXPECT_EQ(it.findings[1].note, "8 kernels launched at least 3 times in both runs");
  EXPECT_EQ(it.evidence["kernels"]["top_new"].size(), 0u);
}

TEST(Kernels, SlowerFirstLaunchesAreARegression) {
  // Every kernel's first launch: 2% over its median in the base, 300% in the candidate.
  const CheckResult r = check(inventory(0.02), inventory(3.0));
  const ItemResult& it = item9(r);
  EXPECT_EQ(it.verdict, Verdict::kRegressed);
  EXPECT_EQ(it.findings[*it.decisive].metric, "first launch of a kernel over its median (CUPTI)");
  EXPECT_NEAR(*it.findings[*it.decisive].change, 2.98, 1e-9);
  EXPECT_NEAR(it.evidence["kernels"]["largest_first_launch_excess"][0]["candidate_excess"].get<double>(),
              3.07,
              1e-9);  // kernel_7
  EXPECT_EQ(it.evidence["kernels"]["largest_first_launch_excess"][0]["name"], "kernel_7");
}

TEST(Kernels, RecordsOfOneRunOnlyAreNoData) {
  RunData b, c;
  b.name = "base";
  c.name = "cand";
  c.kernels = inventory(0);
  const CheckResult r = run_checklist(&b, c, Thresholds{});
  const ItemResult& it = item9(r);
  EXPECT_EQ(it.verdict, Verdict::kNoData);
  EXPECT_THAT(it.summary, HasSubstr("CUPTI kernel records in the candidate's samples.jsonl only"));
  EXPECT_THAT(it.summary, HasSubstr("--kernels"));
}

TEST(Kernels, FilesGivenReplaceTheRunsOwnRecords) {
  TempDir dir("extra");
  const std::string base = dir.write("base.jsonl", probe_lines());
  const std::string same = dir.write("same.jsonl", probe_lines());
  // The candidate adds a kernel: 60000 ns of 109000.
  const std::string cand = dir.write(
      "cand.jsonl", probe_lines() +
                        R"({"t":0.1,"source":"cupti","name":"kernel_duration_ns","labels":{"what":"new_k"},)"
                        R"("value":60000})"
                        "\n");
  RunData b, c;
  b.name = "base";
  c.name = "cand";
  c.kernels = inventory(0, "ignored", 0.5);  // the run's own, replaced by the files
  ExtraInputs extra;
  extra.kernels_base = base;
  extra.kernels_cand = cand;
  const CheckResult r = run_checklist(&b, c, Thresholds{}, extra);
  const ItemResult& it = item9(r);
  EXPECT_EQ(it.verdict, Verdict::kRegressed);
  EXPECT_NEAR(*it.findings[0].change, 60000.0 / 109000, 1e-12);
  EXPECT_EQ(it.evidence["kernels"]["candidate"]["source"], cand);
  EXPECT_EQ(it.evidence["kernels"]["top_new"][0]["name"], "new_k");
  extra.kernels_cand = same;
  EXPECT_EQ(item9(run_checklist(&b, c, Thresholds{}, extra)).findings[0].verdict, Verdict::kPass);
  extra.kernels_cand =
      dir.write("bad.jsonl", "{\"t\":1,\"source\":\"cupti\",\"name\":\"kernel_duration_ns\"}\n");
  EXPECT_THROW(run_checklist(&b, c, Thresholds{}, extra), InputError);
}

}  // namespace
}  // namespace tokenscope::analyze
