// Boxed<T>: an optional value kept on the heap, with the part of
// std::optional's interface the code uses (has_value, emplace, reset, *, ->,
// a test as bool) and a pointer's size. For a large member that is rarely
// present in a struct that is moved often: std::optional of a trivially
// copyable T copies all of T's bytes on every move, present or not
// (RequestRecord's logprob histogram is 672 bytes, its record moved four
// times per request). A copy copies the value; a move moves the pointer.
#pragma once

#include <memory>
#include <utility>

namespace tokenscope {

template <class T>
class Boxed {
 public:
  Boxed() = default;
  Boxed(const Boxed& other) : p_(other.p_ ? std::make_unique<T>(*other.p_) : nullptr) {}
  Boxed& operator=(const Boxed& other) {
    if (this != &other) p_ = other.p_ ? std::make_unique<T>(*other.p_) : nullptr;
    return *this;
  }
  Boxed(Boxed&&) noexcept = default;
  Boxed& operator=(Boxed&&) noexcept = default;

  template <class... Args>
  T& emplace(Args&&... args) {
    p_ = std::make_unique<T>(std::forward<Args>(args)...);
    return *p_;
  }
  void reset() noexcept { p_.reset(); }
  bool has_value() const noexcept { return p_ != nullptr; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  T& operator*() { return *p_; }
  const T& operator*() const { return *p_; }
  T* operator->() { return p_.get(); }
  const T* operator->() const { return p_.get(); }

 private:
  std::unique_ptr<T> p_;
};

}  // namespace tokenscope
