// Black-box tests of `tokenscope bench` against a real llama.cpp server
// (llama-server with a tiny random-weight model; see llama_server.h). The
// client's records must account exactly for what the server counted: output
// tokens against llamacpp:tokens_predicted_total, prompt tokens against
// llamacpp:prompt_tokens_total and the server's log (which says how many of
// each prompt's tokens came from its prompt cache), requests and outcomes.
//
// Run only these: ctest --test-dir build/release -R '^Llama\.'
// (with the variables scripts/test.sh exports; see docs/testing.md).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "llama_server.h"
#include "process.h"
#include "server.h"

namespace tokenscope::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
const std::string kBin = TOKENSCOPE_BINARY;
using Metrics = std::map<std::string, double>;

const char* kPredicted = "llamacpp:tokens_predicted_total";
const char* kPrompt = "llamacpp:prompt_tokens_total";

class Llama : public ::testing::Test {
 protected:
  void SetUp() override {
    peer_ = LlamaPeer::from_environment();
    TOKENSCOPE_REQUIRE_LLAMA(peer_);
    dir_ = fs::temp_directory_path() / ("tokenscope_llama_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    // Kept when a test failed: the server's log and the run directory are the evidence.
    if (dir_.empty()) return;  // skipped or failed in SetUp
    if (!HasFailure())
      fs::remove_all(dir_);
    else
      std::cout << "kept for inspection: " << dir_ << "\n";
  }
  std::unique_ptr<LlamaServer> start(LlamaServerOptions o = {}, bool gpt2 = false,
                                     const std::string& name = "server") {
    return std::make_unique<LlamaServer>(dir_ / name, peer_.server, gpt2 ? peer_.model_gpt2 : peer_.model,
                                         std::move(o));
  }
  // Runs bench against the server, bounded.
  ProcessResult bench(const LlamaServer& s, std::vector<std::string> args, double timeout_s = 120) {
    args.insert(args.begin(), {kBin, "bench", "--progress", "none", "--target", s.url()});
    return run_process(args, timeout_s);
  }
  static std::vector<json> lines(const fs::path& p) {
    std::vector<json> out;
    std::ifstream in(p);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) out.push_back(json::parse(line));
    return out;
  }
  static std::string describe(const ProcessResult& r) {
    return "exit " + std::to_string(r.exit_code) + " signal " + std::to_string(r.term_signal) +
           "\nstderr: " + r.err.substr(0, 4000) + "\nstdout: " + r.out.substr(0, 4000);
  }
  static std::map<std::string, int> outcomes(const std::vector<json>& recs) {
    std::map<std::string, int> n;
    for (const auto& r : recs) ++n[r.value("outcome", "?")];
    return n;
  }
  // The server's log is written by a background thread: wait (bounded) until
  // it tells of `n` finished requests.
  static std::vector<LlamaLoggedRequest> logged_requests(const LlamaServer& s, std::size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    auto got = s.log_requests();
    while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      got = s.log_requests();
    }
    return got;
  }

  // The exact accounting every run against a fresh server must satisfy:
  // the ok records' tokens equal the server's counters' changes, and every
  // request the server finished is an ok record.
  void expect_exact_accounting(const LlamaServer& s, const Metrics& before, const Metrics& after,
                               const std::vector<json>& recs, const char* what) {
    SCOPED_TRACE(what);
    long output = 0, output_client = 0, prompt = 0;
    int ok = 0;
    bool client_counted = true;  // whole responses have no events to count (-1)
    for (const auto& r : recs) {
      if (r["outcome"] != "ok") continue;
      ++ok;
      output += r["output_tokens"].get<long>();
      const long own = r.value("output_tokens_client", -1L);
      client_counted = client_counted && own >= 0;
      output_client += own;
      prompt += r["prompt_tokens"].get<long>();
    }
    const auto logged = logged_requests(s, static_cast<std::size_t>(ok));
    long logged_prompt = 0, logged_evaluated = 0, logged_generated = 0;
    for (const auto& l : logged) {
      logged_prompt += l.prompt_tokens;
      logged_evaluated += l.evaluated_tokens;
      logged_generated += l.generated_tokens;
    }
    const long d_predicted = std::lround(metric_delta(before, after, kPredicted));
    const long d_prompt = std::lround(metric_delta(before, after, kPrompt));
    std::cout << what << ": " << ok << " ok of " << recs.size() << "; output tokens client " << output
              << " (own count " << output_client << "), server " << d_predicted << "; prompt tokens client "
              << prompt << ", server evaluated " << d_prompt << " (+ " << (logged_prompt - logged_evaluated)
              << " from its prompt cache, per its log)\n";
    // Requests: the server finished exactly the requests the client recorded as ok.
    EXPECT_EQ(logged.size(), static_cast<std::size_t>(ok)) << "requests the server finished (its log)";
    // Output tokens: usage.completion_tokens summed = what the server generated.
    EXPECT_EQ(output, d_predicted) << "sum of output_tokens vs delta " << kPredicted;
    // The client's own count is of output events: llama-server holds back a
    // token that ends inside a UTF-8 character and sends it with the next one
    // (random weights pick byte tokens now and then), so an event can carry
    // two tokens and the count can be lower than usage, never higher.
    if (client_counted) {
      EXPECT_LE(output_client, output) << "the client's own count of output events vs usage";
    }
    // Prompt tokens: usage.prompt_tokens summed = the prompts the server took;
    // the server's counter has those minus the tokens reused from its cache.
    EXPECT_EQ(prompt, logged_prompt) << "sum of prompt_tokens vs the prompts in the server's log";
    EXPECT_EQ(d_prompt, logged_evaluated)
        << "delta " << kPrompt << " vs tokens evaluated per the server's log";
    EXPECT_EQ(prompt - (logged_prompt - logged_evaluated), d_prompt)
        << "sum of prompt_tokens minus cached tokens vs delta " << kPrompt;
    EXPECT_EQ(logged_generated, d_predicted) << "the server's log vs its counter";
    // Nothing left running on the server.
    EXPECT_EQ(after.at("llamacpp:requests_processing"), 0);
    EXPECT_EQ(after.at("llamacpp:requests_deferred"), 0);
  }

  // A run where every request must succeed: exit 0, a complete run directory,
  // every planned request ok with its planned output, the summary consistent.
  void expect_all_ok(const ProcessResult& r, const fs::path& out, std::size_t planned, int output_len) {
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    ASSERT_TRUE(fs::exists(out / "run.json")) << describe(r);
    const auto run = json::parse(slurp(out / "run.json"));
    const auto recs = lines(out / "requests.jsonl");
    EXPECT_EQ(run["partial"], false);
    EXPECT_EQ(recs.size(), planned);
    const auto n = outcomes(recs);
    EXPECT_EQ(n.count("ok") ? n.at("ok") : 0, static_cast<int>(planned)) << json(n).dump();
    for (const auto& rec : recs)
      if (rec["outcome"] == "ok") {
        EXPECT_EQ(rec["output_tokens"], output_len) << rec.dump().substr(0, 600);  // ignore_eos + max_tokens
        EXPECT_GT(rec["prompt_tokens"].get<int>(), 0);
        // Streamed: the usage count spread over the events (an event may carry several tokens).
        if (rec.contains("event_tokens")) {
          const auto& et = rec["event_tokens"];
          EXPECT_EQ(
              std::accumulate(et.begin(), et.end(), 0, [](int a, const json& b) { return a + b.get<int>(); }),
              output_len)
              << rec.dump().substr(0, 600);
          EXPECT_EQ(et.size(), rec["event_offsets_ns"].size());
        } else if (rec.value("output_tokens_client", -1) >= 0) {
          EXPECT_EQ(rec["event_offsets_ns"].size(), static_cast<std::size_t>(output_len));
        }
      } else {
        ADD_FAILURE() << "request not ok: " << rec.dump().substr(0, 800);
      }
    const auto& s = run["summary"];
    EXPECT_EQ(s["requests_total"].get<std::size_t>(), planned);
    EXPECT_EQ(s["requests_completed"].get<std::size_t>(), planned);
    EXPECT_EQ(s["requests_failed"], 0);
    EXPECT_EQ(s["output_tokens_total"].get<long>(), static_cast<long>(planned) * output_len);
    // output_token_mismatches counts requests whose events carried more than one token: not asserted.
    EXPECT_EQ(run["client"]["requests_not_sent"], 0);
  }

  LlamaPeer peer_;
  fs::path dir_;
};

