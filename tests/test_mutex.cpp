// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::mutex: try_lock / lock / lock_blocking / lock_timeout, guards (access,
// unlock, moves, map), owned guards that keep the mutex alive, FIFO hand-off without barging,
// cancellation racing the hand-off at the waiter core's test points, destruction of suspended
// lockers, plain threads and block_on, "last one out", and a bounded multi-threaded stress test.
#include "asyncband/mutex.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/debug.hpp"
#include "asyncband/manual_reset_event.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/semaphore.hpp"
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
using asyncband::mapped_mutex_guard;
using asyncband::mutex;
using asyncband::mutex_guard;
using asyncband::owned_mutex_guard;
using asyncband::runtime::thread_pool;

// ---------------------------------------------------------------------------------------------
// Helpers

/// A mutex as the shared wait scenarios (support/wait_contract.hpp) see a primitive: wait() is
/// lock(), and the test holds the lock from the start (`held`), so that every lock queues;
/// `unlock_held` is the scenarios' wake. The waiter coroutines keep the guard they receive until
/// they end, so each one unlocks (handing the mutex on) as soon as it has run.
/// `Fifo`: the mutex is built with asyncband::strict_fifo (no barging).
template <bool Fifo>
struct basic_held_mutex {
  basic_held_mutex() noexcept
    requires(!Fifo)
  {}
  basic_held_mutex() noexcept
    requires Fifo
      : m(asyncband::strict_fifo) {}

  mutex<int> m;
  std::optional<mutex_guard<int>> held = m.try_lock();

  [[nodiscard]] auto wait() noexcept { return m.lock(); }
  [[nodiscard]] auto wait(asyncband::stop_token stop) noexcept { return m.lock(std::move(stop)); }
  auto wait_blocking() { return m.lock_blocking(); }
  auto wait_blocking(asyncband::stop_token stop) { return m.lock_blocking(std::move(stop)); }
  template <class Rep, class Period>
  auto wait_timeout(std::chrono::duration<Rep, Period> timeout) {
    return m.lock_timeout(timeout);
  }
};

using held_mutex = basic_held_mutex<false>;
using held_fifo_mutex = basic_held_mutex<true>;

const auto unlock_held = [](auto& h) { h.held.reset(); };

/// Nothing is left locked or queued: the mutex is free and a try_lock gets it.
void expect_free(mutex<int>& m) {
  EXPECT_FALSE(m.is_locked());
  {
    const auto g = m.try_lock();
    EXPECT_TRUE(g.has_value());
    EXPECT_FALSE(m.try_lock().has_value()) << "a second holder: a permit was given twice";
  }
  EXPECT_FALSE(m.is_locked());
}

/// What a locker saw once it had the lock: that its guard owned this mutex, locked.
struct lock_probe : probe {
  bool owned = false;
  template <class Held>
  void after_wait(Held& /*unused*/) noexcept {}
  template <class Held>
  void after_wait(Held& h, const mutex_guard<int>& g) noexcept {
    owned = g.owns_lock() && g.mutex() == &h.m && h.m.is_locked();
  }
};

/// The order in which turns called lock() and got it, and how many are inside at once.
struct turn_log {
  std::vector<int> arrivals;
  std::vector<int> acquisitions;
  int inside = 0;
  int cancelled = 0;
};

/// One turn at the lock on the test scheduler: announces itself (arrival order), locks (with
/// `stop` when it is possible), checks that it is alone inside, holds the lock across `holds`
/// reschedulings (everybody else runs meanwhile) and unlocks.
task<void> take_turn(test_scheduler& s, mutex<int>& m, int id, int holds, asyncband::stop_token stop,
                     turn_log& log) {
  log.arrivals.push_back(id);
  std::optional<mutex_guard<int>> g;
  if (stop.stop_possible()) {
    auto r = co_await m.lock(std::move(stop));
    if (!r.ok()) {
      EXPECT_EQ(r.status(), wait_status::cancelled);
      ++log.cancelled;
      std::erase(log.arrivals, id);  // it never held the lock: not in the acquisition order
      co_return;
    }
    g.emplace(std::move(*r));
  } else {
    g.emplace(co_await m.lock());
  }
  log.acquisitions.push_back(id);
  EXPECT_EQ(log.inside++, 0) << "turn " << id << " entered while another held the lock";
  ++**g;
  for (int k = 0; k < holds; ++k) co_await s.schedule();
  EXPECT_EQ(--log.inside, 0);
}

/// Requests stop after `delay` reschedulings on `s`.
task<void> request_stop_later(test_scheduler& s, asyncband::stop_source& src, int delay) {
  for (int k = 0; k < delay; ++k) co_await s.schedule();
  src.request_stop();
}

// ---------------------------------------------------------------------------------------------
// Locking without waiting, guards

TEST(Mutex, TryLockGivesExclusiveAccessToTheValue) {
  mutex<int> m(5);
  EXPECT_FALSE(m.is_locked());
  auto g = m.try_lock();
  ASSERT_TRUE(g.has_value());
  EXPECT_TRUE(g->owns_lock());
  EXPECT_EQ(g->mutex(), &m);
  EXPECT_EQ(**g, 5);
  **g = 6;
  EXPECT_TRUE(m.is_locked());
  EXPECT_FALSE(m.try_lock().has_value());  // not recursive, no second holder
  g.reset();
  EXPECT_FALSE(m.is_locked());
  auto again = m.try_lock();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(**again, 6);  // the first holder's write
}

TEST(Mutex, ValueConstructionAndArrowAccess) {
  mutex<> nothing;  // protects std::monostate
  EXPECT_TRUE(nothing.try_lock().has_value());

  mutex<std::pair<int, std::string>> m(std::in_place, 3, "abc");
  auto g = m.try_lock();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ((*g)->first, 3);
  EXPECT_EQ((*g)->second, "abc");
  (*g)->second += "d";
  EXPECT_EQ((**g).second, "abcd");

  mutex<std::string> from_value(std::string("xyz"));
  EXPECT_EQ(**from_value.try_lock(), "xyz");
  mutex<std::vector<int>> defaulted;
  EXPECT_TRUE((*defaulted.try_lock())->empty());
}

TEST(Mutex, GuardUnlockReleasesAtOnceAndGivesNoMoreAccess) {
  mutex<int> m(1);
  auto g = *m.try_lock();
  g.unlock();
  EXPECT_FALSE(g.owns_lock());
  EXPECT_EQ(g.mutex(), nullptr);
  EXPECT_FALSE(m.is_locked());
  auto other = m.try_lock();
  EXPECT_TRUE(other.has_value());
  g.unlock();  // a second unlock does nothing: the other holder keeps the lock
  EXPECT_TRUE(m.is_locked());
}

TEST(Mutex, GuardMovesTransferTheLock) {
  mutex<int> a(1);
  mutex<int> b(2);
  auto ga = *a.try_lock();
  mutex_guard<int> moved(std::move(ga));
  EXPECT_FALSE(ga.owns_lock());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(ga.mutex(), nullptr);
  EXPECT_TRUE(moved.owns_lock());
  EXPECT_EQ(moved.mutex(), &a);
  EXPECT_EQ(*moved, 1);
  EXPECT_TRUE(a.is_locked());

  auto gb = *b.try_lock();
  moved = std::move(gb);  // unlocks `a` first
  EXPECT_FALSE(a.is_locked());
  EXPECT_TRUE(b.is_locked());
  EXPECT_EQ(moved.mutex(), &b);
  EXPECT_EQ(*moved, 2);
  EXPECT_FALSE(gb.owns_lock());  // NOLINT(bugprone-use-after-move)

  moved = std::move(ga);  // an empty guard moved in: `b` is unlocked, nothing is held
  EXPECT_FALSE(b.is_locked());
  EXPECT_FALSE(moved.owns_lock());
  EXPECT_EQ(moved.mutex(), nullptr);
  {
    auto ga2 = *a.try_lock();
    const mutex_guard<int> sink(std::move(ga2));
  }  // the moved-from guard's destruction unlocks nothing twice
  EXPECT_FALSE(a.is_locked());
  expect_free(a);
  expect_free(b);
}

// ---------------------------------------------------------------------------------------------
// map

struct account {
  int id = 0;
  std::string name;
};

TEST(MutexMap, MappedGuardGivesAccessToAPartAndKeepsTheLock) {
  mutex<account> m(account{7, "ann"});
  auto name = (*m.try_lock()).map([](account& a) -> std::string& { return a.name; });
  EXPECT_TRUE(name.owns_lock());
  EXPECT_TRUE(m.is_locked());
  EXPECT_FALSE(m.try_lock().has_value());
  EXPECT_EQ(*name, "ann");
  EXPECT_EQ(name->size(), 3U);
  *name = "bob";

  auto initial = std::move(name).map([](std::string& s) -> char& { return s[0]; });  // narrows further
  EXPECT_TRUE(initial.owns_lock());
  EXPECT_FALSE(name.owns_lock());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(m.is_locked());
  *initial = 'r';

  mapped_mutex_guard<char> moved(std::move(initial));
  EXPECT_TRUE(moved.owns_lock());
  EXPECT_FALSE(initial.owns_lock());  // NOLINT(bugprone-use-after-move)
  moved.unlock();
  EXPECT_FALSE(moved.owns_lock());
  EXPECT_FALSE(m.is_locked());
  auto g = m.try_lock();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ((*g)->name, "rob");
  EXPECT_EQ((*g)->id, 7);
}

TEST(MutexMap, MappedGuardUnlocksOnDestructionAndMoveAssignment) {
  mutex<account> a(account{1, "a"});
  mutex<account> b(account{2, "b"});
  const auto id_of = [](account& acc) -> int& { return acc.id; };
  {
    auto ida = (*a.try_lock()).map(id_of);
    EXPECT_EQ(*ida, 1);
    ida = (*b.try_lock()).map(id_of);  // releases `a` first
    EXPECT_FALSE(a.is_locked());
    EXPECT_TRUE(b.is_locked());
    EXPECT_EQ(*ida, 2);
  }
  EXPECT_FALSE(b.is_locked());
}

