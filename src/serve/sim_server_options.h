// The options of the built-in server that `tokenscope serve` and bench's
// in-process server share (serve/server_app.h), in a header of their own so
// that bench's settings hold them without the server's headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "serve/faults.h"

namespace tokenscope::serve {

// The built-in server's options that `serve` and bench's in-process server
// share, as the command line gives them (bench names the first
// --server-threads).
struct SimServerOptions {
  unsigned threads = 1;          // I/O threads
  FaultSpec faults;              // --faults: KIND=RATE[@MS],... (faults.h), parsed where given
  std::uint64_t fault_seed = 0;  // --fault-seed
  std::string trace_emissions;   // --trace-emissions: a file, or empty
  double logprob_shift = 0.0;    // --logprob-shift: nats added to the simulated model's mean -logprob
  // --reasoning-share, --reasoning-field: a reasoning model (chat), serving_core.h CoreSettings.
  double reasoning_share = 0.0;
  std::string reasoning_field = "reasoning";
  // --lora-modules NAME[=PATH] ...: LoRA adapters served behind the base
  // model, named by a request's "model" (vLLM's option; the path is only
  // reported). Turns adapters on in the engine (max_loras 1 unless given).
  std::vector<std::string> lora_modules;
  // --tool-call-prob, --tool-rounds, --parallel-tool-calls: how the
  // simulated model calls tools (serve/tools.h ToolPolicy).
  double tool_call_prob = 0.9;
  std::uint32_t tool_rounds = 3;
  std::uint32_t parallel_tool_calls = 1;
  double cite_prob = 1.0;  // --cite-prob
};

struct ServerAppSettings;
}  // namespace tokenscope::serve
namespace tokenscope::engine {
struct EngineSettings;
}
namespace tokenscope::serve {

// Checks the options (UsageError naming the option: a logprob shift that
// leaves no positive mean), once for both commands; the fault spec was
// checked as it was parsed.
void check(const SimServerOptions& o);
// Checks the options and puts them into a server's settings.
void apply(const SimServerOptions& o, ServerAppSettings& s);
// What the options change in the engine: LoRA adapters on (max_loras at
// least 1) when --lora-modules names any.
void apply(const SimServerOptions& o, engine::EngineSettings& s);

}  // namespace tokenscope::serve