// Streaming completions: every request ok; tokens equal the server's counters.
TEST_F(Llama, StreamingCompletionsMatchTheServersCounters) {
  auto s = start();
  const auto before = s->metrics();
  const auto out = dir_ / "run";
  const auto r = bench(*s, {"--model", "tiny", "--api", "completions", "--num-requests", "24", "--rate", "20",
                            "--input-len", "fixed:64", "--output-len", "fixed:16", "--out", out.string()});
  expect_all_ok(r, out, 24, 16);
  expect_exact_accounting(*s, before, s->metrics(), lines(out / "requests.jsonl"), "completions, stream");
}

// The same with the GPT-2 byte-level BPE vocabulary (another tokenizer, and
// no BOS token added).
TEST_F(Llama, StreamingCompletionsWithTheGpt2Vocabulary) {
  auto s = start({}, /*gpt2=*/true);
  const auto before = s->metrics();
  const auto out = dir_ / "run";
  const auto r = bench(*s, {"--model", "tiny", "--api", "completions", "--num-requests", "16", "--rate", "20",
                            "--input-len", "fixed:64", "--output-len", "fixed:16", "--out", out.string()});
  expect_all_ok(r, out, 16, 16);
  expect_exact_accounting(*s, before, s->metrics(), lines(out / "requests.jsonl"),
                          "completions, gpt-2 vocab");
}

