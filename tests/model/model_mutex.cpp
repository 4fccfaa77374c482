// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::mutex: the hand-off of an unlock to the oldest waiter against new
// lockers, cancelled waiters and a holder that destroys the mutex, under the explorer's schedules.
#include <asyncband/block_on.hpp>
#include <asyncband/mutex.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/stop_token.hpp>

#include "kept.hpp"
#include "mailbox.hpp"
#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

/// One try_lock, which must not find another holder inside: 1 if it took the lock (and added
/// 1 under it), else 0.
int try_once(asyncband::mutex<int>& m, atomic<int>& inside) {
  auto g = m.try_lock();
  if (!g) return 0;
  check(inside.fetch_add(1) == 0, "try_lock took a held mutex");
  ++**g;
  inside.fetch_sub(1);
  return 1;
}

/// Two threads lock `each` times with lock_blocking() while this thread barges `barges` times
/// with try_lock: the holders exclude each other and no increment is lost.
void two_lockers_and_a_barger(int each, int barges) {
  model::kept<asyncband::mutex<int>> kept_m(0);
  auto& m = *kept_m;
  atomic<int> inside{0};
  const auto locker = [&] {
    for (int i = 0; i < each; ++i) {
      auto g = m.lock_blocking();
      check(inside.fetch_add(1) == 0, "two holders of the mutex");
      ++*g;
      inside.fetch_sub(1);
    }
  };
  thread a(locker);
  thread b(locker);
  int tried = 0;
  for (int i = 0; i < barges; ++i) tried += try_once(m, inside);
  a.join();
  b.join();
  auto g = m.try_lock();
  check(g.has_value(), "the mutex stayed locked");
  if (g) check(**g == 2 * each + tried, "an increment under the lock was lost");
}

// Mutual exclusion over the protected value: two lockers (spinning, parking, or retrying) and a
// try_lock that may barge; no increment is lost.
TEST(ModelMutex, ExcludesAndCountsEveryHolder) {
  EXPECT_TRUE(model::explored(101, [] { two_lockers_and_a_barger(1, 1); }));
}

// The unlock hands the mutex to the oldest waiter while that waiter is being cancelled: it ends
// with the guard or cancelled, exactly once, and a hand-off it cannot use passes on to the other
// waiter (which otherwise waits for good: a deadlock the explorer reports).
TEST(ModelMutex, CancelledWaiterPassesTheLockOn) {
  EXPECT_TRUE(model::explored(102, [] {
    model::kept<asyncband::mutex<int>> kept_m(0);
    auto& m = *kept_m;
    asyncband::stop_source stop;
    auto held = m.lock_blocking();
    atomic<int> holders{0};
    thread cancellable([&] {
      auto r = m.lock_blocking(stop.get_token());
      if (r.ok()) {
        check(holders.fetch_add(1) == 0, "a cancellable lock holds with another holder");
        ++**r;
        holders.fetch_sub(1);
      }
    });
    thread plain([&] {
      auto g = m.lock_blocking();
      check(holders.fetch_add(1) == 0, "two holders of the mutex");
      ++*g;
      holders.fetch_sub(1);
    });
    thread canceller([&] { stop.request_stop(); });
    held.unlock();  // the hand-off: to whichever waiter queued first, cancelled or not
    canceller.join();
    cancellable.join();
    plain.join();
    auto g = m.try_lock();
    check(g.has_value(), "a cancelled lock kept the mutex");
    if (g) check(**g == 1 || **g == 2, "the lock was granted twice or lost");
  }));
}

// Last one out: the waiter handed the mutex unlocks it and destroys it while the unlock that
// handed it over may still be returning (a use after free shows under the sanitizers).
TEST(ModelMutex, WaiterDestroysTheMutexAfterTheHandOff) {
  EXPECT_TRUE(model::explored(103, [] {
    model::kept<asyncband::mutex<int>> m(0);
    auto held = m->lock_blocking();
    atomic<bool> done{false};
    thread waiter([&] {
      auto g = m->lock_blocking();
      check(*g == 1, "the waiter ran before the holder's update");
      g.unlock();
      m.reset();
      done.store(true);
    });
    *held = 1;
    held.unlock();
    waiter.join();
    check(done.load(), "the waiter did not finish");
  }));
}

