// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::manual_reset_event: contract, waits from tasks / threads / block_on,
// cancellation, deterministic races at the waiter core's test points, destruction of a
// suspended waiter, and a bounded multi-threaded stress test.
#include "asyncband/manual_reset_event.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/stop_token.hpp"
#include "support/destroyed_with_waiters.hpp"
#include "support/last_one_out.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"
#include "support/wait_contract.hpp"

namespace {

using namespace asyncband_test;
using asyncband::block_on;
using asyncband::manual_reset_event;

const auto set = [](manual_reset_event& ev) { ev.set(); };

// ---------------------------------------------------------------------------------------------
// Basic contract

TEST(ManualResetEvent, InitialState) {
  EXPECT_FALSE(manual_reset_event{}.is_set());
  EXPECT_FALSE(manual_reset_event{false}.is_set());
  EXPECT_TRUE(manual_reset_event{true}.is_set());
}

TEST(ManualResetEvent, SetAndResetToggleTheState) {
  manual_reset_event ev;
  ev.set();
  EXPECT_TRUE(ev.is_set());
  ev.set();  // idempotent
  EXPECT_TRUE(ev.is_set());
  ev.reset();
  EXPECT_FALSE(ev.is_set());
  ev.reset();
  EXPECT_FALSE(ev.is_set());
  ev.set();
  EXPECT_TRUE(ev.is_set());
}

TEST(ManualResetEvent, WaitOnASetEventCompletesWithoutSuspending) {
  test_scheduler s;
  manual_reset_event ev(true);
  probe a;
  probe b;
  s.spawn(plain_waiter(ev, a));
  asyncband::stop_source src;
  s.spawn(stoppable_waiter(ev, src.get_token(), b));
  EXPECT_EQ(s.run(), 2U);  // one step each: neither suspended
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(b.resumed, 1);
  EXPECT_EQ(b.status, wait_status::ok);
  EXPECT_TRUE(ev.is_set());  // waiting does not consume anything
}

TEST(ManualResetEvent, SetWakesEveryCurrentWaiterOnItsScheduler) {
  test_scheduler s;
  manual_reset_event ev;
  std::array<probe, 4> probes;
  asyncband::stop_source src;
  spawn_alternating_waiters(s, ev, probes, src.get_token());
  s.run();
  for (const auto& p : probes) {
    EXPECT_EQ(p.started, 1);
    EXPECT_EQ(p.resumed, 0);
  }

  ev.set();
  EXPECT_TRUE(ev.is_set());
  EXPECT_EQ(s.ready_count(), probes.size());  // all posted, none run inline by set()
  for (const auto& p : probes) EXPECT_EQ(p.resumed, 0);

  s.run();
  for (const auto& p : probes) {
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::ok);
  }
  src.request_stop();  // after completion: no effect
  EXPECT_EQ(s.ready_count(), 0U);
}

TEST(ManualResetEvent, ResetAffectsOnlyLaterWaits) {
  test_scheduler s;
  manual_reset_event ev;
  probe early;
  s.spawn(plain_waiter(ev, early));
  s.run();

  ev.set();
  ev.reset();  // the early waiter was already woken: it stays woken
  probe late;
  s.spawn(plain_waiter(ev, late));
  s.run();
  EXPECT_EQ(early.resumed, 1);
  EXPECT_EQ(late.started, 1);
  EXPECT_EQ(late.resumed, 0);  // the reset event blocks new waits

  ev.set();
  s.run();
  EXPECT_EQ(late.resumed, 1);
  EXPECT_EQ(early.resumed, 1);
}

// set() is lock-free while nobody is queued: the state word marks a queued waiter, and the
// mark must survive whatever reset() and set() do around it.
TEST(ManualResetEvent, ResetWhileAWaiterIsQueuedLeavesItForTheNextSet) {
  test_scheduler s;
  manual_reset_event ev;
  probe p;
  s.spawn(plain_waiter(ev, p));
  s.run();
  ev.reset();  // unset already: must not erase the mark of the queued waiter
  ev.reset();
  EXPECT_FALSE(ev.is_set());
  ev.set();  // must find the waiter
  EXPECT_TRUE(ev.is_set());
  s.run();
  EXPECT_EQ(p.resumed, 1);
}

