// vllm_result.json (--compat vllm) against vLLM's definitions: every key of
// VllmCompat::build() is compared with what numpy computes from the same
// records (vllm_compat_reference.py, a restatement of benchmark_serving.py's
// calculate_metrics and --save-result, run by /usr/bin/python3 with Debian's
// python3-numpy, which scripts/setup.sh installs), and the key set with
// vLLM's.
#include "bench/vllm_compat.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace tokenscope::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr Nanos kMs = kNanosPerMilli;

// A successful streamed request sent at `send`, with output events at the
// given offsets from the send.
RequestRecord ok_record(std::uint64_t id, Nanos send, std::vector<Nanos> offsets,
                        std::int64_t output_tokens) {
  RequestRecord r;
  r.id = id;
  r.t_sched = r.t_send = send;
  for (Nanos o : offsets) r.event_times.push_back(send + o);
  r.event_tokens.assign(offsets.size(), 1);
  if (!offsets.empty()) {
    r.t_first_token = r.event_times.front();
    r.t_last_token = r.event_times.back();
  }
  r.t_close = (offsets.empty() ? send : r.event_times.back()) + kMs;
  r.http_status = 200;
  r.output_tokens = output_tokens;
  r.output_tokens_client = static_cast<std::int64_t>(offsets.size());
  return r;
}

RequestRecord failed_record(std::uint64_t id, Nanos send, std::vector<Nanos> offsets, Outcome outcome,
                            std::string detail) {
  RequestRecord r = ok_record(id, send, std::move(offsets), -1);
  r.outcome = outcome;
  r.detail = std::move(detail);
  return r;
}

struct Planned {
  RequestRecord record;
  std::int64_t planned_prompt_tokens;
};

json info_json(const VllmCompatInfo& i) {
  return {{"date", i.date},
          {"backend", i.backend},
          {"model_id", i.model_id},
          {"tokenizer_id", i.tokenizer_id},
          {"request_rate", i.request_rate ? json(*i.request_rate) : json("inf")},
          {"burstiness", i.burstiness},
          {"max_concurrency", i.max_concurrency ? json(*i.max_concurrency) : json(nullptr)},
          {"duration_s", i.duration_s}};
}

json slo_json(const std::optional<Slo>& s) {
  if (!s) return nullptr;
  json j = json::object();
  if (s->ttft_ms) j["ttft"] = *s->ttft_ms;
  if (s->tpot_ms) j["tpot"] = *s->tpot_ms;
  if (s->e2e_ms) j["e2el"] = *s->e2e_ms;
  return j;
}

