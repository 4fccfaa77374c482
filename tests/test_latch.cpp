// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::latch: count / try_wait / count_down / arrive(n), errors, waits from tasks /
// threads / block_on, cancellation, deterministic races at the waiter core's test points,
// destruction of a suspended waiter, and a bounded multi-threaded stress test.
#include "asyncband/latch.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
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
using asyncband::latch;

const auto count_down = [](latch& l) { l.count_down(); };

// A probe that also records the count the waiter saw when it resumed.
struct latch_probe : probe {
  std::ptrdiff_t count_seen = -1;
  template <class... Value>
  void after_wait(latch& l, const Value&... /*unused*/) {
    count_seen = l.count();
  }
};

// ---------------------------------------------------------------------------------------------
// Basic contract

TEST(Latch, CountDownAndArriveDecrementTheCount) {
  latch l(5);
  EXPECT_EQ(l.count(), 5);
  EXPECT_FALSE(l.try_wait());
  l.count_down();
  EXPECT_EQ(l.count(), 4);
  l.arrive(3);
  EXPECT_EQ(l.count(), 1);
  EXPECT_FALSE(l.try_wait());
  l.arrive(1);
  EXPECT_EQ(l.count(), 0);
  EXPECT_TRUE(l.try_wait());
}

TEST(Latch, ZeroCountIsReadyAtOnce) {
  latch l(0);
  EXPECT_EQ(l.count(), 0);
  EXPECT_TRUE(l.try_wait());
  l.wait_blocking();
  EXPECT_TRUE(l.wait_timeout(0ms).ok());

  test_scheduler s;
  latch_probe p;
  s.spawn(plain_waiter(l, p));
  EXPECT_EQ(s.run(), 1U);  // never suspended
  EXPECT_EQ(p.resumed, 1);
}

TEST(Latch, ArriveZeroIsANoOp) {
  latch l(2);
  l.arrive(0);
  EXPECT_EQ(l.count(), 2);
  latch done(0);
  done.arrive(0);
  EXPECT_EQ(done.count(), 0);
}

TEST(Latch, WaitersSuspendUntilTheCountReachesZero) {
  test_scheduler s;
  latch l(3);
  std::array<latch_probe, 3> probes;
  asyncband::stop_source src;
  spawn_alternating_waiters(s, l, probes, src.get_token());
  s.run();

  l.count_down();
  l.count_down();
  EXPECT_EQ(s.ready_count(), 0U);
  for (const auto& p : probes) EXPECT_EQ(p.resumed, 0);

  l.count_down();
  EXPECT_EQ(s.ready_count(), probes.size());  // all posted, none run inline
  s.run();
  for (const auto& p : probes) {
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::ok);
    EXPECT_EQ(p.count_seen, 0);
  }

  latch_probe late;  // the latch stays open
  s.spawn(plain_waiter(l, late));
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(late.resumed, 1);
}

