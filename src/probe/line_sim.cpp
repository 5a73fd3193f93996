#include "probe/line_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <bitset>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "core/error.h"

namespace tokenscope::probe {

namespace {

using Bytes = std::bitset<kMaxSimLineSize>;

Bytes byte_mask(std::uint32_t offset, std::uint32_t size) {
  Bytes b;
  for (std::uint32_t i = 0; i < size; ++i) b.set(offset + i);
  return b;
}

struct ThreadLine {
  bool has_copy = false;
  bool ever_had = false;
  Bytes written_by_others;  // since this thread lost its copy
};

struct LineState {
  std::map<std::uint32_t, ThreadLine> threads;
  std::optional<std::uint32_t> modified_by;
  LineReport report;
  std::map<std::uint32_t, Bytes> touched_by;  // whole trace, per thread
  Bytes written_ever;
};

bool is_power_of_two(int v) {
  return v > 0 && (v & (v - 1)) == 0;
}

}  // namespace

std::string LineReport::classification() const {
  const bool t = true_events() > 0, f = false_events() > 0;
  if (t && f) return "mixed";
  if (f) return "false";
  if (t) return "true";
  return "none";
}

SimResult simulate_lines(const std::vector<Access>& trace, int line_size,
                         const std::vector<LayoutEntry>& layout) {
  if (!is_power_of_two(line_size) || line_size < 8 || line_size > kMaxSimLineSize)
    throw UsageError("line size must be a power of two from 8 to " + std::to_string(kMaxSimLineSize) +
                     ", got " + std::to_string(line_size));
  const std::uint64_t L = static_cast<std::uint64_t>(line_size);
  std::unordered_map<std::uint64_t, LineState> lines;
  SimResult r;
  r.line_size = line_size;
  for (const auto& a : trace) {
    ++r.totals.accesses;
    std::uint64_t addr = a.address;
    std::uint64_t left = a.size;
    while (left > 0) {
      const std::uint64_t line = addr & ~(L - 1);
      const auto offset = static_cast<std::uint32_t>(addr - line);
      const auto piece = static_cast<std::uint32_t>(std::min<std::uint64_t>(left, L - offset));
      ++r.totals.line_accesses;
      LineState& st = lines[line];
      st.report.line_address = line;
      const Bytes bytes = byte_mask(offset, piece);
      st.touched_by[a.thread] |= bytes;
      ThreadLine& me = st.threads[a.thread];
      if (!me.has_copy) {
        if (!me.ever_had)
          ++st.report.cold_misses;
        else if ((me.written_by_others & bytes).any())
          ++st.report.misses_true;
        else
          ++st.report.misses_false;
        me.has_copy = me.ever_had = true;
        me.written_by_others.reset();
      }
      if (a.write) {
        ++st.report.writes;
        st.written_ever |= bytes;
        for (auto& [t, other] : st.threads) {
          if (t == a.thread) continue;
          if (other.has_copy) {
            other.has_copy = false;
            ++st.report.invalidations;
          }
          other.written_by_others |= bytes;
        }
        st.modified_by = a.thread;
      } else {
        ++st.report.reads;
        if (st.modified_by && *st.modified_by != a.thread) {
          ++st.report.hitm;
          st.modified_by.reset();
        }
      }
      addr += piece;
      left -= piece;
    }
  }
  r.totals.lines = lines.size();
  // Layout entries sorted by address for the symbol lookup.
  std::vector<const LayoutEntry*> sorted;
  for (const auto& e : layout) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](auto* x, auto* y) { return x->address < y->address; });
  for (auto& [line, st] : lines) {
    auto& rep = st.report;
    r.totals.cold_misses += rep.cold_misses;
    r.totals.misses_true += rep.misses_true;
    r.totals.misses_false += rep.misses_false;
    r.totals.invalidations += rep.invalidations;
    r.totals.hitm += rep.hitm;
    if (rep.false_events() > 0) ++r.totals.lines_false_sharing;
    if (rep.true_events() > 0) ++r.totals.lines_true_sharing;
    if (rep.events() == 0 && rep.invalidations == 0 && rep.hitm == 0) continue;
    for (const auto& [t, _] : st.touched_by) rep.threads.push_back(t);
    // Runs of bytes touched by the same set of threads.
    std::vector<std::uint32_t> prev;
    bool prev_written = false;
    for (std::uint32_t b = 0; b <= L; ++b) {
      std::vector<std::uint32_t> cur;
      bool w = false;
      if (b < L) {
        for (const auto& [t, mask] : st.touched_by)
          if (mask.test(b)) cur.push_back(t);
        w = st.written_ever.test(b);
      }
      if (b == L || cur != prev || w != prev_written) {
        if (!prev.empty()) rep.ranges.back().end = b;
        if (!cur.empty() && b < L) rep.ranges.push_back({b, b + 1, cur, w});
        prev = cur;
        prev_written = w;
      }
    }
    // Symbols: entries overlapping [line, line + L).
    auto it = std::upper_bound(sorted.begin(), sorted.end(), line,
                               [](std::uint64_t v, const LayoutEntry* e) { return v < e->address; });
    if (it != sorted.begin()) --it;
    // Step back over entries that start earlier but may still reach this line.
    while (it != sorted.begin() && (*(it - 1))->address + (*(it - 1))->size > line) --it;
    for (; it != sorted.end() && (*it)->address < line + L; ++it) {
      const auto* e = *it;
      if (e->address + e->size <= line) continue;
      if (e->address >= line)
        rep.symbols.push_back(fmt::format("{} @+0x{:x} ({} B)", e->name, e->address - line, e->size));
      else
        rep.symbols.push_back(fmt::format("{} +0x{:x} (spans in)", e->name, line - e->address));
      if (rep.symbols.size() >= 16) break;
    }
    r.lines.push_back(std::move(rep));
  }
  std::sort(r.lines.begin(), r.lines.end(), [](const LineReport& x, const LineReport& y) {
    if (x.false_events() != y.false_events()) return x.false_events() > y.false_events();
    if (x.events() != y.events()) return x.events() > y.events();
    if (x.hitm + x.invalidations != y.hitm + y.invalidations)
      return x.hitm + x.invalidations > y.hitm + y.invalidations;
    return x.line_address < y.line_address;
  });
  return r;
}

