#include "observe/measured_collector.h"

#include <time.h>

#include <algorithm>
#include <exception>

namespace tokenscope::observe {

std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

Observation MeasuredCollector::collect(const Clock& clock) {
  const std::int64_t cpu0 = thread_cpu_ns();
  Observation o;
  try {
    o = read(clock);
  } catch (const std::exception& e) {
    // read() reports failures as data; this is the net under it.
    o = Observation{};
    o.t_ns = clock.now_ns();
    o.error = e.what();
  }
  if (o.source.empty()) o.source = source();
  cpu_ns_total_.fetch_add(thread_cpu_ns() - cpu0, std::memory_order_relaxed);
  reads_.fetch_add(1, std::memory_order_relaxed);
  return o;
}

std::vector<std::string> MeasuredCollector::notes() const {
  std::lock_guard<std::mutex> lock(notes_mutex_);
  return notes_;
}

void MeasuredCollector::note_once(const std::string& text) {
  std::lock_guard<std::mutex> lock(notes_mutex_);
  if (std::find(notes_.begin(), notes_.end(), text) == notes_.end()) notes_.push_back(text);
}

}  // namespace tokenscope::observe
