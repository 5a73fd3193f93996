// bench --metrics-port: the live metrics endpoint on a loopback port. Each
// test feeds known records and counters, fetches GET /metrics over real
// HTTP (net::fetch) and parses the exposition text back, so that what a
// scraper reads is checked, not the in-memory numbers.
#include "bench/live_metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "net/http_fetch.h"

namespace tokenscope::bench {
namespace {

// One scrape, parsed: "name{labels}" (as written) -> value; every sample's
// family must have had its # TYPE line before it.
struct Scrape {
  std::map<std::string, double> values;
  std::map<std::string, std::string> types;  // family -> type
  std::set<std::string> helps;
  double at(const std::string& series) const {
    const auto it = values.find(series);
    if (it == values.end()) {
      ADD_FAILURE() << "no series " << series;
      return -1;
    }
    return it->second;
  }
  // A histogram's buckets by their upper bound, read back as numbers
  // (whatever spelling the text used), ascending; +Inf last.
  std::vector<std::pair<double, double>> buckets(const std::string& family) const {
    std::vector<std::pair<double, double>> out;
    const std::string prefix = family + "_bucket{le=\"";
    for (const auto& [series, v] : values)
      if (series.rfind(prefix, 0) == 0) {
        const std::string le = series.substr(prefix.size(), series.size() - prefix.size() - 2);
        out.emplace_back(le == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(le), v);
      }
    std::sort(out.begin(), out.end());
    return out;
  }
  double bucket(const std::string& family, double le) const {
    for (const auto& [bound, v] : buckets(family))
      if (bound == le) return v;
    ADD_FAILURE() << "no bucket le=" << le << " in " << family;
    return -1;
  }
};

Scrape parse(const std::string& text) {
  Scrape s;
  std::istringstream in(text);
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    EXPECT_FALSE(line.empty()) << "line " << n << " is empty";
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string rest = line.substr(7);
      s.helps.insert(rest.substr(0, rest.find(' ')));
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string rest = line.substr(7);
      const auto sp = rest.find(' ');
      s.types[rest.substr(0, sp)] = rest.substr(sp + 1);
      continue;
    }
    const auto sp = line.rfind(' ');
    if (sp == std::string::npos) {
      ADD_FAILURE() << "line " << n << ": no value: " << line;
      continue;
    }
    const std::string series = line.substr(0, sp);
    const std::string name = series.substr(0, series.find('{'));
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string sfx = suffix;
      if (name.size() > sfx.size() && name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0 &&
          s.types.count(name.substr(0, name.size() - sfx.size())) &&
          s.types[name.substr(0, name.size() - sfx.size())] == "histogram")
        family = name.substr(0, name.size() - sfx.size());
    }
    EXPECT_TRUE(s.types.count(family)) << "line " << n << ": no # TYPE before " << line;
    EXPECT_TRUE(s.helps.count(family)) << "line " << n << ": no # HELP before " << line;
    EXPECT_EQ(name.rfind("tokenscope_bench_", 0), 0u) << line;
    const std::string v = line.substr(sp + 1);
    s.values[series] = v == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(v);
  }
  return s;
}

net::FetchResult get(const LiveMetrics& m, const std::string& path, const std::string& method = "GET") {
  net::FetchRequest req;
  req.method = method;
  req.path = path;
  req.timeout_s = 10;
  return net::fetch(net::Endpoint::parse_url("http://127.0.0.1:" + std::to_string(m.port())), {}, req);
}

Scrape scrape(const LiveMetrics& m) {
  const auto r = get(m, "/metrics");
  EXPECT_EQ(r.status, 200) << r.error;
  return parse(r.body);
}

constexpr Nanos kMs = kNanosPerMilli;

