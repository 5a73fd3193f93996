#include "observe/observer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tokenscope::observe {
namespace {

namespace fs = std::filesystem;

// A collector whose reads are scripted: a counter that grows by 10 per read,
// failures or unavailability on demand.
class FakeCollector final : public Collector {
 public:
  explicit FakeCollector(std::string name) : name_(std::move(name)) {}
  std::string source() const override { return name_; }
  Observation collect(const Clock& clock) override {
    const int n = reads++;
    // The work of a read after its fetch (a parse of a huge page), which the
    // read's rtt does not include.
    if (work_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(work_ms));
    Observation o;
    o.source = name_;
    o.t_ns = clock.now_ns();
    o.rtt_ns = 2000;
    if (unavailable) {
      o.unavailable = "not here: no library";
      return o;
    }
    if (fail_from >= 0 && n >= fail_from) {
      o.error = n % 2 ? "HTTP 503" : "connection refused";
      return o;
    }
    if (server_offset) o.server_t_ns = o.t_ns - o.rtt_ns / 2 - *server_offset;
    o.canonical = {{"generation_tokens", {}, 10.0 * n}, {"requests_running", {}, static_cast<double>(n)}};
    o.raw = {{"raw_name", {}, 1.0 * n}};
    for (int i = 0; i < raw_extra; ++i) o.raw.push_back({"raw_" + std::to_string(i), {}, 1.0});
    return o;
  }
  std::atomic<int> reads{0};
  int work_ms = 0;
  int raw_extra = 0;
  int fail_from = -1;
  bool unavailable = false;
  std::optional<Nanos> server_offset;

 private:
  std::string name_;
};

CollectorOptions opts(Nanos interval, bool optional = false, std::string description = "") {
  CollectorOptions o;
  o.interval_ns = interval;
  o.optional = optional;
  o.description = std::move(description);
  return o;
}

class ObserverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("observer_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<Observation> lines() const {
    std::vector<Observation> v;
    std::ifstream in(dir_ / "samples.jsonl");
    std::string line;
    while (std::getline(in, line)) v.push_back(parse_observation_json(line));
    return v;
  }
  // Waits (bounded) until the collector has been read at least n times.
  static void wait_reads(const FakeCollector& c, int n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (c.reads.load() < n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_GE(c.reads.load(), n);
  }
  fs::path dir_;
  SteadyClock clock_;
  std::ostringstream log_;
};

TEST_F(ObserverTest, ReadsABaselinePeriodicallyAndAFinalOneAndWritesEachAsALine) {
  Observer ob(dir_ / "samples.jsonl", clock_, log_);
  auto c = std::make_unique<FakeCollector>("server");
  FakeCollector* fake = c.get();
  ob.add(std::move(c), opts(5 * kNanosPerMilli));
  ob.start();
  EXPECT_GE(fake->reads.load(), 1);  // the baseline is read before start returns
  wait_reads(*fake, 4);
  ob.stop();
  const int reads = fake->reads.load();
  const auto v = lines();
  ASSERT_EQ(static_cast<int>(v.size()), reads);  // every read is a line, the final one included
  for (std::size_t i = 1; i < v.size(); ++i) {
    EXPECT_GE(v[i].t_ns, v[i - 1].t_ns);
    EXPECT_EQ(find_value(v[i].canonical, "generation_tokens"), 10.0 * static_cast<double>(i));
    EXPECT_TRUE(find_value(v[i].derived, "generation_tokens_per_s"));
  }
  EXPECT_DOUBLE_EQ(*ob.tracker("server")->increase("generation_tokens"), 10.0 * (reads - 1));
  const auto r = ob.report();
  EXPECT_EQ(r["sources"][0]["reads"].get<int>(), reads);
  EXPECT_EQ(r["sources"][0]["errors"].get<int>(), 0);
  EXPECT_TRUE(r["sources"][0]["collected"].get<bool>());
  EXPECT_TRUE(r["sources"][0]["clock_offset"].is_null());
  // Nothing logged but, on a machine slow enough (a sanitizer build beside
  // other work), the note that a read overran the 5 ms interval: timing is
  // this machine's, not the observer's behaviour.
  std::istringstream logged(log_.str());
  for (std::string line; std::getline(logged, line);)
    EXPECT_EQ(line.rfind("tokenscope bench: server: a read took ", 0), 0u) << line;
}

TEST_F(ObserverTest, AnOptionalSourceThatDoesNotAnswerIsDroppedWithOneNote) {
  Observer ob(dir_ / "samples.jsonl", clock_, log_);
  auto c = std::make_unique<FakeCollector>("server");
  c->fail_from = 0;
  FakeCollector* fake = c.get();
  ob.add(std::move(c), opts(kNanosPerMilli, true, "http://x/metrics"));
  ob.start();
  ob.stop();
  EXPECT_EQ(fake->reads.load(), 1);
  EXPECT_NE(log_.str().find("server not collected: connection refused (http://x/metrics)"), std::string::npos)
      << log_.str();
  EXPECT_FALSE(ob.report()["sources"][0]["collected"].get<bool>());
}

TEST_F(ObserverTest, FailuresAreCountedByReasonAndLoggedOnce) {
  Observer ob(dir_ / "samples.jsonl", clock_, log_);
  auto c = std::make_unique<FakeCollector>("server");
  c->fail_from = 2;
  FakeCollector* fake = c.get();
  ob.add(std::move(c), opts(2 * kNanosPerMilli));
  ob.start();
  wait_reads(*fake, 8);
  ob.stop();
  const auto r = ob.report()["sources"][0];
  const int reads = fake->reads.load();
  EXPECT_EQ(r["errors"].get<int>(), reads - 2);
  EXPECT_EQ(
      r["errors_by_reason"]["HTTP 503"].get<int>() + r["errors_by_reason"]["connection refused"].get<int>(),
      reads - 2);
  // One line in the log for all of them. (A read slower than the 2 ms
  // interval, as under a sanitizer, adds its own one line: not counted.)
  const std::string log = log_.str();
  int failure_lines = 0;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    failure_lines += line.find("later failures are counted") != std::string::npos ? 1 : 0;
  EXPECT_EQ(failure_lines, 1) << log;
  EXPECT_LE(std::count(log.begin(), log.end(), '\n'), 2) << log;
  // Failed reads are lines with "error" and no series.
  int errors = 0;
  for (const auto& o : lines()) errors += !o.error.empty();
  EXPECT_EQ(errors, reads - 2);
}

TEST_F(ObserverTest, AnUnavailableCollectorWritesOneLineAndIsNotReadAgain) {
  Observer ob(dir_ / "samples.jsonl", clock_, log_);
  auto c = std::make_unique<FakeCollector>("gpu");
  c->unavailable = true;
  FakeCollector* fake = c.get();
  ob.add(std::move(c), opts(kNanosPerMilli));
  ob.start();
  ob.stop();
  EXPECT_EQ(fake->reads.load(), 1);
  const auto v = lines();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].unavailable, "not here: no library");
  EXPECT_EQ(ob.report()["sources"][0]["unavailable"], "not here: no library");
}

