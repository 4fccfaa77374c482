// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::rwlock: construction, shared readers up to max_readers, exclusive writers,
// write preference under strict FIFO (one FIFO queue), readers let in together, downgrade, mapped
// guards, cancellation (a queued writer's partial grant passes on to the readers behind it, under
// strict FIFO), the waiter core's races for read and write waits, destruction of suspended waits,
// blocking twins, "last one out", a bounded multi-threaded stress test of the reader/writer
// invariant, and bounded barging (the default: a lock takes the rwlock whenever it is available,
// a writer's retry, the pass bound and the starving rwlock, direct hand-offs to waiters that
// cannot retry, cancellation and when_any).
#include "asyncband/rwlock.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/debug.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/semaphore.hpp"
#include "asyncband/stop_token.hpp"
#include "asyncband/when_any.hpp"
#include "support/awaited_twice.hpp"
#include "support/destroyed_with_waiters.hpp"
#include "support/last_one_out.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"
#include "support/thread_hook.hpp"
#include "support/wait_contract.hpp"

namespace {

using namespace asyncband_test;
using asyncband::block_on;
using asyncband::rwlock;
using asyncband::rwlock_read_guard;
using asyncband::rwlock_write_guard;
using asyncband::runtime::thread_pool;

// ---------------------------------------------------------------------------------------------
// Helpers

/// The read (Write = false) or the write waits of an rwlock, as the shared wait scenarios
/// (support/wait_contract.hpp) see a primitive: wait() is read() or write(). The waiter
/// coroutines keep the guard they receive until they end, so each releases as soon as it has run.
template <bool Write>
struct lock_view {
  rwlock<int>& rw;

  [[nodiscard]] auto wait() noexcept {
    if constexpr (Write) {
      return rw.write();
    } else {
      return rw.read();
    }
  }
  [[nodiscard]] auto wait(asyncband::stop_token stop) noexcept {
    if constexpr (Write) {
      return rw.write(std::move(stop));
    } else {
      return rw.read(std::move(stop));
    }
  }
  auto wait_blocking() {
    if constexpr (Write) {
      return rw.write_blocking();
    } else {
      return rw.read_blocking();
    }
  }
  auto wait_blocking(asyncband::stop_token stop) {
    if constexpr (Write) {
      return rw.write_blocking(std::move(stop));
    } else {
      return rw.read_blocking(std::move(stop));
    }
  }
  template <class Rep, class Period>
  auto wait_timeout(std::chrono::duration<Rep, Period> timeout) {
    if constexpr (Write) {
      return rw.write_timeout(timeout);
    } else {
      return rw.read_timeout(timeout);
    }
  }
};
using readers_of = lock_view<false>;
using writers_of = lock_view<true>;

/// An rwlock of 4 readers whose write lock the test holds from the start (`held`), so that every
/// wait queues; `release_held` is the scenarios' wake.
struct rwlock_holder {
  rwlock<int> l{0, 4};
  std::optional<rwlock_write_guard<int>> held = l.try_write();
};
template <bool Write>
struct held_rwlock : rwlock_holder, lock_view<Write> {
  held_rwlock() : lock_view<Write>{l} {}
};

const auto release_held = [](rwlock_holder& h) { h.held.reset(); };

/// Nothing is left held or queued: a writer gets the lock at once, and is alone with it.
template <class T>
void expect_free(rwlock<T>& l) {
  EXPECT_FALSE(l.is_locked());
  EXPECT_EQ(asyncband::detail::debug_access::state(l).waiters.counted, 0U) << "a waiter was left queued";
  {
    const auto w = l.try_write();
    EXPECT_TRUE(w.has_value());
    EXPECT_FALSE(l.try_read().has_value()) << "a reader beside the writer: a share was given twice";
  }
  EXPECT_TRUE(l.try_read().has_value());
  EXPECT_FALSE(l.is_locked());
}

/// What a reader or writer saw once it had the lock: the value, and whether its guard owned it.
/// With `write` set, a writer stores that value.
struct rw_probe : probe {
  int seen = -1;
  bool owned = false;
  std::optional<int> write;

  template <class View>
  void after_wait(View& /*unused*/) noexcept {}
  template <class View, class Guard>
  void after_wait(View& /*unused*/, const Guard& g) noexcept {
    seen = *g;
    owned = g.owns_lock();
    if constexpr (requires { *g = 0; }) {
      if (write) *g = *write;
    }
  }
};

/// `n` plain waiters on `view`, spawned on `s` in order.
template <class View, class Probes>
void spawn_plain(test_scheduler& s, View& view, Probes& probes) {
  for (auto& p : probes) s.spawn(plain_waiter(view, p));
}

template <class Probes>
void expect_all_resumed_once_ok(const Probes& probes) {
  for (const auto& p : probes) {
    EXPECT_EQ(p.resumed, 1) << "probe " << p.id;
    EXPECT_EQ(p.status, wait_status::ok) << "probe " << p.id;
    EXPECT_TRUE(p.owned) << "probe " << p.id;
  }
}

// ---------------------------------------------------------------------------------------------
// Construction, readers and writers without waiting

TEST(Rwlock, ConstructionChecksMaxReaders) {
  EXPECT_THROW((void)rwlock<int>(0, 0), std::invalid_argument);
  EXPECT_THROW((void)rwlock<int>(0, asyncband::semaphore::max() + 1), std::invalid_argument);
  const rwlock<int> largest(0, asyncband::semaphore::max());
  EXPECT_EQ(largest.max_readers(), asyncband::semaphore::max());
  const rwlock<int> one(0, 1);
  EXPECT_EQ(one.max_readers(), 1U);
  rwlock<std::string> defaulted;
  EXPECT_EQ(defaulted.max_readers(), rwlock<std::string>::default_max_readers);
  EXPECT_TRUE((*defaulted.try_read())->empty());
}

TEST(Rwlock, InPlaceConstructionForValuesThatCannotMove) {
  rwlock<std::atomic<int>> l(std::in_place, 2, 5);
  EXPECT_EQ(l.max_readers(), 2U);
  EXPECT_EQ((*l.try_read())->load(), 5);
  EXPECT_THROW((void)rwlock<std::atomic<int>>(std::in_place, 0, 1), std::invalid_argument);
  rwlock<std::atomic<int>> defaulted;
  EXPECT_EQ(defaulted.max_readers(), rwlock<std::atomic<int>>::default_max_readers);
  EXPECT_EQ((*defaulted.try_write())->load(), 0);
}

TEST(Rwlock, ManyReadersAtOnceUpToMaxReaders) {
  rwlock<int> l(5, 3);
  std::vector<rwlock_read_guard<int>> readers;
  for (int i = 0; i < 3; ++i) {
    auto r = l.try_read();
    ASSERT_TRUE(r.has_value()) << "reader " << i;
    EXPECT_EQ(**r, 5);
    readers.push_back(std::move(*r));
  }
  EXPECT_FALSE(l.try_read().has_value());  // the 4th is over max_readers
  EXPECT_FALSE(l.try_write().has_value());
  readers.pop_back();
  EXPECT_TRUE(l.try_read().has_value());  // a share is free again
  EXPECT_FALSE(l.try_write().has_value());
  readers.clear();
  EXPECT_TRUE(l.try_write().has_value());

  rwlock<int> many(0);  // the default maximum is large
  std::vector<rwlock_read_guard<int>> lots;
  for (int i = 0; i < 1000; ++i) lots.push_back(*many.try_read());
  EXPECT_FALSE(many.try_write().has_value());
}

TEST(Rwlock, WriterIsExclusive) {
  rwlock<int> l(1, 4);
  {
    auto w = l.try_write();
    ASSERT_TRUE(w.has_value());
    EXPECT_EQ(**w, 1);
    **w = 2;
    EXPECT_FALSE(l.try_read().has_value());
    EXPECT_FALSE(l.try_write().has_value());
  }
  auto r = l.try_read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(**r, 2);  // the writer's store
}

TEST(Rwlock, GuardsUnlockAndMove) {
  rwlock<int> l(3, 2);
  auto r = *l.try_read();
  rwlock_read_guard<int> r2(std::move(r));
  EXPECT_FALSE(r.owns_lock());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_TRUE(r2.owns_lock());
  EXPECT_EQ(*r2, 3);
  auto other = *l.try_read();
  r2 = std::move(other);  // releases r2's own share first
  EXPECT_TRUE(l.try_read().has_value());
  r2.unlock();
  EXPECT_FALSE(r2.owns_lock());
  r2.unlock();  // nothing left to release

  auto w = *l.try_write();
  rwlock_write_guard<int> w2(std::move(w));
  EXPECT_FALSE(w.owns_lock());  // NOLINT(bugprone-use-after-move)
  *w2 = 4;
  EXPECT_FALSE(l.try_read().has_value());
  w2 = std::move(w);  // an empty guard moved in: the write lock is released
  EXPECT_FALSE(w2.owns_lock());
  auto check = l.try_read();
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ(**check, 4);
  check.reset();
  auto w3 = *l.try_write();
  w3.unlock();
  expect_free(l);
}

// ---------------------------------------------------------------------------------------------
// map

struct record {
  int id = 0;
  std::string name;
};

TEST(RwlockMap, MappedReadGuardsShareAndNarrow) {
  rwlock<record> l(record{1, "ann"}, 2);
  auto name = (*l.try_read()).map([](const record& r) -> const std::string& { return r.name; });
  EXPECT_TRUE(name.owns_lock());
  EXPECT_EQ(*name, "ann");
  EXPECT_EQ(name->size(), 3U);
  auto first = std::move(name).map([](const std::string& s) -> const char& { return s[0]; });
  EXPECT_FALSE(name.owns_lock());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(*first, 'a');
  EXPECT_TRUE(l.try_read().has_value());  // one share in use, one free
  EXPECT_FALSE(l.try_write().has_value());
  first.unlock();
  expect_free(l);
}

TEST(RwlockMap, MappedWriteGuardsAreExclusiveAndDowngrade) {
  rwlock<record> l(record{1, "ann"}, 3);
  auto name = (*l.try_write()).map([](record& r) -> std::string& { return r.name; });
  EXPECT_TRUE(name.owns_lock());
  EXPECT_FALSE(l.try_read().has_value());
  *name = "bob";
  auto initial = std::move(name).map([](std::string& s) -> char& { return s[0]; });
  *initial = 'r';
  EXPECT_FALSE(l.try_read().has_value());

  rwlock_read_guard<char> shared = std::move(initial).downgrade();  // a mapped read guard
  EXPECT_FALSE(initial.owns_lock());                                // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(shared.owns_lock());
  EXPECT_EQ(*shared, 'r');
  EXPECT_FALSE(l.try_write().has_value());  // the kept share
  auto r1 = l.try_read();
  auto r2 = l.try_read();
  EXPECT_TRUE(r1.has_value());
  EXPECT_TRUE(r2.has_value());  // 3 readers: the other shares were released
  EXPECT_EQ((*r1)->name, "rob");
  EXPECT_FALSE(l.try_read().has_value());
  r1.reset();
  r2.reset();
  shared.unlock();
  auto all = l.try_write();
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ((*all)->id, 1);
}

TEST(RwlockMap, AMappingFunctionThatThrowsKeepsTheLock) {
  rwlock<record> l(record{2, "b"}, 2);
  const auto boom = [](const record& /*unused*/) -> const int& { throw std::runtime_error("boom"); };
  auto r = *l.try_read();
  EXPECT_THROW((void)std::move(r).map(boom), std::runtime_error);
  EXPECT_TRUE(r.owns_lock());  // NOLINT(bugprone-use-after-move): map threw before taking anything
  EXPECT_EQ(r->id, 2);
  EXPECT_FALSE(l.try_write().has_value());
  r.unlock();

  auto w = *l.try_write();
  const auto boom_mut = [](record& /*unused*/) -> int& { throw std::runtime_error("boom"); };
  EXPECT_THROW((void)std::move(w).map(boom_mut), std::runtime_error);
  EXPECT_TRUE(w.owns_lock());  // NOLINT(bugprone-use-after-move)
  EXPECT_FALSE(l.try_read().has_value());
  w->name = "c";
  w.unlock();
  auto check = l.try_read();
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ((*check)->name, "c");
}

TEST(RwlockTryMap, APartThatIsThereMovesTheShareOrTheLock) {
  rwlock<record> l(record{1, "ann"}, 2);
  auto r = *l.try_read();
  auto name = r.try_map([](const record& rec) { return rec.name.empty() ? nullptr : &rec.name; });
  ASSERT_TRUE(name.has_value());
  EXPECT_FALSE(r.owns_lock());
  EXPECT_TRUE(name->owns_lock());
  EXPECT_EQ(**name, "ann");
  EXPECT_TRUE(l.try_read().has_value());  // one share in use, one free
  EXPECT_FALSE(l.try_write().has_value());
  name->unlock();

  auto w = *l.try_write();
  auto id = w.try_map([](record& rec) { return rec.id > 0 ? &rec.id : nullptr; });
  ASSERT_TRUE(id.has_value());
  EXPECT_FALSE(w.owns_lock());
  **id = 5;
  EXPECT_FALSE(l.try_read().has_value());
  rwlock_read_guard<int> shared = std::move(*id).downgrade();  // a try_mapped write guard downgrades too
  EXPECT_EQ(*shared, 5);
  EXPECT_TRUE(l.try_read().has_value());
  shared.unlock();
  expect_free(l);
}

TEST(RwlockTryMap, NoPartOrAThrowingFunctionKeepsTheShareOrTheLock) {
  rwlock<record> l(record{0, ""}, 2);
  auto r = *l.try_read();
  EXPECT_FALSE(
      r.try_map([](const record& rec) { return rec.name.empty() ? nullptr : &rec.name; }).has_value());
  EXPECT_TRUE(r.owns_lock());
  EXPECT_THROW(
      (void)r.try_map([](const record& /*unused*/) -> const int* { throw std::runtime_error("boom"); }),
      std::runtime_error);
  EXPECT_TRUE(r.owns_lock());
  EXPECT_FALSE(l.try_write().has_value());
  r.unlock();

  auto w = *l.try_write();
  EXPECT_FALSE(w.try_map([](record& rec) { return rec.id > 0 ? &rec.id : nullptr; }).has_value());
  EXPECT_TRUE(w.owns_lock());
  EXPECT_THROW((void)w.try_map([](record& /*unused*/) -> int* { throw std::runtime_error("boom"); }),
               std::runtime_error);
  EXPECT_TRUE(w.owns_lock());
  EXPECT_FALSE(l.try_read().has_value());
  w.unlock();
  expect_free(l);
}

TEST(RwlockExclusiveAccess, GetMutAndIntoInnerReachTheValueWithoutLocking) {
  rwlock<record> l(record{1, "ann"}, 4);
  EXPECT_FALSE(l.is_locked());
  l.get_mut().name = "bob";
  {
    auto r = *l.try_read();
    EXPECT_TRUE(l.is_locked());  // a reader holds a share
    EXPECT_EQ(r->name, "bob");
  }
  EXPECT_FALSE(l.is_locked());
  l.get_mut().id = 9;
  const record out = std::move(l).into_inner();
  EXPECT_EQ(out.name, "bob");
  EXPECT_EQ(out.id, 9);
  EXPECT_TRUE(l.try_write().has_value());  // NOLINT(bugprone-use-after-move): it keeps a moved-from value
}

TEST(RwlockExclusiveAccessDeathTest, IntoInnerWhileReadAsserts) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  EXPECT_DEATH(
      {
        rwlock<int> l(0, 2);
        const auto r = l.try_read();
        (void)std::move(l).into_inner();
      },
      "into_inner while locked");
}

