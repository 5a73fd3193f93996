#include "probe/access_trace.h"

#include <charconv>
#include <cstring>

#include "core/error.h"
#include "core/strings.h"
#include "core/text_reader.h"

namespace tokenscope::probe {

namespace {

// Splits off the next whitespace-separated word.
std::string_view next_word(std::string_view& s) {
  s = trim(s);
  std::size_t i = 0;
  while (i < s.size() && s[i] != ' ' && s[i] != '\t') ++i;
  const auto w = s.substr(0, i);
  s.remove_prefix(i);
  return w;
}

template <typename T>
bool parse_number(std::string_view w, T& out) {
  int base = 10;
  if (w.size() > 2 && w[0] == '0' && (w[1] == 'x' || w[1] == 'X')) {
    w.remove_prefix(2);
    base = 16;
  }
  if (w.empty()) return false;
  const auto r = std::from_chars(w.data(), w.data() + w.size(), out, base);
  return r.ec == std::errc() && r.ptr == w.data() + w.size();
}

// Throws InputError when the line the reader just returned is not text or
// is longer than any line of these formats can be.
void check_line(const TextReader& in, std::string_view line, const std::string& source,
                const char* expected) {
  if (in.flaw() == TextReader::Flaw::kNulByte)
    throw InputError(source, in.line_number(), "",
                     std::string("expected text (") + expected + "), found a NUL byte at byte " +
                         std::to_string(in.nul_column()) + " of the line: " + quote_input(line, 40) +
                         " (a binary or sparse file?)");
  if (in.flaw() == TextReader::Flaw::kTooLong)
    throw InputError(source, in.line_number(), "",
                     std::string("expected text (") + expected + "), got a line longer than " +
                         std::to_string(TextReader::kDefaultMaxLineBytes >> 20) + " MiB starting " +
                         quote_input(line, 40));
}

template <typename T>
T load_le(const char* p) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<T>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

template <typename T>
void store_le(std::string& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

// Reads the records as they come: memory is the accesses kept (exactly
// reserved when the size of the input is known), never a copy of the file.
std::vector<Access> parse_binary(TextReader& in, const std::string& source, std::size_t max_records) {
  const std::string_view header = in.take(16);
  if (header.size() < 16) throw InputError(source, 0, "header", "a 16-byte header after the magic TSAT");
  const auto version = load_le<std::uint32_t>(header.data() + 4);
  const auto record = load_le<std::uint32_t>(header.data() + 8);
  if (version != kTraceVersion)
    throw InputError(source, 0, "version", "version 1, got " + std::to_string(version));
  if (record != kTraceRecordBytes)
    throw InputError(source, 0, "record size", "16 bytes a record, got " + std::to_string(record));
  const auto truncated = [&](std::uint64_t body) {
    return InputError(source, body / kTraceRecordBytes + 1, "record",
                      "whole 16-byte records; the file ends " + std::to_string(body % kTraceRecordBytes) +
                          " bytes into one (truncated?)");
  };
  const auto too_many = [&] {
    return InputError(source, 0, "records", "at most " + std::to_string(max_records) + " records");
  };
  std::vector<Access> out;
  if (const auto size = in.size()) {
    const std::uint64_t body = *size - 16;
    if (body % kTraceRecordBytes != 0) throw truncated(body);
    if (body / kTraceRecordBytes > max_records) throw too_many();
    out.reserve(static_cast<std::size_t>(body / kTraceRecordBytes));
  }
  std::uint64_t body = 0;
  for (;;) {
    const std::string_view chunk = in.take(kTraceRecordBytes * 4096);
    body += chunk.size();
    const std::size_t records = chunk.size() / kTraceRecordBytes;
    for (std::size_t k = 0; k < records; ++k) {
      const char* p = chunk.data() + k * kTraceRecordBytes;
      const std::size_t i = out.size();
      if (i >= max_records) throw too_many();
      Access a;
      a.address = load_le<std::uint64_t>(p);
      a.thread = load_le<std::uint32_t>(p + 8);
      a.size = load_le<std::uint16_t>(p + 12);
      const auto op = static_cast<unsigned char>(p[14]);
      if (a.size == 0 || a.size > kMaxAccessBytes)
        throw InputError(source, i + 1, "size",
                         "1.." + std::to_string(kMaxAccessBytes) + " bytes, got " + std::to_string(a.size));
      if (op > 1) throw InputError(source, i + 1, "op", "0 (read) or 1 (write), got " + std::to_string(op));
      if (a.address > UINT64_MAX - a.size)
        throw InputError(source, i + 1, "address", "an access that does not wrap past 2^64");
      a.write = op == 1;
      out.push_back(a);
    }
    if (chunk.size() % kTraceRecordBytes != 0) throw truncated(body);
    if (chunk.size() < kTraceRecordBytes * 4096) break;
  }
  return out;
}

std::vector<Access> parse_text(TextReader& in, const std::string& source, std::size_t max_records) {
  std::vector<Access> out;
  std::string_view line;
  while (in.next_line(line)) {
    const std::size_t line_no = static_cast<std::size_t>(in.line_number());
    check_line(in, line, source, "THREAD ADDRESS SIZE OP");
    if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    Access a;
    const auto w_thread = next_word(line);
    const auto w_addr = next_word(line);
    const auto w_size = next_word(line);
    const auto w_op = next_word(line);
    if (!parse_number(w_thread, a.thread))
      throw InputError(source, line_no, "thread",
                       "a thread id (0..4294967295), got " + quote_input(w_thread));
    if (!parse_number(w_addr, a.address))
      throw InputError(source, line_no, "address",
                       "an address (0x... hex or decimal), got " + quote_input(w_addr));
    if (!parse_number(w_size, a.size) || a.size == 0 || a.size > kMaxAccessBytes)
      throw InputError(source, line_no, "size",
                       "1.." + std::to_string(kMaxAccessBytes) + " bytes, got " + quote_input(w_size));
    if (w_op == "r" || w_op == "R" || w_op == "read")
      a.write = false;
    else if (w_op == "w" || w_op == "W" || w_op == "write")
      a.write = true;
    else
      throw InputError(source, line_no, "op", "r or w, got " + quote_input(w_op));
    if (!trim(line).empty())
      throw InputError(source, line_no, "line",
                       "four fields (THREAD ADDRESS SIZE OP), got more: " + quote_input(trim(line)));
    if (a.address > UINT64_MAX - a.size)
      throw InputError(source, line_no, "address", "an access that does not wrap past 2^64");
    if (out.size() >= max_records)
      throw InputError(source, line_no, "records", "at most " + std::to_string(max_records) + " records");
    out.push_back(a);
  }
  return out;
}

std::vector<Access> read_accesses(TextReader& in, const std::string& source, std::size_t max_records) {
  const std::string_view head = in.peek(4);
  if (head.size() == 4 && std::memcmp(head.data(), kTraceMagic, 4) == 0)
    return parse_binary(in, source, max_records);
  return parse_text(in, source, max_records);
}

std::vector<LayoutEntry> read_layout(TextReader& in, const std::string& source) {
  std::vector<LayoutEntry> out;
  std::string_view line;
  while (in.next_line(line)) {
    const std::size_t line_no = static_cast<std::size_t>(in.line_number());
    check_line(in, line, source, "ADDRESS SIZE NAME");
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;
    LayoutEntry e;
    const auto w_addr = next_word(line);
    const auto w_size = next_word(line);
    if (!parse_number(w_addr, e.address))
      throw InputError(source, line_no, "address",
                       "an address (0x... hex or decimal), got " + quote_input(w_addr));
    if (!parse_number(w_size, e.size) || e.size == 0 || e.address > UINT64_MAX - e.size)
      throw InputError(source, line_no, "size", "a size in bytes > 0, got " + quote_input(w_size));
    e.name = std::string(trim(line));
    if (e.name.empty()) throw InputError(source, line_no, "name", "a name after the size");
    out.push_back(std::move(e));
    if (out.size() > 10'000'000) throw InputError(source, line_no, "entries", "at most 10,000,000 entries");
  }
  return out;
}

}  // namespace

std::vector<Access> parse_access_trace(std::string_view data, const std::string& source,
                                       std::size_t max_records) {
  TextReader in(data);
  return read_accesses(in, source, max_records);
}

std::vector<Access> read_access_trace(const std::filesystem::path& path, std::size_t max_records) {
  TextReader in = TextReader::open(path.string(), "access trace");
  if (in.peek(1).empty()) throw InputError(path.string(), 0, "", "empty file, no accesses");
  return read_accesses(in, path.string(), max_records);
}

std::vector<LayoutEntry> parse_layout_map(std::string_view data, const std::string& source) {
  TextReader in(data);
  return read_layout(in, source);
}

std::vector<LayoutEntry> read_layout_map(const std::filesystem::path& path) {
  TextReader in = TextReader::open(path.string(), "layout map");
  return read_layout(in, path.string());
}

std::string encode_binary_trace(const std::vector<Access>& accesses) {
  std::string out(kTraceMagic, 4);
  store_le<std::uint32_t>(out, kTraceVersion);
  store_le<std::uint32_t>(out, kTraceRecordBytes);
  store_le<std::uint32_t>(out, 0);
  out.reserve(16 + accesses.size() * kTraceRecordBytes);
  for (const auto& a : accesses) {
    store_le<std::uint64_t>(out, a.address);
    store_le<std::uint32_t>(out, a.thread);
    store_le<std::uint16_t>(out, static_cast<std::uint16_t>(a.size));
    out += static_cast<char>(a.write ? 1 : 0);
    out += '\0';
  }
  return out;
}

std::string encode_text_trace(const std::vector<Access>& accesses) {
  std::string out = "# tokenscope access trace: THREAD ADDRESS SIZE OP\n";
  char buf[96];
  for (const auto& a : accesses) {
    const int n = std::snprintf(buf, sizeof buf, "%u 0x%llx %u %c\n", a.thread,
                                static_cast<unsigned long long>(a.address), a.size, a.write ? 'w' : 'r');
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::string encode_layout_map(const std::vector<LayoutEntry>& entries) {
  std::string out = "# tokenscope layout map: ADDRESS SIZE NAME\n";
  char buf[64];
  for (const auto& e : entries) {
    const int n = std::snprintf(buf, sizeof buf, "0x%llx %llu ", static_cast<unsigned long long>(e.address),
                                static_cast<unsigned long long>(e.size));
    out.append(buf, static_cast<std::size_t>(n));
    out += e.name;
    out += '\n';
  }
  return out;
}

}  // namespace tokenscope::probe
