// libFuzzer target: the response collector on arbitrary streamed bodies,
// split into reads at sizes taken from the input. Whatever arrives, the
// record stays consistent.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "bench/exchange.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  if (size < 2) return 0;
  static bench::ChunkParser parser;
  bench::ResponseCollector c;
  RequestRecord base;
  base.t_sched = 0;
  const bool stream = (data[0] & 1) == 0;
  const std::size_t piece = (data[1] % 64) + 1;
  bool done = false;
  c.init(base, stream, (data[0] & 2) != 0, &parser, [&](bench::ResponseCollector&) { done = true; });
  c.on_sent(1);
  c.on_headers((data[0] & 4) ? 500 : 200, 2);
  std::string_view body(reinterpret_cast<const char*>(data) + 2, size - 2);
  Nanos t = 3;
  for (std::size_t i = 0; i < body.size(); i += piece) c.on_body(body.substr(i, piece), t++);
  c.on_complete(net::ExchangeError::kNone, "", t);
  const RequestRecord& r = c.record();
  if (!done) __builtin_trap();
  if (r.event_tokens.size() != r.event_times.size()) __builtin_trap();
  if (!r.event_times.empty() &&
      (r.t_first_token != r.event_times.front() || r.t_last_token != r.event_times.back()))
    __builtin_trap();
  std::uint64_t tokens = 0;
  for (auto k : r.event_tokens) tokens += k;
  if (!r.event_times.empty() && r.output_tokens > static_cast<std::int64_t>(r.event_times.size()) &&
      tokens != static_cast<std::uint64_t>(r.output_tokens))
    __builtin_trap();
  if (r.outcome == Outcome::kOk && r.http_status != 200) __builtin_trap();
  return 0;
}