// ---------------------------------------------------------------------------------------------
// Owned guards: read_owned / write_owned keep the rwlock alive.

using shared_rwlock = std::shared_ptr<rwlock<record>>;

/// `lock(l)` takes an owned guard; the guard must keep the rwlock alive once every other owner
/// is gone, give access, and release before it drops its reference.
template <class Lock>
void owned_guard_keeps_the_rwlock_alive(Lock lock) {
  auto l = std::make_shared<rwlock<record>>(record{7, "ann"}, 2);
  const std::weak_ptr<rwlock<record>> weak = l;
  auto g = lock(l);
  EXPECT_TRUE(g.owns_lock());
  EXPECT_EQ(g->name, "ann");
  l.reset();
  {
    const auto alive = weak.lock();
    ASSERT_NE(alive, nullptr);
    EXPECT_TRUE(alive->is_locked());
  }
  { auto kept = std::move(g); }
  EXPECT_TRUE(weak.expired());
}

TEST(RwlockOwned, EveryFormKeepsTheRwlockAlive) {
  asyncband::stop_source never;
  const auto token = never.get_token();
  owned_guard_keeps_the_rwlock_alive(
      [](shared_rwlock l) { return *asyncband::try_read_owned(std::move(l)); });
  owned_guard_keeps_the_rwlock_alive(
      [](shared_rwlock l) { return asyncband::read_owned_blocking(std::move(l)); });
  owned_guard_keeps_the_rwlock_alive(
      [](shared_rwlock l) { return block_on(asyncband::read_owned(std::move(l))); });
  owned_guard_keeps_the_rwlock_alive(
      [&](shared_rwlock l) { return block_on(asyncband::read_owned(std::move(l), token)).value(); });
  owned_guard_keeps_the_rwlock_alive(
      [&](shared_rwlock l) { return asyncband::read_owned_blocking(std::move(l), token).value(); });
  owned_guard_keeps_the_rwlock_alive(
      [](shared_rwlock l) { return *asyncband::try_write_owned(std::move(l)); });
  owned_guard_keeps_the_rwlock_alive(
      [](shared_rwlock l) { return asyncband::write_owned_blocking(std::move(l)); });
  owned_guard_keeps_the_rwlock_alive(
      [](shared_rwlock l) { return block_on(asyncband::write_owned(std::move(l))); });
  owned_guard_keeps_the_rwlock_alive(
      [&](shared_rwlock l) { return block_on(asyncband::write_owned(std::move(l), token)).value(); });
  owned_guard_keeps_the_rwlock_alive(
      [&](shared_rwlock l) { return asyncband::write_owned_blocking(std::move(l), token).value(); });
}

TEST(RwlockOwned, ReadersShareWritersExcludeAndFailedAttemptsKeepNoReference) {
  auto l = std::make_shared<rwlock<record>>(record{1, "a"}, 2);
  auto r1 = asyncband::try_read_owned(l);
  auto r2 = asyncband::try_read_owned(l);
  ASSERT_TRUE(r1.has_value());
  ASSERT_TRUE(r2.has_value());
  EXPECT_FALSE(asyncband::try_read_owned(l).has_value());  // max_readers
  EXPECT_FALSE(asyncband::try_write_owned(l).has_value());
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(block_on(asyncband::write_owned(l, stopped.get_token())).cancelled());
  EXPECT_TRUE(asyncband::write_owned_blocking(l, stopped.get_token()).cancelled());
  EXPECT_EQ(l.use_count(), 3);  // the two readers only
  r1->unlock();
  EXPECT_EQ(l.use_count(), 3);  // unlock keeps the reference
  r1.reset();
  r2.reset();
  EXPECT_EQ(l.use_count(), 1);
  expect_free(*l);
}

task<void> owned_writer(shared_rwlock l, asyncband::stop_token stop, probe& p, long& owners) {
  ++p.started;
  auto r = co_await asyncband::write_owned(std::move(l), std::move(stop));
  p.finish(r.status());
  if (!r.ok()) co_return;
  (*r)->id = 42;
  owners = std::move(*r).map([](record& rec) -> int& { return rec.id; }).owns_lock() ? 1 : 0;
}

TEST(RwlockOwned, AQueuedOwnedWriteKeepsTheRwlockAliveAndACancelledOneDropsItsReference) {
  test_scheduler s;
  auto l = std::make_shared<rwlock<record>>(record{0, "w"}, 2);
  const std::weak_ptr<rwlock<record>> weak = l;
  auto reader = asyncband::try_read_owned(l);
  asyncband::stop_source stop_second;
  probe first;
  probe second;
  long owners = 0;
  long unused = 0;
  s.spawn(owned_writer(l, asyncband::stop_token{}, first, owners));
  s.spawn(owned_writer(std::move(l), stop_second.get_token(), second, unused));
  s.run();
  EXPECT_EQ(first.resumed + second.resumed, 0);
  EXPECT_EQ(weak.use_count(), 3);  // the reader and two queued writes
  stop_second.request_stop();
  s.run();
  EXPECT_EQ(second.status, wait_status::cancelled);
  EXPECT_EQ(weak.use_count(), 2);  // the cancelled one let go
  reader.reset();                  // hands the lock to the first write, then lets go
  s.run();
  EXPECT_EQ(first.status, wait_status::ok);
  EXPECT_EQ(owners, 1);
  EXPECT_TRUE(weak.expired());  // its guard (mapped, then gone) was the last owner
}

