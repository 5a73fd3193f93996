#include "engine/catalog.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/yaml_fields.h"

namespace tokenscope::engine {

double ModelSpec::attention_params_per_layer() const {
  const double q = static_cast<double>(hidden) * heads * head_dim;
  const double kv = 2.0 * hidden * kv_heads * head_dim;
  const double o = static_cast<double>(heads) * head_dim * hidden;
  return q + kv + o;
}

double ModelSpec::mlp_params_per_expert() const {
  return 3.0 * hidden * intermediate;
}

double ModelSpec::params_per_layer() const {
  const double router = experts > 1 ? static_cast<double>(hidden) * experts : 0.0;
  const double norms = 2.0 * hidden;
  return attention_params_per_layer() + experts * mlp_params_per_expert() + router + norms;
}

double ModelSpec::total_params() const {
  const double embeddings = static_cast<double>(vocab) * hidden * (tied_embeddings ? 1.0 : 2.0);
  return layers * params_per_layer() + embeddings + hidden;
}

double ModelSpec::active_layer_params() const {
  const double router = experts > 1 ? static_cast<double>(hidden) * experts : 0.0;
  return layers * (attention_params_per_layer() + experts_per_token * mlp_params_per_expert() + router);
}

double ModelSpec::kv_bytes_per_token() const {
  return 2.0 * layers * kv_heads * head_dim * kv_bytes_per_element;
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string canonical_gpu(std::string_view name) {
  const std::string n = lower(name);
  if (n == "h100" || n == "h100-80g" || n == "h100-sxm5") return "h100-sxm";
  if (n == "a100" || n == "a100-80g" || n == "a100-sxm" || n == "a100-80g-sxm4") return "a100-80g-sxm";
  if (n == "h200-sxm" || n == "h200-141g") return "h200";
  return n;
}

ModelSpec dense(std::string name, std::uint32_t layers, std::uint32_t hidden, std::uint32_t heads,
                std::uint32_t kv_heads, std::uint32_t intermediate, std::uint32_t vocab,
                std::uint32_t max_context) {
  ModelSpec m;
  m.name = std::move(name);
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = hidden / heads;
  m.intermediate = intermediate;
  m.vocab = vocab;
  m.max_context = max_context;
  return m;
}

}  // namespace

std::uint32_t ModelSpec::image_tiles(std::uint32_t width, std::uint32_t height) const {
  if (vision_tile_px == 0) return 0;
  const std::uint64_t across = (std::uint64_t{width} + vision_tile_px - 1) / vision_tile_px;
  const std::uint64_t down = (std::uint64_t{height} + vision_tile_px - 1) / vision_tile_px;
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(across * down, 1, vision_max_tiles));
}

std::uint32_t ModelSpec::audio_tokens(double seconds) const {
  return static_cast<std::uint32_t>(std::ceil(std::max(0.0, seconds) * audio_tokens_per_s));
}

double ModelSpec::image_encoder_flops(std::uint32_t width, std::uint32_t height) const {
  const double side = vision_patch_px > 0 ? static_cast<double>(vision_tile_px) / vision_patch_px : 0.0;
  return 2.0 * vision_params * side * side * image_tiles(width, height);
}

double ModelSpec::audio_encoder_flops(double seconds) const {
  return 2.0 * audio_params * audio_frames_per_s * std::max(0.0, seconds);
}