// numpy's result for the records, or null (and a test failure) when python3
// or numpy cannot run.
json numpy_reference(const std::vector<Planned>& requests, const VllmCompatInfo& info) {
  const fs::path dir =
      fs::temp_directory_path() / ("tokenscope_vllm_compat_" + std::to_string(::getpid()) + "_" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::create_directories(dir);
  json in = {{"info", info_json(info)}, {"slo", slo_json(info.goodput_slo)}, {"requests", json::array()}};
  for (const auto& p : requests) {
    std::string line;
    p.record.append_json(line);  // as requests.jsonl has it
    in["requests"].push_back({{"record", json::parse(line)}, {"planned", p.planned_prompt_tokens}});
  }
  std::ofstream(dir / "in.json") << in.dump();
  const std::string command = "/usr/bin/python3 '" TOKENSCOPE_SOURCE_DIR
                              "/src/bench/vllm_compat_reference.py' '" +
                              (dir / "in.json").string() + "' '" + (dir / "out.json").string() + "' 2>'" +
                              (dir / "err.txt").string() + "'";
  const int rc = std::system(command.c_str());
  json out = nullptr;
  if (rc != 0) {
    std::ifstream err(dir / "err.txt");
    std::stringstream ss;
    ss << err.rdbuf();
    ADD_FAILURE()
        << "the numpy reference did not run (exit " << rc << "): " << ss.str()
        << "\n/usr/bin/python3 with Debian's python3-numpy is needed (scripts/setup.sh installs it)";
  } else {
    out = json::parse(std::ifstream(dir / "out.json"));
  }
  fs::remove_all(dir);
  return out;
}

// Same keys, same strings and nulls, integers exactly, floats within 1e-9
// (relative above 1).
void expect_same(const json& ours, const json& ref, const std::string& where) {
  if (ref.is_number() && ours.is_number()) {
    if (ref.is_number_integer() && ours.is_number_integer()) {
      EXPECT_EQ(ours.get<std::int64_t>(), ref.get<std::int64_t>()) << where;
    } else {
      const double a = ours.get<double>(), b = ref.get<double>();
      EXPECT_NEAR(a, b, 1e-9 * std::max(1.0, std::abs(b))) << where;
    }
    return;
  }
  ASSERT_EQ(ours.type_name(), std::string(ref.type_name()))
      << where << ": " << ours.dump(-1).substr(0, 200) << " vs " << ref.dump(-1).substr(0, 200);
  if (ref.is_object()) {
    std::set<std::string> a, b;
    for (const auto& [k, v] : ours.items()) a.insert(k);
    for (const auto& [k, v] : ref.items()) b.insert(k);
    EXPECT_EQ(a, b) << where;
    for (const auto& [k, v] : ref.items())
      if (ours.contains(k)) expect_same(ours[k], v, where + "." + k);
  } else if (ref.is_array()) {
    ASSERT_EQ(ours.size(), ref.size()) << where;
    for (std::size_t i = 0; i < ref.size(); ++i)
      expect_same(ours[i], ref[i], where + "[" + std::to_string(i) + "]");
  } else {
    EXPECT_EQ(ours, ref) << where;
  }
}

json build(const std::vector<Planned>& requests, const VllmCompatInfo& info) {
  VllmCompat c;
  for (const auto& p : requests) c.add(p.record, p.planned_prompt_tokens);
  return c.build(info);
}

VllmCompatInfo make_info() {
  VllmCompatInfo info;
  info.backend = "vllm";
  info.model_id = "llama-3-8b";
  info.tokenizer_id = "llama-3-8b";
  info.request_rate = 4.0;
  info.burstiness = 1.0;
  info.max_concurrency = 3;
  info.duration_s = 2.5;
  info.date = "20261201-120000";
  return info;
}

// Every kind of record vLLM's definitions treat apart.
std::vector<Planned> mixed_requests() {
  std::vector<Planned> v;
  // 1. TTFT exactly 38.3 ms, E2E exactly 63.7 ms, 4 tokens: TPOT (63.7 - 38.3) / 3.
  v.push_back({ok_record(1, 1 * kMs, {38'300'000, 50 * kMs, 61'200'000, 63'700'000}, 4), 100});
  // 2. One output token: no TPOT (0 for goodput), no gap.
  v.push_back({ok_record(2, 100 * kMs, {20 * kMs}, 1), 50});
  // 3. No usage from the server: output_len 0, so no TPOT; its gaps still count in itl.
  v.push_back({ok_record(3, 200 * kMs, {15 * kMs, 40 * kMs, 41 * kMs}, -1), 60});
  // 4. An HTTP error: no output at all.
  auto e = failed_record(4, 300 * kMs, {}, Outcome::kHttpError, "HTTP 500: boom");
  e.http_status = 500;
  v.push_back({e, 70});
  // 5. Reset after two events: its TTFT and gap stay in ttfts and itls, not in any statistic.
  v.push_back({failed_record(5, 400 * kMs, {30 * kMs, 45 * kMs}, Outcome::kConnectError, "reset"), 80});
  // 6. Warm-up: left out entirely.
  auto w = ok_record(6, 0, {5 * kMs, 9 * kMs}, 2);
  w.warmup = true;
  v.push_back({w, 90});
  // 7. A later turn of a session: no planned prompt, the server counted 230.
  auto t = ok_record(7, 500 * kMs, {25 * kMs, 35 * kMs, 47 * kMs}, 3);
  t.session = 0;
  t.turn = 1;
  t.prompt_tokens = 230;
  v.push_back({t, -1});
  // 8. Events carrying several tokens: vLLM's itl are the raw event gaps (2 here), TPOT uses all 5 tokens.
  auto m = ok_record(8, 600 * kMs, {12 * kMs, 30 * kMs, 31 * kMs}, 5);
  m.event_tokens = {1, 3, 1};
  v.push_back({m, 40});
  return v;
}

TEST(VllmCompat, EveryKeyMatchesNumpyOnMixedRecords) {
  const auto requests = mixed_requests();
  for (const bool with_slo : {false, true}) {
    VllmCompatInfo info = make_info();
    if (with_slo) {
      Slo slo;  // request 1 sits exactly on the TTFT target: not good in vLLM
      slo.ttft_ms = 38.3;
      slo.tpot_ms = 9;  // request 7's 11 ms misses it
      slo.e2e_ms = 100;
      info.goodput_slo = slo;
    }
    const json ours = build(requests, info);
    const json ref = numpy_reference(requests, info);
    ASSERT_FALSE(ref.is_null());
    expect_same(ours, ref, with_slo ? "with_slo" : "no_slo");
  }
}

// The same definitions, spelled out for the cases the fixes were about.
TEST(VllmCompat, DefinitionsOnMixedRecords) {
  const json j = build(mixed_requests(), make_info());
  EXPECT_EQ(j["num_prompts"], 7);  // the warm-up request is left out
  EXPECT_EQ(j["completed"], 5);
  EXPECT_EQ(j["input_lens"], json({100, 50, 60, 70, 80, 230, 40}));
  EXPECT_EQ(j["output_lens"], json({4, 1, 0, 0, 0, 3, 5}));
  EXPECT_EQ(j["total_input_tokens"], 100 + 50 + 60 + 230 + 40);  // successes only
  EXPECT_EQ(j["total_output_tokens"], 4 + 1 + 3 + 5);
  EXPECT_DOUBLE_EQ(j["ttfts"][3].get<double>(), 0.0);    // no output arrived
  EXPECT_DOUBLE_EQ(j["ttfts"][4].get<double>(), 0.030);  // a failure keeps what it measured
  EXPECT_EQ(j["itls"][4].size(), 1u);
  EXPECT_EQ(j["itls"][5].size(), 2u);  // request 7
  EXPECT_EQ(j["errors"][3], "http_error: HTTP 500: boom");
  EXPECT_EQ(j["errors"][0], "");
  EXPECT_TRUE(j["request_goodput"].is_null());  // no SLO
  EXPECT_EQ(j["max_concurrency"], 3);
  EXPECT_DOUBLE_EQ(j["request_throughput"].get<double>(), 5 / 2.5);
  // TPOT of requests 1, 7 and 8: (63.7-38.3)/3, (47-25)/2, (31-12)/4 ms; the
  // median of three is the middle one.
  EXPECT_NEAR(j["median_tpot_ms"].get<double>(), 25.4 / 3, 1e-9);
}

// vLLM: a request is good when slo / 1000 >= value, in seconds; at the
// boundary that is not value * 1000 <= slo. In IEEE doubles 0.0383 >
// 38.3 / 1000 and 0.0637 <= 63.7 / 1000, while 0.0383 * 1000 <= 38.3 and
// 0.0637 * 1000 > 63.7 (checked with python3: `38300000 / 1e9 <= 38.3 / 1000`
// is False, `63700000 / 1e9 <= 63.7 / 1000` is True).
TEST(VllmCompat, GoodputComparesInSecondsAsVllmDoes) {
  const std::vector<Planned> one = {{ok_record(1, 0, {38'300'000, 63'700'000}, 2), 10}};
  VllmCompatInfo info = make_info();
  info.duration_s = 1.0;
  Slo ttft;
  ttft.ttft_ms = 38.3;
  info.goodput_slo = ttft;
  EXPECT_DOUBLE_EQ(build(one, info)["request_goodput"].get<double>(), 0.0);
  Slo e2e;
  e2e.e2e_ms = 63.7;
  info.goodput_slo = e2e;
  EXPECT_DOUBLE_EQ(build(one, info)["request_goodput"].get<double>(), 1.0);
}

// `np.mean(x or 0)`: every statistic of an empty list is 0.0; the lists keep
// one entry per request.
TEST(VllmCompat, AllFailedGivesZeroStatisticsAsNumpyDoes) {
  std::vector<Planned> requests = {
      {failed_record(1, 0, {}, Outcome::kTimeout, "timed out"), 12},
      {failed_record(2, 5 * kMs, {8 * kMs}, Outcome::kProtocolError, "bad chunk"), 14}};
  VllmCompatInfo info = make_info();
  info.request_rate.reset();
  info.max_concurrency.reset();
  Slo slo;
  slo.ttft_ms = 100;
  info.goodput_slo = slo;
  const json ours = build(requests, info);
  const json ref = numpy_reference(requests, info);
  ASSERT_FALSE(ref.is_null());
  expect_same(ours, ref, "all_failed");
  EXPECT_EQ(ours["request_rate"], "inf");
  EXPECT_TRUE(ours["max_concurrency"].is_null());
  EXPECT_EQ(ours["completed"], 0);
  EXPECT_DOUBLE_EQ(ours["request_goodput"].get<double>(), 0.0);
  for (const char* k : {"mean_ttft_ms", "median_tpot_ms", "std_itl_ms", "p99_e2el_ms", "p90_itl_ms"})
    EXPECT_EQ(ours[k].get<double>(), 0.0) << k;
  EXPECT_EQ(ours["output_lens"], json({0, 0}));
  EXPECT_EQ(ours["total_input_tokens"], 0);

  const json empty = build({}, info);
  expect_same(empty, numpy_reference({}, info), "empty");
  EXPECT_EQ(empty["num_prompts"], 0);
}

// The keys of vLLM's benchmark_serving.py --save-result (detailed, with
// --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 90,95,99):
// its setup and traffic keys, then benchmark()'s result.
TEST(VllmCompat, HasVllmsKeySet) {
  std::set<std::string> expected = {"date",
                                    "backend",
                                    "model_id",
                                    "tokenizer_id",
                                    "num_prompts",
                                    "request_rate",
                                    "burstiness",
                                    "max_concurrency",
                                    "duration",
                                    "completed",
                                    "total_input_tokens",
                                    "total_output_tokens",
                                    "request_throughput",
                                    "request_goodput",
                                    "output_throughput",
                                    "total_token_throughput",
                                    "input_lens",
                                    "output_lens",
                                    "ttfts",
                                    "itls",
                                    "generated_texts",
                                    "errors"};
  for (const char* m : {"ttft", "tpot", "itl", "e2el"})
    for (const char* s : {"mean", "median", "std", "p90", "p95", "p99"})
      expected.insert(std::string(s) + "_" + m + "_ms");
  const json j = build(mixed_requests(), make_info());
  std::set<std::string> got;
  for (const auto& [k, v] : j.items()) got.insert(k);
  EXPECT_EQ(got, expected);
}

}  // namespace
}  // namespace tokenscope::bench
