// REFERENCE PEER, not part of tokenscope: the least an open-loop HTTP client
// can do per request on this machine, to set tokenscope's held rate beside
// (benchmarks/client_bench.py, section rate). One thread, one epoll set, one
// timerfd re-armed once per wake-up, keep-alive connections registered once
// (level-triggered, read only when readable: no read that finds nothing), a
// request that is one send of prepared bytes, a response that is found by its
// Content-Length and otherwise not looked at; no records, no JSON, no
// allocation per request. Poisson arrivals at --rate (exponential gaps), as
// tokenscope's default schedule; the send lag is the send's time minus the
// schedule's.
//
// usage: open_loop_floor --port P --rate R --num-requests N [--path /v1/json]
//        [--body JSON] [--connections C (kept open, default 64)] [--seed S]
//        [--max-connections M (default 10,000; past it a request waits for
//        a free connection, its lag growing)] [--spin]
// --spin: the thread never sleeps (epoll_wait with no wait, the clock read
// for due sends on every turn, no timer): no wake-ups and no timer to pay.
// It fills the core by design, so its CPU is the run's length; its system
// time per request includes the polls that found nothing (counted in
// "empty_polls"), an upper bound on the kernel's work per request.
// Prints one JSON line: planned, completed, errors, not_sent, achieved rate,
// send lag p50/p99 (ms), CPU seconds (user + system), wake-ups.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "open_loop_floor: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

struct Conn {
  int fd = -1;
  bool busy = false;
  std::string in;  // the response read so far
};

int open_conn(int port, int ep, std::uint32_t index) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);  // blocking connect: loopback, done before the schedule
  if (fd < 0) die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = index;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl");
  return fd;
}

