// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::auto_reset_event: permits (at most one stored), notify_one / notify_all,
// FIFO order, waits from tasks / threads / block_on, cancellation (including the permit passed
// on by a waiter cancelled after it was handed one), deterministic races at the waiter core's
// test points, destruction of a suspended waiter, and a bounded multi-threaded stress test.
#include "asyncband/auto_reset_event.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
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
using asyncband::auto_reset_event;
using asyncband::block_on;

const auto notify_one = [](auto_reset_event& ev) { ev.notify_one(); };

/// `p`'s waiter started and still waits, with no permit stored: the next notify_one wakes it.
void expect_waiting_until_the_next_notify_one(test_scheduler& s, auto_reset_event& ev, const probe& p) {
  EXPECT_EQ(p.started, 1);
  EXPECT_EQ(p.resumed, 0);
  EXPECT_FALSE(ev.is_set());
  ev.notify_one();
  s.run();
  EXPECT_EQ(p.resumed, 1);
}

// ---------------------------------------------------------------------------------------------
// Basic contract

TEST(AutoResetEvent, InitialState) {
  EXPECT_FALSE(auto_reset_event{}.is_set());
  EXPECT_FALSE(auto_reset_event{false}.is_set());
  auto_reset_event ev(true);
  EXPECT_TRUE(ev.is_set());
  EXPECT_TRUE(ev.try_wait());
  EXPECT_FALSE(ev.is_set());
  EXPECT_FALSE(ev.try_wait());
}

TEST(AutoResetEvent, NotifyOneStoresAtMostOnePermit) {
  auto_reset_event ev;
  ev.notify_one();
  ev.notify_one();
  ev.notify_one();
  EXPECT_TRUE(ev.is_set());
  EXPECT_TRUE(ev.try_wait());
  EXPECT_FALSE(ev.try_wait());  // the extra notifications were not counted

  test_scheduler s;
  ev.notify_one();
  ev.notify_one();
  probe first;
  probe second;
  s.spawn(plain_waiter(ev, first));
  s.spawn(plain_waiter(ev, second));
  EXPECT_EQ(s.run(), 2U);
  EXPECT_EQ(first.resumed, 1);                              // consumed the stored permit without suspending
  expect_waiting_until_the_next_notify_one(s, ev, second);  // nothing left for it
  EXPECT_FALSE(ev.is_set());                                // handed over, not stored
}

TEST(AutoResetEvent, NotifyAllWakesEveryCurrentWaiterAndStoresNothing) {
  test_scheduler s;
  auto_reset_event ev;
  ev.notify_all();  // nobody waits: nothing stored
  EXPECT_FALSE(ev.is_set());

  std::array<probe, 3> probes;
  asyncband::stop_source src;
  spawn_alternating_waiters(s, ev, probes, src.get_token());
  s.run();

  ev.notify_all();
  EXPECT_EQ(s.ready_count(), probes.size());  // all posted, none run inline
  EXPECT_FALSE(ev.is_set());
  s.run();
  for (const auto& p : probes) {
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::ok);
  }

  probe later;
  s.spawn(plain_waiter(ev, later));
  s.run();
  expect_waiting_until_the_next_notify_one(s, ev, later);  // notify_all left no permit behind
}