TEST(RwlockOwned, MapTryMapDowngradeAndMoveAssignmentReleaseBeforeLettingGo) {
  auto a = std::make_shared<rwlock<record>>(record{1, "ann"}, 3);
  auto b = std::make_shared<rwlock<record>>(record{2, "bob"}, 3);
  const std::weak_ptr<rwlock<record>> weak_a = a;
  auto w = *asyncband::try_write_owned(a);
  auto name = std::move(w).map([](record& r) -> std::string& { return r.name; });
  EXPECT_FALSE(name.try_map([](std::string& n) { return n.empty() ? &n : nullptr; }).has_value());
  EXPECT_TRUE(name.owns_lock());
  auto initial = name.try_map([](std::string& n) { return n.empty() ? nullptr : &n[0]; });
  ASSERT_TRUE(initial.has_value());
  EXPECT_FALSE(name.owns_lock());
  **initial = 'A';
  auto shared = std::move(*initial).downgrade();  // one share kept, no writer in between
  EXPECT_EQ(*shared, 'A');
  EXPECT_FALSE(asyncband::try_write_owned(a).has_value());
  EXPECT_TRUE(asyncband::try_read_owned(a).has_value());
  a.reset();
  EXPECT_FALSE(weak_a.expired());

  { auto gone = std::move(shared); }  // the downgraded guard held the last reference
  EXPECT_TRUE(weak_a.expired());

  auto c = std::make_shared<rwlock<record>>(record{3, "cy"}, 3);
  const std::weak_ptr<rwlock<record>> weak_c = c;
  const auto id_of = [](record& r) -> int& { return r.id; };
  auto held = (*asyncband::try_write_owned(b)).map(id_of);
  auto other = (*asyncband::try_write_owned(std::move(c))).map(id_of);
  held = std::move(other);  // releases `b` first, then lets go of it
  EXPECT_FALSE(b->is_locked());
  EXPECT_EQ(b.use_count(), 1);
  EXPECT_EQ(*held, 3);
  {
    const auto alive = weak_c.lock();
    ASSERT_NE(alive, nullptr);
    EXPECT_TRUE(alive->is_locked());
  }
  { auto gone = std::move(held); }
  EXPECT_TRUE(weak_c.expired());
}

// ---------------------------------------------------------------------------------------------
// Waiting readers and writers on the test scheduler

TEST(Rwlock, UncontendedReadAndWriteCompleteWithoutSuspending) {
  test_scheduler s;
  rwlock<int> l(7, 2);
  readers_of readers{l};
  writers_of writers{l};
  asyncband::stop_source never;
  std::array<rw_probe, 4> p;
  p[1].write = 8;
  s.spawn(plain_waiter(readers, p[0]));
  s.spawn(stoppable_waiter(writers, never.get_token(), p[1]));
  s.spawn(stoppable_waiter(readers, never.get_token(), p[2]));
  s.spawn(plain_waiter(writers, p[3]));
  EXPECT_EQ(s.run(), 4U);  // one step each: none suspended
  expect_all_resumed_once_ok(p);
  EXPECT_EQ(p[0].seen, 7);
  EXPECT_EQ(p[2].seen, 8);
  expect_free(l);
}

TEST(Rwlock, TheReaderAboveMaxReadersWaitsForAShare) {
  test_scheduler s;
  rwlock<int> l(0, 2);
  readers_of readers{l};
  auto r1 = l.try_read();
  auto r2 = l.try_read();
  rw_probe third;
  s.spawn(plain_waiter(readers, third));
  s.run();
  EXPECT_EQ(third.started, 1);
  EXPECT_EQ(third.resumed, 0);
  r1.reset();
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(third.resumed, 1);
  EXPECT_TRUE(third.owned);
  r2.reset();
  expect_free(l);
}

// Strict FIFO (with bounded barging, readers take free shares past a queued writer: see the
// RwlockBarging tests).
TEST(Rwlock, AWriterWaitsForEveryReaderAndReadersQueuedBehindItGetInTogetherAfterIt) {
  test_scheduler s;
  rwlock<int> l(asyncband::strict_fifo, 0, 4);
  readers_of readers{l};
  writers_of writers{l};
  auto r1 = l.try_read();
  auto r2 = l.try_read();
  rw_probe w;
  w.write = 1;
  s.spawn(plain_waiter(writers, w));
  s.run();
  EXPECT_EQ(w.resumed, 0);

  // Write preference: with a writer queued, new readers neither take a free share nor pass it.
  EXPECT_FALSE(l.try_read().has_value());
  std::array<rw_probe, 3> later;
  spawn_plain(s, readers, later);
  s.run();
  for (const auto& p : later) EXPECT_EQ(p.resumed, 0);

  r1.reset();
  EXPECT_EQ(s.ready_count(), 0U);  // the writer still waits for r2's share
  r2.reset();
  EXPECT_EQ(s.ready_count(), 1U);  // only the writer
  s.step();                        // the writer runs and unlocks: every queued reader at once
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(s.ready_count(), later.size());
  s.run();
  expect_all_resumed_once_ok(later);
  for (const auto& p : later) EXPECT_EQ(p.seen, 1);
  expect_free(l);
}

TEST(Rwlock, QueuedReadersUpToTheNextWriterGetInTogether) {
  test_scheduler s;
  held_rwlock<false> h;
  writers_of writers{h.l};
  std::array<rw_probe, 2> first;
  rw_probe w;
  std::array<rw_probe, 2> second;
  spawn_plain(s, h, first);
  s.spawn(plain_waiter(writers, w));
  spawn_plain(s, h, second);
  s.run();

  h.held.reset();
  EXPECT_EQ(s.ready_count(), 2U);  // the first two readers; the writer waits for their shares
  s.step();
  EXPECT_EQ(s.ready_count(), 1U);
  s.step();  // both readers done: the writer's turn
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_EQ(w.resumed, 0);
  s.step();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(s.ready_count(), 2U);  // the two readers behind it
  s.run();
  expect_all_resumed_once_ok(first);
  expect_all_resumed_once_ok(second);
  expect_free(h.l);
}

// A mix of readers and writers, each holding the lock across a few reschedulings, on a seeded
// random scheduler. Invariants: writers alone, readers at most max_readers, everybody enters;
// and, under strict FIFO, one FIFO queue: a writer enters after everybody that arrived before
// it and before everybody after it; a reader enters after every writer that arrived before it.
// (With bounded barging a turn that arrives while the lock is available may go first.)
struct rw_turns {
  int max_readers;
  std::vector<bool> writer;  // by id
  std::vector<int> arrival;  // by id
  std::vector<int> entry;    // by id
  int arrived = 0;
  int entered = 0;
  int readers = 0;
  int writers = 0;
  int writes = 0;
  int violations = 0;

  rw_turns(int max, std::vector<bool> kinds)
      : max_readers(max), writer(std::move(kinds)), arrival(writer.size(), -1), entry(writer.size(), -1) {}

  void enter(int id) {
    entry[static_cast<std::size_t>(id)] = entered++;
    if (writer[static_cast<std::size_t>(id)]) {
      if (writers++ != 0 || readers != 0) ++violations;
    } else {
      if (writers != 0 || ++readers > max_readers) ++violations;
    }
  }
  void leave(int id) { --(writer[static_cast<std::size_t>(id)] ? writers : readers); }

  void expect_fifo_for_writers() const {
    const std::size_t n = writer.size();
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_GE(entry[i], 0) << "turn " << i << " never entered";
      for (std::size_t j = 0; j < n; ++j) {
        if (arrival[i] < arrival[j] && (writer[i] || writer[j])) {
          EXPECT_LT(entry[i], entry[j]) << "turn " << j << " entered before turn " << i;
        }
      }
    }
  }
};

task<void> pause(test_scheduler& s, int times) {
  for (int k = 0; k < times; ++k) co_await s.schedule();
}

task<void> rw_turn(test_scheduler& s, rwlock<int>& l, rw_turns& t, int id, int holds) {
  t.arrival[static_cast<std::size_t>(id)] = t.arrived++;
  if (t.writer[static_cast<std::size_t>(id)]) {
    auto g = co_await l.write();
    t.enter(id);
    EXPECT_EQ(*g, t.writes);
    *g = ++t.writes;
    co_await pause(s, holds);
    t.leave(id);
  } else {
    auto g = co_await l.read();
    t.enter(id);
    EXPECT_EQ(*g, t.writes);  // the last writer's store
    co_await pause(s, holds);
    t.leave(id);
  }
}

