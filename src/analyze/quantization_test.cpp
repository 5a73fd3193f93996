// Check item 11, quantisation drift (analyze/quantization.h): the
// activations file, the statistics, and the item on synthetic runs whose
// truth is known (a shifted logprob distribution, and the same distribution
// drawn with another seed). Reference values: quantization_reference.py
// (scipy), the call named beside each.
#include "analyze/quantization.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/random.h"

namespace tokenscope::analyze {
namespace {

namespace fs = std::filesystem;

// ------------------------------------------------------- activations.jsonl

TEST(Activations, ParsesOneHistogramPerLine) {
  const auto h = parse_activations(
      "{\"name\": \"layers.0.mlp\", \"bins\": [-1, 0, 0.5, 2], \"counts\": [3, 0, 7], \"dtype\": \"fp8\"}\n"
      "\n"
      "{\"counts\": [5], \"bins\": [0, 1e3], \"name\": \"logits\"}\n",
      "a.jsonl");
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].name, "layers.0.mlp");
  EXPECT_EQ(h[0].edges, (std::vector<double>{-1, 0, 0.5, 2}));
  EXPECT_EQ(h[0].counts, (std::vector<double>{3, 0, 7}));
  EXPECT_EQ(h[0].line, 1u);
  EXPECT_EQ(h[1].name, "logits");
  EXPECT_EQ(h[1].line, 3u);
}

