#include "observe/proc_files.h"

#include <charconv>
#include <cmath>

#include "core/error.h"
#include "core/strings.h"

namespace tokenscope::observe {
namespace {

// The text's lines with their 1-based numbers; a last line without '\n' counts.
class Lines {
 public:
  explicit Lines(std::string_view text) : text_(text) {}
  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    const std::size_t end = text_.find('\n', pos_);
    const std::size_t stop = end == std::string_view::npos ? text_.size() : end;
    line = text_.substr(pos_, stop - pos_);
    pos_ = stop + 1;
    ++number_;
    return true;
  }
  std::size_t number() const { return number_; }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
  std::size_t number_ = 0;
};

// '\n' too: single-value files end with one (the line parsers see none).
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

// The next whitespace-separated token of s from pos (empty at the end).
std::string_view next_token(std::string_view s, std::size_t& pos) {
  while (pos < s.size() && is_space(s[pos])) ++pos;
  const std::size_t start = pos;
  while (pos < s.size() && !is_space(s[pos])) ++pos;
  return s.substr(start, pos - start);
}

[[noreturn]] void fail(const std::string& file, std::size_t line, std::string_view field,
                       const std::string& problem) {
  throw InputError(file, line, std::string(field), problem);
}

std::uint64_t to_u64(std::string_view tok, const std::string& file, std::size_t line,
                     std::string_view field) {
  std::uint64_t v = 0;
  const auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
  if (tok.empty() || r.ec != std::errc() || r.ptr != tok.data() + tok.size())
    fail(file, line, field, "expected an unsigned integer, got " + quote_input(tok));
  return v;
}

double to_percent(std::string_view tok, const std::string& file, std::size_t line, std::string_view field) {
  double v = 0;
  const auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v, std::chars_format::fixed);
  if (tok.empty() || r.ec != std::errc() || r.ptr != tok.data() + tok.size() || !(v >= 0 && v <= 100))
    fail(file, line, field, "expected a percentage 0..100, got " + quote_input(tok));
  return v;
}

// "KEY=VALUE" split at the '='; false when there is none.
bool split_pair(std::string_view tok, std::string_view& key, std::string_view& value) {
  const std::size_t eq = tok.find('=');
  if (eq == std::string_view::npos) return false;
  key = tok.substr(0, eq);
  value = tok.substr(eq + 1);
  return true;
}

}  // namespace

ProcStat parse_proc_stat(std::string_view text, const std::string& file) {
  ProcStat out;
  bool have_cpu = false;
  Lines lines(text);
  std::string_view line;
  while (lines.next(line)) {
    std::size_t pos = 0;
    const std::string_view key = next_token(line, pos);
    // Only the lines read are split: the "intr" line holds thousands of numbers.
    if (key == "cpu") {
      if (have_cpu) fail(file, lines.number(), "cpu", "a second aggregate 'cpu' line");
      std::uint64_t* fields[] = {&out.cpu.user,   &out.cpu.nice,      &out.cpu.system,  &out.cpu.idle,
                                 &out.cpu.iowait, &out.cpu.irq,       &out.cpu.softirq, &out.cpu.steal,
                                 &out.cpu.guest,  &out.cpu.guest_nice};
      std::size_t n = 0;
      for (std::string_view tok = next_token(line, pos); !tok.empty(); tok = next_token(line, pos)) {
        if (n < std::size(fields)) *fields[n] = to_u64(tok, file, lines.number(), "cpu");
        ++n;  // later fields (a newer kernel's) are skipped
      }
      if (n < 4)
        fail(file, lines.number(), "cpu",
             "expected at least 4 tick counts (user nice system idle), got " + std::to_string(n));
      have_cpu = true;
    } else if (key == "ctxt" || key == "processes" || key == "procs_running" || key == "procs_blocked") {
      const std::uint64_t v = to_u64(next_token(line, pos), file, lines.number(), key);
      if (key == "ctxt")
        out.ctxt = v;
      else if (key == "processes")
        out.processes = v;
      else if (key == "procs_running")
        out.procs_running = v;
      else
        out.procs_blocked = v;
    }
  }
  if (!have_cpu) fail(file, 0, "cpu", "no aggregate 'cpu' line");
  return out;
}

