// Time in tokenscope: monotonic nanoseconds (int64) everywhere. The clock is
// injected so that tests advance a ManualClock instead of sleeping, and the
// simulator runs on virtual time.
#pragma once

#include <atomic>
#include <cstdint>

namespace tokenscope {

using Nanos = std::int64_t;

inline constexpr Nanos kNanosPerMicro = 1'000;
inline constexpr Nanos kNanosPerMilli = 1'000'000;
inline constexpr Nanos kNanosPerSecond = 1'000'000'000;

inline double nanos_to_ms(Nanos ns) {
  return static_cast<double>(ns) / 1e6;
}
inline double nanos_to_s(Nanos ns) {
  return static_cast<double>(ns) / 1e9;
}
// Rounds to the nearest nanosecond.
Nanos seconds_to_nanos(double seconds);

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic, never decreasing. Thread-safe.
  virtual Nanos now_ns() const = 0;
};

// CLOCK_MONOTONIC through std::chrono::steady_clock.
class SteadyClock final : public Clock {
 public:
  Nanos now_ns() const override;
};

// A clock that moves only when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Nanos start_ns = 0) : now_(start_ns) {}
  Nanos now_ns() const override { return now_.load(std::memory_order_acquire); }
  // Moves forward by delta_ns (>= 0).
  void advance(Nanos delta_ns);
  // Sets the time; never moves backwards (a smaller value is ignored).
  void set(Nanos t_ns);

 private:
  std::atomic<Nanos> now_;
};

}  // namespace tokenscope
