// Black-box abuse tests of `tokenscope serve` (docs/reliability.md, "serve
// under abuse"): the real binary on an ephemeral loopback port, attacked with
// raw sockets. Each test names the bound it holds. The timeouts are set small
// through the options, every wait polls an observable condition under a
// deadline, and every client socket has a receive timeout, so each test ends
// by itself within seconds.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server.h"

namespace tokenscope::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

// A loopback TCP client socket.
class Sock {
 public:
  // rcvbuf > 0 sets SO_RCVBUF before connecting (a small window: a stalled
  // reader fills the server's buffers sooner).
  explicit Sock(int port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Sock() { close(); }
  Sock(const Sock&) = delete;
  Sock& operator=(const Sock&) = delete;
  bool connected() const { return connected_; }
  // False when the peer is gone (the bytes may be cut short).
  bool send(const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }
  // Appends what arrives within timeout_ms; false on end of stream or error.
  bool read_some(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return true;  // nothing yet
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    received.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  // Reads until the peer closes, at most timeout_s; returns everything received.
  std::string read_all(double timeout_s = 10) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (Clock::now() < deadline && read_some(50)) {
    }
    return received;
  }
  bool eof() const { return eof_; }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  std::string received;

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
};

std::string get(const std::string& path) {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
}

std::string post(const std::string& path, const std::string& body, const std::string& version = "1.1") {
  return "POST " + path + " HTTP/" + version + "\r\nHost: x\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// One GET over a fresh connection; the whole response ("" when refused).
std::string fetch(int port, const std::string& path) {
  Sock s(port);
  if (!s.connected() || !s.send(get(path))) return "";
  return s.read_all(5);
}

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return 0;
  return std::stoi(response.substr(9, 3));
}

// A series of /metrics by name and one label (name{...,label} value); -1
// when the scrape fails or the series is absent.
double metric(int port, const std::string& name, const std::string& label = "") {
  const std::string text = fetch(port, "/metrics");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    if (!label.empty() && line.find(label) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// Polls cond every 20 ms until it holds or timeout_s passes; returns cond().
bool eventually(const std::function<bool()>& cond, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (!cond()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// The resident set of a process, KiB (/proc/PID/status VmRSS).
long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// User + system CPU time of a process, s (/proc/PID/stat utime and stime).
double cpu_s(pid_t pid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::vector<std::string> f;
  for (std::string x; rest >> x;) f.push_back(x);
  // After "pid (comm) ": state is field 3, utime field 14, stime field 15.
  return static_cast<double>(std::stoll(f.at(11)) + std::stoll(f.at(12))) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

const std::string kStreamOf16 = [] {
  json prompts = json::array();
  for (int i = 0; i < 16; ++i) prompts.push_back("stalled reader " + std::to_string(i));
  return json{{"prompt", prompts}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}}.dump();
}();

class Abuse : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tokenscope_abuse_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string server_err() const { return slurp(dir_ / "server.err"); }
  fs::path dir_;
};

const std::string kDropped = "tokenscope:connections_dropped_total";

// Bound: at most --max-connections (50) connections are served; the next one
// gets 503 with Retry-After at once; when the idle ones go, /health is
// answered again and tokenscope:connections counts only what is open.
TEST_F(Abuse, IdleFloodToMaxConnectionsGets503ThenRecovers) {
  Server server(dir_, {"--max-connections", "50", "--header-timeout-s", "30"});
  std::vector<std::unique_ptr<Sock>> idle;
  for (int i = 0; i < 50; ++i) {
    idle.push_back(std::make_unique<Sock>(server.port()));
    ASSERT_TRUE(idle.back()->connected());
  }
  // Connections are accepted in order: these 50 are counted before the next.
  Sock refused(server.port());
  const std::string r = refused.read_all(5);
  EXPECT_EQ(status_of(r), 503) << r;
  EXPECT_NE(r.find("Retry-After: 1\r\n"), std::string::npos) << r;
  idle.clear();
  EXPECT_TRUE(eventually([&] { return status_of(fetch(server.port(), "/health")) == 200; }, 10));
  // The scrape's own connection is the one open.
  EXPECT_TRUE(eventually([&] { return metric(server.port(), "tokenscope:connections") == 1.0; }, 10))
      << metric(server.port(), "tokenscope:connections");
  EXPECT_GE(metric(server.port(), kDropped, "reason=\"max_connections\""), 1.0);
}

// Bound: a request head trickled one byte every 200 ms (each well inside the
// 1 s header timeout) is cut with 408 one header timeout after it began, on
// each of 20 connections at --max-connections 20; then /health is answered.
TEST_F(Abuse, SlowlorisIsCutAtTheHeaderTimeout) {
  Server server(dir_, {"--max-connections", "20", "--header-timeout-s", "1"});
  std::vector<std::unique_ptr<Sock>> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(std::make_unique<Sock>(server.port()));
    ASSERT_TRUE(slow.back()->connected());
    slow.back()->send("GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ");
  }
  // 50 rounds (10 s) of one byte each; the head never ends.
  int rounds = 0;
  auto all_cut = [&] {
    for (auto& s : slow)
      if (!s->eof()) return false;
    return true;
  };
  for (; rounds < 50 && !all_cut(); ++rounds) {
    for (auto& s : slow)
      if (!s->eof()) s->send("a");
    const auto round_end = Clock::now() + std::chrono::milliseconds(200);
    for (auto& s : slow)
      while (!s->eof() && Clock::now() < round_end && s->read_some(5)) {
      }
    while (Clock::now() < round_end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(all_cut()) << "after " << rounds << " rounds of 200 ms";
  EXPECT_LT(rounds, 50);
  for (auto& s : slow) EXPECT_EQ(status_of(s->received), 408) << s->received;
  EXPECT_EQ(status_of(fetch(server.port(), "/health")), 200);
  EXPECT_GE(metric(server.port(), kDropped, "reason=\"header_timeout\""), 20.0);
}

// Bound: 5 streams whose clients never read are each closed once their
// unwritten bytes would pass --max-send-queue-bytes (256 KiB), their requests
// are aborted in the engine, and the server's resident memory grows by less
// than 32 MiB over it all (unbounded, it grew by ~190 bytes per token: here
// 5 x 64,000 tokens, some 60 MB).
TEST_F(Abuse, StalledReadersAreDroppedAtTheSendQueueBound) {
  Server server(dir_,
                {"--fixed-step-ms", "1", "--max-send-queue-bytes", "262144", "--write-timeout-s", "60"});
  ASSERT_EQ(status_of(fetch(server.port(), "/health")), 200);
  const long rss_before = rss_kib(server.pid());
  std::vector<std::unique_ptr<Sock>> stalled;
  for (int i = 0; i < 5; ++i) {
    stalled.push_back(std::make_unique<Sock>(server.port(), 4096));
    ASSERT_TRUE(stalled.back()->send(post("/v1/completions", kStreamOf16)));
  }
  long rss_peak = rss_before;
  const bool dropped = eventually(
      [&] {
        rss_peak = std::max(rss_peak, rss_kib(server.pid()));
        return metric(server.port(), kDropped, "reason=\"send_queue_full\"") >= 5.0;
      },
      60);
  EXPECT_TRUE(dropped) << metric(server.port(), kDropped, "reason=\"send_queue_full\"");
  if (!kSanitized) {
    EXPECT_LT(rss_peak - rss_before, 32 * 1024) << "KiB, from " << rss_before;
  }
  // The engine let go of every aborted choice.
  EXPECT_TRUE(eventually([&] { return metric(server.port(), "vllm:num_requests_running") == 0.0; }, 10));
  EXPECT_GE(metric(server.port(), "vllm:request_success_total", "finished_reason=\"abort\""), 5.0);
  EXPECT_TRUE(eventually([&] { return metric(server.port(), "tokenscope:connections") == 1.0; }, 10));
}

// Bound: once 20 stalled readers (1 MiB of queue each, the default) have
// been dropped and nothing else is in progress, the server returns the
// memory: its resident set comes back to within 8 MiB of what it was before
// them (it used to stay at its peak, the freed queues fragmenting the heap).
TEST_F(Abuse, MemoryIsReturnedAfterStalledReadersGo) {
  if (kSanitized) GTEST_SKIP() << "a sanitizer's allocator keeps freed memory in quarantine";
  Server server(dir_, {"--fixed-step-ms", "1"});
  ASSERT_EQ(status_of(fetch(server.port(), "/health")), 200);
  const long rss_before = rss_kib(server.pid());
  std::vector<std::unique_ptr<Sock>> stalled;
  for (int i = 0; i < 20; ++i) {
    stalled.push_back(std::make_unique<Sock>(server.port(), 4096));
    ASSERT_TRUE(stalled.back()->send(post("/v1/completions", kStreamOf16)));
  }
  long rss_peak = rss_before;
  EXPECT_TRUE(eventually(
      [&] {
        rss_peak = std::max(rss_peak, rss_kib(server.pid()));
        return metric(server.port(), kDropped, "reason=\"send_queue_full\"") >= 20.0;
      },
      60));
  stalled.clear();
  EXPECT_TRUE(eventually([&] { return rss_kib(server.pid()) - rss_before < 8 * 1024; }, 10))
      << "RSS " << rss_kib(server.pid()) << " KiB, before " << rss_before << ", peak " << rss_peak;
}

// Bound: a stream whose client stopped reading is closed when a write has
// made no progress for --write-timeout-s (1 s), even with an unbounded send
// queue, and its request is aborted.
TEST_F(Abuse, StalledReaderIsDroppedAtTheWriteTimeout) {
  Server server(dir_,
                {"--fixed-step-ms", "1", "--max-send-queue-bytes", "1073741824", "--write-timeout-s", "1"});
  Sock stalled(server.port(), 4096);
  ASSERT_TRUE(stalled.send(post("/v1/completions", kStreamOf16)));
  EXPECT_TRUE(
      eventually([&] { return metric(server.port(), kDropped, "reason=\"write_timeout\"") >= 1.0; }, 30));
  EXPECT_TRUE(eventually([&] { return metric(server.port(), "vllm:num_requests_running") == 0.0; }, 10));
  EXPECT_TRUE(eventually([&] { return metric(server.port(), "tokenscope:connections") == 1.0; }, 10));
  // The client finds the connection reset, or what was sent and then its end.
  EXPECT_FALSE(stalled.read_all(10).empty());
  EXPECT_TRUE(stalled.eof());
}

// Bound: request heads past --max-header-bytes (4 KiB), whether 1,000 small
// headers or one of 64 KiB, get 431 and the connection is closed, without
// the server reading the rest; the server stays up.
TEST_F(Abuse, HeaderFloodsGet431) {
  Server server(dir_, {"--max-header-bytes", "4096"});
  std::string many = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 1000; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
  Sock a(server.port());
  a.send(many + "\r\n");
  EXPECT_EQ(status_of(a.read_all(5)), 431) << a.received.substr(0, 200);
  EXPECT_TRUE(a.eof());
  Sock b(server.port());
  b.send("GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(65536, 'b'));
  EXPECT_EQ(status_of(b.read_all(5)), 431) << b.received.substr(0, 200);
  EXPECT_TRUE(b.eof());
  EXPECT_EQ(status_of(fetch(server.port(), "/health")), 200);
  EXPECT_GE(metric(server.port(), "tokenscope:http_responses_total", "code=\"431\""), 2.0);
}

// Bound: bodies past --max-body-bytes (1,000) get 413 as soon as their size
// is known (a Content-Length of 1 TB is not waited for), chunked or not.
TEST_F(Abuse, OversizeBodiesGet413) {
  Server server(dir_, {"--max-body-bytes", "1000"});
  Sock a(server.port());
  a.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n{\"prompt\"");
  EXPECT_EQ(status_of(a.read_all(5)), 413) << a.received;
  Sock b(server.port());
  b.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  for (int i = 0; i < 4 && !b.eof(); ++i) b.send("1f4\r\n" + std::string(500, 'x') + "\r\n");
  EXPECT_EQ(status_of(b.read_all(5)), 413) << b.received;
  EXPECT_EQ(status_of(fetch(server.port(), "/health")), 200);
}

// Bound: garbage pipelined after a valid request: the request is answered,
// the garbage gets 400 and the connection is closed; the server stays up.
TEST_F(Abuse, PipelinedGarbageGets400ThenClose) {
  Server server(dir_, {});
  std::string garbage;
  static constexpr char kLine[] = "\x01\xff not http \x7f\r\n";
  for (int i = 0; i < 100; ++i) garbage += std::string(kLine, sizeof kLine - 1);
  Sock s(server.port());
  s.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + garbage + "\r\n\r\n");
  const std::string out = s.read_all(5);
  EXPECT_EQ(status_of(out), 200) << out;
  const auto second = out.find("HTTP/1.1 400 ");
  EXPECT_NE(second, std::string::npos) << out;
  EXPECT_TRUE(s.eof());
  EXPECT_EQ(status_of(fetch(server.port(), "/health")), 200);
}

// A request pipelined behind one being answered is answered, and a request
// sent on the same connection after both is read as sent: the bytes of the
// pipelined request were parsed while the server's next read was pending,
// and a read into the buffer that parse emptied once made the server read
// the start of an earlier request again ("method POPOST not allowed").
TEST_F(Abuse, ARequestAfterAPipelinedOneIsReadAsSent) {
  Server server(dir_, {"--fixed-step-ms", "5"});
  Sock s(server.port());
  const std::string keep = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  s.send(post("/v1/completions", R"({"prompt": "x", "max_tokens": 10, "ignore_eos": true})") + keep);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  const auto responses = [&] {
    std::size_t n = 0;
    for (std::size_t at = s.received.find("HTTP/1.1 "); at != std::string::npos;
         at = s.received.find("HTTP/1.1 ", at + 1))
      ++n;
    return n;
  };
  while (Clock::now() < deadline && responses() < 2 && s.read_some(50)) {
  }
  ASSERT_EQ(responses(), 2u) << s.received;
  s.send(get("/v1/models"));
  const std::string out = s.read_all(10);
  const auto third = out.find("HTTP/1.1 ", out.find("HTTP/1.1 ", out.find("HTTP/1.1 ") + 1) + 1);
  ASSERT_NE(third, std::string::npos) << out;
  EXPECT_EQ(status_of(out.substr(third)), 200) << out.substr(third);
  EXPECT_NE(out.find("\"object\":\"list\"", third), std::string::npos) << out.substr(third);
}

// Bound: a client that half-closes (shutdown(SHUT_WR)) right after sending
// its request still receives the whole response, streamed or not.
TEST_F(Abuse, HalfClosedClientStillGetsTheResponse) {
  Server server(dir_, {"--fixed-step-ms", "5"});
  Sock whole(server.port());
  whole.send(post("/v1/completions", R"({"prompt": "x", "max_tokens": 20, "ignore_eos": true})"));
  whole.shutdown_write();
  const std::string a = whole.read_all(10);
  EXPECT_EQ(status_of(a), 200) << a;
  EXPECT_NE(a.find("\"completion_tokens\":20"), std::string::npos) << a;
  EXPECT_TRUE(whole.eof());
  Sock streamed(server.port());
  streamed.send(
      post("/v1/completions", R"({"prompt": "x", "max_tokens": 20, "ignore_eos": true, "stream": true})"));
  streamed.shutdown_write();
  const std::string b = streamed.read_all(10);
  EXPECT_NE(b.find("data: [DONE]\n\n\r\n0\r\n\r\n"), std::string::npos) << b;
  EXPECT_TRUE(streamed.eof());
}

// Bound: a client that closes its connection mid-stream (a FIN, as a
// half-close would send) is still noticed, at the write after the reset its
// close draws, and its request is aborted: it does not run to max_tokens.
TEST_F(Abuse, ClientClosingMidStreamIsAborted) {
  Server server(dir_, {"--fixed-step-ms", "5"});
  Sock s(server.port());
  s.send(
      post("/v1/completions", R"({"prompt": "x", "max_tokens": 5000, "ignore_eos": true, "stream": true})"));
  while (s.received.find("data: {") == std::string::npos && s.read_some(1000) && !s.eof()) {
  }
  ASSERT_NE(s.received.find("data: {"), std::string::npos) << s.received;
  s.close();
  EXPECT_TRUE(eventually(
      [&] { return metric(server.port(), "vllm:request_success_total", "finished_reason=\"abort\"") >= 1.0; },
      10));
  EXPECT_EQ(metric(server.port(), "vllm:num_requests_running"), 0.0);
  EXPECT_LT(metric(server.port(), "vllm:generation_tokens_total"), 1000.0);
}

// RFC 9112: an HTTP/1.0 client gets its stream without chunked coding, ended
// by the close of the connection.
TEST_F(Abuse, Http10StreamIsDelimitedByClose) {
  Server server(dir_, {"--fixed-step-ms", "1"});
  Sock s(server.port());
  s.send(post("/v1/completions", R"({"prompt": "x", "max_tokens": 5, "ignore_eos": true, "stream": true})",
              "1.0"));
  const std::string out = s.read_all(10);
  EXPECT_EQ(status_of(out), 200) << out;
  EXPECT_EQ(out.find("Transfer-Encoding"), std::string::npos) << out;
  EXPECT_NE(out.find("Connection: close\r\n"), std::string::npos) << out;
  EXPECT_EQ(out.substr(out.size() - 14), "data: [DONE]\n\n") << out;
  EXPECT_TRUE(s.eof());
}

// Bound: with its descriptors exhausted (the limit of the running server
// lowered to 64), the server backs off instead of retrying accept() in a
// loop: it uses less than half a CPU while 100 connections wait, says so once,
// counts it (tokenscope:accept_errors_total{error="EMFILE"}), and serves new
// clients once the others have gone.
TEST_F(Abuse, DescriptorExhaustionBacksOffAndRecovers) {
  Server server(dir_, {"--header-timeout-s", "30"});
  ASSERT_EQ(status_of(fetch(server.port(), "/health")), 200);
  const rlimit low{64, 64};
  ASSERT_EQ(::prlimit(server.pid(), RLIMIT_NOFILE, &low, nullptr), 0) << std::strerror(errno);
  std::vector<std::unique_ptr<Sock>> flood;
  for (int i = 0; i < 100; ++i) {
    flood.push_back(std::make_unique<Sock>(server.port()));
    ASSERT_TRUE(flood.back()->connected());  // the listen backlog takes what is not accepted
  }
  EXPECT_TRUE(eventually([&] { return server_err().find("EMFILE") != std::string::npos; }, 10))
      << server_err();
  const double cpu0 = cpu_s(server.pid());
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the measurement window
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = cpu_s(server.pid()) - cpu0;
  EXPECT_LT(cpu, 0.5 * wall) << "CPU " << cpu << " s over " << wall << " s";
  flood.clear();
  EXPECT_TRUE(eventually([&] { return status_of(fetch(server.port(), "/health")) == 200; }, 10));
  EXPECT_GT(metric(server.port(), "tokenscope:accept_errors_total", "error=\"EMFILE\""), 0.0);
  const std::string err = server_err();
  EXPECT_EQ(err.find("EMFILE"), err.rfind("EMFILE")) << "logged more than once:\n" << err;
}

// Bound: started under a hard descriptor limit of 64, the server says so
// once and lowers its connection limit to what the descriptors allow, so a
// flood gets the documented 503 instead of failing accept() (EMFILE).
TEST_F(Abuse, LowDescriptorLimitAtStartLowersMaxConnections) {
  Server server(dir_, {"--header-timeout-s", "30"}, {"/usr/bin/prlimit", "--nofile=64:64", "--"});
  EXPECT_NE(server_err().find("--max-connections"), std::string::npos) << server_err();
  std::smatch m;
  const std::string err = server_err();
  ASSERT_TRUE(std::regex_search(err, m, std::regex("serving at most (\\d+) connections"))) << err;
  const int limit = std::stoi(m[1]);
  EXPECT_GT(limit, 0);
  EXPECT_LT(limit, 64);
  std::vector<std::unique_ptr<Sock>> flood;
  for (int i = 0; i < 80; ++i) {
    flood.push_back(std::make_unique<Sock>(server.port()));
    ASSERT_TRUE(flood.back()->connected());
  }
  auto refused = [&] {
    int n = 0;
    for (auto& s : flood) {
      s->read_some(0);
      if (status_of(s->received) == 503) ++n;
    }
    return n;
  };
  EXPECT_TRUE(eventually([&] { return refused() == 80 - limit; }, 10)) << refused() << " refused";
  flood.clear();
  EXPECT_TRUE(eventually([&] { return status_of(fetch(server.port(), "/health")) == 200; }, 10));
  EXPECT_EQ(metric(server.port(), "tokenscope:accept_errors_total", "error=\"EMFILE\""), 0.0);
}

}  // namespace
}  // namespace tokenscope::testing
