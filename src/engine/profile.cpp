#include "engine/profile.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/yaml_fields.h"

namespace tokenscope::engine {

const std::array<ProfileTerm, kProfileTerms>& profile_terms() {
  static const std::array<ProfileTerm, kProfileTerms> terms = {{
      {"step_overhead_ms", "ms", 1e-3, "a step that runs any token"},
      {"prefill_token_us", "us", 1e-6, "each new prompt token in the step"},
      {"prefill_seq_ms", "ms", 1e-3, "each sequence in prefill in the step"},
      {"decode_seq_us", "us", 1e-6, "each sequence decoding in the step"},
      {"prefill_attention_ns", "ns", 1e-9, "each prefill attention pair: sum(n*s + n(n+1)/2)"},
      {"decode_context_ns", "ns", 1e-9, "each token a decoding sequence attends to: sum(c + 1)"},
  }};
  return terms;
}

std::array<double, kProfileTerms> step_features(const StepShape& s) {
  const std::uint64_t tokens = s.prefill_tokens + s.decode_tokens;
  const double prefill_seqs =
      s.num_seqs > s.decode_tokens ? static_cast<double>(s.num_seqs - s.decode_tokens) : 0.0;
  return {tokens > 0 ? 1.0 : 0.0,
          static_cast<double>(s.prefill_tokens),
          prefill_seqs,
          static_cast<double>(s.decode_tokens),
          s.prefill_attention_pairs,
          s.decode_attention_pairs};
}

double curve_seconds(const std::vector<CurvePoint>& c, double d) {
  if (c.empty()) return 0.0;
  if (c.size() == 1) return c.front().seconds;
  const auto along = [&](std::size_t i, double x) {
    const auto& a = c[i];
    const auto& b = c[i + 1];
    const double slope =
        (b.seconds - a.seconds) / (static_cast<double>(b.seqs) - static_cast<double>(a.seqs));
    return a.seconds + slope * (x - static_cast<double>(a.seqs));
  };
  if (d <= static_cast<double>(c.front().seqs)) return c.front().seconds;
  if (d >= static_cast<double>(c.back().seqs)) {
    const auto& a = c[c.size() - 2];
    const auto& b = c.back();
    const double slope =
        std::max(0.0, (b.seconds - a.seconds) / (static_cast<double>(b.seqs) - static_cast<double>(a.seqs)));
    return b.seconds + slope * (d - static_cast<double>(b.seqs));
  }
  const auto it = std::upper_bound(
      c.begin(), c.end(), d, [](double x, const CurvePoint& q) { return x < static_cast<double>(q.seqs); });
  return along(static_cast<std::size_t>(it - c.begin()) - 1, d);
}

namespace {

// Scalars of the server's identity: at most this many, each this long.
constexpr std::size_t kMaxServerKeys = 32;
constexpr std::size_t kMaxServerValue = 512;

std::string quoted(const std::string& s) {
  // A JSON string is a YAML double-quoted scalar.
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string number(double v) {
  return fmt::format("{}", v);
}

}  // namespace

namespace {

// The coefficients' bounds: a second per step, or per unit of what a term
// multiplies, is already far past any server; more would overflow the
// simulator's clock.
constexpr double kMaxStepOverheadS = 60.0;
constexpr double kMaxPerUnitS = 1.0;

Profile parse_profile_checked(const std::string& text, const std::string& file);

}  // namespace

Profile parse_profile(const std::string& text, const std::string& file) {
  try {
    return parse_profile_checked(text, file);
  } catch (const YAML::Exception& e) {
    throw yaml::load_error(e, file);
  }
}

namespace {

Profile parse_profile_checked(const std::string& text, const std::string& file) {
  const YAML::Node root = yaml::load(text, file);
  const yaml::Fields f(file);
  if (!root || !root.IsMap())
    throw InputError(file, 1, "",
                     "expected a mapping (a tokenscope profile: tokenscope_profile: 1, cost: ...)");
  f.only_keys(
      root, "",
      {"tokenscope_profile", "created", "server", "cost", "scheduler", "found", "fit", "ranges", "notes"});
  Profile p;
  const YAML::Node version = root["tokenscope_profile"];
  if (!version)
    throw InputError(file, 1, "tokenscope_profile",
                     "missing (expected the profile format's version, 1: is this a profile written by "
                     "`tokenscope profile`?)");
  p.version = static_cast<int>(f.whole(version, "tokenscope_profile", 1, 1'000'000));
  if (p.version != kProfileVersion)
    f.fail(version, "tokenscope_profile",
           fmt::format("version {} is not read by this build (it reads version {})", p.version,
                       kProfileVersion));
  if (const YAML::Node c = root["created"]) p.created = f.string(c, "created");
  p.server = nlohmann::json::object();
  if (const YAML::Node s = root["server"]) {
    if (!s.IsMap()) f.fail(s, "server", "expected a mapping of names to values");
    if (s.size() > kMaxServerKeys)
      f.fail(s, "server", fmt::format("expected at most {} keys", kMaxServerKeys));
    for (const auto& kv : s) {
      if (!kv.first.IsScalar()) f.fail(kv.first, "server", "expected names (strings) as keys");
      const std::string key = kv.first.Scalar();
      if (!kv.second.IsScalar()) f.fail(kv.second, "server." + key, "expected a scalar");
      std::string v = kv.second.Scalar();
      if (v.size() > kMaxServerValue)
        f.fail(kv.second, "server." + key, fmt::format("expected at most {} bytes", kMaxServerValue));
      p.server[key] = std::move(v);
    }
  }
  const YAML::Node cost = root["cost"];
  if (!cost) throw InputError(file, 1, "cost", "missing (expected the step-cost coefficients)");
  {
    f.only_keys(cost, "cost",
                {"step_overhead_ms", "prefill_token_us", "prefill_seq_ms", "decode_seq_us",
                 "prefill_attention_ns", "decode_context_ns", "decode_curve"});
    for (std::size_t i = 0; i < kProfileTerms; ++i) {
      const auto& t = profile_terms()[i];
      const std::string field = std::string("cost.") + t.key;
      const YAML::Node n = cost[t.key];
      if (!n) f.fail(cost, field, fmt::format("missing (expected {}: the cost of {})", t.unit, t.multiplies));
      const double hi = (i == 0 ? kMaxStepOverheadS : kMaxPerUnitS) / t.seconds_per_unit;
      const std::string expected = fmt::format("a number of {} in [0, {:g}]", t.unit, hi);
      if (n.IsMap()) {
        f.only_keys(n, field, {"value", "stderr"});
        if (!n["value"]) f.fail(n, field + ".value", "missing (expected " + expected + ")");
        p.coef[i] = f.number(n["value"], field + ".value", 0, hi, false, expected) * t.seconds_per_unit;
        if (n["stderr"] && !n["stderr"].IsNull())
          p.stderr_[i] = f.number(n["stderr"], field + ".stderr", 0, 1e300, false, "a number at least 0") *
                         t.seconds_per_unit;
      } else {
        p.coef[i] = f.number(n, field, 0, hi, false, expected) * t.seconds_per_unit;
      }
    }
    if (const YAML::Node c = cost["decode_curve"]) {
      const std::string field = "cost.decode_curve";
      if (!c.IsSequence() || c.size() == 0 || c.size() > kMaxCurvePoints)
        f.fail(
            c, field,
            fmt::format("expected a list of 1 to {} points {{seqs: decoding sequences, ms: the step's cost}}",
                        kMaxCurvePoints));
      const double hi = kMaxStepOverheadS * 1e3;
      for (std::size_t i = 0; i < c.size(); ++i) {
        const std::string at = fmt::format("{}[{}]", field, i);
        const YAML::Node n = c[i];
        if (!n.IsMap()) f.fail(n, at, "expected a mapping {seqs: N, ms: V, stderr: E}");
        f.only_keys(n, at, {"seqs", "ms", "stderr"});
        if (!n["seqs"]) f.fail(n, at + ".seqs", "missing (expected the number of decoding sequences)");
        if (!n["ms"]) f.fail(n, at + ".ms", "missing (expected the step's cost in ms)");
        CurvePoint q;
        q.seqs = static_cast<std::uint32_t>(f.whole(n["seqs"], at + ".seqs", 0, 1e6));
        if (!p.decode_curve.empty() && q.seqs <= p.decode_curve.back().seqs)
          f.fail(n["seqs"], at + ".seqs",
                 fmt::format("expected more than the point before's {} (points by increasing seqs)",
                             p.decode_curve.back().seqs));
        q.seconds =
            f.number(n["ms"], at + ".ms", 0, hi, false, fmt::format("a number of ms in [0, {:g}]", hi)) *
            1e-3;
        if (n["stderr"] && !n["stderr"].IsNull())
          q.stderr_ = f.number(n["stderr"], at + ".stderr", 0, 1e300, false, "a number at least 0") * 1e-3;
        p.decode_curve.push_back(q);
      }
      // The curve goes on along its last segment: that slope is a cost per
      // decoding sequence, bounded as decode_seq_us is.
      if (const auto n = p.decode_curve.size(); n >= 2) {
        const auto& a = p.decode_curve[n - 2];
        const auto& b = p.decode_curve[n - 1];
        if ((b.seconds - a.seconds) / static_cast<double>(b.seqs - a.seqs) > kMaxPerUnitS)
          f.fail(c[n - 1]["ms"], fmt::format("{}[{}].ms", field, n - 1),
                 fmt::format("expected the last segment to rise at most {:g} ms per decoding sequence (the "
                             "curve goes on along it)",
                             kMaxPerUnitS * 1e3));
      }
      for (const std::size_t i : {std::size_t{0}, std::size_t{3}})
        if (p.coef[i] != 0)
          f.fail(cost[profile_terms()[i].key], std::string("cost.") + profile_terms()[i].key,
                 "expected 0 with a decode_curve (the curve prices a step and its decoding sequences)");
    }
  }
  if (const YAML::Node s = root["scheduler"]) {
    f.only_keys(s, "scheduler",
                {"max_num_seqs", "max_num_batched_tokens", "kv_capacity_tokens", "attention"});
    if (s["attention"]) {
      const std::string a = f.string(s["attention"], "scheduler.attention");
      if (a != "own" && a != "occupancy")
        f.fail(s["attention"], "scheduler.attention", "expected own (vLLM) or occupancy (llama.cpp)");
      p.attention = parse_attention_span(a);
    }
    if (s["max_num_seqs"] && !s["max_num_seqs"].IsNull())
      p.max_num_seqs =
          static_cast<std::uint32_t>(f.whole(s["max_num_seqs"], "scheduler.max_num_seqs", 1, 1e6));
    if (s["max_num_batched_tokens"] && !s["max_num_batched_tokens"].IsNull())
      p.max_num_batched_tokens = static_cast<std::uint32_t>(
          f.whole(s["max_num_batched_tokens"], "scheduler.max_num_batched_tokens", 1, 1e8));
    if (s["kv_capacity_tokens"] && !s["kv_capacity_tokens"].IsNull())
      p.kv_capacity_tokens = f.whole(s["kv_capacity_tokens"], "scheduler.kv_capacity_tokens", 1, 1e12);
  }
  if (const YAML::Node s = root["found"]) {
    f.only_keys(s, "found", {"max_num_seqs", "max_num_batched_tokens", "kv_capacity_tokens", "attention"});
    for (const auto& kv : s) p.found[kv.first.Scalar()] = f.string(kv.second, "found." + kv.first.Scalar());
  }
  if (const YAML::Node s = root["fit"]) {
    f.only_keys(s, "fit", {"observations", "points", "r2", "rmse_ms", "mape", "p90_abs_rel_error"});
    const auto num = [&](const char* key, double lo, double hi) {
      return s[key] ? f.number(s[key], std::string("fit.") + key, lo, hi, false, "a number") : 0.0;
    };
    p.fit.observations = static_cast<std::uint64_t>(num("observations", 0, 1e15));
    p.fit.points = static_cast<std::uint64_t>(num("points", 0, 1e15));
    p.fit.r2 = num("r2", -1e300, 1);
    p.fit.rmse_ms = num("rmse_ms", 0, 1e300);
    p.fit.mape = num("mape", 0, 1e300);
    p.fit.p90_abs_rel_error = num("p90_abs_rel_error", 0, 1e300);
  }
  if (const YAML::Node s = root["ranges"]) {
    f.only_keys(s, "ranges", {"max_prefill_tokens", "max_prompt_tokens", "max_batch", "max_context_tokens"});
    const auto whole = [&](const char* key) {
      return s[key] ? static_cast<std::uint32_t>(f.whole(s[key], std::string("ranges.") + key, 0, 4e9)) : 0u;
    };
    p.ranges.max_prefill_tokens = whole("max_prefill_tokens");
    p.ranges.max_prompt_tokens = whole("max_prompt_tokens");
    p.ranges.max_batch = whole("max_batch");
    p.ranges.max_context_tokens = whole("max_context_tokens");
  }
  if (const YAML::Node s = root["notes"]) {
    if (!s.IsSequence()) f.fail(s, "notes", "expected a list of strings");
    for (std::size_t i = 0; i < s.size(); ++i) p.notes.push_back(f.string(s[i], fmt::format("notes[{}]", i)));
  }
  return p;
}

}  // namespace

Profile read_profile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("{}: cannot open the profile", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  // A profile is a few kilobytes; a large file is not one.
  if (ss.str().size() > (1u << 20))
    throw InputError(path.string(), 0, "", "over 1 MiB: not a profile written by `tokenscope profile`");
  return parse_profile(ss.str(), path.string());
}

std::string profile_yaml(const Profile& p) {
  std::string out;
  out += "# A server's step costs and scheduler limits, fitted by `tokenscope profile` (docs/profile.md).\n";
  out += "# Use it with --profile on sim, serve and bench.\n";
  out += fmt::format("tokenscope_profile: {}\n", p.version);
  if (!p.created.empty()) out += "created: " + quoted(p.created) + "\n";
  out += "server:\n";
  if (p.server.is_object() && !p.server.empty()) {
    for (const auto& [k, v] : p.server.items())
      out += "  " + quoted(k) + ": " + quoted(v.is_string() ? v.get<std::string>() : v.dump()) + "\n";
  } else {
    out.pop_back();
    out += " {}\n";
  }
  out += "cost:  # step = the sum of each coefficient times what it multiplies\n";
  for (std::size_t i = 0; i < kProfileTerms; ++i) {
    const auto& t = profile_terms()[i];
    out += fmt::format("  {}: {{value: {}, stderr: {}}}  # per {}\n", t.key,
                       number(p.coef[i] / t.seconds_per_unit), number(p.stderr_[i] / t.seconds_per_unit),
                       t.multiplies);
  }
  if (!p.decode_curve.empty()) {
    out +=
        "  decode_curve:  # a step with this many decoding sequences costs ms, then the other terms "
        "(in place of step_overhead_ms and decode_seq_us)\n";
    for (const auto& q : p.decode_curve)
      out += fmt::format("    - {{seqs: {}, ms: {}, stderr: {}}}\n", q.seqs, number(q.seconds / 1e-3),
                         number(q.stderr_ / 1e-3));
  }
  const auto opt = [](const auto& v) { return v ? fmt::format("{}", *v) : std::string("null"); };
  out += "scheduler:\n";
  out += "  max_num_seqs: " + opt(p.max_num_seqs) + "\n";
  out += "  max_num_batched_tokens: " + opt(p.max_num_batched_tokens) + "\n";
  out += "  kv_capacity_tokens: " + opt(p.kv_capacity_tokens) + "\n";
  out += "  attention: " + std::string(name_of(p.attention)) +
         "  # own: each sequence's context (vLLM); occupancy: every occupied cell (llama.cpp)\n";
  if (!p.found.empty()) {
    out += "found:  # how each limit was found\n";
    for (const auto& [k, v] : p.found) out += "  " + k + ": " + quoted(v) + "\n";
  }
  out += "fit:\n";
  out += fmt::format(
      "  observations: {}\n  points: {}\n  r2: {}\n  rmse_ms: {}\n  mape: {}\n  p90_abs_rel_error: {}\n",
      p.fit.observations, p.fit.points, number(p.fit.r2), number(p.fit.rmse_ms), number(p.fit.mape),
      number(p.fit.p90_abs_rel_error));
  out += "ranges:  # what the profile measured; beyond them sim extrapolates\n";
  out += fmt::format(
      "  max_prefill_tokens: {}\n  max_prompt_tokens: {}\n  max_batch: {}\n  max_context_tokens: {}\n",
      p.ranges.max_prefill_tokens, p.ranges.max_prompt_tokens, p.ranges.max_batch,
      p.ranges.max_context_tokens);
  if (!p.notes.empty()) {
    out += "notes:\n";
    for (const auto& n : p.notes) out += "  - " + quoted(n) + "\n";
  }
  return out;
}

nlohmann::json to_json(const Profile& p) {
  nlohmann::json cost = nlohmann::json::object();
  for (std::size_t i = 0; i < kProfileTerms; ++i) {
    const auto& t = profile_terms()[i];
    cost[t.key] = {{"value", p.coef[i] / t.seconds_per_unit}, {"stderr", p.stderr_[i] / t.seconds_per_unit}};
  }
  if (!p.decode_curve.empty()) {
    auto& curve = cost["decode_curve"] = nlohmann::json::array();
    for (const auto& q : p.decode_curve)
      curve.push_back({{"seqs", q.seqs}, {"ms", q.seconds / 1e-3}, {"stderr", q.stderr_ / 1e-3}});
  }
  const auto opt = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  return {{"version", p.version},
          {"created", p.created},
          {"server", p.server},
          {"cost", cost},
          {"scheduler",
           {{"max_num_seqs", opt(p.max_num_seqs)},
            {"max_num_batched_tokens", opt(p.max_num_batched_tokens)},
            {"kv_capacity_tokens", opt(p.kv_capacity_tokens)},
            {"attention", name_of(p.attention)}}},
          {"found", p.found},
          {"fit",
           {{"observations", p.fit.observations},
            {"points", p.fit.points},
            {"r2", p.fit.r2},
            {"rmse_ms", p.fit.rmse_ms},
            {"mape", p.fit.mape},
            {"p90_abs_rel_error", p.fit.p90_abs_rel_error}}},
          {"ranges",
           {{"max_prefill_tokens", p.ranges.max_prefill_tokens},
            {"max_prompt_tokens", p.ranges.max_prompt_tokens},
            {"max_batch", p.ranges.max_batch},
            {"max_context_tokens", p.ranges.max_context_tokens}}},
          {"notes", p.notes}};
}

ProfileCostModel::ProfileCostModel(const Profile& p, double host_link_gbps)
    : coef_(p.coef),
      curve_(p.decode_curve),
      host_link_bytes_per_s_(host_link_gbps > 0 ? host_link_gbps * 1e9 : 0.0) {}

StepCost ProfileCostModel::step_cost(const StepShape& s) const {
  StepCost c;
  const auto x = step_features(s);
  if (curve_.empty()) {
    c.overhead_s = coef_[0] * x[0] + coef_[2] * x[2];
    c.linear_s = coef_[1] * x[1] + coef_[3] * x[3];
  } else {
    c.overhead_s = (x[0] > 0 ? curve_seconds(curve_, x[3]) : 0.0) + coef_[2] * x[2];
    c.linear_s = coef_[1] * x[1];
  }
  c.prefill_attention_s = coef_[4] * x[4];
  c.decode_attention_s = coef_[5] * x[5];
  if (host_link_bytes_per_s_ > 0)
    c.host_transfer_s = static_cast<double>(s.host_transfer_bytes) / host_link_bytes_per_s_;
  c.extra_s = s.extra_seconds;
  return c;
}

}  // namespace tokenscope::engine
