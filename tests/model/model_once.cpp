// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::once: a failed run passed to the oldest waiter.
#include <stdexcept>

#include <asyncband/once.hpp>

#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// Two callers, the first one's f throws: the other runs its own f (or already completed the
// once), exactly one run succeeds, and both return once the once is completed or rethrow.
TEST(ModelOnce, FailedRunPassesOn) {
  EXPECT_TRUE(model::explored(175, [] {
    asyncband::once once;
    atomic<int> succeeded{0};
    thread a([&] {
      try {
        once.call_once_blocking([]() -> int { throw std::runtime_error("a fails"); });
        check(once.is_completed(), "call_once returned before completion");
      } catch (const std::runtime_error&) {
      }
    });
    thread b([&] {
      once.call_once_blocking([&] { succeeded.fetch_add(1); });
      check(once.is_completed(), "call_once returned before completion");
    });
    a.join();
    b.join();
    check(succeeded.load() == 1, "the run succeeded twice or never");
  }));
}

}  // namespace
