// libFuzzer target: the response collector on arbitrary streamed bodies,
// split into reads at sizes taken from the input. Whatever arrives, the
// record stays consistent, also when events pass a small cap (--max-events)
// and with a Content-Type that is not an event stream, and as transcription
// answers (json or text).
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
  if (data[0] & 8) c.set_max_events(3);
  c.init(std::move(base), stream, (data[0] & 2) != 0, &parser,
         [&](bench::ResponseCollector&) { done = true; });
  if (data[0] & 32) c.expect_transcription(2.5, (data[0] & 64) ? "text" : "json");  // a transcription answer
  c.on_sent(1);
  if (data[0] & 16) c.on_content_type("application/json");
  c.on_headers((data[0] & 4) ? 500 : 200, 2);
  std::string_view body(reinterpret_cast<const char*>(data) + 2, size - 2);
  Nanos t = 3;
  for (std::size_t i = 0; i < body.size(); i += piece) c.on_body(body.substr(i, piece), t++);
  c.on_complete(net::ExchangeError::kNone, "", t);
  const RequestRecord& r = c.record();
  if (!done) __builtin_trap();
  if (r.event_tokens.size() != r.event_times.size()) __builtin_trap();
  if (!r.event_times.empty() && (r.t_first_token != r.event_times.front() ||
                                 (r.events_dropped == 0 && r.t_last_token != r.event_times.back()) ||
                                 (r.events_dropped > 0 && r.t_last_token < r.event_times.back())))
    __builtin_trap();
  if (r.events_dropped > 0 && (!r.dropped_gaps_ns || r.dropped_gaps_ns->count() != r.events_dropped ||
                               r.dropped_event_tokens < r.events_dropped))
    __builtin_trap();
  if (stream && r.output_tokens_client >= 0 &&
      static_cast<std::uint64_t>(r.output_tokens_client) != r.event_times.size() + r.events_dropped)
    __builtin_trap();
  std::uint64_t tokens = r.dropped_event_tokens;
  for (auto k : r.event_tokens) tokens += k;
  if (!r.event_times.empty() && r.output_tokens > static_cast<std::int64_t>(r.event_times.size()) &&
      tokens != static_cast<std::uint64_t>(r.output_tokens))
    __builtin_trap();
  if (r.outcome == Outcome::kOk && r.http_status != 200) __builtin_trap();
  return 0;
}
