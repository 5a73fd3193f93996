#include "net/sse.h"

#include <cstring>

namespace tokenscope::net {

std::string encode_sse(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  std::size_t pos = 0;
  while (true) {
    const std::size_t nl = payload.find('\n', pos);
    out += "data: ";
    out.append(payload.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos));
    out += '\n';
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  out += '\n';
  return out;
}

bool SseDecoder::feed(std::string_view bytes, Nanos t, std::vector<SseEvent>& out) {
  return feed(
      bytes, t,
      [](void* events, const SseEvent& e) { static_cast<std::vector<SseEvent>*>(events)->push_back(e); },
      &out);
}

bool SseDecoder::feed(std::string_view bytes, Nanos t, Sink sink, void* context) {
  if (failed_) return false;
  sink_ = sink;
  context_ = context;
  std::size_t i = 0;
  if (skip_lf_ && !bytes.empty()) {
    skip_lf_ = false;
    if (bytes[0] == '\n') i = 1;
  }
  const std::size_t n = bytes.size();
  while (i < n) {
    // Find the end of the line: the first CR or LF (memchr for LF, then for
    // a CR before it: lines end in LF in practice, and the scan is the
    // decoder's hot loop).
    const char* base = bytes.data();
    const void* lf = std::memchr(base + i, '\n', n - i);
    std::size_t j = lf ? static_cast<std::size_t>(static_cast<const char*>(lf) - base) : n;
    if (const void* cr = std::memchr(base + i, '\r', j - i))
      j = static_cast<std::size_t>(static_cast<const char*>(cr) - base);
    if (j == n) {
      // An unfinished line: keep it for the next read.
      if (!in_event_) {
        in_event_ = true;
        t_first_ = t;
      }
      line_.append(bytes.substr(i));
      if (line_.size() + event_bytes_ > max_event_bytes_) {
        failed_ = true;
        error_ = "SSE event larger than " + std::to_string(max_event_bytes_) + " bytes";
        return false;
      }
      return true;
    }
    std::string_view line = bytes.substr(i, j - i);
    if (!line_.empty()) {
      line_.append(line);
      line = line_;
    }
    process_line(line, t);
    line_.clear();
    if (failed_) return false;
    // Consume the terminator (CRLF counts once, also across reads).
    if (bytes[j] == '\r') {
      if (j + 1 < n) {
        if (bytes[j + 1] == '\n') ++j;
      } else {
        skip_lf_ = true;
      }
    }
    i = j + 1;
  }
  return true;
}

void SseDecoder::reset() {
  line_.clear();
  skip_lf_ = false;
  in_event_ = false;
  t_first_ = 0;
  event_bytes_ = 0;
  clear_event();
  has_data_ = false;
  has_error_ = false;
  error_.clear();
  failed_ = false;
}

void SseDecoder::clear_event() {
  current_.event.clear();
  current_.data.clear();
  current_.error.clear();
  current_.id.clear();
  current_.t_first_byte = current_.t_complete = 0;
}

void SseDecoder::process_line(std::string_view line, Nanos t) {
  if (line.empty()) {
    // Blank line: dispatch (only events with data are dispatched).
    if (has_data_ || has_error_) {
      current_.t_first_byte = t_first_;
      current_.t_complete = t;
      sink_(context_, current_);
    }
    clear_event();
    has_data_ = false;
    has_error_ = false;
    in_event_ = false;
    event_bytes_ = 0;
    return;
  }
  if (!in_event_) {
    in_event_ = true;
    t_first_ = t;
  }
  event_bytes_ += line.size() + 1;
  if (event_bytes_ > max_event_bytes_) {
    failed_ = true;
    error_ = "SSE event larger than " + std::to_string(max_event_bytes_) + " bytes";
    return;
  }
  if (line.front() == ':') return;  // comment
  std::string_view field = line, value;
  if (const std::size_t colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    std::string& data = current_.data;
    const std::size_t size = data.size() + (has_data_ ? 1 : 0) + value.size();
    if (data.capacity() < size + kDataPadding) data.reserve(size + kDataPadding);
    if (has_data_) data += '\n';
    data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    current_.event.assign(value);
  } else if (field == "error") {
    if (has_error_) current_.error += '\n';
    current_.error.append(value);
    has_error_ = true;
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) current_.id.assign(value);
  }
  // "retry" and unknown fields are ignored, as the standard says.
}

}  // namespace tokenscope::net
