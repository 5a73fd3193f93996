// The exporters' speed on a large synthetic run (benchmarks/export_speed.sh).
//   export_bench generate DIR REQUESTS EVENTS   a run: requests.jsonl written by
//       RequestRecord::append_json (REQUESTS requests of EVENTS output events,
//       100 requests/s, 20 ms between events), samples.jsonl (server and gpu
//       every second, a histogram among them), run.json with a clock anchor
//   export_bench perfetto DIR OUT               export_perfetto
//   export_bench otlp DIR OUTDIR                export_otlp
// Each export prints one JSON line: wall seconds and the exporter's counts.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/record.h"
#include "core/run_dir.h"
#include "exporters/otlp.h"
#include "exporters/perfetto.h"

namespace {

using namespace tokenscope;
using namespace tokenscope::observe;
using namespace tokenscope::rundir;
using namespace tokenscope::exporters;

int generate(const std::filesystem::path& dir, std::uint64_t requests, int events) {
  RunDirectory run(dir, /*requests_line_durable=*/false);
  const Nanos start = 1'000'000'000, gap = 20'000'000, spacing = 10'000'000;
  RequestRecord r;
  r.tenant = "tenant-a";
  r.http_status = 200;
  for (std::uint64_t i = 0; i < requests; ++i) {
    r.id = i;
    r.t_sched = start + static_cast<Nanos>(i) * spacing;
    r.t_send = r.t_sched + 50'000 + static_cast<Nanos>(i % 7) * 10'000;
    r.t_headers = r.t_send + 2'000'000;
    r.event_times.clear();
    r.event_tokens.assign(static_cast<std::size_t>(events), 1);
    const Nanos ttft = 30'000'000 + static_cast<Nanos>(i % 13) * 1'000'000;
    for (int k = 0; k < events; ++k)
      r.event_times.push_back(r.t_send + ttft + k * gap + static_cast<Nanos>(i % 5) * 997);
    r.t_first_token = r.event_times.empty() ? -1 : r.event_times.front();
    r.t_last_token = r.event_times.empty() ? -1 : r.event_times.back();
    r.t_close = (r.event_times.empty() ? r.t_headers : r.t_last_token) + 100'000;
    r.prompt_tokens = 512 + static_cast<std::int64_t>(i % 100);
    r.output_tokens = events;
    r.output_tokens_planned = events;
    r.response_id = fmt::format("cmpl-{}", i);
    r.append_json(run.requests().begin_line());
    run.requests().end_line();
  }
  run.close();
  // One observation per second per source over the run.
  JsonlWriter samples(dir / "samples.jsonl", false);
  const Nanos end = start + static_cast<Nanos>(requests) * spacing + events * gap;
  double prompt = 0, gen = 0, count = 0, sum = 0;
  for (Nanos t = start; t < end; t += kNanosPerSecond) {
    Observation o;
    o.t_ns = t;
    o.source = "server";
    prompt += 51'200;
    gen += 10'000;
    count += 100;
    sum += 3.5;
    o.canonical = {{"requests_running", {}, 200},
                   {"requests_waiting", {}, 3},
                   {"kv_cache_usage", {}, 0.42},
                   {"prompt_tokens", {}, prompt},
                   {"generation_tokens", {}, gen},
                   {"server_ttft_seconds_sum", {}, sum},
                   {"server_ttft_seconds_count", {}, count}};
    for (const char* le : {"0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "+Inf"})
      o.canonical.push_back({"server_ttft_seconds_bucket", {{"le", le}}, count});
    append_observation_json(samples.begin_line(), o);
    samples.end_line();
    Observation g;
    g.t_ns = t + 1'000'000;
    g.source = "gpu";
    g.canonical = {{"gpu_utilization", {{"gpu", "0"}}, 0.9}, {"gpu_power_watts", {{"gpu", "0"}}, 650}};
    append_observation_json(samples.begin_line(), g);
    samples.end_line();
  }
  samples.close();
  nlohmann::json j = {
      {"tool", {{"name", "tokenscope"}, {"version", "bench"}, {"command", "bench"}}},
      {"clock", {{"monotonic_ns", start}, {"unix_ns", 1'767'225'600'000'000'000}}},
      {"settings", {{"effective", {{"target", {{"url", "http://127.0.0.1:8000"}, {"model", "m"}}}}}}}};
  run.write_run_json(j);
  return 0;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  try {
    if (cmd == "generate" && argc == 5)
      return generate(argv[2], std::strtoull(argv[3], nullptr, 10), std::atoi(argv[4]));
    if (cmd == "perfetto" && argc == 4) {
      const auto t0 = std::chrono::steady_clock::now();
      const PerfettoStats s = export_perfetto(argv[2], argv[3]);
      std::printf(
          "{\"exporter\":\"perfetto\",\"wall_s\":%.3f,\"requests\":%llu,\"events\":%llu,\"bytes\":%llu,"
          "\"lanes\":%u,\"counter_events\":%llu}\n",
          seconds_since(t0), static_cast<unsigned long long>(s.requests),
          static_cast<unsigned long long>(s.events), static_cast<unsigned long long>(s.bytes), s.lanes,
          static_cast<unsigned long long>(s.counter_events));
      return 0;
    }
    if (cmd == "otlp" && argc == 4) {
      const auto t0 = std::chrono::steady_clock::now();
      const OtlpStats s = export_otlp(argv[2], argv[3]);
      std::printf(
          "{\"exporter\":\"otlp\",\"wall_s\":%.3f,\"requests\":%llu,\"span_events\":%llu,"
          "\"metric_points\":%llu,\"bytes\":%llu}\n",
          seconds_since(t0), static_cast<unsigned long long>(s.spans),
          static_cast<unsigned long long>(s.span_events), static_cast<unsigned long long>(s.metric_points),
          static_cast<unsigned long long>(s.bytes));
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "export_bench: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: export_bench generate DIR REQUESTS EVENTS | perfetto DIR OUT | otlp DIR OUTDIR\n");
  return 2;
}