std::vector<MeminfoEntry> parse_meminfo(std::string_view text, const std::string& file) {
  std::vector<MeminfoEntry> out;
  Lines lines(text);
  std::string_view line;
  while (lines.next(line)) {
    if (trim(line).empty()) continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0)
      fail(file, lines.number(), "line", "expected 'Name: value [kB]', got " + quote_input(line));
    MeminfoEntry e;
    e.name = std::string(line.substr(0, colon));
    std::size_t pos = colon + 1;
    const std::string_view number = next_token(line, pos);
    const std::string_view unit = next_token(line, pos);
    e.value = to_u64(number, file, lines.number(), e.name);
    if (unit == "kB") {
      if (e.value > UINT64_MAX / 1024) fail(file, lines.number(), e.name, "value too large");
      e.value *= 1024;
      e.bytes = true;
    } else if (!unit.empty()) {
      fail(file, lines.number(), e.name, "expected the unit 'kB' or none, got " + quote_input(unit));
    }
    if (!next_token(line, pos).empty())
      fail(file, lines.number(), e.name, "unexpected text after the value: " + quote_input(line));
    out.push_back(std::move(e));
  }
  return out;
}

Pressure parse_pressure(std::string_view text, const std::string& file) {
  Pressure out;
  Lines lines(text);
  std::string_view line;
  while (lines.next(line)) {
    std::size_t pos = 0;
    const std::string_view kind = next_token(line, pos);
    if (kind.empty()) continue;
    if (kind != "some" && kind != "full")
      fail(file, lines.number(), "line", "expected 'some' or 'full', got " + quote_input(line));
    auto& slot = kind == "some" ? out.some : out.full;
    if (slot) fail(file, lines.number(), kind, "a second '" + std::string(kind) + "' line");
    PressureLine p;
    bool seen[4] = {};
    for (std::string_view tok = next_token(line, pos); !tok.empty(); tok = next_token(line, pos)) {
      std::string_view key, value;
      if (!split_pair(tok, key, value))
        fail(file, lines.number(), kind, "expected KEY=VALUE, got " + quote_input(tok));
      if (key == "avg10") {
        p.avg10 = to_percent(value, file, lines.number(), key), seen[0] = true;
      } else if (key == "avg60") {
        p.avg60 = to_percent(value, file, lines.number(), key), seen[1] = true;
      } else if (key == "avg300") {
        p.avg300 = to_percent(value, file, lines.number(), key), seen[2] = true;
      } else if (key == "total") {
        p.total_us = to_u64(value, file, lines.number(), key), seen[3] = true;
      }
    }
    if (!(seen[0] && seen[1] && seen[2] && seen[3]))
      fail(file, lines.number(), kind,
           "expected avg10=, avg60=, avg300= and total=, got " + quote_input(line));
    slot = p;
  }
  if (!out.some && !out.full) fail(file, 0, "some", "no 'some' or 'full' line");
  return out;
}

