#include "bench/media.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include "serve/openai.h"

namespace tokenscope::bench {
namespace {

std::uint32_t be32(const std::string& s, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// The PNG's chunks, each CRC checked; the IDAT inflated (zlib checks the Adler-32).
std::string pixels_of(const std::string& png) {
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::size_t at = 8;
  std::string idat;
  while (at + 12 <= png.size()) {
    const std::uint32_t len = be32(png, at);
    const std::string type = png.substr(at + 4, 4);
    const auto crc = crc32(0, reinterpret_cast<const Bytef*>(png.data() + at + 4), len + 4);
    EXPECT_EQ(crc, be32(png, at + 8 + len)) << type;
    if (type == "IDAT") idat += png.substr(at + 8, len);
    at += 12 + len;
  }
  EXPECT_EQ(at, png.size());
  std::string out(64u << 20, '\0');
  uLongf n = out.size();
  EXPECT_EQ(uncompress(reinterpret_cast<Bytef*>(out.data()), &n, reinterpret_cast<const Bytef*>(idat.data()),
                       idat.size()),
            Z_OK);
  out.resize(n);
  return out;
}

TEST(Media, PngImagesDecodeToTheirSizeAndDifferByKey) {
  MediaMaker m;
  for (const auto& [w, h] :
       std::vector<std::pair<std::uint32_t, std::uint32_t>>{{640, 480}, {1, 1}, {3, 700}}) {
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
    const std::string a = m.png(w, h, 1), b = m.png(w, h, 2), a2 = m.png(w, h, 1);
    EXPECT_EQ(a, a2);
    const std::string pa = pixels_of(a), pb = pixels_of(b);
    ASSERT_EQ(pa.size(), std::size_t{h} * (1 + 3 * std::size_t{w}));
    EXPECT_NE(pa.substr(0, 1 + 3 * w), pb.substr(0, 1 + 3 * w));  // the first row is the key's
    if (h > 1) {  // the last row repeats the row above (Up filter)
      EXPECT_EQ(pa[pa.size() - (1 + 3 * w)], 2);
    }
    const auto size = serve::image_size(a);
    ASSERT_TRUE(size);
    EXPECT_EQ(size->first, w);
    EXPECT_EQ(size->second, h);
  }
  // A data URL decodes back to the file.
  const std::string url = m.png_data_url(32, 16, 5);
  ASSERT_EQ(url.rfind("data:image/png;base64,", 0), 0u);
  EXPECT_EQ(serve::base64_decode(url.substr(22)), m.png(32, 16, 5));
  // About a JPEG's size: 0.15 bytes a pixel, far below the 3 MiB of pixels.
  const std::size_t big = m.png(1024, 1024, 9).size();
  EXPECT_GT(big, 140'000u);
  EXPECT_LT(big, 200'000u);
}

TEST(Media, WavClipsHaveTheirLength) {
  MediaMaker m;
  const std::string a = m.wav(2500, 1), b = m.wav(2500, 2);
  EXPECT_EQ(a.size(), 44u + 2 * 40000);
  EXPECT_NE(a, b);
  const auto s = serve::wav_seconds(a);
  ASSERT_TRUE(s);
  EXPECT_DOUBLE_EQ(*s, 2.5);
  EXPECT_EQ(serve::base64_decode(m.wav_base64(10, 3)), m.wav(10, 3));
  EXPECT_FALSE(serve::wav_seconds("RIFF....WAVEdata"));
  // A header claiming more samples than follow: the length of those present.
  std::string lying = m.wav(1000, 4);
  lying[40] = lying[41] = lying[42] = '\xff';
  EXPECT_DOUBLE_EQ(*serve::wav_seconds(lying), 1.0);
  // A byte rate that the sample rate and frame size do not make: not a WAV file.
  std::string odd = m.wav(1000, 4);
  odd[28] = 1;
  EXPECT_FALSE(serve::wav_seconds(odd));
  EXPECT_FALSE(serve::base64_decode("abc!"));
  EXPECT_EQ(serve::base64_decode("aGk"), "hi");  // padding optional
}

}  // namespace
}  // namespace tokenscope::bench
