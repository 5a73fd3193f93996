// Black-box tests of `tokenscope bench`: the real binary against its
// in-process simulator, against a separate `tokenscope serve` process and
// against a scripted server that records what reaches it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "process.h"
#include "server.h"

namespace tokenscope::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A loopback HTTP/1.1 server that answers every POST with a whole (not
// streamed) completion or chat completion of one token, or as `respond`
// writes to the socket, and keeps each request's head and body: what the
// client put on the wire.
class RecordingServer {
 public:
  struct Request {
    std::string head;  // request line and headers
    std::string body;
  };
  using Respond = std::function<void(int fd, const Request&)>;
  explicit RecordingServer(Respond respond = nullptr) : respond_(std::move(respond)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_, 64), 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // shut down
        std::lock_guard lock(mutex_);
        connections_.emplace_back([this, c] { serve(c); });
      }
    });
  }
  ~RecordingServer() {
    ::shutdown(fd_, SHUT_RDWR);  // wakes accept()
    acceptor_.join();
    ::close(fd_);
    for (auto& t : connections_) t.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<Request> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  // One request per connection (answered with Connection: close); a
  // connection that sends nothing (a warm one) ends when the client closes
  // it, or after 20 s.
  void serve(int c) {
    timeval tv{20, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string in;
    char buf[8192];
    std::size_t head_end = std::string::npos, length = 0;
    for (;;) {
      if (head_end == std::string::npos && (head_end = in.find("\r\n\r\n")) != std::string::npos) {
        std::string lower = in.substr(0, head_end);
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](unsigned char ch) { return std::tolower(ch); });
        if (const auto at = lower.find("content-length:"); at != std::string::npos)
          length = std::stoul(lower.substr(at + 15));
      }
      if (head_end != std::string::npos && in.size() >= head_end + 4 + length) break;
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) {
        ::close(c);
        return;
      }
      in.append(buf, static_cast<std::size_t>(n));
    }
    Request r{in.substr(0, head_end), in.substr(head_end + 4, length)};
    const bool chat = r.head.find("/chat/completions") != std::string::npos;
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(r);
    }
    if (respond_) {
      respond_(c, r);
      ::close(c);
      return;
    }
    const std::string usage = R"("usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9})";
    const std::string body =
        chat
            ? R"({"id":"chatcmpl-1","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,)"
              R"("message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],)" +
                  usage + "}"
            : R"({"id":"cmpl-1","object":"text_completion","created":0,"model":"m","choices":[{"index":0,)"
              R"("text":"hi","finish_reason":"length"}],)" +
                  usage + "}";
    const std::string response = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    ::send(c, response.data(), response.size(), MSG_NOSIGNAL);
    ::close(c);
  }

  Respond respond_;
  int fd_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  std::mutex mutex_;
  std::vector<std::thread> connections_;
  std::vector<Request> requests_;
};

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return s;
}

class Bench : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tokenscope_bench_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  ProcessResult bench(std::vector<std::string> args, double timeout_s = 120) {
    args.insert(args.begin(), {kBin, "bench", "--progress", "none"});
    return run_process(args, timeout_s);
  }
  // Lines the writer has finished, counted while it may still be writing
  // (the last line can be half written: it is not parsed here).
  static std::size_t complete_lines(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
  }
  static std::vector<json> lines(const fs::path& p) {
    std::vector<json> out;
    std::ifstream in(p);
    for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
    return out;
  }
  fs::path dir_;
};

