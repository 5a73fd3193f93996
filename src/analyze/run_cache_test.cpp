#include "rundir/run_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "analyze/checklist.h"
#include "analyze/run_data.h"
#include "core/random.h"
#include "core/temp_dir.h"
#include "rundir/run_cache.h"
#include "rundir/run_files.h"

namespace tokenscope::analyze {
namespace {

namespace fs = std::filesystem;
using rundir::decode_run_cache;
using rundir::encode_run_cache;
using rundir::KernelInventory;
using rundir::kRunCacheFile;
using rundir::load_run_cache;
using rundir::run_cache_header;
using rundir::run_cache_writer;
using rundir::run_files_key;
using rundir::RunFilesKey;
using rundir::RunFileStamp;
using rundir::save_run_cache;
const fs::path kTestdata = fs::path(TOKENSCOPE_SOURCE_DIR) / "src/report/testdata";

// A copy of a test run in a directory of its own (the cache is written
// beside the files).
fs::path copy_run(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) fs::copy_file(e.path(), to / e.path().filename());
  return to;
}

// Everything load_run gives, as bytes and text: equal strings, equal runs.
std::string fingerprint(const RunData& run) {
  std::ostringstream os;
  const auto bytes = [&os](const auto& v) {
    os << v.size() << ':';
    os.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(v[0])));
  };
  const RequestArrays& a = run.requests;
  bytes(a.t_sched), bytes(a.t_dispatch), bytes(a.t_send), bytes(a.t_first_token), bytes(a.t_last_token);
  bytes(a.t_close), bytes(a.output_tokens), bytes(a.prompt_tokens), bytes(a.cached_tokens);
  bytes(a.itl_mean_ms), bytes(a.itl_max_ms), bytes(a.outcome), bytes(a.warmup), bytes(a.tenant);
  bytes(a.task_class), bytes(a.logprob_mean), bytes(a.server_prompt_ms);
  for (const auto& n : a.tenant_names) os << "tenant " << n << '\n';
  for (const auto& n : a.class_names) os << "class " << n << '\n';
  os << a.itl_ns.to_json().dump() << '\n';
  os << a.logprobs.requests << ' ' << a.logprobs.requests_with_tokens << ' ' << a.logprobs.pooled.count << ' '
     << a.logprobs.pooled.sum << ' ' << a.logprobs.halves[1].count << ' ' << a.logprobs.half_requests[0]
     << '\n';
  for (const auto& s : run.slowest) {
    os << "slow " << s.id << ' ' << s.tenant << ' ' << s.t_send << ' ' << s.t_last_token << ' '
       << s.preemptions << ' ';
    bytes(s.event_times);
  }
  os << "skipped " << run.request_lines_skipped << " summary " << run.summary.dump() << ' '
     << run.summary_recomputed << '\n';
  os << "samples " << run.has_samples << ' ' << run.sample_lines << ' ' << run.sample_lines_skipped << ' '
     << run.sample_lines_without_series << '\n';
  for (const auto& s : run.series) {
    os << s.source << '|' << s.kind << '|' << s.name << '|' << s.labels << ' ';
    bytes(s.t), bytes(s.v);
  }
  const KernelInventory& k = run.kernels;
  os << "kernels " << k.source << ' ' << k.format << ' ' << k.launches << ' ' << k.total_ns << ' '
     << k.passed_over << '\n';
  for (const auto& s : k.kernels)
    os << s.name << '|' << s.label << ' ' << s.launches << ' ' << s.total_ns << ' ' << s.median_ns << ' '
       << s.first_start_ns << ' ' << s.first_duration_ns << '\n';
  os << "origin " << run.origin << '\n';
  const StepsData& st = run.steps;
  os << "steps " << st.present << ' ' << st.steps << ' ' << st.lines_skipped << ' ' << st.first_t_s << ' '
     << st.last_t_s << '\n';
  for (const auto& s : st.series) {
    os << s.name << ' ';
    bytes(s.t_s), bytes(s.v);
  }
  for (const auto& [k, v] : st.stats.seqs_histogram) os << k << '=' << v << ',';
  for (const auto& [k, v] : st.stats.shapes)
    os << k.seqs << 'x' << k.tokens_bucket << '=' << v.first_t << '/' << v.second_t << '/' << v.first_ms
       << '/' << v.second_ms << ',';
  os << st.stats.busy_ns << ' ' << st.stats.steps_with_duration << '\n';
  for (const auto& [k, w] : st.stats.windows)
    os << k << ':' << w.steps << ',' << w.busy_ns << ',' << w.seqs << ',' << w.hit_tokens << ','
       << w.swap_bytes << ';';
  for (const auto& n : run.notes) os << "note " << n << '\n';
  return os.str();
}

