// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::latch: the final count_down's lock-free decrement against a waiter
// flagging itself, cancellation, and a waiter that destroys the latch, under the explorer's
// schedules.
#include <asyncband/latch.hpp>
#include <asyncband/stop_token.hpp>

#include "kept.hpp"
#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// Two count_downs against two waiters: each wait ends after both arrivals, never before, and
// none is left behind (a waiter the final decrement misses is a deadlock).
TEST(ModelLatch, CountDownRacesWaiters) {
  EXPECT_TRUE(model::explored(601, [] {
    model::kept<asyncband::latch> kept_l(2);
    auto& l = *kept_l;
    atomic<int> arrived{0};
    const auto arrive = [&] {
      arrived.fetch_add(1);
      l.count_down();
    };
    thread a(arrive);
    thread b(arrive);
    thread waiter([&] {
      l.wait_blocking();
      check(arrived.load() == 2, "a wait ended before the last arrival");
    });
    l.wait_blocking();
    check(arrived.load() == 2 && l.count() == 0, "a wait ended before the last arrival");
    a.join();
    b.join();
    waiter.join();
  }));
}

// A waiter cancelled while the final arrival wakes everybody: it ends ok (the count at zero) or
// cancelled, exactly once, and its cancellation leaves the other waiter queued to be woken.
TEST(ModelLatch, CancelRacesTheFinalArrival) {
  EXPECT_TRUE(model::explored(602, [] {
    model::kept<asyncband::latch> kept_l(1);
    auto& l = *kept_l;
    asyncband::stop_source stop;
    atomic<int> ends{0};
    thread cancellable([&] {
      auto r = l.wait_blocking(stop.get_token());
      check(r.ok() || r.status() == asyncband::wait_status::cancelled,
            "a wait ended neither ok nor cancelled");
      if (r.ok()) check(l.try_wait(), "a wait ended ok before the count reached zero");
      ends.fetch_add(1);
    });
    thread plain([&] {
      l.wait_blocking();
      check(l.try_wait(), "a wait ended before the count reached zero");
      ends.fetch_add(1);
    });
    thread canceller([&] { stop.request_stop(); });
    l.count_down();
    canceller.join();
    cancellable.join();
    plain.join();
    check(ends.load() == 2, "a wait ended twice or never");
  }));
}

// Last one out (as std::latch allows): the waiter destroys the latch as soon as its wait ends,
// while the final count_down may still be returning (a use after free shows under the
// sanitizers; the arrival pins the queue, which the destructor waits out).
TEST(ModelLatch, WaiterDestroysTheLatchOnceComplete) {
  EXPECT_TRUE(model::explored(
      603, [] { model::waiter_destroys<asyncband::latch>([](asyncband::latch& l) { l.count_down(); }, 1); }));
}

}  // namespace