TEST(MutexMap, AMappingFunctionThatThrowsLeavesTheLockHeld) {
  mutex<account> m(account{3, "c"});
  auto g = *m.try_lock();
  const auto boom = [](account& /*unused*/) -> int& { throw std::runtime_error("boom"); };
  EXPECT_THROW((void)std::move(g).map(boom), std::runtime_error);
  EXPECT_TRUE(g.owns_lock());  // NOLINT(bugprone-use-after-move): map threw before taking anything
  EXPECT_EQ(g.mutex(), &m);
  EXPECT_TRUE(m.is_locked());
  EXPECT_EQ(g->id, 3);

  auto name = std::move(g).map([](account& acc) -> std::string& { return acc.name; });
  const auto boom_again = [](std::string& /*unused*/) -> char& { throw std::runtime_error("again"); };
  EXPECT_THROW((void)std::move(name).map(boom_again), std::runtime_error);
  EXPECT_TRUE(name.owns_lock());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(m.is_locked());
  EXPECT_EQ(*name, "c");
  name.unlock();
  EXPECT_FALSE(m.is_locked());
}

/// An account's nickname, if it has one: what try_map's functions return.
struct profile {
  int id = 0;
  std::optional<std::string> nickname;
};

TEST(MutexTryMap, APartThatIsThereMovesTheLockToTheMappedGuard) {
  mutex<profile> m(profile{1, "al"});
  auto g = *m.try_lock();
  auto nick = g.try_map([](profile& p) { return p.nickname ? &*p.nickname : nullptr; });
  ASSERT_TRUE(nick.has_value());
  EXPECT_TRUE(nick->owns_lock());
  EXPECT_FALSE(g.owns_lock());  // emptied: the lock moved
  EXPECT_EQ(g.mutex(), nullptr);
  EXPECT_TRUE(m.is_locked());
  **nick = "alf";
  auto first = nick->try_map([](std::string& s) { return s.empty() ? nullptr : &s[0]; });  // narrows further
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(nick->owns_lock());
  **first = 'A';
  first->unlock();
  EXPECT_FALSE(m.is_locked());
  EXPECT_EQ(*(*m.try_lock())->nickname, "Alf");
}

TEST(MutexTryMap, NoPartOrAThrowingFunctionLeavesTheLockWithTheGuard) {
  mutex<profile> m(profile{2, std::nullopt});
  auto g = *m.try_lock();
  const auto nickname_of = [](profile& p) { return p.nickname ? &*p.nickname : nullptr; };
  EXPECT_FALSE(g.try_map(nickname_of).has_value());
  EXPECT_TRUE(g.owns_lock());
  EXPECT_EQ(g.mutex(), &m);
  EXPECT_TRUE(m.is_locked());
  const auto boom = [](profile& /*unused*/) -> int* { throw std::runtime_error("boom"); };
  EXPECT_THROW((void)g.try_map(boom), std::runtime_error);
  EXPECT_TRUE(g.owns_lock());
  g->nickname = "bo";

  auto id = std::move(g).map([](profile& p) -> profile& { return p; });
  EXPECT_THROW((void)id.try_map([](profile& /*unused*/) -> int* { throw std::runtime_error("again"); }),
               std::runtime_error);
  EXPECT_TRUE(id.owns_lock());
  EXPECT_FALSE(id.try_map([](profile& /*unused*/) -> int* { return nullptr; }).has_value());
  EXPECT_TRUE(id.owns_lock());
  EXPECT_TRUE(m.is_locked());
  id.unlock();
  EXPECT_FALSE(m.is_locked());
}

TEST(MutexTryMap, TheMappedGuardHandsTheLockToAQueuedLocker) {
  test_scheduler s;
  held_mutex h;
  lock_probe p;
  s.spawn(plain_waiter(h, p));
  s.run();
  {
    auto part = h.held->try_map([](int& v) { return &v; });
    ASSERT_TRUE(part.has_value());
    h.held.reset();  // the emptied guard unlocks nothing
    EXPECT_EQ(s.ready_count(), 0U);
    **part = 9;
  }
  EXPECT_EQ(s.ready_count(), 1U);  // handed to the locker
  s.run();
  EXPECT_EQ(p.resumed, 1);
}

TEST(MutexExclusiveAccess, GetMutAndIntoInnerReachTheValueWithoutLocking) {
  mutex<std::string> m(std::string("before"));
  m.get_mut() += " shared";  // before anybody else has it
  EXPECT_FALSE(m.is_locked());
  {
    auto g = *m.try_lock();
    EXPECT_EQ(*g, "before shared");
    *g = "after";
  }
  EXPECT_EQ(m.get_mut(), "after");  // after everybody is done
  const std::string out = std::move(m).into_inner();
  EXPECT_EQ(out, "after");
  EXPECT_TRUE(m.try_lock().has_value());  // NOLINT(bugprone-use-after-move): it keeps a moved-from value
}

TEST(MutexExclusiveAccessDeathTest, GetMutWhileLockedAsserts) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  EXPECT_DEATH(
      {
        mutex<int> m(0);
        const auto g = m.try_lock();
        (void)m.get_mut();
      },
      "get_mut while locked");
}

TEST(MutexMap, AMappedGuardHandsTheLockToAQueuedLocker) {
  test_scheduler s;
  held_mutex h;
  lock_probe p;
  s.spawn(plain_waiter(h, p));
  s.run();
  {
    auto part = std::move(*h.held).map([](int& v) -> int& { return v; });
    h.held.reset();  // the emptied guard unlocks nothing
    EXPECT_EQ(s.ready_count(), 0U);
    EXPECT_TRUE(h.m.is_locked());
    *part = 42;
  }
  EXPECT_EQ(s.ready_count(), 1U);  // handed to the locker
  s.run();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_TRUE(p.owned);
  auto g = h.m.try_lock();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(**g, 42);
}

// ---------------------------------------------------------------------------------------------
// Owned guards

using shared_mutex_ptr = std::shared_ptr<mutex<int>>;

/// An owned guard from `acquire(shared_ptr)` keeps the mutex alive once the test's own pointer is
/// gone, gives access, and its destruction unlocks and then frees the mutex.
template <class Acquire>
void owned_guard_keeps_the_mutex_alive(Acquire acquire) {
  auto m = std::make_shared<mutex<int>>(10);
  const std::weak_ptr<mutex<int>> weak = m;
  std::optional<owned_mutex_guard<int>> g(acquire(m));
  ASSERT_TRUE(g->owns_lock());
  EXPECT_EQ(g->mutex(), m);
  EXPECT_TRUE(m->is_locked());
  m.reset();
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(weak.use_count(), 1);  // only the guard
  EXPECT_EQ(**g, 10);
  **g = 11;
  EXPECT_EQ(*g->operator->(), 11);
  g.reset();
  EXPECT_TRUE(weak.expired());
}

TEST(MutexOwned, EveryFormKeepsTheMutexAlive) {
  {
    SCOPED_TRACE("try_lock_owned");
    owned_guard_keeps_the_mutex_alive(
        [](shared_mutex_ptr m) { return *asyncband::try_lock_owned(std::move(m)); });
  }
  {
    SCOPED_TRACE("lock_owned_blocking");
    owned_guard_keeps_the_mutex_alive(
        [](shared_mutex_ptr m) { return asyncband::lock_owned_blocking(std::move(m)); });
  }
  {
    SCOPED_TRACE("lock_owned");
    owned_guard_keeps_the_mutex_alive(
        [](shared_mutex_ptr m) { return block_on(asyncband::lock_owned(std::move(m))); });
  }
  {
    SCOPED_TRACE("lock_owned(stop)");
    owned_guard_keeps_the_mutex_alive([](shared_mutex_ptr m) {
      asyncband::stop_source never;
      return block_on(asyncband::lock_owned(std::move(m), never.get_token())).value();
    });
  }
  {
    SCOPED_TRACE("lock_owned_blocking(stop)");
    owned_guard_keeps_the_mutex_alive([](shared_mutex_ptr m) {
      asyncband::stop_source never;
      return asyncband::lock_owned_blocking(std::move(m), never.get_token()).value();
    });
  }
}

TEST(MutexOwned, UnlockReleasesTheLockAndKeepsTheReference) {
  auto m = std::make_shared<mutex<int>>(0);
  auto g = asyncband::lock_owned_blocking(m);
  g.unlock();
  EXPECT_FALSE(g.owns_lock());
  EXPECT_FALSE(m->is_locked());
  EXPECT_EQ(m.use_count(), 2);  // still owned by the guard
  EXPECT_TRUE(m->try_lock().has_value());
}

TEST(MutexOwned, FailedOrCancelledAttemptsKeepNoReference) {
  auto m = std::make_shared<mutex<int>>(0);
  auto holder = asyncband::try_lock_owned(m);
  ASSERT_TRUE(holder.has_value());
  EXPECT_EQ(m.use_count(), 2);
  EXPECT_FALSE(asyncband::try_lock_owned(m).has_value());
  EXPECT_EQ(m.use_count(), 2);
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(block_on(asyncband::lock_owned(m, stopped.get_token())).cancelled());
  EXPECT_EQ(m.use_count(), 2);
  EXPECT_TRUE(asyncband::lock_owned_blocking(m, stopped.get_token()).cancelled());
  EXPECT_EQ(m.use_count(), 2);
  holder.reset();
  EXPECT_EQ(m.use_count(), 1);
  EXPECT_FALSE(m->is_locked());
}