TEST_F(ObserverTest, TheServersClockOffsetIsTheMedianOfWhatEachScrapeImplies) {
  Observer ob(dir_ / "samples.jsonl", clock_, log_);
  auto c = std::make_unique<FakeCollector>("server");
  c->server_offset = 123'456'789;
  FakeCollector* fake = c.get();
  ob.add(std::move(c), opts(2 * kNanosPerMilli));
  ob.start();
  wait_reads(*fake, 3);
  ob.stop();
  const auto off = ob.report()["sources"][0]["clock_offset"];
  ASSERT_FALSE(off.is_null());
  EXPECT_DOUBLE_EQ(off["offset_ns"].get<double>(), 123'456'789.0);
  EXPECT_DOUBLE_EQ(off["iqr_ns"].get<double>(), 0.0);
}

TEST_F(ObserverTest, AnUnwritableSamplesFileIsReportedAndTheCollectorsGoOn) {
  Observer ob(dir_ / "no-such-dir" / "samples.jsonl", clock_, log_);
  auto c = std::make_unique<FakeCollector>("server");
  FakeCollector* fake = c.get();
  ob.add(std::move(c), opts(2 * kNanosPerMilli));
  ob.start();
  wait_reads(*fake, 3);
  ob.stop();
  EXPECT_FALSE(ob.report()["write_error"].is_null());
  EXPECT_NE(log_.str().find("samples are not written"), std::string::npos);
  EXPECT_GE(*ob.tracker("server")->increase("generation_tokens"), 20.0);
}

// An overrun is a read longer than the interval, its work after the fetch
// included: a 1 ms fetch whose parse takes 20 ms at a 5 ms interval overran
// every time while run.json said 0.
TEST_F(ObserverTest, OverrunsCountTheWholeReadNotOnlyItsFetch) {
  Observer ob(dir_ / "samples.jsonl", clock_, log_);
  auto c = std::make_unique<FakeCollector>("server");
  FakeCollector* fake = c.get();
  fake->work_ms = 20;
  ob.add(std::move(c), opts(5 * kNanosPerMilli));
  ob.start();
  wait_reads(*fake, 3);
  ob.stop();
  const auto r = ob.report();
  EXPECT_EQ(r["sources"][0]["overruns"].get<int>(), fake->reads.load());
  EXPECT_NE(log_.str().find("a read took"), std::string::npos) << log_.str();
}

// The bound on samples.jsonl: past a minute's worth of the hourly budget, a
// line goes without its raw series, and a line still over is not written;
// both are counted.
TEST_F(ObserverTest, SamplesPastTheBytesBoundLoseTheirRawSeriesThenTheirLines) {
  Observer ob(dir_ / "samples.jsonl", clock_, log_);
  auto c = std::make_unique<FakeCollector>("server");
  FakeCollector* fake = c.get();
  fake->raw_extra = 200;                     // about 4 KB of raw series a line, 300 bytes without
  ob.set_samples_bytes_per_hour(60 * 3000);  // a minute's worth: 3,000 bytes
  ob.add(std::move(c), opts(2 * kNanosPerMilli));
  ob.start();
  wait_reads(*fake, 30);
  ob.stop();
  const auto v = lines();
  const auto r = ob.report()["samples_bound"];
  const auto without_raw = r["lines_without_raw"].get<std::uint64_t>();
  const auto not_written = r["lines_not_written"].get<std::uint64_t>();
  EXPECT_EQ(v.size() + not_written, static_cast<std::size_t>(fake->reads.load()));
  EXPECT_GE(without_raw, 1u);
  EXPECT_GE(not_written, 1u);
  std::size_t lines_without_raw = 0;
  for (const auto& o : v) lines_without_raw += o.raw.empty();
  EXPECT_GE(lines_without_raw, 1u);
  EXPECT_LE(fs::file_size(dir_ / "samples.jsonl"), 3000u);
  EXPECT_EQ(r["bytes_written"].get<std::uint64_t>(), fs::file_size(dir_ / "samples.jsonl"));
}

}  // namespace
}  // namespace tokenscope::observe
