// Fills a history of runs for benchmarks/history_speed.sh: N run
// directories made from one real run.json, each registered in the database
// through analyze/history.h as bench and sim register theirs.
//   history_fill TEMPLATE_RUN_JSON DB OUT_DIR N
// Run i gets seed i + 1 (so all N are comparable), its latency percentiles
// scaled by a factor drawn around 1 (sd 2%), 1.2 times that from run
// 0.7 N on (a regression for check --trend to find) and its throughputs
// divided by it; run.json's modification time is 600 s after the previous
// run's (the history's finish time, and what a script walking the
// directories sorts by). Prints the registrations per second.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "analyze/history.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: history_fill TEMPLATE_RUN_JSON DB OUT_DIR N\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json tmpl = nlohmann::json::parse(ss.str());
  const fs::path db = argv[2], out = argv[3];
  const long n = std::stol(argv[4]);
  tokenscope::analyze::History history(db);
  std::mt19937_64 rng(1);
  std::normal_distribution<double> noise(1.0, 0.02);
  const auto t0 = std::chrono::steady_clock::now();
  double register_s = 0;
  const auto start = std::chrono::system_clock::from_time_t(1'790'000'000);
  for (long i = 0; i < n; ++i) {
    nlohmann::json run = tmpl;
    const fs::path dir = out / fmt::format("run-{:05}", i);
    run["settings"]["requested"]["workload"]["seed"] = i + 1;
    if (run["settings"]["requested"].contains("output"))
      run["settings"]["requested"]["output"]["out"] = dir.string();
    const double f = noise(rng) * (i >= n * 7 / 10 ? 1.2 : 1.0);
    auto& s = run["summary"];
    for (const char* d : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"})
      for (const char* k : {"mean", "p50", "p90", "p95", "p99", "p99_9"})
        if (s[d][k].is_number()) s[d][k] = s[d][k].get<double>() * f;
    for (const char* k : {"request_throughput_rps", "output_token_throughput_tps"})
      if (s[k].is_number()) s[k] = s[k].get<double>() / f;
    fs::create_directories(dir);
    const fs::path file = dir / "run.json";
    std::ofstream(file) << run.dump(2) << "\n";
    const auto finished = start + std::chrono::seconds(600 * i);
    fs::last_write_time(file, std::chrono::file_clock::from_sys(finished));
    const auto r0 = std::chrono::steady_clock::now();
    history.register_run(dir);
    register_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
  }
  const double all_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << fmt::format("{} runs in {:.2f} s ({:.2f} s registering: {:.0f} registrations/s)\n", n, all_s,
                           register_s, static_cast<double>(n) / register_s);
  return 0;
}
