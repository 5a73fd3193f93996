#include "tokenizers/hf_split.h"

namespace tokenscope::tokenizers::hf {

Behavior parse_behavior(const std::string& s, const Fields& f, const std::string& where) {
  if (s == "Removed") return Behavior::kRemoved;
  if (s == "Isolated") return Behavior::kIsolated;
  if (s == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::kMergedWithNext;
  if (s == "Contiguous") return Behavior::kContiguous;
  f.fail(where, fmt::format("unknown split behavior {} (expected Removed, Isolated, MergedWithPrevious, "
                            "MergedWithNext or Contiguous)",
                            quote_input(s)));
}

const char* behavior_name(Behavior b) {
  switch (b) {
    case Behavior::kRemoved:
      return "Removed";
    case Behavior::kIsolated:
      return "Isolated";
    case Behavior::kMergedWithPrevious:
      return "MergedWithPrevious";
    case Behavior::kMergedWithNext:
      return "MergedWithNext";
    case Behavior::kContiguous:
      return "Contiguous";
  }
  return "?";
}

std::vector<Span> cover(std::size_t size, const std::vector<Regex::Match>& matches, bool invert) {
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  std::size_t prev = 0;
  for (const auto& m : matches) {
    if (prev < m.start) spans.push_back({prev, m.start, invert});
    spans.push_back({m.start, m.end, !invert});
    prev = m.end;
  }
  if (prev < size) spans.push_back({prev, size, invert});
  return spans;
}

std::vector<Span> apply_behavior(const std::vector<Span>& spans, Behavior behavior) {
  std::vector<Span> out;
  out.reserve(spans.size());
  switch (behavior) {
    case Behavior::kRemoved:
      for (const auto& s : spans)
        if (!s.match) out.push_back(s);
      break;
    case Behavior::kIsolated:
      out = spans;
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& s : spans) {
        if (s.match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous_match && !out.empty()) {
          out.back().start = it->start;
        } else {
          out.push_back(*it);
        }
        previous_match = it->match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const auto& s : spans) {
        if (s.match == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.match;
      }
      break;
    }
  }
  std::erase_if(out, [](const Span& s) { return s.start == s.end; });
  return out;
}

ByteTable::ByteTable() {
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
    unicode::append_utf8(char_of_byte[b], cp);
    byte_of_char[cp] = static_cast<unsigned char>(b);
  }
}

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

}  // namespace tokenscope::tokenizers::hf