// A streamed completion: sent `lag_ms` after its schedule, first token
// after `ttft_ms`, then events of the given token counts 10 ms apart.
RequestRecord streamed(Nanos sched, double lag_ms, double ttft_ms, std::vector<std::uint32_t> tokens) {
  RequestRecord r;
  r.t_sched = sched;
  r.t_send = sched + static_cast<Nanos>(lag_ms * 1e6);
  r.t_headers = r.t_send + static_cast<Nanos>(ttft_ms * 1e6);
  Nanos t = r.t_send + static_cast<Nanos>(ttft_ms * 1e6);
  r.t_first_token = t;
  std::int64_t out = 0;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) t += 10 * kMs;
    r.event_times.push_back(t);
    r.event_tokens.push_back(tokens[i]);
    out += tokens[i];
  }
  r.t_last_token = t;
  r.t_close = t;
  r.output_tokens = out;
  r.prompt_tokens = 100;
  r.http_status = 200;
  return r;
}

RequestRecord failed(Nanos sched, Outcome o) {
  RequestRecord r;
  r.t_sched = sched;
  r.t_send = sched + 500 * kMs;  // a send lag of 0.5 s
  r.t_close = r.t_send + 5 * kMs;
  r.outcome = o;
  return r;
}

TEST(LiveMetrics, ServesWhatWasFedOverHttp) {
  ManualClock clock(0);
  LiveMetrics m({"127.0.0.1", 0}, &clock);
  m.start();
  ASSERT_NE(m.port(), 0);
  EXPECT_EQ(m.url(), "http://127.0.0.1:" + std::to_string(m.port()) + "/metrics");

  RunCounters c;
  c.sent = 7;
  c.in_flight = 2;
  c.queued = 1;
  m.begin_run(
      {"runs/a \"quoted\" \\ dir", "llama-3-8b\nx", "http://127.0.0.1:9/v1"}, c, [] { return 3u; },
      kNanosPerSecond);
  const Nanos s0 = kNanosPerSecond;
  // Two completed requests: TTFT 0.2 s and 0.04 s; events of 1, 1 and 2
  // tokens 10 ms apart: ITL samples 0.01, 0.005, 0.005 each.
  std::vector<RequestRecord> batch;
  batch.push_back(streamed(s0, 0.2, 200, {1, 1, 2}));
  batch.push_back(streamed(s0 + 100 * kMs, 3, 40, {1, 1, 2}));
  batch.push_back(failed(s0, Outcome::kHttpError));
  m.add(batch);
  m.add(failed(s0, Outcome::kTimeout));
  RequestRecord warm = streamed(0, 0.2, 200, {1});
  warm.warmup = true;
  m.add(warm);
  clock.set(s0 + 2 * kNanosPerSecond + kNanosPerSecond / 2);  // 5 finished in 2.5 s

  const Scrape s = scrape(m);
  EXPECT_EQ(
      s.at("tokenscope_bench_run_info{run_id=\"runs/a \\\"quoted\\\" \\\\ dir\",model=\"llama-3-8b\\nx\","
           "target=\"http://127.0.0.1:9/v1\"}"),
      1);
  EXPECT_EQ(s.types.at("tokenscope_bench_run_info"), "gauge");
  EXPECT_EQ(s.at("tokenscope_bench_run_finished"), 0);
  EXPECT_EQ(s.at("tokenscope_bench_requests_sent_total"), 7);
  EXPECT_EQ(s.types.at("tokenscope_bench_requests_sent_total"), "counter");
  EXPECT_EQ(s.at("tokenscope_bench_requests_completed_total"), 3);  // the warm-up one too
  EXPECT_EQ(s.at("tokenscope_bench_requests_failed_total{outcome=\"http_error\"}"), 1);
  EXPECT_EQ(s.at("tokenscope_bench_requests_failed_total{outcome=\"timeout\"}"), 1);
  for (const char* o : {"connect_error", "protocol_error", "validation_error", "cancelled", "rejected"})
    EXPECT_EQ(s.at(std::string("tokenscope_bench_requests_failed_total{outcome=\"") + o + "\"}"), 0) << o;
  EXPECT_EQ(s.values.count("tokenscope_bench_requests_failed_total{outcome=\"ok\"}"), 0u);
  EXPECT_EQ(s.at("tokenscope_bench_requests_warmup_total"), 1);
  EXPECT_EQ(s.at("tokenscope_bench_requests_in_flight"), 2);
  EXPECT_EQ(s.types.at("tokenscope_bench_requests_in_flight"), "gauge");
  EXPECT_EQ(s.at("tokenscope_bench_requests_queued"), 1);
  EXPECT_EQ(s.at("tokenscope_bench_requests_not_sent_total"), 3);
  EXPECT_DOUBLE_EQ(s.at("tokenscope_bench_achieved_requests_per_second"), 5 / 2.5);
  EXPECT_EQ(s.at("tokenscope_bench_output_tokens_total"), 4 + 4 + 1);
  EXPECT_EQ(s.at("tokenscope_bench_prompt_tokens_total"), 300);

  // TTFT: 0.2, 0.04 and the warm-up's 0.2.
  EXPECT_EQ(s.types.at("tokenscope_bench_time_to_first_token_seconds"), "histogram");
  EXPECT_EQ(s.at("tokenscope_bench_time_to_first_token_seconds_count"), 3);
  EXPECT_NEAR(s.at("tokenscope_bench_time_to_first_token_seconds_sum"), 0.44, 1e-9);
  EXPECT_EQ(s.bucket("tokenscope_bench_time_to_first_token_seconds", 0.025), 0);
  EXPECT_EQ(s.bucket("tokenscope_bench_time_to_first_token_seconds", 0.05), 1);
  EXPECT_EQ(s.bucket("tokenscope_bench_time_to_first_token_seconds", 0.2), 3);
  EXPECT_EQ(s.bucket("tokenscope_bench_time_to_first_token_seconds", std::numeric_limits<double>::infinity()),
            3);
  // ITL: per completed streamed request 0.01 (one token) and 2 x 0.005
  // (an event of two tokens, 10 ms after the one before).
  EXPECT_EQ(s.at("tokenscope_bench_inter_token_latency_seconds_count"), 6);
  EXPECT_NEAR(s.at("tokenscope_bench_inter_token_latency_seconds_sum"), 0.04, 1e-9);
  EXPECT_EQ(s.bucket("tokenscope_bench_inter_token_latency_seconds", 0.0025), 0);
  EXPECT_EQ(s.bucket("tokenscope_bench_inter_token_latency_seconds", 0.005), 4);
  EXPECT_EQ(s.bucket("tokenscope_bench_inter_token_latency_seconds", 0.01), 6);
  // E2E: TTFT + 20 ms, and the warm-up's 0.2.
  EXPECT_EQ(s.at("tokenscope_bench_e2e_request_latency_seconds_count"), 3);
  EXPECT_NEAR(s.at("tokenscope_bench_e2e_request_latency_seconds_sum"), 0.22 + 0.06 + 0.2, 1e-9);
  EXPECT_EQ(s.bucket("tokenscope_bench_e2e_request_latency_seconds", 0.1), 1);
  EXPECT_EQ(s.bucket("tokenscope_bench_e2e_request_latency_seconds", 0.25), 3);
  // Send lag: every request sent, the failed ones (0.5 s) too.
  EXPECT_EQ(s.at("tokenscope_bench_send_lag_seconds_count"), 5);
  EXPECT_NEAR(s.at("tokenscope_bench_send_lag_seconds_sum"), 0.0002 + 0.003 + 0.5 + 0.5 + 0.0002, 1e-9);
  EXPECT_EQ(s.bucket("tokenscope_bench_send_lag_seconds", 0.00025), 2);
  EXPECT_EQ(s.bucket("tokenscope_bench_send_lag_seconds", 0.005), 3);
  EXPECT_EQ(s.bucket("tokenscope_bench_send_lag_seconds", 0.5), 5);
  // Buckets are cumulative, one per bound and +Inf, which equals the count.
  const std::vector<std::pair<const char*, std::vector<double>>> families = {
      {"tokenscope_bench_send_lag_seconds", send_lag_buckets()},
      {"tokenscope_bench_time_to_first_token_seconds", ttft_buckets()},
      {"tokenscope_bench_inter_token_latency_seconds", itl_buckets()},
      {"tokenscope_bench_e2e_request_latency_seconds", e2e_buckets()}};
  for (const auto& [family, bounds] : families) {
    const auto b = s.buckets(family);
    ASSERT_EQ(b.size(), bounds.size() + 1) << family;
    for (std::size_t i = 0; i < bounds.size(); ++i) {
      EXPECT_EQ(b[i].first, bounds[i]) << family;
      if (i > 0) {
        EXPECT_GE(b[i].second, b[i - 1].second) << family << " le=" << bounds[i];
      }
    }
    EXPECT_EQ(b.back().second, s.at(std::string(family) + "_count")) << family;
  }
}