TEST(AutoResetEvent, NotifyOneWakesWaitersInFifoOrder) {
  test_scheduler s;
  auto_reset_event ev;
  std::vector<int> order;
  std::array<probe, 4> probes;
  asyncband::stop_source src;
  for (int i = 0; i < 4; ++i) {
    auto& p = probes[static_cast<std::size_t>(i)];
    p.id = i;
    p.order = &order;
  }
  spawn_alternating_waiters(s, ev, probes, src.get_token());
  s.run();
  ASSERT_TRUE(order.empty());

  for (int i = 0; i < 4; ++i) {
    ev.notify_one();
    EXPECT_EQ(s.ready_count(), 1U);  // exactly one waiter per permit
    s.run();
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(ev.is_set());
  for (const auto& p : probes) EXPECT_EQ(p.resumed, 1);
}

TEST(AutoResetEvent, NewWaitDoesNotBargeAheadOfAWokenWaiter) {
  test_scheduler s;
  auto_reset_event ev;
  probe first;
  probe newcomer;
  s.spawn(plain_waiter(ev, first));
  s.run();

  ev.notify_one();                      // handed to `first`; its resumption is queued
  s.spawn(plain_waiter(ev, newcomer));  // starts after `first` resumes (FIFO scheduler)
  s.run();
  EXPECT_EQ(first.resumed, 1);
  expect_waiting_until_the_next_notify_one(s, ev, newcomer);
}

// ---------------------------------------------------------------------------------------------
// Cancellation

TEST(AutoResetEvent, AlreadyStoppedTokenCancelsAtOnceWithoutConsumingThePermit) {
  already_stopped_token_cancels_at_once_set_or_not<auto_reset_event>();
}

TEST(AutoResetEvent, StopWhileSuspendedCancelsAndResumesOnce) {
  auto_reset_event ev;
  suspended_waiters waiters(ev, false);
  auto& [s, src, p, unused] = waiters;
  src.request_stop();
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_EQ(p.resumed, 0);
  s.run();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::cancelled);

  ev.notify_one();  // the cancelled waiter is no longer queued: the permit is stored
  EXPECT_TRUE(ev.is_set());
  EXPECT_EQ(s.run(), 0U);
  EXPECT_EQ(p.resumed, 1);
}

TEST(AutoResetEvent, StopAfterResumptionIsOk) {
  auto_reset_event ev;
  suspended_waiters waiters(ev, false);
  auto& [s, src, p, unused] = waiters;
  ev.notify_one();
  s.run();
  src.request_stop();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
  EXPECT_FALSE(ev.is_set());
}

TEST(AutoResetEvent, PermitOfAWaiterCancelledBeforeResumingGoesToTheNextWaiter) {
  auto_reset_event ev;
  suspended_waiters waiters(ev, true);
  auto& [s, stop_a, a, b] = waiters;

  ev.notify_one();  // hands the permit to A; A's resumption is queued
  ASSERT_EQ(s.ready_count(), 1U);
  stop_a.request_stop();  // observed before A resumes
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::cancelled);
  EXPECT_EQ(b.resumed, 1);  // received the permit A passed on
  EXPECT_EQ(b.status, wait_status::ok);
  EXPECT_FALSE(ev.is_set());
}

TEST(AutoResetEvent, PermitOfAWaiterCancelledBeforeResumingIsStoredWhenNobodyElseWaits) {
  auto_reset_event ev;
  suspended_waiters waiters(ev, false);
  auto& [s, stop_a, a, unused] = waiters;

  ev.notify_one();
  stop_a.request_stop();
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::cancelled);
  EXPECT_TRUE(ev.is_set());  // not lost
  EXPECT_TRUE(ev.try_wait());
}

TEST(AutoResetEvent, NotifyAllWakeUpIsNotPassedOnByALateCancellation) {
  auto_reset_event ev;
  suspended_waiters waiters(ev, false);  // `b` waits later
  auto& [s, stop_a, a, b] = waiters;

  ev.notify_all();
  stop_a.request_stop();  // before A resumes: cancellation commits, nothing to pass on
  s.spawn(plain_waiter(ev, b));
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::cancelled);
  expect_waiting_until_the_next_notify_one(s, ev, b);
}

// ---------------------------------------------------------------------------------------------
// Deterministic races at the waiter core's interleaving points

TEST(AutoResetEvent, NotifyOneAtPublishedOrBeforeArmCompletesWithoutSuspending) {
  wake_before_suspension_completes_without_suspending(
      [] { return auto_reset_event(); }, notify_one,
      [](auto_reset_event& ev) { EXPECT_FALSE(ev.is_set()); });  // the waiter took the permit
}

TEST(AutoResetEvent, NotifyAllAtPublishedCompletesWithoutSuspending) {
  test_scheduler s;
  auto_reset_event ev;
  probe p;
  s.at(test_point::published, [&] { ev.notify_all(); });
  s.spawn(plain_waiter(ev, p));
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(p.resumed, 1);
  EXPECT_FALSE(ev.is_set());
}

