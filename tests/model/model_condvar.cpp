// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::condvar: a wait's registration and unlock against notify_one and
// notify_all, the pass-on of a notification a cancelled wait consumed, and the relock, under the
// explorer's schedules.
#include <asyncband/condvar.hpp>
#include <asyncband/mutex.hpp>
#include <asyncband/stop_token.hpp>

#include "kept.hpp"
#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// No lost wake-up: the notifier changes the value under the lock and notifies after unlocking;
// the waiter registers and unlocks in one step, so it either sees the change or is notified.
TEST(ModelCondvar, NotifyOneAfterTheChangeWakesTheWaiter) {
  EXPECT_TRUE(model::explored(201, [] {
    model::kept<asyncband::mutex<int>> kept_m(0);
    model::kept<asyncband::condvar> kept_cv;
    auto& m = *kept_m;
    auto& cv = *kept_cv;
    thread waiter([&] {
      auto g = cv.wait_while_blocking(m.lock_blocking(), [](int v) { return v == 0; });
      check(*g == 1, "woken before the change");
      *g = 2;
    });
    *m.lock_blocking() = 1;
    cv.notify_one();
    waiter.join();
    auto g = m.try_lock();
    check(g.has_value() && **g == 2, "the waiter kept the mutex or did not run");
  }));
}

// notify_one against a cancelled wait: the plain waiter registered before the notify_one is
// owed it, so a notification that the cancellable wait consumed and cannot use passes on
// (otherwise the plain waiter waits for good: a deadlock the explorer reports). A cancellable
// wait that returns ok holds the mutex with the change made; one that used the notification
// leaves the plain waiter without one, and only then is that waiter stopped too.
TEST(ModelCondvar, NotifyOnePassesOnFromACancelledWait) {
  EXPECT_TRUE(model::explored(202, [] {
    model::kept<asyncband::mutex<bool>> kept_m(false);
    model::kept<asyncband::condvar> kept_cv;
    auto& m = *kept_m;
    auto& cv = *kept_cv;
    asyncband::stop_source stop;
    asyncband::stop_source stop_plain;  // requested only if the cancellable wait kept the notification
    atomic<bool> cancellable_ok{false};
    thread cancellable([&] {
      auto r = cv.wait_while_blocking(
          m.lock_blocking(), [](bool set) { return !set; }, stop.get_token());
      if (r.ok()) {
        check(**r, "a wait ended ok before the change");
        cancellable_ok.store(true);
      }
    });
    atomic<int> plain_outcome{0};  // 1 ok, 2 cancelled
    thread plain([&] {
      auto r = cv.wait_while_blocking(
          m.lock_blocking(), [](bool set) { return !set; }, stop_plain.get_token());
      if (r.ok()) check(**r, "a wait ended ok before the change");
      plain_outcome.store(r.ok() ? 1 : 2);
    });
    thread canceller([&] { stop.request_stop(); });
    *m.lock_blocking() = true;
    cv.notify_one();
    canceller.join();
    cancellable.join();
    // A cancelled wait passed the notification on (or never needed it): the plain waiter ends
    // without help. One that ended ok may have used the one notification.
    if (cancellable_ok.load()) stop_plain.request_stop();
    plain.join();
    check(cancellable_ok.load() || plain_outcome.load() == 1,
          "a notification was lost with a cancelled wait");
    check(m.try_lock().has_value(), "a wait kept the mutex");
  }));
}

// notify_all wakes both registered waiters, which then relock the mutex one at a time; the last
// to leave destroys the condvar while notify_all may still be returning (last one out). The
// waits are plain ones (no predicate), so each ends only by the notify_all, which comes once
// both are registered (a registration and its unlock are one step under the mutex).
TEST(ModelCondvar, NotifyAllWakesEveryWaiterThenTheLastDestroys) {
  EXPECT_TRUE(model::explored(203, [] {
    model::kept<asyncband::mutex<int>> kept_registered(0);
    auto& registered = *kept_registered;
    model::kept<asyncband::condvar> cv;
    asyncband::condvar* const shared = cv.get();
    atomic<int> inside{0};
    atomic<int> left{0};
    const auto waiter = [&] {
      {
        auto g = registered.lock_blocking();
        ++*g;
        g = shared->wait_blocking(std::move(g));
        check(inside.fetch_add(1) == 0, "two waiters relocked the mutex at once");
        inside.fetch_sub(1);
      }
      if (left.fetch_add(1) == 1) cv.reset();
    };
    thread a(waiter);
    thread b(waiter);
    while (*registered.lock_blocking() != 2) model::ex::yield();
    shared->notify_all();
    a.join();
    b.join();
    check(cv.get() == nullptr, "a waiter did not leave");
  }));
}

}  // namespace
