// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::manual_reset_event: set's lock-free path against a waiter marking
// itself queued, resets erasing that mark, and cancellation, under the explorer's schedules.
#include <asyncband/manual_reset_event.hpp>
#include <asyncband/stop_token.hpp>

#include "kept.hpp"
#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// set, reset and wait all at once: resets may undo a set before the waiter sees it, but never
// the mark of a queued waiter, so the final set() always finds and wakes it (a waiter that set
// misses waits for good: a deadlock the explorer reports).
TEST(ModelManualResetEvent, SetRacesWaitAndReset) {
  EXPECT_TRUE(model::explored(501, [] {
    model::kept<asyncband::manual_reset_event> kept_e;
    auto& e = *kept_e;
    atomic<bool> woken{false};
    thread waiter([&] {
      e.wait_blocking();
      woken.store(true);
    });
    thread resetter([&] { e.reset(); });
    e.set();
    e.reset();
    resetter.join();
    e.set();
    waiter.join();
    check(woken.load() && e.is_set(), "the final set did not stay");
  }));
}

// A waiter cancelled while set() wakes everybody: it ends ok or cancelled, exactly once, and the
// cancellation leaves the queue whole, so the plain waiter is woken by the same set().
TEST(ModelManualResetEvent, CancelRacesSet) {
  EXPECT_TRUE(model::explored(502, [] {
    model::kept<asyncband::manual_reset_event> kept_e;
    auto& e = *kept_e;
    asyncband::stop_source stop;
    atomic<int> ends{0};
    thread cancellable([&] {
      auto r = e.wait_blocking(stop.get_token());
      check(r.ok() || r.status() == asyncband::wait_status::cancelled,
            "a wait ended neither ok nor cancelled");
      if (r.ok()) check(e.is_set(), "a wait ended ok before the set");
      ends.fetch_add(1);
    });
    thread plain([&] {
      e.wait_blocking();
      ends.fetch_add(1);
    });
    thread canceller([&] { stop.request_stop(); });
    e.set();
    canceller.join();
    cancellable.join();
    plain.join();
    check(ends.load() == 2, "a wait ended twice or never");
  }));
}

// Last one out: the waiter destroys the event as soon as its wait ends, while set() may still
// be returning (a use after free shows under the sanitizers).
TEST(ModelManualResetEvent, WaiterDestroysTheEventOnceSet) {
  EXPECT_TRUE(model::explored(503, [] {
    model::waiter_destroys<asyncband::manual_reset_event>([](asyncband::manual_reset_event& e) { e.set(); });
  }));
}

}  // namespace