TEST(Rwlock, SeededMixOfReadersAndWritersKeepsTheInvariantsAndUnderStrictFifoTheQueueOrder) {
  const std::vector<bool> kinds = {false, false, true,  false, false, false,
                                   true,  true,  false, false, false, true};
  for (const bool fifo : {true, false}) {
    for (std::uint64_t seed = 0; seed <= 16; ++seed) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << (fifo ? ", strict FIFO" : ", barging"));
      test_scheduler s(seed == 0 ? std::nullopt : std::optional<std::uint64_t>(seed));
      auto l = fifo ? std::make_unique<rwlock<int>>(asyncband::strict_fifo, 0, 3)
                    : std::make_unique<rwlock<int>>(0, 3);
      rw_turns t(3, kinds);
      for (int id = 0; id < static_cast<int>(kinds.size()); ++id) s.spawn(rw_turn(s, *l, t, id, 1 + id % 3));
      s.run();
      EXPECT_EQ(t.violations, 0);
      EXPECT_EQ(t.entered, static_cast<int>(kinds.size()));
      if (fifo) t.expect_fifo_for_writers();
      EXPECT_FALSE(l->is_locked());
      auto w = l->try_write();
      ASSERT_TRUE(w.has_value());
      EXPECT_EQ(**w, 4);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Downgrade

// Strict FIFO: the share left free stays the queued writer's (RwlockBarging has the barging
// rwlock's downgrade).
TEST(RwlockDowngrade, KeepsAReadShareAndLetsTheQueuedReadersIn) {
  test_scheduler s;
  rwlock<int> l(asyncband::strict_fifo, 0, 4);
  readers_of readers{l};
  writers_of writers{l};
  auto w = *l.try_write();
  std::array<rw_probe, 2> queued;
  rw_probe next_writer;
  rw_probe behind;
  spawn_plain(s, readers, queued);
  s.spawn(plain_waiter(writers, next_writer));
  s.spawn(plain_waiter(readers, behind));
  s.run();

  *w = 5;
  rwlock_read_guard<int> r = std::move(w).downgrade();
  EXPECT_FALSE(w.owns_lock());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(r.owns_lock());
  EXPECT_EQ(*r, 5);
  EXPECT_EQ(s.ready_count(), 2U);  // the readers queued behind it, up to the next writer
  s.run();
  expect_all_resumed_once_ok(queued);
  for (const auto& p : queued) EXPECT_EQ(p.seen, 5);
  EXPECT_EQ(next_writer.resumed, 0);  // waits for the kept share
  EXPECT_EQ(behind.resumed, 0);       // queued behind that writer
  EXPECT_FALSE(l.try_read().has_value());

  r.unlock();
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(next_writer.resumed, 1);
  EXPECT_EQ(behind.resumed, 1);
  expect_free(l);
}

// Strict FIFO: the released share is the queued writer's partial grant.
TEST(RwlockDowngrade, NoWriterGetsInBetween) {
  test_scheduler s;
  rwlock<int> l(asyncband::strict_fifo, 0, 2);
  writers_of writers{l};
  auto w = *l.try_write();
  rw_probe other;
  other.write = 9;
  s.spawn(plain_waiter(writers, other));
  s.run();
  *w = 1;
  auto r = std::move(w).downgrade();
  EXPECT_EQ(s.ready_count(), 0U);  // the queued writer got the released share only
  EXPECT_EQ(*r, 1);                // nobody wrote in between
  EXPECT_FALSE(l.try_read().has_value());
  r.unlock();
  s.run();
  EXPECT_EQ(other.resumed, 1);
  EXPECT_EQ(other.seen, 1);
  auto check = l.try_read();
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ(**check, 9);
}

TEST(RwlockDowngrade, WithASingleReaderTheWriteLockBecomesTheOnlyShare) {
  rwlock<int> l(3, 1);
  auto r = (*l.try_write()).downgrade();
  EXPECT_EQ(*r, 3);
  EXPECT_FALSE(l.try_read().has_value());
  EXPECT_FALSE(l.try_write().has_value());
  r.unlock();
  expect_free(l);
}

// ---------------------------------------------------------------------------------------------
// Cancellation: a queued writer's partial grant passes on

/// Two readers hold 2 of 3 shares; a writer queues (granted the free share), two readers queue
/// behind it, then one holder leaves (its share goes to the writer as well). `cancel` ends the
/// writer's wait; the two shares it had been given must let both queued readers in at once.
/// `start(l, s, w)` queues the writer (probe `w`), `cancel()` ends its wait; `writer_resumes`: 1
/// if the writer is a coroutine on `s` that resumes (cancelled), 0 otherwise. Strict FIFO: only
/// there does a queued writer hold a partial grant (and readers queue behind it with a share free).
template <class Start, class Cancel>
void partial_grant_goes_to_the_readers_behind(Start start, Cancel cancel, int writer_resumes) {
  test_scheduler s;
  rwlock<int> l(asyncband::strict_fifo, 0, 3);
  readers_of readers{l};
  auto r1 = l.try_read();
  auto r2 = l.try_read();
  rw_probe w;
  start(l, s, w);
  std::array<rw_probe, 2> behind;
  spawn_plain(s, readers, behind);
  s.run();
  EXPECT_FALSE(l.try_read().has_value());  // a writer waits
  r1.reset();
  EXPECT_EQ(s.ready_count(), 0U);  // the writer holds 2 of 3 shares
  cancel();
  EXPECT_EQ(s.ready_count(), 2U + static_cast<std::size_t>(writer_resumes)) << "both readers must be let in";
  s.run();
  expect_all_resumed_once_ok(behind);
  EXPECT_EQ(w.resumed, writer_resumes);
  if (writer_resumes != 0) {
    EXPECT_EQ(w.status, wait_status::cancelled);
  }
  EXPECT_FALSE(w.owned);
  EXPECT_FALSE(l.try_write().has_value());  // r2 still holds
  r2.reset();
  expect_free(l);
}

TEST(RwlockCancel, AStoppedWriterPassesItsPartialGrantToTheReadersBehindIt) {
  asyncband::stop_source stop;
  std::optional<writers_of> writers;
  partial_grant_goes_to_the_readers_behind(
      [&stop, &writers](rwlock<int>& l, test_scheduler& s, rw_probe& w) {
        writers.emplace(writers_of{l});
        s.spawn(stoppable_waiter(*writers, stop.get_token(), w));
      },
      [&stop] { stop.request_stop(); }, 1);
}

TEST(RwlockCancel, ADestroyedWriterPassesItsPartialGrantToTheReadersBehindIt) {
  std::optional<writers_of> writers;
  task<void> doomed;
  partial_grant_goes_to_the_readers_behind(
      [&writers, &doomed](rwlock<int>& l, test_scheduler& s, rw_probe& w) {
        writers.emplace(writers_of{l});
        doomed = plain_waiter(*writers, w);
        start_on(s, doomed);
      },
      [&doomed] { doomed = {}; }, 0);
}

/// partial_grant_goes_to_the_readers_behind with a writer blocked on a plain thread in
/// `wait(l)`. The thread stops right after it has queued, before it parks, until the readers have
/// queued behind it; then `end()` runs and the thread goes on; its wait must report `expected`.
template <class Wait, class End>
void blocked_writer_passes_its_partial_grant(Wait wait, End end, wait_status expected) {
  std::latch queued(1);
  std::latch go(1);
  std::optional<std::thread> thread;
  std::optional<wait_status> status;
  partial_grant_goes_to_the_readers_behind(
      [&](rwlock<int>& l, test_scheduler& /*unused*/, rw_probe& /*unused*/) {
        thread.emplace([&l, &queued, &go, &status, &wait] {
          const thread_hook hook(test_point::before_arm, [&queued, &go] {
            queued.count_down();
            go.wait();
          });
          status = wait(l).status();
        });
        queued.wait();
      },
      [&] {
        end();
        go.count_down();
        thread->join();  // its wait ended (and handed the shares on) before it returned
      },
      0);
  EXPECT_EQ(status, expected);
}

TEST(RwlockCancel, ATimedOutWriterPassesItsPartialGrantToTheReadersBehindIt) {
  // write_timeout(0ms): once the thread goes on, its deadline has passed.
  blocked_writer_passes_its_partial_grant([](rwlock<int>& l) { return l.write_timeout(0ms); }, [] {},
                                          wait_status::timeout);
}

TEST(RwlockCancel, ABlockedWriterStoppedFromAnotherThreadPassesItsPartialGrantToTheReadersBehindIt) {
  asyncband::stop_source stop;
  blocked_writer_passes_its_partial_grant(
      [&stop](rwlock<int>& l) { return l.write_blocking(stop.get_token()); },
      [&stop] { stop.request_stop(); }, wait_status::cancelled);
}

// Strict FIFO: the readers spawned behind the writer queue although a share is free.
TEST(RwlockCancel, AWriterHandedTheLockThatObservesItsStopBeforeResumingPassesItToTheReaders) {
  test_scheduler s;
  rwlock<int> l(asyncband::strict_fifo, 0, 2);
  readers_of readers{l};
  writers_of writers{l};
  auto r1 = l.try_read();
  asyncband::stop_source stop_w;
  rw_probe w;
  std::array<rw_probe, 2> behind;
  s.spawn(stoppable_waiter(writers, stop_w.get_token(), w));
  spawn_plain(s, readers, behind);
  s.run();
  r1.reset();  // completes the writer's grant: its resumption is queued
  EXPECT_EQ(s.ready_count(), 1U);
  stop_w.request_stop();  // before it resumes
  EXPECT_FALSE(l.try_read().has_value());
  s.step();  // the writer: cancelled, gives both shares back, to the readers
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::cancelled);
  EXPECT_EQ(s.ready_count(), 2U);
  s.run();
  expect_all_resumed_once_ok(behind);
  expect_free(l);
}

// Strict FIFO: the stoppable reader queues behind the writer although a share is free.
TEST(RwlockCancel, AStoppedReaderBehindAWriterLeavesNoTrace) {
  test_scheduler s;
  rwlock<int> l(asyncband::strict_fifo, 0, 2);
  readers_of readers{l};
  writers_of writers{l};
  auto r1 = l.try_read();
  rw_probe w;
  rw_probe cancelled;
  rw_probe other;
  asyncband::stop_source stop;
  s.spawn(plain_waiter(writers, w));
  s.spawn(stoppable_waiter(readers, stop.get_token(), cancelled));
  s.spawn(plain_waiter(readers, other));
  s.run();
  stop.request_stop();
  s.run();
  EXPECT_EQ(cancelled.resumed, 1);
  EXPECT_EQ(cancelled.status, wait_status::cancelled);
  r1.reset();
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(other.resumed, 1);
  EXPECT_EQ(cancelled.resumed, 1);
  expect_free(l);
}

TEST(RwlockDestroy, AReaderResumedInlineMayDestroyAnotherReaderOfTheSameHandOff) {
  // The writer's unlock hands a share to A and B in one batch and resumes A inline (A has no
  // scheduler); A destroys B, whose node is still in that batch. B's share must come back.
  rwlock<int> l(0, 2);
  auto w = l.try_write();
  rw_probe b_probe;
  readers_of readers{l};
  auto b = plain_waiter(readers, b_probe);
  bool a_done = false;
  auto a = [](rwlock<int>& lock, task<void>& victim, bool& done) -> task<void> {
    auto g = co_await lock.read();
    victim = {};  // destroys B, suspended in the same hand-off
    EXPECT_TRUE(g.owns_lock());
    done = true;
  }(l, b, a_done);
  a.handle().resume();  // queues first, without a scheduler
  b.handle().resume();  // queues behind A, without a scheduler
  w.reset();
  EXPECT_TRUE(a_done);
  EXPECT_EQ(b_probe.started, 1);
  EXPECT_EQ(b_probe.resumed, 0);
  expect_free(l);  // B's share was not lost
}

// ---------------------------------------------------------------------------------------------
// The waiter core's scenarios, for read waits and for write waits (the test holds the write lock)

template <class Kind>
class RwlockWaits : public ::testing::Test {
 public:
  static constexpr bool write = Kind::value;
  using held = held_rwlock<write>;
};
struct kind_names {
  template <class Kind>
  static std::string GetName(int /*unused*/) {
    return Kind::value ? "Write" : "Read";
  }
};
using wait_kinds = ::testing::Types<std::false_type, std::true_type>;
TYPED_TEST_SUITE(RwlockWaits, wait_kinds, kind_names);

TYPED_TEST(RwlockWaits, AlreadyStoppedTokenCancelsAtOnce) {
  typename TestFixture::held h;
  already_stopped_token_cancels_at_once(h);
  h.held.reset();
  already_stopped_token_cancels_at_once(h);  // also when the lock is free: nothing taken
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, StopWhileQueuedCancelsAndTheOtherWaiterGetsTheLock) {
  typename TestFixture::held h;
  stop_while_suspended_cancels_and_resumes_once(h, release_held);
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, StopAtClaimedForWakeCancelsAndPassesTheGrantOn) {
  typename TestFixture::held h;
  stop_at_claimed_for_wake(h, release_held, wait_status::cancelled);
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, ReleaseAtClaimedForCancelGoesToTheOtherWaiter) {
  typename TestFixture::held h;
  wake_at_claimed_for_cancel_goes_to_the_other_waiter(h, release_held);
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, ReleaseAtPublishedOrBeforeArmCompletesWithoutSuspending) {
  using held = typename TestFixture::held;
  wake_before_suspension_completes_without_suspending([] { return held(); }, release_held,
                                                      [](held& h) { expect_free(h.l); });
}

TYPED_TEST(RwlockWaits, StopAtPublishedOrBeforeArmCancelsWithoutSuspending) {
  for (const test_point point : before_suspension) {
    SCOPED_TRACE(static_cast<int>(point));
    typename TestFixture::held h;
    stop_at_point_cancels_without_suspending(point, h, release_held);
    expect_free(h.l);
  }
}