/// Locks `m` with lock_owned (with `stop` when possible), moving the pointer into the lock so
/// that the coroutine keeps no reference of its own; records in `p`, and whether its guard was
/// the mutex's only owner.
task<void> owned_locker(shared_mutex_ptr m, asyncband::stop_token stop, int value, probe& p, long& owners) {
  ++p.started;
  std::optional<owned_mutex_guard<int>> g;
  if (stop.stop_possible()) {
    auto r = co_await asyncband::lock_owned(std::move(m), std::move(stop));
    p.finish(r.status());
    if (!r.ok()) co_return;
    g.emplace(std::move(*r));
  } else {
    g.emplace(co_await asyncband::lock_owned(std::move(m)));
    p.finish(wait_status::ok);
  }
  owners = g->mutex().use_count();
  **g = value;
}

TEST(MutexOwned, AQueuedOwnedLockKeepsTheMutexAliveAfterEveryOtherOwnerLeft) {
  test_scheduler s;
  auto m = std::make_shared<mutex<int>>(0);
  const std::weak_ptr<mutex<int>> weak = m;
  auto holder = asyncband::try_lock_owned(m);
  ASSERT_TRUE(holder.has_value());
  probe p;
  long owners = 0;
  s.spawn(owned_locker(std::move(m), asyncband::stop_token{}, 5, p, owners));
  s.run();
  EXPECT_EQ(p.resumed, 0);
  EXPECT_EQ(weak.use_count(), 2);  // the holder and the queued lock

  holder.reset();  // unlocks (handing the mutex to the queued lock), then drops its reference
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
  EXPECT_EQ(owners, 1);  // its guard was the last owner
  EXPECT_TRUE(weak.expired());
}

TEST(MutexOwned, ACancelledOwnedLockReleasesItsReferenceAndTheLockStaysWithItsHolder) {
  test_scheduler s;
  auto m = std::make_shared<mutex<int>>(0);
  const std::weak_ptr<mutex<int>> weak = m;
  auto holder = asyncband::try_lock_owned(m);
  asyncband::stop_source src;
  probe p;
  long owners = 0;
  s.spawn(owned_locker(std::move(m), src.get_token(), 5, p, owners));
  s.run();
  src.request_stop();
  s.run();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::cancelled);
  EXPECT_EQ(weak.use_count(), 1);  // only the holder
  EXPECT_TRUE(holder->owns_lock());
  EXPECT_EQ(**holder, 0);
  holder.reset();
  EXPECT_TRUE(weak.expired());
}

/// Whether the mutex `weak` refers to is locked; a failure if it is gone. (The null check also
/// keeps g++ 12 from warning about a null dereference it imagines inside is_locked().)
template <class T>
bool locked_if_alive(const std::weak_ptr<mutex<T>>& weak) {
  const auto m = weak.lock();
  if (m == nullptr) {
    ADD_FAILURE() << "the mutex is gone";
    return false;
  }
  return m->is_locked();
}

TEST(MutexOwnedMap, AMappedOwnedGuardKeepsTheMutexAliveAndUnlocksBeforeLettingGo) {
  auto m = std::make_shared<mutex<profile>>(profile{4, "dee"});
  const std::weak_ptr<mutex<profile>> weak = m;
  auto g = *asyncband::try_lock_owned(m);
  auto nick = std::move(g).map([](profile& p) -> std::optional<std::string>& { return p.nickname; });
  EXPECT_FALSE(g.owns_lock());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(nick.owns_lock());
  auto text = nick.try_map([](std::optional<std::string>& n) { return n ? &*n : nullptr; });
  ASSERT_TRUE(text.has_value());
  EXPECT_FALSE(nick.owns_lock());
  m.reset();  // only the guards keep it now
  EXPECT_FALSE(weak.expired());
  **text = "D";
  EXPECT_EQ((*text)->size(), 1U);
  EXPECT_TRUE(locked_if_alive(weak));
  text->unlock();
  EXPECT_FALSE(locked_if_alive(weak));
  EXPECT_FALSE(weak.expired());  // unlock keeps the reference
  text.reset();                  // the reference moved along with the lock: this was the last one
  EXPECT_TRUE(weak.expired());
}

TEST(MutexOwnedMap, TryMapWithoutAPartAndMoveAssignmentUnlockInOrder) {
  auto a = std::make_shared<mutex<profile>>(profile{5, std::nullopt});
  auto b = std::make_shared<mutex<profile>>(profile{6, "b"});
  const std::weak_ptr<mutex<profile>> weak_a = a;
  auto ga = *asyncband::try_lock_owned(std::move(a));
  EXPECT_FALSE(ga.try_map([](profile& p) { return p.nickname ? &*p.nickname : nullptr; }).has_value());
  EXPECT_TRUE(ga.owns_lock());
  auto ida = std::move(ga).map([](profile& p) -> int& { return p.id; });
  auto idb = (*asyncband::try_lock_owned(b)).map([](profile& p) -> int& { return p.id; });
  ida = std::move(idb);  // unlocks `a`, then drops the last reference to it
  EXPECT_TRUE(weak_a.expired());
  EXPECT_EQ(*ida, 6);
  EXPECT_TRUE(b->is_locked());
  ida.unlock();
  EXPECT_FALSE(b->is_locked());
}

TEST(MutexOwned, MovesTransferTheLockAndTheOwnership) {
  test_scheduler s;
  auto a = std::make_shared<mutex<int>>(1);
  auto b = std::make_shared<mutex<int>>(2);
  const std::weak_ptr<mutex<int>> weak_a = a;
  auto ga = *asyncband::try_lock_owned(a);
  auto gb = *asyncband::try_lock_owned(b);
  probe next;  // queued for `a`, with its own reference
  long owners = 0;
  s.spawn(owned_locker(a, asyncband::stop_token{}, 3, next, owners));
  s.run();
  a.reset();

  owned_mutex_guard<int> moved(std::move(ga));
  EXPECT_FALSE(ga.owns_lock());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(ga.mutex(), nullptr);
  EXPECT_TRUE(moved.owns_lock());
  EXPECT_EQ(*moved, 1);
  EXPECT_EQ(s.ready_count(), 0U);

  moved = std::move(gb);  // unlocks `a` (handing it to `next`) before dropping its reference
  EXPECT_EQ(moved.mutex(), b);
  EXPECT_EQ(*moved, 2);
  EXPECT_FALSE(gb.owns_lock());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(next.status, wait_status::ok);
  EXPECT_EQ(owners, 1);
  EXPECT_TRUE(weak_a.expired());
  EXPECT_TRUE(b->is_locked());
  moved = owned_mutex_guard<int>(std::move(moved));
  EXPECT_TRUE(b->is_locked());
  { const owned_mutex_guard<int> sink(std::move(moved)); }
  EXPECT_FALSE(b->is_locked());
}

// ---------------------------------------------------------------------------------------------
// Locking from coroutines: hand-off order, no barging

TEST(Mutex, UncontendedLockCompletesWithoutSuspending) {
  test_scheduler s;
  held_mutex h;
  h.held.reset();
  lock_probe plain;
  lock_probe stoppable;
  asyncband::stop_source src;
  s.spawn(plain_waiter(h, plain));
  s.spawn(stoppable_waiter(h, src.get_token(), stoppable));
  EXPECT_EQ(s.run(), 2U);  // one step each: neither suspended
  EXPECT_TRUE(plain.owned);
  EXPECT_TRUE(stoppable.owned);
  EXPECT_EQ(stoppable.status, wait_status::ok);
  expect_free(h.m);
}

TEST(Mutex, LockIsHandedToWaitersInFifoOrder) {
  test_scheduler s;
  held_mutex h;
  std::vector<int> order;
  std::array<lock_probe, 5> probes;
  asyncband::stop_source src;  // never stopped
  for (int i = 0; i < 5; ++i) {
    probes[static_cast<std::size_t>(i)].id = i;
    probes[static_cast<std::size_t>(i)].order = &order;
  }
  spawn_alternating_waiters(s, h, probes, src.get_token());
  s.run();
  EXPECT_TRUE(order.empty());

  h.held.reset();
  // One at a time: each unlock (at the end of a waiter) hands the lock to exactly one more.
  for (std::size_t i = 0; i < probes.size(); ++i) {
    EXPECT_EQ(s.ready_count(), 1U) << "step " << i;
    s.step();
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  for (const auto& p : probes) {
    EXPECT_EQ(p.resumed, 1);
    EXPECT_TRUE(p.owned);
  }
  expect_free(h.m);
}

TEST(Mutex, TurnsHoldingTheLockAcrossSuspensionsAreExclusive) {
  // Both kinds: strict FIFO serves in arrival order; bounded barging may let a turn that
  // arrives while the lock is free (the head's retry posted, not run) go first.
  constexpr int kTurns = 8;
  for (const bool fifo : {true, false}) {
    for (const std::uint64_t seed : {0ULL, 1ULL, 2ULL, 3ULL, 4ULL, 5ULL, 17ULL, 99ULL}) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << (fifo ? ", strict FIFO" : ", barging"));
      test_scheduler s(seed == 0 ? std::nullopt : std::optional<std::uint64_t>(seed));
      auto m =
          fifo ? std::make_unique<mutex<int>>(asyncband::strict_fifo, 0) : std::make_unique<mutex<int>>(0);
      turn_log log;
      for (int id = 0; id < kTurns; ++id)
        s.spawn(take_turn(s, *m, id, 1 + id % 3, asyncband::stop_token{}, log));
      s.run();
      if (fifo) {
        EXPECT_EQ(log.acquisitions, log.arrivals);
      }
      EXPECT_EQ(log.acquisitions.size(), static_cast<std::size_t>(kTurns));
      EXPECT_EQ(log.inside, 0);
      auto g = m->try_lock();
      ASSERT_TRUE(g.has_value());
      EXPECT_EQ(**g, kTurns);
    }
  }
}

