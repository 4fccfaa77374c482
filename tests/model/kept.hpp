// SPDX-License-Identifier: Apache-2.0
// tests/model/kept.hpp: a primitive of a model test body that a failed run leaves alone.
//
// When a run fails (a deadlock, a failed check), the explorer unwinds the body while other
// model threads are still queued on its primitives; destroying one then trips its destructor's
// "destroyed with waiters" assertion, which aborts the test binary before the failure and its
// replay string are reported. A kept<T> owns its T on the heap as a unique_ptr does, and leaks
// it instead when destroyed by unwinding (failed runs only).
//
// waiter_destroys<P>(wake, args...) is the "last one out" body of the primitives whose plain
// wait_blocking() one call of `wake` ends.
#pragma once

#include <exception>
#include <memory>
#include <utility>

#include <asyncband/testing/explore.hpp>

namespace model {

/// A T on the heap, destroyed with the kept<T> (or by reset()) unless an exception unwinds it.
template <class T>
class kept {
 public:
  /// A T made from `args`.
  template <class... Args>
  explicit kept(Args&&... args) : value_(std::make_unique<T>(std::forward<Args>(args)...)) {}
  kept(const kept&) = delete;
  kept& operator=(const kept&) = delete;
  ~kept() {
    if (std::uncaught_exceptions() != 0) (void)value_.release();  // a failed run: leave it
  }

  T& operator*() const noexcept { return *value_; }
  T* operator->() const noexcept { return value_.get(); }
  [[nodiscard]] T* get() const noexcept { return value_.get(); }
  /// Destroys the T now ("last one out"); get() is null afterwards.
  void reset() noexcept { value_.reset(); }

 private:
  std::unique_ptr<T> value_;
};

/// Last one out: a model thread waits on a new P(args...) and destroys it as soon as its wait
/// ends, while `wake(P&)` on the calling thread may still be returning. The explorer cannot see
/// a use after free: the sanitizers do (or the destructor's wait for pinned wakers hangs).
template <class P, class Wake, class... Args>
void waiter_destroys(Wake wake, Args&&... args) {
  kept<P> primitive(std::forward<Args>(args)...);
  P* const shared = primitive.get();
  asyncband::testing::thread waiter([&primitive, shared] {
    shared->wait_blocking();
    primitive.reset();
  });
  wake(*shared);
  waiter.join();
  asyncband::testing::check(primitive.get() == nullptr, "the waiter did not finish");
}

}  // namespace model
