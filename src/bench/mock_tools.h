// The tools a task calls, served by the bench process itself on loopback
// (real HTTP, so their dispatch and parse costs are real): POST
// /tools/NAME with the call's arguments as a JSON object; the answer after
// the tool's latency draw. Kinds (bench/task_graph.h ToolSpec):
//   search      {"query", "top_k"} -> {"documents": [{"id": "doc-N", "text"}]}
//               over the document store, best match first;
//   calculator  {"expression"} -> {"value": number}: + - * / and parentheses;
//   json_api    any arguments -> a value drawn from the tool's response
//               schema (with "payload": text of payload_tokens when the
//               schema allows a member more).
// Arguments the tool's parameter schema refuses are answered 400 with the
// violation, as an API would. Injected errors (ToolSpec::error_*), one draw
// per call in arrival order from the seeded generator: 500; no answer
// (held until the server stops, so the caller's timeout decides);
// a body that is not JSON. What was injected is counted per tool: the
// ground truth the task records' failure classes are checked against.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/task_graph.h"
#include "core/random.h"
#include "net/http.h"

namespace tokenscope::bench {

// The document store (DocumentStoreSpec): document i is "doc-i", its text
// words of tokenscope's prompt vocabulary drawn from (seed, i); its topic
// is its first 8 distinct words, indexed for search.
class DocumentStore {
 public:
  DocumentStore(const DocumentStoreSpec& spec, std::uint64_t seed);
  std::uint32_t size() const { return static_cast<std::uint32_t>(tokens_.size()); }
  std::string id(std::uint32_t i) const { return "doc-" + std::to_string(i); }
  // Built on demand (a function of the seed and i).
  std::string text(std::uint32_t i) const;
  // The top_k documents for a query: by the number of the query's words in
  // their topic, then by a hash of (query, document); always top_k of them
  // (at most the store's size).
  std::vector<std::uint32_t> search(std::string_view query, std::uint32_t top_k) const;

 private:
  std::uint64_t seed_;
  std::vector<std::uint32_t> tokens_;                             // per document
  std::map<std::string_view, std::vector<std::uint32_t>> index_;  // topic word -> documents
};

// Evaluates + - * / with parentheses, unary minus and decimal numbers;
// nullopt (and why) for anything else, a division by zero, or nesting past 64.
std::optional<double> evaluate_expression(std::string_view text, std::string* why = nullptr);

// What the mock tools injected, per tool.
struct InjectedToolErrors {
  std::uint64_t calls = 0;
  std::uint64_t http_5xx = 0, timeout = 0, malformed = 0;
  std::uint64_t invalid_arguments = 0;  // calls refused with 400 (not injected: the caller's arguments)
};

class MockToolServer {
 public:
  // Serves every tool of the catalog but those of kind url, on 127.0.0.1
  // at an ephemeral port, on its own thread.
  MockToolServer(const TaskCatalog& catalog, std::uint64_t seed);
  ~MockToolServer();
  MockToolServer(const MockToolServer&) = delete;
  MockToolServer& operator=(const MockToolServer&) = delete;

  std::uint16_t port() const;
  const DocumentStore& documents() const { return docs_; }
  // Ends held answers (a connection reset) and stops; called by the destructor.
  void stop();
  // Thread-safe.
  std::map<std::string, InjectedToolErrors> injected() const;

  // The answer to one call (the HTTP layer aside): status, body, and how
  // long to wait before sending it (nullopt: hold it; an injected timeout).
  struct Answer {
    int status = 200;
    std::string body;
    std::optional<Nanos> delay;
  };
  Answer answer(std::string_view tool, std::string_view body);
  // POST /builtin/search: the document store's search for retrievals that
  // name no search tool ({"query", "top_k"}; no latency, no errors).
  Answer builtin_search(std::string_view body);

 private:
  // A search of the document store: {"query", "top_k" (1-50, default 3)} -> {"documents": [{"id", "text"}]}.
  nlohmann::json search_answer(const nlohmann::json& args) const;

  struct Impl;
  const TaskCatalog& catalog_;
  DocumentStore docs_;
  std::mutex mutex_;
  Rng rng_;
  std::map<std::string, InjectedToolErrors> injected_;
  mutable std::mutex injected_mutex_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenscope::bench