TEST(Mutex, CancelledTurnsLeaveTheOthersExclusiveAndUnderStrictFifoInArrivalOrder) {
  constexpr int kTurns = 10;
  for (const bool fifo : {true, false}) {
    int cancelled_somewhere = 0;
    for (std::uint64_t seed = 1; seed <= 24; ++seed) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << (fifo ? ", strict FIFO" : ", barging"));
      test_scheduler s(seed);
      auto m =
          fifo ? std::make_unique<mutex<int>>(asyncband::strict_fifo, 0) : std::make_unique<mutex<int>>(0);
      turn_log log;
      asyncband::stop_source src;
      for (int id = 0; id < kTurns; ++id) {
        const asyncband::stop_token stop = id % 2 == 0 ? asyncband::stop_token{} : src.get_token();
        s.spawn(take_turn(s, *m, id, 1 + id % 2, stop, log));
      }
      s.spawn(request_stop_later(s, src, static_cast<int>(seed % 7)));
      s.run();
      if (fifo) {
        EXPECT_EQ(log.acquisitions, log.arrivals);  // the cancelled ones removed themselves
      }
      EXPECT_EQ(static_cast<int>(log.acquisitions.size()) + log.cancelled, kTurns);
      EXPECT_EQ(log.inside, 0);
      cancelled_somewhere += log.cancelled;
      auto g = m->try_lock();
      ASSERT_TRUE(g.has_value());
      EXPECT_EQ(**g, static_cast<int>(log.acquisitions.size()));
    }
    EXPECT_GT(cancelled_somewhere, 0);  // the seeds do exercise cancellation
  }
}

TEST(MutexStrictFifo, NoBargingTheLockIsHandedToTheQueuedWaiterNotLeftFree) {
  test_scheduler s;
  held_fifo_mutex h;
  lock_probe first;
  lock_probe newcomer;
  std::vector<int> order;
  first.id = 1;
  newcomer.id = 2;
  first.order = newcomer.order = &order;
  s.spawn(plain_waiter(h, first));
  s.run();
  EXPECT_FALSE(h.m.try_lock().has_value());

  h.held.reset();                // hands the lock to `first`; its resumption is queued
  EXPECT_TRUE(h.m.is_locked());  // never free in between
  EXPECT_FALSE(h.m.try_lock().has_value());
  EXPECT_TRUE(h.m.lock_timeout(0ms).timed_out());
  auto late = plain_waiter(h, newcomer);
  run_inline(s, late);  // locks now, before `first` resumes: it must queue behind it
  EXPECT_EQ(newcomer.started, 1);
  EXPECT_EQ(newcomer.resumed, 0);
  EXPECT_FALSE(h.m.try_lock().has_value());
  s.run();
  EXPECT_TRUE(late.done());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_TRUE(first.owned);
  EXPECT_TRUE(newcomer.owned);
  expect_free(h.m);
}

// ---------------------------------------------------------------------------------------------
// Bounded barging: an unlock frees the lock and posts the head's retry to its scheduler

constexpr int max_passes = static_cast<int>(mutex<int>::max_passes);

/// Locks and unlocks `m` with try_lock as long as that succeeds (at most `limit` times), as a
/// stream of running lockers that barge would; returns how many times it got the lock.
int barge_while_free(mutex<int>& m, int limit) {
  int barges = 0;
  while (barges < limit && m.try_lock().has_value()) ++barges;
  return barges;
}

TEST(MutexBarging, AnUnlockFreesTheLockAndPostsTheHeadsRetryWhichANewcomerMayBeat) {
  test_scheduler s;
  held_mutex h;
  lock_probe first;
  s.spawn(plain_waiter(h, first));
  s.run();
  h.held.reset();  // frees the lock and posts first's retry
  EXPECT_FALSE(h.m.is_locked());
  EXPECT_EQ(s.ready_count(), 1U);
  auto barger = h.m.try_lock();  // comes first: takes the free lock
  ASSERT_TRUE(barger.has_value());
  s.step();  // the retry finds the lock held: back to the front of the queue, first not resumed
  EXPECT_EQ(first.resumed, 0);
  EXPECT_EQ(s.ready_count(), 0U);
  barger.reset();  // posts the retry again
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(first.resumed, 1);
  EXPECT_TRUE(first.owned);
  expect_free(h.m);
}

/// Two lockers' probes that log the order in which they got the lock (ids 1 and 2).
struct two_lockers {
  std::vector<int> order;
  lock_probe first;
  lock_probe second;
  two_lockers() {
    first.id = 1;
    second.id = 2;
    first.order = second.order = &order;
  }
  two_lockers(const two_lockers&) = delete;
  two_lockers& operator=(const two_lockers&) = delete;
  ~two_lockers() = default;
};

TEST(MutexBarging, ARetryThatLostKeepsItsPlaceAheadOfLaterWaiters) {
  test_scheduler s;
  held_mutex h;
  two_lockers lockers;
  auto& [order, first, second] = lockers;
  s.spawn(plain_waiter(h, first));
  s.spawn(plain_waiter(h, second));
  s.run();
  h.held.reset();
  auto barger = h.m.try_lock();
  ASSERT_TRUE(barger.has_value());
  s.step();  // first's retry lost: queued again, ahead of second
  EXPECT_EQ(s.ready_count(), 0U);
  barger.reset();  // posts first's retry, not second's
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_TRUE(first.owned);
  EXPECT_TRUE(second.owned);
  expect_free(h.m);
}

// The bound, with the retry in flight all along: every unlock passes it until the max_passes-th
// (counted from the mutex's construction here) keeps the lock for it.
TEST(MutexBarging, AfterMaxPassesTheRetryInFlightIsHandedTheLockBeforeAnyBarger) {
  test_scheduler s;
  held_mutex h;
  lock_probe first;
  s.spawn(plain_waiter(h, first));
  s.run();
  h.held.reset();  // the first pass: the lock is free, first's retry posted
  EXPECT_EQ(barge_while_free(h.m, 10 * max_passes), max_passes - 1);
  EXPECT_TRUE(h.m.is_locked());  // kept for the retry: no barger gets it any more
  EXPECT_FALSE(h.m.try_lock().has_value());
  EXPECT_TRUE(h.m.lock_timeout(0ms).timed_out());
  EXPECT_EQ(first.resumed, 0);
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();  // the retry finds the lock handed to it
  EXPECT_EQ(first.resumed, 1);
  EXPECT_TRUE(first.owned);
  expect_free(h.m);
}

// The bound, with the retry losing each time and queueing again: the max_passes-th unlock
// hands the lock to the head of the queue.
TEST(MutexBarging, AfterMaxPassesAQueuedWaiterIsHandedTheLockBeforeAnyBarger) {
  test_scheduler s;
  held_mutex h;
  lock_probe first;
  s.spawn(plain_waiter(h, first));
  s.run();
  h.held.reset();  // the first pass: first's retry posted
  int passes = 1;
  for (;;) {
    auto barger = h.m.try_lock();
    if (!barger) break;
    ASSERT_EQ(s.ready_count(), 1U);
    s.step();  // the retry loses and queues again at the front
    EXPECT_EQ(first.resumed, 0);
    barger.reset();  // passes it again (posting its retry), or hands it the lock
    ASSERT_LE(++passes, max_passes);
  }
  EXPECT_EQ(passes, max_passes);
  EXPECT_TRUE(h.m.is_locked());
  EXPECT_EQ(first.resumed, 0);
  s.run();
  EXPECT_EQ(first.resumed, 1);
  EXPECT_TRUE(first.owned);
  expect_free(h.m);
}

// A waiter that cannot retry (a lock with a stop token; also threads, when_any branches and
// coroutines without a scheduler) is handed the lock in FIFO order: never freed in between.
TEST(MutexBarging, AWaiterThatCannotRetryIsHandedTheLockDirectly) {
  test_scheduler s;
  held_mutex h;
  two_lockers lockers;
  auto& [order, plain, stoppable] = lockers;
  asyncband::stop_source src;  // never stopped
  s.spawn(stoppable_waiter(h, src.get_token(), stoppable));
  s.spawn(plain_waiter(h, plain));
  s.run();
  h.held.reset();  // the stoppable one is handed the lock
  EXPECT_TRUE(h.m.is_locked());
  EXPECT_FALSE(h.m.try_lock().has_value());
  EXPECT_EQ(s.ready_count(), 1U);
  s.step();  // it unlocks as it ends: plain's retry is posted, the lock free
  EXPECT_EQ(order, (std::vector<int>{2}));
  EXPECT_FALSE(h.m.is_locked());
  s.run();
  EXPECT_EQ(order, (std::vector<int>{2, 1}));
  EXPECT_TRUE(plain.owned);
  EXPECT_TRUE(stoppable.owned);
  expect_free(h.m);
}

// The retry loses and queues again; before it arms, the barger unlocks and serves it again: the
// retry sees that at once (its arm finds it resolved) and takes the lock in the same step.
TEST(MutexBargingRace, ARetryServedAgainBeforeItArmsTakesTheLockWithoutSuspending) {
  test_scheduler s;
  held_mutex h;
  lock_probe first;
  s.spawn(plain_waiter(h, first));
  s.run();
  h.held.reset();  // first's retry posted
  auto barger = h.m.try_lock();
  ASSERT_TRUE(barger.has_value());
  s.at(test_point::published, [&barger] { barger.reset(); });
  s.step();  // the retry loses, queues again, is served at `published`, and takes the lock
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_EQ(first.resumed, 1);
  EXPECT_TRUE(first.owned);
  EXPECT_EQ(s.ready_count(), 0U);
  expect_free(h.m);
}