TEST(AutoResetEvent, StopAtPublishedOrBeforeArmCancelsWithoutSuspending) {
  for (const test_point point : before_suspension) {
    SCOPED_TRACE(static_cast<int>(point));
    auto_reset_event ev;
    stop_at_point_cancels_without_suspending(point, ev, notify_one);
    EXPECT_TRUE(ev.is_set());  // nobody queued any more: stored
  }
}

// For a transferable grant, cancellation commits until the waiter resumes: a stop requested
// after notify_one claimed the waiter (but before it resumed) cancels it, and the permit is
// passed on rather than lost.
TEST(AutoResetEvent, StopAtClaimedForWakePassesThePermitOn) {
  auto_reset_event ev;
  stop_at_claimed_for_wake(ev, notify_one, wait_status::cancelled);
  EXPECT_FALSE(ev.is_set());
}

TEST(AutoResetEvent, NotifyOneAtClaimedForCancelGoesToTheNextWaiter) {
  auto_reset_event ev;
  wake_at_claimed_for_cancel_goes_to_the_other_waiter(ev, notify_one);
  EXPECT_FALSE(ev.is_set());
}

TEST(AutoResetEvent, NotifyOneAtClaimedForCancelIsStoredWhenNobodyElseWaits) {
  auto_reset_event ev;
  suspended_waiters waiters(ev, false);
  auto& [s, stop_a, a, unused] = waiters;

  s.at(test_point::claimed_for_cancel, [&] { ev.notify_one(); });
  stop_a.request_stop();
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::cancelled);
  EXPECT_TRUE(ev.is_set());
}

// ---------------------------------------------------------------------------------------------
// Destroying a suspended waiter

TEST(AutoResetEvent, DestroyingASuspendedWaiterUnlinksItAndNotifyOneGoesToTheNext) {
  test_scheduler s;
  auto_reset_event ev;
  asyncband::stop_source src;
  probe doomed;
  probe next;
  auto t = stoppable_waiter(ev, src.get_token(), doomed);
  start_on(s, t);
  s.spawn(plain_waiter(ev, next));
  s.run();
  ASSERT_EQ(doomed.started, 1);

  t = {};  // destroys the suspended frame (it was at the head of the queue)
  src.request_stop();
  EXPECT_EQ(s.ready_count(), 0U);
  ev.notify_one();
  s.run();
  EXPECT_EQ(doomed.resumed, 0);
  EXPECT_EQ(next.resumed, 1);
  EXPECT_FALSE(ev.is_set());
}

TEST(AutoResetEvent, DestroyingSuspendedWaitersAnywhereInTheQueueUnlinksThem) {
  auto_reset_event ev;
  destroying_suspended_waiters_unlinks_them(ev, [](auto_reset_event& e) { e.notify_all(); });
  EXPECT_FALSE(ev.is_set());
}

TEST(AutoResetEvent, DestroyingTheOnlySuspendedWaiterLeavesNotifyOneToStoreThePermit) {
  test_scheduler s;
  auto_reset_event ev;
  probe doomed;
  auto t = plain_waiter(ev, doomed);
  start_on(s, t);
  s.run();

  t = {};
  ev.notify_one();
  EXPECT_TRUE(ev.is_set());
  ev.notify_all();
  EXPECT_EQ(s.run(), 0U);
  EXPECT_EQ(doomed.resumed, 0);
}

// ---------------------------------------------------------------------------------------------
// Plain threads and block_on

TEST(AutoResetEvent, WaitBlockingConsumesOnePermitEach) {
  auto_reset_event ev;
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&] {
      ev.wait_blocking();
      finished.fetch_add(1);
    });
  }
  // Whether or not a thread already waits, each permit releases exactly one thread (handed over,
  // or stored and consumed by the next wait). Notify again only once it did, so that no
  // notification is absorbed by a permit still stored.
  for (int i = 1; i <= 3; ++i) {
    ev.notify_one();
    while (finished.load() < i) std::this_thread::yield();
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(finished.load(), 3);
  EXPECT_FALSE(ev.is_set());
}

