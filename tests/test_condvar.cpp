// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::condvar: a wait returns holding the mutex; no lost wake-up (the waiter
// registers before it unlocks); notifications are not stored; FIFO notify_one and notify_all;
// wait_while (at once, looping, a throwing predicate); cancellation before, during and after each
// stage of a wait (the notification, then the re-lock), with the consumed notification forwarded;
// destruction of a suspended waiter in each stage; the blocking twins; a producer/consumer queue;
// the chain of wait_while continuations that wake_batch::defer_nested keeps off the stack; and a
// bounded multi-threaded stress test.
#include "asyncband/condvar.hpp"

#include <gtest/gtest.h>
#include <pthread.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <latch>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/mutex.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/stop_token.hpp"
#include "support/destroyed_with_waiters.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"
#include "support/thread_hook.hpp"

namespace {

using namespace asyncband_test;
using asyncband::condvar;
using asyncband::result;
using asyncband::runtime::thread_pool;
using int_mutex = asyncband::mutex<int>;
using guard_t = asyncband::mutex_guard<int>;

// ---------------------------------------------------------------------------------------------
// Helpers

/// The four coroutine wait forms (and, in the blocking tests, their twins).
enum class wait_form { wait, wait_stoppable, wait_while, wait_while_stoppable };
constexpr wait_form all_forms[] = {wait_form::wait, wait_form::wait_stoppable, wait_form::wait_while,
                                   wait_form::wait_while_stoppable};
constexpr wait_form stoppable_forms[] = {wait_form::wait_stoppable, wait_form::wait_while_stoppable};

const char* name(wait_form f) {
  switch (f) {
    case wait_form::wait:
      return "wait";
    case wait_form::wait_stoppable:
      return "wait(stop)";
    case wait_form::wait_while:
      return "wait_while";
    case wait_form::wait_while_stoppable:
      return "wait_while(stop)";
  }
  return "?";
}

/// What a condvar waiter reports beyond the probe.
struct cv_probe : probe {
  int until = 1;             ///< the wait_while forms wait while the protected value is below it
  int checks = 0;            ///< how many times the wait_while predicate ran
  bool held = false;         ///< after an ok wait: the guard owns the lock and the mutex is locked
  int value = -1;            ///< after an ok wait: the protected value seen under the mutex
  bool locked_after = true;  ///< after a cancelled wait (or a rethrown exception): the mutex was locked
  bool threw = false;        ///< the wait rethrew the predicate's exception
};

void record(cv_probe& p, const int_mutex& m, result<guard_t>& r) {
  if (r.ok()) {
    p.held = r->owns_lock() && m.is_locked();
    p.value = **r;
  } else {
    p.locked_after = m.is_locked();
  }
  p.finish(r.status());
}

/// Locks with `co_await lock()`, waits on `cv` in form `f` (wait_while with `keep_waiting`, the
/// stoppable forms with `stop`), hands the outcome to `record`, and unlocks when it ends. The
/// waiter of every guard kind.
template <class Probe, class Lock, class KeepWaiting, class Record>
task<void> waiter_in_form(condvar& cv, Lock lock, wait_form f, asyncband::stop_token stop, Probe& p,
                          KeepWaiting keep_waiting, Record record) {
  ++p.started;
  auto guard = co_await lock();
  result<decltype(guard)> r = wait_status::closed;
  switch (f) {
    case wait_form::wait:
      r = co_await cv.wait(std::move(guard));
      break;
    case wait_form::wait_stoppable:
      r = co_await cv.wait(std::move(guard), std::move(stop));
      break;
    case wait_form::wait_while:
      r = co_await cv.wait_while(std::move(guard), keep_waiting);
      break;
    case wait_form::wait_while_stoppable:
      r = co_await cv.wait_while(std::move(guard), keep_waiting, std::move(stop));
      break;
  }
  record(r);
}

/// Locks `m`, waits on `cv` in form `f` (the stoppable forms with `stop`), records the outcome in
/// `p`, and unlocks when it ends.
task<void> cv_waiter(condvar& cv, int_mutex& m, wait_form f, asyncband::stop_token stop, cv_probe& p) {
  return waiter_in_form(
      cv, [&m] { return m.lock(); }, f, std::move(stop), p,
      [&p](const int& v) {
        ++p.checks;
        return v < p.until;
      },
      [&p, &m](result<guard_t>& r) { record(p, m, r); });
}

/// The blocking twin of the form `f` on this thread; a plain form's guard is reported as ok.
template <class Guard, class KeepWaiting>
result<Guard> wait_blocking_in(wait_form f, condvar& cv, Guard guard, asyncband::stop_token stop,
                               KeepWaiting keep_waiting) {
  switch (f) {
    case wait_form::wait:
      return cv.wait_blocking(std::move(guard));
    case wait_form::wait_stoppable:
      return cv.wait_blocking(std::move(guard), std::move(stop));
    case wait_form::wait_while:
      return cv.wait_while_blocking(std::move(guard), keep_waiting);
    case wait_form::wait_while_stoppable:
      return cv.wait_while_blocking(std::move(guard), keep_waiting, std::move(stop));
  }
  return wait_status::closed;
}
result<guard_t> wait_blocking_in(wait_form f, condvar& cv, guard_t guard, asyncband::stop_token stop,
                                 int until) {
  return wait_blocking_in(f, cv, std::move(guard), std::move(stop),
                          [until](const int& v) { return v < until; });
}

/// The mutex now (it must be free).
guard_t lock_now(int_mutex& m) {
  auto g = m.try_lock();
  EXPECT_TRUE(g.has_value()) << "the mutex is held";
  return std::move(g).value();
}

/// Locks `m` once its value is `expected` (re-locking until then) and returns the guard. A waiter
/// that sets the value under the mutex and then waits is registered once this returns, since it
/// unlocks only after registering.
guard_t lock_when(int_mutex& m, int expected) {
  for (;;) {
    guard_t g = m.lock_blocking();
    if (*g == expected) return g;
    g.unlock();
    std::this_thread::yield();
  }
}

/// On a test scheduler: a condvar and its mutex, waiter `a` (form chosen by the test, its own stop
/// source) and a plain waiter `b` registered behind it, both suspended waiting for a notification.
/// The protected value is then set to 1, so that a wait_while waiter only needs a notification.
/// The tasks are owned: a test may destroy them.
struct two_waiters {
  test_scheduler s;
  int_mutex m;
  condvar cv;
  asyncband::stop_source stop_a;
  cv_probe a;
  cv_probe b;
  task<void> ta;
  task<void> tb;

  explicit two_waiters(wait_form form_a)
      : ta(cv_waiter(cv, m, form_a, stop_a.get_token(), a)),
        tb(cv_waiter(cv, m, wait_form::wait, asyncband::stop_token(), b)) {
    start_on(s, ta);
    start_on(s, tb);
    s.run();
    EXPECT_EQ(a.started + b.started, 2);
    EXPECT_EQ(a.resumed + b.resumed, 0);
    EXPECT_FALSE(m.is_locked());
    *lock_now(m) = 1;  // no notification: nobody wakes
    EXPECT_EQ(s.ready_count(), 0U);
  }

  /// `b` was woken once, and returned holding the mutex.
  void expect_b_woken() const {
    EXPECT_EQ(b.resumed, 1);
    EXPECT_EQ(b.status, wait_status::ok);
    EXPECT_TRUE(b.held);
    EXPECT_EQ(b.value, 1);
  }

  /// `b` is still registered: it was not woken, and the next notify_one reaches it.
  void expect_b_still_waiting() {
    EXPECT_EQ(b.resumed, 0);
    cv.notify_one();
    s.run();
    expect_b_woken();
  }
};

/// A thread running `body`. join() fails the test rather than hang if the thread has not finished
/// within 10 s (a lost wake-up): it then runs `rescue`, which must wake the thread, and joins.
class waiting_thread {
 public:
  template <class Body>
  explicit waiting_thread(Body body)
      : thread_([this, body]() mutable {
          body();
          done_.done();
        }) {}
  waiting_thread(const waiting_thread&) = delete;
  waiting_thread& operator=(const waiting_thread&) = delete;
  ~waiting_thread() {
    if (thread_.joinable()) thread_.join();
  }

  void join(const std::function<void()>& rescue) {
    if (!done_.wait_for(10s)) {
      ADD_FAILURE() << "a waiting thread was never woken";
      rescue();
    }
    thread_.join();
  }

 private:
  completion done_{1};
  std::thread thread_;
};

/// Sets the value to `v` and wakes every waiter: the rescue of a waiting_thread.
void set_and_notify_all(int_mutex& m, condvar& cv, int v) {
  *m.lock_blocking() = v;
  cv.notify_all();
}

/// Like thread_hook, for the n-th time this thread reaches the point.
class nth_point_hook {
 public:
  nth_point_hook(test_point p, int n, std::function<void()> action)
      : point_(p), remaining_(n), action_(std::move(action)) {
    asyncband::detail::current_test_hook = {&nth_point_hook::fire, this};
  }
  ~nth_point_hook() { asyncband::detail::current_test_hook = {}; }
  nth_point_hook(const nth_point_hook&) = delete;
  nth_point_hook& operator=(const nth_point_hook&) = delete;

