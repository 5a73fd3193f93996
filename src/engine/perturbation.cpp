#include "engine/perturbation.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/math/special_functions/erf.hpp>
#include <charconv>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/random.h"
#include "core/strings.h"

namespace tokenscope::engine {

std::string_view name_of(PerturbationKind k) {
  switch (k) {
    case PerturbationKind::kTail:
      return "tail";
    case PerturbationKind::kWarmup:
      return "warmup";
    case PerturbationKind::kLeak:
      return "leak";
    case PerturbationKind::kSteal:
      return "steal";
    case PerturbationKind::kBatchCap:
      return "batch_cap";
    case PerturbationKind::kKv:
      return "kv";
    case PerturbationKind::kRecompile:
      return "recompile";
  }
  return "tail";
}

namespace {

std::string_view name_of(TailTarget t) {
  return t == TailTarget::kSteps ? "steps" : "requests";
}
std::string_view name_of(TailDistribution d) {
  return d == TailDistribution::kPareto ? "pareto" : "lognormal";
}
std::string_view name_of(WarmupCurve c) {
  return c == WarmupCurve::kLinear ? "linear" : "exp";
}

// One item of the spec, for error messages: its 1-based position and text.
struct Item {
  std::size_t position = 0;
  std::string_view text;
  [[noreturn]] void fail(std::string_view problem) const {
    throw UsageError(fmt::format("--perturb: item {} {}: {}", position, quote_input(text), problem));
  }
};

// The KEY=VALUE parameters of one item; each key at most once.
class Params {
 public:
  Params(const Item& item, std::string_view list, std::initializer_list<std::string_view> keys)
      : item_(item), keys_(keys) {
    std::size_t pos = 0;
    while (pos <= list.size()) {
      std::size_t end = list.find(',', pos);
      if (end == std::string_view::npos) end = list.size();
      const std::string_view part = trim(list.substr(pos, end - pos));
      pos = end + 1;
      if (part.empty()) {
        if (end == list.size()) break;
        continue;
      }
      const std::size_t eq = part.find('=');
      if (eq == std::string_view::npos)
        item_.fail(fmt::format("expected KEY=VALUE, got {}", quote_input(part)));
      const std::string_view key = trim(part.substr(0, eq));
      const std::string_view value = trim(part.substr(eq + 1));
      if (std::find(keys_.begin(), keys_.end(), key) == keys_.end())
        item_.fail(fmt::format("unknown parameter {} (expected {})", quote_input(key), expected_keys()));
      if (values_.count(key)) item_.fail(fmt::format("parameter '{}' given twice", key));
      if (value.empty()) item_.fail(fmt::format("parameter '{}' has no value", key));
      values_[key] = value;
    }
  }

  std::optional<std::string_view> get(std::string_view key) const {
    const auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }

  // A number within [lo, hi] (lo excluded when lo_open); `percent`: "2%" is
  // read as 0.02. `expected` says what the number is, for the message.
  double number(std::string_view key, double fallback, double lo, double hi, bool lo_open, bool percent,
                std::string_view expected) const {
    const auto v = get(key);
    if (!v) return fallback;
    std::string_view s = *v;
    double scale = 1.0;
    if (percent && !s.empty() && s.back() == '%') {
      s.remove_suffix(1);
      scale = 0.01;
    }
    double x = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
    const bool parsed = !s.empty() && ec == std::errc() && p == s.data() + s.size() && std::isfinite(x);
    x *= scale;
    if (!parsed || x < lo || x > hi || (lo_open && x == lo))
      item_.fail(fmt::format("{}: expected {}, got {}", key, expected, quote_input(*v)));
    return x;
  }

  std::uint32_t integer(std::string_view key, std::uint32_t lo, std::uint32_t hi,
                        std::string_view expected) const {
    const auto v = get(key);
    if (!v) item_.fail(fmt::format("needs {}=N ({})", key, expected));
    std::uint32_t x = 0;
    const auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), x);
    if (ec != std::errc() || p != v->data() + v->size() || x < lo || x > hi)
      item_.fail(fmt::format("{}: expected {}, got {}", key, expected, quote_input(*v)));
    return x;
  }

  // One of the words; fallback when the key is absent.
  template <typename E>
  E word(std::string_view key, E fallback,
         std::initializer_list<std::pair<std::string_view, E>> words) const {
    const auto v = get(key);
    if (!v) return fallback;
    std::string names;
    for (const auto& [name, e] : words) {
      if (*v == name) return e;
      names += names.empty() ? std::string(name) : " or " + std::string(name);
    }
    item_.fail(fmt::format("{}: expected {}, got {}", key, names, quote_input(*v)));
  }

