#include "serve/executor.h"

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <unordered_set>

namespace tokenscope::serve {

namespace asio = boost::asio;

struct AsioExecutor::Impl {
  asio::strand<asio::io_context::executor_type> strand;
  std::atomic<bool> closed{false};
  mutable std::mutex mutex;
  std::unordered_set<asio::steady_timer*> timers;  // pending; each owned by its handler
  explicit Impl(asio::io_context& ioc) : strand(asio::make_strand(ioc)) {}
};

AsioExecutor::AsioExecutor(asio::io_context& ioc) : impl_(std::make_unique<Impl>(ioc)) {}
AsioExecutor::~AsioExecutor() = default;

// Handlers refer to impl_ only when they run, which is while the io_context
// runs or is polled, never after this executor is gone.
void AsioExecutor::post(std::function<void()> f) {
  if (impl_->closed.load()) return;
  asio::post(impl_->strand, [impl = impl_.get(), f = std::move(f)] {
    if (!impl->closed.load()) f();
  });
}

void AsioExecutor::post_at(Nanos t, std::function<void()> f) {
  if (impl_->closed.load()) return;
  const Nanos now = clock_.now_ns();
  if (t <= now) return post(std::move(f));
  auto timer = std::make_shared<asio::steady_timer>(impl_->strand);
  // steady_timer and SteadyClock share std::chrono::steady_clock.
  timer->expires_at(asio::steady_timer::time_point(std::chrono::nanoseconds(t)));
  std::lock_guard lock(impl_->mutex);
  if (impl_->closed.load()) return;
  impl_->timers.insert(timer.get());
  timer->async_wait([impl = impl_.get(), timer, f = std::move(f)](const boost::system::error_code& ec) {
    {
      std::lock_guard lock(impl->mutex);
      impl->timers.erase(timer.get());
    }
    if (!ec && !impl->closed.load()) f();
  });
}

void AsioExecutor::shutdown() {
  std::lock_guard lock(impl_->mutex);
  impl_->closed.store(true);
  for (asio::steady_timer* timer : impl_->timers) timer->cancel();
}

std::size_t AsioExecutor::pending_timers() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->timers.size();
}

void ManualExecutor::post(std::function<void()> f) {
  post_at(clock_.now_ns(), std::move(f));
}

void ManualExecutor::post_at(Nanos t, std::function<void()> f) {
  std::lock_guard lock(mutex_);
  queue_.emplace(std::make_pair(std::max(t, clock_.now_ns()), sequence_++), std::move(f));
}

std::size_t ManualExecutor::run_until_idle(std::size_t max_tasks) {
  std::size_t ran = 0;
  while (ran < max_tasks) {
    std::function<void()> f;
    {
      std::lock_guard lock(mutex_);
      if (queue_.empty()) break;
      auto it = queue_.begin();
      clock_.set(it->first.first);
      f = std::move(it->second);
      queue_.erase(it);
    }
    f();
    ++ran;
  }
  return ran;
}

}  // namespace tokenscope::serve
