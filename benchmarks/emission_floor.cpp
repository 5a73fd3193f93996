// REFERENCE PEER, not part of tokenscope: the least a streaming server can
// take to hand one token to each of N streams over loopback TCP, to set
// `tokenscope serve`'s emission lag beside (benchmarks/serve_bench.sh). Each
// step, W writer threads write one SSE chunk of B bytes to each of their
// N/W sockets (TCP_NODELAY, as serve's), one write per stream, as a
// continuous-batching server does when a decode step ends; a reader thread
// drains every stream's client side with epoll, as wrk does. A stream's lag
// is the time from the step's start to the end of its write: the i-th
// write of a step waits for the i-1 before it (and for the writer's own
// wake-up, and for the other writers on its core), so the lag's p99 is what
// the writes themselves cost, with nothing else done (no engine, no JSON,
// no HTTP).
//
// usage: emission_floor [--streams N] [--steps K] [--chunk-bytes B]
//        [--step-ms MS] [--writers W] [--writer-cpu C] [--reader-cpu C]
// (the writers and the reader pinned to those CPUs, as serve_bench.sh pins
// the server and wrk; unpinned when not given)
// Prints one JSON line: streams, writers, steps, lag p50/p90/p99/max (ms),
// mean write cost (us), writer CPU seconds per write (us).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "emission_floor: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t streams = 1000, steps = 200, chunk = 160, writers = 1;
  double step_ms = 20;
  int writer_cpu = -1, reader_cpu = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--streams")
      streams = std::strtoul(v, nullptr, 10);
    else if (k == "--steps")
      steps = std::strtoul(v, nullptr, 10);
    else if (k == "--chunk-bytes")
      chunk = std::strtoul(v, nullptr, 10);
    else if (k == "--step-ms")
      step_ms = std::atof(v);
    else if (k == "--writers")
      writers = std::strtoul(v, nullptr, 10);
    else if (k == "--writer-cpu")
      writer_cpu = std::atoi(v);
    else if (k == "--reader-cpu")
      reader_cpu = std::atoi(v);
    else {
      std::fprintf(stderr, "emission_floor: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (streams == 0 || steps == 0 || chunk < 8 || writers == 0 || writers > streams || step_ms <= 0) {
    std::fprintf(stderr,
                 "usage: emission_floor [--streams N] [--steps K] [--chunk-bytes B>=8] [--step-ms MS] "
                 "[--writers W<=N]\n");
    return 2;
  }
  rlimit nofile{};  // two descriptors per stream
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }

  // N loopback connections: the server's sides are written, the clients' read.
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(listener, 128) != 0 || getsockname(listener, reinterpret_cast<sockaddr*>(&a), &alen) != 0)
    die("listen");
  std::vector<int> server(streams), client(streams);
  const int one = 1;
  for (std::size_t i = 0; i < streams; ++i) {
    client[i] = socket(AF_INET, SOCK_STREAM, 0);
    if (client[i] < 0 || connect(client[i], reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
    server[i] = accept(listener, nullptr, nullptr);
    if (server[i] < 0) die("accept");
    setsockopt(server[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }

  // The reader: drains every client side until all bytes have come.
  const std::uint64_t total = static_cast<std::uint64_t>(streams) * steps * chunk;
  std::atomic<std::uint64_t> received{0};
  std::thread reader([&] {
    pin(reader_cpu);
    const int ep = epoll_create1(0);
    for (std::size_t i = 0; i < streams; ++i) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = i;
      if (epoll_ctl(ep, EPOLL_CTL_ADD, client[i], &ev) != 0) die("epoll_ctl");
    }
    std::vector<epoll_event> evs(256);
    std::vector<char> buf(65536);
    while (received.load() < total) {
      const int n = epoll_wait(ep, evs.data(), static_cast<int>(evs.size()), 10'000);
      if (n <= 0) die("epoll_wait (the writers stopped)");
      for (int e = 0; e < n; ++e) {
        const ssize_t r = read(client[evs[static_cast<std::size_t>(e)].data.u64], buf.data(), buf.size());
        if (r <= 0) die("read");
        received += static_cast<std::uint64_t>(r);
      }
    }
    close(ep);
  });

  // The writers: at each step, one chunk to each of their streams in turn.
  std::string data = "data: ";
  data.resize(chunk - 2, 'x');
  data += "\n\n";
  std::vector<std::vector<std::int64_t>> lags(writers);
  std::vector<double> cpu(writers);
  const std::int64_t start = now_ns() + 50'000'000;
  const auto step_ns = static_cast<std::int64_t>(step_ms * 1e6);
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < writers; ++w)
    threads.emplace_back([&, w] {
      pin(writer_cpu);
      auto& lag = lags[w];
      lag.reserve(steps * (streams / writers + 1));
      const double cpu0 = thread_cpu_s();
      for (std::size_t k = 0; k < steps; ++k) {
        const std::int64_t t0 = start + static_cast<std::int64_t>(k) * step_ns;
        timespec ts{};
        ts.tv_sec = t0 / 1'000'000'000;
        ts.tv_nsec = t0 % 1'000'000'000;
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
        }
        // From the step's instant, as a server's lag counts from its engine's:
        // a late wake-up, and a writer waiting for another on the same core,
        // are part of it.
        for (std::size_t i = w; i < streams; i += writers) {
          if (write(server[i], data.data(), data.size()) != static_cast<ssize_t>(data.size())) die("write");
          lag.push_back(now_ns() - t0);
        }
      }
      cpu[w] = thread_cpu_s() - cpu0;
    });
  for (auto& t : threads) t.join();
  reader.join();

  std::vector<std::int64_t> all;
  for (const auto& l : lags) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  const auto pct = [&](double p) {
    const auto k = static_cast<std::size_t>(std::ceil(p * static_cast<double>(all.size()))) - 1;
    return static_cast<double>(all[std::min(k, all.size() - 1)]) / 1e6;
  };
  double cpu_total = 0;
  for (const double c : cpu) cpu_total += c;
  const double writes = static_cast<double>(all.size());
  std::printf(
      "{\"streams\": %zu, \"writers\": %zu, \"steps\": %zu, \"chunk_bytes\": %zu, \"lag_p50_ms\": %.4f, "
      "\"lag_p90_ms\": %.4f, \"lag_p99_ms\": %.4f, \"lag_max_ms\": %.4f, \"writer_cpu_us_per_write\": "
      "%.3f}\n",
      streams, writers, steps, chunk, pct(0.5), pct(0.9), pct(0.99), pct(1.0), 1e6 * cpu_total / writes);
  return 0;
}
