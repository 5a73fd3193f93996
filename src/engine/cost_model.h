// Step cost models. A step is one forward pass of the continuous batch: some
// sequences in prefill (a chunk of n new tokens after s already computed),
// the others decoding one token each.
//
// RooflineCostModel (docs/engine.md derives every term):
//   linear  = max(F_lin / (P * mfu_linear), W / (B * bw_efficiency))
//             F_lin = 2 * A * T + 2 * V * H * T_logits, A = active layer
//             params, T = new tokens in the step, T_logits = sequences that
//             sample a token; W = bytes of weights read once per step (for
//             MoE only the experts the step's tokens reach, in expectation).
//   prefill = max(F_ap / (P * mfu_attention), KV_p / (B * bw_efficiency))
//             F_ap = 4 * L * heads * head_dim * sum(n*s + n(n+1)/2) (causal),
//             KV_p = kv_bytes_per_token * sum(s + n).
//   decode  = max(F_ad / (P * mfu_attention), KV_d / (B * bw_efficiency))
//             F_ad = 4 * L * heads * head_dim * sum(c + 1), KV_d likewise
//             with c = tokens already cached.
//   encoder = max(F_enc / (P * mfu_linear), W_enc / (B * bw_efficiency))
//             F_enc = the encoder FLOPs of the images and audio whose
//             requests start their prefill in the step (ModelSpec), W_enc =
//             the weights of the encoders that run (read once per step).
//   step    = linear + prefill + decode + encoder + step_overhead
//             + L * layer_overhead + allreduce + host transfers / host_link
//   allreduce (TP > 1) = 2 * L * (alpha + 2 (tp-1)/tp * T * H * 2 bytes
//             / (nvlink * allreduce_efficiency)).
// P = peak TFLOP/s, B = HBM bandwidth; FLOPs and bytes are split evenly over
// the tp GPUs. The linear layers see prefill and decode tokens together (one
// GEMM per layer reads the weights once); attention runs per phase.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/catalog.h"

namespace tokenscope::engine {

struct StepShape {
  std::uint64_t num_seqs = 0;
  std::uint64_t prefill_tokens = 0;       // new tokens of sequences in prefill
  std::uint64_t decode_tokens = 0;        // sequences decoding (one token each)
  std::uint64_t logit_tokens = 0;         // sequences that sample a token this step
  double prefill_attention_pairs = 0.0;   // sum of n*s + n(n+1)/2 over prefill chunks
  double prefill_kv_read_tokens = 0.0;    // sum of s + n
  double decode_attention_pairs = 0.0;    // sum of c + 1 over decoding sequences
  std::uint64_t host_transfer_bytes = 0;  // KV swapped in or out this step
  double extra_seconds = 0.0;             // fixed costs charged to the step (context switches)
  double encoder_flops = 0.0;             // multimodal encoders run in the step
  double encoder_weight_bytes = 0.0;      // their weights
};

struct StepCost {
  double linear_s = 0.0;
  double prefill_attention_s = 0.0;
  double decode_attention_s = 0.0;
  double overhead_s = 0.0;
  double allreduce_s = 0.0;
  double host_transfer_s = 0.0;
  double extra_s = 0.0;
  double encoder_s = 0.0;
  double flops = 0.0;  // total over all GPUs
  double bytes = 0.0;  // HBM bytes, total over all GPUs
  double total_s() const {
    return linear_s + prefill_attention_s + decode_attention_s + overhead_s + allreduce_s + host_transfer_s +
           extra_s + encoder_s;
  }
};

// The interface a later issue implements with a profile fitted to a real server.
class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual StepCost step_cost(const StepShape& shape) const = 0;
};

struct RooflineParams {
  double mfu_linear = 0.6;         // achieved share of peak in the GEMMs
  double mfu_attention = 0.4;      // achieved share of peak in attention kernels
  double bw_efficiency = 0.8;      // achieved share of HBM bandwidth
  double step_overhead_ms = 0.3;   // scheduling, sampling, input prep per step
  double layer_overhead_us = 3.0;  // per layer per step (kernel gaps under CUDA graphs)
  double allreduce_latency_us = 10.0;
  double allreduce_efficiency = 0.7;
};

class RooflineCostModel final : public CostModel {
 public:
  RooflineCostModel(ModelSpec model, GpuSpec gpu, std::uint32_t tp, RooflineParams params);
  StepCost step_cost(const StepShape& shape) const override;

  const RooflineParams& params() const { return params_; }
  // Bytes of weights read by a step with `tokens` new tokens (all GPUs).
  double weight_bytes_read(std::uint64_t tokens) const;
  // The encoder term of a step alone.
  double encoder_seconds(const StepShape& shape) const;

 private:
  ModelSpec model_;
  GpuSpec gpu_;
  std::uint32_t tp_;
  RooflineParams params_;
  double dense_weight_bytes_;  // per step, excluding expert MLPs
  double expert_bytes_;        // one expert of one layer
};

// A model where every step costs exactly `step_seconds` (0 allowed): for
// measuring the serving path alone, and for tests.
// A constant step time (--fixed-step-ms), whatever the batch; the encoders
// of images and audio still cost their roofline time when `encoders` is
// given (the model's), so that a multimodal class's load is known exactly.
class FixedCostModel final : public CostModel {
 public:
  explicit FixedCostModel(double step_seconds, std::unique_ptr<RooflineCostModel> encoders = nullptr)
      : step_seconds_(step_seconds), encoders_(std::move(encoders)) {}
  StepCost step_cost(const StepShape& shape) const override;

 private:
  double step_seconds_;
  std::unique_ptr<RooflineCostModel> encoders_;
};

}  // namespace tokenscope::engine
