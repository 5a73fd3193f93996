// Black-box tests of `tokenscope serve`: the real binary on an ephemeral
// loopback port, driven by curl, by the official OpenAI npm client and by a
// raw socket client that timestamps what it receives.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "process.h"
#include "server.h"

namespace tokenscope::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
const std::string kNodeDir = TOKENSCOPE_SOURCE_DIR "/tests/blackbox/node";

std::int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A blocking loopback socket with a receive timeout.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawClient() { ::close(fd_); }
  bool connected() const { return connected_; }
  void send(const std::string& s) {
    EXPECT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
  }
  // Reads until the peer closes (or the timeout); calls on_data with each read and its time.
  std::string read_all(const std::function<void(std::string_view, std::int64_t)>& on_data = nullptr) {
    std::string all;
    char buf[65536];
    while (true) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      const std::int64_t t = monotonic_ns();
      all.append(buf, static_cast<std::size_t>(n));
      if (on_data) on_data(std::string_view(buf, static_cast<std::size_t>(n)), t);
    }
    return all;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::string post(const std::string& path, const std::string& body, const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

class Serve : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tokenscope_serve_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  ProcessResult curl(std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/curl", "-sS", "--max-time", "30"});
    return run_process(args, 60);
  }
  fs::path dir_;
};

TEST_F(Serve, CurlCompletionsChatStreamingAndMetrics) {
  Server server(dir_, {"--api-key", "k1"});
  const std::string auth = "Authorization: Bearer k1";
  const auto c = curl({"-H", auth, "-d", R"({"prompt": "Hello there", "max_tokens": 6, "ignore_eos": true})",
                       server.url("/v1/completions")});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const auto j = json::parse(c.out);
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");

  const auto s =
      curl({"-N", "-H", auth, "-d",
            R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "ignore_eos": true,
                           "stream": true, "stream_options": {"include_usage": true}})",
            server.url("/v1/chat/completions")});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  std::vector<std::string> events;
  std::istringstream lines(s.out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("data: ", 0) == 0) events.push_back(line.substr(6));
  ASSERT_EQ(events.size(), 8u) << s.out;  // role, 5 tokens, usage, [DONE]
  EXPECT_EQ(json::parse(events[0])["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(json::parse(events[5])["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(json::parse(events[6])["usage"]["completion_tokens"], 5);
  EXPECT_EQ(events[7], "[DONE]");

  const auto unauthorized = curl({"-o", "/dev/null", "-w", "%{http_code}", server.url("/v1/models")});
  EXPECT_EQ(unauthorized.out, "401");
  EXPECT_EQ(curl({"-o", "/dev/null", "-w", "%{http_code}", server.url("/health")}).out, "200");
  const auto metrics = curl({"-H", auth, server.url("/metrics")});
  EXPECT_NE(metrics.out.find("vllm:generation_tokens_total{model_name=\"llama-3-8b\",engine=\"0\"} 11.0"),
            std::string::npos)
      << metrics.out.substr(0, 2000);
  const auto stopped = server.stop(SIGTERM);
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
}

TEST_F(Serve, ErrorsAndLimitsOverTheWire) {
  Server server(dir_, {"--max-body-bytes", "2000", "--max-header-bytes", "1000"});
  auto code = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"-o", (dir_ / "body").string(), "-w", "%{http_code}"});
    const auto r = curl(args);
    return std::make_pair(r.out, slurp(dir_ / "body"));
  };
  auto [c404, b404] = code({"-d", R"({"model": "gpt-x", "prompt": "a"})", server.url("/v1/completions")});
  EXPECT_EQ(c404, "404");
  EXPECT_EQ(json::parse(b404)["error"]["param"], "model");
  auto [c400, b400] = code({"-d", "{oops", server.url("/v1/completions")});
  EXPECT_EQ(c400, "400");
  EXPECT_EQ(json::parse(b400)["error"]["type"], "invalid_request_error");
  auto [c413, b413] =
      code({"-d", json{{"prompt", std::string(5000, 'a')}}.dump(), server.url("/v1/completions")});
  EXPECT_EQ(c413, "413");
  EXPECT_NE(b413.find("larger than 2000 bytes"), std::string::npos);
  auto [c431, b431] = code({"-H", "X-Big: " + std::string(3000, 'b'), server.url("/health")});
  EXPECT_EQ(c431, "431");
  auto [clong, blong] = code({"-d", R"({"prompt": "a", "max_tokens": 9000})", server.url("/v1/completions")});
  EXPECT_EQ(clong, "400");
  EXPECT_NE(blong.find("maximum context length"), std::string::npos);
}

