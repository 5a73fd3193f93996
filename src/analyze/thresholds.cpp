#include "analyze/thresholds.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/error.h"
#include "core/stats.h"
#include "core/text_reader.h"
#include "core/yaml_fields.h"

namespace tokenscope::analyze {
namespace {

struct Entry {
  const char* key;
  double Thresholds::*member;
  const char* meaning;
  const char* unit;
  double min, max;
};

// The file's keys, in the order of the checklist. A key is SECTION.NAME
// except the two of the whole check.
const Entry kEntries[] = {
    {"confidence", &Thresholds::confidence, "confidence of every interval and test", "ratio", 0.5, 0.9999},
    {"min_requests", &Thresholds::min_requests, "fewer counted requests in a run give no-data", "requests", 2,
     1e9},
    {"family_alpha", &Thresholds::family_alpha,
     "family-wise error rate of the regressed verdicts with an interval (Holm's procedure over every "
     "finding); 0: each finding alone at the confidence",
     "ratio", 0, 0.5},
    {"headline.tolerance", &Thresholds::headline_tolerance,
     "relative change of a latency's p50 and p90 (TTFT, TPOT, ITL, E2E, TTFO, task completion)", "ratio", 0,
     kInf},
    {"headline.throughput_tolerance", &Thresholds::throughput_tolerance,
     "relative change of request and output-token throughput", "ratio", 0, kInf},
    {"latency_model.queue_coef_tolerance_ms", &Thresholds::queue_coef_tolerance_ms,
     "change of TTFT's cost per request queued ahead", "ms", 0, kInf},
    {"latency_model.batch_coef_tolerance_ms", &Thresholds::batch_coef_tolerance_ms,
     "change of ITL's cost per request in the batch", "ms", 0, kInf},
    {"slo.attainment_tolerance", &Thresholds::attainment_tolerance,
     "change of the share of requests meeting every SLO", "ratio", 0, 1},
    {"slo.goodput_tolerance", &Thresholds::goodput_tolerance, "relative change of goodput", "ratio", 0, kInf},
    {"coupling.tolerance", &Thresholds::coupling_tolerance, "relative change of kappa", "ratio", 0, kInf},
    {"coupling.min_group", &Thresholds::coupling_min_group, "requests per group (mixed, quiet) at least",
     "requests", 2, 1e9},
    {"tail.tolerance", &Thresholds::tail_tolerance, "relative change of p99 and p99.9", "ratio", 0, kInf},
    {"tail.median_tolerance", &Thresholds::median_tolerance, "relative change of p50 that still holds",
     "ratio", 0, kInf},
    {"lifecycle.window_s", &Thresholds::window_s, "window of the throughput and latency series (0: auto)",
     "s", 0, kInf},
    {"lifecycle.change_point_pvalue", &Thresholds::change_point_pvalue, "significance of a change point", "p",
     1e-12, 0.5},
    {"lifecycle.phase_min_change", &Thresholds::phase_min_change,
     "relative step of a series' mean at a change point for it to start or end a phase", "ratio", 0, kInf},
    {"lifecycle.warmup_tolerance_s", &Thresholds::warmup_tolerance_s, "change of the warm-up's length", "s",
     0, kInf},
    {"lifecycle.steady_share_tolerance", &Thresholds::steady_share_tolerance,
     "change of the steady phase's share of the run", "ratio", 0, 1},
    {"lifecycle.drift_tolerance", &Thresholds::drift_tolerance,
     "TPOT growth over the steady phase (its trend times its length)", "ratio", 0, kInf},
    {"gpu.efficiency_tolerance", &Thresholds::gpu_efficiency_tolerance,
     "relative change of output tokens/s per unit of GPU busy time", "ratio", 0, kInf},
    {"gpu.idle_utilization", &Thresholds::idle_utilization, "a GPU below this utilisation is idle", "ratio",
     0, 1},
    {"gpu.idle_backlog_max", &Thresholds::idle_backlog_max, "share of time idle while requests wait, at most",
     "ratio", 0, 1},
    {"locality.hit_rate_tolerance", &Thresholds::hit_rate_tolerance,
     "absolute change of the prefix-cache hit rate", "ratio", 0, 1},
    {"locality.reuse_scale_tolerance", &Thresholds::reuse_scale_tolerance,
     "relative change of the decay scale of the hit probability over reuse distance (bench's kv_locality "
     "fit)",
     "ratio", 0, kInf},
    {"collectives.busbw_tolerance", &Thresholds::busbw_tolerance,
     "relative change of bus bandwidth at the largest messages", "ratio", 0, kInf},
    {"collectives.pair_deviation_max", &Thresholds::pair_deviation_max,
     "a pair this much slower than the median pair is flagged", "ratio", 0, kInf},
    {"recompile.tolerance", &Thresholds::recompile_tolerance,
     "relative excess of a shape's first step (or a kernel's first launch) over the next one (its median)",
     "ratio", 0, kInf},
    {"recompile.new_kernel_share_max", &Thresholds::new_kernel_share_max,
     "share of the candidate's GPU kernel time in kernels the base did not launch, at most (CUPTI records)",
     "ratio", 0, 1},
    {"batching.tolerance", &Thresholds::batch_tolerance, "relative change of the mean batch", "ratio", 0,
     kInf},
    {"batching.cap_share_max", &Thresholds::cap_share_max, "share of steps at the batch cap (one run)",
     "ratio", 0, 1},
    {"batching.entropy_tolerance", &Thresholds::entropy_tolerance, "change of the batch-size entropy", "bits",
     0, kInf},
    {"quantization.kl_threshold", &Thresholds::kl_threshold,
     "KL divergence floor; the threshold is max(this, 3 x the base's split-half KL)", "bits", 0, kInf},
    {"contention.psi_max", &Thresholds::psi_max, "mean CPU pressure share, at most (one run)", "ratio", 0, 1},
    {"contention.psi_tolerance", &Thresholds::psi_tolerance, "absolute change of the mean CPU pressure share",
     "ratio", 0, 1},
    {"contention.throttle_tolerance", &Thresholds::throttle_tolerance,
     "absolute change of the share of time the cgroup was throttled", "ratio", 0, 1},
};

const Entry* find_entry(std::string_view key) {
  for (const Entry& e : kEntries)
    if (key == e.key) return &e;
  return nullptr;
}

using yaml::line_of;

double number(const YAML::Node& v, const std::string& file, const std::string& key, double lo, double hi) {
  return yaml::Fields(file).number(v, key, lo, hi, false, fmt::format("a number in [{}, {}]", lo, hi));
}

void parse_slos(const YAML::Node& classes, const std::string& file, Thresholds& t) {
  if (!classes.IsMap())
    throw InputError(file, line_of(classes), "slo.classes",
                     "expected a mapping of task class to {ttft_ms, tpot_ms, e2e_ms, ttfo_ms, percentile}");
  for (const auto& kv : classes) {
    const std::string name = kv.first.as<std::string>();
    const std::string where = "slo.classes." + name;
    if (!kv.second.IsMap()) throw InputError(file, line_of(kv.second), where, "expected a mapping");
    Slo slo;
    for (const auto& f : kv.second) {
      const std::string k = f.first.as<std::string>();
      const std::string fk = where + "." + k;
      if (k == "ttft_ms")
        slo.ttft_ms = number(f.second, file, fk, 0, kInf);
      else if (k == "tpot_ms")
        slo.tpot_ms = number(f.second, file, fk, 0, kInf);
      else if (k == "e2e_ms")
        slo.e2e_ms = number(f.second, file, fk, 0, kInf);
      else if (k == "ttfo_ms")
        slo.ttfo_ms = number(f.second, file, fk, 0, kInf);
      else if (k == "percentile")
        slo.percentile = number(f.second, file, fk, 1e-9, 100);
      else
        throw InputError(file, line_of(f.first), fk,
                         "unknown key (expected ttft_ms, tpot_ms, e2e_ms, ttfo_ms, percentile)");
    }
    if (slo.empty())
      throw InputError(file, line_of(kv.second), where,
                       "expected at least one of ttft_ms, tpot_ms, e2e_ms, ttfo_ms");
    t.slos[name == "default" ? "" : name] = slo;
  }
}

}  // namespace

const std::vector<ThresholdKey>& threshold_keys() {
  static const std::vector<ThresholdKey> keys = [] {
    std::vector<ThresholdKey> k;
    for (const Entry& e : kEntries) k.push_back({e.key, e.meaning, e.unit});
    return k;
  }();
  return keys;
}

std::optional<double> threshold_value(const Thresholds& t, std::string_view key) {
  const Entry* e = find_entry(key);
  if (!e) return std::nullopt;
  return t.*(e->member);
}

namespace {
void read_keys(const YAML::Node& root, const std::string& file, Thresholds& t);
}  // namespace

Thresholds parse_thresholds(std::string_view yaml_text, const std::string& file) {
  Thresholds t;
  const YAML::Node root = yaml::load(std::string(yaml_text), file);
  if (root.IsNull()) return t;  // an empty file: the defaults
  if (!root.IsMap()) throw InputError(file, line_of(root), "", "expected a mapping of keys to numbers");
  try {
    read_keys(root, file, t);
  } catch (const YAML::Exception& e) {
    // A key that is not text (a list or a mapping used as a key, ...).
    throw InputError(file, e.mark.line >= 0 ? static_cast<std::size_t>(e.mark.line) + 1 : 0, "",
                     "expected a mapping of keys (text) to numbers: " + e.msg);
  }
  return t;
}

namespace {
void read_keys(const YAML::Node& root, const std::string& file, Thresholds& t) {
  for (const auto& top : root) {
    const std::string k = top.first.as<std::string>();
    if (const Entry* e = find_entry(k)) {
      t.*(e->member) = number(top.second, file, k, e->min, e->max);
      continue;
    }
    if (!top.second.IsMap())
      throw InputError(file, line_of(top.first), k,
                       "unknown key (tokenscope check --print-thresholds lists every key)");
    for (const auto& sub : top.second) {
      const std::string sk = sub.first.as<std::string>();
      const std::string full = k + "." + sk;
      if (full == "slo.classes") {
        parse_slos(sub.second, file, t);
        continue;
      }
      const Entry* e = find_entry(full);
      if (!e)
        throw InputError(file, line_of(sub.first), full,
                         "unknown key (tokenscope check --print-thresholds lists every key)");
      t.*(e->member) = number(sub.second, file, full, e->min, e->max);
    }
  }
}
}  // namespace

Thresholds load_thresholds(const std::string& path) {
  return parse_thresholds(read_regular_file(path, "thresholds file", kMaxThresholdsBytes), path);
}

std::string thresholds_yaml(const Thresholds& t) {
  std::string out =
      "# tokenscope check thresholds (docs/check.md). Every key is optional;\n"
      "# these are the defaults.\n";
  std::string section;
  for (const Entry& e : kEntries) {
    const std::string_view key = e.key;
    const auto dot = key.find('.');
    const std::string value = fmt::format("{}", t.*(e.member));
    if (dot == std::string_view::npos) {
      out += fmt::format("{}: {}  # {} ({})\n", key, value, e.meaning, e.unit);
      continue;
    }
    const std::string sec(key.substr(0, dot));
    if (sec != section) {
      out += sec + ":\n";
      section = sec;
    }
    out += fmt::format("  {}: {}  # {} ({})\n", key.substr(dot + 1), value, e.meaning, e.unit);
    if (e.member == &Thresholds::goodput_tolerance)
      out +=
          "  # classes:            # SLOs per task class; without them, those the runs were measured with\n"
          "  #   default: {ttft_ms: 500, tpot_ms: 50, percentile: 99}\n";
  }
  return out;
}

}  // namespace tokenscope::analyze