TEST(AutoResetEvent, WaitTimeoutTimesOutAndLeavesNoTrace) {
  auto_reset_event ev;
  EXPECT_TRUE(ev.wait_timeout(1ms).timed_out());
  EXPECT_TRUE(ev.wait_timeout(0ms).timed_out());
  ev.notify_one();  // the timed-out nodes are gone: stored
  EXPECT_TRUE(ev.is_set());
  EXPECT_TRUE(ev.wait_timeout(0ms).ok());
  EXPECT_FALSE(ev.is_set());
}

TEST(AutoResetEvent, WaitTimeoutCompletesWhenNotifiedByAnotherThread) {
  auto_reset_event ev;
  wait_timeout_completes_when_woken_by_another_thread(ev, notify_one);
  EXPECT_FALSE(ev.is_set());
}

TEST(AutoResetEvent, WaitBlockingWithStopToken) {
  auto_reset_event ev(true);
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(ev.wait_blocking(stopped.get_token()).cancelled());
  EXPECT_TRUE(ev.is_set());  // the stored permit was not touched
  EXPECT_TRUE(ev.wait_blocking(asyncband::stop_source{}.get_token()).ok());
  EXPECT_FALSE(ev.is_set());

  blocking_wait_is_cancelled_by_another_thread(ev);
  EXPECT_FALSE(ev.is_set());
  blocking_wait_is_woken_by_another_thread(ev, notify_one);
  EXPECT_FALSE(ev.is_set());
}

TEST(AutoResetEvent, BlockOnWaits) {
  auto_reset_event ev;
  asyncband::stop_source src;
  src.request_stop();
  EXPECT_TRUE(block_on(ev.wait(src.get_token())).cancelled());

  ev.notify_one();
  block_on(ev.wait());  // consumes the stored permit
  EXPECT_FALSE(ev.is_set());

  std::optional<wait_status> status;
  std::thread waiter([&] { status = block_on(ev.wait(asyncband::stop_token{})).status(); });
  ev.notify_one();
  waiter.join();
  EXPECT_EQ(status, wait_status::ok);

  probe p;
  std::thread task_waiter([&] { block_on(plain_waiter(ev, p)); });
  ev.notify_one();
  task_waiter.join();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_FALSE(ev.is_set());
}

TEST(AutoResetEvent, BlockOnWaitIsCancelledByAStopFromAnotherThread) {
  auto_reset_event ev;
  block_on_wait_is_cancelled_by_another_thread(ev);
}

// ---------------------------------------------------------------------------------------------
// Stress. One producer hands out permits one at a time (it waits for each to be acknowledged,
// so no notification is absorbed by an already stored permit) and often requests stop on the
// consumers' current tokens right after notifying, racing the handed-over permit with a late
// cancellation. Consumers are pool tasks and plain threads mixing every wait form. Invariants:
// ok waits == permits handed out, no permit is left stored, and at the end every remaining
// waiter is woken by notify_all.