TYPED_TEST(RwlockWaits, DestroyingQueuedWaitsAnywhereInTheQueueUnlinksThem) {
  typename TestFixture::held h;
  destroying_suspended_waiters_unlinks_them(h, release_held);
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, TimeoutTimesOutAndLeavesNoTrace) {
  typename TestFixture::held h;
  EXPECT_TRUE(h.wait_timeout(0ms).timed_out());
  EXPECT_TRUE(h.wait_timeout(1ms).timed_out());
  h.held.reset();
  expect_free(h.l);
  EXPECT_TRUE(h.wait_timeout(0ms).ok());  // free: completes without waiting
}

TYPED_TEST(RwlockWaits, TimeoutCompletesWhenReleasedByAnotherThread) {
  typename TestFixture::held h;
  wait_timeout_completes_when_woken_by_another_thread(h, release_held);
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, BlockingWaitWithStopTokenIsCancelledByAnotherThread) {
  typename TestFixture::held h;
  blocking_wait_is_cancelled_by_another_thread(h);
  EXPECT_FALSE(h.l.try_read().has_value());  // still the test's
  h.held.reset();
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, BlockingWaitsAreGrantedByAnotherThread) {
  typename TestFixture::held h;
  blocking_wait_is_woken_by_another_thread(h, release_held);
  std::optional<int> seen;
  h.held = h.l.try_write();
  std::thread waiter([&h, &seen] { seen = *h.wait_blocking(); });
  **h.held = 3;
  h.held.reset();
  waiter.join();
  EXPECT_EQ(seen, 3);  // the writer's store happened before
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, BlockOnWaitIsCancelledByAStopFromAnotherThread) {
  typename TestFixture::held h;
  block_on_wait_is_cancelled_by_another_thread(h);
  h.held.reset();
  expect_free(h.l);
}

TEST(RwlockBlocking, ReadersOnPlainThreadsShareAndBlockAWriter) {
  rwlock<int> l(0, 2);
  auto r1 = l.read_blocking();
  auto r2 = l.read_timeout(0ms);  // free share: the deadline does not matter
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(l.read_timeout(0ms).timed_out());  // max_readers
  EXPECT_TRUE(l.write_timeout(0ms).timed_out());
  asyncband::stop_source never;
  std::optional<wait_status> status;
  std::thread writer([&l, &never, &status] {
    auto w = l.write_blocking(never.get_token());
    status = w.status();
    if (w.ok()) **w = 1;
  });
  r1.unlock();
  r2->unlock();
  writer.join();
  EXPECT_EQ(status, wait_status::ok);
  auto r = l.read_blocking(never.get_token());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(**r, 1);
  auto again = block_on(l.read());
  EXPECT_EQ(*again, 1);
}

// ---------------------------------------------------------------------------------------------
// Last one out. The cancellation of a writer holding a partial grant (strict FIFO) hands the grant
// on while it still holds the rwlock's queue; with nobody queued behind, the shares become
// available to a lock-free try_read, whose holder may then destroy the rwlock: the destructor
// must wait for the cancellation to leave. (Unlocks never let anybody complete while they still
// hold it.)

TEST(RwlockLifetime, TheLastOneOutMayDestroyTheRwlockWhileACancelledWriterPassesItsShares) {
  test_scheduler s;
  rw_probe doomed;
  task<void> doomed_writer;
  std::optional<rwlock_read_guard<int>> reader;
  std::optional<writers_of> writers;
  waiter_destroys_while_the_waker_returns(
      [&s, &doomed, &doomed_writer, &reader, &writers] {
        auto l = std::make_unique<rwlock<int>>(asyncband::strict_fifo, 0, 2);
        reader = l->try_read();
        writers.emplace(writers_of{*l});
        doomed_writer = plain_waiter(*writers, doomed);  // queues with the free share
        start_on(s, doomed_writer);
        s.run();
        return l;
      },
      [&doomed_writer](rwlock<int>& /*unused*/) { doomed_writer = {}; },
      [&reader](rwlock<int>& l) {
        EXPECT_TRUE(l.try_read().has_value());  // the share the writer passed on
        reader.reset();
      });
  EXPECT_EQ(doomed.started, 1);
  EXPECT_EQ(doomed.resumed, 0);
}

// ---------------------------------------------------------------------------------------------
// Stress: pool tasks and plain threads read and write one rwlock with every form (downgrades,
// cancellations and timeouts included). Invariants: writers alone, readers at most max_readers,
// readers see what the last writer wrote; the final value counts the writes.

constexpr auto kStressTime = 400ms;
constexpr int kStressIterations = 20000;
constexpr int kStressMaxReaders = 3;

struct rwlock_stress {
  rwlock<long> l{0, kStressMaxReaders};
  std::atomic<int> readers{0};
  std::atomic<int> writers{0};
  std::atomic<int> violations{0};
  std::atomic<long> writes{0};
  std::atomic<long> reads{0};
  std::atomic<long> failed{0};  // cancelled, timed out, try_ failed
  stop_epoch epoch;
  completion finished;
  stress_budget budget{kStressIterations, kStressTime};

  explicit rwlock_stress(int participants) : finished(participants) {}

  void enter_read(long value) {
    if (readers.fetch_add(1) + 1 > kStressMaxReaders || writers.load() != 0) violations.fetch_add(1);
    if (value < 0) violations.fetch_add(1);  // reads the writers' plain store (TSan)
    reads.fetch_add(1);
  }
  void leave_read() { readers.fetch_sub(1); }
  void enter_write(long& value) {
    if (writers.fetch_add(1) != 0 || readers.load() != 0) violations.fetch_add(1);
    ++value;
    writes.fetch_add(1);
  }
  void leave_write() { writers.fetch_sub(1); }

  /// A write that ends as a read share without letting another writer in.
  void write_then_downgrade(rwlock_write_guard<long> g) {
    enter_write(*g);
    readers.fetch_add(1);  // counted as a reader before it stops being the writer
    leave_write();
    auto r = std::move(g).downgrade();
    if (writers.load() != 0 || *r < 0) violations.fetch_add(1);
    readers.fetch_sub(1);
  }

  template <class Guard>
  void use(Guard& g) {
    if constexpr (std::is_same_v<Guard, rwlock_write_guard<long>>) {
      enter_write(*g);
      leave_write();
    } else {
      enter_read(*g);
      leave_read();
    }
  }
  template <class Result>
  void use_result(Result& r) {
    if (r.ok()) {
      use(*r);
    } else {
      failed.fetch_add(1);
    }
  }
  template <class Guard>
  void use_optional(std::optional<Guard>& g) {
    if (g) {
      use(*g);
    } else {
      failed.fetch_add(1);
    }
  }
};

task<void> rw_stress_task(thread_pool& pool, rwlock_stress& st, int id) {
  co_await pool.schedule();
  for (int i = 0; st.budget.keep_going(i); ++i) {
    switch ((i + id) % 7) {
      case 0: {
        auto g = co_await st.l.write();
        st.enter_write(*g);
        co_await pool.schedule();  // holds the write lock while it moves to another worker
        st.leave_write();
        break;
      }
      case 1: {
        auto r = co_await st.l.write(st.epoch.token());
        st.use_result(r);
        break;
      }
      case 2: {
        auto g = co_await st.l.write();
        st.write_then_downgrade(std::move(g));
        break;
      }
      case 3: {
        auto r = co_await st.l.read(st.epoch.token());
        st.use_result(r);
        break;
      }
      case 4: {
        auto g = co_await st.l.read();
        st.enter_read(*g);
        co_await pool.schedule();  // holds a share while it moves
        st.leave_read();
        break;
      }
      case 5: {
        auto g = st.l.try_read();
        st.use_optional(g);
        break;
      }
      default:
        st.epoch.cancel_current();
        break;
    }
  }
  st.finished.done();
}

void rw_stress_thread(rwlock_stress& st, int id) {
  for (int i = 0; st.budget.keep_going(i); ++i) {
    switch ((i + id) % 8) {
      case 0: {
        auto g = st.l.read_blocking();
        st.enter_read(*g);
        std::this_thread::yield();  // holds the share a little longer
        st.leave_read();
        break;
      }
      case 1: {
        auto r = st.l.read_blocking(st.epoch.token());
        st.use_result(r);
        break;
      }
      case 2: {
        auto r = st.l.read_timeout(50us);
        st.use_result(r);
        break;
      }
      case 3: {
        auto r = st.l.write_blocking(st.epoch.token());
        st.use_result(r);
        break;
      }
      case 4: {
        auto r = st.l.write_timeout(50us);
        st.use_result(r);
        break;
      }
      case 5: {
        auto g = st.l.try_write();
        st.use_optional(g);
        break;
      }
      case 6: {
        auto r = block_on(st.l.read(st.epoch.token()));
        st.use_result(r);
        break;
      }
      default:
        st.write_then_downgrade(st.l.write_blocking());
        st.epoch.cancel_current();
        break;
    }
  }
  st.finished.done();
}

