#include "observe/observer.h"

#include "core/stats.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/run_dir.h"

namespace tokenscope::observe {
namespace {

Nanos thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<Nanos>(ts.tv_sec) * kNanosPerSecond + ts.tv_nsec;
}

double quantile_of(std::vector<double> v, double q) {
  return nearest_rank_select(v, q);
}

constexpr std::size_t kMaxReasons = 20;
constexpr std::size_t kMaxKeptRtts = 100000;

}  // namespace

nlohmann::json clock_offset_json(const std::vector<double>& offsets_ns) {
  if (offsets_ns.empty()) return nullptr;
  const double p25 = quantile_of(offsets_ns, 0.25), p75 = quantile_of(offsets_ns, 0.75);
  return {{"offset_ns", quantile_of(offsets_ns, 0.5)},
          {"iqr_ns", p75 - p25},
          {"min_ns", quantile_of(offsets_ns, 0.0)},
          {"max_ns", quantile_of(offsets_ns, 1.0)},
          {"observations", offsets_ns.size()},
          {"definition",
           "server epoch time + offset = client monotonic time (median of t_recv - rtt/2 - t_server)"}};
}

struct Observer::Impl {
  std::function<void(const Observation&)> listener;
  struct Source {
    std::unique_ptr<Collector> collector;
    CollectorOptions options;
    std::string name;
    std::thread thread;
    bool dead = false;           // unavailable, or an optional source that never answered
    bool baseline_done = false;  // its first read has ended
    // Everything below is guarded by Impl::mutex.
    SeriesTracker tracker;
    std::uint64_t reads = 0, errors = 0, overruns = 0;
    std::map<std::string, std::uint64_t> reasons;
    std::uint64_t reasons_other = 0;
    std::string unavailable;
    std::vector<double> rtts_ms;
    std::vector<double> offsets_ns;
    Nanos cpu_ns = 0;
    Nanos first_t = 0, last_t = 0;
    bool logged_error = false, logged_slow = false;
    nlohmann::json facts;
  };

  Impl(std::filesystem::path p, const Clock& c, std::ostream& l) : path(std::move(p)), clock(c), log(l) {}

  std::filesystem::path path;
  const Clock& clock;
  std::ostream& log;
  std::unique_ptr<JsonlWriter> writer;
  std::string write_error;
  std::vector<std::unique_ptr<Source>> sources;
  std::mutex mutex;  // the writer, the log and every Source's stats
  std::condition_variable wake;
  bool stopping = false;
  bool final_read = true;
  bool started = false, stopped = false;
  // The bound on samples.jsonl's growth (set_samples_bytes_per_hour; 0: none)
  // and what it left out.
  std::uint64_t bytes_per_hour = 0;
  Nanos budget_start = -1;
  std::uint64_t bytes_written = 0;
  std::uint64_t lines_without_raw = 0, lines_not_written = 0;

  // Whether `bytes` more fit the budget at time t: a minute's worth from the
  // start, then bytes_per_hour spread over the hour.
  bool within_budget(Nanos t, std::size_t bytes) const {
    if (bytes_per_hour == 0) return true;
    const double elapsed_s = std::max(60.0, nanos_to_s(t - budget_start));
    return static_cast<double>(bytes_written + bytes + 1) <=  // + its newline
           static_cast<double>(bytes_per_hour) * elapsed_s / 3600.0;
  }