TEST_F(Bench, RunWritesSummaryRecordsCsvAndVllmResult) {
  const auto out = dir_ / "run";
  const auto r =
      bench({"--duration-s", "2", "--rate", "10", "--input-len", "fixed:64", "--output-len", "fixed:16",
             "--out", out.string(), "--csv", "--compat", "vllm", "--slo", "ttft_ms=10000,tpot_ms=1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tokenscope bench: llama-3-8b"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TTFT sched"), std::string::npos);
  EXPECT_NE(r.out.find("send lag"), std::string::npos);
  EXPECT_NE(r.out.find("run directory: " + out.string()), std::string::npos);
  // The run cache, for the check that comes next (docs/check.md).
  EXPECT_TRUE(fs::exists(out / ".tokenscope-cache"));
  const auto run = json::parse(slurp(out / "run.json"));
  EXPECT_EQ(run["partial"], false);
  const auto& s = run["summary"];
  const auto recs = lines(out / "requests.jsonl");
  ASSERT_GT(recs.size(), 5u);
  EXPECT_EQ(s["requests_total"].get<std::size_t>(), recs.size());
  EXPECT_EQ(s["requests_completed"].get<std::size_t>(), recs.size());
  EXPECT_EQ(s["requests_by_outcome"]["ok"].get<std::size_t>(), recs.size());
  EXPECT_EQ(s["output_tokens_total"].get<std::size_t>(), 16 * recs.size());  // ignore_eos, from usage
  EXPECT_EQ(s["output_token_mismatches"], 0);
  EXPECT_GT(s["goodput_rps"].get<double>(), 0);
  EXPECT_EQ(s["slo_attainment"]["default"]["pass"], true);
  EXPECT_GE(s["send_lag_ms"]["min"].get<double>(), 0.0);
  EXPECT_GE(s["ttft_sched_ms"]["p50"].get<double>(), s["ttft_ms"]["p50"].get<double>());
  EXPECT_FALSE(s["prefix_cache_queries_tokens"].is_null());  // in-process: the server's own counters
  for (const auto& rec : recs) {
    EXPECT_EQ(rec["outcome"], "ok");
    EXPECT_EQ(rec["output_tokens"], 16);
    EXPECT_EQ(rec["event_offsets_ns"].size(), 16u);
  }
  std::ifstream csv(out / "requests.csv");
  std::string header, row;
  std::getline(csv, header);
  EXPECT_EQ(header.rfind("id,tenant,class,", 0), 0u);
  std::size_t rows = 0;
  while (std::getline(csv, row)) ++rows;
  EXPECT_EQ(rows, recs.size());
  const auto v = json::parse(slurp(out / "vllm_result.json"));
  // vLLM's benchmark_serving.py --save-result keys (with --save-detailed,
  // --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 90,95,99).
  std::set<std::string> vllm_keys = {"date",
                                     "backend",
                                     "model_id",
                                     "tokenizer_id",
                                     "num_prompts",
                                     "request_rate",
                                     "burstiness",
                                     "max_concurrency",
                                     "duration",
                                     "completed",
                                     "total_input_tokens",
                                     "total_output_tokens",
                                     "request_throughput",
                                     "request_goodput",
                                     "output_throughput",
                                     "total_token_throughput",
                                     "input_lens",
                                     "output_lens",
                                     "ttfts",
                                     "itls",
                                     "generated_texts",
                                     "errors"};
  for (const char* m : {"ttft", "tpot", "itl", "e2el"})
    for (const char* st : {"mean", "median", "std", "p90", "p95", "p99"})
      vllm_keys.insert(std::string(st) + "_" + m + "_ms");
  std::set<std::string> keys;
  for (const auto& [k, x] : v.items()) keys.insert(k);
  EXPECT_EQ(keys, vllm_keys);
  EXPECT_EQ(v["backend"], "vllm");
  EXPECT_EQ(v["model_id"], "llama-3-8b");
  EXPECT_EQ(v["request_rate"], 10.0);
  EXPECT_TRUE(v["max_concurrency"].is_null());
  EXPECT_EQ(v["num_prompts"].get<std::size_t>(), recs.size());
  EXPECT_EQ(v["completed"].get<std::size_t>(), recs.size());
  EXPECT_EQ(v["total_input_tokens"].get<std::size_t>(), 64 * recs.size());
  EXPECT_EQ(v["total_output_tokens"].get<std::size_t>(), 16 * recs.size());
  EXPECT_DOUBLE_EQ(v["duration"].get<double>(), s["duration_s"].get<double>());
  EXPECT_TRUE(v["request_goodput"].is_number());  // one SLO: vLLM's --goodput
  ASSERT_EQ(v["output_lens"].size(), recs.size());
  ASSERT_EQ(v["itls"].size(), recs.size());
  // The same requests as requests.jsonl, in the order they finished: the
  // mean TTFT from the records (ms from the send), 15 gaps per request.
  double ttft_sum_ms = 0;
  for (std::size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(v["input_lens"][i], 64);
    EXPECT_EQ(v["output_lens"][i], 16);
    EXPECT_EQ(v["itls"][i].size(), 15u);
    EXPECT_EQ(v["errors"][i], "");
    ttft_sum_ms += static_cast<double>(recs[i]["t_first_token_ns"].get<std::int64_t>() -
                                       recs[i]["t_send_ns"].get<std::int64_t>()) /
                   1e6;
    EXPECT_NEAR(v["ttfts"][i].get<double>() * 1e3,
                static_cast<double>(recs[i]["t_first_token_ns"].get<std::int64_t>() -
                                    recs[i]["t_send_ns"].get<std::int64_t>()) /
                    1e6,
                1e-9);
  }
  EXPECT_NEAR(v["mean_ttft_ms"].get<double>(), ttft_sum_ms / static_cast<double>(recs.size()), 1e-9);
}

TEST_F(Bench, BadOptionsAndInputGetClearMessages) {
  const auto yaml = dir_ / "bad.yaml";
  std::ofstream(yaml)
      << "duration_s: 5\nclasses:\n  - name: a\n    input_len: fixed:1\n    output_len: nope\n";
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--target", "ftp://x"}, "--target 'ftp://x'"},
      {{"--slo", "ttft_ms=abc"}, "--slo"},
      {{"--slo", "latency=3"}, "unknown metric 'latency'"},
      {{"--stages", "5"}, "VALUE@SECONDS"},
      {{"--workload", (dir_ / "missing.yaml").string()}, "cannot open"},
      {{"--workload", yaml.string()}, "bad.yaml:5"},
      {{"--concurrency", "2", "--stages", "1@1"}, "--user-stages"},
      {{"--sweep-search", "1:5"}, "needs --slo"},
      {{"--max-error-rate", "2"}, "--max-error-rate"},
      {{"--extra-body", "[1]"}, "--extra-body"},
  };
  for (const auto& c : cases) {
    const auto r = bench(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args[0] << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args[0] << ": " << r.err;
  }
}

// Nothing listening: the run fails (exit 1, not "bad options") and says
// why, whether the model is discovered or given.
TEST_F(Bench, NothingListeningFailsTheRunClearly) {
  const std::string url = "http://127.0.0.1:1";  // tcpmux: nothing listens there
  const auto discover = bench({"--target", url, "--out", (dir_ / "a").string()});
  EXPECT_EQ(discover.exit_code, 1) << discover.err;
  EXPECT_NE(discover.err.find("Connection refused"), std::string::npos) << discover.err;
  EXPECT_NE(discover.err.find(url), std::string::npos) << discover.err;
  const auto given = bench({"--target", url, "--model", "m", "--num-requests", "5", "--rate", "50", "--out",
                            (dir_ / "b").string()});
  EXPECT_EQ(given.exit_code, 1) << given.err;
  EXPECT_NE(given.err.find("5 of 5 requests to " + url + " failed"), std::string::npos) << given.err;
  EXPECT_NE(given.err.find("Connection refused"), std::string::npos) << given.err;
  const auto run = json::parse(slurp(dir_ / "b" / "run.json"));
  EXPECT_EQ(run["verdict"]["failed"], true);
  EXPECT_EQ(run["summary"]["requests_by_outcome"]["connect_error"], 5);
}

// --server-cmd/--server-sweep with `tokenscope serve` as the server: one run
// per value, each against its own server (its batch cap is the swept value,
// as the server says of itself), the sweep's table and sweep.json; bad
// values refused before anything starts.
TEST_F(Bench, AServerSweepStartsAServerPerValueAndStopsIt) {
  const int port = unused_loopback_port();
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  const std::string cmd =
      std::string(kBin) + " serve --port " + std::to_string(port) + " --max-num-seqs {seqs}";
  const auto out = dir_ / "sweep";
  const auto r =
      bench({"--target", url, "--server-cmd", cmd, "--server-sweep", "seqs=1,8", "--num-requests", "40",
             "--rate", "40", "--output-len", "fixed:20", "--no-history", "--out", out.string()},
            240);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("server setting"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("seqs=1"), std::string::npos) << r.out;
  const auto sw = json::parse(slurp(out / "sweep.json"));
  EXPECT_EQ(sw["kind"], "server");
  EXPECT_EQ(sw["partial"], false);
  EXPECT_EQ(sw["parameters"]["seqs"], json::array({"1", "8"}));
  ASSERT_EQ(sw["runs"].size(), 2u);
  ASSERT_EQ(sw["curve"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const auto& entry = sw["runs"][i];
    const std::string v = i == 0 ? "1" : "8";
    EXPECT_EQ(entry["dir"], "seqs-" + v);
    EXPECT_EQ(entry["settings"]["seqs"], v);
    EXPECT_EQ(entry["server"]["exit"], "exited with status 0")
        << entry.dump();  // stopped by SIGTERM, cleanly
    const int pid = entry["server"]["pid"].get<int>();
    EXPECT_NE(::kill(pid, 0), 0) << "the server it started is gone";
    const auto run = json::parse(slurp(out / entry["dir"].get<std::string>() / "run.json"));
    EXPECT_EQ(run["settings"]["requested"]["target"]["server_settings"]["seqs"], v);
    EXPECT_NE(run["settings"]["requested"]["target"]["server_command"].get<std::string>().find(
                  "--max-num-seqs " + v),
              std::string::npos);
    EXPECT_EQ(run["summary"]["requests_completed"], 40);
    EXPECT_TRUE(fs::exists(out / entry["dir"].get<std::string>() / "server.log"));
  }
  // One sequence at a time queues: its TTFT is far above eight's.
  EXPECT_GT(sw["curve"][0]["ttft_p50_ms"].get<double>(), 2 * sw["curve"][1]["ttft_p50_ms"].get<double>());
  // The two values compare with check.
  const auto c = run_process({kBin, "check", (out / "seqs-8").string(), (out / "seqs-1").string()}, 120);
  EXPECT_EQ(c.exit_code, 1) << c.out << c.err;
  EXPECT_NE(c.out.find("p50 TTFT"), std::string::npos) << c.out;
  // The report reads the sweep and draws it.
  const auto rep = run_process({kBin, "report", out.string(), "--format", "md"}, 120);
  EXPECT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_NE(rep.out.find("#### server sweep sweep"), std::string::npos) << rep.out;
  EXPECT_NE(rep.out.find("| seqs=8 |"), std::string::npos) << rep.out;

  // Bad values: refused (exit 2) before any server starts or directory is made.
  const auto bad = [&](std::vector<std::string> args, const std::string& says) {
    args.insert(args.end(), {"--num-requests", "4", "--out", (dir_ / "bad").string()});
    const auto b = bench(args);
    EXPECT_EQ(b.exit_code, 2) << b.err;
    EXPECT_NE(b.err.find(says), std::string::npos) << b.err;
    EXPECT_FALSE(fs::exists(dir_ / "bad"));
  };
  bad({"--target", url, "--server-cmd", cmd, "--server-sweep", "seqs=1,,2"}, "empty value");
  bad({"--target", url, "--server-cmd", cmd, "--server-sweep", "seqs=1,1"}, "given twice");
  bad({"--target", url, "--server-cmd", cmd}, "{seqs} is not swept");
  bad({"--target", url, "--server-cmd", cmd, "--server-sweep", "seqs=1", "--server-sweep", "ctx=2"},
      "has no {ctx}");
  bad({"--server-cmd", cmd, "--server-sweep", "seqs=1"}, "--server-cmd needs --target");
  bad({"--target", url, "--server-sweep", "seqs=1"}, "--server-sweep needs --server-cmd");
  bad({"--target", url, "--server-cmd", cmd, "--server-sweep", "seqs=1", "--sweep-rates", "1,2"},
      "cannot be combined");
  // Something already answers at the target: it would be measured instead.
  {
    Child other({kBin, "serve", "--port", std::to_string(port)}, (dir_ / "o.out").string(),
                (dir_ / "o.err").string());
    for (int i = 0;
         i < 200 &&
         run_process({"/usr/bin/curl", "-s", "-o", "/dev/null", url + "/health"}, 5).exit_code != 0;
         ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    bad({"--target", url, "--server-cmd", cmd, "--server-sweep", "seqs=1"}, "already answers");
    other.signal(SIGTERM);
    other.wait(30);
  }
  // A server that exits at once: the point fails with its log's end, the sweep goes on, exit 1.
  const auto failing =
      bench({"--target", url, "--server-cmd", "sh -c 'echo no such model {m} >&2; exit 4'", "--server-sweep",
             "m=a,b", "--num-requests", "4", "--no-history", "--out", (dir_ / "failing").string()});
  EXPECT_EQ(failing.exit_code, 1) << failing.out << failing.err;
  EXPECT_NE(failing.err.find("exited with status 4"), std::string::npos) << failing.err;
  EXPECT_NE(failing.err.find("no such model b"), std::string::npos) << failing.err;
  const auto fsw = json::parse(slurp(dir_ / "failing" / "sweep.json"));
  EXPECT_EQ(fsw["runs"].size(), 2u);
  EXPECT_EQ(fsw["curve"].size(), 0u);
}

// Ctrl-C during a server sweep: the finished runs are kept, sweep.json says
// it is partial, and the server it started is stopped (by its PID).
TEST_F(Bench, InterruptingAServerSweepKeepsTheFinishedRunsAndStopsTheServer) {
  const int port = unused_loopback_port();
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  const auto out = dir_ / "sweep";
  Child child({kBin,
               "bench",
               "--target",
               url,
               "--server-cmd",
               std::string(kBin) + " serve --port " + std::to_string(port) + " --max-num-seqs {seqs}",
               "--server-sweep",
               "seqs=8,1",
               "--num-requests",
               "200",
               "--rate",
               "40",
               "--output-len",
               "fixed:40",
               "--progress",
               "none",
               "--no-history",
               "--grace-s",
               "0.3",
               "--out",
               out.string()},
              (dir_ / "stdout").string(), (dir_ / "stderr").string());
  // Wait (bounded) until the second point's run has finished requests.
  const auto second = out / "seqs-1" / "requests.jsonl";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline && (!fs::exists(second) || complete_lines(second) < 3))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(fs::exists(second));
  child.signal(SIGINT);
  const auto r = child.wait(60);
  ASSERT_EQ(r.exit_code, 130) << r.err;
  const auto sw = json::parse(slurp(out / "sweep.json"));
  EXPECT_EQ(sw["partial"], true);
  ASSERT_EQ(sw["runs"].size(), 2u);
  EXPECT_EQ(json::parse(slurp(out / "seqs-8" / "run.json"))["partial"], false);
  EXPECT_EQ(json::parse(slurp(out / "seqs-1" / "run.json"))["partial"], true);
  for (const auto& entry : sw["runs"]) {
    const int pid = entry["server"]["pid"].get<int>();
    EXPECT_NE(::kill(pid, 0), 0) << "server " << pid << " still runs";
  }
  // Nothing answers at the target any more.
  EXPECT_NE(run_process({"/usr/bin/curl", "-s", "-o", "/dev/null", "--max-time", "2", url + "/health"}, 10)
                .exit_code,
            0);
}

TEST_F(Bench, InterruptKeepsEveryFinishedRequest) {
  const auto out = dir_ / "run";
  Child child({kBin, "bench", "--duration-s", "120", "--rate", "20", "--input-len", "fixed:32",
               "--output-len", "fixed:200", "--grace-s", "0.3", "--progress", "plain", "--out", out.string()},
              (dir_ / "stdout").string(), (dir_ / "stderr").string());
  // Wait (bounded) until some requests have finished, then interrupt.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         (!fs::exists(out / "requests.jsonl") || complete_lines(out / "requests.jsonl") < 5))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  child.signal(SIGINT);
  const auto r = child.wait(60);
  ASSERT_EQ(r.exit_code, 130) << r.err;
  EXPECT_NE(r.err.find("interrupted"), std::string::npos);
  const auto run = json::parse(slurp(out / "run.json"));
  EXPECT_EQ(run["partial"], true);
  EXPECT_FALSE(fs::exists(out / ".tokenscope-cache")) << "an interrupted run ends at once, without its cache";
  const auto recs = lines(out / "requests.jsonl");
  EXPECT_GE(recs.size(), 5u);
  EXPECT_EQ(run["summary"]["requests_total"].get<std::size_t>(), recs.size());
  EXPECT_GT(run["client"]["requests_not_sent"].get<std::size_t>(), 0u);
  for (const auto& rec : recs) {
    const std::string o = rec["outcome"];
    EXPECT_TRUE(o == "ok" || o == "cancelled") << o;
  }
}

// Agentic tasks (docs/tasks.md) and Ctrl-C: every task that ended before
// it is in tasks.jsonl, those in flight end "cancelled" after the grace
// period, each with its steps; their model calls are in requests.jsonl
// under their task's id; run.json has the tasks' summary.
TEST_F(Bench, InterruptKeepsEveryFinishedTaskAndStep) {
  const auto out = dir_ / "run";
  const auto file = dir_ / "tasks.yaml";
  std::ofstream(file) << R"(duration_s: 120
arrival: {process: constant, rate_rps: 20}
tools:
  - {name: slow, parameters: {type: object}, latency_ms: fixed:400}
classes:
  - name: agent
    task:
      steps:
        - {id: think, model: {prompt: "{{input}}", output_len: fixed:20}}
        - {id: act, tool: slow, after: [think]}
        - {id: answer, model: {prompt: "{{act}}", output_len: fixed:20}, after: [act]}
)";
  Child child({kBin, "bench", "--workload", file.string(), "--grace-s", "0.2", "--progress", "plain", "--out",
               out.string()},
              (dir_ / "stdout").string(), (dir_ / "stderr").string());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         (!fs::exists(out / "tasks.jsonl") || complete_lines(out / "tasks.jsonl") < 5))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  child.signal(SIGINT);
  const auto r = child.wait(60);
  ASSERT_EQ(r.exit_code, 130) << r.err;
  const auto run = json::parse(slurp(out / "run.json"));
  EXPECT_EQ(run["partial"], true);
  const auto tasks = lines(out / "tasks.jsonl");
  ASSERT_GE(tasks.size(), 5u);
  std::size_t ok = 0, cancelled = 0;
  std::set<std::int64_t> ids;
  for (const auto& t : tasks) {
    ids.insert(t["id"].get<std::int64_t>());
    ASSERT_EQ(t["steps"].size(), 3u) << t.dump();
    if (t["outcome"] == "ok") {
      ++ok;
      for (const auto& s : t["steps"]) EXPECT_EQ(s["outcome"], "ok") << t.dump();
    } else {
      ASSERT_EQ(t["outcome"], "cancelled") << t.dump();
      ++cancelled;
    }
  }
  EXPECT_GE(ok, 5u);
  EXPECT_GT(cancelled, 0u);  // the tool takes 400 ms: some were in flight
  EXPECT_EQ(ids.size(), tasks.size());
  EXPECT_EQ(run["tasks"]["ok"].get<std::size_t>() + run["tasks"]["cancelled"].get<std::size_t>(),
            tasks.size());
  for (const auto& q : lines(out / "requests.jsonl"))
    EXPECT_TRUE(ids.count(q["task"].get<std::int64_t>())) << q;
}

// A second interrupt cancels what is in flight at once instead of waiting
// out the grace period; the results are still written.
TEST_F(Bench, ASecondInterruptCancelsWhatIsInFlightAtOnce) {
  const auto out = dir_ / "run";
  // Outputs of 4,000 tokens take a minute on the simulated GPU; grace 600 s.
  Child child(
      {kBin, "bench", "--duration-s", "120", "--rate", "20", "--input-len", "fixed:32", "--output-len",
       "fixed:4000", "--grace-s", "600", "--progress", "plain", "--out", out.string()},
      (dir_ / "stdout").string(), (dir_ / "stderr").string());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && !fs::exists(out / "run.json"))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // some requests in flight
  child.signal(SIGINT);
  // The first interrupt is acknowledged (it names the grace period)...
  const auto said = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < said &&
         slurp(dir_ / "stderr").find("interrupt again") == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_NE(slurp(dir_ / "stderr").find("interrupt again"), std::string::npos) << slurp(dir_ / "stderr");
  child.signal(SIGINT);  // ...the second ends the run long before 600 s
  const auto r = child.wait(60);
  ASSERT_EQ(r.exit_code, 130) << r.err;
  const auto run = json::parse(slurp(out / "run.json"));
  EXPECT_EQ(run["partial"], true);
  EXPECT_FALSE(run["summary"].is_null());
  const auto recs = lines(out / "requests.jsonl");
  ASSERT_FALSE(recs.empty());
  std::size_t cancelled = 0;
  for (const auto& rec : recs) cancelled += rec["outcome"] == "cancelled";
  EXPECT_EQ(cancelled, recs.size());  // none could finish 4,000 tokens
  EXPECT_EQ(run["summary"]["requests_total"].get<std::size_t>(), recs.size());
}

// run.json is written when the run starts (settings and seeds, marked
// partial), so that a run killed outright still says what it was.
TEST_F(Bench, RunJsonIsWrittenAtTheStartAndSurvivesSigkill) {
  const auto out = dir_ / "run";
  Child child({kBin, "bench", "--duration-s", "120", "--rate", "20", "--input-len", "fixed:32",
               "--output-len", "fixed:50", "--seed", "4242", "--progress", "none", "--out", out.string()},
              (dir_ / "stdout").string(), (dir_ / "stderr").string());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && complete_lines(out / "requests.jsonl") < 3)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  child.signal(SIGKILL);
  child.wait(30);
  const auto run = json::parse(slurp(out / "run.json"));
  EXPECT_EQ(run["partial"], true);
  EXPECT_TRUE(run["summary"].is_null());
  EXPECT_EQ(run["settings"]["requested"]["workload"]["seed"], 4242);
  EXPECT_EQ(run["settings"]["effective"]["target"]["in_process"], true);
  EXPECT_GE(complete_lines(out / "requests.jsonl"), 3u);
}

