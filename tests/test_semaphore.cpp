// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::semaphore and semaphore_permit: permits (try_acquire, RAII release, forget,
// split, merge, move), programming errors, owned permits that keep the semaphore alive
// (acquire_owned), strict FIFO with partial grants and no barging, the deficit (reduce_permits,
// drain_permits), cancellation (a partial or complete grant passes on), deterministic races at the
// waiter core's test points, destruction of suspended waiters, "last one out", the blocking twins,
// a bounded multi-threaded stress test, and bounded barging (the default: barging past a larger
// queued request, a coroutine's retry, the pass bound and the starving semaphore, direct hand-offs
// to waiters that cannot retry, the deficit and overflow, cancellation and when_any).
#include "asyncband/semaphore.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>  // alarm

#include "asyncband/block_on.hpp"
#include "asyncband/debug.hpp"
#include "asyncband/manual_reset_event.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/stop_token.hpp"
#include "asyncband/when_any.hpp"
#include "support/awaited_twice.hpp"
#include "support/destroyed_with_waiters.hpp"
#include "support/last_one_out.hpp"
#include "support/lifetime.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"
#include "support/thread_hook.hpp"
#include "support/wait_contract.hpp"

namespace {

using namespace asyncband_test;
using asyncband::block_on;
using asyncband::result;
using asyncband::semaphore;
using asyncband::semaphore_permit;
using asyncband::runtime::thread_pool;

// ---------------------------------------------------------------------------------------------
// Helpers

/// One acquisition of `n` permits by a coroutine (see probe). It keeps the permit it receives, so
/// that the test decides when the permits go back; `stop` cancels it when it was started
/// cancellable.
struct acquisition : probe {
  std::size_t n = 1;
  asyncband::stop_source stop;
  semaphore_permit permit;
};

/// Acquires `a.n` permits (with `a.stop`'s token when `cancellable`) and keeps them in `a.permit`.
task<void> acquire_into(semaphore& sem, acquisition& a, bool cancellable) {
  ++a.started;
  if (cancellable) {
    auto r = co_await sem.acquire(a.n, a.stop.get_token());
    if (r.ok()) a.permit = std::move(*r);
    a.finish(r.status());
  } else {
    a.permit = co_await sem.acquire(a.n);
    a.finish(wait_status::ok);
  }
}

constexpr bool cancellable = true;
constexpr bool plain = false;

/// A semaphore, a test scheduler, and coroutines acquiring from it in the order they were added.
/// Owns the coroutines; members are destroyed in reverse: the coroutines first (a suspended one
/// leaves the queue and passes its grant on), then the permits they hold go back, then the
/// semaphore.
struct queue_fixture {
  test_scheduler s;
  semaphore sem;
  std::vector<int> order;  // ids of the acquisitions, in the order they resumed
  std::deque<acquisition> acquisitions;
  std::vector<task<void>> tasks;

  explicit queue_fixture(std::size_t permits, std::optional<std::uint64_t> seed = std::nullopt)
      : s(seed), sem(permits) {}
  /// With a strict FIFO semaphore (partial grants, no barging).
  queue_fixture(asyncband::strict_fifo_t fifo, std::size_t permits,
                std::optional<std::uint64_t> seed = std::nullopt)
      : s(seed), sem(fifo, permits) {}

  /// Queues an acquisition of `n` to start at a later step of the scheduler.
  acquisition& start(std::size_t n, bool can_cancel = cancellable) {
    acquisition& a = acquisitions.emplace_back();
    a.id = static_cast<int>(acquisitions.size() - 1);
    a.n = n;
    a.order = &order;
    tasks.push_back(acquire_into(sem, a, can_cancel));
    start_on(s, tasks.back());
    return a;
  }

  /// Starts an acquisition of `n` and runs the scheduler until nothing is ready (it is queued or
  /// done).
  acquisition& add(std::size_t n, bool can_cancel = cancellable) {
    acquisition& a = start(n, can_cancel);
    s.run();
    return a;
  }

  /// Starts an acquisition of `needs` on an empty queue and gives it `partial` (< needs) permits
  /// by releasing them: it stays at the head of the queue holding a partial grant.
  acquisition& add_with_partial_grant(std::size_t needs, std::size_t partial, bool can_cancel = cancellable) {
    acquisition& a = add(needs, can_cancel);
    sem.release(partial);
    s.run();
    EXPECT_EQ(a.resumed, 0) << "a partial grant must not complete the wait";
    return a;
  }

  task<void>& task_of(const acquisition& a) { return tasks[static_cast<std::size_t>(a.id)]; }

  /// Permits held by the acquisitions that completed.
  [[nodiscard]] std::size_t held() const {
    std::size_t sum = 0;
    for (const auto& a : acquisitions) sum += a.permit.count();
    return sum;
  }

  /// Nothing created or lost: what is available plus what was handed out is `total`. Only when
  /// nobody is queued (a queued head holds its partial grant where this cannot see it).
  void expect_conserved(std::size_t total) const { EXPECT_EQ(sem.available() + held(), total); }
};

void expect_waiting(const acquisition& a) {
  EXPECT_EQ(a.started, 1) << "acquisition " << a.id;
  EXPECT_EQ(a.resumed, 0) << "acquisition " << a.id;
}

/// Resumed once, ok, holding exactly what it asked for.
void expect_served(const acquisition& a) {
  EXPECT_EQ(a.resumed, 1) << "acquisition " << a.id;
  EXPECT_EQ(a.status, wait_status::ok) << "acquisition " << a.id;
  EXPECT_EQ(a.permit.count(), a.n) << "acquisition " << a.id;
}

/// Resumed once, cancelled, holding nothing.
void expect_cancelled(const acquisition& a) {
  EXPECT_EQ(a.resumed, 1) << "acquisition " << a.id;
  EXPECT_EQ(a.status, wait_status::cancelled) << "acquisition " << a.id;
  EXPECT_EQ(a.permit.count(), 0U) << "acquisition " << a.id;
}

/// try_acquire(n) that must succeed.
semaphore_permit take(semaphore& sem, std::size_t n) {
  auto p = sem.try_acquire(n);
  EXPECT_TRUE(p.has_value()) << "try_acquire(" << n << ") failed";
  return std::move(p).value();
}

/// Until a thread's acquisition, started while permits were available, has queued: it took them
/// all as a partial grant, so nothing is available any more. Gives up, failing, after a generous
/// limit (a semaphore that never takes the partial grant would otherwise hang the test).
void wait_until_nothing_available(const semaphore& sem) {
  const auto limit = std::chrono::steady_clock::now() + 10s;
  while (sem.available() != 0) {
    if (std::chrono::steady_clock::now() > limit) {
      ADD_FAILURE() << "the waiting thread never took the available permits";
      return;
    }
    std::this_thread::yield();
  }
}

// ---------------------------------------------------------------------------------------------
// Permits

TEST(Semaphore, TryAcquireTakesPermitsAndThePermitReturnsThem) {
  semaphore sem(3);
  EXPECT_EQ(sem.available(), 3U);
  {
    auto p = sem.try_acquire(2);
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->count(), 2U);
    EXPECT_TRUE(static_cast<bool>(*p));
    EXPECT_EQ(p->semaphore(), &sem);
    EXPECT_EQ(sem.available(), 1U);
    EXPECT_FALSE(sem.try_acquire(2).has_value());  // one left: all or nothing
    EXPECT_EQ(sem.available(), 1U);
    auto q = sem.try_acquire();
    ASSERT_TRUE(q.has_value());
    EXPECT_EQ(q->count(), 1U);
    EXPECT_EQ(sem.available(), 0U);
    EXPECT_FALSE(sem.try_acquire().has_value());
  }
  EXPECT_EQ(sem.available(), 3U);  // both went back when destroyed
}

TEST(Semaphore, ExplicitReleaseReturnsThePermitsOnce) {
  semaphore sem(2);
  {
    auto p = take(sem, 2);
    p.release();
    EXPECT_EQ(p.count(), 0U);
    EXPECT_FALSE(p);
    EXPECT_EQ(sem.available(), 2U);
    p.release();  // nothing left to return
    EXPECT_EQ(sem.available(), 2U);
  }
  EXPECT_EQ(sem.available(), 2U);  // nor in the destructor
}

TEST(Semaphore, AcquiringZeroCompletesAtOnceEvenBehindAQueuedWaiter) {
  queue_fixture f(0);
  acquisition& head = f.add(1);
  for (const bool can_cancel : {plain, cancellable}) {
    acquisition& zero = f.start(0, can_cancel);
    EXPECT_EQ(f.s.run(), 1U);  // one step: it never suspended
    expect_served(zero);
    EXPECT_EQ(zero.permit.semaphore(), &f.sem);
  }
  EXPECT_EQ(f.sem.acquire_blocking(0).count(), 0U);
  EXPECT_TRUE(f.sem.acquire_timeout(0, 0ms).ok());
  EXPECT_EQ(take(f.sem, 0).count(), 0U);
  expect_waiting(head);
  f.sem.release(1);
  f.s.run();
  expect_served(head);
  EXPECT_EQ(f.sem.available(), 0U);
}

TEST(Semaphore, AcquireBlockingTakesAvailablePermitsOrWaitsForTheRest) {
  semaphore sem(asyncband::strict_fifo, 3);
  {
    auto p = sem.acquire_blocking(2);
    EXPECT_EQ(p.count(), 2U);
    EXPECT_EQ(sem.available(), 1U);
    auto r = sem.acquire_blocking(1, asyncband::stop_source().get_token());
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->count(), 1U);
    EXPECT_EQ(sem.available(), 0U);
  }
  EXPECT_EQ(sem.available(), 3U);

  std::optional<semaphore_permit> got;
  std::thread waiter([&] { got.emplace(sem.acquire_blocking(5)); });
  wait_until_nothing_available(sem);  // queued, holding the three as a partial grant
  sem.release(2);
  waiter.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->count(), 5U);
  EXPECT_EQ(sem.available(), 0U);
  got.reset();
  EXPECT_EQ(sem.available(), 5U);
}

TEST(Semaphore, AcquireTimeoutTimesOutAndReturnsItsPartialGrant) {
  semaphore sem(1);
  EXPECT_TRUE(sem.acquire_timeout(2, 1ms).timed_out());
  EXPECT_EQ(sem.available(), 1U);
  EXPECT_TRUE(sem.acquire_timeout(2, 0ms).timed_out());
  EXPECT_EQ(sem.available(), 1U);
  {
    auto r = sem.acquire_timeout(1, 0ms);  // available: the deadline never matters
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->count(), 1U);
    EXPECT_EQ(sem.available(), 0U);
  }
  EXPECT_EQ(sem.available(), 1U);
}

TEST(Semaphore, AcquireTimeoutCompletesWhenAnotherThreadReleases) {
  semaphore sem(asyncband::strict_fifo, 1);
  std::optional<result<semaphore_permit>> r;
  std::thread waiter([&] { r.emplace(sem.acquire_timeout(3, 1h)); });
  wait_until_nothing_available(sem);
  sem.release(2);
  waiter.join();
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->ok());
  EXPECT_EQ((*r)->count(), 3U);
}

TEST(SemaphorePermit, ForgetKeepsThePermitsFromTheSemaphoreForGood) {
  semaphore sem(3);
  {
    auto p = take(sem, 2);
    EXPECT_EQ(p.forget(), 2U);
    EXPECT_EQ(p.count(), 0U);
    EXPECT_FALSE(p);
    EXPECT_EQ(p.forget(), 0U);
    EXPECT_EQ(sem.available(), 1U);
  }
  EXPECT_EQ(sem.available(), 1U);
}

TEST(SemaphorePermit, SplitMovesPermitsIntoANewPermitOfTheSameSemaphore) {
  semaphore sem(4);
  {
    auto p = take(sem, 3);
    auto q = p.split(1);
    EXPECT_EQ(p.count(), 2U);
    EXPECT_EQ(q.count(), 1U);
    EXPECT_EQ(q.semaphore(), &sem);
    EXPECT_EQ(sem.available(), 1U);

    EXPECT_THROW((void)p.split(3), std::invalid_argument);  // holds only two
    EXPECT_EQ(p.count(), 2U);
    EXPECT_EQ(sem.available(), 1U);

    auto none = p.split(0);
    EXPECT_EQ(none.count(), 0U);
    EXPECT_EQ(p.count(), 2U);

    q.release();  // the parts go back separately
    EXPECT_EQ(sem.available(), 2U);
    auto rest = p.split(2);
    EXPECT_EQ(p.count(), 0U);
    EXPECT_EQ(rest.count(), 2U);
  }
  EXPECT_EQ(sem.available(), 4U);
}