  // Keys that do not apply (e.g. scale_ms with dist=lognormal).
  void refuse(std::initializer_list<std::string_view> keys, std::string_view why) const {
    for (const auto key : keys)
      if (values_.count(key)) item_.fail(fmt::format("parameter '{}' does not apply {}", key, why));
  }

  void require(std::string_view key, std::string_view example) const {
    if (!values_.count(key)) item_.fail(fmt::format("needs {} (e.g. {})", key, example));
  }

 private:
  std::string expected_keys() const {
    std::string out;
    for (const auto k : keys_) out += out.empty() ? std::string(k) : ", " + std::string(k);
    return out;
  }

  const Item& item_;
  std::vector<std::string_view> keys_;
  std::map<std::string_view, std::string_view> values_;
};

constexpr double kMaxMs = 3.6e6;  // an hour
constexpr double kMaxSeconds = 1e6;

Perturbation parse_item(const Item& item) {
  const std::size_t colon = item.text.find(':');
  const std::string_view kind = trim(item.text.substr(0, colon));
  const std::string_view rest =
      colon == std::string_view::npos ? std::string_view() : item.text.substr(colon + 1);
  Perturbation out;
  if (kind == "tail") {
    const Params p(item, rest,
                   {"target", "fraction", "dist", "scale_ms", "shape", "median_ms", "sigma", "max_ms"});
    TailParams t;
    t.target = p.word("target", TailTarget::kSteps,
                      {{"steps", TailTarget::kSteps}, {"requests", TailTarget::kRequests}});
    t.fraction =
        p.number("fraction", t.fraction, 0.0, 1.0, false, true, "a probability in [0, 1] (0.02 or 2%)");
    t.dist = p.word("dist", TailDistribution::kPareto,
                    {{"pareto", TailDistribution::kPareto}, {"lognormal", TailDistribution::kLognormal}});
    if (t.dist == TailDistribution::kPareto) {
      p.refuse({"median_ms", "sigma"}, "to dist=pareto (it takes scale_ms and shape)");
      t.scale_ms = p.number("scale_ms", t.scale_ms, 0.0, kMaxMs, true, false, "milliseconds in (0, 3600000]");
      t.shape = p.number("shape", t.shape, 0.0, 100.0, true, false, "a tail index alpha in (0, 100]");
    } else {
      p.refuse({"scale_ms", "shape"}, "to dist=lognormal (it takes median_ms and sigma)");
      t.median_ms =
          p.number("median_ms", t.median_ms, 0.0, kMaxMs, true, false, "milliseconds in (0, 3600000]");
      t.sigma = p.number("sigma", t.sigma, 0.0, 10.0, true, false, "a log standard deviation in (0, 10]");
    }
    t.max_ms = p.number("max_ms", t.max_ms, 0.0, kMaxMs, true, false, "milliseconds in (0, 3600000]");
    if (t.dist == TailDistribution::kPareto && t.max_ms < t.scale_ms)
      item.fail(fmt::format("max_ms ({}) is below scale_ms ({}): every draw would be max_ms", t.max_ms,
                            t.scale_ms));
    out.params = t;
  } else if (kind == "warmup") {
    const Params p(item, rest, {"factor", "duration_s", "curve"});
    WarmupParams w;
    w.factor = p.number("factor", w.factor, 1.0, 1000.0, false, false, "a multiplier in [1, 1000]");
    w.duration_s =
        p.number("duration_s", w.duration_s, 0.0, kMaxSeconds, true, false, "seconds in (0, 1000000]");
    w.curve = p.word("curve", WarmupCurve::kLinear,
                     {{"linear", WarmupCurve::kLinear}, {"exp", WarmupCurve::kExponential}});
    out.params = w;
  } else if (kind == "leak") {
    const Params p(item, rest, {"per_min"});
    LeakParams l;
    l.per_min = p.number("per_min", l.per_min, 0.0, 100.0, false, true,
                         "a fraction of the step time per minute in [0, 100] (0.02 or 2%)");
    out.params = l;
  } else if (kind == "steal") {
    const Params p(item, rest, {"share", "period_s", "on_s", "offset_s"});
    StealParams s;
    s.share = p.number("share", s.share, 0.0, 100.0, false, true,
                       "the stolen time as a fraction of the step's own in [0, 100] (0.3 or 30%)");
    s.period_s = p.number("period_s", s.period_s, 0.0, kMaxSeconds, true, false, "seconds in (0, 1000000]");
    s.on_s = p.number("on_s", p.get("period_s") ? s.period_s / 2 : s.on_s, 0.0, kMaxSeconds, true, false,
                      "seconds in (0, period_s]");
    s.offset_s = p.number("offset_s", s.offset_s, 0.0, kMaxSeconds, false, false, "seconds in [0, 1000000]");
    if (s.on_s > s.period_s)
      item.fail(fmt::format("on_s ({}) is longer than period_s ({})", s.on_s, s.period_s));
    out.params = s;
  } else if (kind == "batch_cap") {
    const Params p(item, rest, {"max_num_seqs"});
    BatchCapParams b;
    b.max_num_seqs =
        p.integer("max_num_seqs", 1, 1'000'000, "running sequences at most, an integer in [1, 1000000]");
    out.params = b;
  } else if (kind == "kv") {
    const Params p(item, rest, {"fraction"});
    p.require("fraction", "kv:fraction=0.5");
    KvParams k;
    k.fraction = p.number("fraction", k.fraction, 0.0, 1.0, true, true,
                          "a share of the KV blocks in (0, 1] (0.5 or 50%)");
    out.params = k;
  } else if (kind == "recompile") {
    const Params p(item, rest, {"ms"});
    RecompileParams r;
    r.ms = p.number("ms", r.ms, 0.0, kMaxMs, false, false, "milliseconds in [0, 3600000]");
    out.params = r;
  } else {
    item.fail(fmt::format("unknown kind {} (expected tail, warmup, leak, steal, batch_cap, kv or recompile)",
                          quote_input(kind)));
  }
  return out;
}

}  // namespace