 private:
  static void fire(void* self, test_point p) {
    auto& h = *static_cast<nth_point_hook*>(self);
    if (p == h.point_ && h.remaining_ > 0 && --h.remaining_ == 0) h.action_();
  }
  test_point point_;
  int remaining_;
  std::function<void()> action_;
};

// ---------------------------------------------------------------------------------------------
// Notification and re-locking

/// A waiter in form `f` is suspended with the mutex unlocked; after the value is set and
/// notify_one (made holding the mutex when `notifier_holds`) it returns holding the mutex.
void notify_one_wakes_holding_the_mutex(wait_form f, bool notifier_holds) {
  test_scheduler s;
  int_mutex m;
  condvar cv;
  asyncband::stop_source src;
  cv_probe p;
  s.spawn(cv_waiter(cv, m, f, src.get_token(), p));
  s.run();
  EXPECT_EQ(p.started, 1);
  EXPECT_EQ(p.resumed, 0);
  EXPECT_FALSE(m.is_locked()) << "a waiting waiter does not hold the mutex";
  {
    guard_t g = lock_now(m);
    *g = 1;
    if (!notifier_holds) g.unlock();
    cv.notify_one();
    EXPECT_EQ(s.ready_count(), notifier_holds ? 0U : 1U) << "the waiter resumes only with the mutex";
  }
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
  EXPECT_TRUE(p.held);
  EXPECT_EQ(p.value, 1);
  EXPECT_FALSE(m.is_locked());  // released when the waiter ended
}

TEST(Condvar, NotifyOneResumesTheWaiterHoldingTheMutex) {
  for (const wait_form f : all_forms) {
    for (const bool notifier_holds : {false, true}) {
      SCOPED_TRACE(testing::Message() << name(f) << ", notifier holds the mutex: " << notifier_holds);
      notify_one_wakes_holding_the_mutex(f, notifier_holds);
    }
  }
}

// The waiter registers before it unlocks the mutex: a notification made at that moment (here, by
// the test hook, as another thread would between the waiter's last check and its suspension)
// completes the wait without it ever suspending.
TEST(Condvar, ANotificationRightAfterRegistrationIsNotLost) {
  for (const test_point point : {test_point::published, test_point::before_arm}) {
    for (const wait_form f : {wait_form::wait, wait_form::wait_stoppable}) {
      SCOPED_TRACE(testing::Message() << name(f) << ", point " << static_cast<int>(point));
      test_scheduler s;
      int_mutex m;
      condvar cv;
      asyncband::stop_source src;
      cv_probe p;
      bool locked_at_notify = false;
      s.at(point, [&] {
        locked_at_notify = m.is_locked();
        cv.notify_one();
      });
      s.spawn(cv_waiter(cv, m, f, src.get_token(), p));
      EXPECT_EQ(s.run(), 1U) << "the waiter suspended: the notification was lost";
      EXPECT_EQ(s.pending_actions(), 0U);
      // Registration comes first, then the unlock, then the stop callback and the suspension.
      if (point == test_point::published) {
        EXPECT_TRUE(locked_at_notify) << "the waiter unlocked the mutex before registering";
      }
      EXPECT_EQ(p.resumed, 1);
      EXPECT_EQ(p.status, wait_status::ok);
      EXPECT_TRUE(p.held);
      EXPECT_FALSE(m.is_locked());
    }
  }
}

TEST(Condvar, ANotificationWithNobodyWaitingIsNotStored) {
  test_scheduler s;
  int_mutex m;
  condvar cv;
  cv.notify_one();
  cv.notify_all();
  cv_probe p;
  s.spawn(cv_waiter(cv, m, wait_form::wait, asyncband::stop_token(), p));
  s.run();
  EXPECT_EQ(p.started, 1);
  EXPECT_EQ(p.resumed, 0) << "an earlier notification was stored";
  cv.notify_one();
  s.run();
  EXPECT_EQ(p.resumed, 1);
}

/// Starts one waiter per form (in all_forms order, ids 0..3, appending to `order` when they
/// resume) and runs them until they wait; then sets the value to 1.
void start_one_waiter_per_form(test_scheduler& s, int_mutex& m, condvar& cv, std::array<cv_probe, 4>& probes,
                               std::vector<int>& order, const asyncband::stop_token& token) {
  for (std::size_t i = 0; i < probes.size(); ++i) {
    probes[i].id = static_cast<int>(i);
    probes[i].order = &order;
    s.spawn(cv_waiter(cv, m, all_forms[i], token, probes[i]));
  }
  s.run();
  *lock_now(m) = 1;
  ASSERT_TRUE(order.empty());
}

TEST(Condvar, NotifyOneWakesTheOldestWaiter) {
  test_scheduler s;
  int_mutex m;
  condvar cv;
  asyncband::stop_source src;
  std::array<cv_probe, 4> probes;
  std::vector<int> order;
  start_one_waiter_per_form(s, m, cv, probes, order, src.get_token());
  for (std::size_t i = 0; i < probes.size(); ++i) {
    cv.notify_one();
    EXPECT_EQ(s.ready_count(), 1U) << "one waiter per notify_one";
    s.run();
    EXPECT_EQ(order.size(), i + 1);
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  for (const auto& p : probes) {
    EXPECT_EQ(p.status, wait_status::ok);
    EXPECT_TRUE(p.held);
  }
}

TEST(Condvar, NotifyAllWakesEveryWaiterEachHoldingTheMutexInTurn) {
  test_scheduler s;
  int_mutex m;
  condvar cv;
  asyncband::stop_source src;
  std::array<cv_probe, 4> probes;
  std::vector<int> order;
  start_one_waiter_per_form(s, m, cv, probes, order, src.get_token());
  cv.notify_all();
  EXPECT_EQ(s.ready_count(), 1U);  // the first has the mutex; the others re-lock after it, in turn
  s.run();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  for (const auto& p : probes) {
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::ok);
    EXPECT_TRUE(p.held);
  }
  EXPECT_FALSE(m.is_locked());

  cv_probe later;  // notify_all stored nothing
  s.spawn(cv_waiter(cv, m, wait_form::wait, asyncband::stop_token(), later));
  s.run();
  EXPECT_EQ(later.resumed, 0);
  cv.notify_all();
  s.run();
  EXPECT_EQ(later.resumed, 1);
}

// ---------------------------------------------------------------------------------------------
// wait_while

TEST(CondvarWaitWhile, ReturnsAtOnceWhenThePredicateIsFalse) {
  for (const wait_form f : {wait_form::wait_while, wait_form::wait_while_stoppable}) {
    SCOPED_TRACE(name(f));
    test_scheduler s;
    int_mutex m(1);
    condvar cv;
    asyncband::stop_source src;
    cv_probe p;
    s.spawn(cv_waiter(cv, m, f, src.get_token(), p));
    EXPECT_EQ(s.run(), 1U) << "suspended although the predicate was false";
    EXPECT_EQ(p.checks, 1);
    EXPECT_EQ(p.status, wait_status::ok);
    EXPECT_TRUE(p.held);
    EXPECT_EQ(p.value, 1);
  }
}

// Each notification re-checks the predicate under the mutex (on the notifying thread, without
// resuming the coroutine) and, while it holds, registers again: the next notify_one reaches it.
TEST(CondvarWaitWhile, WaitsUntilThePredicateIsFalse) {
  for (const wait_form f : {wait_form::wait_while, wait_form::wait_while_stoppable}) {
    SCOPED_TRACE(name(f));
    test_scheduler s;
    int_mutex m;
    condvar cv;
    asyncband::stop_source src;
    cv_probe p;
    p.until = 3;
    s.spawn(cv_waiter(cv, m, f, src.get_token(), p));
    s.run();
    EXPECT_EQ(p.checks, 1);
    int expected_checks = 1;
    for (const int value : {1, 1, 2, 3}) {  // the second notification changes nothing
      {
        guard_t g = lock_now(m);
        *g = value;
        cv.notify_one();
      }
      EXPECT_EQ(p.checks, ++expected_checks);
      if (value < 3) {
        EXPECT_EQ(s.ready_count(), 0U);
        EXPECT_FALSE(m.is_locked()) << "waiting again, the waiter holds the mutex";
      }
    }
    s.run();
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::ok);
    EXPECT_TRUE(p.held);
    EXPECT_EQ(p.value, 3);
  }
}

/// Waits with wait_while (with a stop token when `stoppable`) whose predicate keeps waiting and
/// throws on its `throw_at`-th call; records whether the wait rethrew and the mutex was locked in
/// the handler.
task<void> throwing_predicate_waiter(condvar& cv, int_mutex& m, bool stoppable, int throw_at, cv_probe& p) {
  ++p.started;
  guard_t guard = co_await m.lock();
  const auto keep_waiting = [&p, throw_at](const int& /*unused*/) -> bool {
    if (++p.checks == throw_at) throw std::runtime_error("predicate");
    return true;
  };
  try {
    if (stoppable) {
      [[maybe_unused]] auto r =
          co_await cv.wait_while(std::move(guard), keep_waiting, asyncband::stop_token());
    } else {
      [[maybe_unused]] auto g = co_await cv.wait_while(std::move(guard), keep_waiting);
    }
    p.finish(wait_status::ok);  // not reached: the predicate never lets it return
  } catch (const std::runtime_error&) {
    p.threw = true;
    p.locked_after = m.is_locked();
  }
}

