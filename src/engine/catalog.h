// Hardware and model catalog. Built-in entries carry vendor datasheet figures
// (dense bf16 tensor throughput, HBM bandwidth, memory) and the shapes of the
// models' published configs; users add or override entries from YAML
// (docs/engine.md shows the format).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tokenscope::engine {

struct GpuSpec {
  std::string name;
  double peak_tflops = 0.0;     // dense bf16/fp16 tensor-core TFLOP/s
  double mem_bw_tbps = 0.0;     // HBM bandwidth, TB/s (1e12 bytes/s)
  double memory_gib = 0.0;      // device memory, GiB
  double nvlink_gbps = 0.0;     // per-GPU NVLink bandwidth, GB/s per direction
  double host_link_gbps = 0.0;  // effective host<->device bandwidth (PCIe), GB/s
};

struct ModelSpec {
  std::string name;
  std::uint32_t layers = 0;
  std::uint32_t hidden = 0;
  std::uint32_t heads = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t intermediate = 0;  // per expert for MoE
  std::uint32_t vocab = 0;
  std::uint32_t experts = 1;            // 1: dense
  std::uint32_t experts_per_token = 1;  // top-k for MoE
  std::uint32_t max_context = 0;        // max_position_embeddings
  bool tied_embeddings = false;
  double weight_bytes_per_param = 2.0;  // bf16
  double kv_bytes_per_element = 2.0;    // bf16 KV cache

  // Encoders of a multimodal model (docs/engine.md "Encoders"); 0 params:
  // none. Vision: an image is cut into tiles of vision_tile_px square (whole
  // tiles over its width and height, at most vision_max_tiles; a smaller
  // image is one tile), each (tile_px / patch_px)^2 patches through the
  // encoder and vision_tokens_per_tile prompt tokens. Audio: the encoder
  // reads audio_frames_per_s frames per second; audio_tokens_per_s prompt
  // tokens per second (pooled).
  double vision_params = 0;
  std::uint32_t vision_tile_px = 448;
  std::uint32_t vision_patch_px = 14;
  std::uint32_t vision_tokens_per_tile = 256;
  std::uint32_t vision_max_tiles = 12;
  double audio_params = 0;
  double audio_frames_per_s = 50;
  double audio_tokens_per_s = 25;
  bool has_vision() const { return vision_params > 0; }
  bool has_audio() const { return audio_params > 0; }
  std::uint32_t image_tiles(std::uint32_t width, std::uint32_t height) const;
  std::uint32_t image_tokens(std::uint32_t width, std::uint32_t height) const {
    return image_tiles(width, height) * vision_tokens_per_tile;
  }
  std::uint32_t audio_tokens(double seconds) const;
  // Encoder FLOPs: 2 x encoder params per patch (per frame); the attention
  // inside a tile is left out (about a tenth more at 1,024 patches).
  double image_encoder_flops(std::uint32_t width, std::uint32_t height) const;
  double audio_encoder_flops(double seconds) const;

  // Parameter counts.
  double attention_params_per_layer() const;
  double mlp_params_per_expert() const;  // gated MLP: 3 * hidden * intermediate
  double params_per_layer() const;       // all experts
  double total_params() const;
  // Parameters every token passes through in the transformer layers
  // (attention, router, top-k experts; embeddings and lm_head excluded).
  double active_layer_params() const;
  // KV cache bytes per token over all layers (K and V).
  double kv_bytes_per_token() const;
};

class Catalog {
 public:
  // The built-in entries.
  static Catalog builtin();

  // Adds or replaces entries from a YAML file with optional top-level lists
  // `gpus:` and `models:`. Throws InputError naming the file, entry and field.
  void load_yaml_file(const std::string& path);
  void load_yaml_text(std::string_view text, const std::string& name);

  // Case-insensitive lookup; also accepts the aliases listed in docs.
  // Throws UsageError listing the known names.
  const GpuSpec& gpu(std::string_view name) const;
  const ModelSpec& model(std::string_view name) const;

  const std::vector<GpuSpec>& gpus() const { return gpus_; }
  const std::vector<ModelSpec>& models() const { return models_; }

 private:
  void load_yaml_checked(std::string_view text, const std::string& name);
  void upsert(GpuSpec g);
  void upsert(ModelSpec m);
  std::vector<GpuSpec> gpus_;
  std::vector<ModelSpec> models_;
};

}  // namespace tokenscope::engine