nlohmann::json Perturbation::to_json() const {
  nlohmann::json j;
  j["kind"] = name_of(kind());
  std::visit(
      [&j](const auto& p) {
        using T = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<T, TailParams>) {
          j["target"] = name_of(p.target);
          j["fraction"] = p.fraction;
          j["dist"] = name_of(p.dist);
          if (p.dist == TailDistribution::kPareto) {
            j["scale_ms"] = p.scale_ms;
            j["shape"] = p.shape;
          } else {
            j["median_ms"] = p.median_ms;
            j["sigma"] = p.sigma;
          }
          j["max_ms"] = p.max_ms;
        } else if constexpr (std::is_same_v<T, WarmupParams>) {
          j["factor"] = p.factor;
          j["duration_s"] = p.duration_s;
          j["curve"] = name_of(p.curve);
        } else if constexpr (std::is_same_v<T, LeakParams>) {
          j["per_min"] = p.per_min;
        } else if constexpr (std::is_same_v<T, StealParams>) {
          j["share"] = p.share;
          j["period_s"] = p.period_s;
          j["on_s"] = p.on_s;
          j["offset_s"] = p.offset_s;
        } else if constexpr (std::is_same_v<T, BatchCapParams>) {
          j["max_num_seqs"] = p.max_num_seqs;
        } else if constexpr (std::is_same_v<T, KvParams>) {
          j["fraction"] = p.fraction;
        } else {
          j["ms"] = p.ms;
        }
      },
      params);
  return j;
}

PerturbationSpec parse_perturbations(std::string_view text) {
  return {std::string(text), parse_perturbation_spec(text)};
}

std::vector<Perturbation> parse_perturbation_spec(std::string_view spec) {
  std::vector<Perturbation> out;
  if (trim(spec) == "none") return out;
  std::size_t pos = 0, position = 0;
  while (pos <= spec.size()) {
    std::size_t end = spec.find(';', pos);
    if (end == std::string_view::npos) end = spec.size();
    const std::string_view text = trim(spec.substr(pos, end - pos));
    pos = end + 1;
    ++position;
    if (text.empty()) {
      if (end == spec.size()) break;
      continue;
    }
    const Item item{position, text};
    Perturbation p = parse_item(item);
    for (const auto& q : out) {
      if (q.kind() != p.kind()) continue;
      if (p.kind() != PerturbationKind::kTail)
        item.fail(fmt::format("'{}' is given twice (each kind at most once)", name_of(p.kind())));
      if (std::get<TailParams>(q.params).target == std::get<TailParams>(p.params).target)
        item.fail(fmt::format("a tail with target={} is given twice (at most one per target)",
                              name_of(std::get<TailParams>(p.params).target)));
    }
    out.push_back(std::move(p));
  }
  return out;
}

// ---- pure functions ----------------------------------------------------------------------