// The npm package is part of the test set-up (scripts/setup.sh installs it,
// and a failed install stops the set-up): without it the test fails rather
// than skips, so a CI that lost it cannot pass silently.
TEST_F(Serve, OfficialOpenAiClientAcceptsTheServer) {
  ASSERT_TRUE(fs::exists(kNodeDir + "/node_modules/openai"))
      << "the npm package 'openai' is not installed in " << kNodeDir
      << ": run scripts/setup.sh (npm ci in that folder)";
  Server server(dir_, {"--api-key", "k2"});
  const auto r = run_process({"/usr/bin/node", kNodeDir + "/openai_client.mjs", server.url("/v1"), "k2"}, 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["models"][0], "llama-3-8b");
  EXPECT_EQ(j["completion"]["usage"]["completion_tokens"], 7);
  EXPECT_EQ(j["chat"]["role"], "assistant");
  EXPECT_EQ(j["chat"]["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["stream"]["deltas"].size(), 6u);
  EXPECT_EQ(j["stream"]["role"], "assistant");
  EXPECT_EQ(j["stream"]["finish"], "length");
  EXPECT_EQ(j["stream"]["usage"]["completion_tokens"], 6);
  EXPECT_EQ(j["text_stream"].size(), 4u);
  EXPECT_EQ(j["error"]["status"], 404);
  EXPECT_EQ(j["error"]["param"], "model");
  EXPECT_EQ(j["n_error"]["status"], 400);
}

// The official OpenAI client's tool runner loops against serve (a model
// that calls tools for 2 rounds, then answers): it parses every call's
// arguments, runs the function and sends the result back, whole and
// streamed (the client assembles the streamed deltas itself); parse()
// reads a json_schema answer.
TEST_F(Serve, OfficialOpenAiClientRunsToolsAndParsesStructuredOutputs) {
  ASSERT_TRUE(fs::exists(kNodeDir + "/node_modules/openai"))
      << "the npm package 'openai' is not installed in " << kNodeDir
      << ": run scripts/setup.sh (npm ci in that folder)";
  Server server(dir_, {"--tool-call-prob", "1", "--tool-rounds", "2", "--parallel-tool-calls", "2",
                       "--fixed-step-ms", "1"});
  const auto r =
      run_process({"/usr/bin/node", kNodeDir + "/openai_tools.mjs", server.url("/v1"), "llama-3-8b"}, 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  for (const char* k : {"loop", "stream_loop"}) {
    const auto& l = j[k];
    EXPECT_EQ(l["requests"], 3) << k;  // 2 rounds of calls, then the answer
    EXPECT_EQ(l["finishes"], json({"tool_calls", "tool_calls", "stop"})) << k;
    EXPECT_GE(l["calls"].size(), 2u) << k;
    EXPECT_EQ(l["tool_messages"], l["calls"].size()) << k;
    for (const auto& c : l["calls"]) {
      EXPECT_TRUE(c["city"].is_string()) << c;
      EXPECT_TRUE(c["unit"] == "c" || c["unit"] == "f") << c;
    }
    EXPECT_FALSE(l["content"].get<std::string>().empty()) << k;
  }
  // The same conversation, the same calls, streamed or not.
  EXPECT_EQ(j["loop"]["calls"], j["stream_loop"]["calls"]);
  EXPECT_TRUE(j["parsed"]["name"].is_string());
  EXPECT_TRUE(j["parsed"]["age"].is_number_integer());
}

// The official OpenAI client uploads audio (its own multipart encoding) to
// /v1/audio/transcriptions of a serve with an audio model: json with token
// usage (the audio's 25 tokens a second), verbose_json with the duration,
// a stream of text deltas, and a file that is no WAV refused naming "file".
TEST_F(Serve, OfficialOpenAiClientTranscribes) {
  ASSERT_TRUE(fs::exists(kNodeDir + "/node_modules/openai"))
      << "the npm package 'openai' is not installed in " << kNodeDir
      << ": run scripts/setup.sh (npm ci in that folder)";
  Server server(dir_, {"--model", "qwen2-audio-7b", "--fixed-step-ms", "1"});
  const auto r = run_process(
      {"/usr/bin/node", kNodeDir + "/openai_transcription.mjs", server.url("/v1"), "qwen2-audio-7b"}, 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = json::parse(r.out);
  EXPECT_FALSE(j["json"]["text"].get<std::string>().empty());
  EXPECT_EQ(j["json"]["usage"]["input_token_details"]["audio_tokens"], 50);  // 2 s
  EXPECT_EQ(j["json"]["usage"]["output_tokens"], 7);                         // ceil(3.25 x 2)
  EXPECT_EQ(j["verbose"]["duration"], 3.0);
  EXPECT_EQ(j["verbose"]["segments"], 1);
  EXPECT_EQ(j["stream"].size(), 7u);
  EXPECT_EQ(j["error"]["status"], 400);
  EXPECT_EQ(j["error"]["param"], "file");
  const std::string metrics = http_get(server.port(), "/metrics");
  EXPECT_NE(
      metrics.find("tokenscope:audio_input_seconds_total{model_name=\"qwen2-audio-7b\",engine=\"0\"} 7.0"),
      std::string::npos);
}

// Every token the engine emitted reaches the client, in order, after its
// engine time; the lag distribution itself is measured in benchmarks/.
TEST_F(Serve, ClientSeesEveryEmittedTokenAfterItsEngineTime) {
  const auto trace = dir_ / "emissions.jsonl";
  Server server(dir_, {"--trace-emissions", trace.string()});
  RawClient client(server.port());
  ASSERT_TRUE(client.connected());
  const int n = 40;
  client.send(
      post("/v1/completions",
           json{{"prompt", "timing"}, {"max_tokens", n}, {"ignore_eos", true}, {"stream", true}}.dump()));
  std::vector<std::int64_t> received;  // per token event
  std::string pending;
  client.read_all([&](std::string_view data, std::int64_t t) {
    pending.append(data);
    std::size_t pos;
    while ((pos = pending.find("data: {")) != std::string::npos) {
      const std::size_t end = pending.find("\n\n", pos);
      if (end == std::string::npos) break;
      received.push_back(t);
      pending.erase(0, end + 2);
    }
  });
  server.stop(SIGTERM);
  std::vector<std::int64_t> engine_times;
  std::ifstream in(trace);
  for (std::string line; std::getline(in, line);) {
    const auto e = json::parse(line);
    if (e.contains("resp")) continue;  // the request's own line
    EXPECT_EQ(e["i"].get<int>(), static_cast<int>(engine_times.size()));
    EXPECT_GE(e["write_ns"].get<std::int64_t>(), e["engine_ns"].get<std::int64_t>());
    engine_times.push_back(e["engine_ns"].get<std::int64_t>());
  }
  ASSERT_EQ(engine_times.size(), static_cast<std::size_t>(n));
  ASSERT_EQ(received.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_GE(received[i], engine_times[i]) << i;
    if (i > 0) {
      EXPECT_GT(engine_times[i], engine_times[i - 1]);
    }
  }
}

TEST_F(Serve, GracefulShutdownEndsLongStreamsWithAnErrorEvent) {
  Server server(dir_, {"--shutdown-grace-s", "0.2", "--fixed-step-ms", "5"});
  RawClient client(server.port());
  client.send(
      post("/v1/completions", R"({"prompt": "x", "max_tokens": 5000, "ignore_eos": true, "stream": true})"));
  std::string seen;
  bool signalled = false;
  std::unique_ptr<ProcessResult> result;
  const std::string all = client.read_all([&](std::string_view d, std::int64_t) {
    seen.append(d);
    if (!signalled && seen.find("data: {", 0) != std::string::npos) {
      signalled = true;
      result = std::make_unique<ProcessResult>(server.stop(SIGTERM));
    }
  });
  ASSERT_TRUE(result);
  EXPECT_EQ(result->exit_code, 0) << result->err;
  EXPECT_NE(all.find("shutting down"), std::string::npos);
  EXPECT_NE(all.find("\r\n0\r\n\r\n"), std::string::npos);  // the chunked body was terminated
}

// SIGTERM while an injected stall (6 s) outlasts the grace period and the
// 2 s linger: the stall's timer, which holds the stream and its connection,
// is cancelled and released before the server goes, and the process exits
// 0 (under AddressSanitizer it reported a heap-use-after-free at exit).
TEST_F(Serve, SigtermWhileAStallOutlastsTheLingerExitsCleanly) {
  Server server(dir_, {"--shutdown-grace-s", "0", "--fixed-step-ms", "1", "--faults", "stall=1@6000"});
  RawClient client(server.port());
  client.send(
      post("/v1/completions", R"({"prompt": "x", "max_tokens": 10, "ignore_eos": true, "stream": true})"));
  const std::string stalled =
      "tokenscope:faults_injected_total{model_name=\"llama-3-8b\",engine=\"0\",kind=\"stall\"} 1";
  std::string seen;
  std::unique_ptr<ProcessResult> result;
  client.read_all([&](std::string_view d, std::int64_t) {
    seen.append(d);
    std::size_t events = 0;
    for (std::size_t p = seen.find("data: {"); p != std::string::npos; p = seen.find("data: {", p + 1))
      ++events;
    if (!result && events >= 4) {  // tokens 1-4; the 5th stalls
      for (int i = 0; i < 100 && curl({server.url("/metrics")}).out.find(stalled) == std::string::npos; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      result = std::make_unique<ProcessResult>(server.stop(SIGTERM));
    }
  });
  ASSERT_TRUE(result);
  EXPECT_EQ(result->exit_code, 0) << result->err;
  EXPECT_NE(seen.find("shutting down"), std::string::npos) << seen;
}

TEST_F(Serve, ConnectionLimitAnswers503WithRetryAfter) {
  Server server(dir_, {"--max-connections", "2"});
  RawClient a(server.port()), b(server.port());
  ASSERT_TRUE(a.connected() && b.connected());
  a.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");  // both connections are open and counted
  b.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  RawClient c(server.port());
  const std::string refused = c.read_all();
  EXPECT_EQ(refused.rfind("HTTP/1.1 503 ", 0), 0u) << refused;
  EXPECT_NE(refused.find("Retry-After: 1"), std::string::npos);
}

TEST_F(Serve, SlowClientGets408) {
  Server server(dir_, {"--header-timeout-s", "0.3"});
  RawClient slow(server.port());
  slow.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le");
  const auto t0 = monotonic_ns();
  const std::string out = slow.read_all();
  EXPECT_EQ(out.rfind("HTTP/1.1 408 ", 0), 0u) << out;
  EXPECT_LT(monotonic_ns() - t0, 5'000'000'000);
}

TEST_F(Serve, BadOptionsExitWithCode2) {
  const auto r = run_process({kBin, "serve", "--faults", "explode=1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown kind 'explode'"), std::string::npos);
  const auto taken = run_process({kBin, "serve", "--host", "not-an-ip"});
  EXPECT_EQ(taken.exit_code, 2);
}

}  // namespace
}  // namespace tokenscope::testing
