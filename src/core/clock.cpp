#include "core/clock.h"

#include <chrono>
#include <cmath>

namespace tokenscope {

Nanos seconds_to_nanos(double seconds) {
  return static_cast<Nanos>(std::llround(seconds * 1e9));
}

Nanos SteadyClock::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void ManualClock::advance(Nanos delta_ns) {
  if (delta_ns > 0) now_.fetch_add(delta_ns, std::memory_order_acq_rel);
}

void ManualClock::set(Nanos t_ns) {
  Nanos cur = now_.load(std::memory_order_acquire);
  while (t_ns > cur && !now_.compare_exchange_weak(cur, t_ns, std::memory_order_acq_rel)) {
  }
}

}  // namespace tokenscope
