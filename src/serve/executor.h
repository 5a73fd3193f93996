// The serial context the engine runs in: tasks run one at a time, in order,
// and timers fire at clock times. AsioExecutor (production) is a strand with
// high-resolution timers on the steady clock; ManualExecutor (tests) runs
// on a ManualClock that jumps to each timer, so tests never sleep.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "core/clock.h"

namespace tokenscope::serve {

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs f soon, after everything posted before it. Thread-safe.
  virtual void post(std::function<void()> f) = 0;
  // Runs f once clock().now_ns() >= t (in order of t, then of posting).
  virtual void post_at(Nanos t, std::function<void()> f) = 0;
  virtual const Clock& clock() const = 0;
};

// Its timers are tracked so that shutdown() can cancel them: a pending
// timer's task may hold a response and its connection (an injected stall),
// which must be released while the server they belong to still exists, not
// by io_context's destructor after it.
class AsioExecutor final : public Executor {
 public:
  explicit AsioExecutor(boost::asio::io_context& ioc);
  ~AsioExecutor() override;
  void post(std::function<void()> f) override;
  void post_at(Nanos t, std::function<void()> f) override;
  const Clock& clock() const override { return clock_; }
  // Cancels every pending timer; from now on nothing posted runs (tasks
  // already queued included) and what is posted is dropped at once. Call it
  // once the io_context has stopped (no thread runs it), then poll() the
  // io_context: the cancelled handlers run and release what their tasks hold.
  void shutdown();
  // Timers not yet fired or cancelled (tests).
  std::size_t pending_timers() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  SteadyClock clock_;
};

class ManualExecutor final : public Executor {
 public:
  explicit ManualExecutor(Nanos start = 0) : clock_(start) {}
  void post(std::function<void()> f) override;
  void post_at(Nanos t, std::function<void()> f) override;
  const Clock& clock() const override { return clock_; }
  ManualClock& manual_clock() { return clock_; }
  // Runs tasks, moving the clock to each timer, until nothing is left (or
  // max_tasks ran). Returns the number run.
  std::size_t run_until_idle(std::size_t max_tasks = 10'000'000);

 private:
  std::mutex mutex_;
  std::multimap<std::pair<Nanos, std::uint64_t>, std::function<void()>> queue_;
  std::uint64_t sequence_ = 0;
  ManualClock clock_;
};

}  // namespace tokenscope::serve
