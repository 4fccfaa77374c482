// SPDX-License-Identifier: Apache-2.0
// A test hook for one point on the current thread, for race tests whose two sides must run on
// two threads (the test scheduler's hook is per thread too): the action runs once, the first
// time this thread reaches the point.
#pragma once

#include <asyncband/detail/waiter.hpp>
#include <functional>
#include <utility>

namespace asyncband_test {

/// Installs `action` as this thread's test hook for one point, for tests whose actions must run
/// on two threads (the test scheduler's hook is per thread too).
class thread_hook {
 public:
  using test_point = asyncband::detail::test_point;
  thread_hook(test_point p, std::function<void()> action) : point_(p), action_(std::move(action)) {
    asyncband::detail::current_test_hook = {&thread_hook::fire, this};
  }
  ~thread_hook() { asyncband::detail::current_test_hook = {}; }
  thread_hook(const thread_hook&) = delete;
  thread_hook& operator=(const thread_hook&) = delete;

 private:
  static void fire(void* self, test_point p) {
    auto& h = *static_cast<thread_hook*>(self);
    if (p != h.point_ || !h.action_) return;
    auto action = std::move(h.action_);
    h.action_ = nullptr;
    action();
  }
  test_point point_;
  std::function<void()> action_;
};

}  // namespace asyncband_test