TEST(Latch, ArriveReachingZeroWakesEveryWaiter) {
  test_scheduler s;
  latch l(4);
  std::array<latch_probe, 2> probes;
  for (auto& p : probes) s.spawn(plain_waiter(l, p));
  s.run();
  l.arrive(4);
  s.run();
  for (const auto& p : probes) EXPECT_EQ(p.resumed, 1);
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(Latch, NegativeInitialCountThrows) {
  EXPECT_THROW(latch(-1), std::invalid_argument);
  EXPECT_THROW(latch(-100), std::invalid_argument);
}

TEST(Latch, InvalidArrivalsThrowAndLeaveTheCountUnchanged) {
  test_scheduler s;
  latch l(3);
  latch_probe p;
  s.spawn(plain_waiter(l, p));
  s.run();

  EXPECT_THROW(l.arrive(-1), std::invalid_argument);
  EXPECT_EQ(l.count(), 3);
  EXPECT_THROW(l.arrive(4), std::invalid_argument);
  EXPECT_EQ(l.count(), 3);
  l.arrive(2);
  EXPECT_THROW(l.arrive(2), std::invalid_argument);
  EXPECT_EQ(l.count(), 1);
  EXPECT_EQ(s.ready_count(), 0U);  // no failed arrival woke anybody
  EXPECT_EQ(p.resumed, 0);

  l.count_down();
  EXPECT_EQ(l.count(), 0);
  EXPECT_THROW(l.count_down(), std::invalid_argument);  // count_down at zero
  EXPECT_THROW(l.arrive(1), std::invalid_argument);
  EXPECT_EQ(l.count(), 0);
  s.run();
  EXPECT_EQ(p.resumed, 1);
}

// ---------------------------------------------------------------------------------------------
// Cancellation

TEST(Latch, AlreadyStoppedTokenCancelsAtOnce) {
  for (const std::ptrdiff_t count : {0, 2}) {
    latch l(count);
    already_stopped_token_cancels_at_once(l);
    EXPECT_EQ(l.count(), count);
  }
}

TEST(Latch, StopWhileSuspendedCancelsAndResumesOnce) {
  latch l(1);
  const auto probes = stop_while_suspended_cancels_and_resumes_once<latch_probe>(l, count_down);
  EXPECT_EQ(probes.cancelled.count_seen, 1);
  EXPECT_EQ(probes.other.count_seen, 0);
}

TEST(Latch, StopAfterWakeIsOk) {
  latch l(1);
  stop_after_wake_is_ok(l, count_down);  // the final arrival claimed the waiter first
}

// ---------------------------------------------------------------------------------------------
// Deterministic races at the waiter core's interleaving points

TEST(Latch, CountDownAtPublishedOrBeforeArmCompletesWithoutSuspending) {
  wake_before_suspension_completes_without_suspending([] { return latch(1); }, count_down,
                                                      [](latch& l) { EXPECT_EQ(l.count(), 0); });
}

TEST(Latch, NonFinalCountDownAtPublishedLeavesTheWaiterSuspended) {
  test_scheduler s;
  latch l(2);
  latch_probe p;
  s.at(test_point::published, [&] { l.count_down(); });
  s.spawn(plain_waiter(l, p));
  s.run();
  EXPECT_EQ(l.count(), 1);
  EXPECT_EQ(p.resumed, 0);
  l.count_down();
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(p.resumed, 1);
}

TEST(Latch, StopAtPublishedOrBeforeArmCancelsWithoutSuspending) {
  for (const test_point point : before_suspension) {
    SCOPED_TRACE(static_cast<int>(point));
    latch l(1);
    stop_at_point_cancels_without_suspending(point, l, count_down);
  }
}

TEST(Latch, StopAtClaimedForWakeIsOk) {
  latch l(1);
  stop_at_claimed_for_wake(l, count_down, wait_status::ok);
}

TEST(Latch, CountDownAtClaimedForCancelDoesNotWakeTheCancelledWaiterTwice) {
  latch l(1);
  wake_at_claimed_for_cancel_goes_to_the_other_waiter(l, count_down);
  EXPECT_EQ(l.count(), 0);
}

// ---------------------------------------------------------------------------------------------
// Destroying a suspended waiter

TEST(Latch, DestroyingASuspendedWaiterUnlinksIt) {
  latch l(1);
  destroying_suspended_waiters_unlinks_them(l, count_down);
}

// ---------------------------------------------------------------------------------------------
// Plain threads and block_on

TEST(Latch, WaitBlockingReturnsOnceEveryThreadArrived) {
  constexpr int arrivals = 3;
  latch l(arrivals);
  std::array<int, arrivals> written{};  // each arriver's write happens-before the wait's return
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < written.size(); ++i) {
    threads.emplace_back([&, i] {
      written[i] = 1;
      l.count_down();
    });
  }
  l.wait_blocking();
  EXPECT_EQ(l.count(), 0);
  for (const int w : written) EXPECT_EQ(w, 1);
  for (auto& t : threads) t.join();
}

TEST(Latch, WaitTimeoutTimesOutWhileTheCountIsNotZero) {
  latch l(1);
  EXPECT_TRUE(l.wait_timeout(1ms).timed_out());
  EXPECT_TRUE(l.wait_timeout(0ms).timed_out());
  EXPECT_EQ(l.count(), 1);
  l.count_down();  // the timed-out nodes are gone: must not be touched
  EXPECT_TRUE(l.wait_timeout(0ms).ok());
}

TEST(Latch, WaitTimeoutCompletesWhenAnotherThreadArrives) {
  latch l(1);
  wait_timeout_completes_when_woken_by_another_thread(l, count_down);
}

TEST(Latch, WaitBlockingWithStopToken) {
  latch open(0);
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(open.wait_blocking(stopped.get_token()).cancelled());  // even though open

  latch l(1);
  blocking_wait_is_cancelled_by_another_thread(l);
  EXPECT_EQ(l.count(), 1);
  blocking_wait_is_woken_by_another_thread(l, count_down);
}

TEST(Latch, BlockOnWaits) {
  latch l(2);
  const auto p = block_on_waits_complete_when_woken_by_another_thread<latch_probe>(l, [](latch& open) {
    open.count_down();
    open.count_down();
  });
  EXPECT_EQ(p.count_seen, 0);
  EXPECT_EQ(l.count(), 0);
}

TEST(Latch, BlockOnWaitIsCancelledByAStopFromAnotherThread) {
  latch l(1);
  block_on_wait_is_cancelled_by_another_thread(l);
}

// ---------------------------------------------------------------------------------------------
// Stress: per round, pool tasks and plain threads wait (some cancellably, with a stop requested
// mid-round) while pool tasks and threads arrive. Invariant: no wait completes ok before the
// count reaches zero; every arrival's write happens-before every ok completion; every waiter
// finishes.

constexpr int stress_arrivers = 4;           // arriver i arrives with i + 1
constexpr std::ptrdiff_t stress_count = 10;  // 1 + 2 + 3 + 4

struct stress_round {
  latch l{stress_count};
  std::array<int, stress_arrivers> arrived{};  // written (non-atomically) before arriving
  asyncband::stop_source stop;
  wait_tally waits;
  completion finished;

  explicit stress_round(int participants) : finished(participants) {}