TEST(SemaphorePermit, PartialReleaseReturnsSomeAndKeepsTheRest) {
  semaphore sem(4);
  {
    auto p = take(sem, 3);
    p.release(2);
    EXPECT_EQ(p.count(), 1U);
    EXPECT_EQ(sem.available(), 3U);
    p.release(5);  // more than it holds: all of them
    EXPECT_EQ(p.count(), 0U);
    EXPECT_EQ(sem.available(), 4U);
  }
  EXPECT_EQ(sem.available(), 4U);
}

TEST(SemaphorePermit, MergeSumsPermitsOfTheSameSemaphore) {
  semaphore sem(5);
  {
    auto p = take(sem, 1);
    auto q = take(sem, 2);
    p.merge(std::move(q));
    EXPECT_EQ(p.count(), 3U);
    EXPECT_EQ(q.count(), 0U);  // NOLINT(bugprone-use-after-move): merge leaves it empty

    semaphore_permit adopter;  // an empty permit takes on the semaphore
    adopter.merge(std::move(p));
    EXPECT_EQ(adopter.count(), 3U);
    EXPECT_EQ(adopter.semaphore(), &sem);

    semaphore_permit& self = adopter;
    adopter.merge(std::move(self));  // merging with itself changes nothing
    EXPECT_EQ(adopter.count(), 3U);
    adopter.merge(semaphore_permit());  // nor does an empty one
    EXPECT_EQ(adopter.count(), 3U);
    EXPECT_EQ(sem.available(), 2U);
  }
  EXPECT_EQ(sem.available(), 5U);  // returned once, not twice
}

TEST(SemaphorePermit, MergingAnotherSemaphoresPermitThrowsAndBothKeepTheirCounts) {
  semaphore a(3);
  semaphore b(3);
  {
    auto pa = take(a, 2);
    auto pb = take(b, 1);
    EXPECT_THROW(pa.merge(std::move(pb)), std::invalid_argument);
    EXPECT_EQ(pa.count(), 2U);
    EXPECT_EQ(pa.semaphore(), &a);
    EXPECT_EQ(pb.count(), 1U);  // NOLINT(bugprone-use-after-move): the merge threw
    EXPECT_EQ(pb.semaphore(), &b);
  }
  EXPECT_EQ(a.available(), 3U);  // each went back to its own semaphore
  EXPECT_EQ(b.available(), 3U);
}

TEST(SemaphorePermit, MoveAssignmentReturnsTheOldPermits) {
  semaphore a(4);
  semaphore b(4);
  {
    auto p = take(a, 3);
    auto q = take(a, 1);
    p = std::move(q);
    EXPECT_EQ(p.count(), 1U);
    EXPECT_EQ(q.count(), 0U);      // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(a.available(), 3U);  // p's three went back

    p = take(b, 2);  // from another semaphore: p's one goes back to `a`
    EXPECT_EQ(a.available(), 4U);
    EXPECT_EQ(b.available(), 2U);
    EXPECT_EQ(p.semaphore(), &b);

    semaphore_permit& self = p;
    p = std::move(self);  // self-assignment returns nothing
    EXPECT_EQ(p.count(), 2U);
    EXPECT_EQ(b.available(), 2U);

    semaphore_permit moved(std::move(p));
    EXPECT_EQ(moved.count(), 2U);
    EXPECT_EQ(p.count(), 0U);  // NOLINT(bugprone-use-after-move)
  }
  EXPECT_EQ(a.available(), 4U);
  EXPECT_EQ(b.available(), 4U);
}

// ---------------------------------------------------------------------------------------------
// Programming errors: thrown before anything changes

TEST(Semaphore, ReleaseAboveMaxThrowsOverflowAndChangesNothing) {
  constexpr std::size_t max = semaphore::max();
  semaphore sem(5);
  EXPECT_THROW(sem.release(max), std::overflow_error);
  EXPECT_EQ(sem.available(), 5U);
  EXPECT_THROW(sem.release(max - 4), std::overflow_error);
  EXPECT_EQ(sem.available(), 5U);
  EXPECT_THROW(sem.release(max + 1), std::overflow_error);
  EXPECT_EQ(sem.available(), 5U);
  sem.release(max - 5);  // exactly max(): accepted
  EXPECT_EQ(sem.available(), max);
  EXPECT_THROW(sem.release(1), std::overflow_error);
  EXPECT_EQ(sem.available(), max);
}

TEST(Semaphore, RequestsAboveMaxThrowInvalidArgumentAndChangeNothing) {
  constexpr std::size_t too_many = semaphore::max() + 1;
  EXPECT_THROW((void)semaphore(too_many), std::invalid_argument);
  semaphore sem(2);
  asyncband::stop_source src;
  EXPECT_THROW((void)sem.acquire(too_many), std::invalid_argument);
  EXPECT_THROW((void)sem.acquire(too_many, src.get_token()), std::invalid_argument);
  EXPECT_THROW((void)sem.acquire_blocking(too_many), std::invalid_argument);
  EXPECT_THROW((void)sem.acquire_blocking(too_many, src.get_token()), std::invalid_argument);
  EXPECT_THROW((void)sem.acquire_timeout(too_many, 1h), std::invalid_argument);
  EXPECT_THROW((void)sem.try_acquire(too_many), std::invalid_argument);
  EXPECT_THROW(sem.reduce_permits(too_many), std::invalid_argument);
  EXPECT_EQ(sem.available(), 2U);
  EXPECT_EQ(take(sem, 2).count(), 2U);  // no deficit was recorded either
}

TEST(Semaphore, DeficitAboveMaxThrowsOverflowAndChangesNothing) {
  constexpr std::size_t max = semaphore::max();
  semaphore sem(1);
  sem.reduce_permits(max);  // the one at once, max() - 1 owed
  EXPECT_THROW(sem.reduce_permits(2), std::overflow_error);
  sem.reduce_permits(1);  // exactly max() owed
  EXPECT_THROW(sem.reduce_permits(1), std::overflow_error);
  sem.release(max);  // repays all of it
  EXPECT_EQ(sem.available(), 0U);
  sem.release(1);  // nothing more was owed
  EXPECT_EQ(sem.available(), 1U);
}

// ---------------------------------------------------------------------------------------------
// Owned permits: acquire_owned on a std::shared_ptr keeps the semaphore alive

using asyncband::owned_semaphore_permit;
using shared_semaphore_ptr = std::shared_ptr<semaphore>;

/// A semaphore shared as acquire_owned's callers share it, whose deleter records how many permits
/// were available when it went: `available_at_end` says that every permit was back before the
/// last reference dropped. `available_at_end` must outlive the semaphore.
shared_semaphore_ptr shared_semaphore(std::size_t permits, std::optional<std::size_t>& available_at_end,
                                      bool strict_fifo = false) {
  return {strict_fifo ? new semaphore(asyncband::strict_fifo, permits) : new semaphore(permits),
          [&available_at_end](semaphore* s) {
            available_at_end = s->available();
            delete s;
          }};
}

/// An owned permit from `acquire(shared_ptr)` holds `n` permits, keeps the semaphore alive once
/// the test's own pointer is gone, and its destruction returns the permits and then frees the
/// semaphore.
template <class Acquire>
void owned_permit_keeps_the_semaphore_alive(std::size_t n, Acquire acquire) {
  std::optional<std::size_t> available_at_end;
  auto sem = shared_semaphore(3, available_at_end);
  const std::weak_ptr<semaphore> weak = sem;
  std::optional<owned_semaphore_permit> p(acquire(sem));
  ASSERT_TRUE(static_cast<bool>(*p));
  EXPECT_EQ(p->count(), n);
  EXPECT_EQ(p->semaphore().get(), sem.get());
  EXPECT_EQ(sem->available(), 3 - n);
  EXPECT_EQ(sem.use_count(), 2);  // the test's and the permit's
  sem.reset();
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(weak.use_count(), 1);  // only the permit
  EXPECT_EQ(p->semaphore()->available(), 3 - n);
  p.reset();
  EXPECT_TRUE(weak.expired());
  EXPECT_EQ(available_at_end, 3U);  // the permits went back first
}

TEST(SemaphoreOwned, EveryFormKeepsTheSemaphoreAlive) {
  for (const std::size_t n : {1U, 2U}) {
    SCOPED_TRACE(testing::Message() << "n " << n);
    asyncband::stop_source never;
    {
      SCOPED_TRACE("try_acquire_owned");
      owned_permit_keeps_the_semaphore_alive(
          n, [n](shared_semaphore_ptr s) { return *asyncband::try_acquire_owned(std::move(s), n); });
    }
    {
      SCOPED_TRACE("acquire_owned_blocking");
      owned_permit_keeps_the_semaphore_alive(
          n, [n](shared_semaphore_ptr s) { return asyncband::acquire_owned_blocking(std::move(s), n); });
    }
    {
      SCOPED_TRACE("acquire_owned");
      owned_permit_keeps_the_semaphore_alive(
          n, [n](shared_semaphore_ptr s) { return block_on(asyncband::acquire_owned(std::move(s), n)); });
    }
    {
      SCOPED_TRACE("acquire_owned(stop)");
      owned_permit_keeps_the_semaphore_alive(n, [n, &never](shared_semaphore_ptr s) {
        return block_on(asyncband::acquire_owned(std::move(s), n, never.get_token())).value();
      });
    }
    {
      SCOPED_TRACE("acquire_owned_blocking(stop)");
      owned_permit_keeps_the_semaphore_alive(n, [n, &never](shared_semaphore_ptr s) {
        return asyncband::acquire_owned_blocking(std::move(s), n, never.get_token()).value();
      });
    }
  }
  {
    SCOPED_TRACE("the default count is one");
    owned_permit_keeps_the_semaphore_alive(1, [](shared_semaphore_ptr s) {
      auto p = *asyncband::try_acquire_owned(s);
      p.merge(asyncband::acquire_owned_blocking(s));
      p.merge(block_on(asyncband::acquire_owned(std::move(s))));
      EXPECT_EQ(p.count(), 3U);
      p.release(2);
      return p;
    });
  }
}

TEST(SemaphoreOwned, ReleaseReturnsThePermitsAndKeepsTheReference) {
  std::optional<std::size_t> available_at_end;
  auto sem = shared_semaphore(4, available_at_end);
  auto p = asyncband::acquire_owned_blocking(sem, 3);
  p.release(1);  // some of them
  EXPECT_EQ(p.count(), 2U);
  EXPECT_EQ(sem->available(), 2U);
  p.release(5);  // more than it holds: all of them
  EXPECT_EQ(p.count(), 0U);
  EXPECT_FALSE(p);
  EXPECT_EQ(sem->available(), 4U);
  EXPECT_EQ(p.semaphore().get(), sem.get());
  EXPECT_EQ(sem.use_count(), 2);  // still owned by the permit
  p = *asyncband::try_acquire_owned(sem, 4);
  p.release();
  EXPECT_EQ(p.count(), 0U);
  EXPECT_EQ(sem->available(), 4U);
  p.release();  // nothing left to return
  EXPECT_EQ(sem->available(), 4U);
  EXPECT_EQ(sem.use_count(), 2);
  sem.reset();
  EXPECT_FALSE(available_at_end.has_value()) << "the released permit still owns the semaphore";
  { const owned_semaphore_permit last(std::move(p)); }
  EXPECT_EQ(available_at_end, 4U);  // nothing returned twice
}

TEST(SemaphoreOwned, ForgetGivesUpThePermitsAndKeepsTheReference) {
  std::optional<std::size_t> available_at_end;
  auto sem = shared_semaphore(3, available_at_end);
  std::optional<owned_semaphore_permit> p = asyncband::try_acquire_owned(sem, 2);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->forget(), 2U);
  EXPECT_EQ(p->count(), 0U);
  EXPECT_FALSE(*p);
  EXPECT_EQ(p->forget(), 0U);
  EXPECT_EQ(p->semaphore().get(), sem.get());
  EXPECT_EQ(sem.use_count(), 2);
  p.reset();
  EXPECT_EQ(sem->available(), 1U);  // the two are gone for good
  EXPECT_EQ(sem.use_count(), 1);
  sem.reset();
  EXPECT_EQ(available_at_end, 1U);
}

TEST(SemaphoreOwned, FailedOrAlreadyStoppedAttemptsKeepNoReferenceAndTakeNothing) {
  auto sem = std::make_shared<semaphore>(3);
  auto holder = asyncband::try_acquire_owned(sem, 2);
  ASSERT_TRUE(holder.has_value());
  EXPECT_EQ(sem.use_count(), 2);
  EXPECT_FALSE(asyncband::try_acquire_owned(sem, 2).has_value());  // one left: all or nothing
  EXPECT_EQ(sem.use_count(), 2);
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(block_on(asyncband::acquire_owned(sem, 1, stopped.get_token())).cancelled());
  EXPECT_EQ(sem.use_count(), 2);
  EXPECT_TRUE(asyncband::acquire_owned_blocking(sem, 1, stopped.get_token()).cancelled());
  EXPECT_EQ(sem.use_count(), 2);
  EXPECT_EQ(sem->available(), 1U);  // the stopped ones took nothing, though one was available
  holder.reset();
  EXPECT_EQ(sem.use_count(), 1);
  EXPECT_EQ(sem->available(), 3U);
}

