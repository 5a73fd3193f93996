// Scrapes one /metrics URL COUNT times, one scrape every INTERVAL_MS, as
// tokenscope's server collector does: net::fetch (a new connection each
// time), parse_exposition, flatten (moving the samples out). Prints one JSON line with the CPU time
// this process spent (getrusage: user + system, all threads) per scrape, for
// benchmarks/exposition_bench.py to set beside Prometheus scraping the same
// URL. WARMUP scrapes (default 0) go first and are not measured, as the
// script leaves Prometheus's first seconds out.
//   exposition_scrape URL COUNT INTERVAL_MS [WARMUP]
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "core/error.h"
#include "net/http_fetch.h"
#include "observe/exposition.h"

namespace {
// utime + stime of /proc/self/stat, in clock ticks: how benchmarks/exposition_bench.py
// measures Prometheus from outside, kept beside getrusage's finer figure.
long proc_stat_ticks() {
  FILE* f = std::fopen("/proc/self/stat", "r");
  if (!f) return -1;
  char buf[4096];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // Fields 14 and 15, counted after the ')' that closes the command name (field 2).
  const char* p = std::strrchr(buf, ')');
  if (!p) return -1;
  long utime = 0, stime = 0;
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime) != 2)
    return -1;
  return utime + stime;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace tokenscope;
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: %s URL COUNT INTERVAL_MS [WARMUP]\n", argv[0]);
    return kExitUsage;
  }
  try {
    const auto endpoint = net::Endpoint::parse_url(argv[1]);
    const int count = std::atoi(argv[2]);
    const int warmup = argc == 5 ? std::atoi(argv[4]) : 0;
    const auto interval = std::chrono::milliseconds(std::atoi(argv[3]));
    net::FetchRequest request;
    request.path = "";
    std::size_t samples = 0, rejected = 0, bytes = 0;
    int failed = 0;
    double fetch_cpu = 0.0, parse_cpu = 0.0;  // of which: net::fetch, and parse_exposition + flatten
    long ticks_start = proc_stat_ticks();
    double cpu_start = cpu_seconds();
    auto wall_start = std::chrono::steady_clock::now();
    auto next = wall_start;
    for (int i = -warmup; i < count; ++i) {
      if (i == 0) {  // the measured scrapes start here
        fetch_cpu = parse_cpu = 0.0;
        failed = 0;
        ticks_start = proc_stat_ticks();
        cpu_start = cpu_seconds();
        wall_start = std::chrono::steady_clock::now();
      }
      const double before_fetch = cpu_seconds();
      const auto r = net::fetch(endpoint, {}, request);
      const double after_fetch = cpu_seconds();
      fetch_cpu += after_fetch - before_fetch;
      if (!r.ok()) {
        if (failed++ == 0)
          std::fprintf(
              stderr, "exposition_scrape: %s: %s\n", argv[1],
              r.error.empty() ? ("HTTP status " + std::to_string(r.status)).c_str() : r.error.c_str());
      } else {
        auto e = observe::parse_exposition(r.body);
        rejected = e.rejected_lines;
        const auto raw = observe::flatten(std::move(e));
        parse_cpu += cpu_seconds() - after_fetch;
        samples = raw.size();
        bytes = r.body.size();
      }
      next += interval;
      std::this_thread::sleep_until(next);
    }
    const double cpu = cpu_seconds() - cpu_start;
    const long ticks = proc_stat_ticks() - ticks_start;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    std::printf(
        "{\"scrapes\":%d,\"failed\":%d,\"series\":%zu,\"rejected\":%zu,\"bytes\":%zu,\"cpu_s\":%.6f,"
        "\"wall_s\":%.3f,\"cpu_ms_per_scrape\":%.4f,\"fetch_ms_per_scrape\":%.4f,\"parse_ms_per_scrape\":%."
        "4f,"
        "\"stat_ticks\":%ld,\"ticks_per_s\":%ld}\n",
        count, failed, samples, rejected, bytes, cpu, wall, count > 0 ? cpu * 1e3 / count : 0.0,
        count > 0 ? fetch_cpu * 1e3 / count : 0.0, count > 0 ? parse_cpu * 1e3 / count : 0.0, ticks,
        sysconf(_SC_CLK_TCK));
    return failed == 0 ? kExitOk : kExitFailure;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exposition_scrape: %s\n", e.what());
    return kExitUsage;
  }
}
