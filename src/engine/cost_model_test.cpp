#include "engine/cost_model.h"

#include <gtest/gtest.h>

namespace tokenscope::engine {
namespace {

// Hand-computed figures for Llama-3-8B on one H100-SXM with the default
// parameters (mfu 0.6 / 0.4, bandwidth efficiency 0.8, 0.3 ms + 32 x 3 us):
//   active layer params A = 32 x (41,943,040 + 176,160,768) = 6,979,321,856
//   weights read per step W = 2 bytes x (32 x 218,112,000 + 128,256 x 4,096)
//                           = 15,009,841,152 bytes
//   effective bandwidth = 3.35e12 x 0.8 = 2.68e12 B/s -> W takes 5.600687 ms
//   attention FLOPs per (query, key) pair = 4 x 32 x 32 x 128 = 524,288
//   KV bytes per token = 131,072
class LlamaOnH100 : public ::testing::Test {
 protected:
  const Catalog catalog = Catalog::builtin();
  RooflineCostModel model{catalog.model("llama-3-8b"), catalog.gpu("h100-sxm"), 1, RooflineParams{}};
};

TEST_F(LlamaOnH100, SingleDecodeIsBandwidthBound) {
  StepShape s;
  s.num_seqs = 1;
  s.decode_tokens = 1;
  s.logit_tokens = 1;
  s.decode_attention_pairs = 1024;  // 1,023 cached tokens + itself
  const StepCost c = model.step_cost(s);
  EXPECT_NEAR(c.linear_s, 5.600686997e-3, 1e-12);          // W / 2.68e12
  EXPECT_NEAR(c.decode_attention_s, 5.0081242e-5, 1e-12);  // 1024 x 131,072 B / 2.68e12
  EXPECT_NEAR(c.overhead_s, 0.396e-3, 1e-15);
  EXPECT_NEAR(c.total_s(), 6.046768239e-3, 1e-12);
  EXPECT_DOUBLE_EQ(c.prefill_attention_s, 0.0);
}

TEST_F(LlamaOnH100, LongPrefillIsComputeBound) {
  StepShape s;
  s.num_seqs = 1;
  s.prefill_tokens = 2048;
  s.logit_tokens = 1;
  s.prefill_attention_pairs = 2048.0 * 2049.0 / 2.0;
  s.prefill_kv_read_tokens = 2048;
  const StepCost c = model.step_cost(s);
  // (2 A x 2048 + 2 x 128,256 x 4,096) / (989e12 x 0.6)
  EXPECT_NEAR(c.linear_s, 48.17720424e-3, 1e-11);
  // 524,288 x 2,098,176 / (989e12 x 0.4)
  EXPECT_NEAR(c.prefill_attention_s, 2.780709046e-3, 1e-12);
  EXPECT_NEAR(c.total_s(), 51.35391329e-3, 1e-11);
}

TEST_F(LlamaOnH100, MixedBatchAddsPerPhaseAttention) {
  StepShape s;
  s.prefill_tokens = 512;
  s.prefill_attention_pairs = 512.0 * 1000 + 512.0 * 513 / 2;
  s.prefill_kv_read_tokens = 1512;
  s.decode_tokens = 64;
  s.decode_attention_pairs = 64.0 * 2000;
  s.logit_tokens = 65;
  const StepCost c = model.step_cost(s);
  EXPECT_NEAR(c.linear_s, 13.66442961e-3, 1e-11);
  EXPECT_NEAR(c.prefill_attention_s, 0.8526014926e-3, 1e-12);
  EXPECT_NEAR(c.decode_attention_s, 6.260155224e-3, 1e-12);
  EXPECT_NEAR(c.total_s(), 21.17318633e-3, 1e-11);
}

TEST(CostModel, TensorParallelSplitsWorkAndAddsAllReduce) {
  const auto catalog = Catalog::builtin();
  RooflineCostModel tp1(catalog.model("llama-3-70b"), catalog.gpu("h100-sxm"), 1, RooflineParams{});
  RooflineCostModel tp4(catalog.model("llama-3-70b"), catalog.gpu("h100-sxm"), 4, RooflineParams{});
  StepShape s;
  s.decode_tokens = 32;
  s.logit_tokens = 32;
  s.decode_attention_pairs = 32 * 1000;
  const auto a = tp1.step_cost(s);
  const auto b = tp4.step_cost(s);
  EXPECT_NEAR(b.linear_s, a.linear_s / 4, 1e-12);
  EXPECT_DOUBLE_EQ(a.allreduce_s, 0.0);
  // 2 x 80 layers x (10 us + 2 x 3/4 x 32 x 8192 x 2 B / (450e9 x 0.7))
  EXPECT_NEAR(b.allreduce_s, 160 * (10e-6 + 1.5 * 524288.0 / 315e9), 1e-12);
}

TEST(CostModel, MixtureOfExpertsReadsOnlyReachedExperts) {
  const auto catalog = Catalog::builtin();
  RooflineCostModel m(catalog.model("mixtral-8x7b"), catalog.gpu("h100-sxm"), 1, RooflineParams{});
  // One token reaches 2 of 8 experts; many tokens reach all 8.
  const double expert = 3.0 * 4096 * 14336 * 2;
  EXPECT_NEAR(m.weight_bytes_read(1000) - m.weight_bytes_read(1), 32 * 6 * expert, 32 * expert * 1e-6);
}

// The encoders: compute-bound at 1,024 patches a tile (2 x 0.67e9 x 1024 FLOPs
// at 0.6 x 989 TFLOP/s = 2.31 ms against 1.34 GB of weights at 2.68 TB/s = 0.5 ms).
TEST(CostModel, EncodersAreChargedRooflineStyle) {
  const Catalog catalog = Catalog::builtin();
  const ModelSpec vl = catalog.model("qwen2.5-vl-7b");
  RooflineCostModel model{vl, catalog.gpu("h100-sxm"), 1, RooflineParams{}};
  StepShape s;
  s.num_seqs = 1;
  s.prefill_tokens = 300;
  s.logit_tokens = 1;
  s.prefill_attention_pairs = 300.0 * 301 / 2;
  s.prefill_kv_read_tokens = 300;
  const StepCost without = model.step_cost(s);
  EXPECT_EQ(without.encoder_s, 0.0);
  s.encoder_flops = vl.image_encoder_flops(448, 448);
  s.encoder_weight_bytes = vl.vision_params * 2;
  const StepCost with = model.step_cost(s);
  EXPECT_NEAR(with.encoder_s, 2.0 * 0.67e9 * 1024 / (989e12 * 0.6), 1e-9);
  EXPECT_NEAR(with.total_s() - without.total_s(), with.encoder_s, 1e-12);
  // Few patches: the weights' read bounds it.
  s.encoder_flops = 1e6;
  EXPECT_NEAR(model.step_cost(s).encoder_s, 0.67e9 * 2 / (3.35e12 * 0.8), 1e-9);
}

TEST(CostModel, HostTransfersAndFixedCosts) {
  const auto catalog = Catalog::builtin();
  RooflineCostModel m(catalog.model("llama-3-8b"), catalog.gpu("h100-sxm"), 1, RooflineParams{});
  StepShape s;
  s.host_transfer_bytes = 50'000'000'000ULL;  // 50 GB over a 50 GB/s link
  s.extra_seconds = 0.25;
  EXPECT_NEAR(m.step_cost(s).total_s(), 1.25, 1e-12);
  FixedCostModel f(0.002);
  StepShape one;
  one.decode_tokens = 1;
  EXPECT_DOUBLE_EQ(f.step_cost(one).total_s(), 0.002);
  EXPECT_DOUBLE_EQ(f.step_cost(StepShape{}).total_s(), 0.0);
}

}  // namespace
}  // namespace tokenscope::engine
