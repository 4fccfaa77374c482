// SPDX-License-Identifier: Apache-2.0
// asyncband/runtime/test_scheduler.hpp: a deterministic, single-threaded scheduler for race tests.
//
// Ready coroutines wait in a queue until the test steps them, one at a time, in FIFO order or in
// a seeded random order. With ASYNCBAND_TESTING defined, the test can also run an action at one
// of the waiter core's interleaving points (detail::test_point), reproducing exactly the moment
// another thread would have cut in: "wake the waiter after it is published but before it arms",
// "request stop after the waker claimed the node". A failing seed replays the same run.
#pragma once

#include "../version.hpp"  // first: a build below C++20 stops there, with one message

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "../detail/waiter.hpp"
#include "../scheduler.hpp"
#include "task.hpp"

namespace asyncband::runtime {

/// A deterministic, single-threaded scheduler for race tests: ready coroutines wait in a queue
/// until the test steps them, one at a time, in FIFO order or in a seeded pseudo-random order
/// (a failing seed replays the same run). Not thread-safe: one thread drives it.
class test_scheduler {
 public:
  /// FIFO order without a seed; seeded pseudo-random choice among ready coroutines with one.
  explicit test_scheduler(std::optional<std::uint64_t> seed = std::nullopt)
      : seed_(seed), rng_(seed.value_or(0)) {
#ifdef ASYNCBAND_TESTING
    previous_hook_ = asyncband::detail::current_test_hook;
    asyncband::detail::current_test_hook = {&test_scheduler::on_test_point, this};
#endif
  }
  test_scheduler(const test_scheduler&) = delete;
  test_scheduler& operator=(const test_scheduler&) = delete;
  ~test_scheduler() {
#ifdef ASYNCBAND_TESTING
    asyncband::detail::current_test_hook = previous_hook_;
#endif
    // Coroutines never stepped are the test's to clean up (it owns their tasks); drop the handles.
  }

  /// The scheduler concept: queue h; it runs when the test steps it.
  void schedule(std::coroutine_handle<> h) noexcept { ready_.push_back(h); }

  /// This scheduler as a scheduler_ref.
  [[nodiscard]] scheduler_ref ref() noexcept { return scheduler_ref::of(*this); }
  /// `co_await sched.schedule();` queues the awaiting coroutine here (and makes this the
  /// scheduler of an asyncband task).
  [[nodiscard]] schedule_on schedule() noexcept { return schedule_on(ref()); }

  /// Queues a task to start on this scheduler; it first runs at a later step. Returns its
  /// join_handle (dropping it detaches the task).
  template <class T>
  join_handle<T> spawn(task<T> t) {
    return runtime::spawn(ref(), std::move(t));
  }

  /// Resumes one ready coroutine; false if none was ready.
  bool step() {
    if (ready_.empty()) return false;
    const std::size_t i = seed_ ? next_random() % ready_.size() : 0;  // below size(): it fits
    const auto h = ready_[i];
    ready_.erase(ready_.begin() + static_cast<std::ptrdiff_t>(i));
    ++steps_;
    h.resume();
    return true;
  }

  /// Steps until nothing is ready (or max_steps ran); returns the number of steps taken.
  std::size_t run(std::size_t max_steps = 1'000'000) {
    std::size_t n = 0;
    while (n < max_steps && step()) ++n;
    return n;
  }

  /// Coroutines queued and not yet stepped.
  [[nodiscard]] std::size_t ready_count() const noexcept { return ready_.size(); }
  /// Steps taken so far.
  [[nodiscard]] std::size_t steps() const noexcept { return steps_; }

  /// Runs `action` once, the next time the waiter core reaches point `p` on this thread.
  /// Actions for the same point run in the order they were registered, one per occurrence.
  void at(asyncband::detail::test_point p, std::function<void()> action) {
    actions_.push_back({p, std::move(action)});
  }

  /// Actions registered with at() that have not run yet.
  [[nodiscard]] std::size_t pending_actions() const noexcept { return actions_.size(); }

 private:
  struct point_action {
    asyncband::detail::test_point point;
    std::function<void()> action;
  };

  std::uint64_t next_random() noexcept {  // splitmix64: tiny, and the same on every platform
    std::uint64_t z = (rng_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31U);
  }

  static void on_test_point(void* self, asyncband::detail::test_point p) {
    auto& s = *static_cast<test_scheduler*>(self);
    for (auto it = s.actions_.begin(); it != s.actions_.end(); ++it) {
      if (it->point != p) continue;
      auto action = std::move(it->action);
      s.actions_.erase(it);  // before running: the action may reach test points itself
      action();
      return;
    }
  }

  std::optional<std::uint64_t> seed_;
  std::uint64_t rng_;
  std::vector<std::coroutine_handle<>> ready_;
  std::size_t steps_ = 0;
  std::vector<point_action> actions_;
#ifdef ASYNCBAND_TESTING
  asyncband::detail::test_hook previous_hook_{};
#endif
};

}  // namespace asyncband::runtime
