// SPDX-License-Identifier: Apache-2.0
// Exploring a user program together with the asyncband primitive it uses. Built with
// ASYNCBAND_MODEL (examples/CMakeLists.txt does it for explore_model_*), so the event's own
// atomics and its parking are scheduling points too, and a thread blocked in wait_blocking() is
// a model thread the explorer knows is blocked.
//
// Two workers each finish part of a job; the last one out sets an event that the main thread
// waits for. The broken version counts down with a load and a store: both workers can read 2,
// both store 1, nobody sets the event, and the waiter sleeps for good. The explorer reports that
// as a deadlock, with the schedule that reproduces it.
#include <asyncband/manual_reset_event.hpp>
#include <asyncband/testing/explore.hpp>
#include <iostream>

namespace ex = asyncband::testing;

namespace {

template <bool Broken>
struct job {
  ex::atomic<int> remaining{2};
  asyncband::manual_reset_event done;

  void finish_part() {
    if constexpr (Broken) {
      const int left = remaining.load() - 1;  // BUG: a load and a store, not one fetch_sub
      remaining.store(left);
      if (left == 0) done.set();
    } else {
      if (remaining.fetch_sub(1) == 1) done.set();
    }
  }
};

template <bool Broken>
ex::result explore_job() {
  return ex::explore({.schedules = 1000}, [] {
    job<Broken> j;
    ex::thread a([&] { j.finish_part(); });
    ex::thread b([&] { j.finish_part(); });
    j.done.wait_blocking();  // a lost count-down leaves this thread parked: a deadlock
    a.join();
    b.join();
  });
}

}  // namespace

int main() {
  const ex::result broken = explore_job<true>();
  const ex::result fixed = explore_job<false>();
  std::cout << "broken count-down: " << broken << "\n\nfetch_sub count-down: " << fixed << "\n";
  const bool as_expected =
      broken.failure && broken.failure->kind == ex::failure_kind::deadlock && fixed.passed();
  return as_expected ? 0 : 1;
}