double warmup_multiplier(const WarmupParams& p, double t_s) {
  if (!(t_s < p.duration_s)) return 1.0;
  const double x = std::max(0.0, t_s) / p.duration_s;
  if (p.curve == WarmupCurve::kLinear) return 1.0 + (p.factor - 1.0) * (1.0 - x);
  const double floor = std::exp(-5.0);
  return 1.0 + (p.factor - 1.0) * (std::exp(-5.0 * x) - floor) / (1.0 - floor);
}

double leak_multiplier(const LeakParams& p, double t_s) {
  return 1.0 + p.per_min * std::max(0.0, t_s) / 60.0;
}

bool steal_active(const StealParams& p, double t_s) {
  if (t_s < p.offset_s) return false;
  return std::fmod(t_s - p.offset_s, p.period_s) < p.on_s;
}

std::uint32_t pow2_bucket(std::uint64_t n) {
  std::uint32_t b = 0;
  while (b < 63 && (std::uint64_t{1} << b) < n) ++b;
  return b;
}

std::uint32_t shape_of(std::uint64_t num_seqs, std::uint64_t batched_tokens) {
  return pow2_bucket(num_seqs) * 64 + pow2_bucket(batched_tokens);
}

double tail_draw_ms(const TailParams& p, double u) {
  double x = 0.0;
  if (p.dist == TailDistribution::kPareto) {
    x = p.scale_ms * std::pow(u, -1.0 / p.shape);
  } else {
    // Phi^-1(1 - u) = sqrt(2) erfc^-1(2u); u = 1 is the median's far side's end: no delay.
    if (u >= 1.0) return 0.0;
    x = p.median_ms * std::exp(p.sigma * std::sqrt(2.0) * boost::math::erfc_inv(2.0 * u));
  }
  return std::min(x, p.max_ms);
}

double unit_from_hash(std::uint64_t h) {
  return (static_cast<double>(h >> 11) + 1.0) * 0x1.0p-53;
}

// ---- Perturber ---------------------------------------------------------------------------

namespace {
constexpr std::uint64_t kDrawSalt = 0x6472617773616c74ULL;  // the size of a draw, apart from its selection
}

Perturber::Perturber(std::vector<Perturbation> list, std::uint64_t seed, CapacityBaseline capacity)
    : list_(std::move(list)),
      seed_(seed),
      capacity_(capacity),
      tallies_(list_.size()),
      shapes_seen_(64 * 64) {
  for (std::size_t i = 0; i < list_.size(); ++i) {
    std::string dimension = "perturb/" + std::string(name_of(list_[i].kind()));
    if (const auto* t = std::get_if<TailParams>(&list_[i].params)) {
      dimension += "/" + std::string(name_of(t->target));
      (t->target == TailTarget::kSteps ? step_tail_ : request_tail_) = static_cast<int>(i);
    }
    seeds_.push_back(derive_seed(seed, dimension));
    const int index = static_cast<int>(i);
    switch (list_[i].kind()) {
      case PerturbationKind::kWarmup:
        warmup_ = index;
        break;
      case PerturbationKind::kLeak:
        leak_ = index;
        break;
      case PerturbationKind::kSteal:
        steal_ = index;
        break;
      case PerturbationKind::kRecompile:
        recompile_ = index;
        break;
      case PerturbationKind::kBatchCap:
        batch_cap_ = index;
        break;
      case PerturbationKind::kKv:
        kv_ = index;
        break;
      case PerturbationKind::kTail:
        break;
    }
  }
}