TEST(RwlockStress, ReadersAndWritersOnPoolTasksAndPlainThreadsKeepTheInvariant) {
  constexpr int kTasks = 3;
  constexpr int kThreads = 3;
  rwlock_stress st(kTasks + kThreads);
  {
    thread_pool pool(2);  // destroyed before `st`
    for (int id = 0; id < kTasks; ++id) asyncband::runtime::spawn(pool.ref(), rw_stress_task(pool, st, id));
    std::vector<std::thread> threads;
    for (int id = 0; id < kThreads; ++id) threads.emplace_back(rw_stress_thread, std::ref(st), id);
    st.finished.wait_or_abort(60s, "rwlock stress");
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(st.violations.load(), 0);
  EXPECT_EQ(st.readers.load(), 0);
  EXPECT_EQ(st.writers.load(), 0);
  EXPECT_GT(st.writes.load(), 0);
  EXPECT_GT(st.reads.load(), 0);
  auto w = st.l.try_write();  // nothing leaked: every share came back
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(**w, st.writes.load());
  RecordProperty("writes", static_cast<int>(st.writes.load()));
  RecordProperty("reads", static_cast<int>(st.reads.load()));
  RecordProperty("failed", static_cast<int>(st.failed.load()));
}

// ---------------------------------------------------------------------------------------------
// Misuse: an awaiter is awaited once

TEST(RwlockMisuse, AwaitingAWriteLockAgainAfterItSuspendedThrowsLogicError) {
  rwlock<int> rw(0);
  auto reading = rw.try_read();
  ASSERT_TRUE(reading.has_value());
  expect_awaiting_again_throws_logic_error([&rw] { return rw.write(); }, [&reading] { reading.reset(); });
  EXPECT_TRUE(rw.try_write().has_value());
}

// ---------------------------------------------------------------------------------------------
// Misuse: destroyed with a pending wait (a debug-build assertion names the primitive)

TEST(RwlockDeathTest, DestroyingAnRwlockWithAPendingLockAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto wait_on = [](rwlock<int>& rw) -> task<void> {
    const auto reading = rw.try_read();
    const auto g = co_await rw.write();  // waits for its own read
  };
  EXPECT_DEATH(destroy_while_waiting(std::make_unique<rwlock<int>>(0), wait_on),
               "asyncband::rwlock destroyed with waiters");
}

// ---------------------------------------------------------------------------------------------
// Bounded barging (the default): any lock takes the rwlock when it is available at that moment,
// a release that makes the head's request available posts a plain writer's retry to its
// scheduler (leaving the lock free) or hands the shares to the front waiters that cannot retry,
// and every max_passes-th release made while somebody waits starves barging until the oldest
// waiter holds its lock. (Strict FIFO, asyncband::strict_fifo, at the end.)

constexpr int max_passes = static_cast<int>(rwlock<int>::max_passes);

/// Makes `p` append `id` to `order` when it gets the lock.
void log_into(std::vector<int>& order, rw_probe& p, int id) {
  p.id = id;
  p.order = &order;
}

/// Write-locks `l` with try_write and unlocks at once as long as that succeeds (at most `limit`
/// times), as a stream of running writers that barge would; returns how many times it got it.
int barge_writes_while_free(rwlock<int>& l, int limit) {
  int barges = 0;
  while (barges < limit && l.try_write().has_value()) ++barges;
  return barges;
}

/// A stream of overlapping readers: takes a new share with try_read, then releases the one in
/// `held` (so that some reader holds a share throughout), as long as try_read succeeds (at most
/// `limit` times). Returns how many shares it took; `held` keeps the last one.
int overlap_reads_while_possible(rwlock<int>& l, std::optional<rwlock_read_guard<int>>& held, int limit) {
  int barges = 0;
  while (barges < limit) {
    auto next = l.try_read();
    if (!next) break;
    ++barges;
    held = std::move(next);  // the previous share is released: one release per new share
  }
  return barges;
}

/// What a writer saw once it had the lock: whether the rwlock was locked then, and whether a
/// reader could get in beside it.
struct write_held_probe : rw_probe {
  bool locked = false;
  bool reader_beside = true;
  template <class View>
  void after_wait(View& /*unused*/) {}
  template <class View, class Guard>
  void after_wait(View& view, const Guard& g) {
    rw_probe::after_wait(view, g);
    locked = view.rw.is_locked();
    reader_beside = view.rw.try_read().has_value();
  }
};

/// What a coroutine awaiting when_any(l.write(), sem.acquire(1)) saw: the winner's index and how
/// many times it resumed.
struct write_or_permit_probe {
  std::size_t index = 99;
  int resumed = 0;
};

task<void> write_or_permit(rwlock<int>& l, asyncband::semaphore& sem, write_or_permit_probe& p) {
  auto r = co_await asyncband::when_any(l.write(), sem.acquire(1));
  p.index = r.index();
  ++p.resumed;
}

// Point 1: while readers hold shares and a writer waits, every kind of read takes a free share
// (before the bound); the last reader's release posts the writer's retry.
TEST(RwlockBarging, ReadersTakeFreeSharesPastAQueuedWriterBeforeTheBound) {
  test_scheduler s;
  rwlock<int> l(0, 4);
  readers_of readers{l};
  writers_of writers{l};
  auto r1 = l.try_read();
  ASSERT_TRUE(r1.has_value());
  rw_probe w;
  s.spawn(plain_waiter(writers, w));
  s.run();
  ASSERT_EQ(w.started, 1);
  EXPECT_EQ(w.resumed, 0);

  auto r2 = l.try_read();
  EXPECT_TRUE(r2.has_value()) << "try_read did not take a free share past the queued writer";
  EXPECT_FALSE(l.try_write().has_value());
  EXPECT_TRUE(l.read_timeout(0ms).ok()) << "a timed read did not take a free share";
  rw_probe plain_reader;
  rw_probe stoppable_reader;
  asyncband::stop_source never;
  s.spawn(plain_waiter(readers, plain_reader));
  s.spawn(stoppable_waiter(readers, never.get_token(), stoppable_reader));
  EXPECT_EQ(s.run(), 2U);  // one step each: neither queued behind the writer
  EXPECT_EQ(plain_reader.resumed, 1);
  EXPECT_TRUE(plain_reader.owned);
  EXPECT_EQ(stoppable_reader.status, wait_status::ok);
  EXPECT_TRUE(stoppable_reader.owned);
  EXPECT_EQ(w.resumed, 0);

  r1.reset();
  EXPECT_EQ(s.ready_count(), 0U);  // r2 still holds a share: the write is not available
  r2.reset();                      // the write is available: the writer's retry is posted
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_FALSE(l.is_locked()) << "a plain writer's retry leaves the lock free";
  EXPECT_EQ(w.resumed, 0);
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_TRUE(w.owned);
  expect_free(l);
}

// Point 4, with the writer queued behind overlapping readers: every reader's release passes it;
// the max_passes-th (counted from construction here) starves the rwlock: no read or write barges
// any more, new ones queue, and the release of the last share hands the writer the lock.
// Barging resumes once it had it.
TEST(RwlockBarging, AfterMaxPassesReaderReleasesTheRwlockStarvesUntilTheWriterHadTheLock) {
  test_scheduler s;
  rwlock<int> l(0, 4);
  readers_of readers{l};
  writers_of writers{l};
  std::vector<int> order;
  std::optional<rwlock_read_guard<int>> anchor = l.try_read();
  ASSERT_TRUE(anchor.has_value());
  rw_probe w;
  w.write = 7;
  log_into(order, w, 1);
  s.spawn(plain_waiter(writers, w));
  s.run();
  ASSERT_EQ(w.started, 1);

  EXPECT_EQ(overlap_reads_while_possible(l, anchor, 10 * max_passes), max_passes);
  EXPECT_EQ(s.ready_count(), 0U);
  EXPECT_EQ(w.resumed, 0);
  // Starving: nobody barges, and new reads and writes queue behind the writer.
  EXPECT_FALSE(l.try_read().has_value());
  EXPECT_FALSE(l.try_write().has_value());
  EXPECT_TRUE(l.read_timeout(0ms).timed_out());
  rw_probe late_reader;
  rw_probe late_writer;
  log_into(order, late_reader, 2);
  log_into(order, late_writer, 3);
  s.spawn(plain_waiter(readers, late_reader));
  s.spawn(plain_waiter(writers, late_writer));
  s.run();
  EXPECT_EQ(late_reader.started, 1);
  EXPECT_EQ(late_reader.resumed, 0) << "a read barged into a starving rwlock";
  EXPECT_EQ(late_writer.resumed, 0);
  EXPECT_EQ(asyncband::detail::debug_access::state(l).waiters.counted, 3U);

  anchor.reset();  // the last share: handed to the writer, never free in between
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_TRUE(l.is_locked());
  EXPECT_FALSE(l.try_read().has_value());
  EXPECT_FALSE(l.try_write().has_value());
  EXPECT_EQ(w.resumed, 0);
  s.step();  // the writer runs and unlocks: the reader behind it is handed a share
  EXPECT_EQ(order, (std::vector<int>{1}));
  EXPECT_TRUE(w.owned);
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_FALSE(l.try_write().has_value());
  {
    const auto extra = l.try_read();  // the writer had its lock: barging again
    EXPECT_TRUE(extra.has_value()) << "the rwlock still starves after the writer had the lock";
  }
  s.run();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(late_reader.seen, 7);
  EXPECT_TRUE(late_reader.owned);
  EXPECT_TRUE(late_writer.owned);
  expect_free(l);
}

/// Queues a plain writer behind the read `anchor` holds; overlapping reads must pass it exactly
/// max_passes times before the rwlock starves and the anchor's release hands it the lock.
void expect_the_next_writer_passed_max_passes_times(test_scheduler& s, rwlock<int>& l, writers_of& writers,
                                                    std::optional<rwlock_read_guard<int>>& anchor) {
  ASSERT_TRUE(anchor.has_value());
  rw_probe w;
  s.spawn(plain_waiter(writers, w));
  s.run();
  EXPECT_EQ(overlap_reads_while_possible(l, anchor, 10 * max_passes), max_passes);
  EXPECT_FALSE(l.try_read().has_value());
  anchor.reset();
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_TRUE(l.is_locked());  // handed to it, not left free for a retry
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_TRUE(w.owned);
  expect_free(l);
}

// Point 4, again: the count restarts when the oldest waiter gets its lock, so a second writer
// behind overlapping readers is passed exactly max_passes times again, then served.
TEST(RwlockBarging, TheBoundHoldsAgainAfterTheStarvingWriterWasServed) {
  test_scheduler s;
  rwlock<int> l(0, 4);
  writers_of writers{l};
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    std::optional<rwlock_read_guard<int>> anchor = l.try_read();
    expect_the_next_writer_passed_max_passes_times(s, l, writers, anchor);
  }
}

// The count also restarts once nobody waits: passes a writer took before it got its lock by a
// retry (which takes it lock-free, below the bound) do not shorten the next writer's bound.
TEST(RwlockBarging, PassesBeforeAWriterGotItsLockDoNotCountForTheNextWriter) {
  test_scheduler s;
  rwlock<int> l(0, 4);
  writers_of writers{l};
  std::optional<rwlock_read_guard<int>> anchor = l.try_read();
  ASSERT_TRUE(anchor.has_value());
  rw_probe first;
  s.spawn(plain_waiter(writers, first));
  s.run();
  EXPECT_EQ(overlap_reads_while_possible(l, anchor, max_passes - 2), max_passes - 2);
  anchor.reset();  // one more pass, below the bound: the writer's retry is posted, the lock free
  EXPECT_FALSE(l.is_locked());
  s.run();
  EXPECT_EQ(first.resumed, 1);
  expect_free(l);
  anchor = l.try_read();
  expect_the_next_writer_passed_max_passes_times(s, l, writers, anchor);
}

// ... and when a cancellation empties the queue: the passes a stopped writer took do not
// shorten the bound of the next writer to queue.
TEST(RwlockBarging, PassesOfACancelledLastWaiterDoNotCountForTheNextWriter) {
  test_scheduler s;
  rwlock<int> l(0, 4);
  writers_of writers{l};
  std::optional<rwlock_read_guard<int>> anchor = l.try_read();
  ASSERT_TRUE(anchor.has_value());
  asyncband::stop_source stop;
  rw_probe stopped;
  s.spawn(stoppable_waiter(writers, stop.get_token(), stopped));
  s.run();
  EXPECT_EQ(overlap_reads_while_possible(l, anchor, max_passes - 1), max_passes - 1);
  stop.request_stop();  // the queue empties: nobody waits
  s.run();
  EXPECT_EQ(stopped.status, wait_status::cancelled);
  expect_the_next_writer_passed_max_passes_times(s, l, writers, anchor);  // the same read held
}