TEST(ManualResetEvent, AfterTheLastQueuedWaiterIsCancelledSetAndResetStillWork) {
  test_scheduler s;
  manual_reset_event ev;
  probe cancelled;
  asyncband::stop_source src;
  s.spawn(stoppable_waiter(ev, src.get_token(), cancelled));
  s.run();
  src.request_stop();
  s.run();
  EXPECT_EQ(cancelled.status, wait_status::cancelled);
  ev.set();  // finds the stale mark and nobody to wake
  EXPECT_TRUE(ev.is_set());
  ev.reset();
  EXPECT_FALSE(ev.is_set());
  probe later;
  s.spawn(plain_waiter(ev, later));
  s.run();
  EXPECT_EQ(later.resumed, 0);
  ev.set();
  s.run();
  EXPECT_EQ(later.resumed, 1);
  EXPECT_EQ(cancelled.resumed, 1);
}

// ---------------------------------------------------------------------------------------------
// Cancellation

TEST(ManualResetEvent, AlreadyStoppedTokenCancelsAtOnce) {
  already_stopped_token_cancels_at_once_set_or_not<manual_reset_event>();
}

TEST(ManualResetEvent, StopWhileSuspendedCancelsAndResumesOnce) {
  manual_reset_event ev;
  stop_while_suspended_cancels_and_resumes_once(ev, set);
}

TEST(ManualResetEvent, StopAfterWakeIsOk) {
  manual_reset_event ev;
  stop_after_wake_is_ok(ev, set);
}

// ---------------------------------------------------------------------------------------------
// Deterministic races at the waiter core's interleaving points

TEST(ManualResetEvent, SetAtPublishedOrBeforeArmCompletesWithoutSuspending) {
  wake_before_suspension_completes_without_suspending(
      [] { return manual_reset_event(); }, set, [](manual_reset_event& ev) { EXPECT_TRUE(ev.is_set()); });
}

TEST(ManualResetEvent, StopAtPublishedOrBeforeArmCancelsWithoutSuspending) {
  for (const test_point point : before_suspension) {
    SCOPED_TRACE(static_cast<int>(point));
    manual_reset_event ev;
    stop_at_point_cancels_without_suspending(point, ev, set);  // the node was unlinked
  }
}

TEST(ManualResetEvent, StopAtClaimedForWakeIsOk) {
  manual_reset_event ev;
  stop_at_claimed_for_wake(ev, set, wait_status::ok);
}

TEST(ManualResetEvent, ResetAtClaimedForWakeDoesNotUndoTheWake) {
  test_scheduler s;
  manual_reset_event ev;
  probe p;
  s.spawn(plain_waiter(ev, p));
  s.run();

  s.at(test_point::claimed_for_wake, [&] { ev.reset(); });
  ev.set();
  EXPECT_FALSE(ev.is_set());
  s.run();
  EXPECT_EQ(p.resumed, 1);
}

TEST(ManualResetEvent, SetAtClaimedForCancelDoesNotWakeTheCancelledWaiterTwice) {
  manual_reset_event ev;
  wake_at_claimed_for_cancel_goes_to_the_other_waiter(ev, set);
  EXPECT_TRUE(ev.is_set());
}

// ---------------------------------------------------------------------------------------------
// Destroying a suspended waiter

TEST(ManualResetEvent, DestroyingASuspendedWaiterUnlinksIt) {
  manual_reset_event ev;
  destroying_suspended_waiters_unlinks_them(ev, set);
}

// ---------------------------------------------------------------------------------------------
// Plain threads and block_on

TEST(ManualResetEvent, WaitBlockingReturnsOnceSet) {
  manual_reset_event ev;
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&] {
      ev.wait_blocking();
      finished.fetch_add(1);
    });
  }
  ev.set();
  for (auto& t : threads) t.join();
  EXPECT_EQ(finished.load(), 3);
  ev.wait_blocking();  // already set: returns at once
}

TEST(ManualResetEvent, WaitTimeoutTimesOutWhenNotSet) {
  manual_reset_event ev;
  EXPECT_TRUE(ev.wait_timeout(1ms).timed_out());
  EXPECT_TRUE(ev.wait_timeout(0ms).timed_out());
  ev.set();  // the timed-out nodes are gone: must not be touched
  EXPECT_TRUE(ev.wait_timeout(0ms).ok());
  EXPECT_TRUE(ev.wait_timeout(1h).ok());
}

TEST(ManualResetEvent, WaitTimeoutCompletesWhenSetByAnotherThread) {
  manual_reset_event ev;
  wait_timeout_completes_when_woken_by_another_thread(ev, set);
}

