// libFuzzer target: one trace reader, chosen at build time by
// TOKENSCOPE_FUZZ_TRACE_FORMAT (kAzure, kMooncake, kShareGpt, kNative). Bad
// input must raise InputError (or UsageError), never crash, hang or raise
// anything else.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "workload/trace_readers.h"
#include "workload/workload.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  if (size == 0) return 0;
  workload::TraceReadOptions options;
  options.skip_bad_rows = (data[0] & 1) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const auto w = workload::parse_trace_text(text, "fuzz",
                                              workload::TraceFormat::TOKENSCOPE_FUZZ_TRACE_FORMAT, options);
    // Every request must be usable by the engine: tokens exactly as many as declared.
    std::vector<tokenizers::TokenId> tokens;
    for (std::size_t i = 0; i < w.requests.size() && i < 8; ++i) {
      tokens.clear();
      if (w.requests[i].input_tokens > 100000) continue;
      workload::append_prompt_tokens(w, w.requests[i], tokens);
      if (tokens.size() != w.requests[i].input_tokens) __builtin_trap();
    }
  } catch (const UsageError&) {
  }
  return 0;
}