TEST(LiveMetrics, EndRunFreezesTheRunAndANewRunAddsToTheTotals) {
  ManualClock clock(0);
  LiveMetrics m({"127.0.0.1", 0}, &clock);
  m.start();
  auto first = std::make_unique<RunCounters>();
  first->sent = 4;
  first->in_flight = 1;
  m.begin_run(
      {"runs/one", "m", "t"}, *first, [] { return 2u; }, 0);
  for (int i = 0; i < 4; ++i) m.add(streamed(0, 1, 50, {1, 1}));
  clock.set(2 * kNanosPerSecond);
  m.end_run();
  first.reset();  // never read again after end_run()
  clock.set(100 * kNanosPerSecond);
  Scrape s = scrape(m);
  EXPECT_EQ(s.at("tokenscope_bench_run_finished"), 1);
  EXPECT_EQ(s.at("tokenscope_bench_requests_sent_total"), 4);
  EXPECT_EQ(s.at("tokenscope_bench_requests_not_sent_total"), 2);
  EXPECT_EQ(s.at("tokenscope_bench_requests_in_flight"), 0);
  EXPECT_DOUBLE_EQ(s.at("tokenscope_bench_achieved_requests_per_second"), 2.0);  // 4 in 2 s, frozen

  RunCounters second;
  second.sent = 3;
  m.begin_run(
      {"runs/two", "m", "t"}, second, [] { return 0u; }, 100 * kNanosPerSecond);
  m.add(failed(100 * kNanosPerSecond, Outcome::kConnectError));
  clock.set(101 * kNanosPerSecond);
  s = scrape(m);
  EXPECT_EQ(s.at("tokenscope_bench_run_finished"), 0);
  EXPECT_EQ(s.at("tokenscope_bench_run_info{run_id=\"runs/two\",model=\"m\",target=\"t\"}"), 1);
  EXPECT_EQ(s.values.count("tokenscope_bench_run_info{run_id=\"runs/one\",model=\"m\",target=\"t\"}"), 0u);
  EXPECT_EQ(s.at("tokenscope_bench_requests_sent_total"), 7);
  EXPECT_EQ(s.at("tokenscope_bench_requests_not_sent_total"), 2);
  EXPECT_EQ(s.at("tokenscope_bench_requests_completed_total"), 4);
  EXPECT_EQ(s.at("tokenscope_bench_requests_failed_total{outcome=\"connect_error\"}"), 1);
  EXPECT_DOUBLE_EQ(s.at("tokenscope_bench_achieved_requests_per_second"), 1.0);  // this run's: 1 in 1 s
}

