// The whole server (ServerApp) over loopback: shutdown while an injected
// stall still holds a stream. Run it under AddressSanitizer and
// ThreadSanitizer too (scripts/test.sh does).
#include "serve/server_app.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/catalog.h"
#include "serve/executor.h"

namespace tokenscope::serve {
namespace {

// A blocking loopback client; every read gives up after two seconds.
class Client {
 public:
  explicit Client(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{2, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Client() { ::close(fd_); }
  bool connected() const { return connected_; }
  void send(const std::string& s) {
    ASSERT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), ssize_t(s.size()));
  }
  // Appends what arrives to received; false on end of stream or timeout.
  bool read_some() {
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    received.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  std::size_t count(const std::string& needle) const {
    std::size_t n = 0;
    for (std::size_t p = received.find(needle); p != std::string::npos; p = received.find(needle, p + 1)) ++n;
    return n;
  }
  std::string received;

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::unique_ptr<ServerApp> stalling_server(double stall_ms) {
  engine::EngineSettings s;
  s.fixed_step_ms = 1.0;
  const auto eff = engine::resolve_engine(s, engine::Catalog::builtin());
  ServerAppSettings ss;
  ss.threads = 2;
  ss.faults = {{FaultKind::kStall, 1.0, stall_ms}};
  auto app = std::make_unique<ServerApp>(eff, s, std::make_unique<engine::FixedCostModel>(1e-3), ss);
  app->start();
  return app;
}

// A stall that outlasts the shutdown linger: its timer, which holds the
// request and its connection, is cancelled and released while the server
// is still alive (before, io_context's destructor released it after the
// HttpServer was gone: a heap-use-after-free under AddressSanitizer).
TEST(ServerApp, StopWhileAStallOutlastsTheLingerReleasesItsConnectionFirst) {
  auto app = stalling_server(6000);
  Client client(app->port());
  ASSERT_TRUE(client.connected());
  const std::string body = R"({"prompt": "x", "max_tokens": 10, "ignore_eos": true, "stream": true})";
  client.send(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body);
  // Tokens 1-4 arrive, then the stream stalls at the 5th.
  while (client.count("data: {") < 4) ASSERT_TRUE(client.read_some()) << client.received;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (app->metrics().value("tokenscope:faults_injected_total", "stall") < 1.0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(app->metrics().value("tokenscope:faults_injected_total", "stall"), 1.0);
  app->stop(0.0, 0.5);  // the stall has more than 5 s to go
  // The stream was ended with an error event after the (zero) grace period.
  while (client.read_some()) {
  }
  EXPECT_EQ(client.count("data: {\"error\""), 1u) << client.received;
  EXPECT_EQ(client.count("data: {"), 5u) << client.received;  // no token after the stall point
  app.reset();
}

// tokenscope:connections is the number of connections open now (it stayed 0).
TEST(ServerApp, ConnectionsGaugeCountsOpenConnections) {
  auto app = stalling_server(1);
  auto gauge_reaches = [&](double n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (app->metrics().value("tokenscope:connections") != n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return app->metrics().value("tokenscope:connections") == n;
  };
  auto a = std::make_unique<Client>(app->port());
  Client b(app->port());
  ASSERT_TRUE(a->connected() && b.connected());
  EXPECT_TRUE(gauge_reaches(2.0)) << app->metrics().value("tokenscope:connections");
  EXPECT_NE(
      app->metrics().render().find("tokenscope:connections{model_name=\"llama-3-8b\",engine=\"0\"} 2.0"),
      std::string::npos);
  a.reset();
  EXPECT_TRUE(gauge_reaches(1.0)) << app->metrics().value("tokenscope:connections");
  app->stop();
}

// The body of a whole HTTP response read from the client (Content-Length).
std::string read_body(Client& c) {
  while (true) {
    const std::size_t head_end = c.received.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      const std::size_t cl = c.received.find("Content-Length: ");
      if (cl != std::string::npos && cl < head_end) {
        const std::size_t length = std::stoul(c.received.substr(cl + 16));
        if (c.received.size() >= head_end + 4 + length) return c.received.substr(head_end + 4, length);
      }
    }
    if (!c.read_some()) return "(incomplete: " + c.received + ")";
  }
}

std::string get(std::uint16_t port, const std::string& path) {
  Client c(port);
  EXPECT_TRUE(c.connected());
  c.send("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n");
  return read_body(c);
}

// serve --perturb: the ground truth at GET /perturbations, and the count
// per kind in tokenscope:perturbations_injected_total on /metrics.
TEST(ServerApp, PerturbationsAreServedWithTheirGroundTruthAndCounted) {
  engine::EngineSettings s;
  s.fixed_step_ms = 1.0;
  s.perturbations = engine::parse_perturbation_spec(
      "recompile:ms=2;tail:target=requests,fraction=1,dist=pareto,scale_ms=20,shape=3");
  s.perturbation_seed = 5;
  const auto eff = engine::resolve_engine(s, engine::Catalog::builtin());
  ServerAppSettings ss;
  ss.threads = 2;
  ServerApp app(eff, s, std::make_unique<engine::FixedCostModel>(1e-3), ss);
  app.start();
  {
    Client client(app.port());
    ASSERT_TRUE(client.connected());
    const std::string body = R"({"prompt": "x", "max_tokens": 4, "ignore_eos": true})";
    client.send(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
    const auto response = nlohmann::json::parse(read_body(client));
    ASSERT_EQ(response["usage"]["completion_tokens"], 4) << response;
  }
  const auto truth = nlohmann::json::parse(get(app.port(), "/perturbations"));
  EXPECT_EQ(truth["perturbation_seed"], 5);
  const auto& list = truth["perturbations"];
  ASSERT_EQ(list.size(), 2u) << truth;
  EXPECT_EQ(list[0]["kind"], "recompile");
  EXPECT_EQ(list[0]["ms"], 2.0);
  const auto recompiles = list[0]["injected"]["steps"].get<std::uint64_t>();
  EXPECT_GE(recompiles, 1u);
  EXPECT_EQ(list[0]["injected"]["extra_ms_total"], 2.0 * static_cast<double>(recompiles));
  EXPECT_EQ(list[1]["kind"], "tail");
  EXPECT_EQ(list[1]["target"], "requests");
  EXPECT_EQ(list[1]["injected"]["requests"], 1);  // fraction 1: the one request was held
  EXPECT_EQ(list[1]["injected"]["requests_seen"], 1);
  EXPECT_GE(list[1]["injected"]["extra_ms_total"].get<double>(), 20.0);  // at least scale_ms
  const std::string metrics = get(app.port(), "/metrics");
  const std::string labels = "{model_name=\"llama-3-8b\",engine=\"0\",kind=";
  EXPECT_NE(metrics.find("tokenscope:perturbations_injected_total" + labels + "\"recompile\"} " +
                         std::to_string(recompiles) + ".0\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("tokenscope:perturbations_injected_total" + labels + "\"tail\"} 1.0\n"),
            std::string::npos);
  EXPECT_NE(metrics.find("tokenscope:perturbations_injected_total" + labels + "\"leak\"} 0.0\n"),
            std::string::npos);
  EXPECT_EQ(app.metrics().value("tokenscope:perturbations_injected_total", "tail"), 1.0);
  // A server without perturbations: an empty list and zero counts.
  engine::EngineSettings plain;
  plain.fixed_step_ms = 1.0;
  ServerApp other(engine::resolve_engine(plain, engine::Catalog::builtin()), plain,
                  std::make_unique<engine::FixedCostModel>(1e-3), ServerAppSettings{});
  other.start();
  EXPECT_EQ(nlohmann::json::parse(get(other.port(), "/perturbations")),
            nlohmann::json::parse(R"({"perturbations": [], "perturbation_seed": null})"));
  other.stop();
  app.stop();
}

// What a cancelled timer's task holds is released when the io_context is
// polled after shutdown(), and the task never runs; later posts are dropped.
TEST(AsioExecutor, ShutdownCancelsPendingTimersAndReleasesTheirTasks) {
  boost::asio::io_context ioc;
  AsioExecutor executor(ioc);
  auto held = std::make_shared<int>(7);
  bool ran = false;
  executor.post_at(executor.clock().now_ns() + 3'600'000'000'000, [held, &ran] { ran = true; });
  EXPECT_EQ(executor.pending_timers(), 1u);
  EXPECT_EQ(held.use_count(), 2);
  executor.shutdown();
  ioc.poll();
  EXPECT_EQ(executor.pending_timers(), 0u);
  EXPECT_EQ(held.use_count(), 1);
  EXPECT_FALSE(ran);
  executor.post([&ran] { ran = true; });
  executor.post_at(0, [&ran] { ran = true; });
  ioc.restart();
  ioc.poll();
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace tokenscope::serve