// The response's length when it is complete in `in`, 0 while it is not; -1 when it is not 200.
long complete(const std::string& in, bool& ok) {
  const auto end = in.find("\r\n\r\n");
  if (end == std::string::npos) return 0;
  ok = in.compare(0, 12, "HTTP/1.1 200") == 0;
  std::size_t length = 0;
  for (std::size_t p = in.find('\n'); p < end; p = in.find('\n', p + 1)) {
    if (strncasecmp(in.data() + p + 1, "content-length:", 15) == 0) {
      length = std::strtoul(in.data() + p + 16, nullptr, 10);
      break;
    }
  }
  const std::size_t total = end + 4 + length;
  return in.size() >= total ? static_cast<long>(total) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0;
  double rate = 1000;
  std::uint64_t planned = 1000, seed = 0;
  std::string path = "/v1/json";
  // The bytes tokenscope sends for --api chat --no-stream --input-len fixed:8 --output-len fixed:1.
  std::string body =
      R"({"model":"m","messages":[{"role":"user","content":"av spir jun wid lan por fin void"}],)"
      R"("max_tokens":1,"ignore_eos":true,"stream":false})";
  std::uint32_t keep = 64;
  std::size_t max_connections = 10'000;
  bool spin = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string_view k = argv[i];
    if (k == "--spin") {
      spin = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "open_loop_floor: %s needs a value\n", argv[i]);
      return 2;
    }
    const char* v = argv[i + 1];
    if (k == "--port")
      port = std::atoi(v);
    else if (k == "--rate")
      rate = std::atof(v);
    else if (k == "--num-requests")
      planned = std::strtoull(v, nullptr, 10);
    else if (k == "--path")
      path = v;
    else if (k == "--body")
      body = v;
    else if (k == "--connections")
      keep = static_cast<std::uint32_t>(std::atoi(v));
    else if (k == "--seed")
      seed = std::strtoull(v, nullptr, 10);
    else if (k == "--max-connections")
      max_connections = std::strtoull(v, nullptr, 10);
    else {
      std::fprintf(stderr, "open_loop_floor: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (port <= 0 || rate <= 0 || planned == 0) {
    std::fprintf(
        stderr,
        "usage: open_loop_floor --port P --rate R --num-requests N [--path P] [--body JSON] [--spin]\n");
    return 2;
  }
  const std::string request = "POST " + path +
                              " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                              "Accept: application/json\r\nX-Request-Id: 0\r\n" +
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;

  // The schedule, drawn before the start.
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<std::int64_t> due(planned);
  double t = 0;
  for (auto& d : due) {
    t += gap(rng);
    d = static_cast<std::int64_t>(t * 1e9);
  }

  rlimit nofile{};  // one descriptor per request in flight
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  const int ep = epoll_create1(0);
  const int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
  if (ep < 0 || tfd < 0) die("epoll/timerfd");
  epoll_event tev{};
  tev.events = EPOLLIN;
  tev.data.u64 = ~std::uint64_t{0};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev) != 0) die("epoll_ctl timerfd");
  std::vector<Conn> conns;
  conns.reserve(4096);
  std::vector<std::uint32_t> idle;
  for (std::uint32_t i = 0; i < keep; ++i) {
    conns.push_back({open_conn(port, ep, i), false, {}});
    conns.back().in.reserve(4096);
    idle.push_back(i);
  }

  std::vector<std::int64_t> lag;
  lag.reserve(planned);
  std::uint64_t next = 0, done = 0, errors = 0, wakeups = 0, empty_polls = 0;
  const double cpu0 = cpu_seconds();
  const std::int64_t epoch = now_ns() + 10'000'000;
  auto arm = [&] {
    if (spin || next >= planned) return;
    itimerspec its{};
    const std::int64_t at = epoch + due[next];
    its.it_value.tv_sec = at / 1'000'000'000;
    its.it_value.tv_nsec = at % 1'000'000'000;
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr);
  };
  std::deque<std::uint64_t> waiting;  // due, with no connection free (max_connections open)
  std::uint64_t sent = 0;
  auto send_due = [&](std::int64_t t_now) {
    while (next < planned && epoch + due[next] <= t_now) waiting.push_back(next++);
    while (!waiting.empty() && (!idle.empty() || conns.size() < max_connections)) {
      std::uint32_t c;
      if (idle.empty()) {  // more in flight than kept: one more connection
        c = static_cast<std::uint32_t>(conns.size());
        conns.push_back({open_conn(port, ep, c), false, {}});
        conns.back().in.reserve(4096);
      } else {
        c = idle.back();
        idle.pop_back();
      }
      const std::int64_t t_send = now_ns();
      if (send(conns[c].fd, request.data(), request.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(request.size()))
        die("send");
      conns[c].busy = true;
      lag.push_back(t_send - (epoch + due[waiting.front()]));
      waiting.pop_front();
      ++sent;
    }
  };
  arm();
  epoll_event evs[128];
  char buf[65536];
  std::int64_t last_event = now_ns();
  while (done + errors < planned) {
    const int n = epoll_wait(ep, evs, 128, spin ? 0 : 10'000);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (n == 0 && !spin)) break;  // nothing for 10 s: the server stopped answering
    if (n > 0) {
      ++wakeups;
      last_event = now_ns();
    } else {
      ++empty_polls;
      if (next >= planned && now_ns() - last_event > 10'000'000'000)
        break;  // spinning, all sent, nothing for 10 s
    }
    bool timer = false;
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u64 == ~std::uint64_t{0}) {
        std::uint64_t expirations;
        if (read(tfd, &expirations, sizeof expirations) < 0 && errno != EAGAIN) die("read timerfd");
        timer = true;
        continue;
      }
      Conn& c = conns[evs[i].data.u64];
      const ssize_t r = recv(c.fd, buf, sizeof buf, 0);
      if (r <= 0) {
        if (c.busy) ++errors;  // closed with a request on it: that request failed (an idle one is reopened)
        epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
        close(c.fd);
        const bool was_idle = !c.busy;
        c = Conn{open_conn(port, ep, static_cast<std::uint32_t>(&c - conns.data())), false, {}};
        if (!was_idle) idle.push_back(static_cast<std::uint32_t>(&c - conns.data()));
        continue;
      }
      c.in.append(buf, static_cast<std::size_t>(r));
      bool ok = false;
      const long total = complete(c.in, ok);
      if (total == 0) continue;
      ok ? ++done : ++errors;
      c.in.erase(0, static_cast<std::size_t>(total));
      c.busy = false;
      idle.push_back(static_cast<std::uint32_t>(&c - conns.data()));
    }
    // Sends fall due while responses are read, too: check after every wake-up.
    const std::uint64_t before = next;
    send_due(now_ns());
    if (timer || next != before) arm();
  }
  const double wall = static_cast<double>(now_ns() - epoch) / 1e9;
  const double cpu = cpu_seconds() - cpu0;
  std::sort(lag.begin(), lag.end());
  auto pct = [&](double p) {
    if (lag.empty()) return -1.0;
    const auto k = static_cast<std::size_t>(std::ceil(p * static_cast<double>(lag.size()))) - 1;
    return static_cast<double>(lag[std::min(k, lag.size() - 1)]) / 1e6;
  };
  std::printf(
      "{\"planned\": %llu, \"completed\": %llu, \"errors\": %llu, \"not_sent\": %llu, \"achieved_rps\": "
      "%.1f, "
      "\"send_lag_p50_ms\": %.4f, \"send_lag_p99_ms\": %.4f, \"cpu_s\": %.4f, \"wakeups\": %llu, "
      "\"empty_polls\": %llu, \"connections\": %zu}\n",
      static_cast<unsigned long long>(planned), static_cast<unsigned long long>(done),
      static_cast<unsigned long long>(errors), static_cast<unsigned long long>(planned - sent),
      static_cast<double>(done) / wall, pct(0.5), pct(0.99), cpu, static_cast<unsigned long long>(wakeups),
      static_cast<unsigned long long>(empty_polls), conns.size());
  return done == planned ? 0 : 1;
}