TEST(LiveMetrics, BeforeARunOnlyTheTotalsAreServed) {
  ManualClock clock(0);
  LiveMetrics m({"127.0.0.1", 0}, &clock);
  m.start();
  const Scrape s = scrape(m);
  EXPECT_EQ(s.at("tokenscope_bench_requests_sent_total"), 0);
  EXPECT_EQ(s.at("tokenscope_bench_achieved_requests_per_second"), 0);
  EXPECT_EQ(s.at("tokenscope_bench_time_to_first_token_seconds_count"), 0);
  EXPECT_EQ(s.types.count("tokenscope_bench_run_info"), 0u);
}

TEST(LiveMetrics, OtherPathsAndMethodsAreRefused) {
  ManualClock clock(0);
  LiveMetrics m({"127.0.0.1", 0}, &clock);
  m.start();
  const auto missing = get(m, "/v1/models");
  EXPECT_EQ(missing.status, 404) << missing.error;
  EXPECT_NE(missing.body.find("GET /metrics"), std::string::npos) << missing.body;
  const auto post = get(m, "/metrics", "POST");
  EXPECT_EQ(post.status, 405) << post.error;
  EXPECT_EQ(get(m, "/metrics?x=1").status, 200);  // the query string is not part of the path
}

TEST(LiveMetrics, BadAddressesNameTheOption) {
  ManualClock clock(0);
  LiveMetrics bad_host({"localhost:80", 0}, &clock);
  try {
    bad_host.start();
    FAIL() << "no error for a host that is not an IP address";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--metrics-host 'localhost:80': expected an IP address"),
              std::string::npos)
        << e.what();
  }
  LiveMetrics first({"127.0.0.1", 0}, &clock);
  first.start();
  LiveMetrics second({"127.0.0.1", first.port()}, &clock);
  try {
    second.start();
    FAIL() << "no error for a port in use";
  } catch (const UsageError& e) {
    EXPECT_NE(
        std::string(e.what()).find("--metrics-port " + std::to_string(first.port()) + ": cannot listen"),
        std::string::npos)
        << e.what();
  }
}

