// libFuzzer target: the streaming chunk parser on arbitrary event data, with
// the output tokens' logprobs read (bench --logprobs) and tool calls
// assembled (ToolCallAssembler): the parser's widest path;
// the same bytes as a whole pooling answer and as a transcription answer.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "bench/chunk_parser.h"

namespace {
bool same(const tokenscope::bench::ChunkInfo& a, const tokenscope::bench::ChunkInfo& b) {
  if (a.tool_calls.size() != b.tool_calls.size()) return false;
  for (std::size_t i = 0; i < a.tool_calls.size(); ++i)
    if (a.tool_calls[i].index != b.tool_calls[i].index || a.tool_calls[i].id != b.tool_calls[i].id ||
        a.tool_calls[i].name != b.tool_calls[i].name ||
        a.tool_calls[i].arguments != b.tool_calls[i].arguments)
      return false;
  return a.valid == b.valid && a.is_error == b.is_error && a.error_message == b.error_message &&
         a.has_output == b.has_output && a.has_reasoning == b.has_reasoning && a.has_answer == b.has_answer &&
         a.role_only == b.role_only && a.text == b.text && a.reasoning_bytes == b.reasoning_bytes &&
         a.choices == b.choices && a.finish_reason == b.finish_reason && a.id == b.id &&
         a.usage.has_value() == b.usage.has_value() && a.timings.has_value() == b.timings.has_value() &&
         a.logprobs.size() == b.logprobs.size() &&
         (!a.usage || (a.usage->prompt_tokens == b.usage->prompt_tokens &&
                       a.usage->completion_tokens == b.usage->completion_tokens &&
                       a.usage->cached_tokens == b.usage->cached_tokens &&
                       a.usage->reasoning_tokens == b.usage->reasoning_tokens)) &&
         (!a.timings ||
          (a.timings->prompt_n == b.timings->prompt_n && a.timings->predicted_n == b.timings->predicted_n));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static tokenscope::bench::ChunkParser parser(true);  // reused, as one connection reuses it
  const auto info = parser.parse(std::string_view(reinterpret_cast<const char*>(data), size));
  // Parsed where it lies, with bytes of any value after it (the SSE
  // decoder's padding), the event reads the same.
  std::string padded(reinterpret_cast<const char*>(data), size);
  padded.append(64, size > 0 ? static_cast<char>(data[0]) : '"');
  if (!same(info, parser.parse(std::string_view(padded).substr(0, size), 64))) __builtin_trap();
  // A stream's frame: the input's lines as one stream's events (the first
  // that may become the frame, the next read from it), each read as the
  // DOM path reads it alone.
  {
    static tokenscope::bench::ChunkParser framed(true), alone(true);
    tokenscope::bench::ChunkFrame frame;
    const std::string_view all(reinterpret_cast<const char*>(data), size);
    std::size_t from = 0;
    while (from <= all.size()) {
      std::size_t nl = all.find('\n', from);
      if (nl == std::string_view::npos) nl = all.size();
      const std::string_view line = all.substr(from, nl - from);
      const auto a = framed.parse(line, 0, &frame);
      if (!same(a, alone.parse(line))) __builtin_trap();
      from = nl + 1;
    }
  }
  if (info.role_only && info.has_output) __builtin_trap();
  if (!info.valid && (info.has_output && info.choices == 0)) __builtin_trap();
  for (const double lp : info.logprobs)
    if (std::isnan(lp)) __builtin_trap();  // JSON has no NaN; log of a negative prob is not taken
  // Tool calls: bounded in number, and the assembler's calls hold every
  // fragment's arguments within its bounds (the tool-call delta parser).
  if (info.tool_calls.size() > tokenscope::bench::ToolCallAssembler::kMaxCalls) __builtin_trap();
  if (!info.tool_calls.empty() && !info.has_answer) __builtin_trap();
  tokenscope::bench::ToolCallAssembler calls;
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < info.tool_calls.size(); ++i) {
    calls.add(info.tool_calls[i], i);
    bytes += info.tool_calls[i].arguments.size();
  }
  std::size_t assembled = 0;
  for (const auto& c : calls.calls()) assembled += c.arguments.size();
  if (calls.problem().empty() && assembled != bytes) __builtin_trap();
  if (calls.calls().size() > info.tool_calls.size()) __builtin_trap();
  // The same bytes as a whole pooling answer (embeddings, rerank of 4 documents).
  for (const bool rerank : {false, true}) {
    const auto p =
        parser.parse_pooling(std::string_view(reinterpret_cast<const char*>(data), size), rerank, 4);
    if (p.valid == !p.problem.empty()) __builtin_trap();
    if (p.valid && !p.is_error && (p.items < 0 || (rerank && p.items > 4))) __builtin_trap();
  }
  // The same bytes as a whole transcription answer.
  const auto t = parser.parse_transcription(std::string_view(reinterpret_cast<const char*>(data), size));
  if (t.valid == !t.problem.empty()) __builtin_trap();
  if (!t.has_text && !t.text.empty()) __builtin_trap();
  if (std::isnan(t.audio_seconds)) __builtin_trap();
  return 0;
}
