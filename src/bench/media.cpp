#include "bench/media.h"

#include <openssl/evp.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/random.h"

namespace tokenscope::bench {

namespace {

void put_be32(std::string& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out += static_cast<char>((v >> s) & 0xff);
}

void put_le(std::string& out, std::uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

// A PNG chunk: length, type, data, CRC-32 of type and data.
void chunk(std::string& out, const char* type, std::string_view data) {
  put_be32(out, static_cast<std::uint32_t>(data.size()));
  const std::size_t start = out.size();
  out.append(type, 4);
  out.append(data);
  const auto crc =
      crc32(0, reinterpret_cast<const Bytef*>(out.data() + start), static_cast<uInt>(out.size() - start));
  put_be32(out, static_cast<std::uint32_t>(crc));
}

}  // namespace

std::string base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(std::max(0, n)));
  return out;
}

const MediaMaker::Rows& MediaMaker::rows(std::uint32_t width) {
  if (auto it = rows_.find(width); it != rows_.end()) return it->second;
  // A row of PNG's Up filter over an equal row: filter byte 2, then zeros.
  std::string row(1 + 3 * std::size_t{width}, '\0');
  row[0] = 2;
  auto deflate_rows = [&](std::uint32_t n) {
    std::string in;
    in.reserve(row.size() * n);
    for (std::uint32_t i = 0; i < n; ++i) in += row;
    z_stream z{};
    if (deflateInit2(&z, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
      throw std::runtime_error("deflateInit2");
    std::string out(deflateBound(&z, in.size()) + 64, '\0');
    z.next_in = reinterpret_cast<Bytef*>(in.data());
    z.avail_in = static_cast<uInt>(in.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    deflate(&z, Z_SYNC_FLUSH);  // byte-aligned and not final: pieces concatenate
    out.resize(z.total_out);
    deflateEnd(&z);
    Piece p;
    p.deflated = std::move(out);
    p.adler = static_cast<std::uint32_t>(
        adler32(1, reinterpret_cast<const Bytef*>(in.data()), static_cast<uInt>(in.size())));
    p.bytes = in.size();
    return p;
  };
  Rows r;
  r.one = deflate_rows(1);
  r.many = deflate_rows(kRowsPerPiece);
  return rows_.emplace(width, std::move(r)).first->second;
}

std::string MediaMaker::png(std::uint32_t width, std::uint32_t height, std::uint64_t key) {
  width = std::clamp<std::uint32_t>(width, 1, 8192);
  height = std::clamp<std::uint32_t>(height, 1, 8192);
  const std::size_t row_bytes = 1 + 3 * std::size_t{width};
  // The first rows: drawn from the key (filter 0), about as many bytes as a
  // JPEG of the picture would take (kBytesPerPixel), at least one row.
  const std::size_t random_rows = std::clamp<std::size_t>(
      static_cast<std::size_t>(kBytesPerPixel * width * height / static_cast<double>(row_bytes)), 1, height);
  std::string idat;
  idat.reserve(16 + random_rows * (row_bytes + 5));
  idat += '\x78';
  idat += '\x01';
  Rng rng(key);
  std::uint32_t adler = 1;
  std::string block;
  const std::size_t rows_per_block = std::max<std::size_t>(1, 65535 / row_bytes);
  for (std::size_t y = 0; y < random_rows; y += rows_per_block) {
    const std::size_t n = std::min(rows_per_block, random_rows - y);
    block.assign(n * row_bytes, '\0');
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t b = 1; b < row_bytes; b += 8) {
        const std::uint64_t v = rng.next_u64();
        for (std::size_t j = 0; j < 8 && b + j < row_bytes; ++j)
          block[i * row_bytes + b + j] = static_cast<char>(v >> (8 * j));
      }
    idat += '\0';  // a stored block, not final
    put_le(idat, static_cast<std::uint32_t>(block.size()), 2);
    put_le(idat, static_cast<std::uint32_t>(~block.size() & 0xffff), 2);
    idat += block;
    adler = static_cast<std::uint32_t>(
        adler32(adler, reinterpret_cast<const Bytef*>(block.data()), static_cast<uInt>(block.size())));
  }
  // The rest: each row equal to the last random one (PNG's Up filter), from the cached pieces.
  std::size_t left = height - random_rows;
  if (left > 0) {
    const Rows& r = rows(width);
    for (; left >= kRowsPerPiece; left -= kRowsPerPiece) {
      idat += r.many.deflated;
      adler = static_cast<std::uint32_t>(
          adler32_combine(adler, r.many.adler, static_cast<z_off_t>(r.many.bytes)));
    }
    for (; left > 0; --left) {
      idat += r.one.deflated;
      adler =
          static_cast<std::uint32_t>(adler32_combine(adler, r.one.adler, static_cast<z_off_t>(r.one.bytes)));
    }
  }
  idat += std::string("\x01\x00\x00\xff\xff", 5);  // an empty stored block, final
  put_be32(idat, adler);

  std::string out = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put_be32(ihdr, width);
  put_be32(ihdr, height);
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB, deflate, adaptive filters, no interlace
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", idat);
  chunk(out, "IEND", "");
  return out;
}

std::string MediaMaker::png_data_url(std::uint32_t width, std::uint32_t height, std::uint64_t key) {
  return "data:image/png;base64," + base64(png(width, height, key));
}

std::string MediaMaker::wav(std::uint32_t ms, std::uint64_t key) {
  const std::size_t n = static_cast<std::size_t>(std::uint64_t{ms} * kSampleRate / 1000);
  while (tone_.size() < n) {
    const double t = static_cast<double>(tone_.size()) / kSampleRate;
    tone_.push_back(
        static_cast<std::int16_t>(8000 * std::sin(2 * M_PI * 440 * t) + 2000 * std::sin(2 * M_PI * 97 * t)));
  }
  std::string out = "RIFF";
  put_le(out, static_cast<std::uint32_t>(36 + 2 * n), 4);
  out += "WAVEfmt ";
  put_le(out, 16, 4);
  put_le(out, 1, 2);  // PCM
  put_le(out, 1, 2);  // mono
  put_le(out, kSampleRate, 4);
  put_le(out, kSampleRate * 2, 4);
  put_le(out, 2, 2);
  put_le(out, 16, 2);
  out += "data";
  put_le(out, static_cast<std::uint32_t>(2 * n), 4);
  const std::size_t head = out.size();
  out.resize(head + 2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto v = static_cast<std::uint16_t>(tone_[i]);
    out[head + 2 * i] = static_cast<char>(v & 0xff);
    out[head + 2 * i + 1] = static_cast<char>(v >> 8);
  }
  Rng rng(key);  // the first samples: drawn from the key
  for (std::size_t i = 0; i < std::min<std::size_t>(64, 2 * n); ++i)
    out[head + i] = static_cast<char>(rng.next_u64() & 0x3f);
  return out;
}

std::string MediaMaker::wav_base64(std::uint32_t ms, std::uint64_t key) {
  return base64(wav(ms, key));
}

}  // namespace tokenscope::bench