// A directory that holds a run is refused unless --overwrite, which replaces
// it whole (two runs never mix in one requests.jsonl).
TEST_F(Bench, OutHoldingARunIsRefusedUnlessOverwrite) {
  const auto out = (dir_ / "run").string();
  const std::vector<std::string> common = {"--input-len", "fixed:8", "--output-len", "fixed:2",
                                           "--rate",      "inf",     "--out",        out};
  auto first = common;
  first.insert(first.end(), {"--num-requests", "5"});
  ASSERT_EQ(bench(first).exit_code, 0);
  auto second = common;
  second.insert(second.end(), {"--num-requests", "3"});
  const auto refused = bench(second);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("--out " + out + ": holds an earlier run"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--overwrite"), std::string::npos) << refused.err;
  EXPECT_EQ(lines(dir_ / "run" / "requests.jsonl").size(), 5u);  // untouched
  second.push_back("--overwrite");
  ASSERT_EQ(bench(second).exit_code, 0);
  EXPECT_EQ(lines(dir_ / "run" / "requests.jsonl").size(), 3u);
  // A file where a directory is expected.
  std::ofstream(dir_ / "file") << "x";
  const auto not_dir = bench({"--num-requests", "1", "--out", (dir_ / "file").string()});
  EXPECT_EQ(not_dir.exit_code, 2);
  EXPECT_NE(not_dir.err.find("exists and is not a directory"), std::string::npos) << not_dir.err;
}

// A full disk (here: the file size limit, which fails writes with EFBIG as a
// full disk fails them with ENOSPC) stops the run with a clear message; the
// requests written before it are whole lines, and run.json stays.
TEST_F(Bench, AFullDiskKeepsWholeLinesAndRunJson) {
  const auto out = dir_ / "run";
  // SIGXFSZ ignored (an ignored signal stays ignored across exec), so the
  // write fails instead of the process being killed.
  const auto r =
      run_process({"/bin/sh", "-c",
                   "trap '' XFSZ; exec /usr/bin/prlimit --fsize=30000 \"$0\" bench --progress none "
                   "--num-requests 400 --rate 400 --input-len fixed:8 --output-len fixed:60 --out \"$1\"",
                   kBin, out.string()});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("requests.jsonl: cannot write: File too large"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("kept in " + out.string()), std::string::npos) << r.err;
  const auto text = slurp(out / "requests.jsonl");
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');  // cut back to the last whole line
  EXPECT_LE(text.size(), 30000u);
  const auto recs = lines(out / "requests.jsonl");  // every line parses
  EXPECT_GT(recs.size(), 0u);
  EXPECT_LT(recs.size(), 400u);
  const auto run = json::parse(slurp(out / "run.json"));
  EXPECT_EQ(run["partial"], true);
}

// The writer's queue bounded (here at 8 records): every record is written
// once, and the waits are counted in run.json. When the writer fails (a full
// disk), the queue stops holding pushes: the run ends with the clear
// message, not a client thread waiting forever (as it did, the writer's
// close left out).
TEST_F(Bench, ABoundedWriterQueueHoldsTheClientBackAndNeverHangsIt) {
  Server server(dir_, {"--fixed-step-ms", "0"});
  const auto out = dir_ / "bounded";
  const auto r =
      run_process({"/usr/bin/env", "TOKENSCOPE_RECORD_QUEUE_LIMIT=8", kBin, "bench", "--progress", "none",
                   "--target", server.url(""), "--num-requests", "400", "--rate", "1000", "--no-stream",
                   "--input-len", "fixed:8", "--output-len", "fixed:2", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto recs = lines(out / "requests.jsonl");
  ASSERT_EQ(recs.size(), 400u);
  std::set<std::uint64_t> ids;
  for (const auto& rec : recs) ids.insert(rec["id"].get<std::uint64_t>());
  EXPECT_EQ(ids.size(), 400u);
  // Whether a push waited depends on how fast the writer ran (the queue's
  // own test, RecordQueue.*, shows the waits); the count is always there.
  const auto run = json::parse(slurp(out / "run.json"));
  EXPECT_TRUE(run["client"]["records_waited_for_writer"].is_number_unsigned()) << run["client"];

  const auto full = dir_ / "full";
  const auto f =
      run_process({"/bin/sh", "-c",
                   "trap '' XFSZ; exec /usr/bin/env TOKENSCOPE_RECORD_QUEUE_LIMIT=8 /usr/bin/prlimit "
                   "--fsize=30000 \"$0\" bench --progress none --target \"$2\" --num-requests 2000 "
                   "--rate 2000 --no-stream --input-len fixed:8 --output-len fixed:2 --out \"$1\"",
                   kBin, full.string(), server.url("")},
                  60);
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_NE(f.err.find("requests.jsonl: cannot write: File too large"), std::string::npos) << f.err;
  EXPECT_EQ(json::parse(slurp(full / "run.json"))["partial"], true);

  const auto bad =
      run_process({"/usr/bin/env", "TOKENSCOPE_RECORD_QUEUE_LIMIT=0", kBin, "bench", "--progress", "none",
                   "--num-requests", "1", "--out", (dir_ / "bad").string()});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("TOKENSCOPE_RECORD_QUEUE_LIMIT='0': expected a whole number of records"),
            std::string::npos)
      << bad.err;
}

// --client-cpus: each client thread on its CPU, the rest of the process
// (here the in-process simulator and the writer) on the others; run.json
// says where each ran. A CPU the process may not use, or a bad list, is a
// clear usage error.
TEST_F(Bench, ClientCpusPinTheClientThreadsAndKeepTheRestOffThem) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> allowed;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) allowed.push_back(c);
  ASSERT_FALSE(allowed.empty());
  const std::string last = std::to_string(allowed.back());
  const auto out = dir_ / "pinned";
  const auto r = run_process({kBin, "bench", "--progress", "none", "--num-requests", "40", "--rate", "200",
                              "--input-len", "fixed:8", "--output-len", "fixed:2", "--client-threads", "2",
                              "--client-cpus", last, "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run = json::parse(slurp(out / "run.json"));
  const auto& client = run["client"];
  EXPECT_EQ(client["thread_cpus"], json::array({last, last})) << client;
  const std::string others = client["other_cpus"].get<std::string>();
  const auto apart = client["request_bodies_written_apart"].get<std::uint64_t>();
  const auto own = client["request_bodies_written_by_client_threads"].get<std::uint64_t>();
  if (allowed.size() > 1) {
    EXPECT_EQ(others.find(last), std::string::npos) << others;
    EXPECT_FALSE(others.empty());
    // The bodies written on the other CPUs, ahead of the schedule (the
    // first send waits for the first ones); the client threads wrote any
    // the thread was late for.
    EXPECT_EQ(apart + own, 40u) << client;
    EXPECT_GT(apart, 0u) << client;
  } else {
    EXPECT_EQ(others, last);
    EXPECT_NE(r.err.find("leaves no other CPU"), std::string::npos) << r.err;
    EXPECT_EQ(apart + own, 0u) << client;  // nowhere else to write them
  }
  EXPECT_EQ(lines(out / "requests.jsonl").size(), 40u);

  const auto unpinned = dir_ / "unpinned";
  ASSERT_EQ(
      run_process({kBin, "bench", "--progress", "none", "--num-requests", "4", "--out", unpinned.string()})
          .exit_code,
      0);
  EXPECT_EQ(json::parse(slurp(unpinned / "run.json"))["client"]["thread_cpus"].size(), 1u);

  const auto outside = run_process({kBin, "bench", "--progress", "none", "--num-requests", "4",
                                    "--client-cpus", "4000", "--out", (dir_ / "outside").string()});
  EXPECT_EQ(outside.exit_code, 2) << outside.err;
  EXPECT_NE(outside.err.find("--client-cpus: CPU 4000 is not one this process may run on"), std::string::npos)
      << outside.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "outside"));  // refused before anything started
  const auto bad = run_process({kBin, "bench", "--progress", "none", "--num-requests", "4", "--client-cpus",
                                "1-x", "--out", (dir_ / "bad").string()});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--client-cpus"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("0-3,8"), std::string::npos) << bad.err;
}

