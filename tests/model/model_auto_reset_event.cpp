// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::auto_reset_event: notify_one's lock-free store of the permit against
// a waiter queueing, a try_wait taking it, and a cancelled waiter passing it on, under the
// explorer's schedules.
#include <asyncband/auto_reset_event.hpp>
#include <asyncband/stop_token.hpp>

#include "kept.hpp"
#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// One permit, never lost nor doubled: notify_one hands it to the queued waiter or stores it, and
// either the waiter or a racing try_wait takes it (then that taker notifies again, for the
// waiter). A permit lost between the lock-free store and the queueing is a deadlock.
TEST(ModelAutoResetEvent, NotifyOneRacesWaitAndTryWait) {
  EXPECT_TRUE(model::explored(401, [] {
    model::kept<asyncband::auto_reset_event> kept_e;
    auto& e = *kept_e;
    thread waiter([&] { e.wait_blocking(); });
    thread notifier([&] { e.notify_one(); });
    const bool took = e.try_wait();
    if (took) e.notify_one();
    notifier.join();
    waiter.join();
    check(!e.is_set(), "a permit was doubled");
  }));
}

// A waiter cancelled while notify_one hands it the permit: it ends ok or cancelled, exactly
// once, and a permit it cannot use passes on to the other waiter (which otherwise waits for
// good: a deadlock). If the cancellable waiter used the permit, the other gets a second one.
TEST(ModelAutoResetEvent, CancelledWaiterPassesThePermitOn) {
  EXPECT_TRUE(model::explored(402, [] {
    model::kept<asyncband::auto_reset_event> kept_e;
    auto& e = *kept_e;
    asyncband::stop_source stop;
    atomic<bool> cancellable_ok{false};
    atomic<int> plain_woken{0};
    thread cancellable([&] {
      if (e.wait_blocking(stop.get_token()).ok()) cancellable_ok.store(true);
    });
    thread plain([&] {
      e.wait_blocking();
      plain_woken.fetch_add(1);
    });
    thread canceller([&] { stop.request_stop(); });
    e.notify_one();
    canceller.join();
    cancellable.join();
    if (cancellable_ok.load()) {
      check(plain_woken.load() == 0, "one permit woke two waiters");
      e.notify_one();
    }
    plain.join();
    check(!e.is_set(), "a cancelled waiter passed its permit on and kept it too");
  }));
}

// Last one out: the waiter woken by notify_one destroys the event at once, while notify_one may
// still be returning (a use after free shows under the sanitizers).
TEST(ModelAutoResetEvent, WaiterDestroysTheEventOnceWoken) {
  EXPECT_TRUE(model::explored(403, [] {
    model::waiter_destroys<asyncband::auto_reset_event>(
        [](asyncband::auto_reset_event& e) { e.notify_one(); });
  }));
}

}  // namespace