TEST(CondvarWaitWhile, RethrowsThePredicatesExceptionWithTheMutexUnlocked) {
  for (const bool stoppable : {false, true}) {
    for (const int throw_at : {1, 2}) {  // the first check, in the coroutine; a re-check, on the notifier
      SCOPED_TRACE(testing::Message() << "stoppable " << stoppable << ", throws at check " << throw_at);
      test_scheduler s;
      int_mutex m;
      condvar cv;
      cv_probe p;
      s.spawn(throwing_predicate_waiter(cv, m, stoppable, throw_at, p));
      s.run();
      if (throw_at == 2) {
        EXPECT_FALSE(p.threw);
        cv.notify_one();
        s.run();
      }
      EXPECT_TRUE(p.threw);
      EXPECT_EQ(p.resumed, 0);
      EXPECT_EQ(p.checks, throw_at);
      EXPECT_FALSE(p.locked_after) << "the mutex was still locked when the exception arrived";
      EXPECT_FALSE(m.is_locked());
      cv.notify_one();  // the waiter is not registered any more
      EXPECT_EQ(s.run(), 0U);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Cancellation

TEST(CondvarCancellation, AStopAlreadyRequestedCancelsAtOnceWithoutTheMutex) {
  for (const wait_form f : stoppable_forms) {
    SCOPED_TRACE(name(f));
    test_scheduler s;
    int_mutex m;
    condvar cv;
    asyncband::stop_source src;
    src.request_stop();
    cv_probe p;
    s.spawn(cv_waiter(cv, m, f, src.get_token(), p));
    EXPECT_EQ(s.run(), 1U);
    EXPECT_EQ(p.status, wait_status::cancelled);
    EXPECT_FALSE(p.locked_after);
    EXPECT_FALSE(m.is_locked());

    cv_probe later;  // the cancelled wait never registered: notify_one reaches the next waiter
    s.spawn(cv_waiter(cv, m, wait_form::wait, asyncband::stop_token(), later));
    s.run();
    cv.notify_one();
    s.run();
    EXPECT_EQ(later.resumed, 1);
    EXPECT_EQ(p.resumed, 1);
  }
}

TEST(CondvarCancellation, StopWhileWaitingForTheNotificationCancels) {
  for (const wait_form f : stoppable_forms) {
    SCOPED_TRACE(name(f));
    two_waiters w(f);
    w.stop_a.request_stop();
    EXPECT_EQ(w.s.ready_count(), 1U);  // posted to its scheduler, not resumed inline
    w.s.run();
    EXPECT_EQ(w.a.resumed, 1);
    EXPECT_EQ(w.a.status, wait_status::cancelled);
    EXPECT_FALSE(w.a.locked_after);
    w.expect_b_still_waiting();  // `a` is unlinked: the notification goes to `b`
    EXPECT_EQ(w.a.resumed, 1);
  }
}

// `a` was notified and waits to re-lock the mutex, which the test holds. A stop then cancels the
// re-lock: `a` ends cancelled without the mutex, and passes the notification it consumed to `b`.
TEST(CondvarCancellation, StopWhileReLockingCancelsAndForwardsTheNotification) {
  for (const wait_form f : stoppable_forms) {
    SCOPED_TRACE(name(f));
    two_waiters w(f);
    guard_t held = lock_now(w.m);
    w.cv.notify_one();
    EXPECT_EQ(w.s.ready_count(), 0U);  // `a` re-locks
    w.stop_a.request_stop();
    EXPECT_EQ(w.s.ready_count(), 1U);
    w.s.run();
    EXPECT_EQ(w.a.resumed, 1);
    EXPECT_EQ(w.a.status, wait_status::cancelled);
    EXPECT_EQ(w.b.resumed, 0);  // notified, it now waits for the mutex
    held.unlock();
    w.s.run();
    w.expect_b_woken();
    EXPECT_FALSE(w.m.is_locked());
  }
}

// The test's unlock hands the mutex to `a`'s re-lock, and the stop comes while that hand-off is
// claimed but not yet delivered: `a` passes the mutex on, ends cancelled, and forwards its
// notification to `b`.
TEST(CondvarCancellation, StopWhenTheMutexIsHandedOverPassesTheMutexAndTheNotificationOn) {
  for (const wait_form f : stoppable_forms) {
    SCOPED_TRACE(name(f));
    two_waiters w(f);
    guard_t held = lock_now(w.m);
    w.cv.notify_one();
    w.s.at(test_point::claimed_for_wake, [&w] { w.stop_a.request_stop(); });
    held.unlock();
    EXPECT_EQ(w.s.pending_actions(), 0U);
    w.s.run();
    EXPECT_EQ(w.a.resumed, 1);
    EXPECT_EQ(w.a.status, wait_status::cancelled);
    w.expect_b_woken();
    EXPECT_FALSE(w.m.is_locked());
  }
}

// notify_one claimed `a` but has not delivered the notification when the stop comes: the stop
// callback finds nothing to unlink; `a` observes the stop when the notification arrives, ends
// cancelled, and forwards it to `b`.
TEST(CondvarCancellation, ANotificationDeliveredAfterTheStopIsForwarded) {
  for (const wait_form f : stoppable_forms) {
    SCOPED_TRACE(name(f));
    two_waiters w(f);
    w.s.at(test_point::claimed_for_wake, [&w] { w.stop_a.request_stop(); });
    w.cv.notify_one();
    EXPECT_EQ(w.s.pending_actions(), 0U);
    EXPECT_EQ(w.s.ready_count(), 2U);  // one resumption each
    w.s.run();
    EXPECT_EQ(w.a.resumed, 1);
    EXPECT_EQ(w.a.status, wait_status::cancelled);
    EXPECT_FALSE(w.a.locked_after);
    w.expect_b_woken();
  }
}

// Both stages are over (notified, mutex re-locked) and the coroutine's resumption is queued when
// the stop comes: too late, the wait reports ok with the mutex held, and nothing is forwarded.
// (Unlike a plain mutex lock(stop), whose hand-off commits only when the coroutine resumes.)
TEST(CondvarCancellation, AStopAfterBothStagesIsTooLate) {
  for (const wait_form f : stoppable_forms) {
    SCOPED_TRACE(name(f));
    two_waiters w(f);
    w.cv.notify_one();
    EXPECT_EQ(w.s.ready_count(), 1U);
    w.stop_a.request_stop();
    w.s.run();
    EXPECT_EQ(w.a.resumed, 1);
    EXPECT_EQ(w.a.status, wait_status::ok);
    EXPECT_TRUE(w.a.held);
    w.expect_b_still_waiting();
  }
}

// ---------------------------------------------------------------------------------------------
// Destroying a suspended waiter

TEST(CondvarDestroy, AWaiterDestroyedWhileWaitingForTheNotificationIsUnlinked) {
  for (const wait_form f : all_forms) {
    SCOPED_TRACE(name(f));
    two_waiters w(f);
    w.ta = {};
    w.stop_a.request_stop();  // its stop callback went with the frame
    EXPECT_EQ(w.s.ready_count(), 0U);
    w.expect_b_still_waiting();  // notify_one would touch freed memory if `a` were still linked
    EXPECT_EQ(w.a.resumed, 0);
  }
}

TEST(CondvarDestroy, AWaiterDestroyedWhileReLockingIsUnlinkedAndForwardsTheNotification) {
  for (const wait_form f : all_forms) {
    SCOPED_TRACE(name(f));
    two_waiters w(f);
    guard_t held = lock_now(w.m);
    w.cv.notify_one();  // `a` waits for the mutex
    w.ta = {};
    held.unlock();  // would hand the mutex to freed memory if `a`'s re-lock were still queued
    w.s.run();
    EXPECT_EQ(w.a.resumed, 0);
    w.expect_b_woken();
    EXPECT_FALSE(w.m.is_locked());
  }
}

/// `wake` runs on another thread and stops while it holds `a`'s node claimed (not yet resolved);
/// this thread then destroys `a`. The destructor must wait for that resolver (test point
/// awaiting_resolver) and pass on what `a` consumed: `b` is woken, and nothing stays locked.
void destroy_a_while_another_thread_holds_it_claimed(two_waiters& w, const std::function<void()>& wake) {
  std::latch claimed(1);
  std::atomic<bool> go{false};
  std::thread waker([&] {
    const thread_hook hook(test_point::claimed_for_wake, [&] {
      claimed.count_down();
      while (!go.load()) std::this_thread::yield();
    });
    wake();
  });
  claimed.wait();
  w.s.at(test_point::awaiting_resolver, [&go] { go.store(true); });
  w.ta = {};
  EXPECT_EQ(w.s.pending_actions(), 0U) << "the frame was destroyed without waiting for its resolver";
  go.store(true);
  waker.join();
  w.s.run();
  EXPECT_EQ(w.a.resumed, 0);
  w.expect_b_woken();
  EXPECT_FALSE(w.m.is_locked());
}

TEST(CondvarDestroy, AWaiterDestroyedWhileItsNotificationIsClaimedForwardsIt) {
  for (const wait_form f : all_forms) {
    SCOPED_TRACE(name(f));
    two_waiters w(f);
    destroy_a_while_another_thread_holds_it_claimed(w, [&w] { w.cv.notify_one(); });
  }
}

TEST(CondvarDestroy, AWaiterDestroyedWhileTheMutexIsHandedToItPassesBothOn) {
  for (const wait_form f : all_forms) {
    SCOPED_TRACE(name(f));
    two_waiters w(f);
    guard_t held = lock_now(w.m);
    w.cv.notify_one();  // `a` waits for the mutex
    destroy_a_while_another_thread_holds_it_claimed(w, [&held] { held.unlock(); });
  }
}

/// Waits once on `cv`, then destroys `victim`.
task<void> destroy_when_woken(condvar& cv, int_mutex& m, task<void>& victim, cv_probe& p) {
  guard_t g = co_await m.lock();
  g = co_await cv.wait(std::move(g));
  victim = {};
  p.finish(wait_status::ok);
}

// notify_all claims `killer`, `a` and `c` into one batch. `killer` has no scheduler: it resumes
// inline, further down the notify_all, and destroys `a`, whose node is still in that batch. The
// destructor must withdraw it (waiting for the resolver would wait for itself).
TEST(CondvarDestroy, AWaiterResumedInlineMayDestroyALaterMemberOfTheSameNotifyAll) {
  test_scheduler s;
  int_mutex m;
  condvar cv;
  cv_probe killer, a, c;
  auto ta = cv_waiter(cv, m, wait_form::wait, asyncband::stop_token(), a);
  auto tkiller = destroy_when_woken(cv, m, ta, killer);
  auto tc = cv_waiter(cv, m, wait_form::wait, asyncband::stop_token(), c);
  tkiller.handle().resume();  // no scheduler: every wake-up resumes it inline
  start_on(s, ta);
  start_on(s, tc);
  s.run();
  cv.notify_all();
  EXPECT_EQ(killer.resumed, 1);
  s.run();
  EXPECT_EQ(a.started, 1);
  EXPECT_EQ(a.resumed, 0);
  EXPECT_EQ(c.resumed, 1);
  EXPECT_TRUE(c.held);
  EXPECT_FALSE(m.is_locked());
}

// ---------------------------------------------------------------------------------------------
// The blocking twins

/// A thread locks, sets the value to 1 and waits in form `f` (wait_while forms: while the value
/// is below 2); it returns once this thread sets 2 and notifies, holding the mutex.
void blocking_wait_is_notified_from_another_thread(wait_form f) {
  int_mutex m;
  condvar cv;
  asyncband::stop_source never;
  std::optional<wait_status> status;
  bool held = false;
  int value = -1;
  waiting_thread waiter([&] {
    guard_t g = m.lock_blocking();
    *g = 1;
    auto r = wait_blocking_in(f, cv, std::move(g), never.get_token(), 2);
    status = r.status();
    held = r.ok() && r->owns_lock() && m.is_locked();
    value = r.ok() ? **r : -1;
  });
  {
    guard_t g = lock_when(m, 1);  // the waiter is registered
    *g = 2;
    cv.notify_one();
  }
  waiter.join([&] { set_and_notify_all(m, cv, 2); });
  EXPECT_EQ(status, wait_status::ok);
  EXPECT_TRUE(held);
  EXPECT_EQ(value, 2);
  EXPECT_FALSE(m.is_locked());
}

TEST(CondvarBlocking, EveryFormIsNotifiedFromAnotherThread) {
  for (const wait_form f : all_forms) {
    SCOPED_TRACE(name(f));
    blocking_wait_is_notified_from_another_thread(f);
  }
}

TEST(CondvarBlocking, WaitWhileBlockingLoopsUntilThePredicateIsFalse) {
  int_mutex m;
  condvar cv;
  int value = -1;
  waiting_thread waiter(
      [&] { value = *cv.wait_while_blocking(m.lock_blocking(), [](const int& v) { return v < 3; }); });
  for (int v = 1; v <= 3; ++v) {
    guard_t g = m.lock_blocking();
    *g = v;
    cv.notify_one();
  }
  waiter.join([&] { set_and_notify_all(m, cv, 3); });
  EXPECT_EQ(value, 3);
  EXPECT_FALSE(m.is_locked());
}

TEST(CondvarBlocking, AStopAlreadyRequestedCancelsWithoutTheMutex) {
  for (const wait_form f : stoppable_forms) {
    SCOPED_TRACE(name(f));
    int_mutex m;
    condvar cv;
    asyncband::stop_source src;
    src.request_stop();
    EXPECT_EQ(wait_blocking_in(f, cv, lock_now(m), src.get_token(), 1).status(), wait_status::cancelled);
    EXPECT_FALSE(m.is_locked());
  }
}

TEST(CondvarBlocking, AStopFromAnotherThreadCancelsWithoutTheMutex) {
  for (const wait_form f : stoppable_forms) {
    SCOPED_TRACE(name(f));
    int_mutex m;
    condvar cv;
    asyncband::stop_source src;
    std::optional<wait_status> status;
    waiting_thread waiter([&] {
      guard_t g = m.lock_blocking();
      *g = 1;
      status = wait_blocking_in(f, cv, std::move(g), src.get_token(), 2).status();
    });
    lock_when(m, 1).unlock();  // registered
    src.request_stop();
    waiter.join([&] { set_and_notify_all(m, cv, 2); });
    EXPECT_EQ(status, wait_status::cancelled);
    EXPECT_FALSE(m.is_locked());
  }
}

TEST(CondvarBlocking, APredicateExceptionPropagatesWithTheMutexUnlocked) {
  int_mutex m;
  condvar cv;
  const auto throws_at = [](int n) {
    return [n, checks = 0](const int& /*unused*/) mutable -> bool {
      if (++checks == n) throw std::runtime_error("predicate");
      return true;
    };
  };
  EXPECT_THROW((void)cv.wait_while_blocking(lock_now(m), throws_at(1)), std::runtime_error);
  EXPECT_FALSE(m.is_locked());

  bool threw = false;
  waiting_thread waiter([&] {
    guard_t g = m.lock_blocking();
    *g = 1;
    try {
      (void)cv.wait_while_blocking(std::move(g), throws_at(2), asyncband::stop_token());
    } catch (const std::runtime_error&) {
      threw = true;
    }
  });
  lock_when(m, 1).unlock();
  cv.notify_one();
  waiter.join([&] { cv.notify_all(); });
  EXPECT_TRUE(threw);
  EXPECT_FALSE(m.is_locked());
}

// Thread `a` (wait_blocking with a stop token) and thread `b` (plain) are registered, `a` first.
// notify_one reaches `a`, whose re-lock then waits for the mutex this thread holds; a stop cancels
// that re-lock, and `a` forwards the notification to `b`, which gets the mutex once it is free.
TEST(CondvarBlocking, ACancelledReLockForwardsTheNotificationToAnotherThread) {
  int_mutex m;
  condvar cv;
  asyncband::stop_source stop_a;
  std::latch a_relocking(1);
  asyncband::stop_source stop_b;  // only if `b` is never woken, to end the test
  std::optional<wait_status> a_status;
  std::optional<wait_status> b_status;
  std::thread a([&] {
    guard_t g = m.lock_blocking();
    *g = 1;
    // The first `published` here is the registration with the condvar, the second the re-lock.
    const nth_point_hook hook(test_point::published, 2, [&] { a_relocking.count_down(); });
    a_status = cv.wait_blocking(std::move(g), stop_a.get_token()).status();
  });
  lock_when(m, 1).unlock();
  waiting_thread b([&] {
    guard_t g = m.lock_blocking();
    *g = 2;
    b_status = cv.wait_blocking(std::move(g), stop_b.get_token()).status();
  });
  {
    guard_t g = lock_when(m, 2);
    cv.notify_one();
    a_relocking.wait();
    stop_a.request_stop();
  }
  a.join();
  b.join([&stop_b] { stop_b.request_stop(); });
  EXPECT_EQ(a_status, wait_status::cancelled);
  EXPECT_EQ(b_status, wait_status::ok) << "the notification `a` consumed did not reach `b`";
  EXPECT_FALSE(m.is_locked());
}

// ---------------------------------------------------------------------------------------------
// A producer/consumer queue, the condvar's textbook use

/// A bounded FIFO queue of ints for coroutines, on one mutex and two condvars.
class bounded_queue {
 public:
  explicit bounded_queue(std::size_t capacity) : capacity_(capacity) {}

  task<void> push(int item) {
    auto g = co_await state_.lock();
    g = co_await not_full_.wait_while(std::move(g),
                                      [this](const state& s) { return s.items.size() >= capacity_; });
    g->items.push_back(item);
    not_empty_.notify_one();
  }

  /// The next item, or nothing once the queue is closed and drained. `log` records the items
  /// in the order they leave the queue.
  task<std::optional<int>> pop(std::vector<int>& log) {
    auto g = co_await state_.lock();
    g = co_await not_empty_.wait_while(std::move(g),
                                       [](const state& s) { return s.items.empty() && !s.closed; });
    if (g->items.empty()) co_return std::nullopt;
    const int item = g->items.front();
    g->items.pop_front();
    log.push_back(item);
    not_full_.notify_one();
    co_return item;
  }

  task<void> close() {
    auto g = co_await state_.lock();
    g->closed = true;
    not_empty_.notify_all();
  }

 private:
  struct state {
    std::deque<int> items;
    bool closed = false;
  };
  std::size_t capacity_;
  asyncband::mutex<state> state_;
  condvar not_full_;
  condvar not_empty_;
};

task<void> queue_producer(bounded_queue& q, int id, int count, int& producing) {
  for (int i = 0; i < count; ++i) co_await q.push(id * 1000 + i);
  if (--producing == 0) co_await q.close();
}

task<void> queue_consumer(bounded_queue& q, std::vector<int>& log, int& taken, int& finished) {
  for (;;) {
    const std::optional<int> item = co_await q.pop(log);
    if (!item) break;
    ++taken;
  }
  ++finished;
}

TEST(CondvarExample, ProducerConsumerQueueDeliversEveryItemOnceInOrder) {
  constexpr int producers = 3;
  constexpr int consumers = 3;
  constexpr int per_producer = 40;
  for (const std::uint64_t seed : {0ULL, 1ULL, 2ULL, 3ULL, 4ULL, 42ULL}) {
    SCOPED_TRACE(seed);
    test_scheduler s(seed == 0 ? std::nullopt : std::optional<std::uint64_t>(seed));
    bounded_queue q(2);
    std::vector<int> log;
    int producing = producers;
    int taken = 0;
    int finished = 0;
    for (int c = 0; c < consumers; ++c) s.spawn(queue_consumer(q, log, taken, finished));
    for (int p = 0; p < producers; ++p) s.spawn(queue_producer(q, p, per_producer, producing));
    s.run();
    EXPECT_EQ(finished, consumers) << "a consumer never saw the queue closed";
    EXPECT_EQ(taken, producers * per_producer);
    ASSERT_EQ(log.size(), static_cast<std::size_t>(producers * per_producer));
    std::map<int, int> next;  // per producer: the next item expected (FIFO per producer)
    for (const int item : log) {
      EXPECT_EQ(item % 1000, next[item / 1000]++) << "item " << item;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// defer_nested: a chain of wait_while continuations runs as a loop, not as recursion.
//
// Thousands of coroutines without a scheduler (resumed inline) wait_while on one condvar. The
// test notifies all of them holding the mutex, so each queues to re-lock it; its unlock hands the
// mutex to the first, whose predicate still holds: it registers again and unlocks, which hands the
// mutex to the next, and so on. Were each unlock to resolve the next re-lock inside the previous
// one's continuation, the recursion would be as deep as the chain: the test runs on a thread with
// a small stack, and the predicates measure the depth. wake_batch's nesting cap (16 batches)
// would bound that depth as well, but only wake_batch::defer_nested runs every continuation of
// the chain at the same depth, which the predicates check too.

/// An eager coroutine with no scheduler hook: wake-ups resume it inline on the waking thread. It
/// frees itself at the end.
using inline_coroutine = asyncband_test::bare_coroutine;

struct chain_state {
  int_mutex m;  // the value: how far the test has released the waiters
  condvar cv;
  std::thread::id thread;
  std::uintptr_t stack_top = 0;
  std::uintptr_t deepest = std::numeric_limits<std::uintptr_t>::max();
  bool in_chain = false;  // the predicates run in the chain of re-locks: note their spread too
  std::uintptr_t chain_deepest = std::numeric_limits<std::uintptr_t>::max();
  std::uintptr_t chain_shallowest = 0;
  int checks = 0;
  int finished = 0;
  int bad = 0;

  void note_depth() noexcept {
    const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
    deepest = std::min(deepest, here);
    if (in_chain) {
      chain_deepest = std::min(chain_deepest, here);
      chain_shallowest = std::max(chain_shallowest, here);
    }
  }
  [[nodiscard]] std::size_t depth() const noexcept { return stack_top - deepest; }
  [[nodiscard]] std::size_t chain_spread() const noexcept { return chain_shallowest - chain_deepest; }
};

inline_coroutine chain_waiter(chain_state& st, int until) {
  guard_t g = co_await st.m.lock();
  g = co_await st.cv.wait_while(std::move(g), [&st, until](const int& released) {
    st.note_depth();
    ++st.checks;
    return released < until;
  });
  if (!g.owns_lock() || *g < until || std::this_thread::get_id() != st.thread) ++st.bad;
  ++st.finished;
}

/// Runs `body` on a new thread with a stack of `stack_bytes` and joins it.
template <class Body>
void run_with_stack_size(std::size_t stack_bytes, Body body) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, stack_bytes), 0);
  pthread_t thread;
  const auto entry = [](void* arg) -> void* {
    (*static_cast<Body*>(arg))();
    return nullptr;
  };
  const int created = pthread_create(&thread, &attr, entry, &body);
  pthread_attr_destroy(&attr);
  ASSERT_EQ(created, 0);
  pthread_join(thread, nullptr);
}

TEST(CondvarChain, ThousandsOfInlineWaitWhileContinuationsRunAsALoop) {
  static constexpr int waiters = 2000;
  constexpr std::size_t stack_bytes = 512 * 1024;
  constexpr std::size_t depth_bound = 64 * 1024;  // far below the stack; the recursion would need far more
  constexpr std::size_t spread_bound = 1024;      // 0 in fact; 16 nested batches take several KiB
  chain_state st;
  run_with_stack_size(stack_bytes, [&st] {
    st.thread = std::this_thread::get_id();
    st.stack_top = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
    for (int i = 0; i < waiters; ++i) chain_waiter(st, i == waiters - 1 ? 1 : 2);  // each waits
    EXPECT_EQ(st.finished, 0);
    EXPECT_EQ(st.checks, waiters);
    {
      guard_t g = lock_now(st.m);
      *g = 1;  // only the last waiter's predicate turns false
      st.cv.notify_all();
      st.in_chain = true;
    }  // the unlock starts the chain of re-locks
    st.in_chain = false;
    EXPECT_EQ(st.checks, 2 * waiters);
    EXPECT_EQ(st.finished, 1);
    EXPECT_FALSE(st.m.is_locked());

    *lock_now(st.m) = 2;
    st.cv.notify_all();  // without the mutex: each re-locks at once, returns and unlocks
    EXPECT_EQ(st.checks, 3 * waiters - 1);
    EXPECT_EQ(st.finished, waiters);
    EXPECT_EQ(st.bad, 0);
    EXPECT_FALSE(st.m.is_locked());
  });
  EXPECT_EQ(st.finished, waiters);
  EXPECT_LT(st.depth(), depth_bound) << "the continuations recursed";
  EXPECT_LT(st.chain_spread(), spread_bound) << "the chain's continuations ran at different depths";
  RecordProperty("stack_depth_bytes", static_cast<int>(st.depth()));
  RecordProperty("chain_spread_bytes", static_cast<int>(st.chain_spread()));
}

// ---------------------------------------------------------------------------------------------
// Stress. Each round, producers (pool tasks and a plain thread) push a few numbered items into a
// bounded queue (waiting on not_full) and notify not_empty in varied ways (under the mutex or
// not, notify_one or, rarely, notify_all); every few items they cancel the current waits of the
// stoppable consumers while still holding the mutex, so that a consumer just notified is
// cancelled while it waits to re-lock and must forward its notification. Consumers are pool tasks
// and plain threads: the plain ones (never cancelled) use wait_while and a wait loop; the
// stoppable ones use every stoppable form and, when cancelled, check again. Once every produced
// item is taken, the test pushes a final item the same way (notify_one and cancel under the
// mutex), and a stoppable consumer cancelled then retires instead of checking again: if the
// notification it consumed were not forwarded, the final item would stay behind with every other
// consumer asleep. Invariants: every item is taken exactly once, an ok wait_while returns with its
// predicate false, nobody hangs (a lost notification leaves an item behind, or a producer or a
// consumer asleep), and everyone leaves once the queue is closed.

struct stress_state {
  std::deque<int> items;
  bool closed = false;
};
using stress_guard = asyncband::mutex_guard<stress_state>;

constexpr std::size_t stress_capacity = 3;
constexpr auto nothing_to_take = [](const stress_state& s) { return s.items.empty() && !s.closed; };
constexpr auto queue_full = [](const stress_state& s) { return s.items.size() >= stress_capacity; };

struct stress_round {
  asyncband::mutex<stress_state> m;
  condvar not_empty;
  condvar not_full;
  std::vector<std::atomic<int>> taken;  // per item: how many times it was taken
  std::mutex epoch_mutex;
  asyncband::stop_source epoch;  // the stoppable consumers' current stop source; replaced when stopped
  wait_tally tally;
  const int final_item;             // pushed by the test once the produced items are taken
  std::atomic<bool> retire{false};  // set before the final item: a cancelled consumer retires
  completion produced_left;
  completion final_left{1};
  completion producers_left;
  completion consumers_left;

  stress_round(int produced, int producers, int consumers)
      : taken(static_cast<std::size_t>(produced) + 1),
        final_item(produced),
        produced_left(produced),
        producers_left(producers),
        consumers_left(consumers) {}

  asyncband::stop_token token() {
    const std::lock_guard lock(epoch_mutex);
    return epoch.get_token();
  }

  void cancel_consumers() {
    asyncband::stop_source old;
    {
      const std::lock_guard lock(epoch_mutex);
      old = std::exchange(epoch, asyncband::stop_source{});
    }
    old.request_stop();
  }

  /// Pushes `item` (there is room), notifies and unlocks. With `cancel`, notifies one consumer
  /// under the mutex and cancels the stoppable consumers' waits before unlocking: a stoppable
  /// consumer just notified is then cancelled while it waits to re-lock, and must forward the
  /// notification.
  void put(stress_guard g, int item, bool cancel) {
    g->items.push_back(item);
    if (cancel) {
      not_empty.notify_one();
      cancel_consumers();
      return;
    }
    if (item % 2 == 0) g.unlock();
    if (item % 7 == 3) {
      not_empty.notify_all();
    } else {
      not_empty.notify_one();
    }
  }

  /// Records how a consumer's wait ended; the guard if it ended ok. An ok wait_while must
  /// return with its predicate false.
  std::optional<stress_guard> accept(result<stress_guard> r, bool predicate_false) {
    tally.record(r.status(), [&] { return !predicate_false || !nothing_to_take(**r); });
    if (!r.ok()) return std::nullopt;
    return std::move(*r);
  }

  /// With something to take (or the queue closed and drained): takes one item (true), or
  /// reports the end (false).
  bool take(stress_guard g) {
    if (g->items.empty()) return false;
    const int item = g->items.front();
    g->items.pop_front();
    g.unlock();
    not_full.notify_one();
    taken[static_cast<std::size_t>(item)].fetch_add(1);
    (item == final_item ? final_left : produced_left).done();
    return true;
  }
};

/// Whether a producer cancels the stoppable consumers after its i-th item.
bool cancels_after(int i) {
  return i % 4 == 3;
}

task<void> stress_pool_producer(stress_round& r, thread_pool& pool, int first, int count) {
  co_await pool.schedule();
  for (int item = first; item < first + count; ++item) {
    stress_guard g = co_await r.m.lock();
    g = co_await r.not_full.wait_while(std::move(g), queue_full);
    r.put(std::move(g), item, cancels_after(item - first));
  }
  r.producers_left.done();
}

void stress_thread_producer(stress_round& r, int first, int count) {
  for (int item = first; item < first + count; ++item) {
    r.put(r.not_full.wait_while_blocking(r.m.lock_blocking(), queue_full), item, cancels_after(item - first));
  }
  r.producers_left.done();
}

/// Takes items until the queue is closed and drained, or (stoppable) until a wait is cancelled
/// once the round is retiring.
task<void> stress_pool_consumer(stress_round& r, thread_pool& pool, bool stoppable) {
  co_await pool.schedule();
  for (int i = 0;; ++i) {
    const asyncband::stop_token token = r.token();
    stress_guard g = co_await r.m.lock();
    std::optional<stress_guard> ready;
    if (i % 2 == 0) {
      result<stress_guard> woken = wait_status::closed;
      if (stoppable) {
        woken = co_await r.not_empty.wait_while(std::move(g), nothing_to_take, token);
      } else {
        woken = co_await r.not_empty.wait_while(std::move(g), nothing_to_take);
      }
      ready = r.accept(std::move(woken), true);
    } else {
      ready.emplace(std::move(g));
      while (ready && nothing_to_take(**ready)) {
        result<stress_guard> woken = wait_status::closed;
        if (stoppable) {
          woken = co_await r.not_empty.wait(std::move(*ready), token);
        } else {
          woken = co_await r.not_empty.wait(std::move(*ready));
        }
        ready = r.accept(std::move(woken), false);
      }
    }
    if (!ready) {  // cancelled
      if (r.retire.load()) break;
      continue;
    }
    if (!r.take(std::move(*ready))) break;  // closed and drained
  }
  r.consumers_left.done();
}

void stress_thread_consumer(stress_round& r, bool stoppable) {
  for (int i = 0;; ++i) {
    const asyncband::stop_token token = r.token();
    stress_guard g = r.m.lock_blocking();
    std::optional<stress_guard> ready;
    switch (i % 3 + (stoppable ? 3 : 0)) {
      case 0:
      case 1:
        ready = r.accept(r.not_empty.wait_while_blocking(std::move(g), nothing_to_take), true);
        break;
      case 2:
        ready.emplace(std::move(g));
        while (nothing_to_take(**ready)) ready = r.not_empty.wait_blocking(std::move(*ready));
        break;
      case 3:
        ready = r.accept(r.not_empty.wait_while_blocking(std::move(g), nothing_to_take, token), true);
        break;
      case 4:
        ready =
            r.accept(asyncband::block_on(r.not_empty.wait_while(std::move(g), nothing_to_take, token)), true);
        break;
      default:
        ready.emplace(std::move(g));
        while (ready && nothing_to_take(**ready)) {
          ready = r.accept(r.not_empty.wait_blocking(std::move(*ready), token), false);
        }
        break;
    }
    if (!ready) {
      if (r.retire.load()) break;
      continue;
    }
    if (!r.take(std::move(*ready))) break;
  }
  r.consumers_left.done();
}

TEST(CondvarStress, ProducersAndConsumersLoseNothing) {
  constexpr int per_producer = 10;
  constexpr int pool_producers = 2;
  constexpr int producers = pool_producers + 1;
  constexpr int produced = producers * per_producer;
  constexpr int consumers = 4;
  constexpr auto limit = std::chrono::seconds(20);

  thread_pool pool(2);
  stress_totals totals;
  const int rounds = repeat_for(1000, std::chrono::seconds(1), [&](int round) {
    stress_round r(produced, producers, consumers);
    std::vector<std::thread> threads;
    for (const bool stoppable : {false, true}) {
      asyncband::runtime::spawn(pool.ref(), stress_pool_consumer(r, pool, stoppable));
      threads.emplace_back(stress_thread_consumer, std::ref(r), stoppable);
    }
    for (int p = 0; p < pool_producers; ++p) {
      asyncband::runtime::spawn(pool.ref(), stress_pool_producer(r, pool, p * per_producer, per_producer));
    }
    threads.emplace_back(stress_thread_producer, std::ref(r), pool_producers * per_producer, per_producer);

    r.producers_left.wait_or_abort(limit, "condvar stress: a producer never finished");
    r.produced_left.wait_or_abort(limit, "condvar stress: items left in the queue (a lost notification)");
    r.retire.store(true);
    r.put(r.m.lock_blocking(), r.final_item, true);
    r.final_left.wait_or_abort(limit, "condvar stress: the final item was never taken (a notification lost)");
    r.m.lock_blocking()->closed = true;
    r.not_empty.notify_all();
    r.consumers_left.wait_or_abort(limit, "condvar stress: a consumer never saw the queue closed");
    for (auto& t : threads) t.join();

    EXPECT_EQ(r.tally.bad.load(), 0) << "round " << round;
    int wrong = 0;
    for (const auto& n : r.taken) wrong += n.load() == 1 ? 0 : 1;
    EXPECT_EQ(wrong, 0) << "round " << round << ": items not taken exactly once";
    totals.add(r.tally);
  });
  totals.expect_and_record(rounds);
}

// ---------------------------------------------------------------------------------------------
// Regressions: defects of include/asyncband/condvar.hpp that these tests found (fixed in f7af20d).

// A waiter woken by notify_all that is cancelled late passes nothing on; one woken by notify_one
// passes it on. (The notification node could not tell them apart, and a late-cancelled waiter
// forwarded a notify_one in both cases: a spurious wake-up of a waiter registered after the
// notify_all.) Interleaving: `a` waits; T1 holds the mutex and calls notify_all(), which wakes `a`,
// whose re-lock queues behind T1; T2 calls m.lock(), queued behind `a`. T1 unlocks: the mutex is
// handed to `a`; a stop on `a` is requested at that moment (before its continuation runs); `a`
// gives the mutex back, which hands it to T2; T2 registers with the condvar and unlocks; then `a`,
// cancelled, forwards what it consumed: nothing after a notify_all, and a notify_one only to a
// waiter registered before that notify_one: T2, registered after both, goes on waiting.

/// The scenario above with `notify` as the only notification; returns b's probe.
template <class Notify>
cv_probe late_cancellation_passes_the_mutex_to_a_later_waiter(Notify notify) {
  test_scheduler s;
  int_mutex m;
  condvar cv;
  asyncband::stop_source stop_a;
  cv_probe a, b;
  auto ta = cv_waiter(cv, m, wait_form::wait_stoppable, stop_a.get_token(), a);
  start_on(s, ta);
  s.run();
  guard_t held = lock_now(m);
  notify(cv);  // wakes `a`, whose re-lock waits for `held`
  auto tb = cv_waiter(cv, m, wait_form::wait, asyncband::stop_token(), b);
  tb.handle().resume();  // no scheduler: runs inline; now queued for the mutex behind `a`
  EXPECT_EQ(b.started, 1);
  s.at(test_point::claimed_for_wake, [&stop_a] { stop_a.request_stop(); });
  held.unlock();  // hands the mutex to `a`, which passes it on to `b`: `b` registers and unlocks
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::cancelled);
  EXPECT_FALSE(m.is_locked());
  return b;
}

// `b` registered after the notification: neither kind reaches it (issue 11: a passed-on
// notify_one used to, a spurious wake-up; see the tests of the pass-on's bound below).
TEST(Condvar, ALateCancellationForwardsNoNotificationToAWaiterRegisteredAfterIt) {
  const cv_probe after_notify_one =
      late_cancellation_passes_the_mutex_to_a_later_waiter([](condvar& cv) { cv.notify_one(); });
  EXPECT_EQ(after_notify_one.resumed, 0)
      << "a waiter that registered after notify_one returned, with no notification since, was woken";

  const cv_probe after_notify_all =
      late_cancellation_passes_the_mutex_to_a_later_waiter([](condvar& cv) { cv.notify_all(); });
  EXPECT_EQ(after_notify_all.resumed, 0)
      << "a waiter that registered after notify_all returned, with no notification since, was woken";
}

// The predicate is checked before the stop token, in both forms (as std::condition_variable_any
// does): with a stop already requested and the predicate already false, the wait returns ok,
// holding the mutex. (The coroutine form checked the stop token first and the blocking twin the
// predicate first: they disagreed.)
TEST(Condvar, BlockingAndCoroutineWaitWhileAgreeOnAStopAlreadyRequested) {
  asyncband::stop_source src;
  src.request_stop();
  test_scheduler s;
  int_mutex m(1);  // the predicate (value < 1) is false
  condvar cv;
  cv_probe p;
  s.spawn(cv_waiter(cv, m, wait_form::wait_while_stoppable, src.get_token(), p));
  s.run();
  EXPECT_EQ(p.status, wait_status::ok);
  const wait_status blocking =
      wait_blocking_in(wait_form::wait_while_stoppable, cv, lock_now(m), src.get_token(), 1).status();
  EXPECT_EQ(blocking, p.status) << "the blocking twin disagrees with the coroutine form";
  EXPECT_FALSE(m.is_locked());
}

// ---------------------------------------------------------------------------------------------
// Misuse: an awaiter is awaited once

/// A coroutine makes a condvar wait with `make_wait(guard, checks)` (checks: the predicate's
/// call count, if it has one), awaits it (it suspends until notified with the value set to 1),
/// unlocks, and awaits the same awaiter again: that must throw std::logic_error, before any
/// predicate runs (the mutex is no longer held then).
template <class MakeWait>
void expect_awaiting_a_wait_again_throws(MakeWait make_wait) {
  test_scheduler s;
  int_mutex m(0);
  condvar cv;
  int threw = 0;
  int checks = 0;
  auto body = [&]() -> task<void> {
    guard_t held = co_await m.lock();
    auto waiting = make_wait(cv, std::move(held), checks);
    guard_t g = co_await waiting;
    g.unlock();
    const int checks_before = checks;
    try {
      g = co_await waiting;
    } catch (const std::logic_error&) {
      ++threw;
    }
    EXPECT_EQ(checks, checks_before) << "the predicate ran without the mutex";
  };
  auto t = body();
  start_on(s, t);
  s.run();
  EXPECT_FALSE(t.done()) << "the first await must suspend";
  **m.try_lock() = 1;  // the condition holds; the guard unlocks at once
  cv.notify_one();
  s.run();
  EXPECT_TRUE(t.done());
  EXPECT_EQ(threw, 1);
  EXPECT_FALSE(m.is_locked());
}

// Awaiting a condvar wait again used to register without the mutex held and wait forever.
TEST(CondvarMisuse, AwaitingAWaitAgainAfterItSuspendedThrowsLogicError) {
  expect_awaiting_a_wait_again_throws(
      [](condvar& cv, guard_t g, int& /*unused*/) { return cv.wait(std::move(g)); });
}

// ... and a wait_while awaited again ran its predicate on the value, unlocked, before it threw
// (review of issue 11).
TEST(CondvarMisuse, AwaitingAWaitWhileAgainThrowsBeforeThePredicateReadsTheValue) {
  expect_awaiting_a_wait_again_throws([](condvar& cv, guard_t g, int& checks) {
    return cv.wait_while(std::move(g), [&checks](int& v) {
      ++checks;
      return v == 0;
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Misuse: destroyed with a pending wait (a debug-build assertion names the primitive)

TEST(CondvarDeathTest, DestroyingACondvarWithAPendingWaitAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  struct mutex_and_condvar {
    int_mutex m{0};
    condvar cv;  // destroyed first
  };
  const auto wait_on = [](mutex_and_condvar& both) -> task<void> {
    guard_t g = co_await both.m.lock();
    g = co_await both.cv.wait(std::move(g));
  };
  EXPECT_DEATH(destroy_while_waiting(std::make_unique<mutex_and_condvar>(), wait_on),
               "asyncband::condvar destroyed with waiters");
}

// ---------------------------------------------------------------------------------------------
// A passed-on notify_one goes only to waiters registered before it (issue 11)

/// How the waiters of notify_one_passed_on_by_a_cancelled_waiter ended.
struct pass_on_outcome {
  cv_probe a, early, late;
  int late_resumed_before_next_notify = -1;
};

/// `a` registers (and `early` after it, if asked); notify_one() claims `a`; right then (after
/// the notifier unlocked, before `a` is resolved) a stop is requested on `a` and `late` registers.
/// `a` then resolves cancelled and passes the notify_one on: to `early`, registered before the
/// notify_one, never to `late`. A last notify_one() shows `late` was still registered.
pass_on_outcome notify_one_passed_on_by_a_cancelled_waiter(bool with_early) {
  test_scheduler s;
  int_mutex m;
  condvar cv;
  asyncband::stop_source stop_a;
  pass_on_outcome o;
  auto ta = cv_waiter(cv, m, wait_form::wait_stoppable, stop_a.get_token(), o.a);
  auto te = cv_waiter(cv, m, wait_form::wait, asyncband::stop_token(), o.early);
  auto tl = cv_waiter(cv, m, wait_form::wait, asyncband::stop_token(), o.late);
  start_on(s, ta);
  if (with_early) start_on(s, te);
  s.run();
  s.at(test_point::claimed_for_wake, [&] {
    stop_a.request_stop();
    run_inline(s, tl);  // locks the free mutex, registers after the notify_one, unlocks
    EXPECT_EQ(o.late.started, 1);
  });
  cv.notify_one();
  s.run();
  EXPECT_EQ(s.pending_actions(), 0U);
  o.late_resumed_before_next_notify = o.late.resumed;
  cv.notify_one();
  s.run();
  return o;
}

TEST(CondvarPassOn, ANotifyOnePassedOnSkipsAWaiterRegisteredAfterIt) {
  const pass_on_outcome o = notify_one_passed_on_by_a_cancelled_waiter(false);
  EXPECT_EQ(o.a.status, wait_status::cancelled);
  EXPECT_EQ(o.late_resumed_before_next_notify, 0)
      << "a notify_one passed on by a cancelled waiter woke a waiter registered after it (spurious)";
  EXPECT_EQ(o.late.resumed, 1);
  EXPECT_EQ(o.late.status, wait_status::ok);
}

TEST(CondvarPassOn, ANotifyOnePassedOnReachesAWaiterRegisteredBeforeIt) {
  const pass_on_outcome o = notify_one_passed_on_by_a_cancelled_waiter(true);
  EXPECT_EQ(o.a.status, wait_status::cancelled);
  EXPECT_EQ(o.early.resumed, 1) << "the notify_one owed to a waiter registered before it was lost";
  EXPECT_EQ(o.early.status, wait_status::ok);
  EXPECT_EQ(o.late_resumed_before_next_notify, 0);
  EXPECT_EQ(o.late.resumed, 1);
}

// The blocking form keeps the same bound: a thread registered after the notify_one is not woken
// by its pass-on. `a` is a thread blocked in wait_blocking(stop); notify_one() claims it, and
// before it is resolved the stop is requested and a coroutine registers.
TEST(CondvarPassOn, ABlockingWaiterPassesANotifyOneOnOnlyToWaitersRegisteredBeforeIt) {
  test_scheduler s;
  int_mutex m;
  condvar cv;
  asyncband::stop_source stop_a;
  cv_probe late;
  auto tl = cv_waiter(cv, m, wait_form::wait, asyncband::stop_token(), late);
  std::atomic<bool> registered{false};
  std::thread blocked([&] {
    guard_t g = lock_now(m);
    const thread_hook hook(test_point::before_arm, [&] { registered.store(true); });
    auto r = cv.wait_blocking(std::move(g), stop_a.get_token());
    EXPECT_FALSE(r.ok());
  });
  while (!registered.load()) std::this_thread::yield();
  s.at(test_point::claimed_for_wake, [&] {
    stop_a.request_stop();
    run_inline(s, tl);
  });
  cv.notify_one();
  blocked.join();
  s.run();
  EXPECT_EQ(late.started, 1);
  EXPECT_EQ(late.resumed, 0) << "a passed-on notify_one woke a waiter registered after it";
  cv.notify_one();
  s.run();
  EXPECT_EQ(late.resumed, 1);
}

// ---------------------------------------------------------------------------------------------
// Issue 17: waits on every guard of a mutex (owned, mapped, owned and mapped), each giving back
// the same guard type, re-locked, of the same value.

/// The value of the mutex of these tests: `gate` tells the test that a waiting thread has
/// registered; the mapped guards map to `part`, which the predicates read.
struct gated {
  int gate = 0;
  int part = 0;
};
using gated_mutex = asyncband::mutex<gated>;

int& part_of(gated& g) {
  return g.part;
}

enum class guard_kind { plain, owned, mapped, owned_mapped };

/// The guard of kind K of `m`, which must be free now (blocking: locks it).
template <guard_kind K>
auto guard_of(const std::shared_ptr<gated_mutex>& m, bool blocking = false) {
  if constexpr (K == guard_kind::plain) {
    return blocking ? m->lock_blocking() : *m->try_lock();
  } else if constexpr (K == guard_kind::owned) {
    return blocking ? asyncband::lock_owned_blocking(m) : *asyncband::try_lock_owned(m);
  } else if constexpr (K == guard_kind::mapped) {
    return (blocking ? m->lock_blocking() : *m->try_lock()).map(part_of);
  } else {
    return (blocking ? asyncband::lock_owned_blocking(m) : *asyncband::try_lock_owned(m)).map(part_of);
  }
}
template <guard_kind K>
using guard_of_t = decltype(guard_of<K>(std::shared_ptr<gated_mutex>()));

/// A predicate for any guard's value.
struct never_wait {
  template <class V>
  bool operator()(V& /*unused*/) const noexcept {
    return false;
  }
};

// Every wait form yields the guard type it was given (in a result<> for the stoppable ones).
template <class G>
constexpr bool yields_its_guard() {
  using P = never_wait;
  using std::declval;
  using stop = asyncband::stop_token;
  return std::is_same_v<decltype(declval<condvar&>().wait(declval<G>()).await_resume()), G> &&
         std::is_same_v<decltype(declval<condvar&>().wait(declval<G>(), stop()).await_resume()), result<G>> &&
         std::is_same_v<decltype(declval<condvar&>().wait_while(declval<G>(), P()).await_resume()), G> &&
         std::is_same_v<decltype(declval<condvar&>().wait_while(declval<G>(), P(), stop()).await_resume()),
                        result<G>> &&
         std::is_same_v<decltype(declval<condvar&>().wait_blocking(declval<G>())), G> &&
         std::is_same_v<decltype(declval<condvar&>().wait_blocking(declval<G>(), stop())), result<G>> &&
         std::is_same_v<decltype(declval<condvar&>().wait_while_blocking(declval<G>(), P())), G> &&
         std::is_same_v<decltype(declval<condvar&>().wait_while_blocking(declval<G>(), P(), stop())),
                        result<G>>;
}
static_assert(std::is_same_v<guard_of_t<guard_kind::owned_mapped>, asyncband::owned_mapped_mutex_guard<int>>);
static_assert(yields_its_guard<guard_of_t<guard_kind::plain>>());
static_assert(yields_its_guard<guard_of_t<guard_kind::owned>>());
static_assert(yields_its_guard<guard_of_t<guard_kind::mapped>>());
static_assert(yields_its_guard<guard_of_t<guard_kind::owned_mapped>>());

/// The part a guard of any kind gives access to.
int& part_in(gated& g) {
  return g.part;
}
int& part_in(int& part) {
  return part;
}

/// What a waiter on a guard of some kind reports beyond the probe.
struct kind_probe : probe {
  int until = 1;              ///< the wait_while forms wait while `part` is below it
  bool held = false;          ///< after an ok wait: the guard owns the lock, the mutex is locked
  int value = -1;             ///< after an ok wait: `part` seen through the guard given back
  const int* part = nullptr;  ///< after an ok wait: where that guard's `part` is
  bool locked_after = true;   ///< after a cancelled wait: the mutex was locked
};

template <class Guard>
void record_kind(kind_probe& p, const std::weak_ptr<gated_mutex>& m, result<Guard>& r) {
  const std::shared_ptr<gated_mutex> alive = m.lock();
  if (r.ok()) {
    p.held = r->owns_lock() && alive && alive->is_locked();
    p.part = &part_in(**r);
    p.value = *p.part;
  } else {
    p.locked_after = alive && alive->is_locked();
  }
  p.finish(r.status());
}

/// A guard at hand, as an awaitable that never suspends (waiter_in_form's `lock`).
template <class Guard>
struct ready_guard {
  Guard guard;
  [[nodiscard]] static bool await_ready() noexcept { return true; }
  static void await_suspend(std::coroutine_handle<> /*unused*/) noexcept {}
  Guard await_resume() { return std::move(guard); }
};

/// Takes a guard of kind K of the mutex (free now) and waits on `cv` in form `f`; records the
/// outcome and drops the guard. Holds no reference to the mutex of its own: an owned guard's is
/// the only one it keeps.
template <guard_kind K>
task<void> kind_waiter(condvar& cv, std::weak_ptr<gated_mutex> m, wait_form f, asyncband::stop_token stop,
                       kind_probe& p) {
  return waiter_in_form(
      cv, [m] { return ready_guard<guard_of_t<K>>{guard_of<K>(m.lock())}; }, f, std::move(stop), p,
      [&p](auto& v) { return part_in(v) < p.until; }, [&p, m](auto& r) { record_kind(p, m, r); });
}

/// Sets `part` (under the mutex, which must be free) and notifies one waiter.
void set_part_and_notify_one(gated_mutex& m, condvar& cv, int v) {
  m.try_lock().value()->part = v;
  cv.notify_one();
}

/// A wait of each form on a guard of kind K unlocks the mutex while it waits, and gives back a
/// guard of kind K holding the mutex, of the same part; wait_while checks the part again after
/// each wake-up.
template <guard_kind K>
void every_form_gives_back_the_same_guard_relocked() {
  for (const wait_form f : all_forms) {
    SCOPED_TRACE(name(f));
    test_scheduler s;
    auto m = std::make_shared<gated_mutex>();
    const int* const part = &m->try_lock().value()->part;
    condvar cv;
    asyncband::stop_source src;
    kind_probe p;
    p.until = 2;
    s.spawn(kind_waiter<K>(cv, m, f, src.get_token(), p));
    s.run();
    EXPECT_EQ(p.started, 1);
    EXPECT_EQ(p.resumed, 0);
    EXPECT_FALSE(m->is_locked()) << "a waiting waiter does not hold the mutex";
    set_part_and_notify_one(*m, cv, 1);
    s.run();
    const bool loops = f == wait_form::wait_while || f == wait_form::wait_while_stoppable;
    EXPECT_EQ(p.resumed, loops ? 0 : 1) << "wait_while checks the part again: 1 < 2";
    if (loops) {
      EXPECT_FALSE(m->is_locked());
      set_part_and_notify_one(*m, cv, 2);
      s.run();
    }
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::ok);
    EXPECT_TRUE(p.held);
    EXPECT_EQ(p.part, part) << "the same part";
    EXPECT_EQ(p.value, loops ? 2 : 1);
    EXPECT_FALSE(m->is_locked());
  }
}

/// Cancelled while it waits for the notification, or while it re-locks (the notification it
/// consumed then goes to the next waiter), a wait on a guard of kind K ends without the mutex.
template <guard_kind K>
void a_cancelled_wait_ends_without_the_mutex() {
  for (const wait_form f : stoppable_forms) {
    for (const bool relocking : {false, true}) {
      SCOPED_TRACE(testing::Message() << name(f) << (relocking ? ", while re-locking" : ", while notified"));
      test_scheduler s;
      auto m = std::make_shared<gated_mutex>();
      condvar cv;
      asyncband::stop_source stop_a;
      kind_probe a;
      kind_probe b;
      s.spawn(kind_waiter<K>(cv, m, f, stop_a.get_token(), a));
      s.spawn(kind_waiter<guard_kind::plain>(cv, m, wait_form::wait, asyncband::stop_token(), b));
      s.run();
      std::optional<asyncband::mutex_guard<gated>> held;
      if (relocking) {
        held = m->try_lock();
        cv.notify_one();
        EXPECT_EQ(s.ready_count(), 0U) << "`a` re-locks";
      }
      stop_a.request_stop();
      s.run();
      EXPECT_EQ(a.resumed, 1);
      EXPECT_EQ(a.status, wait_status::cancelled);
      EXPECT_FALSE(relocking ? a.held : a.locked_after);
      EXPECT_EQ(b.resumed, 0);
      if (relocking) {
        held.reset();  // `b` got the notification `a` consumed: it takes the mutex now
      } else {
        cv.notify_one();
      }
      s.run();
      EXPECT_EQ(b.resumed, 1);
      EXPECT_EQ(b.status, wait_status::ok);
      EXPECT_FALSE(m->is_locked());
    }
  }
}

/// An owned guard's wait keeps the mutex alive while it has it unlocked, even when nobody else
/// holds a reference; the guard given back (or a cancelled wait) then lets it go.
template <guard_kind K>
void an_owned_wait_keeps_the_mutex_alive() {
  for (const bool cancelled : {false, true}) {
    SCOPED_TRACE(cancelled ? "cancelled" : "notified");
    test_scheduler s;
    condvar cv;
    asyncband::stop_source stop;
    kind_probe p;
    std::weak_ptr<gated_mutex> weak;
    {
      auto m = std::make_shared<gated_mutex>();
      weak = m;
      s.spawn(kind_waiter<K>(cv, m, wait_form::wait_stoppable, stop.get_token(), p));
      s.run();
      EXPECT_EQ(p.started, 1);
      EXPECT_EQ(p.resumed, 0);
      m->try_lock().value()->part = 7;
    }
    EXPECT_FALSE(weak.expired()) << "the waiting wait holds the mutex";
    if (cancelled) {
      stop.request_stop();
    } else {
      cv.notify_one();
    }
    s.run();
    EXPECT_EQ(p.status, cancelled ? wait_status::cancelled : wait_status::ok);
    if (!cancelled) {
      EXPECT_TRUE(p.held);
      EXPECT_EQ(p.value, 7);
    }
    EXPECT_TRUE(weak.expired()) << "the guard given back (or the cancelled wait) let it go";
  }
}

/// The blocking twins on a guard of kind K, notified from this thread, give back a guard of
/// kind K of the same part; a stop from this thread ends the stoppable ones without the mutex.
template <guard_kind K>
void blocking_waits_give_back_the_same_guard() {
  for (const wait_form f : all_forms) {
    for (const bool stopped : {false, true}) {
      if (stopped && f != wait_form::wait_stoppable && f != wait_form::wait_while_stoppable) continue;
      SCOPED_TRACE(testing::Message() << name(f) << (stopped ? ", stopped" : ""));
      auto m = std::make_shared<gated_mutex>();
      const int* const part = &m->try_lock().value()->part;
      condvar cv;
      asyncband::stop_source src;
      kind_probe p;
      std::atomic<bool> registered{false};
      waiting_thread waiter([&] {
        auto g = guard_of<K>(m, true);
        const thread_hook hook(test_point::before_arm, [&registered] { registered.store(true); });
        auto r =
            wait_blocking_in(f, cv, std::move(g), src.get_token(), [](auto& v) { return part_in(v) < 1; });
        record_kind(p, m, r);
      });
      while (!registered.load()) std::this_thread::yield();  // registered: the mutex is free
      if (stopped) {
        src.request_stop();
      } else {
        m->lock_blocking()->part = 1;
        cv.notify_one();
      }
      waiter.join([&] {
        m->lock_blocking()->part = 1;
        cv.notify_all();
      });
      EXPECT_EQ(p.status, stopped ? wait_status::cancelled : wait_status::ok);
      if (stopped) {
        EXPECT_FALSE(p.locked_after);
      } else {
        EXPECT_TRUE(p.held);
        EXPECT_EQ(p.part, part);
        EXPECT_EQ(p.value, 1);
      }
      EXPECT_FALSE(m->is_locked());
    }
  }
}

TEST(CondvarGuards, EveryFormGivesBackTheSameGuardReLocked) {
  every_form_gives_back_the_same_guard_relocked<guard_kind::plain>();
  every_form_gives_back_the_same_guard_relocked<guard_kind::owned>();
  every_form_gives_back_the_same_guard_relocked<guard_kind::mapped>();
  every_form_gives_back_the_same_guard_relocked<guard_kind::owned_mapped>();
}

TEST(CondvarGuards, ACancelledWaitOnAnyGuardEndsWithoutTheMutexAndPassesItsNotificationOn) {
  a_cancelled_wait_ends_without_the_mutex<guard_kind::plain>();
  a_cancelled_wait_ends_without_the_mutex<guard_kind::owned>();
  a_cancelled_wait_ends_without_the_mutex<guard_kind::mapped>();
  a_cancelled_wait_ends_without_the_mutex<guard_kind::owned_mapped>();
}

TEST(CondvarGuards, AnOwnedGuardsWaitKeepsTheMutexAliveUntilItEnds) {
  an_owned_wait_keeps_the_mutex_alive<guard_kind::owned>();
  an_owned_wait_keeps_the_mutex_alive<guard_kind::owned_mapped>();
}

TEST(CondvarGuards, BlockingWaitsOnAnyGuardGiveBackTheSameGuard) {
  blocking_waits_give_back_the_same_guard<guard_kind::plain>();
  blocking_waits_give_back_the_same_guard<guard_kind::owned>();
  blocking_waits_give_back_the_same_guard<guard_kind::mapped>();
  blocking_waits_give_back_the_same_guard<guard_kind::owned_mapped>();
}

}  // namespace
