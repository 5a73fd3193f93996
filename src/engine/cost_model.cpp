#include "engine/cost_model.h"

#include <algorithm>
#include <cmath>

namespace tokenscope::engine {

RooflineCostModel::RooflineCostModel(ModelSpec model, GpuSpec gpu, std::uint32_t tp, RooflineParams params)
    : model_(std::move(model)), gpu_(std::move(gpu)), tp_(std::max<std::uint32_t>(1, tp)), params_(params) {
  const double bpp = model_.weight_bytes_per_param;
  const double router = model_.experts > 1 ? static_cast<double>(model_.hidden) * model_.experts : 0.0;
  const double per_layer_dense = model_.attention_params_per_layer() + router + 2.0 * model_.hidden +
                                 (model_.experts > 1 ? 0.0 : model_.mlp_params_per_expert());
  // lm_head is read every step; the input embedding only for the rows used (negligible).
  dense_weight_bytes_ =
      (model_.layers * per_layer_dense + static_cast<double>(model_.vocab) * model_.hidden) * bpp;
  expert_bytes_ = model_.mlp_params_per_expert() * bpp;
}

double RooflineCostModel::weight_bytes_read(std::uint64_t tokens) const {
  if (model_.experts <= 1) return dense_weight_bytes_;
  // Expected distinct experts per layer reached by `tokens` tokens choosing k of E.
  const double e = model_.experts;
  const double k = model_.experts_per_token;
  const double touched = e * (1.0 - std::pow(1.0 - k / e, static_cast<double>(tokens)));
  return dense_weight_bytes_ + model_.layers * touched * expert_bytes_;
}

StepCost RooflineCostModel::step_cost(const StepShape& s) const {
  StepCost c;
  const std::uint64_t tokens = s.prefill_tokens + s.decode_tokens;
  if (tokens == 0 && s.host_transfer_bytes == 0 && s.extra_seconds == 0.0) return c;
  const double tp = tp_;
  const double peak = gpu_.peak_tflops * 1e12 * tp;
  const double bw = gpu_.mem_bw_tbps * 1e12 * tp * params_.bw_efficiency;
  const double attn_flops_per_pair = 4.0 * model_.layers * model_.heads * model_.head_dim;
  const double kv_per_token = model_.kv_bytes_per_token();

  if (tokens > 0) {
    const double f_lin =
        2.0 * model_.active_layer_params() * static_cast<double>(tokens) +
        2.0 * model_.vocab * static_cast<double>(model_.hidden) * static_cast<double>(s.logit_tokens);
    const double w = weight_bytes_read(tokens);
    c.linear_s = std::max(f_lin / (peak * params_.mfu_linear), w / bw);

    const double f_ap = attn_flops_per_pair * s.prefill_attention_pairs;
    const double b_ap = kv_per_token * s.prefill_kv_read_tokens;
    c.prefill_attention_s = std::max(f_ap / (peak * params_.mfu_attention), b_ap / bw);

    const double f_ad = attn_flops_per_pair * s.decode_attention_pairs;
    const double b_ad = kv_per_token * s.decode_attention_pairs;
    c.decode_attention_s = std::max(f_ad / (peak * params_.mfu_attention), b_ad / bw);

    c.overhead_s = params_.step_overhead_ms * 1e-3 + model_.layers * params_.layer_overhead_us * 1e-6;
    if (tp_ > 1) {
      const double bytes = static_cast<double>(tokens) * model_.hidden * 2.0;
      const double per_allreduce =
          params_.allreduce_latency_us * 1e-6 +
          2.0 * (tp - 1.0) / tp * bytes / (gpu_.nvlink_gbps * 1e9 * params_.allreduce_efficiency);
      c.allreduce_s = 2.0 * model_.layers * per_allreduce;
    }
    c.flops = f_lin + f_ap + f_ad;
    c.bytes = w + b_ap + b_ad;
  }
  if (s.encoder_flops > 0) {
    c.encoder_s = encoder_seconds(s);
    c.flops += s.encoder_flops;
    c.bytes += s.encoder_weight_bytes;
  }
  // Host transfers use each GPU's own link, split evenly under TP.
  c.host_transfer_s = static_cast<double>(s.host_transfer_bytes) / (gpu_.host_link_gbps * 1e9 * tp);
  c.extra_s = s.extra_seconds;
  return c;
}

double RooflineCostModel::encoder_seconds(const StepShape& s) const {
  if (!(s.encoder_flops > 0)) return 0.0;
  const double peak = gpu_.peak_tflops * 1e12 * tp_;
  const double bw = gpu_.mem_bw_tbps * 1e12 * tp_ * params_.bw_efficiency;
  return std::max(s.encoder_flops / (peak * params_.mfu_linear), s.encoder_weight_bytes / bw);
}

StepCost FixedCostModel::step_cost(const StepShape& s) const {
  StepCost c;
  if (s.prefill_tokens + s.decode_tokens > 0) c.overhead_s = step_seconds_;
  c.extra_s = s.extra_seconds;
  if (encoders_) c.encoder_s = encoders_->encoder_seconds(s);
  return c;
}

}  // namespace tokenscope::engine