// check.json without the items' run times (which differ run to run).
std::string check_json(const RunData& run) {
  nlohmann::json j = to_json(run_checklist(nullptr, run, Thresholds{}, {}));
  for (auto& item : j["items"]) item.erase("elapsed_ms");
  return j.dump();
}

LoadOptions cached() {
  LoadOptions o;
  o.cache = RunCache::kReadWrite;
  return o;
}

// A run of the three kinds the readers see: sim (steps, samples), bench
// with samples, and a cut run without a summary (recomputed).
class RunCacheOnTestRuns : public ::testing::TestWithParam<const char*> {};

TEST_P(RunCacheOnTestRuns, TheCachedRunIsTheReadRun) {
  TempDir t;
  const fs::path dir = copy_run(kTestdata / GetParam(), t.path() / "run");
  const RunData plain = load_run(dir);
  EXPECT_FALSE(fs::exists(dir / kRunCacheFile)) << "kOff writes no cache";
  const RunData first = load_run(dir, cached());  // reads the JSONL files, writes the cache
  ASSERT_TRUE(fs::exists(dir / kRunCacheFile));
  const RunData second = load_run(dir, cached());  // reads the cache
  EXPECT_EQ(fingerprint(first), fingerprint(plain));
  EXPECT_EQ(fingerprint(second), fingerprint(plain));
  // And what check makes of it.
  EXPECT_EQ(check_json(second), check_json(plain));
  // The cache was read, not the files: a cache whose key matches but whose
  // content differs shows through (the key is all that is checked).
  RunFilesRead changed = *load_run_cache(dir, run_files_key(dir));
  changed.notes.push_back("from the cache");
  ASSERT_TRUE(save_run_cache(dir, run_files_key(dir), changed));
  const RunData shown = load_run(dir, cached());
  ASSERT_FALSE(shown.notes.empty());
  EXPECT_EQ(shown.notes.back(), "from the cache");
  EXPECT_EQ(load_run(dir).notes, plain.notes) << "kOff reads the files";
}

INSTANTIATE_TEST_SUITE_P(Runs, RunCacheOnTestRuns, ::testing::Values("sim", "sampled", "partial"));

// The CUPTI kernel launches among a run's samples (check item 9) come back
// from the cache as they were read, and item 9 decides the same on them.
TEST(RunCache, TheKernelInventoryIsCached) {
  TempDir t;
  const fs::path dir = copy_run(kTestdata / "sampled", t.path() / "run");
  {
    std::ofstream out(dir / "samples.jsonl", std::ios::app);
    for (int i = 0; i < 12; ++i)
      out << R"({"t":0.)" << 100000000 + 1000 * i << R"(,"source":"cupti","name":"kernel_duration_ns",)"
          << R"("labels":{"gpu":"0","stream":"7","what":"k)" << i % 4 << R"(","bytes":"0"},"value":)"
          << 1000 + 10 * i << "}\n";
    out << R"({"t":0.2,"source":"cupti","name":"memcpy_duration_ns","labels":{"what":"HtoD"},"value":5})"
           "\n";
  }
  const RunData plain = load_run(dir);
  ASSERT_EQ(plain.kernels.launches, 12u);
  ASSERT_EQ(plain.kernels.kernels.size(), 4u);
  EXPECT_EQ(plain.kernels.passed_over, 1u);
  const RunData first = load_run(dir, cached());
  const RunData second = load_run(dir, cached());  // from the cache
  EXPECT_EQ(fingerprint(first), fingerprint(plain));
  EXPECT_EQ(fingerprint(second), fingerprint(plain));
  const auto item9 = [](const RunData& base, const RunData& cand) {
    nlohmann::json j = to_json(run_checklist(&base, cand, Thresholds{}, {}))["items"][9];
    j.erase("elapsed_ms");
    return j.dump();
  };
  EXPECT_EQ(item9(second, second), item9(plain, plain));
  EXPECT_NE(item9(plain, plain).find("first launch of a kernel over its median"), std::string::npos);
}