// Point 4, with the writer's retry in flight all along (a writer's unlock posted it, and writers
// barge before it runs): every unlock passes it until the max_passes-th starves the rwlock; then
// no lock barges, and the retry takes the lock.
TEST(RwlockBarging, AfterMaxPassesNoLockBargesPastAWritersRetryInFlight) {
  test_scheduler s;
  rwlock<int> l(0, 4);
  writers_of writers{l};
  auto held = l.try_write();
  rw_probe w;
  s.spawn(plain_waiter(writers, w));
  s.run();
  held.reset();  // the first pass: the lock is free, the writer's retry posted
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_EQ(barge_writes_while_free(l, 10 * max_passes), max_passes - 1);
  EXPECT_FALSE(l.try_write().has_value());
  EXPECT_FALSE(l.try_read().has_value());
  EXPECT_TRUE(l.write_timeout(0ms).timed_out());
  EXPECT_EQ(w.resumed, 0);
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();  // the retry takes the lock for itself
  EXPECT_EQ(w.resumed, 1);
  EXPECT_TRUE(w.owned);
  expect_free(l);
}

// Point 2: a writer's unlock frees the lock and posts the queued writer's retry; a newcomer (a
// writer or a reader) takes the lock first; the retry finds it taken and goes back to the front
// of the queue, ahead of a later writer; the newcomer's release posts the same retry again.
TEST(RwlockBarging, AWritersUnlockPostsTheQueuedWritersRetryWhichANewcomerMayBeat) {
  for (const bool newcomer_reads : {false, true}) {
    SCOPED_TRACE(newcomer_reads ? "the newcomer reads" : "the newcomer writes");
    test_scheduler s;
    rwlock<int> l(0, 4);
    writers_of writers{l};
    std::vector<int> order;
    rw_probe first;
    rw_probe second;
    log_into(order, first, 1);
    log_into(order, second, 2);
    auto held = l.try_write();
    s.spawn(plain_waiter(writers, first));
    s.spawn(plain_waiter(writers, second));
    s.run();

    held.reset();
    EXPECT_EQ(s.ready_count(), 1U);  // first's retry only
    EXPECT_FALSE(l.is_locked()) << "the lock is left free for the retry and any newcomer";
    std::optional<rwlock_read_guard<int>> reading;
    std::optional<rwlock_write_guard<int>> writing;
    if (newcomer_reads) {
      reading = l.try_read();
      ASSERT_TRUE(reading.has_value());
      EXPECT_FALSE(l.try_write().has_value());
    } else {
      writing = l.try_write();
      ASSERT_TRUE(writing.has_value());
      EXPECT_FALSE(l.try_read().has_value());
    }
    s.step();  // first's retry finds the lock taken: back to the front of the queue
    EXPECT_EQ(first.resumed, 0);
    EXPECT_EQ(s.ready_count(), 0U);
    EXPECT_EQ(asyncband::detail::debug_access::state(l).waiters.counted, 2U);
    reading.reset();
    writing.reset();  // posts first's retry again, not second's
    EXPECT_EQ(s.ready_count(), 1U);
    s.step();
    EXPECT_EQ(order, (std::vector<int>{1}));
    s.run();
    EXPECT_EQ(order, (std::vector<int>{1, 2}));
    EXPECT_TRUE(first.owned);
    EXPECT_TRUE(second.owned);
    expect_free(l);
  }
}

// Point 2: readers never retry. A writer's unlock hands one share to each of the consecutive
// readers at the front at once, and stops at the writer behind them (the reader behind that
// writer stays queued); the last of those readers' releases posts the writer's retry.
TEST(RwlockBarging, AWritersUnlockHandsSharesToTheQueuedReadersAtOnceAndStopsAtAQueuedWriter) {
  test_scheduler s;
  rwlock<int> l(0, 4);
  readers_of readers{l};
  writers_of writers{l};
  std::vector<int> order;
  std::array<rw_probe, 3> front;
  rw_probe w;
  rw_probe behind;
  for (std::size_t i = 0; i < front.size(); ++i) log_into(order, front[i], static_cast<int>(i) + 1);
  log_into(order, w, 4);
  log_into(order, behind, 5);
  w.write = 9;
  auto held = l.try_write();
  **held = 5;
  spawn_plain(s, readers, front);
  s.spawn(plain_waiter(writers, w));
  s.spawn(plain_waiter(readers, behind));
  s.run();
  EXPECT_EQ(asyncband::detail::debug_access::state(l).waiters.counted, 5U);

  held.reset();
  EXPECT_EQ(s.ready_count(), front.size()) << "each front reader is handed a share, and only they";
  EXPECT_TRUE(l.is_locked());
  EXPECT_FALSE(l.try_write().has_value());
  EXPECT_EQ(asyncband::detail::debug_access::state(l).waiters.counted, 2U);  // the writer, the reader
  s.step();
  s.step();
  EXPECT_EQ(s.ready_count(), 1U);  // two shares back: the writer's request is not available yet
  s.step();                        // the third: the writer's retry is posted
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_EQ(w.resumed, 0);
  EXPECT_EQ(behind.resumed, 0);
  s.run();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 5}));
  expect_all_resumed_once_ok(front);
  for (const auto& p : front) EXPECT_EQ(p.seen, 5);
  EXPECT_TRUE(w.owned);
  EXPECT_EQ(behind.seen, 9);
  EXPECT_TRUE(behind.owned);
  expect_free(l);
}

// Point 2: a writer with a stop token cannot retry: the release that makes the write available
// hands it the lock directly (never free in between); its own unlock posts the plain writer's
// retry behind it and leaves the lock free.
TEST(RwlockBarging, AStoppableWriterIsHandedTheLockDirectlyAndThePlainWriterBehindItRetries) {
  test_scheduler s;
  rwlock<int> l(0, 4);
  writers_of writers{l};
  std::vector<int> order;
  rw_probe stoppable;
  rw_probe plain;
  log_into(order, stoppable, 1);
  log_into(order, plain, 2);
  asyncband::stop_source never;
  auto r1 = l.try_read();
  s.spawn(stoppable_waiter(writers, never.get_token(), stoppable));
  s.spawn(plain_waiter(writers, plain));
  s.run();
  auto r2 = l.try_read();  // barges past both writers
  ASSERT_TRUE(r2.has_value());
  r1.reset();
  EXPECT_EQ(s.ready_count(), 0U);
  r2.reset();  // the write is available: handed to the stoppable writer
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_TRUE(l.is_locked());
  EXPECT_FALSE(l.try_read().has_value());
  EXPECT_FALSE(l.try_write().has_value());
  s.step();  // it runs and unlocks: the plain writer's retry is posted, the lock free
  EXPECT_EQ(order, (std::vector<int>{1}));
  EXPECT_EQ(stoppable.status, wait_status::ok);
  EXPECT_TRUE(stoppable.owned);
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_FALSE(l.is_locked());
  s.run();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_TRUE(plain.owned);
  expect_free(l);
}

// Point 2: a coroutine without a scheduler has nothing to run a retry on: it is handed the lock
// by the releasing call and resumed inline there, holding it.
TEST(RwlockBarging, AWriteFromACoroutineWithoutASchedulerIsHandedTheLockAndResumedInline) {
  rwlock<int> l(0, 2);
  writers_of writers{l};
  auto held = l.try_write();
  write_held_probe p;
  auto waiting = plain_waiter(writers, p);
  waiting.handle().resume();  // queues, without a scheduler
  EXPECT_EQ(p.started, 1);
  EXPECT_EQ(p.resumed, 0);
  held.reset();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_TRUE(p.owned);
  EXPECT_TRUE(p.locked);
  EXPECT_FALSE(p.reader_beside);
  EXPECT_TRUE(waiting.done());
  expect_free(l);
}

// Point 2: a timed write on a plain thread is handed the lock directly by the release that makes
// it available (the thread is stopped right after it queued, before it parks).
TEST(RwlockBarging, ATimedWriteOnAThreadIsHandedTheLockDirectly) {
  rwlock<int> l(0, 2);
  auto r1 = l.try_read();
  std::latch queued(1);
  std::latch go(1);
  std::optional<wait_status> status;
  std::thread writer([&l, &queued, &go, &status] {
    const thread_hook hook(test_point::before_arm, [&queued, &go] {
      queued.count_down();
      go.wait();
    });
    auto w = l.write_timeout(1h);
    status = w.status();
    if (w.ok()) **w = 3;
  });
  queued.wait();
  r1.reset();  // the write is available: handed to the thread
  EXPECT_TRUE(l.is_locked()) << "the lock was left free instead of handed to the timed writer";
  EXPECT_FALSE(l.try_read().has_value());
  EXPECT_FALSE(l.try_write().has_value());
  go.count_down();
  writer.join();
  EXPECT_EQ(status, wait_status::ok);
  auto check = l.try_read();
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ(**check, 3);
  check.reset();
  expect_free(l);
}

// Only a request for every share retries (semaphore::retrying_request_): a reader thread's
// untimed read_blocking() is handed its share by the release that covers it, as a coroutine
// reader is, never left to retry.
TEST(RwlockBarging, AnUntimedReadOnAThreadIsHandedItsShareDirectly) {
  rwlock<int> l(0, 2);
  auto w = l.try_write();
  ASSERT_TRUE(w.has_value());
  std::latch queued(1);
  std::latch go(1);
  int seen = -1;
  std::thread reader([&l, &queued, &go, &seen] {
    const thread_hook hook(test_point::before_arm, [&queued, &go] {
      queued.count_down();
      go.wait();
    });
    auto r = l.read_blocking();
    seen = *r;
  });
  queued.wait();
  **w = 4;
  w.reset();  // the read is available: handed to the thread, which has not run since
  EXPECT_TRUE(l.is_locked()) << "the share was left free for a retry instead of handed over";
  EXPECT_FALSE(l.try_write().has_value());
  go.count_down();
  reader.join();
  EXPECT_EQ(seen, 4);
  expect_free(l);
}

// An untimed write_blocking() without a stop token retries as the coroutine writer does: the
// release that covers it leaves the lock free, and a barger may take it first; the thread then
// queues again and gets the lock after the barger.
TEST(RwlockBarging, AnUntimedWriteOnAThreadRetriesAndABargerMayBeatIt) {
  rwlock<int> l(0, 2);
  auto r1 = l.try_read();
  ASSERT_TRUE(r1.has_value());
  std::latch queued(1);
  std::latch go(1);
  std::thread writer([&l, &queued, &go] {
    bool first = true;  // the hook runs at every arm: its retry arms again after it lost
    const thread_hook hook(test_point::before_arm, [&queued, &go, &first] {
      if (!std::exchange(first, false)) return;
      queued.count_down();
      go.wait();
    });
    auto w = l.write_blocking();
    *w += 1;
  });
  queued.wait();
  r1.reset();  // the write is available: the thread is sent to retry, the lock left free
  EXPECT_FALSE(l.is_locked()) << "the lock was handed to the thread instead of left to its retry";
  auto barger = l.try_write();
  ASSERT_TRUE(barger.has_value());
  **barger = 10;
  go.count_down();
  barger.reset();  // serves the thread again (or finds its retry in flight)
  writer.join();
  auto check = l.try_read();
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ(**check, 11);
  check.reset();
  expect_free(l);
}