std::vector<Access> pad_layout(const std::vector<Access>& trace, const std::vector<LayoutEntry>& layout,
                               int line_size, std::vector<LayoutEntry>* padded_layout) {
  if (!is_power_of_two(line_size)) throw UsageError("line size must be a power of two");
  const std::uint64_t L = static_cast<std::uint64_t>(line_size);
  std::vector<LayoutEntry> sorted = layout;
  std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.address < y.address; });
  std::vector<std::uint64_t> new_base(sorted.size());
  std::uint64_t next = 1ull << 60;  // a range no real user-space address uses
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    next = (next + L - 1) & ~(L - 1);
    new_base[i] = next;
    next += sorted[i].size;
  }
  if (padded_layout) {
    padded_layout->clear();
    for (std::size_t i = 0; i < sorted.size(); ++i)
      padded_layout->push_back({new_base[i], sorted[i].size, sorted[i].name});
  }
  std::vector<Access> out;
  out.reserve(trace.size());
  for (const auto& a : trace) {
    auto it = std::upper_bound(sorted.begin(), sorted.end(), a.address,
                               [](std::uint64_t v, const LayoutEntry& e) { return v < e.address; });
    if (it == sorted.begin()) {
      out.push_back(a);
      continue;
    }
    --it;
    const auto i = static_cast<std::size_t>(it - sorted.begin());
    if (a.address >= it->address + it->size) {
      out.push_back(a);
      continue;
    }
    Access moved = a;
    moved.address = new_base[i] + (a.address - it->address);
    out.push_back(moved);
  }
  return out;
}

std::vector<Prediction> predict(const std::vector<Access>& trace, int line_size,
                                const std::vector<int>& other_line_sizes,
                                const std::vector<LayoutEntry>& layout) {
  std::vector<Prediction> out;
  out.push_back({fmt::format("as traced ({} B lines)", line_size), line_size, false,
                 simulate_lines(trace, line_size).totals});
  for (int l : other_line_sizes) {
    if (l == line_size) continue;
    out.push_back({fmt::format("{} B lines", l), l, false, simulate_lines(trace, l).totals});
  }
  if (!layout.empty()) {
    const auto padded = pad_layout(trace, layout, line_size);
    out.push_back({fmt::format("objects padded to {} B", line_size), line_size, true,
                   simulate_lines(padded, line_size).totals});
  }
  return out;
}