// A lock served to retry while it publishes (before it suspends) retries inside await_suspend,
// on its own thread: it takes the lock if it is still free, and otherwise queues again.
TEST(MutexBargingRace, ALockServedToRetryBeforeItSuspendsRetriesAtOnce) {
  for (const bool barger_comes_first : {false, true}) {
    SCOPED_TRACE(barger_comes_first);
    test_scheduler s;
    held_mutex h;
    lock_probe first;
    std::optional<mutex_guard<int>> barger;
    s.at(test_point::published, [&] {
      h.held.reset();  // serves `first` to retry: it is not armed yet, so nothing is posted
      if (barger_comes_first) barger = h.m.try_lock();
    });
    s.spawn(plain_waiter(h, first));
    s.step();
    EXPECT_EQ(s.pending_actions(), 0U);
    EXPECT_EQ(first.resumed, barger_comes_first ? 0 : 1);  // else queued again, suspended
    EXPECT_EQ(s.ready_count(), 0U);
    if (barger_comes_first) {
      ASSERT_TRUE(barger.has_value());
      barger.reset();  // posts its retry
      s.run();
    }
    EXPECT_EQ(first.resumed, 1);
    EXPECT_TRUE(first.owned);
    expect_free(h.m);
  }
}

TEST(MutexBarging, DestroyingALockerWhoseRetryWentBackToTheQueueUnlinksIt) {
  test_scheduler s;
  held_mutex h;
  probe doomed;
  lock_probe next;
  auto doomed_task = plain_waiter(h, doomed);
  start_on(s, doomed_task);
  s.spawn(plain_waiter(h, next));
  s.run();
  h.held.reset();  // doomed's retry posted
  auto barger = h.m.try_lock();
  ASSERT_TRUE(barger.has_value());
  s.step();  // the retry loses: doomed is queued again, at the front
  doomed_task = {};
  barger.reset();  // next's retry
  s.run();
  EXPECT_EQ(doomed.resumed, 0);
  EXPECT_EQ(next.resumed, 1);
  EXPECT_TRUE(next.owned);
  expect_free(h.m);
}

// ---------------------------------------------------------------------------------------------
// Bounded barging for plain threads: lock_blocking() runs its retry itself

/// Moves the clock of a thread's barging bound (detail::lock_clock) by `by` for its scope.
class lock_clock_shift {
 public:
  explicit lock_clock_shift(std::chrono::nanoseconds by) : by_(by) {
    asyncband::detail::lock_clock::advance_for_tests(by_);
  }
  ~lock_clock_shift() { asyncband::detail::lock_clock::advance_for_tests(-by_); }
  lock_clock_shift(const lock_clock_shift&) = delete;
  lock_clock_shift& operator=(const lock_clock_shift&) = delete;

 private:
  std::chrono::nanoseconds by_;
};

/// A thread in lock_blocking() on `h.m`, staged by the actions run at its publications (the
/// first, then each time its retry queues again), before it arms: `owned` says whether the guard
/// it got holds the mutex.
struct blocking_locker {
  std::thread thread;
  bool owned = false;
  blocking_locker(held_mutex& h, std::vector<std::function<void()>> at_publications)
      : thread([this, &h, at = std::move(at_publications)]() mutable {
          const thread_hook hook(test_point::published, std::move(at));
          const auto g = h.m.lock_blocking();
          owned = g.owns_lock() && h.m.is_locked();
        }) {}
  blocking_locker(const blocking_locker&) = delete;
  blocking_locker& operator=(const blocking_locker&) = delete;
  ~blocking_locker() {
    if (thread.joinable()) thread.join();
  }
};

// The unlock frees the lock and takes the queued thread out to try again; a barger that comes
// first wins, and the thread's retry goes back to the front of the queue; the next unlock
// serves it again, and it takes the lock.
TEST(MutexBargingThreads, AnUnlockFreesTheLockForTheThreadsRetryWhichABargerMayBeat) {
  held_mutex h;
  asyncband::manual_reset_event queued;
  asyncband::manual_reset_event barged;
  asyncband::manual_reset_event requeued;
  asyncband::manual_reset_event unlocked;
  blocking_locker locker(h, {[&] {
                               queued.set();
                               barged.wait_blocking();
                             },
                             [&] {
                               requeued.set();
                               unlocked.wait_blocking();
                             }});
  queued.wait_blocking();
  h.held.reset();  // frees the lock, the thread claimed to retry (before it parked)
  auto barger = h.m.try_lock();
  barged.set();
  if (!barger) {  // handed to the thread instead: it ends without queueing again
    ADD_FAILURE() << "the unlock handed the lock to the thread instead of freeing it";
    return;
  }
  requeued.wait_blocking();  // its retry lost: queued again, with the barger holding the lock
  EXPECT_TRUE(h.m.is_locked());
  barger.reset();  // serves it again: the lock is free for its next turn
  unlocked.set();
  locker.thread.join();
  EXPECT_TRUE(locker.owned);
  expect_free(h.m);
}

// A thread is bounded in time, not by the count: at the max_passes-th unlock, a thread that has
// waited less than semaphore::thread_max_wait is passed again; once it has waited longer, that
// unlock keeps the lock for it. The test moves the bound's clock (by an hour) instead of
// sleeping.
TEST(MutexBargingThreads, AThreadIsPassedUntilItHasWaitedThreadMaxWaitThenTheLockIsKeptForIt) {
  using namespace std::chrono_literals;
  held_mutex h;
  asyncband::manual_reset_event queued;
  asyncband::manual_reset_event kept;
  blocking_locker locker(h, {[&] {
                           queued.set();
                           kept.wait_blocking();
                         }});
  queued.wait_blocking();
  {
    const lock_clock_shift not_yet(-1h);
    h.held.reset();  // the thread is claimed to retry, and stays in flight
    EXPECT_EQ(barge_while_free(h.m, 10 * max_passes), 10 * max_passes)
        << "a thread that has not waited thread_max_wait was not passed at the count bound";
  }
  const lock_clock_shift long_after(1h);
  EXPECT_EQ(barge_while_free(h.m, 10 * max_passes), max_passes - 1);
  EXPECT_TRUE(h.m.is_locked()) << "the lock was not kept for the thread";
  EXPECT_FALSE(h.m.try_lock().has_value());
  kept.set();
  locker.thread.join();
  EXPECT_TRUE(locker.owned);
  expect_free(h.m);
}

// At the max_passes-th unlock the head is a parked thread's retry queued again (it lost to a
// barger), not due yet: that unlock serves it as any unlock does, freeing the lock, instead of
// keeping the lock for it.
TEST(MutexBargingThreads, AtTheBoundAQueuedThreadNotDueYetIsServedAndTheLockFreed) {
  using namespace std::chrono_literals;
  held_mutex h;
  h.held.reset();                                                    // the first pass
  ASSERT_EQ(barge_while_free(h.m, max_passes - 3), max_passes - 3);  // the next max_passes - 3
  h.held = h.m.try_lock();
  ASSERT_TRUE(h.held.has_value());
  asyncband::manual_reset_event queued;
  asyncband::manual_reset_event barged;
  asyncband::manual_reset_event requeued;
  asyncband::manual_reset_event go;
  blocking_locker locker(h, {[&] {
                               queued.set();
                               barged.wait_blocking();
                             },
                             [&] {
                               requeued.set();
                               go.wait_blocking();
                             }});
  queued.wait_blocking();
  h.held.reset();  // pass max_passes - 1: the thread is served to retry
  auto barger = h.m.try_lock();
  barged.set();
  if (!barger) {
    ADD_FAILURE() << "the unlock handed the lock to the thread instead of freeing it";
    return;
  }
  requeued.wait_blocking();  // its retry lost: queued again at the front, not armed
  {
    const lock_clock_shift not_yet(-1h);
    barger.reset();  // the max_passes-th unlock, with a thread not due at the head
    EXPECT_FALSE(h.m.is_locked()) << "the lock was kept for a thread that was not due";
    if (asyncband::detail::debug_access::state(h.m).waiters.counted != 0) {
      ADD_FAILURE() << "the thread was left queued, with nobody to serve it";
      (void)h.m.try_lock();  // an unlock that serves it, so that it ends
    }
  }
  go.set();
  locker.thread.join();
  EXPECT_TRUE(locker.owned);
  expect_free(h.m);
}

/// What a coroutine awaiting when_any(lock, acquire) saw once resumed: the winner, whether the
/// mutex was free to take at once, and on which thread it ran.
struct lock_or_permit_probe {
  std::size_t index = 0;
  bool found_free = false;
  std::thread::id resumed_on;
};

task<void> lock_or_permit(mutex<int>& m, asyncband::semaphore& sem, lock_or_permit_probe& p) {
  auto r = co_await asyncband::when_any(m.lock(), sem.acquire(1));
  p.index = r.index();
  p.found_free = m.try_lock().has_value();
  p.resumed_on = std::this_thread::get_id();
}

// The max_passes-th unlock finds at the head a when_any branch whose when_any a semaphore's
// permit has just won. It claims the branch cancelled and must free the lock before it resolves
// it: that resolution is the when_any's last, so it resumes the coroutine inline on the
// unlocking thread, which finds the lock free. Staged on two threads: the release commits its
// branch, the unlock claims the lost lock, the release resolves its branch (whose sweep finds the
// lock claimed), and only then does the unlock resolve what it claimed.
TEST(MutexBargingRace, AtTheBoundALostWhenAnyBranchIsResolvedWithTheLockFreeAlready) {
  held_mutex h;
  h.held.reset();                                                    // the first pass
  ASSERT_EQ(barge_while_free(h.m, max_passes - 2), max_passes - 2);  // the next max_passes - 2
  auto holder = h.m.try_lock();                                      // its unlock is due
  ASSERT_TRUE(holder.has_value());
  asyncband::semaphore sem(0);
  lock_or_permit_probe seen;
  auto waiting = lock_or_permit(h.m, sem, seen);
  waiting.handle().resume();  // no scheduler: resumed inline by whoever settles its last branch
  asyncband::manual_reset_event go;
  asyncband::manual_reset_event claimed;
  asyncband::manual_reset_event swept;
  std::thread unlocker([&] {
    go.wait_blocking();
    const thread_hook hook(test_point::claimed_for_wake, [&] {
      claimed.set();  // the lost branch is claimed, the internal lock released
      swept.wait_blocking();
    });
    holder.reset();  // the max_passes-th unlock
  });
  {
    const thread_hook hook(test_point::claimed_for_wake, [&] {  // the permit's branch committed
      go.set();
      claimed.wait_blocking();
    });
    sem.release(1);
  }
  EXPECT_FALSE(waiting.done()) << "the lost branch is still the unlock's to resolve";
  swept.set();
  const std::thread::id unlocker_id = unlocker.get_id();
  unlocker.join();
  ASSERT_TRUE(waiting.done());
  EXPECT_EQ(seen.index, 1U);
  EXPECT_EQ(seen.resumed_on, unlocker_id);
  EXPECT_TRUE(seen.found_free) << "resumed inside the unlock before it freed the lock";
  expect_free(h.m);
}

