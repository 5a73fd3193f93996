// Server-sent events: the encoder the server uses, and an incremental
// decoder for clients (the HTML Living Standard's event-stream parsing):
// lines end in LF, CRLF or CR, also when split across reads; "field: value"
// with one optional space; lines starting with ':' are comments; "data"
// lines join with '\n'; an empty line ends an event (events without data are
// not dispatched, as the standard says, except those with an "error" field:
// see SseEvent). Each event carries the time of the
// read that brought its first byte, which is what latency metrics need.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"

namespace tokenscope::net {

struct SseEvent {
  std::string event;  // "" when no event field (the default type, "message")
  std::string data;
  // The value of "error:" lines: not a standard field, but how llama.cpp's
  // server reports a failure inside a stream ("error: {...}" then a blank
  // line). Events with only an error field are dispatched too.
  std::string error;
  std::string id;
  Nanos t_first_byte = 0;  // time of the read holding the event's first byte
  Nanos t_complete = 0;    // time of the read holding its terminating blank line
};

// "data: <payload>\n\n" (a payload with newlines becomes several data lines).
std::string encode_sse(std::string_view payload);

class SseDecoder {
 public:
  explicit SseDecoder(std::size_t max_event_bytes = 1u << 20) : max_event_bytes_(max_event_bytes) {}

  // Room kept after the end of an event's data (allocated, of no set
  // value): a JSON parser that reads ahead (simdjson's padding) can parse
  // the data where it lies.
  static constexpr std::size_t kDataPadding = 64;
  // Called with each complete event; the event is the decoder's own, valid
  // during the call (its strings keep their storage for the next one: no
  // allocation per event).
  using Sink = void (*)(void* context, const SseEvent& event);

  // Feeds bytes that arrived at time t; complete events go to sink, in order.
  // Returns false (and stops decoding) when an event exceeds max_event_bytes.
  bool feed(std::string_view bytes, Nanos t, Sink sink, void* context);
  // The same, the events copied into out.
  bool feed(std::string_view bytes, Nanos t, std::vector<SseEvent>& out);
  // Back to a fresh decoder's state, keeping the storage of its strings.
  void reset();
  const std::string& error() const { return error_; }
  // Bytes of an unfinished event at the end of the stream (0 when clean).
  std::size_t pending_bytes() const { return line_.size() + event_bytes_; }

 private:
  void process_line(std::string_view line, Nanos t);
  void clear_event();

  std::size_t max_event_bytes_;
  std::string line_;       // a line split across reads
  bool skip_lf_ = false;   // the previous read ended in CR: a leading LF belongs to it
  bool in_event_ = false;  // some line of the current event was seen
  Nanos t_first_ = 0;
  std::size_t event_bytes_ = 0;
  SseEvent current_;
  bool has_data_ = false;
  bool has_error_ = false;
  std::string error_;
  bool failed_ = false;
  Sink sink_ = nullptr;  // during feed()
  void* context_ = nullptr;
};

}  // namespace tokenscope::net