TEST(SemaphoreOwned, RequestsAboveMaxThrowInvalidArgumentAndKeepNoReference) {
  constexpr std::size_t too_many = semaphore::max() + 1;
  auto sem = std::make_shared<semaphore>(2);
  asyncband::stop_source src;
  EXPECT_THROW((void)asyncband::acquire_owned(sem, too_many), std::invalid_argument);
  EXPECT_THROW((void)asyncband::acquire_owned(sem, too_many, src.get_token()), std::invalid_argument);
  EXPECT_THROW((void)asyncband::acquire_owned_blocking(sem, too_many), std::invalid_argument);
  EXPECT_THROW((void)asyncband::acquire_owned_blocking(sem, too_many, src.get_token()),
               std::invalid_argument);
  EXPECT_THROW((void)asyncband::try_acquire_owned(sem, too_many), std::invalid_argument);
  EXPECT_EQ(sem.use_count(), 1);
  EXPECT_EQ(sem->available(), 2U);
  EXPECT_EQ(asyncband::try_acquire_owned(sem, 2)->count(), 2U);  // nothing was taken
}

/// One owned acquisition by a coroutine (see probe): the permit it received, and how many owners
/// the semaphore had right after (its permit's reference included).
struct owned_acquisition : probe {
  std::size_t n = 1;
  asyncband::stop_source stop;
  std::optional<owned_semaphore_permit> permit;
  long owners = 0;
};

void expect_waiting(const owned_acquisition& a) {
  EXPECT_EQ(a.started, 1) << "acquisition " << a.id;
  EXPECT_EQ(a.resumed, 0) << "acquisition " << a.id;
  EXPECT_FALSE(a.permit.has_value()) << "acquisition " << a.id;
}

/// Acquires `a.n` permits with acquire_owned (with `a.stop`'s token when `can_cancel`), moving the
/// pointer into the acquisition: while it waits, the coroutine keeps no reference of its own.
task<void> acquire_owned_into(shared_semaphore_ptr sem, owned_acquisition& a, bool can_cancel) {
  ++a.started;
  if (can_cancel) {
    auto r = co_await asyncband::acquire_owned(std::move(sem), a.n, a.stop.get_token());
    if (r.ok()) a.permit.emplace(std::move(*r));
    a.finish(r.status());
  } else {
    a.permit.emplace(co_await asyncband::acquire_owned(std::move(sem), a.n));
    a.finish(wait_status::ok);
  }
  if (a.permit) a.owners = a.permit->semaphore().use_count();
}

TEST(SemaphoreOwned, QueuedOwnedAcquisitionsKeepTheSemaphoreAliveAndAreServedInFifoOrder) {
  test_scheduler s;
  std::optional<std::size_t> available_at_end;
  auto sem = shared_semaphore(2, available_at_end);
  const std::weak_ptr<semaphore> weak = sem;
  auto holder = asyncband::try_acquire_owned(sem, 2);
  ASSERT_TRUE(holder.has_value());
  std::vector<int> order;
  owned_acquisition a;
  a.id = 1;
  a.n = 2;
  a.order = &order;
  owned_acquisition b;
  b.id = 2;
  b.order = &order;
  s.spawn(acquire_owned_into(sem, a, plain));
  s.spawn(acquire_owned_into(std::move(sem), b, cancellable));
  s.run();
  expect_waiting(a);
  expect_waiting(b);
  EXPECT_EQ(weak.use_count(), 3);  // the holder and the two queued acquisitions

  holder->release(1);  // a partial grant of the head: B, behind it, gets nothing
  EXPECT_EQ(s.ready_count(), 0U);
  holder.reset();  // completes A's grant, then drops the holder's reference
  EXPECT_EQ(weak.use_count(), 2);
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::ok);
  ASSERT_TRUE(a.permit.has_value());
  EXPECT_EQ(a.permit->count(), 2U);
  EXPECT_EQ(a.owners, 2);  // its permit and B's acquisition
  expect_waiting(b);

  a.permit.reset();  // serves B, then drops A's reference
  s.run();
  EXPECT_EQ(b.resumed, 1);
  EXPECT_EQ(b.status, wait_status::ok);
  ASSERT_TRUE(b.permit.has_value());
  EXPECT_EQ(b.permit->count(), 1U);
  EXPECT_EQ(b.owners, 1);  // its permit is the last owner
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_FALSE(weak.expired());
  b.permit.reset();
  EXPECT_TRUE(weak.expired());
  EXPECT_EQ(available_at_end, 2U);
}

TEST(SemaphoreOwned, ACancelledOwnedAcquisitionDropsItsReferenceAndPassesItsPartialGrantOn) {
  for (const bool next_waits : {false, true}) {
    SCOPED_TRACE(testing::Message() << "next waits " << next_waits);
    test_scheduler s;
    std::optional<std::size_t> available_at_end;
    auto sem = shared_semaphore(3, available_at_end, true);
    const std::weak_ptr<semaphore> weak = sem;
    auto holder = asyncband::try_acquire_owned(sem, 1);
    ASSERT_TRUE(holder.has_value());
    owned_acquisition a;  // takes the two available as a partial grant when it queues
    a.n = 4;
    owned_acquisition b;
    b.n = 2;
    s.spawn(acquire_owned_into(sem, a, cancellable));
    if (next_waits) s.spawn(acquire_owned_into(sem, b, plain));
    sem.reset();
    s.run();
    expect_waiting(a);
    EXPECT_EQ(holder->semaphore()->available(), 0U);
    EXPECT_EQ(weak.use_count(), next_waits ? 3 : 2);

    a.stop.request_stop();
    s.run();
    EXPECT_EQ(a.resumed, 1);
    EXPECT_EQ(a.status, wait_status::cancelled);
    EXPECT_FALSE(a.permit.has_value());
    if (next_waits) {  // A's two completed B's grant
      EXPECT_EQ(b.resumed, 1);
      EXPECT_EQ(b.status, wait_status::ok);
      EXPECT_EQ(b.permit->count(), 2U);
      EXPECT_EQ(b.owners, 2);  // the holder and B's permit: A let go
      EXPECT_EQ(holder->semaphore()->available(), 0U);
    } else {  // they are available again
      EXPECT_EQ(holder->semaphore()->available(), 2U);
    }
    EXPECT_EQ(weak.use_count(), next_waits ? 2 : 1);
    EXPECT_EQ(holder->count(), 1U);  // the holder keeps its permit
    holder.reset();
    b.permit.reset();
    EXPECT_TRUE(weak.expired());
    EXPECT_EQ(available_at_end, 3U);
  }
}

TEST(SemaphoreOwned, ACancelledOwnedAcquisitionThatWasTheLastOwnerReturnsItsGrantBeforeLettingGo) {
  for (const bool fully_granted : {false, true}) {
    SCOPED_TRACE(testing::Message() << "fully granted " << fully_granted);
    test_scheduler s;
    std::optional<std::size_t> available_at_end;
    auto sem = shared_semaphore(3, available_at_end);
    const std::weak_ptr<semaphore> weak = sem;
    auto holder = asyncband::try_acquire_owned(sem, 2);
    ASSERT_TRUE(holder.has_value());
    owned_acquisition a;  // queued holding the one available
    a.n = 3;
    s.spawn(acquire_owned_into(std::move(sem), a, cancellable));
    s.run();
    expect_waiting(a);
    if (fully_granted) {
      holder.reset();  // completes A's grant; A's resumption is queued, its stop observed then
      EXPECT_EQ(s.ready_count(), 1U);
    }
    a.stop.request_stop();
    if (!fully_granted) holder.reset();  // the holder's two are available
    EXPECT_EQ(weak.use_count(), 1);      // the acquisition's reference alone
    s.run();
    EXPECT_EQ(a.resumed, 1);
    EXPECT_EQ(a.status, wait_status::cancelled);
    EXPECT_FALSE(a.permit.has_value());
    EXPECT_TRUE(weak.expired());
    EXPECT_EQ(available_at_end, 3U);  // its grant went back before it let go
  }
}

TEST(SemaphoreOwned, SplitAndMergeMovePermitsBetweenOwnedPermitsOfOneSemaphore) {
  std::optional<std::size_t> available_at_end;
  auto sem = shared_semaphore(5, available_at_end);
  {
    auto p = *asyncband::try_acquire_owned(sem, 4);
    auto q = p.split(1);
    EXPECT_EQ(p.count(), 3U);
    EXPECT_EQ(q.count(), 1U);
    EXPECT_EQ(q.semaphore().get(), sem.get());  // the part keeps the semaphore alive too
    EXPECT_EQ(sem.use_count(), 3);
    EXPECT_EQ(sem->available(), 1U);

    EXPECT_THROW((void)p.split(4), std::invalid_argument);  // holds only three
    EXPECT_EQ(p.count(), 3U);
    EXPECT_EQ(sem.use_count(), 3);

    q.release();  // the parts go back separately
    EXPECT_EQ(sem->available(), 2U);
    q = p.split(2);
    EXPECT_EQ(p.count(), 1U);

    p.merge(std::move(q));
    EXPECT_EQ(p.count(), 3U);
    EXPECT_EQ(q.count(), 0U);  // NOLINT(bugprone-use-after-move): merge leaves it empty
    EXPECT_FALSE(q);           // NOLINT(bugprone-use-after-move)
    owned_semaphore_permit& self = p;
    p.merge(std::move(self));  // merging with itself changes nothing
    EXPECT_EQ(p.count(), 3U);
    p.merge(owned_semaphore_permit());  // nor does an empty one
    EXPECT_EQ(p.count(), 3U);
    EXPECT_EQ(sem->available(), 2U);

    sem.reset();  // the two permits keep it
    EXPECT_FALSE(available_at_end.has_value());
  }
  EXPECT_EQ(available_at_end, 5U);  // returned once, not twice
}

TEST(SemaphoreOwned, MergingAnotherSemaphoresPermitThrowsAndChangesNothing) {
  auto a = std::make_shared<semaphore>(3);
  auto b = std::make_shared<semaphore>(3);
  {
    auto pa = *asyncband::try_acquire_owned(a, 2);
    auto pb = *asyncband::try_acquire_owned(b, 1);
    EXPECT_THROW(pa.merge(std::move(pb)), std::invalid_argument);
    EXPECT_EQ(pa.count(), 2U);
    EXPECT_EQ(pa.semaphore().get(), a.get());
    EXPECT_EQ(pb.count(), 1U);  // NOLINT(bugprone-use-after-move): the merge threw
    EXPECT_EQ(pb.semaphore().get(), b.get());
    EXPECT_EQ(a.use_count(), 2);
    EXPECT_EQ(b.use_count(), 2);
    EXPECT_EQ(a->available(), 1U);
    EXPECT_EQ(b->available(), 2U);
  }
  EXPECT_EQ(a->available(), 3U);  // each went back to its own semaphore
  EXPECT_EQ(b->available(), 3U);
}

// An empty owned permit merging permits takes them on, as a semaphore_permit does: the reference
// to their semaphore must come along (else nothing keeps the semaphore alive while it holds them,
// and semaphore() names another).
TEST(SemaphoreOwned, AnEmptyOwnedPermitThatMergesPermitsKeepsTheirSemaphoreAlive) {
  std::optional<std::size_t> b_at_end;
  auto a = std::make_shared<semaphore>(2);
  auto b = shared_semaphore(2, b_at_end);
  const std::weak_ptr<semaphore> weak_b = b;
  std::optional<owned_semaphore_permit> released = asyncband::try_acquire_owned(a, 1);
  released->release();  // empty, still owning `a`
  owned_semaphore_permit fresh;
  {
    auto from_b = *asyncband::try_acquire_owned(b, 2);
    auto half = from_b.split(1);
    fresh.merge(std::move(half));
    released->merge(std::move(from_b));
  }
  EXPECT_EQ(fresh.count(), 1U);
  EXPECT_EQ(fresh.semaphore().get(), b.get());
  EXPECT_EQ(released->count(), 1U);
  EXPECT_EQ(released->semaphore().get(), b.get());
  b.reset();  // only the two permits hold `b` now
  EXPECT_FALSE(weak_b.expired());
  if (weak_b.expired()) {  // they hold permits of a semaphore gone: keep the test alive
    (void)fresh.forget();
    (void)released->forget();
  }
  EXPECT_EQ(a->available(), 2U);
  released.reset();
  { const owned_semaphore_permit last(std::move(fresh)); }
  EXPECT_TRUE(weak_b.expired());
  EXPECT_EQ(b_at_end, 2U);
}