// An unlock serves the head, and a when_any branch whose when_any the semaphore has just won
// sits in front of a parked thread. The unlock claims the lost branch and serves the thread to
// retry, freeing the lock, as with the thread at the head; it does not hand the lock past the
// branch to a thread that is not due.
TEST(MutexBargingThreads, AnUnlockLooksPastALostWhenAnyBranchToServeTheThreadBehindIt) {
  using namespace std::chrono_literals;
  held_mutex h;
  asyncband::semaphore sem(0);
  lock_or_permit_probe seen;
  auto waiting = lock_or_permit(h.m, sem, seen);
  waiting.handle().resume();  // queued first, on the mutex and on the semaphore
  asyncband::manual_reset_event queued;
  asyncband::manual_reset_event go;
  blocking_locker locker(h, {[&] {
                           queued.set();
                           go.wait_blocking();
                         }});
  queued.wait_blocking();  // the thread, queued behind it
  const lock_clock_shift not_yet(-1h);
  bool freed = false;
  {
    const thread_hook hook(test_point::claimed_for_wake, [&] {  // the permit's branch committed
      h.held.reset();
      freed = !h.m.is_locked();
    });
    sem.release(1);
  }
  EXPECT_TRUE(freed) << "the unlock handed the lock past the lost branch to the thread";
  go.set();
  locker.thread.join();
  EXPECT_TRUE(locker.owned);
  ASSERT_TRUE(waiting.done());
  EXPECT_EQ(seen.index, 1U);
  expect_free(h.m);
}

/// Locks `m` (without a scheduler: resumed inline by the unlock that hands it the lock), checks
/// that it is the `id`-th to get it, and unlocks at once, handing the lock to the next.
task<void> inline_locker(mutex<int>& m, int id, int& next, int& out_of_order) {
  auto g = co_await m.lock();
  if (id != next) ++out_of_order;
  ++next;
  ++*g;
}

TEST(Mutex, ALongChainOfInlineHandOffsDoesNotRecurseOncePerLocker) {
  // Each unlock resumes the next locker inline, whose unlock resumes the next: one level of
  // recursion per locker, enough here to overflow the stack, unless the core turns the chain
  // into a loop (its nesting limit). All of it happens inside the first unlock, in FIFO order.
  constexpr int kLockers = 100000;
  mutex<int> m(0);
  auto holder = m.try_lock();
  std::vector<task<void>> lockers;
  lockers.reserve(kLockers);
  int next = 0;
  int out_of_order = 0;
  for (int id = 0; id < kLockers; ++id) {
    lockers.push_back(inline_locker(m, id, next, out_of_order));
    lockers.back().handle().resume();  // queues, without a scheduler
  }
  EXPECT_EQ(next, 0);
  holder.reset();
  EXPECT_EQ(next, kLockers);
  EXPECT_EQ(out_of_order, 0);
  int unfinished = 0;
  for (const auto& t : lockers) unfinished += t.done() ? 0 : 1;
  EXPECT_EQ(unfinished, 0);
  auto g = m.try_lock();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(**g, kLockers);
}

// ---------------------------------------------------------------------------------------------
// Cancellation, and cancellation racing the hand-off at the waiter core's test points

TEST(MutexCancel, AlreadyStoppedTokenCancelsAtOnceWithoutLocking) {
  for (const bool locked : {false, true}) {
    SCOPED_TRACE(locked);
    held_mutex h;
    if (!locked) h.held.reset();
    already_stopped_token_cancels_at_once(h);
    EXPECT_EQ(h.m.is_locked(), locked);  // a free mutex was not taken
    asyncband::stop_source stopped;
    stopped.request_stop();
    EXPECT_TRUE(h.m.lock_blocking(stopped.get_token()).cancelled());
    EXPECT_EQ(h.m.is_locked(), locked);
    h.held.reset();
    expect_free(h.m);
  }
}

TEST(MutexCancel, StopWhileQueuedCancelsAndTheNextWaiterGetsTheLock) {
  held_mutex h;
  stop_while_suspended_cancels_and_resumes_once(h, unlock_held);
  expect_free(h.m);
}

/// A waiter with a stop token (handed the lock directly in both modes: it cannot retry) that
/// observes its stop after it was handed the lock passes it on to B: directly under strict FIFO
/// (the lock stays held), or freed with B's retry posted under bounded barging.
template <class Held>
void a_handed_waiter_that_observes_its_stop_passes_the_lock_on() {
  Held h;
  suspended_waiters waiters(h, true);
  auto& [s, stop_a, a, b] = waiters;
  h.held.reset();  // hands the lock to A; A's resumption is queued
  ASSERT_EQ(s.ready_count(), 1U);
  EXPECT_TRUE(h.m.is_locked());
  stop_a.request_stop();  // too late to unlink A, but before it resumes
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_FALSE(h.m.try_lock().has_value());
  s.step();  // A resumes: cancelled, and gives the lock back, which goes on to B
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::cancelled);
  EXPECT_EQ(s.ready_count(), 1U);  // B's resumption, or its retry
  EXPECT_EQ(h.m.is_locked(), (std::is_same_v<Held, held_fifo_mutex>));
  s.run();
  EXPECT_EQ(b.resumed, 1);
  EXPECT_EQ(b.status, wait_status::ok);
  expect_free(h.m);
}

TEST(MutexCancel, AWaiterHandedTheLockThatObservesItsStopBeforeResumingPassesItOn) {
  a_handed_waiter_that_observes_its_stop_passes_the_lock_on<held_fifo_mutex>();
  a_handed_waiter_that_observes_its_stop_passes_the_lock_on<held_mutex>();
}

TEST(MutexCancel, AWaiterHandedTheLockThatObservesItsStopUnlocksWhenNobodyElseWaits) {
  held_mutex h;
  suspended_waiters waiters(h, false);
  auto& [s, stop_a, a, unused] = waiters;
  h.held.reset();
  stop_a.request_stop();
  EXPECT_TRUE(h.m.is_locked());  // A holds it until it resumes
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::cancelled);
  expect_free(h.m);  // given back, not lost
}

TEST(MutexCancel, StopAfterTheLockerResumedChangesNothing) {
  test_scheduler s;
  mutex<int> m(0);
  auto holder = m.try_lock();
  turn_log log;
  asyncband::stop_source src;
  s.spawn(take_turn(s, m, 1, 2, src.get_token(), log));
  s.run();
  holder.reset();
  EXPECT_TRUE(s.step());  // resumes with the lock, then holds it across two reschedulings
  EXPECT_EQ(log.acquisitions, (std::vector<int>{1}));
  src.request_stop();  // the wait is over: nothing to cancel
  EXPECT_TRUE(m.is_locked());
  s.run();
  EXPECT_EQ(log.cancelled, 0);
  EXPECT_EQ(log.inside, 0);
  expect_free(m);
}

TEST(MutexRace, StopAtClaimedForWakePassesTheLockOn) {
  held_mutex h;
  stop_at_claimed_for_wake(h, unlock_held, wait_status::cancelled);
  expect_free(h.m);
}

TEST(MutexRace, UnlockAtClaimedForCancelGoesToTheOtherWaiter) {
  held_mutex h;
  wake_at_claimed_for_cancel_goes_to_the_other_waiter(h, unlock_held);
  expect_free(h.m);
}

TEST(MutexRace, UnlockAtClaimedForCancelIsFreeWhenNobodyElseWaits) {
  held_mutex h;
  suspended_waiters waiters(h, false);
  auto& [s, stop_a, a, unused] = waiters;
  s.at(test_point::claimed_for_cancel, [&h] { h.held.reset(); });
  stop_a.request_stop();
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_FALSE(h.m.is_locked());  // unlinked before the unlock: the lock was not handed to it
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::cancelled);
  expect_free(h.m);
}

TEST(MutexRace, UnlockAtPublishedOrBeforeArmCompletesWithoutSuspending) {
  wake_before_suspension_completes_without_suspending([] { return held_mutex(); }, unlock_held,
                                                      [](held_mutex& h) { expect_free(h.m); });
}

TEST(MutexRace, StopAtPublishedOrBeforeArmCancelsWithoutSuspending) {
  for (const test_point point : before_suspension) {
    SCOPED_TRACE(static_cast<int>(point));
    held_mutex h;
    stop_at_point_cancels_without_suspending(point, h, unlock_held);
    expect_free(h.m);
  }
}

// Two cancellable waiters share one stop source, a plain one waits behind them. The stop comes
// while the unlock holds the first one claimed: the first cannot be unlinked any more (it is
// cancelled when it resumes and passes the lock on), the second is unlinked at once, and the
// lock ends with the plain waiter. Each resumes once, the lock ends free.
TEST(MutexRace, OneStopCancellingAHandedWaiterAndAQueuedOneLeavesTheLockToThePlainOne) {
  test_scheduler s;
  held_mutex h;
  asyncband::stop_source src;
  lock_probe a;
  lock_probe b;
  lock_probe c;
  s.spawn(stoppable_waiter(h, src.get_token(), a));
  s.spawn(stoppable_waiter(h, src.get_token(), b));
  s.spawn(plain_waiter(h, c));
  s.run();
  s.at(test_point::claimed_for_wake, [&src] { src.request_stop(); });
  h.held.reset();
  EXPECT_EQ(s.pending_actions(), 0U);
  s.run();
  for (const lock_probe* p : {&a, &b, &c}) EXPECT_EQ(p->resumed, 1);
  EXPECT_EQ(a.status, wait_status::cancelled);
  EXPECT_EQ(b.status, wait_status::cancelled);
  EXPECT_EQ(c.status, wait_status::ok);
  EXPECT_FALSE(a.owned);
  EXPECT_FALSE(b.owned);
  EXPECT_TRUE(c.owned);
  expect_free(h.m);
}

