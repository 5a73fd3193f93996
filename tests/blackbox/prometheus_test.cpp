// `tokenscope bench --metrics-port` scraped by a real Prometheus server
// (Debian's prometheus package; scripts/setup.sh installs it): Prometheus
// scrapes the bench every second, and when the run has ended its query API
// must hold the same counts as the run's run.json. Loopback only; every wait
// is on a condition with a deadline; both processes are killed when the
// test ends, whatever happened (Child's destructor).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <thread>
#include <vector>

#include "process.h"
#include "server.h"

namespace tokenscope::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

const std::string kPrometheus = "/usr/bin/prometheus";
const std::string kCurl = "/usr/bin/curl";

// A port free at the moment of asking (the kernel's choice for port 0). It
// can be taken by someone else before Prometheus binds it: the caller
// retries with another.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

// Polls `ready` every 50 ms until it returns true or the deadline passes.
bool wait_until(Clock::time_point deadline, const std::function<bool()>& ready) {
  for (;;) {
    if (ready()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

class PrometheusScrape : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tokenscope_prometheus_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "targets");
  }
  void TearDown() override {
    prometheus_.reset();  // killed (SIGKILL) if still running
    fs::remove_all(dir_);
  }

  // Starts Prometheus on a free loopback port with a configuration that
  // scrapes, every second, the targets listed in targets/*.json (file-based
  // service discovery: the bench's port is known only once it runs).
  // Returns an empty string when it is ready, else why not.
  std::string start_prometheus() {
    // Prometheus, "Configuration": global scrape_interval and
    // scrape_timeout; file_sd_configs reads JSON lists of
    // {"targets": [...], "labels": {...}} and re-reads them when they change.
    write_file(dir_ / "targets" / "bench.json", "[]\n");
    write_file(dir_ / "prometheus.yml",
               "global:\n"
               "  scrape_interval: 1s\n"
               "  scrape_timeout: 1s\n"
               "scrape_configs:\n"
               "  - job_name: tokenscope_bench\n"
               "    scrape_interval: 1s\n"
               "    file_sd_configs:\n"
               "      - files: ['" +
                   (dir_ / "targets" / "*.json").string() +
                   "']\n"
                   "        refresh_interval: 1s\n");
    std::string why;
    for (int attempt = 0; attempt < 3; ++attempt) {
      prom_port_ = free_port();
      if (prom_port_ <= 0) return "no free loopback port";
      fs::remove_all(dir_ / "tsdb");
      prometheus_ = std::make_unique<Child>(
          std::vector<std::string>{kPrometheus, "--config.file=" + (dir_ / "prometheus.yml").string(),
                                   "--storage.tsdb.path=" + (dir_ / "tsdb").string(),
                                   "--web.listen-address=127.0.0.1:" + std::to_string(prom_port_)},
          (dir_ / "prometheus.out").string(), (dir_ / "prometheus.err").string());
      // Ready: GET /-/ready answers 200 once the storage is open.
      const bool ready = wait_until(Clock::now() + std::chrono::seconds(60), [&] {
        if (!prometheus_->running()) return true;
        return run_process({kCurl, "-sf", "--max-time", "2", prom_url("/-/ready")}, 10).exit_code == 0;
      });
      if (ready && prometheus_->running()) return "";
      why = ready ? "prometheus exited: " + slurp(dir_ / "prometheus.err")
                  : "prometheus not ready within 60 s: " + slurp(dir_ / "prometheus.err");
      prometheus_.reset();
    }
    return why;
  }

  std::string prom_url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(prom_port_) + path;
  }

  // The instant vector of a PromQL query (GET /api/v1/query), or nullopt
  // when Prometheus did not answer with success.
  std::optional<json> query(const std::string& promql) {
    const auto r = run_process({kCurl, "-sS", "--max-time", "5", "-G", prom_url("/api/v1/query"),
                                "--data-urlencode", "query=" + promql},
                               15);
    if (r.exit_code != 0) return std::nullopt;
    try {
      const auto j = json::parse(r.out);
      if (j.value("status", "") != "success") return std::nullopt;
      return j["data"]["result"];
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  // The value of a query with one series in its answer; nullopt when none.
  std::optional<double> value(const std::string& promql) {
    const auto v = query(promql);
    if (!v || v->size() != 1) return std::nullopt;
    return std::stod((*v)[0]["value"][1].get<std::string>());
  }

  fs::path dir_;
  int prom_port_ = 0;
  std::unique_ptr<Child> prometheus_;
};

TEST_F(PrometheusScrape, TheFinalScrapeEqualsRunJson) {
  // Not a skip: the setup script installs Prometheus, and a missing one
  // must not pass unnoticed.
  ASSERT_TRUE(fs::exists(kPrometheus))
      << kPrometheus << " is missing: run scripts/setup.sh (it installs Debian's prometheus package)";
  ASSERT_TRUE(fs::exists(kCurl)) << kCurl << " is missing: run scripts/setup.sh";
  const std::string not_started = start_prometheus();
  ASSERT_EQ(not_started, "");

  // The bench: a few seconds against the in-process simulator, its metrics
  // on a port it picks (named on standard error), kept up after the run
  // until the test has read the final counts (then interrupted).
  const auto out = dir_ / "run";
  Child bench({kBin, "bench", "--duration-s", "3", "--rate", "10", "--input-len", "fixed:64", "--output-len",
               "fixed:16", "--progress", "none", "--out", out.string(), "--metrics-port", "0",
               "--metrics-linger-s", "120"},
              (dir_ / "bench.out").string(), (dir_ / "bench.err").string());
  const std::regex address(R"(metrics at http://127\.0\.0\.1:(\d+)/metrics)");
  std::smatch m;
  std::string err;
  ASSERT_TRUE(wait_until(Clock::now() + std::chrono::seconds(30), [&] {
    err = slurp(dir_ / "bench.err");
    return std::regex_search(err, m, address) || !bench.running();
  }));
  ASSERT_TRUE(std::regex_search(err, m, address)) << "bench did not name its metrics port: " << err;
  const std::string bench_port = m[1];
  // Written aside and renamed, so that Prometheus never reads half a file.
  write_file(dir_ / "targets" / "bench.json.tmp", "[{\"targets\": [\"127.0.0.1:" + bench_port + "\"]}]\n");
  fs::rename(dir_ / "targets" / "bench.json.tmp", dir_ / "targets" / "bench.json");

  // The run ends: run.json holds the summary.
  json run;
  ASSERT_TRUE(wait_until(Clock::now() + std::chrono::seconds(60), [&] {
    try {
      run = json::parse(slurp(out / "run.json"));
      return run["partial"] == false;
    } catch (const std::exception&) {
      return false;
    }
  })) << slurp(dir_ / "bench.err");
  const auto& s = run["summary"];
  ASSERT_GT(s["requests_completed"].get<double>(), 10);

  // Prometheus has scraped the bench after its run ended (the scrape that
  // says so carries the final counts). Discovery of the new target can take
  // Prometheus up to 5 s (it batches updates), then one scrape interval.
  ASSERT_TRUE(wait_until(Clock::now() + std::chrono::seconds(60),
                         [&] {
                           const auto v = value("tokenscope_bench_run_finished");
                           return v && *v == 1;
                         }))
      << "Prometheus never saw the run finished; targets: "
      << run_process({kCurl, "-sS", "--max-time", "5", prom_url("/api/v1/targets")}, 10).out;

  auto must = [&](const std::string& q) {
    const auto v = value(q);
    EXPECT_TRUE(v.has_value()) << "no value for " << q;
    return v.value_or(-1);
  };
  EXPECT_EQ(must("tokenscope_bench_requests_completed_total"), s["requests_completed"].get<double>());
  EXPECT_EQ(must("sum(tokenscope_bench_requests_failed_total)"), s["requests_failed"].get<double>());
  EXPECT_EQ(must("tokenscope_bench_requests_sent_total"), s["requests_total"].get<double>());
  EXPECT_EQ(must("tokenscope_bench_requests_not_sent_total"),
            run["client"]["requests_not_sent"].get<double>());
  EXPECT_EQ(must("tokenscope_bench_output_tokens_total"), s["output_tokens_total"].get<double>());
  EXPECT_EQ(must("tokenscope_bench_prompt_tokens_total"), s["prompt_tokens_total"].get<double>());
  EXPECT_EQ(must("tokenscope_bench_requests_in_flight"), 0);
  EXPECT_EQ(must("tokenscope_bench_requests_warmup_total"), 0);
  EXPECT_GT(must("tokenscope_bench_achieved_requests_per_second"), 0);
  // The histograms hold the same samples as the summary's distributions:
  // equal counts, and means equal to rounding (run.json's are in ms).
  EXPECT_EQ(must("tokenscope_bench_time_to_first_token_seconds_count"), s["ttft_ms"]["count"].get<double>());
  EXPECT_NEAR(must("tokenscope_bench_time_to_first_token_seconds_sum / "
                   "tokenscope_bench_time_to_first_token_seconds_count") *
                  1e3,
              s["ttft_ms"]["mean"].get<double>(), 1e-3);
  EXPECT_EQ(must("tokenscope_bench_e2e_request_latency_seconds_count"), s["e2e_ms"]["count"].get<double>());
  EXPECT_NEAR(must("tokenscope_bench_e2e_request_latency_seconds_sum / "
                   "tokenscope_bench_e2e_request_latency_seconds_count") *
                  1e3,
              s["e2e_ms"]["mean"].get<double>(), 1e-3);
  EXPECT_EQ(must("tokenscope_bench_inter_token_latency_seconds_count"), s["itl_ms"]["count"].get<double>());
  EXPECT_EQ(must("tokenscope_bench_send_lag_seconds_count"), s["send_lag_ms"]["count"].get<double>());
  // Prometheus read the buckets as a histogram: its median estimate lies in
  // the bucket that holds the summary's median (nearest rank: the sample of
  // rank ceil(n/2); histogram_quantile's rank is n/2: the same bucket).
  const double count = must("tokenscope_bench_time_to_first_token_seconds_count");
  const auto buckets = query("tokenscope_bench_time_to_first_token_seconds_bucket");
  ASSERT_TRUE(buckets && buckets->size() > 10) << (buckets ? buckets->dump() : "no answer");
  std::vector<std::pair<double, double>> cumulative;  // (le, count)
  for (const auto& b : *buckets)
    cumulative.emplace_back(std::stod(b["metric"]["le"].get<std::string>()),
                            std::stod(b["value"][1].get<std::string>()));
  std::sort(cumulative.begin(), cumulative.end());
  double lo = 0, hi = 0;
  for (const auto& [le, n] : cumulative) {
    if (n >= count / 2) {
      hi = le;
      break;
    }
    lo = le;
  }
  const double p50 = must("histogram_quantile(0.5, tokenscope_bench_time_to_first_token_seconds_bucket)");
  const double summary_p50 = s["ttft_ms"]["p50"].get<double>() * 1e-3;
  EXPECT_GE(p50, lo);
  EXPECT_LE(p50, hi);
  EXPECT_GT(summary_p50, lo);
  EXPECT_LE(summary_p50, hi);
  // The run's labels.
  const auto info = query("tokenscope_bench_run_info");
  ASSERT_TRUE(info && info->size() == 1) << (info ? info->dump() : "no answer");
  const auto& labels = (*info)[0]["metric"];
  EXPECT_EQ(labels["run_id"], out.string());
  EXPECT_EQ(labels["model"], "llama-3-8b");
  EXPECT_EQ(labels["job"], "tokenscope_bench");
  EXPECT_NE(labels["target"].get<std::string>().find("http://127.0.0.1:"), std::string::npos);
  // Every scrape succeeded (up) and Prometheus accepted every sample.
  EXPECT_EQ(must("up{job=\"tokenscope_bench\"}"), 1);

  // The linger ends at the first interrupt, and the run's exit code stays.
  bench.signal(SIGINT);
  const auto r = bench.wait(30);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("serving the final metrics"), std::string::npos) << r.err;
  prometheus_->signal(SIGTERM);
  EXPECT_EQ(prometheus_->wait(30).exit_code, 0) << slurp(dir_ / "prometheus.err");
}

