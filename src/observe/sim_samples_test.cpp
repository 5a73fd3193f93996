#include "observe/sim_samples.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "core/record_sink.h"
#include "core/run_dir.h"
#include "engine/catalog.h"
#include "engine/cost_model.h"
#include "engine/simulator.h"
#include "workload/synthetic.h"

namespace tokenscope::observe {
namespace {

// Each observation as a line of samples.jsonl (what the run session does).
std::function<void(const Observation&)> write_to(JsonlWriter& samples) {
  return [&samples](const Observation& o) {
    append_observation_json(samples.begin_line(), o);
    samples.end_line();
  };
}

workload::Workload synthetic(std::uint64_t n, double rate) {
  workload::SyntheticSettings s;
  s.arrival.rate_rps = rate;
  s.num_requests = n;
  s.input =
      workload::parse_length_spec("lognormal:800:0.8:max=4000", "--input-len", workload::LengthRole::kInput);
  s.output =
      workload::parse_length_spec("lognormal:100:0.7:max=600", "--output-len", workload::LengthRole::kOutput);
  s.prefix_groups = 4;
  s.prefix_tokens = 300;
  return workload::make_synthetic(s, workload::WorkloadSeeds::from_master(7));
}

// The samples of a simulation end exactly at the engine's own counters, and
// every sample is a line of samples.jsonl on virtual time.
TEST(SimSampler, TheLastSampleHoldsTheEnginesTotals) {
  const auto w = synthetic(300, 20.0);
  engine::EngineSettings s;
  s.model = "llama-3.1-8b";
  s.gpu = "h200";
  s.num_tenants = static_cast<std::uint32_t>(w.tenants.size());
  const auto catalog = engine::Catalog::builtin();
  auto eff = engine::resolve_engine(s, catalog);
  const auto dir = std::filesystem::temp_directory_path() / ("sim_samples_test_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  engine::EngineCounters counters;
  Nanos end = 0;
  {
    RunDirectory out(dir);
    SummarySink records;
    engine::RecordingObserver rec(w, records, false);
    SimSampler sampler(rec, write_to(out.samples()), kNanosPerSecond / 2);
    engine::Engine eng(
        eff, s, std::make_unique<engine::RooflineCostModel>(eff.model, eff.gpu, eff.tensor_parallel, s.cost),
        &sampler);
    sampler.attach(&eng);
    const auto r = engine::run_simulation(w, eng);
    sampler.finish(r.virtual_end_ns);
    counters = r.counters;
    end = r.virtual_end_ns;
    out.close();
    const auto& t = sampler.tracker();
    EXPECT_DOUBLE_EQ(*t.increase("prefix_cache_queries_tokens"),
                     static_cast<double>(counters.prefix_queries_tokens));
    EXPECT_DOUBLE_EQ(*t.increase("requests_finished"), 300.0);
  }
  std::ifstream in(dir / "samples.jsonl");
  std::string line;
  std::vector<Observation> v;
  while (std::getline(in, line)) v.push_back(parse_observation_json(line));
  std::filesystem::remove_all(dir);
  ASSERT_GE(v.size(), 3u);
  EXPECT_EQ(v.front().t_ns, 0);
  EXPECT_EQ(v.back().t_ns, end);
  for (std::size_t i = 1; i < v.size(); ++i) {
    EXPECT_GT(v[i].t_ns, v[i - 1].t_ns);
    EXPECT_EQ(v[i].source, "sim");
  }
  const auto& last = v.back().canonical;
  EXPECT_EQ(find_value(last, "prefix_cache_queries_tokens"),
            static_cast<double>(counters.prefix_queries_tokens));
  EXPECT_EQ(find_value(last, "prefix_cache_hits_tokens"), static_cast<double>(counters.prefix_hits_tokens));
  EXPECT_EQ(find_value(last, "generation_tokens"), static_cast<double>(counters.generation_tokens));
  EXPECT_EQ(find_value(last, "prompt_tokens"), static_cast<double>(counters.prompt_tokens));
  EXPECT_EQ(find_value(last, "requests_finished"), 300.0);
  EXPECT_EQ(find_value(last, "server_ttft_seconds_count"), 300.0);
  EXPECT_EQ(find_value(last, "iteration_tokens_count"), static_cast<double>(counters.steps));
  // Derived series are there from the second sample on.
  EXPECT_TRUE(find_value(v[2].derived, "generation_tokens_per_s"));
}

constexpr Nanos kMs = 1'000'000;

// The kernel's avg10 over 2 s windows, the stalled total and the 100 ms
// periods with stalls, on stalls that straddle a window and a period.
TEST(StolenTimeSeries, FollowsTheKernelsAveragesAndCfsPeriods) {
  StolenTimeSeries s;
  s.add(0, 1000 * kMs);
  s.add(1950 * kMs, 2050 * kMs);
  s.advance(1500 * kMs);
  EXPECT_DOUBLE_EQ(s.stalled_seconds(), 1.0);
  EXPECT_EQ(s.throttled_periods(), 10u);
  EXPECT_EQ(s.some_avg10(), 0.0);  // no window has closed yet
  s.advance(2000 * kMs);
  EXPECT_DOUBLE_EQ(s.stalled_seconds(), 1.05);
  EXPECT_EQ(s.throttled_periods(), 11u);
  // numpy: d = np.exp(-2/10); 0.525 * (1 - d)
  EXPECT_DOUBLE_EQ(s.some_avg10(), 0.09516635463405955);
  s.advance(4000 * kMs);
  EXPECT_DOUBLE_EQ(s.stalled_seconds(), 1.1);
  EXPECT_EQ(s.throttled_periods(), 12u);
  // numpy: 0.09516635463405955 * d + 0.025 * (1 - d)
  EXPECT_DOUBLE_EQ(s.some_avg10(), 0.08244735237028032);
  s.advance(24000 * kMs);  // ten windows without a stall
  // numpy: 0.08244735237028032 * d**10
  EXPECT_DOUBLE_EQ(s.some_avg10(), 0.011158035785140692);
  EXPECT_EQ(s.throttled_periods(), 12u);
}

// A steal perturbation in sim: the host and cgroup series a real host would
// show, on the run's clock, adding up to the stolen time of the steps.
TEST(SimSampler, StolenTimeShowsAsHostPressureAndCgroupThrottling) {
  const auto w = synthetic(600, 10.0);
  engine::EngineSettings s;
  s.num_tenants = static_cast<std::uint32_t>(w.tenants.size());
  s.perturbations = engine::parse_perturbation_spec("steal:share=1,period_s=20,on_s=10,offset_s=20");
  const auto eff = engine::resolve_engine(s, engine::Catalog::builtin());
  const auto dir = std::filesystem::temp_directory_path() / ("sim_steal_test_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  Nanos stolen = 0;
  struct Steps : engine::EngineObserver {
    Nanos* stolen;
    void on_step(const engine::StepStats& st) override { *stolen += st.stolen_ns; }
  } steps;
  steps.stolen = &stolen;
  {
    RunDirectory out(dir);
    SimSampler sampler(steps, write_to(out.samples()), kNanosPerSecond);
    sampler.enable_contention_series();
    engine::Engine eng(eff, s, std::make_unique<engine::FixedCostModel>(0.02), &sampler);
    sampler.attach(&eng);
    const auto r = engine::run_simulation(w, eng);
    sampler.finish(r.virtual_end_ns);
    EXPECT_EQ(sampler.contention_observations(), sampler.observations());
    out.close();
  }
  std::ifstream in(dir / "samples.jsonl");
  std::string line;
  std::map<std::string, std::vector<Observation>> by_source;
  while (std::getline(in, line)) {
    auto o = parse_observation_json(line);
    by_source[o.source].push_back(std::move(o));
  }
  std::filesystem::remove_all(dir);
  ASSERT_EQ(by_source.size(), 3u);
  const auto& host = by_source["host"];
  const auto& cgroup = by_source["cgroup"];
  ASSERT_EQ(host.size(), by_source["sim"].size());
  ASSERT_EQ(cgroup.size(), host.size());
  EXPECT_GT(stolen, 5 * kNanosPerSecond);  // half of each 10 s on-interval from 20 s on: 20 ms steps doubled
  EXPECT_NEAR(*find_value(cgroup.back().canonical, "cgroup_cpu_throttled_seconds"), nanos_to_s(stolen), 1e-6);
  EXPECT_NEAR(*find_value(host.back().raw, "pressure_cpu_some_total_us"), nanos_to_s(stolen) * 1e6, 1.0);
  double before = 0.0, during = 0.0;
  for (const auto& o : host) {
    const double t = nanos_to_s(o.t_ns);  // the first step is at about 0.1 s: on from about 20 s
    const double p = *find_value(o.canonical, "host_cpu_pressure_some");
    if (t < 19.0) before = std::max(before, p);
    if (t >= 28.0 && t < 30.0) during = p;
  }
  EXPECT_EQ(before, 0.0);
  // Four 2 s windows into a steady half of the time stolen, avg10 is on its
  // way to 0.5: about 0.5 * (1 - e^(-0.2 * 4)) = 0.275.
  EXPECT_GT(during, 0.2);
  EXPECT_LE(during, 0.5);
  EXPECT_GT(*find_value(cgroup.back().canonical, "cgroup_cpu_throttled_periods"), 90.0);
}

}  // namespace
}  // namespace tokenscope::observe