// ---------------------------------------------------------------------------------------------
// Destroying suspended lockers

TEST(MutexDestroy, DestroyingQueuedLockersAnywhereInTheQueueUnlinksThem) {
  held_mutex h;
  destroying_suspended_waiters_unlinks_them(h, unlock_held);
  expect_free(h.m);
}

// The unlocking thread has claimed the doomed locker and stops before resolving it; this thread
// destroys the doomed coroutine right then. Its destructor waits for the resolver, which must
// not resume it, and then passes on what the claim gave it: under strict FIFO the lock, handed
// to it (to the next locker, or back to free); under bounded barging its retry, which ends (the
// free lock goes to the next locker's retry, or stays free).
template <class Held>
void a_locker_claimed_and_destroyed_before_resuming_passes_its_claim_on() {
  for (const bool another_waits : {true, false}) {
    SCOPED_TRACE(another_waits);
    test_scheduler s;
    Held h;
    probe doomed;
    lock_probe next;
    auto doomed_task = plain_waiter(h, doomed);
    start_on(s, doomed_task);
    if (another_waits) s.spawn(plain_waiter(h, next));
    s.run();

    std::latch claimed(1);
    std::latch destroying(1);
    s.at(test_point::awaiting_resolver, [&destroying] { destroying.count_down(); });
    std::thread unlocker([&h, &claimed, &destroying] {
      const thread_hook hook(test_point::claimed_for_wake, [&claimed, &destroying] {
        claimed.count_down();
        destroying.wait();  // resolve only once the destructor waits for us
      });
      h.held.reset();
    });
    claimed.wait();
    doomed_task = {};
    unlocker.join();
    EXPECT_EQ(s.pending_actions(), 0U);  // the destructor did wait for the resolver
    s.run();
    EXPECT_EQ(doomed.resumed, 0);
    EXPECT_EQ(next.resumed, another_waits ? 1 : 0);
    EXPECT_EQ(next.owned, another_waits);
    expect_free(h.m);
  }
}

TEST(MutexDestroy, ALockerClaimedAndDestroyedBeforeResumingPassesItsClaimOn) {
  a_locker_claimed_and_destroyed_before_resuming_passes_its_claim_on<held_fifo_mutex>();
  a_locker_claimed_and_destroyed_before_resuming_passes_its_claim_on<held_mutex>();
}

// ---------------------------------------------------------------------------------------------
// Plain threads and block_on

TEST(MutexBlocking, LockBlockingAndLockTimeoutWhenFree) {
  mutex<int> m(1);
  {
    auto g = m.lock_blocking();
    EXPECT_EQ(*g, 1);
    EXPECT_TRUE(m.is_locked());
  }
  {
    auto r = m.lock_timeout(0ms);  // completes without waiting: the deadline does not matter
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(**r, 1);
  }
  asyncband::stop_source never;
  {
    auto r = m.lock_blocking(never.get_token());
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(m.is_locked());
  }
  {
    auto g = block_on(m.lock());
    EXPECT_TRUE(g.owns_lock());
  }
  expect_free(m);
}

TEST(MutexBlocking, LockTimeoutTimesOutAndLeavesNoTrace) {
  held_mutex h;
  EXPECT_TRUE(h.m.lock_timeout(0ms).timed_out());
  EXPECT_TRUE(h.m.lock_timeout(1ms).timed_out());
  EXPECT_TRUE(h.m.is_locked());
  h.held.reset();  // nobody queued: unlocked, not handed to a timed-out lock
  expect_free(h.m);
}

TEST(MutexBlocking, LockTimeoutCompletesWhenUnlockedByAnotherThread) {
  held_mutex h;
  wait_timeout_completes_when_woken_by_another_thread(h, unlock_held);
  expect_free(h.m);
}

// Regression: wait_forms::block_for (behind every *_timeout form: lock_timeout, read_timeout,
// write_timeout, acquire_timeout, wait_timeout) computed the deadline as
// `steady_clock::now() + timeout`, a signed overflow (UB) for a timeout near duration::max()
// that wrapped into the past: lock_timeout(nanoseconds::max()) timed out at once instead of
// waiting for the lock. The deadline is now saturated at steady_clock::time_point::max()
// (deadline_after).
// The locker signals when it gives up (cancels itself with `timeout`); the holder unlocks at once
// then, and otherwise after a bound that only a lock_timeout which does wait ever needs.
TEST(MutexBlocking, LockTimeoutWithTheLargestDurationWaitsForTheLock) {
  held_mutex h;
  std::binary_semaphore gave_up(0);  // the test's own synchronization: no hooks
  std::optional<wait_status> status;
  std::thread locker([&h, &gave_up, &status] {
    const thread_hook hook(test_point::claimed_for_cancel, [&gave_up] { gave_up.release(); });
    status = h.m.lock_timeout(std::chrono::nanoseconds::max()).status();
  });
  const bool locker_gave_up = gave_up.try_acquire_for(200ms);
  h.held.reset();
  locker.join();
  EXPECT_FALSE(locker_gave_up);
  EXPECT_EQ(status, wait_status::ok);
  expect_free(h.m);
}

TEST(MutexBlocking, LockBlockingWithStopTokenIsCancelledByAnotherThread) {
  held_mutex h;
  blocking_wait_is_cancelled_by_another_thread(h);
  EXPECT_TRUE(h.m.is_locked());  // still the test's
  h.held.reset();
  expect_free(h.m);
}

TEST(MutexBlocking, LockBlockingWithStopTokenIsHandedTheLockByAnotherThread) {
  held_mutex h;
  blocking_wait_is_woken_by_another_thread(h, unlock_held);
  expect_free(h.m);
}

TEST(MutexBlocking, LockBlockingWaitsForTheHolderOnAnotherThread) {
  mutex<int> m(0);
  auto g = m.try_lock();
  std::thread locker([&m] {
    auto mine = m.lock_blocking();
    EXPECT_EQ(*mine, 1);  // the holder's write happened before
    *mine = 2;
  });
  **g = 1;
  g.reset();
  locker.join();
  auto after = m.try_lock();
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(**after, 2);
}

// A thread waits in lock_blocking(token), a coroutine queues behind it. The unlock claims the
// thread's lock and the thread's stop is requested right then, before it resumes: the thread
// reports cancelled and passes the lock to the coroutine.
TEST(MutexBlocking, ALockBlockingHandedTheLockAfterItsStopPassesItOn) {
  test_scheduler s;
  held_mutex h;
  asyncband::stop_source stop;
  std::latch queued(1);
  std::optional<wait_status> status;
  std::thread locker([&h, &stop, &queued, &status] {
    const thread_hook hook(test_point::before_arm, [&queued] { queued.count_down(); });
    status = h.m.lock_blocking(stop.get_token()).status();
  });
  queued.wait();
  lock_probe next;
  s.spawn(plain_waiter(h, next));
  s.run();
  s.at(test_point::claimed_for_wake, [&stop] { stop.request_stop(); });
  h.held.reset();
  locker.join();
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_EQ(status, wait_status::cancelled);
  s.run();
  EXPECT_EQ(next.resumed, 1);
  EXPECT_TRUE(next.owned);
  expect_free(h.m);
}

TEST(MutexBlocking, BlockOnLocksFromAnotherThread) {
  held_mutex h;
  std::optional<wait_status> status;
  lock_probe p;
  std::thread locker([&h, &status, &p] {
    {
      auto g = block_on(h.m.lock());  // waits for the unlock below
      EXPECT_EQ(*g, 1);
    }
    status = block_on(h.m.lock(asyncband::stop_token{})).status();
    block_on(plain_waiter(h, p));  // a task without a scheduler, resumed inline
  });
  **h.held = 1;
  h.held.reset();
  locker.join();
  EXPECT_EQ(status, wait_status::ok);
  EXPECT_EQ(p.resumed, 1);
  EXPECT_TRUE(p.owned);
  expect_free(h.m);
}

TEST(MutexBlocking, BlockOnLockIsCancelledByAStopFromAnotherThread) {
  held_mutex h;
  block_on_wait_is_cancelled_by_another_thread(h);
  h.held.reset();
  expect_free(h.m);
}

// ---------------------------------------------------------------------------------------------
// Last one out. An unlock never lets anybody complete while it still holds the mutex: the
// hand-off resolves the next holder after the unlock has left the mutex, and a lock-free unlock's
// CAS is its last access. The one waker that does is a cancellation: a queued lock destroyed
// (here on the waker thread), which leaves the mutex to lock-free lockers while it still holds the
// mutex's queue. A locker that then gets the lock and destroys the mutex must wait for it.

TEST(MutexLifetime, TheLastOneOutMayDestroyTheMutexWhileACancelledLockReturns) {
  test_scheduler s;
  probe doomed;
  task<void> doomed_lock;
  waiter_destroys_while_the_waker_returns(
      [&s, &doomed, &doomed_lock] {
        auto h = std::make_unique<held_mutex>();
        doomed_lock = plain_waiter(*h, doomed);
        start_on(s, doomed_lock);
        s.run();
        return h;
      },
      [&doomed_lock](held_mutex& /*unused*/) { doomed_lock = {}; },
      [](held_mutex& h) {
        h.held.reset();  // lock-free: nobody is queued any more
        EXPECT_TRUE(h.m.try_lock().has_value());
      });
  EXPECT_EQ(doomed.started, 1);
  EXPECT_EQ(doomed.resumed, 0);
}