TEST(ManualResetEvent, WaitBlockingWithStopToken) {
  manual_reset_event ev(true);
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(ev.wait_blocking(stopped.get_token()).cancelled());  // even though set

  ev.reset();
  blocking_wait_is_cancelled_by_another_thread(ev);
  blocking_wait_is_woken_by_another_thread(ev, set);
}

TEST(ManualResetEvent, BlockOnWaits) {
  manual_reset_event ev;
  block_on_waits_complete_when_woken_by_another_thread(ev, set);
  EXPECT_TRUE(ev.is_set());
}

TEST(ManualResetEvent, BlockOnWaitIsCancelledByAStopFromAnotherThread) {
  manual_reset_event ev;
  block_on_wait_is_cancelled_by_another_thread(ev);
}

// ---------------------------------------------------------------------------------------------
// Stress: tasks on a thread pool and plain threads wait (some cancellably) while another thread
// sets the event; every waiter finishes, and every ok wait observes what was written before set().

struct stress_round {
  manual_reset_event& ev;
  int round = 0;
  int payload = 0;  // written before set(); read (non-atomically) after an ok wait
  asyncband::stop_source stop;
  wait_tally waits;
  completion finished;

  stress_round(manual_reset_event& e, int r, int waiters) : ev(e), round(r), finished(waiters) {}

  void record(wait_status st) {
    waits.record(st, [this] { return payload == round; });
  }
};

TEST(ManualResetEvent, StressEveryWaiterFinishesAfterSet) {
  constexpr int pool_waiters = 4;
  constexpr int thread_waiters = 3;

  manual_reset_event ev;
  asyncband::runtime::thread_pool pool(2);
  stress_totals totals;
  const int rounds = repeat_for(300, 1s, [&](int round) {
    ev.reset();
    auto r = std::make_unique<stress_round>(ev, round + 1, pool_waiters + thread_waiters);
    const bool cancel_this_round = round % 3 == 0;

    for (int i = 0; i < pool_waiters; ++i)
      asyncband::runtime::spawn(pool.ref(), stress_waiter(*r, r->ev, i % 2 == 1));
    std::vector<std::thread> threads;
    threads.emplace_back([&r] {
      r->ev.wait_blocking();
      r->record(wait_status::ok);
      r->finished.done();
    });
    threads.emplace_back([&r] {
      r->record(r->ev.wait_blocking(r->stop.get_token()).status());
      r->finished.done();
    });
    threads.emplace_back([&r] {
      r->record(block_on(r->ev.wait(r->stop.get_token())).status());
      r->finished.done();
    });
    std::thread setter([&r, cancel_this_round] {
      r->payload = r->round;
      if (cancel_this_round) r->stop.request_stop();
      r->ev.set();
    });

    r->finished.wait_or_abort(30s, "manual_reset_event stress");
    setter.join();
    for (auto& t : threads) t.join();

    // 2 of the pool tasks and the first thread cannot be cancelled.
    r->waits.expect_round(r->round, pool_waiters + thread_waiters, pool_waiters / 2 + 1, cancel_this_round);
    totals.add(r->waits);
    return !HasFailure();
  });
  totals.expect_and_record(rounds);
}

TEST(ManualResetEventLifetime, TheWaiterMayDestroyTheEventWhileSetReturns) {
  // With nobody queued, set() is one CAS, its last access.
  waiter_destroys_while_the_waker_returns([] { return std::make_unique<manual_reset_event>(); }, set,
                                          [](manual_reset_event& ev) { ev.wait_blocking(); },
                                          waker_path::last_access);
}

// Issue 16: a plain blocked thread sleeps on the event's broadcast word; set() resolves it, then
// moves the word. A thread that sees its release in between returns at once.
TEST(ManualResetEventLifetime, AThreadReleasedFromTheBroadcastWordMayDestroyTheEventWhileSetNotifies) {
  released_thread_destroys_while_the_waker_notifies([] { return std::make_unique<manual_reset_event>(); },
                                                    set, [](manual_reset_event& ev) { ev.wait_blocking(); });
}

// ---------------------------------------------------------------------------------------------
// Misuse: destroyed with a pending wait (a debug-build assertion names the primitive)

TEST(ManualResetEventDeathTest, DestroyingTheEventWithAPendingWaitAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto wait_on = [](manual_reset_event& ev) -> task<void> { co_await ev.wait(); };
  EXPECT_DEATH(destroy_while_waiting(std::make_unique<manual_reset_event>(), wait_on),
               "asyncband::manual_reset_event destroyed with waiters");
}

}  // namespace