// Streaming chat: the chat template (Llama 2's, stored in the model) adds
// its tokens to usage.prompt_tokens; role-only chunks carry no token.
TEST_F(Llama, StreamingChatMatchesTheServersCounters) {
  auto s = start();
  const auto before = s->metrics();
  const auto out = dir_ / "run";
  const auto r = bench(*s, {"--model", "tiny", "--api", "chat", "--num-requests", "24", "--rate", "20",
                            "--input-len", "fixed:64", "--output-len", "fixed:16", "--out", out.string()});
  expect_all_ok(r, out, 24, 16);
  expect_exact_accounting(*s, before, s->metrics(), lines(out / "requests.jsonl"), "chat, stream");
}

// Whole responses (Content-Length bodies): completions and chat.
TEST_F(Llama, NonStreamingMatchesTheServersCounters) {
  for (const char* api : {"completions", "chat"}) {
    auto s = start({}, false, std::string("server-") + api);  // a fresh server: its log is this run's
    const auto before = s->metrics();
    const auto out = dir_ / (std::string("run-") + api);
    const auto r =
        bench(*s, {"--model", "tiny", "--api", api, "--no-stream", "--num-requests", "24", "--rate", "20",
                   "--input-len", "fixed:64", "--output-len", "fixed:16", "--out", out.string()});
    expect_all_ok(r, out, 24, 16);
    expect_exact_accounting(*s, before, s->metrics(), lines(out / "requests.jsonl"),
                            (std::string(api) + ", whole responses").c_str());
  }
}

// No --model: bench asks GET /v1/models (llama-server answers with the model
// file's path). Repeated, because it failed intermittently with "invalid HTTP
// response: body limit exceeded" (when the response's head arrives in a read
// of its own; see docs/testing.md).
TEST_F(Llama, ModelDiscoveryRepeated) {
  auto s = start();
  int failures = 0;
  std::string first_failure;
  const int runs = 30;
  for (int i = 0; i < runs; ++i) {
    const auto out = dir_ / ("run-" + std::to_string(i));
    const auto r = bench(*s,
                         {"--num-requests", "2", "--rate", "50", "--input-len", "fixed:16", "--output-len",
                          "fixed:4", "--out", out.string(), "--quiet"},
                         60);
    bool ok = r.exit_code == 0 && fs::exists(out / "run.json");
    if (ok) {
      const auto run = json::parse(slurp(out / "run.json"));
      ok = run["settings"]["effective"]["target"]["model"] == peer_.model &&
           run["summary"]["requests_completed"] == 2;
    }
    if (!ok && failures++ == 0) first_failure = "iteration " + std::to_string(i) + ": " + describe(r);
  }
  EXPECT_EQ(failures, 0) << "of " << runs << " runs; first: " << first_failure;
}