TEST(SemaphoreOwned, MoveAssignmentReturnsTheOldPermitsThenDropsTheOldReference) {
  test_scheduler s;
  std::optional<std::size_t> a_at_end;
  std::optional<std::size_t> b_at_end;
  auto a = shared_semaphore(4, a_at_end);
  auto b = shared_semaphore(4, b_at_end);
  const std::weak_ptr<semaphore> weak_a = a;
  auto p = *asyncband::try_acquire_owned(a, 3);
  p = *asyncband::try_acquire_owned(a, 1);  // the same semaphore: p's three go back
  EXPECT_EQ(p.count(), 1U);
  EXPECT_EQ(a->available(), 3U);
  EXPECT_EQ(a.use_count(), 2);

  owned_acquisition next;  // queued for all of `a`, with its own reference
  next.n = 4;
  s.spawn(acquire_owned_into(std::move(a), next, plain));
  s.run();
  expect_waiting(next);
  EXPECT_EQ(weak_a.use_count(), 2);  // p and the queued acquisition

  owned_semaphore_permit moved(std::move(p));
  EXPECT_FALSE(p);                          // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(p.semaphore().get(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(moved.count(), 1U);
  EXPECT_EQ(weak_a.use_count(), 2);
  EXPECT_EQ(s.ready_count(), 0U);

  moved = *asyncband::try_acquire_owned(b, 2);  // another semaphore: the one goes back to `a`
  EXPECT_EQ(moved.semaphore().get(), b.get());
  EXPECT_EQ(moved.count(), 2U);
  EXPECT_EQ(b->available(), 2U);
  EXPECT_EQ(weak_a.use_count(), 1);  // only the served acquisition
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(next.status, wait_status::ok);
  EXPECT_EQ(next.owners, 1);
  next.permit.reset();
  EXPECT_TRUE(weak_a.expired());
  EXPECT_EQ(a_at_end, 4U);

  owned_semaphore_permit& self = moved;
  moved = std::move(self);  // self-assignment returns nothing
  EXPECT_EQ(moved.count(), 2U);
  EXPECT_EQ(b->available(), 2U);
  EXPECT_EQ(b.use_count(), 2);
  b.reset();                         // the permit is the last owner of `b`
  moved = owned_semaphore_permit();  // an empty one: the two go back, then the reference goes
  EXPECT_EQ(b_at_end, 4U);
  EXPECT_EQ(moved.semaphore().get(), nullptr);
}

TEST(SemaphoreOwned, AnOwnedPermitAcquiredOnAnotherThreadKeepsTheSemaphoreAlive) {
  for (const bool cancelled : {false, true}) {
    SCOPED_TRACE(testing::Message() << "cancelled " << cancelled);
    std::optional<std::size_t> available_at_end;
    auto sem = shared_semaphore(3, available_at_end, true);
    const std::weak_ptr<semaphore> weak = sem;
    auto holder = asyncband::try_acquire_owned(sem, 2);
    ASSERT_TRUE(holder.has_value());
    asyncband::stop_source stop;
    std::optional<wait_status> status;
    std::size_t count = 0;
    std::thread waiter([&status, &count, &stop, cancelled, s = sem]() mutable {
      if (cancelled) {
        status = asyncband::acquire_owned_blocking(std::move(s), 3, stop.get_token()).status();
      } else {
        const auto p = asyncband::acquire_owned_blocking(std::move(s), 3);  // returned on the thread
        status = wait_status::ok;
        count = p.count();
      }
    });
    sem.reset();
    wait_until_nothing_available(*holder->semaphore());  // queued, holding the one
    if (cancelled) {
      stop.request_stop();
      waiter.join();
      EXPECT_EQ(weak.use_count(), 1);  // only the holder
      EXPECT_EQ(holder->semaphore()->available(), 1U);
      holder.reset();
    } else {
      holder.reset();  // completes its grant, then drops its reference (the last, or the thread's)
      waiter.join();
      EXPECT_EQ(count, 3U);
    }
    EXPECT_EQ(status, cancelled ? wait_status::cancelled : wait_status::ok);
    EXPECT_TRUE(weak.expired());
    EXPECT_EQ(available_at_end, 3U);
  }
}

// ---------------------------------------------------------------------------------------------
// Strict FIFO, partial grants, no barging

TEST(Semaphore, StrictFifoTheHeadKeepsPartialGrantsUntilItHasAll) {
  queue_fixture f(asyncband::strict_fifo, 0);
  f.add(3, plain);
  f.add(1, plain);
  f.add(1, cancellable);
  // One permit at a time: the first three go to A (ids 0), though B and C need only one each.
  const std::vector<std::vector<int>> order_after_release = {{}, {}, {0}, {0, 1}, {0, 1, 2}};
  for (std::size_t i = 0; i < order_after_release.size(); ++i) {
    f.sem.release(1);
    EXPECT_LE(f.s.ready_count(), 1U);
    f.s.run();
    EXPECT_EQ(f.order, order_after_release[i]) << "after " << i + 1 << " permits";
    EXPECT_EQ(f.sem.available(), 0U);
  }
  for (const auto& a : f.acquisitions) expect_served(a);
  f.sem.release(1);
  EXPECT_EQ(f.sem.available(), 1U);  // nobody waits any more
  f.expect_conserved(6);
}

TEST(Semaphore, OneReleaseServesWaitersInOrderAndTheRestBecomesAPartialGrant) {
  queue_fixture f(asyncband::strict_fifo, 0);
  f.add(2);
  f.add(1, plain);
  acquisition& c = f.add(3);
  f.add(1, plain);
  f.sem.release(4);  // A 2, B 1, and one of C's three
  EXPECT_EQ(f.s.ready_count(), 2U);
  f.s.run();
  EXPECT_EQ(f.order, (std::vector<int>{0, 1}));
  expect_waiting(c);
  EXPECT_EQ(f.sem.available(), 0U);

  f.sem.release(3);  // C's other two, and D's one
  f.s.run();
  EXPECT_EQ(f.order, (std::vector<int>{0, 1, 2, 3}));
  for (const auto& a : f.acquisitions) expect_served(a);
  EXPECT_EQ(f.sem.available(), 0U);
}

TEST(Semaphore, AWaiterTakesWhatIsAvailableAsAPartialGrantWhenItQueues) {
  queue_fixture f(asyncband::strict_fifo, 2);
  acquisition& a = f.add(3);
  expect_waiting(a);
  EXPECT_EQ(f.sem.available(), 0U);  // it took both
  f.sem.release(1);                  // the one it still misses
  f.s.run();
  expect_served(a);
  EXPECT_EQ(f.sem.available(), 0U);
}

TEST(Semaphore, NoBargingPastAQueuedWaiter) {
  queue_fixture f(asyncband::strict_fifo, 0);
  acquisition& a = f.add_with_partial_grant(2, 1);
  // One permit would do for a newcomer, but the head waits: it gets nothing.
  EXPECT_FALSE(f.sem.try_acquire(1).has_value());
  EXPECT_EQ(f.sem.available(), 0U);
  acquisition& b = f.add(1);
  expect_waiting(b);
  EXPECT_TRUE(f.sem.acquire_timeout(1, 0ms).timed_out());

  f.sem.release(1);
  f.s.run();
  expect_served(a);
  expect_waiting(b);
  f.sem.release(1);
  f.s.run();
  expect_served(b);
  EXPECT_EQ(f.order, (std::vector<int>{0, 1}));
}

TEST(Semaphore, AWaiterServedButNotYetResumedIsNotOvertaken) {
  queue_fixture f(0);
  acquisition& a = f.add(2);
  f.sem.release(2);                                // A has all it asked for; its resumption is queued
  acquisition& b = f.start(2);                     // starts after A resumes (FIFO scheduler)
  EXPECT_FALSE(f.sem.try_acquire(1).has_value());  // A's permits are A's
  f.s.run();
  expect_served(a);
  expect_waiting(b);
}

// ---------------------------------------------------------------------------------------------
// The deficit

TEST(Semaphore, ReducePermitsTakesAvailablePermitsAtOnce) {
  semaphore sem(5);
  sem.reduce_permits(3);
  EXPECT_EQ(sem.available(), 2U);
  sem.reduce_permits(0);
  EXPECT_EQ(sem.available(), 2U);
  sem.reduce_permits(2);
  EXPECT_EQ(sem.available(), 0U);
  sem.release(1);  // nothing is owed
  EXPECT_EQ(sem.available(), 1U);
}

TEST(Semaphore, ReleasesRepayADeficitBeforeAQueuedWaiterIsServed) {
  queue_fixture f(2);
  f.sem.reduce_permits(5);  // two at once, three owed
  EXPECT_EQ(f.sem.available(), 0U);
  EXPECT_FALSE(f.sem.try_acquire(1).has_value());
  acquisition& a = f.add(1);
  for (int i = 0; i < 3; ++i) {
    f.sem.release(1);  // repays the deficit
    f.s.run();
    expect_waiting(a);
    EXPECT_EQ(f.sem.available(), 0U);
  }
  f.sem.release(2);
  f.s.run();
  expect_served(a);
  EXPECT_EQ(f.sem.available(), 1U);
  f.expect_conserved(2 - 5 + 3 + 2);
}

TEST(Semaphore, ADeficitWithoutWaitersIsRepaidBeforePermitsBecomeAvailable) {
  semaphore sem(1);
  sem.reduce_permits(3);  // one at once, two owed
  sem.release(1);
  EXPECT_EQ(sem.available(), 0U);
  EXPECT_FALSE(sem.try_acquire(1).has_value());
  sem.release(2);  // one repays, one is available
  EXPECT_EQ(sem.available(), 1U);
  EXPECT_EQ(take(sem, 1).count(), 1U);
}

TEST(Semaphore, ReducingPermitsWhileTheHeadHoldsAPartialGrantOwesThemAll) {
  queue_fixture f(1);
  acquisition& a = f.add(3);  // takes the one as a partial grant
  f.sem.reduce_permits(2);    // nothing available: both owed
  f.sem.release(2);           // repays them
  f.s.run();
  expect_waiting(a);
  f.sem.release(2);
  f.s.run();
  expect_served(a);
  EXPECT_EQ(f.sem.available(), 0U);
}

TEST(Semaphore, DrainPermitsTakesEveryAvailablePermitAndNothingElse) {
  semaphore sem(asyncband::strict_fifo, 4);
  EXPECT_EQ(sem.drain_permits(), 4U);
  EXPECT_EQ(sem.available(), 0U);
  EXPECT_EQ(sem.drain_permits(), 0U);
  sem.release(2);
  EXPECT_EQ(sem.drain_permits(), 2U);
  EXPECT_EQ(sem.available(), 0U);

  // Nothing is available while somebody waits: a queued head keeps its partial grant.
  queue_fixture f(asyncband::strict_fifo, 0);
  acquisition& a = f.add_with_partial_grant(2, 1);
  EXPECT_EQ(f.sem.drain_permits(), 0U);
  f.sem.release(1);
  f.s.run();
  expect_served(a);

  // Nor while a deficit is owed.
  semaphore owing(asyncband::strict_fifo, 1);
  owing.reduce_permits(2);
  EXPECT_EQ(owing.drain_permits(), 0U);
  owing.release(2);  // one repays
  EXPECT_EQ(owing.available(), 1U);
}

// ---------------------------------------------------------------------------------------------
// Cancellation

TEST(SemaphoreCancel, AlreadyStoppedTokenCancelsAtOnceWithoutTakingPermits) {
  queue_fixture f(2);
  acquisition& a = f.start(1);
  a.stop.request_stop();
  EXPECT_EQ(f.s.run(), 1U);
  expect_cancelled(a);
  EXPECT_EQ(f.sem.available(), 2U);

  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(f.sem.acquire_blocking(1, stopped.get_token()).cancelled());
  EXPECT_TRUE(block_on(f.sem.acquire(1, stopped.get_token())).cancelled());
  EXPECT_EQ(f.sem.available(), 2U);
}

TEST(SemaphoreCancel, CancelledHeadPassesItsPartialGrantToTheWaitersBehind) {
  queue_fixture f(asyncband::strict_fifo, 0);
  acquisition& a = f.add_with_partial_grant(3, 2);
  acquisition& b = f.add(1, plain);
  acquisition& c = f.add(1);
  a.stop.request_stop();
  EXPECT_EQ(f.s.ready_count(), 3U);  // one resumption each
  f.s.run();
  expect_cancelled(a);
  expect_served(b);
  expect_served(c);
  EXPECT_EQ(f.sem.available(), 0U);
  f.expect_conserved(2);
}