TEST(RunCache, AChangedFileMakesTheCacheStale) {
  TempDir t;
  const fs::path dir = copy_run(kTestdata / "sampled", t.path() / "run");
  const std::size_t before = load_run(dir, cached()).requests.size();
  const RunFilesKey key = run_files_key(dir);
  ASSERT_TRUE(load_run_cache(dir, key).has_value());
  // One more request (its line copied from the first): the size changes.
  std::string first_line;
  {
    std::ifstream in(dir / "requests.jsonl");
    std::getline(in, first_line);
  }
  ASSERT_FALSE(first_line.empty());
  std::ofstream(dir / "requests.jsonl", std::ios::app) << first_line << "\n";
  EXPECT_FALSE(load_run_cache(dir, run_files_key(dir)).has_value());
  EXPECT_EQ(load_run(dir, cached()).requests.size(), before + 1);
  EXPECT_EQ(load_run(dir, cached()).requests.size(), before + 1) << "the rewritten cache";
  // A file that appears (samples.jsonl of a run that had none) or goes.
  const RunFilesKey now = run_files_key(dir);
  fs::remove(dir / "samples.jsonl");
  EXPECT_FALSE(run_files_key(dir) == now);
  EXPECT_FALSE(load_run(dir, cached()).has_samples);
  // The same size, a later modification time.
  const RunFilesKey same = run_files_key(dir);
  fs::last_write_time(dir / "run.json", fs::last_write_time(dir / "run.json") + std::chrono::seconds(5));
  EXPECT_FALSE(run_files_key(dir) == same);
  EXPECT_FALSE(load_run_cache(dir, run_files_key(dir)).has_value());
}

TEST(RunCache, EveryCutOrFlippedCacheIsRefusedOrHarmless) {
  TempDir t;
  const fs::path dir = copy_run(kTestdata / "sim", t.path() / "run");
  load_run(dir, cached());
  const RunFilesKey key = run_files_key(dir);
  std::string bytes;
  {
    std::ifstream in(dir / kRunCacheFile, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_TRUE(decode_run_cache(bytes, key).has_value());
  // Every proper prefix is a cut cache.
  for (std::size_t n = 0; n < bytes.size(); n += 1 + n / 64)
    EXPECT_FALSE(decode_run_cache(std::string_view(bytes).substr(0, n), key).has_value()) << n << " bytes";
  // One more byte at the end is not a cache either.
  EXPECT_FALSE(decode_run_cache(bytes + "x", key).has_value());
  // Another key (other files) is refused.
  RunFilesKey other = key;
  other.files[1].size += 1;
  EXPECT_FALSE(decode_run_cache(bytes, other).has_value());
  // Flipped bytes: refused, or decoded into something (never a crash; the
  // sanitizer builds check the reads).
  Rng rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string bad = bytes;
    bad[rng.uniform_int(0, bad.size() - 1)] ^= static_cast<char>(1 + rng.uniform_int(0, 254));
    (void)decode_run_cache(bad, key);
  }
  // A file that is not a cache.
  std::ofstream(dir / kRunCacheFile, std::ios::trunc) << "not a cache";
  EXPECT_FALSE(load_run_cache(dir, key).has_value());
  EXPECT_EQ(load_run(dir, cached()).requests.size(), load_run(dir).requests.size());
  EXPECT_TRUE(load_run_cache(dir, key).has_value()) << "rewritten";
}

TEST(RunCache, AReadOnlyRunIsReadWithoutOne) {
  if (::geteuid() == 0) {
    // root writes anywhere: the cache's place is taken by a directory
    // instead (the rename into place fails).
    TempDir t;
    const fs::path dir = copy_run(kTestdata / "sampled", t.path() / "run");
    fs::create_directories(dir / kRunCacheFile / "taken");
    EXPECT_FALSE(save_run_cache(dir, run_files_key(dir), RunFilesRead{}));
    EXPECT_EQ(load_run(dir, cached()).requests.size(), 3u);
    EXPECT_TRUE(fs::is_directory(dir / kRunCacheFile));
    for (const auto& e : fs::directory_iterator(dir))
      EXPECT_NE(e.path().extension(), ".tmp") << "left behind: " << e.path();
    return;
  }
  TempDir t;
  const fs::path dir = copy_run(kTestdata / "sampled", t.path() / "run");
  fs::permissions(dir, fs::perms::owner_write, fs::perm_options::remove);
  EXPECT_EQ(load_run(dir, cached()).requests.size(), 3u);
  EXPECT_FALSE(fs::exists(dir / kRunCacheFile));
  fs::permissions(dir, fs::perms::owner_write, fs::perm_options::add);
}

TEST(RunCache, FilesChangingWhileReadLeaveNoCache) {
  TempDir t;
  const fs::path dir = copy_run(kTestdata / "sampled", t.path() / "run");
  const RunFilesKey key = run_files_key(dir);
  std::ofstream(dir / "requests.jsonl", std::ios::app) << "\n";  // a writer still at work
  EXPECT_FALSE(save_run_cache(dir, key, RunFilesRead{}));
  EXPECT_FALSE(fs::exists(dir / kRunCacheFile));
}

}  // namespace
}  // namespace tokenscope::analyze