StepPerturbation Perturber::on_step(std::uint64_t index, Nanos start, Nanos base_ns, std::uint64_t num_seqs,
                                    std::uint64_t batched_tokens) {
  std::lock_guard lock(mutex_);
  if (!origin_) origin_ = start;
  const double t = nanos_to_s(start - *origin_);
  const double base = static_cast<double>(base_ns);
  double d = base;
  double stolen = 0.0;
  const auto charge = [this](int i, double add_ns) {
    auto& tally = tallies_[static_cast<std::size_t>(i)];
    ++tally.seen;
    if (add_ns > 0.0) {
      ++tally.count;
      tally.extra_ms += add_ns * 1e-6;
    }
  };
  const auto params = [this](int i) -> const auto& {
    return list_[static_cast<std::size_t>(i)].params;
  };
  if (warmup_ >= 0) {
    const double add = d * (warmup_multiplier(std::get<WarmupParams>(params(warmup_)), t) - 1.0);
    charge(warmup_, add);
    d += add;
  }
  if (leak_ >= 0) {
    const double add = d * (leak_multiplier(std::get<LeakParams>(params(leak_)), t) - 1.0);
    charge(leak_, add);
    d += add;
  }
  if (steal_ >= 0) {
    const auto& s = std::get<StealParams>(params(steal_));
    stolen = steal_active(s, t) ? d * s.share : 0.0;
    charge(steal_, stolen);
    d += stolen;
  }
  if (recompile_ >= 0) {
    const std::uint32_t shape = shape_of(num_seqs, batched_tokens);
    double add = 0.0;
    if (!shapes_seen_[shape]) {
      shapes_seen_[shape] = true;
      add = std::get<RecompileParams>(params(recompile_)).ms * 1e6;
    }
    charge(recompile_, add);
    d += add;
  }
  if (step_tail_ >= 0) {
    const auto& p = std::get<TailParams>(params(step_tail_));
    const std::uint64_t h = hash_combine64(seeds_[static_cast<std::size_t>(step_tail_)], index);
    const double add =
        unit_from_hash(h) <= p.fraction ? tail_draw_ms(p, unit_from_hash(mix64(h ^ kDrawSalt))) * 1e6 : 0.0;
    charge(step_tail_, add);
    d += add;
  }
  if (batch_cap_ >= 0) {
    auto& tally = tallies_[static_cast<std::size_t>(batch_cap_)];
    ++tally.seen;
    if (num_seqs >= std::get<BatchCapParams>(params(batch_cap_)).max_num_seqs) ++tally.count;
  }
  if (kv_ >= 0) {
    auto& tally = tallies_[static_cast<std::size_t>(kv_)];
    ++tally.seen;
    ++tally.count;
  }
  StepPerturbation out;
  out.extra_ns = static_cast<Nanos>(std::llround(d - base));
  out.stolen_ns = static_cast<Nanos>(std::llround(stolen));
  return out;
}

Nanos Perturber::request_hold(std::uint64_t key) {
  if (request_tail_ < 0) return 0;
  std::lock_guard lock(mutex_);
  const auto i = static_cast<std::size_t>(request_tail_);
  const auto& p = std::get<TailParams>(list_[i].params);
  const std::uint64_t h = hash_combine64(seeds_[i], key);
  auto& tally = tallies_[i];
  ++tally.seen;
  if (!(unit_from_hash(h) <= p.fraction)) return 0;
  const double ms = tail_draw_ms(p, unit_from_hash(mix64(h ^ kDrawSalt)));
  if (ms <= 0.0) return 0;
  ++tally.count;
  tally.extra_ms += ms;
  return static_cast<Nanos>(std::llround(ms * 1e6));
}

std::vector<PerturbationTally> Perturber::tallies() const {
  std::lock_guard lock(mutex_);
  return tallies_;
}

PerturbationCounts Perturber::counts_by_kind() const {
  std::lock_guard lock(mutex_);
  PerturbationCounts out{};
  for (std::size_t i = 0; i < list_.size(); ++i)
    out[static_cast<std::size_t>(list_[i].kind())] += tallies_[i].count;
  return out;
}

nlohmann::json Perturber::to_json() const {
  const auto tallies = this->tallies();
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < list_.size(); ++i) {
    nlohmann::json j = list_[i].to_json();
    const auto& t = tallies[i];
    nlohmann::json injected;
    switch (list_[i].kind()) {
      case PerturbationKind::kTail:
        if (std::get<TailParams>(list_[i].params).target == TailTarget::kRequests) {
          injected = {{"requests", t.count}, {"requests_seen", t.seen}, {"extra_ms_total", t.extra_ms}};
          break;
        }
        [[fallthrough]];
      case PerturbationKind::kWarmup:
      case PerturbationKind::kLeak:
      case PerturbationKind::kSteal:
      case PerturbationKind::kRecompile:
        injected = {{"steps", t.count}, {"steps_seen", t.seen}, {"extra_ms_total", t.extra_ms}};
        break;
      case PerturbationKind::kBatchCap:
        injected = {{"steps_at_cap", t.count},
                    {"steps_seen", t.seen},
                    {"baseline_max_num_seqs", capacity_.max_num_seqs}};
        break;
      case PerturbationKind::kKv:
        injected = {
            {"steps_seen", t.seen},
            {"num_gpu_blocks", capacity_.perturbed_blocks ? nlohmann::json(*capacity_.perturbed_blocks)
                                                          : nlohmann::json(nullptr)},
            {"baseline_num_gpu_blocks",
             capacity_.num_gpu_blocks ? nlohmann::json(*capacity_.num_gpu_blocks) : nlohmann::json(nullptr)}};
        break;
    }
    j["injected"] = std::move(injected);
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace tokenscope::engine