  void arrive(int i) {
    arrived[static_cast<std::size_t>(i)] = 1;
    l.arrive(i + 1);
  }

  void record(wait_status st) {
    waits.record(st, [this] {
      if (l.count() != 0) return false;
      for (const int a : arrived) {
        if (a != 1) return false;
      }
      return true;
    });
  }
};

task<> stress_arriver(stress_round& r, int i) {
  r.arrive(i);
  r.finished.done();
  co_return;
}

TEST(Latch, StressNoWaiterCompletesBeforeZero) {
  constexpr int pool_waiters = 4;
  constexpr int thread_waiters = 2;
  constexpr int participants = pool_waiters + thread_waiters + stress_arrivers;

  asyncband::runtime::thread_pool pool(2);
  stress_totals totals;
  const int rounds = repeat_for(300, 1s, [&](int round) {
    auto r = std::make_unique<stress_round>(participants);
    const bool cancel_this_round = round % 3 == 0;

    for (int i = 0; i < pool_waiters; ++i)
      asyncband::runtime::spawn(pool.ref(), stress_waiter(*r, r->l, i % 2 == 1));
    // Arrivers 0 and 1 are pool tasks, 2 and 3 plain threads; the waiting threads use the
    // blocking twins and block_on.
    asyncband::runtime::spawn(pool.ref(), stress_arriver(*r, 0));
    std::vector<std::thread> threads;
    threads.emplace_back([&r] {
      r->record(r->l.wait_blocking(r->stop.get_token()).status());
      r->finished.done();
    });
    asyncband::runtime::spawn(pool.ref(), stress_arriver(*r, 1));
    threads.emplace_back([&r] {
      r->record(block_on(r->l.wait(r->stop.get_token())).status());
      r->finished.done();
    });
    threads.emplace_back([&r] {
      r->arrive(2);
      r->finished.done();
    });
    threads.emplace_back([&r, cancel_this_round] {
      if (cancel_this_round) r->stop.request_stop();
      r->arrive(3);
      r->finished.done();
    });

    r->finished.wait_or_abort(30s, "latch stress");
    for (auto& t : threads) t.join();

    EXPECT_EQ(r->l.count(), 0);
    // The plain pool waiters cannot be cancelled.
    r->waits.expect_round(round, pool_waiters + thread_waiters, pool_waiters / 2, cancel_this_round);
    totals.add(r->waits);
    return !HasFailure();
  });
  totals.expect_and_record(rounds);
}

TEST(LatchLifetime, TheWaiterMayDestroyTheLatchWhileTheFinalArrivalReturns) {
  // A timed-out wait first leaves the waiters flag set, so the final arrival takes the lock.
  waiter_destroys_while_the_waker_returns(
      [] {
        auto l = std::make_unique<latch>(1);
        EXPECT_TRUE(l->wait_timeout(std::chrono::nanoseconds(0)).timed_out());
        return l;
      },
      count_down, [](latch& l) { l.wait_blocking(); });
}

// Issue 16: a plain blocked thread sleeps on the latch's broadcast word; the final arrival
// resolves it, then moves the word. A thread that sees its release in between returns at once.
TEST(LatchLifetime, AThreadReleasedFromTheBroadcastWordMayDestroyTheLatchWhileTheFinalArrivalNotifies) {
  released_thread_destroys_while_the_waker_notifies([] { return std::make_unique<latch>(1); }, count_down,
                                                    [](latch& l) { l.wait_blocking(); });
}

// Issue 11: a coroutine without a scheduler, resumed inline inside the final arrival, destroys
// the latch before arrive() returns. The arrival must not hold a pin of its own while it resumes
// waiters: the latch's destructor waits for pins, and this one would be further up its stack
// (it hung forever before the fix).
task<void> wait_then_destroy(std::unique_ptr<latch>& owner, probe& p) {
  ++p.started;
  co_await owner->wait();
  p.finish(wait_status::ok);
  owner.reset();
}

TEST(LatchLifetime, AWaiterResumedInlineByTheFinalArrivalMayDestroyTheLatch) {
  for (const std::ptrdiff_t n : {1, 3}) {  // count_down(), and arrive(n) reaching zero at once
    auto owner = std::make_unique<latch>(n);
    probe seen;
    task<void> waiter = wait_then_destroy(owner, seen);
    waiter.handle().resume();  // no scheduler: the final arrival resumes it inline
    ASSERT_EQ(seen.resumed, 0);
    latch* const raw = owner.get();
    if (n == 1) {
      raw->count_down();
    } else {
      raw->arrive(n);
    }
    EXPECT_EQ(seen.resumed, 1);
    EXPECT_EQ(owner, nullptr);
    EXPECT_TRUE(waiter.done());
  }
}

// ---------------------------------------------------------------------------------------------
// Misuse: destroyed with a pending wait (a debug-build assertion names the primitive)

TEST(LatchDeathTest, DestroyingALatchWithAPendingWaitAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto wait_on = [](latch& l) -> task<void> { co_await l.wait(); };
  EXPECT_DEATH(destroy_while_waiting(std::make_unique<latch>(1), wait_on),
               "asyncband::latch destroyed with waiters");
}

}  // namespace
