// The canonical mapping (observe/canonical.h) on expositions built from the
// input: family names drawn mostly from the engines' mapped names, samples
// named by their family with a suffix (_bucket, _sum, _count, _total,
// _created) as parse_exposition files them, so the tables are hit; labels
// from the ones the tables read (le, gpu, GPU_I_ID, request_type, model...)
// with arbitrary values, and arbitrary doubles (NaN, ±Inf included). Built
// directly rather than parsed, so every input reaches canonicalize(); the
// text parser has its own target (fuzz_exposition).
//
// Invariants: every output name is canonical; a bucket's last label is le,
// "+Inf" or a finite number, and each histogram's bounds rise strictly to
// +Inf; server series carry no labels but le, GPU series only gpu and mig;
// detection and mapping are deterministic.
#include <fuzzer/FuzzedDataProvider.h>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "observe/canonical.h"
#include "observe/canonical_maps.h"

namespace {
using namespace tokenscope::observe;

constexpr Engine kEngines[] = {Engine::kUnknown,  Engine::kVllmV1, Engine::kVllmV0, Engine::kSglang,
                               Engine::kLlamaCpp, Engine::kTgi,    Engine::kTriton, Engine::kDcgm};

// Family names: every mapped name, with and without _total (prometheus_client
// names a counter family x_total), and two detection markers.
const std::vector<std::string>& name_pool() {
  static const std::vector<std::string> pool = [] {
    std::vector<std::string> p;
    for (Engine e : kEngines)
      for (const auto& m : maps::table_for(e).mappings) {
        p.emplace_back(m.engine_name);
        p.push_back(std::string(m.engine_name) + "_total");
      }
    p.push_back("tokenscope:steps_total");
    p.push_back("vllm:num_requests_swapped");
    return p;
  }();
  return pool;
}

constexpr const char* kSuffixes[] = {"", "_bucket", "_sum", "_count", "_total", "_created"};

constexpr const char* kLabelNames[] = {
    "le",  "gpu", "GPU_I_ID", "engine", "model", "model_name", "request_type", "kv_cache_block_type",
    "pod", ""};
constexpr const char* kLabelValues[] = {"+Inf",      "0.5",     "1",        "1e-3",        "NaN",
                                        "-Inf",      "abc",     "",         "0",           "1",
                                        "scheduled", "waiting", "fraction", "tensorrt_llm"};

bool finite_number(const std::string& s) {
  double v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(v);
}

bool same(const std::vector<Sample>& a, const std::vector<Sample>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || !(a[i].labels == b[i].labels)) return false;
    const bool nan_a = std::isnan(a[i].value), nan_b = std::isnan(b[i].value);
    if (nan_a != nan_b || (!nan_a && a[i].value != b[i].value)) return false;
  }
  return true;
}

void check(const std::vector<Sample>& out, Engine engine) {
  const bool per_gpu = maps::table_for(engine).per_gpu;
  // Per histogram series (name + labels without le): the last bound seen.
  std::map<std::string, double> last_bound;
  for (const auto& s : out) {
    if (!find_canonical(s.name)) __builtin_trap();
    const bool bucket = s.name.ends_with("_bucket");
    std::string key = s.name;
    for (std::size_t i = 0; i < s.labels.size(); ++i) {
      const auto& l = s.labels[i];
      if (l.name == "le") {
        if (!bucket || i + 1 != s.labels.size()) __builtin_trap();
        continue;
      }
      if (!per_gpu || (l.name != "gpu" && l.name != "mig") || l.value.empty()) __builtin_trap();
      key += '\x1f' + l.name + '=' + l.value;
    }
    if (!bucket) continue;
    if (s.labels.empty() || s.labels.back().name != "le") __builtin_trap();
    const std::string& le = s.labels.back().value;
    double bound = INFINITY;
    if (le != "+Inf") {
      if (!finite_number(le)) __builtin_trap();
      std::from_chars(le.data(), le.data() + le.size(), bound);
    }
    const auto [it, fresh] = last_bound.try_emplace(key, bound);
    if (!fresh) {
      if (!(bound > it->second)) __builtin_trap();
      it->second = bound;
    }
  }
  for (const auto& [key, bound] : last_bound)
    if (!std::isinf(bound)) __builtin_trap();  // every canonical histogram ends at +Inf
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const auto& pool = name_pool();
  Exposition e;
  const std::size_t families = in.ConsumeIntegralInRange<std::size_t>(0, 16);
  for (std::size_t f = 0; f < families && in.remaining_bytes() > 0; ++f) {
    // As parse_exposition files samples: under their own name or their stem.
    MetricFamily family;
    family.name = in.ConsumeBool() ? pool[in.ConsumeIntegralInRange<std::size_t>(0, pool.size() - 1)]
                                   : in.ConsumeRandomLengthString(48);
    family.type = static_cast<MetricType>(in.ConsumeIntegralInRange<int>(0, 7));
    const std::size_t samples = in.ConsumeIntegralInRange<std::size_t>(0, 24);
    for (std::size_t i = 0; i < samples && in.remaining_bytes() > 0; ++i) {
      ExpositionSample s;
      s.name =
          in.ConsumeIntegralInRange<int>(0, 15) == 0
              ? in.ConsumeRandomLengthString(48)
              : family.name + kSuffixes[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kSuffixes) - 1)];
      const std::size_t labels = in.ConsumeIntegralInRange<std::size_t>(0, 4);
      for (std::size_t j = 0; j < labels; ++j) {
        Label l;
        l.name = kLabelNames[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kLabelNames) - 1)];
        l.value = in.ConsumeBool()
                      ? kLabelValues[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kLabelValues) - 1)]
                      : in.ConsumeRandomLengthString(16);
        s.labels.push_back(std::move(l));
      }
      s.value = in.ConsumeBool() ? static_cast<double>(in.ConsumeIntegralInRange<int>(-2, 100))
                                 : in.ConsumeFloatingPoint<double>();
      family.samples.push_back(std::move(s));
    }
    e.samples += family.samples.size();
    e.families.push_back(std::move(family));
  }
  const Engine detected = detect_engine(e);
  if (detect_engine(e) != detected) __builtin_trap();
  for (Engine engine : kEngines) {
    const auto out = canonicalize(e, engine);
    if (engine == Engine::kUnknown && !out.empty()) __builtin_trap();
    check(out, engine);
    if (!same(out, canonicalize(e, engine))) __builtin_trap();
  }
  return 0;
}