std::vector<NetDevice> parse_net_dev(std::string_view text, const std::string& file) {
  std::vector<NetDevice> out;
  Lines lines(text);
  std::string_view line;
  while (lines.next(line)) {
    if (line.find('|') != std::string_view::npos || trim(line).empty()) continue;  // the two header lines
    // "  eth0: 1 2 ...": the name ends at the last ':' (counters hold none).
    const std::size_t colon = line.rfind(':');
    if (colon == std::string_view::npos)
      fail(file, lines.number(), "line", "expected 'NAME: counters', got " + quote_input(line));
    NetDevice d;
    d.name = std::string(trim(line.substr(0, colon)));
    if (d.name.empty()) fail(file, lines.number(), "line", "no interface name in " + quote_input(line));
    std::uint64_t v[16];
    std::size_t pos = colon + 1, n = 0;
    for (std::string_view tok = next_token(line, pos); !tok.empty(); tok = next_token(line, pos)) {
      if (n < 16) v[n] = to_u64(tok, file, lines.number(), d.name);
      ++n;
    }
    if (n < 16) fail(file, lines.number(), d.name, "expected 16 counters, got " + std::to_string(n));
    // Receive: bytes packets errs drop fifo frame compressed multicast;
    // transmit: bytes packets errs drop fifo colls carrier compressed.
    d.rx_bytes = v[0], d.rx_packets = v[1], d.rx_errs = v[2], d.rx_drop = v[3];
    d.tx_bytes = v[8], d.tx_packets = v[9], d.tx_errs = v[10], d.tx_drop = v[11];
    out.push_back(std::move(d));
  }
  return out;
}

PidStat parse_pid_stat(std::string_view text, const std::string& file) {
  const std::size_t close = text.rfind(')');
  if (text.find('(') == std::string_view::npos || close == std::string_view::npos)
    fail(file, 1, "comm", "expected 'PID (COMM) STATE ...', got " + quote_input(text));
  PidStat out;
  // Fields (3) onwards follow the last ')'; the tokens counted from 3.
  std::string_view rest = text.substr(close + 1);
  if (const std::size_t nl = rest.find('\n'); nl != std::string_view::npos) rest = rest.substr(0, nl);
  std::size_t pos = 0, field = 3;
  bool have[6] = {};
  for (std::string_view tok = next_token(rest, pos); !tok.empty() && field <= 24;
       tok = next_token(rest, pos), ++field) {
    switch (field) {
      case 3:
        if (tok.size() != 1) fail(file, 1, "state", "expected one letter, got " + quote_input(tok));
        out.state = tok[0], have[0] = true;
        break;
      case 14:
        out.utime_ticks = to_u64(tok, file, 1, "utime"), have[1] = true;
        break;
      case 15:
        out.stime_ticks = to_u64(tok, file, 1, "stime"), have[2] = true;
        break;
      case 20:
        out.num_threads = to_u64(tok, file, 1, "num_threads"), have[3] = true;
        break;
      case 22:
        out.start_ticks = to_u64(tok, file, 1, "starttime"), have[4] = true;
        break;
      case 24:
        out.rss_pages = to_u64(tok, file, 1, "rss"), have[5] = true;
        break;
      default:
        break;
    }
  }
  for (bool h : have)
    if (!h) fail(file, 1, "line", "expected at least 24 fields, got " + quote_input(text));
  return out;
}

PidStatus parse_pid_status(std::string_view text, const std::string& file) {
  PidStatus out;
  Lines lines(text);
  std::string_view line;
  while (lines.next(line)) {
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      if (trim(line).empty()) continue;
      fail(file, lines.number(), "line", "expected 'Name:\\tvalue', got " + quote_input(line));
    }
    const std::string_view key = line.substr(0, colon);
    std::size_t pos = colon + 1;
    const auto kilobytes = [&](std::optional<std::uint64_t>& slot) {
      const std::uint64_t v = to_u64(next_token(line, pos), file, lines.number(), key);
      if (const std::string_view unit = next_token(line, pos); unit != "kB")
        fail(file, lines.number(), key, "expected the unit 'kB', got " + quote_input(unit));
      if (v > UINT64_MAX / 1024) fail(file, lines.number(), key, "value too large");
      slot = v * 1024;
    };
    const auto count = [&](std::optional<std::uint64_t>& slot) {
      slot = to_u64(next_token(line, pos), file, lines.number(), key);
    };
    if (key == "State") {
      const std::string_view s = next_token(line, pos);
      if (s.size() != 1) fail(file, lines.number(), key, "expected one letter, got " + quote_input(s));
      out.state = s[0];
    } else if (key == "VmRSS") {
      kilobytes(out.vm_rss_bytes);
    } else if (key == "VmHWM") {
      kilobytes(out.vm_hwm_bytes);
    } else if (key == "VmSize") {
      kilobytes(out.vm_size_bytes);
    } else if (key == "Threads") {
      count(out.threads);
    } else if (key == "voluntary_ctxt_switches") {
      count(out.voluntary_ctxt_switches);
    } else if (key == "nonvoluntary_ctxt_switches") {
      count(out.nonvoluntary_ctxt_switches);
    }
  }
  return out;
}