  // One read of s: collect, derive, write, count. Returns false when the
  // source should not be read again.
  bool read_once(Source& s, bool first) {
    const Nanos cpu0 = thread_cpu_ns();
    const Nanos wall0 = clock.now_ns();
    Observation o = s.collector->collect(clock);
    const Nanos before_lock = clock.now_ns();
    std::lock_guard lock(mutex);
    // Waiting for another source's write is not this read's work.
    const Nanos lock_wait = clock.now_ns() - before_lock;
    ++s.reads;
    if (s.first_t == 0) s.first_t = o.t_ns;
    s.last_t = o.t_ns;
    bool keep = true;
    if (!o.unavailable.empty()) {
      s.unavailable = o.unavailable;
      if (!s.options.quiet_unavailable)
        log << fmt::format("tokenscope bench: {}: {}", s.name, o.unavailable) << std::endl;
      keep = false;
    } else if (!o.error.empty()) {
      ++s.errors;
      const std::string reason = o.error.substr(0, 300);
      if (s.reasons.count(reason) || s.reasons.size() < kMaxReasons)
        ++s.reasons[reason];
      else
        ++s.reasons_other;
      if (first && s.options.optional) {
        log << fmt::format("tokenscope bench: {} not collected: {}{}", s.name, reason,
                           s.options.description.empty() ? "" : " (" + s.options.description + ")")
            << std::endl;
        keep = false;
      } else if (!s.logged_error) {
        s.logged_error = true;
        log << fmt::format("tokenscope bench: {}: {} (later failures are counted in run.json)", s.name,
                           reason)
            << std::endl;
      }
    } else {
      if (s.rtts_ms.size() < kMaxKeptRtts) s.rtts_ms.push_back(nanos_to_ms(o.rtt_ns));
      if (o.server_t_ns)
        s.offsets_ns.push_back(static_cast<double>(o.t_ns) - static_cast<double>(o.rtt_ns) / 2 -
                               static_cast<double>(*o.server_t_ns));
      s.tracker.feed(o);
    }
    if (writer && write_error.empty()) {
      try {
        if (budget_start < 0) budget_start = o.t_ns;
        std::string& line = writer->begin_line();
        const std::size_t before = line.size();
        append_observation_json(line, o);
        bool written = true;
        if (!within_budget(o.t_ns, line.size() - before) && !o.raw.empty()) {
          // Over the bound: the line without its raw series (the canonical
          // and derived ones are what the report draws), else none.
          line.resize(before);
          std::vector<Sample> raw = std::move(o.raw);
          o.raw.clear();
          append_observation_json(line, o);
          o.raw = std::move(raw);
          ++lines_without_raw;
        }
        if (!within_budget(o.t_ns, line.size() - before)) {
          line.resize(before);
          ++lines_not_written;
          written = false;
        } else {
          bytes_written += line.size() - before + 1;
          writer->end_line();
        }
        if (listener && written) listener(o);
      } catch (const std::exception& e) {
        write_error = e.what();
        log << fmt::format("tokenscope bench: samples are no longer written: {}", write_error) << std::endl;
      }
    }
    s.cpu_ns += thread_cpu_ns() - cpu0;
    // An overrun is a read (fetch, parse, mapping, writing) that took longer
    // than the interval: the next one starts late. The fetch alone would
    // hide a parse that takes seconds.
    const Nanos took = clock.now_ns() - wall0 - lock_wait;
    if (took > s.options.interval_ns && keep) {
      ++s.overruns;
      if (!s.logged_slow) {
        s.logged_slow = true;
        log << fmt::format(
                   "tokenscope bench: {}: a read took {:.2f} s (its fetch {:.2f} s), longer than the "
                   "interval {:g} s (later ones are counted in run.json; the next read starts when one ends)",
                   s.name, nanos_to_s(took), nanos_to_s(o.rtt_ns), nanos_to_s(s.options.interval_ns))
            << std::endl;
      }
    }
    return keep;
  }

  // A source's thread: the baseline read at once, then one read per
  // interval, and when stopping the final read (unless told to skip it).
  void loop(Source& s) {
    pthread_setname_np(pthread_self(), "ts-observe");
    setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 5);
    const bool keep = read_once(s, true);
    {
      std::lock_guard lock(mutex);
      s.baseline_done = true;
      if (!keep) s.dead = true;
    }
    wake.notify_all();
    if (!keep) return;
    Nanos next = clock.now_ns();
    for (;;) {
      next += s.options.interval_ns;
      {
        std::unique_lock lock(mutex);
        for (;;) {
          if (stopping) {
            lock.unlock();
            if (final_read) read_once(s, false);
            return;
          }
          const Nanos now = clock.now_ns();
          if (now >= next) break;
          wake.wait_for(lock, std::chrono::nanoseconds(next - now));
        }
      }
      if (!read_once(s, false)) {
        std::lock_guard lock(mutex);
        s.dead = true;
        return;
      }
      // A read longer than the interval: the next starts now, not in a burst.
      next = std::max(next, clock.now_ns() - s.options.interval_ns);
    }
  }
};

Observer::Observer(std::filesystem::path samples_path, const Clock& clock, std::ostream& log)
    : impl_(std::make_unique<Impl>(std::move(samples_path), clock, log)) {}

void Observer::set_samples_bytes_per_hour(std::uint64_t bytes) {
  impl_->bytes_per_hour = bytes;
}

void Observer::set_listener(std::function<void(const Observation&)> listener) {
  impl_->listener = std::move(listener);
}

Observer::~Observer() {
  try {
    stop();
  } catch (...) {
  }
}

void Observer::add(std::unique_ptr<Collector> collector, CollectorOptions options) {
  auto s = std::make_unique<Impl::Source>();
  s->name = collector->source();
  s->collector = std::move(collector);
  s->options = std::move(options);
  if (s->options.interval_ns <= 0) s->options.interval_ns = kNanosPerSecond;
  impl_->sources.push_back(std::move(s));
}