TEST(SemaphoreCancel, CancelledHeadsPartialGrantBecomesAPartialGrantOfTheNext) {
  queue_fixture f(asyncband::strict_fifo, 0);
  acquisition& a = f.add_with_partial_grant(3, 2);
  acquisition& b = f.add(3, plain);
  a.stop.request_stop();
  f.s.run();
  expect_cancelled(a);
  expect_waiting(b);  // has two of three
  EXPECT_EQ(f.sem.available(), 0U);
  f.sem.release(1);
  f.s.run();
  expect_served(b);
  f.expect_conserved(3);
}

TEST(SemaphoreCancel, CancelledOnlyWaiterReturnsItsPartialGrant) {
  queue_fixture f(1);
  acquisition& a = f.add_with_partial_grant(4, 1);  // one taken when it queued, one released
  a.stop.request_stop();
  f.s.run();
  expect_cancelled(a);
  EXPECT_EQ(f.sem.available(), 2U);
  f.expect_conserved(2);
}

TEST(SemaphoreCancel, CancellingAWaiterBehindTheHeadLeavesTheHeadItsGrant) {
  queue_fixture f(asyncband::strict_fifo, 0);
  acquisition& a = f.add_with_partial_grant(3, 2, plain);
  acquisition& b = f.add(1);
  acquisition& c = f.add(1, plain);
  b.stop.request_stop();
  f.s.run();
  expect_cancelled(b);
  expect_waiting(a);
  f.sem.release(1);
  f.s.run();
  expect_served(a);
  expect_waiting(c);
  f.sem.release(1);
  f.s.run();
  expect_served(c);
  f.expect_conserved(4);
}

TEST(SemaphoreCancel, ACancelledPartialGrantRepaysADeficitFirst) {
  queue_fixture f(0);
  acquisition& a = f.add_with_partial_grant(3, 2);
  f.sem.reduce_permits(1);  // nothing available: owed
  acquisition& b = f.add(1, plain);
  a.stop.request_stop();  // one of A's two repays the deficit, the other serves B
  f.s.run();
  expect_cancelled(a);
  expect_served(b);
  EXPECT_EQ(f.sem.available(), 0U);
  f.sem.release(1);
  f.expect_conserved(2 - 1 + 1);
}

TEST(SemaphoreCancel, StopAfterTheFullGrantButBeforeResumingPassesThePermitsOn) {
  for (const bool next_waits : {false, true}) {
    SCOPED_TRACE(next_waits);
    queue_fixture f(0);
    acquisition& a = f.add(2);
    if (next_waits) f.add(2, plain);
    f.sem.release(2);  // A has all it asked for; its resumption is queued
    ASSERT_EQ(f.s.ready_count(), 1U);
    a.stop.request_stop();  // observed when A resumes
    f.s.run();
    expect_cancelled(a);
    if (next_waits) {
      expect_served(f.acquisitions[1]);
      EXPECT_EQ(f.sem.available(), 0U);
    } else {
      EXPECT_EQ(f.sem.available(), 2U);
    }
    f.expect_conserved(2);
  }
}

TEST(SemaphoreCancel, StopAfterResumingIsTooLate) {
  queue_fixture f(0);
  acquisition& a = f.add(2);
  f.sem.release(2);
  f.s.run();
  a.stop.request_stop();
  expect_served(a);
  EXPECT_EQ(f.sem.available(), 0U);
}

// ---------------------------------------------------------------------------------------------
// Deterministic races at the waiter core's interleaving points

TEST(SemaphoreRace, ReleaseBeforeSuspensionCompletesTheWaitWithoutSuspending) {
  for (const test_point point : before_suspension) {
    for (const bool can_cancel : {plain, cancellable}) {
      for (const std::size_t initially : {0U, 1U}) {  // with or without a partial grant
        SCOPED_TRACE(testing::Message() << "point " << static_cast<int>(point) << ", cancellable "
                                        << can_cancel << ", initially " << initially);
        queue_fixture f(initially);
        f.s.at(point, [&f, initially] { f.sem.release(2 - initially); });
        acquisition& a = f.start(2, can_cancel);
        EXPECT_EQ(f.s.run(), 1U);  // one step: it never suspended
        EXPECT_EQ(f.s.pending_actions(), 0U);
        expect_served(a);
        EXPECT_EQ(f.sem.available(), 0U);
        a.stop.request_stop();  // nothing to cancel any more
        EXPECT_EQ(f.s.run(), 0U);
        expect_served(a);
      }
    }
  }
}

TEST(SemaphoreRace, StopBeforeSuspensionCancelsAndReturnsThePartialGrant) {
  for (const test_point point : before_suspension) {
    for (const std::size_t initially : {0U, 1U}) {
      SCOPED_TRACE(testing::Message() << "point " << static_cast<int>(point) << ", initially " << initially);
      queue_fixture f(initially);
      acquisition& a = f.start(2);
      f.s.at(point, [&a] { a.stop.request_stop(); });
      EXPECT_EQ(f.s.run(), 1U);
      expect_cancelled(a);
      EXPECT_EQ(f.sem.available(), initially);
      f.sem.release(1);  // nobody is queued any more
      EXPECT_EQ(f.sem.available(), initially + 1);
      EXPECT_EQ(f.s.run(), 0U);
      EXPECT_EQ(a.resumed, 1);
    }
  }
}

// The release claims A with its full grant; the stop lands before A is resolved. A resumes once,
// cancelled, and its permits go to the next waiter (or become available).
TEST(SemaphoreRace, StopAtClaimedForWakePassesTheFullGrantOn) {
  for (const bool next_waits : {false, true}) {
    SCOPED_TRACE(next_waits);
    queue_fixture f(0);
    acquisition& a = f.add_with_partial_grant(2, 1);
    if (next_waits) f.add(2, plain);
    f.s.at(test_point::claimed_for_wake, [&a] { a.stop.request_stop(); });
    f.sem.release(1);
    EXPECT_EQ(f.s.pending_actions(), 0U);
    f.s.run();
    expect_cancelled(a);
    if (next_waits) expect_served(f.acquisitions[1]);
    EXPECT_EQ(f.sem.available(), next_waits ? 0U : 2U);
    f.expect_conserved(2);
  }
}

// A's cancellation hands its partial grant to B (not enough for B); a release lands while the
// cancellation holds A claimed: it completes B and serves C. One resumption each.
TEST(SemaphoreRace, ReleaseAtClaimedForCancelGoesToTheWaitersBehind) {
  queue_fixture f(asyncband::strict_fifo, 0);
  acquisition& a = f.add_with_partial_grant(3, 2);
  acquisition& b = f.add(3, plain);
  acquisition& c = f.add(1);
  f.s.at(test_point::claimed_for_cancel, [&f] { f.sem.release(2); });
  a.stop.request_stop();
  EXPECT_EQ(f.s.pending_actions(), 0U);
  EXPECT_EQ(f.s.ready_count(), 3U);
  f.s.run();
  expect_cancelled(a);
  expect_served(b);
  expect_served(c);
  EXPECT_EQ(f.sem.available(), 0U);
  f.expect_conserved(4);
}

// A chain: A's cancellation completes B, and B's stop lands while that cancellation holds B
// claimed: B passes everything on to C. Every waiter resumes once and nothing is lost.
TEST(SemaphoreRace, StopAtClaimedForWakeOfAGrantPassedOnByACancellation) {
  queue_fixture f(asyncband::strict_fifo, 0);
  acquisition& a = f.add_with_partial_grant(3, 2);
  acquisition& b = f.add(2);
  acquisition& c = f.add(2, plain);
  f.s.at(test_point::claimed_for_wake, [&b] { b.stop.request_stop(); });
  a.stop.request_stop();
  EXPECT_EQ(f.s.pending_actions(), 0U);
  f.s.run();
  expect_cancelled(a);
  expect_cancelled(b);
  expect_served(c);
  EXPECT_EQ(f.sem.available(), 0U);
  f.expect_conserved(2);
}

// Acquisitions, releases, try_acquires and stop requests in a random order per seed. Whatever the
// order: every acquisition resumes at most once, and exactly once after the rest are stopped;
// one that succeeded holds exactly what it asked for; a permit is never idle while somebody
// waits; and nothing is created or lost.
TEST(SemaphoreRace, SeededInterleavingsServeEachWaiterOnceAndConservePermits) {
  constexpr std::size_t initially = 1;
  const std::vector<std::size_t> requests = {2, 1, 3, 1, 2};
  const std::vector<std::size_t> releases = {1, 2, 1, 2};
  std::size_t released = 0;
  for (const std::size_t n : releases) released += n;

  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    queue_fixture f(asyncband::strict_fifo, initially, seed);
    std::vector<semaphore_permit> tried;
    for (const std::size_t n : requests) {
      f.start(n, f.acquisitions.size() % 3 != 2 ? cancellable : plain);  // every third one plain
    }
    for (const std::size_t n : releases) {
      f.s.spawn([](semaphore& sem, std::size_t k) -> task<void> {
        sem.release(k);
        co_return;
      }(f.sem, n));
    }
    for (std::size_t i = 0; i < requests.size(); i += 2) {
      f.s.spawn([](asyncband::stop_source& stop) -> task<void> {
        stop.request_stop();
        co_return;
      }(f.acquisitions[i].stop));
    }
    f.s.spawn([](semaphore& sem, std::vector<semaphore_permit>& kept) -> task<void> {
      if (auto p = sem.try_acquire(1)) kept.push_back(std::move(*p));
      co_return;
    }(f.sem, tried));
    f.s.run();

    int waiting = 0;
    for (const auto& a : f.acquisitions) {
      EXPECT_LE(a.resumed, 1) << "acquisition " << a.id;
      if (a.resumed == 0) ++waiting;
      if (a.status == wait_status::ok) {
        EXPECT_EQ(a.permit.count(), a.n) << "acquisition " << a.id;
      }
    }
    if (waiting != 0) {
      EXPECT_EQ(f.sem.available(), 0U);  // the head absorbs every permit
    }

    // End every wait: stop the cancellable ones, then release enough for the plain ones.
    for (auto& a : f.acquisitions) a.stop.request_stop();
    f.s.run();
    std::size_t extra = 0;
    for (const auto& a : f.acquisitions) {
      if (a.resumed == 0) extra += a.n;
    }
    f.sem.release(extra);
    f.s.run();
    for (const auto& a : f.acquisitions) EXPECT_EQ(a.resumed, 1) << "acquisition " << a.id;
    std::size_t held_by_tries = 0;
    for (const auto& p : tried) held_by_tries += p.count();
    EXPECT_EQ(f.sem.available() + f.held() + held_by_tries, initially + released + extra);
    tried.clear();
    if (HasFailure()) break;
  }
}

// ---------------------------------------------------------------------------------------------
// Destroying a suspended waiter

TEST(SemaphoreDestroy, DestroyingASuspendedWaiterUnlinksItAndPassesItsPartialGrantOn) {
  for (const bool can_cancel : {plain, cancellable}) {
    for (const std::size_t partial : {0U, 1U, 2U}) {
      SCOPED_TRACE(testing::Message() << "cancellable " << can_cancel << ", partial " << partial);
      queue_fixture f(asyncband::strict_fifo, 0);
      acquisition& doomed = f.add_with_partial_grant(3, partial, can_cancel);
      acquisition& next = f.add(2, plain);
      f.task_of(doomed) = {};      // destroys the suspended frame
      doomed.stop.request_stop();  // its stop callback went with it
      EXPECT_EQ(f.s.ready_count(), partial == 2 ? 1U : 0U);
      f.sem.release(2 - partial);
      f.s.run();
      EXPECT_EQ(doomed.resumed, 0);
      expect_served(next);
      EXPECT_EQ(f.sem.available(), 0U);
      f.expect_conserved(2);
    }
  }
}

TEST(SemaphoreDestroy, DestroyingTheOnlyWaiterReturnsItsPartialGrant) {
  queue_fixture f(1);
  acquisition& doomed = f.add_with_partial_grant(3, 1);
  f.task_of(doomed) = {};
  EXPECT_EQ(f.sem.available(), 2U);
  EXPECT_EQ(doomed.resumed, 0);
}

TEST(SemaphoreDestroy, DestroyingWaitersAnywhereInTheQueueUnlinksThem) {
  queue_fixture f(0);
  acquisition& head = f.add(2);
  acquisition& first = f.add(1, plain);
  acquisition& middle = f.add(2, plain);
  acquisition& survivor = f.add(1);
  acquisition& tail = f.add(3);
  f.sem.release(1);  // the head holds one of two
  for (const acquisition* doomed : {&head, &middle, &tail}) f.task_of(*doomed) = {};
  for (const acquisition* doomed : {&head, &middle, &tail}) EXPECT_EQ(doomed->resumed, 0);
  f.s.run();  // the head's one went to `first`
  expect_served(first);
  expect_waiting(survivor);
  f.sem.release(1);
  f.s.run();
  expect_served(survivor);
  EXPECT_EQ(f.sem.available(), 0U);
}

