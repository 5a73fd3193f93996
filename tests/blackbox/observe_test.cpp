// Black-box tests of the observe layer of `tokenscope bench` and `sim`: the
// server's /metrics scraped during a run on the client's clock, the server's
// view of the run in run.json against the server's own final counters, and
// scrapes that fail in every way a user meets (nothing listening, 404, a body
// that is not an exposition, a scrape slower than the interval).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>

#include "process.h"
#include "server.h"

namespace tokenscope::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The value of an unlabelled (or first labelled) sample of an exposition.
double metric(const std::string& text, const std::string& name) {
  const std::regex re("(^|\n)" + std::regex_replace(name, std::regex(R"([:.])"), R"(\$&)") +
                      R"((\{[^}]*\})? ([^ \n]+))");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return std::nan("");
  return std::stod(m[3].str());
}

// A loopback server that answers every request with `body` after `delay`.
class ScriptedMetrics {
 public:
  ScriptedMetrics(int status, std::string content_type, std::string body, std::chrono::milliseconds delay)
      : status_(status), type_(std::move(content_type)), body_(std::move(body)), delay_(delay) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        ++requests_;
        char buf[4096];
        (void)!::read(c, buf, sizeof buf);
        std::this_thread::sleep_for(delay_);  // the slow exporter under test, not a wait for a condition
        const std::string resp = "HTTP/1.1 " + std::to_string(status_) + " X\r\nContent-Type: " + type_ +
                                 "\r\nContent-Length: " + std::to_string(body_.size()) +
                                 "\r\nConnection: close\r\n\r\n" + body_;
        (void)!::write(c, resp.data(), resp.size());
        ::close(c);
      }
    });
  }
  ~ScriptedMetrics() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/metrics"; }
  int requests() const { return requests_.load(); }

 private:
  int status_;
  std::string type_, body_;
  std::chrono::milliseconds delay_;
  int fd_ = -1, port_ = 0;
  std::thread thread_;
  std::atomic<int> requests_{0};
};

class Observe : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tokenscope_observe_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  ProcessResult bench(std::vector<std::string> args, double timeout_s = 120) {
    args.insert(args.begin(), {kBin, "bench", "--progress", "none"});
    return run_process(args, timeout_s);
  }
  static std::vector<json> lines(const fs::path& p) {
    std::vector<json> out;
    std::ifstream in(p);
    for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
    return out;
  }
  static const json* source(const json& run, const std::string& name) {
    for (const auto& s : run["observe"]["sources"])
      if (s["source"] == name) return &s;
    return nullptr;
  }
  static double canonical(const json& line, const std::string& name) {
    for (const auto& s : line["canonical"])
      if (s[0] == name) return s[2].get<double>();
    return std::nan("");
  }
  fs::path dir_;
};

