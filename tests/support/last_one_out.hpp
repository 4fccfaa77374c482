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

}  // namespace asyncband_test
