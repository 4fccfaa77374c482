// SPDX-License-Identifier: Apache-2.0
// Misuse: an awaiter awaited a second time after it suspended once throws std::logic_error (its
// wait has ended; awaiting it again used to touch a finished node or a null pointer).
#pragma once

#include <gtest/gtest.h>

#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <stdexcept>

namespace asyncband_test {

/// Does nothing: the default of the hook between the two awaits.
struct nothing_between {
  void operator()() const noexcept {}
};

/// In one coroutine on a test scheduler: awaits what `start()` returns (it must suspend until
/// `release()` lets it complete; what it yields is dropped at once, so a guard or permit gives
/// its grant back), runs `between()`, then awaits the same awaiter again, which must throw
/// std::logic_error.
template <class Start, class Release, class Between = nothing_between>
void expect_awaiting_again_throws_logic_error(Start start, Release release, Between between = {}) {
  asyncband::runtime::test_scheduler s;
  int threw = 0;
  auto body = [&]() -> asyncband::runtime::task<void> {
    auto awaiter = start();
    (void)co_await awaiter;
    between();
    try {
      (void)co_await awaiter;
    } catch (const std::logic_error&) {
      ++threw;
    }
  };
  auto t = body();
  t.handle().promise().set_scheduler(s.ref());
  s.schedule(t.handle());
  s.run();
  EXPECT_FALSE(t.done()) << "the first await must suspend";
  release();
  s.run();
  EXPECT_TRUE(t.done());
  EXPECT_EQ(threw, 1);
}

}  // namespace asyncband_test