// 200 requests at t = 0 against 4 slots (a trace with every offset 0): all
// complete, and the client opens no more connections than it has requests.
TEST_F(Llama, BurstOf200AtOnce) {
  auto s = start({.context_tokens = 4096, .slots = 4, .extra = {}});
  const auto trace = dir_ / "burst.jsonl";
  {
    std::ofstream f(trace);
    for (int i = 0; i < 200; ++i) f << "{\"t_ms\": 0, \"input_tokens\": 32, \"output_tokens\": 8}\n";
  }
  const auto before = s->metrics();
  const auto out = dir_ / "run";
  const auto r = bench(
      *s, {"--model", "tiny", "--trace", trace.string(), "--timeout-s", "200", "--out", out.string()}, 250);
  expect_all_ok(r, out, 200, 8);
  if (fs::exists(out / "run.json")) {
    const auto run = json::parse(slurp(out / "run.json"));
    std::cout << "client: " << run["client"].dump() << "\n";
    EXPECT_LE(run["client"]["connections_opened"].get<int>(), 200) << run["client"].dump();
  }
  expect_exact_accounting(*s, before, s->metrics(), lines(out / "requests.jsonl"), "burst of 200");
}

// Closed loop where the server closes the connection after every response:
// llama-server does that after every streamed response (its chunked content
// provider ends by returning false, which cpp-httplib takes as "close"; no
// `Connection: close` header is sent, the socket is just closed). The client
// must not lose a request to a dead kept-alive connection, and each
// connection carries exactly one request.
TEST_F(Llama, ClosedLoopTheServerClosesAfterEveryStream) {
  auto s = start();
  const auto before = s->metrics();
  const auto out = dir_ / "run";
  const auto r = bench(*s, {"--model", "tiny", "--concurrency", "4", "--num-requests", "40", "--input-len",
                            "fixed:32", "--output-len", "fixed:16", "--out", out.string()});
  expect_all_ok(r, out, 40, 16);
  if (fs::exists(out / "run.json")) {
    const auto run = json::parse(slurp(out / "run.json"));
    std::cout << "client: " << run["client"].dump() << "\n";
    EXPECT_EQ(run["client"]["connections_opened"], 40) << run["client"].dump();
  }
  expect_exact_accounting(*s, before, s->metrics(), lines(out / "requests.jsonl"), "closed loop, stream");
}

// Whole responses are kept alive by llama-server (cpp-httplib: up to 100
// requests a connection, 5 s idle), and it has no switch to stop that; it
// closes after answering a request that says `Connection: close`, which
// bench sends with --header: one connection per request, nothing resent.
TEST_F(Llama, ClosedLoopWholeResponsesWithConnectionClose) {
  auto s = start();
  const auto before = s->metrics();
  const auto out = dir_ / "run";
  const auto r = bench(*s, {"--model", "tiny", "--concurrency", "4", "--num-requests", "40", "--no-stream",
                            "--header", "Connection: close", "--input-len", "fixed:32", "--output-len",
                            "fixed:16", "--out", out.string()});
  expect_all_ok(r, out, 40, 16);
  if (fs::exists(out / "run.json")) {
    const auto run = json::parse(slurp(out / "run.json"));
    std::cout << "client: " << run["client"].dump() << "\n";
    EXPECT_EQ(run["client"]["connections_opened"], 40) << run["client"].dump();
    EXPECT_EQ(run["client"]["resent_after_stale_connection"], 0) << run["client"].dump();
  }
  expect_exact_accounting(*s, before, s->metrics(), lines(out / "requests.jsonl"),
                          "closed loop, whole, Connection: close");
}

// Closed loop with whole responses and think times past llama-server's 5 s
// keep-alive: the server closes each idle connection before the user's next
// request, so the client must notice the close (or resend once) rather than
// fail the request.
TEST_F(Llama, ClosedLoopPastTheServersKeepAliveTimeout) {
  auto s = start();
  const auto before = s->metrics();
  const auto out = dir_ / "run";
  const auto r =
      bench(*s, {"--model", "tiny", "--concurrency", "2", "--think-ms", "5300", "--num-requests", "4",
                 "--no-stream", "--input-len", "fixed:32", "--output-len", "fixed:8", "--out", out.string()});
  expect_all_ok(r, out, 4, 8);
  if (fs::exists(out / "run.json"))
    std::cout << "client: " << json::parse(slurp(out / "run.json"))["client"].dump() << "\n";
  expect_exact_accounting(*s, before, s->metrics(), lines(out / "requests.jsonl"),
                          "closed loop, idle closes");
}

