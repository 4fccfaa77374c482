// SPDX-License-Identifier: Apache-2.0
// Death tests of "a primitive destroyed while a wait is pending": a debug-build assertion names
// the primitive. The statement runs in a child process (threadsafe style: a fresh exec).
#pragma once

#include <gtest/gtest.h>

#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <cstdlib>
#include <utility>

namespace asyncband_test {

/// Whether assert() is active (the test builds keep it; a death test skips otherwise).
#ifdef NDEBUG
inline constexpr bool debug_asserts = false;
#else
inline constexpr bool debug_asserts = true;
#endif

/// Starts `wait_on(*primitive)` (a coroutine that suspends in a wait on the primitive) on a test
/// scheduler, then destroys the primitive (`owner` is a unique_ptr or shared_ptr). Expected to
/// die in the destructor's assertion; if it does not, exits with status 0 at once, since the
/// suspended frame would touch the destroyed primitive when destroyed (and EXPECT_DEATH then
/// fails: it wants a non-zero status).
template <class Owner, class WaitOn>
void destroy_while_waiting(Owner owner, WaitOn wait_on) {
  asyncband::runtime::test_scheduler s;
  auto waiting = wait_on(*owner);
  waiting.handle().promise().set_scheduler(s.ref());
  s.schedule(waiting.handle());
  s.run();
  if (waiting.done()) std::_Exit(2);  // the wait did not suspend: the test is wrong
  owner.reset();
  std::_Exit(0);
}

/// The death tests' style: a fresh exec of the test binary, safe with the threads other tests
/// of the same binary leave behind (thread pools, stress threads).
inline void threadsafe_death_tests() {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
}

}  // namespace asyncband_test