namespace {
nlohmann::json totals_json(const SimTotals& t) {
  return {{"accesses", t.accesses},
          {"line_accesses", t.line_accesses},
          {"lines", t.lines},
          {"cold_misses", t.cold_misses},
          {"true_sharing_misses", t.misses_true},
          {"false_sharing_misses", t.misses_false},
          {"invalidations", t.invalidations},
          {"hitm", t.hitm},
          {"lines_with_false_sharing", t.lines_false_sharing},
          {"lines_with_true_sharing", t.lines_true_sharing}};
}
std::string thread_list(const std::vector<std::uint32_t>& t) {
  return fmt::format("{}", fmt::join(t, ","));
}
}  // namespace

nlohmann::json to_json(const SimResult& r, std::size_t max_lines) {
  nlohmann::json j;
  j["line_size"] = r.line_size;
  j["totals"] = totals_json(r.totals);
  auto& lines = j["lines"] = nlohmann::json::array();
  for (std::size_t i = 0; i < r.lines.size() && i < max_lines; ++i) {
    const auto& l = r.lines[i];
    nlohmann::json ranges = nlohmann::json::array();
    for (const auto& g : l.ranges)
      ranges.push_back({{"begin", g.begin}, {"end", g.end}, {"threads", g.threads}, {"written", g.written}});
    lines.push_back({{"line_address", fmt::format("0x{:x}", l.line_address)},
                     {"classification", l.classification()},
                     {"reads", l.reads},
                     {"writes", l.writes},
                     {"cold_misses", l.cold_misses},
                     {"true_sharing_misses", l.misses_true},
                     {"false_sharing_misses", l.misses_false},
                     {"invalidations", l.invalidations},
                     {"hitm", l.hitm},
                     {"threads", l.threads},
                     {"ranges", ranges},
                     {"symbols", l.symbols}});
  }
  j["lines_reported"] = lines.size();
  j["lines_with_events"] = r.lines.size();
  return j;
}

nlohmann::json to_json(const std::vector<Prediction>& p) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& x : p)
    j.push_back({{"scenario", x.scenario},
                 {"line_size", x.line_size},
                 {"padded", x.padded},
                 {"totals", totals_json(x.totals)}});
  return j;
}

std::string format_table(const SimResult& r, const std::vector<Prediction>& predictions,
                         std::size_t max_lines) {
  std::string out;
  const auto& t = r.totals;
  out += fmt::format(
      "{} accesses on {} lines of {} B: {} coherence misses ({} true sharing, {} false sharing; "
      "{} lines with false sharing), {} invalidations, {} HITM\n",
      t.accesses, t.lines, r.line_size, t.true_events() + t.false_events(), t.true_events(), t.false_events(),
      t.lines_false_sharing, t.invalidations, t.hitm);
  if (!r.lines.empty()) {
    out +=
        fmt::format("\n  {:<18} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8}  {:<21} {}\n", "line", "class", "misses",
                    "false", "true", "inval", "hitm", "threads", "offsets [begin,end) threads, symbols");
    for (std::size_t i = 0; i < r.lines.size() && i < max_lines; ++i) {
      const auto& l = r.lines[i];
      std::string ranges;
      for (const auto& g : l.ranges)
        ranges += fmt::format("{}[0x{:02x},0x{:02x}){}:{{{}}}", ranges.empty() ? "" : " ", g.begin, g.end,
                              g.written ? "w" : "r", thread_list(g.threads));
      out += fmt::format("  0x{:<16x} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8}  {:<21} {}\n", l.line_address,
                         l.classification(), l.events(), l.false_events(), l.true_events(), l.invalidations,
                         l.hitm, thread_list(l.threads), ranges);
      for (const auto& s : l.symbols) out += fmt::format("  {:<20} {}\n", "", s);
    }
    if (r.lines.size() > max_lines)
      out += fmt::format("  ... {} more lines with events\n", r.lines.size() - max_lines);
  }
  if (!predictions.empty()) {
    out += "\npredictions (same trace, other line size or padding)\n";
    out += fmt::format("  {:<28} {:>10} {:>10} {:>10} {:>12}\n", "scenario", "misses", "false", "true",
                       "false lines");
    for (const auto& p : predictions)
      out += fmt::format("  {:<28} {:>10} {:>10} {:>10} {:>12}\n", p.scenario,
                         p.totals.true_events() + p.totals.false_events(), p.totals.false_events(),
                         p.totals.true_events(), p.totals.lines_false_sharing);
  }
  return out;
}

}  // namespace tokenscope::probe
