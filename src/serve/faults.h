// Fault injection for testing clients (`serve --faults SPEC --fault-seed N`).
// SPEC is a comma-separated list of KIND=RATE[@MS]:
//   http_5xx=R          answer 500 with an error body instead of generating
//   http_429=R          answer 429 with Retry-After: 1
//   reset=R             reset the connection mid-stream (halfway through the output)
//   stall=R@MS          hold the stream for MS milliseconds halfway through
//   malformed=R         send one malformed SSE event halfway through
//   slow_first_byte=R@MS  delay the response by MS milliseconds before anything is sent
//   wrong_tool=R        a turn that calls tools names a tool that was not declared
//   invalid_arguments=R a tool call's arguments (or a response_format answer)
//                       violate their JSON schema
//   malformed_json=R    a tool call's arguments (or a response_format answer)
//                       are not JSON (the first half of them)
// Rates are probabilities per generation request (their sum at most 1); one
// uniform draw per request, in arrival order, from the seeded generator
// picks at most one fault. Every injected fault is counted in
// tokenscope:faults_injected_total{kind} when it takes effect: the last
// three only on an answer with tool calls or a JSON response_format
// (serve/tools.h), invalid_arguments only where the schema can be
// violated.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/random.h"

namespace tokenscope::serve {

enum class FaultKind {
  kNone,
  kHttp5xx,
  kHttp429,
  kReset,
  kStall,
  kMalformed,
  kSlowFirstByte,
  kWrongTool,
  kInvalidArguments,
  kMalformedJson
};

std::string_view fault_name(FaultKind k);
// Every kind's name but "none", in FaultKind's order.
inline constexpr const char* kFaultNames[] = {"http_5xx",   "http_429",          "reset",
                                              "stall",      "malformed",         "slow_first_byte",
                                              "wrong_tool", "invalid_arguments", "malformed_json"};

struct FaultRule {
  FaultKind kind = FaultKind::kNone;
  double rate = 0.0;
  double duration_ms = 0.0;  // stall, slow_first_byte
};

struct Fault {
  FaultKind kind = FaultKind::kNone;
  double duration_ms = 0.0;
};

// Parses SPEC (see above); throws UsageError naming the bad part.
std::vector<FaultRule> parse_fault_spec(std::string_view spec);

// A --faults value as settings hold it: parsed where it arrives (the CLI),
// with the text as given for run.json's "requested" settings.
struct FaultSpec {
  std::string text;  // as given ("" : none)
  std::vector<FaultRule> rules;
};
FaultSpec parse_faults(std::string_view text);

// Draws faults for requests in arrival order. Thread-safe.
class FaultPlan {
 public:
  FaultPlan(std::vector<FaultRule> rules, std::uint64_t seed) : rules_(std::move(rules)), rng_(seed) {}
  bool enabled() const { return !rules_.empty(); }
  Fault next();

 private:
  std::vector<FaultRule> rules_;
  std::mutex mutex_;
  Rng rng_;
};

}  // namespace tokenscope::serve