// The in-process simulator is scraped through its own /metrics: the
// baseline before the first send, the final read after the last response,
// and the server's counters over the run equal what the client counted.
TEST_F(Observe, TheSimulatorIsScrapedAndItsCountersCoverExactlyTheRun) {
  const auto out = dir_ / "run";
  const auto r = bench({"--num-requests", "40", "--rate", "40", "--input-len", "fixed:200", "--output-len",
                        "fixed:12", "--prefix-groups", "2", "--prefix-tokens", "128", "--scrape-interval",
                        "0.2", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("samples: server "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(vllm-v1, "), std::string::npos) << r.out;
  const auto run = json::parse(slurp(out / "run.json"));
  const auto& s = run["summary"];
  const auto& server = run["server"];
  ASSERT_FALSE(server.is_null()) << run["observe"].dump(1);
  EXPECT_EQ(server["requests_finished"].get<double>(), 40);
  EXPECT_EQ(server["generation_tokens"].get<double>(), s["output_tokens_total"].get<double>());
  EXPECT_EQ(server["prompt_tokens"].get<double>(), s["prompt_tokens_total"].get<double>());
  EXPECT_EQ(server["prefix_cache_queries_tokens"].get<double>(),
            s["prefix_cache_queries_tokens"].get<double>());
  EXPECT_EQ(server["prefix_cache_hits_tokens"].get<double>(), s["prefix_cache_hits_tokens"].get<double>());
  EXPECT_EQ(server["server_ttft_seconds"]["count"].get<double>(), 40);
  const auto* src = source(run, "server");
  ASSERT_NE(src, nullptr);
  EXPECT_EQ((*src)["engine"], "vllm-v1");
  EXPECT_EQ((*src)["errors"], 0);
  EXPECT_EQ((*src)["rejected_lines"], 0);
  EXPECT_GT((*src)["cpu_ms_per_read"].get<double>(), 0);
  // Every sample is on the records' clock: the baseline before the first
  // send, the last one after the last response.
  const auto samples = lines(out / "samples.jsonl");
  const auto recs = lines(out / "requests.jsonl");
  std::vector<json> server_lines;
  for (const auto& l : samples)
    if (l["source"] == "server") server_lines.push_back(l);
  ASSERT_GE(server_lines.size(), 2u);
  std::int64_t first_send = INT64_MAX, last_close = 0;
  for (const auto& rec : recs) {
    first_send = std::min(first_send, rec["t_send_ns"].get<std::int64_t>());
    last_close = std::max(last_close, rec["t_close_ns"].get<std::int64_t>());
  }
  EXPECT_LT(server_lines.front()["t_ns"].get<std::int64_t>(), first_send);
  EXPECT_GT(
      server_lines.back()["t_ns"].get<std::int64_t>() - server_lines.back()["rtt_ns"].get<std::int64_t>(),
      last_close);
  EXPECT_EQ(canonical(server_lines.front(), "requests_finished"), 0);
  EXPECT_EQ(canonical(server_lines.back(), "requests_finished"), 40);
  EXPECT_TRUE(server_lines.back().contains("derived"));
  // The wall-clock anchor of the run.
  EXPECT_GT(run["clock"]["unix_ns"].get<std::int64_t>(), 1'700'000'000'000'000'000);
  // Prefix groups: the locality of the run's blocks.
  EXPECT_TRUE(run["kv_locality"]["available"].get<bool>()) << run["kv_locality"].dump(1);
  EXPECT_EQ(run["kv_locality"]["requests"], 40);
}

// A separate `tokenscope serve` as a remote target: the summary's server
// keys, empty for remote targets before, now come from its counters, and
// run.json's server block equals the server's own final /metrics.
TEST_F(Observe, ARemoteServersCountersEqualItsFinalMetrics) {
  Server server(dir_, {"--fixed-step-ms", "2"});
  const auto out = dir_ / "run";
  const auto r = bench({"--target", server.url(""), "--num-requests", "30", "--rate", "60", "--input-len",
                        "fixed:100", "--output-len", "fixed:8", "--prefix-groups", "1", "--prefix-tokens",
                        "64", "--scrape-interval", "0.25", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string final_metrics = http_get(server.port(), "/metrics");
  server.stop();
  const auto run = json::parse(slurp(out / "run.json"));
  const auto& sv = run["server"];
  ASSERT_FALSE(sv.is_null());
  EXPECT_EQ(sv["requests_finished"].get<double>(), 30);
  EXPECT_EQ(sv["generation_tokens"].get<double>(), metric(final_metrics, "vllm:generation_tokens_total"));
  EXPECT_EQ(sv["prompt_tokens"].get<double>(), metric(final_metrics, "vllm:prompt_tokens_total"));
  EXPECT_EQ(sv["prefix_cache_queries_tokens"].get<double>(),
            metric(final_metrics, "vllm:prefix_cache_queries_total"));
  const auto& s = run["summary"];
  EXPECT_EQ(s["prefix_cache_queries_tokens"].get<double>(),
            metric(final_metrics, "vllm:prefix_cache_queries_total"));
  EXPECT_EQ(s["prefix_cache_hits_tokens"].get<double>(),
            metric(final_metrics, "vllm:prefix_cache_hits_total"));
  EXPECT_FALSE(s["preemptions_total"].is_null());
}

TEST_F(Observe, ScrapesThatFailAreReportedOnceAndTheRunGoesOn) {
  ScriptedMetrics not_found(404, "text/plain", "no such page", std::chrono::milliseconds(0));
  ScriptedMetrics not_prometheus(200, "application/json", "{\"object\": \"list\", \"data\": []}\n",
                                 std::chrono::milliseconds(0));
  ScriptedMetrics slow(200, "text/plain; version=0.0.4", "# TYPE up gauge\nup 1\n",
                       std::chrono::milliseconds(700));
  // Nothing listens on this one (a port just closed).
  int closed_port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    closed_port = ntohs(addr.sin_port);
    ::close(fd);
  }
  const auto out = dir_ / "run";
  const auto r = bench(
      {"--num-requests", "30", "--rate", "15", "--output-len", "fixed:4", "--scrape-interval", "0.3",
       "--scrape", not_found.url(), "--scrape", not_prometheus.url(), "--scrape", slow.url(), "--scrape",
       "http://127.0.0.1:" + std::to_string(closed_port) + "/metrics", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run = json::parse(slurp(out / "run.json"));
  EXPECT_EQ(run["summary"]["requests_completed"], 30);
  const auto* a = source(run, "server1");
  const auto* b = source(run, "server2");
  const auto* c = source(run, "server3");
  const auto* d = source(run, "server4");
  ASSERT_TRUE(a && b && c && d) << run["observe"].dump(1);
  // The 404: every read failed, one reason.
  EXPECT_EQ((*a)["errors"], (*a)["reads"]);
  EXPECT_GE((*a)["reads"].get<int>(), 3);
  EXPECT_EQ((*a)["errors_by_reason"].size(), 1u);
  EXPECT_NE((*a)["errors_by_reason"].begin().key().find("HTTP 404"), std::string::npos);
  // JSON is not an exposition.
  EXPECT_EQ((*b)["errors"], (*b)["reads"]);
  EXPECT_NE((*b)["errors_by_reason"].begin().key().find("not a Prometheus exposition"), std::string::npos);
  // The slow one answers, later than the interval: counted as overruns, not errors.
  EXPECT_EQ((*c)["errors"], 0);
  EXPECT_GE((*c)["overruns"].get<int>(), 1);
  // Nothing listening.
  EXPECT_EQ((*d)["errors"], (*d)["reads"]);
  // Each source's trouble is on stderr once.
  for (const std::string name : {"server1:", "server2:", "server3:", "server4:"}) {
    std::size_t n = 0;
    for (std::size_t p = r.err.find(name); p != std::string::npos; p = r.err.find(name, p + 1)) ++n;
    EXPECT_EQ(n, 1u) << name << "\n" << r.err;
  }
  // Every read of the 404 source is an error line in samples.jsonl.
  for (const auto& l : lines(out / "samples.jsonl")) {
    if (l["source"] == "server1") {
      EXPECT_TRUE(l.contains("error")) << l.dump();
    }
  }
}

// Scrape bounds (docs/reliability.md "Scrape bounds"): a page of 60,000
// tiny series over --scrape-max-series 50,000, and a TGI-shaped histogram of
// 60 label sets with 60 bounds of their own (3,600 distinct bounds merged,
// over the default 512). The first 50,000 series are kept, the rest counted;
// the histogram is left out of the canonical series, counted; samples.jsonl
// stays within --samples-max-mib-per-hour; the report says each.
TEST_F(Observe, ScrapeBombsAreBoundedCountedAndNoted) {
  // 49,901 series, a histogram of 2 label sets x 101 buckets that the bound
  // cuts after 99 of its lines (left out whole: a cut histogram has no +Inf),
  // then 10,000 more.
  std::string bomb = "# TYPE tgi_queue_size gauge\ntgi_queue_size 3\n";
  for (int i = 0; i < 49900; ++i) bomb += "x_" + std::to_string(i) + " 1\n";
  bomb += "# TYPE tgi_request_duration histogram\n";
  for (int s = 0; s < 2; ++s) {
    for (int b = 0; b < 100; ++b)
      bomb += "tgi_request_duration_bucket{r=\"" + std::to_string(s) + "\",le=\"" + std::to_string(b + 1) +
              "\"} " + std::to_string(b) + "\n";
    bomb += "tgi_request_duration_bucket{r=\"" + std::to_string(s) + "\",le=\"+Inf\"} 100\n";
  }
  for (int i = 0; i < 10000; ++i) bomb += "y_" + std::to_string(i) + " 1\n";
  std::string hist = "# TYPE tgi_request_duration histogram\n";
  for (int s = 0; s < 60; ++s) {
    for (int b = 0; b < 60; ++b)
      hist += "tgi_request_duration_bucket{route=\"r" + std::to_string(s) + "\",le=\"" +
              std::to_string(s * 100 + b) + ".5\"} " + std::to_string(b) + "\n";
    hist += "tgi_request_duration_bucket{route=\"r" + std::to_string(s) + "\",le=\"+Inf\"} 60\n";
  }
  ScriptedMetrics many(200, "text/plain; version=0.0.4", bomb, std::chrono::milliseconds(0));
  ScriptedMetrics wide(200, "text/plain; version=0.0.4", hist, std::chrono::milliseconds(0));
  const auto out = dir_ / "run";
  const auto r =
      bench({"--num-requests", "20", "--rate", "20", "--output-len", "fixed:4", "--scrape-interval", "0.2",
             "--scrape", many.url(), "--scrape", wide.url(), "--scrape-max-series", "50000",
             "--samples-max-mib-per-hour", "2", "--no-history", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run = json::parse(slurp(out / "run.json"));
  const auto* a = source(run, "server1");
  const auto* b = source(run, "server2");
  ASSERT_TRUE(a && b) << run["observe"].dump(1);
  const auto& la = (*a)["limits"];
  EXPECT_EQ(la["max_series"], 50000);
  EXPECT_EQ(la["most_series"], 60103);
  EXPECT_EQ(la["scrapes_over_series_limit"], (*a)["reads"]);
  // 10,103 past the bound and the cut histogram's 99 kept lines, each scrape.
  EXPECT_EQ(la["series_dropped"].get<std::uint64_t>(),
            10202 * la["scrapes_over_series_limit"].get<std::uint64_t>());
  EXPECT_EQ((*b)["limits"]["canonical_histograms_dropped"], (*b)["reads"]);
  const auto& bound = run["observe"]["samples_bound"];
  EXPECT_EQ(bound["bytes_per_hour"], 2 * 1048576);
  EXPECT_GE(bound["lines_without_raw"].get<int>(), 1);
  // A minute's worth of 2 MiB an hour at most (the run is shorter).
  EXPECT_LE(fs::file_size(out / "samples.jsonl"), 2u * 1048576 / 60 + 1);
  bool tgi_e2e = false;
  for (const auto& l : lines(out / "samples.jsonl"))
    if ((l["source"] == "server1" || l["source"] == "server2") && l.contains("canonical"))
      for (const auto& s : l["canonical"])
        tgi_e2e |= s[0].get<std::string>().starts_with("server_e2e_seconds");
  EXPECT_FALSE(tgi_e2e);
  const auto report = run_process({kBin, "report", out.string(), "--format", "text"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("scrape bounds: server1"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("more than 512 distinct bucket bounds"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("samples.jsonl bound: 2 MiB per hour reached"), std::string::npos) << report.out;
}

TEST_F(Observe, BadObserveOptionsGetClearMessages) {
  auto r = bench({"--scrape", "ftp://x/metrics", "--num-requests", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--scrape"), std::string::npos) << r.err;
  r = bench({"--scrape-interval", "0", "--num-requests", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--scrape-interval"), std::string::npos) << r.err;
  r = bench({"--no-scrape", "--scrape", "http://127.0.0.1:1/metrics", "--num-requests", "1"});
  EXPECT_EQ(r.exit_code, 2);
}

// The exports of a finished run: a Perfetto trace with a slice per request
// phase and counter tracks, OTLP/JSON files, and a push to an endpoint.
TEST_F(Observe, ExportsOfAFinishedRunAreWrittenAndPushed) {
  ScriptedMetrics receiver(200, "application/json", "{}", std::chrono::milliseconds(0));
  const auto out = dir_ / "run";
  const std::string endpoint =
      receiver.url().substr(0, receiver.url().size() - std::string("/metrics").size());
  const auto r =
      bench({"--num-requests", "12", "--rate", "30", "--output-len", "fixed:6", "--scrape-interval", "0.2",
             "--trace-out", "trace.json", "--otlp-out", "--otlp-endpoint", endpoint, "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run = json::parse(slurp(out / "run.json"));
  const auto& ex = run["exports"];
  EXPECT_GT(ex["perfetto"]["events"].get<int>(), 12 * 6) << ex.dump(1);
  EXPECT_EQ(ex["otlp_files"]["spans"], 12) << ex.dump(1);
  EXPECT_TRUE(ex["otlp_push"]["ok"].get<bool>()) << ex.dump(1);
  EXPECT_GE(ex["otlp_push"]["requests_sent"].get<int>(), 2);  // traces and metrics
  EXPECT_EQ(receiver.requests(), ex["otlp_push"]["requests_sent"].get<int>());
  // The trace is one JSON document: a slice per phase of each request, counters from the samples.
  const auto trace = json::parse(slurp(out / "trace.json"));
  const auto& events = trace.is_array() ? trace : trace["traceEvents"];
  int decoding = 0, counters = 0;
  for (const auto& e : events) {
    if (e.value("name", "") == "decoding") ++decoding;
    if (e.value("ph", "") == "C") ++counters;
  }
  EXPECT_EQ(decoding, 12);
  EXPECT_GT(counters, 0);
  // One export request per line.
  std::ifstream traces(out / "otlp_traces.json");
  int spans = 0;
  for (std::string line; std::getline(traces, line);) {
    const auto request = json::parse(line);
    for (const auto& rs : request["resourceSpans"])
      for (const auto& ss : rs["scopeSpans"]) spans += static_cast<int>(ss["spans"].size());
  }
  EXPECT_EQ(spans, 12);
  EXPECT_TRUE(fs::exists(out / "otlp_metrics.json"));
}

// `sim` writes the same canonical series on virtual time.
TEST_F(Observe, SimWritesTheSameSeriesOnVirtualTime) {
  const auto out = dir_ / "sim";
  const auto r =
      run_process({kBin, "sim", "--num-requests", "200", "--rate", "10", "--out", out.string(), "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run = json::parse(slurp(out / "run.json"));
  const auto samples = lines(out / "samples.jsonl");
  ASSERT_GE(samples.size(), 10u);
  EXPECT_EQ(samples.front()["t_ns"], 0);
  EXPECT_EQ(samples.back()["source"], "sim");
  EXPECT_EQ(canonical(samples.back(), "requests_finished"), 200);
  EXPECT_EQ(canonical(samples.back(), "prefix_cache_queries_tokens"),
            run["summary"]["prefix_cache_queries_tokens"].get<double>());
  EXPECT_EQ(canonical(samples.back(), "generation_tokens"),
            run["summary"]["output_tokens_total"].get<double>());
}

}  // namespace
}  // namespace tokenscope::testing
