// A Collector that counts its own cost and keeps notes. The cost is the CPU
// time of the calling thread spent in collect() (CLOCK_THREAD_CPUTIME_ID read
// before and after each read), so a run can state what its samplers took
// from the machine they measure (run.json). Notes are things worth saying
// once per run, not per read: "memory.pressure is missing (the memory
// controller is not enabled for this cgroup): left out".
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "observe/observation.h"

namespace tokenscope::observe {

class MeasuredCollector : public Collector {
 public:
  // Times read() and counts it; never throws (an exception that escapes
  // read() becomes Observation::error).
  Observation collect(const Clock& clock) final;

  // CPU nanoseconds spent in collect() over all reads, and the number of
  // reads. Thread-safe (read while another thread collects).
  std::int64_t cpu_ns_total() const { return cpu_ns_total_.load(std::memory_order_relaxed); }
  std::int64_t reads() const { return reads_.load(std::memory_order_relaxed); }

  // Every note so far, each once, in the order first made. Thread-safe.
  std::vector<std::string> notes() const;

 protected:
  // One read: fills the series, or error / unavailable; sets t_ns and rtt_ns.
  virtual Observation read(const Clock& clock) = 0;
  // Adds a note unless the same text was noted before.
  void note_once(const std::string& text);

 private:
  std::atomic<std::int64_t> cpu_ns_total_{0};
  std::atomic<std::int64_t> reads_{0};
  mutable std::mutex notes_mutex_;
  std::vector<std::string> notes_;
};

// CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID), nanoseconds.
std::int64_t thread_cpu_ns();

}  // namespace tokenscope::observe
