#include "net/sse.h"

#include <gtest/gtest.h>

#include "core/random.h"

namespace tokenscope::net {
namespace {

std::vector<SseEvent> decode(std::string_view s, Nanos t = 0) {
  SseDecoder d;
  std::vector<SseEvent> out;
  EXPECT_TRUE(d.feed(s, t, out));
  return out;
}

TEST(Sse, ParsesFieldsCommentsAndMultilineData) {
  const auto ev =
      decode(": keep-alive\n\nevent: delta\nid: 7\ndata: {\"a\":\ndata:1}\nretry: 10\n\ndata: [DONE]\n\n");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].event, "delta");
  EXPECT_EQ(ev[0].id, "7");
  EXPECT_EQ(ev[0].data, "{\"a\":\n1}");
  EXPECT_EQ(ev[1].data, "[DONE]");
  EXPECT_EQ(ev[1].event, "");
}

TEST(Sse, LineEndingsCrLfAndCrAndNoSpace) {
  const auto ev = decode("data:x\r\n\r\ndata: y\r\rdata:  z\n\n");
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].data, "x");
  EXPECT_EQ(ev[1].data, "y");
  EXPECT_EQ(ev[2].data, " z");  // only one space is removed
}

TEST(Sse, EventsWithoutDataAreNotDispatchedAndUnfinishedOnesWait) {
  SseDecoder d;
  std::vector<SseEvent> out;
  d.feed("event: ping\n\ndata: partial", 1, out);
  EXPECT_TRUE(out.empty());
  EXPECT_GT(d.pending_bytes(), 0u);
  d.feed("\n\n", 2, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, "partial");
  EXPECT_EQ(out[0].t_first_byte, 1);  // the first byte came with the first read
  EXPECT_EQ(out[0].t_complete, 2);
  EXPECT_EQ(d.pending_bytes(), 0u);
}

TEST(Sse, AnySplitGivesTheSameEvents) {
  const std::string stream =
      "data: {\"choices\":[{\"text\":\" the\"}]}\r\n\r\n: c\r\ndata: a\r\ndata: b\r\n\r\nevent: e\ndata: "
      "[DONE]\n\n";
  const auto whole = decode(stream);
  ASSERT_EQ(whole.size(), 3u);
  Rng rng(3);
  for (std::size_t cut1 = 0; cut1 <= stream.size(); ++cut1) {
    const std::size_t cut2 = cut1 + rng.uniform_int(0, stream.size() - cut1);
    SseDecoder d;
    std::vector<SseEvent> out;
    d.feed(std::string_view(stream).substr(0, cut1), 1, out);
    d.feed(std::string_view(stream).substr(cut1, cut2 - cut1), 2, out);
    d.feed(std::string_view(stream).substr(cut2), 3, out);
    ASSERT_EQ(out.size(), whole.size()) << cut1 << " " << cut2;
    for (std::size_t k = 0; k < out.size(); ++k) {
      EXPECT_EQ(out[k].data, whole[k].data);
      EXPECT_EQ(out[k].event, whole[k].event);
    }
    // The first event starts at byte 0: its first byte came with read 1 unless cut1 == 0.
    EXPECT_EQ(out[0].t_first_byte, cut1 > 0 ? 1 : (cut2 > 0 ? 2 : 3));
  }
}

TEST(Sse, OversizedEventsStopTheDecoder) {
  SseDecoder d(64);
  std::vector<SseEvent> out;
  EXPECT_FALSE(d.feed("data: " + std::string(100, 'x') + "\n\n", 0, out));
  EXPECT_NE(d.error().find("larger than 64"), std::string::npos);
  EXPECT_FALSE(d.feed("data: y\n\n", 0, out));
  EXPECT_TRUE(out.empty());
}

// The sink gets the decoder's own event, whose strings keep their storage
// from one event to the next: each event still reads exactly as a fresh
// decoder gives it (no field of an earlier one left behind), its data has
// kDataPadding bytes allocated after it, and after reset() (one request to
// the next) the decoder starts afresh with its storage kept.
TEST(Sse, ReusedEventsReadAsFreshOnesAndKeepTheirPadding) {
  const std::string stream =
      "event: delta\nid: 9\ndata: " + std::string(300, 'a') +
      "\n\ndata: b\n\nerror: {\"message\":\"x\"}\n\ndata: c\ndata: d\n\ndata: [DONE]\n\n";
  const auto expected = decode(stream, 5);
  ASSERT_EQ(expected.size(), 5u);
  struct Seen {
    std::vector<SseEvent> events;
    std::vector<const char*> storage;
    bool padded = true;
  } seen;
  SseDecoder d;
  const auto sink = [](void* context, const SseEvent& e) {
    auto& s = *static_cast<Seen*>(context);
    s.events.push_back(e);
    s.storage.push_back(e.data.data());
    if (!e.data.empty() && e.data.capacity() < e.data.size() + SseDecoder::kDataPadding) s.padded = false;
  };
  for (int round = 0; round < 2; ++round) {
    seen.events.clear();
    d.reset();
    // One byte at a time, then whole: the same events.
    for (std::size_t i = 0; i < stream.size(); ++i) ASSERT_TRUE(d.feed(stream.substr(i, 1), 5, sink, &seen));
    d.reset();
    ASSERT_TRUE(d.feed(stream, 5, sink, &seen));
    ASSERT_EQ(seen.events.size(), 2 * expected.size());
    for (std::size_t k = 0; k < seen.events.size(); ++k) {
      const SseEvent& want = expected[k % expected.size()];
      EXPECT_EQ(seen.events[k].data, want.data) << k;
      EXPECT_EQ(seen.events[k].event, want.event) << k;
      EXPECT_EQ(seen.events[k].id, want.id) << k;
      EXPECT_EQ(seen.events[k].error, want.error) << k;
      EXPECT_EQ(seen.events[k].t_first_byte, 5) << k;
    }
  }
  EXPECT_TRUE(seen.padded);
  // The later events' data lay in the first one's storage (300 bytes and
  // its padding hold all of them): no allocation per event.
  for (std::size_t k = 1; k < seen.storage.size(); ++k) EXPECT_EQ(seen.storage[k], seen.storage[0]) << k;
}

TEST(Sse, EncoderRoundTrips) {
  EXPECT_EQ(encode_sse("{}"), "data: {}\n\n");
  EXPECT_EQ(encode_sse("a\nb"), "data: a\ndata: b\n\n");
  const auto ev = decode(encode_sse("a\nb") + encode_sse("[DONE]"));
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].data, "a\nb");
}

}  // namespace
}  // namespace tokenscope::net