// The writer thread adds while a scraper reads: every scrape is whole (its
// buckets end at its count) and the counts never go back.
TEST(LiveMetrics, ScrapesWhileRecordsArriveSeeConsistentGrowingCounts) {
  ManualClock clock(0);
  LiveMetrics m({"127.0.0.1", 0}, &clock);
  m.start();
  RunCounters c;
  m.begin_run(
      {"r", "m", "t"}, c, [] { return 0u; }, 0);
  // The writer goes on until the scraper has read 20 times, so that the
  // scrapes fall among the adds.
  std::atomic<int> scrapes{0};
  std::atomic<bool> written{false}, give_up{false};
  std::uint64_t added = 0;
  std::thread writer([&] {
    while (!give_up.load() && (scrapes.load() < 20 || added < 1000)) {
      ++c.sent;
      m.add(streamed(0, 1, 30, {1, 1, 1}));
      ++added;
    }
    written = true;
  });
  double last = 0;
  for (;;) {
    const bool after = written.load();  // this scrape starts after the last add
    const Scrape s = scrape(m);
    ++scrapes;
    const double done = s.at("tokenscope_bench_requests_completed_total");
    EXPECT_GE(done, last);
    last = done;
    EXPECT_EQ(s.at("tokenscope_bench_time_to_first_token_seconds_count"), done);
    EXPECT_EQ(
        s.bucket("tokenscope_bench_time_to_first_token_seconds", std::numeric_limits<double>::infinity()),
        done);
    EXPECT_EQ(s.at("tokenscope_bench_inter_token_latency_seconds_count"), 2 * done);
    EXPECT_GE(s.at("tokenscope_bench_requests_sent_total"), done);
    if (after || ::testing::Test::HasFailure()) break;
  }
  give_up = true;  // after a failure, the writer must not wait for more scrapes
  writer.join();
  EXPECT_EQ(last, static_cast<double>(added));
  EXPECT_GE(scrapes.load(), 20);
}

TEST(LiveMetrics, StopClosesThePortAndIsIdempotent) {
  ManualClock clock(0);
  LiveMetrics m({"127.0.0.1", 0}, &clock);
  m.start();
  const auto port = m.port();
  ASSERT_EQ(get(m, "/metrics").status, 200);
  m.stop();
  m.stop();
  net::FetchRequest req;
  req.path = "/metrics";
  req.timeout_s = 5;
  const auto r = net::fetch(net::Endpoint::parse_url("http://127.0.0.1:" + std::to_string(port)), {}, req);
  EXPECT_EQ(r.status, 0);
  EXPECT_FALSE(r.error.empty());
}

}  // namespace
}  // namespace tokenscope::bench