PidCgroup parse_pid_cgroup(std::string_view text, const std::string& file) {
  PidCgroup out;
  Lines lines(text);
  std::string_view line;
  while (lines.next(line)) {
    if (line.empty()) continue;
    const std::size_t c1 = line.find(':');
    const std::size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos)
      fail(file, lines.number(), "line", "expected 'ID:CONTROLLERS:PATH', got " + quote_input(line));
    const std::uint64_t id = to_u64(line.substr(0, c1), file, lines.number(), "hierarchy-ID");
    const std::string_view path = line.substr(c2 + 1);  // a path may hold ':' itself
    if (path.empty() || path.front() != '/')
      fail(file, lines.number(), "path", "expected an absolute cgroup path, got " + quote_input(path));
    if (id != 0) {
      out.has_v1 = true;
    } else {
      if (c2 != c1 + 1)
        fail(file, lines.number(), "controllers", "the cgroup v2 line '0::PATH' names no controllers");
      if (out.unified_path) fail(file, lines.number(), "hierarchy-ID", "a second '0::' line");
      out.unified_path = std::string(path);
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::uint64_t>> parse_flat_keyed(std::string_view text,
                                                                    const std::string& file) {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  Lines lines(text);
  std::string_view line;
  while (lines.next(line)) {
    std::size_t pos = 0;
    const std::string_view key = next_token(line, pos);
    if (key.empty()) continue;
    const std::string_view value = next_token(line, pos);
    if (value.empty()) fail(file, lines.number(), key, "expected 'KEY VALUE', got " + quote_input(line));
    const std::uint64_t v = to_u64(value, file, lines.number(), key);
    if (!next_token(line, pos).empty())
      fail(file, lines.number(), key, "expected 'KEY VALUE', got " + quote_input(line));
    out.emplace_back(std::string(key), v);
  }
  return out;
}

std::uint64_t parse_single_value(std::string_view text, const std::string& file) {
  std::size_t pos = 0;
  const std::uint64_t v = to_u64(next_token(text, pos), file, 1, "value");
  for (const char c : text.substr(pos))
    if (!is_space(c)) fail(file, 1, "value", "expected one number, got " + quote_input(text));
  return v;
}

std::vector<IoStatDevice> parse_io_stat(std::string_view text, const std::string& file) {
  std::vector<IoStatDevice> out;
  Lines lines(text);
  std::string_view line;
  while (lines.next(line)) {
    std::size_t pos = 0;
    const std::string_view device = next_token(line, pos);
    if (device.empty()) continue;
    const std::size_t colon = device.find(':');
    if (colon == std::string_view::npos)
      fail(file, lines.number(), "device", "expected MAJ:MIN, got " + quote_input(device));
    to_u64(device.substr(0, colon), file, lines.number(), "device");
    to_u64(device.substr(colon + 1), file, lines.number(), "device");
    IoStatDevice d;
    d.device = std::string(device);
    for (std::string_view tok = next_token(line, pos); !tok.empty(); tok = next_token(line, pos)) {
      std::string_view key, value;
      if (!split_pair(tok, key, value) || key.empty())
        fail(file, lines.number(), d.device, "expected KEY=VALUE, got " + quote_input(tok));
      d.values.emplace_back(std::string(key), to_u64(value, file, lines.number(), key));
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace tokenscope::observe
