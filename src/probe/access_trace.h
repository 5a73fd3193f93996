// Address traces for the line-ownership simulator, and the layout map that
// names what lives at an address. Formats (docs/probes.md):
//
// Text trace, one access a line, '#' starts a comment:
//     THREAD ADDRESS SIZE OP        e.g.  "1 0x7ffd1000 8 w"
//   THREAD: decimal id (0..2^32-1); ADDRESS: hex with 0x, or decimal;
//   SIZE: bytes, 1..4096; OP: r or w (R, W, read, write also accepted).
// Binary trace (what access_recorder.h writes), little-endian:
//   header 16 bytes: magic "TSAT", u32 version = 1, u32 record size = 16, u32 0
//   records 16 bytes: u64 address, u32 thread, u16 size, u8 op (0 read, 1 write), u8 0
// Layout map, one object a line:  ADDRESS SIZE NAME   (NAME is the rest of the line)
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace tokenscope::probe {

struct Access {
  std::uint64_t address = 0;
  std::uint32_t thread = 0;
  std::uint32_t size = 0;
  bool write = false;
};

struct LayoutEntry {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::string name;
};

inline constexpr char kTraceMagic[4] = {'T', 'S', 'A', 'T'};
inline constexpr std::uint32_t kTraceVersion = 1;
inline constexpr std::uint32_t kTraceRecordBytes = 16;
inline constexpr std::uint32_t kMaxAccessBytes = 4096;

// Parses a trace held in memory; binary when it starts with the magic, text
// otherwise. `source` names it in errors (InputError: file, line or record,
// field, what was expected; input quoted with quote_input). At most
// max_records accesses are accepted.
std::vector<Access> parse_access_trace(std::string_view data, const std::string& source,
                                       std::size_t max_records = 200'000'000);
// Reads a trace file as it parses it: memory is the accesses kept (16 bytes
// each), not the file. A directory, an empty file and a line that is not
// text (a NUL byte) are InputErrors that say so.
std::vector<Access> read_access_trace(const std::filesystem::path& path,
                                      std::size_t max_records = 200'000'000);

std::vector<LayoutEntry> parse_layout_map(std::string_view data, const std::string& source);
std::vector<LayoutEntry> read_layout_map(const std::filesystem::path& path);

// Writers (binary trace, text trace, layout map); throw IoError on failure.
std::string encode_binary_trace(const std::vector<Access>& accesses);
std::string encode_text_trace(const std::vector<Access>& accesses);
std::string encode_layout_map(const std::vector<LayoutEntry>& entries);

}  // namespace tokenscope::probe
