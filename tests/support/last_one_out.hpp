// SPDX-License-Identifier: Apache-2.0
// "Last one out destroys it": a waiter that sees its wait complete may destroy the primitive at
// once, even while the call that completed it is still returning (std::latch allows it). The
// test stops the waker right after the change that lets the waiter complete (test point
// `woken`), has the waiter complete and destroy the primitive, and lets the waker go on only
// once the destructor runs (test point `destroying`). The destructor must not return before the
// waker has left the primitive (checked directly: an unlock of freed memory happens inside libc,
// where ASan does not look).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <memory>
#include <thread>

#include "thread_hook.hpp"

namespace asyncband_test {

/// How the waker reaches the change that lets the waiter complete.
enum class waker_path {
  holds_primitive,  ///< it still holds the primitive after the change: destruction must wait
  last_access,      ///< the change is its last access (a lock-free store): nothing to wait for
};

template <class Make, class Wake, class Wait>
void waiter_destroys_while_the_waker_returns(Make make, Wake wake, Wait wait,
                                             waker_path path = waker_path::holds_primitive) {
  using asyncband::detail::test_point;
  auto primitive = make();
  auto* raw = primitive.get();
  std::latch changed(1);  // std::latch: the synchronization of the test itself has no hooks
  std::latch destroying(1);
  std::atomic<bool> waker_released{false};
  std::thread waker([&] {
    const thread_hook hook(test_point::woken, [&] {
      changed.count_down();
      destroying.wait();
      waker_released = true;
    });
    wake(*raw);
  });
  changed.wait();
  wait(*primitive);  // completes lock-free: the waker has made the change
  if (path == waker_path::holds_primitive) {
    const thread_hook hook(test_point::destroying, [&] { destroying.count_down(); });
    primitive.reset();
    EXPECT_TRUE(waker_released.load()) << "the primitive was destroyed while its waker was still inside it";
  } else {
    primitive.reset();  // gone before the waker goes on: ASan reports any later access
    destroying.count_down();
  }
  waker.join();
}

/// The same for threads released from a broadcast word (wake_batch::release_broadcast): the
/// waker makes the change (a generation moved, a node resolved), then moves the word and
/// notifies. A thread that checks its release in between (it had not gone to sleep yet, or spins
/// in atomic::wait) returns before the notify and may destroy the primitive. `wait` runs on a
/// thread of its own, stopped once its wait is visible to the waker (test point `published`)
/// until the waker has made the change and stopped at `waker_stop` (`releasing`: after the
/// resolution, before the notify; `woken`: right after the change, a barrier's generation moved
/// under its lock); the thread then returns without sleeping and destroys the primitive. The
/// destructor must wait for the waker (ASan reports the waker's later accesses otherwise). Each
/// side waits for the other with a generous bound, so a broken protocol fails instead of hanging.
template <class Make, class Wake, class Wait>
void released_thread_destroys_while_the_waker_notifies(
    Make make, Wake wake, Wait wait,
    asyncband::detail::test_point waker_stop = asyncband::detail::test_point::releasing) {
  using asyncband::detail::test_point;
  const auto await_flag = [](const std::atomic<bool>& flag, const char* what) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!flag.load() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    EXPECT_TRUE(flag.load()) << what;
  };
  auto primitive = make();
  auto* raw = primitive.get();
  std::latch visible(1);
  std::atomic<bool> changed{false};
  std::atomic<bool> destroying{false};
  std::atomic<bool> waker_released{false};
  std::thread waiting([&] {
    {
      const thread_hook hook(test_point::published, [&] {
        visible.count_down();
        // A waker that wakes the thread some other way never stops there.
        await_flag(changed, "the waker did not stop where the thread may see its release before the notify");
      });
      wait(*raw);
    }
    const thread_hook hook(test_point::destroying, [&] { destroying = true; });
    primitive.reset();
    EXPECT_TRUE(waker_released.load()) << "the primitive was destroyed while its waker was still inside it";
  });
  visible.wait();
  {
    const thread_hook hook(waker_stop, [&] {
      changed = true;
      await_flag(destroying, "the released thread did not reach the primitive's destructor");
      waker_released = true;
    });
    wake(*raw);
  }
  waiting.join();
}

}  // namespace asyncband_test