void Observer::start(Nanos baseline_wait_ns) {
  if (impl_->started) return;
  impl_->started = true;
  try {
    impl_->writer = std::make_unique<JsonlWriter>(impl_->path, /*line_durable=*/true);
  } catch (const std::exception& e) {
    impl_->write_error = e.what();
    impl_->log << fmt::format("tokenscope bench: samples are not written: {}", e.what()) << std::endl;
  }
  // Every source reads its baseline on its own thread, all at once; the
  // caller waits for them a bounded time (a source that hangs does not hold
  // the run back: its baseline comes when its read ends).
  for (auto& s : impl_->sources) s->thread = std::thread([this, src = s.get()] { impl_->loop(*src); });
  std::unique_lock lock(impl_->mutex);
  impl_->wake.wait_for(lock, std::chrono::nanoseconds(baseline_wait_ns), [&] {
    for (const auto& s : impl_->sources)
      if (!s->baseline_done) return false;
    return true;
  });
}

void Observer::stop(bool final_read) {
  if (!impl_->started || impl_->stopped) return;
  impl_->stopped = true;
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
    impl_->final_read = final_read;
  }
  impl_->wake.notify_all();
  // Each source reads its final counters on its own thread, all at once.
  for (auto& s : impl_->sources)
    if (s->thread.joinable()) s->thread.join();
  if (impl_->writer) {
    try {
      impl_->writer->close();
    } catch (const std::exception& e) {
      if (impl_->write_error.empty()) impl_->write_error = e.what();
    }
  }
}

std::vector<std::string> Observer::sources() const {
  std::vector<std::string> v;
  for (const auto& s : impl_->sources) v.push_back(s->name);
  return v;
}

const SeriesTracker* Observer::tracker(std::string_view source) const {
  for (const auto& s : impl_->sources)
    if (s->name == source) return &s->tracker;
  return nullptr;
}

void Observer::annotate(std::string_view source, const nlohmann::json& facts) {
  std::lock_guard lock(impl_->mutex);
  for (auto& s : impl_->sources)
    if (s->name == source) s->facts.update(facts);
}

nlohmann::json Observer::report() const {
  std::lock_guard lock(impl_->mutex);
  nlohmann::json sources = nlohmann::json::array();
  for (const auto& s : impl_->sources) {
    nlohmann::json e = {{"source", s->name}, {"interval_s", nanos_to_s(s->options.interval_ns)}};
    if (!s->options.description.empty()) e["description"] = s->options.description;
    e["reads"] = s->reads;
    e["errors"] = s->errors;
    nlohmann::json reasons = nlohmann::json::object();
    for (const auto& [r, n] : s->reasons) reasons[r] = n;
    if (s->reasons_other) reasons["(other reasons)"] = s->reasons_other;
    e["errors_by_reason"] = reasons;
    e["unavailable"] = s->unavailable.empty() ? nlohmann::json(nullptr) : nlohmann::json(s->unavailable);
    e["collected"] = s->reads > s->errors && s->unavailable.empty();
    e["overruns"] = s->overruns;
    e["rtt_ms"] = s->rtts_ms.empty() ? nlohmann::json(nullptr)
                                     : nlohmann::json{{"p50", quantile_of(s->rtts_ms, 0.5)},
                                                      {"p99", quantile_of(s->rtts_ms, 0.99)},
                                                      {"max", quantile_of(s->rtts_ms, 1.0)}};
    e["cpu_ms_per_read"] = s->reads ? nanos_to_ms(s->cpu_ns) / static_cast<double>(s->reads) : 0.0;
    const double span_s = nanos_to_s(s->last_t - s->first_t);
    e["cpu_share_of_core"] =
        span_s > 0 ? nlohmann::json(nanos_to_s(s->cpu_ns) / span_s) : nlohmann::json(nullptr);
    e["clock_offset"] = clock_offset_json(s->offsets_ns);
    if (!s->facts.is_null()) e.update(s->facts);
    sources.push_back(std::move(e));
  }
  return {{"samples_file", impl_->path.filename().string()},
          {"sources", sources},
          {"samples_bound",
           {{"bytes_per_hour", impl_->bytes_per_hour},
            {"bytes_written", impl_->bytes_written},
            {"lines_without_raw", impl_->lines_without_raw},
            {"lines_not_written", impl_->lines_not_written}}},
          {"write_error",
           impl_->write_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(impl_->write_error)}};
}

}  // namespace tokenscope::observe