// Whole (non-streamed) responses on kept-alive connections: a reset the
// server injects after reading a request comes before any response byte.
// It is that request's connect_error, never resent (a resend hid every such
// fault, and made the server count the request twice).
TEST_F(Bench, ResetsBeforeAnyResponseByteAreCountedNotResent) {
  Server server(dir_, {"--faults", "reset=0.2", "--fault-seed", "3", "--fixed-step-ms", "1"});
  const auto r = bench({"--target", server.url(""), "--num-requests", "100", "--rate", "200", "--no-stream",
                        "--input-len", "fixed:8", "--output-len", "fixed:4", "--max-error-rate", "1",
                        "--json", "--out", (dir_ / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto s = json::parse(r.out);
  const auto metrics = run_process({"/usr/bin/curl", "-sS", "--max-time", "30", server.url("/metrics")});
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      metrics.out, m,
      std::regex(R"re(tokenscope:faults_injected_total\{[^}]*kind="reset"[^}]*\} ([0-9.]+))re")))
      << metrics.out.substr(0, 2000);
  const int injected = static_cast<int>(std::stod(m[1]));
  EXPECT_GT(injected, 5);
  EXPECT_EQ(s["requests_by_outcome"]["connect_error"].get<int>(), injected);
  EXPECT_EQ(s["requests_by_outcome"]["ok"].get<int>(), 100 - injected);
  const auto run = json::parse(slurp(dir_ / "run" / "run.json"));
  EXPECT_EQ(run["client"]["resent_after_stale_connection"], 0);
}

// A request the client gives up (its timeout) is reset, so that the server
// stops generating for it at once even when it takes a plain close after the
// request for a half-close (as serve does for whole responses).
TEST_F(Bench, ATimedOutRequestIsAbortedOnTheServer) {
  Server server(dir_, {"--fixed-step-ms", "5"});  // 2,000 tokens: 10 s
  const auto r = bench({"--target", server.url(""), "--num-requests", "3", "--rate", "inf", "--no-stream",
                        "--input-len", "fixed:8", "--output-len", "fixed:2000", "--timeout-s", "1",
                        "--max-error-rate", "1", "--json", "--out", (dir_ / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["requests_by_outcome"]["timeout"], 3);
  // Bounded wait for the server to notice (well before the 10 s of generation).
  const std::regex re(R"re(vllm:request_success_total\{[^}]*finished_reason="abort"[^}]*\} ([0-9.]+))re");
  double aborted = 0;
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    text = run_process({"/usr/bin/curl", "-sS", "--max-time", "5", server.url("/metrics")}).out;
    std::smatch m;
    if (std::regex_search(text, m, re) && (aborted = std::stod(m[1])) >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(aborted, 3) << text.substr(0, 3000);
}

// Every fault a separate server process injected is matched, by the
// response id its emission trace names, to the outcome of that request;
// the trace agrees with the server's /metrics counters. A request the
// server did not fault may time out on a slow machine (as one once did
// under ThreadSanitizer), and nothing else.
TEST_F(Bench, OutcomesEqualTheServersInjectedFaults) {
  // Stalls (20 s) well past the client's timeout (8 s, so that a loaded
  // machine under a sanitizer delivers every other fault before it).
  const auto trace = dir_ / "emissions.jsonl";
  Server server(dir_, {"--faults", "http_5xx=0.06,http_429=0.06,reset=0.06,malformed=0.06,stall=0.06@20000",
                       "--fault-seed", "11", "--fixed-step-ms", "1", "--trace-emissions", trace.string()});
  const auto r = bench({"--target", server.url(""), "--num-requests", "300", "--rate", "300", "--input-len",
                        "fixed:8", "--output-len", "fixed:6", "--timeout-s", "8", "--max-error-rate", "1",
                        "--json", "--out", (dir_ / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto s = json::parse(r.out);
  // A remote server: its counters come from its scraped /metrics.
  EXPECT_FALSE(s["prefix_cache_queries_tokens"].is_null());
  EXPECT_EQ(s["requests_total"], 300);
  const auto metrics = run_process({"/usr/bin/curl", "-sS", "--max-time", "30", server.url("/metrics")});
  std::map<std::string, int> counted;
  const std::regex re(R"re(tokenscope:faults_injected_total\{[^}]*kind="([a-z_0-9]+)"[^}]*\} ([0-9.]+))re");
  for (std::sregex_iterator it(metrics.out.begin(), metrics.out.end(), re), end; it != end; ++it)
    counted[(*it)[1]] = static_cast<int>(std::stod((*it)[2]));
  ASSERT_FALSE(counted.empty()) << metrics.out.substr(0, 3000);
  server.stop();  // flushes the trace

  // Each fault line names the request it hit by the X-Request-Id the client
  // sent (the record's id), and its response id.
  std::map<std::uint64_t, std::pair<std::string, std::string>> fault_of;  // record id -> (kind, response id)
  std::map<std::string, int> injected;
  for (const auto& e : lines(trace)) {
    if (!e.contains("fault")) continue;
    ASSERT_TRUE(e.contains("xrid")) << "a fault line without the client's request id: " << e.dump();
    const std::uint64_t id = std::stoull(e["xrid"].get<std::string>());
    EXPECT_TRUE(
        fault_of.emplace(id, std::pair{e["fault"].get<std::string>(), e["resp"].get<std::string>()}).second)
        << e.dump();
    ++injected[e["fault"]];
  }
  for (const char* kind : {"http_5xx", "http_429", "reset", "malformed", "stall"}) {
    EXPECT_GT(injected[kind], 0) << kind;
    EXPECT_EQ(injected[kind], counted[kind]) << kind;
  }
  const std::regex id_re("(chat)?cmpl-[0-9a-f]{16}");
  std::map<std::uint64_t, json> by_id;
  const auto recs = lines(dir_ / "run" / "requests.jsonl");
  ASSERT_EQ(recs.size(), 300u);
  for (const auto& rec : recs)
    EXPECT_TRUE(by_id.emplace(rec["id"].get<std::uint64_t>(), rec).second) << rec.dump();
  const std::map<std::string, std::string> expected = {{"http_5xx", "http_error"},
                                                       {"http_429", "http_error"},
                                                       {"reset", "connect_error"},
                                                       {"malformed", "protocol_error"},
                                                       {"stall", "timeout"}};
  std::set<std::uint64_t> faulted;
  for (const auto& [id, fault] : fault_of) {
    const auto& [kind, response] = fault;
    const auto it = by_id.find(id);
    ASSERT_NE(it, by_id.end()) << kind << " injected into request " << id << ", which has no record";
    faulted.insert(id);
    EXPECT_EQ(it->second["outcome"], expected.at(kind)) << kind << ": " << it->second.dump();
    // The response id, where the record has one, agrees with the fault's.
    std::string named = it->second.value("response_id", "");
    const std::string detail = it->second.value("detail", "");
    std::smatch m;
    if (named.empty() && std::regex_search(detail, m, id_re)) named = m.str();
    if (!named.empty()) {
      EXPECT_EQ(named, response) << kind << ": " << it->second.dump();
    }
  }
  int slow = 0;
  for (const auto& rec : recs) {
    if (faulted.count(rec["id"].get<std::uint64_t>())) continue;
    const std::string o = rec["outcome"];
    EXPECT_TRUE(o == "ok" || o == "timeout") << rec.dump();
    slow += o == "timeout";
  }
  if (slow > 0) std::cout << slow << " request(s) without a fault timed out (a slow machine)\n";
}

// Every token the server emitted was seen by the client, and the client's
// TTFT exceeds the server's (admission to first write) by a small amount,
// which the test reports.
TEST_F(Bench, ClientSeesEveryEmittedTokenAndItsTtftExceedsTheServers) {
  const auto out = dir_ / "run";
  const auto trace = dir_ / "emissions.jsonl";
  const auto r = bench({"--num-requests", "40", "--rate", "20", "--input-len", "fixed:128", "--output-len",
                        "fixed:24", "--trace-emissions", trace.string(), "--out", out.string(), "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::uint64_t> engine_of;  // response id -> engine id
  std::map<std::uint64_t, std::int64_t> arrival, first_write;
  std::map<std::uint64_t, int> tokens;
  for (const auto& e : lines(trace)) {
    const auto id = e["req"].get<std::uint64_t>();
    if (e.contains("resp")) {
      engine_of[e["resp"]] = id;
      arrival[id] = e["arrival_ns"];
    } else {
      ++tokens[id];
      if (e["i"] == 0) first_write[id] = e["write_ns"];
    }
  }
  const auto recs = lines(out / "requests.jsonl");
  ASSERT_EQ(recs.size(), 40u);
  std::vector<double> extra_ms;
  int seen = 0, emitted = 0;
  for (const auto& rec : recs) {
    ASSERT_EQ(rec["outcome"], "ok");
    const auto id = engine_of.at(rec["response_id"]);
    EXPECT_EQ(rec["output_tokens_client"].get<int>(), tokens[id]);
    seen += rec["output_tokens_client"].get<int>();
    emitted += tokens[id];
    const std::int64_t client_ttft =
        rec["t_first_token_ns"].get<std::int64_t>() - rec["t_send_ns"].get<std::int64_t>();
    const std::int64_t server_ttft = first_write[id] - arrival[id];
    EXPECT_GT(client_ttft, server_ttft);
    extra_ms.push_back(static_cast<double>(client_ttft - server_ttft) / 1e6);
  }
  EXPECT_EQ(seen, emitted);
  EXPECT_EQ(emitted, 40 * 24);
  std::sort(extra_ms.begin(), extra_ms.end());
  std::cout << "client TTFT - server TTFT: median " << extra_ms[extra_ms.size() / 2] << " ms, max "
            << extra_ms.back() << " ms\n";
  ::testing::Test::RecordProperty("ttft_extra_median_ms", std::to_string(extra_ms[extra_ms.size() / 2]));
}

// Trace replay sends each request at the trace's offset divided by the time
// scale: the records' t_sched reproduce the trace.
TEST_F(Bench, TraceReplayReproducesTheTracesOffsets) {
  const auto trace = dir_ / "trace.jsonl";
  const std::vector<double> t_ms = {0, 3, 250, 260, 900, 1500, 1500, 2000};
  {
    std::ofstream f(trace);
    for (double t : t_ms) f << "{\"t_ms\": " << t << ", \"input_tokens\": 12, \"output_tokens\": 3}\n";
  }
  const auto out = dir_ / "run";
  const auto r = bench({"--trace", trace.string(), "--time-scale", "2", "--out", out.string(), "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto recs = lines(out / "requests.jsonl");
  ASSERT_EQ(recs.size(), t_ms.size());
  std::sort(recs.begin(), recs.end(), [](const json& a, const json& b) { return a["id"] < b["id"]; });
  const std::int64_t t0 = recs[0]["t_sched_ns"];
  for (std::size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(recs[i]["t_sched_ns"].get<std::int64_t>() - t0, static_cast<std::int64_t>(t_ms[i] / 2 * 1e6))
        << i;
    EXPECT_GE(recs[i]["t_send_ns"].get<std::int64_t>(), recs[i]["t_sched_ns"].get<std::int64_t>());
    EXPECT_EQ(recs[i]["outcome"], "ok");
  }
}

TEST_F(Bench, SweepsWriteTheCurveAndClosedLoopRunsToItsCount) {
  const auto out = dir_ / "sweep";
  auto r = bench({"--sweep-rates", "5,10", "--duration-s", "1", "--input-len", "fixed:16", "--output-len",
                  "fixed:4", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto sweep = json::parse(slurp(out / "sweep.json"));
  ASSERT_EQ(sweep["curve"].size(), 2u);
  EXPECT_EQ(sweep["curve"][0]["rate_rps"], 5);
  EXPECT_EQ(sweep["curve"][1]["rate_rps"], 10);
  EXPECT_TRUE(fs::exists(out / "rate-5" / "requests.jsonl"));
  EXPECT_TRUE(fs::exists(out / "rate-10" / "run.json"));
  EXPECT_NE(r.out.find("achieved"), std::string::npos) << r.out;
  // An SLO every rate meets: the search stops after LOW and HIGH, and reports HIGH.
  const auto out2 = dir_ / "search";
  r = bench({"--sweep-search", "4:8", "--duration-s", "1", "--input-len", "fixed:16", "--output-len",
             "fixed:4", "--slo", "e2e_ms=600000", "--out", out2.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  sweep = json::parse(slurp(out2 / "sweep.json"));
  EXPECT_EQ(sweep["curve"].size(), 2u);
  EXPECT_EQ(sweep["max_rate_meeting_slo"], 8);
  // Closed loop: exactly --num-requests requests, at most --concurrency at once.
  r = bench({"--concurrency", "3", "--num-requests", "25", "--input-len", "fixed:16", "--output-len",
             "fixed:4", "--json", "--out", (dir_ / "closed").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["requests_completed"], 25);
}

// --sweep-search bisects when the SLO holds at LOW and fails at HIGH. The
// simulator runs one sequence at a time (--max-num-seqs 1), each step 10 ms:
// a request of 10 output tokens holds it for 11 steps, so it serves about
// 9 requests/s whatever the rate. Below that, TTFT stays one or two steps
// (10-20 ms); above it the queue grows through the run and TTFT with it
// (at 20 req/s for 1.5 s, the last request waits about 1.5 s). A 150 ms TTFT
// SLO passes at 2 req/s and fails at 20, so the search must bisect: 11, then
// 6.5 or 15.5, then once more.
TEST_F(Bench, SweepSearchBisectsBetweenAPassingAndAFailingRate) {
  const auto out = dir_ / "search";
  const auto r =
      bench({"--sweep-search", "2:20",      "--sweep-steps",  "3",        "--duration-s",    "1.5",
             "--arrival",      "constant",  "--max-num-seqs", "1",        "--fixed-step-ms", "10",
             "--input-len",    "fixed:16",  "--output-len",   "fixed:10", "--slo",           "ttft_ms=150",
             "--out",          out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto sweep = json::parse(slurp(out / "sweep.json"));
  const auto& curve = sweep["curve"];
  ASSERT_EQ(curve.size(), 5u) << sweep.dump(1);  // LOW, HIGH and three bisection steps
  EXPECT_EQ(curve.front()["rate_rps"], 2);
  EXPECT_EQ(curve.front()["slo_pass"], true) << sweep.dump(1);
  EXPECT_EQ(curve.back()["rate_rps"], 20);
  EXPECT_EQ(curve.back()["slo_pass"], false) << sweep.dump(1);
  ASSERT_TRUE(sweep["max_rate_meeting_slo"].is_number()) << sweep.dump(1);
  const double best = sweep["max_rate_meeting_slo"].get<double>();
  EXPECT_GT(best, 2.0);
  EXPECT_LT(best, 20.0);
  // The bisection's invariant: every rate that passed is at or below the
  // best, every one that failed above it; the first midpoint is 11.
  bool saw_mid = false;
  for (const auto& c : curve) {
    const double rate = c["rate_rps"].get<double>();
    saw_mid |= rate == 11.0;
    EXPECT_EQ(c["slo_pass"].get<bool>(), rate <= best) << c.dump();
    EXPECT_EQ(c["failed"], 0) << c.dump();
    std::ostringstream name;  // as {:g} writes it: rate-2, rate-6.5
    name << "rate-" << rate;
    EXPECT_TRUE(fs::exists(out / name.str() / "run.json")) << name.str();
  }
  EXPECT_TRUE(saw_mid) << sweep.dump(1);
  EXPECT_EQ(sweep["partial"], false);
  EXPECT_NE(r.out.find("highest rate meeting every SLO"), std::string::npos) << r.out;
}

// --rate inf: every request is due at t = 0, like vLLM's --request-rate inf;
// it needs --num-requests (a duration holds infinitely many).
TEST_F(Bench, RateInfSendsEveryRequestAtOnceAndNeedsACount) {
  const auto out = dir_ / "inf";
  auto r = bench({"--rate", "inf", "--num-requests", "12", "--input-len", "fixed:16", "--output-len",
                  "fixed:4", "--compat", "vllm", "--out", out.string(), "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto recs = lines(out / "requests.jsonl");
  ASSERT_EQ(recs.size(), 12u);
  for (const auto& rec : recs) EXPECT_EQ(rec["t_sched_ns"], recs[0]["t_sched_ns"]) << rec.dump();
  const auto run = json::parse(slurp(out / "run.json"));
  EXPECT_EQ(run["settings"]["effective"]["load"]["rate_rps"], "inf");
  EXPECT_EQ(run["settings"]["effective"]["load"]["planned_requests"], 12);
  EXPECT_EQ(json::parse(slurp(out / "vllm_result.json"))["request_rate"], "inf");
  r = bench({"--rate", "inf", "--duration-s", "5", "--out", (dir_ / "dur").string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--rate inf sends every request at t = 0: give their number with --num-requests N"),
            std::string::npos)
      << r.err;
}

// --rate inf is recorded as "inf" (JSON has no infinity; nlohmann wrote null).
TEST_F(Bench, RateInfIsRecordedAsRequested) {
  const auto out = dir_ / "inf";
  const auto r = bench({"--rate", "inf", "--num-requests", "3", "--input-len", "fixed:8", "--output-len",
                        "fixed:2", "--out", out.string(), "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run = json::parse(slurp(out / "run.json"));
  EXPECT_EQ(run["settings"]["requested"]["workload"]["rate_rps"], json("inf"));
}

TEST_F(Bench, WorkloadFileWithSessionsAndClassSlos) {
  const auto yaml = dir_ / "w.yaml";
  std::ofstream(yaml) << "num_requests: 6\narrival: {process: constant, rate_rps: 20}\nclasses:\n"
                         "  - name: agent\n    input_len: fixed:32\n    output_len: fixed:4\n"
                         "    turns: {count: 2, think_ms: 5, input_len: fixed:8}\n"
                         "    slo: {e2e_ms: 600000}\n"
                         "  - name: batch\n    input_len: fixed:64\n    output_len: fixed:2\n";
  const auto r =
      bench({"--workload", yaml.string(), "--api", "chat", "--json", "--out", (dir_ / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto s = json::parse(r.out);
  EXPECT_EQ(s["requests_failed"], 0);
  EXPECT_EQ(s["slo_attainment"]["agent"]["pass"], true);
  EXPECT_FALSE(s["slo_attainment"].contains("batch"));
  const auto recs = lines(dir_ / "run" / "requests.jsonl");
  std::size_t second_turns = 0;
  for (const auto& rec : recs) second_turns += rec.value("turn", 0) == 1 ? 1 : 0;
  EXPECT_EQ(recs.size(), s["requests_total"].get<std::size_t>());
  EXPECT_EQ(recs.size(), 6 + second_turns);  // each agent session adds its second turn
}

// A reasoning model streamed as current vLLM does (delta.reasoning: vLLM
// renamed reasoning_content and dropped the old name), and as SGLang and
// older vLLM do (delta.reasoning_content). The scripted server waits 100 ms
// (prefill), sends 3 reasoning chunks, waits 300 ms (its think time), then 3
// answer chunks: the first token (TTFT) is the first reasoning chunk, at 100
// ms or later and before the think time; the first answer token (TTFO) comes
// after it. Reasoning tokens: the usage's completion_tokens_details when the
// server sends it, else the client's count of the reasoning events. (bench
// measured TTFT at the first answer token.)
TEST_F(Bench, AReasoningModelsFirstTokenIsItsFirstReasoningToken) {
  for (const bool vllm : {true, false}) {
    const std::string field = vllm ? "reasoning" : "reasoning_content";
    SCOPED_TRACE(field);
    RecordingServer server([&](int fd, const RecordingServer::Request&) {
      const std::string head =
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
      std::string think =
          "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n";
      for (int i = 0; i < 3; ++i)
        think +=
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"" + field + "\":\"hm \"}}]}\n\n";
      std::string answer;
      for (int i = 0; i < 3; ++i)
        answer += "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a \"}}]}\n\n";
      // vLLM sends no reasoning count in its usage; OpenAI's shape (sent
      // here with the old field name) does.
      answer +=
          "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],"
          "\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":6,\"total_tokens\":14" +
          std::string(vllm ? "" : ",\"completion_tokens_details\":{\"reasoning_tokens\":3}") +
          "}}\n\ndata: [DONE]\n\n";
      if (::send(fd, head.data(), head.size(), MSG_NOSIGNAL) < 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // prefill, scripted
      if (::send(fd, think.data(), think.size(), MSG_NOSIGNAL) < 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the model's think time, scripted
      (void)::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
    });
    const auto out = dir_ / field;
    const auto r = bench({"--target", server.url(), "--model", "m", "--api", "chat", "--num-requests", "1",
                          "--input-len", "fixed:8", "--output-len", "fixed:6", "--prompt-check", "0", "--slo",
                          "ttfo_ms=100000", "--out", out.string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto recs = lines(out / "requests.jsonl");
    ASSERT_EQ(recs.size(), 1u);
    const auto& rec = recs[0];
    EXPECT_EQ(rec["outcome"], "ok");
    EXPECT_EQ(rec["output_tokens_client"], 6);
    EXPECT_EQ(rec["reasoning_tokens"], 3) << rec.dump();
    const auto send = rec["t_send_ns"].get<std::int64_t>();
    const auto first = rec["t_first_token_ns"].get<std::int64_t>();
    const auto answer = rec["t_first_answer_ns"].get<std::int64_t>();
    const auto last = rec["t_last_token_ns"].get<std::int64_t>();
    EXPECT_GE(first - send, 100'000'000) << "the first token came before the server sent it";
    // 300 ms scripted; the client may read the first chunk a little late.
    EXPECT_GE(answer - first, 250'000'000) << "the first token was taken after the think time";
    EXPECT_LE(answer, last);
    const auto run = json::parse(slurp(out / "run.json"));
    const auto& s = run["summary"];
    EXPECT_EQ(s["requests_with_reasoning"], 1);
    EXPECT_EQ(s["reasoning_tokens_total"], 3);
    EXPECT_DOUBLE_EQ(s["ttfo_ms"]["p50"].get<double>(), (answer - send) / 1e6);
    EXPECT_DOUBLE_EQ(s["ttft_ms"]["p50"].get<double>(), (first - send) / 1e6);
    // The answer's TPOT over its 3 tokens; TPOT over all 6.
    EXPECT_DOUBLE_EQ(s["tpot_answer_ms"]["p50"].get<double>(), (last - answer) / 1e6 / 2);
    EXPECT_DOUBLE_EQ(s["tpot_ms"]["p50"].get<double>(), (last - first) / 1e6 / 5);
    EXPECT_EQ(s["slo_attainment"]["default"]["ttfo_ms"]["pass"], true) << s["slo_attainment"].dump();
    EXPECT_NE(r.out.find("TTFO"), std::string::npos) << r.out;
  }
}

// The Responses API (/v1/responses) from a scripted server streaming as
// OpenAI and vLLM do: response.created, 100 ms, three
// response.reasoning_text.delta events, 300 ms of thinking, three
// response.output_text.delta events, response.completed with usage
// (input_tokens, output_tokens, output_tokens_details.reasoning_tokens): TTFT
// is the first reasoning delta, TTFO the first output text after the think
// time; no [DONE] is needed. The request carries "input" and
// "max_output_tokens". A response.failed event fails the request with its
// message.
TEST_F(Bench, TheResponsesApiStreamsReasoningThenOutputText) {
  auto event = [](const std::string& type, const std::string& fields) {
    return "event: " + type + "\ndata: {\"type\":\"" + type + "\"" + fields + "}\n\n";
  };
  RecordingServer server([&](int fd, const RecordingServer::Request&) {
    const std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
    std::string think =
        event("response.created", ",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\"}");
    for (int i = 0; i < 3; ++i)
      think += event("response.reasoning_text.delta", ",\"item_id\":\"rs_1\",\"delta\":\"hm \"");
    std::string answer;
    for (int i = 0; i < 3; ++i)
      answer += event("response.output_text.delta", ",\"item_id\":\"msg_1\",\"delta\":\"a \"");
    answer +=
        event("response.completed",
              ",\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"output\":[{\"type\":\"message\","
              "\"content\":[{\"type\":\"output_text\",\"text\":\"a a a \"}]}],\"usage\":{\"input_tokens\":8,"
              "\"output_tokens\":6,\"output_tokens_details\":{\"reasoning_tokens\":3},\"total_tokens\":14}}");
    if (::send(fd, head.data(), head.size(), MSG_NOSIGNAL) < 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (::send(fd, think.data(), think.size(), MSG_NOSIGNAL) < 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    (void)::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
  });
  const auto out = dir_ / "responses";
  const auto r = bench({"--target", server.url(), "--model", "m", "--api", "responses", "--num-requests", "1",
                        "--input-len", "fixed:8", "--output-len", "fixed:6", "--prompt-check", "0", "--out",
                        out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string
      body;  // the POST, as the server recorded it under its lock (GET /v1/models and the like beside it)
  for (const auto& req : server.requests())
    if (req.head.rfind("POST /v1/responses ", 0) == 0) body = req.body;
  ASSERT_FALSE(body.empty());
  const auto sent = json::parse(body);
  EXPECT_TRUE(sent["input"].is_string()) << body;
  EXPECT_EQ(sent["max_output_tokens"], 6);
  EXPECT_EQ(sent["stream"], true);
  EXPECT_FALSE(sent.contains("stream_options"));
  const auto rec = lines(out / "requests.jsonl").at(0);
  EXPECT_EQ(rec["outcome"], "ok") << rec.dump();
  EXPECT_EQ(rec["response_id"], "resp_1");
  EXPECT_EQ(rec["prompt_tokens"], 8);
  EXPECT_EQ(rec["output_tokens"], 6);
  EXPECT_EQ(rec["output_tokens_client"], 6);
  EXPECT_EQ(rec["reasoning_tokens"], 3);
  const auto send = rec["t_send_ns"].get<std::int64_t>();
  const auto first = rec["t_first_token_ns"].get<std::int64_t>();
  const auto answer = rec["t_first_answer_ns"].get<std::int64_t>();
  EXPECT_GE(first - send, 100'000'000);
  EXPECT_GE(answer - first, 250'000'000);

  RecordingServer failing([&](int fd, const RecordingServer::Request&) {
    const std::string reply =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" +
        event("response.created", ",\"response\":{\"id\":\"resp_2\",\"status\":\"in_progress\"}") +
        event("response.failed",
              ",\"response\":{\"id\":\"resp_2\",\"status\":\"failed\",\"error\":{\"code\":"
              "\"server_error\",\"message\":\"the engine died\"}}");
    (void)::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
  });
  const auto out2 = dir_ / "failed";
  const auto r2 = bench({"--target", failing.url(), "--model", "m", "--api", "responses", "--num-requests",
                         "1", "--prompt-check", "0", "--max-error-rate", "1", "--out", out2.string()});
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  const auto rec2 = lines(out2 / "requests.jsonl").at(0);
  EXPECT_EQ(rec2["outcome"], "http_error");
  EXPECT_NE(rec2["detail"].get<std::string>().find("the engine died"), std::string::npos) << rec2.dump();
}

// The Responses API against serve, streamed and whole, as a reasoning model,
// multi-turn (the conversation goes back as "input" messages): prompts at
// their planned length through the chat template, every output token counted.
TEST_F(Bench, TheResponsesApiAgainstServe) {
  Server server(dir_, {"--fixed-step-ms", "2", "--reasoning-share", "0.25"});
  for (const bool stream : {true, false}) {
    SCOPED_TRACE(stream);
    const auto out = dir_ / (stream ? "stream" : "whole");
    std::vector<std::string> args = {"--target",     server.url(""), "--api", "responses",   "--num-requests",
                                     "12",           "--rate",       "inf",   "--input-len", "uniform:10:80",
                                     "--output-len", "fixed:8",      "--out", out.string()};
    if (!stream) args.push_back("--no-stream");
    const auto r = bench(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto s = json::parse(slurp(out / "run.json"))["summary"];
    EXPECT_EQ(s["requests_completed"], 12);
    EXPECT_EQ(s["output_tokens_total"], 12 * 8);
    EXPECT_EQ(s["requests_with_reasoning"], 12);
    EXPECT_EQ(s["reasoning_tokens_total"], 12 * 2);
    EXPECT_EQ(s["prompt_token_mismatches"], 0);
    EXPECT_EQ(s["prompt_tokens_planned_total"], s["prompt_tokens_planned_reported"]);
    if (stream) {
      EXPECT_EQ(s["output_token_mismatches"], 0);
      EXPECT_LT(s["ttft_ms"]["p50"].get<double>(), s["ttfo_ms"]["p50"].get<double>());
    }
  }
  const auto yaml = dir_ / "turns.yaml";
  std::ofstream(yaml) << "duration_s: 1\nseed: 3\narrival: {process: poisson, rate_rps: 4}\nclasses:\n"
                         "  - name: agent\n    input_len: fixed:40\n    output_len: fixed:4\n"
                         "    turns: {count: 3, think_ms: 5, input_len: fixed:10}\n";
  const auto turns = dir_ / "turns";
  const auto r = bench({"--target", server.url(""), "--api", "responses", "--workload", yaml.string(),
                        "--out", turns.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int later_turns = 0;
  for (const auto& rec : lines(turns / "requests.jsonl")) {
    EXPECT_EQ(rec["outcome"], "ok") << rec.dump();
    // A later turn's prompt holds the conversation: longer than its own 10 tokens.
    if (rec.value("turn", 0) > 0) {
      ++later_turns;
      EXPECT_GT(rec["prompt_tokens"].get<int>(), 40 + 4 + 10) << rec.dump();
    }
  }
  EXPECT_GT(later_turns, 0);
}

// Whole (non-streamed) messages of a reasoning model, in either field: the
// first token and the first answer token are the response's end, and the
// reasoning tokens are the usage's count, else the reasoning text's share of
// the output tokens (13 bytes of reasoning, 4 of answer: 8 x 13/17, 6 tokens).
TEST_F(Bench, AReasoningModelsWholeMessagesInEitherField) {
  for (const bool vllm : {true, false}) {
    const std::string field = vllm ? "reasoning" : "reasoning_content";
    SCOPED_TRACE(field);
    RecordingServer server([&](int fd, const RecordingServer::Request&) {
      const std::string body =
          "{\"id\":\"c1\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":{"
          "\"role\":\"assistant\",\"" +
          field +
          "\":\"think think a\",\"content\":\"done\"},\"finish_reason\":\"stop\"}],"
          "\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":8,\"total_tokens\":16" +
          std::string(vllm ? "" : ",\"completion_tokens_details\":{\"reasoning_tokens\":5}") + "}}";
      const std::string response = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                                   std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
      (void)::send(fd, response.data(), response.size(), MSG_NOSIGNAL);
    });
    const auto out = dir_ / (field + "-whole");
    const auto r = bench({"--target", server.url(), "--model", "m", "--api", "chat", "--no-stream",
                          "--num-requests", "1", "--input-len", "fixed:8", "--output-len", "fixed:8",
                          "--prompt-check", "0", "--out", out.string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto recs = lines(out / "requests.jsonl");
    ASSERT_EQ(recs.size(), 1u);
    const auto& rec = recs[0];
    EXPECT_EQ(rec["outcome"], "ok") << rec.dump();
    EXPECT_EQ(rec["output_tokens"], 8);
    EXPECT_EQ(rec["reasoning_tokens"], vllm ? 6 : 5) << rec.dump();
    EXPECT_EQ(rec["t_first_answer_ns"], rec["t_first_token_ns"]);
    const auto s = json::parse(slurp(out / "run.json"))["summary"];
    EXPECT_EQ(s["ttfo_ms"]["p50"], s["ttft_ms"]["p50"]);
  }
}

// A server whose /tokenize gives counts only (no pieces), with a vocabulary
// in which every word holding a 'q', 'x' or 'z' is two tokens and a BOS is
// added: bench finds the words that split by halving the list, and every
// prompt reaches the server at exactly its planned length.
TEST_F(Bench, ExactPromptsFromAServerThatGivesCountsOnly) {
  const auto count = [](const std::string& text, bool bos) {
    std::int64_t n = bos ? 1 : 0;
    std::istringstream in(text);
    for (std::string w; in >> w;) n += w.find_first_of("qxz") == std::string::npos ? 1 : 2;
    return n;
  };
  RecordingServer server([&](int fd, const RecordingServer::Request& q) {
    const auto b = json::parse(q.body, nullptr, false);
    std::string body;
    if (q.head.rfind("POST /tokenize ", 0) == 0 && b.contains("prompt")) {
      body =
          json{{"count", count(b["prompt"].get<std::string>(), b.value("add_special_tokens", false))}}.dump();
    } else if (q.head.rfind("POST /v1/completions ", 0) == 0) {
      const auto n = count(b["prompt"].get<std::string>(), true);
      body = json{{"id", "c"},
                  {"choices", {{{"index", 0}, {"text", "a"}, {"finish_reason", "length"}}}},
                  {"usage", {{"prompt_tokens", n}, {"completion_tokens", 1}, {"total_tokens", n + 1}}}}
                 .dump();
    } else {
      const std::string r = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      (void)::send(fd, r.data(), r.size(), MSG_NOSIGNAL);
      return;
    }
    const std::string r = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    (void)::send(fd, r.data(), r.size(), MSG_NOSIGNAL);
  });
  const auto out = dir_ / "counts";
  const auto r =
      bench({"--target", server.url(), "--model", "m", "--no-stream", "--num-requests", "8", "--rate", "inf",
             "--input-len", "uniform:16:400", "--output-len", "fixed:1", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run = json::parse(slurp(out / "run.json"));
  const auto& facts = run["settings"]["effective"]["prompts"]["server"];
  EXPECT_EQ(facts["prompt_words_method"], "counts") << facts.dump();
  EXPECT_EQ(facts["completion_added_tokens"], 1);
  // The words without q, x or z: the prompt word list's own count.
  const std::string list = slurp(fs::path(TOKENSCOPE_SOURCE_DIR) / "src/tokenizers/prompt_words.inc");
  int plain = 0;
  static const std::regex quoted("\"([a-z]+)\"");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), quoted); it != std::sregex_iterator(); ++it)
    plain += (*it)[1].str().find_first_of("qxz") == std::string::npos ? 1 : 0;
  EXPECT_EQ(facts["prompt_words_one_token"], plain) << facts.dump();
  for (const auto& rec : lines(out / "requests.jsonl")) {
    EXPECT_EQ(rec["outcome"], "ok") << rec.dump();
    EXPECT_EQ(rec["prompt_tokens"], rec["prompt_tokens_planned"]) << rec.dump();
  }
  EXPECT_EQ(run["summary"]["prompt_token_mismatches"], 0);
  EXPECT_NE(r.out.find("+0.00%), 0 requests differ"), std::string::npos) << r.out;
}

// The value of vllm:request_success_total{...finished_reason="abort"} (-1: not found).
double serve_aborts(int port) {
  const std::string text = http_get(port, "/metrics");
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("vllm:request_success_total{", 0) == 0 &&
        line.find("finished_reason=\"abort\"") != std::string::npos)
      return std::stod(line.substr(line.rfind(' ') + 1));
  return -1;
}

// Requests cancelled on purpose (--cancel), as users closing the tab: the
// chosen share ends after 3 output events (or once sent, before any token)
// with outcome cancelled and cancel_planned, what arrived kept; the server
// sees each one go (its vllm:request_success_total{finished_reason="abort"});
// they are neither completed nor failed, and the run passes. A bad spec is
// refused before the run.
TEST_F(Bench, PlannedCancellationsReachTheServerAsAborts) {
  Server server(dir_, {"--fixed-step-ms", "5"});
  double aborts_before = 0;
  for (const std::string when : {"0.5:after-tokens=3", "1:before-first-token", "0.5:after-ms=fixed:40"}) {
    SCOPED_TRACE(when);
    const auto out = dir_ / ("run-" + std::to_string(when.size()));
    const auto r = bench({"--target", server.url(""), "--num-requests", "12", "--rate", "inf", "--input-len",
                          "fixed:16", "--output-len", "fixed:64", "--cancel", when, "--out", out.string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto s = json::parse(slurp(out / "run.json"))["summary"];
    const int cancelled = s["requests_cancelled_planned"].get<int>();
    EXPECT_GT(cancelled, 0);
    if (when.starts_with("1:")) {
      EXPECT_EQ(cancelled, 12);
    } else {
      EXPECT_LT(cancelled, 12);
    }
    EXPECT_EQ(s["requests_failed"], 0);
    EXPECT_EQ(s["requests_completed"].get<int>() + cancelled, 12);
    EXPECT_EQ(s["requests_total"], 12);
    int seen = 0;
    for (const auto& rec : lines(out / "requests.jsonl")) {
      if (!rec.value("cancel_planned", false)) {
        EXPECT_EQ(rec["outcome"], "ok") << rec.dump();
        continue;
      }
      ++seen;
      EXPECT_EQ(rec["outcome"], "cancelled") << rec.dump();
      EXPECT_NE(rec["detail"].get<std::string>().find("cancelled on purpose"), std::string::npos);
      const int events = rec["output_tokens_client"].get<int>();
      EXPECT_LT(events, 64) << rec.dump();
      if (when.find("after-tokens=3") != std::string::npos) {
        EXPECT_GE(events, 3) << rec.dump();
      }
    }
    EXPECT_EQ(seen, cancelled);
    // The server counts each as aborted once it sees the client gone (bounded wait).
    double aborts = -1;
    for (int i = 0; i < 100 && (aborts = serve_aborts(server.port())) < aborts_before + cancelled; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(aborts, aborts_before + cancelled);
    aborts_before = aborts;
  }
  const auto bad =
      bench({"--target", server.url(""), "--cancel", "1.5:after-tokens=3", "--num-requests", "1"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("the share 1.5 is outside [0, 1]"), std::string::npos) << bad.err;
  const auto bad_when =
      bench({"--target", server.url(""), "--cancel", "0.1:whenever", "--num-requests", "1"});
  EXPECT_EQ(bad_when.exit_code, 2);
  EXPECT_NE(bad_when.err.find("'whenever' is not a point to cancel at"), std::string::npos) << bad_when.err;
}

// A model mix against serve with LoRA adapters (a separate process): two
// adapters behind the base model and one adapter slot (--max-loras 1).
// /v1/models lists the adapters with the base as parent; every request goes
// to the model its weight drew (records name it, answers carry it) and the
// summary has one row per model summing to the run; the adapters' requests
// wait for the slot, so they see longer TTFT tails than the base model's;
// serve reports vLLM's vllm:lora_requests_info (max_lora="1") and the loads.
// A model the server does not have fails its requests with its 404.
TEST_F(Bench, ModelMixAgainstServeWithLoraAdapters) {
  Server server(dir_, {"--lora-modules", "sql-lora=/adapters/sql", "chat-lora", "--max-loras", "1",
                       "--fixed-step-ms", "4", "--lora-load-ms", "20"});
  const auto models = json::parse(http_get(server.port(), "/v1/models"))["data"];
  ASSERT_EQ(models.size(), 3u) << models.dump();
  EXPECT_EQ(models[1]["id"], "sql-lora");
  EXPECT_EQ(models[1]["parent"], models[0]["id"]);
  EXPECT_EQ(models[1]["root"], "/adapters/sql");
  const std::string base = models[0]["id"];
  const auto out = dir_ / "mix";
  const auto r = bench({"--target", server.url(""), "--model-mix", base + "=2,sql-lora=1,chat-lora=1",
                        "--num-requests", "120", "--rate", "60", "--input-len", "fixed:64", "--output-len",
                        "fixed:24", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run = json::parse(slurp(out / "run.json"));
  const auto& by_model = run["summary"]["by_model"];
  ASSERT_EQ(by_model.size(), 3u) << by_model.dump();
  int total = 0;
  for (const auto& [name, row] : by_model.items()) {
    EXPECT_EQ(row["failed"], 0) << name;
    total += row["completed"].get<int>();
  }
  EXPECT_EQ(total, 120);
  EXPECT_GT(by_model[base]["completed"].get<int>(), by_model["sql-lora"]["completed"].get<int>());
  EXPECT_EQ(run["settings"]["requested"]["model_mix"], base + "=2,sql-lora=1,chat-lora=1");
  std::map<std::string, int> seen;
  for (const auto& rec : lines(out / "requests.jsonl")) seen[rec["model"].get<std::string>()]++;
  for (const auto& [name, row] : by_model.items()) EXPECT_EQ(seen[name], row["requests"].get<int>()) << name;
  // One adapter at a time: its requests wait while the other's run.
  EXPECT_GT(by_model["sql-lora"]["ttft_ms"]["p99"].get<double>(),
            by_model[base]["ttft_ms"]["p99"].get<double>());
  const std::string metrics = http_get(server.port(), "/metrics");
  EXPECT_NE(metrics.find("vllm:lora_requests_info{max_lora=\"1\",running_lora_adapters="), std::string::npos)
      << metrics.substr(0, 2000);
  std::istringstream in(metrics);
  double loads = 0;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("tokenscope:lora_loads_total{", 0) == 0)
      loads = std::stod(line.substr(line.rfind(' ') + 1));
  EXPECT_GE(loads, 2) << "each adapter brought onto the GPU at least once";

  const auto missing = dir_ / "missing";
  const auto m = bench({"--target", server.url(""), "--model-mix", base + "=1,no-such-lora=1",
                        "--num-requests", "20", "--rate", "inf", "--input-len", "fixed:8", "--output-len",
                        "fixed:4", "--out", missing.string(), "--max-error-rate", "1"});
  const auto mrun = json::parse(slurp(missing / "run.json"));
  EXPECT_GT(mrun["summary"]["by_model"]["no-such-lora"]["failed"].get<int>(), 0) << mrun["summary"].dump();
  EXPECT_EQ(mrun["summary"]["by_model"]["no-such-lora"]["completed"], 0);
  for (const auto& rec : lines(missing / "requests.jsonl"))
    if (rec["model"] == "no-such-lora") {
      EXPECT_EQ(rec["http_status"], 404) << rec.dump();
    }
  const auto bad = bench({"--target", server.url(""), "--model-mix", "a=1,b", "--num-requests", "1"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--model-mix 'b': expected NAME=WEIGHT"), std::string::npos) << bad.err;
}

// Pooling against serve (a separate process): embeddings in batches and
// rerank with documents; each request's answer is checked item by item,
// prompts reach the server at the planned length (embeddings: the server's
// count is the plan, BOS and all), output is 0, and the summary carries the
// batch sizes and input tokens per second. Bad settings are refused first.
TEST_F(Bench, EmbeddingsAndRerankAgainstServe) {
  Server server(dir_, {"--fixed-step-ms", "2"});
  const auto emb = dir_ / "emb";
  auto r =
      bench({"--target", server.url(""), "--api", "embeddings", "--inputs-per-request", "4", "--num-requests",
             "20", "--rate", "inf", "--input-len", "uniform:8:64", "--out", emb.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto s = json::parse(slurp(emb / "run.json"))["summary"];
  EXPECT_EQ(s["requests_completed"], 20);
  EXPECT_EQ(s["inputs_total"], 80);
  EXPECT_EQ(s["inputs_per_request_mean"], 4.0);
  EXPECT_EQ(s["output_tokens_total"], 0);
  EXPECT_GT(s["prompt_tokens_planned_total"].get<int>(), 20 * 4 * 8);
  EXPECT_EQ(s["prompt_tokens_planned_reported"], s["prompt_tokens_planned_total"]);
  EXPECT_EQ(s["prompt_token_mismatches"], 0);
  EXPECT_GT(s["input_token_throughput_tps"].get<double>(), 0);
  EXPECT_EQ(s["e2e_ms"]["count"], 20);
  EXPECT_NE(r.out.find("pooling           80 inputs, 4.0 per request"), std::string::npos) << r.out;
  for (const auto& rec : lines(emb / "requests.jsonl")) {
    EXPECT_EQ(rec["inputs"], 4);
    EXPECT_EQ(rec["output_tokens"], 0);
    EXPECT_EQ(rec["response_id"].get<std::string>().rfind("embd-", 0), 0u);
  }
  const auto rr = dir_ / "rerank";
  r = bench({"--target", server.url(""), "--api", "rerank", "--inputs-per-request", "5", "--query-tokens",
             "12", "--num-requests", "10", "--rate", "inf", "--input-len", "fixed:40", "--out", rr.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  s = json::parse(slurp(rr / "run.json"))["summary"];
  EXPECT_EQ(s["requests_completed"], 10);
  EXPECT_EQ(s["inputs_total"], 50);
  // serve's pairs are the query's tokens then the document's: 5 x (12 + 40) per request.
  EXPECT_EQ(s["prompt_tokens_total"], 10 * 5 * (12 + 40));
  EXPECT_EQ(s["prompt_tokens_planned_total"], 0);  // a pair's tokens depend on the model: not planned
  // The server counted them as requests with prompt tokens and no generation.
  const std::string metrics = http_get(server.port(), "/metrics");
  EXPECT_NE(metrics.find("vllm:generation_tokens_total{model_name=\"llama-3-8b\",engine=\"0\"} 0.0"),
            std::string::npos);

  const auto big = bench({"--target", server.url(""), "--api", "embeddings", "--inputs-per-request", "5000"});
  EXPECT_EQ(big.exit_code, 2);
  EXPECT_NE(big.err.find("--inputs-per-request: Value 5000 not in range 1 to 2048"), std::string::npos)
      << big.err;
  const auto gen = bench({"--target", server.url(""), "--inputs-per-request", "2"});
  EXPECT_EQ(gen.exit_code, 2);
  EXPECT_NE(gen.err.find("goes with --api embeddings or rerank"), std::string::npos) << gen.err;
  const auto cancel =
      bench({"--target", server.url(""), "--api", "rerank", "--cancel", "0.5:after-tokens=2"});
  EXPECT_EQ(cancel.exit_code, 2);
  EXPECT_NE(cancel.err.find("answers whole"), std::string::npos) << cancel.err;
}

// Transcriptions against serve (a separate process) with an audio model:
// each request uploads a WAV of its planned length; the audio serve counted
// is the audio bench planned and reports, every request ok; streamed, the
// first text delta comes before the last (TTFT < E2E) and the transcript
// has serve's length (ceil(3.25 x seconds) tokens); whole verbose_json
// answers carry the duration heard. Bad settings are refused before the run.
TEST_F(Bench, TranscriptionsAgainstServe) {
  Server server(dir_, {"--model", "qwen2-audio-7b", "--fixed-step-ms", "2"});
  const auto streamed = dir_ / "streamed";
  auto r = bench({"--target", server.url(""), "--api", "transcriptions", "--audio-duration-ms",
                  "uniform:2000:9000", "--num-requests", "12", "--rate", "40", "--out", streamed.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto s = json::parse(slurp(streamed / "run.json"))["summary"];
  EXPECT_EQ(s["requests_completed"], 12);
  EXPECT_EQ(s["requests_failed"], 0);
  double planned_s = 0;
  for (const auto& rec : lines(streamed / "requests.jsonl")) {
    EXPECT_EQ(rec["outcome"], "ok") << rec.dump();
    const double seconds = rec["audio_ms"].get<double>() / 1e3;
    EXPECT_GE(seconds, 2.0);
    EXPECT_LE(seconds, 9.0);
    planned_s += seconds;
    EXPECT_EQ(rec["response_id"].get<std::string>().rfind("trsc-", 0), 0u);
    EXPECT_EQ(rec["output_tokens"], static_cast<int>(std::ceil(3.25 * seconds - 1e-9))) << rec.dump();
    EXPECT_GT(rec["prompt_tokens"].get<int>(), 25 * seconds);  // the audio's tokens and the decoder prompt
    EXPECT_LT(rec["t_first_token_ns"].get<std::int64_t>(), rec["t_last_token_ns"].get<std::int64_t>());
    EXPECT_FALSE(rec.contains("prompt_tokens_planned"));
  }
  EXPECT_NEAR(s["audio_seconds_total"].get<double>(), planned_s, 1e-6);
  EXPECT_GT(s["audio_seconds_per_second"].get<double>(), 0);
  EXPECT_LT(s["ttft_ms"]["p50"].get<double>(), s["e2e_ms"]["p50"].get<double>());
  EXPECT_NE(r.out.find("audio             "), std::string::npos) << r.out;
  const std::string metrics = http_get(server.port(), "/metrics");
  const std::string key = "tokenscope:audio_input_seconds_total{model_name=\"qwen2-audio-7b\",engine=\"0\"} ";
  const auto at = metrics.find(key);
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_NEAR(std::stod(metrics.substr(at + key.size())), planned_s, 1e-6);

  // Whole, verbose_json: the duration the server heard is checked against the audio sent.
  const auto whole = dir_ / "whole";
  r = bench({"--target", server.url(""), "--api", "transcriptions", "--no-stream", "--response-format",
             "verbose_json", "--language", "en", "--num-requests", "6", "--rate", "inf", "--out",
             whole.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  s = json::parse(slurp(whole / "run.json"))["summary"];
  EXPECT_EQ(s["requests_completed"], 6);
  for (const auto& rec : lines(whole / "requests.jsonl")) {
    EXPECT_GE(rec["audio_ms"].get<int>(), 5000);  // the default: uniform:5000:30000
    EXPECT_LE(rec["audio_ms"].get<int>(), 30000);
    EXPECT_EQ(rec["t_first_token_ns"], rec["t_last_token_ns"]);
  }

  // Refused before the run: a model without an audio encoder (in-process), a
  // whole format streamed, transcription options with another API, too long a clip.
  int refusals = 0;
  auto refused = [&](std::vector<std::string> args, const std::string& expect) {
    args.insert(args.end(),
                {"--num-requests", "2", "--out", (dir_ / ("refused" + std::to_string(++refusals))).string()});
    const auto x = bench(args);
    EXPECT_EQ(x.exit_code, 2) << x.err;
    EXPECT_NE(x.err.find(expect), std::string::npos) << x.err;
  };
  refused({"--api", "transcriptions"}, "takes no audio");
  refused({"--target", server.url(""), "--api", "transcriptions", "--response-format", "text"},
          "--response-format text is answered whole: add --no-stream");
  refused({"--target", server.url(""), "--api", "chat", "--language", "en"}, "go with --api transcriptions");
  refused({"--target", server.url(""), "--api", "transcriptions", "--logprobs", "1"},
          "not with --api transcriptions");
  refused({"--target", server.url(""), "--api", "transcriptions", "--audio-duration-ms", "fixed:200000"},
          "over the 120000 ms a request may carry");
  // The in-process server with an audio model.
  const auto local = dir_ / "local";
  r = bench({"--api", "transcriptions", "--model", "qwen2.5-omni-7b", "--num-requests", "4", "--out",
             local.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(slurp(local / "run.json"))["summary"]["requests_completed"], 4);
}

// A server that streams transcriptions as OpenAI does (transcript.text.delta
// events, then transcript.text.done with token usage), 80 ms apart: the
// upload reaches it as multipart/form-data with the WAV of the planned
// length, TTFT is the first delta and E2E the last.
TEST_F(Bench, TranscriptionsStreamedInOpenAisEvents) {
  auto event = [](const std::string& type, const std::string& fields) {
    return "event: " + type + "\ndata: {\"type\":\"" + type + "\"" + fields + "}\n\n";
  };
  RecordingServer server([&](int fd, const RecordingServer::Request&) {
    const std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" +
        event("transcript.text.delta", ",\"delta\":\"Hello\"");
    const std::string rest =
        event("transcript.text.delta", ",\"delta\":\" world\"") +
        event("transcript.text.done",
              ",\"text\":\"Hello world\",\"usage\":{\"type\":\"tokens\",\"input_tokens\":"
              "70,\"output_tokens\":2,\"total_tokens\":72}");
    if (::send(fd, head.data(), head.size(), MSG_NOSIGNAL) < 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(80));
    (void)::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL);
  });
  const auto out = dir_ / "openai";
  const auto r = bench({"--target", server.url(), "--model", "gpt-4o-transcribe", "--api", "transcriptions",
                        "--audio-duration-ms", "fixed:1500", "--num-requests", "1", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  RecordingServer::Request post;
  for (const auto& req : server.requests())
    if (req.head.rfind("POST /v1/audio/transcriptions ", 0) == 0) post = req;
  ASSERT_FALSE(post.body.empty());
  const std::string lower = lowercase(post.head);
  const auto b = lower.find("content-type: multipart/form-data; boundary=");
  ASSERT_NE(b, std::string::npos) << post.head;
  const std::string boundary = post.head.substr(b + 44, post.head.find("\r\n", b) - b - 44);
  EXPECT_EQ(post.body.rfind("--" + boundary + "\r\n", 0), 0u);
  EXPECT_NE(post.body.find("\r\n--" + boundary + "--\r\n"), std::string::npos);
  const auto file =
      post.body.find("name=\"file\"; filename=\"audio.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF");
  ASSERT_NE(file, std::string::npos);
  const std::size_t data = post.body.find("RIFF", file);
  const std::size_t end = post.body.find("\r\n--" + boundary, data);
  EXPECT_EQ(end - data, 44u + 1500u * 32u);  // 16 kHz, 16-bit mono: the header and 1.5 s of samples
  EXPECT_NE(post.body.find("name=\"model\"\r\n\r\ngpt-4o-transcribe\r\n"), std::string::npos);
  EXPECT_NE(post.body.find("name=\"stream\"\r\n\r\ntrue\r\n"), std::string::npos);
  const auto rec = lines(out / "requests.jsonl").at(0);
  EXPECT_EQ(rec["outcome"], "ok") << rec.dump();
  EXPECT_EQ(rec["output_tokens"], 2);
  EXPECT_EQ(rec["prompt_tokens"], 70);
  EXPECT_EQ(rec["audio_ms"], 1500);
  const auto first = rec["t_first_token_ns"].get<std::int64_t>();
  const auto last = rec["t_last_token_ns"].get<std::int64_t>();
  EXPECT_GE(last - first, 70'000'000);
}

// Images and audio: bench sends them in chat content parts (PNG data URLs,
// WAV input_audio); the server counts their tokens by its model's encoders,
// and the plan counts them the same way (the in-process model, or the
// catalog's entry of a remote target's model), so planned = reported; sim
// replays the same file to the same prompt tokens. A model without the
// encoder is refused before the run.
TEST_F(Bench, ImagesAndAudioReachTheServerAsPlanned) {
  const auto yaml = dir_ / "mm.yaml";
  std::ofstream(yaml) << "num_requests: 24\nseed: 5\narrival: {process: poisson, rate_rps: 40}\nclasses:\n"
                         "  - {name: vision, share: 2, input_len: uniform:20:60, output_len: fixed:4,\n"
                         "     images: {count: 2, width: uniform:300:1400, height: uniform:200:900}}\n"
                         "  - {name: audio, share: 1, input_len: fixed:30, output_len: fixed:4,\n"
                         "     audio: {duration_ms: uniform:500:4000}}\n"
                         "  - {name: text, share: 1, input_len: fixed:40, output_len: fixed:4}\n";
  const auto in_process = dir_ / "in-process";
  auto r = bench({"--workload", yaml.string(), "--api", "chat", "--model", "qwen2.5-omni-7b", "--out",
                  in_process.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto s = json::parse(slurp(in_process / "run.json"))["summary"];
  EXPECT_EQ(s["requests_completed"], 24);
  EXPECT_EQ(s["prompt_token_mismatches"], 0);
  EXPECT_EQ(s["prompt_tokens_planned_total"], s["prompt_tokens_planned_reported"]);
  EXPECT_EQ(s["prompt_tokens_planned_total"], s["prompt_tokens_total"]);
  const auto bench_prompt_tokens = s["prompt_tokens_total"].get<std::int64_t>();
  int vision = 0;
  for (const auto& rec : lines(in_process / "requests.jsonl"))
    if (rec["class"] == "vision") {
      ++vision;
      EXPECT_GT(rec["prompt_tokens"].get<int>(), 2 * 256) << rec.dump();  // two images, a tile or more each
    }
  EXPECT_GT(vision, 0);

  // The same file in sim: the same prompt tokens (text and media alike).
  const auto sim = dir_ / "sim";
  const auto rs = run_process({kBin, "sim", "--workload", yaml.string(), "--model", "qwen2.5-omni-7b",
                               "--out", sim.string(), "--quiet"},
                              60);
  ASSERT_EQ(rs.exit_code, 0) << rs.err;
  EXPECT_EQ(json::parse(slurp(sim / "run.json"))["summary"]["prompt_tokens_total"], bench_prompt_tokens);

  // serve as a separate process with a vision-only model: the plan from the catalog's entry of its name.
  Server server(dir_, {"--model", "qwen2.5-vl-7b", "--fixed-step-ms", "2"});
  const auto vyaml = dir_ / "vision.yaml";
  std::ofstream(vyaml) << "num_requests: 8\nseed: 2\narrival: {process: poisson, rate_rps: 40}\nclasses:\n"
                          "  - {name: vision, input_len: fixed:20, output_len: fixed:3,\n"
                          "     images: {count: 1, width: uniform:64:2000, height: fixed:500}}\n";
  const auto remote = dir_ / "remote";
  r = bench({"--target", server.url(""), "--workload", vyaml.string(), "--api", "responses", "--out",
             remote.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  s = json::parse(slurp(remote / "run.json"))["summary"];
  EXPECT_EQ(s["requests_completed"], 8);
  EXPECT_EQ(s["prompt_token_mismatches"], 0);
  EXPECT_GT(s["prompt_tokens_planned_total"].get<int>(), 8 * 20);

  // Refused before the run: a model without the encoder, and the completions API.
  const auto no_vision =
      bench({"--workload", yaml.string(), "--api", "chat", "--out", (dir_ / "nv").string()});
  EXPECT_EQ(no_vision.exit_code, 2);
  EXPECT_NE(no_vision.err.find("model llama-3-8b takes no"), std::string::npos) << no_vision.err;
  const auto completions =
      bench({"--workload", yaml.string(), "--model", "qwen2.5-omni-7b", "--out", (dir_ / "c").string()});
  EXPECT_EQ(completions.exit_code, 2);
  EXPECT_NE(completions.err.find("they go in chat messages"), std::string::npos) << completions.err;
}

// --coupling: after the mix, each class alone at its own arrival times in
// coupling/CLASS/ (full run directories of that class's requests only), and
// run.json "coupling" with kappa per class, metric and quantile; check reads
// it for item 3 on the one run. Refused without two classes.
TEST_F(Bench, CouplingRunsEachClassAloneAfterTheMix) {
  const auto yaml = dir_ / "mix.yaml";
  std::ofstream(yaml) << "num_requests: 60\nseed: 9\narrival: {process: poisson, rate_rps: 30}\nclasses:\n"
                         "  - {name: chat, share: 2, input_len: fixed:50, output_len: fixed:12}\n"
                         "  - {name: batch, share: 1, input_len: fixed:400, output_len: fixed:6}\n";
  const auto out = dir_ / "run";
  const auto r =
      bench({"--workload", yaml.string(), "--coupling", "--fixed-step-ms", "2", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run = json::parse(slurp(out / "run.json"));
  ASSERT_TRUE(run.contains("coupling")) << run.dump().substr(0, 300);
  const auto& c = run["coupling"];
  EXPECT_EQ(c["method"], "alone");
  std::size_t mix_chat = 0, mix_batch = 0;
  for (const auto& rec : lines(out / "requests.jsonl")) (rec["class"] == "chat" ? mix_chat : mix_batch)++;
  for (const auto& [cls, n] : {std::pair<std::string, std::size_t>{"chat", mix_chat}, {"batch", mix_batch}}) {
    SCOPED_TRACE(cls);
    EXPECT_EQ(c["alone_runs"][cls], "coupling/" + cls);
    const auto alone = lines(out / "coupling" / cls / "requests.jsonl");
    EXPECT_EQ(alone.size(), n);
    for (const auto& rec : alone) EXPECT_EQ(rec["class"], cls);
    const auto& k = c["classes"][cls]["tpot_ms"]["p50"];
    ASSERT_TRUE(k.is_object()) << c.dump();
    EXPECT_GT(k["kappa"].get<double>(), 0);
    EXPECT_LE(k["ci"][0].get<double>(), k["kappa"].get<double>());
    EXPECT_GE(k["ci"][1].get<double>(), k["kappa"].get<double>());
    EXPECT_EQ(k["n_alone"], k["n_mix"]);
  }
  EXPECT_NE(r.out.find("coupling: kappa = latency in the mix / alone"), std::string::npos) << r.out;
  const auto check = run_process({kBin, "check", out.string(), "--format", "json"}, 60);
  const auto verdict = json::parse(check.out);
  bool coupling_item = false;
  for (const auto& item : verdict["items"])
    if (item["id"] == "coupling") {
      coupling_item = true;
      EXPECT_NE(item["verdict"], "no_data") << item.dump();
    }
  EXPECT_TRUE(coupling_item) << check.out.substr(0, 400);

  const auto one = bench({"--coupling", "--num-requests", "5", "--out", (dir_ / "one").string()});
  EXPECT_EQ(one.exit_code, 2);
  EXPECT_NE(one.err.find("two or more task classes"), std::string::npos) << one.err;
}

// The in-process server as a reasoning model (--reasoning-share): every
// reasoning chunk is output (the client counts each token, reasoning
// included, as the server's usage does), and run.json records the setting.
TEST_F(Bench, TheInProcessServerAsAReasoningModelCountsEveryToken) {
  const auto out = dir_ / "run";
  const auto r = bench({"--api", "chat", "--reasoning-share", "0.5", "--reasoning-field", "reasoning_content",
                        "--num-requests", "5", "--rate", "inf", "--input-len", "fixed:16", "--output-len",
                        "fixed:8", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto recs = lines(out / "requests.jsonl");
  ASSERT_EQ(recs.size(), 5u);
  for (const auto& rec : recs) {
    EXPECT_EQ(rec["outcome"], "ok");
    EXPECT_EQ(rec["output_tokens"], 8);
    EXPECT_EQ(rec["output_tokens_client"], 8);
    EXPECT_EQ(rec["reasoning_tokens"], 4);  // the server's usage count: half of 8
    EXPECT_GT(rec["t_first_answer_ns"].get<std::int64_t>(), rec["t_first_token_ns"].get<std::int64_t>());
  }
  const auto run = json::parse(slurp(out / "run.json"));
  EXPECT_EQ(run["settings"]["requested"]["server"]["reasoning"]["share"], 0.5);
  EXPECT_EQ(run["settings"]["requested"]["server"]["reasoning"]["field"], "reasoning_content");
  const auto bad = bench({"--api", "chat", "--reasoning-share", "2", "--num-requests", "1"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--reasoning-share 2: expected a share in [0, 1]"), std::string::npos) << bad.err;
}

// A server that streams output events without end: the client's memory and
// the record stay bounded (--max-events kept, the rest counted and their gaps
// histogrammed), the request ends at its timeout, and every event is counted.
TEST_F(Bench, AStreamWithoutEndKeepsTheClientBounded) {
  RecordingServer server([](int fd, const RecordingServer::Request&) {
    const std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
    if (::send(fd, head.data(), head.size(), MSG_NOSIGNAL) < 0) return;
    std::string events;
    for (int i = 0; i < 2000; ++i) events += "data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n";
    // Until the client goes (its timeout), at most 60 s.
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < end)
      if (::send(fd, events.data(), events.size(), MSG_NOSIGNAL) < 0) return;
  });
  const auto r = bench({"--target",
                        server.url(),
                        "--model",
                        "m",
                        "--num-requests",
                        "1",
                        "--input-len",
                        "fixed:8",
                        "--output-len",
                        "fixed:16",
                        "--timeout-s",
                        "4",
                        "--max-events",
                        "1000",
                        "--max-error-rate",
                        "1",
                        "--prompt-check",
                        "0",
                        "--out",
                        (dir_ / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Bounded: at 12 bytes an event the kept events are 12 KB; unbounded, the
  // millions of events (and the line written for them) took hundreds of MB.
  // (Measured: 16 MB with the cap, 196 MB without. Sanitizers' shadow memory
  // makes a bound meaningless there.)
  if (!kSanitized) {
    EXPECT_LT(r.max_rss_kb, 64 * 1024) << "peak RSS " << r.max_rss_kb << " kB";
  }
  const auto text = slurp(dir_ / "run" / "requests.jsonl");
  EXPECT_LT(text.size(), 200'000u);  // one line: 1,000 offsets and a histogram
  const auto recs = lines(dir_ / "run" / "requests.jsonl");
  ASSERT_EQ(recs.size(), 1u);
  const auto& rec = recs[0];
  EXPECT_EQ(rec["outcome"], "timeout");
  EXPECT_EQ(rec["event_offsets_ns"].size(), 1000u);
  const auto dropped = rec["events_dropped"].get<std::uint64_t>();
  EXPECT_GT(dropped, 10'000u);  // the loopback carries millions in 4 s (fewer under a sanitizer)
  EXPECT_EQ(rec["output_tokens_client"].get<std::uint64_t>(), 1000 + dropped);
  EXPECT_EQ(rec["dropped_gaps_ns"]["count"].get<std::uint64_t>(), dropped);
}

// The request options reach the server as given: sampling parameters, the
// extra body (whose fields replace tokenscope's own), --api-key, --header,
// --model, --no-ignore-eos; completions and chat; run.json records them.
TEST_F(Bench, SamplingOptionsAndExtraBodyReachTheServer) {
  RecordingServer server;
  const std::vector<std::string> common = {
      "--target",
      server.url(),
      "--model",
      "served-model",
      "--no-stream",
      "--rate",
      "inf",
      "--num-requests",
      "3",
      "--input-len",
      "fixed:8",
      "--output-len",
      "fixed:1",
      "--temperature",
      "0.25",
      "--top-p",
      "0.5",
      "--top-k",
      "7",
      "--request-seed",
      "42",
      "--logprobs",
      "2",
      "--extra-body",
      R"({"min_p": 0.05, "top_k": 9, "nested": {"a": [1, 2]}})",
      "--api-key",
      "sk-test",
      "--header",
      "X-Tenant: blue",
      "--prompt-check",
      "0",  // no /tokenize before the run: only the load reaches the server
      "--exact-prompts",
      "off",
      "--no-scrape",  // nor a GET /metrics
      "--quiet"};
  auto args = common;
  args.insert(args.end(), {"--out", (dir_ / "completions").string()});
  auto r = bench(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Besides the load, at the start: one GET /v1/models (run.json records what
  // the target serves) and the routes where a server says what it is
  // (/props, /get_server_info, /version), each once, with the same credentials.
  const auto load_only = [](std::vector<RecordingServer::Request> all) {
    for (const char* route : {"/v1/models", "/props", "/get_server_info", "/version"}) {
      const auto get = std::find_if(all.begin(), all.end(), [&](const auto& q) {
        return q.head.rfind(std::string("GET ") + route + " HTTP/1.1\r\n", 0) == 0;
      });
      EXPECT_NE(get, all.end()) << route;
      if (get != all.end()) {
        EXPECT_NE(lowercase(get->head).find("\r\nauthorization: bearer sk-test"), std::string::npos) << route;
        all.erase(get);
      }
    }
    return all;
  };
  auto seen = load_only(server.requests());
  ASSERT_EQ(seen.size(), 3u);
  for (const auto& q : seen) {
    EXPECT_EQ(q.head.rfind("POST /v1/completions HTTP/1.1\r\n", 0), 0u) << q.head;
    EXPECT_NE(lowercase(q.head).find("\r\nauthorization: bearer sk-test"), std::string::npos) << q.head;
    EXPECT_NE(lowercase(q.head).find("\r\nx-tenant: blue"), std::string::npos) << q.head;
    const auto b = json::parse(q.body);
    EXPECT_EQ(b["model"], "served-model");
    EXPECT_TRUE(b["prompt"].is_string() && !b["prompt"].get<std::string>().empty()) << q.body;
    EXPECT_EQ(b["max_tokens"], 1);
    EXPECT_EQ(b["stream"], false);
    EXPECT_EQ(b["ignore_eos"], true);
    EXPECT_EQ(b["temperature"], 0.25);
    EXPECT_EQ(b["top_p"], 0.5);
    EXPECT_EQ(b["top_k"], 9);  // the extra body wins over --top-k
    EXPECT_EQ(b["seed"], 42);
    EXPECT_EQ(b["logprobs"], 2);
    EXPECT_EQ(b["min_p"], 0.05);
    EXPECT_EQ(b["nested"], json({{"a", {1, 2}}}));
  }
  const auto run = json::parse(slurp(dir_ / "completions" / "run.json"));
  const auto& sampling = run["settings"]["requested"]["target"]["sampling"];
  EXPECT_EQ(sampling["temperature"], 0.25);
  EXPECT_EQ(sampling["seed"], 42);
  EXPECT_EQ(sampling["extra_body"]["min_p"], 0.05);
  EXPECT_EQ(run["summary"]["requests_completed"], 3);

  args = common;
  args.insert(args.end(), {"--api", "chat", "--no-ignore-eos", "--out", (dir_ / "chat").string()});
  r = bench(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  seen = server.requests();
  ASSERT_EQ(seen.size(), 14u);  // the first run's 7, its 4 GETs again and 3 chat requests
  seen = load_only(std::vector<RecordingServer::Request>(seen.begin() + 7, seen.end()));
  ASSERT_EQ(seen.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(seen[i].head.rfind("POST /v1/chat/completions HTTP/1.1\r\n", 0), 0u) << seen[i].head;
    const auto b = json::parse(seen[i].body);
    EXPECT_EQ(b["messages"][0]["role"], "user") << seen[i].body;
    EXPECT_FALSE(b.contains("ignore_eos")) << seen[i].body;
    EXPECT_EQ(b["temperature"], 0.25);
    EXPECT_EQ(b["logprobs"], true);  // chat asks for log-probabilities this way
    EXPECT_EQ(b["top_logprobs"], 2);
    EXPECT_EQ(b["top_k"], 9);
  }
}

}  // namespace
}  // namespace tokenscope::testing