Catalog Catalog::builtin() {
  Catalog c;
  // Dense bf16 tensor TFLOP/s (no sparsity), HBM TB/s, GiB, NVLink GB/s per
  // direction, effective PCIe GB/s (Gen4 x16 ~25, Gen5 x16 ~50).
  c.gpus_ = {
      {"a100-80g-sxm", 312.0, 2.039, 80.0, 300.0, 25.0},
      {"h100-sxm", 989.0, 3.35, 80.0, 450.0, 50.0},
      {"h200", 989.0, 4.8, 141.0, 450.0, 50.0},
  };
  c.models_ = {
      dense("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
      dense("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072),
      dense("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
      dense("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, 32768),
      dense("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768),
  };
  c.models_.back().experts = 8;
  c.models_.back().experts_per_token = 2;
  // Multimodal entries: the language model of their config.json, and their
  // encoders (docs/engine.md "Encoders"). Qwen2.5-VL-7B: a 0.67 B ViT with
  // 14 px patches merged 2x2 (a 448 px tile: 1,024 patches, 256 tokens).
  // Qwen2-Audio-7B: a Whisper-large-v3 encoder (0.64 B, 50 frames/s, pooled
  // to 25 tokens/s) before a Qwen-7B. Qwen2.5-Omni-7B: both.
  ModelSpec vl = dense("qwen2.5-vl-7b", 28, 3584, 28, 4, 18944, 152064, 128000);
  vl.vision_params = 0.67e9;
  ModelSpec audio = dense("qwen2-audio-7b", 32, 4096, 32, 32, 11008, 156032, 8192);
  audio.audio_params = 0.64e9;
  ModelSpec omni = dense("qwen2.5-omni-7b", 28, 3584, 28, 4, 18944, 152064, 32768);
  omni.vision_params = 0.67e9;
  omni.audio_params = 0.64e9;
  c.models_.push_back(vl);
  c.models_.push_back(audio);
  c.models_.push_back(omni);
  return c;
}

const GpuSpec& Catalog::gpu(std::string_view name) const {
  const std::string key = canonical_gpu(name);
  for (const auto& g : gpus_)
    if (g.name == key) return g;
  std::string known;
  for (const auto& g : gpus_) known += (known.empty() ? "" : ", ") + g.name;
  throw UsageError(
      fmt::format("--gpu: unknown GPU '{}' (known: {}; add one with --catalog FILE)", name, known));
}

const ModelSpec& Catalog::model(std::string_view name) const {
  std::string key = lower(name);
  // Accept Hugging Face style names: meta-llama/Meta-Llama-3-8B -> llama-3-8b.
  if (const auto slash = key.rfind('/'); slash != std::string::npos) key = key.substr(slash + 1);
  if (key.rfind("meta-", 0) == 0) key = key.substr(5);
  for (const auto& suffix : {"-instruct", "-chat", "-v0.1"})
    if (key.size() > std::string_view(suffix).size() && key.ends_with(suffix))
      key.resize(key.size() - std::string_view(suffix).size());
  for (const auto& m : models_)
    if (m.name == key) return m;
  std::string known;
  for (const auto& m : models_) known += (known.empty() ? "" : ", ") + m.name;
  throw UsageError(
      fmt::format("--model: unknown model '{}' (known: {}; add one with --catalog FILE)", name, known));
}

void Catalog::upsert(GpuSpec g) {
  for (auto& existing : gpus_)
    if (existing.name == g.name) {
      existing = std::move(g);
      return;
    }
  gpus_.push_back(std::move(g));
}

void Catalog::upsert(ModelSpec m) {
  for (auto& existing : models_)
    if (existing.name == m.name) {
      existing = std::move(m);
      return;
    }
  models_.push_back(std::move(m));
}

namespace {

struct EntryReader {
  const YAML::Node& node;
  const std::string& file;
  std::string entry;

  double positive(const char* key, bool required, double fallback = 0.0) const {
    const YAML::Node v = node[key];
    if (!v) {
      if (required)
        throw InputError(file, yaml::line_of(node), entry + "." + key,
                         "missing (expected a positive number)");
      return fallback;
    }
    try {
      return yaml::Fields(file).number(v, entry + "." + key, 0, std::numeric_limits<double>::infinity(), true,
                                       "a positive number");
    } catch (const InputError& e) {
      // The catalog names the entry's line (its first), as it does for a missing key.
      throw InputError(file, yaml::line_of(node), e.field(), e.problem());
    }
  }
  std::uint32_t count(const char* key, bool required, std::uint32_t fallback = 0) const {
    const double d = positive(key, required, fallback);
    if (d != std::floor(d) || d > 4e9)
      throw InputError(file, yaml::line_of(node), entry + "." + key, "expected a positive integer");
    return static_cast<std::uint32_t>(d);
  }
};

std::string entry_name(const YAML::Node& n, const std::string& file, const char* list, std::size_t i) {
  if (!n.IsMap())
    throw InputError(file, n.Mark().line + 1, fmt::format("{}[{}]", list, i), "expected a mapping");
  if (!n["name"] || !n["name"].IsScalar() || n["name"].as<std::string>().empty())
    throw InputError(file, n.Mark().line + 1, fmt::format("{}[{}].name", list, i),
                     "missing (expected a string)");
  return lower(n["name"].as<std::string>());
}

}  // namespace

void Catalog::load_yaml_text(std::string_view text, const std::string& file) {
  try {
    load_yaml_checked(text, file);
  } catch (const YAML::Exception& e) {
    throw yaml::load_error(e, file);
  }
}

void Catalog::load_yaml_checked(std::string_view text, const std::string& file) {
  const YAML::Node root = YAML::Load(std::string(text));
  if (!root || root.IsNull()) return;
  if (!root.IsMap()) throw InputError(file, 1, "", "expected a mapping with 'gpus' and/or 'models'");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (key != "gpus" && key != "models")
      throw InputError(file, kv.first.Mark().line + 1, key, "unknown key (expected 'gpus' or 'models')");
  }
  if (const YAML::Node gpus = root["gpus"]) {
    if (!gpus.IsSequence()) throw InputError(file, gpus.Mark().line + 1, "gpus", "expected a list");
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      const YAML::Node n = gpus[i];
      GpuSpec g;
      g.name = entry_name(n, file, "gpus", i);
      EntryReader r{n, file, "gpus[" + g.name + "]"};
      g.peak_tflops = r.positive("peak_tflops", true);
      g.mem_bw_tbps = r.positive("mem_bw_tbps", true);
      g.memory_gib = r.positive("memory_gib", true);
      g.nvlink_gbps = r.positive("nvlink_gbps", false, 300.0);
      g.host_link_gbps = r.positive("host_link_gbps", false, 25.0);
      upsert(std::move(g));
    }
  }
  if (const YAML::Node models = root["models"]) {
    if (!models.IsSequence()) throw InputError(file, models.Mark().line + 1, "models", "expected a list");
    for (std::size_t i = 0; i < models.size(); ++i) {
      const YAML::Node n = models[i];
      ModelSpec m;
      m.name = entry_name(n, file, "models", i);
      EntryReader r{n, file, "models[" + m.name + "]"};
      m.layers = r.count("layers", true);
      m.hidden = r.count("hidden", true);
      m.heads = r.count("heads", true);
      m.kv_heads = r.count("kv_heads", false, m.heads);
      m.head_dim = r.count("head_dim", false, m.hidden / m.heads);
      m.intermediate = r.count("intermediate", true);
      m.vocab = r.count("vocab", true);
      m.experts = r.count("experts", false, 1);
      m.experts_per_token = r.count("experts_per_token", false, 1);
      m.max_context = r.count("max_context", true);
      m.weight_bytes_per_param = r.positive("weight_bytes_per_param", false, 2.0);
      m.kv_bytes_per_element = r.positive("kv_bytes_per_element", false, 2.0);
      if (n["tied_embeddings"]) m.tied_embeddings = n["tied_embeddings"].as<bool>(false);
      if (n["vision_params"]) {
        m.vision_params = r.positive("vision_params", true);
        m.vision_tile_px = r.count("vision_tile_px", false, 448);
        m.vision_patch_px = r.count("vision_patch_px", false, 14);
        m.vision_tokens_per_tile = r.count("vision_tokens_per_tile", false, 256);
        m.vision_max_tiles = r.count("vision_max_tiles", false, 12);
        if (m.vision_patch_px > m.vision_tile_px)
          throw InputError(file, yaml::line_of(n), r.entry + ".vision_patch_px",
                           "expected at most vision_tile_px");
      }
      if (n["audio_params"]) {
        m.audio_params = r.positive("audio_params", true);
        m.audio_frames_per_s = r.positive("audio_frames_per_s", false, 50.0);
        m.audio_tokens_per_s = r.positive("audio_tokens_per_s", false, 25.0);
      }
      if (m.heads % m.kv_heads != 0)
        throw InputError(file, yaml::line_of(n), r.entry + ".kv_heads", "expected a divisor of heads");
      if (m.experts_per_token > m.experts)
        throw InputError(file, yaml::line_of(n), r.entry + ".experts_per_token",
                         "expected at most 'experts'");
      upsert(std::move(m));
    }
  }
}

void Catalog::load_yaml_file(const std::string& path) {
  std::string text;
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw UsageError(fmt::format("{}: cannot open catalog file", path));
    char buf[8192];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    std::fclose(f);
  }
  load_yaml_text(text, path);
}

}  // namespace tokenscope::engine