// A prompt longer than the context with --no-context-shift: llama-server
// answers 200 and then an in-stream error event
//   error: {"code":400,"message":"the request exceeds the available context size.
//   ...","type":"invalid_request_error"}
// followed by [DONE]. The request is an http_error with the server's message.
TEST_F(Llama, PromptLongerThanTheContextIsAnHttpErrorWithTheServersMessage) {
  auto s = start({.context_tokens = 512, .slots = 1, .extra = {"--no-context-shift"}});
  const auto before = s->metrics();
  const std::string message = "the request exceeds the available context size";
  for (const bool stream : {true, false}) {
    const auto out = dir_ / (stream ? "stream" : "whole");
    std::vector<std::string> args = {"--model",      "tiny",     "--num-requests", "3",
                                     "--rate",       "10",       "--input-len",    "fixed:1024",
                                     "--output-len", "fixed:16", "--out",          out.string()};
    if (!stream) args.push_back("--no-stream");
    const auto r = bench(*s, args);
    // Failed requests are data in the records; every request failing fails the run (exit 1).
    ASSERT_EQ(r.exit_code, 1) << describe(r);
    EXPECT_NE(r.err.find("3 of 3 requests"), std::string::npos) << describe(r);
    EXPECT_NE(r.err.find(message), std::string::npos) << describe(r);
    const auto recs = lines(out / "requests.jsonl");
    ASSERT_EQ(recs.size(), 3u);
    for (const auto& rec : recs) {
      EXPECT_EQ(rec["outcome"], "http_error")
          << (stream ? "stream: " : "whole: ") << rec.dump().substr(0, 800);
      EXPECT_NE(rec.value("detail", "").find(message), std::string::npos)
          << (stream ? "stream: " : "whole: ") << rec.dump().substr(0, 800);
    }
    const auto run = json::parse(slurp(out / "run.json"));
    EXPECT_EQ(run["summary"]["requests_failed"], 3);
    EXPECT_EQ(run["summary"]["requests_completed"], 0);
  }
  // The server refused all six: nothing generated, nothing evaluated.
  const auto after = s->metrics();
  EXPECT_EQ(metric_delta(before, after, kPredicted), 0);
  EXPECT_EQ(metric_delta(before, after, kPrompt), 0);
  EXPECT_EQ(s->log_prompts().size(), 6u) << "requests that reached the server's slot";
}

// The server killed (SIGKILL) mid-run: bench ends by itself, the run
// directory is complete and every planned request is accounted for.
TEST_F(Llama, ServerKilledMidRunEveryRequestIsAccountedFor) {
  auto s = start({.context_tokens = 4096, .slots = 2, .extra = {}});
  const auto out = dir_ / "run";
  const int planned = 60;
  Child bench_child({kBin,        "bench",       "--progress",  "none",           "--target",
                     s->url(),    "--model",     "tiny",        "--num-requests", std::to_string(planned),
                     "--rate",    "10",          "--input-len", "fixed:32",       "--output-len",
                     "fixed:128", "--timeout-s", "30",          "--out",          out.string()},
                    (dir_ / "bench.out").string(), (dir_ / "bench.err").string());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         (!fs::exists(out / "requests.jsonl") || lines(out / "requests.jsonl").size() < 8))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // Kill it while it streams (bounded wait for a busy slot).
  for (int i = 0; i < 200 && s->metrics().at("llamacpp:requests_processing") == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  s->kill();
  // Bounded: 50 s of planned sends remain at most; SIGKILLed at 120 s.
  const auto r = bench_child.wait(120);
  ASSERT_EQ(r.term_signal, 0) << "bench did not end by itself: " << describe(r);
  // Most requests failed once the server was gone: the run fails, with every result kept.
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_NE(r.err.find("requests to"), std::string::npos) << describe(r);
  ASSERT_TRUE(fs::exists(out / "run.json")) << describe(r);
  const auto run = json::parse(slurp(out / "run.json"));
  const auto recs = lines(out / "requests.jsonl");
  const auto n = outcomes(recs);
  const int not_sent = run["client"]["requests_not_sent"].get<int>();
  std::cout << "outcomes " << json(n).dump() << ", not sent " << not_sent << "\n";
  EXPECT_EQ(run["partial"], false);
  EXPECT_GE(n.count("ok") ? n.at("ok") : 0, 8);
  EXPECT_EQ(static_cast<int>(recs.size()) + not_sent, planned) << "ok + failed + not sent = planned";
  const auto& sum = run["summary"];
  EXPECT_EQ(sum["requests_total"].get<int>(), static_cast<int>(recs.size()));
  EXPECT_EQ(sum["requests_completed"].get<int>() + sum["requests_failed"].get<int>(),
            static_cast<int>(recs.size()));
  int cut_mid_stream = 0;
  for (const auto& rec : recs) {
    if (rec["outcome"] == "ok") {
      EXPECT_EQ(rec["output_tokens"], 128);
    } else {
      cut_mid_stream += rec["event_offsets_ns"].empty() ? 0 : 1;
      // Reset mid-stream or refused: connect_error, with what arrived before it.
      EXPECT_EQ(rec["outcome"], "connect_error") << rec.dump().substr(0, 600);
      EXPECT_FALSE(rec.value("detail", "").empty());
    }
  }
  std::cout << "requests cut mid-stream: " << cut_mid_stream << "\n";
}

