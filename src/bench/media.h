// Generated media for multimodal requests (workload classes with `images`
// or `audio`, docs/workloads.md): PNG images and WAV audio of the planned
// size, each different by its key (so a server's multimodal cache sees a
// new input, as a user's photo would be), sent base64 in chat content parts.
//
// An image's first rows are drawn from the key, about as many bytes as a
// JPEG of its size would take (kBytesPerPixel), sent as stored deflate
// blocks; every later row repeats the one above (PNG's Up filter: zeros),
// from deflate pieces cached per width. An image costs drawing its random
// bytes, a combined Adler-32, a CRC-32 over the chunk and the base64 pass.
// Audio is a 16 kHz mono 16-bit tone with its first samples drawn from the key.
// Not thread-safe: one per client thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tokenscope::bench {

class MediaMaker {
 public:
  // "data:image/png;base64,..." of a width x height RGB image (1..8192 a side).
  std::string png_data_url(std::uint32_t width, std::uint32_t height, std::uint64_t key);
  // The PNG file itself.
  std::string png(std::uint32_t width, std::uint32_t height, std::uint64_t key);
  // A WAV file of `ms` milliseconds, and its base64.
  std::string wav(std::uint32_t ms, std::uint64_t key);
  std::string wav_base64(std::uint32_t ms, std::uint64_t key);

  static constexpr std::uint32_t kSampleRate = 16000;

 private:
  // Raw deflate of rows repeating the row above (Up filter, zeros), ending
  // byte-aligned and not final, so that pieces concatenate.
  struct Piece {
    std::string deflated;
    std::uint32_t adler = 1;
    std::uint64_t bytes = 0;  // uncompressed
  };
  struct Rows {
    Piece one, many;  // 1 row, kRowsPerPiece rows
  };
  static constexpr std::uint32_t kRowsPerPiece = 64;
  // Bytes of random rows per pixel: about a photo's as JPEG (0.15 B/px: a
  // 1,024 x 1,024 image sends some 150 kB, 200 kB as base64).
  static constexpr double kBytesPerPixel = 0.15;
  const Rows& rows(std::uint32_t width);

  std::map<std::uint32_t, Rows> rows_;  // by width
  std::vector<std::int16_t> tone_;      // the base samples, grown as needed
};

// Base64 (RFC 4648, padded, no line breaks).
std::string base64(std::string_view bytes);

}  // namespace tokenscope::bench
