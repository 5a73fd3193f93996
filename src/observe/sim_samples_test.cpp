#include "observe/sim_samples.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "engine/catalog.h"
#include "engine/cost_model.h"
#include "engine/simulator.h"
#include "workload/synthetic.h"

namespace tokenscope::observe {
namespace {

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
    engine::RecordingObserver rec(w, &out, false);
    SimSampler sampler(rec, &out.samples(), kNanosPerSecond / 2);
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

}  // namespace
}  // namespace tokenscope::observe