struct stress_state {
  auto_reset_event ev;
  std::mutex mutex;              // guards epoch and done
  asyncband::stop_source epoch;  // consumers' current stop source; replaced when stopped
  bool done = false;
  std::atomic<bool> stopping{false};  // set once every permit has been handed out and acked
  std::counting_semaphore<> acks{0};
  int payload = 0;  // written by the producer before notify_one, read after an ok wait
  int expected_payload = 0;
  std::atomic<int> ok{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> timeouts{0};
  std::atomic<int> bad{0};
  completion exited;

  explicit stress_state(int consumers) : exited(consumers) {}

  // The consumer's token for its next wait, or nothing once the test is shutting down.
  std::optional<asyncband::stop_token> next_token() {
    const std::lock_guard lock(mutex);
    if (done) return std::nullopt;
    return epoch.get_token();
  }

  void cancel_current_waits() {
    asyncband::stop_source old;
    {
      const std::lock_guard lock(mutex);
      old = std::exchange(epoch, asyncband::stop_source{});
    }
    old.request_stop();
  }

  void record(wait_status st) {
    switch (st) {
      case wait_status::ok:
        if (stopping.load()) return;  // a final notify_all wake-up, not a permit
        if (payload != expected_payload) bad.fetch_add(1);
        ok.fetch_add(1);
        acks.release();
        return;
      case wait_status::cancelled:
        cancelled.fetch_add(1);
        return;
      case wait_status::timeout:
        timeouts.fetch_add(1);
        return;
      case wait_status::closed:
        bad.fetch_add(1);
        return;
    }
  }
};

task<> stress_consumer(stress_state& st, int id) {
  for (int i = 0;; ++i) {
    const auto token = st.next_token();
    if (!token) break;
    if ((i + id) % 3 == 0) {
      co_await st.ev.wait();
      st.record(wait_status::ok);
    } else {
      st.record((co_await st.ev.wait(*token)).status());
    }
  }
  st.exited.done();
}

void stress_thread_consumer(stress_state& st, int id) {
  for (int i = 0;; ++i) {
    const auto token = st.next_token();
    if (!token) break;
    switch ((i + id) % 4) {
      case 0:
        st.ev.wait_blocking();
        st.record(wait_status::ok);
        break;
      case 1:
        st.record(st.ev.wait_timeout(1ms).status());
        break;
      case 2:
        st.record(block_on(st.ev.wait(*token)).status());
        break;
      default:
        st.record(st.ev.wait_blocking(*token).status());
        break;
    }
  }
  st.exited.done();
}

TEST(AutoResetEvent, StressEveryPermitIsConsumedExactlyOnce) {
  constexpr int max_permits = 3000;
  constexpr int pool_consumers = 3;
  constexpr int thread_consumers = 2;

  stress_state st(pool_consumers + thread_consumers);
  asyncband::runtime::thread_pool pool(2);  // destroyed before `st`
  for (int i = 0; i < pool_consumers; ++i) asyncband::runtime::spawn(pool.ref(), stress_consumer(st, i));
  std::vector<std::thread> threads;
  for (int i = 0; i < thread_consumers; ++i) threads.emplace_back(stress_thread_consumer, std::ref(st), i);

  bool lost = false;
  const int permits = repeat_for(max_permits, 1s, [&](int i) {
    const int permit = i + 1;
    st.payload = st.expected_payload = permit;
    st.ev.notify_one();
    if (permit % 2 == 0) st.cancel_current_waits();  // races the handed-over permit
    lost = !st.acks.try_acquire_for(10s);
    return !lost;
  });
  EXPECT_FALSE(lost) << "permit " << permits << " was never consumed";
  EXPECT_EQ(st.ok.load(), permits);
  EXPECT_FALSE(st.ev.is_set());  // every permit was handed over or consumed, none left behind
  EXPECT_EQ(st.bad.load(), 0);

  // Shut down: stop cancellable waits, then wake the non-cancellable ones until all have left.
  st.stopping = true;
  {
    const std::lock_guard lock(st.mutex);
    st.done = true;
  }
  st.cancel_current_waits();
  const auto hard_limit = std::chrono::steady_clock::now() + 30s;
  while (!st.exited.wait_for(1ms)) {
    st.ev.notify_all();
    if (std::chrono::steady_clock::now() > hard_limit) {
      std::fprintf(stderr, "auto_reset_event stress: consumers never finished\n");
      std::abort();
    }
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(st.ok.load(), permits);
  RecordProperty("permits", permits);
  RecordProperty("cancelled", st.cancelled.load());
  RecordProperty("timeouts", st.timeouts.load());
}

TEST(AutoResetEventLifetime, TheWaiterMayDestroyTheEventWhileNotifyReturns) {
  // With nobody waiting, notify_one stores the permit with one CAS, its last access.
  waiter_destroys_while_the_waker_returns([] { return std::make_unique<auto_reset_event>(); }, notify_one,
                                          [](auto_reset_event& ev) { ev.wait_blocking(); },
                                          asyncband_test::waker_path::last_access);
}

// ---------------------------------------------------------------------------------------------
// Misuse: destroyed with a pending wait (a debug-build assertion names the primitive)

TEST(AutoResetEventDeathTest, DestroyingTheEventWithAPendingWaitAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto wait_on = [](auto_reset_event& ev) -> task<void> { co_await ev.wait(); };
  EXPECT_DEATH(destroy_while_waiting(std::make_unique<auto_reset_event>(), wait_on),
               "asyncband::auto_reset_event destroyed with waiters");
}

}  // namespace