TEST(Activations, BadLinesAreNamedByFileLineAndField) {
  const std::string good = R"({"name": "a", "bins": [0, 1], "counts": [1]})";
  const std::tuple<std::string, std::string, std::string> cases[] = {
      {"not json", "", "not JSON"},
      {"[1, 2]", "", "JSON object"},
      {R"({"bins": [0, 1], "counts": [1]})", "name", "missing"},
      {R"({"name": "", "bins": [0, 1], "counts": [1]})", "name", "non-empty string"},
      {R"({"name": 3, "bins": [0, 1], "counts": [1]})", "name", "non-empty string"},
      {R"({"name": "b", "counts": [1]})", "bins", "missing"},
      {R"({"name": "b", "bins": [0, 1]})", "counts", "missing"},
      {R"({"name": "b", "bins": {"a": 1}, "counts": [1]})", "bins", "array of bin edges"},
      {R"({"name": "b", "bins": [0], "counts": []})", "bins", "at least two edges"},
      {R"({"name": "b", "bins": [0, "x"], "counts": [1]})", "bins[1]", "finite number"},
      {R"({"name": "b", "bins": [0, 2, 2], "counts": [1, 1]})", "bins[2]", "edges must increase"},
      {R"({"name": "b", "bins": [0, 1, 2], "counts": [1]})", "counts", "has 1 counts for the 2 bins"},
      {R"({"name": "b", "bins": [0, 1], "counts": [-1]})", "counts[0]", "integer from 0 to 2^53"},
      {R"({"name": "b", "bins": [0, 1], "counts": [1.5]})", "counts[0]", "integer from 0 to 2^53"},
      {R"({"name": "b", "bins": [0, 1], "counts": [0]})", "counts", "add up to 0"},
      {R"({"name": "a", "bins": [0, 1], "counts": [1]})", "name", "appears twice (first on line 1)"},
  };
  for (const auto& [line, field, needle] : cases) {
    try {
      parse_activations(good + "\n" + line + "\n", "acts.jsonl");
      ADD_FAILURE() << "accepted: " << line;
    } catch (const InputError& e) {
      EXPECT_EQ(e.file(), "acts.jsonl");
      EXPECT_EQ(e.line(), 2u) << line;
      EXPECT_EQ(e.field(), field) << line << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_activations("", "empty.jsonl"), InputError);
  EXPECT_THROW(parse_activations("\n  \n", "blank.jsonl"), InputError);
  EXPECT_THROW(parse_activations(std::string("{\"name\"\0", 9), "nul.jsonl"), InputError);
  EXPECT_THROW(load_activations("/nonexistent/activations.jsonl"), UsageError);
}

// ------------------------------------------------------------- statistics

TEST(QuantizationStatistics, AdaptiveThresholdAndParetoRelation) {
  EXPECT_EQ(adaptive_kl_threshold(0.05, 0.01), 0.05);
  EXPECT_DOUBLE_EQ(adaptive_kl_threshold(0.05, 0.02), 0.06);
  EXPECT_EQ(pareto_relation({20, -1.0}, {25, -1.5}), "dominated");
  EXPECT_EQ(pareto_relation({20, -1.0}, {15, -0.5}), "dominates");
  EXPECT_EQ(pareto_relation({20, -1.0}, {15, -1.5}), "trade-off");
  EXPECT_EQ(pareto_relation({20, -1.0}, {20, -1.5}), "trade-off");  // as fast, less accurate: not both
  EXPECT_EQ(pareto_relation({20, -1.0}, {20, -1.0}), "equal");
  EXPECT_EQ(pareto_relation({20, -1.0}, {}), "unknown");
}

TEST(QuantizationStatistics, SplitCountsLikeCoinsPerSample) {
  const std::vector<double> counts = {0, 1, 63, 64, 65, 1000, 65536, 1e6};
  const auto a = split_counts(counts, 7);
  const auto b = split_counts(counts, 7);
  EXPECT_EQ(a, b);  // deterministic in the seed
  for (std::size_t i = 0; i < counts.size(); ++i) {
    EXPECT_EQ(a[0][i] + a[1][i], counts[i]);
    EXPECT_GE(a[0][i], 0);
  }
  EXPECT_NE(split_counts(counts, 8), a);
  // Binomial(c, 1/2): mean c/2 and variance c/4, for the exact coins (c =
  // 1000) and the normal approximation (c = 10^6), over 4,000 seeds: the
  // sample mean within 4 standard errors, the variance within 10%.
  for (const double c : {1000.0, 1e6}) {
    double sum = 0, ss = 0;
    const int n = 4000;
    for (int s = 0; s < n; ++s) {
      const double x = split_counts(std::vector<double>{c}, static_cast<std::uint64_t>(s))[0][0];
      sum += x;
      ss += x * x;
    }
    const double mean = sum / n, var = ss / n - mean * mean;
    EXPECT_NEAR(mean, c / 2, 4 * std::sqrt(c / 4 / n)) << c;
    EXPECT_NEAR(var, c / 4, 0.1 * c / 4) << c;
  }
  EXPECT_THROW(split_counts(std::vector<double>{1.5}, 1), UsageError);
  EXPECT_THROW(split_counts(std::vector<double>{-1}, 1), UsageError);
}

// ------------------------------------------------------- synthetic runs

// A run built in memory: requests one every 10 ms with TTFT 100 ms, the
// TPOT given and the output tokens' logprobs given.
struct RunBuilder {
  RunData run;
  explicit RunBuilder(const std::string& name) {
    run.name = name;
    run.requests.class_names = {"default"};
    run.requests.tenant_names = {"default"};
  }
  void add(const std::vector<double>& logprobs, double tpot_ms = 20) {
    RequestArrays& a = run.requests;
    const std::uint64_t id = a.size();
    const Nanos t = static_cast<Nanos>(id) * 10 * kNanosPerMilli;
    const int out = std::max<int>(2, static_cast<int>(logprobs.size()));
    a.t_sched.push_back(t);
    a.t_dispatch.push_back(-1);
    a.t_send.push_back(t);
    a.t_first_token.push_back(t + 100 * kNanosPerMilli);
    a.t_last_token.push_back(t + 100 * kNanosPerMilli +
                             static_cast<Nanos>(tpot_ms * (out - 1) * kNanosPerMilli));
    a.t_close.push_back(a.t_last_token.back());
    a.output_tokens.push_back(out);
    a.prompt_tokens.push_back(100);
    a.cached_tokens.push_back(-1);
    a.itl_mean_ms.push_back(static_cast<float>(tpot_ms));
    a.itl_max_ms.push_back(static_cast<float>(tpot_ms));
    a.outcome.push_back(Outcome::kOk);
    a.warmup.push_back(0);
    a.tenant.push_back(0);
    a.task_class.push_back(0);
    LogprobHistogram h;
    for (const double lp : logprobs) h.add(lp);
    // As run_data.cpp's reader keeps them.
    a.logprob_mean.push_back(h.count ? static_cast<float>(h.mean()) : std::nanf(""));
    a.logprobs.add(id, h);
  }
};

// n requests of `tokens` logprobs each, -logprob exponential with the mean
// given (the simulated server's model, serve/logprobs.h), drawn from seed.
RunData exponential_run(const std::string& name, std::uint64_t seed, double mean_nats, int n = 200,
                        int tokens = 50) {
  RunBuilder b(name);
  Rng rng(seed);
  for (int i = 0; i < n; ++i) {
    std::vector<double> lps;
    for (int k = 0; k < tokens; ++k) lps.push_back(-rng.exponential(1 / mean_nats));
    b.add(lps);
  }
  return b.run;
}

const ItemResult& item11(const CheckResult& r) {
  for (const auto& it : r.items)
    if (it.number == 11) return it;
  throw std::runtime_error("no item 11");
}

TEST(ItemQuantization, ExactValuesOnASmallPair) {
  RunBuilder base("base"), cand("cand");
  for (int i = 0; i < 40; ++i) {
    base.add({-0.1, -0.3 - 0.25 * (i % 3), -1.0 - 0.5 * (i % 5), -2.6}, 20);
    cand.add({-0.1, -0.6 - 0.25 * (i % 3), -2.0 - 0.5 * (i % 5), -4.1}, 25);
  }
  const ItemResult r = quantization_item(base.run, cand.run, Thresholds{}, {});
  ASSERT_EQ(r.findings.size(), 1u) << r.summary;
  const Finding& f = r.findings[0];
  EXPECT_EQ(f.metric, "KL output-token logprobs");
  // scipy.stats.entropy(base + 0.5, cand + 0.5, base=2)
  EXPECT_NEAR(*f.change, 1.0704709426978365, 1e-12);
  // the base's halves (19 and 21 requests): scipy.stats.entropy(half0 + 0.5, half1 + 0.5, base=2)
  EXPECT_NEAR(r.evidence["histograms"][0]["split_half_kl_bits"].get<double>(), 0.01801852527891089, 1e-12);
  EXPECT_NEAR(r.evidence["histograms"][0]["threshold_bits"].get<double>(), 0.05405557583673268, 1e-12);
  EXPECT_EQ(f.verdict, Verdict::kRegressed);
  EXPECT_EQ(f.threshold, "max(0.05, 3 x split-half 0.018) = 0.0541 bits");
  EXPECT_NE(f.note.find("base halves of 19 and 21 requests"), std::string::npos) << f.note;
  const auto& m = r.evidence["mean_logprob"];
  EXPECT_NEAR(m["base"].get<double>(), -1.3109375, 1e-12);  // numpy.mean of the float32 means
  EXPECT_NEAR(m["candidate"].get<double>(), -2.010937547683716, 1e-12);
  EXPECT_NEAR(m["change"].get<double>(), -0.7000000476837158, 1e-12);
  EXPECT_NEAR(m["ci_low"].get<double>(), -0.7812292221297714, 1e-12);  // normal, scipy.stats.norm.ppf(0.975)
  EXPECT_NEAR(m["ci_high"].get<double>(), -0.6187708732376602, 1e-12);
  const auto& pareto = r.evidence["pareto"];
  EXPECT_DOUBLE_EQ(pareto["base"]["tpot_p50_ms"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(pareto["candidate"]["tpot_p50_ms"].get<double>(), 25.0);
  EXPECT_EQ(pareto["relation"], "dominated");
  // The chart: 81 bins from the underflow bin up to (-0.25, 0], 82 edges.
  const auto& chart = r.evidence["histograms"][0];
  ASSERT_EQ(chart["edges"].size(), 82u);
  EXPECT_TRUE(chart["edges"][0].is_null());
  EXPECT_EQ(chart["edges"][1], -20.0);
  EXPECT_EQ(chart["edges"][81], 0.0);
  ASSERT_EQ(chart["base"].size(), 81u);
  EXPECT_EQ(chart["base"][80], 40);            // the forty -0.1s, in the bin next to 0
  EXPECT_EQ(chart["candidate"][80 - 16], 48);  // -logprob in [4, 4.25): forty -4.1s and eight -4.0s
}

// The truth known: -logprob exponential with mean 0.5 nats (the simulated
// server's model) in the base; the candidate's mean 0.75 (a lossy format)
// is a regression, the same 0.5 drawn from another seed is not. Twenty
// pairs each, every one judged right.
TEST(ItemQuantization, ShiftedDistributionRegressesSameDistributionPasses) {
  int regressed = 0, passed = 0;
  for (std::uint64_t s = 0; s < 20; ++s) {
    const RunData base = exponential_run("base", 1000 + s, 0.5);
    const RunData same = exponential_run("same", 2000 + s, 0.5);
    const RunData shifted = exponential_run("shifted", 3000 + s, 0.75);
    const ItemResult null_pair = quantization_item(base, same, Thresholds{}, {});
    const ItemResult shifted_pair = quantization_item(base, shifted, Thresholds{}, {});
    passed += null_pair.findings.at(0).verdict == Verdict::kPass ? 1 : 0;
    regressed += shifted_pair.findings.at(0).verdict == Verdict::kRegressed ? 1 : 0;
    EXPECT_LT(shifted_pair.evidence["mean_logprob"]["ci_high"].get<double>(), 0);
  }
  EXPECT_EQ(passed, 20);
  EXPECT_EQ(regressed, 20);
}

// Through run_checklist: the item's place, and its verdict in the overall one.
TEST(ItemQuantization, InTheChecklist) {
  const RunData base = exponential_run("base", 1, 0.5), shifted = exponential_run("cand", 2, 1.0);
  const CheckResult r = run_checklist(&base, shifted, Thresholds{});
  const ItemResult& it = item11(r);
  EXPECT_EQ(it.id, "quantization");
  EXPECT_EQ(it.verdict, Verdict::kRegressed);
  EXPECT_EQ(it.summary, "KL output-token logprobs: regressed");
  EXPECT_EQ(r.overall, Verdict::kRegressed);
  const auto j = to_json(r);
  EXPECT_EQ(j["items"][11]["id"], "quantization");
  EXPECT_EQ(j["items"][11]["findings"][0]["unit"], "bits");
  // Item 11 does not run on one run.
  for (const auto& i : run_checklist(nullptr, base, Thresholds{}).items) EXPECT_NE(i.number, 11);
}

TEST(ItemQuantization, NoDataWithoutHistogramsOrWithThemOnOneSide) {
  RunBuilder plain("plain");
  for (int i = 0; i < 40; ++i) plain.add({});  // asked, nothing answered... as below
  RunData none = plain.run;
  none.requests.logprobs = LogprobPool{};  // no record had logprobs at all
  ItemResult r = quantization_item(none, none, Thresholds{}, {});
  EXPECT_EQ(r.verdict, Verdict::kNoData);
  EXPECT_NE(r.summary.find("neither run has output-token logprobs"), std::string::npos) << r.summary;
  // Asked for (records have the field) but the server sent none.
  r = quantization_item(plain.run, plain.run, Thresholds{}, {});
  EXPECT_EQ(r.verdict, Verdict::kNoData);
  EXPECT_NE(r.summary.find("the base has none"), std::string::npos) << r.summary;
  // Only the candidate has them.
  const RunData with = exponential_run("with", 1, 0.5);
  r = quantization_item(none, with, Thresholds{}, {});
  EXPECT_EQ(r.verdict, Verdict::kNoData);
  // Too few requests.
  r = quantization_item(exponential_run("a", 1, 0.5, 10), exponential_run("b", 2, 0.5, 10), Thresholds{}, {});
  EXPECT_EQ(r.verdict, Verdict::kNoData);
  EXPECT_NE(r.summary.find("fewer than 30 requests with logprobs"), std::string::npos) << r.summary;
}

// requests.jsonl's `logprobs` as load_run reads them: pooled over the
// counted requests (warm-up and failed ones left out), split in halves by
// request id, each request's mean kept; the same whether the file is read
// whole or in byte ranges at the same time; a run without them has none.
TEST(RunDataLogprobs, PooledAndSplitTheSameInAnyNumberOfRanges) {
  const fs::path dir = fs::temp_directory_path() / ("tokenscope_quant_run_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string text;
  LogprobPool expected;
  std::vector<float> means;
  for (std::uint64_t id = 0; id < 400; ++id) {
    RequestRecord r;
    r.id = id;
    r.tenant = "default";
    r.t_sched = r.t_send = static_cast<Nanos>(id) * kNanosPerMilli;
    r.event_times = {r.t_send + 50 * kNanosPerMilli, r.t_send + 60 * kNanosPerMilli};
    r.event_tokens = {1, 1};
    r.output_tokens = 2;
    r.warmup = id < 10;
    r.outcome = id % 50 == 7 ? Outcome::kHttpError : Outcome::kOk;
    r.logprobs.emplace();
    r.logprobs->add(-0.25 * static_cast<double>(id % 7));
    r.logprobs->add(-1.5);
    if (!r.warmup && r.outcome == Outcome::kOk) expected.add(id, *r.logprobs);
    means.push_back(static_cast<float>(r.logprobs->mean()));
    r.append_json(text);
    text += '\n';
  }
  std::ofstream(dir / "requests.jsonl") << text;
  std::ofstream(dir / "run.json") << R"({"tool": {"command": "bench"}, "summary": {"requests_total": 400}})";
  for (const unsigned ranges : {1u, 4u}) {
    LoadOptions o;
    o.request_ranges = ranges;
    const RunData run = load_run(dir, o);
    const LogprobPool& p = run.requests.logprobs;
    EXPECT_EQ(p.requests, 400u - 10u - 7u) << ranges;  // 10 warm-up, 7 more failed (57, 107, ..., 357)
    EXPECT_EQ(p.requests, expected.requests);
    EXPECT_EQ(p.pooled.bins, expected.pooled.bins);
    EXPECT_EQ(p.pooled.count, 2 * p.requests);
    EXPECT_NEAR(p.pooled.sum, expected.pooled.sum, 1e-9);
    EXPECT_EQ(p.halves[0].bins, expected.halves[0].bins);
    EXPECT_EQ(p.half_requests, expected.half_requests);
    EXPECT_GT(p.half_requests[0], 150u);  // a random half of 383
    EXPECT_GT(p.half_requests[1], 150u);
    ASSERT_EQ(run.requests.logprob_mean.size(), 400u);
    for (std::size_t i = 0; i < 400; ++i) EXPECT_EQ(run.requests.logprob_mean[i], means[i]) << i;
  }
  // A run whose records have no logprobs (an older run, or no --logprobs).
  std::ofstream(dir / "requests.jsonl") << R"({"id":1,"outcome":"ok","t_send_ns":5,"event_offsets_ns":[1]})"
                                        << "\n";
  const RunData old = load_run(dir);
  EXPECT_EQ(old.requests.logprobs.requests, 0u);
  EXPECT_TRUE(std::isnan(old.requests.logprob_mean.at(0)));
  fs::remove_all(dir);
}

// Activation histograms from files: per tensor, the same distribution
// (another sample) passes, a widened one regresses; tensors in one run only
// or with other bins are listed, not compared; a bad file is an InputError.
class ItemQuantizationActivations : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tokenscope_quant_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A histogram of n normal samples with standard deviation sd over 40 bins of [-4, 4).
  static std::string line(const std::string& name, std::uint64_t seed, double sd, int n = 20000) {
    std::vector<long> counts(40, 0);
    Rng rng(seed);
    for (int i = 0; i < n; ++i) {
      const double x = sd * rng.normal();
      if (x >= -4 && x < 4) ++counts[std::min<std::size_t>(39, static_cast<std::size_t>((x + 4) / 0.2))];
    }
    std::string s = "{\"name\": \"" + name + "\", \"bins\": [";
    for (int k = 0; k <= 40; ++k) s += (k ? "," : "") + std::to_string(-4.0 + 0.2 * k);
    s += "], \"counts\": [";
    for (std::size_t k = 0; k < counts.size(); ++k) s += (k ? "," : "") + std::to_string(counts[k]);
    return s + "]}\n";
  }
  std::string write(const std::string& file, const std::string& text) {
    std::ofstream(dir_ / file) << text;
    return (dir_ / file).string();
  }
  fs::path dir_;
};

TEST_F(ItemQuantizationActivations, PerTensorVerdicts) {
  ExtraInputs extra;
  extra.activations_base =
      write("base.jsonl", line("layers.0", 1, 1.0) + line("layers.1", 2, 1.0) + line("only.base", 3, 1.0));
  extra.activations_cand =
      write("cand.jsonl", line("layers.0", 11, 1.0) + line("layers.1", 12, 1.3) + line("only.cand", 13, 1.0));
  RunData base, cand;  // no requests: the activations alone decide
  base.name = "base";
  cand.name = "cand";
  const ItemResult r = quantization_item(base, cand, Thresholds{}, extra);
  ASSERT_EQ(r.findings.size(), 2u) << r.summary;
  EXPECT_EQ(r.findings[0].metric, "KL activations layers.0");
  EXPECT_EQ(r.findings[0].verdict, Verdict::kPass);
  EXPECT_EQ(r.findings[1].metric, "KL activations layers.1");
  EXPECT_EQ(r.findings[1].verdict, Verdict::kRegressed);
  EXPECT_EQ(r.evidence["activations_not_compared"].size(), 2u);
  // Charts: the most divergent tensor first.
  EXPECT_EQ(r.evidence["histograms"][0]["name"], "activations layers.1");
  EXPECT_EQ(r.evidence["histograms"][0]["edges"].size(), 41u);

  // The run directory's own activations.jsonl, when no file is given.
  base.dir = dir_ / "base_run";
  cand.dir = dir_ / "cand_run";
  fs::create_directories(base.dir);
  fs::create_directories(cand.dir);
  std::ofstream(base.dir / "activations.jsonl") << line("x", 1, 1.0);
  std::ofstream(cand.dir / "activations.jsonl") << line("x", 2, 2.0);
  EXPECT_EQ(quantization_item(base, cand, Thresholds{}, {}).findings.at(0).verdict, Verdict::kRegressed);
  // Other bins: not compared; a bad file: InputError through run_checklist.
  std::ofstream(cand.dir / "activations.jsonl") << R"({"name": "x", "bins": [0, 1], "counts": [5]})"
                                                << "\n";
  const ItemResult other = quantization_item(base, cand, Thresholds{}, {});
  EXPECT_EQ(other.verdict, Verdict::kNoData);
  EXPECT_NE(other.summary.find("no tensor in both runs with the same bins"), std::string::npos)
      << other.summary;
  std::ofstream(cand.dir / "activations.jsonl") << R"({"name": "x", "bins": [1, 0], "counts": [5]})"
                                                << "\n";
  try {
    run_checklist(&base, cand, Thresholds{});
    FAIL() << "a bad activations file was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.line(), 1u);
    EXPECT_EQ(e.field(), "bins[1]");
    EXPECT_NE(e.file().find("activations.jsonl"), std::string::npos);
  }
}

// Charts of activations: the eight most divergent tensors of at most 1,024
// bins, most divergent first; how many were left out, and why, is in
// activation_charts.
TEST_F(ItemQuantizationActivations, ChartsTheEightMostDivergentAndCountsTheRest) {
  std::string base_text, cand_text;
  // Ten tensors of 40 bins, the candidate's wider by 2% more per tensor.
  for (int k = 0; k < 10; ++k) {
    const std::string name = "layers." + std::to_string(k);
    base_text += line(name, 100 + k, 1.0);
    cand_text += line(name, 200 + k, 1.0 + 0.02 * k);
  }
  // One of 1,100 bins: compared, never charted.
  std::string wide = "{\"name\": \"wide\", \"bins\": [";
  for (int k = 0; k <= 1100; ++k) wide += (k ? "," : "") + std::to_string(k);
  std::string counts = "], \"counts\": [";
  for (int k = 0; k < 1100; ++k) counts += (k ? "," : "") + std::to_string(1 + k % 7);
  base_text += wide + counts + "]}\n";
  cand_text += wide + counts + "]}\n";
  ExtraInputs extra;
  extra.activations_base = write("base.jsonl", base_text);
  extra.activations_cand = write("cand.jsonl", cand_text);
  RunData base, cand;
  const ItemResult r = quantization_item(base, cand, Thresholds{}, extra);
  ASSERT_EQ(r.findings.size(), 11u) << r.summary;
  const auto& charts = r.evidence["histograms"];
  ASSERT_EQ(charts.size(), 8u);
  for (std::size_t i = 1; i < charts.size(); ++i)
    EXPECT_GE(charts[i - 1]["kl_bits"].get<double>(), charts[i]["kl_bits"].get<double>()) << i;
  for (const auto& c : charts) {
    EXPECT_NE(c["name"], "activations wide");
    EXPECT_EQ(c["edges"].size(), 41u);
    EXPECT_EQ(c["base"].size(), 40u);
    EXPECT_EQ(c["candidate"].size(), 40u);
  }
  EXPECT_EQ(charts[0]["name"], "activations layers.9");
  EXPECT_EQ(r.evidence["activation_charts"], (nlohmann::json{{"compared", 11},
                                                             {"charted", 8},
                                                             {"over_max_bins", 1},
                                                             {"past_cap", 2},
                                                             {"cap", 8},
                                                             {"max_bins", 1024}}));
}

}  // namespace
}  // namespace tokenscope::analyze