// Bad --metrics-* options stop bench before anything runs (exit 2), with
// a message that names the option; a busy port leaves no run directory.
TEST(BenchMetricsOptions, BadOptionsAreUsageErrorsBeforeTheRun) {
  const auto dir = fs::temp_directory_path() / ("tokenscope_metrics_options_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto bench = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {kBin,         "bench", "--duration-s", "1",
                                     "--progress", "none",  "--out",        (dir / "run").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_process(args, 60);
  };
  const auto linger = bench({"--metrics-linger-s", "5"});
  EXPECT_EQ(linger.exit_code, 2);
  EXPECT_NE(linger.err.find("--metrics-linger-s"), std::string::npos) << linger.err;
  EXPECT_NE(linger.err.find("--metrics-port"), std::string::npos) << linger.err;
  const auto range = bench({"--metrics-port", "70000"});
  EXPECT_EQ(range.exit_code, 2);
  EXPECT_NE(range.err.find("--metrics-port"), std::string::npos) << range.err;
  const auto host = bench({"--metrics-port", "0", "--metrics-host", "localhost"});
  EXPECT_EQ(host.exit_code, 2);
  EXPECT_NE(host.err.find("--metrics-host 'localhost': expected an IP address"), std::string::npos)
      << host.err;

  // A port someone else listens on.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  const auto busy = bench({"--metrics-port", port});
  ::close(fd);
  EXPECT_EQ(busy.exit_code, 2);
  EXPECT_NE(busy.err.find("--metrics-port " + port + ": cannot listen on 127.0.0.1:" + port),
            std::string::npos)
      << busy.err;
  EXPECT_FALSE(fs::exists(dir / "run"))
      << "the run directory was created before the port was known to be free";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tokenscope::testing
