// SPDX-License-Identifier: Apache-2.0
// A test hook for one point on the current thread, for race tests whose two sides must run on
// two threads (the test scheduler's hook is per thread too): the action runs once, the first
// time this thread reaches the point (or one action for each of its first times).
#pragma once

#include <asyncband/detail/waiter.hpp>
#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

namespace asyncband_test {

/// Installs `action` as this thread's test hook for one point, for tests whose actions must run
/// on two threads (the test scheduler's hook is per thread too).
class thread_hook {
 public:
  using test_point = asyncband::detail::test_point;
  thread_hook(test_point p, std::function<void()> action)
      : thread_hook(p, std::vector<std::function<void()>>{std::move(action)}) {}
  /// One action for each of the thread's first arrivals at the point, in order.
  thread_hook(test_point p, std::vector<std::function<void()>> actions)
      : point_(p), actions_(std::move(actions)) {
    asyncband::detail::current_test_hook = {&thread_hook::fire, this};
  }
  ~thread_hook() { asyncband::detail::current_test_hook = {}; }
  thread_hook(const thread_hook&) = delete;
  thread_hook& operator=(const thread_hook&) = delete;

 private:
  static void fire(void* self, test_point p) {
    auto& h = *static_cast<thread_hook*>(self);
    if (p != h.point_ || h.running_ || h.next_ == h.actions_.size()) return;
    auto action = std::move(h.actions_[h.next_++]);
    h.running_ = true;  // an action's own waits pass the point without running the next one
    action();
    h.running_ = false;
  }
  test_point point_;
  std::vector<std::function<void()>> actions_;
  std::size_t next_ = 0;
  bool running_ = false;
};

}  // namespace asyncband_test