TEST(MutexLifetime, ALockerResumedInlineMayDestroyTheMutexInsideTheUnlock) {
  // The locker has no scheduler: the unlock resumes it on its own stack, and it unlocks and
  // destroys the mutex there, before the unlock returns. The unlock must not touch it afterwards
  // (ASan checks; a pinned queue would make the destructor wait for itself).
  auto m = std::make_unique<mutex<int>>(0);
  auto holder = m->try_lock();
  bool destroyed = false;
  auto locker = [](std::unique_ptr<mutex<int>>& owner, bool& done) -> task<void> {
    {
      auto g = co_await owner->lock();
      *g = 1;
    }
    owner.reset();
    done = true;
  }(m, destroyed);
  locker.handle().resume();  // runs until it queues
  EXPECT_FALSE(destroyed);
  holder.reset();  // unlocks, and resumes the locker inline
  EXPECT_TRUE(destroyed);
  EXPECT_TRUE(locker.done());
}

// ---------------------------------------------------------------------------------------------
// Stress: pool tasks and plain threads lock one mutex with every form; some cancellable locks
// are cancelled while queued or after the hand-off. Mutual exclusion is checked with a count of
// holders inside (must be 1), and the protected counter must equal the number of acquisitions.

constexpr auto kStressTime = 400ms;
constexpr int kStressIterations = 20000;

struct mutex_stress {
  mutex<long> m;
  std::atomic<int> inside{0};
  std::atomic<int> violations{0};
  std::atomic<long> acquired{0};
  std::atomic<long> cancelled{0};
  std::atomic<long> timed_out{0};
  std::atomic<long> try_failed{0};
  stop_epoch epoch;
  completion finished;
  stress_budget budget{kStressIterations, kStressTime};

  explicit mutex_stress(int participants) : finished(participants) {}

  void enter(long& value) {
    if (inside.fetch_add(1) != 0) violations.fetch_add(1);
    ++value;  // a plain write: the lock's hand-over must order it (TSan)
    acquired.fetch_add(1);
  }
  void leave() {
    if (inside.fetch_sub(1) != 1) violations.fetch_add(1);
  }
  template <class Result>
  void enter_and_leave(Result& r) {
    if (r.ok()) {
      enter(**r);
      leave();
    } else if (r.cancelled()) {
      cancelled.fetch_add(1);
    } else if (r.timed_out()) {
      timed_out.fetch_add(1);
    } else {
      violations.fetch_add(1);
    }
  }
};

task<void> stress_task(thread_pool& pool, mutex_stress& st, int id) {
  co_await pool.schedule();
  for (int i = 0; st.budget.keep_going(i); ++i) {
    switch ((i + id) % 4) {
      case 0: {
        auto g = co_await st.m.lock();
        st.enter(*g);
        co_await pool.schedule();  // holds the lock while it moves to another worker
        st.leave();
        break;
      }
      case 1: {
        auto r = co_await st.m.lock(st.epoch.token());
        st.enter_and_leave(r);
        break;
      }
      case 2: {
        auto r = co_await st.m.lock(st.epoch.token());
        st.epoch.cancel_current();  // cancels the others' queued locks, and maybe its own successor
        st.enter_and_leave(r);
        break;
      }
      default: {
        if (auto g = st.m.try_lock()) {
          st.enter(**g);
          st.leave();
        } else {
          st.try_failed.fetch_add(1);
        }
        break;
      }
    }
  }
  st.finished.done();
}

void stress_thread(mutex_stress& st, int id) {
  for (int i = 0; st.budget.keep_going(i); ++i) {
    switch ((i + id) % 5) {
      case 0: {
        auto g = st.m.lock_blocking();
        st.enter(*g);
        std::this_thread::yield();  // holds the lock a little longer: the others queue
        st.leave();
        break;
      }
      case 1: {
        auto r = st.m.lock_blocking(st.epoch.token());
        st.enter_and_leave(r);
        break;
      }
      case 2: {
        auto r = st.m.lock_timeout(50us);
        st.enter_and_leave(r);
        break;
      }
      case 3: {
        auto r = block_on(st.m.lock(st.epoch.token()));
        st.enter_and_leave(r);
        break;
      }
      default:
        st.epoch.cancel_current();
        if (auto g = st.m.try_lock()) {
          st.enter(**g);
          st.leave();
        } else {
          st.try_failed.fetch_add(1);
        }
        break;
    }
  }
  st.finished.done();
}

TEST(MutexStress, PoolTasksAndPlainThreadsExcludeEachOther) {
  constexpr int kTasks = 3;
  constexpr int kThreads = 3;
  mutex_stress st(kTasks + kThreads);
  {
    thread_pool pool(2);  // destroyed before `st`
    for (int id = 0; id < kTasks; ++id) asyncband::runtime::spawn(pool.ref(), stress_task(pool, st, id));
    std::vector<std::thread> threads;
    for (int id = 0; id < kThreads; ++id) threads.emplace_back(stress_thread, std::ref(st), id);
    st.finished.wait_or_abort(60s, "mutex stress");
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(st.violations.load(), 0);
  EXPECT_EQ(st.inside.load(), 0);
  EXPECT_GT(st.acquired.load(), 0);
  EXPECT_FALSE(st.m.is_locked());
  auto g = st.m.try_lock();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(**g, st.acquired.load());
  RecordProperty("acquired", static_cast<int>(st.acquired.load()));
  RecordProperty("cancelled", static_cast<int>(st.cancelled.load()));
  RecordProperty("timed_out", static_cast<int>(st.timed_out.load()));
  RecordProperty("try_failed", static_cast<int>(st.try_failed.load()));
}

// Last one out for the waker's own guard (found by the lifetime harness, tests/test_lifetime.cpp):
// the lock holder's guard is among what a waiter resumed inline by the unlock may destroy. unlock()
// wrote the guard after releasing, and move assignment unlocked first and then wrote the guard
// (heap-use-after-free under ASan; the assignment also fails the harness's late-write check).

struct mutex_guard_in_world {
  asyncband::mutex<int> m;
  std::optional<asyncband::mutex_guard<int>> held;  // in the World: a late write shows
};
struct another_mutex : asyncband_test::lifetime::waker_base {
  asyncband::mutex<int> other;
};

TEST(MutexLastOneOut, UnlockIsTheGuardsLastAccess) {
  using namespace asyncband_test::lifetime;
  coroutine_row<mutex_guard_in_world, another_mutex>(
      "unlock", "ok",
      [](mutex_guard_in_world& w, another_mutex&) { w.held.emplace(std::move(*w.m.try_lock())); },
      [](mutex_guard_in_world& w, asyncband::stop_token) { return w.m.lock(); },
      [](mutex_guard_in_world* w, another_mutex&) { w->held->unlock(); })
      .body();
}

TEST(MutexLastOneOut, MoveAssignmentUnlocksAsItsLastAccess) {
  using namespace asyncband_test::lifetime;
  coroutine_row<mutex_guard_in_world, another_mutex>(
      "move_assigned", "ok",
      [](mutex_guard_in_world& w, another_mutex&) { w.held.emplace(std::move(*w.m.try_lock())); },
      [](mutex_guard_in_world& w, asyncband::stop_token) { return w.m.lock(); },
      [](mutex_guard_in_world* w, another_mutex& k) { *w->held = std::move(*k.other.try_lock()); })
      .body();
}

// ---------------------------------------------------------------------------------------------
// Misuse: an awaiter is awaited once

// lock()'s awaiter empties its source when it suspends; awaiting it again used to call through
// a null mutex pointer.
TEST(MutexMisuse, AwaitingALockAgainAfterItSuspendedThrowsLogicError) {
  mutex<int> m(0);
  auto held = m.try_lock();
  ASSERT_TRUE(held.has_value());
  expect_awaiting_again_throws_logic_error([&m] { return m.lock(); }, [&held] { held.reset(); });
  EXPECT_FALSE(m.is_locked());
}

// ---------------------------------------------------------------------------------------------
// Misuse: destroyed with a pending wait (a debug-build assertion names the primitive)

// Destroying a waiting coroutine is allowed while its lock is queued (the lock is withdrawn),
// not while its resumption is posted to its scheduler: under bounded barging, that includes the
// window in which its retry is posted and another holds the lock.
TEST(MutexDeathTest, DestroyingALockerWhoseRetryIsPostedAsserts) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto destroy_with_retry_posted = [] {
    test_scheduler s;
    held_mutex h;
    probe doomed;
    auto doomed_task = plain_waiter(h, doomed);
    start_on(s, doomed_task);
    s.run();
    h.held.reset();  // doomed's retry is posted
    const auto barger = h.m.try_lock();
    doomed_task = {};
  };
  EXPECT_DEATH(destroy_with_retry_posted(), "destroyed while its retry was posted");
}

TEST(MutexDeathTest, DestroyingAMutexWhileARetryIsInFlightAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto destroy_with_retry_in_flight = [] {
    test_scheduler s;
    auto h = std::make_unique<held_mutex>();
    probe waiting;
    s.spawn(plain_waiter(*h, waiting));
    s.run();
    h->held.reset();  // its retry is posted: nobody is queued, yet a lock is pending
    h.reset();
  };
  EXPECT_DEATH(destroy_with_retry_in_flight(), "asyncband::mutex destroyed with waiters");
}

TEST(MutexDeathTest, DestroyingAMutexWithAPendingLockAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto wait_on = [](mutex<int>& m) -> task<void> {
    const auto held = m.try_lock();
    const auto g = co_await m.lock();  // waits for itself
  };
  EXPECT_DEATH(destroy_while_waiting(std::make_unique<mutex<int>>(0), wait_on),
               "asyncband::mutex destroyed with waiters");
}

}  // namespace