// Nothing listening on the target's port: bench says so, naming the URL, and
// exits non-zero (with --model, and without it when it asks /v1/models).
TEST_F(Llama, NothingListeningFailsClearlyNamingTheUrl) {
  // A port the kernel just handed out and that nothing listens on now.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  for (const bool with_model : {false, true}) {
    std::vector<std::string> args = {kBin,
                                     "bench",
                                     "--progress",
                                     "none",
                                     "--target",
                                     url,
                                     "--num-requests",
                                     "3",
                                     "--rate",
                                     "10",
                                     "--input-len",
                                     "fixed:8",
                                     "--output-len",
                                     "fixed:4",
                                     "--out",
                                     (dir_ / (with_model ? "with-model" : "discover")).string()};
    if (with_model) args.insert(args.end(), {"--model", "tiny"});
    const auto r = run_process(args, 60);
    SCOPED_TRACE(with_model ? "--model given" : "model discovery");
    EXPECT_EQ(r.term_signal, 0) << describe(r);
    EXPECT_NE(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.err.find(url), std::string::npos) << describe(r);
  }
}

// Planned prompt lengths against what llama-server counted. The server's
// usage.prompt_tokens is the tokenizer's truth; /tokenize of the prompt as
// the slot holds it (GET /slots) cross-checks it. The ratios are printed and
// recorded as test properties.
//
// TARGET, NOT YET MET (client work in progress): without a tokenizer the
// client's prompts must come within 3% of the planned length (with
// --tokenizer, exactly). Today they are 2.3-2.7x too long; this test fails
// until that is fixed.
TEST_F(Llama, PromptLengthsMatchThePlan) {
  for (const bool gpt2 : {false, true}) {
    auto s = start({.context_tokens = 8192, .slots = 1, .extra = {"--slots"}}, gpt2,
                   gpt2 ? "server-gpt2" : "server-spm");
    const std::string vocab = gpt2 ? "gpt2" : "spm";
    for (const int planned : {64, 256, 1024}) {
      for (const char* api : {"completions", "chat"}) {
        const auto out = dir_ / (vocab + "-" + std::to_string(planned) + "-" + api);
        const auto r = bench(*s, {"--model", "tiny", "--api", api, "--num-requests", "1", "--input-len",
                                  "fixed:" + std::to_string(planned), "--output-len", "fixed:4", "--out",
                                  out.string(), "--quiet"});
        ASSERT_EQ(r.exit_code, 0) << describe(r);
        const auto recs = lines(out / "requests.jsonl");
        ASSERT_EQ(recs.size(), 1u);
        ASSERT_EQ(recs[0]["outcome"], "ok") << recs[0].dump().substr(0, 600);
        const int counted = recs[0]["prompt_tokens"];
        // The prompt as the slot holds it, tokenized again (special tokens as text: "<s>" is BOS).
        const auto slots = json::parse(s->slots_json());
        const std::string prompt = slots.at(0).at("prompt");
        const auto ids = s->tokenize(prompt, /*add_special=*/false);
        const double ratio = static_cast<double>(counted) / planned;
        std::cout << "prompt length, " << vocab << " vocab, " << api << ": planned " << planned
                  << ", server usage " << counted << ", /tokenize of the slot's prompt " << ids.size()
                  << ", ratio " << ratio << "\n";
        ::testing::Test::RecordProperty("ratio_" + vocab + "_" + api + "_" + std::to_string(planned),
                                        std::to_string(ratio));
        EXPECT_NEAR(static_cast<double>(ids.size()), counted, 1) << "/tokenize vs usage";
        // TARGET: within 3% of the plan (the chat template's own tokens excepted).
        if (std::string(api) == "completions") {
          EXPECT_LE(std::abs(ratio - 1.0), 0.03)
              << vocab << " vocab: planned " << planned << " prompt tokens, the server counted " << counted;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tokenscope::testing