// The release has claimed the doomed waiter with its full grant but not resolved it when the
// frame is destroyed (on another thread): the destructor waits for the release to resolve it,
// then passes the grant on.
TEST(SemaphoreDestroy, AWaiterClaimedWithItsFullGrantThenDestroyedPassesTheGrantOn) {
  semaphore sem(0);
  acquisition doomed;
  acquisition next;
  doomed.n = next.n = 2;
  auto doomed_task = acquire_into(sem, doomed, plain);
  auto next_task = acquire_into(sem, next, cancellable);
  doomed_task.handle().resume();  // no scheduler: resumed inline by whoever resolves them
  next_task.handle().resume();
  asyncband::manual_reset_event claimed;
  asyncband::manual_reset_event destroying;
  std::thread releaser([&] {
    const thread_hook hook(test_point::claimed_for_wake, [&] {
      claimed.set();
      destroying.wait_blocking();  // resolve only once the destructor waits for it
    });
    sem.release(2);
  });
  claimed.wait_blocking();
  {
    const thread_hook hook(test_point::awaiting_resolver, [&] { destroying.set(); });
    doomed_task = {};
  }
  releaser.join();
  EXPECT_EQ(doomed.resumed, 0);
  expect_served(next);
  EXPECT_TRUE(next_task.done());
  EXPECT_EQ(sem.available(), 0U);
}

// One release claims A and B; A, resumed inline, destroys B's frame while B is still in the batch
// being resolved further down this very stack. B is withdrawn and its permit passed on to C.
TEST(SemaphoreDestroy, ACoroutineResumedInlineMayDestroyAnotherWaiterServedByTheSameRelease) {
  semaphore sem(0);
  acquisition victim;
  acquisition next;
  semaphore_permit first_permit;
  bool first_ran = false;
  auto victim_task = acquire_into(sem, victim, cancellable);
  auto next_task = acquire_into(sem, next, plain);
  [](semaphore& sem, task<void>& victim, semaphore_permit& kept, bool& ran) -> bare_coroutine {
    kept = co_await sem.acquire(1);
    victim = {};  // claimed by the same release, not resolved yet
    ran = true;
  }(sem, victim_task, first_permit, first_ran);
  victim_task.handle().resume();
  next_task.handle().resume();
  sem.release(2);
  EXPECT_TRUE(first_ran);
  EXPECT_EQ(first_permit.count(), 1U);
  EXPECT_EQ(victim.resumed, 0);
  expect_served(next);
  EXPECT_EQ(sem.available(), 0U);
}

// Regression: semaphore_waiter::cancel hands the cancelled waiter's partial grant to the waiters
// behind it, and resolved those it completed (resuming them inline without a scheduler) before
// cancel_and_resolve resolved the cancelled waiter. On one thread: A (needs 2) holds 1, B (needs
// 1, no scheduler) is behind it; stopping A's token completes B, which resumes inside A's
// cancellation and destroys A's frame (allowed: docs/design.md, "Destroying a waiting
// coroutine"). A's destructor then waited in waiter::await_resolver for its resolver, this very
// thread further up the stack: it never returned. The cancelled waiter is now resolved first,
// in the same batch; the test also accepts a fix that makes it withdrawable instead.
//
// The scenario runs in a child process, which reports the self-wait at test point
// awaiting_resolver (exit code 2) instead of hanging; an alarm bounds any other hang.
void cancellation_serves_a_waiter_that_destroys_the_cancelled_one() {
  semaphore sem(0);
  acquisition cancelled;
  cancelled.n = 2;
  semaphore_permit served_permit;
  bool served_ran = false;
  auto cancelled_task = acquire_into(sem, cancelled, cancellable);
  cancelled_task.handle().resume();  // no scheduler
  sem.release(1);                    // a partial grant of one
  [](semaphore& sem, task<void>& victim, semaphore_permit& kept, bool& ran) -> bare_coroutine {
    kept = co_await sem.acquire(1);  // served by the cancellation, resumed inline inside it
    victim = {};  // the cancelled waiter: suspended, claimed by its cancellation, not resolved
    ran = true;
  }(sem, cancelled_task, served_permit, served_ran);
  const thread_hook hook(test_point::awaiting_resolver, [] {
    std::fputs("the destroyed waiter waits for a resolver that is its own thread: it never returns\n",
               stderr);
    std::_Exit(2);
  });
  cancelled.stop.request_stop();
  EXPECT_TRUE(served_ran);
  EXPECT_EQ(served_permit.count(), 1U);
  EXPECT_LE(cancelled.resumed, 1);
  if (cancelled.resumed == 1) {
    EXPECT_EQ(cancelled.status, wait_status::cancelled);
  }
  EXPECT_EQ(sem.available(), 0U);
}

