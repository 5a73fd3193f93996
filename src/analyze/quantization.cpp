#include "analyze/quantization.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>

#include "analyze/checklist_util.h"
#include "analyze/statistics.h"
#include "core/error.h"
#include "core/random.h"
#include "core/stats.h"
#include "core/text_reader.h"
#include "rundir/json_number.h"

namespace tokenscope::analyze {

using namespace detail;
namespace dom = simdjson::dom;

// ------------------------------------------------------- activations.jsonl

namespace {

constexpr double kMaxExactCount = 9007199254740992.0;  // 2^53

using rundir::detail::number_of;

ActivationHistogram parse_activation_line(dom::parser& parser, std::string& buffer, std::string_view line,
                                          const std::string& file, std::size_t n) {
  const auto fail = [&](const std::string& field, const std::string& problem) -> InputError {
    return InputError(file, n, field, problem);
  };
  buffer.assign(line);
  buffer.append(simdjson::SIMDJSON_PADDING, '\0');
  dom::element doc;
  if (const auto err = parser.parse(buffer.data(), line.size(), false).get(doc); err != simdjson::SUCCESS)
    throw fail("", fmt::format("not JSON ({})", simdjson::error_message(err)));
  dom::object root;
  if (doc.get_object().get(root) != simdjson::SUCCESS)
    throw fail("", "should be a JSON object {\"name\", \"bins\", \"counts\"}");
  ActivationHistogram h;
  h.line = n;
  bool has_name = false, has_bins = false, has_counts = false;
  for (dom::key_value_pair kv : root) {
    const std::string_view k = kv.key;
    if (k == "name" && !has_name) {
      std::string_view s;
      if (kv.value.get_string().get(s) != simdjson::SUCCESS || s.empty())
        throw fail("name", "should be a non-empty string");
      h.name.assign(s);
      has_name = true;
    } else if ((k == "bins" || k == "counts") && !(k == "bins" ? has_bins : has_counts)) {
      const bool edges = k == "bins";
      dom::array a;
      if (kv.value.get_array().get(a) != simdjson::SUCCESS)
        throw fail(std::string(k),
                   edges ? "should be an array of bin edges" : "should be an array of counts");
      std::vector<double>& out = edges ? h.edges : h.counts;
      std::size_t i = 0;
      for (dom::element e : a) {
        const std::string field = fmt::format("{}[{}]", k, i++);
        if (out.size() > kMaxActivationBins)
          throw fail(std::string(k), fmt::format("more than {} bins", kMaxActivationBins));
        double x = 0;
        if (edges) {
          if (!number_of(e, x) || !std::isfinite(x)) throw fail(field, "should be a finite number");
          if (!out.empty() && !(x > out.back()))
            throw fail(field, fmt::format("{} does not exceed the edge before it ({}): edges must increase",
                                          x, out.back()));
        } else {
          std::uint64_t c = 0;
          if (e.get_uint64().get(c) != simdjson::SUCCESS || static_cast<double>(c) > kMaxExactCount)
            throw fail(field, "should be a count: an integer from 0 to 2^53");
          x = static_cast<double>(c);
        }
        out.push_back(x);
      }
      (edges ? has_bins : has_counts) = true;
    }
  }
  if (!has_name) throw fail("name", "missing (each line is {\"name\", \"bins\", \"counts\"})");
  if (!has_bins) throw fail("bins", "missing (the bin edges)");
  if (!has_counts) throw fail("counts", "missing (a count per bin)");
  if (h.edges.size() < 2) throw fail("bins", "should hold at least two edges (one bin)");
  if (h.counts.size() + 1 != h.edges.size())
    throw fail("counts", fmt::format("has {} counts for the {} bins between {} edges", h.counts.size(),
                                     h.edges.size() - 1, h.edges.size()));
  if (std::accumulate(h.counts.begin(), h.counts.end(), 0.0) < 1)
    throw fail("counts", "add up to 0: an empty histogram");
  return h;
}

std::vector<ActivationHistogram> parse_activation_lines(TextReader& reader, const std::string& file) {
  std::vector<ActivationHistogram> out;
  std::unordered_map<std::string, std::size_t> seen;  // name -> line
  dom::parser parser;
  std::string buffer;
  std::string_view line;
  while (reader.next_line(line)) {
    const std::size_t n = reader.line_number();
    if (const auto flaw = reader.flaw_message()) throw InputError(file, n, "", *flaw);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    ActivationHistogram h = parse_activation_line(parser, buffer, line, file, n);
    if (const auto [it, fresh] = seen.emplace(h.name, n); !fresh)
      throw InputError(file, n, "name",
                       fmt::format("{} appears twice (first on line {})", quote_input(h.name), it->second));
    out.push_back(std::move(h));
  }
  if (out.empty()) throw InputError(file, 0, "", "holds no histogram (one JSON object per line)");
  return out;
}

}  // namespace

std::vector<ActivationHistogram> parse_activations(std::string_view text, const std::string& file) {
  TextReader reader(text);
  return parse_activation_lines(reader, file);
}

std::vector<ActivationHistogram> load_activations(const std::filesystem::path& file) {
  TextReader reader = TextReader::open(file.string(), "activations file");
  return parse_activation_lines(reader, file.string());
}

// ------------------------------------------------------------- statistics

double adaptive_kl_threshold(double floor_bits, double split_half_kl_bits) {
  return std::max(floor_bits, kSplitHalfFactor * split_half_kl_bits);
}

std::array<std::vector<double>, 2> split_counts(std::span<const double> counts, std::uint64_t seed) {
  constexpr double kExactMax = 65536;
  Rng rng(seed);
  std::array<std::vector<double>, 2> out;
  out[0].reserve(counts.size());
  out[1].reserve(counts.size());
  for (const double c : counts) {
    if (!(c >= 0) || c != std::floor(c) || c > kMaxExactCount)
      throw UsageError(fmt::format("split_counts: {} is not a count", c));
    double heads = 0;
    if (c <= kExactMax) {
      auto left = static_cast<std::uint64_t>(c);
      for (; left >= 64; left -= 64) heads += std::popcount(rng.next_u64());
      if (left > 0) heads += std::popcount(rng.next_u64() & ((std::uint64_t{1} << left) - 1));
    } else {
      heads = std::clamp(std::round(c / 2 + std::sqrt(c) / 2 * rng.normal()), 0.0, c);
    }
    out[0].push_back(heads);
    out[1].push_back(c - heads);
  }
  return out;
}

std::vector<double> logprob_counts(const LogprobHistogram& h) {
  return std::vector<double>(h.bins.begin(), h.bins.end());
}

std::string_view pareto_relation(const ParetoPoint& base, const ParetoPoint& cand) {
  if (!std::isfinite(base.tpot_p50_ms) || !std::isfinite(cand.tpot_p50_ms) ||
      !std::isfinite(base.mean_logprob) || !std::isfinite(cand.mean_logprob))
    return "unknown";
  const bool slower = cand.tpot_p50_ms > base.tpot_p50_ms, faster = cand.tpot_p50_ms < base.tpot_p50_ms;
  const bool worse = cand.mean_logprob<base.mean_logprob, better = cand.mean_logprob> base.mean_logprob;
  if (slower && worse) return "dominated";
  if (faster && better) return "dominates";
  if (!slower && !faster && !worse && !better) return "equal";
  return "trade-off";
}

// ------------------------------------------------------------------ item

namespace {

// One histogram compared: its counts in both runs and the base's halves.
struct Compared {
  std::string name;
  std::string unit;
  nlohmann::json edges;  // for the chart: ascending edges (null: unbounded)
  std::vector<double> base, cand, half_a, half_b;
  bool reversed = false;  // the chart shows the bins in reverse order (logprobs: ascending)
};

// The finding and chart of one compared histogram.
Finding drift_finding(const Compared& c, double floor_bits, const std::string& note, nlohmann::json& chart) {
  const double kl = kl_divergence_bits(c.base, c.cand, kKlPseudoCount);
  const double split = kl_divergence_bits(c.half_a, c.half_b, kKlPseudoCount);
  const double threshold = adaptive_kl_threshold(floor_bits, split);
  Finding f;
  f.metric = "KL " + c.name;
  f.unit = "bits";
  f.change_unit = "bits";
  f.value = kl;
  f.change = kl;
  f.threshold = fmt::format("max({:g}, {:g} x split-half {:.3g}) = {:.3g} bits", floor_bits, kSplitHalfFactor,
                            split, threshold);
  f.verdict = kl > threshold ? Verdict::kRegressed : Verdict::kPass;
  f.note = note;
  const auto ordered = [&](const std::vector<double>& v) {
    return c.reversed ? std::vector<double>(v.rbegin(), v.rend()) : v;
  };
  chart = {{"name", c.name},
           {"unit", c.unit},
           {"edges", c.edges},
           {"base", ordered(c.base)},
           {"candidate", ordered(c.cand)},
           {"kl_bits", kl},
           {"split_half_kl_bits", split},
           {"threshold_bits", threshold},
           {"verdict", std::string(to_string(f.verdict))}};
  return f;
}

// The per-request mean logprobs of a run's counted requests that have one.
std::vector<double> request_mean_logprobs(const RunData& run) {
  const RequestArrays& a = run.requests;
  std::vector<double> out;
  for (std::size_t i = 0; i < a.size() && i < a.logprob_mean.size(); ++i)
    if (a.counted(i) && std::isfinite(a.logprob_mean[i])) out.push_back(a.logprob_mean[i]);
  return out;
}

double mean_of(const std::vector<double>& v) {
  return v.empty() ? std::numeric_limits<double>::quiet_NaN()
                   : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double variance_of(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean_of(v);
  double ss = 0;
  for (const double x : v) ss += (x - m) * (x - m);
  return ss / static_cast<double>(v.size() - 1);
}

ParetoPoint pareto_point(const RunData& run, const std::vector<double>& means) {
  ParetoPoint p;
  std::vector<double> tpot = metric_sample(run, Metric::kTpot);
  if (!tpot.empty()) {
    std::sort(tpot.begin(), tpot.end());
    p.tpot_p50_ms = nearest_rank(tpot, 0.5);
  }
  p.mean_logprob = mean_of(means);
  return p;
}

nlohmann::json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

// The activation histograms of a run: the file given, else the run
// directory's activations.jsonl when there is one.
std::optional<std::vector<ActivationHistogram>> activations_of(const RunData& run, const std::string& file) {
  if (!file.empty()) return load_activations(file);
  if (run.dir.empty()) return std::nullopt;
  const auto own = run.dir / "activations.jsonl";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(own, ec)) return std::nullopt;
  return load_activations(own);
}

// The seed of a tensor's split-half baseline.
std::uint64_t activation_split_seed(const std::string& name) {
  return hash_combine64(derive_seed(0, "activation-split-half"), hash_string64(name));
}

// Activation histograms with charts: the most divergent first, at most this many.
constexpr std::size_t kActivationCharts = 8;
// A histogram with more bins than this has no chart in check.json.
constexpr std::size_t kMaxChartBins = 1024;

}  // namespace

ItemResult quantization_item(const RunData& base, const RunData& cand, const Thresholds& t,
                             const ExtraInputs& extra) {
  constexpr int kItem = 11;
  ItemResult r;
  std::vector<std::string> missing;  // why a kind of histogram was not compared
  nlohmann::json charts = nlohmann::json::array();

  // Output-token logprobs.
  const LogprobPool& lb = base.requests.logprobs;
  const LogprobPool& lc = cand.requests.logprobs;
  const bool any_logprobs = lb.requests > 0 || lc.requests > 0;
  if (lb.requests_with_tokens == 0 || lc.requests_with_tokens == 0) {
    if (any_logprobs)
      missing.push_back(
          fmt::format("logprobs: the {} has none (bench --logprobs; a server that answers logprobs: 0 with "
                      "none needs N >= 1)",
                      lb.requests_with_tokens == 0 ? "base" : "candidate"));
  } else if (static_cast<double>(lb.requests_with_tokens) < t.min_requests ||
             static_cast<double>(lc.requests_with_tokens) < t.min_requests) {
    missing.push_back(
        fmt::format("logprobs: fewer than {:g} requests with logprobs in a run ({} base, {} candidate)",
                    t.min_requests, lb.requests_with_tokens, lc.requests_with_tokens));
  } else {
    Compared c;
    c.name = "output-token logprobs";
    c.unit = "nats";
    c.reversed = true;
    c.edges = nlohmann::json::array({nullptr});  // the underflow bin is unbounded below
    for (std::size_t i = LogprobHistogram::kBins; i-- > 0;) c.edges.push_back(LogprobHistogram::bin_upper(i));
    c.base = logprob_counts(lb.pooled);
    c.cand = logprob_counts(lc.pooled);
    c.half_a = logprob_counts(lb.halves[0]);
    c.half_b = logprob_counts(lb.halves[1]);
    const std::string note = fmt::format(
        "{} tokens of {} requests (base), {} of {} (candidate); base halves of {} and {} requests",
        lb.pooled.count, lb.requests_with_tokens, lc.pooled.count, lc.requests_with_tokens,
        lb.half_requests[0], lb.half_requests[1]);
    nlohmann::json chart;
    r.findings.push_back(drift_finding(c, t.kl_threshold, note, chart));
    charts.push_back(std::move(chart));

    // The mean logprob's change (the mean over requests of each one's mean),
    // with its normal interval, and the latency-accuracy points.
    const auto mb = request_mean_logprobs(base), mc = request_mean_logprobs(cand);
    const double change = mean_of(mc) - mean_of(mb);
    const double se = std::sqrt(variance_of(mb) / static_cast<double>(mb.size()) +
                                variance_of(mc) / static_cast<double>(mc.size()));
    const double z = z_of(t.confidence);
    r.evidence["mean_logprob"] = {{"base", number_or_null(mean_of(mb))},
                                  {"candidate", number_or_null(mean_of(mc))},
                                  {"change", number_or_null(change)},
                                  {"ci_low", number_or_null(change - z * se)},
                                  {"ci_high", number_or_null(change + z * se)},
                                  {"requests_base", mb.size()},
                                  {"requests_candidate", mc.size()},
                                  {"unit", "nats"}};
    const ParetoPoint pb = pareto_point(base, mb), pc = pareto_point(cand, mc);
    r.evidence["pareto"] = {{"base",
                             {{"tpot_p50_ms", number_or_null(pb.tpot_p50_ms)},
                              {"mean_logprob", number_or_null(pb.mean_logprob)}}},
                            {"candidate",
                             {{"tpot_p50_ms", number_or_null(pc.tpot_p50_ms)},
                              {"mean_logprob", number_or_null(pc.mean_logprob)}}},
                            {"relation", std::string(pareto_relation(pb, pc))}};
  }

  // Activation histograms, tensor by tensor.
  const auto ab = activations_of(base, extra.activations_base);
  const auto ac = activations_of(cand, extra.activations_cand);
  if (ab.has_value() != ac.has_value()) {
    missing.push_back(fmt::format("activations: only the {} has activation histograms (activations.jsonl)",
                                  ab ? "base" : "candidate"));
  } else if (ab) {
    std::unordered_map<std::string, const ActivationHistogram*> by_name;
    for (const auto& h : *ab) by_name.emplace(h.name, &h);
    nlohmann::json not_compared = nlohmann::json::array();
    std::vector<std::pair<double, nlohmann::json>> tensor_charts;
    std::size_t tensors = 0;  // compared
    for (const auto& hc : *ac) {
      const auto it = by_name.find(hc.name);
      if (it == by_name.end()) {
        not_compared.push_back({{"name", hc.name}, {"why", "not in the base"}});
        continue;
      }
      const ActivationHistogram& hb = *it->second;
      by_name.erase(it);
      if (hb.edges != hc.edges) {
        not_compared.push_back({{"name", hc.name}, {"why", "its bin edges differ from the base's"}});
        continue;
      }
      Compared c;
      c.name = "activations " + hc.name;
      c.edges = hc.edges;
      c.base = hb.counts;
      c.cand = hc.counts;
      auto halves = split_counts(hb.counts, activation_split_seed(hb.name));
      c.half_a = std::move(halves[0]);
      c.half_b = std::move(halves[1]);
      const double nb = std::accumulate(c.base.begin(), c.base.end(), 0.0);
      const double nc = std::accumulate(c.cand.begin(), c.cand.end(), 0.0);
      nlohmann::json chart;
      ++tensors;
      r.findings.push_back(drift_finding(
          c, t.kl_threshold, fmt::format("{:g} samples (base), {:g} (candidate)", nb, nc), chart));
      if (hc.counts.size() <= kMaxChartBins)
        tensor_charts.emplace_back(*r.findings.back().change, std::move(chart));
    }
    for (const auto& [name, h] : by_name)
      not_compared.push_back({{"name", name}, {"why", "not in the candidate"}});
    if (tensors == 0)
      missing.push_back(fmt::format(
          "activations: no tensor in both runs with the same bins ({} not compared)", not_compared.size()));
    std::stable_sort(tensor_charts.begin(), tensor_charts.end(),
                     [](const auto& x, const auto& y) { return x.first > y.first; });
    const std::size_t drawn = std::min(tensor_charts.size(), kActivationCharts);
    for (std::size_t i = 0; i < drawn; ++i) charts.push_back(std::move(tensor_charts[i].second));
    // What the report says of the tensors it does not draw.
    if (tensors > 0)
      r.evidence["activation_charts"] = {{"compared", tensors},
                                         {"charted", drawn},
                                         {"over_max_bins", tensors - tensor_charts.size()},
                                         {"past_cap", tensor_charts.size() - drawn},
                                         {"cap", kActivationCharts},
                                         {"max_bins", kMaxChartBins}};
    if (!not_compared.empty()) r.evidence["activations_not_compared"] = std::move(not_compared);
  }

  if (r.findings.empty()) {
    if (!missing.empty()) return no_data(kItem, fmt::format("{}", fmt::join(missing, "; ")));
    return no_data(kItem,
                   "neither run has output-token logprobs (bench --logprobs) or activation histograms "
                   "(activations.jsonl, check --activations)");
  }
  r.evidence["histograms"] = std::move(charts);
  r.evidence["divergence"] =
      fmt::format("D(base || candidate) in bits, pseudo count {:g} per bin", kKlPseudoCount);
  if (!missing.empty()) r.evidence["not_compared"] = missing;
  return r;
}

}  // namespace tokenscope::analyze