// Coroutines: two tasks, each driven by block_on on its own model thread, lock the mutex in
// turn. An unlock resumes the next waiting coroutine inline on the unlocking thread (they have
// no scheduler), so one thread runs the other's coroutine for a while, and its block_on is woken
// from there. No increment is lost, and both tasks end.
TEST(ModelMutex, CoroutinesHandTheLockOver) {
  EXPECT_TRUE(model::explored(199, [] {
    model::kept<asyncband::mutex<int>> kept_m(0);
    auto& m = *kept_m;
    const auto worker = [&m]() -> asyncband::runtime::task<void> {
      for (int i = 0; i != 2; ++i) {
        auto g = co_await m.lock();
        ++*g;
      }
    };
    thread a([&] { asyncband::block_on(worker()); });
    thread b([&] { asyncband::block_on(worker()); });
    a.join();
    b.join();
    auto g = m.try_lock();
    check(g.has_value() && **g == 4, "an increment was lost, or the mutex stayed locked");
  }));
}

// Bounded barging: two coroutines on schedulers of their own lock in turn (an unlock frees the
// lock and posts the head's retry, which takes it or queues again at the front) while a thread
// barges with try_lock. Nobody holds with another, no increment is lost, both tasks end (a
// retry nobody serves is a deadlock the explorer reports).
TEST(ModelMutex, RetryingCoroutinesAndABargerExcludeAndAllEnd) {
  EXPECT_TRUE(model::explored(104, [] {
    model::kept<asyncband::mutex<int>> kept_m(0);
    auto& m = *kept_m;
    atomic<int> inside{0};
    const auto worker = [&m, &inside]() -> asyncband::runtime::task<void> {
      for (int i = 0; i != 2; ++i) {
        auto g = co_await m.lock();
        check(inside.fetch_add(1) == 0, "two holders of the mutex");
        ++*g;
        inside.fetch_sub(1);
      }
    };
    thread a([&] {
      model::mailbox box;
      model::run_on(box, worker());
    });
    thread b([&] {
      model::mailbox box;
      model::run_on(box, worker());
    });
    const int tried = try_once(m, inside);
    a.join();
    b.join();
    auto g = m.try_lock();
    check(g.has_value(), "the mutex stayed locked");
    if (g) check(**g == 4 + tried, "an increment under the lock was lost");
  }));
}

// Last one out, with a retry: the holder's unlock serves the queued coroutine (posting its
// retry and freeing the lock); the coroutine takes the lock, unlocks and destroys the mutex at
// once, while the unlock that served it may still be returning (the sanitizers see a use after
// free). A thread also locks, so that the serving unlock may find the lock taken again.
TEST(ModelMutex, ARetryingWaiterDestroysTheMutexAfterItsServe) {
  EXPECT_TRUE(model::explored(105, [] {
    model::kept<asyncband::mutex<int>> m(0);
    auto held = m->lock_blocking();
    atomic<bool> done{false};
    atomic<bool> other_done{false};
    const auto last = [&]() -> asyncband::runtime::task<void> {
      auto g = co_await m->lock();
      g.unlock();
      while (!other_done.load()) model::ex::yield();
      m.reset();
      done.store(true);
    };
    thread waiter([&] {
      model::mailbox box;
      model::run_on(box, last());
    });
    thread other([&] {
      { auto g = m->lock_blocking(); }
      other_done.store(true);
    });
    held.unlock();
    other.join();
    waiter.join();
    check(done.load(), "the waiter did not finish");
  }));
}

// Plain threads retry under bounded barging, bounded by how long they waited (in a model build:
// due at every second check at the bound, so the explorer sees a thread both passed and handed
// the lock). Two threads lock twice each and the main thread barges three times: exclusion
// holds, no increment is lost, and every thread ends (one stranded unserved is a deadlock).
TEST(ModelMutex, ThreadsRetryingAndABargerExcludeAndAllEnd) {
  EXPECT_TRUE(model::explored(106, [] { two_lockers_and_a_barger(2, 3); }));
}

}  // namespace