TEST(SemaphoreDestroyDeathTest, AWaiterServedByACancellationMayDestroyTheCancelledWaiter) {
  EXPECT_EXIT(
      {
        alarm(20);
        cancellation_serves_a_waiter_that_destroys_the_cancelled_one();
        std::fflush(nullptr);
        std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------------------------
// "Last one out": a waiter that acquired may destroy the semaphore at once, while the call that
// handed the permits over is still inside it. Each waker below takes the lock (a deficit, or a
// queued waiter, makes the state contended) and leaves permits available, which the waiter then
// takes lock-free.

const auto take_one = [](semaphore& sem) { EXPECT_EQ(sem.acquire_blocking(1).count(), 1U); };

TEST(SemaphoreLifetime, TheWaiterMayDestroyTheSemaphoreWhileReleaseReturns) {
  waiter_destroys_while_the_waker_returns(
      [] {
        auto sem = std::make_unique<semaphore>(0);
        sem->reduce_permits(1);
        return sem;
      },
      [](semaphore& sem) { sem.release(2); }, take_one);
}

TEST(SemaphoreLifetime, TheWaiterMayDestroyTheSemaphoreWhileAPermitGoesBack) {
  std::optional<semaphore_permit> permit;
  waiter_destroys_while_the_waker_returns(
      [&permit] {
        auto sem = std::make_unique<semaphore>(2);
        permit.emplace(take(*sem, 2));
        sem->reduce_permits(1);
        return sem;
      },
      [&permit](semaphore& /*unused*/) { permit.reset(); }, take_one);
}

TEST(SemaphoreLifetime, TheWaiterMayDestroyTheSemaphoreWhileACancellationReturns) {
  acquisition head;
  head.n = 2;
  task<void> head_task;
  waiter_destroys_while_the_waker_returns(
      [&] {
        auto sem = std::make_unique<semaphore>(asyncband::strict_fifo, 1);  // a partial grant
        head_task = acquire_into(*sem, head, cancellable);
        head_task.handle().resume();  // queues holding the one; no scheduler
        return sem;
      },
      [&head](semaphore& /*unused*/) { head.stop.request_stop(); },  // its one becomes available
      take_one);
  expect_cancelled(head);
}

// ---------------------------------------------------------------------------------------------
// Blocking twins and block_on

TEST(SemaphoreBlocking, AcquireBlockingWithAStopTokenIsCancelledFromAnotherThread) {
  semaphore sem(asyncband::strict_fifo, 1);
  asyncband::stop_source stop;
  std::optional<result<semaphore_permit>> r;
  std::thread waiter([&] { r.emplace(sem.acquire_blocking(2, stop.get_token())); });
  wait_until_nothing_available(sem);  // queued, holding the one
  stop.request_stop();
  waiter.join();
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->cancelled());
  EXPECT_EQ(sem.available(), 1U);  // the partial grant came back
}

TEST(SemaphoreBlocking, AcquireBlockingWaitsWhileAnotherThreadStops) {
  semaphore sem(0);
  asyncband::stop_source stop;
  std::thread stopper([&] { stop.request_stop(); });  // before or after it queues: cancelled
  EXPECT_TRUE(sem.acquire_blocking(1, stop.get_token()).cancelled());
  stopper.join();
  EXPECT_EQ(sem.available(), 0U);
  sem.release(1);
  EXPECT_EQ(sem.available(), 1U);  // nobody left queued
}

TEST(SemaphoreBlocking, BlockOnAcquisitionsFromAnotherThread) {
  semaphore sem(asyncband::strict_fifo, 0);
  std::optional<std::size_t> plain_count;
  std::optional<wait_status> stoppable_status;
  asyncband::stop_source never;
  std::thread waiter([&] {
    plain_count = block_on(sem.acquire(2)).count();  // the permit goes back at once
    stoppable_status = block_on(sem.acquire(3, never.get_token())).status();
  });
  sem.release(3);
  waiter.join();
  EXPECT_EQ(plain_count, 2U);
  EXPECT_EQ(stoppable_status, wait_status::ok);
  EXPECT_EQ(sem.available(), 3U);

  asyncband::stop_source stop;
  std::optional<wait_status> cancelled_status;
  std::thread cancelled_waiter(
      [&] { cancelled_status = block_on(sem.acquire(5, stop.get_token())).status(); });
  wait_until_nothing_available(sem);
  stop.request_stop();  // resumes the block_on driver inline on this thread
  cancelled_waiter.join();
  EXPECT_EQ(cancelled_status, wait_status::cancelled);
  EXPECT_EQ(sem.available(), 3U);
}

// ---------------------------------------------------------------------------------------------
// Stress, bounded in iterations and time. Pool tasks and plain threads mix every acquisition form
// (plain, cancellable, timed, try_acquire, block_on) for 1 to K permits on one semaphore(K), hold
// the permits across a reschedule (tasks) or a yield (threads), and give them back through every
// path (destruction, release(), split parts, forget + release(n), a deficit repaid). Cancellable
// waits use a shared stop source that participants replace and stop now and then, racing
// cancellations with hand-offs. Invariants: never more than K permits held at once, every
// acquisition yields exactly what it asked for, and at the end all K are available again.

constexpr std::size_t kStressPermits = 4;
constexpr int kStressIterations = 4000;
constexpr auto kStressTime = 700ms;

struct stress_state {
  semaphore sem{kStressPermits};
  stress_budget budget{kStressIterations, kStressTime};
  std::atomic<bool> go{false};
  std::atomic<std::size_t> held{0};
  std::atomic<int> violations{0};
  std::atomic<int> acquired{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> timed_out{0};
  std::atomic<int> refused{0};
  stop_epoch epoch;  // the cancellable waits' stop source
  completion finished;

  explicit stress_state(int participants) : finished(participants) {}

  /// Lets every participant start at once; they run until kStressIterations or kStressTime.
  void start() {
    budget.restart();
    go.store(true);
  }
  void wait_for_start() const {
    while (!go.load()) std::this_thread::yield();
  }

  static std::size_t request(int i, int id) {
    return 1 + static_cast<std::size_t>(i * 7 + id) % kStressPermits;
  }

  /// The permit of a completed acquisition, or nullptr (the outcome counted) for one that was not.
  semaphore_permit* granted(result<semaphore_permit>& r) {
    switch (r.status()) {
      case wait_status::ok:
        return &*r;
      case wait_status::cancelled:
        cancelled.fetch_add(1);
        return nullptr;
      case wait_status::timeout:
        timed_out.fetch_add(1);
        return nullptr;
      case wait_status::closed:
        violations.fetch_add(1);
        return nullptr;
    }
    return nullptr;
  }
  semaphore_permit* granted(std::optional<semaphore_permit>& p) {
    if (!p) refused.fetch_add(1);
    return p ? &*p : nullptr;
  }

  /// Starts holding `permit`: it must carry exactly n, and at most K may be held at once.
  void hold(const semaphore_permit& permit, std::size_t n) {
    if (permit.count() != n || permit.semaphore() != &sem) violations.fetch_add(1);
    if (held.fetch_add(n) + n > kStressPermits) violations.fetch_add(1);
    acquired.fetch_add(1);
  }

  /// Stops holding `permit` and gives it back by one of the paths (chosen by `i`).
  void give_back(semaphore_permit& permit, std::size_t n, int i) {
    held.fetch_sub(n);
    switch (i % 6) {
      case 1: {
        auto part = permit.split(n / 2);  // the two parts go back separately
        break;
      }
      case 2:
        sem.release(permit.forget());  // gone for good, then as many new ones
        break;
      case 3:
        sem.reduce_permits(1);  // taken from what is available, or owed
        permit.release();
        sem.release(1);
        break;
      case 4:
        epoch.cancel_current();
        break;
      default:
        break;  // the permit's destructor returns it
    }
  }

  /// On a plain thread: holds the permit across a yield.
  void use(semaphore_permit* permit, std::size_t n, int i) {
    if (permit == nullptr) return;
    hold(*permit, n);
    std::this_thread::yield();
    give_back(*permit, n, i);
  }
};

/// On the pool: holds the permit across a reschedule, so that others queue meanwhile.
task<void> use_on_pool(thread_pool& pool, stress_state& st, semaphore_permit* permit, std::size_t n, int i) {
  if (permit == nullptr) co_return;
  st.hold(*permit, n);
  co_await pool.schedule();
  st.give_back(*permit, n, i);
}

task<void> stress_task(thread_pool& pool, stress_state& st, int id) {
  co_await pool.schedule();
  for (int i = 0; st.budget.keep_going(i); ++i) {
    const std::size_t n = stress_state::request(i, id);
    switch ((i + id) % 3) {
      case 0: {
        auto permit = co_await st.sem.acquire(n);
        co_await use_on_pool(pool, st, &permit, n, i);
        break;
      }
      case 1: {
        auto r = co_await st.sem.acquire(n, st.epoch.token());
        co_await use_on_pool(pool, st, st.granted(r), n, i);
        break;
      }
      default: {
        auto p = st.sem.try_acquire(n);
        co_await use_on_pool(pool, st, st.granted(p), n, i);
        break;
      }
    }
    if (!pool.on_worker_thread()) st.violations.fetch_add(1);  // wake-ups are posted to the pool
  }
  st.finished.done();
}

void stress_thread(stress_state& st, int id) {
  st.wait_for_start();
  for (int i = 0; st.budget.keep_going(i); ++i) {
    const std::size_t n = stress_state::request(i, id);
    switch ((i + id) % 5) {
      case 0: {
        auto permit = st.sem.acquire_blocking(n);
        st.use(&permit, n, i);
        break;
      }
      case 1: {
        auto r = st.sem.acquire_blocking(n, st.epoch.token());
        st.use(st.granted(r), n, i);
        break;
      }
      case 2: {
        auto r = st.sem.acquire_timeout(n, 100us);
        st.use(st.granted(r), n, i);
        break;
      }
      case 3: {
        auto r = block_on(st.sem.acquire(n, st.epoch.token()));
        st.use(st.granted(r), n, i);
        break;
      }
      default: {
        auto p = st.sem.try_acquire(n);
        st.use(st.granted(p), n, i);
        break;
      }
    }
  }
  st.finished.done();
}

TEST(SemaphoreStress, PoolTasksAndPlainThreadsNeverHoldMoreThanThePermits) {
  constexpr int kTasks = 3;
  constexpr int kThreads = 3;
  stress_state st(kTasks + kThreads);
  {
    thread_pool pool(2);  // destroyed before `st`
    std::vector<std::thread> threads;
    for (int id = 0; id < kThreads; ++id) threads.emplace_back(stress_thread, std::ref(st), kTasks + id);
    st.start();
    for (int id = 0; id < kTasks; ++id) asyncband::runtime::spawn(pool.ref(), stress_task(pool, st, id));
    st.finished.wait_or_abort(60s, "semaphore stress");
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(st.violations.load(), 0);
  EXPECT_GT(st.acquired.load(), 0);
  EXPECT_EQ(st.held.load(), 0U);
  EXPECT_EQ(st.sem.available(), kStressPermits);
  RecordProperty("acquired", st.acquired.load());
  RecordProperty("cancelled", st.cancelled.load());
  RecordProperty("timed_out", st.timed_out.load());
  RecordProperty("refused", st.refused.load());
}

// Last one out for the waker's own permit (found by the lifetime harness, tests/test_lifetime.cpp):
// move assignment released the old permits and then wrote the permit, which a waiter resumed
// inline by that release may already have destroyed (heap-use-after-free under ASan; the
// harness's late-write check fails without it).

struct permit_in_world {
  asyncband::semaphore s{1};
  std::optional<asyncband::semaphore_permit> held;  // in the World: a late write shows
};
struct another_semaphore : asyncband_test::lifetime::waker_base {
  asyncband::semaphore other{1};
};

TEST(SemaphoreLastOneOut, PermitMoveAssignmentReleasesAsItsLastAccess) {
  using namespace asyncband_test::lifetime;
  coroutine_row<permit_in_world, another_semaphore>(
      "move_assigned", "ok",
      [](permit_in_world& w, another_semaphore&) { w.held.emplace(std::move(*w.s.try_acquire())); },
      [](permit_in_world& w, asyncband::stop_token) { return w.s.acquire(); },
      [](permit_in_world* w, another_semaphore& k) { *w->held = std::move(*k.other.try_acquire()); })
      .body();
}

// ---------------------------------------------------------------------------------------------
// Misuse: an awaiter is awaited once

// The acquisition awaiter builds its wait in await_suspend; awaiting it again used to call
// through its null semaphore pointer.
TEST(SemaphoreMisuse, AwaitingAnAcquisitionAgainAfterItSuspendedThrowsLogicError) {
  asyncband::semaphore sem(0);
  expect_awaiting_again_throws_logic_error([&sem] { return sem.acquire(); }, [&sem] { sem.release(1); });
  EXPECT_EQ(sem.available(), 1U);
}

// ---------------------------------------------------------------------------------------------
// Misuse: destroyed with a pending wait (a debug-build assertion names the primitive)

TEST(SemaphoreDeathTest, DestroyingASemaphoreWithAPendingAcquisitionAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto wait_on = [](asyncband::semaphore& s) -> task<void> {
    const auto permit = co_await s.acquire();
  };
  EXPECT_DEATH(destroy_while_waiting(std::make_unique<asyncband::semaphore>(0), wait_on),
               "asyncband::semaphore destroyed with waiters");
}

// ---------------------------------------------------------------------------------------------
// Bounded barging (the default): any acquisition takes its n permits when n are available at that
// moment, a release that covers the head sends a coroutine's plain acquisition on a scheduler to
// retry and hands every other covered front waiter its permits, and every max_passes-th release
// made while somebody waits starves barging until the oldest waiter holds its permits.

constexpr int max_passes = static_cast<int>(semaphore::max_passes);

/// How many acquisitions are queued on `sem` (a retry in flight is not).
std::size_t queued_on(const semaphore& sem) {
  return asyncband::detail::debug_access::state(sem).waiters.counted;
}

/// Overlapping holders of one permit each: takes a new permit with try_acquire, then returns the
/// one `held` keeps (one release per new permit, some permit held throughout), as long as
/// try_acquire succeeds (at most `limit` times). Returns how many it took; `held` keeps the last.
int overlap_while_possible(semaphore& sem, std::optional<semaphore_permit>& held, int limit) {
  int barges = 0;
  while (barges < limit) {
    auto next = sem.try_acquire(1);
    if (!next) break;
    ++barges;
    held = std::move(next);
  }
  return barges;
}

/// Takes one permit and returns it at once, as long as try_acquire succeeds (at most `limit`
/// times); returns how many times it got one.
int barge_while_possible(semaphore& sem, int limit) {
  int barges = 0;
  while (barges < limit && sem.try_acquire(1).has_value()) ++barges;
  return barges;
}

/// On `f`'s semaphore of 2, one permit of which `anchor` holds: queues a plain acquisition of 2,
/// which overlapping holders of one permit must pass exactly max_passes times before the
/// semaphore starves and the anchor's return hands it its permits. It returns them at the end.
void expect_the_next_waiter_passed_max_passes_times(queue_fixture& f,
                                                    std::optional<semaphore_permit>& anchor) {
  ASSERT_TRUE(anchor.has_value());
  acquisition& w = f.add(2, plain);
  expect_waiting(w);
  EXPECT_EQ(overlap_while_possible(f.sem, anchor, 10 * max_passes), max_passes);
  EXPECT_FALSE(f.sem.try_acquire(1).has_value());
  anchor.reset();
  EXPECT_EQ(f.s.ready_count(), 1U);
  EXPECT_EQ(f.sem.available(), 0U) << "the permits were left free for a retry instead of handed over";
  f.s.run();
  expect_served(w);
  w.permit.release();
}

/// What a coroutine awaiting when_any(sem.acquire(n), other.acquire(1)) saw: the winner's index.
struct either_acquisition : probe {
  std::size_t index = 99;
};

task<void> acquire_either(semaphore& sem, std::size_t n, semaphore& other, either_acquisition& p) {
  ++p.started;
  auto r = co_await asyncband::when_any(sem.acquire(n), other.acquire(1));
  p.index = r.index();
  p.finish(wait_status::ok);
}

TEST(SemaphoreBarging, SmallerAcquisitionsTakeAvailablePermitsPastALargerQueuedRequest) {
  queue_fixture f(2);
  acquisition& big = f.add(3);
  expect_waiting(big);
  EXPECT_EQ(f.sem.available(), 2U);  // no partial grant
  auto small = f.sem.try_acquire(1);
  EXPECT_TRUE(small.has_value()) << "try_acquire did not take a permit past the queued request for 3";
  acquisition& coroutine = f.start(1, plain);
  EXPECT_EQ(f.s.run(), 1U);  // one step: it never queued
  expect_served(coroutine);
  EXPECT_EQ(f.sem.available(), 0U);

  f.sem.release(1);
  small.reset();
  EXPECT_EQ(f.s.ready_count(), 0U);  // two of three
  coroutine.permit.release();        // big's three, handed to it
  EXPECT_EQ(f.s.ready_count(), 1U);
  EXPECT_EQ(f.sem.available(), 0U);
  f.s.run();
  expect_served(big);
  EXPECT_EQ(f.order, (std::vector<int>{1, 0}));
}

TEST(SemaphoreBarging, AReleasePostsTheHeadsRetryWhichANewcomerMayBeatAndTheRetryGoesBackToTheFront) {
  queue_fixture f(0);
  acquisition& first = f.add(1, plain);
  acquisition& second = f.add(1, plain);
  f.sem.release(1);
  EXPECT_EQ(f.s.ready_count(), 1U);  // first's retry only
  EXPECT_EQ(f.sem.available(), 1U) << "the permit was handed over instead of left to the retry";
  auto newcomer = f.sem.try_acquire(1);
  ASSERT_TRUE(newcomer.has_value()) << "the newcomer could not take the permit left to the retry";
  f.s.step();  // first's retry finds nothing: back to the front of the queue
  expect_waiting(first);
  EXPECT_EQ(f.s.ready_count(), 0U);
  EXPECT_EQ(queued_on(f.sem), 2U);

  newcomer.reset();  // posts first's retry again, not second's
  EXPECT_EQ(f.s.ready_count(), 1U);
  f.s.step();
  expect_served(first);
  expect_waiting(second);
  first.permit.release();
  f.s.run();
  expect_served(second);
  EXPECT_EQ(f.order, (std::vector<int>{0, 1}));
  EXPECT_EQ(f.sem.available(), 0U);
}

TEST(SemaphoreBarging, AReleaseHandsTheCoveredFrontWaitersTheirPermitsUpToTheFirstNotCovered) {
  queue_fixture f(0);
  acquisition& a = f.add(2);
  acquisition& b = f.add(1);
  acquisition& c = f.add(3);
  acquisition& d = f.add(1);
  f.sem.release(4);  // A's two and B's one; C's three are not there, and D waits behind C
  EXPECT_EQ(f.s.ready_count(), 2U);
  EXPECT_EQ(f.sem.available(), 1U);
  f.s.run();
  expect_served(a);
  expect_served(b);
  expect_waiting(c);
  expect_waiting(d);

  a.permit.release();  // C's three
  EXPECT_EQ(f.s.ready_count(), 1U);
  EXPECT_EQ(f.sem.available(), 0U);
  f.s.run();
  expect_served(c);
  expect_waiting(d);
  b.permit.release();
  f.s.run();
  expect_served(d);
  EXPECT_EQ(f.order, (std::vector<int>{0, 1, 2, 3}));
}

TEST(SemaphoreBarging, ACoroutineWithoutASchedulerIsHandedItsPermitsAndResumedInline) {
  semaphore sem(0);
  acquisition a;
  a.n = 2;
  auto waiting = acquire_into(sem, a, plain);
  waiting.handle().resume();  // queues, without a scheduler
  expect_waiting(a);
  sem.release(2);
  expect_served(a);
  EXPECT_TRUE(waiting.done());
  EXPECT_EQ(sem.available(), 0U);
}

TEST(SemaphoreBarging, AfterMaxPassesReleasesTheSemaphoreStarvesUntilTheOldestWaiterHoldsItsPermits) {
  queue_fixture f(2);
  std::optional<semaphore_permit> anchor = f.sem.try_acquire(1);
  ASSERT_TRUE(anchor.has_value());
  acquisition& oldest = f.add(2, plain);
  expect_waiting(oldest);
  EXPECT_EQ(overlap_while_possible(f.sem, anchor, 10 * max_passes), max_passes);
  EXPECT_EQ(f.s.ready_count(), 0U);

  EXPECT_FALSE(f.sem.try_acquire(1).has_value()) << "try_acquire barged into a starving semaphore";
  EXPECT_TRUE(f.sem.acquire_timeout(1, 0ms).timed_out());
  acquisition& late = f.add(2, plain);
  acquisition& late_small = f.add(1);
  expect_waiting(late);
  expect_waiting(late_small);
  EXPECT_EQ(queued_on(f.sem), 3U);

  anchor.reset();  // the oldest's two, handed to it, never free in between
  EXPECT_EQ(f.s.ready_count(), 1U);
  EXPECT_EQ(f.sem.available(), 0U);
  f.s.run();
  expect_served(oldest);
  oldest.permit.release(1);  // not late's two
  {
    const auto barger = f.sem.try_acquire(1);
    EXPECT_TRUE(barger.has_value()) << "the semaphore still starves after the oldest waiter had its permits";
  }
  oldest.permit.release();  // late's two: its retry
  EXPECT_EQ(f.s.ready_count(), 1U);
  f.s.run();
  expect_served(late);
  expect_waiting(late_small);
  late.permit.release();
  f.s.run();
  expect_served(late_small);
  EXPECT_EQ(f.order, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(f.sem.available(), 1U);
}

TEST(SemaphoreBarging, TheBoundHoldsAgainAfterTheStarvedWaiterWasServed) {
  queue_fixture f(2);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    std::optional<semaphore_permit> anchor = f.sem.try_acquire(1);
    expect_the_next_waiter_passed_max_passes_times(f, anchor);
  }
}

TEST(SemaphoreBarging, PassesBeforeAWaitersRetryTookItsPermitsDoNotCountForTheNextWaiter) {
  queue_fixture f(2);
  std::optional<semaphore_permit> anchor = f.sem.try_acquire(1);
  ASSERT_TRUE(anchor.has_value());
  acquisition& first = f.add(2, plain);
  EXPECT_EQ(overlap_while_possible(f.sem, anchor, max_passes - 2), max_passes - 2);
  anchor.reset();  // one more pass, below the bound: first's retry posted, the permits free
  EXPECT_EQ(f.s.ready_count(), 1U);
  EXPECT_EQ(f.sem.available(), 2U);
  f.s.run();
  expect_served(first);
  first.permit.release();
  anchor = f.sem.try_acquire(1);
  expect_the_next_waiter_passed_max_passes_times(f, anchor);
}

TEST(SemaphoreBarging, PassesOfACancelledLastWaiterDoNotCountForTheNextWaiter) {
  queue_fixture f(2);
  std::optional<semaphore_permit> anchor = f.sem.try_acquire(1);
  ASSERT_TRUE(anchor.has_value());
  acquisition& stopped = f.add(2);
  EXPECT_EQ(overlap_while_possible(f.sem, anchor, max_passes - 1), max_passes - 1);
  stopped.stop.request_stop();  // the queue empties: nobody waits
  f.s.run();
  expect_cancelled(stopped);
  expect_the_next_waiter_passed_max_passes_times(f, anchor);  // the same permit held
}

TEST(SemaphoreBarging, AfterMaxPassesNoAcquisitionBargesPastARetryInFlight) {
  queue_fixture f(0);
  acquisition& w = f.add(1, plain);
  f.sem.release(1);  // the first pass: w's retry posted, the permit free
  EXPECT_EQ(f.s.ready_count(), 1U);
  EXPECT_EQ(barge_while_possible(f.sem, 10 * max_passes), max_passes - 1);
  EXPECT_FALSE(f.sem.try_acquire(1).has_value());
  EXPECT_TRUE(f.sem.acquire_timeout(1, 0ms).timed_out());
  expect_waiting(w);
  EXPECT_EQ(f.s.ready_count(), 1U);
  f.s.run();  // the retry takes the permit for itself
  expect_served(w);
  EXPECT_EQ(f.sem.available(), 0U);
}

TEST(SemaphoreBarging, AThreadIsHandedItsPermitsDirectlyByTheReleaseThatCoversIt) {
  enum class form { blocking, stoppable, timed };
  for (const form how : {form::blocking, form::stoppable, form::timed}) {
    SCOPED_TRACE(static_cast<int>(how));
    semaphore sem(0);
    asyncband::stop_source never;
    asyncband::manual_reset_event queued;
    asyncband::manual_reset_event go;
    std::optional<std::size_t> got;
    std::thread waiter([&] {
      const thread_hook hook(test_point::before_arm, [&] {
        queued.set();
        go.wait_blocking();
      });
      if (how == form::blocking) {
        got = sem.acquire_blocking(2).count();
      } else {
        auto r =
            how == form::stoppable ? sem.acquire_blocking(2, never.get_token()) : sem.acquire_timeout(2, 1h);
        if (r.ok()) got = r->count();
      }
    });
    queued.wait_blocking();  // queued, not parked yet
    sem.release(2);
    EXPECT_EQ(sem.available(), 0U)
        << "the permits were left free for a retry instead of handed to the thread";
    EXPECT_FALSE(sem.try_acquire(1).has_value());
    go.set();
    waiter.join();
    EXPECT_EQ(got, 2U);
    EXPECT_EQ(sem.available(), 2U);
  }
}

TEST(SemaphoreBarging, WhatARetryLeavesServesTheWaitersQueuedBehindItAtOnce) {
  queue_fixture f(0);
  acquisition& retrying = f.add(1, plain);
  acquisition& handed = f.add(2);
  acquisition& retrying_behind = f.add(1, plain);
  f.sem.release(1);  // retrying's retry posted
  EXPECT_EQ(f.s.ready_count(), 1U);
  f.sem.release(3);  // while the retry is in flight: added, nobody served
  EXPECT_EQ(f.s.ready_count(), 1U);
  EXPECT_EQ(f.sem.available(), 4U);
  f.s.step();  // the retry takes one; the three left serve the two behind it
  expect_served(retrying);
  EXPECT_EQ(f.s.ready_count(), 2U) << "the waiters behind the retry were left for another release";
  EXPECT_EQ(queued_on(f.sem), 0U);
  f.s.run();
  expect_served(handed);
  expect_served(retrying_behind);
  EXPECT_EQ(f.order, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(f.sem.available(), 0U);
}

TEST(SemaphoreBarging, ReleasesRepayADeficitBeforeABargerAQueuedWaiterOrARetryTakesAPermit) {
  queue_fixture f(1);
  f.sem.reduce_permits(3);  // the one at once, two owed
  acquisition& w = f.add(1, plain);
  expect_waiting(w);
  for (int i = 0; i < 2; ++i) {
    f.sem.release(1);  // repays the deficit
    EXPECT_EQ(f.s.ready_count(), 0U);
    EXPECT_EQ(f.sem.available(), 0U);
    EXPECT_FALSE(f.sem.try_acquire(1).has_value());
  }
  f.sem.release(1);  // nothing owed any more: w's retry
  EXPECT_EQ(f.s.ready_count(), 1U);
  EXPECT_EQ(f.sem.available(), 1U);

  f.sem.reduce_permits(2);  // the free one at once, one owed, while the retry is in flight
  EXPECT_EQ(f.sem.available(), 0U);
  f.sem.release(1);  // repays it: nothing for the retry
  EXPECT_EQ(f.sem.available(), 0U);
  EXPECT_FALSE(f.sem.try_acquire(1).has_value());
  f.s.step();  // the retry finds nothing: back to the queue
  expect_waiting(w);
  EXPECT_EQ(queued_on(f.sem), 1U);
  f.sem.release(1);
  f.s.run();
  expect_served(w);
  EXPECT_EQ(f.sem.available(), 0U);
  f.sem.release(1);
  EXPECT_EQ(f.sem.available(), 1U);
}

TEST(SemaphoreBarging, ReleaseAboveMaxThrowsOverflowAndChangesNothingWhileSomebodyWaits) {
  constexpr std::size_t max = semaphore::max();
  queue_fixture f(max - 1);
  acquisition& w = f.add(max, plain);
  expect_waiting(w);
  EXPECT_THROW(f.sem.release(2), std::overflow_error);  // w is queued: the locked give
  EXPECT_EQ(f.sem.available(), max - 1);
  EXPECT_EQ(f.s.ready_count(), 0U);
  f.sem.release(1);  // w's request: its retry posted
  EXPECT_EQ(f.s.ready_count(), 1U);
  EXPECT_THROW(f.sem.release(1), std::overflow_error);  // a retry in flight: the lock-free give
  EXPECT_EQ(f.sem.available(), max);
  f.s.run();
  expect_served(w);
  EXPECT_EQ(f.sem.available(), 0U);
}

TEST(SemaphoreBarging, CancellingOrDestroyingTheHeadLetsTheCoveredWaitersBehindItIn) {
  for (const bool destroy : {false, true}) {
    SCOPED_TRACE(destroy ? "destroyed" : "stopped");
    queue_fixture f(0);
    acquisition& head = f.add(3, destroy ? plain : cancellable);
    acquisition& handed = f.add(1);
    acquisition& retrying = f.add(1, plain);
    f.sem.release(2);  // not the head's three: nobody is served
    EXPECT_EQ(f.s.ready_count(), 0U);
    EXPECT_EQ(f.sem.available(), 2U);

    if (destroy) {
      f.task_of(head) = {};
    } else {
      head.stop.request_stop();
    }
    EXPECT_EQ(f.s.ready_count(), destroy ? 2U : 3U) << "the waiters behind the head were not let in";
    EXPECT_EQ(queued_on(f.sem), 0U);
    f.s.run();
    if (destroy) {
      EXPECT_EQ(head.resumed, 0);
    } else {
      expect_cancelled(head);
    }
    expect_served(handed);
    expect_served(retrying);
    EXPECT_EQ(f.sem.available(), 0U);
  }
}

TEST(SemaphoreBarging, AWhenAnyAcquisitionThatLostLetsTheWaiterBehindItIn) {
  semaphore other(0);
  queue_fixture f(0);
  either_acquisition either;
  f.s.spawn(acquire_either(f.sem, 2, other, either));
  f.s.run();
  acquisition& behind = f.add(1, plain);
  f.sem.release(1);  // not the when_any's two
  EXPECT_EQ(f.s.ready_count(), 0U);

  other.release(1);  // the when_any wins there; its branch here lost
  EXPECT_EQ(f.s.ready_count(), 2U) << "the waiter behind was not let in when the branch at the head lost";
  EXPECT_EQ(queued_on(f.sem), 0U);
  f.s.run();
  EXPECT_EQ(either.resumed, 1);
  EXPECT_EQ(either.index, 1U);
  expect_served(behind);
  EXPECT_EQ(f.sem.available(), 0U);
  EXPECT_EQ(other.available(), 1U);  // the winner's permit went back with its result
}

TEST(SemaphoreBarging, AReleaseSkipsALostWhenAnyAcquisitionAtTheHeadAndGrantsItNothing) {
  semaphore other(0);
  queue_fixture f(0);
  either_acquisition either;
  f.s.spawn(acquire_either(f.sem, 2, other, either));
  f.s.run();
  acquisition& behind = f.add(1);
  std::size_t ready_after_release = 0;
  std::size_t available_after_release = 0;
  f.s.at(test_point::claimed_for_wake, [&] {  // the when_any is committed to `other`, not resolved
    f.sem.release(2);
    ready_after_release = f.s.ready_count();
    available_after_release = f.sem.available();
  });
  other.release(1);
  EXPECT_EQ(f.s.pending_actions(), 0U);
  EXPECT_EQ(ready_after_release, 1U) << "the release did not serve the waiter behind the lost branch";
  EXPECT_EQ(available_after_release, 1U) << "the lost branch was granted permits";
  f.s.run();
  EXPECT_EQ(either.resumed, 1);
  EXPECT_EQ(either.index, 1U);
  expect_served(behind);
  EXPECT_EQ(f.sem.available(), 1U);
}

TEST(SemaphoreBarging, DestroyingACoroutineWhoseRetryWentBackToTheQueueUnlinksIt) {
  queue_fixture f(0);
  acquisition& doomed = f.add(1, plain);
  acquisition& next = f.add(1, plain);
  f.sem.release(1);  // doomed's retry posted
  auto barger = f.sem.try_acquire(1);
  ASSERT_TRUE(barger.has_value());
  f.s.step();  // the retry loses: doomed is queued again, at the front
  EXPECT_EQ(f.s.ready_count(), 0U);
  EXPECT_EQ(queued_on(f.sem), 2U);
  f.task_of(doomed) = {};
  EXPECT_EQ(queued_on(f.sem), 1U);
  barger.reset();  // next's retry
  EXPECT_EQ(f.s.ready_count(), 1U);
  f.s.run();
  EXPECT_EQ(doomed.resumed, 0);
  expect_served(next);
  EXPECT_EQ(f.sem.available(), 0U);
}

}  // namespace
