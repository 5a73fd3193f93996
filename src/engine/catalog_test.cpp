#include "engine/catalog.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace tokenscope::engine {
namespace {

TEST(Catalog, BuiltinShapesGiveThePublishedParameterCounts) {
  const auto c = Catalog::builtin();
  const auto& m = c.model("llama-3-8b");
  // 32 x (attention 41,943,040 + MLP 176,160,768 + norms 8,192) + 2 x 128256 x 4096 + 4096
  EXPECT_DOUBLE_EQ(m.total_params(), 8030261248.0);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token(), 131072.0);  // 2 x 32 layers x 8 heads x 128 x 2 bytes
  EXPECT_NEAR(c.model("llama-3-70b").total_params() / 1e9, 70.55, 0.01);
  EXPECT_NEAR(c.model("mixtral-8x7b").total_params() / 1e9, 46.70, 0.01);
  EXPECT_NEAR(c.model("qwen2.5-7b").total_params() / 1e9, 7.62, 0.01);
  EXPECT_DOUBLE_EQ(c.gpu("h100-sxm").peak_tflops, 989.0);
  EXPECT_DOUBLE_EQ(c.gpu("A100").mem_bw_tbps, 2.039);
  EXPECT_DOUBLE_EQ(c.gpu("h200").memory_gib, 141.0);
  EXPECT_EQ(c.model("meta-llama/Meta-Llama-3-8B-Instruct").name, "llama-3-8b");
}

// Encoders: tiles of 448 px (a smaller side counts one), capped at 12;
// 1,024 patches a tile through 0.67 B parameters; audio 50 frames and 25
// tokens a second.
TEST(Catalog, EncodersCountTilesTokensAndFlops) {
  const auto c = Catalog::builtin();
  const auto& vl = c.model("qwen2.5-vl-7b");
  EXPECT_TRUE(vl.has_vision());
  EXPECT_FALSE(vl.has_audio());
  EXPECT_EQ(vl.image_tiles(448, 448), 1u);
  EXPECT_EQ(vl.image_tiles(100, 30), 1u);
  EXPECT_EQ(vl.image_tiles(449, 448), 2u);
  EXPECT_EQ(vl.image_tiles(1344, 900), 9u);  // 3 x 3
  EXPECT_EQ(vl.image_tiles(8192, 8192), 12u);
  EXPECT_EQ(vl.image_tokens(1344, 900), 9u * 256);
  EXPECT_DOUBLE_EQ(vl.image_encoder_flops(448, 448), 2.0 * 0.67e9 * 1024);
  const auto& audio = c.model("qwen2-audio-7b");
  EXPECT_EQ(audio.audio_tokens(2.5), 63u);  // ceil(62.5)
  EXPECT_DOUBLE_EQ(audio.audio_encoder_flops(2.0), 2.0 * 0.64e9 * 100);
  EXPECT_FALSE(c.model("llama-3-8b").has_vision());
  Catalog custom = Catalog::builtin();
  custom.load_yaml_text(
      "models:\n  - {name: tiny-vl, layers: 2, hidden: 64, heads: 4, intermediate: 128, vocab: 100, "
      "max_context: 1024, vision_params: 1e8, vision_tile_px: 336, vision_tokens_per_tile: 576}\n",
      "cat.yaml");
  EXPECT_EQ(custom.model("tiny-vl").image_tokens(672, 336), 2u * 576);
  EXPECT_THROW(
      custom.load_yaml_text("models:\n  - {name: x, layers: 2, hidden: 64, heads: 4, intermediate: 128, "
                            "vocab: 100, max_context: 1024, vision_params: 1e8, vision_patch_px: 999}\n",
                            "cat.yaml"),
      InputError);
}

TEST(Catalog, UnknownNamesListTheKnownOnes) {
  const auto c = Catalog::builtin();
  try {
    c.gpu("tpu-v5");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("h100-sxm"), std::string::npos);
  }
  EXPECT_THROW(c.model("gpt-5"), UsageError);
}

TEST(Catalog, YamlAddsAndOverridesEntries) {
  auto c = Catalog::builtin();
  c.load_yaml_text(R"(
gpus:
  - name: L40S
    peak_tflops: 362
    mem_bw_tbps: 0.864
    memory_gib: 48
models:
  - name: tiny
    layers: 2
    hidden: 256
    heads: 4
    kv_heads: 2
    intermediate: 512
    vocab: 1000
    max_context: 4096
  - name: llama-3-8b
    layers: 32
    hidden: 4096
    heads: 32
    kv_heads: 8
    intermediate: 14336
    vocab: 128256
    max_context: 16384
)",
                   "cat.yaml");
  EXPECT_DOUBLE_EQ(c.gpu("l40s").memory_gib, 48.0);
  EXPECT_DOUBLE_EQ(c.gpu("l40s").host_link_gbps, 25.0);  // default
  EXPECT_EQ(c.model("tiny").head_dim, 64u);
  EXPECT_EQ(c.model("llama-3-8b").max_context, 16384u);
}

TEST(Catalog, YamlErrorsNameFileLineAndField) {
  auto c = Catalog::builtin();
  try {
    c.load_yaml_text("models:\n  - name: x\n    layers: -2\n", "cat.yaml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "cat.yaml");
    EXPECT_EQ(e.line(), 2u);
    EXPECT_EQ(e.field(), "models[x].layers");
  }
  EXPECT_THROW(c.load_yaml_text("gpus: [ {name: a, peak_tflops: 1", "cat.yaml"), InputError);
  EXPECT_THROW(c.load_yaml_text("models:\n  - name: x\n    layers: 2\n", "cat.yaml"), InputError);
  EXPECT_THROW(c.load_yaml_text("colours: []\n", "cat.yaml"), InputError);
  EXPECT_THROW(
      c.load_yaml_text("gpus:\n  - name: g\n    peak_tflops: lots\n    mem_bw_tbps: 1\n    memory_gib: 1\n",
                       "cat.yaml"),
      InputError);
}

}  // namespace
}  // namespace tokenscope::engine
