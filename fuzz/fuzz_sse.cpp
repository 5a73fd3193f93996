// libFuzzer target: the incremental SSE decoder. Decoding the input in one
// read or split in three must give the same events.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "net/sse.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope::net;
  if (size < 2) return 0;
  const std::string_view s(reinterpret_cast<const char*>(data) + 2, size - 2);
  const std::size_t a = s.empty() ? 0 : data[0] % (s.size() + 1);
  const std::size_t b = a + (s.size() - a == 0 ? 0 : data[1] % (s.size() - a + 1));
  SseDecoder whole(4096), split(4096);
  std::vector<SseEvent> w, p;
  const bool ok_whole = whole.feed(s, 0, w);
  bool ok_split = split.feed(s.substr(0, a), 1, p);
  if (ok_split) ok_split = split.feed(s.substr(a, b - a), 2, p);
  if (ok_split) ok_split = split.feed(s.substr(b), 3, p);
  if (ok_whole != ok_split) __builtin_trap();
  if (!ok_whole) return 0;
  if (w.size() != p.size()) __builtin_trap();
  for (std::size_t i = 0; i < w.size(); ++i)
    if (w[i].data != p[i].data || w[i].event != p[i].event || w[i].id != p[i].id) __builtin_trap();
  return 0;
}
