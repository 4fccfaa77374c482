// SPDX-License-Identifier: Apache-2.0
// examples/explore_spin_lock.cpp: the schedule explorer finds the bug of a broken spin lock.
//
// The lock below tests the flag and then sets it, in two steps: two threads can both see it
// clear and both enter. A stress test rarely catches that (the window is two instructions
// wide); asyncband::testing::explore runs the test under many schedules of its model threads
// and finds a failing one at once, with a string that replays exactly that schedule. The same
// lock with one exchange passes every schedule of the bounded exhaustive search.
//
// Exits 0 when the explorer finds the bug, the replay reproduces it, and the fixed lock passes.
#include <cstdio>
#include <iostream>
#include <mutex>

#include <asyncband/testing/explore.hpp>

namespace {

namespace ex = asyncband::testing;

// A spin lock written for ex::atomic (in production code: std::atomic, the same interface).
template <bool Broken>
class spin_lock {
 public:
  void lock() {
    for (;;) {
      if constexpr (Broken) {
        // BUG: test, then set. Another thread can pass the test between the two.
        if (!locked_.load()) {
          locked_.store(true);
          return;
        }
      } else {
        if (!locked_.exchange(true, std::memory_order_acquire)) return;
      }
      ex::yield();  // a spin loop in an explored body yields: the explorer runs another thread
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  ex::atomic<bool> locked_{false};
};

// The test body: two threads enter the critical section twice each; a counter of the threads
// inside checks mutual exclusion. Everything shared is created in the body: each schedule
// starts afresh.
template <bool Broken>
void two_threads_in_the_lock() {
  spin_lock<Broken> lock;
  ex::atomic<int> inside{0};
  const auto worker = [&] {
    for (int i = 0; i != 2; ++i) {
      const std::lock_guard guard(lock);
      ex::check(inside.fetch_add(1) == 0, "two threads hold the spin lock");
      inside.fetch_sub(1);
    }
  };
  ex::thread a(worker);
  ex::thread b(worker);
  a.join();
  b.join();
}

}  // namespace

int main() {
  // 1. The broken lock: PCT (the default strategy) finds a failing schedule.
  const ex::result broken =
      ex::explore({.strategy = ex::strategy::pct, .schedules = 1000}, two_threads_in_the_lock<true>);
  std::cout << "broken lock: " << broken << "\n\n";
  if (broken.passed()) return 1;

  // 2. Its replay string runs exactly that schedule again (paste it into a test to debug it).
  const ex::result again = ex::explore({.replay = broken.failure->schedule}, two_threads_in_the_lock<true>);
  const bool reproduced = !again.passed() && again.failure->trace == broken.failure->trace;
  std::cout << "replayed " << broken.failure->schedule << ": "
            << (reproduced ? "same failure" : "NOT reproduced") << "\n\n";

  // 3. The fixed lock passes every schedule with up to 2 preemptions.
  const ex::result fixed =
      ex::explore({.strategy = ex::strategy::exhaustive, .preemptions = 2}, two_threads_in_the_lock<false>);
  std::cout << "fixed lock: " << fixed << "\n";
  return reproduced && fixed.passed() && fixed.exhausted ? 0 : 1;
}