// Point 5: a writer at the head that cannot have its write yet (a reader holds a share) and a
// reader behind it that the free share covers but that the release did not hand past the
// writer. When the writer's wait ends (stopped, or its coroutine destroyed), the reader gets
// the free share at once.
TEST(RwlockBarging, CancellingOrDestroyingTheHeadWriterLetsTheReaderBehindItIn) {
  for (const bool destroy : {false, true}) {
    SCOPED_TRACE(destroy ? "destroyed" : "stopped");
    test_scheduler s;
    rwlock<int> l(0, 2);
    readers_of readers{l};
    writers_of writers{l};
    auto r1 = l.try_read();
    auto r2 = l.try_read();
    rw_probe w;
    rw_probe reader;
    asyncband::stop_source stop;
    task<void> doomed;
    if (destroy) {
      doomed = plain_waiter(writers, w);
      start_on(s, doomed);
    } else {
      s.spawn(stoppable_waiter(writers, stop.get_token(), w));
    }
    s.spawn(plain_waiter(readers, reader));
    s.run();
    EXPECT_EQ(reader.started, 1);
    EXPECT_EQ(reader.resumed, 0);
    r1.reset();  // a share free; the writer's request is not available: nobody is served
    EXPECT_EQ(s.ready_count(), 0U);
    EXPECT_EQ(asyncband::detail::debug_access::state(l).waiters.counted, 2U);

    if (destroy) {
      doomed = {};
    } else {
      stop.request_stop();
    }
    EXPECT_EQ(s.ready_count(), destroy ? 1U : 2U) << "the reader was not let in";
    EXPECT_FALSE(l.try_read().has_value()) << "the free share was left unused";
    EXPECT_EQ(asyncband::detail::debug_access::state(l).waiters.counted, 0U);
    s.run();
    EXPECT_EQ(reader.resumed, 1);
    EXPECT_TRUE(reader.owned);
    EXPECT_EQ(w.resumed, destroy ? 0 : 1);
    if (!destroy) {
      EXPECT_EQ(w.status, wait_status::cancelled);
    }
    EXPECT_FALSE(w.owned);
    r2.reset();
    expect_free(l);
  }
}

/// A when_any of a write and a semaphore's permit, queued at the head of a two-reader rwlock
/// with a plain reader behind it; `queue_both()` queues them, under whatever the test holds.
struct lost_write_branch_scene {
  test_scheduler s;
  rwlock<int> l{0, 2};
  readers_of readers{l};
  asyncband::semaphore sem{0};
  write_or_permit_probe either;
  rw_probe reader;

  void queue_both() {
    s.spawn(write_or_permit(l, sem, either));
    s.spawn(plain_waiter(readers, reader));
    s.run();
  }
  /// After the permit won: both ran once, the permit's branch won, the reader holds a share.
  void expect_permit_won_and_reader_in() {
    s.run();
    EXPECT_EQ(either.resumed, 1);
    EXPECT_EQ(either.index, 1U);
    EXPECT_EQ(reader.resumed, 1);
    EXPECT_TRUE(reader.owned);
  }
};

// Point 5, for a when_any: its write branch is at the head, waiting for the share a reader
// holds, with a reader behind it and a share free; a semaphore's permit wins the when_any. The
// lost write branch is withdrawn, and the reader behind it gets the free share at once.
TEST(RwlockBarging, AWhenAnyWriteThatLostLetsTheReaderBehindItIn) {
  lost_write_branch_scene scene;
  auto r1 = scene.l.try_read();
  auto r2 = scene.l.try_read();
  scene.queue_both();
  EXPECT_EQ(scene.either.resumed, 0);
  EXPECT_EQ(scene.reader.resumed, 0);
  r1.reset();
  EXPECT_EQ(scene.s.ready_count(), 0U);

  scene.sem.release(1);  // the permit wins; the write branch loses
  EXPECT_EQ(scene.s.ready_count(), 2U) << "the reader was not let in when the write branch lost";
  EXPECT_FALSE(scene.l.try_read().has_value()) << "the free share was left unused";
  scene.expect_permit_won_and_reader_in();
  r2.reset();
  expect_free(scene.l);
}

// Point 2 with a lost when_any branch at the head: a semaphore's release has committed the
// when_any to its permit but not resolved it yet when the writer's unlock comes; the unlock
// skips the lost write branch and hands a share to the reader behind it.
TEST(RwlockBarging, AReleaseSkipsALostWhenAnyWriteAtTheHead) {
  lost_write_branch_scene scene;
  auto held = scene.l.try_write();
  scene.queue_both();
  std::size_t ready_after_unlock = 0;
  bool writer_beside = true;
  scene.s.at(test_point::claimed_for_wake, [&] {  // the permit's branch is committed, not resolved
    held.reset();
    ready_after_unlock = scene.s.ready_count();
    writer_beside = scene.l.try_write().has_value();
  });
  scene.sem.release(1);
  EXPECT_EQ(scene.s.pending_actions(), 0U);
  EXPECT_EQ(ready_after_unlock, 1U) << "the unlock did not hand the reader a share past the lost branch";
  EXPECT_FALSE(writer_beside);
  EXPECT_EQ(scene.s.ready_count(), 2U);
  scene.expect_permit_won_and_reader_in();
  expect_free(scene.l);
}

// Point 2 with downgrade(): the released shares go to the readers queued at the front (not to
// the writer behind them, and no writer gets in between); a newcomer reader may take the share
// left free; the last share's release posts the writer's retry.
TEST(RwlockBarging, ADowngradeLetsTheQueuedReadersInAndNoWriterInBetween) {
  test_scheduler s;
  rwlock<int> l(0, 4);
  readers_of readers{l};
  writers_of writers{l};
  std::vector<int> order;
  std::array<rw_probe, 2> front;
  rw_probe w;
  rw_probe behind;
  log_into(order, front[0], 1);
  log_into(order, front[1], 2);
  log_into(order, w, 3);
  log_into(order, behind, 4);
  w.write = 9;
  auto held = *l.try_write();
  spawn_plain(s, readers, front);
  s.spawn(plain_waiter(writers, w));
  s.spawn(plain_waiter(readers, behind));
  s.run();

  *held = 5;
  rwlock_read_guard<int> kept = std::move(held).downgrade();
  EXPECT_EQ(s.ready_count(), 2U);  // the two front readers; the writer and the reader behind wait
  EXPECT_FALSE(l.try_write().has_value());
  EXPECT_EQ(*kept, 5);
  {
    const auto extra = l.try_read();  // the fourth share, free: a newcomer takes it
    EXPECT_TRUE(extra.has_value());
    EXPECT_FALSE(l.try_read().has_value());
  }
  EXPECT_EQ(s.ready_count(), 2U);
  s.run();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  expect_all_resumed_once_ok(front);
  for (const auto& p : front) EXPECT_EQ(p.seen, 5);
  EXPECT_EQ(w.resumed, 0);  // the kept share
  EXPECT_EQ(behind.resumed, 0);

  kept.unlock();  // the write is available: the writer's retry
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_FALSE(l.is_locked());
  s.run();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_TRUE(w.owned);
  EXPECT_EQ(behind.seen, 9);
  expect_free(l);
}

// A writer whose retry lost and went back to the front of the queue may be destroyed there (its
// lock is queued, not posted): it is withdrawn, and the next release serves the writer behind.
TEST(RwlockBarging, DestroyingAWriterWhoseRetryWentBackToTheQueueUnlinksIt) {
  test_scheduler s;
  rwlock<int> l(0, 4);
  writers_of writers{l};
  rw_probe doomed;
  rw_probe next;
  auto held = l.try_write();
  auto doomed_task = plain_waiter(writers, doomed);
  start_on(s, doomed_task);
  s.spawn(plain_waiter(writers, next));
  s.run();
  held.reset();  // doomed's retry posted
  auto barger = l.try_write();
  ASSERT_TRUE(barger.has_value());
  s.step();  // the retry loses: doomed is queued again, at the front
  EXPECT_EQ(s.ready_count(), 0U);
  EXPECT_EQ(doomed.resumed, 0);
  doomed_task = {};
  EXPECT_EQ(asyncband::detail::debug_access::state(l).waiters.counted, 1U);
  barger.reset();  // next's retry
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(doomed.resumed, 0);
  EXPECT_EQ(next.resumed, 1);
  EXPECT_TRUE(next.owned);
  expect_free(l);
}

// Point 6: strict FIFO. Once a writer waits, no read takes a free share; every release hands
// the lock to the head directly (a plain writer too: no retry, never free in between), in
// arrival order.
TEST(RwlockStrictFifo, TryReadFailsBehindAQueuedWriterAndEveryWaiterIsHandedTheLockInOrder) {
  test_scheduler s;
  rwlock<int> l(asyncband::strict_fifo, 0, 4);
  readers_of readers{l};
  writers_of writers{l};
  std::vector<int> order;
  rw_probe first_writer;
  rw_probe reader;
  rw_probe second_writer;
  log_into(order, first_writer, 1);
  log_into(order, reader, 2);
  log_into(order, second_writer, 3);
  auto r1 = l.try_read();
  s.spawn(plain_waiter(writers, first_writer));
  s.run();
  EXPECT_FALSE(l.try_read().has_value()) << "a read barged past the queued writer under strict FIFO";
  EXPECT_TRUE(l.read_timeout(0ms).timed_out());
  s.spawn(plain_waiter(readers, reader));
  s.spawn(plain_waiter(writers, second_writer));
  s.run();
  EXPECT_EQ(reader.started, 1);
  EXPECT_EQ(reader.resumed, 0);

  r1.reset();  // handed to the first writer
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_TRUE(l.is_locked());
  EXPECT_FALSE(l.try_write().has_value());
  EXPECT_FALSE(l.try_read().has_value());
  s.step();  // the first writer unlocks: a share handed to the reader
  EXPECT_EQ(order, (std::vector<int>{1}));
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_FALSE(l.try_read().has_value());  // the second writer waits
  s.step();                                // the reader unlocks: handed to the second writer
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_TRUE(l.is_locked());
  EXPECT_FALSE(l.try_write().has_value());
  s.run();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(first_writer.owned);
  EXPECT_TRUE(reader.owned);
  EXPECT_TRUE(second_writer.owned);
  expect_free(l);
}

}  // namespace
